//! What can go wrong in the Docker runtime, and how it reaches the broker as a
//! [`RuntimeError`].

use std::path::PathBuf;

use crate::runtime::RuntimeError;

/// What can go wrong talking to the engine or reading the host's processes.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    #[error("invalid docker endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint { endpoint: String, reason: String },
    #[error("docker engine at {endpoint} is unreachable: {source}")]
    EngineUnreachable {
        endpoint: String,
        #[source]
        source: std::io::Error,
    },
    #[error("docker engine is unreachable: {0}")]
    Connection(String),
    #[error("docker engine answered {status}: {message}")]
    Engine { status: u16, message: String },
    #[error("docker engine: {0}")]
    Client(String),
    #[error("{context}: {source}")]
    Stream {
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("unexpected answer from the docker engine: {0}")]
    Protocol(String),
    #[error("cannot look at processes in container {container}: {message}")]
    Helper { container: String, message: String },
    #[error("{context}: {source}")]
    Host {
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("docker session state in {path}: {source}")]
    State {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Internal(String),
}

impl From<bollard::errors::Error> for DockerError {
    fn from(error: bollard::errors::Error) -> Self {
        use bollard::errors::Error as Bollard;
        match error {
            Bollard::DockerResponseServerError {
                status_code,
                message,
            } => DockerError::Engine {
                status: status_code,
                message,
            },
            Bollard::SocketNotFoundError(path) => {
                DockerError::Connection(format!("no socket at {path}"))
            }
            error @ (Bollard::IOError { .. }
            | Bollard::HyperLegacyError { .. }
            | Bollard::RequestTimeoutError) => DockerError::Connection(error.to_string()),
            error => DockerError::Client(error.to_string()),
        }
    }
}

impl From<DockerError> for RuntimeError {
    fn from(error: DockerError) -> Self {
        match error {
            DockerError::InvalidEndpoint { .. }
            | DockerError::EngineUnreachable { .. }
            | DockerError::Connection(_) => RuntimeError::Unavailable(error.to_string()),
            DockerError::Stream { context, source } | DockerError::Host { context, source } => {
                RuntimeError::Io { context, source }
            }
            error => RuntimeError::Other(error.to_string()),
        }
    }
}
