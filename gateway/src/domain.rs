//! The gateway's own view of instances, sessions and terminal streams, converted from protobuf in
//! `grpc.rs` and rendered as JSON by the REST and WebSocket layers. Sizes and roles are the
//! shared [`ptyhub_wire`] types.

use std::collections::BTreeMap;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use ptyhub_wire::{Role, TerminalSize};

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
