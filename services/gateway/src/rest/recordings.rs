//! A session's recording: the asciicast v2 file its broker published to the recordings store
//! when the session closed, streamed from the store (any gateway serves any broker's
//! recordings), whole or as one byte range (`Range: bytes=...`, answered 206 with
//! `Content-Range`; a range past the end is 416; a request for several ranges gets the whole
//! file, as RFC 9110 allows).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::TryStreamExt as _;
use object_store::{GetOptions, GetRange, ObjectStoreExt as _};
use ptyhub_wire::RecordingStore;

use super::extract::{Caller, InstanceScope, SessionPath};
use crate::domain::SessionStatus;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// The media type asciinema registers for asciicast files.
const CAST_CONTENT_TYPE: &str = "application/x-asciicast";

/// The session's recording (asciicast v2), once the session has closed.
#[utoipa::path(
    get, path = "/api/v1/instances/{iid}/terminal/sessions/{sid}/recording", tag = "sessions",
    params(SessionPath),
    responses(
        (status = 200, description = "the whole recording", content_type = "application/x-asciicast"),
        (status = 206, description = "the requested byte range", content_type = "application/x-asciicast"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 416, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn get_recording(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
    Path(SessionPath { sid, .. }): Path<SessionPath>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    // A share link shows a terminal as it is from now on. A recording is the session's past,
    // and with `output+input` it holds keystrokes no screen showed (a password typed at a
    // prompt that does not echo).
    principal
        .access
        .require_control("downloading a recording")?;
    let instance = scope.authorize(&state, &principal).await?;
    let session = state.authorize_session(&principal, &instance, &sid).await?;
    let Some(recordings) = &state.recordings else {
        return Err(ApiError::not_found("this server keeps no recordings"));
    };
    let store = recordings.store();
    let location = RecordingStore::recording_path(&session.id);
    let meta = match store.head(&location).await {
        Ok(meta) => meta,
        Err(object_store::Error::NotFound { .. }) => {
            return Err(ApiError::not_found(
                if session.status == SessionStatus::Closed {
                    "the session has no recording"
                } else {
                    "the session has no recording yet: a recording is published when its session closes"
                },
            ));
        }
        Err(error) => {
            tracing::warn!(%error, session_id = %session.id, "recordings store unavailable");
            return Err(ApiError::unavailable("the recordings store is unavailable"));
        }
    };
    let size = meta.size;
    let range = match requested_range(&headers, size) {
        Ok(range) => range,
        Err(()) => return Ok(unsatisfiable(size)),
    };
    let options = GetOptions {
        range: range.clone().map(GetRange::Bounded),
        ..Default::default()
    };
    let result = store.get_opts(&location, options).await.map_err(|error| {
        tracing::warn!(%error, session_id = %session.id, "reading a recording failed");
        ApiError::unavailable("the recordings store is unavailable")
    })?;
    let body = Body::from_stream(result.into_stream().map_err(axum::Error::new));
    let mut response = Response::new(body);
    let response_headers = response.headers_mut();
    response_headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(CAST_CONTENT_TYPE),
    );
    response_headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Ok(disposition) =
        HeaderValue::from_str(&format!("attachment; filename=\"{}.cast\"", session.id))
    {
        response_headers.insert(header::CONTENT_DISPOSITION, disposition);
    }
    if let Some(etag) = meta
        .e_tag
        .as_deref()
        .and_then(|tag| HeaderValue::from_str(tag).ok())
    {
        response_headers.insert(header::ETAG, etag);
    }
    let length = match &range {
        Some(range) => {
            *response.status_mut() = StatusCode::PARTIAL_CONTENT;
            let content_range = format!("bytes {}-{}/{size}", range.start, range.end - 1);
            response.headers_mut().insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&content_range).expect("digits are a valid header"),
            );
            range.end - range.start
        }
        None => size,
    };
    response
        .headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    Ok(response)
}

/// The one byte range asked for (end exclusive); `None` for the whole file; `Err` when the
/// ranges cannot be served from a file of `size` bytes.
fn requested_range(headers: &HeaderMap, size: u64) -> Result<Option<std::ops::Range<u64>>, ()> {
    let Some(value) = headers.get(header::RANGE) else {
        return Ok(None);
    };
    // A header we cannot read is ignored, as RFC 9110 lets a server do with any Range.
    let Ok(text) = value.to_str() else {
        return Ok(None);
    };
    let parsed = http_range_header::parse_range_header(text).map_err(|_| ())?;
    let ranges = parsed.validate(size).map_err(|_| ())?;
    match ranges.as_slice() {
        [only] => Ok(Some(*only.start()..*only.end() + 1)),
        _ => Ok(None),
    }
}

fn unsatisfiable(size: u64) -> Response {
    let mut response = (
        StatusCode::RANGE_NOT_SATISFIABLE,
        axum::Json(ErrorBody {
            detail: format!("the range is not satisfiable: the recording has {size} bytes"),
        }),
    )
        .into_response();
    response.headers_mut().insert(
        header::CONTENT_RANGE,
        HeaderValue::from_str(&format!("bytes */{size}")).expect("digits are a valid header"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_range(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::RANGE, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn one_range_is_served_and_several_get_the_whole_file() {
        assert_eq!(requested_range(&HeaderMap::new(), 100), Ok(None));
        assert_eq!(
            requested_range(&with_range("bytes=0-9"), 100),
            Ok(Some(0..10))
        );
        assert_eq!(
            requested_range(&with_range("bytes=90-"), 100),
            Ok(Some(90..100))
        );
        assert_eq!(
            requested_range(&with_range("bytes=-5"), 100),
            Ok(Some(95..100))
        );
        assert_eq!(requested_range(&with_range("bytes=0-1,5-6"), 100), Ok(None));
    }

    #[test]
    fn a_range_past_the_end_or_malformed_is_unsatisfiable() {
        assert_eq!(requested_range(&with_range("bytes=200-300"), 100), Err(()));
        assert_eq!(requested_range(&with_range("lines=1-2"), 100), Err(()));
    }
}
