//! session-api's configuration: defaults, then `PTYHUB_SESSION_API_*` environment variables,
//! then flags.

use std::str::FromStr;
use std::time::Duration;

use attach_ticket::TicketKey;
use ptyhub_wire::ServiceCredential;

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

    /// Token callers and brokers present as `authorization: Bearer <token>` (at least 16
    /// characters); session-api sends the same token to the brokers.
    #[arg(
        long = "service-token",
        env = "PTYHUB_SESSION_API_SERVICE_TOKEN",
        hide_env_values = true
    )]
    pub service_credential: ServiceCredential,

    /// Secret shared with the brokers to sign attach tickets (at least 16 bytes).
    #[arg(long = "ticket-secret", env = "PTYHUB_SESSION_API_TICKET_SECRET", hide_env_values = true,
          value_parser = parse_ticket_key)]
    pub ticket_key: TicketKey,

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

    /// How long a graceful shutdown waits for background tasks.
    #[arg(long, env = "PTYHUB_SESSION_API_SHUTDOWN_GRACE", default_value = "5s",
          value_parser = parse_duration)]
    pub shutdown_grace: Duration,

    /// What sessions of instances without a `record` setting of their own record: `off`,
    /// `output` or `output+input`.
    #[arg(long, env = "PTYHUB_SESSION_API_DEFAULT_RECORD", default_value = "off")]
    pub default_record: RecordMode,
}

impl Config {
    /// The defaults, with a database and the two secrets.
    pub fn new(
        database_url: impl Into<String>,
        service_credential: ServiceCredential,
        ticket_key: TicketKey,
    ) -> Self {
        Self {
            database_url: database_url.into(),
            migrate: true,
            service_credential,
            ticket_key,
            ticket_ttl: attach_ticket::DEFAULT_TICKET_TTL,
            brokers: Vec::new(),
            heartbeat_timeout: Duration::from_secs(15),
            activity_flush_interval: Duration::from_secs(1),
            broker_call_timeout: Duration::from_secs(30),
            keepalive_interval: Duration::from_secs(20),
            shutdown_grace: Duration::from_secs(5),
            default_record: RecordMode::Off,
        }
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

fn parse_ticket_key(secret: &str) -> Result<TicketKey, String> {
    TicketKey::new(secret.as_bytes().to_vec()).map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

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
