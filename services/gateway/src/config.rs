//! The gateway's typed configuration: where session-api is, which credentials it accepts, which
//! origins may open WebSockets, and the heartbeat and shutdown timings. Its flags and
//! `PTYHUB_GATEWAY_*` variables are derived on [`Config`] itself; the secrets come from their
//! variables or files ([`SecretSource`]), never from the command line.

use std::path::PathBuf;
use std::time::Duration;

use ptyhub_wire::{SecretSource, ServiceCredential, TlsFiles};
use secrecy::{ExposeSecret, SecretString};

/// Everything [`crate::run`] needs besides the listener and the shutdown future. Build it with
/// [`Config::new`] in code, or parse it from flags and `PTYHUB_GATEWAY_*` variables with `clap`
/// (as `main.rs` does).
#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// session-api's gRPC endpoint.
    #[arg(
        id = "session_api",
        long = "session-api",
        value_name = "URL",
        env = "PTYHUB_GATEWAY_SESSION_API",
        default_value = "http://127.0.0.1:50051"
    )]
    pub session_api_endpoint: String,
    /// Sent as `authorization: Bearer <credential>` on every call to session-api.
    #[command(flatten)]
    pub service_credential: GatewayCredential,
    /// Which end-user credentials the gateway accepts.
    #[command(flatten)]
    pub auth: AuthConfig,
    /// Origins allowed, besides the gateway's own, to open WebSockets, write over REST and call
    /// gRPC-web from a browser, comma-separated (`scheme://host[:port]`, `*` for any). The
    /// gateway's own origin (the request's `Host`, or `--public-url`) is always allowed.
    #[arg(
        long = "allowed-origin",
        env = "PTYHUB_GATEWAY_ALLOWED_ORIGINS",
        value_delimiter = ','
    )]
    pub allowed_origins: Vec<String>,
    /// Serve the web page from this directory (`index.html` and `assets/`) instead of the page
    /// built into the binary.
    #[arg(long, env = "PTYHUB_GATEWAY_STATIC_DIR")]
    pub static_dir: Option<PathBuf>,
    /// Serve `/metrics` without a credential (`--metrics-public`, or `=true`); by default it
    /// needs one like every other route. The field says whether it needs one.
    #[arg(
        id = "metrics_public",
        long = "metrics-public",
        env = "PTYHUB_GATEWAY_METRICS_PUBLIC",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        value_parser = metrics_require_auth
    )]
    pub metrics_require_auth: bool,
    /// Interval of WebSocket heartbeats (`{"type":"ping"}` and a WebSocket ping); a client
    /// silent for two is dropped.
    #[arg(long, env = "PTYHUB_GATEWAY_HEARTBEAT_INTERVAL", default_value = "25s",
          value_parser = parse_duration)]
    pub heartbeat_interval: Duration,
    /// How often a session event stream (Server-Sent Events) that has no change to send carries
    /// a comment line, so that proxies and browsers do not close it as idle.
    #[arg(long, env = "PTYHUB_GATEWAY_EVENTS_KEEP_ALIVE", default_value = "15s",
          value_parser = parse_duration)]
    pub events_keep_alive: Duration,
    /// How long the gateway's HTTP/2 connections to session-api and brokers may be silent before
    /// it pings, and then how long it waits for the answer before it drops the connection and
    /// ends its streams: a frozen or unplugged peer is found within twice this.
    #[arg(long, env = "PTYHUB_GATEWAY_BACKEND_KEEP_ALIVE", default_value = "20s",
          value_parser = parse_duration)]
    pub backend_keep_alive: Duration,
    /// How long a client's HTTP/2 connection (gRPC, gRPC-web, HTTP/2 REST) may be silent before
    /// the gateway pings it, and then how long it waits for the answer before it drops the
    /// connection: a frozen or unplugged client's relayed `Attach` ends, and its controller
    /// lease with it, within twice this.
    #[arg(long, env = "PTYHUB_GATEWAY_CLIENT_KEEP_ALIVE", default_value = "20s",
          value_parser = parse_duration)]
    pub client_keep_alive: Duration,
    /// How long a call to session-api or a broker may take before it counts as unavailable; a
    /// screen wait may take its own timeout plus this.
    #[arg(long, env = "PTYHUB_GATEWAY_BACKEND_TIMEOUT", default_value = "10s",
          value_parser = parse_duration)]
    pub backend_timeout: Duration,
    /// After SIGTERM, how long to keep serving with /readyz at 503 before closing, so that load
    /// balancers stop sending new clients first.
    #[arg(long, env = "PTYHUB_GATEWAY_DRAIN_DELAY", default_value = "0s",
          value_parser = parse_duration)]
    pub drain_delay: Duration,
    /// How long shutdown waits for open WebSockets to close before giving up on them.
    #[arg(long, env = "PTYHUB_GATEWAY_SHUTDOWN_GRACE", default_value = "5s",
          value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// The recordings store the brokers write: a directory or `s3://bucket/prefix` (with the
    /// usual `AWS_*` variables). Unset: every recording request is answered 404.
    #[arg(long, env = "PTYHUB_GATEWAY_RECORDINGS", value_parser = parse_recording_store)]
    pub recordings: Option<ptyhub_wire::RecordingStore>,
    /// The most terminal streams (WebSockets and relayed gRPC Attach streams together) one
    /// principal may hold open at this gateway.
    #[arg(long, env = "PTYHUB_GATEWAY_MAX_STREAMS_PER_PRINCIPAL",
          default_value_t = ptyhub_wire::limits::MAX_STREAMS_PER_PRINCIPAL)]
    pub max_streams_per_principal: usize,
    /// The URL gRPC clients outside the cluster reach this gateway at (for example
    /// https://ptyhub.example.com), handed out as the `broker_endpoint` of attach targets.
    /// Default: the scheme and authority each request came in with.
    #[arg(long, env = "PTYHUB_GATEWAY_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// TLS: the public port's certificate (HTTPS, WSS and gRPC on the one port), the CA that
    /// session-api's and the brokers' `https://` endpoints are checked against, and the client
    /// certificate presented to them under mutual TLS. None: plain.
    #[command(flatten)]
    pub tls: GatewayTls,
    /// Host names browsers may reach this gateway by besides the `--public-url`'s, loopback
    /// names and IP addresses, comma-separated (`*` for any): a page of another name that
    /// resolves here (DNS rebinding) is refused. Empty, on a gateway bound to a loopback
    /// address, allows no other; on one bound elsewhere without a public URL, any.
    #[arg(
        long = "allowed-host",
        env = "PTYHUB_GATEWAY_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,
    /// Refused credentials one client address may present a minute before its refused ones are
    /// answered 429 until the allowance refills (a valid credential always passes); 0 turns the
    /// limit off.
    #[arg(long, env = "PTYHUB_GATEWAY_FAILED_AUTH_PER_MINUTE",
          default_value_t = Config::DEFAULT_FAILED_AUTH_PER_MINUTE)]
    pub failed_auth_per_minute: u32,
    /// Take the client address from the last X-Forwarded-For entry (only behind a proxy that
    /// sets it: clients can send the header themselves).
    #[arg(long, env = "PTYHUB_GATEWAY_TRUST_FORWARDED_FOR")]
    pub trust_forwarded_for: bool,
    /// Brokers in the gateway's own process (`ptyhub up`), called without a socket; every
    /// other broker is reached at the endpoint session-api names. Empty by default; no flag.
    #[arg(skip)]
    pub in_process_brokers: crate::InProcessBrokers,
    /// What the probes wait for besides the backends, held by whoever starts the gateway with
    /// the other services in one process (`ptyhub up`); nothing for a gateway alone. No flag.
    #[arg(skip)]
    pub readiness: crate::Readiness,
    /// The clock credentials' expiry is read by: the system's, or a test's
    /// [`crate::ManualClock`]. No flag.
    #[arg(skip)]
    pub clock: crate::Clock,
}

/// The gateway's own credential, presented to session-api: from `PTYHUB_GATEWAY_SERVICE_TOKEN`
/// or a file, never a flag. It derefs to the [`ServiceCredential`] it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayCredential(pub ServiceCredential);

impl std::ops::Deref for GatewayCredential {
    type Target = ServiceCredential;

    fn deref(&self) -> &ServiceCredential {
        &self.0
    }
}

impl From<ServiceCredential> for GatewayCredential {
    fn from(credential: ServiceCredential) -> Self {
        Self(credential)
    }
}

const SERVICE_TOKEN: SecretSource = SecretSource {
    setting: "service_token",
    flag: "service-token",
    variable: "PTYHUB_GATEWAY_SERVICE_TOKEN",
    file_flag: "service-token-file",
    file_variable: "PTYHUB_GATEWAY_SERVICE_TOKEN_FILE",
    help: "The gateway's own credential, sent to session-api (at least 16 printable ASCII characters; session-api knows it as a gateway token).",
    list: false,
};

const API_TOKENS: SecretSource = SecretSource {
    setting: "api_tokens",
    flag: "api-token",
    variable: "PTYHUB_GATEWAY_API_TOKENS",
    file_flag: "api-token-file",
    file_variable: "PTYHUB_GATEWAY_API_TOKEN_FILE",
    help: "Static API tokens (admin over every instance), each at least 32 characters.",
    list: true,
};

const JWT_HS256_SECRET: SecretSource = SecretSource {
    setting: "jwt_hs256_secret",
    flag: "jwt-hs256-secret",
    variable: "PTYHUB_GATEWAY_JWT_HS256_SECRET",
    file_flag: "jwt-hs256-secret-file",
    file_variable: "PTYHUB_GATEWAY_JWT_HS256_SECRET_FILE",
    help: "The secret that verifies HS256 JWTs (at least 16 bytes).",
    list: false,
};

const COOKIE_SECRET: SecretSource = SecretSource {
    setting: "cookie_secret",
    flag: "cookie-secret",
    variable: "PTYHUB_GATEWAY_COOKIE_SECRET",
    file_flag: "cookie-secret-file",
    file_variable: "PTYHUB_GATEWAY_COOKIE_SECRET_FILE",
    help: "Signs the web page's session cookies (at least 32 bytes). Every replica behind one address needs the same; without it each process makes its own, and a restart signs browsers out.",
    list: false,
};

/// A clap error that names a setting, never its value.
fn invalid_setting(message: String) -> clap::Error {
    clap::Error::raw(clap::error::ErrorKind::ValueValidation, message)
}

// The credential is typed but comes from a variable or a file ([`SecretSource`]), which clap's
// derive cannot express.
impl clap::FromArgMatches for GatewayCredential {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let token = SERVICE_TOKEN
            .read(matches)
            .map_err(|error| invalid_setting(error.to_string()))?
            .ok_or_else(|| invalid_setting("missing setting service_token: set PTYHUB_GATEWAY_SERVICE_TOKEN_FILE or PTYHUB_GATEWAY_SERVICE_TOKEN".to_owned()))?;
        ServiceCredential::new(token.expose_secret())
            .map(Self)
            .map_err(|error| invalid_setting(format!("invalid setting service_token: {error}")))
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for GatewayCredential {
    fn augment_args(command: clap::Command) -> clap::Command {
        command.args(SERVICE_TOKEN.arguments())
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        Self::augment_args(command)
    }
}

/// The gateway's TLS files, as `ptyhub_wire::TlsFiles` (which it derefs to). Paths, not
/// secrets: the key file's permissions guard the key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GatewayTls(pub TlsFiles);

impl std::ops::Deref for GatewayTls {
    type Target = TlsFiles;

    fn deref(&self) -> &TlsFiles {
        &self.0
    }
}

impl From<TlsFiles> for GatewayTls {
    fn from(files: TlsFiles) -> Self {
        Self(files)
    }
}

/// The TLS flags: (id, flag, variable, help).
const TLS_FLAGS: [(&str, &str, &str, &str); 5] = [
    (
        "tls_cert",
        "tls-cert",
        "PTYHUB_GATEWAY_TLS_CERT",
        "Serve HTTPS, WSS and gRPC over TLS on the one port with this certificate chain (PEM), with --tls-key",
    ),
    (
        "tls_key",
        "tls-key",
        "PTYHUB_GATEWAY_TLS_KEY",
        "The private key of --tls-cert (PEM)",
    ),
    (
        "tls_ca",
        "tls-ca",
        "PTYHUB_GATEWAY_TLS_CA",
        "CA certificates that session-api's and the brokers' certificates are checked against, for `https://` endpoints",
    ),
    (
        "tls_client_cert",
        "tls-client-cert",
        "PTYHUB_GATEWAY_TLS_CLIENT_CERT",
        "The certificate (PEM) presented to session-api and brokers that require client certificates (mutual TLS), with --tls-client-key. Default: --tls-cert",
    ),
    (
        "tls_client_key",
        "tls-client-key",
        "PTYHUB_GATEWAY_TLS_CLIENT_KEY",
        "The private key of --tls-client-cert (PEM)",
    ),
];

// `TlsFiles` is the wire crate's, shared by every service: the gateway names its flags here.
impl clap::FromArgMatches for GatewayTls {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let path = |id: &str| matches.get_one::<PathBuf>(id).cloned();
        Ok(Self(TlsFiles {
            cert: path("tls_cert"),
            key: path("tls_key"),
            ca: path("tls_ca"),
            require_client_cert: false,
            client_cert: path("tls_client_cert"),
            client_key: path("tls_client_key"),
        }))
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for GatewayTls {
    fn augment_args(command: clap::Command) -> clap::Command {
        TLS_FLAGS
            .iter()
            .fold(command, |command, (id, flag, variable, help)| {
                command.arg(
                    clap::Arg::new(*id)
                        .long(*flag)
                        .env(*variable)
                        .value_name("PEM")
                        .value_parser(clap::value_parser!(PathBuf))
                        .help(*help),
                )
            })
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        Self::augment_args(command)
    }
}

impl Config {
    /// The contract's ping interval.
    pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(25);

    /// The contract's keep-alive comment interval of session event streams.
    pub const DEFAULT_EVENTS_KEEP_ALIVE: Duration = Duration::from_secs(15);

    /// The HTTP/2 keepalive interval, and ping timeout, of connections to backends.
    pub const DEFAULT_BACKEND_KEEP_ALIVE: Duration = Duration::from_secs(20);

    /// The HTTP/2 keepalive interval, and ping timeout, of clients' connections.
    pub const DEFAULT_CLIENT_KEEP_ALIVE: Duration = Duration::from_secs(20);

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
            service_credential: GatewayCredential(service_credential),
            auth: AuthConfig::default(),
            allowed_origins: Vec::new(),
            static_dir: None,
            metrics_require_auth: true,
            heartbeat_interval: Self::DEFAULT_HEARTBEAT_INTERVAL,
            events_keep_alive: Self::DEFAULT_EVENTS_KEEP_ALIVE,
            backend_keep_alive: Self::DEFAULT_BACKEND_KEEP_ALIVE,
            client_keep_alive: Self::DEFAULT_CLIENT_KEEP_ALIVE,
            backend_timeout: Duration::from_secs(10),
            drain_delay: Duration::ZERO,
            shutdown_grace: Duration::from_secs(5),
            recordings: None,
            max_streams_per_principal: ptyhub_wire::limits::MAX_STREAMS_PER_PRINCIPAL,
            public_url: None,
            tls: GatewayTls::default(),
            allowed_hosts: Vec::new(),
            failed_auth_per_minute: Self::DEFAULT_FAILED_AUTH_PER_MINUTE,
            trust_forwarded_for: false,
            in_process_brokers: crate::InProcessBrokers::default(),
            readiness: crate::Readiness::default(),
            clock: crate::Clock::system(),
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
        if self.backend_keep_alive.is_zero() {
            return Err(ConfigError::new(
                "backend_keep_alive",
                "must be greater than zero",
            ));
        }
        if self.client_keep_alive.is_zero() {
            return Err(ConfigError::new(
                "client_keep_alive",
                "must be greater than zero",
            ));
        }
        if self.events_keep_alive.is_zero() {
            return Err(ConfigError::new(
                "events_keep_alive",
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

/// The plain (not secret) authentication flags: (id, flag, variable, help).
const JWT_AUDIENCE: (&str, &str, &str, &str) = (
    "jwt_audience",
    "jwt-audience",
    "PTYHUB_GATEWAY_JWT_AUDIENCE",
    "The audience every JWT must name in `aud` (for example https://ptyhub.example.com): a token minted for another service is refused",
);
const JWT_ISSUER: (&str, &str, &str, &str) = (
    "jwt_issuer",
    "jwt-issuer",
    "PTYHUB_GATEWAY_JWT_ISSUER",
    "The issuer every JWT's `iss` must be",
);

// The secrets come from variables or files ([`SecretSource`]), which clap's derive cannot
// express: the other settings are declared beside them here.
impl clap::FromArgMatches for AuthConfig {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let read = |source: &SecretSource| {
            source
                .read(matches)
                .map_err(|error| invalid_setting(error.to_string()))
        };
        Ok(Self {
            api_tokens: API_TOKENS
                .read_list(matches)
                .map_err(|error| invalid_setting(error.to_string()))?,
            jwt_hs256_secret: read(&JWT_HS256_SECRET)?,
            jwt_rs256_public_key_pem: matches.get_one::<String>("jwt_rs256_public_key").cloned(),
            allow_anonymous: matches.get_flag("insecure_allow_anonymous"),
            jwt_audience: matches.get_one::<String>(JWT_AUDIENCE.0).cloned(),
            jwt_issuer: matches.get_one::<String>(JWT_ISSUER.0).cloned(),
            cookie_secret: read(&COOKIE_SECRET)?,
            session_ttl: matches
                .get_one::<Duration>("session_ttl")
                .copied()
                .unwrap_or(Self::DEFAULT_SESSION_TTL),
        })
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for AuthConfig {
    fn augment_args(command: clap::Command) -> clap::Command {
        let text = |(id, flag, variable, help): (
            &'static str,
            &'static str,
            &'static str,
            &'static str,
        )| { clap::Arg::new(id).long(flag).env(variable).help(help) };
        [API_TOKENS, JWT_HS256_SECRET, COOKIE_SECRET]
            .iter()
            .fold(command, |command, source| command.args(source.arguments()))
            .arg(text(JWT_AUDIENCE))
            .arg(text(JWT_ISSUER))
            .arg(
                clap::Arg::new("jwt_rs256_public_key")
                    .long("jwt-rs256-public-key")
                    .env("PTYHUB_GATEWAY_JWT_RS256_PUBLIC_KEY")
                    .value_name("PEM")
                    .value_parser(read_public_key_file)
                    .help("PEM file with the RSA public key that verifies RS256 JWTs"),
            )
            .arg(
                clap::Arg::new("session_ttl")
                    .long("session-ttl")
                    .env("PTYHUB_GATEWAY_SESSION_TTL")
                    .default_value("12h")
                    .value_parser(parse_duration)
                    .help("How long a browser stays signed in (a JWT's own expiry comes first)"),
            )
            .arg(
                clap::Arg::new("insecure_allow_anonymous")
                    .long("insecure-allow-anonymous")
                    .env("PTYHUB_GATEWAY_INSECURE_ALLOW_ANONYMOUS")
                    .action(clap::ArgAction::SetTrue)
                    .help("Treat requests without a credential as admin. Only for a single-user machine"),
            )
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        Self::augment_args(command)
    }
}

/// `--metrics-public` (`true`, `false`, `yes`, `no`, `1`, `0`), turned around: whether
/// `/metrics` needs a credential.
fn metrics_require_auth(public: &str) -> Result<bool, String> {
    match public.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Ok(false),
        "false" | "no" | "off" | "0" => Ok(true),
        _ => Err(format!("{public:?} is not true or false")),
    }
}

/// The PEM text of `--jwt-rs256-public-key`'s file.
fn read_public_key_file(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|error| {
        format!("invalid setting jwt_rs256_public_key: cannot read {path}: {error}")
    })
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|error| format!("{error} (use for example 30s, 5m)"))
}

fn parse_recording_store(url: &str) -> Result<ptyhub_wire::RecordingStore, String> {
    ptyhub_wire::RecordingStore::open(url).map_err(|error| error.to_string())
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

    #[derive(Debug, clap::Parser)]
    struct Flags {
        #[command(flatten)]
        config: Config,
    }

    fn parse(args: &[&str]) -> Result<Config, String> {
        use clap::Parser as _;
        Flags::try_parse_from(std::iter::once("gateway").chain(args.iter().copied()))
            .map(|flags| flags.config)
            .map_err(|error| error.to_string())
    }

    #[test]
    fn event_streams_keep_alive_every_15_seconds_unless_configured() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let token = format!(
            "--service-token-file={}",
            secret_file(&dir, "service-token", "gateway-token-0123456789")
        );
        let library = Config::new("http://127.0.0.1:50051", credential());
        assert_eq!(library.events_keep_alive, Duration::from_secs(15));
        let defaults = parse(&[&token]).expect("defaults");
        assert_eq!(defaults.events_keep_alive, Duration::from_secs(15));
        let configured = parse(&[&token, "--events-keep-alive=2s"]).expect("a keep-alive");
        assert_eq!(configured.events_keep_alive, Duration::from_secs(2));
        let mut zero = library;
        zero.events_keep_alive = Duration::ZERO;
        let refused = zero.validate().expect_err("no keep-alive of zero");
        assert_eq!(refused.setting, "events_keep_alive");
    }

    #[test]
    fn backend_connections_keep_alive_every_20_seconds_unless_configured() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let token = format!(
            "--service-token-file={}",
            secret_file(&dir, "service-token", "gateway-token-0123456789")
        );
        let library = Config::new("http://127.0.0.1:50051", credential());
        assert_eq!(library.backend_keep_alive, Duration::from_secs(20));
        let defaults = parse(&[&token]).expect("defaults");
        assert_eq!(defaults.backend_keep_alive, Duration::from_secs(20));
        let configured = parse(&[&token, "--backend-keep-alive=500ms"]).expect("a keep-alive");
        assert_eq!(configured.backend_keep_alive, Duration::from_millis(500));
        let mut zero = library;
        zero.backend_keep_alive = Duration::ZERO;
        let refused = zero.validate().expect_err("no keep-alive of zero");
        assert_eq!(refused.setting, "backend_keep_alive");
    }

    #[test]
    fn client_connections_keep_alive_every_20_seconds_unless_configured() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let token = format!(
            "--service-token-file={}",
            secret_file(&dir, "service-token", "gateway-token-0123456789")
        );
        let library = Config::new("http://127.0.0.1:50051", credential());
        assert_eq!(library.client_keep_alive, Duration::from_secs(20));
        let defaults = parse(&[&token]).expect("defaults");
        assert_eq!(defaults.client_keep_alive, Duration::from_secs(20));
        let configured = parse(&[&token, "--client-keep-alive=750ms"]).expect("a keep-alive");
        assert_eq!(configured.client_keep_alive, Duration::from_millis(750));
        let mut zero = library;
        zero.client_keep_alive = Duration::ZERO;
        let refused = zero.validate().expect_err("no keep-alive of zero");
        assert_eq!(refused.setting, "client_keep_alive");
    }

    /// A file in `dir` holding `secret` and a newline.
    fn secret_file(dir: &tempfile::TempDir, name: &str, secret: &str) -> String {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("{secret}\n")).expect("write a secret");
        path.display().to_string()
    }

    #[test]
    fn flags_and_secret_files_make_the_config() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let token = secret_file(&dir, "service-token", "gateway-token-0123456789");
        let api_tokens = secret_file(
            &dir,
            "api-tokens",
            "first-api-token-0123456789abcdef0123\nsecond-api-token-0123456789abcdef012",
        );
        let cookie = secret_file(&dir, "cookie", "cookie-secret-0123456789abcdef0123456789");
        let config = parse(&[
            &format!("--service-token-file={token}"),
            &format!("--api-token-file={api_tokens}"),
            &format!("--cookie-secret-file={cookie}"),
            "--session-api=https://session-api:50051",
            "--heartbeat-interval=5s",
            "--allowed-origin=https://a.example,https://b.example",
            "--tls-ca=/etc/ptyhub/ca.pem",
            "--metrics-public",
            "--insecure-allow-anonymous",
        ])
        .expect("a gateway config");
        assert!(
            config
                .service_credential
                .matches("gateway-token-0123456789")
        );
        assert_eq!(config.auth.api_tokens.len(), 2);
        assert_eq!(
            config.auth.api_tokens[1].expose_secret(),
            "second-api-token-0123456789abcdef012"
        );
        assert_eq!(
            config
                .auth
                .cookie_secret
                .as_ref()
                .map(ExposeSecret::expose_secret),
            Some("cookie-secret-0123456789abcdef0123456789")
        );
        assert_eq!(config.session_api_endpoint, "https://session-api:50051");
        assert_eq!(config.heartbeat_interval, Duration::from_secs(5));
        assert_eq!(
            config.allowed_origins,
            ["https://a.example", "https://b.example"]
        );
        assert_eq!(
            config.tls.ca.as_deref(),
            Some(std::path::Path::new("/etc/ptyhub/ca.pem"))
        );
        assert!(!config.metrics_require_auth, "--metrics-public");
        assert!(config.auth.allow_anonymous);
        assert!(config.validate().is_ok());
        let printed = format!("{config:?}");
        assert!(!printed.contains("0123456789"), "{printed}");

        // The defaults are the library's.
        let defaults = parse(&[&format!("--service-token-file={token}")]).expect("defaults");
        let library = Config::new("http://127.0.0.1:50051", credential());
        assert_eq!(defaults.session_api_endpoint, library.session_api_endpoint);
        assert_eq!(defaults.heartbeat_interval, library.heartbeat_interval);
        assert_eq!(defaults.backend_timeout, library.backend_timeout);
        assert_eq!(defaults.shutdown_grace, library.shutdown_grace);
        assert_eq!(defaults.auth.session_ttl, library.auth.session_ttl);
        assert_eq!(defaults.metrics_require_auth, library.metrics_require_auth);
        assert_eq!(
            defaults.max_streams_per_principal,
            library.max_streams_per_principal
        );
    }

    #[test]
    fn secrets_on_the_command_line_are_refused_and_a_missing_one_is_named() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let token = format!(
            "--service-token-file={}",
            secret_file(&dir, "service-token", "gateway-token-0123456789")
        );
        for flag in [
            "--api-token",
            "--jwt-hs256-secret",
            "--cookie-secret",
            "--service-token",
        ] {
            let refused = parse(&[&token, flag, "a-secret-on-the-command-line-0123456789"])
                .expect_err("refused");
            assert!(refused.contains("is refused"), "{flag}: {refused}");
            assert!(
                !refused.contains("a-secret-on-the-command-line"),
                "{refused}"
            );
        }
        let missing = parse(&[]).expect_err("no service token");
        assert!(
            missing.contains("missing setting service_token"),
            "{missing}"
        );
        let unreadable = parse(&[&token, "--jwt-rs256-public-key=/nonexistent/key.pem"])
            .expect_err("an unreadable key");
        assert!(
            unreadable.contains("invalid setting jwt_rs256_public_key"),
            "{unreadable}"
        );
    }

    /// Run by [`the_variables_of_the_deploy_manifests_configure_the_gateway`] in a child
    /// process whose environment holds them.
    #[test]
    #[ignore = "runs in a child process with its variables set"]
    fn child_parses_the_deploy_manifests_variables() {
        if !ptyhub_test_support::child::is_child() {
            return;
        }
        let config = parse(&[]).expect("the manifests' variables parse");
        assert!(
            config
                .service_credential
                .matches("gateway-token-0123456789")
        );
        assert_eq!(config.auth.api_tokens.len(), 1);
        assert!(config.auth.cookie_secret.is_some());
        assert_eq!(
            config.session_api_endpoint,
            "https://session-api.ptyhub.svc.cluster.local:50051"
        );
        assert_eq!(
            config.tls.client_cert.as_deref(),
            Some(std::path::Path::new("/etc/ptyhub/secrets/tls.crt"))
        );
        assert_eq!(
            config.tls.cert.as_deref(),
            Some(std::path::Path::new("/run/secrets/public-tls-cert"))
        );
        assert_eq!(
            config.public_url.as_deref(),
            Some("https://ptyhub.example.com")
        );
        assert_eq!(config.allowed_origins, ["https://terminals.example.com"]);
        assert_eq!(
            config.static_dir.as_deref(),
            Some(std::path::Path::new("/usr/share/ptyhub/web"))
        );
        assert_eq!(config.shutdown_grace, Duration::from_secs(20));
        assert!(config.trust_forwarded_for);
        assert!(config.validate().is_ok());
        assert!(!format!("{config:?}").contains("0123456789"));
    }

    /// The variables `deploy/kubernetes/gateway.yaml` and `deploy/compose.yaml` give the
    /// gateway, read by the gateway's own configuration.
    #[test]
    fn the_variables_of_the_deploy_manifests_configure_the_gateway() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let variables = [
            (
                "PTYHUB_GATEWAY_SESSION_API",
                "https://session-api.ptyhub.svc.cluster.local:50051".to_owned(),
            ),
            (
                "PTYHUB_GATEWAY_TLS_CA",
                "/etc/ptyhub/secrets/ca.crt".to_owned(),
            ),
            (
                "PTYHUB_GATEWAY_TLS_CLIENT_CERT",
                "/etc/ptyhub/secrets/tls.crt".to_owned(),
            ),
            (
                "PTYHUB_GATEWAY_TLS_CLIENT_KEY",
                "/etc/ptyhub/secrets/tls.key".to_owned(),
            ),
            (
                "PTYHUB_GATEWAY_TLS_CERT",
                "/run/secrets/public-tls-cert".to_owned(),
            ),
            (
                "PTYHUB_GATEWAY_TLS_KEY",
                "/run/secrets/public-tls-key".to_owned(),
            ),
            (
                "PTYHUB_GATEWAY_PUBLIC_URL",
                "https://ptyhub.example.com".to_owned(),
            ),
            (
                "PTYHUB_GATEWAY_SERVICE_TOKEN_FILE",
                secret_file(&dir, "service-token", "gateway-token-0123456789"),
            ),
            (
                "PTYHUB_GATEWAY_API_TOKEN_FILE",
                secret_file(
                    &dir,
                    "api-tokens",
                    "an-api-token-0123456789abcdef0123456789",
                ),
            ),
            (
                "PTYHUB_GATEWAY_COOKIE_SECRET_FILE",
                secret_file(
                    &dir,
                    "cookie-secret",
                    "a-cookie-secret-0123456789abcdef0123456789",
                ),
            ),
            (
                "PTYHUB_GATEWAY_ALLOWED_ORIGINS",
                "https://terminals.example.com".to_owned(),
            ),
            (
                "PTYHUB_GATEWAY_STATIC_DIR",
                "/usr/share/ptyhub/web".to_owned(),
            ),
            ("PTYHUB_GATEWAY_SHUTDOWN_GRACE", "20s".to_owned()),
            ("PTYHUB_GATEWAY_TRUST_FORWARDED_FOR", "true".to_owned()),
        ];
        ptyhub_test_support::child::assert_passes_in_child(
            "config::tests::child_parses_the_deploy_manifests_variables",
            &variables,
        );
    }
}
