//! The domain types of session-api, validated on the way in by `grpc.rs` and used everywhere
//! inside: names, aliases, sizes, statuses, and the records of instances, sessions and brokers.

use std::collections::BTreeMap;
use std::fmt;
use std::time::SystemTime;

use chrono::{DateTime, Utc};
use ptyhub_wire::{Role, TerminalSize};
use uuid::Uuid;

use crate::error::Error;

pub use ptyhub_wire::RecordMode;

/// The most sessions an instance may allow at once.
pub const MAX_SESSIONS_LIMIT: u32 = 50;
/// The cap of an instance registered without one.
pub const DEFAULT_MAX_SESSIONS: u32 = 5;

/// A session name: 1..=255 characters after trimming, no control, format or bidirectional
/// characters ([`ptyhub_wire::limits::is_forbidden_in_names`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionName(String);

impl SessionName {
    pub const MAX_CHARS: usize = 255;

    /// Validates and trims `raw`.
    pub fn parse(raw: &str) -> Result<Self, Error> {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Err(Error::InvalidRequest(
                "session name must not be empty".into(),
            ));
        }
        if trimmed.chars().count() > Self::MAX_CHARS {
            return Err(Error::InvalidRequest(format!(
                "session name must be at most {} characters",
                Self::MAX_CHARS
            )));
        }
        if trimmed
            .chars()
            .any(ptyhub_wire::limits::is_forbidden_in_names)
        {
            return Err(Error::InvalidRequest(
                "session name must not contain control, format or bidirectional characters".into(),
            ));
        }
        Ok(Self(trimmed.to_owned()))
    }

    /// `Session N`, the default name.
    pub fn numbered(number: u32) -> Self {
        Self(format!("Session {number}"))
    }

    /// The number of a default name (`Session 3` is 3), if this is one.
    pub fn default_number(name: &str) -> Option<u32> {
        let digits = name.strip_prefix("Session ")?;
        if digits.is_empty()
            || digits.starts_with('0')
            || !digits.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        digits.parse().ok()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The smallest `N >= 1` such that no name in `names` is `Session N`.
pub fn smallest_free_session_number<'a>(names: impl IntoIterator<Item = &'a str>) -> u32 {
    let mut used: Vec<u32> = names
        .into_iter()
        .filter_map(SessionName::default_number)
        .collect();
    used.sort_unstable();
    used.dedup();
    let mut candidate = 1;
    for number in used {
        if number == candidate {
            candidate += 1;
        } else if number > candidate {
            break;
        }
    }
    candidate
}

/// A name that resolves to one live session of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Alias {
    /// `default`: the legacy single session.
    Default,
    /// `client:<id>`: one per browser tab.
    Client(String),
    /// Any other pre-assigned external id.
    External(String),
}

impl Alias {
    const CLIENT_PREFIX: &'static str = "client:";

    /// Validates an alias as the contract defines the three kinds.
    pub fn parse(raw: &str) -> Result<Self, Error> {
        if raw == "default" {
            return Ok(Alias::Default);
        }
        if let Some(client_id) = raw.strip_prefix(Self::CLIENT_PREFIX) {
            return Self::client(client_id);
        }
        let valid = (1..=ptyhub_wire::limits::MAX_ALIAS_CHARS).contains(&raw.len())
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'));
        if !valid {
            return Err(Error::InvalidRequest(format!(
                "alias {raw:?} must match ^[A-Za-z0-9_.:-]{{1,128}}$"
            )));
        }
        Ok(Alias::External(raw.to_owned()))
    }

    /// The alias `client:<client_id>` of a browser tab.
    pub fn client(client_id: &str) -> Result<Self, Error> {
        let valid = (1..=64).contains(&client_id.len())
            && client_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !valid {
            return Err(Error::InvalidRequest(format!(
                "client id {client_id:?} must match ^[A-Za-z0-9-]{{1,64}}$"
            )));
        }
        Ok(Alias::Client(client_id.to_owned()))
    }

    /// The stored and displayed form.
    pub fn to_text(&self) -> String {
        match self {
            Alias::Default => "default".to_owned(),
            Alias::Client(id) => format!("{}{id}", Self::CLIENT_PREFIX),
            Alias::External(text) => text.clone(),
        }
    }
}

impl fmt::Display for Alias {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

/// Where an instance's terminals run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The broker's own host (development).
    Local,
    /// A running container on the broker's Docker engine.
    Docker { container: String },
}

impl Target {
    pub fn needs_docker(&self) -> bool {
        matches!(self, Target::Docker { .. })
    }

    pub fn kind_name(&self) -> &'static str {
        match self {
            Target::Local => "local",
            Target::Docker { .. } => "docker",
        }
    }
}

/// A session's place in its life. Forward only, except `active` ⇄ `resetting`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionStatus {
    Starting,
    Active,
    Resetting,
    Exited,
    Closed,
}

impl SessionStatus {
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
        Self::LIVE.contains(&self)
    }

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
        Some(match text {
            "starting" => SessionStatus::Starting,
            "active" => SessionStatus::Active,
            "resetting" => SessionStatus::Resetting,
            "exited" => SessionStatus::Exited,
            "closed" => SessionStatus::Closed,
            _ => return None,
        })
    }
}

impl fmt::Display for SessionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a session is closed.
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
        Some(match text {
            "closed_by_user" => CloseReason::ClosedByUser,
            "exited" => CloseReason::Exited,
            "idle_reaped" => CloseReason::IdleReaped,
            "broker_lost" => CloseReason::BrokerLost,
            "instance_deleted" => CloseReason::InstanceDeleted,
            "spawn_failed" => CloseReason::SpawnFailed,
            _ => return None,
        })
    }
}

/// How a session's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus {
    pub code: i32,
    pub signal: Option<i32>,
}

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
}

/// A session record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub id: Uuid,
    pub instance_id: Uuid,
    pub name: String,
    pub status: SessionStatus,
    pub close_reason: Option<CloseReason>,
    pub exit: Option<ExitStatus>,
    /// The aliases the session holds now, or held when it stopped being live.
    pub aliases: Vec<String>,
    pub size: TerminalSize,
    pub broker_id: String,
    pub created_at: DateTime<Utc>,
    pub last_activity_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
    pub attached_clients: u32,
    /// The window title the program set last, as its broker last reported it (bounded as
    /// [`ScreenFacts`] says); `None` when it set none.
    pub title: Option<String>,
    /// When the program last rang the bell, as its broker last reported it.
    pub last_bell_at: Option<DateTime<Utc>>,
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

/// What a [`SessionChange`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    Created,
    Renamed,
    Status,
    Closed,
    Attachments,
    /// The window title changed or the bell rang.
    Screen,
}

/// One change to a session, as this replica observed it.
#[derive(Debug, Clone)]
pub struct SessionChange {
    pub kind: ChangeKind,
    pub session: Session,
    pub at: DateTime<Utc>,
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
    fn names_are_trimmed_and_bounded() {
        assert_eq!(SessionName::parse("  build  ").unwrap().as_str(), "build");
        assert!(SessionName::parse("").is_err());
        assert!(SessionName::parse("   ").is_err());
        assert!(SessionName::parse(&"x".repeat(256)).is_err());
        assert!(SessionName::parse(&"é".repeat(255)).is_ok());
        assert!(SessionName::parse("a\u{7}b").is_err());
        assert!(SessionName::parse("a\nb").is_err());
        assert!(SessionName::parse("a\u{9b}b").is_err());
    }

    #[test]
    fn smallest_free_number_fills_holes() {
        assert_eq!(smallest_free_session_number([]), 1);
        assert_eq!(smallest_free_session_number(["Session 1", "Session 2"]), 3);
        assert_eq!(smallest_free_session_number(["Session 1", "Session 3"]), 2);
        assert_eq!(smallest_free_session_number(["Session 2", "build"]), 1);
        assert_eq!(
            smallest_free_session_number(["Session 01", "Session x", "Session 1"]),
            2
        );
    }

    #[test]
    fn aliases_follow_the_contract() {
        assert_eq!(Alias::parse("default").unwrap(), Alias::Default);
        assert_eq!(
            Alias::parse("client:tab-1").unwrap(),
            Alias::Client("tab-1".into())
        );
        assert!(Alias::parse("client:").is_err());
        assert!(Alias::parse("client:a_b").is_err());
        assert!(Alias::parse(&format!("client:{}", "a".repeat(65))).is_err());
        assert_eq!(
            Alias::parse("conv.42:x_y-z").unwrap(),
            Alias::External("conv.42:x_y-z".into())
        );
        assert!(Alias::parse("").is_err());
        assert!(Alias::parse("has space").is_err());
        assert!(Alias::parse(&"a".repeat(129)).is_err());
        assert_eq!(Alias::Client("t".into()).to_text(), "client:t");
    }

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
}
