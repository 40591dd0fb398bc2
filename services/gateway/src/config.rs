//! The gateway's typed configuration: where session-api is, which credentials it accepts, which
//! origins may open WebSockets, and the heartbeat and shutdown timings.

use std::path::PathBuf;
use std::time::Duration;

use ptyhub_wire::ServiceCredential;
use secrecy::{ExposeSecret, SecretString};

/// Everything [`crate::run`] needs besides the listener and the shutdown future.
#[derive(Debug, Clone)]
pub struct Config {
    /// session-api's gRPC endpoint, for example `http://127.0.0.1:50051`.
    pub session_api_endpoint: String,
    /// Sent as `authorization: Bearer <credential>` on every call to session-api.
    pub service_credential: ServiceCredential,
    /// Which end-user credentials the gateway accepts.
    pub auth: AuthConfig,
    /// Origins (`scheme://host[:port]`) allowed to open WebSockets and call gRPC-web from a
    /// browser. Empty means only the gateway's own origin (the request's `Host`); `*` allows any.
    pub allowed_origins: Vec<String>,
    /// Where the web page lives (`index.html` and its assets). `None` serves the page built into
    /// the binary.
    pub static_dir: Option<PathBuf>,
    /// Whether `/metrics` needs a credential like every other route.
    pub metrics_require_auth: bool,
    /// How often a WebSocket gets `{"type":"ping"}` and a WebSocket ping. A client silent for
    /// two intervals is dropped.
    pub heartbeat_interval: Duration,
    /// How long a call to session-api or a broker may take before it counts as unavailable. A
    /// screen wait may take its own timeout plus this.
    pub backend_timeout: Duration,
    /// How long the gateway keeps serving after a shutdown begins, with `/readyz` at 503, so
    /// that load balancers stop sending it new clients before its sockets close.
    pub drain_delay: Duration,
    /// How long shutdown waits for open WebSockets to close before giving up on them.
    pub shutdown_grace: Duration,
    /// The recordings store the brokers write (a directory or `s3://...`); `None` answers
    /// every recording request with 404.
    pub recordings: Option<ptyhub_wire::RecordingStore>,
    /// The most terminal streams (WebSockets and relayed `Attach` streams) one principal may
    /// hold open at this gateway.
    pub max_streams_per_principal: usize,
    /// The URL gRPC clients outside the cluster reach this gateway at (for example
    /// `https://ptyhub.example.com`): the `broker_endpoint` of every attach target the gateway
    /// hands out. `None` uses the scheme and authority each request came in with.
    pub public_url: Option<String>,
    /// TLS: the public port's certificate (HTTPS, WSS and gRPC on the one port), the CA that
    /// session-api's and the brokers' `https://` endpoints are checked against, and the client
    /// certificate presented to them under mutual TLS. None: plain.
    pub tls: ptyhub_wire::TlsFiles,
    /// Host names (in `Host`) browsers may use besides the public URL's, loopback names and IP
    /// addresses; `*` allows any. Empty, on a gateway bound to a loopback address, allows no
    /// other; on one bound elsewhere without a public URL, any (it cannot know its names).
    pub allowed_hosts: Vec<String>,
    /// Refused credentials one client address may present a minute (and in a burst) before its
    /// requests are refused with 429 until the allowance refills; 0 turns the limit off.
    pub failed_auth_per_minute: u32,
    /// Takes the client address from the last `X-Forwarded-For` entry: only behind a proxy that
    /// sets it, since clients can send the header themselves.
    pub trust_forwarded_for: bool,
    /// Brokers in the gateway's own process (`ptyhub up`), called without a socket; every
    /// other broker is reached at the endpoint session-api names. Empty by default.
    pub in_process_brokers: crate::InProcessBrokers,
}

impl Config {
    /// The contract's ping interval.
    pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(25);

    /// Refused credentials per client address and minute, by default.
    pub const DEFAULT_FAILED_AUTH_PER_MINUTE: u32 = 10;

    /// The shortest static API token accepted at start.
    pub const MIN_API_TOKEN_CHARS: usize = 32;

    /// A configuration with the defaults: auth on with no credentials configured (so every call
    /// is refused until tokens or a JWT key are added), same-origin WebSockets, no web page.
    pub fn new(
        session_api_endpoint: impl Into<String>,
        service_credential: ServiceCredential,
    ) -> Self {
        Self {
            session_api_endpoint: session_api_endpoint.into(),
            service_credential,
            auth: AuthConfig::default(),
            allowed_origins: Vec::new(),
            static_dir: None,
            metrics_require_auth: true,
            heartbeat_interval: Self::DEFAULT_HEARTBEAT_INTERVAL,
            backend_timeout: Duration::from_secs(10),
            drain_delay: Duration::ZERO,
            shutdown_grace: Duration::from_secs(5),
            recordings: None,
            max_streams_per_principal: ptyhub_wire::limits::MAX_STREAMS_PER_PRINCIPAL,
            public_url: None,
            tls: ptyhub_wire::TlsFiles::default(),
            allowed_hosts: Vec::new(),
            failed_auth_per_minute: Self::DEFAULT_FAILED_AUTH_PER_MINUTE,
            trust_forwarded_for: false,
            in_process_brokers: crate::InProcessBrokers::default(),
        }
    }

    /// Checks what can be checked before binding anything; the message names the setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.session_api_endpoint.starts_with("http://")
            || self.session_api_endpoint.starts_with("https://"))
        {
            return Err(ConfigError::new(
                "session_api_endpoint",
                "must start with http:// or https://",
            ));
        }
        if self.heartbeat_interval.is_zero() {
            return Err(ConfigError::new(
                "heartbeat_interval",
                "must be greater than zero",
            ));
        }
        // A static token is an admin's password that never expires: long enough that guessing
        // is hopeless (`ptyhub up` makes 48 hex digits).
        if self
            .auth
            .api_tokens
            .iter()
            .any(|token| token.expose_secret().chars().count() < Self::MIN_API_TOKEN_CHARS)
        {
            return Err(ConfigError::new(
                "api_tokens",
                format!(
                    "each token must be at least {} characters (openssl rand -hex 32 makes one)",
                    Self::MIN_API_TOKEN_CHARS
                ),
            ));
        }
        if let Some(secret) = &self.auth.jwt_hs256_secret
            && secret.expose_secret().len() < 16
        {
            return Err(ConfigError::new(
                "jwt_hs256_secret",
                "must be at least 16 bytes long",
            ));
        }
        if let Some(secret) = &self.auth.cookie_secret
            && secret.expose_secret().len() < 32
        {
            return Err(ConfigError::new(
                "cookie_secret",
                "must be at least 32 bytes long",
            ));
        }
        if self.auth.session_ttl.is_zero() {
            return Err(ConfigError::new("session_ttl", "must be greater than zero"));
        }
        if let Some(url) = &self.public_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(ConfigError::new(
                "public_url",
                "must start with http:// or https://",
            ));
        }
        for origin in &self.allowed_origins {
            if origin != "*" && !(origin.starts_with("http://") || origin.starts_with("https://")) {
                return Err(ConfigError::new(
                    "allowed_origins",
                    format!("{origin:?} is not `*` or an origin like https://example.com"),
                ));
            }
        }
        Ok(())
    }
}

/// The end-user credentials the gateway accepts.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// Static tokens for services and the CLI. Each grants admin over every instance.
    pub api_tokens: Vec<SecretString>,
    /// Verifies HS256 JWTs.
    pub jwt_hs256_secret: Option<SecretString>,
    /// Verifies RS256 JWTs: a PEM-encoded RSA public key.
    pub jwt_rs256_public_key_pem: Option<String>,
    /// Treats a request without any credential as an admin. Only for a single-user machine.
    pub allow_anonymous: bool,
    /// When set, every JWT must name it in `aud` (a token minted for another service is refused).
    pub jwt_audience: Option<String>,
    /// When set, every JWT's `iss` must be it.
    pub jwt_issuer: Option<String>,
    /// Signs the page's session cookies. Replicas behind one address need the same one; `None`
    /// makes a random one at start (cookies then end with the process).
    pub cookie_secret: Option<SecretString>,
    /// How long a session cookie lasts at most (a JWT's own expiry comes first).
    pub session_ttl: Duration,
}

impl AuthConfig {
    /// The session cookie's default lifetime.
    pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            api_tokens: Vec::new(),
            jwt_hs256_secret: None,
            jwt_rs256_public_key_pem: None,
            allow_anonymous: false,
            jwt_audience: None,
            jwt_issuer: None,
            cookie_secret: None,
            session_ttl: Self::DEFAULT_SESSION_TTL,
        }
    }
}

/// A setting that cannot work, named.
#[derive(Debug, Clone, thiserror::Error)]
#[error("invalid setting {setting}: {message}")]
pub struct ConfigError {
    pub setting: &'static str,
    pub message: String,
}

impl ConfigError {
    pub fn new(setting: &'static str, message: impl Into<String>) -> Self {
        Self {
            setting,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential() -> ServiceCredential {
        ServiceCredential::new("service-secret-value").expect("a valid credential")
    }

    #[test]
    fn secrets_are_redacted_in_debug_output() {
        let mut config = Config::new("http://127.0.0.1:1", credential());
        config.auth.api_tokens.push("api-token-value".into());
        config.auth.jwt_hs256_secret = Some("jwt-secret-value-0123".into());
        let printed = format!("{config:?}");
        assert!(!printed.contains("service-secret-value"));
        assert!(!printed.contains("api-token-value"));
        assert!(!printed.contains("jwt-secret-value"));
    }

    #[test]
    fn bad_settings_are_named() {
        let config = Config::new("127.0.0.1:50051", credential());
        assert_eq!(
            config.validate().unwrap_err().setting,
            "session_api_endpoint"
        );

        let mut config = Config::new("http://127.0.0.1:50051", credential());
        config.auth.jwt_hs256_secret = Some("short".into());
        assert_eq!(config.validate().unwrap_err().setting, "jwt_hs256_secret");

        let mut config = Config::new("http://127.0.0.1:50051", credential());
        config.allowed_origins.push("example.com".into());
        assert_eq!(config.validate().unwrap_err().setting, "allowed_origins");

        // `--token T` was accepted; a static token shorter than 32 characters is refused.
        for short in ["T", "", "0123456789abcdef0123456789abcde"] {
            let mut config = Config::new("http://127.0.0.1:50051", credential());
            config.auth.api_tokens.push(short.into());
            let refused = config.validate().unwrap_err();
            assert_eq!(refused.setting, "api_tokens", "{short:?}");
            if short.len() > 1 {
                assert!(!refused.to_string().contains(short), "{refused}");
            }
        }
        let mut config = Config::new("http://127.0.0.1:50051", credential());
        config
            .auth
            .api_tokens
            .push("0123456789abcdef0123456789abcdef".into());
        assert!(config.validate().is_ok());
        let mut config = Config::new("http://127.0.0.1:50051", credential());
        config.public_url = Some("ptyhub.example.com:443".into());
        assert_eq!(config.validate().unwrap_err().setting, "public_url");

        assert!(
            Config::new("http://127.0.0.1:50051", credential())
                .validate()
                .is_ok()
        );
    }
}
