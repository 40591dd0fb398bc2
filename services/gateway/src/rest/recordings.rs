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
use http_range_header::StartPosition;
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
    let location = RecordingStore::recording_path(&session.id.to_string());
    let meta = match store.head(&location).await {
        Ok(meta) => meta,
        Err(object_store::Error::NotFound { .. }) => {
            return Err(ApiError::not_found(match session.status {
                SessionStatus::Closed => "the session has no recording",
                // An exited session keeps its slot for a reset, and its recording with it.
                SessionStatus::Exited => {
                    "the session's program has exited, but its recording is published when the session closes: close the session (DELETE it) and ask again"
                }
                _ => {
                    "the session has no recording yet: a recording is published when its session closes (DELETE it)"
                }
            }));
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
    let mut parsed = http_range_header::parse_range_header(text).map_err(|_| ())?;
    // RFC 9110 14.1.2: a file of no bytes satisfies no range, and a suffix longer than the file
    // is the whole file (the parser takes the one for a range and refuses the other).
    if size == 0 {
        return Err(());
    }
    for range in &mut parsed.ranges {
        if let StartPosition::FromLast(length) = &mut range.start {
            *length = (*length).min(size);
        }
    }
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
            code: None,
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
    use proptest::prelude::*;
    use ptyhub_test_support::fuzz;

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

    #[test]
    fn a_suffix_longer_than_the_file_is_the_whole_file_and_an_empty_file_has_no_range() {
        assert_eq!(
            requested_range(&with_range("bytes=-500"), 100),
            Ok(Some(0..100))
        );
        assert_eq!(requested_range(&with_range("bytes=0-"), 0), Err(()));
        assert_eq!(requested_range(&with_range("bytes=0-0"), 0), Err(()));
        assert_eq!(requested_range(&with_range("bytes=-1"), 0), Err(()));
    }

    /// A recording's size: empty, small, or near the largest the numbers allow.
    fn recording_size() -> impl Strategy<Value = u64> {
        prop_oneof![Just(0u64), 1..2_000u64, (u64::MAX - 10)..=u64::MAX]
    }

    /// A byte position near the recording's size, or anywhere.
    fn position(size: u64) -> impl Strategy<Value = u64> {
        prop_oneof![
            3 => 0..=size.saturating_add(3),
            1 => size.saturating_sub(3)..=size,
            1 => any::<u64>(),
        ]
    }

    /// One `range-spec` of RFC 9110 (14.1.1): `first-last`, `first-` or `-suffix`.
    #[derive(Debug, Clone, Copy)]
    enum Spec {
        Closed(u64, u64),
        From(u64),
        Suffix(u64),
    }

    impl Spec {
        fn text(self) -> String {
            match self {
                Spec::Closed(first, last) => format!("{first}-{last}"),
                Spec::From(first) => format!("{first}-"),
                Spec::Suffix(length) => format!("-{length}"),
            }
        }

        /// What RFC 9110 serves of a file of `size` bytes (14.1.2): `Some(range)` when the
        /// spec is satisfiable, `None` when it is not (416); an invalid spec (`last` before
        /// `first`) may be refused or ignored, so it has no answer here.
        fn served(self, size: u64) -> Option<Option<std::ops::Range<u64>>> {
            match self {
                Spec::Closed(first, last) if last < first => None,
                Spec::Closed(first, last) => {
                    Some((first < size).then(|| first..last.min(size - 1) + 1))
                }
                Spec::From(first) => Some((first < size).then_some(first..size)),
                Spec::Suffix(length) => {
                    Some((length > 0 && size > 0).then(|| size - length.min(size)..size))
                }
            }
        }
    }

    fn spec(size: u64) -> impl Strategy<Value = Spec> {
        prop_oneof![
            (position(size), position(size)).prop_map(|(first, last)| Spec::Closed(first, last)),
            position(size).prop_map(Spec::From),
            position(size).prop_map(Spec::Suffix),
        ]
    }

    /// One byte range is served as RFC 9110 says: the bytes it names that the file has, a 416
    /// when it names none of them.
    #[test]
    fn fuzz_one_range_is_served_as_rfc_9110_says() {
        let strategy = recording_size().prop_flat_map(|size| (Just(size), spec(size)));
        fuzz::check(1024, strategy, |(size, spec)| {
            let header = format!("bytes={}", spec.text());
            let answer = requested_range(&with_range(&header), size);
            match spec.served(size) {
                Some(Some(range)) => prop_assert_eq!(answer, Ok(Some(range)), "{}", header),
                Some(None) => prop_assert_eq!(answer, Err(()), "{}", header),
                None => prop_assert!(matches!(answer, Err(()) | Ok(None)), "{header}: {answer:?}"),
            }
            Ok(())
        });
    }

    /// Whatever the header says, a range served is a non-empty part of the file; several
    /// ranges are never served as one.
    #[test]
    fn fuzz_any_range_header_serves_only_bytes_the_file_has() {
        let header = prop_oneof![
            "[ -~]{0,40}",
            "bytes=[0-9, -]{0,30}",
            prop::collection::vec(spec(120), 1..4).prop_map(|specs| {
                let specs: Vec<String> = specs.into_iter().map(Spec::text).collect();
                format!("bytes={}", specs.join(", "))
            }),
        ];
        fuzz::check(1024, (recording_size(), header), |(size, header)| {
            let Ok(value) = HeaderValue::from_str(&header) else {
                return Ok(());
            };
            let mut headers = HeaderMap::new();
            headers.insert(header::RANGE, value);
            if let Ok(Some(range)) = requested_range(&headers, size) {
                prop_assert!(
                    range.start < range.end && range.end <= size,
                    "{range:?} of {size} for {header}"
                );
                prop_assert!(
                    !header.contains(','),
                    "several ranges served as one: {header}"
                );
            }
            Ok(())
        });
    }
}
