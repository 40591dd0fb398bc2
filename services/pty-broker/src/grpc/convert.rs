//! Between protobuf and domain types: requests are validated on the way in (a bad field is an
//! [`Error`] naming it), answers and events are plain copies on the way out.

use std::time::{Duration, SystemTime};

use ptyhub_attach_ticket::TicketHolder;
use ptyhub_model::proto::{self, ProtoEnum as _};
use ptyhub_model::{ControlMode, Screen, ScreenContent, SessionStatus};
use ptyhub_proto::broker::v1 as pb;
use ptyhub_wire::limits;
use uuid::Uuid;

use crate::broker::Hello;
use crate::domain::{
    BrokerEvent, BrokerEventKind, ClientEvent, Role, SessionInfo, SessionPhase, TerminalSize,
};
use crate::error::Error;
use crate::recording::{RecordMode, RecordingRequest};
use crate::runtime::{SpawnSpec, Target};
use crate::screen::ScreenFormat;
use crate::session::{
    AttachRequest, InputItem, InputSent, ScreenReading, ScreenWait, WaitEnd, WaitOutcome,
    WaitTarget,
};

// Protobuf to domain, validated.

pub(super) fn parse_session_id(text: &str) -> Result<Uuid, Error> {
    Uuid::parse_str(text)
        .map_err(|_| Error::InvalidRequest(format!("session id {text:?} is not a uuid")))
}

pub(super) fn terminal_size(size: pb::TerminalSize) -> Result<TerminalSize, Error> {
    Ok(TerminalSize::try_from(size)?)
}

/// A control mode; `None` for unspecified (exclusive at a spawn, refused by `SetControlMode`).
/// The instance's grant timeout for control requests, in seconds; 0 is no duration.
pub(super) fn control_grant_timeout(seconds: Option<u32>) -> Result<Option<Duration>, Error> {
    match seconds {
        Some(0) => Err(Error::InvalidRequest(
            "control_grant_timeout_secs must be at least 1 (absent for never)".into(),
        )),
        seconds => Ok(seconds.map(|seconds| Duration::from_secs(seconds.into()))),
    }
}

pub(super) fn control_mode(value: i32) -> Result<Option<ControlMode>, Error> {
    proto::optional_control_mode(value).map_err(|invalid| Error::InvalidRequest(invalid.0))
}

/// What a Spawn call asks to be recorded.
pub(crate) fn recording_request(request: &pb::SpawnRequest) -> Result<RecordingRequest, Error> {
    let mode = proto::optional_record_mode(request.record)
        .map_err(|invalid| Error::InvalidRequest(invalid.0))?
        .unwrap_or(RecordMode::Off);
    let title = request.recording_title.trim();
    Ok(RecordingRequest {
        mode,
        title: (!title.is_empty()).then(|| title.to_owned()),
    })
}

impl TryFrom<pb::SpawnRequest> for SpawnSpec {
    type Error = Error;

    fn try_from(request: pb::SpawnRequest) -> Result<Self, Error> {
        let invalid = |message: &str| Error::InvalidRequest(message.to_owned());
        let session_id = parse_session_id(&request.session_id)?;
        let target = Target::try_from(request.target.unwrap_or_default())
            .map_err(|refused| Error::InvalidRequest(refused.0))?;
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
            shell_integration: request.shell_integration,
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
        let role = Role::from_proto(hello.role)
            .map_err(|_| Error::InvalidRequest("hello needs a role".to_owned()))?;
        let size = hello.size.map(terminal_size).transpose()?;
        Ok(Hello {
            ticket: hello.ticket,
            session_id,
            request: AttachRequest {
                role,
                size,
                since: hello.since,
                snapshot: hello.snapshot,
                present_only: hello.present_only,
                // What the ticket names and admits, once it is verified.
                holder: TicketHolder::default(),
                may_control: false,
            },
        })
    }
}

pub(super) fn screen_format(format: i32) -> Result<ScreenFormat, Error> {
    proto::screen_format(format).map_err(|invalid| Error::InvalidRequest(invalid.0))
}

pub(super) fn scrollback(lines: u32) -> Result<usize, Error> {
    if lines > limits::MAX_SCREEN_SCROLLBACK {
        return Err(Error::InvalidRequest(format!(
            "scrollback {lines} is over the limit of {}",
            limits::MAX_SCREEN_SCROLLBACK
        )));
    }
    Ok(lines as usize)
}

/// A wait's timeout: 0 means [`limits::DEFAULT_WAIT_MS`], more than [`limits::MAX_WAIT_MS`] is
/// refused.
pub(super) fn wait_timeout(timeout_ms: u32) -> Result<Duration, Error> {
    match timeout_ms {
        0 => Ok(Duration::from_millis(u64::from(limits::DEFAULT_WAIT_MS))),
        ms if ms > limits::MAX_WAIT_MS => Err(Error::InvalidRequest(format!(
            "timeout_ms {ms} is over the maximum of {}",
            limits::MAX_WAIT_MS
        ))),
        ms => Ok(Duration::from_millis(u64::from(ms))),
    }
}

/// A page of commands: 0 means [`limits::DEFAULT_COMMANDS_PAGE`], more than
/// [`limits::MAX_COMMANDS_PAGE`] is refused.
pub(super) fn commands_limit(limit: u32) -> Result<usize, Error> {
    match limit {
        0 => Ok(limits::DEFAULT_COMMANDS_PAGE),
        limit if limit as usize > limits::MAX_COMMANDS_PAGE => Err(Error::InvalidRequest(format!(
            "limit {limit} is over the maximum of {}",
            limits::MAX_COMMANDS_PAGE
        ))),
        limit => Ok(limit as usize),
    }
}

/// An input's `input_id`, which asks for its receipt: at most [`limits::MAX_INPUT_ID_CHARS`].
pub(super) fn input_id(id: Option<String>) -> Result<Option<String>, Error> {
    match id {
        Some(id) if id.chars().count() > limits::MAX_INPUT_ID_CHARS => {
            Err(Error::InvalidRequest(format!(
                "input id is {} characters long: at most {}",
                id.chars().count(),
                limits::MAX_INPUT_ID_CHARS
            )))
        }
        id => Ok(id),
    }
}

pub(super) fn input_items(items: Vec<pb::InputItem>) -> Result<Vec<InputItem>, Error> {
    items
        .into_iter()
        .map(|item| match item.item {
            Some(pb::input_item::Item::Text(text)) => Ok(InputItem::Text(text)),
            Some(pb::input_item::Item::Key(key)) => Ok(InputItem::Key(key)),
            Some(pb::input_item::Item::Data(data)) => Ok(InputItem::Data(data)),
            None => Err(Error::InvalidRequest("an input item is empty".to_owned())),
        })
        .collect()
}

impl TryFrom<pb::WaitForScreenRequest> for ScreenWait {
    type Error = Error;

    fn try_from(request: pb::WaitForScreenRequest) -> Result<Self, Error> {
        let invalid = |message: String| Error::InvalidRequest(message);
        let timeout = wait_timeout(request.timeout_ms)?;
        if request.quiet_ms > limits::MAX_QUIET_MS {
            return Err(invalid(format!(
                "quiet_ms {} is over the maximum of {}",
                request.quiet_ms,
                limits::MAX_QUIET_MS
            )));
        }
        if request.pattern.len() > limits::MAX_PATTERN_BYTES {
            return Err(invalid(format!(
                "the pattern is over {} bytes",
                limits::MAX_PATTERN_BYTES
            )));
        }
        let target = match proto::optional_terminal_state(request.wait_for)
            .map_err(|refused| Error::InvalidRequest(refused.0))?
        {
            None => WaitTarget::Screen {
                pattern: wait_pattern(&request.pattern)?,
                quiet: (request.quiet_ms > 0)
                    .then(|| Duration::from_millis(u64::from(request.quiet_ms))),
            },
            Some(_) if !request.pattern.is_empty() => {
                return Err(invalid(
                    "a wait has a pattern or a state to wait for, not both".to_owned(),
                ));
            }
            Some(_) if request.quiet_ms > 0 => {
                return Err(invalid(
                    "quiet_ms is for a pattern; a wait for a state has its own rules".to_owned(),
                ));
            }
            Some(state) if state.wait_name().is_none() => {
                return Err(invalid(format!(
                    "no wait waits for the state {state}: wait for at_prompt, idle, \
                     waiting_for_input or exited"
                )));
            }
            Some(state) => WaitTarget::State(state),
        };
        Ok(ScreenWait {
            target,
            timeout,
            after_offset: request.after_offset,
            format: screen_format(request.format)?,
            scrollback: scrollback(request.scrollback)?,
        })
    }
}

/// A wait's pattern, compiled in multi-line mode; `None` for an empty one, which matches any
/// screen.
fn wait_pattern(pattern: &str) -> Result<Option<regex::Regex>, Error> {
    if pattern.is_empty() {
        return Ok(None);
    }
    regex::RegexBuilder::new(pattern)
        .multi_line(true)
        .size_limit(1 << 20)
        .build()
        .map(Some)
        .map_err(|error| Error::InvalidPattern(error.to_string()))
}

// Domain to protobuf.

pub(super) fn timestamp(time: SystemTime) -> prost_types::Timestamp {
    prost_types::Timestamp::from(time)
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

impl From<SessionInfo> for pb::SessionInfo {
    fn from(info: SessionInfo) -> Self {
        let reason = match info.phase {
            SessionPhase::Closed(reason) => Some(reason),
            _ => None,
        };
        pb::SessionInfo {
            session_id: info.session_id.to_string(),
            state: state(info.phase) as i32,
            size: Some(info.size.into()),
            created_at: Some(timestamp(info.created_at)),
            last_activity_at: Some(timestamp(info.last_activity_at)),
            output_offset: info.output_offset,
            controllers: info.controllers,
            viewers: info.viewers,
            exit: info.exit.map(Into::into),
            close_reason: proto::optional_to_proto(reason),
            pid: info.pid.unwrap_or(0),
            title: info.title,
            last_bell_at: info.last_bell_at.map(timestamp),
            terminal: Some(info.terminal.into()),
        }
    }
}

/// The screen answer: the reading, with the session's state and exit status beside it.
pub(super) fn screen(session_id: Uuid, reading: ScreenReading, info: &SessionInfo) -> pb::Screen {
    let ScreenReading {
        view,
        terminal,
        quiet_for,
    } = reading;
    let content = match view.format {
        ScreenFormat::Text => ScreenContent::Text(view.lines),
        ScreenFormat::Ansi => ScreenContent::Ansi(view.ansi.into_bytes()),
        ScreenFormat::Cells => ScreenContent::Cells(view.rows),
    };
    Screen {
        session_id: session_id.to_string(),
        offset: view.offset,
        size: Some(view.size),
        cursor: view.cursor,
        title: view.title,
        alternate_screen: view.alternate_screen,
        status: status(info.phase),
        exit: info.exit,
        scrollback_rows: u32::try_from(view.scrollback_rows).unwrap_or(u32::MAX),
        content,
        terminal: Some(terminal),
        quiet_ms: quiet_for.map(|quiet| u64::try_from(quiet.as_millis()).unwrap_or(u64::MAX)),
    }
    .into()
}

/// A phase in the words of a session's status, as a screen carries it.
fn status(phase: SessionPhase) -> SessionStatus {
    match phase {
        SessionPhase::Starting => SessionStatus::Starting,
        SessionPhase::Running => SessionStatus::Active,
        SessionPhase::Resetting => SessionStatus::Resetting,
        SessionPhase::Exited => SessionStatus::Exited,
        SessionPhase::Closed(_) => SessionStatus::Closed,
    }
}

impl From<InputSent> for pb::SendInputResponse {
    fn from(sent: InputSent) -> Self {
        pb::SendInputResponse {
            bytes_written: sent.bytes_written,
            output_offset: sent.output_offset,
        }
    }
}

/// The receipt of the input that carried `input_id`.
pub(super) fn input_ack(input_id: String, sent: InputSent) -> pb::ServerFrame {
    pb::ServerFrame {
        frame: Some(pb::server_frame::Frame::InputAck(pb::InputAck {
            input_id,
            offset: sent.output_offset,
            bytes: sent.bytes_written,
        })),
    }
}

pub(super) fn wait_response(session_id: Uuid, outcome: WaitOutcome) -> pb::WaitForScreenResponse {
    use pb::wait_for_screen_response::Outcome;
    let (outcome_code, matched, state) = match outcome.end {
        WaitEnd::Matched(matched) => (Outcome::Matched, matched, None),
        WaitEnd::State(state) => (Outcome::State, String::new(), Some(state)),
        WaitEnd::Exited => (Outcome::Exited, String::new(), None),
    };
    pb::WaitForScreenResponse {
        outcome: outcome_code as i32,
        terminal: Some(outcome.reading.terminal.clone().into()),
        screen: Some(screen(session_id, outcome.reading, &outcome.info)),
        matched,
        state: proto::optional_to_proto(state),
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
                title,
                last_bell_at,
            } => Event::Activity(pb::Activity {
                session_id: session_id.to_string(),
                last_activity_at: Some(timestamp(last_activity_at)),
                output_offset,
                title,
                last_bell_at: last_bell_at.map(timestamp),
            }),
            BrokerEventKind::Closed { session_id, reason } => Event::Closed(pb::Closed {
                session_id: session_id.to_string(),
                reason: reason.to_proto(),
            }),
            BrokerEventKind::InputTyped {
                session_id,
                principal,
                surface,
                bytes,
                since,
            } => Event::Typed(pb::InputTyped {
                session_id: session_id.to_string(),
                principal,
                surface,
                bytes,
                since: Some(timestamp(since)),
            }),
            BrokerEventKind::ControlChanged { session_id, change } => {
                Event::ControlChanged(pb::ControlChanged {
                    session_id: session_id.to_string(),
                    kind: change.kind.to_proto(),
                    from: change.from.map(holder_to_pb),
                    to: Some(holder_to_pb(change.to)),
                    request_id: change.request_id,
                })
            }
            BrokerEventKind::AttachmentsChanged {
                session_id,
                controllers,
                viewers,
                presence,
            } => Event::AttachmentsChanged(pb::AttachmentsChanged {
                session_id: session_id.to_string(),
                controllers,
                viewers,
                presence: presence.iter().map(Into::into).collect(),
            }),
            BrokerEventKind::ResetDone(info) => Event::Reset(pb::ResetDone {
                session: Some(info.into()),
            }),
            BrokerEventKind::Terminal {
                session_id,
                terminal,
                commands,
            } => Event::Terminal(pb::TerminalChanged {
                session_id: session_id.to_string(),
                terminal: Some(terminal.into()),
                commands: commands.into_iter().map(Into::into).collect(),
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
            role: client_role.to_proto(),
            offset,
            size: Some(size.into()),
            state: state(phase) as i32,
        }),
        ClientEvent::Output { offset, data } => Frame::Output(pb::Output { offset, data }),
        ClientEvent::Gap { lost, offset } => Frame::Gap(pb::Gap { lost, offset }),
        ClientEvent::Snapshot(snapshot) => Frame::Snapshot(pb::ScreenSnapshot {
            offset: snapshot.offset,
            size: Some(snapshot.size.into()),
            data: snapshot.data,
        }),
        ClientEvent::Resize(size) => Frame::Resize(size.into()),
        ClientEvent::Resetting => Frame::Resetting(pb::Resetting {}),
        ClientEvent::TakenOver => Frame::Detached(pb::Detached {
            reason: pb::DetachReason::TakenOver as i32,
        }),
        ClientEvent::ControlRequested {
            request_id,
            requester,
        } => Frame::ControlRequested(pb::ControlRequested {
            request_id,
            requester: Some((&requester).into()),
        }),
        ClientEvent::ControlDeclined { request_id } => {
            Frame::ControlDeclined(pb::ControlDeclined { request_id })
        }
        ClientEvent::RoleChanged(role) => Frame::RoleChanged(pb::RoleChanged {
            role: role.to_proto(),
        }),
        ClientEvent::Exit(exit) => Frame::Exit(exit.into()),
        ClientEvent::Closed(reason) => Frame::Closed(pb::Closed {
            session_id: session_id.to_string(),
            reason: reason.to_proto(),
        }),
    };
    pb::ServerFrame { frame: Some(frame) }
}

/// A stream's or a caller's holder as the broker's messages carry it.
fn holder_to_pb(holder: TicketHolder) -> pb::TicketHolder {
    pb::TicketHolder {
        principal: holder.principal,
        surface: holder.surface,
    }
}

/// The holder a session-api call names; empty fields stand for nobody, as in a ticket.
pub fn holder_from_pb(holder: Option<pb::TicketHolder>) -> TicketHolder {
    holder.map_or_else(TicketHolder::default, |holder| TicketHolder {
        principal: holder.principal,
        surface: holder.surface,
    })
}
