//! The gateway's own view of instances, sessions and terminal streams, converted from protobuf in
//! `grpc.rs` and rendered as JSON by the REST and WebSocket layers.

use std::collections::BTreeMap;

use bytes::Bytes;
use chrono::{DateTime, Utc};

/// Where an instance's terminals run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Local,
    Docker { container: String },
}

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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionStatus {
    Starting,
    Active,
    Resetting,
    Exited,
    Closed,
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Starting => "starting",
            SessionStatus::Active => "active",
            SessionStatus::Resetting => "resetting",
            SessionStatus::Exited => "exited",
            SessionStatus::Closed => "closed",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    ClosedByUser,
    Exited,
    IdleReaped,
    BrokerLost,
    InstanceDeleted,
    SpawnFailed,
}

impl CloseReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::ClosedByUser => "closed_by_user",
            CloseReason::Exited => "exited",
            CloseReason::IdleReaped => "idle_reaped",
            CloseReason::BrokerLost => "broker_lost",
            CloseReason::InstanceDeleted => "instance_deleted",
            CloseReason::SpawnFailed => "spawn_failed",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus {
    pub code: i32,
    pub signal: Option<i32>,
}

/// A terminal size within the contract's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminalSize {
    pub cols: u32,
    pub rows: u32,
}

impl TerminalSize {
    pub const MAX_COLS: u32 = 1000;
    pub const MAX_ROWS: u32 = 500;

    /// A size within 1..=1000 columns and 1..=500 rows.
    pub fn new(cols: u32, rows: u32) -> Result<Self, String> {
        if (1..=Self::MAX_COLS).contains(&cols) && (1..=Self::MAX_ROWS).contains(&rows) {
            Ok(Self { cols, rows })
        } else {
            Err(format!(
                "terminal size {cols}x{rows} is out of bounds (cols 1..=1000, rows 1..=500)"
            ))
        }
    }

    /// Both or neither of `cols` and `rows`.
    pub fn from_optional(cols: Option<u32>, rows: Option<u32>) -> Result<Option<Self>, String> {
        match (cols, rows) {
            (None, None) => Ok(None),
            (Some(cols), Some(rows)) => Self::new(cols, rows).map(Some),
            _ => Err("cols and rows must be given together".into()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Session {
    pub id: String,
    pub instance_id: String,
    pub name: String,
    pub status: SessionStatus,
    pub close_reason: Option<CloseReason>,
    pub exit: Option<ExitStatus>,
    pub aliases: Vec<String>,
    pub size: Option<TerminalSize>,
    pub created_at: Option<DateTime<Utc>>,
    pub last_activity_at: Option<DateTime<Utc>>,
    pub closed_at: Option<DateTime<Utc>>,
    pub attached_clients: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Controller,
    Viewer,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Controller => "controller",
            Role::Viewer => "viewer",
        }
    }
}

/// Where and with which ticket to attach to a session's PTY.
#[derive(Debug, Clone)]
pub struct AttachTarget {
    pub session_id: String,
    pub broker_endpoint: String,
    pub ticket: String,
    pub role: Role,
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
    Input(Bytes),
    Resize(TerminalSize),
    Reset,
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
    Resize(TerminalSize),
    Resetting,
    TakenOver,
    Exit(ExitStatus),
    Error {
        message: String,
    },
    Closed,
}
