//! The gateway binary: reads flags and `PTYHUB_GATEWAY_*` variables into a [`gateway::Config`],
//! starts logging, binds, and runs until SIGINT or SIGTERM.

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use gateway::{AuthConfig, Config, SecretString, ServiceCredential};
use ptyhub_wire::{read_secret_lines, secret_from};

/// ptyhub's browser edge: REST, terminal WebSockets and gRPC-web on one port.
#[derive(Debug, Parser)]
#[command(name = "gateway", version)]
struct Args {
    /// Address to listen on.
    #[arg(long, env = "PTYHUB_GATEWAY_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,

    /// The URL gRPC clients outside the cluster reach this gateway at (for example
    /// https://ptyhub.example.com), handed out as the `broker_endpoint` of attach targets.
    /// Default: the scheme and authority each request came in with.
    #[arg(long, env = "PTYHUB_GATEWAY_PUBLIC_URL")]
    public_url: Option<String>,

    /// session-api's gRPC endpoint.
    #[arg(
        long,
        env = "PTYHUB_GATEWAY_SESSION_API",
        default_value = "http://127.0.0.1:50051"
    )]
    session_api: String,

    /// The gateway's own credential, sent to session-api (at least 16 printable ASCII
    /// characters; session-api knows it as a gateway token).
    #[arg(long, env = "PTYHUB_GATEWAY_SERVICE_TOKEN", hide_env_values = true)]
    service_token: Option<String>,

    /// A file holding `--service-token`: secrets belong in files or variables, never on a
    /// command line, which every user of the host reads in /proc.
    #[arg(long, env = "PTYHUB_GATEWAY_SERVICE_TOKEN_FILE")]
    service_token_file: Option<PathBuf>,

    /// Static API tokens (admin over every instance), comma-separated.
    #[arg(
        long = "api-token",
        env = "PTYHUB_GATEWAY_API_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    api_tokens: Vec<String>,

    /// A file of static API tokens, one per line.
    #[arg(long, env = "PTYHUB_GATEWAY_API_TOKEN_FILE")]
    api_token_file: Option<PathBuf>,

    /// Secret that verifies HS256 JWTs (at least 16 bytes).
    #[arg(long, env = "PTYHUB_GATEWAY_JWT_HS256_SECRET", hide_env_values = true)]
    jwt_hs256_secret: Option<String>,

    /// A file holding `--jwt-hs256-secret`.
    #[arg(long, env = "PTYHUB_GATEWAY_JWT_HS256_SECRET_FILE")]
    jwt_hs256_secret_file: Option<PathBuf>,

    /// The audience every JWT must name in `aud` (for example https://ptyhub.example.com):
    /// a token minted for another service is refused.
    #[arg(long, env = "PTYHUB_GATEWAY_JWT_AUDIENCE")]
    jwt_audience: Option<String>,

    /// The issuer every JWT's `iss` must be.
    #[arg(long, env = "PTYHUB_GATEWAY_JWT_ISSUER")]
    jwt_issuer: Option<String>,

    /// PEM file with the RSA public key that verifies RS256 JWTs.
    #[arg(long, env = "PTYHUB_GATEWAY_JWT_RS256_PUBLIC_KEY")]
    jwt_rs256_public_key: Option<PathBuf>,

    /// Signs the web page's session cookies (at least 32 bytes). Every replica behind one
    /// address needs the same; without it each process makes its own, and a restart signs
    /// browsers out.
    #[arg(long, env = "PTYHUB_GATEWAY_COOKIE_SECRET", hide_env_values = true)]
    cookie_secret: Option<String>,

    /// A file holding `--cookie-secret`.
    #[arg(long, env = "PTYHUB_GATEWAY_COOKIE_SECRET_FILE")]
    cookie_secret_file: Option<PathBuf>,

    /// How long a browser stays signed in (a JWT's own expiry comes first).
    #[arg(long, env = "PTYHUB_GATEWAY_SESSION_TTL", default_value = "12h", value_parser = humantime::parse_duration)]
    session_ttl: Duration,

    /// Host names browsers may reach this gateway by besides the `--public-url`'s, loopback
    /// names and IP addresses, comma-separated (`*` for any): a page of another name that
    /// resolves here (DNS rebinding) is refused.
    #[arg(
        long = "allowed-host",
        env = "PTYHUB_GATEWAY_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    allowed_hosts: Vec<String>,

    /// Refused credentials one client address may present a minute before its refused ones are
    /// answered 429 until the allowance refills (a valid credential always passes); 0 turns the
    /// limit off.
    #[arg(long, env = "PTYHUB_GATEWAY_FAILED_AUTH_PER_MINUTE", default_value_t = gateway::Config::DEFAULT_FAILED_AUTH_PER_MINUTE)]
    failed_auth_per_minute: u32,

    /// Take the client address from the last X-Forwarded-For entry (only behind a proxy that
    /// sets it: clients can send the header themselves).
    #[arg(long, env = "PTYHUB_GATEWAY_TRUST_FORWARDED_FOR")]
    trust_forwarded_for: bool,

    /// Origins allowed to open WebSockets and call gRPC-web, comma-separated (`*` for any).
    /// Empty allows only the gateway's own origin.
    #[arg(
        long = "allowed-origin",
        env = "PTYHUB_GATEWAY_ALLOWED_ORIGINS",
        value_delimiter = ','
    )]
    allowed_origins: Vec<String>,

    /// Serve the web page from this directory (`index.html` and `assets/`) instead of the page
    /// built into the binary.
    #[arg(long, env = "PTYHUB_GATEWAY_STATIC_DIR")]
    static_dir: Option<PathBuf>,

    /// The recordings store the brokers write: a directory or `s3://bucket/prefix` (with the
    /// usual `AWS_*` variables). Unset: recordings are not served.
    #[arg(long, env = "PTYHUB_GATEWAY_RECORDINGS", value_parser = parse_recording_store)]
    recordings: Option<ptyhub_wire::RecordingStore>,

    /// Log JSON lines instead of text.
    #[arg(long, env = "PTYHUB_GATEWAY_LOG_JSON")]
    log_json: bool,

    /// Serve `/metrics` without a credential.
    #[arg(long, env = "PTYHUB_GATEWAY_METRICS_PUBLIC")]
    metrics_public: bool,

    /// Interval of WebSocket heartbeats; a client silent for two is dropped.
    #[arg(long, env = "PTYHUB_GATEWAY_HEARTBEAT_INTERVAL", default_value = "25s", value_parser = humantime::parse_duration)]
    heartbeat_interval: Duration,

    /// How long a call to session-api may take; a screen wait may take its own timeout plus
    /// this.
    #[arg(long, env = "PTYHUB_GATEWAY_BACKEND_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    backend_timeout: Duration,

    /// After SIGTERM, how long to keep serving with /readyz at 503 before closing, so load
    /// balancers stop sending new clients first.
    #[arg(long, env = "PTYHUB_GATEWAY_DRAIN_DELAY", default_value = "0s", value_parser = humantime::parse_duration)]
    drain_delay: Duration,

    /// How long shutdown waits for open WebSockets.
    #[arg(long, env = "PTYHUB_GATEWAY_SHUTDOWN_GRACE", default_value = "5s", value_parser = humantime::parse_duration)]
    shutdown_grace: Duration,

    /// The most terminal streams (WebSockets and relayed gRPC Attach streams together) one
    /// principal may hold open at this gateway.
    #[arg(long, env = "PTYHUB_GATEWAY_MAX_STREAMS_PER_PRINCIPAL",
          default_value_t = ptyhub_wire::limits::MAX_STREAMS_PER_PRINCIPAL)]
    max_streams_per_principal: usize,

    /// Serve HTTPS, WSS and gRPC over TLS on the one port with this certificate chain (PEM),
    /// with --tls-key.
    #[arg(long = "tls-cert", env = "PTYHUB_GATEWAY_TLS_CERT", value_name = "PEM")]
    tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM).
    #[arg(long = "tls-key", env = "PTYHUB_GATEWAY_TLS_KEY", value_name = "PEM")]
    tls_key: Option<PathBuf>,

    /// CA certificates that session-api's and the brokers' certificates are checked against,
    /// for `https://` endpoints.
    #[arg(long = "tls-ca", env = "PTYHUB_GATEWAY_TLS_CA", value_name = "PEM")]
    tls_ca: Option<PathBuf>,

    /// The certificate (PEM) presented to session-api and brokers that require client
    /// certificates (mutual TLS), with --tls-client-key. Default: --tls-cert.
    #[arg(
        long = "tls-client-cert",
        env = "PTYHUB_GATEWAY_TLS_CLIENT_CERT",
        value_name = "PEM"
    )]
    tls_client_cert: Option<PathBuf>,

    /// The private key of --tls-client-cert (PEM).
    #[arg(
        long = "tls-client-key",
        env = "PTYHUB_GATEWAY_TLS_CLIENT_KEY",
        value_name = "PEM"
    )]
    tls_client_key: Option<PathBuf>,

    /// Treat requests without a credential as admin. Only for a single-user machine.
    #[arg(long, env = "PTYHUB_GATEWAY_INSECURE_ALLOW_ANONYMOUS")]
    insecure_allow_anonymous: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_logging(args.log_json);
    let jwt_rs256_public_key_pem = match &args.jwt_rs256_public_key {
        Some(path) => Some(std::fs::read_to_string(path).with_context(|| {
            format!(
                "invalid setting jwt_rs256_public_key: cannot read {}",
                path.display()
            )
        })?),
        None => None,
    };
    // Parsed here rather than by clap, whose error would print the refused value.
    let service_token = secret_from(
        "service_token",
        args.service_token,
        args.service_token_file.as_deref(),
    )?
    .context("missing setting service_token: set PTYHUB_GATEWAY_SERVICE_TOKEN_FILE or PTYHUB_GATEWAY_SERVICE_TOKEN")?;
    let service_credential = ServiceCredential::new(service_token)
        .map_err(|error| anyhow::anyhow!("invalid setting service_token: {error}"))?;
    let mut api_tokens = args.api_tokens;
    if let Some(path) = &args.api_token_file {
        api_tokens.extend(read_secret_lines("api_token", path)?);
    }
    let jwt_hs256_secret = secret_from(
        "jwt_hs256_secret",
        args.jwt_hs256_secret,
        args.jwt_hs256_secret_file.as_deref(),
    )?;
    let cookie_secret = secret_from(
        "cookie_secret",
        args.cookie_secret,
        args.cookie_secret_file.as_deref(),
    )?;
    let mut config = Config::new(args.session_api, service_credential);
    config.auth = AuthConfig {
        api_tokens: api_tokens.into_iter().map(SecretString::from).collect(),
        jwt_hs256_secret: jwt_hs256_secret.map(SecretString::from),
        jwt_rs256_public_key_pem,
        allow_anonymous: args.insecure_allow_anonymous,
        jwt_audience: args.jwt_audience,
        jwt_issuer: args.jwt_issuer,
        cookie_secret: cookie_secret.map(SecretString::from),
        session_ttl: args.session_ttl,
    };
    config.allowed_hosts = args.allowed_hosts;
    config.failed_auth_per_minute = args.failed_auth_per_minute;
    config.trust_forwarded_for = args.trust_forwarded_for;
    config.allowed_origins = args.allowed_origins;
    config.static_dir = args.static_dir;
    config.recordings = args.recordings;
    config.metrics_require_auth = !args.metrics_public;
    config.heartbeat_interval = args.heartbeat_interval;
    config.backend_timeout = args.backend_timeout;
    config.drain_delay = args.drain_delay;
    config.shutdown_grace = args.shutdown_grace;
    config.max_streams_per_principal = args.max_streams_per_principal;
    config.public_url = args.public_url;
    config.tls = ptyhub_wire::TlsFiles {
        cert: args.tls_cert,
        key: args.tls_key,
        ca: args.tls_ca,
        require_client_cert: false,
        client_cert: args.tls_client_cert,
        client_key: args.tls_client_key,
    };
    config.validate()?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    gateway::run(config, listener, shutdown_signal()).await?;
    Ok(())
}

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(terminate) => terminate,
                Err(error) => {
                    tracing::error!(%error, "cannot listen for SIGTERM");
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => tracing::info!("SIGINT received, shutting down"),
            _ = terminate.recv() => tracing::info!("SIGTERM received, shutting down"),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}

fn parse_recording_store(url: &str) -> Result<ptyhub_wire::RecordingStore, String> {
    ptyhub_wire::RecordingStore::open(url).map_err(|error| error.to_string())
}
