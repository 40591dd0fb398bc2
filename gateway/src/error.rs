//! The gateway's errors and the one table that maps them to HTTP statuses, WebSocket close codes
//! and gRPC codes.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// What went wrong, independent of the transport that reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Malformed input: bad JSON, a bad query parameter.
    BadRequest,
    /// No credential, or one that does not verify.
    Unauthenticated,
    /// A valid credential that does not cover this instance or action.
    Forbidden,
    /// An unknown instance or session, or one that belongs elsewhere.
    NotFound,
    /// A conflict with the current state: a taken alias or name.
    Conflict,
    /// The instance's session cap is reached.
    CapReached,
    /// Well-formed but invalid input: a bad name, an out-of-bounds size.
    Invalid,
    /// The origin of a browser request is not allowed.
    OriginRefused,
    /// session-api or a broker did not answer.
    Unavailable,
    /// A bug or an unexpected answer from a backend.
    Internal,
}

impl ErrorKind {
    pub fn http_status(self) -> StatusCode {
        match self {
            ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
            ErrorKind::Unauthenticated => StatusCode::UNAUTHORIZED,
            ErrorKind::Forbidden | ErrorKind::OriginRefused => StatusCode::FORBIDDEN,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::Conflict | ErrorKind::CapReached => StatusCode::CONFLICT,
            ErrorKind::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The close code a WebSocket gets for this error (CONTRACT.md, "Close codes").
    pub fn websocket_close_code(self) -> u16 {
        match self {
            ErrorKind::Unauthenticated => close_code::UNAUTHENTICATED,
            ErrorKind::Forbidden => close_code::FORBIDDEN,
            ErrorKind::NotFound => close_code::NOT_FOUND,
            ErrorKind::CapReached => close_code::CAP_REACHED,
            ErrorKind::BadRequest
            | ErrorKind::Invalid
            | ErrorKind::Conflict
            | ErrorKind::OriginRefused => close_code::POLICY,
            ErrorKind::Unavailable | ErrorKind::Internal => close_code::BACKEND_FAILURE,
        }
    }

    pub fn grpc_code(self) -> tonic::Code {
        match self {
            ErrorKind::BadRequest | ErrorKind::Invalid => tonic::Code::InvalidArgument,
            ErrorKind::Unauthenticated => tonic::Code::Unauthenticated,
            ErrorKind::Forbidden | ErrorKind::OriginRefused => tonic::Code::PermissionDenied,
            ErrorKind::NotFound => tonic::Code::NotFound,
            ErrorKind::Conflict => tonic::Code::FailedPrecondition,
            ErrorKind::CapReached => tonic::Code::ResourceExhausted,
            ErrorKind::Unavailable => tonic::Code::Unavailable,
            ErrorKind::Internal => tonic::Code::Internal,
        }
    }
}

/// The WebSocket close codes of the contract.
pub mod close_code {
    /// The session exited or was closed.
    pub const NORMAL: u16 = 1000;
    /// Policy: a refused origin, a malformed open.
    pub const POLICY: u16 = 1008;
    /// A frame of more than 1 MiB.
    pub const TOO_BIG: u16 = 1009;
    /// A backend failed; reconnect with backoff.
    pub const BACKEND_FAILURE: u16 = 1011;
    /// This gateway is shutting down (a rolling restart); reconnect now, to another replica.
    pub const SERVICE_RESTART: u16 = 1012;
    pub const UNAUTHENTICATED: u16 = 4001;
    pub const FORBIDDEN: u16 = 4003;
    pub const NOT_FOUND: u16 = 4004;
    /// Another controller took over; do not reconnect automatically.
    pub const TAKEN_OVER: u16 = 4009;
    pub const CAP_REACHED: u16 = 4029;
}

/// An error with its kind and a lowercase message for the client.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
}

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadRequest, message)
    }

    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unauthenticated, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Forbidden, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    /// The contract's exact message for a create beyond the cap.
    pub fn cap_reached(max_sessions: u32) -> Self {
        Self::new(
            ErrorKind::CapReached,
            format!("Maximum of {max_sessions} terminal sessions reached for this instance"),
        )
    }

    /// Translates an error status from session-api or a broker.
    pub fn from_backend(service: &str, status: &tonic::Status) -> Self {
        let message = status.message().to_owned();
        let kind = match status.code() {
            tonic::Code::NotFound => ErrorKind::NotFound,
            tonic::Code::InvalidArgument | tonic::Code::OutOfRange => ErrorKind::Invalid,
            tonic::Code::AlreadyExists | tonic::Code::FailedPrecondition | tonic::Code::Aborted => {
                ErrorKind::Conflict
            }
            tonic::Code::ResourceExhausted => ErrorKind::CapReached,
            tonic::Code::PermissionDenied => ErrorKind::Forbidden,
            tonic::Code::Unauthenticated => {
                // The end user was checked here; a refusal means the gateway's own service token
                // is wrong, which the user cannot fix.
                tracing::error!(service, "backend refused the gateway's service token");
                return Self::new(
                    ErrorKind::Unavailable,
                    format!("{service} refused the gateway's service token"),
                );
            }
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
                return Self::new(
                    ErrorKind::Unavailable,
                    format!("{service} is unavailable: {message}"),
                );
            }
            code => {
                tracing::error!(service, ?code, message, "unexpected backend error");
                ErrorKind::Internal
            }
        };
        Self::new(kind, message)
    }

    /// The error as a gRPC status, for the gRPC-web surface.
    pub fn to_status(&self) -> tonic::Status {
        tonic::Status::new(self.kind.grpc_code(), self.message.clone())
    }
}

/// The body of every REST error.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// A lowercase message.
    pub detail: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.kind.http_status(),
            Json(ErrorBody {
                detail: self.message,
            }),
        )
            .into_response();
        if self.kind == ErrorKind::Unauthenticated {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
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
        ];
        for (code, http, close) in cases {
            let error = ApiError::from_backend("session-api", &tonic::Status::new(code, "x"));
            assert_eq!(error.kind.http_status().as_u16(), http, "{code:?}");
            assert_eq!(error.kind.websocket_close_code(), close, "{code:?}");
        }
    }

    #[test]
    fn cap_message_is_the_contract_text() {
        assert_eq!(
            ApiError::cap_reached(5).message,
            "Maximum of 5 terminal sessions reached for this instance"
        );
    }
}
