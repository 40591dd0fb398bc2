//! The gateway's request error: an [`ErrorCode`] of the shared table (docs/CONTRACT.md) and a
//! lowercase message, rendered as a REST answer, a WebSocket close or a gRPC status through that
//! one table.

use axum::Json;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use ptyhub_wire::ErrorCode;
use serde::Serialize;

/// An error with its code and a lowercase message for the client.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// Input that cannot be parsed: bad JSON, a bad query parameter.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Malformed, message)
    }

    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthenticated, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Forbidden, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    /// Well-formed but invalid input: a bad name, an out-of-bounds size.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Invalid, message)
    }

    /// session-api or a broker did not answer, or ended a stream.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unavailable, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    /// Translates an error status from session-api or a broker. Its message goes to the client
    /// as it is: session-api words the contract's messages (the cap's among them) once.
    pub fn from_backend(service: &str, status: &tonic::Status) -> Self {
        let message = status.message();
        match ErrorCode::from_status(status) {
            ErrorCode::Unauthenticated => {
                // The end user was checked here; a refusal means the gateway's own service
                // credential is wrong, which the user cannot fix.
                tracing::error!(service, "backend refused the gateway's service credential");
                Self::unavailable(format!("{service} refused the gateway's service token"))
            }
            ErrorCode::Unavailable => {
                Self::unavailable(format!("{service} is unavailable: {message}"))
            }
            ErrorCode::Internal => {
                let code = status.code();
                tracing::error!(service, ?code, message, "unexpected backend error");
                Self::internal(message)
            }
            code => Self::new(code, message),
        }
    }

    /// The error as a gRPC status, for the gRPC-web surface.
    pub fn to_status(&self) -> tonic::Status {
        self.code.status(self.message.clone())
    }

    /// The close code of a WebSocket that ends with this error.
    pub fn websocket_close_code(&self) -> u16 {
        self.code.websocket_close_code()
    }
}

/// The body of every REST error.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// A lowercase message.
    pub detail: String,
    /// The error's own name where its status is shared with other errors a client may want to
    /// tell apart (`container_not_running`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<&'static str>,
}

/// A value the contract does not allow: 422 with the model's message.
impl From<ptyhub_model::Invalid> for ApiError {
    fn from(invalid: ptyhub_model::Invalid) -> Self {
        Self::invalid(invalid.0)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.code.http_status(),
            Json(ErrorBody {
                detail: self.message,
                code: self.code.name(),
            }),
        )
            .into_response();
        if self.code == ErrorCode::Unauthenticated {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Why a credential was refused. Messages never contain the credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("missing credential")]
    Missing,
    #[error("invalid credential")]
    Invalid,
    #[error("expired credential")]
    Expired,
    #[error("unsupported token algorithm {0}")]
    UnsupportedAlgorithm(String),
    #[error("signed out")]
    SignedOut,
    #[error("credential not valid yet")]
    NotYetValid,
    #[error("credential for another audience")]
    WrongAudience,
    #[error("credential from another issuer")]
    WrongIssuer,
}

impl From<AuthError> for ApiError {
    fn from(error: AuthError) -> Self {
        ApiError::unauthenticated(error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use ptyhub_wire::close_code;

    use super::*;

    #[test]
    fn backend_codes_map_to_the_contract_statuses() {
        let cases = [
            (tonic::Code::NotFound, 404, close_code::NOT_FOUND),
            (tonic::Code::InvalidArgument, 422, close_code::POLICY),
            (tonic::Code::ResourceExhausted, 409, close_code::CAP_REACHED),
            (tonic::Code::PermissionDenied, 403, close_code::FORBIDDEN),
            (tonic::Code::Unavailable, 503, close_code::BACKEND_FAILURE),
            (
                tonic::Code::Unauthenticated,
                503,
                close_code::BACKEND_FAILURE,
            ),
            (tonic::Code::AlreadyExists, 409, close_code::POLICY),
            (tonic::Code::FailedPrecondition, 409, close_code::POLICY),
            (tonic::Code::Unknown, 500, close_code::BACKEND_FAILURE),
        ];
        for (code, http, close) in cases {
            let error = ApiError::from_backend("session-api", &tonic::Status::new(code, "x"));
            assert_eq!(error.code.http_status().as_u16(), http, "{code:?}");
            assert_eq!(error.websocket_close_code(), close, "{code:?}");
        }
    }

    #[test]
    fn a_backend_message_reaches_the_client_unchanged_except_for_unavailability() {
        let cap = "Maximum of 5 terminal sessions reached for this instance";
        let error = ApiError::from_backend("session-api", &tonic::Status::resource_exhausted(cap));
        assert_eq!(
            (error.code, error.message.as_str()),
            (ErrorCode::CapReached, cap)
        );

        let down = ApiError::from_backend("pty-broker", &tonic::Status::unavailable("refused"));
        assert_eq!(down.message, "pty-broker is unavailable: refused");
        let refused = ApiError::from_backend("session-api", &tonic::Status::unauthenticated("no"));
        assert_eq!(
            refused.message,
            "session-api refused the gateway's service token"
        );
    }

    #[test]
    fn an_unauthenticated_answer_asks_for_a_bearer_token() {
        let response = ApiError::unauthenticated("missing credential").into_response();
        assert_eq!(response.status().as_u16(), 401);
        assert_eq!(response.headers()[header::WWW_AUTHENTICATE], "Bearer");
        let response = ApiError::forbidden("no").into_response();
        assert!(!response.headers().contains_key(header::WWW_AUTHENTICATE));
    }
}
