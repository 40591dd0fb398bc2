//! The gateway's view of instances, screens, commands and terminal streams, converted from
//! protobuf in `grpc/convert.rs` and rendered as JSON by the REST and WebSocket layers. The
//! session record and the contract's nouns inside these (sizes, roles, statuses, close reasons,
//! targets, what a terminal is doing and the commands it ran, screens) are `ptyhub-model`'s; what a
//! credential may see of a record is `crate::scope`'s rule.

use std::collections::BTreeMap;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use ptyhub_model::{AuditKind, Role, TerminalSize};

pub use ptyhub_model::{
    Attendee, ChangeKind, CloseReason, Command, ControlRequest, ControlState, ExitStatus,
    Notification, Progress, RecordMode, ReservedControl, Screen, ScreenContent, ScreenFormat,
    Session, SessionStatus, Target, TerminalActivity, TerminalState,
};

#[derive(Debug, Clone)]
pub struct Instance {
    pub id: String,
    pub name: String,
    pub target: Option<Target>,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: String,
    pub user: String,
    pub max_sessions: u32,
    pub labels: BTreeMap<String, String>,
    pub broker_id: String,
    pub created_at: Option<DateTime<Utc>>,
    pub live_sessions: u32,
    /// What new sessions record (the instance's setting or the server's default).
    pub record: RecordMode,
    /// Whether `record` is the server's default rather than the instance's own setting.
    pub record_is_default: bool,
    /// Whether new sessions whose program is an interactive shell start with the shell
    /// integration that marks their commands.
    pub shell_integration: bool,
    /// Seconds a request for control waits before it is granted; `None`: until answered.
    pub control_grant_timeout_secs: Option<u32>,
}

/// What registering an instance needs.
#[derive(Debug, Clone)]
pub struct NewInstance {
    pub name: String,
    pub target: Target,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: String,
    pub user: String,
    /// 0 means the default.
    pub max_sessions: u32,
    pub labels: BTreeMap<String, String>,
    /// `None` follows the server's default.
    pub record: Option<RecordMode>,
    /// `None` is on.
    pub shell_integration: Option<bool>,
    /// Seconds a request for control waits before it is granted; `None`: until answered.
    pub control_grant_timeout_secs: Option<u32>,
}

/// One change of a session, with the session as it is after it.
#[derive(Debug, Clone)]
pub struct SessionChange {
    pub kind: ChangeKind,
    pub session: Session,
    /// For [`ChangeKind::Terminal`]: the commands that started or ended, as they are now.
    pub commands: Vec<Command>,
}

/// A page of the commands a session's shell ran, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandPage {
    pub commands: Vec<Command>,
    /// The id of the oldest command the session still keeps (0 when it keeps none).
    pub first_kept_id: u64,
    /// The id of the newest command the shell ran (0 before its first).
    pub last_id: u64,
    pub terminal: TerminalActivity,
}

/// Which page of commands to ask for, its bound already checked against
/// [`ptyhub_wire::limits::MAX_COMMANDS_PAGE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandListing {
    /// Only commands with a greater id; 0 for all kept.
    pub after: u64,
    /// 1..=[`ptyhub_wire::limits::MAX_COMMANDS_PAGE`].
    pub limit: u32,
}

/// How a command's output is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CommandOutputFormat {
    /// UTF-8 text, escape sequences and control characters taken out.
    #[default]
    Text,
    /// The bytes as the program wrote them.
    Ansi,
}

/// One command's output, up to the end of the output so far while it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutput {
    pub command: Command,
    pub data: Bytes,
}

/// A command to type at a session's shell prompt (docs/CONTRACT.md, "Run"), its bounds
/// already checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRun {
    /// One or more lines, neither empty nor holding a NUL.
    pub command: String,
    /// 1..=[`ptyhub_wire::limits::MAX_WAIT_MS`] milliseconds.
    pub timeout_ms: u32,
    /// Type while a client holds control.
    pub force: bool,
    pub format: CommandOutputFormat,
}

/// A command that ran to its end: the command as its shell reported it, and its output (at
/// most the end of it; `truncated` when some is missing from the start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRunResult {
    pub command: Command,
    pub output: Bytes,
    pub truncated: bool,
}

/// Where and with which ticket to attach to a session's PTY, and what of it the attach sees.
#[derive(Debug, Clone)]
pub struct AttachTarget {
    pub session_id: String,
    pub broker_endpoint: String,
    pub ticket: String,
    pub role: Role,
    /// Only the present screen and what follows, whatever the client's `since` and `snapshot`
    /// (a share link without history): the broker is asked for nothing of the past.
    pub present_only: bool,
}

#[derive(Debug, Clone)]
pub struct SessionAttachment {
    pub session: Session,
    pub attach: AttachTarget,
    pub created: bool,
}

/// Which session a WebSocket opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionSelector {
    Id(String),
    Alias(String),
    ClientId(String),
    Default,
}

/// What the client asks of an attached stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TerminalCommand {
    /// Bytes for the PTY; with an `id`, the broker answers with an [`TerminalEvent::InputAck`]
    /// once they were written (empty `data` with an id: once every input before it was).
    Input {
        data: Bytes,
        id: Option<String>,
    },
    Resize(TerminalSize),
    Reset,
    /// A viewer asks the controller for control.
    RequestControl,
    /// The controller grants or declines request `request_id`.
    AnswerControl {
        request_id: u64,
        grant: bool,
    },
}

/// What an attached stream tells the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TerminalEvent {
    Connected {
        offset: u64,
        size: Option<TerminalSize>,
        role: Role,
    },
    Output {
        offset: u64,
        data: Bytes,
    },
    Gap {
        lost: u64,
        offset: u64,
    },
    /// Bytes that redraw the screen as of `offset` on a fresh terminal of `size`; the output
    /// that follows starts at `offset`.
    Snapshot {
        offset: u64,
        size: Option<TerminalSize>,
        data: Bytes,
    },
    Resize(TerminalSize),
    Resetting,
    TakenOver,
    Exit(ExitStatus),
    Error {
        message: String,
        /// The id of the input this error refuses, when it carried one.
        input_id: Option<String>,
    },
    /// An input that carried an id was written: `offset` is the output offset just before its
    /// first byte went in, so its answer comes at `offset` or after it.
    InputAck {
        id: String,
        offset: u64,
        bytes: u64,
    },
    Closed,
    /// The broker hands the session to its next process: the stream ends, and a client that
    /// reattaches with `since` goes on there. The last event.
    HandingOver,
    /// To the controller: a viewer asks for control.
    ControlRequested {
        request_id: u64,
        requester: Option<Attendee>,
    },
    /// To a requester: the controller declined.
    ControlDeclined {
        request_id: u64,
    },
    /// This stream's role changed on the same stream (control granted to it, or given away).
    RoleChanged(Role),
}

/// What a screen read asks for: the format, and how many scrollback lines go first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScreenRequest {
    pub format: ScreenFormat,
    /// At most [`ptyhub_wire::limits::MAX_SCREEN_SCROLLBACK`].
    pub scrollback: u32,
}

/// One piece of typed input, written in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputItem {
    /// UTF-8 text, as given.
    Text(String),
    /// A named key (`Enter`, `C-c`, ...), which the broker translates.
    Key(String),
}

/// What typing wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputWritten {
    pub bytes_written: u64,
    /// The output offset when the input was written: output from here on may answer it.
    pub offset: u64,
}

/// A wait for the screen to match or the terminal to reach a state, with its bounds already
/// checked against [`ptyhub_wire::limits`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScreenWait {
    /// A regular expression; empty matches any screen. Empty when `state` is set.
    pub pattern: String,
    /// The state to wait for instead of a pattern: one of [`TerminalState::AWAITABLE`].
    pub state: Option<TerminalState>,
    pub timeout: std::time::Duration,
    pub quiet: std::time::Duration,
    pub after_offset: Option<u64>,
    pub screen: ScreenRequest,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitOutcome {
    /// The pattern matched (and the screen was quiet, when asked).
    Matched,
    /// The terminal reached the state waited for.
    State(TerminalState),
    /// The process ended first.
    Exited,
}

/// How a wait ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScreenWaitResult {
    pub outcome: WaitOutcome,
    /// The text the pattern matched; `None` when the process exited first or the wait was for
    /// a state.
    pub matched: Option<String>,
    pub screen: Screen,
    /// What the terminal was doing as the wait answered; `None` from a broker that does not say.
    pub terminal: Option<TerminalActivity>,
}

/// A share link: a viewer-only grant of an instance, or of one session of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    pub id: String,
    pub instance_id: String,
    /// `None`: every session of the instance.
    pub session_id: Option<String>,
    pub created_by: String,
    pub created_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// Whether it sees the session's past (a replay of the ring, a screen's scrollback), as
    /// its creator chose; else only the present screen and what follows.
    pub history: bool,
}

/// What names a share to look up.
#[derive(Debug, Clone, Copy)]
pub enum ShareLookup<'a> {
    /// A share link's token.
    Token(&'a str),
    /// A share's id (a cookie made from a share link names it).
    Id(&'a str),
}

/// A listing of the audit trail, its filters checked: what session-api is asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditListing {
    /// An instance id or name; empty for every instance the caller may see.
    pub instance: String,
    /// A session id; empty for every session.
    pub session_id: String,
    /// A principal; empty for every principal.
    pub principal: String,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    /// 0 for session-api's default.
    pub page_size: u32,
    /// The `next_page_token` of the page before; empty for the first page.
    pub page_token: String,
    /// `Some`: only the events of these instances (a caller whose scope is not every instance).
    pub only_instances: Option<Vec<String>>,
}

/// One event of the audit trail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    pub id: u64,
    pub at: Option<DateTime<Utc>>,
    /// `None` for a kind this build does not know.
    pub kind: Option<AuditKind>,
    pub principal: String,
    pub instance_id: Option<String>,
    pub session_id: Option<String>,
    pub client_address: Option<String>,
    pub surface: String,
    pub role: Option<Role>,
    pub attachment_id: Option<String>,
    pub detail: BTreeMap<String, String>,
}

/// One page of the audit trail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEventPage {
    pub events: Vec<AuditEvent>,
    /// The token of the next page; `None` on the last.
    pub next_page_token: Option<String>,
}

/// A webhook of an instance, as session-api lists it (never its secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    pub id: String,
    pub instance_id: String,
    pub url: String,
    /// `state_changed`, `command_finished`.
    pub events: Vec<String>,
    pub created_by: String,
    pub created_at: Option<DateTime<Utc>>,
    /// Events not queued because the webhook's receiver was too far behind.
    pub dropped_events: u64,
    /// The last delivery tried, after its last attempt.
    pub last_delivery: Option<WebhookDelivery>,
}

/// A webhook's last delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookDelivery {
    pub id: String,
    pub event: String,
    pub at: Option<DateTime<Utc>>,
    pub attempts: u32,
    /// The receiver's HTTP status, when it answered.
    pub status_code: Option<u16>,
    /// Why no answer came, when none did.
    pub error: Option<String>,
    /// `pending`, `delivered` or `failed`.
    pub outcome: String,
}

/// A webhook to register: session-api checks every field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWebhook {
    pub url: String,
    pub events: Vec<String>,
    pub secret: String,
}
