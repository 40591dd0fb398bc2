//! A session record ([`Session`]) and its one JSON form ([`SessionJson`]), its status, why it
//! closed (on the record and on its broker), how its process ended, and what a change to it was
//! about.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use crate::{Attendee, ControlMode, TerminalActivity, TerminalSize, TerminalState};

/// A session record, as session-api keeps it and answers it, and as every surface of the
/// gateway shows it (what a credential may see of it is the gateway's rule). Its protobuf form
/// is converted in [`crate::proto`], checked on the way in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub id: Uuid,
    pub instance_id: Uuid,
    pub name: String,
    pub status: SessionStatus,
    /// Set when the status is `closed`.
    pub close_reason: Option<CloseReason>,
    /// Set once the process has exited.
    pub exit: Option<ExitStatus>,
    /// The aliases the session holds now, or held when it stopped being live.
    pub aliases: Vec<String>,
    pub size: TerminalSize,
    /// The broker that runs (or ran) its process.
    pub broker_id: String,
    pub created_at: DateTime<Utc>,
    pub last_activity_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
    /// Clients attached now, as its broker last reported.
    pub attached_clients: u32,
    /// The window title the program set last, as its broker last reported it; `None` when it
    /// set none.
    pub title: Option<String>,
    /// When the program last rang the bell, as its broker last reported it.
    pub last_bell_at: Option<DateTime<Utc>>,
    /// What the terminal is doing, as its broker last reported it; `None` until it did.
    pub terminal: Option<TerminalActivity>,
    /// Who is attached now, as its broker last reported (docs/CONTRACT.md, "Presence").
    pub presence: Vec<Attendee>,
    /// Who may type: one controller at a time, or every stream that may control.
    pub control_mode: ControlMode,
}

impl Session {
    /// What the terminal is doing, as the contract shows it: as its broker last reported,
    /// `starting` before it did, and `exited` with no running command once the status is
    /// `exited` or `closed`, whatever was reported before (a session whose broker was lost is
    /// not told so by the broker).
    pub fn terminal_activity(&self) -> TerminalActivity {
        let mut terminal = self.terminal.clone().unwrap_or_default();
        if matches!(self.status, SessionStatus::Exited | SessionStatus::Closed) {
            terminal.state = TerminalState::Exited;
            terminal.running_command = None;
        }
        terminal
    }
}

// The session object of docs/CONTRACT.md, the one JSON form of a session record: REST, the
// page's events, MCP and the CLI's `--json` answer it (the gateway calls it `SessionBody`, the
// name of its schema in the OpenAPI document). Its times and sizes are the contract's
// `null`-able spellings, and what the terminal is doing is flattened in. (A `//` comment: doc
// comments are the OpenAPI descriptions.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = SessionBody))]
pub struct SessionJson {
    pub id: String,
    pub instance_id: String,
    pub name: String,
    /// `starting`, `active`, `resetting`, `exited` or `closed`.
    pub status: String,
    /// Set when closed: `closed_by_user`, `exited`, `idle_reaped`, `broker_lost`,
    /// `instance_deleted` or `spawn_failed`.
    pub close_reason: Option<String>,
    /// Whether any client is attached now.
    pub has_websockets: bool,
    pub attached_clients: u32,
    pub created_at: Option<DateTime<Utc>>,
    pub last_activity_at: Option<DateTime<Utc>>,
    pub closed_at: Option<DateTime<Utc>>,
    pub aliases: Vec<String>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub cols: Option<u32>,
    pub rows: Option<u32>,
    /// The window title the program set last (OSC 0 or 2); `""` when none.
    pub title: String,
    /// When the program last rang the bell; `null` when it never did.
    pub last_bell_at: Option<DateTime<Utc>>,
    /// What the terminal is doing, in the model's one JSON form: `state`, `last_notification`,
    /// `progress`, `cwd`, `shell_integration` and `running_command_id`; `exited` whenever the
    /// status is.
    #[serde(flatten)]
    pub terminal: TerminalActivity,
    /// Who is attached now, one entry per stream, oldest attach first.
    pub presence: Vec<Attendee>,
    /// Who may type: `exclusive` (one controller at a time, control moves by takeover or by
    /// request and grant) or `shared` (every stream whose credential may control).
    pub control_mode: String,
}

impl From<Session> for SessionJson {
    fn from(session: Session) -> Self {
        Self {
            terminal: session.terminal_activity(),
            has_websockets: session.attached_clients > 0,
            attached_clients: session.attached_clients,
            id: session.id.to_string(),
            instance_id: session.instance_id.to_string(),
            name: session.name,
            status: session.status.as_str().to_owned(),
            close_reason: session
                .close_reason
                .map(|reason| reason.as_str().to_owned()),
            created_at: Some(session.created_at),
            last_activity_at: Some(session.last_activity_at),
            closed_at: session.closed_at,
            aliases: session.aliases,
            exit_code: session.exit.map(|exit| exit.code),
            exit_signal: session.exit.and_then(|exit| exit.signal),
            cols: Some(session.size.cols().into()),
            rows: Some(session.size.rows().into()),
            title: session.title.unwrap_or_default(),
            last_bell_at: session.last_bell_at,
            presence: session.presence,
            control_mode: session.control_mode.as_str().to_owned(),
        }
    }
}

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

/// Why a session record is closed. The broker has reasons of its own
/// ([`BrokerCloseReason`]: a kill, a shutdown) which become these.
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

/// Why a broker closed a session, as it tells the clients attached to it (an `Attach` stream's
/// `Closed` frame) and session-api (its `Closed` event). session-api records it as the
/// record's [`CloseReason`] (`From`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BrokerCloseReason {
    /// Someone closed it (Kill was called).
    Killed,
    /// Its process had exited and the tombstone period ran out.
    Exited,
    /// Nobody was attached for the detached timeout.
    IdleReaped,
    /// The broker is shutting down.
    Shutdown,
    /// A reset could not start its command again.
    SpawnFailed,
}

impl BrokerCloseReason {
    pub const ALL: [BrokerCloseReason; 5] = [
        BrokerCloseReason::Killed,
        BrokerCloseReason::Exited,
        BrokerCloseReason::IdleReaped,
        BrokerCloseReason::Shutdown,
        BrokerCloseReason::SpawnFailed,
    ];

    /// The broker's spelling, as its logs write it.
    pub fn as_str(self) -> &'static str {
        match self {
            BrokerCloseReason::Killed => "killed",
            BrokerCloseReason::Exited => "exited",
            BrokerCloseReason::IdleReaped => "idle_reaped",
            BrokerCloseReason::Shutdown => "shutdown",
            BrokerCloseReason::SpawnFailed => "spawn_failed",
        }
    }

    /// The reason in words, as a person attached to the session reads it.
    pub fn describe(self) -> &'static str {
        match self {
            BrokerCloseReason::Killed => "someone closed it",
            BrokerCloseReason::Exited => "its process had exited",
            BrokerCloseReason::IdleReaped => "nobody was attached for too long",
            BrokerCloseReason::Shutdown => "the server is shutting down",
            BrokerCloseReason::SpawnFailed => "its command could not be started again",
        }
    }
}

impl fmt::Display for BrokerCloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<BrokerCloseReason> for CloseReason {
    /// What the record says of a session its broker closed: a kill is the user's close, and a
    /// broker that shuts down goes away with its sessions, so to the user they are lost with it.
    fn from(reason: BrokerCloseReason) -> Self {
        match reason {
            BrokerCloseReason::Killed => CloseReason::ClosedByUser,
            BrokerCloseReason::Exited => CloseReason::Exited,
            BrokerCloseReason::IdleReaped => CloseReason::IdleReaped,
            BrokerCloseReason::Shutdown => CloseReason::BrokerLost,
            BrokerCloseReason::SpawnFailed => CloseReason::SpawnFailed,
        }
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

    #[test]
    fn a_brokers_close_reason_is_recorded_by_its_own_name_but_a_kill_and_a_shutdown() {
        for reason in BrokerCloseReason::ALL {
            let recorded = CloseReason::from(reason);
            match reason {
                BrokerCloseReason::Killed => assert_eq!(recorded, CloseReason::ClosedByUser),
                BrokerCloseReason::Shutdown => assert_eq!(recorded, CloseReason::BrokerLost),
                _ => assert_eq!(recorded.as_str(), reason.as_str()),
            }
            assert!(!reason.describe().is_empty());
        }
    }

    #[test]
    fn a_session_whose_process_ended_has_exited_whatever_its_broker_said_last() {
        let busy = TerminalActivity {
            state: TerminalState::Running,
            running_command: Some(3),
            integrated: true,
            ..TerminalActivity::default()
        };
        let at = DateTime::<Utc>::UNIX_EPOCH;
        let mut session = Session {
            id: Uuid::nil(),
            instance_id: Uuid::nil(),
            name: "Session 1".to_owned(),
            status: SessionStatus::Starting,
            close_reason: None,
            exit: None,
            aliases: Vec::new(),
            size: TerminalSize::new(80, 24).unwrap(),
            broker_id: "local".to_owned(),
            created_at: at,
            last_activity_at: at,
            closed_at: None,
            attached_clients: 0,
            title: None,
            last_bell_at: None,
            terminal: None,
            presence: Vec::new(),
            control_mode: ControlMode::Exclusive,
        };
        assert_eq!(session.terminal_activity(), TerminalActivity::default());
        session.terminal = Some(busy.clone());
        for status in [SessionStatus::Active, SessionStatus::Resetting] {
            session.status = status;
            assert_eq!(session.terminal_activity(), busy, "{status}");
        }
        for status in [SessionStatus::Exited, SessionStatus::Closed] {
            session.status = status;
            let ended = session.terminal_activity();
            assert_eq!(ended.state, TerminalState::Exited, "{status}");
            assert_eq!(ended.running_command, None, "{status}");
            assert!(ended.integrated, "the rest is as reported");
        }
    }
}
