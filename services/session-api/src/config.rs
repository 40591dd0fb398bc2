//! session-api's configuration: defaults, then `PTYHUB_SESSION_API_*` environment variables,
//! then flags.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use ptyhub_attach_ticket::TicketKey;
use ptyhub_wire::{ServiceCredential, read_secret_lines, secret_from};

use crate::domain::RecordMode;

/// Everything session-api needs to run. Build it with [`Config::new`] in code, or parse it from
/// flags and `PTYHUB_SESSION_API_*` variables with `clap` (as `main.rs` does).
#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// `sqlite://PATH?mode=rwc` (a file, WAL) or `postgres://USER:PASSWORD@HOST:PORT/DB`.
    #[arg(
        long,
        env = "PTYHUB_SESSION_API_DATABASE_URL",
        default_value = "sqlite://ptyhub-sessions.db?mode=rwc"
    )]
    pub database_url: String,

    /// Apply pending migrations at start (`true`/`false`). Turn off where migrations are run
    /// separately.
    #[arg(long, env = "PTYHUB_SESSION_API_MIGRATE", default_value_t = true,
          action = clap::ArgAction::Set)]
    pub migrate: bool,

    /// The secrets: session-api's own credential, the gateways' and brokers' credentials it
    /// accepts, the ticket secret.
    #[command(flatten)]
    pub secrets: SessionApiSecrets,

    /// How long an attach ticket is valid.
    #[arg(long, env = "PTYHUB_SESSION_API_TICKET_TTL", default_value = "60s",
          value_parser = parse_duration)]
    pub ticket_ttl: Duration,

    /// Brokers known from the start, as `id=endpoint` (repeat the flag, or separate with
    /// commas in the variable). Brokers may also register themselves.
    #[arg(
        long = "broker",
        env = "PTYHUB_SESSION_API_BROKERS",
        value_delimiter = ','
    )]
    pub brokers: Vec<StaticBroker>,

    /// A broker with no heartbeat (its own, or a live event stream) for this long is down.
    #[arg(long, env = "PTYHUB_SESSION_API_HEARTBEAT_TIMEOUT", default_value = "15s",
          value_parser = parse_duration)]
    pub heartbeat_timeout: Duration,

    /// How often batched activity and attachment counts are written.
    #[arg(long, env = "PTYHUB_SESSION_API_ACTIVITY_FLUSH", default_value = "1s",
          value_parser = parse_duration)]
    pub activity_flush_interval: Duration,

    /// Deadline of one unary call to a broker (spawn, kill, reset, a screen read or input). A
    /// screen wait gets its own `timeout_ms` plus this.
    #[arg(long, env = "PTYHUB_SESSION_API_BROKER_CALL_TIMEOUT", default_value = "30s",
          value_parser = parse_duration)]
    pub broker_call_timeout: Duration,

    /// Interval of HTTP/2 keepalive pings to callers; one that does not answer within the same
    /// time again is treated as gone.
    #[arg(long, env = "PTYHUB_SESSION_API_KEEPALIVE", default_value = "20s",
          value_parser = parse_duration)]
    pub keepalive_interval: Duration,

    /// How long a closed session stays in the records (listed with `include=closed`) before it
    /// is pruned.
    #[arg(long, env = "PTYHUB_SESSION_API_CLOSED_SESSION_RETENTION", default_value = "30days",
          value_parser = parse_duration)]
    pub closed_session_retention: Duration,

    /// How long an audit event stays in the trail before it is deleted; `0` or `forever`
    /// keeps every event.
    #[arg(long, env = "PTYHUB_SESSION_API_AUDIT_RETENTION", default_value = "90days",
          value_parser = parse_retention)]
    pub audit_retention: Duration,

    /// How long a graceful shutdown waits for background tasks.
    #[arg(long, env = "PTYHUB_SESSION_API_SHUTDOWN_GRACE", default_value = "5s",
          value_parser = parse_duration)]
    pub shutdown_grace: Duration,

    /// What sessions of instances without a `record` setting of their own record: `off`,
    /// `output` or `output+input`.
    #[arg(long, env = "PTYHUB_SESSION_API_DEFAULT_RECORD", default_value = "off")]
    pub default_record: RecordMode,

    /// TLS of the gRPC port and of the calls to brokers.
    #[command(flatten)]
    pub tls: SessionApiTls,
}

/// session-api's TLS files. Paths, not secrets: the key file's permissions guard the key.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SessionApiTls {
    /// Serve gRPC over TLS with this certificate chain (PEM), with --tls-key.
    #[arg(
        long = "tls-cert",
        env = "PTYHUB_SESSION_API_TLS_CERT",
        value_name = "PEM"
    )]
    pub cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(
        long = "tls-key",
        env = "PTYHUB_SESSION_API_TLS_KEY",
        value_name = "PEM"
    )]
    pub key: Option<PathBuf>,
    /// CA certificates to trust: the brokers' (whose endpoints are https://), and clients'
    /// under --tls-client-auth.
    #[arg(long = "tls-ca", env = "PTYHUB_SESSION_API_TLS_CA", value_name = "PEM")]
    pub ca: Option<PathBuf>,
    /// Serve only clients (gateways, brokers) with a certificate --tls-ca signed: mutual TLS.
    /// session-api presents --tls-cert to brokers in turn.
    #[arg(long = "tls-client-auth", env = "PTYHUB_SESSION_API_TLS_CLIENT_AUTH")]
    pub client_auth: bool,
}

impl SessionApiTls {
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

impl Config {
    /// The defaults, with a database, session-api's own credential (presented to the brokers),
    /// the gateways' credential it accepts, and the ticket key. Brokers that register need
    /// [`SessionApiSecrets::broker_tokens`] as well.
    pub fn new(
        database_url: impl Into<String>,
        service_credential: ServiceCredential,
        gateway_credential: ServiceCredential,
        ticket_key: TicketKey,
    ) -> Self {
        Self {
            database_url: database_url.into(),
            migrate: true,
            secrets: SessionApiSecrets {
                service_token: service_credential,
                gateway_tokens: vec![gateway_credential],
                broker_tokens: Vec::new(),
                ticket_key,
            },
            ticket_ttl: ptyhub_attach_ticket::DEFAULT_TICKET_TTL,
            brokers: Vec::new(),
            heartbeat_timeout: Duration::from_secs(15),
            activity_flush_interval: Duration::from_secs(1),
            broker_call_timeout: Duration::from_secs(30),
            keepalive_interval: Duration::from_secs(20),
            closed_session_retention: ptyhub_wire::limits::DEFAULT_CLOSED_SESSION_RETENTION,
            audit_retention: ptyhub_wire::limits::DEFAULT_AUDIT_RETENTION,
            shutdown_grace: Duration::from_secs(5),
            default_record: RecordMode::Off,
            tls: SessionApiTls::default(),
        }
    }
}

/// session-api's secrets, each from its variable, its flag, or a file (`--…-file`,
/// `PTYHUB_SESSION_API_…_FILE`; a file of tokens holds one per line): documented deployments use
/// the files or variables, never flags, whose values any user of the host reads in
/// `/proc/<pid>/cmdline`. Every tier has a credential of its own, and none is accepted where
/// another tier's belongs.
#[derive(Debug, Clone)]
pub struct SessionApiSecrets {
    /// session-api's own credential, presented to the brokers on their control calls.
    pub service_token: ServiceCredential,
    /// The credentials of the gateways: the only ones `SessionApi` accepts (and, to read,
    /// `ListBrokers`).
    pub gateway_tokens: Vec<ServiceCredential>,
    /// The credentials of the brokers: the only ones `RegisterBroker` and `Heartbeat` accept.
    /// A broker id is bound to the credential that registered it first, so with one credential
    /// per broker no broker can take over another's registration.
    pub broker_tokens: Vec<ServiceCredential>,
    /// Signs attach tickets (shared with the brokers, which verify them).
    pub ticket_key: TicketKey,
}

impl SessionApiSecrets {
    /// Refuses a credential that serves two tiers: the split is the point.
    fn check_tiers_differ(&self) -> Result<(), String> {
        if self.gateway_tokens.contains(&self.service_token) {
            return Err("invalid setting gateway_token: must differ from service_token".to_owned());
        }
        if self.broker_tokens.contains(&self.service_token) {
            return Err("invalid setting broker_token: must differ from service_token".to_owned());
        }
        if self
            .broker_tokens
            .iter()
            .any(|broker| self.gateway_tokens.contains(broker))
        {
            return Err("invalid setting broker_token: must differ from gateway_token".to_owned());
        }
        Ok(())
    }
}

/// The flags and variables behind [`SessionApiSecrets`], as clap reads them.
#[derive(Debug, clap::Args)]
struct SessionApiSecretFlags {
    /// session-api's own credential, sent to the brokers (at least 16 printable ASCII
    /// characters).
    #[arg(long, env = "PTYHUB_SESSION_API_SERVICE_TOKEN", hide_env_values = true)]
    service_token: Option<String>,
    /// A file holding `--service-token`.
    #[arg(long, env = "PTYHUB_SESSION_API_SERVICE_TOKEN_FILE")]
    service_token_file: Option<PathBuf>,
    /// Credentials of the gateways (comma separated, or the flag repeated).
    #[arg(
        long = "gateway-token",
        env = "PTYHUB_SESSION_API_GATEWAY_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    gateway_tokens: Vec<String>,
    /// A file of gateway credentials, one per line.
    #[arg(long, env = "PTYHUB_SESSION_API_GATEWAY_TOKEN_FILE")]
    gateway_token_file: Option<PathBuf>,
    /// Credentials of the brokers that register themselves (comma separated, or the flag
    /// repeated); one per broker keeps each broker's registration its own.
    #[arg(
        long = "broker-token",
        env = "PTYHUB_SESSION_API_BROKER_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    broker_tokens: Vec<String>,
    /// A file of broker credentials, one per line.
    #[arg(long, env = "PTYHUB_SESSION_API_BROKER_TOKEN_FILE")]
    broker_token_file: Option<PathBuf>,
    /// Secret shared with the brokers to sign attach tickets (at least 16 bytes).
    #[arg(long, env = "PTYHUB_SESSION_API_TICKET_SECRET", hide_env_values = true)]
    ticket_secret: Option<String>,
    /// A file holding `--ticket-secret`.
    #[arg(long, env = "PTYHUB_SESSION_API_TICKET_SECRET_FILE")]
    ticket_secret_file: Option<PathBuf>,
}

impl SessionApiSecretFlags {
    fn resolve(self) -> Result<SessionApiSecrets, String> {
        let credential = |setting: &str, token: String| {
            ServiceCredential::new(token)
                .map_err(|error| format!("invalid setting {setting}: {error}"))
        };
        let service_token = secret_from(
            "service_token",
            self.service_token,
            self.service_token_file.as_deref(),
        )
        .map_err(|error| error.to_string())?
        .ok_or("missing setting service_token: set PTYHUB_SESSION_API_SERVICE_TOKEN or --service-token-file")?;
        let service_token = credential("service_token", service_token)?;
        let tokens = |setting: &'static str, mut tokens: Vec<String>, file: Option<PathBuf>| {
            if let Some(file) = file {
                tokens
                    .extend(read_secret_lines(setting, &file).map_err(|error| error.to_string())?);
            }
            tokens
                .into_iter()
                .map(|token| credential(setting, token))
                .collect::<Result<Vec<_>, String>>()
        };
        let gateway_tokens = tokens(
            "gateway_token",
            self.gateway_tokens,
            self.gateway_token_file,
        )?;
        if gateway_tokens.is_empty() {
            return Err("missing setting gateway_token: set PTYHUB_SESSION_API_GATEWAY_TOKEN_FILE or PTYHUB_SESSION_API_GATEWAY_TOKENS".to_owned());
        }
        let broker_tokens = tokens("broker_token", self.broker_tokens, self.broker_token_file)?;
        let ticket_secret = secret_from(
            "ticket_secret",
            self.ticket_secret,
            self.ticket_secret_file.as_deref(),
        )
        .map_err(|error| error.to_string())?
        .ok_or("missing setting ticket_secret: set PTYHUB_SESSION_API_TICKET_SECRET or --ticket-secret-file")?;
        let ticket_key = TicketKey::new(ticket_secret.into_bytes())
            .map_err(|error| format!("invalid setting ticket_secret: {error}"))?;
        let secrets = SessionApiSecrets {
            service_token,
            gateway_tokens,
            broker_tokens,
            ticket_key,
        };
        secrets.check_tiers_differ()?;
        Ok(secrets)
    }
}

// The secrets are typed in the configuration but come from one of several sources, which clap's
// derive cannot express: it reads the flags above, and `resolve` makes the typed secrets.
impl clap::FromArgMatches for SessionApiSecrets {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        SessionApiSecretFlags::from_arg_matches(matches)?
            .resolve()
            .map_err(|message| clap::Error::raw(clap::error::ErrorKind::ValueValidation, message))
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for SessionApiSecrets {
    fn augment_args(command: clap::Command) -> clap::Command {
        SessionApiSecretFlags::augment_args(command)
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        SessionApiSecretFlags::augment_args_for_update(command)
    }
}

/// A broker from the configuration: `id=endpoint`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticBroker {
    pub id: String,
    pub endpoint: String,
}

impl FromStr for StaticBroker {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (id, endpoint) = text
            .split_once('=')
            .ok_or_else(|| format!("broker {text:?} must be id=endpoint"))?;
        let id_valid = (1..=128).contains(&id.len())
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if !id_valid {
            return Err(format!(
                "broker id {id:?} must match ^[A-Za-z0-9_.-]{{1,128}}$"
            ));
        }
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
            || endpoint.parse::<tonic::transport::Uri>().is_err()
        {
            return Err(format!(
                "broker endpoint {endpoint:?} must be an http:// or https:// url"
            ));
        }
        Ok(Self {
            id: id.to_owned(),
            endpoint: endpoint.to_owned(),
        })
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|error| format!("{error} (use for example 30s, 5m)"))
}

/// A retention: a duration, or `forever` (also `0`), which is [`Duration::ZERO`].
fn parse_retention(text: &str) -> Result<Duration, String> {
    match text.trim() {
        "forever" | "0" => Ok(Duration::ZERO),
        text => humantime::parse_duration(text)
            .map_err(|error| format!("{error} (use for example 90days, 12h, or forever)")),
    }
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
        Flags::try_parse_from(std::iter::once("session-api").chain(args.iter().copied()))
            .map(|flags| flags.config)
            .map_err(|error| error.to_string())
    }

    #[test]
    fn every_secret_can_come_from_a_file() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let write = |name: &str, secret: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, secret).expect("write a secret");
            path.display().to_string()
        };
        let own = write("own", "session-api-token-0123456789\n");
        let gateways = write("gateways", "gateway-token-0123456789\n");
        let brokers = write(
            "brokers",
            "broker-a-token-0123456789\nbroker-b-token-0123456789\n",
        );
        let ticket = write("ticket", "ticket-secret-0123456789\n");
        let config = parse(&[
            "--service-token-file",
            &own,
            "--gateway-token-file",
            &gateways,
            "--broker-token-file",
            &brokers,
            "--ticket-secret-file",
            &ticket,
        ])
        .expect("secrets from files");
        assert!(
            config
                .secrets
                .service_token
                .matches("session-api-token-0123456789")
        );
        assert_eq!(config.secrets.gateway_tokens.len(), 1);
        assert_eq!(config.secrets.broker_tokens.len(), 2);
        assert!(config.secrets.broker_tokens[1].matches("broker-b-token-0123456789"));
    }

    #[test]
    fn one_credential_for_two_tiers_is_refused_at_start() {
        let shared = parse(&[
            "--service-token=one-token-for-every-tier-0123",
            "--gateway-token=one-token-for-every-tier-0123",
            "--ticket-secret=ticket-secret-0123456789",
        ])
        .unwrap_err();
        assert!(shared.contains("gateway_token: must differ"), "{shared}");
        assert!(!shared.contains("one-token-for-every-tier"), "{shared}");
        let shared = parse(&[
            "--service-token=session-api-token-0123456789",
            "--gateway-token=one-token-for-two-tiers-0123",
            "--broker-token=one-token-for-two-tiers-0123",
            "--ticket-secret=ticket-secret-0123456789",
        ])
        .unwrap_err();
        assert!(shared.contains("broker_token: must differ"), "{shared}");
        let missing = parse(&[
            "--service-token=session-api-token-0123456789",
            "--ticket-secret=ticket-secret-0123456789",
        ])
        .unwrap_err();
        assert!(
            missing.contains("missing setting gateway_token"),
            "{missing}"
        );
    }

    #[test]
    fn the_audit_retention_is_a_duration_or_forever() {
        use clap::CommandFactory as _;

        // The flag's default, as clap gives it, is the library's.
        let command = Flags::command();
        let flag = command
            .get_arguments()
            .find(|argument| argument.get_long() == Some("audit-retention"))
            .expect("an --audit-retention flag");
        let default = flag.get_default_values();
        assert_eq!(default.len(), 1);
        assert_eq!(
            parse_retention(default[0].to_str().expect("text")),
            Ok(ptyhub_wire::limits::DEFAULT_AUDIT_RETENTION)
        );
        assert_eq!(
            parse_retention("12h"),
            Ok(Duration::from_secs(12 * 60 * 60))
        );
        assert_eq!(parse_retention("forever"), Ok(Duration::ZERO));
        assert_eq!(parse_retention("0"), Ok(Duration::ZERO));
        let bad = parse_retention("a while").unwrap_err();
        assert!(bad.contains("forever"), "{bad}");
    }

    #[test]
    fn static_brokers_parse_id_and_endpoint() {
        let broker: StaticBroker = "b-1=http://127.0.0.1:50061".parse().unwrap();
        assert_eq!(broker.id, "b-1");
        assert_eq!(broker.endpoint, "http://127.0.0.1:50061");
        assert!("no-endpoint".parse::<StaticBroker>().is_err());
        assert!("b=ftp://x".parse::<StaticBroker>().is_err());
        assert!("bad id=http://x".parse::<StaticBroker>().is_err());
    }
}
