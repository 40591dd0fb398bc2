//! The session cookie the web page signs in with: a credential (`/?token=`, the sign-in form, a
//! share link) is exchanged once for an `HttpOnly; SameSite=Strict` cookie, so that no token
//! sits in the address bar, in the page's storage, or in a WebSocket URL that proxies log.
//!
//! The cookie holds no secret: it is `v1.<claims>.<hmac-sha256>`, the claims (JSON, base64url)
//! saying which credential it stands for and until when, signed with the gateway's cookie key
//! (`--cookie-secret`, shared by a deployment's replicas; a random one per process otherwise).
//! A static token is named by a keyed hash, so a cookie stops working when its token is removed
//! from the configuration; a JWT's cookie ends when the JWT does; a share's names the share, which
//! is checked with session-api on every use, so a revoked share ends its cookies at once.
//!
//! Browsers send a cookie to every port of its host, so a cookie is bound to the site it was
//! issued for ([`CookieSite`]: the host and port the request addressed, its `Host`): its name
//! carries the port, so that gateways on other ports of the host neither read nor overwrite it,
//! and its signed claims carry the host and port, so that a gateway on another port refuses it
//! even when the two share a cookie secret.
//!
//! Signing out clears the cookie in the browser and remembers its nonce until it would have
//! expired, on the replica that signed it out.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, Uri, header};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::error::AuthError;

type HmacSha256 = Hmac<Sha256>;

/// The version prefix of every cookie value.
const VERSION: &str = "v1";

/// Cookie values longer than this are not ours (a browser keeps 4 KiB per cookie at most).
const MAX_COOKIE_CHARS: usize = 4096;

/// Where a browser sent a request: the host and port it addressed, which a session cookie is
/// bound to (browsers keep cookies apart by host, never by port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CookieSite {
    /// Lowercase, without a trailing dot; an IPv6 address in brackets.
    host: String,
    port: u16,
}

impl CookieSite {
    /// The site of `authority` (`host[:port]`, `[v6]:port`); without a port, the scheme's
    /// (443 over TLS, else 80). `None` for what no browser sends.
    pub fn from_authority(authority: &str, https: bool) -> Option<Self> {
        let authority = authority.trim();
        let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
            let (address, after) = rest.split_once(']')?;
            (format!("[{address}]"), after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host.to_owned(), Some(port)),
                None => (authority.to_owned(), None),
            }
        };
        let port = match port {
            Some(port) => port.parse().ok()?,
            None if https => 443,
            None => 80,
        };
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if host.is_empty() || host.contains(|c: char| c.is_whitespace() || c == '/') {
            return None;
        }
        Some(Self { host, port })
    }

    /// The site a request addressed: its `Host`, or HTTP/2's `:authority` (the URI's).
    pub fn of_request(headers: &HeaderMap, uri: &Uri, https: bool) -> Option<Self> {
        match headers.get(header::HOST) {
            Some(host) => Self::from_authority(host.to_str().ok()?, https),
            None => Self::from_authority(uri.authority()?.as_str(), https),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

impl std::fmt::Display for CookieSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// A request's session cookie, with the site the request addressed.
#[derive(Debug, Clone)]
pub struct RequestCookie {
    pub site: CookieSite,
    pub value: String,
}

/// What a cookie stands for, where, and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CookieClaims {
    /// The subject of the credential it was exchanged for.
    pub sub: String,
    /// The site (`host:port`) it was issued for; it is refused on any other.
    pub site: String,
    /// Unix seconds after which it is refused.
    pub exp: u64,
    /// Random, so that signing out can end this cookie and no other.
    pub nonce: String,
    #[serde(flatten)]
    pub grant: Grant,
}

/// The credential a cookie was exchanged for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Grant {
    /// A static API token, named by its keyed hash ([`SessionCookies::token_mac`]).
    ApiToken { token_mac: String },
    /// A JWT's scope, as it was verified.
    Jwt {
        instances: Vec<String>,
        admin: bool,
        /// Whether it may choose a session's command (the JWT's `choose_command`).
        #[serde(default)]
        choose_command: bool,
    },
    /// Anonymous access (`--insecure-allow-anonymous`).
    Anonymous,
    /// A share link, by the share's id.
    Share { share_id: String },
}

/// Seals, opens, finds and ends session cookies.
pub struct SessionCookies {
    key: [u8; 32],
    /// Derived from the key: the end of every cookie's name.
    key_tag: String,
    ttl: Duration,
    /// Nonces signed out on this replica, with the expiry of their cookie.
    signed_out: Mutex<HashMap<String, u64>>,
}

impl std::fmt::Debug for SessionCookies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCookies")
            .field("key_tag", &self.key_tag)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl SessionCookies {
    /// The cookie key from `secret` (the same on every replica that shares it), or a random one.
    pub fn new(secret: Option<&SecretString>, ttl: Duration) -> Self {
        let key: [u8; 32] = match secret {
            Some(secret) => {
                let mut mac = HmacSha256::new_from_slice(secret.expose_secret().as_bytes())
                    .expect("hmac takes keys of any length");
                mac.update(b"ptyhub session cookie key v1");
                mac.finalize().into_bytes().into()
            }
            None => rand::random(),
        };
        // A name that ends in a tag of the key is the same on replicas that share the key, and
        // another after a restart with a new one: a cookie of an earlier key is not found,
        // rather than refused as a forgery.
        let tag = Self::mac_with(&key, b"cookie name");
        let key_tag = tag[..4]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect::<String>();
        Self {
            key,
            key_tag,
            ttl,
            signed_out: Mutex::default(),
        }
    }

    /// The cookie's name on `site`: its port, then the key's tag. Browsers send every cookie of
    /// a host to each of its ports; by name, each gateway finds its own and no other's.
    pub fn name(&self, site: &CookieSite) -> String {
        format!("ptyhub_session_{}_{}", site.port, self.key_tag)
    }

    /// How long a cookie lasts at most.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn mac_with(key: &[u8; 32], data: &[u8]) -> [u8; 32] {
        let mut mac = HmacSha256::new_from_slice(key).expect("hmac takes keys of any length");
        mac.update(data);
        mac.finalize().into_bytes().into()
    }

    /// A static token's name in a cookie: a keyed hash, so the cookie carries no secret.
    pub fn token_mac(&self, token: &str) -> String {
        let mut data = b"api token:".to_vec();
        data.extend_from_slice(token.as_bytes());
        URL_SAFE_NO_PAD.encode(Self::mac_with(&self.key, &data))
    }

    /// Whether `token_mac` names `token`, in constant time.
    pub fn token_mac_matches(&self, token_mac: &str, token: &str) -> bool {
        bool::from(self.token_mac(token).as_bytes().ct_eq(token_mac.as_bytes()))
    }

    /// Claims for a cookie of `grant` on `site` that lasts until `exp` or the cookie lifetime,
    /// whichever comes first.
    pub fn claims(
        &self,
        subject: &str,
        grant: Grant,
        site: &CookieSite,
        now: u64,
        exp: Option<u64>,
    ) -> CookieClaims {
        let lifetime_end = now.saturating_add(self.ttl.as_secs());
        let nonce: [u8; 16] = rand::random();
        CookieClaims {
            sub: subject.to_owned(),
            site: site.to_string(),
            exp: exp.map_or(lifetime_end, |exp| exp.min(lifetime_end)),
            nonce: URL_SAFE_NO_PAD.encode(nonce),
            grant,
        }
    }

    /// The cookie value of `claims`.
    pub fn seal(&self, claims: &CookieClaims) -> String {
        let payload =
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).expect("claims serialize to json"));
        let signed = format!("{VERSION}.{payload}");
        let mac = URL_SAFE_NO_PAD.encode(Self::mac_with(&self.key, signed.as_bytes()));
        format!("{signed}.{mac}")
    }

    /// The claims of a cookie value presented on `site`, once its signature, site, expiry and
    /// nonce check out.
    pub fn open(
        &self,
        value: &str,
        site: &CookieSite,
        now: u64,
    ) -> Result<CookieClaims, AuthError> {
        if value.len() > MAX_COOKIE_CHARS {
            return Err(AuthError::Invalid);
        }
        let (signed, mac) = value.rsplit_once('.').ok_or(AuthError::Invalid)?;
        let (version, payload) = signed.split_once('.').ok_or(AuthError::Invalid)?;
        if version != VERSION {
            return Err(AuthError::Invalid);
        }
        let mac = URL_SAFE_NO_PAD
            .decode(mac)
            .map_err(|_| AuthError::Invalid)?;
        let expected = Self::mac_with(&self.key, signed.as_bytes());
        if !bool::from(expected.as_slice().ct_eq(&mac)) {
            return Err(AuthError::Invalid);
        }
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| AuthError::Invalid)?;
        let claims: CookieClaims =
            serde_json::from_slice(&payload).map_err(|_| AuthError::Invalid)?;
        // Issued for another port (or host): what a program on another port of the host got
        // from the browser, or another gateway's, replayed here.
        if claims.site != site.to_string() {
            return Err(AuthError::Invalid);
        }
        if claims.exp <= now {
            return Err(AuthError::Expired);
        }
        if self
            .signed_out
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&claims.nonce)
        {
            return Err(AuthError::SignedOut);
        }
        Ok(claims)
    }

    /// Ends a cookie on this replica (besides clearing it in the browser).
    pub fn sign_out(&self, claims: &CookieClaims, now: u64) {
        let mut signed_out = self
            .signed_out
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        signed_out.retain(|_, exp| *exp > now);
        signed_out.insert(claims.nonce.clone(), claims.exp);
    }

    /// This gateway's cookie for `site` among a request's `Cookie` headers.
    pub fn find(&self, headers: &HeaderMap, site: &CookieSite) -> Option<RequestCookie> {
        let name = self.name(site);
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(found, _)| *found == name)
            .map(|(_, value)| value.trim_matches('"'))
            .filter(|value| !value.is_empty())
            .map(|value| RequestCookie {
                site: site.clone(),
                value: value.to_owned(),
            })
    }

    /// `Set-Cookie` on `site` for `value`, living `max_age` seconds; `Secure` when the page
    /// came over TLS.
    pub fn set_cookie(
        &self,
        site: &CookieSite,
        value: &str,
        max_age: u64,
        secure: bool,
    ) -> HeaderValue {
        let secure = if secure { "; Secure" } else { "" };
        HeaderValue::from_str(&format!(
            "{}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}",
            self.name(site)
        ))
        .expect("cookie values are base64url and dots")
    }

    /// `Set-Cookie` that removes the cookie of `site`.
    pub fn clear_cookie(&self, site: &CookieSite, secure: bool) -> HeaderValue {
        self.set_cookie(site, "", 0, secure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cookies() -> SessionCookies {
        SessionCookies::new(
            Some(&SecretString::from("a-cookie-secret-for-tests")),
            Duration::from_secs(3600),
        )
    }

    fn site() -> CookieSite {
        CookieSite::from_authority("127.0.0.1:8080", false).unwrap()
    }

    #[test]
    fn a_sealed_cookie_opens_with_its_claims_until_it_expires() {
        let cookies = cookies();
        let claims = cookies.claims("alice", Grant::Anonymous, &site(), 1_000, None);
        assert_eq!(claims.exp, 1_000 + 3600);
        let value = cookies.seal(&claims);
        assert_eq!(cookies.open(&value, &site(), 1_001).unwrap(), claims);
        assert_eq!(
            cookies.open(&value, &site(), claims.exp).unwrap_err(),
            AuthError::Expired
        );
        // A credential's own expiry comes first when it is earlier.
        let short = cookies.claims("alice", Grant::Anonymous, &site(), 1_000, Some(1_060));
        assert_eq!(short.exp, 1_060);
    }

    #[test]
    fn a_tampered_or_foreign_cookie_is_refused() {
        let cookies = cookies();
        let claims = cookies.claims(
            "bob",
            Grant::Jwt {
                instances: vec!["dev".into()],
                admin: false,
                choose_command: false,
            },
            &site(),
            1_000,
            None,
        );
        let value = cookies.seal(&claims);
        let (signed, mac) = value.rsplit_once('.').unwrap();
        // The claims changed to an admin's, signature kept.
        let mut forged = claims.clone();
        forged.grant = Grant::Jwt {
            instances: vec!["*".into()],
            admin: true,
            choose_command: true,
        };
        let forged_payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
        for bad in [
            format!("v1.{forged_payload}.{mac}"),
            format!("{signed}.{}", URL_SAFE_NO_PAD.encode([0u8; 32])),
            format!("v2{}", &value[2..]),
            "v1.e30".to_owned(),
            String::new(),
            "a".repeat(5000),
        ] {
            assert_eq!(
                cookies.open(&bad, &site(), 1_001).unwrap_err(),
                AuthError::Invalid,
                "{bad}"
            );
        }
        let other_key = SessionCookies::new(None, Duration::from_secs(3600));
        assert_eq!(
            other_key.open(&value, &site(), 1_001).unwrap_err(),
            AuthError::Invalid
        );
        assert_ne!(
            other_key.name(&site()),
            cookies.name(&site()),
            "names follow the key"
        );
    }

    #[test]
    fn a_cookie_is_refused_on_another_port_or_host_even_under_the_same_key() {
        let cookies = cookies();
        let claims = cookies.claims("alice", Grant::Anonymous, &site(), 1_000, None);
        let value = cookies.seal(&claims);
        for other in ["127.0.0.1:8081", "localhost:8080", "127.0.0.1"] {
            let other = CookieSite::from_authority(other, false).unwrap();
            assert_eq!(
                cookies.open(&value, &other, 1_001).unwrap_err(),
                AuthError::Invalid,
                "{other}"
            );
        }
        // Names differ by port, so a gateway on another port does not even find it.
        let other_port = CookieSite::from_authority("127.0.0.1:9090", false).unwrap();
        assert_ne!(cookies.name(&site()), cookies.name(&other_port));
        assert!(cookies.name(&site()).starts_with("ptyhub_session_8080_"));
    }

    #[test]
    fn a_site_is_the_host_and_port_the_browser_addressed() {
        let parsed = |authority: &str, https: bool| {
            CookieSite::from_authority(authority, https).map(|site| site.to_string())
        };
        assert_eq!(
            parsed("Example.COM.", true).as_deref(),
            Some("example.com:443")
        );
        assert_eq!(
            parsed("example.com", false).as_deref(),
            Some("example.com:80")
        );
        assert_eq!(parsed("[::1]:8080", false).as_deref(), Some("[::1]:8080"));
        assert_eq!(parsed("[::1]", true).as_deref(), Some("[::1]:443"));
        assert_eq!(parsed("host:port", false), None);
        assert_eq!(parsed("", false), None);
        let mut headers = HeaderMap::new();
        let uri: Uri = "https://h2.example:8443/x".parse().unwrap();
        assert_eq!(
            CookieSite::of_request(&headers, &uri, true).map(|site| site.to_string()),
            Some("h2.example:8443".to_owned()),
            "HTTP/2's authority without a Host header"
        );
        headers.insert(header::HOST, "127.0.0.1:1234".parse().unwrap());
        assert_eq!(
            CookieSite::of_request(&headers, &uri, false).map(|site| site.to_string()),
            Some("127.0.0.1:1234".to_owned())
        );
    }

    #[test]
    fn a_signed_out_cookie_is_refused_and_others_are_not() {
        let cookies = cookies();
        let first = cookies.claims("alice", Grant::Anonymous, &site(), 1_000, None);
        let second = cookies.claims("alice", Grant::Anonymous, &site(), 1_000, None);
        cookies.sign_out(&first, 1_001);
        assert_eq!(
            cookies
                .open(&cookies.seal(&first), &site(), 1_002)
                .unwrap_err(),
            AuthError::SignedOut
        );
        assert!(cookies.open(&cookies.seal(&second), &site(), 1_002).is_ok());
    }

    #[test]
    fn the_cookie_is_found_among_others_and_set_http_only_and_strict() {
        let cookies = cookies();
        let mut headers = HeaderMap::new();
        let other_port = CookieSite::from_authority("127.0.0.1:9090", false).unwrap();
        headers.insert(
            header::COOKIE,
            format!(
                "other=1; {}=theirs; {}=abc.def; x=y",
                cookies.name(&other_port),
                cookies.name(&site())
            )
            .parse()
            .unwrap(),
        );
        assert_eq!(
            cookies.find(&headers, &site()).map(|found| found.value),
            Some("abc.def".to_owned())
        );
        assert_eq!(
            cookies
                .find(&HeaderMap::new(), &site())
                .map(|found| found.value),
            None
        );
        let set = cookies.set_cookie(&site(), "abc", 60, false);
        let set = set.to_str().unwrap();
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict"),
            "{set}"
        );
        assert!(set.contains("Path=/") && !set.contains("Secure"), "{set}");
        assert!(
            cookies
                .set_cookie(&site(), "abc", 60, true)
                .to_str()
                .unwrap()
                .ends_with("; Secure")
        );
        assert!(
            cookies
                .clear_cookie(&site(), false)
                .to_str()
                .unwrap()
                .contains("Max-Age=0")
        );
    }

    #[test]
    fn token_macs_name_one_token() {
        let cookies = cookies();
        let mac = cookies.token_mac("the-token");
        assert!(cookies.token_mac_matches(&mac, "the-token"));
        assert!(!cookies.token_mac_matches(&mac, "the-tokem"));
        assert!(!mac.contains("the-token"));
    }
}
