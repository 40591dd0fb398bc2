//! The contract's nouns, written once: a session record and its status, why it closed, how its
//! process ended, what its terminal is doing and the commands it ran, who may type into it,
//! what a change to it was about, the rules of names and aliases, where an instance's terminals
//! run, what an audit event says happened, and a screen with its cells. Each is spelled as
//! docs/CONTRACT.md spells it ([`SessionStatus::as_str`] and the like), each has its one
//! protobuf form in [`proto`], proven by round-trip tests, and what a terminal is doing and a
//! screen have their one JSON form (serde; their OpenAPI schemas behind the `openapi` feature).
//! Services pass these types; none keeps a mirror.
//!
//! The contract's numbers (bounds of sizes, names and aliases) are `ptyhub-wire`'s limits,
//! which these types enforce.

#![forbid(unsafe_code)]

mod activity;
mod audit;
mod control;
mod control_mode;
mod error;
mod names;
mod presence;
pub mod proto;
mod record_mode;
mod screen;
mod session;
mod target;
mod terminal;

pub use activity::{Command, Notification, Progress, TerminalActivity, TerminalState};
pub use audit::AuditKind;
pub use control::{ControlChangeKind, ControlRequest, ControlState, ReservedControl};
pub use control_mode::{ControlMode, InvalidControlMode};
pub use error::Invalid;
pub use names::{Alias, Name, NameKind, SessionName, smallest_free_session_number};
pub use presence::{Attendee, TYPING_WINDOW, presence_surface, surface_of_presence};
pub use record_mode::{InvalidRecordMode, RecordMode};
pub use screen::{Cell, Color, Cursor, Screen, ScreenContent, ScreenFormat, ScreenRow};
pub use session::{
    BrokerCloseReason, ChangeKind, CloseReason, ExitStatus, Session, SessionJson, SessionStatus,
};
pub use target::Target;
pub use terminal::{InvalidRole, InvalidSize, Role, TerminalSize};
