//! The broker's one error type. `grpc.rs` maps it to gRPC codes; nothing else knows the wire.

use uuid::Uuid;

use crate::domain::InvalidSize;
use crate::runtime::RuntimeError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("session {0} not found")]
    SessionNotFound(Uuid),
    #[error("session {0} already exists")]
    SessionExists(Uuid),
    #[error("{0}")]
    InvalidArgument(String),
    #[error(transparent)]
    InvalidSize(#[from] InvalidSize),
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    PermissionDenied(String),
    /// The session is in a state that does not allow this (for example reset after exit).
    #[error("{0}")]
    FailedPrecondition(String),
    /// A client fell so far behind, or sent so much, that the broker stopped serving it.
    #[error("{0}")]
    ResourceExhausted(String),
    #[error("no {0} runtime is configured on this broker")]
    BackendNotConfigured(&'static str),
    #[error("the broker is shutting down")]
    ShuttingDown,
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("grpc server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("{context}: {source}")]
    Io {
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn io(context: &'static str, source: std::io::Error) -> Self {
        Error::Io { context, source }
    }
}
