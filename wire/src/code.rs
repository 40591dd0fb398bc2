//! The closed table of error codes: every error of every service names one, and this table says
//! what that code is on each wire (gRPC code, HTTP status, WebSocket close code).

use http::StatusCode;
use tonic::Code;

/// What went wrong, in the terms every client of ptyhub can act on. Each service maps its own
/// errors to one of these, and each transport adapter maps the code to its wire through the
/// methods below: there is no other table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// The request cannot be parsed: bad JSON, a bad query parameter, a frame of unknown type.
    Malformed,
    /// Well-formed but invalid: a bad name, an out-of-bounds size, an unknown role.
    Invalid,
    /// A request body that is not of the one content type the route takes (JSON): what a
    /// cross-site form or `text/plain` post sends.
    UnsupportedMediaType,
    /// No credential, or one that does not verify.
    Unauthenticated,
    /// A valid credential that does not cover this instance or action.
    Forbidden,
    /// A browser request from an origin that is not on the allow-list.
    OriginRefused,
    /// An unknown instance or session, or one that belongs to another instance.
    NotFound,
    /// The thing to create exists already: a taken name or alias, a session id in use.
    AlreadyExists,
    /// The target is in a state that does not allow this: a reset after exit, a closed session.
    WrongState,
    /// The instance's session cap is reached.
    CapReached,
    /// The instance's container exists but is not running (stopped, paused, restarting), so
    /// nothing can start in it until it is started: a conflict with the container's state, as
    /// Docker answers an exec into it, told apart from the other conflicts by its own name
    /// ([`ErrorCode::name`]).
    ContainerNotRunning,
    /// A client sent more than a limit allows, or fell so far behind that it is no longer served.
    LimitExceeded,
    /// Too many at once or too fast: failed authentications from one address, streams of one
    /// principal. Trying again later can work.
    TooManyRequests,
    /// What the caller waited for did not happen in the time it gave (a screen wait).
    TimedOut,
    /// What was asked for existed but is no longer held: output the ring has let go of.
    Gone,
    /// A service or a container runtime did not answer, or is shutting down.
    Unavailable,
    /// A bug, or an answer no code above describes.
    Internal,
}

impl ErrorCode {
    /// The gRPC status code (docs/CONTRACT.md, "gRPC").
    pub fn grpc_code(self) -> Code {
        match self {
            ErrorCode::Malformed | ErrorCode::Invalid | ErrorCode::UnsupportedMediaType => {
                Code::InvalidArgument
            }
            ErrorCode::Unauthenticated => Code::Unauthenticated,
            ErrorCode::Forbidden | ErrorCode::OriginRefused => Code::PermissionDenied,
            ErrorCode::NotFound => Code::NotFound,
            ErrorCode::AlreadyExists => Code::AlreadyExists,
            ErrorCode::WrongState | ErrorCode::ContainerNotRunning => Code::FailedPrecondition,
            ErrorCode::CapReached | ErrorCode::LimitExceeded | ErrorCode::TooManyRequests => {
                Code::ResourceExhausted
            }
            ErrorCode::TimedOut => Code::DeadlineExceeded,
            ErrorCode::Gone => Code::OutOfRange,
            ErrorCode::Unavailable => Code::Unavailable,
            ErrorCode::Internal => Code::Internal,
        }
    }

    /// The HTTP status of a REST answer (docs/CONTRACT.md, "REST").
    pub fn http_status(self) -> StatusCode {
        match self {
            ErrorCode::Malformed => StatusCode::BAD_REQUEST,
            ErrorCode::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::Unauthenticated => StatusCode::UNAUTHORIZED,
            ErrorCode::Forbidden | ErrorCode::OriginRefused => StatusCode::FORBIDDEN,
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::AlreadyExists
            | ErrorCode::WrongState
            | ErrorCode::CapReached
            | ErrorCode::ContainerNotRunning => StatusCode::CONFLICT,
            ErrorCode::LimitExceeded => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::TimedOut => StatusCode::REQUEST_TIMEOUT,
            ErrorCode::Gone => StatusCode::GONE,
            ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The close code of a WebSocket that ends with this error (docs/CONTRACT.md, "Close
    /// codes").
    pub fn websocket_close_code(self) -> u16 {
        match self {
            ErrorCode::Unauthenticated => close_code::UNAUTHENTICATED,
            ErrorCode::Forbidden => close_code::FORBIDDEN,
            ErrorCode::NotFound => close_code::NOT_FOUND,
            ErrorCode::CapReached | ErrorCode::TooManyRequests => close_code::CAP_REACHED,
            ErrorCode::LimitExceeded => close_code::TOO_BIG,
            ErrorCode::Malformed
            | ErrorCode::Invalid
            | ErrorCode::UnsupportedMediaType
            | ErrorCode::OriginRefused
            | ErrorCode::AlreadyExists
            | ErrorCode::WrongState
            | ErrorCode::Gone => close_code::POLICY,
            // Reconnecting with backoff works once the container is started again.
            ErrorCode::TimedOut
            | ErrorCode::Unavailable
            | ErrorCode::Internal
            | ErrorCode::ContainerNotRunning => close_code::BACKEND_FAILURE,
        }
    }

    /// The code's own name, for the codes that share a gRPC code and an HTTP status with others
    /// and that a client may want to tell apart: carried in [`ERROR_CODE_METADATA`] on gRPC and
    /// as `code` in a REST error body. `None` for the rest, which their status names.
    pub fn name(self) -> Option<&'static str> {
        match self {
            ErrorCode::ContainerNotRunning => Some("container_not_running"),
            _ => None,
        }
    }

    /// The code a status carries: its [`ERROR_CODE_METADATA`] when that names a code, else its
    /// gRPC code read by [`ErrorCode::from_grpc`]; a call whose connection failed
    /// ([`is_connection_failure`]) is [`ErrorCode::Unavailable`], as the peer is.
    pub fn from_status(status: &tonic::Status) -> Self {
        if is_connection_failure(status) {
            return ErrorCode::Unavailable;
        }
        let named = status
            .metadata()
            .get(ERROR_CODE_METADATA)
            .and_then(|value| value.to_str().ok());
        match named {
            Some(name) if ErrorCode::ContainerNotRunning.name() == Some(name) => {
                ErrorCode::ContainerNotRunning
            }
            _ => ErrorCode::from_grpc(status.code()),
        }
    }

    /// The code of a status another ptyhub service answered with. Each gRPC code that
    /// [`ErrorCode::grpc_code`] produces comes back as the code that produced it, except that
    /// `RESOURCE_EXHAUSTED` reads as [`ErrorCode::CapReached`] (the one a caller of session-api
    /// meets) and `INVALID_ARGUMENT` as [`ErrorCode::Invalid`]. Codes no ptyhub service sends
    /// are read as what a caller can do about them.
    pub fn from_grpc(code: Code) -> Self {
        match code {
            Code::InvalidArgument => ErrorCode::Invalid,
            Code::OutOfRange => ErrorCode::Gone,
            Code::Unauthenticated => ErrorCode::Unauthenticated,
            Code::PermissionDenied => ErrorCode::Forbidden,
            Code::NotFound => ErrorCode::NotFound,
            Code::AlreadyExists => ErrorCode::AlreadyExists,
            Code::FailedPrecondition | Code::Aborted => ErrorCode::WrongState,
            Code::ResourceExhausted => ErrorCode::CapReached,
            Code::DeadlineExceeded => ErrorCode::TimedOut,
            Code::Unavailable | Code::Cancelled => ErrorCode::Unavailable,
            Code::Ok | Code::Unknown | Code::Unimplemented | Code::Internal | Code::DataLoss => {
                ErrorCode::Internal
            }
        }
    }

    /// A gRPC status with this code and `message`, and the code's name in
    /// [`ERROR_CODE_METADATA`] when it has one.
    pub fn status(self, message: impl Into<String>) -> tonic::Status {
        let mut status = tonic::Status::new(self.grpc_code(), message);
        if let Some(name) = self.name() {
            status.metadata_mut().insert(
                ERROR_CODE_METADATA,
                tonic::metadata::MetadataValue::from_static(name),
            );
        }
        status
    }
}

/// The metadata key of a status whose code has a name of its own ([`ErrorCode::name`]), so that
/// it survives each hop (broker, session-api, gateway) and reaches gRPC clients.
pub const ERROR_CODE_METADATA: &str = "ptyhub-error-code";

/// The metadata key a broker puts on the `UNAVAILABLE` status that ends a stream because it hands
/// its sessions to its next process: nothing failed, and the client may reattach at once.
pub const HANDING_OVER_METADATA: &str = "ptyhub-handing-over";

/// The status that ends a stream while its broker hands its sessions to its next process:
/// `UNAVAILABLE` with `message`, marked with [`HANDING_OVER_METADATA`].
pub fn handing_over_status(message: impl Into<String>) -> tonic::Status {
    let mut status = ErrorCode::Unavailable.status(message);
    status.metadata_mut().insert(
        HANDING_OVER_METADATA,
        tonic::metadata::MetadataValue::from_static("1"),
    );
    status
}

/// Whether `status` ended a stream because its broker hands its sessions to its next process.
pub fn is_handing_over(status: &tonic::Status) -> bool {
    status.code() == Code::Unavailable && status.metadata().contains_key(HANDING_OVER_METADATA)
}

/// The WebSocket close codes of the contract, including those no [`ErrorCode`] produces.
pub mod close_code {
    /// The session exited or was closed.
    pub const NORMAL: u16 = 1000;
    /// Policy: a refused origin, a malformed open.
    pub const POLICY: u16 = 1008;
    /// A frame of more than [`crate::limits::MAX_FRAME_BYTES`].
    pub const TOO_BIG: u16 = 1009;
    /// A backend failed; reconnect with backoff.
    pub const BACKEND_FAILURE: u16 = 1011;
    /// This gateway is shutting down (a rolling restart), or the session's broker hands it to its
    /// next process; reconnect now.
    pub const SERVICE_RESTART: u16 = 1012;
    /// No credential, or one that does not verify.
    pub const UNAUTHENTICATED: u16 = 4001;
    /// The credential does not cover this instance.
    pub const FORBIDDEN: u16 = 4003;
    /// The session is unknown or closed.
    pub const NOT_FOUND: u16 = 4004;
    /// Another controller took over; do not reconnect automatically.
    pub const TAKEN_OVER: u16 = 4009;
    /// Opening would create a session beyond the instance's cap.
    pub const CAP_REACHED: u16 = 4029;
}

/// Whether `status` reports the call's connection failing (a keepalive ping left unanswered by
/// a frozen peer, a connection reset or closed mid-call) rather than an answer. tonic reads an
/// answer's code from its trailers, with no source; a connection that fails under a call gives
/// it `UNKNOWN` with the failure as its source. Such a peer is unavailable, not broken.
pub fn is_connection_failure(status: &tonic::Status) -> bool {
    status.code() == Code::Unknown && std::error::Error::source(status).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_connection_is_unavailable_and_an_unknown_answer_internal() {
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset");
        let failed = tonic::Status::from_error(Box::new(reset));
        assert_eq!(failed.code(), Code::Unknown, "as tonic reports it");
        assert!(is_connection_failure(&failed));
        assert_eq!(ErrorCode::from_status(&failed), ErrorCode::Unavailable);

        let answered = tonic::Status::unknown("the peer's own unknown error");
        assert!(!is_connection_failure(&answered));
        assert_eq!(ErrorCode::from_status(&answered), ErrorCode::Internal);
    }

    const ALL: [ErrorCode; 17] = [
        ErrorCode::Malformed,
        ErrorCode::Invalid,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::Unauthenticated,
        ErrorCode::Forbidden,
        ErrorCode::OriginRefused,
        ErrorCode::NotFound,
        ErrorCode::AlreadyExists,
        ErrorCode::WrongState,
        ErrorCode::CapReached,
        ErrorCode::ContainerNotRunning,
        ErrorCode::LimitExceeded,
        ErrorCode::TooManyRequests,
        ErrorCode::TimedOut,
        ErrorCode::Gone,
        ErrorCode::Unavailable,
        ErrorCode::Internal,
    ];

    #[test]
    fn a_named_code_survives_the_wire_and_the_others_read_as_their_grpc_code() {
        for code in ALL {
            let sent = code.status("x");
            let mut trailers = http::HeaderMap::new();
            sent.add_header(&mut trailers).expect("trailers");
            let received = tonic::Status::from_header_map(&trailers).expect("a status");
            let read = ErrorCode::from_status(&received);
            if code.name().is_some() {
                assert_eq!(read, code);
            } else {
                assert_eq!(read, ErrorCode::from_grpc(code.grpc_code()), "{code:?}");
            }
        }
        // A plain FAILED_PRECONDITION is a conflict of some other state.
        assert_eq!(
            ErrorCode::from_status(&tonic::Status::failed_precondition("x")),
            ErrorCode::WrongState
        );
    }

    #[test]
    fn a_hand_off_status_is_told_apart_after_the_wire() {
        let sent = handing_over_status("handing over");
        let mut trailers = http::HeaderMap::new();
        sent.add_header(&mut trailers).expect("trailers");
        let received = tonic::Status::from_header_map(&trailers).expect("a status");
        assert_eq!(received.code(), Code::Unavailable);
        assert!(is_handing_over(&received));
        assert!(!is_handing_over(
            &ErrorCode::Unavailable.status("broker down")
        ));
    }

    #[test]
    fn the_table_gives_the_contract_status_and_close_code() {
        let expected = [
            (ErrorCode::Malformed, 400, 1008),
            (ErrorCode::Invalid, 422, 1008),
            (ErrorCode::UnsupportedMediaType, 415, 1008),
            (ErrorCode::Unauthenticated, 401, 4001),
            (ErrorCode::Forbidden, 403, 4003),
            (ErrorCode::OriginRefused, 403, 1008),
            (ErrorCode::NotFound, 404, 4004),
            (ErrorCode::AlreadyExists, 409, 1008),
            (ErrorCode::WrongState, 409, 1008),
            (ErrorCode::CapReached, 409, 4029),
            (ErrorCode::ContainerNotRunning, 409, 1011),
            (ErrorCode::LimitExceeded, 413, 1009),
            (ErrorCode::TooManyRequests, 429, 4029),
            (ErrorCode::TimedOut, 408, 1011),
            (ErrorCode::Gone, 410, 1008),
            (ErrorCode::Unavailable, 503, 1011),
            (ErrorCode::Internal, 500, 1011),
        ];
        assert_eq!(expected.len(), ALL.len(), "every code has a row");
        for (code, http, close) in expected {
            assert_eq!(code.http_status().as_u16(), http, "{code:?}");
            assert_eq!(code.websocket_close_code(), close, "{code:?}");
        }
    }

    #[test]
    fn a_grpc_code_reads_back_as_the_code_that_sent_it() {
        for code in ALL {
            let read_back = ErrorCode::from_grpc(code.grpc_code());
            let expected = match code {
                ErrorCode::Malformed | ErrorCode::UnsupportedMediaType => ErrorCode::Invalid,
                ErrorCode::OriginRefused => ErrorCode::Forbidden,
                ErrorCode::LimitExceeded | ErrorCode::TooManyRequests => ErrorCode::CapReached,
                // Told apart by its name, not its gRPC code.
                ErrorCode::ContainerNotRunning => ErrorCode::WrongState,
                other => other,
            };
            assert_eq!(read_back, expected, "{code:?}");
        }
    }
}
