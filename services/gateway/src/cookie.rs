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
//! Signing out clears the cookie in the browser and remembers its nonce until it would have
//! expired, on the replica that signed it out.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, header};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::auth::AuthError;

type HmacSha256 = Hmac<Sha256>;

/// The version prefix of every cookie value.
const VERSION: &str = "v1";

/// Cookie values longer than this are not ours (a browser keeps 4 KiB per cookie at most).
const MAX_COOKIE_CHARS: usize = 4096;

/// What a cookie stands for, and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CookieClaims {
    /// The subject of the credential it was exchanged for.
    pub sub: String,
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
    name: String,
    ttl: Duration,
    /// Nonces signed out on this replica, with the expiry of their cookie.
    signed_out: Mutex<HashMap<String, u64>>,
}

impl std::fmt::Debug for SessionCookies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCookies")
            .field("name", &self.name)
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
        // Cookies are not kept apart by port: two gateways on one host (two `ptyhub up`s on
        // loopback) would overwrite each other's cookie under one name. A name derived from the
        // key keeps them apart and is the same on replicas that share a key.
        let tag = Self::mac_with(&key, b"cookie name");
        let name = format!(
            "ptyhub_session_{}",
            tag[..4]
                .iter()
                .map(|byte| format!("{byte:02x}"))
                .collect::<String>()
        );
        Self {
            key,
            name,
            ttl,
            signed_out: Mutex::default(),
        }
    }

    /// The cookie's name.
    pub fn name(&self) -> &str {
        &self.name
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

    /// Claims for a cookie of `grant` that lasts until `exp` or the cookie lifetime, whichever
    /// comes first.
    pub fn claims(&self, subject: &str, grant: Grant, now: u64, exp: Option<u64>) -> CookieClaims {
        let lifetime_end = now.saturating_add(self.ttl.as_secs());
        let nonce: [u8; 16] = rand::random();
        CookieClaims {
            sub: subject.to_owned(),
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

    /// The claims of a cookie value, once its signature, expiry and nonce check out.
    pub fn open(&self, value: &str, now: u64) -> Result<CookieClaims, AuthError> {
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

    /// This gateway's cookie among a request's `Cookie` headers.
    pub fn find<'a>(&self, headers: &'a HeaderMap) -> Option<&'a str> {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(name, _)| *name == self.name)
            .map(|(_, value)| value.trim_matches('"'))
            .filter(|value| !value.is_empty())
    }

    /// `Set-Cookie` for `value`, living `max_age` seconds; `Secure` when the page came over
    /// TLS.
    pub fn set_cookie(&self, value: &str, max_age: u64, secure: bool) -> HeaderValue {
        let secure = if secure { "; Secure" } else { "" };
        HeaderValue::from_str(&format!(
            "{}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}",
            self.name
        ))
        .expect("cookie values are base64url and dots")
    }

    /// `Set-Cookie` that removes the cookie.
    pub fn clear_cookie(&self, secure: bool) -> HeaderValue {
        self.set_cookie("", 0, secure)
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

    #[test]
    fn a_sealed_cookie_opens_with_its_claims_until_it_expires() {
        let cookies = cookies();
        let claims = cookies.claims("alice", Grant::Anonymous, 1_000, None);
        assert_eq!(claims.exp, 1_000 + 3600);
        let value = cookies.seal(&claims);
        assert_eq!(cookies.open(&value, 1_001).unwrap(), claims);
        assert_eq!(
            cookies.open(&value, claims.exp).unwrap_err(),
            AuthError::Expired
        );
        // A credential's own expiry comes first when it is earlier.
        let short = cookies.claims("alice", Grant::Anonymous, 1_000, Some(1_060));
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
                cookies.open(&bad, 1_001).unwrap_err(),
                AuthError::Invalid,
                "{bad}"
            );
        }
        let other_key = SessionCookies::new(None, Duration::from_secs(3600));
        assert_eq!(
            other_key.open(&value, 1_001).unwrap_err(),
            AuthError::Invalid
        );
        assert_ne!(other_key.name(), cookies.name(), "names follow the key");
    }

    #[test]
    fn a_signed_out_cookie_is_refused_and_others_are_not() {
        let cookies = cookies();
        let first = cookies.claims("alice", Grant::Anonymous, 1_000, None);
        let second = cookies.claims("alice", Grant::Anonymous, 1_000, None);
        cookies.sign_out(&first, 1_001);
        assert_eq!(
            cookies.open(&cookies.seal(&first), 1_002).unwrap_err(),
            AuthError::SignedOut
        );
        assert!(cookies.open(&cookies.seal(&second), 1_002).is_ok());
    }

    #[test]
    fn the_cookie_is_found_among_others_and_set_http_only_and_strict() {
        let cookies = cookies();
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            format!("other=1; {}=abc.def; x=y", cookies.name())
                .parse()
                .unwrap(),
        );
        assert_eq!(cookies.find(&headers), Some("abc.def"));
        assert_eq!(cookies.find(&HeaderMap::new()), None);
        let set = cookies.set_cookie("abc", 60, false);
        let set = set.to_str().unwrap();
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict"),
            "{set}"
        );
        assert!(set.contains("Path=/") && !set.contains("Secure"), "{set}");
        assert!(
            cookies
                .set_cookie("abc", 60, true)
                .to_str()
                .unwrap()
                .ends_with("; Secure")
        );
        assert!(
            cookies
                .clear_cookie(false)
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
