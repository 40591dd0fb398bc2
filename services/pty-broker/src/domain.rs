//! The broker's domain types: validated on the way in by `grpc.rs`, used everywhere inside. The
//! contract's nouns every service shares (`TerminalSize`, `Role`, the close reason) come from
//! `ptyhub-model`.

use std::time::SystemTime;

use bytes::Bytes;
use ptyhub_attach_ticket::TicketHolder;
use uuid::Uuid;

pub use ptyhub_model::{
    Attendee, Command, ControlChangeKind, ControlRequest, ControlState, ExitStatus, InvalidSize,
    Notification, Progress, ReservedControl, Role, TYPING_WINDOW, TerminalActivity, TerminalSize,
    TerminalState,
};

/// Why a session was closed. Inside the broker every close reason is the broker's, so the
/// model's `BrokerCloseReason` goes by the short name here.
pub use ptyhub_model::BrokerCloseReason as CloseReason;

/// One answer to a request for control: who held control (and answered), who asked, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlChange {
    pub kind: ControlChangeKind,
    /// The controller that answered (or, for a timeout, would have); `None` when nobody
    /// controlled.
    pub from: Option<TicketHolder>,
    /// The requester.
    pub to: TicketHolder,
    pub request_id: u64,
    pub at: SystemTime,
}

/// Where a session is in its life. Moves forward only, except that a reset goes from `Running`
/// to `Resetting` and back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionPhase {
    Starting,
    Running,
    Resetting,
    Exited,
    Closed(CloseReason),
}

/// A point-in-time view of one session, as List, Get and the event stream report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    pub session_id: Uuid,
    pub phase: SessionPhase,
    pub size: TerminalSize,
    pub created_at: SystemTime,
    pub last_activity_at: SystemTime,
    /// Offset of the next byte the PTY will produce.
    pub output_offset: u64,
    pub controllers: u32,
    pub viewers: u32,
    pub exit: Option<ExitStatus>,
    /// The session leader's pid while it runs.
    pub pid: Option<u32>,
    /// The window title the program set last (OSC 0 or 2); empty when none.
    pub title: String,
    /// When the program last rang the bell.
    pub last_bell_at: Option<SystemTime>,
    /// What the terminal is doing.
    pub terminal: TerminalActivity,
}

/// A lifecycle event, as `WatchEvents` streams it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerEvent {
    pub at: SystemTime,
    pub kind: BrokerEventKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerEventKind {
    Started(SessionInfo),
    Exited {
        session_id: Uuid,
        exit: ExitStatus,
    },
    /// Batched: at most once a second per session.
    Activity {
        session_id: Uuid,
        last_activity_at: SystemTime,
        output_offset: u64,
        title: String,
        last_bell_at: Option<SystemTime>,
    },
    Closed {
        session_id: Uuid,
        reason: CloseReason,
    },
    /// How many bytes of input one principal wrote through one surface in a window of about a
    /// second that began at `since` (attribution: the count, never the bytes).
    InputTyped {
        session_id: Uuid,
        principal: String,
        surface: String,
        bytes: u64,
        since: SystemTime,
    },
    /// Control changed hands, or a request for it was declined (docs/CONTRACT.md, "Control
    /// requests"): for the audit trail.
    ControlChanged {
        session_id: Uuid,
        change: ControlChange,
    },
    /// Who is attached changed: a client came or went, control moved, or a client started or
    /// stopped typing.
    AttachmentsChanged {
        session_id: Uuid,
        controllers: u32,
        viewers: u32,
        presence: Vec<Attendee>,
    },
    ResetDone(SessionInfo),
    /// What the terminal is doing changed, or commands started or finished (each in its form as
    /// of the event). Sent as the screen reads the marks, never batched.
    Terminal {
        session_id: Uuid,
        terminal: TerminalActivity,
        commands: Vec<Command>,
    },
}

/// What an attached client is sent, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientEvent {
    /// First, and again after a reset: `offset` is the position of the next output byte sent.
    Connected {
        role: Role,
        offset: u64,
        size: TerminalSize,
        phase: SessionPhase,
    },
    Output {
        offset: u64,
        data: Bytes,
    },
    /// `lost` bytes are no longer held (or, before a snapshot, not sent as bytes); the stream
    /// goes on at `offset`.
    Gap {
        lost: u64,
        offset: u64,
    },
    /// The screen as of `offset`, as bytes that redraw it; output after it starts at `offset`.
    Snapshot(crate::screen::Snapshot),
    Resize(TerminalSize),
    Resetting,
    /// Another controller took over; this client may no longer write, resize or reset.
    TakenOver,
    /// To the controller: a viewer asks for control.
    ControlRequested {
        request_id: u64,
        requester: Attendee,
    },
    /// To a requester: the controller declined.
    ControlDeclined {
        request_id: u64,
    },
    /// This client's role changed on its stream: control was granted to it, or it granted it
    /// away.
    RoleChanged(Role),
    Exit(ExitStatus),
    Closed(CloseReason),
}
