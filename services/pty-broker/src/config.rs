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

    /// A session's screen with no new output for this long sleeps: it is kept as its own
    /// snapshot, compressed, and woken when next needed (an idle 80x24 screen costs a few KiB
    /// instead of 60 and more).
    #[arg(long, env = "PTYHUB_BROKER_SCREEN_SLEEP", default_value = "30s", value_parser = parse_duration)]
    pub screen_sleep: Duration,

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

    #[command(flatten)]
    pub recordings: RecordingConfig,
}

/// Where and how long the broker keeps session recordings.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RecordingConfig {
    /// The recordings store: a directory (`/var/lib/ptyhub/recordings`, `file:///...`) or
    /// `s3://bucket/prefix` (credentials and endpoint from the usual `AWS_*` variables). Every
    /// gateway reads recordings from the same store. Unset: sessions are not recorded, whatever
    /// their instance asks.
    #[arg(long = "recordings", env = "PTYHUB_BROKER_RECORDINGS", value_parser = parse_recording_store)]
    pub store: Option<ptyhub_wire::RecordingStore>,

    /// Local directory for recordings being written (published to the store when their session
    /// closes; what a killed broker left here is published at its next start). Default:
    /// `recording-spool` in `--data-dir`, else a directory of this run's own in the temporary
    /// directory (then a kill loses the recordings in progress).
    #[arg(long = "recording-spool", env = "PTYHUB_BROKER_RECORDING_SPOOL")]
    pub spool: Option<PathBuf>,

    /// Recordings older than this are deleted (`0s`: kept whatever their age).
    #[arg(long = "recording-max-age", env = "PTYHUB_BROKER_RECORDING_MAX_AGE", default_value = "30days",
          value_parser = parse_duration)]
    pub max_age: Duration,

    /// The oldest recordings are deleted while all of them take more bytes than this (`0`: no
    /// bound).
    #[arg(long = "recording-max-bytes", env = "PTYHUB_BROKER_RECORDING_MAX_BYTES",
          default_value_t = RecordingConfig::DEFAULT_MAX_BYTES)]
    pub max_bytes: u64,
}

impl RecordingConfig {
    pub const DEFAULT_MAX_BYTES: u64 = 10 << 30;
    pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);
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
            screen_sleep: Duration::from_secs(30),
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
            recordings: RecordingConfig {
                store: None,
                spool: None,
                max_age: RecordingConfig::DEFAULT_MAX_AGE,
                max_bytes: RecordingConfig::DEFAULT_MAX_BYTES,
            },
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

fn parse_recording_store(url: &str) -> Result<ptyhub_wire::RecordingStore, String> {
    ptyhub_wire::RecordingStore::open(url).map_err(|error| error.to_string())
}

fn parse_ticket_key(secret: &str) -> Result<TicketKey, String> {
    TicketKey::new(secret.as_bytes().to_vec()).map_err(|error| error.to_string())
}
