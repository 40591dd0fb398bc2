//! session-api's errors: [`Error`] for what one request can meet, with its [`ErrorCode`] (which
//! `grpc.rs` turns into a status, in one place), and [`StartError`] for what keeps the server
//! from starting or serving.

use ptyhub_model::InvalidSize;
use ptyhub_wire::{ErrorCode, IntrospectionError};
use uuid::Uuid;

impl From<ptyhub_model::Invalid> for Error {
    fn from(invalid: ptyhub_model::Invalid) -> Self {
        Error::InvalidRequest(invalid.0)
    }
}

/// What can go wrong with one request. Messages are lowercase, except the cap's, whose wording
/// the contract fixes.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A field breaks a rule of the contract: a bad name, alias, id, command or a missing field.
    #[error("{0}")]
    InvalidRequest(String),
    #[error(transparent)]
    InvalidSize(#[from] InvalidSize),
    #[error("instance {0} not found")]
    InstanceNotFound(String),
    #[error("session {0} not found")]
    SessionNotFound(Uuid),
    /// A closed session where a live one is needed (to attach, say): to the caller it is gone.
    #[error("session {0} is closed")]
    SessionClosed(Uuid),
    #[error("no live session has alias {0}")]
    AliasNotFound(String),
    #[error("broker {0} not found")]
    BrokerNotFound(String),
    /// A registration or heartbeat for a broker id with the credential of another broker.
    #[error(
        "the credential presented is not broker {0}'s: a broker registers and heartbeats under its own id alone"
    )]
    NotThisBrokersCredential(String),
    /// A broker endpoint that would be called in plain text while session-api uses TLS.
    #[error(
        "broker endpoint {0:?} is plain text, but session-api uses TLS: advertise an https:// endpoint (or, for development only, start session-api with --allow-plaintext-brokers)"
    )]
    PlaintextBrokerEndpoint(String),
    #[error("an instance named {0} already exists")]
    InstanceNameTaken(String),
    #[error("alias {alias} is held by live session {session_id}")]
    AliasTaken { alias: String, session_id: Uuid },
    #[error("Maximum of {0} terminal sessions reached for this instance")]
    CapReached(u32),
    /// The session exists but its status does not allow the change (a rename or reset of a
    /// closed session, say).
    #[error("session {session_id} is {status}")]
    SessionNotLive { session_id: Uuid, status: String },
    #[error("broker {broker_id} cannot run {kind} targets")]
    BrokerUnsuitable {
        broker_id: String,
        kind: &'static str,
    },
    #[error("no broker that can run {0} targets is up")]
    NoBrokerAvailable(&'static str),
    #[error("broker {broker_id} is unavailable: {message}")]
    BrokerUnavailable { broker_id: String, message: String },
    /// The session's broker is marked down (it missed its heartbeats, or its event stream
    /// broke), so a call that needs it is not tried.
    #[error("broker {0} is down")]
    BrokerDown(String),
    /// The broker's policy would refuse every session of the instance being registered: its
    /// message, which says what to do instead.
    #[error("{0}")]
    TargetRefused(String),
    /// The instance's container is not running: the broker's message, which says how to start
    /// it, passed on with its own code.
    #[error("{message}")]
    ContainerNotRunning { broker_id: String, message: String },
    /// The broker answered with an error; its code and message are passed on.
    #[error("broker {broker_id}: {message}")]
    BrokerRefused {
        broker_id: String,
        code: tonic::Code,
        message: String,
    },
    /// The broker's answer to a call session-api only forwards (the screen calls): a bad key
    /// name or pattern, a bound exceeded, a client holding control, a wait that timed out. Its
    /// code and message are the caller's answer, unchanged.
    #[error("{message}")]
    Forwarded {
        broker_id: String,
        code: tonic::Code,
        message: String,
    },
    #[error("session {0} did not finish starting in time")]
    StartTimedOut(Uuid),
    /// No live share has this token or id (it never existed, expired or was revoked).
    #[error("share not found")]
    ShareNotFound,
    #[error("the instance has {0} live shares, the most it may have: revoke one first")]
    TooManyShares(usize),
    #[error("webhook {0} not found")]
    WebhookNotFound(Uuid),
    #[error("the instance has {0} webhooks, the most it may have: delete one first")]
    TooManyWebhooks(usize),
    #[error("database error: {0}")]
    Database(#[from] sea_orm::DbErr),
    #[error("corrupt record: {0}")]
    CorruptRecord(String),
}

impl Error {
    /// What this error means to a caller, in the closed table every transport maps from.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::InvalidRequest(_) | Error::InvalidSize(_) => ErrorCode::Invalid,
            Error::InstanceNotFound(_)
            | Error::SessionNotFound(_)
            | Error::SessionClosed(_)
            | Error::AliasNotFound(_)
            | Error::BrokerNotFound(_)
            | Error::ShareNotFound
            | Error::WebhookNotFound(_) => ErrorCode::NotFound,
            Error::TooManyShares(_) | Error::TooManyWebhooks(_) => ErrorCode::CapReached,
            Error::InstanceNameTaken(_) | Error::AliasTaken { .. } => ErrorCode::AlreadyExists,
            Error::NotThisBrokersCredential(_) | Error::TargetRefused(_) => ErrorCode::Forbidden,
            Error::PlaintextBrokerEndpoint(_) => ErrorCode::Invalid,
            Error::CapReached(_) => ErrorCode::CapReached,
            Error::SessionNotLive { .. } | Error::BrokerUnsuitable { .. } => ErrorCode::WrongState,
            Error::NoBrokerAvailable(_)
            | Error::BrokerUnavailable { .. }
            | Error::BrokerDown(_)
            | Error::StartTimedOut(_) => ErrorCode::Unavailable,
            Error::ContainerNotRunning { .. } => ErrorCode::ContainerNotRunning,
            Error::BrokerRefused { code, .. } | Error::Forwarded { code, .. } => {
                ErrorCode::from_grpc(*code)
            }
            Error::Database(_) | Error::CorruptRecord(_) => ErrorCode::Internal,
        }
    }

    /// The broker's answer to a call, as an error of this crate.
    pub(crate) fn from_broker_status(broker_id: &str, status: tonic::Status) -> Self {
        if ErrorCode::from_status(&status) == ErrorCode::ContainerNotRunning {
            return Error::ContainerNotRunning {
                broker_id: broker_id.to_owned(),
                message: lowercase_first(status.message()),
            };
        }
        match status.code() {
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Unknown => {
                Error::BrokerUnavailable {
                    broker_id: broker_id.to_owned(),
                    message: lowercase_first(status.message()),
                }
            }
            code => Error::BrokerRefused {
                broker_id: broker_id.to_owned(),
                code,
                message: lowercase_first(status.message()),
            },
        }
    }

    /// The broker's answer to a forwarded call, as an error of this crate. Unlike
    /// [`Error::from_broker_status`], DEADLINE_EXCEEDED is the broker's own answer here (a screen
    /// wait timed out), not a broker that did not answer: this side's deadline always outlasts
    /// the broker's, and its expiry reads as CANCELLED.
    pub(crate) fn from_forwarded_status(broker_id: &str, status: tonic::Status) -> Self {
        match status.code() {
            tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled => {
                Error::BrokerUnavailable {
                    broker_id: broker_id.to_owned(),
                    message: lowercase_first(status.message()),
                }
            }
            code => Error::Forwarded {
                broker_id: broker_id.to_owned(),
                code,
                message: status.message().to_owned(),
            },
        }
    }
}

/// What keeps session-api from starting or serving. `run` returns it; no caller of the API
/// ever sees one.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("invalid setting database_url: {0}")]
    InvalidDatabaseUrl(&'static str),
    /// `database` is the URL with its password as `***`: the error is printed and logged.
    #[error("cannot connect to the database {database}: {source}")]
    Connect {
        database: String,
        #[source]
        source: sea_orm::DbErr,
    },
    #[error("cannot make the database file private (0600): {0}")]
    DatabaseFile(#[source] std::io::Error),
    #[error("cannot apply the database migrations: {0}")]
    Migrate(#[source] sea_orm::DbErr),
    #[error("cannot record the configured brokers: {0}")]
    ConfiguredBrokers(#[source] Error),
    #[error(
        "invalid setting brokers: broker {broker_id}'s endpoint {endpoint:?} is plain text, but session-api uses TLS: give an https:// endpoint (or, for development only, set --allow-plaintext-brokers)"
    )]
    PlaintextBroker { broker_id: String, endpoint: String },
    #[error(transparent)]
    Introspection(#[from] IntrospectionError),
    #[error("grpc server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    #[error(transparent)]
    Tls(#[from] ptyhub_wire::TlsError),
    #[error("cannot set up the webhooks' HTTP client: {0}")]
    WebhookClient(String),
}

fn lowercase_first(message: &str) -> String {
    let mut chars = message.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => "no message".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_refusal_keeps_its_code_and_an_unreachable_broker_is_unavailable() {
        let refused = Error::from_broker_status(
            "b1",
            tonic::Status::failed_precondition("Session has exited"),
        );
        assert_eq!(refused.code(), ErrorCode::WrongState);
        assert_eq!(refused.to_string(), "broker b1: session has exited");
        for status in [
            tonic::Status::unavailable("connection refused"),
            tonic::Status::deadline_exceeded(""),
        ] {
            let error = Error::from_broker_status("b1", status);
            assert!(
                matches!(error, Error::BrokerUnavailable { .. }),
                "{error:?}"
            );
            assert_eq!(error.code(), ErrorCode::Unavailable);
        }
    }

    #[test]
    fn a_forwarded_answer_keeps_the_brokers_words_unless_it_was_unreachable() {
        for (status, code) in [
            (
                tonic::Status::invalid_argument("unknown key name \"Foo\""),
                ErrorCode::Invalid,
            ),
            (
                tonic::Status::failed_precondition("a client holds control"),
                ErrorCode::WrongState,
            ),
            (
                tonic::Status::deadline_exceeded("the screen did not match in time"),
                ErrorCode::TimedOut,
            ),
            (
                tonic::Status::not_found("session not found"),
                ErrorCode::NotFound,
            ),
        ] {
            let message = status.message().to_owned();
            let error = Error::from_forwarded_status("b1", status);
            assert!(matches!(error, Error::Forwarded { .. }), "{error:?}");
            assert_eq!(error.code(), code);
            assert_eq!(error.to_string(), message);
        }
        for status in [
            tonic::Status::unavailable("connection refused"),
            tonic::Status::unknown("transport error"),
            // This side's own deadline ran out.
            tonic::Status::cancelled("Timeout expired"),
        ] {
            let error = Error::from_forwarded_status("b1", status);
            assert!(
                matches!(error, Error::BrokerUnavailable { .. }),
                "{error:?}"
            );
            assert_eq!(error.code(), ErrorCode::Unavailable);
        }
    }
}
