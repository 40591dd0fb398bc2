//! The domain types of session-api, validated on the way in by `grpc/` and used everywhere
//! inside: the records of instances, shares and brokers. The session record and the contract's
//! nouns these are made of (names, aliases, sizes, statuses, close reasons, targets) are
//! `ptyhub-model`'s.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use ptyhub_model::Role;
use uuid::Uuid;

pub use ptyhub_model::{
    Alias, Attendee, ChangeKind, CloseReason, Command, ExitStatus, RecordMode, Session,
    SessionName, SessionStatus, Target, TerminalActivity, smallest_free_session_number,
};

/// The most sessions an instance may allow at once.
pub const MAX_SESSIONS_LIMIT: u32 = 50;
/// The cap of an instance registered without one.
pub const DEFAULT_MAX_SESSIONS: u32 = 5;

/// The settings of a new instance, validated.
#[derive(Debug, Clone)]
pub struct NewInstance {
    pub name: String,
    pub target: Target,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: String,
    pub user: String,
    pub max_sessions: u32,
    pub labels: BTreeMap<String, String>,
    /// `None` lets session-api place the instance.
    pub broker_id: Option<String>,
    /// `None` follows the server's default.
    pub record: Option<RecordMode>,
    /// Whether new sessions start interactive shells with their integration.
    pub shell_integration: bool,
    /// How long a request for control to its sessions may wait before it is granted; `None`:
    /// until it is answered.
    pub control_grant_timeout: Option<Duration>,
}

/// An instance as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub id: Uuid,
    pub name: String,
    pub target: Target,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: String,
    pub user: String,
    pub max_sessions: u32,
    pub labels: BTreeMap<String, String>,
    pub broker_id: String,
    pub created_at: DateTime<Utc>,
    pub live_sessions: u32,
    /// The instance's own recording setting; `None` follows the server's default.
    pub record: Option<RecordMode>,
    /// Whether new sessions start interactive shells with their integration.
    pub shell_integration: bool,
    /// How long a request for control to its sessions may wait before it is granted; `None`:
    /// until it is answered.
    pub control_grant_timeout: Option<Duration>,
}

/// The most characters of a window title a session record keeps.
pub const MAX_TITLE_CHARS: usize = 1024;

/// What a broker reports of a session's screen that its record keeps: the window title and the
/// last bell. The title is kept without control characters and cut to [`MAX_TITLE_CHARS`] on a
/// character boundary, so that a hostile program can neither bloat the database nor have a
/// listing print escape sequences; an empty one (the broker's word for none) is `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScreenFacts {
    title: Option<String>,
    last_bell_at: Option<DateTime<Utc>>,
}

impl ScreenFacts {
    /// The facts as a broker reported them, the title bounded as the record keeps it.
    pub fn reported(title: &str, last_bell_at: Option<DateTime<Utc>>) -> Self {
        let title: String = title
            .chars()
            .filter(|c| !c.is_control())
            .take(MAX_TITLE_CHARS)
            .collect();
        Self {
            title: (!title.is_empty()).then_some(title),
            last_bell_at,
        }
    }

    pub fn title(&self) -> Option<&str> {
        self.title.as_deref()
    }

    pub fn last_bell_at(&self) -> Option<DateTime<Utc>> {
        self.last_bell_at
    }
}

/// A broker as the registry knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    pub id: String,
    pub endpoint: String,
    pub up: bool,
    pub docker: bool,
    /// True for brokers from session-api's own configuration.
    pub configured: bool,
    pub last_heartbeat_at: Option<DateTime<Utc>>,
}

/// Where and how to attach to a session's PTY.
#[derive(Debug, Clone)]
pub struct AttachTarget {
    pub session_id: Uuid,
    pub broker_endpoint: String,
    pub ticket: String,
    pub ticket_expires_at: SystemTime,
    pub role: Role,
}

/// A session with where to attach to it.
#[derive(Debug, Clone)]
pub struct SessionAttachment {
    pub session: Session,
    pub attach: AttachTarget,
    pub created: bool,
}

/// One change to a session, as this replica observed it.
#[derive(Debug, Clone)]
pub struct SessionChange {
    pub kind: ChangeKind,
    pub session: Session,
    pub at: DateTime<Utc>,
    /// For [`ChangeKind::Terminal`]: the commands that started or ended, as they are now.
    pub commands: Vec<Command>,
}

/// Which live session a resolve means.
#[derive(Debug, Clone)]
pub enum SessionSelector {
    Id(Uuid),
    Alias(Alias),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_title_is_kept_without_controls_and_cut_on_a_character_boundary() {
        let title = |reported: &str| ScreenFacts::reported(reported, None).title;
        assert_eq!(title("my title").as_deref(), Some("my title"));
        assert_eq!(title(""), None);
        assert_eq!(
            title("\u{1b}\u{9b}\u{7}"),
            None,
            "controls alone are no title"
        );
        assert_eq!(title("a\u{1b}[31mb\u{9b}c").as_deref(), Some("a[31mbc"));
        // Multi-byte characters: 1024 characters kept, never half of one.
        let kept = title(&"é".repeat(MAX_TITLE_CHARS + 10)).expect("a title");
        assert_eq!(kept, "é".repeat(MAX_TITLE_CHARS));
        let exact = "x".repeat(MAX_TITLE_CHARS);
        assert_eq!(title(&exact).as_deref(), Some(exact.as_str()));
    }
}

/// A share link to make: of `instance` (id or name) or one live session of it, lasting `ttl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewShare {
    pub instance: String,
    /// `None`: every session of the instance.
    pub session_id: Option<Uuid>,
    pub ttl: std::time::Duration,
    /// The credential's subject that makes it.
    pub created_by: String,
    /// Whether it sees the session's past ([`Share::history`]).
    pub history: bool,
}

/// A share link: a viewer-only grant of an instance, or of one session of it, until it expires
/// or is revoked. The link's token is not part of it: only its hash is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    pub id: Uuid,
    pub instance_id: Uuid,
    /// `None`: every session of the instance.
    pub session_id: Option<Uuid>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// Whether it sees the past (the ring's replay, a screen's scrollback), as its creator
    /// chose; without, only the present screen and what follows. The gateway enforces it.
    pub history: bool,
}
