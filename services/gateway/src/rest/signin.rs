//! Signing the web page in and out with a session cookie ([`crate::cookie`]):
//! `POST /api/v1/auth/session` exchanges a bearer credential for the cookie (for the sign-in
//! form, sign-in links and share links alike); `GET` says who the cookie (or any credential)
//! is; `DELETE` signs out.
//!
//! A link never replaces another sign-in without asking, whether it carries an access token
//! (`/?token=`, `/instances/{iid}?token=`, as `ptyhub up` prints) or a share link's
//! (`?share=`): the gateway exchanges neither on the link's own request, which may come without
//! the browser's cookie (a `SameSite=Strict` cookie stays home when a link on another site is
//! followed), so it could not see what it would replace. The redirect moves the token into the
//! fragment instead ([`move_token_into_fragment`]), which the page reads and posts to
//! `POST /api/v1/auth/session`, a request of the page's own that carries the cookie. That
//! refuses (409) to replace a valid cookie of another principal unless the body says
//! `replace: true`, and the page asks the user first.

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use ptyhub_wire::ErrorCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::extract::{Caller, JsonBody};
use super::shares::SHARE_PARAMETER;
use crate::auth::{Principal, SHARE_TOKEN_PREFIX};
use crate::cookie::CookieSite;
use crate::error::{ApiError, ErrorBody};
use crate::front_door::Authentication;
use crate::state::AppState;

/// The query parameter of a sign-in link.
pub const TOKEN_PARAMETER: &str = "token";

/// The start of the fragment a share link is redirected to, followed by its token: the page
/// signs in with it itself, asking first when the browser is signed in as someone else.
pub const SHARE_FRAGMENT: &str = "#share=";

/// The same for a sign-in link's access token (`?token=`): the page signs in with it, asking
/// first when the browser is signed in as someone else.
pub const TOKEN_FRAGMENT: &str = "#token=";

/// Who a credential is, as the page needs to know it.
#[derive(Debug, Serialize, ToSchema)]
pub struct SignedIn {
    pub subject: String,
    /// Whether it may register and delete instances.
    pub admin: bool,
    /// When the sign-in ends (the cookie's or the credential's expiry), if it does.
    pub expires_at: Option<DateTime<Utc>>,
    /// A share link's: it may watch, never type, resize, reset, rename, close or create.
    pub viewer_only: bool,
    /// The one session it covers, when it covers one only.
    pub session_id: Option<String>,
}

impl From<&Principal> for SignedIn {
    fn from(principal: &Principal) -> Self {
        Self {
            subject: principal.subject.clone(),
            admin: principal.access.is_admin(),
            expires_at: principal
                .expires_at
                .and_then(|exp| DateTime::from_timestamp(i64::try_from(exp).ok()?, 0)),
            viewer_only: principal.access.is_viewer_only(),
            session_id: principal.access.only_session().map(str::to_owned),
        }
    }
}

/// The body of a sign-in, optional.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct SignInRequest {
    /// Replace the sign-in of another principal that the browser holds; without it such a
    /// sign-in is refused with 409, so that nothing replaces it without the user's word.
    #[serde(default)]
    pub replace: bool,
}

/// A sign-in that would replace the browser's sign-in as another principal.
#[derive(Debug, Serialize, ToSchema)]
pub struct SignInConflict {
    pub detail: String,
    /// Who the browser is signed in as.
    pub signed_in: SignedIn,
    /// Who it would be signed in as with `replace: true`.
    pub offered: SignedIn,
}

/// Exchanges the bearer credential for a session cookie. A valid cookie of another principal
/// is replaced only with `replace: true` (409 otherwise).
#[utoipa::path(
    post, path = "/api/v1/auth/session", tag = "sign-in",
    request_body(content = Option<SignInRequest>, content_type = "application/json"),
    responses(
        (status = 200, body = SignedIn, description = "signed in; Set-Cookie carries the session"),
        (status = 401, body = ErrorBody),
        (status = 409, body = SignInConflict, description = "the browser is signed in as another principal, which only `replace: true` replaces"),
        (status = 429, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn sign_in(
    State(state): State<AppState>,
    authentication: Authentication,
    uri: Uri,
    headers: HeaderMap,
    JsonBody(request): JsonBody<SignInRequest>,
) -> Response {
    // The cookie the browser holds is what this replaces, never what signs in.
    if !authentication.presents_bearer() {
        return ApiError::unauthenticated("missing credential").into_response();
    }
    let Some(site) = state.cookie_site(&headers, &uri) else {
        return ApiError::bad_request("a sign-in needs the Host it is for").into_response();
    };
    let principal = match authentication.principal().await {
        Ok(principal) => principal,
        Err(error) => return error.into_response(),
    };
    if !request.replace
        && let Some(current) = authentication.principal_by_cookie().await
        && current.subject != principal.subject
    {
        let conflict = SignInConflict {
            detail: format!(
                "this browser is signed in as {}: sign in with replace: true to be {} instead",
                current.subject, principal.subject
            ),
            signed_in: SignedIn::from(&current),
            offered: SignedIn::from(&principal),
        };
        return (ErrorCode::WrongState.http_status(), Json(conflict)).into_response();
    }
    let cookie = session_cookie(&state, &principal, &site, &headers);
    let mut response = Json(SignedIn::from(&principal)).into_response();
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    response
}

/// Who the caller is (its session cookie or any other credential).
#[utoipa::path(
    get, path = "/api/v1/auth/session", tag = "sign-in",
    responses((status = 200, body = SignedIn), (status = 401, body = ErrorBody)),
    security(("bearer" = [])),
)]
pub async fn current_session(Caller(principal): Caller) -> Json<SignedIn> {
    Json(SignedIn::from(&principal))
}

/// Signs out: the cookie is cleared, and ended on this gateway even where a copy of it is kept.
#[utoipa::path(
    delete, path = "/api/v1/auth/session", tag = "sign-in",
    responses((status = 200, description = "signed out; Set-Cookie clears the session")),
)]
pub async fn sign_out(State(state): State<AppState>, uri: Uri, headers: HeaderMap) -> Response {
    let cookies = state.authenticator.cookies();
    let now = state.clock.now();
    if let Some(found) = state.session_cookie(&headers, &uri)
        && let Ok(claims) = cookies.open(&found.value, &found.site, now)
    {
        cookies.sign_out(&claims, now);
    }
    let mut response = Json(serde_json::json!({"status": "signed_out"})).into_response();
    if let Some(site) = state.cookie_site(&headers, &uri) {
        response.headers_mut().insert(
            header::SET_COOKIE,
            cookies.clear_cookie(&site, state.is_https(&headers)),
        );
    }
    response
}

/// The page's routes: a request with a sign-in link's `?token=` or a share link's `?share=` is
/// answered with a redirect to the same address without it and with the token in the fragment
/// ([`TOKEN_FRAGMENT`], or [`SHARE_FRAGMENT`] for a share link's token however it came), for
/// the page to sign in with, asking first before it replaces another sign-in; any other goes on
/// to the page. Nothing is checked here: the page's own request does that, with the cookie the
/// sign-in would replace.
pub async fn move_token_into_fragment(request: Request, next: Next) -> Response {
    let Some(query) = request.uri().query() else {
        return next.run(request).await;
    };
    let mut token = None;
    let mut kept = Vec::new();
    for (name, value) in form_pairs(query) {
        if name == TOKEN_PARAMETER || name == SHARE_PARAMETER {
            token = Some(value);
        } else {
            kept.push((name, value));
        }
    }
    let Some(token) = token else {
        return next.run(request).await;
    };
    let token = token.trim();
    let mut location = request.uri().path().to_owned();
    if !kept.is_empty() {
        location.push('?');
        location.push_str(&encode_pairs(&kept));
    }
    let fragment = if token.starts_with(SHARE_TOKEN_PREFIX) {
        SHARE_FRAGMENT
    } else {
        TOKEN_FRAGMENT
    };
    redirect(&format!("{location}{fragment}{}", percent_encode(token)))
}

/// `303 See Other` to `location`, never cached.
fn redirect(location: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    let response_headers = response.headers_mut();
    if let Ok(location) = HeaderValue::from_str(location) {
        response_headers.insert(header::LOCATION, location);
    }
    response_headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `Set-Cookie` on `site` for a principal that just authenticated.
fn session_cookie(
    state: &AppState,
    principal: &Principal,
    site: &CookieSite,
    headers: &HeaderMap,
) -> HeaderValue {
    let (value, max_age) = state.authenticator.cookie_for(principal, site);
    state
        .authenticator
        .cookies()
        .set_cookie(site, &value, max_age, state.is_https(headers))
}

/// The pairs of a query string, decoded (`+` is a space).
fn form_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(name), percent_decode(value))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'+' => out.push(b' '),
            b'%' if index + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[index + 1..index + 3])
                    .ok()
                    .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                {
                    Some(byte) => {
                        out.push(byte);
                        index += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        index += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn encode_pairs(pairs: &[(String, String)]) -> String {
    pairs
        .iter()
        .map(|(name, value)| format!("{}={}", percent_encode(name), percent_encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (byte as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_pairs_decode_and_encode_back() {
        let pairs = form_pairs("mode=view&token=a%2Bb+c&x&&y=%zz");
        assert_eq!(
            pairs,
            [
                ("mode".to_owned(), "view".to_owned()),
                ("token".to_owned(), "a+b c".to_owned()),
                ("x".to_owned(), String::new()),
                ("y".to_owned(), "%zz".to_owned()),
            ]
        );
        assert_eq!(encode_pairs(&[("a b".into(), "1/2".into())]), "a%20b=1%2F2");
        // A cut escape at the end is kept as it is, never a panic.
        assert_eq!(percent_decode("abc%4"), "abc%4");
        assert_eq!(percent_decode("%"), "%");
    }
}
