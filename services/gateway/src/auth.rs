//! End-user authentication: static API tokens, JWTs (HS256 or RS256) and the page's session
//! cookies become a [`Principal`], whose [`Access`] ([`crate::scope`]) says what it may do.
//! Which credentials a request presents, and when they are checked, is the front door's
//! business ([`crate::front_door`]).

use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use subtle::ConstantTimeEq;

use ptyhub_wire::{Actor, Surface};

use crate::Clock;
use crate::config::{AuthConfig, ConfigError};
use crate::cookie::{CookieClaims, CookieSite, Grant, RequestCookie, SessionCookies};
use crate::error::AuthError;
use crate::scope::Access;

/// Who is calling, and what they may do.
#[derive(Debug, Clone)]
pub struct Principal {
    /// The JWT `sub`, `api-token-<n>` for the n-th static token, or `anonymous`.
    pub subject: String,
    pub access: Access,
    /// When the credential stops being valid (a JWT's `exp`, a cookie's end), in Unix seconds.
    pub expires_at: Option<u64>,
    /// Which kind of credential it was, for exchanging it for a session cookie.
    pub via: Via,
    /// The address the request came from (the TCP peer), for the audit trail; set by the
    /// surface that authenticated the request.
    pub client_address: Option<std::net::SocketAddr>,
}

/// The TCP peer of a request, which the gateway's accept loop records on every connection,
/// plain or TLS (`connections.rs`; absent when a router is driven without a connection, as in
/// some tests).
pub fn peer_address(extensions: &axum::http::Extensions) -> Option<std::net::SocketAddr> {
    use axum::extract::ConnectInfo;
    extensions
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map(|info| info.0)
}

impl Principal {
    /// This principal acting through `surface`, as the audit trail names it: the subject,
    /// never the credential.
    pub fn actor(&self, surface: Surface) -> Actor {
        let address = self.client_address.map(|address| address.to_string());
        Actor::new(&self.subject, address, surface)
    }

    /// The same principal, seen coming from `address`.
    pub fn from_address(mut self, address: Option<std::net::SocketAddr>) -> Self {
        self.client_address = address;
        self
    }
}

/// The kind of credential a [`Principal`] presented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Via {
    /// The n-th static API token.
    ApiToken(usize),
    Jwt,
    Anonymous,
    /// A share link, by the share's id.
    Share(String),
}

/// Verifies credentials against the configured tokens and keys.
#[derive(Clone)]
pub struct Authenticator {
    inner: Arc<AuthenticatorInner>,
}

struct AuthenticatorInner {
    cookies: SessionCookies,
    api_tokens: Vec<SecretString>,
    hs256: Option<DecodingKey>,
    rs256: Option<DecodingKey>,
    /// Required in every JWT's `aud` when set.
    jwt_audience: Option<String>,
    /// Required as every JWT's `iss` when set.
    jwt_issuer: Option<String>,
    allow_anonymous: bool,
    /// What a JWT's `exp` and `nbf`, and a cookie's end, are read against.
    clock: Clock,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("api_tokens", &self.inner.api_tokens.len())
            .field("hs256", &self.inner.hs256.is_some())
            .field("rs256", &self.inner.rs256.is_some())
            .field("allow_anonymous", &self.inner.allow_anonymous)
            .finish()
    }
}

/// The claim that holds ptyhub's own claims in a JWT: namespaced, so that a claim an identity
/// provider sets for another purpose (a bare `admin`, say) grants nothing here.
pub const JWT_CLAIMS_KEY: &str = "ptyhub";

/// How far a JWT's `exp` and `nbf` may be off the gateway's clock, for clocks that disagree a
/// little: a request is refused only a minute after `exp`, or before a minute before `nbf`.
/// A stream ends at `exp` itself ([`crate::streams::CredentialWatch`]).
pub const JWT_CLOCK_SKEW: Duration = Duration::from_secs(60);

/// The claims of a ptyhub JWT.
#[derive(Debug, Deserialize)]
struct Claims {
    sub: String,
    #[serde(deserialize_with = "numeric_date")]
    exp: u64,
    #[serde(default, deserialize_with = "optional_numeric_date")]
    nbf: Option<u64>,
    /// ptyhub's claims; a token without them covers no instance.
    #[serde(default, rename = "ptyhub")]
    ptyhub: PtyhubClaims,
}

/// What a JWT grants, under [`JWT_CLAIMS_KEY`].
#[derive(Debug, Default, Deserialize)]
struct PtyhubClaims {
    /// Instance ids or names this token may use; `"*"` means all.
    #[serde(default)]
    instances: Vec<String>,
    /// Whether the token may register and delete instances.
    #[serde(default)]
    admin: bool,
    /// Whether the token may create sessions that run another command than their instance's
    /// (admins always may).
    #[serde(default)]
    choose_command: bool,
}

impl Authenticator {
    /// Verifies the credentials `config` names, reading their expiry by `clock`.
    pub fn new(config: &AuthConfig, clock: Clock) -> Result<Self, ConfigError> {
        let rs256 = match &config.jwt_rs256_public_key_pem {
            Some(pem) => Some(DecodingKey::from_rsa_pem(pem.as_bytes()).map_err(|error| {
                ConfigError::new(
                    "jwt_rs256_public_key",
                    format!("not a PEM RSA public key: {error}"),
                )
            })?),
            None => None,
        };
        let hs256 = match &config.jwt_hs256_secret {
            Some(secret) => Some(
                DecodingKey::from_secret(secret.expose_secret().as_bytes()).map_err(|error| {
                    ConfigError::new("jwt_hs256_secret", format!("unusable secret: {error}"))
                })?,
            ),
            None => None,
        };
        Ok(Self {
            inner: Arc::new(AuthenticatorInner {
                cookies: SessionCookies::new(config.cookie_secret.as_ref(), config.session_ttl),
                api_tokens: config.api_tokens.clone(),
                hs256,
                rs256,
                jwt_audience: config.jwt_audience.clone(),
                jwt_issuer: config.jwt_issuer.clone(),
                allow_anonymous: config.allow_anonymous,
                clock,
            }),
        })
    }

    /// Verifies a credential, or decides what a request without one is.
    pub fn authenticate(&self, credential: Option<&str>) -> Result<Principal, AuthError> {
        let Some(credential) = credential.filter(|credential| !credential.is_empty()) else {
            if self.inner.allow_anonymous {
                return Ok(anonymous());
            }
            return Err(AuthError::Missing);
        };
        if let Some(index) = self.matching_api_token(credential) {
            return Ok(api_token_principal(index));
        }
        if credential.matches('.').count() == 2 {
            return self.verify_jwt(credential);
        }
        Err(AuthError::Invalid)
    }

    /// Compares against every static token in constant time, so timing tells nothing about
    /// how much of a guess was right.
    fn matching_api_token(&self, credential: &str) -> Option<usize> {
        let mut found = None;
        for (index, token) in self.inner.api_tokens.iter().enumerate() {
            if bool::from(
                token
                    .expose_secret()
                    .as_bytes()
                    .ct_eq(credential.as_bytes()),
            ) {
                found = Some(index);
            }
        }
        found
    }

    fn verify_jwt(&self, token: &str) -> Result<Principal, AuthError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| AuthError::Invalid)?;
        let key = match header.alg {
            Algorithm::HS256 => self.inner.hs256.as_ref(),
            Algorithm::RS256 => self.inner.rs256.as_ref(),
            other => return Err(AuthError::UnsupportedAlgorithm(format!("{other:?}"))),
        }
        .ok_or_else(|| AuthError::UnsupportedAlgorithm(format!("{:?}", header.alg)))?;
        let mut validation = Validation::new(header.alg);
        let mut required = vec!["exp", "sub"];
        // `exp` and `nbf` are read against the gateway's clock below, not by the library,
        // which would read the system's.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        match &self.inner.jwt_audience {
            Some(audience) => {
                validation.set_audience(&[audience]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        if let Some(issuer) = &self.inner.jwt_issuer {
            validation.set_issuer(&[issuer]);
            required.push("iss");
        }
        validation.set_required_spec_claims(&required);
        let data =
            jsonwebtoken::decode::<Claims>(token, key, &validation).map_err(|error| match error
                .kind()
            {
                jsonwebtoken::errors::ErrorKind::ExpiredSignature => AuthError::Expired,
                jsonwebtoken::errors::ErrorKind::ImmatureSignature => AuthError::NotYetValid,
                jsonwebtoken::errors::ErrorKind::InvalidAudience => AuthError::WrongAudience,
                jsonwebtoken::errors::ErrorKind::InvalidIssuer => AuthError::WrongIssuer,
                _ => AuthError::Invalid,
            })?;
        let claims = data.claims;
        self.check_validity_period(&claims)?;
        Ok(Principal {
            subject: claims.sub,
            access: Access::scoped(claims.ptyhub.instances, claims.ptyhub.admin)
                .with_command_choice(claims.ptyhub.choose_command),
            expires_at: Some(claims.exp),
            via: Via::Jwt,
            client_address: None,
        })
    }

    /// Refuses a token past its `exp` or before its `nbf` (RFC 7519), each by more than
    /// [`JWT_CLOCK_SKEW`] on the gateway's clock.
    fn check_validity_period(&self, claims: &Claims) -> Result<(), AuthError> {
        let now = self.inner.clock.now();
        let skew = JWT_CLOCK_SKEW.as_secs();
        if claims.exp.saturating_add(skew) < now {
            return Err(AuthError::Expired);
        }
        if claims.nbf.is_some_and(|nbf| nbf > now.saturating_add(skew)) {
            return Err(AuthError::NotYetValid);
        }
        Ok(())
    }

    /// The session cookies this gateway seals and opens.
    pub fn cookies(&self) -> &SessionCookies {
        &self.inner.cookies
    }

    /// A session cookie's value on `site` for a principal that authenticated now, and how many
    /// seconds it lives.
    pub fn cookie_for(&self, principal: &Principal, site: &CookieSite) -> (String, u64) {
        let now = self.inner.clock.now();
        let cookies = &self.inner.cookies;
        let grant = match &principal.via {
            Via::ApiToken(index) => Grant::ApiToken {
                token_mac: cookies.token_mac(self.inner.api_tokens[*index].expose_secret()),
            },
            Via::Jwt => Grant::Jwt {
                instances: principal.access.listed(),
                admin: principal.access.is_admin(),
                choose_command: principal.access.may_choose_command(),
            },
            Via::Anonymous => Grant::Anonymous,
            Via::Share(share_id) => Grant::Share {
                share_id: share_id.clone(),
            },
        };
        let claims = cookies.claims(&principal.subject, grant, site, now, principal.expires_at);
        let max_age = claims.exp.saturating_sub(now);
        (cookies.seal(&claims), max_age)
    }

    /// The principal a session cookie stands for, and its claims. A share's principal still
    /// needs its share checked (the front door does: [`crate::front_door`]).
    pub fn authenticate_cookie(
        &self,
        cookie: &RequestCookie,
    ) -> Result<(Principal, CookieClaims), AuthError> {
        let cookies = &self.inner.cookies;
        let claims = cookies.open(&cookie.value, &cookie.site, self.inner.clock.now())?;
        let mut principal = match &claims.grant {
            Grant::ApiToken { token_mac } => {
                // The token must still be configured: removing it ends its cookies.
                let index = self
                    .inner
                    .api_tokens
                    .iter()
                    .position(|token| cookies.token_mac_matches(token_mac, token.expose_secret()))
                    .ok_or(AuthError::Invalid)?;
                api_token_principal(index)
            }
            Grant::Jwt {
                instances,
                admin,
                choose_command,
            } => Principal {
                subject: claims.sub.clone(),
                access: Access::scoped(instances.iter().cloned(), *admin)
                    .with_command_choice(*choose_command),
                expires_at: None,
                via: Via::Jwt,
                client_address: None,
            },
            Grant::Anonymous if self.inner.allow_anonymous => anonymous(),
            Grant::Anonymous => return Err(AuthError::Invalid),
            Grant::Share { share_id } => Principal {
                subject: claims.sub.clone(),
                access: Access::none(),
                expires_at: None,
                via: Via::Share(share_id.clone()),
                client_address: None,
            },
        };
        principal.expires_at = Some(
            principal
                .expires_at
                .map_or(claims.exp, |exp| exp.min(claims.exp)),
        );
        Ok((principal, claims))
    }
}

/// A JWT NumericDate (RFC 7519): seconds since the epoch, which may have a fraction; the
/// fraction is dropped.
fn numeric_date<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    whole_seconds(f64::deserialize(deserializer)?)
}

/// An optional [`numeric_date`]: absent or `null` is none.
fn optional_numeric_date<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    Option::<f64>::deserialize(deserializer)?
        .map(whole_seconds)
        .transpose()
}

/// `seconds` without its fraction; refused when negative, not finite or past `u64`.
fn whole_seconds<E: serde::de::Error>(seconds: f64) -> Result<u64, E> {
    if seconds.is_finite() && (0.0..u64::MAX as f64).contains(&seconds) {
        // Finite and in range: the cast only drops the fraction.
        Ok(seconds as u64)
    } else {
        Err(E::custom(
            "a NumericDate is a non-negative number of seconds",
        ))
    }
}

fn anonymous() -> Principal {
    Principal {
        subject: "anonymous".into(),
        access: Access::admin(),
        expires_at: None,
        via: Via::Anonymous,
        client_address: None,
    }
}

fn api_token_principal(index: usize) -> Principal {
    Principal {
        subject: format!("api-token-{index}"),
        access: Access::admin(),
        expires_at: None,
        via: Via::ApiToken(index),
        client_address: None,
    }
}

/// The token of an `Authorization: Bearer <token>` header, parsed as every service parses it.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    ptyhub_wire::bearer_token(value)
}

/// The prefix of a share link's token (session-api makes them): such a bearer credential is
/// checked with session-api rather than as a JWT or API token.
pub const SHARE_TOKEN_PREFIX: &str = "ptyhub-share-";

/// The prefix of a `Sec-WebSocket-Protocol` entry that carries a credential:
/// `bearer.<token>`. Browsers cannot set headers on a WebSocket, but they can offer protocols.
pub const WEBSOCKET_TOKEN_PROTOCOL_PREFIX: &str = "bearer.";

/// The protocol the gateway selects when a browser offered one alongside its token.
pub const WEBSOCKET_PROTOCOL: &str = "ptyhub";

/// A token offered as a `bearer.<token>` WebSocket subprotocol.
pub fn websocket_protocol_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(axum::http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .find_map(|protocol| protocol.strip_prefix(WEBSOCKET_TOKEN_PROTOCOL_PREFIX))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use jsonwebtoken::{EncodingKey, Header};

    use super::*;

    const SECRET: &str = "a-test-secret-of-enough-bytes";

    fn authenticator() -> Authenticator {
        Authenticator::new(
            &AuthConfig {
                api_tokens: vec!["static-token".into()],
                jwt_hs256_secret: Some(SECRET.into()),
                ..AuthConfig::default()
            },
            Clock::system(),
        )
        .unwrap()
    }

    fn now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    fn hs256(claims: serde_json::Value, secret: &str) -> String {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret.as_bytes()).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn static_tokens_are_admins() {
        let principal = authenticator().authenticate(Some("static-token")).unwrap();
        assert!(principal.access.is_admin());
        assert!(principal.access.covers_all_instances());
        assert_eq!(principal.subject, "api-token-0");
    }

    #[test]
    fn missing_and_wrong_credentials_are_refused() {
        let authenticator = authenticator();
        assert_eq!(
            authenticator.authenticate(None).unwrap_err(),
            AuthError::Missing
        );
        assert_eq!(
            authenticator.authenticate(Some("")).unwrap_err(),
            AuthError::Missing
        );
        assert_eq!(
            authenticator
                .authenticate(Some("static-tokem"))
                .unwrap_err(),
            AuthError::Invalid
        );
    }

    #[test]
    fn jwt_scope_lists_instances() {
        let token = hs256(
            serde_json::json!({"sub": "alice", "exp": now() + 60, "ptyhub": {"instances": ["dev", "x"]}}),
            SECRET,
        );
        let principal = authenticator().authenticate(Some(&token)).unwrap();
        assert_eq!(principal.subject, "alice");
        assert!(!principal.access.is_admin());
        assert!(principal.access.allows_id_or_name("some-id", "dev"));
        assert!(!principal.access.allows_id_or_name("some-id", "prod"));
    }

    #[test]
    fn only_admins_and_the_choose_command_claim_may_override_a_command() {
        let authenticator = authenticator();
        let override_ = ["/bin/bash".to_owned()];
        let user = hs256(
            serde_json::json!({"sub": "alice", "exp": now() + 60, "ptyhub": {"instances": ["*"]}}),
            SECRET,
        );
        let user = authenticator.authenticate(Some(&user)).unwrap();
        assert!(!user.access.may_choose_command());
        let refused = user.access.check_command_override(&override_).unwrap_err();
        assert_eq!(refused.code, ptyhub_wire::ErrorCode::Forbidden);
        // No override is no choice: the instance's command runs.
        assert!(user.access.check_command_override(&[]).is_ok());

        let chooser = hs256(
            serde_json::json!({"sub": "ci", "exp": now() + 60, "ptyhub": {"instances": ["dev"], "choose_command": true}}),
            SECRET,
        );
        let chooser = authenticator.authenticate(Some(&chooser)).unwrap();
        assert!(!chooser.access.is_admin());
        assert!(chooser.access.check_command_override(&override_).is_ok());

        let admin = authenticator.authenticate(Some("static-token")).unwrap();
        assert!(admin.access.check_command_override(&override_).is_ok());
        let admin_jwt = hs256(
            serde_json::json!({"sub": "root", "exp": now() + 60, "ptyhub": {"instances": ["*"], "admin": true}}),
            SECRET,
        );
        let admin_jwt = authenticator.authenticate(Some(&admin_jwt)).unwrap();
        assert!(admin_jwt.access.may_choose_command());
    }

    #[test]
    fn jwt_star_scope_covers_everything() {
        let token = hs256(
            serde_json::json!({"sub": "bob", "exp": now() + 60, "ptyhub": {"instances": ["*"], "admin": true}}),
            SECRET,
        );
        let principal = authenticator().authenticate(Some(&token)).unwrap();
        assert!(principal.access.covers_all_instances());
        assert!(principal.access.is_admin());
    }

    #[test]
    fn expired_forged_and_incomplete_jwts_are_refused() {
        let authenticator = authenticator();
        let expired = hs256(
            serde_json::json!({"sub": "alice", "exp": now() - 3600, "ptyhub": {"instances": ["*"]}}),
            SECRET,
        );
        assert_eq!(
            authenticator.authenticate(Some(&expired)).unwrap_err(),
            AuthError::Expired
        );
        let forged = hs256(
            serde_json::json!({"sub": "alice", "exp": now() + 60, "ptyhub": {"instances": ["*"]}}),
            "another-secret-of-enough-bytes",
        );
        assert_eq!(
            authenticator.authenticate(Some(&forged)).unwrap_err(),
            AuthError::Invalid
        );
        let without_exp = hs256(
            serde_json::json!({"sub": "alice", "ptyhub": {"instances": ["*"]}}),
            SECRET,
        );
        assert_eq!(
            authenticator.authenticate(Some(&without_exp)).unwrap_err(),
            AuthError::Invalid
        );
    }

    #[test]
    fn bare_claims_outside_the_namespace_grant_nothing() {
        // An identity provider that lets users set `admin` or `instances` on their profile
        // must not make them admins here.
        let token = hs256(
            serde_json::json!({"sub": "mallory", "exp": now() + 60, "instances": ["*"], "admin": true}),
            SECRET,
        );
        let principal = authenticator().authenticate(Some(&token)).unwrap();
        assert!(!principal.access.is_admin());
        assert!(!principal.access.covers_all_instances());
        assert!(!principal.access.names("dev"));
    }

    #[test]
    fn a_jwt_before_its_nbf_is_refused() {
        let early = hs256(
            serde_json::json!({"sub": "alice", "exp": now() + 7200, "nbf": now() + 3600, "ptyhub": {"instances": ["*"]}}),
            SECRET,
        );
        assert_eq!(
            authenticator().authenticate(Some(&early)).unwrap_err(),
            AuthError::NotYetValid
        );
        let started = hs256(
            serde_json::json!({"sub": "alice", "exp": now() + 7200, "nbf": now() - 10, "ptyhub": {"instances": ["*"]}}),
            SECRET,
        );
        assert!(authenticator().authenticate(Some(&started)).is_ok());
    }

    /// `exp` and `nbf` are read on the gateway's clock, not the system's (the times here are
    /// decades past by the system's), with a minute of skew either way.
    #[test]
    fn a_jwts_validity_period_is_read_on_the_gateways_clock_with_a_minute_of_skew() {
        let start = 1_000_000;
        let clock = crate::ManualClock::starting_at(start);
        let authenticator = Authenticator::new(
            &AuthConfig {
                jwt_hs256_secret: Some(SECRET.into()),
                ..AuthConfig::default()
            },
            clock.clock(),
        )
        .unwrap();
        let skew = JWT_CLOCK_SKEW.as_secs();
        let (nbf, exp) = (start + 600, start + 3600);
        // A fractional NumericDate is a NumericDate too.
        let token = hs256(
            serde_json::json!({"sub": "alice", "nbf": nbf, "exp": exp as f64 + 0.5, "ptyhub": {"instances": ["*"]}}),
            SECRET,
        );
        let verify = || authenticator.authenticate(Some(&token)).map(|_| ());
        assert_eq!(verify(), Err(AuthError::NotYetValid));
        clock.advance(Duration::from_secs(nbf - skew - start - 1));
        assert_eq!(verify(), Err(AuthError::NotYetValid), "a second too early");
        clock.advance(Duration::from_secs(1));
        assert_eq!(verify(), Ok(()), "within the skew before its nbf");
        clock.advance(Duration::from_secs(exp + skew - clock.now()));
        assert_eq!(verify(), Ok(()), "within the skew after its exp");
        clock.advance(Duration::from_secs(1));
        assert_eq!(verify(), Err(AuthError::Expired));
    }

    #[test]
    fn a_configured_audience_and_issuer_are_required() {
        let authenticator = Authenticator::new(
            &AuthConfig {
                jwt_hs256_secret: Some(SECRET.into()),
                jwt_audience: Some("https://ptyhub.example.com".into()),
                jwt_issuer: Some("https://idp.example.com".into()),
                ..AuthConfig::default()
            },
            Clock::system(),
        )
        .unwrap();
        let claims = |extra: serde_json::Value| {
            let mut claims = serde_json::json!({"sub": "alice", "exp": now() + 60, "ptyhub": {"instances": ["*"]}});
            claims
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            hs256(claims, SECRET)
        };
        let good = claims(
            serde_json::json!({"aud": "https://ptyhub.example.com", "iss": "https://idp.example.com"}),
        );
        assert!(authenticator.authenticate(Some(&good)).is_ok());
        let in_a_list = claims(
            serde_json::json!({"aud": ["other", "https://ptyhub.example.com"], "iss": "https://idp.example.com"}),
        );
        assert!(authenticator.authenticate(Some(&in_a_list)).is_ok());
        for (token, refused) in [
            (
                claims(
                    serde_json::json!({"aud": "https://other.example.com", "iss": "https://idp.example.com"}),
                ),
                AuthError::WrongAudience,
            ),
            (
                claims(
                    serde_json::json!({"aud": "https://ptyhub.example.com", "iss": "https://evil.example.com"}),
                ),
                AuthError::WrongIssuer,
            ),
            (
                claims(serde_json::json!({"iss": "https://idp.example.com"})),
                AuthError::Invalid,
            ),
            (
                claims(serde_json::json!({"aud": "https://ptyhub.example.com"})),
                AuthError::Invalid,
            ),
        ] {
            assert_eq!(
                authenticator.authenticate(Some(&token)).unwrap_err(),
                refused
            );
        }
        // Without the settings, `aud` and `iss` are not looked at.
        let other = claims(serde_json::json!({"aud": "https://other.example.com", "iss": "x"}));
        assert!(self::authenticator().authenticate(Some(&other)).is_ok());
    }

    /// A key pair made for these tests only (`openssl genrsa 2048`).
    const RS256_PRIVATE: &str = include_str!("../tests/api/fixtures/rs256-private.pem");
    const RS256_PUBLIC: &str = include_str!("../tests/api/fixtures/rs256-public.pem");

    #[test]
    fn rs256_tokens_verify_with_the_public_key() {
        let authenticator = Authenticator::new(
            &AuthConfig {
                jwt_rs256_public_key_pem: Some(RS256_PUBLIC.to_owned()),
                ..AuthConfig::default()
            },
            Clock::system(),
        )
        .unwrap();
        let key = EncodingKey::from_rsa_pem(RS256_PRIVATE.as_bytes()).unwrap();
        let claims =
            serde_json::json!({"sub": "svc", "exp": now() + 60, "ptyhub": {"instances": ["a"]}});
        let token = jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &key).unwrap();
        let principal = authenticator.authenticate(Some(&token)).unwrap();
        assert_eq!(principal.subject, "svc");
        assert!(principal.access.names("a") && !principal.access.names("b"));

        // An HS256 token signed with the public key as its secret must not pass as RS256.
        let confused = hs256(claims, RS256_PUBLIC);
        assert!(authenticator.authenticate(Some(&confused)).is_err());
        assert!(
            Authenticator::new(
                &AuthConfig {
                    jwt_rs256_public_key_pem: Some("not a key".into()),
                    ..AuthConfig::default()
                },
                Clock::system()
            )
            .is_err()
        );
    }

    #[test]
    fn rs256_tokens_need_a_configured_key() {
        // No RS256 key configured: an RS256 header is refused before anything is verified.
        let header = base64_url(r#"{"alg":"RS256","typ":"JWT"}"#);
        let token = format!("{header}.e30.c2ln");
        assert!(matches!(
            authenticator().authenticate(Some(&token)).unwrap_err(),
            AuthError::UnsupportedAlgorithm(_)
        ));
    }

    fn base64_url(text: &str) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let bytes = text.as_bytes();
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk.iter().fold(0u32, |acc, &b| (acc << 8) | u32::from(b))
                << (8 * (3 - chunk.len()));
            for i in 0..=chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        out
    }

    #[test]
    fn bearer_and_protocol_tokens_are_found() {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", "Bearer abc".parse().unwrap());
        headers.insert(
            "sec-websocket-protocol",
            "ptyhub, bearer.xyz".parse().unwrap(),
        );
        assert_eq!(bearer_token(&headers), Some("abc"));
        assert_eq!(websocket_protocol_token(&headers).as_deref(), Some("xyz"));
    }
}
