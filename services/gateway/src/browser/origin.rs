//! The `Origin` check of browser requests: a terminal WebSocket, a REST write or a gRPC-web call
//! from a page of another site is refused unless its origin is on the allow-list. The gateway's
//! own origin is always allowed, as Jupyter's origin check does: configuring other sites must not
//! lock out the gateway's own page.

use axum::http::{HeaderMap, HeaderValue, header};
use ptyhub_wire::ErrorCode;

use crate::error::ApiError;

/// Refuses a browser origin that is not allowed. Requests without `Origin` come from programs,
/// not browsers, and cannot be forged cross-site, so they pass.
pub fn check_origin(allowed_origins: &[String], headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    if origin_allowed(allowed_origins, origin, headers.get(header::HOST)) {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::OriginRefused,
            "origin not allowed",
        ))
    }
}

/// The origins allowed besides the one a request reached the gateway on: the configured
/// `--allowed-origin`s and the origin of `--public-url` (a proxy in front may rewrite `Host`, so
/// the public URL is how the gateway knows its own origin there).
pub fn allowed_origins(configured: &[String], public_url: Option<&str>) -> Vec<String> {
    let mut origins = configured.to_vec();
    if let Some(own) = public_url.and_then(origin_of_url) {
        origins.push(own);
    }
    origins
}

/// `scheme://authority` of an `http(s)` URL; `None` for anything else.
fn origin_of_url(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let is_web = scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https");
    (is_web && !authority.is_empty()).then(|| format!("{scheme}://{authority}"))
}

/// Whether `origin` is the gateway's own (its authority is the `Host` the request came to) or
/// is on the list.
pub fn origin_allowed(
    allowed_origins: &[String],
    origin: &HeaderValue,
    host: Option<&HeaderValue>,
) -> bool {
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    let origin = origin.trim_end_matches('/');
    is_own_origin(origin, host)
        || allowed_origins.iter().any(|allowed| {
            allowed == "*" || allowed.trim_end_matches('/').eq_ignore_ascii_case(origin)
        })
}

/// Whether `origin` names the authority the request was sent to: the page was served by this
/// gateway under that name.
fn is_own_origin(origin: &str, host: Option<&HeaderValue>) -> bool {
    let Some(host) = host.and_then(|host| host.to_str().ok()) else {
        return false;
    };
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    authority.is_some_and(|authority| authority.eq_ignore_ascii_case(host))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(origin: &str, host: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ORIGIN, origin.parse().unwrap());
        headers.insert(header::HOST, host.parse().unwrap());
        headers
    }

    #[test]
    fn same_origin_is_the_default() {
        assert!(check_origin(&[], &headers("http://127.0.0.1:8080", "127.0.0.1:8080")).is_ok());
        assert!(check_origin(&[], &headers("http://evil.example", "127.0.0.1:8080")).is_err());
        assert!(check_origin(&[], &HeaderMap::new()).is_ok());
    }

    #[test]
    fn allow_list_is_exact() {
        let allowed = vec!["https://app.example.com".to_owned()];
        assert!(check_origin(&allowed, &headers("https://app.example.com", "gw:1")).is_ok());
        assert!(check_origin(&allowed, &headers("https://app.example.com.evil", "gw:1")).is_err());
        assert!(check_origin(&["*".into()], &headers("https://any.example", "gw:1")).is_ok());
    }

    #[test]
    fn the_own_origin_stays_allowed_beside_a_list() {
        let allowed = vec!["https://app.example.com".to_owned()];
        assert!(check_origin(&allowed, &headers("http://gw:1", "gw:1")).is_ok());
        assert!(check_origin(&allowed, &headers("http://evil.example", "gw:1")).is_err());
    }

    #[test]
    fn the_public_url_names_an_own_origin() {
        let allowed = allowed_origins(&[], Some("https://ptyhub.example.com/base/"));
        assert_eq!(allowed, ["https://ptyhub.example.com"]);
        let behind_proxy = headers("https://ptyhub.example.com", "10.0.0.5:8080");
        assert!(check_origin(&allowed, &behind_proxy).is_ok());
        assert_eq!(allowed_origins(&["*".into()], None), ["*"]);
    }

    #[test]
    fn a_refused_origin_is_403_before_any_upgrade() {
        let refused = check_origin(&[], &headers("http://evil.example", "gw:1")).unwrap_err();
        assert_eq!(refused.code.http_status().as_u16(), 403);
    }
}
