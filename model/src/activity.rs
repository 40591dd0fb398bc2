//! What a terminal is doing, as the contract spells it: its [`TerminalState`], a program's
//! [`Progress`] report, the last [`Notification`] it asked the user for, and one [`Command`] a
//! shell ran.

use std::fmt;
use std::time::SystemTime;

/// What a session's terminal is doing (docs/CONTRACT.md, "Terminal state", has the rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

/// The last thing a program asked the user's attention for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// Its text; empty for a bell.
    pub text: String,
    pub at: SystemTime,
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

/// What a session's terminal is doing, as the broker last read it from its output.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TerminalActivity {
    pub state: TerminalState,
    pub progress: Option<Progress>,
    pub notification: Option<Notification>,
    /// The working directory the shell reported last.
    pub cwd: Option<String>,
    /// Whether the program marks its prompts: a shell with integration.
    pub integrated: bool,
    /// The id of the command that runs, while one does.
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
}
