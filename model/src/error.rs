//! [`Invalid`]: a value the contract does not allow, with the sentence a client is shown.

/// A value the contract does not allow. The message is the contract's detail, written for the
/// person or program that sent the value; every surface shows it as it is (HTTP 422 or 400,
/// gRPC `INVALID_ARGUMENT`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

impl Invalid {
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }

    pub fn message(&self) -> &str {
        &self.0
    }
}
