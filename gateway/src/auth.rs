//! End-user authentication: static API tokens and JWTs (HS256 or RS256) become a [`Principal`]
//! whose [`Access`] says which instances it may use and whether it may register or delete them.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::http::HeaderMap;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use subtle::ConstantTimeEq;

use ptyhub_wire::{Actor, Surface};

use crate::tls::TlsListener;

use crate::config::{AuthConfig, ConfigError};
use crate::domain::Instance;
use crate::error::ApiError;

/// Who is calling, and what they may do.
#[derive(Debug, Clone)]
pub struct Principal {
    /// The JWT `sub`, `api-token-<n>` for the n-th static token, or `anonymous`.
    pub subject: String,
    pub access: Access,
    /// The address the request came from (the TCP peer), for the audit trail; set by the
    /// surface that authenticated the request.
    pub client_address: Option<String>,
}

/// The TCP peer of a TLS connection as axum records it for each request (`gateway::run`
/// serves with it; over plain TCP axum's own `SocketAddr` stands in for it).
#[derive(Debug, Clone, Copy)]
pub struct PeerSocket(pub std::net::SocketAddr);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TlsListener>>
    for PeerSocket
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, TlsListener>) -> Self {
        PeerSocket(*stream.remote_addr())
    }
}

/// The TCP peer of a request, which axum records when the gateway serves (absent when a router
/// is driven without a connection, as in some tests).
pub fn peer_address(extensions: &axum::http::Extensions) -> Option<std::net::SocketAddr> {
    use axum::extract::ConnectInfo;
    extensions
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map(|info| info.0)
        .or_else(|| {
            extensions
                .get::<ConnectInfo<PeerSocket>>()
                .map(|info| info.0.0)
        })
}

/// The TCP peer of a request as an extractor (never refuses: `None` without one).
#[derive(Debug, Clone, Copy)]
pub struct PeerAddress(pub Option<std::net::SocketAddr>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for PeerAddress {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(PeerAddress(peer_address(&parts.extensions)))
    }
}

impl Principal {
    /// This principal acting through `surface`, as the audit trail names it: the subject,
    /// never the credential.
    pub fn actor(&self, surface: Surface) -> Actor {
        Actor::new(&self.subject, self.client_address.clone(), surface)
    }

    /// The same principal, seen coming from `address`.
    pub fn from_address(mut self, address: Option<std::net::SocketAddr>) -> Self {
        self.client_address = address.map(|address| address.to_string());
        self
    }
}

/// The instances a principal may use, whether it is an admin, and whether it may choose the
/// command of the sessions it creates.
#[derive(Debug, Clone)]
pub struct Access {
    all_instances: bool,
    /// Instance ids or names.
    instances: BTreeSet<String>,
    admin: bool,
    /// Granted without admin by a JWT's `choose_command` claim.
    choose_command: bool,
}

impl Access {
    /// Every instance, and registering and deleting them.
    pub fn admin() -> Self {
        Self {
            all_instances: true,
            instances: BTreeSet::new(),
            admin: true,
            choose_command: true,
        }
    }

    /// The listed instances (ids or names; `*` means all).
    pub fn scoped(instances: impl IntoIterator<Item = String>, admin: bool) -> Self {
        let mut all_instances = false;
        let mut listed = BTreeSet::new();
        for instance in instances {
            if instance == "*" {
                all_instances = true;
            } else {
                listed.insert(instance);
            }
        }
        Self {
            all_instances,
            instances: listed,
            admin,
            choose_command: admin,
        }
    }

    /// The same scope, and also choosing commands when `allowed` (admins always may).
    pub fn with_command_choice(mut self, allowed: bool) -> Self {
        self.choose_command = self.admin || allowed;
        self
    }

    pub fn is_admin(&self) -> bool {
        self.admin
    }

    /// Whether a session this principal creates may run another command than its instance's.
    /// The instance's command is a restriction: whoever may only use an instance gets the
    /// program its admin chose for it, on every surface.
    pub fn may_choose_command(&self) -> bool {
        self.choose_command
    }

    /// Refuses a command override the principal may not make, with one message on every
    /// surface; no override (`None` or empty) is always fine.
    pub fn check_command_override(&self, command: &[String]) -> Result<(), ApiError> {
        if command.is_empty() || self.may_choose_command() {
            Ok(())
        } else {
            Err(ApiError::forbidden(
                "choosing a session's command needs an admin credential or the choose_command claim",
            ))
        }
    }

    pub fn covers_all_instances(&self) -> bool {
        self.all_instances
    }

    /// Whether the scope names this reference literally (or covers everything). Used before the
    /// instance is known, so an unknown instance outside the scope gives 403 rather than
    /// revealing that it does not exist.
    pub fn names(&self, instance_reference: &str) -> bool {
        self.all_instances || self.instances.contains(instance_reference)
    }

    /// Whether the scope covers this instance, by id or by name.
    pub fn allows(&self, instance: &Instance) -> bool {
        self.all_instances
            || self.instances.contains(&instance.id)
            || self.instances.contains(&instance.name)
    }

    /// Same as [`Access::allows`] for an instance known only by its id and name.
    pub fn allows_id_or_name(&self, id: &str, name: &str) -> bool {
        self.all_instances || self.instances.contains(id) || self.instances.contains(name)
    }
}

/// Why a credential was refused. Messages never contain the credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("missing credential")]
    Missing,
    #[error("invalid credential")]
    Invalid,
    #[error("expired credential")]
    Expired,
    #[error("unsupported token algorithm {0}")]
    UnsupportedAlgorithm(String),
}

impl From<AuthError> for ApiError {
    fn from(error: AuthError) -> Self {
        ApiError::unauthenticated(error.to_string())
    }
}

/// Verifies credentials against the configured tokens and keys.
#[derive(Clone)]
pub struct Authenticator {
    inner: Arc<AuthenticatorInner>,
}

struct AuthenticatorInner {
    api_tokens: Vec<SecretString>,
    hs256: Option<DecodingKey>,
    rs256: Option<DecodingKey>,
    allow_anonymous: bool,
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

/// The claims of a ptyhub JWT.
#[derive(Debug, Deserialize)]
struct Claims {
    sub: String,
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
    pub fn new(config: &AuthConfig) -> Result<Self, ConfigError> {
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
                api_tokens: config.api_tokens.clone(),
                hs256,
                rs256,
                allow_anonymous: config.allow_anonymous,
            }),
        })
    }

    /// Verifies a credential, or decides what a request without one is.
    pub fn authenticate(&self, credential: Option<&str>) -> Result<Principal, AuthError> {
        let Some(credential) = credential.filter(|credential| !credential.is_empty()) else {
            if self.inner.allow_anonymous {
                return Ok(Principal {
                    subject: "anonymous".into(),
                    client_address: None,
                    access: Access::admin(),
                });
            }
            return Err(AuthError::Missing);
        };
        if let Some(index) = self.matching_api_token(credential) {
            return Ok(Principal {
                subject: format!("api-token-{index}"),
                client_address: None,
                access: Access::admin(),
            });
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
        validation.set_required_spec_claims(&["exp", "sub"]);
        validation.validate_aud = false;
        let data =
            jsonwebtoken::decode::<Claims>(token, key, &validation).map_err(|error| match error
                .kind()
            {
                jsonwebtoken::errors::ErrorKind::ExpiredSignature => AuthError::Expired,
                _ => AuthError::Invalid,
            })?;
        let claims = data.claims;
        Ok(Principal {
            subject: claims.sub,
            client_address: None,
            access: Access::scoped(claims.instances, claims.admin)
                .with_command_choice(claims.choose_command),
        })
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
        Authenticator::new(&AuthConfig {
            api_tokens: vec!["static-token".into()],
            jwt_hs256_secret: Some(SECRET.into()),
            ..AuthConfig::default()
        })
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
            serde_json::json!({"sub": "alice", "exp": now() + 60, "instances": ["dev", "x"]}),
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
            serde_json::json!({"sub": "alice", "exp": now() + 60, "instances": ["*"]}),
            SECRET,
        );
        let user = authenticator.authenticate(Some(&user)).unwrap();
        assert!(!user.access.may_choose_command());
        let refused = user.access.check_command_override(&override_).unwrap_err();
        assert_eq!(refused.code, ptyhub_wire::ErrorCode::Forbidden);
        // No override is no choice: the instance's command runs.
        assert!(user.access.check_command_override(&[]).is_ok());

        let chooser = hs256(
            serde_json::json!({"sub": "ci", "exp": now() + 60, "instances": ["dev"], "choose_command": true}),
            SECRET,
        );
        let chooser = authenticator.authenticate(Some(&chooser)).unwrap();
        assert!(!chooser.access.is_admin());
        assert!(chooser.access.check_command_override(&override_).is_ok());

        let admin = authenticator.authenticate(Some("static-token")).unwrap();
        assert!(admin.access.check_command_override(&override_).is_ok());
        let admin_jwt = hs256(
            serde_json::json!({"sub": "root", "exp": now() + 60, "instances": ["*"], "admin": true}),
            SECRET,
        );
        let admin_jwt = authenticator.authenticate(Some(&admin_jwt)).unwrap();
        assert!(admin_jwt.access.may_choose_command());
    }

    #[test]
    fn jwt_star_scope_covers_everything() {
        let token = hs256(
            serde_json::json!({"sub": "bob", "exp": now() + 60, "instances": ["*"], "admin": true}),
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
            serde_json::json!({"sub": "alice", "exp": now() - 3600, "instances": ["*"]}),
            SECRET,
        );
        assert_eq!(
            authenticator.authenticate(Some(&expired)).unwrap_err(),
            AuthError::Expired
        );
        let forged = hs256(
            serde_json::json!({"sub": "alice", "exp": now() + 60, "instances": ["*"]}),
            "another-secret-of-enough-bytes",
        );
        assert_eq!(
            authenticator.authenticate(Some(&forged)).unwrap_err(),
            AuthError::Invalid
        );
        let without_exp = hs256(
            serde_json::json!({"sub": "alice", "instances": ["*"]}),
            SECRET,
        );
        assert_eq!(
            authenticator.authenticate(Some(&without_exp)).unwrap_err(),
            AuthError::Invalid
        );
    }

    /// A key pair made for these tests only (`openssl genrsa 2048`).
    const RS256_PRIVATE: &str = include_str!("../tests/api/fixtures/rs256-private.pem");
    const RS256_PUBLIC: &str = include_str!("../tests/api/fixtures/rs256-public.pem");

    #[test]
    fn rs256_tokens_verify_with_the_public_key() {
        let authenticator = Authenticator::new(&AuthConfig {
            jwt_rs256_public_key_pem: Some(RS256_PUBLIC.to_owned()),
            ..AuthConfig::default()
        })
        .unwrap();
        let key = EncodingKey::from_rsa_pem(RS256_PRIVATE.as_bytes()).unwrap();
        let claims = serde_json::json!({"sub": "svc", "exp": now() + 60, "instances": ["a"]});
        let token = jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &key).unwrap();
        let principal = authenticator.authenticate(Some(&token)).unwrap();
        assert_eq!(principal.subject, "svc");
        assert!(principal.access.names("a") && !principal.access.names("b"));

        // An HS256 token signed with the public key as its secret must not pass as RS256.
        let confused = hs256(claims, RS256_PUBLIC);
        assert!(authenticator.authenticate(Some(&confused)).is_err());
        assert!(
            Authenticator::new(&AuthConfig {
                jwt_rs256_public_key_pem: Some("not a key".into()),
                ..AuthConfig::default()
            })
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
