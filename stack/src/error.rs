//! What can go wrong with a stack: a port that cannot be bound, a setting a service refuses, a
//! service that fails, panics or stops on its own, and a broker that never comes up.

use std::fmt;
use std::time::Duration;

/// One of the three services of a stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    Broker,
    SessionApi,
    Gateway,
}

impl Service {
    /// The service's name, as its binary is called.
    pub fn name(self) -> &'static str {
        match self {
            Service::Broker => "pty-broker",
            Service::SessionApi => "session-api",
            Service::Gateway => "gateway",
        }
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a stack could not start, or how one of its services ended.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    #[error(transparent)]
    Recordings(#[from] ptyhub_wire::RecordingStoreError),
    #[error("cannot bind {service}'s loopback port")]
    Bind {
        service: Service,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create the stack's data directory")]
    DataDirectory(#[source] std::io::Error),
    #[error("cannot read or create the ticket signing key {path}: {message}")]
    TicketSigningKey {
        path: std::path::PathBuf,
        message: String,
    },
    #[error("the stack's TLS settings cannot be used")]
    Tls(#[source] ptyhub_wire::TlsError),
    #[error("{service} refused its configuration: {message}")]
    Config { service: Service, message: String },
    #[error("{service} failed")]
    Failed {
        service: Service,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{service} panicked: {message}")]
    Panicked { service: Service, message: String },
    #[error("{service} stopped unexpectedly")]
    StoppedUnexpectedly { service: Service },
    #[error("session-api did not see the broker come up within {patience:?}: {last}")]
    BrokerNotUp { patience: Duration, last: String },
}

impl StackError {
    /// The service this error is about, if it is about one.
    pub fn service(&self) -> Option<Service> {
        match self {
            StackError::Bind { service, .. }
            | StackError::Config { service, .. }
            | StackError::Failed { service, .. }
            | StackError::Panicked { service, .. }
            | StackError::StoppedUnexpectedly { service } => Some(*service),
            StackError::DataDirectory(_)
            | StackError::TicketSigningKey { .. }
            | StackError::Recordings(_)
            | StackError::Tls(_)
            | StackError::BrokerNotUp { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_service_and_keep_the_cause() {
        let error = StackError::Failed {
            service: Service::SessionApi,
            source: "database is locked".into(),
        };
        assert_eq!(error.to_string(), "session-api failed");
        assert_eq!(
            std::error::Error::source(&error).map(ToString::to_string),
            Some("database is locked".to_owned())
        );
        assert_eq!(error.service(), Some(Service::SessionApi));
        let error = StackError::StoppedUnexpectedly {
            service: Service::Broker,
        };
        assert_eq!(error.to_string(), "pty-broker stopped unexpectedly");
    }
}
