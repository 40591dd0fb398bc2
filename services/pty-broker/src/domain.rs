//! The broker's domain types: validated on the way in by `grpc.rs`, used everywhere inside.

use std::fmt;
use std::time::SystemTime;

use bytes::Bytes;
use uuid::Uuid;

/// A terminal size that is within the contract's bounds (1..=1000 columns, 1..=500 rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TerminalSize {
    cols: u16,
    rows: u16,
}

impl TerminalSize {
    pub const MAX_COLS: u16 = 1000;
    pub const MAX_ROWS: u16 = 500;
    pub const DEFAULT: TerminalSize = TerminalSize { cols: 80, rows: 24 };

    pub fn new(cols: u32, rows: u32) -> Result<Self, InvalidSize> {
        let in_bounds = (1..=u32::from(Self::MAX_COLS)).contains(&cols)
            && (1..=u32::from(Self::MAX_ROWS)).contains(&rows);
        if !in_bounds {
            return Err(InvalidSize { cols, rows });
        }
        // Both fit in u16: checked just above.
        Ok(Self {
            cols: cols as u16,
            rows: rows as u16,
        })
    }

    pub fn cols(self) -> u16 {
        self.cols
    }

    pub fn rows(self) -> u16 {
        self.rows
    }
}

impl Default for TerminalSize {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Display for TerminalSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.cols, self.rows)
    }
}

/// A size outside the contract's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("terminal size {cols}x{rows} is out of bounds (columns 1..=1000, rows 1..=500)")]
pub struct InvalidSize {
    pub cols: u32,
    pub rows: u32,
}

/// How a session's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus {
    /// The exit code; 128 + the signal number when a signal ended the process, as shells report.
    pub code: i32,
    /// The signal that ended the process, if one did.
    pub signal: Option<i32>,
}

impl ExitStatus {
    pub fn exited(code: i32) -> Self {
        Self { code, signal: None }
    }

    pub fn signalled(signal: i32) -> Self {
        Self {
            code: 128 + signal,
            signal: Some(signal),
        }
    }
}

/// What an attached client may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// May write input, resize and reset. At most one per session; a new one takes over.
    Controller,
    /// Read-only; any number.
    Viewer,
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

/// Why a session was closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// Kill was called.
    Killed,
    /// The process exited and the tombstone period ran out.
    Exited,
    /// No client was attached for the detached timeout.
    IdleReaped,
    /// The broker is shutting down.
    Shutdown,
    /// A reset could not start the command again.
    SpawnFailed,
}

impl CloseReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::Killed => "killed",
            CloseReason::Exited => "exited",
            CloseReason::IdleReaped => "idle_reaped",
            CloseReason::Shutdown => "shutdown",
            CloseReason::SpawnFailed => "spawn_failed",
        }
    }
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
    },
    Closed {
        session_id: Uuid,
        reason: CloseReason,
    },
    AttachmentsChanged {
        session_id: Uuid,
        controllers: u32,
        viewers: u32,
    },
    ResetDone(SessionInfo),
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
    /// `lost` bytes are no longer held; the stream goes on at `offset`.
    Gap {
        lost: u64,
        offset: u64,
    },
    Resize(TerminalSize),
    Resetting,
    /// Another controller took over; this client may no longer write, resize or reset.
    TakenOver,
    Exit(ExitStatus),
    Closed(CloseReason),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_bounds_are_inclusive() {
        assert!(TerminalSize::new(1, 1).is_ok());
        assert!(TerminalSize::new(1000, 500).is_ok());
        assert!(TerminalSize::new(0, 24).is_err());
        assert!(TerminalSize::new(80, 0).is_err());
        assert!(TerminalSize::new(1001, 24).is_err());
        assert!(TerminalSize::new(80, 501).is_err());
        assert!(TerminalSize::new(u32::MAX, u32::MAX).is_err());
    }
}
