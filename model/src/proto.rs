//! The one place the contract's nouns meet their protobuf forms: each noun's conversion to the
//! generated type and back, checked on the way in, proven by the round-trip tests below. A
//! service's adapter calls these and keeps no conversion of its own for these nouns.
//!
//! Enumerations travel as `i32` in prost's messages; [`ProtoEnum`] reads one (refusing the
//! `UNSPECIFIED` zero and numbers this build does not know) and writes one. Where the zero means
//! "none" on the wire (a session that is not closed has no close reason, a stream that is not
//! attached no role), the `optional_*` functions say so with an `Option`.

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;

use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::{
    Attendee, AuditKind, BrokerCloseReason, Cell, ChangeKind, CloseReason, Color, Command,
    ControlChangeKind, ControlMode, ControlRequest, ControlState, Cursor, ExitStatus, Invalid,
    Notification, Progress, RecordMode, ReservedControl, Role, Screen, ScreenContent, ScreenFormat,
    ScreenRow, Session, SessionStatus, Target, TerminalActivity, TerminalSize, TerminalState,
};

/// A contract enumeration carried as a protobuf enum.
pub trait ProtoEnum: Sized + Copy {
    /// What the value is, for the message of a refused one.
    const WHAT: &'static str;

    /// The value a message carries, `UNSPECIFIED` (0) and unknown numbers refused.
    fn from_proto(value: i32) -> Result<Self, Invalid>;

    /// The number a message carries.
    fn to_proto(self) -> i32;
}

fn unknown<T: ProtoEnum>(value: i32) -> Invalid {
    Invalid(format!("{} {value} is not one this server knows", T::WHAT))
}

/// Implements [`ProtoEnum`] from one table of pairs, so that the two directions cannot differ.
macro_rules! proto_enum {
    ($model:ident, $proto:ty, $what:literal, { $($variant:ident => $proto_variant:ident),+ $(,)? }) => {
        impl ProtoEnum for $model {
            const WHAT: &'static str = $what;

            fn from_proto(value: i32) -> Result<Self, Invalid> {
                match <$proto>::try_from(value) {
                    $(Ok(<$proto>::$proto_variant) => Ok($model::$variant),)+
                    _ => Err(unknown::<Self>(value)),
                }
            }

            fn to_proto(self) -> i32 {
                match self {
                    $($model::$variant => <$proto>::$proto_variant as i32,)+
                }
            }
        }
    };
}

proto_enum!(SessionStatus, session_pb::SessionStatus, "session status", {
    Starting => Starting,
    Active => Active,
    Resetting => Resetting,
    Exited => Exited,
    Closed => Closed,
});

proto_enum!(CloseReason, session_pb::CloseReason, "close reason", {
    ClosedByUser => ClosedByUser,
    Exited => Exited,
    IdleReaped => IdleReaped,
    BrokerLost => BrokerLost,
    InstanceDeleted => InstanceDeleted,
    SpawnFailed => SpawnFailed,
});

proto_enum!(BrokerCloseReason, broker_pb::CloseReason, "broker close reason", {
    Killed => Killed,
    Exited => Exited,
    IdleReaped => IdleReaped,
    Shutdown => Shutdown,
    SpawnFailed => SpawnFailed,
});

proto_enum!(ChangeKind, session_pb::session_change::Kind, "change kind", {
    Created => Created,
    Renamed => Renamed,
    Status => Status,
    Closed => Closed,
    Attachments => Attachments,
    Screen => Screen,
    Terminal => Terminal,
});

proto_enum!(AuditKind, session_pb::AuditKind, "audit kind", {
    InstanceCreated => InstanceCreated,
    InstanceDeleted => InstanceDeleted,
    SessionCreated => SessionCreated,
    SessionRenamed => SessionRenamed,
    SessionReset => SessionReset,
    SessionClosed => SessionClosed,
    Attached => Attached,
    Detached => Detached,
    Takeover => Takeover,
    Input => Input,
    Refused => Refused,
    ShareCreated => ShareCreated,
    ShareRevoked => ShareRevoked,
    WebhookCreated => WebhookCreated,
    WebhookDeleted => WebhookDeleted,
    WebhookDeliveryFailed => WebhookDeliveryFailed,
    Control => Control,
    ControlModeChanged => ControlModeChanged,
});

proto_enum!(RecordMode, broker_pb::RecordMode, "record mode", {
    Off => Off,
    Output => Output,
    OutputAndInput => OutputAndInput,
});

proto_enum!(ControlMode, broker_pb::ControlMode, "control mode", {
    Exclusive => Exclusive,
    Shared => Shared,
});

proto_enum!(TerminalState, broker_pb::TerminalState, "terminal state", {
    Starting => Starting,
    AtPrompt => AtPrompt,
    Running => Running,
    WaitingForInput => WaitingForInput,
    Idle => Idle,
    Exited => Exited,
});

proto_enum!(ControlChangeKind, broker_pb::ControlChangeKind, "control change kind", {
    Granted => Granted,
    GrantedByTimeout => GrantedByTimeout,
    Declined => Declined,
});

proto_enum!(Role, broker_pb::Role, "role", {
    Controller => Controller,
    Viewer => Viewer,
});

proto_enum!(ScreenFormat, broker_pb::ScreenFormat, "screen format", {
    Text => Text,
    Ansi => Ansi,
    Cells => Cells,
});

/// A screen format where `UNSPECIFIED` means the default, text.
pub fn screen_format(value: i32) -> Result<ScreenFormat, Invalid> {
    optional(value).map(Option::unwrap_or_default)
}

/// A close reason where `UNSPECIFIED` means the session is not closed.
pub fn optional_close_reason(value: i32) -> Result<Option<CloseReason>, Invalid> {
    optional(value)
}

/// A broker's close reason where `UNSPECIFIED` means none was given (a broker that did not
/// say).
pub fn optional_broker_close_reason(value: i32) -> Result<Option<BrokerCloseReason>, Invalid> {
    optional(value)
}

/// A role where `UNSPECIFIED` means none was given (a listing of every role, say).
pub fn optional_role(value: i32) -> Result<Option<Role>, Invalid> {
    optional(value)
}

/// A recording setting where `UNSPECIFIED` means the server's default.
pub fn optional_record_mode(value: i32) -> Result<Option<RecordMode>, Invalid> {
    optional(value)
}

/// A control mode where `UNSPECIFIED` means none was given: the default (exclusive) on a
/// create, no change on an update.
pub fn optional_control_mode(value: i32) -> Result<Option<ControlMode>, Invalid> {
    optional(value)
}

/// A terminal state where `UNSPECIFIED` means none was given (a wait for a pattern rather than
/// a state).
pub fn optional_terminal_state(value: i32) -> Result<Option<TerminalState>, Invalid> {
    optional(value)
}

/// The number of `value`, `UNSPECIFIED` (0) for none.
pub fn optional_to_proto<T: ProtoEnum>(value: Option<T>) -> i32 {
    value.map_or(0, ProtoEnum::to_proto)
}

fn optional<T: ProtoEnum>(value: i32) -> Result<Option<T>, Invalid> {
    if value == 0 {
        Ok(None)
    } else {
        T::from_proto(value).map(Some)
    }
}

impl From<TerminalSize> for broker_pb::TerminalSize {
    fn from(size: TerminalSize) -> Self {
        Self {
            cols: size.cols().into(),
            rows: size.rows().into(),
        }
    }
}

impl TryFrom<broker_pb::TerminalSize> for TerminalSize {
    type Error = crate::InvalidSize;

    fn try_from(size: broker_pb::TerminalSize) -> Result<Self, crate::InvalidSize> {
        TerminalSize::new(size.cols, size.rows)
    }
}

impl From<ExitStatus> for broker_pb::ExitStatus {
    fn from(exit: ExitStatus) -> Self {
        Self {
            code: exit.code,
            signal: exit.signal,
        }
    }
}

impl From<broker_pb::ExitStatus> for ExitStatus {
    fn from(exit: broker_pb::ExitStatus) -> Self {
        Self {
            code: exit.code,
            signal: exit.signal,
        }
    }
}

impl From<Target> for broker_pb::Target {
    fn from(target: Target) -> Self {
        let kind = match target {
            Target::Local => broker_pb::target::Kind::Local(broker_pb::LocalTarget {}),
            Target::Docker { container } => {
                broker_pb::target::Kind::Docker(broker_pb::DockerTarget { container })
            }
        };
        Self { kind: Some(kind) }
    }
}

impl TryFrom<broker_pb::Target> for Target {
    type Error = Invalid;

    /// A target names its kind, and a container target its container.
    fn try_from(target: broker_pb::Target) -> Result<Self, Invalid> {
        match target.kind {
            Some(broker_pb::target::Kind::Local(_)) => Ok(Target::Local),
            Some(broker_pb::target::Kind::Docker(docker)) if docker.container.trim().is_empty() => {
                Err(Invalid::new("target.docker.container must not be empty"))
            }
            Some(broker_pb::target::Kind::Docker(docker)) => Ok(Target::Docker {
                container: docker.container,
            }),
            None => Err(Invalid::new("target must be local or docker")),
        }
    }
}

/// A timestamp as a time; one before the epoch or out of range is the epoch.
pub fn system_time(at: prost_types::Timestamp) -> SystemTime {
    SystemTime::try_from(at).unwrap_or(UNIX_EPOCH)
}

impl From<Progress> for broker_pb::Progress {
    fn from(progress: Progress) -> Self {
        Self {
            kind: progress.kind().to_owned(),
            percent: progress.percent().map(u32::from),
        }
    }
}

impl TryFrom<broker_pb::Progress> for Progress {
    type Error = Invalid;

    fn try_from(progress: broker_pb::Progress) -> Result<Self, Invalid> {
        let percent = progress.percent.map(|percent| percent.min(100) as u8);
        Progress::from_parts(&progress.kind, percent).ok_or_else(|| {
            Invalid(format!(
                "progress kind {:?} is not one this server knows",
                progress.kind
            ))
        })
    }
}

impl From<Notification> for broker_pb::Notification {
    fn from(notification: Notification) -> Self {
        Self {
            text: notification.text,
            at: Some(notification.at.into()),
        }
    }
}

impl From<broker_pb::Notification> for Notification {
    fn from(notification: broker_pb::Notification) -> Self {
        Self {
            text: notification.text,
            at: notification.at.map_or(UNIX_EPOCH, system_time),
        }
    }
}

impl From<TerminalActivity> for broker_pb::TerminalActivity {
    fn from(terminal: TerminalActivity) -> Self {
        Self {
            state: terminal.state.to_proto(),
            progress: terminal.progress.map(Into::into),
            notification: terminal.notification.map(Into::into),
            cwd: terminal.cwd.unwrap_or_default(),
            shell_integration: terminal.integrated,
            running_command_id: terminal.running_command.unwrap_or(0),
        }
    }
}

impl TryFrom<broker_pb::TerminalActivity> for TerminalActivity {
    type Error = Invalid;

    /// An `UNSPECIFIED` state (from a broker that does not know) is `starting`.
    fn try_from(terminal: broker_pb::TerminalActivity) -> Result<Self, Invalid> {
        Ok(Self {
            state: optional::<TerminalState>(terminal.state)?.unwrap_or_default(),
            progress: terminal.progress.map(TryInto::try_into).transpose()?,
            notification: terminal.notification.map(Into::into),
            cwd: (!terminal.cwd.is_empty()).then_some(terminal.cwd),
            integrated: terminal.shell_integration,
            running_command: (terminal.running_command_id != 0)
                .then_some(terminal.running_command_id),
        })
    }
}

impl From<Command> for broker_pb::Command {
    fn from(command: Command) -> Self {
        Self {
            id: command.id,
            command: command.command,
            cwd: command.cwd.unwrap_or_default(),
            started_at: Some(command.started_at.into()),
            ended_at: command.ended_at.map(Into::into),
            exit_code: command.exit_code,
            output_start: command.output_start,
            output_end: command.output_end,
        }
    }
}

impl From<broker_pb::Command> for Command {
    fn from(command: broker_pb::Command) -> Self {
        Self {
            id: command.id,
            command: command.command,
            cwd: (!command.cwd.is_empty()).then_some(command.cwd),
            started_at: command.started_at.map_or(UNIX_EPOCH, system_time),
            ended_at: command.ended_at.map(system_time),
            exit_code: command.exit_code,
            output_start: command.output_start,
            output_end: command.output_end,
        }
    }
}

impl From<Cursor> for broker_pb::Cursor {
    fn from(cursor: Cursor) -> Self {
        Self {
            row: cursor.row,
            col: cursor.col,
            visible: cursor.visible,
        }
    }
}

impl From<broker_pb::Cursor> for Cursor {
    fn from(cursor: broker_pb::Cursor) -> Self {
        Self {
            row: cursor.row,
            col: cursor.col,
            visible: cursor.visible,
        }
    }
}

impl From<Color> for broker_pb::Color {
    fn from(color: Color) -> Self {
        let kind = match color {
            Color::Indexed(index) => broker_pb::color::Kind::Indexed(index.into()),
            Color::Rgb { red, green, blue } => {
                broker_pb::color::Kind::Rgb(u32::from_be_bytes([0, red, green, blue]))
            }
        };
        Self { kind: Some(kind) }
    }
}

impl TryFrom<broker_pb::Color> for Color {
    type Error = Invalid;

    /// An index within the palette (0..=255) or an RGB number within `0xFFFFFF`.
    fn try_from(color: broker_pb::Color) -> Result<Self, Invalid> {
        match color.kind {
            Some(broker_pb::color::Kind::Indexed(index)) => u8::try_from(index)
                .map(Color::Indexed)
                .map_err(|_| Invalid(format!("colour index {index} is not in 0..=255"))),
            Some(broker_pb::color::Kind::Rgb(rgb)) => match rgb.to_be_bytes() {
                [0, red, green, blue] => Ok(Color::Rgb { red, green, blue }),
                _ => Err(Invalid(format!("colour {rgb:#x} is not 0xRRGGBB"))),
            },
            None => Err(Invalid::new("colour must be indexed or rgb")),
        }
    }
}

impl From<Cell> for broker_pb::Cell {
    fn from(cell: Cell) -> Self {
        Self {
            text: cell.text,
            wide: cell.wide,
            fg: cell.fg.map(Into::into),
            bg: cell.bg.map(Into::into),
            bold: cell.bold,
            dim: cell.dim,
            italic: cell.italic,
            underline: cell.underline,
            inverse: cell.inverse,
        }
    }
}

impl From<broker_pb::Cell> for Cell {
    /// A colour this build cannot read reads as the default, rather than failing the screen.
    fn from(cell: broker_pb::Cell) -> Self {
        let color = |color: Option<broker_pb::Color>| color.and_then(|color| color.try_into().ok());
        Self {
            text: cell.text,
            wide: cell.wide,
            fg: color(cell.fg),
            bg: color(cell.bg),
            bold: cell.bold,
            dim: cell.dim,
            italic: cell.italic,
            underline: cell.underline,
            inverse: cell.inverse,
        }
    }
}

impl From<ScreenRow> for broker_pb::ScreenRow {
    fn from(row: ScreenRow) -> Self {
        Self {
            cells: row.cells.into_iter().map(Into::into).collect(),
            wrapped: row.wrapped,
        }
    }
}

impl From<broker_pb::ScreenRow> for ScreenRow {
    fn from(row: broker_pb::ScreenRow) -> Self {
        Self {
            cells: row.cells.into_iter().map(Into::into).collect(),
            wrapped: row.wrapped,
        }
    }
}

/// A session's status in the broker's words for its process (`SessionState`), as a screen
/// carries it: `active` is `RUNNING`.
fn broker_state(status: SessionStatus) -> broker_pb::SessionState {
    match status {
        SessionStatus::Starting => broker_pb::SessionState::Starting,
        SessionStatus::Active => broker_pb::SessionState::Running,
        SessionStatus::Resetting => broker_pb::SessionState::Resetting,
        SessionStatus::Exited => broker_pb::SessionState::Exited,
        SessionStatus::Closed => broker_pb::SessionState::Closed,
    }
}

/// The inverse of [`broker_state`]; a state a broker did not say, or one this build does not
/// know, reads as `starting`, the status that promises least.
fn status_of_broker_state(state: i32) -> SessionStatus {
    SessionStatus::ALL
        .into_iter()
        .find(|status| broker_state(*status) as i32 == state)
        .unwrap_or(SessionStatus::Starting)
}

impl From<Screen> for broker_pb::Screen {
    fn from(screen: Screen) -> Self {
        let format = screen.content.format().to_proto();
        let (mut lines, mut ansi, mut rows) = (Vec::new(), Vec::new(), Vec::new());
        match screen.content {
            ScreenContent::Text(text) => lines = text,
            ScreenContent::Ansi(bytes) => ansi = bytes,
            ScreenContent::Cells(cells) => rows = cells.into_iter().map(Into::into).collect(),
        }
        Self {
            session_id: screen.session_id,
            offset: screen.offset,
            size: screen.size.map(Into::into),
            cursor: Some(screen.cursor.into()),
            title: screen.title,
            alternate_screen: screen.alternate_screen,
            format,
            scrollback_rows: screen.scrollback_rows,
            lines,
            ansi,
            rows,
            state: broker_state(screen.status) as i32,
            exit: screen.exit.map(Into::into),
            terminal: screen.terminal.map(Into::into),
            quiet_ms: screen.quiet_ms,
        }
    }
}

impl TryFrom<broker_pb::Screen> for Screen {
    type Error = Invalid;

    /// The format must be one this build knows (`UNSPECIFIED` is text); a size out of bounds
    /// reads as none and an unknown state as `starting`, so that a newer broker's screen still
    /// shows.
    fn try_from(screen: broker_pb::Screen) -> Result<Self, Invalid> {
        let content = match screen_format(screen.format)? {
            ScreenFormat::Text => ScreenContent::Text(screen.lines),
            ScreenFormat::Ansi => ScreenContent::Ansi(screen.ansi),
            ScreenFormat::Cells => {
                ScreenContent::Cells(screen.rows.into_iter().map(Into::into).collect())
            }
        };
        Ok(Self {
            session_id: screen.session_id,
            offset: screen.offset,
            size: screen
                .size
                .and_then(|size| TerminalSize::try_from(size).ok()),
            cursor: screen.cursor.unwrap_or_default().into(),
            title: screen.title,
            alternate_screen: screen.alternate_screen,
            status: status_of_broker_state(screen.state),
            exit: screen.exit.map(Into::into),
            scrollback_rows: screen.scrollback_rows,
            content,
            terminal: screen.terminal.map(TryInto::try_into).transpose()?,
            quiet_ms: screen.quiet_ms,
        })
    }
}

/// A time as a protobuf timestamp.
pub fn timestamp(at: DateTime<Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: at.timestamp(),
        nanos: i32::try_from(at.timestamp_subsec_nanos()).unwrap_or(0),
    }
}

/// A timestamp as a time, one out of chrono's range refused; `what` names it in the message.
fn date_time(what: &str, at: prost_types::Timestamp) -> Result<DateTime<Utc>, Invalid> {
    u32::try_from(at.nanos)
        .ok()
        .and_then(|nanos| DateTime::from_timestamp(at.seconds, nanos))
        .ok_or_else(|| Invalid(format!("{what} is not a valid time")))
}

/// A timestamp a message must carry.
fn required_date_time(
    what: &str,
    at: Option<prost_types::Timestamp>,
) -> Result<DateTime<Utc>, Invalid> {
    date_time(
        what,
        at.ok_or_else(|| Invalid(format!("{what} is missing")))?,
    )
}

/// A timestamp a message may leave out.
fn optional_date_time(
    what: &str,
    at: Option<prost_types::Timestamp>,
) -> Result<Option<DateTime<Utc>>, Invalid> {
    at.map(|at| date_time(what, at)).transpose()
}

fn uuid(what: &str, text: &str) -> Result<Uuid, Invalid> {
    Uuid::parse_str(text).map_err(|_| Invalid(format!("{what} {text:?} is not a uuid")))
}

impl From<&Attendee> for broker_pb::Attendee {
    fn from(attendee: &Attendee) -> Self {
        Self {
            principal: attendee.principal.clone(),
            role: attendee.role.to_proto(),
            surface: attendee.surface.clone(),
            since: Some(timestamp(attendee.since)),
            typing: attendee.typing,
        }
    }
}

impl TryFrom<broker_pb::Attendee> for Attendee {
    type Error = Invalid;

    /// The role known and the attach time present.
    fn try_from(attendee: broker_pb::Attendee) -> Result<Self, Invalid> {
        Ok(Self {
            principal: attendee.principal,
            role: Role::from_proto(attendee.role)?,
            surface: attendee.surface,
            since: required_date_time("attendee since", attendee.since)?,
            typing: attendee.typing,
        })
    }
}

impl From<&ControlState> for broker_pb::ControlState {
    fn from(state: &ControlState) -> Self {
        Self {
            controller: state.controller.as_ref().map(Into::into),
            reserved_for: state
                .reserved_for
                .as_ref()
                .map(|reserved| broker_pb::ReservedControl {
                    principal: reserved.principal.clone(),
                    until: Some(timestamp(reserved.until)),
                }),
            requests: state.requests.iter().map(Into::into).collect(),
        }
    }
}

impl TryFrom<broker_pb::ControlState> for ControlState {
    type Error = Invalid;

    /// The controller a valid attendee, the reservation's end and each request's time present.
    fn try_from(state: broker_pb::ControlState) -> Result<Self, Invalid> {
        Ok(Self {
            controller: state.controller.map(TryInto::try_into).transpose()?,
            reserved_for: state
                .reserved_for
                .map(|reserved| {
                    Ok::<_, Invalid>(ReservedControl {
                        principal: reserved.principal,
                        until: required_date_time("reservation until", reserved.until)?,
                    })
                })
                .transpose()?,
            requests: state
                .requests
                .into_iter()
                .map(TryInto::try_into)
                .collect::<Result<_, _>>()?,
        })
    }
}

impl From<&ControlRequest> for broker_pb::ControlRequest {
    fn from(request: &ControlRequest) -> Self {
        Self {
            id: request.id,
            principal: request.principal.clone(),
            surface: request.surface.clone(),
            since: Some(timestamp(request.since)),
            stream: request.stream,
        }
    }
}

impl TryFrom<broker_pb::ControlRequest> for ControlRequest {
    type Error = Invalid;

    /// The time it was made present.
    fn try_from(request: broker_pb::ControlRequest) -> Result<Self, Invalid> {
        Ok(Self {
            id: request.id,
            principal: request.principal,
            surface: request.surface,
            since: required_date_time("control request since", request.since)?,
            stream: request.stream,
        })
    }
}

impl From<&Session> for session_pb::Session {
    fn from(session: &Session) -> Self {
        Self {
            id: session.id.to_string(),
            instance_id: session.instance_id.to_string(),
            name: session.name.clone(),
            status: session.status.to_proto(),
            close_reason: optional_to_proto(session.close_reason),
            exit: session.exit.map(Into::into),
            aliases: session.aliases.clone(),
            size: Some(session.size.into()),
            broker_id: session.broker_id.clone(),
            created_at: Some(timestamp(session.created_at)),
            last_activity_at: Some(timestamp(session.last_activity_at)),
            closed_at: session.closed_at.map(timestamp),
            attached_clients: session.attached_clients,
            title: session.title.clone().unwrap_or_default(),
            last_bell_at: session.last_bell_at.map(timestamp),
            terminal: session.terminal.clone().map(Into::into),
            presence: session.presence.iter().map(Into::into).collect(),
            control_mode: session.control_mode.to_proto(),
        }
    }
}

impl TryFrom<session_pb::Session> for Session {
    type Error = Invalid;

    /// Ids are UUIDs, the status and close reason known, the size in bounds, the creation and
    /// last activity times present; an empty title is none.
    fn try_from(session: session_pb::Session) -> Result<Self, Invalid> {
        let size = session
            .size
            .ok_or_else(|| Invalid::new("session size is missing"))?;
        let size = TerminalSize::try_from(size).map_err(|invalid| {
            Invalid(format!(
                "session size {}x{} is out of bounds",
                invalid.cols, invalid.rows
            ))
        })?;
        Ok(Self {
            id: uuid("session id", &session.id)?,
            instance_id: uuid("session instance_id", &session.instance_id)?,
            name: session.name,
            status: SessionStatus::from_proto(session.status)?,
            close_reason: optional_close_reason(session.close_reason)?,
            exit: session.exit.map(Into::into),
            aliases: session.aliases,
            size,
            broker_id: session.broker_id,
            created_at: required_date_time("session created_at", session.created_at)?,
            last_activity_at: required_date_time(
                "session last_activity_at",
                session.last_activity_at,
            )?,
            closed_at: optional_date_time("session closed_at", session.closed_at)?,
            attached_clients: session.attached_clients,
            title: (!session.title.is_empty()).then_some(session.title),
            last_bell_at: optional_date_time("session last_bell_at", session.last_bell_at)?,
            terminal: session.terminal.map(TryInto::try_into).transpose()?,
            presence: session
                .presence
                .into_iter()
                .map(TryInto::try_into)
                .collect::<Result<_, _>>()?,
            // A record from a server older than control modes is exclusive, as its sessions
            // were.
            control_mode: optional_control_mode(session.control_mode)?.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Every value of `all` survives the trip to its number and back; the numbers are distinct
    /// and none is 0; every other number in a wide range is refused, 0 included.
    fn round_trips<T: ProtoEnum + PartialEq + std::fmt::Debug>(all: &[T]) {
        let mut numbers: Vec<i32> = all.iter().map(|value| value.to_proto()).collect();
        for (value, number) in all.iter().zip(&numbers) {
            assert_eq!(T::from_proto(*number).as_ref(), Ok(value), "{value:?}");
        }
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(numbers.len(), all.len(), "two values share a number");
        for number in -5..64 {
            if !numbers.contains(&number) {
                let refused = T::from_proto(number).unwrap_err();
                assert!(refused.message().starts_with(T::WHAT), "{refused}");
            }
        }
    }

    #[test]
    fn an_attendee_round_trips_and_a_bad_one_is_refused() {
        let attendee = Attendee {
            principal: "alice".to_owned(),
            role: Role::Controller,
            surface: "cli".to_owned(),
            since: DateTime::from_timestamp(1_700_000_000, 5_000).unwrap(),
            typing: true,
        };
        let message = broker_pb::Attendee::from(&attendee);
        assert_eq!(Attendee::try_from(message.clone()), Ok(attendee));
        let no_role = broker_pb::Attendee {
            role: 0,
            ..message.clone()
        };
        assert!(Attendee::try_from(no_role).is_err());
        let no_since = broker_pb::Attendee {
            since: None,
            ..message
        };
        assert_eq!(
            Attendee::try_from(no_since),
            Err(Invalid::new("attendee since is missing"))
        );
    }

    #[test]
    fn every_contract_enum_round_trips_through_its_protobuf_number() {
        round_trips(&SessionStatus::ALL);
        round_trips(&CloseReason::ALL);
        round_trips(&BrokerCloseReason::ALL);
        round_trips(&ChangeKind::ALL);
        round_trips(&AuditKind::ALL);
        round_trips(&[Role::Controller, Role::Viewer]);
        round_trips(&TerminalState::ALL);
        round_trips(&ScreenFormat::ALL);
        round_trips(&ControlMode::ALL);
        round_trips(&[
            RecordMode::Off,
            RecordMode::Output,
            RecordMode::OutputAndInput,
        ]);
    }

    /// The protobuf enums have no value the model lacks: a value added to a `.proto` file and
    /// not here fails this test (prost's `TryFrom<i32>` knows every declared number).
    #[test]
    fn every_declared_protobuf_value_but_unspecified_has_a_model_value() {
        fn declared<P: TryFrom<i32>>() -> Vec<i32> {
            (1..64)
                .filter(|number| P::try_from(*number).is_ok())
                .collect()
        }
        /// A protobuf enum's declared numbers, and whether the model reads a number.
        type Declared = (Vec<i32>, fn(i32) -> bool);
        let pairs: [Declared; 9] = [
            (declared::<session_pb::SessionStatus>(), |n| {
                SessionStatus::from_proto(n).is_ok()
            }),
            (declared::<session_pb::CloseReason>(), |n| {
                CloseReason::from_proto(n).is_ok()
            }),
            (declared::<broker_pb::CloseReason>(), |n| {
                BrokerCloseReason::from_proto(n).is_ok()
            }),
            (declared::<session_pb::session_change::Kind>(), |n| {
                ChangeKind::from_proto(n).is_ok()
            }),
            (declared::<session_pb::AuditKind>(), |n| {
                AuditKind::from_proto(n).is_ok()
            }),
            (declared::<broker_pb::Role>(), |n| {
                Role::from_proto(n).is_ok()
            }),
            (declared::<broker_pb::RecordMode>(), |n| {
                RecordMode::from_proto(n).is_ok()
            }),
            (declared::<broker_pb::ScreenFormat>(), |n| {
                ScreenFormat::from_proto(n).is_ok()
            }),
            (declared::<broker_pb::ControlMode>(), |n| {
                ControlMode::from_proto(n).is_ok()
            }),
        ];
        for (numbers, known) in pairs {
            assert!(!numbers.is_empty());
            for number in numbers {
                assert!(known(number), "declared number {number} has no model value");
            }
        }
    }

    #[test]
    fn unspecified_is_none_where_the_wire_means_none() {
        assert_eq!(optional_close_reason(0), Ok(None));
        assert_eq!(
            optional_close_reason(CloseReason::Exited.to_proto()),
            Ok(Some(CloseReason::Exited))
        );
        assert!(optional_close_reason(99).is_err());
        assert_eq!(optional_role(0), Ok(None));
        assert_eq!(optional_to_proto::<Role>(None), 0);
        assert_eq!(
            optional_to_proto(Some(Role::Viewer)),
            broker_pb::Role::Viewer as i32
        );
    }

    #[test]
    fn a_session_with_a_bad_id_status_size_or_time_is_refused() {
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let valid = session_pb::Session {
            id: Uuid::from_u128(1).to_string(),
            instance_id: Uuid::from_u128(2).to_string(),
            name: "Session 1".to_owned(),
            status: SessionStatus::Active.to_proto(),
            size: Some(broker_pb::TerminalSize { cols: 80, rows: 24 }),
            created_at: Some(timestamp(at)),
            last_activity_at: Some(timestamp(at)),
            ..session_pb::Session::default()
        };
        assert!(Session::try_from(valid.clone()).is_ok());
        /// The message a refusal gives, and how the valid session is spoiled to get it.
        type Refusal = (&'static str, fn(&mut session_pb::Session));
        let refusals: [Refusal; 9] = [
            ("session id \"local\" is not a uuid", |session| {
                session.id = "local".to_owned();
            }),
            ("session instance_id \"\" is not a uuid", |session| {
                session.instance_id.clear();
            }),
            ("session status 0 is not one this server knows", |session| {
                session.status = 0;
            }),
            ("close reason 99 is not one this server knows", |session| {
                session.close_reason = 99;
            }),
            ("session size is missing", |session| session.size = None),
            ("session size 0x24 is out of bounds", |session| {
                session.size = Some(broker_pb::TerminalSize { cols: 0, rows: 24 });
            }),
            ("session created_at is missing", |session| {
                session.created_at = None;
            }),
            ("session closed_at is not a valid time", |session| {
                session.closed_at = Some(prost_types::Timestamp {
                    seconds: 0,
                    nanos: -1,
                });
            }),
            (
                "terminal state 99 is not one this server knows",
                |session| {
                    session.terminal = Some(broker_pb::TerminalActivity {
                        state: 99,
                        ..broker_pb::TerminalActivity::default()
                    });
                },
            ),
        ];
        for (message, spoil) in refusals {
            let mut session = valid.clone();
            spoil(&mut session);
            assert_eq!(Session::try_from(session).unwrap_err().message(), message);
        }
    }

    #[test]
    fn a_screen_of_an_unknown_format_is_refused_and_an_unspecified_one_is_text() {
        let unknown = broker_pb::Screen {
            format: 99,
            ..broker_pb::Screen::default()
        };
        assert_eq!(
            Screen::try_from(unknown).unwrap_err().message(),
            "screen format 99 is not one this server knows"
        );
        let unspecified = broker_pb::Screen {
            lines: vec!["$".to_owned()],
            state: 99,
            size: Some(broker_pb::TerminalSize { cols: 0, rows: 24 }),
            ..broker_pb::Screen::default()
        };
        let screen = Screen::try_from(unspecified).unwrap();
        assert_eq!(screen.content, ScreenContent::Text(vec!["$".to_owned()]));
        assert_eq!(screen.status, SessionStatus::Starting);
        assert_eq!(screen.size, None);
    }

    #[test]
    fn a_colour_out_of_range_is_refused_and_reads_as_the_default_in_a_cell() {
        use broker_pb::color::Kind;
        for kind in [Some(Kind::Indexed(256)), Some(Kind::Rgb(0x0100_0000)), None] {
            let color = broker_pb::Color { kind };
            assert!(Color::try_from(color).is_err(), "{color:?}");
            let cell = broker_pb::Cell {
                fg: Some(color),
                bg: Some(color),
                ..broker_pb::Cell::default()
            };
            assert_eq!(Cell::from(cell), Cell::default());
        }
        assert_eq!(
            broker_pb::Color::from(Color::Rgb {
                red: 0xff,
                green: 0x80,
                blue: 0x01
            }),
            broker_pb::Color {
                kind: Some(Kind::Rgb(0x00ff_8001))
            }
        );
    }

    #[test]
    fn a_target_without_a_kind_or_container_is_refused() {
        assert!(Target::try_from(broker_pb::Target { kind: None }).is_err());
        let blank = broker_pb::Target {
            kind: Some(broker_pb::target::Kind::Docker(broker_pb::DockerTarget {
                container: " ".to_owned(),
            })),
        };
        assert!(Target::try_from(blank).is_err());
    }

    proptest! {
        #[test]
        fn a_size_in_bounds_round_trips_and_one_out_of_bounds_is_refused(
            cols in 0u32..1200,
            rows in 0u32..700,
        ) {
            let message = broker_pb::TerminalSize { cols, rows };
            match TerminalSize::try_from(message) {
                Ok(size) => {
                    prop_assert_eq!(broker_pb::TerminalSize::from(size), message);
                }
                Err(_) => prop_assert!(!(1..=1000).contains(&cols) || !(1..=500).contains(&rows)),
            }
        }

        #[test]
        fn a_command_and_a_terminal_round_trip(
            id in 1u64..u64::MAX,
            line in "\\PC{0,40}",
            cwd in proptest::option::of("/[a-z/]{0,20}"),
            started_ms in 0u64..4_000_000_000_000,
            duration_ms in proptest::option::of(0u64..100_000_000),
            exit_code in proptest::option::of(any::<i32>()),
            output_start in 0u64..u64::MAX / 2,
            length in 0u64..1 << 40,
            state in 0usize..TerminalState::ALL.len(),
            percent in proptest::option::of(0u8..=100),
            running in proptest::option::of(1u64..1000),
        ) {
            let started_at = UNIX_EPOCH + std::time::Duration::from_millis(started_ms);
            let ended_at =
                duration_ms.map(|ms| started_at + std::time::Duration::from_millis(ms));
            let command = Command {
                id,
                command: line,
                cwd: cwd.clone(),
                started_at,
                ended_at,
                exit_code: ended_at.and(exit_code),
                output_start,
                output_end: ended_at.map(|_| output_start + length),
            };
            let back = Command::from(broker_pb::Command::from(command.clone()));
            prop_assert_eq!(back, command);
            let terminal = TerminalActivity {
                state: TerminalState::ALL[state],
                progress: percent.map(Progress::Percent),
                notification: Some(Notification { text: "asks".to_owned(), at: started_at }),
                cwd,
                integrated: running.is_some(),
                running_command: running,
            };
            let back = TerminalActivity::try_from(broker_pb::TerminalActivity::from(terminal.clone()));
            prop_assert_eq!(back, Ok(terminal));
        }

        #[test]
        fn a_target_round_trips(container in proptest::option::of("[a-z0-9_.-]{1,40}")) {
            let target = match container {
                None => Target::Local,
                Some(container) => Target::Docker { container },
            };
            prop_assert_eq!(Target::try_from(broker_pb::Target::from(target.clone())).unwrap(), target);
        }

        #[test]
        fn a_session_round_trips(
            id in any::<u128>(),
            instance_id in any::<u128>(),
            name in "\\PC{1,30}",
            status in 0usize..SessionStatus::ALL.len(),
            close_reason in proptest::option::of(0usize..CloseReason::ALL.len()),
            exit in proptest::option::of((any::<i32>(), proptest::option::of(1i32..65))),
            aliases in proptest::collection::vec("[a-z0-9_.:-]{1,20}", 0..3),
            cols in 1u32..=1000,
            rows in 1u32..=500,
            seconds in 0i64..4_000_000_000,
            nanos in 0u32..1_000_000_000,
            closed in any::<bool>(),
            attached_clients in any::<u32>(),
            title in proptest::option::of("\\PC{1,30}"),
            bell in any::<bool>(),
            terminal in proptest::option::of(0usize..TerminalState::ALL.len()),
            presence in proptest::collection::vec(("\\PC{0,12}", any::<bool>(), any::<bool>()), 0..3),
            control_mode in 0usize..ControlMode::ALL.len(),
        ) {
            let at = DateTime::from_timestamp(seconds, nanos).unwrap();
            let session = Session {
                id: Uuid::from_u128(id),
                instance_id: Uuid::from_u128(instance_id),
                name,
                status: SessionStatus::ALL[status],
                close_reason: close_reason.map(|reason| CloseReason::ALL[reason]),
                exit: exit.map(|(code, signal)| ExitStatus { code, signal }),
                aliases,
                size: TerminalSize::new(cols, rows).unwrap(),
                broker_id: "broker-1".to_owned(),
                created_at: at,
                last_activity_at: at + chrono::Duration::milliseconds(1),
                closed_at: closed.then_some(at),
                attached_clients,
                title,
                last_bell_at: bell.then_some(at),
                terminal: terminal.map(|state| TerminalActivity {
                    state: TerminalState::ALL[state],
                    cwd: Some("/src".to_owned()),
                    ..TerminalActivity::default()
                }),
                presence: presence
                    .into_iter()
                    .map(|(principal, controls, typing)| Attendee {
                        principal,
                        role: if controls { Role::Controller } else { Role::Viewer },
                        surface: "web".to_owned(),
                        since: at,
                        typing,
                    })
                    .collect(),
                control_mode: ControlMode::ALL[control_mode],
            };
            let message = session_pb::Session::from(&session);
            prop_assert_eq!(Session::try_from(message.clone()), Ok(session.clone()));
            let back = Session::try_from(message.clone()).unwrap();
            prop_assert_eq!(session_pb::Session::from(&back), message);
        }

        #[test]
        fn a_screen_round_trips(
            format in 0usize..ScreenFormat::ALL.len(),
            text in proptest::collection::vec("\\PC{0,12}", 0..4),
            ansi in proptest::collection::vec(any::<u8>(), 0..24),
            cells in proptest::collection::vec(
                (
                    "\\PC{0,2}",
                    any::<[bool; 6]>(),
                    proptest::option::of(any::<u8>()),
                    proptest::option::of(any::<[u8; 3]>()),
                ),
                0..6,
            ),
            wrapped in any::<bool>(),
            size in proptest::option::of((1u32..=1000, 1u32..=500)),
            cursor in any::<(u32, u32, bool)>(),
            status in 0usize..SessionStatus::ALL.len(),
            exit in proptest::option::of((any::<i32>(), proptest::option::of(1i32..65))),
            terminal in proptest::option::of(0usize..TerminalState::ALL.len()),
            quiet_ms in proptest::option::of(any::<u64>()),
            offset in any::<u64>(),
            scrollback_rows in 0u32..10_000,
        ) {
            let cells = cells
                .into_iter()
                .map(|(text, [wide, bold, dim, italic, underline, inverse], fg, bg)| Cell {
                    text,
                    wide,
                    fg: fg.map(Color::Indexed),
                    bg: bg.map(|[red, green, blue]| Color::Rgb { red, green, blue }),
                    bold,
                    dim,
                    italic,
                    underline,
                    inverse,
                })
                .collect();
            let content = match ScreenFormat::ALL[format] {
                ScreenFormat::Text => ScreenContent::Text(text),
                ScreenFormat::Ansi => ScreenContent::Ansi(ansi),
                ScreenFormat::Cells => ScreenContent::Cells(vec![ScreenRow { cells, wrapped }]),
            };
            let screen = Screen {
                session_id: Uuid::from_u128(u128::from(offset)).to_string(),
                offset,
                size: size.map(|(cols, rows)| TerminalSize::new(cols, rows).unwrap()),
                cursor: Cursor { row: cursor.0, col: cursor.1, visible: cursor.2 },
                title: "title".to_owned(),
                alternate_screen: wrapped,
                status: SessionStatus::ALL[status],
                exit: exit.map(|(code, signal)| ExitStatus { code, signal }),
                scrollback_rows,
                content,
                terminal: terminal.map(|state| TerminalActivity {
                    state: TerminalState::ALL[state],
                    running_command: Some(7),
                    ..TerminalActivity::default()
                }),
                quiet_ms,
            };
            let message = broker_pb::Screen::from(screen.clone());
            prop_assert_eq!(Screen::try_from(message.clone()), Ok(screen));
            let back = Screen::try_from(message.clone()).unwrap();
            prop_assert_eq!(broker_pb::Screen::from(back), message);
        }

        #[test]
        fn an_exit_status_round_trips(code in any::<i32>(), signal in proptest::option::of(1i32..65)) {
            let exit = ExitStatus { code, signal };
            prop_assert_eq!(ExitStatus::from(broker_pb::ExitStatus::from(exit)), exit);
        }
    }
}
