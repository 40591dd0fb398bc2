//! The broker's configuration: defaults, then `PTYHUB_BROKER_*` environment variables, then flags.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use ptyhub_attach_ticket::TicketVerifyingKey;
use ptyhub_wire::{ExposeSecret as _, SecretSource, ServiceCredential};

use crate::policy::SpawnPolicy;

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

    /// A full-screen program whose output stays quiet this long is `idle` (docs/CONTRACT.md,
    /// "Terminal state").
    #[arg(long, env = "PTYHUB_BROKER_IDLE_AFTER", default_value = "5s", value_parser = parse_duration)]
    pub idle_after: Duration,

    /// Bytes a second at most that a session reads its output at while another session of this
    /// broker is typed in, so that a flood cannot slow the echo of the other's keystrokes; `0`
    /// reads every session's output as fast as it comes. Output waits in the PTY meanwhile:
    /// nothing is lost (docs/CONTRACT.md, "Typing first").
    #[arg(long, env = "PTYHUB_BROKER_FLOOD_RATE_WHILE_TYPING",
          default_value_t = Config::DEFAULT_FLOOD_RATE_WHILE_TYPING)]
    pub flood_rate_while_typing: u64,

    /// How many of its commands each session keeps (the oldest go first).
    #[arg(long, env = "PTYHUB_BROKER_COMMANDS_KEPT", default_value_t = crate::activity::DEFAULT_COMMANDS_KEPT)]
    pub commands_kept: usize,

    /// How long a graceful shutdown may take before the server is stopped hard.
    #[arg(long, env = "PTYHUB_BROKER_SHUTDOWN_GRACE", default_value = "5s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,

    /// Interval of HTTP/2 keepalive pings; a peer that does not answer within the same time again
    /// is treated as gone.
    #[arg(long, env = "PTYHUB_BROKER_KEEPALIVE", default_value = "20s", value_parser = parse_duration)]
    pub keepalive_interval: Duration,

    /// The credentials (the broker's own, or session-api's) and session-api's ticket public key.
    #[command(flatten)]
    pub secrets: BrokerSecrets,

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

    /// Which containers and users sessions may have, whatever session-api asks.
    #[command(flatten)]
    pub policy: SpawnPolicy,

    /// TLS of the gRPC port and of the calls to session-api.
    #[command(flatten)]
    pub tls: BrokerTls,
}

/// The broker's TLS files. Paths, not secrets: the key file's permissions guard the key.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BrokerTls {
    /// Serve gRPC over TLS with this certificate chain (PEM), with --tls-key.
    #[arg(long = "tls-cert", env = "PTYHUB_BROKER_TLS_CERT", value_name = "PEM")]
    pub cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long = "tls-key", env = "PTYHUB_BROKER_TLS_KEY", value_name = "PEM")]
    pub key: Option<PathBuf>,
    /// CA certificates to trust: session-api's when --session-api is https://, and clients'
    /// under --tls-client-auth.
    #[arg(long = "tls-ca", env = "PTYHUB_BROKER_TLS_CA", value_name = "PEM")]
    pub ca: Option<PathBuf>,
    /// Serve only clients (session-api, gateways) with a certificate --tls-ca signed: mutual
    /// TLS. The broker presents --tls-cert to session-api in turn.
    #[arg(long = "tls-client-auth", env = "PTYHUB_BROKER_TLS_CLIENT_AUTH")]
    pub client_auth: bool,
}

impl BrokerTls {
    pub fn files(&self) -> ptyhub_wire::TlsFiles {
        ptyhub_wire::TlsFiles {
            cert: self.cert.clone(),
            key: self.key.clone(),
            ca: self.ca.clone(),
            require_client_cert: self.client_auth,
            client_cert: None,
            client_key: None,
        }
    }
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
    pub const DEFAULT_FLOOD_RATE_WHILE_TYPING: u64 = 512 << 10;
    pub const DEFAULT_SCROLLBACK_LINES: u32 = ptyhub_wire::limits::DEFAULT_SCROLLBACK_LINES as u32;

    /// The defaults, for a broker with a credential of its own (`--service-token-file`), the one it
    /// registers with: it admits on its control calls only the credential session-api derives
    /// from it ([`ServiceCredential::broker_control_credential`]), which opens no other broker.
    /// `ticket_public_key` checks attach tickets.
    pub fn with_own_credential(
        service_token: ServiceCredential,
        ticket_public_key: TicketVerifyingKey,
    ) -> Self {
        let mut config = Self::new(service_token.broker_control_credential(), ticket_public_key);
        config.secrets.service_token = Some(service_token);
        config
    }

    /// The defaults, for a broker without a credential of its own, which session-api knows from
    /// its configuration (`--broker id=endpoint`) and which never registers: its control calls
    /// admit `session_api_token`, session-api's own credential. `ticket_public_key` checks
    /// attach tickets.
    pub fn new(
        session_api_token: ServiceCredential,
        ticket_public_key: TicketVerifyingKey,
    ) -> Self {
        Self {
            ring_bytes: Self::DEFAULT_RING_BYTES,
            scrollback_lines: Self::DEFAULT_SCROLLBACK_LINES,
            screens: true,
            screen_sleep: Duration::from_secs(30),
            tombstone: Duration::from_secs(5 * 60),
            detached_timeout: Duration::from_secs(30 * 60),
            kill_grace: Duration::from_secs(2),
            idle_after: crate::activity::DEFAULT_IDLE_AFTER,
            commands_kept: crate::activity::DEFAULT_COMMANDS_KEPT,
            flood_rate_while_typing: Self::DEFAULT_FLOOD_RATE_WHILE_TYPING,
            shutdown_grace: Duration::from_secs(5),
            keepalive_interval: Duration::from_secs(20),
            secrets: BrokerSecrets {
                session_api_token,
                service_token: None,
                ticket_public_key,
            },
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
            policy: SpawnPolicy::default(),
            tls: BrokerTls::default(),
        }
    }
}

/// The broker's secrets, each from its variable or a file (`--…-file`, `PTYHUB_BROKER_…_FILE`),
/// never from a flag, whose value any user of the host reads in `/proc/<pid>/cmdline`.
///
/// A broker holds nothing that opens another broker: its own credential, from which the one it
/// admits is derived, and session-api's public key, which checks tickets and makes none.
#[derive(Debug, Clone)]
pub struct BrokerSecrets {
    /// The credential session-api presents on the control calls (`Spawn`, `Kill`, `Reset`,
    /// `List`, `Get`, `WatchEvents` and the screen calls): the only one they accept. `Attach`
    /// takes a ticket instead, so the gateway holds no credential of the broker's. With a
    /// credential of its own, derived from it
    /// ([`ServiceCredential::broker_control_credential`]); without one, session-api's own.
    pub session_api_token: ServiceCredential,
    /// The broker's own credential, which session-api binds to its id
    /// (`PTYHUB_SESSION_API_BROKER_TOKEN_FILE`, `id=token` lines): presented to session-api's
    /// registry when it registers and sends heartbeats; needed with `--session-api`.
    pub service_token: Option<ServiceCredential>,
    /// session-api's public key, which verifies attach tickets; session-api alone holds the
    /// private key that signs them.
    pub ticket_public_key: TicketVerifyingKey,
}

/// This broker's own credential.
const SERVICE_TOKEN: SecretSource = SecretSource {
    setting: "service_token",
    flag: "service-token",
    variable: "PTYHUB_BROKER_SERVICE_TOKEN",
    file_flag: "service-token-file",
    file_variable: "PTYHUB_BROKER_SERVICE_TOKEN_FILE",
    help: "This broker's own credential (at least 16 printable ASCII characters), which session-api binds to --broker-id: sent when it registers, and the one the control calls' credential is derived from. Give each broker its own.",
    list: false,
};

/// session-api's own credential, for a broker without one of its own.
const SESSION_API_TOKEN: SecretSource = SecretSource {
    setting: "session_api_token",
    flag: "session-api-token",
    variable: "PTYHUB_BROKER_SESSION_API_TOKEN",
    file_flag: "session-api-token-file",
    file_variable: "PTYHUB_BROKER_SESSION_API_TOKEN_FILE",
    help: "For a broker without --service-token-file only (configured in session-api, never registering): session-api's own credential, which its control calls then accept.",
    list: false,
};

/// session-api's public key for attach tickets: no secret, but read the same way, so that a
/// broker's keys and credentials are given alike.
const TICKET_PUBLIC_KEY: SecretSource = SecretSource {
    setting: "ticket_public_key",
    flag: "ticket-public-key",
    variable: "PTYHUB_BROKER_TICKET_PUBLIC_KEY",
    file_flag: "ticket-public-key-file",
    file_variable: "PTYHUB_BROKER_TICKET_PUBLIC_KEY_FILE",
    help: "session-api's public key for attach tickets (PEM, -----BEGIN PUBLIC KEY-----); never its private key.",
    list: false,
};

impl BrokerSecrets {
    fn from_matches(matches: &clap::ArgMatches) -> Result<Self, String> {
        let credential = |source: &SecretSource| -> Result<Option<ServiceCredential>, String> {
            let Some(secret) = source.read(matches).map_err(|error| error.to_string())? else {
                return Ok(None);
            };
            ServiceCredential::new(secret.expose_secret())
                .map(Some)
                .map_err(|error| format!("invalid setting {}: {error}", source.setting))
        };
        let service_token = credential(&SERVICE_TOKEN)?;
        let session_api_token = credential(&SESSION_API_TOKEN)?;
        let session_api_token = match (&service_token, session_api_token) {
            (Some(own), None) => own.broker_control_credential(),
            (None, Some(session_api)) => session_api,
            // session-api's own credential opens every broker that holds it: a broker with a
            // credential of its own must not hold it too.
            (Some(_), Some(_)) => {
                return Err("invalid setting session_api_token: a broker with its own service_token does not hold session-api's credential (session-api presents one derived from the broker's own): remove PTYHUB_BROKER_SESSION_API_TOKEN(_FILE)".to_owned());
            }
            (None, None) => {
                return Err("missing setting service_token: set PTYHUB_BROKER_SERVICE_TOKEN_FILE to this broker's own credential (or, for a broker that never registers, PTYHUB_BROKER_SESSION_API_TOKEN_FILE)".to_owned());
            }
        };
        let ticket_public_key = TICKET_PUBLIC_KEY
            .read(matches)
            .map_err(|error| error.to_string())?
            .ok_or("missing setting ticket_public_key: set PTYHUB_BROKER_TICKET_PUBLIC_KEY_FILE to session-api's ticket public key (PEM)")?;
        let ticket_public_key = TicketVerifyingKey::from_pem(ticket_public_key.expose_secret())
            .map_err(|error| format!("invalid setting ticket_public_key: {error}"))?;
        Ok(Self {
            session_api_token,
            service_token,
            ticket_public_key,
        })
    }
}

// The secrets are typed in the configuration but come from a variable or a file
// ([`SecretSource`]), which clap's derive cannot express: the sources declare the arguments, and
// `from_matches` makes the typed secrets.
impl clap::FromArgMatches for BrokerSecrets {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Self::from_matches(matches)
            .map_err(|message| clap::Error::raw(clap::error::ErrorKind::ValueValidation, message))
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for BrokerSecrets {
    fn augment_args(command: clap::Command) -> clap::Command {
        [SERVICE_TOKEN, SESSION_API_TOKEN, TICKET_PUBLIC_KEY]
            .iter()
            .fold(command, |command, source| command.args(source.arguments()))
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        Self::augment_args(command)
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

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Flags {
        #[command(flatten)]
        config: Config,
    }

    fn parse(args: &[&str]) -> Result<Config, String> {
        Flags::try_parse_from(std::iter::once("pty-broker").chain(args.iter().copied()))
            .map(|flags| flags.config)
            .map_err(|error| error.to_string())
    }

    /// A public key as `openssl pkey -pubout` writes it, and its private half.
    const PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAff+zQUXye12i1DSl0qgx+ieyMuPEcUPEPQ6DS6Hcu+Q=
-----END PUBLIC KEY-----
";
    const PRIVATE_KEY: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIMN0Jpn1HHtTfqtJ/ZDeRAn+L9og+Sxlzm4m2hAcsyHG
-----END PRIVATE KEY-----
";

    /// Secret files in a temporary directory, each named by its `--…-file` flag.
    struct SecretFiles(tempfile::TempDir);

    impl SecretFiles {
        fn new() -> Self {
            Self(tempfile::tempdir().expect("a temporary directory"))
        }

        /// `--<flag>=<a file holding secret and a newline>`.
        fn flag(&self, flag: &str, secret: &str) -> String {
            format!("--{flag}={}", self.path(flag, secret))
        }

        fn path(&self, name: &str, secret: &str) -> String {
            let path = self.0.path().join(name);
            std::fs::write(&path, format!("{secret}\n")).expect("write a secret");
            path.display().to_string()
        }
    }

    #[test]
    fn the_flood_rate_while_typing_is_a_count_of_bytes_and_zero_turns_it_off() {
        let files = SecretFiles::new();
        let key = files.flag("ticket-public-key-file", PUBLIC_KEY);
        let token = files.flag("session-api-token-file", "session-api-token-0123456789");
        let rate = |extra: &[&str]| {
            parse(&[&[key.as_str(), token.as_str()], extra].concat())
                .map(|config| config.flood_rate_while_typing)
        };
        assert_eq!(rate(&[]), Ok(512 * 1024));
        assert_eq!(rate(&["--flood-rate-while-typing=0"]), Ok(0));
        assert_eq!(rate(&["--flood-rate-while-typing=1048576"]), Ok(1 << 20));
        for bad in ["-1", "fast", "1.5", ""] {
            let refused = rate(&[&format!("--flood-rate-while-typing={bad}")])
                .expect_err("not a count of bytes");
            assert!(
                refused.contains("--flood-rate-while-typing"),
                "{bad:?}: {refused}"
            );
        }
    }

    #[test]
    fn every_secret_can_come_from_a_file() {
        let files = SecretFiles::new();
        let config = parse(&[
            &files.flag("service-token-file", "broker-own-token-0123456789"),
            &files.flag("ticket-public-key-file", PUBLIC_KEY),
        ])
        .expect("secrets from files");
        let own = config
            .secrets
            .service_token
            .as_ref()
            .expect("the broker's own");
        assert!(own.matches("broker-own-token-0123456789"));
        assert_eq!(
            config.secrets.ticket_public_key.to_pem(),
            PUBLIC_KEY,
            "session-api's public key"
        );
        assert!(!format!("{config:?}").contains("0123456789"));
    }

    #[test]
    fn secrets_on_the_command_line_are_refused() {
        let files = SecretFiles::new();
        let key = files.flag("ticket-public-key-file", PUBLIC_KEY);
        for flag in ["--service-token", "--session-api-token"] {
            let refused = parse(&[flag, "a-token-on-the-command-line-0123", &key]).unwrap_err();
            assert!(refused.contains("is refused"), "{refused}");
            assert!(refused.contains("_FILE"), "{refused}");
            assert!(
                !refused.contains("a-token-on-the-command-line"),
                "{refused}"
            );
        }
        let refused = parse(&[
            &files.flag("service-token-file", "broker-own-token-0123456789"),
            &format!("--ticket-public-key={PUBLIC_KEY}"),
        ])
        .unwrap_err();
        assert!(
            refused.contains("PTYHUB_BROKER_TICKET_PUBLIC_KEY_FILE"),
            "{refused}"
        );
    }

    #[test]
    fn a_broker_with_its_own_credential_admits_only_the_one_derived_from_it() {
        let files = SecretFiles::new();
        let key = files.flag("ticket-public-key-file", PUBLIC_KEY);
        let config = parse(&[
            &files.flag("service-token-file", "broker-own-token-0123456789"),
            &key,
        ])
        .expect("a broker of its own");
        let own = config.secrets.service_token.clone().expect("its own");
        assert_eq!(
            config.secrets.session_api_token,
            own.broker_control_credential()
        );
        assert_ne!(config.secrets.session_api_token, own);
        let built = Config::with_own_credential(own.clone(), config.secrets.ticket_public_key);
        assert_eq!(
            built.secrets.session_api_token,
            own.broker_control_credential()
        );

        // Without one (a broker configured in session-api, never registering), session-api's.
        let configured = parse(&[
            &files.flag("session-api-token-file", "session-api-token-0123456789"),
            &key,
        ])
        .expect("a configured broker");
        assert!(configured.secrets.service_token.is_none());
        assert!(
            configured
                .secrets
                .session_api_token
                .matches("session-api-token-0123456789")
        );
    }

    #[test]
    fn missing_or_shared_secrets_are_named() {
        let files = SecretFiles::new();
        let key = files.flag("ticket-public-key-file", PUBLIC_KEY);
        let missing = parse(&[&key]).unwrap_err();
        assert!(
            missing.contains("missing setting service_token"),
            "{missing}"
        );
        let unreadable = parse(&["--service-token-file=/nonexistent/token", &key]).unwrap_err();
        assert!(
            unreadable.contains("invalid setting service_token: cannot read /nonexistent/token"),
            "{unreadable}"
        );
        // session-api's credential opens every broker that holds it: a broker with one of its
        // own is refused it.
        let both = parse(&[
            &files.flag("session-api-token-file", "session-api-token-0123456789"),
            &files.flag("service-token-file", "broker-own-token-0123456789"),
            &key,
        ])
        .unwrap_err();
        assert!(both.contains("invalid setting session_api_token"), "{both}");
        assert!(!both.contains("0123456789"), "{both}");
        let no_key =
            parse(&[&files.flag("service-token-file", "broker-own-token-0123456789")]).unwrap_err();
        assert!(
            no_key.contains("missing setting ticket_public_key"),
            "{no_key}"
        );
    }

    #[test]
    fn a_broker_refuses_to_hold_the_ticket_signing_key_or_a_ticket_secret() {
        let files = SecretFiles::new();
        for (given, expected) in [
            (PRIVATE_KEY, "this is a private key"),
            (
                "a-ticket-secret-of-old-0123456789",
                "not an Ed25519 public key",
            ),
        ] {
            let refused = parse(&[
                &files.flag("service-token-file", "broker-own-token-0123456789"),
                &files.flag("ticket-public-key-file", given),
            ])
            .unwrap_err();
            assert!(
                refused.contains("invalid setting ticket_public_key"),
                "{refused}"
            );
            assert!(refused.contains(expected), "{refused}");
            assert!(
                !refused.contains("MC4CAQAw"),
                "never quotes the key: {refused}"
            );
        }
    }

    /// Run by [`the_variables_of_the_deploy_manifests_configure_the_broker`] in a child process
    /// whose environment holds them.
    #[test]
    #[ignore = "runs in a child process with its variables set"]
    fn child_parses_the_deploy_manifests_variables() {
        if !ptyhub_test_support::child::is_child() {
            return;
        }
        let config = parse(&[]).expect("the manifests' variables parse");
        assert_eq!(config.broker_id, "node-1");
        assert_eq!(
            config.session_api.as_deref(),
            Some("https://session-api.ptyhub.svc.cluster.local:50051")
        );
        assert_eq!(config.advertise.as_deref(), Some("https://10.0.0.5:50061"));
        assert_eq!(config.backends, [BackendKind::Docker]);
        assert_eq!(config.shutdown_grace, Duration::from_secs(10));
        assert_eq!(
            config.data_dir.as_deref(),
            Some(std::path::Path::new("/var/lib/ptyhub-broker"))
        );
        assert_eq!(
            config.docker.host.as_deref(),
            Some("unix:///var/run/docker.sock")
        );
        assert!(config.tls.client_auth);
        assert_eq!(
            config.tls.ca.as_deref(),
            Some(std::path::Path::new("/etc/ptyhub/secrets/ca.crt"))
        );
        let own = config.secrets.service_token.as_ref().expect("its own");
        assert!(own.matches("broker-own-token-0123456789"));
        assert_eq!(config.secrets.ticket_public_key.to_pem(), PUBLIC_KEY);
        assert!(!format!("{config:?}").contains("0123456789"));
    }

    /// The variables `deploy/kubernetes/pty-broker.yaml` and `deploy/compose.yaml` give the
    /// broker, read by the broker's own configuration.
    #[test]
    fn the_variables_of_the_deploy_manifests_configure_the_broker() {
        let files = SecretFiles::new();
        let variables = [
            ("PTYHUB_BROKER_ID", "node-1".to_owned()),
            (
                "PTYHUB_BROKER_SESSION_API",
                "https://session-api.ptyhub.svc.cluster.local:50051".to_owned(),
            ),
            (
                "PTYHUB_BROKER_ADVERTISE",
                "https://10.0.0.5:50061".to_owned(),
            ),
            (
                "PTYHUB_BROKER_SERVICE_TOKEN_FILE",
                files.path("service-token", "broker-own-token-0123456789"),
            ),
            (
                "PTYHUB_BROKER_TICKET_PUBLIC_KEY_FILE",
                files.path("ticket-public-key.pem", PUBLIC_KEY),
            ),
            (
                "PTYHUB_BROKER_TLS_CERT",
                "/etc/ptyhub/secrets/tls.crt".to_owned(),
            ),
            (
                "PTYHUB_BROKER_TLS_KEY",
                "/etc/ptyhub/secrets/tls.key".to_owned(),
            ),
            (
                "PTYHUB_BROKER_TLS_CA",
                "/etc/ptyhub/secrets/ca.crt".to_owned(),
            ),
            ("PTYHUB_BROKER_TLS_CLIENT_AUTH", "true".to_owned()),
            ("PTYHUB_BROKER_BACKENDS", "docker".to_owned()),
            (
                "PTYHUB_BROKER_ALLOW_CONTAINERS",
                "label:ptyhub.terminals=true".to_owned(),
            ),
            (
                "PTYHUB_BROKER_DOCKER_HOST",
                "unix:///var/run/docker.sock".to_owned(),
            ),
            (
                "PTYHUB_BROKER_DATA_DIR",
                "/var/lib/ptyhub-broker".to_owned(),
            ),
            ("PTYHUB_BROKER_SHUTDOWN_GRACE", "10s".to_owned()),
        ];
        ptyhub_test_support::child::assert_passes_in_child(
            "config::tests::child_parses_the_deploy_manifests_variables",
            &variables,
        );
    }
}
