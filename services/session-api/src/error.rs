//! The one error type of session-api; `grpc.rs` maps it to status codes in one place.

use ptyhub_wire::ErrorCode;
use uuid::Uuid;

/// Everything that can go wrong in session-api. Messages are lowercase, except the cap's, whose
/// wording the contract fixes.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("instance {0} not found")]
    InstanceNotFound(String),
    #[error("session {0} not found")]
    SessionNotFound(Uuid),
    #[error("session {0} is closed")]
    SessionClosed(Uuid),
    #[error("no live session has alias {0}")]
    AliasNotFound(String),
    #[error("broker {0} not found")]
    BrokerNotFound(String),
    #[error("an instance named {0} already exists")]
    InstanceNameTaken(String),
    #[error("alias {alias} is held by live session {session_id}")]
    AliasTaken { alias: String, session_id: Uuid },
    #[error("Maximum of {0} terminal sessions reached for this instance")]
    CapReached(u32),
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
    /// The broker answered with an error; its code and message are passed on.
    #[error("broker {broker_id}: {message}")]
    Broker {
        broker_id: String,
        code: tonic::Code,
        message: String,
    },
    #[error("session {0} did not finish starting in time")]
    StartTimedOut(Uuid),
    #[error("invalid setting {setting}: {reason}")]
    Config {
        setting: &'static str,
        reason: String,
    },
    #[error("database error: {0}")]
    Database(#[from] sea_orm::DbErr),
    #[error("corrupt record: {0}")]
    CorruptRecord(String),
    #[error(transparent)]
    Introspection(#[from] ptyhub_wire::IntrospectionError),
    #[error("grpc server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
}

impl Error {
    /// What this error means to a caller, in the closed table every transport maps from.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::InvalidArgument(_) => ErrorCode::Invalid,
            Error::InstanceNotFound(_)
            | Error::SessionNotFound(_)
            | Error::SessionClosed(_)
            | Error::AliasNotFound(_)
            | Error::BrokerNotFound(_) => ErrorCode::NotFound,
            Error::InstanceNameTaken(_) | Error::AliasTaken { .. } => ErrorCode::AlreadyExists,
            Error::CapReached(_) => ErrorCode::CapReached,
            Error::SessionNotLive { .. } | Error::BrokerUnsuitable { .. } => ErrorCode::WrongState,
            Error::NoBrokerAvailable(_)
            | Error::BrokerUnavailable { .. }
            | Error::StartTimedOut(_) => ErrorCode::Unavailable,
            Error::Broker { code, .. } => ErrorCode::from_grpc(*code),
            Error::Config { .. }
            | Error::Database(_)
            | Error::CorruptRecord(_)
            | Error::Introspection(_)
            | Error::Serve(_) => ErrorCode::Internal,
        }
    }

    /// The broker's answer to a call, as an error of this crate.
    pub(crate) fn from_broker_status(broker_id: &str, status: tonic::Status) -> Self {
        match status.code() {
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Unknown => {
                Error::BrokerUnavailable {
                    broker_id: broker_id.to_owned(),
                    message: lowercase_first(status.message()),
                }
            }
            code => Error::Broker {
                broker_id: broker_id.to_owned(),
                code,
                message: lowercase_first(status.message()),
            },
        }
    }
}

fn lowercase_first(message: &str) -> String {
    let mut chars = message.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => "no message".to_owned(),
    }
}
