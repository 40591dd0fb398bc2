//! Between protobuf and domain types: requests are validated on the way in (a bad field is an
//! [`Error`] naming it), answers and events are plain copies on the way out.

use std::time::SystemTime;

use ptyhub_proto::broker::v1 as pb;
use uuid::Uuid;

use crate::broker::Hello;
use crate::domain::{
    BrokerEvent, BrokerEventKind, ClientEvent, CloseReason, ExitStatus, Role, SessionInfo,
    SessionPhase, TerminalSize,
};
use crate::error::Error;
use crate::runtime::{SpawnSpec, Target};
use crate::session::AttachRequest;

// Protobuf to domain, validated.

pub(super) fn parse_session_id(text: &str) -> Result<Uuid, Error> {
    Uuid::parse_str(text)
        .map_err(|_| Error::InvalidRequest(format!("session id {text:?} is not a uuid")))
}

pub(super) fn terminal_size(size: pb::TerminalSize) -> Result<TerminalSize, Error> {
    Ok(TerminalSize::new(size.cols, size.rows)?)
}

impl TryFrom<pb::SpawnRequest> for SpawnSpec {
    type Error = Error;

    fn try_from(request: pb::SpawnRequest) -> Result<Self, Error> {
        let invalid = |message: &str| Error::InvalidRequest(message.to_owned());
        let session_id = parse_session_id(&request.session_id)?;
        let target = match request.target.and_then(|target| target.kind) {
            Some(pb::target::Kind::Local(_)) => Target::Local,
            Some(pb::target::Kind::Docker(docker)) => {
                if docker.container.trim().is_empty() {
                    return Err(invalid("docker target needs a container"));
                }
                Target::Docker {
                    container: docker.container,
                }
            }
            None => return Err(invalid("spawn needs a target")),
        };
        if request.command.iter().any(|arg| arg.contains('\0')) {
            return Err(invalid("command arguments must not contain NUL"));
        }
        if request.command.first().is_some_and(String::is_empty) {
            return Err(invalid("command program must not be empty"));
        }
        let mut env: Vec<(String, String)> = request.env.into_iter().collect();
        for (name, value) in &env {
            if name.is_empty() || name.contains('=') || name.contains('\0') || value.contains('\0')
            {
                return Err(Error::InvalidRequest(format!(
                    "invalid environment variable {name:?}"
                )));
            }
        }
        env.sort();
        let size = match request.size {
            Some(size) => terminal_size(size)?,
            None => TerminalSize::DEFAULT,
        };
        let non_empty = |text: String| (!text.is_empty()).then_some(text);
        Ok(SpawnSpec {
            session_id,
            target,
            command: request.command,
            env,
            cwd: non_empty(request.cwd),
            user: non_empty(request.user),
            size,
        })
    }
}

impl TryFrom<pb::Hello> for Hello {
    type Error = Error;

    fn try_from(hello: pb::Hello) -> Result<Self, Error> {
        if hello.ticket.is_empty() {
            return Err(Error::MissingTicket);
        }
        let session_id = parse_session_id(&hello.session_id)?;
        let role = match pb::Role::try_from(hello.role) {
            Ok(pb::Role::Controller) => Role::Controller,
            Ok(pb::Role::Viewer) => Role::Viewer,
            _ => return Err(Error::InvalidRequest("hello needs a role".to_owned())),
        };
        let size = hello.size.map(terminal_size).transpose()?;
        Ok(Hello {
            ticket: hello.ticket,
            session_id,
            request: AttachRequest {
                role,
                size,
                since: hello.since,
            },
        })
    }
}

// Domain to protobuf.

pub(super) fn timestamp(time: SystemTime) -> prost_types::Timestamp {
    prost_types::Timestamp::from(time)
}

fn pb_size(size: TerminalSize) -> pb::TerminalSize {
    pb::TerminalSize {
        cols: u32::from(size.cols()),
        rows: u32::from(size.rows()),
    }
}

impl From<ExitStatus> for pb::ExitStatus {
    fn from(exit: ExitStatus) -> Self {
        pb::ExitStatus {
            code: exit.code,
            signal: exit.signal,
        }
    }
}

fn state(phase: SessionPhase) -> pb::SessionState {
    match phase {
        SessionPhase::Starting => pb::SessionState::Starting,
        SessionPhase::Running => pb::SessionState::Running,
        SessionPhase::Resetting => pb::SessionState::Resetting,
        SessionPhase::Exited => pb::SessionState::Exited,
        SessionPhase::Closed(_) => pb::SessionState::Closed,
    }
}

fn close_reason(reason: CloseReason) -> pb::CloseReason {
    match reason {
        CloseReason::Killed => pb::CloseReason::Killed,
        CloseReason::Exited => pb::CloseReason::Exited,
        CloseReason::IdleReaped => pb::CloseReason::IdleReaped,
        CloseReason::Shutdown => pb::CloseReason::Shutdown,
        CloseReason::SpawnFailed => pb::CloseReason::SpawnFailed,
    }
}

fn role(role: Role) -> pb::Role {
    match role {
        Role::Controller => pb::Role::Controller,
        Role::Viewer => pb::Role::Viewer,
    }
}

impl From<SessionInfo> for pb::SessionInfo {
    fn from(info: SessionInfo) -> Self {
        let reason = match info.phase {
            SessionPhase::Closed(reason) => close_reason(reason),
            _ => pb::CloseReason::Unspecified,
        };
        pb::SessionInfo {
            session_id: info.session_id.to_string(),
            state: state(info.phase) as i32,
            size: Some(pb_size(info.size)),
            created_at: Some(timestamp(info.created_at)),
            last_activity_at: Some(timestamp(info.last_activity_at)),
            output_offset: info.output_offset,
            controllers: info.controllers,
            viewers: info.viewers,
            exit: info.exit.map(Into::into),
            close_reason: reason as i32,
            pid: info.pid.unwrap_or(0),
        }
    }
}

impl From<BrokerEvent> for pb::BrokerEvent {
    fn from(event: BrokerEvent) -> Self {
        use pb::broker_event::Event;
        let at = event.at;
        let event = match event.kind {
            BrokerEventKind::Started(info) => Event::Started(pb::Started {
                session: Some(info.into()),
            }),
            BrokerEventKind::Exited { session_id, exit } => Event::Exited(pb::Exited {
                session_id: session_id.to_string(),
                exit: Some(exit.into()),
            }),
            BrokerEventKind::Activity {
                session_id,
                last_activity_at,
                output_offset,
            } => Event::Activity(pb::Activity {
                session_id: session_id.to_string(),
                last_activity_at: Some(timestamp(last_activity_at)),
                output_offset,
            }),
            BrokerEventKind::Closed { session_id, reason } => Event::Closed(pb::Closed {
                session_id: session_id.to_string(),
                reason: close_reason(reason) as i32,
            }),
            BrokerEventKind::AttachmentsChanged {
                session_id,
                controllers,
                viewers,
            } => Event::AttachmentsChanged(pb::AttachmentsChanged {
                session_id: session_id.to_string(),
                controllers,
                viewers,
            }),
            BrokerEventKind::ResetDone(info) => Event::Reset(pb::ResetDone {
                session: Some(info.into()),
            }),
        };
        pb::BrokerEvent {
            at: Some(timestamp(at)),
            event: Some(event),
        }
    }
}

/// The frame that tells an attached client `event`.
pub(super) fn server_frame(session_id: Uuid, event: ClientEvent) -> pb::ServerFrame {
    use pb::server_frame::Frame;
    let frame = match event {
        ClientEvent::Connected {
            role: client_role,
            offset,
            size,
            phase,
        } => Frame::Connected(pb::Connected {
            session_id: session_id.to_string(),
            role: role(client_role) as i32,
            offset,
            size: Some(pb_size(size)),
            state: state(phase) as i32,
        }),
        ClientEvent::Output { offset, data } => Frame::Output(pb::Output { offset, data }),
        ClientEvent::Gap { lost, offset } => Frame::Gap(pb::Gap { lost, offset }),
        ClientEvent::Resize(size) => Frame::Resize(pb_size(size)),
        ClientEvent::Resetting => Frame::Resetting(pb::Resetting {}),
        ClientEvent::TakenOver => Frame::Detached(pb::Detached {
            reason: pb::DetachReason::TakenOver as i32,
        }),
        ClientEvent::Exit(exit) => Frame::Exit(exit.into()),
        ClientEvent::Closed(reason) => Frame::Closed(pb::Closed {
            session_id: session_id.to_string(),
            reason: close_reason(reason) as i32,
        }),
    };
    pb::ServerFrame { frame: Some(frame) }
}
