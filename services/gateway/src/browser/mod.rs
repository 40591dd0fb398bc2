//! The gateway's browser policy, in one module: the `Host` allow-list against DNS rebinding,
//! the `Origin` allow-list (`origin.rs`) of WebSockets, gRPC-web and every state-changing REST
//! request, JSON as the only request body type (so a cross-site form or `text/plain` post never
//! reaches a handler), the security headers on every page, asset and answer
//! (Content-Security-Policy with `frame-ancestors 'none'`, `nosniff`, no referrer), and whether
//! the browser reached the gateway over https (which makes its cookie `Secure`). It needs no
//! more of the gateway than a [`BrowserPolicy`].

mod origin;

use std::net::{IpAddr, SocketAddr};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ptyhub_wire::ErrorCode;

use crate::config::Config;
use crate::error::ApiError;

pub use origin::{allowed_origins, check_origin, origin_allowed};

/// The page loads its script, styles and fonts from the gateway alone and talks to the gateway
/// alone (`'self'` covers its WebSockets); xterm.js sets styles at run time, hence the inline
/// styles. The History view's asciinema player runs its terminal as WebAssembly, which
/// `'wasm-unsafe-eval'` allows to compile (and nothing else: no `eval`). Nothing may frame it.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self' 'wasm-unsafe-eval'; \
     style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; \
     connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// Paths that answer whatever `Host` a request names: probes come from kubelets and load
/// balancers by IP or by a name of their own, and say nothing a page could misuse.
const PROBE_PATHS: [&str; 3] = ["/livez", "/readyz", "/healthz"];

/// What the browser checks ([`check_host`], [`check_writes`]) are told of the gateway's
/// configuration.
#[derive(Debug, Clone)]
pub struct BrowserPolicy {
    /// Which `Host` names the gateway answers.
    pub hosts: HostPolicy,
    /// The origins, besides the gateway's own, whose pages may write and open sockets.
    pub allowed_origins: Vec<String>,
}

/// Whether the browser reached the gateway over TLS: the gateway serves TLS itself
/// (`--tls-cert`), its public URL is `https`, or the proxy that terminates TLS in front of it
/// says so (`X-Forwarded-Proto`).
pub fn request_is_https(serves_tls: bool, public_url: Option<&str>, headers: &HeaderMap) -> bool {
    serves_tls
        || public_url.is_some_and(|url| url.starts_with("https://"))
        || headers
            .get("x-forwarded-proto")
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.split(',').next().map(str::trim) == Some("https"))
}

/// Which `Host` names the gateway answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPolicy {
    /// Any name (a gateway bound to a non-loopback address that was told none of its names).
    Any,
    /// IP addresses, loopback names and these names (lowercase, without a port).
    Names(Vec<String>),
}

impl HostPolicy {
    /// The names of `--public-url` and `--allowed-host`; with neither, none on a gateway bound
    /// to loopback and any on one bound elsewhere.
    pub fn new(config: &Config, bound: SocketAddr) -> Self {
        let mut names: Vec<String> = Vec::new();
        for allowed in &config.allowed_hosts {
            if allowed.trim() == "*" {
                return HostPolicy::Any;
            }
            names.push(normalise(host_of(allowed.trim())));
        }
        if let Some(url) = &config.public_url {
            let authority = url
                .split_once("://")
                .map_or(url.as_str(), |(_, rest)| rest)
                .split('/')
                .next()
                .unwrap_or_default();
            names.push(normalise(host_of(authority)));
        }
        names.retain(|name| !name.is_empty());
        if names.is_empty() && !bound.ip().is_loopback() {
            return HostPolicy::Any;
        }
        HostPolicy::Names(names)
    }

    /// Whether a request that names `authority` (`host[:port]`) is answered. IP addresses and
    /// loopback names are always: a rebinding page's requests carry the attacker's name.
    pub fn allows(&self, authority: &str) -> bool {
        let HostPolicy::Names(names) = self else {
            return true;
        };
        let host = normalise(host_of(authority));
        host.parse::<IpAddr>().is_ok()
            || host == "localhost"
            || host.ends_with(".localhost")
            || names.contains(&host)
    }
}

/// The host of `host[:port]` or `[v6]:port`.
fn host_of(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default();
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|byte| byte.is_ascii_digit()) => host,
        _ => authority,
    }
}

fn normalise(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// Refuses a request whose `Host` (or HTTP/2 `:authority`) is not allowed, with 403.
pub async fn check_host(
    State(policy): State<BrowserPolicy>,
    request: Request,
    next: Next,
) -> Response {
    let authority = request
        .headers()
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .map(str::to_owned)
        .or_else(|| {
            request
                .uri()
                .authority()
                .map(|authority| authority.to_string())
        });
    let allowed = match &authority {
        // HTTP/1.0 without a Host: not a browser.
        None => true,
        Some(authority) => policy.hosts.allows(authority),
    };
    if !allowed && !PROBE_PATHS.contains(&request.uri().path()) {
        tracing::info!(path = %request.uri().path(), "request for a host name not on the allow-list refused");
        return ApiError::new(
            ErrorCode::OriginRefused,
            "host not allowed: this gateway answers its public url's name (--public-url, --allowed-host)",
        )
        .into_response();
    }
    next.run(request).await
}

/// What every state-changing request (any method but GET, HEAD and OPTIONS) of the REST
/// surface must show before any handler runs, on every route (the legacy layout's too) and
/// whatever its credential, anonymous included: an `Origin`, when it has one, that is allowed
/// (403 otherwise), and a body that is JSON (415 otherwise). Browsers send `text/plain`, form
/// and multipart bodies cross-site without asking; programs send no `Origin`. gRPC and gRPC-web
/// are routed away before this and checked by their own surface.
pub async fn check_writes(
    State(policy): State<BrowserPolicy>,
    request: Request,
    next: Next,
) -> Response {
    let writes = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if !writes {
        return next.run(request).await;
    }
    if let Err(refused) = check_origin(&policy.allowed_origins, request.headers()) {
        return refused.into_response();
    }
    let headers = request.headers();
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|value| value.to_str().unwrap_or("?"));
    let has_body = headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|length| length.trim() != "0");
    let refused = match content_type {
        Some(content_type) => !is_json(content_type),
        None => has_body,
    };
    if refused {
        return ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "request bodies must be application/json",
        )
        .into_response();
    }
    next.run(request).await
}

/// `application/json` or `application/<something>+json`, with any parameters.
fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|subtype| subtype.ends_with("+json"))
}

/// Adds the security headers to every answer that does not set its own.
pub async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        // For browsers older than `frame-ancestors`.
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
    ] {
        headers.entry(name).or_insert(value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptyhub_wire::ServiceCredential;

    fn config() -> Config {
        Config::new(
            "http://127.0.0.1:1",
            ServiceCredential::new("service-secret-value").unwrap(),
        )
    }

    fn loopback() -> SocketAddr {
        "127.0.0.1:8080".parse().unwrap()
    }

    #[test]
    fn a_loopback_gateway_answers_ips_and_loopback_names_only() {
        let policy = HostPolicy::new(&config(), loopback());
        for allowed in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST",
            "app.localhost:1",
            "[::1]:8080",
            "10.1.2.3",
        ] {
            assert!(policy.allows(allowed), "{allowed}");
        }
        // A rebinding page: the attacker's name that resolves to 127.0.0.1.
        for refused in [
            "evil.example:8080",
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
        ] {
            assert!(!policy.allows(refused), "{refused}");
        }
    }

    #[test]
    fn the_public_url_and_allowed_hosts_name_the_gateway() {
        let mut config = config();
        config.public_url = Some("https://ptyhub.example.com/".into());
        config.allowed_hosts = vec!["Internal.Svc".into()];
        let policy = HostPolicy::new(&config, "0.0.0.0:8080".parse().unwrap());
        assert!(policy.allows("ptyhub.example.com"));
        assert!(policy.allows("PTYHUB.example.com.:443"));
        assert!(policy.allows("internal.svc:8080"));
        assert!(!policy.allows("evil.example"));
        config.allowed_hosts = vec!["*".into()];
        assert_eq!(HostPolicy::new(&config, loopback()), HostPolicy::Any);
    }

    #[test]
    fn a_gateway_bound_elsewhere_without_names_answers_any() {
        let policy = HostPolicy::new(&config(), "0.0.0.0:8080".parse().unwrap());
        assert!(policy.allows("whatever.example"));
    }

    #[test]
    fn json_is_application_json_or_a_json_suffix() {
        for json in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/merge-patch+json",
        ] {
            assert!(is_json(json), "{json}");
        }
        for other in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "text/json",
            "",
        ] {
            assert!(!is_json(other), "{other}");
        }
    }
}
