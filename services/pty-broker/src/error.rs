//! The broker's errors, named by what went wrong: [`Error`] for a request that was refused or
//! failed (each names its [`ErrorCode`], which `grpc/` turns into a status), and [`StartError`]
//! for a broker that could not start or keep serving. Nothing here knows the wire.

use std::fmt;
use std::net::SocketAddr;

use ptyhub_attach_ticket::TicketError;
use ptyhub_wire::{ErrorCode, IntrospectionError};
use uuid::Uuid;

use crate::config::BackendKind;
use crate::domain::InvalidSize;
use crate::runtime::RuntimeError;
use crate::runtime::docker::DockerError;

/// Why a request was refused or failed. The session it concerns, if any, goes on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("session {0} not found")]
    SessionNotFound(Uuid),
    #[error("session {0} already exists")]
    SessionExists(Uuid),
    /// A client frame out of the `Attach` protocol's order: no hello first, a second hello, an
    /// empty frame.
    #[error("{0}")]
    MalformedStream(String),
    /// A request whose fields do not describe something the broker can do: a session id that is
    /// not a uuid, a spawn without a target, a NUL in an argument.
    #[error("{0}")]
    InvalidRequest(String),
    #[error(transparent)]
    InvalidSize(#[from] InvalidSize),
    #[error("resume offset {since} is beyond the session's output ({end} bytes so far)")]
    ResumeBeyondOutput { since: u64, end: u64 },
    #[error("the session has {0} viewers already, the most it takes")]
    TooManyViewers(usize),
    #[error("hello carries no attach ticket")]
    MissingTicket,
    /// The ticket cannot be trusted (malformed, forged, expired), or it is valid but not for this
    /// session or role.
    #[error(transparent)]
    TicketRefused(#[from] TicketError),
    #[error("a viewer may not {0}")]
    ViewerMayNot(ClientAction),
    #[error("another controller took over; this client may not {0}")]
    TakenOver(ClientAction),
    #[error("the session's process has exited")]
    ProcessExited,
    #[error("the session's process ended before it read the input")]
    ProcessEndedBeforeInput,
    #[error("the terminal did not take the input: {0}")]
    InputNotTaken(#[source] std::io::Error),
    #[error(
        "input not written (or not all of it): an interrupt (Ctrl-C) came after it and went first"
    )]
    InputInterrupted,
    /// A Ctrl-C the terminal could not take was to go as SIGINT, and the runtime could not send
    /// it (a Docker daemon that did not answer, say): the process may well be running still.
    #[error("the interrupt (Ctrl-C) could not be sent to the process: {0}")]
    InterruptNotSent(#[source] RuntimeError),
    #[error("the session is closed")]
    SessionClosed,
    #[error("client fell too far behind and was dropped")]
    ClientTooSlow,
    #[error("input frame of {0} bytes is over the 1 MiB limit")]
    InputTooLarge(usize),
    #[error("client frame is over the 1 MiB limit")]
    FrameTooLarge,
    #[error("no {0} runtime is configured on this broker")]
    RuntimeNotConfigured(BackendKind),
    #[error("the broker is shutting down")]
    ShuttingDown,
    #[error("the broker is handing its sessions to its next process: reattach with since")]
    HandingOver,
    #[error("a client holds control of this session; send with force to type anyway")]
    ControlHeld,
    #[error("this stream may only view: its credential does not allow control")]
    MayOnlyView,
    #[error("this stream already controls the session")]
    AlreadyControls,
    #[error("this stream already asked for control (request {0}): wait for the answer")]
    ControlAlreadyRequested(u64),
    #[error("{0} requests for control already wait for the controller's answer: ask again later")]
    TooManyControlRequests(usize),
    #[error("nobody controls the session to ask: attach as a controller instead")]
    NoController,
    #[error("no pending request for control {0} (answered already, or its requester left)")]
    UnknownControlRequest(u64),
    #[error("a request for control needs a principal: this credential names nobody")]
    RequesterUnnamed,
    #[error("{0} controls the session already")]
    PrincipalControls(String),
    #[error("{principal} already asked for control (request {request_id}): wait for the answer")]
    PrincipalAlreadyAsked { principal: String, request_id: u64 },
    #[error("only the controller ({0}) may answer a request for control")]
    NotTheController(String),
    #[error(
        "the session is shared: nobody answers requests; attach to control, or ask on an attached stream, to type"
    )]
    SharedControl,
    #[error(transparent)]
    UnknownKey(#[from] crate::screen::UnknownKey),
    #[error("the pattern does not compile: {0}")]
    InvalidPattern(String),
    #[error("the screen did not match within {} ms", .0.as_millis())]
    WaitTimedOut(std::time::Duration),
    #[error("this broker runs without screens (--screens=false)")]
    ScreensOff,
    #[error("the session's program marks no prompts (no shell integration): run needs one")]
    NoShellIntegration,
    #[error("the shell is not at its prompt (the terminal is {0}): a program is running")]
    NotAtPrompt(ptyhub_model::TerminalState),
    #[error("the command did not end within {} ms; it goes on running", .0.as_millis())]
    RunTimedOut(std::time::Duration),
    #[error("command {0} is not one this session keeps")]
    CommandNotFound(u64),
    #[error(
        "the ring no longer holds the first {lost} bytes of command {command}'s output, and the session is not recorded"
    )]
    CommandOutputLost { command: u64, lost: u64 },
    #[error(
        "neither the ring nor the session's recording holds {lost} bytes of command {command}'s output"
    )]
    CommandOutputNotRecorded { command: u64, lost: u64 },
    #[error(
        "command {command}'s output is {size} bytes, more than the {} MiB one answer carries: while the session is recorded, its recording has it all once the session closed",
        crate::recording::MAX_COMMAND_OUTPUT >> 20
    )]
    CommandOutputTooLong { command: u64, size: u64 },
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

impl Error {
    /// Where this error sits in the closed table every transport maps from.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::SessionNotFound(_) | Error::CommandNotFound(_) => ErrorCode::NotFound,
            Error::CommandOutputLost { .. }
            | Error::CommandOutputNotRecorded { .. }
            | Error::CommandOutputTooLong { .. } => ErrorCode::Gone,
            Error::SessionExists(_) => ErrorCode::AlreadyExists,
            Error::MalformedStream(_) => ErrorCode::Malformed,
            Error::InvalidRequest(_)
            | Error::InvalidSize(_)
            | Error::ResumeBeyondOutput { .. }
            | Error::UnknownKey(_)
            | Error::InvalidPattern(_) => ErrorCode::Invalid,
            Error::ControlHeld
            | Error::ScreensOff
            | Error::NotAtPrompt(_)
            | Error::AlreadyControls
            | Error::ControlAlreadyRequested(_)
            | Error::PrincipalControls(_)
            | Error::PrincipalAlreadyAsked { .. }
            | Error::SharedControl
            | Error::NoController => ErrorCode::WrongState,
            Error::UnknownControlRequest(_) => ErrorCode::NotFound,
            Error::RequesterUnnamed => ErrorCode::Invalid,
            Error::MayOnlyView | Error::NotTheController(_) => ErrorCode::Forbidden,
            Error::NoShellIntegration => ErrorCode::Invalid,
            Error::WaitTimedOut(_) | Error::RunTimedOut(_) => ErrorCode::TimedOut,
            Error::MissingTicket => ErrorCode::Unauthenticated,
            Error::TicketRefused(error) if error.is_unauthenticated() => ErrorCode::Unauthenticated,
            Error::TicketRefused(_) | Error::ViewerMayNot(_) | Error::TakenOver(_) => {
                ErrorCode::Forbidden
            }
            Error::ProcessExited
            | Error::ProcessEndedBeforeInput
            | Error::InputNotTaken(_)
            | Error::InputInterrupted
            | Error::SessionClosed => ErrorCode::WrongState,
            Error::ClientTooSlow
            | Error::InputTooLarge(_)
            | Error::FrameTooLarge
            | Error::TooManyControlRequests(_)
            | Error::TooManyViewers(_) => ErrorCode::LimitExceeded,
            Error::RuntimeNotConfigured(_)
            | Error::ShuttingDown
            | Error::HandingOver
            | Error::InterruptNotSent(_) => ErrorCode::Unavailable,
            Error::Runtime(error) => error.code(),
        }
    }
}

impl RuntimeError {
    /// Where a runtime's failure sits in the closed code table.
    pub fn code(&self) -> ErrorCode {
        match self {
            RuntimeError::Unavailable(_) => ErrorCode::Unavailable,
            RuntimeError::TargetNotFound(_) => ErrorCode::NotFound,
            RuntimeError::TargetNotRunning(_) => ErrorCode::ContainerNotRunning,
            RuntimeError::SpawnFailed(_) => ErrorCode::WrongState,
            RuntimeError::Refused(_) => ErrorCode::Forbidden,
            RuntimeError::Io { .. } | RuntimeError::Other(_) => ErrorCode::Internal,
        }
    }
}

/// What a controller asks of its session, for the messages that refuse it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAction {
    WriteInput,
    Resize,
    Reset,
    AnswerControl,
}

impl fmt::Display for ClientAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClientAction::WriteInput => "write input",
            ClientAction::Resize => "resize",
            ClientAction::Reset => "reset",
            ClientAction::AnswerControl => "answer a request for control",
        })
    }
}

/// Why a broker could not start, or stopped serving on its own.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("--docker-host: {0}")]
    DockerEndpoint(#[source] DockerError),
    #[error(
        "listening on {0}, which names no address others can dial: set --advertise \
         (PTYHUB_BROKER_ADVERTISE) to the URL session-api and gateways reach this broker at"
    )]
    NoAdvertisedEndpoint(SocketAddr),
    #[error(
        "--session-api needs the broker's own credential to register with: set \
         PTYHUB_BROKER_SERVICE_TOKEN_FILE (or PTYHUB_BROKER_SERVICE_TOKEN)"
    )]
    NoRegistrationCredential,
    #[error(transparent)]
    Introspection(#[from] IntrospectionError),
    #[error(transparent)]
    Tls(#[from] ptyhub_wire::TlsError),
    #[error("grpc server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("grpc server task failed: {0}")]
    ServerTask(#[from] tokio::task::JoinError),
    #[error("{context}: {source}")]
    Io {
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticket_refusals_split_into_unauthenticated_and_forbidden() {
        for unauthenticated in [
            TicketError::Malformed,
            TicketError::BadSignature,
            TicketError::Expired,
        ] {
            assert_eq!(
                Error::from(unauthenticated).code(),
                ErrorCode::Unauthenticated
            );
        }
        for forbidden in [
            TicketError::WrongSession,
            TicketError::RoleNotGranted("controller"),
        ] {
            assert_eq!(Error::from(forbidden).code(), ErrorCode::Forbidden);
        }
    }

    #[test]
    fn refusals_keep_the_messages_clients_know() {
        assert_eq!(
            Error::TakenOver(ClientAction::WriteInput).to_string(),
            "another controller took over; this client may not write input"
        );
        assert_eq!(
            Error::ViewerMayNot(ClientAction::Resize).to_string(),
            "a viewer may not resize"
        );
        assert_eq!(
            Error::RuntimeNotConfigured(BackendKind::Docker).to_string(),
            "no docker runtime is configured on this broker"
        );
    }
}
