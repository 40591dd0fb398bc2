//! What a terminal is doing, as the contract spells it: its [`TerminalState`], a program's
//! [`Progress`] report, the last [`Notification`] it asked the user for, and one [`Command`] a
//! shell ran. [`TerminalActivity`] and its parts have their one JSON form here (serde, in the
//! contract's keys), which the gateway's bodies and session-api's stored column both use.

use std::fmt;
use std::time::SystemTime;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What a session's terminal is doing (docs/CONTRACT.md, "Terminal state", has the rules).
/// Its JSON form is [`TerminalState::as_str`]'s spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum TerminalState {
    /// The process is starting: a shell with integration has not shown its first prompt, any
    /// other program has printed nothing yet.
    #[default]
    Starting,
    /// A shell shows its prompt and waits for a command line.
    AtPrompt,
    /// A command or program runs.
    Running,
    /// A program asked for the user (a notification, or a bell away from a prompt) and has had
    /// no input since.
    WaitingForInput,
    /// A full-screen program runs and its output has been quiet for the idle time.
    Idle,
    /// The process has ended.
    Exited,
}

impl TerminalState {
    pub const ALL: [TerminalState; 6] = [
        TerminalState::Starting,
        TerminalState::AtPrompt,
        TerminalState::Running,
        TerminalState::WaitingForInput,
        TerminalState::Idle,
        TerminalState::Exited,
    ];

    /// The contract's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TerminalState::Starting => "starting",
            TerminalState::AtPrompt => "at_prompt",
            TerminalState::Running => "running",
            TerminalState::WaitingForInput => "waiting_for_input",
            TerminalState::Idle => "idle",
            TerminalState::Exited => "exited",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == text)
    }

    /// The states a wait may wait for, in the order the contract lists their `for` names.
    pub const AWAITABLE: [TerminalState; 4] = [
        TerminalState::AtPrompt,
        TerminalState::Idle,
        TerminalState::WaitingForInput,
        TerminalState::Exited,
    ];

    /// The name a wait's `for` gives the state (`prompt`, `idle`, `input`, `exit`); `None` for
    /// a state no wait waits for (`starting`, `running`: passing moments, not answers).
    pub fn wait_name(self) -> Option<&'static str> {
        match self {
            TerminalState::AtPrompt => Some("prompt"),
            TerminalState::Idle => Some("idle"),
            TerminalState::WaitingForInput => Some("input"),
            TerminalState::Exited => Some("exit"),
            TerminalState::Starting | TerminalState::Running => None,
        }
    }

    /// The state a wait's `for` names.
    pub fn from_wait_name(name: &str) -> Option<Self> {
        Self::AWAITABLE
            .into_iter()
            .find(|state| state.wait_name() == Some(name))
    }
}

impl fmt::Display for TerminalState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A program's report of its progress (OSC 9;4, as Windows Terminal and ConEmu read it).
/// Its JSON form is `{"kind", "percent"}` ([`Progress::kind`], [`Progress::percent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "ProgressJson", try_from = "ProgressJson")]
pub enum Progress {
    /// A known share done, 0 to 100.
    Percent(u8),
    /// Working, with no share known.
    Indeterminate,
    /// Failed at a share done.
    Error(u8),
    /// Paused at a share done.
    Paused(u8),
}

impl Progress {
    /// The contract's spelling of the kind.
    pub fn kind(self) -> &'static str {
        match self {
            Progress::Percent(_) => "normal",
            Progress::Indeterminate => "indeterminate",
            Progress::Error(_) => "error",
            Progress::Paused(_) => "paused",
        }
    }

    /// The share done, where the kind has one.
    pub fn percent(self) -> Option<u8> {
        match self {
            Progress::Percent(value) | Progress::Error(value) | Progress::Paused(value) => {
                Some(value)
            }
            Progress::Indeterminate => None,
        }
    }

    /// The report from its contract spelling; `None` for an unknown kind. A percent beyond 100
    /// is 100.
    pub fn from_parts(kind: &str, percent: Option<u8>) -> Option<Self> {
        let percent = percent.unwrap_or(0).min(100);
        match kind {
            "normal" => Some(Progress::Percent(percent)),
            "indeterminate" => Some(Progress::Indeterminate),
            "error" => Some(Progress::Error(percent)),
            "paused" => Some(Progress::Paused(percent)),
            _ => None,
        }
    }
}

// The JSON form of a [`Progress`], the parts the contract names; its doc comment is the
// OpenAPI description of a progress.
/// A program's report of its progress (OSC 9;4).
#[derive(Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
struct ProgressJson {
    /// `normal`, `indeterminate`, `error` or `paused`.
    kind: String,
    /// 0..=100 (a larger number reads as 100); `null` for `indeterminate`.
    percent: Option<u64>,
}

impl From<Progress> for ProgressJson {
    fn from(progress: Progress) -> Self {
        Self {
            kind: progress.kind().to_owned(),
            percent: progress.percent().map(u64::from),
        }
    }
}

impl TryFrom<ProgressJson> for Progress {
    type Error = String;

    fn try_from(json: ProgressJson) -> Result<Self, String> {
        let percent = json.percent.map(|percent| percent.min(100) as u8);
        Progress::from_parts(&json.kind, percent)
            .ok_or_else(|| format!("progress kind {:?} is not one this server knows", json.kind))
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Progress {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        <ProgressJson as utoipa::PartialSchema>::schema()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Progress {}

/// The last thing a program asked the user's attention for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Notification {
    /// Its text; `""` for a bell.
    pub text: String,
    #[serde(with = "rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub at: SystemTime,
}

/// A time in JSON as the contract writes every time: RFC 3339 in UTC (`...Z`); any offset reads.
mod rfc3339 {
    use super::*;

    pub fn serialize<S: serde::Serializer>(
        at: &SystemTime,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        DateTime::<Utc>::from(*at).serialize(serializer)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<SystemTime, D::Error> {
        DateTime::<Utc>::deserialize(deserializer).map(SystemTime::from)
    }
}

/// One command a shell ran, as its integration marked it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// Counts up from 1 in each session, never reused while the session lives.
    pub id: u64,
    /// The command line as the shell read it (as the screen showed it, for a shell that does
    /// not report it).
    pub command: String,
    /// The working directory it started in, where the shell reported one.
    pub cwd: Option<String>,
    pub started_at: SystemTime,
    /// `None` while it runs.
    pub ended_at: Option<SystemTime>,
    /// `None` while it runs, or when the shell did not report it.
    pub exit_code: Option<i32>,
    /// The output offset of its first output byte.
    pub output_start: u64,
    /// The output offset just past its last output byte; `None` while it runs.
    pub output_end: Option<u64>,
}

impl Command {
    pub fn is_running(&self) -> bool {
        self.ended_at.is_none()
    }
}

// Its JSON form is the contract's (`state`, `last_notification`, `progress`, `cwd`,
// `shell_integration`, `running_command_id`): the gateway flattens it into a session object and
// session-api stores it as it is. The `alias`es read what session-api stored before the column
// took the contract's keys. (A `//` comment: doc comments are the OpenAPI descriptions.)
/// What a session's terminal is doing, as its broker last read it from the output.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TerminalActivity {
    pub state: TerminalState,
    /// The last thing the program asked the user's attention for; `null` when nothing yet.
    #[serde(rename = "last_notification", alias = "notification")]
    pub notification: Option<Notification>,
    /// The program's report of its progress; `null` when it reports none.
    pub progress: Option<Progress>,
    /// The working directory the shell reported last; `null` when none.
    pub cwd: Option<String>,
    /// Whether the program marks its prompts and commands (a shell with integration).
    #[serde(rename = "shell_integration", alias = "integrated", default)]
    pub integrated: bool,
    /// The id of the command that runs; `null` when none does.
    #[serde(rename = "running_command_id", alias = "running_command")]
    pub running_command: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_round_trips_through_its_spelling() {
        for state in TerminalState::ALL {
            assert_eq!(TerminalState::parse(state.as_str()), Some(state));
        }
        assert_eq!(TerminalState::parse("busy"), None);
    }

    #[test]
    fn the_awaitable_states_round_trip_through_their_wait_names() {
        for state in TerminalState::AWAITABLE {
            let name = state.wait_name().expect("an awaitable state has a name");
            assert_eq!(TerminalState::from_wait_name(name), Some(state));
        }
        for state in TerminalState::ALL {
            assert_eq!(
                state.wait_name().is_some(),
                TerminalState::AWAITABLE.contains(&state)
            );
        }
        assert_eq!(TerminalState::from_wait_name("at_prompt"), None);
        assert_eq!(TerminalState::from_wait_name("running"), None);
    }

    #[test]
    fn every_progress_round_trips_through_its_parts() {
        for progress in [
            Progress::Percent(42),
            Progress::Indeterminate,
            Progress::Error(7),
            Progress::Paused(100),
        ] {
            assert_eq!(
                Progress::from_parts(progress.kind(), progress.percent()),
                Some(progress)
            );
        }
        assert_eq!(
            Progress::from_parts("normal", Some(250)),
            Some(Progress::Percent(100))
        );
        assert_eq!(Progress::from_parts("done", None), None);
    }

    fn busy() -> TerminalActivity {
        TerminalActivity {
            state: TerminalState::WaitingForInput,
            progress: Some(Progress::Paused(40)),
            notification: Some(Notification {
                text: "needs \"you\"".to_owned(),
                at: SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_800_000_000_123),
            }),
            cwd: Some("/tmp/a b".to_owned()),
            integrated: true,
            running_command: Some(12),
        }
    }

    #[test]
    fn a_terminal_is_written_in_the_contract_keys_and_reads_back() {
        let json = serde_json::to_value(busy()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "state": "waiting_for_input",
                "last_notification": {"text": "needs \"you\"", "at": "2027-01-15T08:00:00.123Z"},
                "progress": {"kind": "paused", "percent": 40},
                "cwd": "/tmp/a b",
                "shell_integration": true,
                "running_command_id": 12,
            })
        );
        assert_eq!(
            serde_json::from_value::<TerminalActivity>(json).unwrap(),
            busy()
        );
        let quiet = serde_json::to_value(TerminalActivity::default()).unwrap();
        assert_eq!(
            quiet,
            serde_json::json!({
                "state": "starting", "last_notification": null, "progress": null, "cwd": null,
                "shell_integration": false, "running_command_id": null,
            })
        );
        for state in TerminalState::ALL {
            assert_eq!(serde_json::to_value(state).unwrap(), state.as_str());
        }
    }

    #[test]
    fn a_terminal_in_the_older_stored_keys_reads_as_the_same_terminal() {
        let older = r#"{"state": "waiting_for_input",
            "progress": {"kind": "paused", "percent": 40},
            "notification": {"text": "needs \"you\"", "at": "2027-01-15T08:00:00.123+00:00"},
            "cwd": "/tmp/a b", "integrated": true, "running_command": 12}"#;
        assert_eq!(
            serde_json::from_str::<TerminalActivity>(older).unwrap(),
            busy()
        );
    }

    #[test]
    fn a_terminal_with_an_unknown_state_or_progress_or_a_bad_time_is_refused() {
        for refused in [
            r#"{"state": "busy"}"#,
            r#"{"cwd": "/"}"#,
            r#"{"state": "idle", "progress": {"kind": "done", "percent": 1}}"#,
            r#"{"state": "idle", "last_notification": {"text": "", "at": "yesterday"}}"#,
            "not json",
        ] {
            assert!(
                serde_json::from_str::<TerminalActivity>(refused).is_err(),
                "{refused}"
            );
        }
        let over: Progress = serde_json::from_str(r#"{"kind": "normal", "percent": 250}"#).unwrap();
        assert_eq!(over, Progress::Percent(100));
        let indeterminate = serde_json::to_value(Progress::Indeterminate).unwrap();
        assert_eq!(
            indeterminate,
            serde_json::json!({"kind": "indeterminate", "percent": null})
        );
    }
}
