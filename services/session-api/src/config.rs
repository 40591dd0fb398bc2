//! session-api's configuration: defaults, then `PTYHUB_SESSION_API_*` environment variables,
//! then flags.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use ptyhub_attach_ticket::TicketSigningKey;
use ptyhub_wire::{ExposeSecret as _, SecretSource, SecretString, ServiceCredential};

use crate::domain::RecordMode;
use crate::webhooks::WebhookSettings;

/// Everything session-api needs to run. Build it with [`Config::new`] in code, or parse it from
/// flags and `PTYHUB_SESSION_API_*` variables with `clap` (as `main.rs` does).
#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// `sqlite://PATH?mode=rwc` (a file, WAL) or `postgres://USER:PASSWORD@HOST:PORT/DB`. A URL
    /// with a password goes in the variable: the flag refuses one. Printed (`Debug`, logs,
    /// errors) with the password as `***`.
    #[arg(
        long,
        env = "PTYHUB_SESSION_API_DATABASE_URL",
        hide_env_values = true,
        default_value = "sqlite://ptyhub-sessions.db?mode=rwc",
        value_parser = DatabaseUrlParser
    )]
    pub database_url: DatabaseUrl,

    /// Apply pending migrations at start (`true`/`false`). Turn off where migrations are run
    /// separately.
    #[arg(long, env = "PTYHUB_SESSION_API_MIGRATE", default_value_t = true,
          action = clap::ArgAction::Set)]
    pub migrate: bool,

    /// The secrets: session-api's own credential, the gateways' credentials and each broker's
    /// it accepts, the private key that signs attach tickets.
    #[command(flatten)]
    pub secrets: SessionApiSecrets,

    /// How long an attach ticket is valid.
    #[arg(long, env = "PTYHUB_SESSION_API_TICKET_TTL", default_value = "60s",
          value_parser = parse_duration)]
    pub ticket_ttl: Duration,

    /// Brokers known from the start, as `id=endpoint` (repeat the flag, or separate with
    /// commas in the variable). Brokers may also register themselves. Under TLS, `https://`
    /// only (see --allow-plaintext-brokers).
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

    /// Interval of HTTP/2 keepalive pings to callers and to brokers; a peer that does not
    /// answer within the same time again is treated as gone (a broker's event stream and the
    /// calls forwarded to it end, and it is marked down).
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

    /// How webhooks are delivered.
    #[command(flatten)]
    pub webhooks: WebhookSettings,

    /// TLS of the gRPC port and of the calls to brokers.
    #[command(flatten)]
    pub tls: SessionApiTls,

    /// For development only: accept `http://` broker endpoints (registered or configured) and
    /// call them in plain text although session-api uses TLS (--tls-cert or --tls-ca). Without
    /// it, under TLS, an `http://` endpoint is refused.
    #[arg(long, env = "PTYHUB_SESSION_API_ALLOW_PLAINTEXT_BROKERS")]
    pub allow_plaintext_brokers: bool,
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
    /// The defaults, with a database, session-api's own credential (presented to the brokers
    /// that have none of their own), the gateways' credential it accepts, and the key that signs
    /// attach tickets. Brokers that register need their credentials in
    /// [`SessionApiSecrets::broker_tokens`] as well.
    pub fn new(
        database_url: impl Into<DatabaseUrl>,
        service_credential: ServiceCredential,
        gateway_credential: ServiceCredential,
        ticket_signing_key: TicketSigningKey,
    ) -> Self {
        Self {
            database_url: database_url.into(),
            migrate: true,
            secrets: SessionApiSecrets {
                service_token: service_credential,
                gateway_tokens: vec![gateway_credential],
                broker_tokens: Vec::new(),
                ticket_signing_key,
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
            webhooks: WebhookSettings::default(),
            tls: SessionApiTls::default(),
            allow_plaintext_brokers: false,
        }
    }

    /// Whether session-api may call brokers in plain text: without TLS of its own, or with
    /// `--allow-plaintext-brokers`. Under TLS an `http://` broker endpoint is refused
    /// otherwise, wherever it comes from.
    pub fn plaintext_brokers_allowed(&self) -> bool {
        let uses_tls = self.tls.cert.is_some() || self.tls.ca.is_some();
        !uses_tls || self.allow_plaintext_brokers
    }
}

/// session-api's secrets, each from its variable or a file (`--…-file`,
/// `PTYHUB_SESSION_API_…_FILE`; a file of tokens holds one per line), never from a flag, whose
/// value any user of the host reads in `/proc/<pid>/cmdline`. Every tier has a credential of its own, and none is accepted where
/// another tier's belongs.
#[derive(Debug, Clone)]
pub struct SessionApiSecrets {
    /// session-api's own credential, presented to the brokers on their control calls.
    pub service_token: ServiceCredential,
    /// The credentials of the gateways: the only ones `SessionApi` accepts (and, to read,
    /// `ListBrokers`).
    pub gateway_tokens: Vec<ServiceCredential>,
    /// Each broker's own credential, bound to its id: the only ones `RegisterBroker` and
    /// `Heartbeat` accept, each for its own broker id alone. session-api presents to each of
    /// these brokers a credential derived from its own
    /// ([`ServiceCredential::broker_control_credential`]).
    pub broker_tokens: Vec<BrokerCredential>,
    /// Signs attach tickets. session-api alone holds it; the brokers hold its public key.
    pub ticket_signing_key: TicketSigningKey,
}

/// One broker's own credential, bound to its id (`id=token`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerCredential {
    pub broker_id: String,
    pub credential: ServiceCredential,
}

impl FromStr for BrokerCredential {
    type Err = String;

    /// `id=token`. The message never quotes the token.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (broker_id, token) = text
            .trim()
            .split_once('=')
            .ok_or("invalid setting broker_token: each entry must be broker-id=token, binding a broker's own credential to its id")?;
        check_broker_id(broker_id)
            .map_err(|error| format!("invalid setting broker_token: {error}"))?;
        let credential = ServiceCredential::new(token)
            .map_err(|error| format!("invalid setting broker_token of {broker_id}: {error}"))?;
        Ok(Self {
            broker_id: broker_id.to_owned(),
            credential,
        })
    }
}

impl SessionApiSecrets {
    /// Refuses a credential that serves two tiers: the split is the point.
    fn check_tiers_differ(&self) -> Result<(), String> {
        if self.gateway_tokens.contains(&self.service_token) {
            return Err("invalid setting gateway_token: must differ from service_token".to_owned());
        }
        for (index, broker) in self.broker_tokens.iter().enumerate() {
            let id = &broker.broker_id;
            if broker.credential == self.service_token {
                return Err(format!(
                    "invalid setting broker_token of {id}: must differ from service_token"
                ));
            }
            if self.gateway_tokens.contains(&broker.credential) {
                return Err(format!(
                    "invalid setting broker_token of {id}: must differ from gateway_token"
                ));
            }
            // A credential is one broker's: two ids with one, or one id twice, would let a
            // broker act as another.
            for other in &self.broker_tokens[index + 1..] {
                if other.broker_id == *id {
                    return Err(format!(
                        "invalid setting broker_token: broker {id} is given twice"
                    ));
                }
                if other.credential == broker.credential {
                    return Err(format!(
                        "invalid setting broker_token: brokers {id} and {} share a credential; give each broker its own",
                        other.broker_id
                    ));
                }
            }
        }
        Ok(())
    }
}

/// session-api's own credential.
const SERVICE_TOKEN: SecretSource = SecretSource {
    setting: "service_token",
    flag: "service-token",
    variable: "PTYHUB_SESSION_API_SERVICE_TOKEN",
    file_flag: "service-token-file",
    file_variable: "PTYHUB_SESSION_API_SERVICE_TOKEN_FILE",
    help: "session-api's own credential, sent to the brokers (at least 16 printable ASCII characters).",
    list: false,
};

/// The gateways' credentials.
const GATEWAY_TOKENS: SecretSource = SecretSource {
    setting: "gateway_token",
    flag: "gateway-token",
    variable: "PTYHUB_SESSION_API_GATEWAY_TOKENS",
    file_flag: "gateway-token-file",
    file_variable: "PTYHUB_SESSION_API_GATEWAY_TOKEN_FILE",
    help: "Credentials of the gateways.",
    list: true,
};

/// Each broker's own credential, bound to its id.
const BROKER_TOKENS: SecretSource = SecretSource {
    setting: "broker_token",
    flag: "broker-token",
    variable: "PTYHUB_SESSION_API_BROKER_TOKENS",
    file_flag: "broker-token-file",
    file_variable: "PTYHUB_SESSION_API_BROKER_TOKEN_FILE",
    help: "Each broker's own credential, bound to its id, as `broker-id=token`: a broker registers and heartbeats under its own id alone.",
    list: true,
};

/// The private key that signs attach tickets.
const TICKET_SIGNING_KEY: SecretSource = SecretSource {
    setting: "ticket_signing_key",
    flag: "ticket-signing-key",
    variable: "PTYHUB_SESSION_API_TICKET_SIGNING_KEY",
    file_flag: "ticket-signing-key-file",
    file_variable: "PTYHUB_SESSION_API_TICKET_SIGNING_KEY_FILE",
    help: "The Ed25519 private key that signs attach tickets (PKCS#8 PEM, as `openssl genpkey -algorithm ed25519` writes it). Only session-api holds it; brokers get its public key.",
    list: false,
};

impl SessionApiSecrets {
    fn from_matches(matches: &clap::ArgMatches) -> Result<Self, String> {
        let credential = |setting: &str, token: &SecretString| {
            ServiceCredential::new(token.expose_secret())
                .map_err(|error| format!("invalid setting {setting}: {error}"))
        };
        let service_token = SERVICE_TOKEN
            .read(matches)
            .map_err(|error| error.to_string())?
            .ok_or("missing setting service_token: set PTYHUB_SESSION_API_SERVICE_TOKEN_FILE or PTYHUB_SESSION_API_SERVICE_TOKEN")?;
        let service_token = credential("service_token", &service_token)?;
        let gateway_tokens = GATEWAY_TOKENS
            .read_list(matches)
            .map_err(|error| error.to_string())?
            .iter()
            .map(|token| credential("gateway_token", token))
            .collect::<Result<Vec<_>, String>>()?;
        if gateway_tokens.is_empty() {
            return Err("missing setting gateway_token: set PTYHUB_SESSION_API_GATEWAY_TOKEN_FILE or PTYHUB_SESSION_API_GATEWAY_TOKENS".to_owned());
        }
        let broker_tokens = BROKER_TOKENS
            .read_list(matches)
            .map_err(|error| error.to_string())?
            .iter()
            .map(|entry| entry.expose_secret().parse())
            .collect::<Result<Vec<BrokerCredential>, String>>()?;
        let ticket_signing_key = TICKET_SIGNING_KEY
            .read(matches)
            .map_err(|error| error.to_string())?
            .ok_or("missing setting ticket_signing_key: set PTYHUB_SESSION_API_TICKET_SIGNING_KEY_FILE to the private key that signs attach tickets (PEM)")?;
        let ticket_signing_key = TicketSigningKey::from_pem(ticket_signing_key.expose_secret())
            .map_err(|error| format!("invalid setting ticket_signing_key: {error}"))?;
        let secrets = Self {
            service_token,
            gateway_tokens,
            broker_tokens,
            ticket_signing_key,
        };
        secrets.check_tiers_differ()?;
        Ok(secrets)
    }
}

// The secrets are typed in the configuration but come from a variable or a file
// ([`SecretSource`]), which clap's derive cannot express: the sources declare the arguments, and
// `from_matches` makes the typed secrets.
impl clap::FromArgMatches for SessionApiSecrets {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Self::from_matches(matches)
            .map_err(|message| clap::Error::raw(clap::error::ErrorKind::ValueValidation, message))
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for SessionApiSecrets {
    fn augment_args(command: clap::Command) -> clap::Command {
        [
            SERVICE_TOKEN,
            GATEWAY_TOKENS,
            BROKER_TOKENS,
            TICKET_SIGNING_KEY,
        ]
        .iter()
        .fold(command, |command, source| command.args(source.arguments()))
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        Self::augment_args(command)
    }
}

/// A database URL, refused on the command line when it carries a password (every user of the
/// host reads a command line in /proc): such a URL goes in `PTYHUB_SESSION_API_DATABASE_URL`.
#[derive(Debug, Clone, Copy)]
struct DatabaseUrlParser;

impl clap::builder::TypedValueParser for DatabaseUrlParser {
    type Value = DatabaseUrl;

    fn parse_ref(
        &self,
        command: &clap::Command,
        argument: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<DatabaseUrl, clap::Error> {
        self.parse_ref_(
            command,
            argument,
            value,
            clap::parser::ValueSource::CommandLine,
        )
    }

    fn parse_ref_(
        &self,
        _command: &clap::Command,
        _argument: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
        source: clap::parser::ValueSource,
    ) -> Result<DatabaseUrl, clap::Error> {
        let invalid = |message: &str| {
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("invalid setting database_url: {message}\n"),
            )
        };
        let url = value.to_str().ok_or_else(|| invalid("not UTF-8"))?;
        if source == clap::parser::ValueSource::CommandLine && url_has_password(url) {
            return Err(invalid(
                "a URL with a password is refused on the command line, where every user of the host reads it in /proc: set PTYHUB_SESSION_API_DATABASE_URL instead",
            ));
        }
        Ok(DatabaseUrl::new(url))
    }
}

/// The database's URL, which may carry its password (`postgres://USER:PASSWORD@HOST/DB`).
/// `Debug` and `Display` show it with the password as `***` and everything else as given, so
/// that a printed config, a log line or a start error names the database for the operator
/// without handing its credential to whoever reads them. [`DatabaseUrl::connection_string`]
/// is the one way to the whole URL, for connecting.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    /// The whole URL, password included: for the database driver alone.
    pub fn connection_string(&self) -> &str {
        &self.0
    }

    /// The URL with its password, if any, replaced by `***`. A URL the parser cannot read but
    /// that has an `@` (where a password could hide) keeps only its scheme.
    pub fn redacted(&self) -> String {
        crate::store::redact_password(&self.0)
    }
}

impl From<String> for DatabaseUrl {
    fn from(url: String) -> Self {
        Self(url)
    }
}

impl From<&str> for DatabaseUrl {
    fn from(url: &str) -> Self {
        Self(url.to_owned())
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_tuple("DatabaseUrl")
            .field(&self.redacted())
            .finish()
    }
}

impl std::fmt::Display for DatabaseUrl {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.redacted())
    }
}

/// Whether `url` (`scheme://user:password@host/...`) carries a password.
fn url_has_password(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    authority
        .rsplit_once('@')
        .is_some_and(|(user_info, _)| user_info.contains(':'))
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
        check_broker_id(id)?;
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

/// The rule of broker ids, as `RegisterBroker` checks them.
fn check_broker_id(id: &str) -> Result<(), String> {
    let valid = (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "broker id {id:?} must match ^[A-Za-z0-9_.-]{{1,128}}$"
        ))
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

    /// Parses `args` as given: a secret among them is refused.
    fn parse_raw(args: &[&str]) -> Result<Config, String> {
        Flags::try_parse_from(std::iter::once("session-api").chain(args.iter().copied()))
            .map(|flags| flags.config)
            .map_err(|error| error.to_string())
    }

    /// The secret flags these tests write for brevity (`--service-token=…`, `--gateway-token=…`,
    /// `--broker-token=…`, `--ticket-signing-key=…`, list entries comma separated) go through
    /// files (`--…-file`), the way deployments give them; every other argument as it is.
    fn parse(args: &[&str]) -> Result<Config, String> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut files: Vec<(&str, Vec<&str>)> = Vec::new();
        let mut others = Vec::new();
        for arg in args {
            let secret = [
                "service-token",
                "gateway-token",
                "broker-token",
                "ticket-signing-key",
            ]
            .into_iter()
            .find_map(|flag| {
                let value = arg
                    .strip_prefix("--")?
                    .strip_prefix(flag)?
                    .strip_prefix('=')?;
                Some((flag, value))
            });
            match secret {
                Some((flag, value)) => {
                    let lines = if flag.ends_with("-token") && flag != "service-token" {
                        value.split(',').collect()
                    } else {
                        vec![value]
                    };
                    match files.iter_mut().find(|(name, _)| *name == flag) {
                        Some((_, existing)) => existing.extend(lines),
                        None => files.push((flag, lines)),
                    }
                }
                None => others.push((*arg).to_owned()),
            }
        }
        for (flag, lines) in files {
            let path = dir.path().join(flag);
            std::fs::write(&path, format!("{}\n", lines.join("\n"))).expect("write a secret");
            others.push(format!("--{flag}-file={}", path.display()));
        }
        let others: Vec<&str> = others.iter().map(String::as_str).collect();
        parse_raw(&others)
    }

    /// A private key as `openssl genpkey -algorithm ed25519` writes it.
    const SIGNING_KEY: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIMN0Jpn1HHtTfqtJ/ZDeRAn+L9og+Sxlzm4m2hAcsyHG
-----END PRIVATE KEY-----
";

    fn with_key(args: &[&str]) -> Result<Config, String> {
        let key = format!("--ticket-signing-key={SIGNING_KEY}");
        let mut all = args.to_vec();
        all.push(&key);
        parse(&all)
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
            "broker-a=broker-a-token-0123456789\n\nbroker-b=broker-b-token-0123456789\n",
        );
        let key = write("ticket-signing-key.pem", SIGNING_KEY);
        let config = parse(&[
            "--service-token-file",
            &own,
            "--gateway-token-file",
            &gateways,
            "--broker-token-file",
            &brokers,
            "--ticket-signing-key-file",
            &key,
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
        assert_eq!(config.secrets.broker_tokens[1].broker_id, "broker-b");
        assert!(
            config.secrets.broker_tokens[1]
                .credential
                .matches("broker-b-token-0123456789")
        );
        assert_eq!(config.secrets.ticket_signing_key.to_pem(), SIGNING_KEY);
        assert!(!format!("{config:?}").contains("0123456789"));
        assert!(!format!("{config:?}").contains("MC4CAQAw"));
    }

    #[test]
    fn one_credential_for_two_tiers_is_refused_at_start() {
        let shared = with_key(&[
            "--service-token=one-token-for-every-tier-0123",
            "--gateway-token=one-token-for-every-tier-0123",
        ])
        .unwrap_err();
        assert!(shared.contains("gateway_token: must differ"), "{shared}");
        assert!(!shared.contains("one-token-for-every-tier"), "{shared}");
        let shared = with_key(&[
            "--service-token=session-api-token-0123456789",
            "--gateway-token=one-token-for-two-tiers-0123",
            "--broker-token=b1=one-token-for-two-tiers-0123",
        ])
        .unwrap_err();
        assert!(
            shared.contains("broker_token of b1: must differ"),
            "{shared}"
        );
        let missing = with_key(&["--service-token=session-api-token-0123456789"]).unwrap_err();
        assert!(
            missing.contains("missing setting gateway_token"),
            "{missing}"
        );
    }

    #[test]
    fn each_broker_credential_is_bound_to_one_broker_id() {
        let tiers = [
            "--service-token=session-api-token-0123456789",
            "--gateway-token=gateway-token-0123456789",
        ];
        let refused = |brokers: &[&str]| {
            let mut args = tiers.to_vec();
            args.extend_from_slice(brokers);
            with_key(&args).unwrap_err()
        };
        // A credential without its broker's id would let its holder register as any broker.
        let unbound = refused(&["--broker-token=broker-token-without-an-id-0123"]);
        assert!(unbound.contains("broker-id=token"), "{unbound}");
        assert!(!unbound.contains("broker-token-without-an-id"), "{unbound}");
        let shared = refused(&[
            "--broker-token=a=one-token-for-two-brokers-0123",
            "--broker-token=b=one-token-for-two-brokers-0123",
        ]);
        assert!(
            shared.contains("brokers a and b share a credential"),
            "{shared}"
        );
        assert!(!shared.contains("one-token-for-two-brokers"), "{shared}");
        let twice = refused(&[
            "--broker-token=a=broker-a-token-0123456789",
            "--broker-token=a=broker-a-other-token-0123456789",
        ]);
        assert!(twice.contains("broker a is given twice"), "{twice}");
        let bad_id = refused(&["--broker-token=no spaces=broker-token-0123456789"]);
        assert!(bad_id.contains("broker id"), "{bad_id}");

        let mut args = tiers.to_vec();
        args.push("--broker-token=a=broker-a-token-0123456789,b=broker-b-token-0123456789");
        let config = with_key(&args).expect("one credential per broker");
        let ids: Vec<&str> = config
            .secrets
            .broker_tokens
            .iter()
            .map(|broker| broker.broker_id.as_str())
            .collect();
        assert_eq!(ids, ["a", "b"]);
    }

    #[test]
    fn the_signing_key_must_be_a_private_key() {
        let tiers = [
            "--service-token=session-api-token-0123456789",
            "--gateway-token=gateway-token-0123456789",
        ];
        let missing = parse(&tiers).unwrap_err();
        assert!(
            missing.contains("missing setting ticket_signing_key"),
            "{missing}"
        );
        let mut args = tiers.to_vec();
        args.push("--ticket-signing-key=a-ticket-secret-of-old-0123456789");
        let secret = parse(&args).unwrap_err();
        assert!(
            secret.contains("invalid setting ticket_signing_key"),
            "{secret}"
        );
        assert!(!secret.contains("ticket-secret-of-old"), "{secret}");
    }

    #[test]
    fn plaintext_brokers_are_allowed_only_without_tls_or_when_asked() {
        let tiers = [
            "--service-token=session-api-token-0123456789",
            "--gateway-token=gateway-token-0123456789",
        ];
        assert!(with_key(&tiers).unwrap().plaintext_brokers_allowed());
        let mut under_tls = tiers.to_vec();
        under_tls.push("--tls-ca=/etc/ptyhub/ca.pem");
        assert!(!with_key(&under_tls).unwrap().plaintext_brokers_allowed());
        under_tls.push("--allow-plaintext-brokers");
        assert!(with_key(&under_tls).unwrap().plaintext_brokers_allowed());
        let mut serving_tls = tiers.to_vec();
        serving_tls.push("--tls-cert=/etc/ptyhub/tls.crt");
        assert!(!with_key(&serving_tls).unwrap().plaintext_brokers_allowed());
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
    fn secrets_on_the_command_line_are_refused() {
        for flag in ["--service-token", "--gateway-token", "--broker-token"] {
            // The other secrets from files, so that the refusal is the first error.
            let refused = parse(&[
                "--service-token=session-api-token-0123456789",
                "--gateway-token=gateway-token-0123456789",
                &format!("--ticket-signing-key={SIGNING_KEY}"),
                flag,
                "a-token-on-the-command-line-0123",
            ])
            .unwrap_err();
            assert!(refused.contains("is refused"), "{flag}: {refused}");
            assert!(refused.contains("_FILE"), "{refused}");
            assert!(
                !refused.contains("a-token-on-the-command-line"),
                "{refused}"
            );
        }
    }

    #[test]
    fn a_database_password_is_refused_on_the_command_line() {
        let tiers = [
            "--service-token=session-api-token-0123456789",
            "--gateway-token=gateway-token-0123456789",
        ];
        let mut args = tiers.to_vec();
        args.push("--database-url=postgres://ptyhub:a-password@db:5432/ptyhub");
        let refused = with_key(&args).unwrap_err();
        assert!(
            refused.contains("invalid setting database_url"),
            "{refused}"
        );
        assert!(
            refused.contains("PTYHUB_SESSION_API_DATABASE_URL"),
            "{refused}"
        );
        assert!(!refused.contains("a-password"), "{refused}");
        let mut args = tiers.to_vec();
        args.push("--database-url=postgres://ptyhub@db:5432/ptyhub");
        let config = with_key(&args).expect("a URL without a password");
        assert_eq!(
            config.database_url.connection_string(),
            "postgres://ptyhub@db:5432/ptyhub"
        );
        assert!(url_has_password("postgres://u:p@h/db"));
        assert!(!url_has_password("postgres://h:5432/db?user=a:b@c"));
        assert!(!url_has_password("sqlite://ptyhub-sessions.db?mode=rwc"));
    }

    /// Run by [`the_variables_of_the_deploy_manifests_configure_session_api`] in a child process
    /// whose environment holds them.
    #[test]
    #[ignore = "runs in a child process with its variables set"]
    fn child_parses_the_deploy_manifests_variables() {
        if !ptyhub_test_support::child::is_child() {
            return;
        }
        let config = parse_raw(&[]).expect("the manifests' variables parse");
        assert_eq!(
            config.database_url.connection_string(),
            "postgres://ptyhub:a-database-password@postgres:5432/ptyhub"
        );
        let printed = format!("{config:?}");
        assert!(!printed.contains("a-database-password"), "{printed}");
        assert!(
            printed.contains("postgres://ptyhub:***@postgres:5432/ptyhub"),
            "{printed}"
        );
        assert!(
            config
                .secrets
                .service_token
                .matches("session-api-token-0123456789")
        );
        assert_eq!(config.secrets.gateway_tokens.len(), 1);
        assert_eq!(config.secrets.broker_tokens.len(), 1);
        assert_eq!(config.secrets.broker_tokens[0].broker_id, "node-1");
        assert_eq!(config.secrets.ticket_signing_key.to_pem(), SIGNING_KEY);
        assert!(config.tls.client_auth);
        assert_eq!(
            config.tls.cert.as_deref(),
            Some(std::path::Path::new("/etc/ptyhub/secrets/tls.crt"))
        );
        assert_eq!(config.heartbeat_timeout, Duration::from_secs(15));
        assert_eq!(config.shutdown_grace, Duration::from_secs(20));
        let printed = format!("{:?}", config.secrets);
        assert!(!printed.contains("0123456789"), "{printed}");
    }

    /// The variables `deploy/kubernetes/session-api.yaml` and `deploy/compose.yaml` give
    /// session-api, read by its own configuration.
    #[test]
    fn the_variables_of_the_deploy_manifests_configure_session_api() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = |name: &str, secret: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("{secret}\n")).expect("write a secret");
            path.display().to_string()
        };
        let variables = [
            (
                "PTYHUB_SESSION_API_DATABASE_URL",
                "postgres://ptyhub:a-database-password@postgres:5432/ptyhub".to_owned(),
            ),
            (
                "PTYHUB_SESSION_API_SERVICE_TOKEN_FILE",
                file("service-token", "session-api-token-0123456789"),
            ),
            (
                "PTYHUB_SESSION_API_GATEWAY_TOKEN_FILE",
                file("gateway-tokens", "gateway-token-0123456789"),
            ),
            (
                "PTYHUB_SESSION_API_BROKER_TOKEN_FILE",
                file("broker-tokens", "node-1=broker-token-0123456789"),
            ),
            (
                "PTYHUB_SESSION_API_TICKET_SIGNING_KEY_FILE",
                file("ticket-signing-key.pem", SIGNING_KEY),
            ),
            (
                "PTYHUB_SESSION_API_TLS_CERT",
                "/etc/ptyhub/secrets/tls.crt".to_owned(),
            ),
            (
                "PTYHUB_SESSION_API_TLS_KEY",
                "/etc/ptyhub/secrets/tls.key".to_owned(),
            ),
            (
                "PTYHUB_SESSION_API_TLS_CA",
                "/etc/ptyhub/secrets/ca.crt".to_owned(),
            ),
            ("PTYHUB_SESSION_API_TLS_CLIENT_AUTH", "true".to_owned()),
            ("PTYHUB_SESSION_API_HEARTBEAT_TIMEOUT", "15s".to_owned()),
            ("PTYHUB_SESSION_API_SHUTDOWN_GRACE", "20s".to_owned()),
        ];
        ptyhub_test_support::child::assert_passes_in_child(
            "config::tests::child_parses_the_deploy_manifests_variables",
            &variables,
        );
    }

    #[test]
    fn a_printed_config_shows_the_database_url_without_its_password() {
        let mut config = with_key(&[
            "--service-token=session-api-token-0123456789",
            "--gateway-token=gateway-token-0123456789",
        ])
        .expect("a config");
        config.database_url = DatabaseUrl::new("postgres://ptyhub:hunter2-secret@db:5432/ptyhub");
        let printed = format!("{config:?}");
        assert!(!printed.contains("hunter2"), "{printed}");
        assert!(
            printed.contains("postgres://ptyhub:***@db:5432/ptyhub"),
            "{printed}"
        );
        assert_eq!(
            config.database_url.to_string(),
            "postgres://ptyhub:***@db:5432/ptyhub"
        );
        assert_eq!(
            config.database_url.connection_string(),
            "postgres://ptyhub:hunter2-secret@db:5432/ptyhub"
        );
    }

    #[test]
    fn only_the_password_of_a_database_url_is_hidden() {
        for (url, shown) in [
            (
                "postgres://ptyhub:p%40ss@db:5432/ptyhub?sslmode=require",
                "postgres://ptyhub:***@db:5432/ptyhub?sslmode=require",
            ),
            // An unencoded `@` in the password: the last `@` ends the user info.
            (
                "postgres://ptyhub:p@ss@db/ptyhub",
                "postgres://ptyhub:***@db/ptyhub",
            ),
            (
                "postgres://ptyhub@db:5432/ptyhub",
                "postgres://ptyhub@db:5432/ptyhub",
            ),
            (
                "sqlite://ptyhub-sessions.db?mode=rwc",
                "sqlite://ptyhub-sessions.db?mode=rwc",
            ),
            (
                "sqlite:///var/lib/ptyhub/sessions db",
                "sqlite:///var/lib/ptyhub/sessions db",
            ),
            // Unreadable, with somewhere a password could be: nothing after the scheme shown.
            ("postgres://ptyhub:a/b@db:x/ptyhub", "postgres://***"),
        ] {
            assert_eq!(DatabaseUrl::new(url).redacted(), shown, "{url}");
        }
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
