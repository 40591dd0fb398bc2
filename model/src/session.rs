//! A session's status, why it closed, how its process ended, and what a change to it was about.

use std::fmt;

/// A session's place in its life: `starting → active ⇄ resetting → exited → closed`. Forward
/// only, except `active` ⇄ `resetting`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionStatus {
    Starting,
    Active,
    Resetting,
    Exited,
    Closed,
}

impl SessionStatus {
    pub const ALL: [SessionStatus; 5] = [
        SessionStatus::Starting,
        SessionStatus::Active,
        SessionStatus::Resetting,
        SessionStatus::Exited,
        SessionStatus::Closed,
    ];

    /// Statuses that count toward `max_sessions` and hold aliases: every status but `closed`,
    /// as the contract says. An exited session keeps its slot and aliases while the broker keeps
    /// its tombstone (final output, exit code), so it can be restarted in place (reset) with the
    /// same id and aliases; closing it, or the end of the tombstone, frees them.
    pub const LIVE: [SessionStatus; 4] = [
        SessionStatus::Starting,
        SessionStatus::Active,
        SessionStatus::Resetting,
        SessionStatus::Exited,
    ];

    pub fn is_live(self) -> bool {
        self != SessionStatus::Closed
    }

    /// The contract's spelling, also the stored one.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Starting => "starting",
            SessionStatus::Active => "active",
            SessionStatus::Resetting => "resetting",
            SessionStatus::Exited => "exited",
            SessionStatus::Closed => "closed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == text)
    }
}

impl fmt::Display for SessionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a session record is closed. The broker has reasons of its own (a kill, a shutdown)
/// which session-api translates into these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseReason {
    ClosedByUser,
    Exited,
    IdleReaped,
    BrokerLost,
    InstanceDeleted,
    SpawnFailed,
}

impl CloseReason {
    pub const ALL: [CloseReason; 6] = [
        CloseReason::ClosedByUser,
        CloseReason::Exited,
        CloseReason::IdleReaped,
        CloseReason::BrokerLost,
        CloseReason::InstanceDeleted,
        CloseReason::SpawnFailed,
    ];

    /// The contract's spelling, also the stored one.
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

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|reason| reason.as_str() == text)
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a session's process ended: its exit code, or the signal that ended it (the code is
/// then 128 plus the signal, as a shell reports it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus {
    /// The exit code; 128 + the signal number when a signal ended the process.
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

/// What a change on an instance's change stream (`WatchSessions`, the page's events) was about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    Created,
    Renamed,
    Status,
    Closed,
    Attachments,
    /// The window title changed or the bell rang.
    Screen,
    /// What the terminal is doing changed, or commands started or ended.
    Terminal,
}

impl ChangeKind {
    pub const ALL: [ChangeKind; 7] = [
        ChangeKind::Created,
        ChangeKind::Renamed,
        ChangeKind::Status,
        ChangeKind::Closed,
        ChangeKind::Attachments,
        ChangeKind::Screen,
        ChangeKind::Terminal,
    ];

    /// The contract's spelling (the `type` of a change event).
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Created => "created",
            ChangeKind::Renamed => "renamed",
            ChangeKind::Status => "status",
            ChangeKind::Closed => "closed",
            ChangeKind::Attachments => "attachments",
            ChangeKind::Screen => "screen",
            ChangeKind::Terminal => "terminal",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_and_reason_parses_from_its_own_spelling_only() {
        for status in SessionStatus::ALL {
            assert_eq!(SessionStatus::parse(status.as_str()), Some(status));
            assert_eq!(status.is_live(), SessionStatus::LIVE.contains(&status));
        }
        for reason in CloseReason::ALL {
            assert_eq!(CloseReason::parse(reason.as_str()), Some(reason));
        }
        assert_eq!(SessionStatus::parse("Active"), None);
        assert_eq!(CloseReason::parse(""), None);
    }
}
