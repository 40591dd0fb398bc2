//! The `Origin` check of browser requests: a terminal WebSocket or a gRPC-web call from a page
//! of another site is refused unless its origin is on the allow-list (by default, only the
//! gateway's own origin).

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

/// Whether `origin` is on the list, or (with an empty list) is the gateway's own origin.
pub fn origin_allowed(
    allowed_origins: &[String],
    origin: &HeaderValue,
    host: Option<&HeaderValue>,
) -> bool {
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    let origin = origin.trim_end_matches('/');
    if allowed_origins.is_empty() {
        let Some(host) = host.and_then(|host| host.to_str().ok()) else {
            return false;
        };
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        return authority.is_some_and(|authority| authority.eq_ignore_ascii_case(host));
    }
    allowed_origins
        .iter()
        .any(|allowed| allowed == "*" || allowed.trim_end_matches('/').eq_ignore_ascii_case(origin))
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
    fn a_refused_origin_is_403_before_any_upgrade() {
        let refused = check_origin(&[], &headers("http://evil.example", "gw:1")).unwrap_err();
        assert_eq!(refused.code.http_status().as_u16(), 403);
    }
}
