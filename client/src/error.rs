//! What can go wrong in a call: the URL or token cannot be used, the gateway cannot be reached,
//! or it answered with a gRPC status (whose code says what kind of refusal it was).

use ptyhub_wire::ErrorCode;

/// An error of a [`crate::Client`] call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The gateway URL cannot be parsed.
    #[error("{url} is not a valid gateway URL")]
    InvalidUrl {
        url: String,
        #[source]
        source: tonic::transport::Error,
    },
    /// The certificate authority given to trust an `https://` gateway is not a PEM
    /// certificate.
    #[error("the CA certificate cannot be used")]
    InvalidCaCertificate(#[source] ptyhub_wire::PemCertificatesError),
    /// The token holds characters gRPC metadata cannot carry.
    #[error("the token contains characters that cannot be sent")]
    InvalidToken,
    /// A name that goes into gRPC metadata (an instance) holds characters it cannot carry.
    #[error("{0:?} cannot be sent as gRPC metadata")]
    InvalidMetadata(String),
    /// No connection to the gateway.
    #[error("cannot reach ptyhub at {url}")]
    Unreachable {
        url: String,
        #[source]
        source: tonic::transport::Error,
    },
    /// The gateway (or a service behind it) refused the call.
    #[error("{}", describe(.0))]
    Rpc(#[from] tonic::Status),
    /// The server answered with something this client does not understand.
    #[error("unexpected answer: {0}")]
    Protocol(String),
    /// An attach lost its connection and could not get it back in time.
    #[error("connection lost and not restored within {window:?}: {reason}")]
    ConnectionLost {
        window: std::time::Duration,
        reason: String,
    },
    /// The connection dropped before an input's receipt came: the input may or may not have
    /// been written (it is not sent again, which could type it twice).
    #[error(
        "the connection dropped before the input was confirmed: it may or may not have been written"
    )]
    InputUnconfirmed,
    /// The attach or exec this handle belongs to has ended.
    #[error("the stream has ended")]
    Ended,
}

impl Error {
    /// The gRPC status, when the server refused.
    pub fn status(&self) -> Option<&tonic::Status> {
        match self {
            Error::Rpc(status) => Some(status),
            _ => None,
        }
    }

    /// What kind of refusal this is, in the contract's terms; `None` when it is not a refusal
    /// (no connection, a bad URL).
    pub fn code(&self) -> Option<ErrorCode> {
        self.status()
            .map(|status| ErrorCode::from_grpc(status.code()))
    }
}

fn describe(status: &tonic::Status) -> String {
    if status.message().is_empty() {
        format!("{:?}", status.code()).to_lowercase()
    } else {
        status.message().to_owned()
    }
}
