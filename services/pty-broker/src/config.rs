//! The broker's configuration: defaults, then `PTYHUB_BROKER_*` environment variables, then flags.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use attach_ticket::TicketKey;
use ptyhub_wire::ServiceCredential;

/// Everything a broker needs to run. Build it with [`Config::new`] in code, or parse it from
/// flags and `PTYHUB_BROKER_*` variables with `clap` (as `main.rs` does).
#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// Bytes of output kept per session for replay on reattach.
    #[arg(long, env = "PTYHUB_BROKER_RING_BYTES", default_value_t = Config::DEFAULT_RING_BYTES,
          value_parser = clap::value_parser!(u64).range(1024..=1 << 30))]
    pub ring_bytes: u64,

    /// Rows of scrollback each session's screen keeps (its terminal emulator, behind snapshots on
    /// attach and the screen API).
    #[arg(long, env = "PTYHUB_BROKER_SCROLLBACK_LINES", default_value_t = Config::DEFAULT_SCROLLBACK_LINES,
          value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub scrollback_lines: u32,

    /// Keep a terminal emulator per session (snapshots on attach, the screen API). Without one,
    /// attaches always replay raw bytes and the screen calls answer FAILED_PRECONDITION; the
    /// emulator costs CPU on heavy output (BENCHMARKS.md).
    #[arg(long, env = "PTYHUB_BROKER_SCREENS", default_value_t = true, action = clap::ArgAction::Set)]
    pub screens: bool,

    /// How long an exited session keeps its final output and exit status for late attaches.
    #[arg(long, env = "PTYHUB_BROKER_TOMBSTONE", default_value = "5m", value_parser = parse_duration)]
    pub tombstone: Duration,

    /// A session with no attached client for this long is closed (reason idle_reaped).
    #[arg(long, env = "PTYHUB_BROKER_DETACHED_TIMEOUT", default_value = "30m", value_parser = parse_duration)]
    pub detached_timeout: Duration,

    /// Wait between SIGHUP/SIGTERM and SIGKILL when ending a session's process group.
    #[arg(long, env = "PTYHUB_BROKER_KILL_GRACE", default_value = "2s", value_parser = parse_duration)]
    pub kill_grace: Duration,

    /// How long a graceful shutdown may take before the server is stopped hard.
    #[arg(long, env = "PTYHUB_BROKER_SHUTDOWN_GRACE", default_value = "5s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,

    /// Interval of HTTP/2 keepalive pings; a peer that does not answer within the same time again
    /// is treated as gone.
    #[arg(long, env = "PTYHUB_BROKER_KEEPALIVE", default_value = "20s", value_parser = parse_duration)]
    pub keepalive_interval: Duration,

    /// Token that session-api sends as `authorization: Bearer <token>` on every internal call,
    /// and that the broker sends to session-api when it registers (at least 16 printable ASCII
    /// characters).
    #[arg(long, env = "PTYHUB_BROKER_SERVICE_TOKEN", hide_env_values = true)]
    pub service_token: ServiceCredential,

    /// Secret shared with session-api to verify attach tickets (at least 16 bytes).
    #[arg(long = "ticket-secret", env = "PTYHUB_BROKER_TICKET_SECRET", hide_env_values = true,
          value_parser = parse_ticket_key)]
    pub ticket_key: TicketKey,

    /// Where the broker records the sessions it started (local and Docker), so that the next
    /// start after a crash ends any process that survived it. No record is kept when unset.
    #[arg(long, env = "PTYHUB_BROKER_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// This broker's name in logs and in session-api's registry.
    #[arg(long, env = "PTYHUB_BROKER_ID", default_value = "local")]
    pub broker_id: String,

    /// session-api's gRPC URL: the broker registers there under `--broker-id` and sends
    /// heartbeats, so session-api needs no static list of brokers. Unset: no registration.
    #[arg(long, env = "PTYHUB_BROKER_SESSION_API", value_parser = parse_endpoint)]
    pub session_api: Option<String>,

    /// The URL session-api and gateways reach this broker at, as registered. Default:
    /// `http://` and the listen address, which then must not be 0.0.0.0 or [::].
    #[arg(long, env = "PTYHUB_BROKER_ADVERTISE", value_parser = parse_endpoint)]
    pub advertise: Option<String>,

    /// Which runtimes to offer (comma separated): `local` runs on this host, `docker` in
    /// containers of the Docker engine.
    #[arg(
        long,
        env = "PTYHUB_BROKER_BACKENDS",
        value_delimiter = ',',
        default_value = "local"
    )]
    pub backends: Vec<BackendKind>,

    #[command(flatten)]
    pub docker: DockerConfig,
}

impl Config {
    pub const DEFAULT_RING_BYTES: u64 = 1 << 20;
    pub const DEFAULT_SCROLLBACK_LINES: u32 = ptyhub_wire::limits::DEFAULT_SCROLLBACK_LINES as u32;

    /// The defaults, with the two secrets every broker needs.
    pub fn new(service_token: ServiceCredential, ticket_key: TicketKey) -> Self {
        Self {
            ring_bytes: Self::DEFAULT_RING_BYTES,
            scrollback_lines: Self::DEFAULT_SCROLLBACK_LINES,
            screens: true,
            tombstone: Duration::from_secs(5 * 60),
            detached_timeout: Duration::from_secs(30 * 60),
            kill_grace: Duration::from_secs(2),
            shutdown_grace: Duration::from_secs(5),
            keepalive_interval: Duration::from_secs(20),
            service_token,
            ticket_key,
            data_dir: None,
            broker_id: "local".to_owned(),
            session_api: None,
            advertise: None,
            backends: vec![BackendKind::Local],
            docker: DockerConfig::default(),
        }
    }
}

/// Settings of the Docker runtime.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct DockerConfig {
    /// Docker engine address (`unix:///var/run/docker.sock`, `tcp://...`); the usual
    /// `DOCKER_HOST` resolution when unset.
    #[arg(long = "docker-host", env = "PTYHUB_BROKER_DOCKER_HOST")]
    pub host: Option<String>,
}

/// A runtime the broker can offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum BackendKind {
    Local,
    Docker,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Local => "local",
            BackendKind::Docker => "docker",
        })
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|error| format!("{error} (use for example 30s, 5m)"))
}

/// An `http://` or `https://` URL with a host, as tonic can dial it.
pub(crate) fn parse_endpoint(text: &str) -> Result<String, String> {
    if !(text.starts_with("http://") || text.starts_with("https://")) {
        return Err(format!("{text:?} must be an http:// or https:// URL"));
    }
    tonic::transport::Endpoint::from_shared(text.to_owned())
        .map_err(|error| format!("{text:?} is not a valid URL: {error}"))?;
    Ok(text.trim_end_matches('/').to_owned())
}

fn parse_ticket_key(secret: &str) -> Result<TicketKey, String> {
    TicketKey::new(secret.as_bytes().to_vec()).map_err(|error| error.to_string())
}
