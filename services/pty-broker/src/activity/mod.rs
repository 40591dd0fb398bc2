//! What a session's terminal is doing: its [`TerminalState`], the commands its shell ran, the
//! last notification and progress report of its program, learnt from the marks in its output
//! ([`marks`]) as the screen is fed. The rules are docs/CONTRACT.md's "Terminal state"; this is
//! their one implementation, a state machine fed in output order by the session's screen
//! (`screen/mod.rs`), so that every mark is read once, at its exact offset.

mod log;
pub mod marks;
mod text;

use std::time::{Duration, SystemTime};

pub use log::{CommandLog, DEFAULT_COMMANDS_KEPT};
pub use marks::Mark;
use ptyhub_model::{Command, Notification, Progress, TerminalActivity, TerminalState};

use crate::shell_integration::Shell;
pub use text::plain_text;

/// How long a full-screen program's output must stay quiet before it is `idle`, by default.
pub const DEFAULT_IDLE_AFTER: Duration = Duration::from_secs(5);

/// A place on the screen: a line counted from the first the screen ever drew (rows that
/// scrolled off included), and a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScreenPoint {
    pub line: u64,
    pub col: u16,
}

/// Where a mark sits in the output, and what the screen looked like there.
#[derive(Debug, Clone, Copy)]
pub struct MarkAt {
    /// The offset of the mark's first byte.
    pub start: u64,
    /// The offset just past its last byte.
    pub end: u64,
    /// The cursor once the mark was read.
    pub cursor: ScreenPoint,
    pub now: SystemTime,
}

/// Something that changed, for the session's events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    State(TerminalState),
    CommandStarted(u64),
    CommandFinished(u64),
}

/// An [`Activity`] taken apart, as a broker process hands it to the next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivityParts {
    pub state: TerminalState,
    pub shell: Option<Shell>,
    pub integrated: bool,
    pub marks_output_start: bool,
    pub cwd: Option<String>,
    pub progress: Option<Progress>,
    pub notification: Option<Notification>,
    pub commands_kept: usize,
    pub next_command_id: u64,
    /// Oldest first.
    pub commands: Vec<Command>,
    /// Where the command line being typed starts, as a row and column of the visible screen.
    pub input_at: Option<(u16, u16)>,
    /// The offset of the last prompt's mark, for waits with an offset.
    pub prompt_at: Option<u64>,
    /// The offset of the last question's mark, for waits with an offset.
    pub asked_at: Option<u64>,
    /// The command line about to start (`633;E`, or what `run` typed).
    pub pending_line: Option<String>,
    /// Line feeds of a multi-line line `run` typed still to come.
    pub typed_lines_left: usize,
    /// Whether the program draws on the alternate screen.
    pub full_screen: bool,
    /// Input reached a program waiting for it.
    pub answered: bool,
}

/// One session's activity.
#[derive(Debug, Clone)]
pub struct Activity {
    log: CommandLog,
    state: TerminalState,
    /// The shell the program is, started with its integration: `starting` then lasts until its
    /// first prompt rather than its first output.
    shell: Option<Shell>,
    /// Whether the program marked a prompt: its shell has integration.
    integrated: bool,
    /// Whether the shell marks where a command's output starts (`133;C`). Until one has, a
    /// command starts when the line typed after the prompt is entered, read from the screen.
    marks_output_start: bool,
    /// Where the command line starts on the screen, from the end of the prompt until the line
    /// is entered.
    input_at: Option<ScreenPoint>,
    /// The command line the shell reported (`633;E`), or `run` typed, for the command about to
    /// start.
    pending_line: Option<String>,
    /// Line feeds of a command line typed by `run` still to come before its last line is
    /// entered (a POSIX sh shows each line of a multi-line command as it reads it).
    typed_lines_left: usize,
    cwd: Option<String>,
    progress: Option<Progress>,
    notification: Option<Notification>,
    /// When output last came.
    last_output_at: Option<SystemTime>,
    /// Whether the program draws on the alternate screen (a full-screen program).
    full_screen: bool,
    /// Input reached the program since it asked for the user.
    answered: bool,
    /// The offset of the mark of the last prompt shown (`A`, or the first `B`), for waits.
    prompt_at: Option<u64>,
    /// The offset of the last notification or bell that made or kept the program waiting for
    /// input, for waits.
    asked_at: Option<u64>,
    changes: Vec<Change>,
}

impl Activity {
    /// The activity of a process just started; `shell` for a shell started with its
    /// integration.
    pub fn new(shell: Option<Shell>, commands_kept: usize) -> Self {
        Self {
            log: CommandLog::new(commands_kept),
            state: TerminalState::Starting,
            shell,
            integrated: false,
            marks_output_start: false,
            input_at: None,
            pending_line: None,
            typed_lines_left: 0,
            cwd: None,
            progress: None,
            notification: None,
            last_output_at: None,
            full_screen: false,
            answered: false,
            prompt_at: None,
            asked_at: None,
            changes: Vec::new(),
        }
    }

    /// The activity taken apart, for a hand-off, on a screen that scrolled `lines_scrolled`
    /// rows since it was made (for where a command line being typed starts).
    pub fn to_parts(&self, lines_scrolled: u64) -> ActivityParts {
        ActivityParts {
            state: self.state,
            shell: self.shell,
            integrated: self.integrated,
            marks_output_start: self.marks_output_start,
            cwd: self.cwd.clone(),
            progress: self.progress,
            notification: self.notification.clone(),
            commands_kept: self.log.capacity(),
            next_command_id: self.log.next_id(),
            commands: self.log.after(0, usize::MAX),
            input_at: self.input_at.and_then(|at| {
                let row = u16::try_from(at.line.checked_sub(lines_scrolled)?).ok()?;
                Some((row, at.col))
            }),
            prompt_at: self.prompt_at,
            asked_at: self.asked_at,
            pending_line: self.pending_line.clone(),
            typed_lines_left: self.typed_lines_left,
            full_screen: self.full_screen,
            answered: self.answered,
        }
    }

    /// The activity [`Activity::to_parts`] took apart, on a screen that shows what the other
    /// one showed and has scrolled `lines_scrolled` rows; output goes on from where it was, and
    /// where the last prompt and question began (for waits), a command line `run` is typing and
    /// a program's alternate screen go on with it.
    pub fn from_parts(parts: ActivityParts, now: SystemTime, lines_scrolled: u64) -> Self {
        Self {
            log: CommandLog::resume(parts.commands_kept, parts.next_command_id, &parts.commands),
            state: parts.state,
            shell: parts.shell,
            integrated: parts.integrated,
            marks_output_start: parts.marks_output_start,
            input_at: parts.input_at.map(|(row, col)| ScreenPoint {
                line: lines_scrolled + u64::from(row),
                col,
            }),
            pending_line: parts.pending_line,
            typed_lines_left: parts.typed_lines_left,
            cwd: parts.cwd,
            progress: parts.progress,
            notification: parts.notification,
            // The quiet of a full-screen program counts again from here: its last output's
            // time stayed with the other process's clock.
            last_output_at: Some(now),
            full_screen: parts.full_screen,
            answered: parts.answered,
            prompt_at: parts.prompt_at,
            asked_at: parts.asked_at,
            changes: Vec::new(),
        }
    }

    /// A new process in the same session (a reset): the commands stay, the rest starts over.
    pub fn restart(&mut self, shell: Option<Shell>, now: SystemTime, offset: u64) {
        if let Some(command) = self.log.finish(None, now, offset) {
            self.changes.push(Change::CommandFinished(command.id));
        }
        let state = self.state;
        let log = std::mem::replace(&mut self.log, CommandLog::new(1));
        *self = Self {
            log,
            state,
            changes: std::mem::take(&mut self.changes),
            ..Self::new(shell, 1)
        };
        self.set_state(TerminalState::Starting);
    }

    /// The state as of `now`: a running full-screen program quiet for `idle_after` is idle.
    pub fn state(&self, now: SystemTime, idle_after: Duration) -> TerminalState {
        if self.state == TerminalState::Running && self.is_quiet(now, idle_after) {
            return TerminalState::Idle;
        }
        self.state
    }

    /// When, after `now`, the state will turn idle if no output comes, where it can.
    pub fn idle_at(&self, now: SystemTime, idle_after: Duration) -> Option<SystemTime> {
        (self.state == TerminalState::Running && self.full_screen)
            .then(|| self.last_output_at.map(|at| at + idle_after))
            .flatten()
            .filter(|at| *at > now)
    }

    fn is_quiet(&self, now: SystemTime, idle_after: Duration) -> bool {
        self.full_screen
            && self.last_output_at.is_some_and(|at| {
                now.duration_since(at)
                    .is_ok_and(|quiet| quiet >= idle_after)
            })
    }

    /// What the terminal is doing as of `now`, for the session's record.
    pub fn summary(&self, now: SystemTime, idle_after: Duration) -> TerminalActivity {
        TerminalActivity {
            state: self.state(now, idle_after),
            progress: self.progress,
            notification: self.notification.clone(),
            cwd: self.cwd.clone(),
            integrated: self.integrated,
            running_command: self.log.running().map(|command| command.id),
        }
    }

    /// Where the output last put the terminal in `state` by a mark, whether or not it is still
    /// there: the offset of the last prompt's mark for `at_prompt`, of the last notification or
    /// bell the program waited on for `waiting_for_input`. `None` for the states no mark begins
    /// (`idle` is a time of quiet, `exited` the process's end) and before any such mark. A wait
    /// reads it to tell a prompt or a question that came after a given offset from an old one,
    /// and to see one the terminal already left again.
    pub fn entered_at(&self, state: TerminalState) -> Option<u64> {
        match state {
            TerminalState::AtPrompt => self.prompt_at,
            TerminalState::WaitingForInput => self.asked_at,
            _ => None,
        }
    }

    /// The shell started with its integration, if the program is one.
    pub fn shell(&self) -> Option<Shell> {
        self.shell
    }

    pub fn integrated(&self) -> bool {
        self.integrated
    }

    pub fn commands(&self) -> &CommandLog {
        &self.log
    }

    pub fn cwd(&self) -> Option<&str> {
        self.cwd.as_deref()
    }

    pub fn progress(&self) -> Option<Progress> {
        self.progress
    }

    pub fn notification(&self) -> Option<&Notification> {
        self.notification.as_ref()
    }

    /// The changes since the last call, in order.
    pub fn take_changes(&mut self) -> Vec<Change> {
        std::mem::take(&mut self.changes)
    }

    /// Whether the screen should tell [`Activity::line_entered`] when the line typed after the
    /// prompt is entered: the shell marks prompts but not where output starts.
    pub fn awaits_line(&self) -> bool {
        !self.marks_output_start && self.input_at.is_some() && self.log.running().is_none()
    }

    /// Where the command line starts on the screen, while [`Activity::awaits_line`].
    pub fn input_at(&self) -> Option<ScreenPoint> {
        self.input_at
    }

    /// Output came (`full_screen` as the screen is after it). A program waiting for input runs
    /// again at its first output after input reached it ([`Activity::input_reached`]).
    pub fn output(&mut self, now: SystemTime, full_screen: bool) {
        self.last_output_at = Some(now);
        self.full_screen = full_screen;
        match self.state {
            TerminalState::Starting if self.shell.is_none() => {
                self.set_state(TerminalState::Running)
            }
            TerminalState::WaitingForInput if self.answered => {
                self.answered = false;
                self.set_state(TerminalState::Running)
            }
            _ => {}
        }
    }

    /// Input reached the program at `at`: an answer, if it came after the notification the
    /// program waits on.
    pub fn input_reached(&mut self, at: SystemTime) {
        if self.state == TerminalState::WaitingForInput
            && self
                .notification
                .as_ref()
                .is_some_and(|asked| at >= asked.at)
        {
            self.answered = true;
        }
    }

    /// Applies one mark.
    pub fn apply(&mut self, mark: Mark, at: MarkAt) {
        match mark {
            Mark::PromptStart => {
                self.integrated = true;
                if let Some(command) = self.log.finish(None, at.now, at.start) {
                    self.changes.push(Change::CommandFinished(command.id));
                }
                self.input_at = None;
                self.pending_line = None;
                self.progress = None;
                self.set_state(TerminalState::AtPrompt);
                self.prompt_at = Some(at.start);
            }
            Mark::InputStart => {
                self.integrated = true;
                self.input_at = Some(at.cursor);
                if self.state == TerminalState::Starting {
                    self.set_state(TerminalState::AtPrompt);
                    self.prompt_at = Some(at.start);
                }
            }
            Mark::CommandLine(line) => self.pending_line = Some(line),
            Mark::OutputStart => {
                self.integrated = true;
                self.marks_output_start = true;
                let line = self.pending_line.take();
                if self.log.running().is_some() {
                    // Started already, from the screen: the shell knows better.
                    self.log.restart_running(line.as_deref(), at.end);
                } else {
                    self.start(line.unwrap_or_default(), at.now, at.end);
                }
            }
            Mark::CommandEnd(code) => {
                self.integrated = true;
                if let Some(command) = self.log.finish(code, at.now, at.start) {
                    self.changes.push(Change::CommandFinished(command.id));
                }
            }
            Mark::Cwd(cwd) => self.cwd = Some(cwd),
            Mark::Progress(progress) => self.progress = progress,
            Mark::Notification(text) => self.notify(text, at),
            // At a prompt a bell is the line editor's complaint, not a question.
            Mark::Bell => {
                if self.state != TerminalState::AtPrompt {
                    self.notify(String::new(), at);
                }
            }
        }
    }

    /// `run` is about to type `line` at the prompt: it is the next command's line, entered
    /// with its last line feed.
    pub fn expect_typed(&mut self, line: &str) {
        self.pending_line = Some(marks::cut(line.to_owned()));
        self.typed_lines_left = line.matches('\n').count();
    }

    /// What [`Activity::expect_typed`] expected was not typed after all.
    pub fn forget_typed(&mut self) {
        self.pending_line = None;
        self.typed_lines_left = 0;
    }

    /// A line typed after the prompt was entered: the output from `offset` is its command's,
    /// `line` as the screen shows it (or as `run` typed it).
    pub fn line_entered(&mut self, line: String, now: SystemTime, offset: u64) {
        if self.typed_lines_left > 0 {
            self.typed_lines_left -= 1;
            return;
        }
        self.input_at = None;
        let line = match self.pending_line.take() {
            Some(typed) => typed,
            None => marks::cut(line.trim().to_owned()),
        };
        if line.is_empty() {
            return;
        }
        self.start(line, now, offset);
    }

    /// The process ended.
    pub fn exited(&mut self, now: SystemTime, offset: u64) {
        if let Some(command) = self.log.finish(None, now, offset) {
            self.changes.push(Change::CommandFinished(command.id));
        }
        self.progress = None;
        self.set_state(TerminalState::Exited);
    }

    fn start(&mut self, line: String, now: SystemTime, offset: u64) {
        self.input_at = None;
        let id = self.log.start(&line, self.cwd.as_deref(), now, offset);
        self.changes.push(Change::CommandStarted(id));
        self.set_state(TerminalState::Running);
    }

    fn notify(&mut self, text: String, at: MarkAt) {
        self.notification = Some(Notification { text, at: at.now });
        self.answered = false;
        if matches!(
            self.state,
            TerminalState::Running | TerminalState::Idle | TerminalState::WaitingForInput
        ) {
            self.set_state(TerminalState::WaitingForInput);
            self.asked_at = Some(at.start);
        }
    }

    fn set_state(&mut self, state: TerminalState) {
        if self.state != state {
            self.state = state;
            self.changes.push(Change::State(state));
        }
    }

    /// The command by id, while it is kept.
    pub fn command(&self, id: u64) -> Option<Command> {
        self.log.get(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn at(offset: u64) -> MarkAt {
        MarkAt {
            start: offset,
            end: offset + 8,
            cursor: ScreenPoint { line: 0, col: 2 },
            now: UNIX_EPOCH + Duration::from_secs(offset),
        }
    }

    fn shell() -> Activity {
        Activity::new(Some(Shell::Bash), DEFAULT_COMMANDS_KEPT)
    }

    #[test]
    fn a_shell_starts_until_its_first_prompt_then_runs_commands() {
        let mut activity = shell();
        activity.output(at(0).now, false);
        assert_eq!(
            activity.state(at(0).now, DEFAULT_IDLE_AFTER),
            TerminalState::Starting
        );
        activity.apply(Mark::Cwd("/tmp".into()), at(1));
        activity.apply(Mark::PromptStart, at(2));
        activity.apply(Mark::InputStart, at(3));
        assert_eq!(
            activity.state(at(3).now, DEFAULT_IDLE_AFTER),
            TerminalState::AtPrompt
        );
        activity.apply(Mark::CommandLine("false".into()), at(10));
        activity.apply(Mark::OutputStart, at(20));
        assert_eq!(
            activity.state(at(20).now, DEFAULT_IDLE_AFTER),
            TerminalState::Running
        );
        activity.apply(Mark::CommandEnd(Some(1)), at(40));
        activity.apply(Mark::PromptStart, at(50));
        let commands = activity.commands().after(0, 10);
        assert_eq!(commands.len(), 1);
        let command = &commands[0];
        assert_eq!(command.command, "false");
        assert_eq!(command.cwd.as_deref(), Some("/tmp"));
        assert_eq!(command.exit_code, Some(1));
        assert_eq!((command.output_start, command.output_end), (28, Some(40)));
        assert_eq!(
            activity.take_changes(),
            vec![
                Change::State(TerminalState::AtPrompt),
                Change::CommandStarted(1),
                Change::State(TerminalState::Running),
                Change::CommandFinished(1),
                Change::State(TerminalState::AtPrompt),
            ]
        );
    }

    #[test]
    fn a_shell_without_output_marks_starts_commands_when_the_line_is_entered() {
        let mut activity = shell();
        activity.apply(Mark::PromptStart, at(0));
        activity.apply(Mark::InputStart, at(1));
        assert!(activity.awaits_line());
        activity.line_entered("  ".into(), at(5).now, 12);
        assert!(activity.commands().is_empty(), "an empty line runs nothing");
        activity.apply(Mark::CommandEnd(Some(0)), at(13));
        activity.apply(Mark::PromptStart, at(14));
        activity.apply(Mark::InputStart, at(15));
        activity.line_entered("exit 7 ".into(), at(20).now, 30);
        assert!(!activity.awaits_line());
        activity.apply(Mark::CommandEnd(Some(7)), at(40));
        let command = activity.commands().get(1).expect("recorded");
        assert_eq!(command.command, "exit 7");
        assert_eq!(command.exit_code, Some(7));
        assert_eq!(command.output_start, 30);
    }

    #[test]
    fn the_shells_own_start_corrects_one_read_from_the_screen() {
        let mut activity = shell();
        activity.apply(Mark::PromptStart, at(0));
        activity.apply(Mark::InputStart, at(1));
        activity.line_entered("echo hi".into(), at(5).now, 12);
        activity.apply(Mark::CommandLine("echo hi".into()), at(13));
        activity.apply(Mark::OutputStart, at(14));
        assert_eq!(activity.commands().len(), 1);
        assert_eq!(activity.commands().get(1).unwrap().output_start, 22);
        // From now on the shell's marks alone start commands.
        activity.apply(Mark::CommandEnd(Some(0)), at(30));
        activity.apply(Mark::PromptStart, at(31));
        activity.apply(Mark::InputStart, at(32));
        assert!(!activity.awaits_line());
    }

    #[test]
    fn a_notification_waits_for_input_and_output_after_input_runs_again() {
        let mut activity = shell();
        activity.apply(Mark::PromptStart, at(0));
        activity.apply(Mark::OutputStart, at(1));
        activity.output(at(2).now, true);
        activity.apply(Mark::Notification("needs your permission".into()), at(3));
        assert_eq!(
            activity.state(at(3).now, DEFAULT_IDLE_AFTER),
            TerminalState::WaitingForInput
        );
        assert_eq!(
            activity.notification().unwrap().text,
            "needs your permission"
        );
        activity.input_reached(at(2).now);
        activity.output(at(4).now, true);
        assert_eq!(
            activity.state(at(4).now, DEFAULT_IDLE_AFTER),
            TerminalState::WaitingForInput,
            "a repaint is no answer, nor input from before the question"
        );
        activity.input_reached(at(5).now);
        assert_eq!(
            activity.state(at(5).now, DEFAULT_IDLE_AFTER),
            TerminalState::WaitingForInput,
            "until the program goes on"
        );
        activity.output(at(6).now, true);
        assert_eq!(
            activity.state(at(6).now, DEFAULT_IDLE_AFTER),
            TerminalState::Running
        );
    }

    #[test]
    fn the_marks_that_began_a_prompt_and_a_question_are_remembered_after_they_pass() {
        let mut activity = shell();
        assert_eq!(activity.entered_at(TerminalState::AtPrompt), None);
        activity.apply(Mark::PromptStart, at(10));
        activity.apply(Mark::InputStart, at(11));
        assert_eq!(activity.entered_at(TerminalState::AtPrompt), Some(10));
        activity.apply(Mark::OutputStart, at(20));
        activity.apply(Mark::Bell, at(30));
        activity.apply(Mark::Notification("again".into()), at(40));
        assert_eq!(
            activity.entered_at(TerminalState::WaitingForInput),
            Some(40),
            "the latest question asked"
        );
        activity.apply(Mark::PromptStart, at(50));
        assert_eq!(activity.entered_at(TerminalState::AtPrompt), Some(50));
        assert_eq!(
            activity.entered_at(TerminalState::WaitingForInput),
            Some(40),
            "kept after the terminal left the state"
        );
        activity.apply(Mark::Bell, at(60));
        assert_eq!(
            activity.entered_at(TerminalState::WaitingForInput),
            Some(40),
            "a bell at a prompt asks nothing"
        );
        assert_eq!(activity.entered_at(TerminalState::Idle), None);
    }

    #[test]
    fn a_bell_at_a_prompt_asks_nothing() {
        let mut activity = shell();
        activity.apply(Mark::PromptStart, at(0));
        activity.apply(Mark::Bell, at(1));
        assert_eq!(
            activity.state(at(1).now, DEFAULT_IDLE_AFTER),
            TerminalState::AtPrompt
        );
        activity.apply(Mark::OutputStart, at(2));
        activity.apply(Mark::Bell, at(3));
        assert_eq!(
            activity.state(at(3).now, DEFAULT_IDLE_AFTER),
            TerminalState::WaitingForInput
        );
    }

    #[test]
    fn a_full_screen_program_is_idle_only_after_sustained_quiet() {
        let mut activity = Activity::new(None, 10);
        activity.output(at(0).now, true);
        assert_eq!(
            activity.state(at(0).now, DEFAULT_IDLE_AFTER),
            TerminalState::Running
        );
        assert_eq!(
            activity.state(at(4).now, DEFAULT_IDLE_AFTER),
            TerminalState::Running
        );
        activity.output(at(4).now, true);
        assert_eq!(
            activity.state(at(8).now, DEFAULT_IDLE_AFTER),
            TerminalState::Running
        );
        assert_eq!(
            activity.state(at(9).now, DEFAULT_IDLE_AFTER),
            TerminalState::Idle
        );
        assert_eq!(
            activity.idle_at(at(8).now, DEFAULT_IDLE_AFTER),
            Some(at(9).now)
        );
        assert_eq!(
            activity.idle_at(at(9).now, DEFAULT_IDLE_AFTER),
            None,
            "idle already"
        );
        // A line-mode program is never idle: quiet output is how it waits.
        activity.output(at(10).now, false);
        assert_eq!(
            activity.state(at(100).now, DEFAULT_IDLE_AFTER),
            TerminalState::Running
        );
        activity.exited(at(101).now, 500);
        assert_eq!(
            activity.state(at(101).now, DEFAULT_IDLE_AFTER),
            TerminalState::Exited
        );
    }

    #[test]
    fn a_command_left_open_ends_at_the_next_prompt_without_a_code() {
        let mut activity = shell();
        activity.apply(Mark::PromptStart, at(0));
        activity.apply(Mark::OutputStart, at(1));
        activity.apply(Mark::PromptStart, at(20));
        let command = activity.commands().get(1).unwrap();
        assert_eq!(command.exit_code, None);
        assert_eq!(command.output_end, Some(20));
        assert!(!command.is_running());
    }

    #[test]
    fn an_activity_taken_apart_goes_on_as_it_was() {
        let mut activity = Activity::new(Some(Shell::Bash), 3);
        for n in 0..5u64 {
            activity.apply(Mark::PromptStart, at(n * 10));
            activity.apply(Mark::CommandLine(format!("cmd {n}")), at(n * 10 + 1));
            activity.apply(Mark::OutputStart, at(n * 10 + 2));
            activity.apply(Mark::CommandEnd(Some(n as i32)), at(n * 10 + 5));
        }
        activity.apply(Mark::PromptStart, at(60));
        activity.apply(Mark::OutputStart, at(61));
        activity.output(at(61).now, true);
        activity.apply(Mark::Notification("allow?".into()), at(61));
        let parts = activity.to_parts(0);
        let mut resumed = Activity::from_parts(parts.clone(), at(62).now, 0);
        assert_eq!(resumed.to_parts(0), parts);
        assert_eq!(resumed.entered_at(TerminalState::AtPrompt), Some(60));
        assert_eq!(resumed.entered_at(TerminalState::WaitingForInput), Some(61));
        assert_eq!(
            resumed.idle_at(at(62).now, DEFAULT_IDLE_AFTER),
            None,
            "waiting for input, not running"
        );
        resumed.input_reached(at(62).now);
        resumed.output(at(63).now, true);
        assert_eq!(
            resumed.state(at(63).now, DEFAULT_IDLE_AFTER),
            TerminalState::Running,
            "answered, then output"
        );
        assert_eq!(
            resumed.idle_at(at(63).now, DEFAULT_IDLE_AFTER),
            Some(at(63).now + DEFAULT_IDLE_AFTER),
            "still a full-screen program"
        );
        assert_eq!(resumed.commands().first_id(), 4);
        assert_eq!(resumed.commands().running().map(|c| c.id), Some(6));
        resumed.apply(Mark::CommandEnd(Some(3)), at(70));
        resumed.apply(Mark::PromptStart, at(71));
        resumed.apply(Mark::OutputStart, at(72));
        assert_eq!(resumed.commands().running().map(|c| c.id), Some(7));
        assert_eq!(resumed.commands().get(6).and_then(|c| c.exit_code), Some(3));
    }

    #[test]
    fn a_multi_line_command_run_is_typing_goes_on_after_a_hand_off() {
        let mut activity = Activity::new(Some(Shell::Posix), 10);
        activity.apply(Mark::PromptStart, at(0));
        activity.apply(Mark::InputStart, at(1));
        activity.expect_typed("{\necho a\n}");
        activity.line_entered("{".into(), at(2).now, 10);
        let mut resumed = Activity::from_parts(activity.to_parts(0), at(3).now, 0);
        resumed.line_entered("> echo a".into(), at(3).now, 20);
        assert!(resumed.commands().is_empty(), "still being typed");
        resumed.line_entered("> }".into(), at(4).now, 30);
        let command = resumed.commands().get(1).expect("started");
        assert_eq!(command.command, "{\necho a\n}");
    }

    #[test]
    fn a_command_line_being_typed_is_found_again_after_a_hand_off() {
        let mut activity = shell();
        activity.apply(Mark::PromptStart, at(0));
        let mut typing = at(1);
        typing.cursor = ScreenPoint { line: 130, col: 7 };
        activity.apply(Mark::InputStart, typing);
        // The screen had scrolled 110 rows: the prompt is on row 20.
        let parts = activity.to_parts(110);
        assert_eq!(parts.input_at, Some((20, 7)));
        // The next screen redraws the same rows, having scrolled 3.
        let resumed = Activity::from_parts(parts, at(2).now, 3);
        assert!(resumed.awaits_line());
        assert_eq!(resumed.input_at(), Some(ScreenPoint { line: 23, col: 7 }));
    }

    #[test]
    fn a_multi_line_command_typed_at_a_sh_prompt_starts_after_its_last_line() {
        let mut activity = Activity::new(Some(Shell::Posix), 10);
        activity.apply(Mark::PromptStart, at(0));
        activity.apply(Mark::InputStart, at(1));
        activity.expect_typed("{\necho a\n}");
        activity.line_entered("{".into(), at(2).now, 10);
        activity.line_entered("> echo a".into(), at(3).now, 20);
        assert!(activity.commands().is_empty(), "still being typed");
        activity.line_entered("> }".into(), at(4).now, 30);
        let command = activity.commands().get(1).expect("started");
        assert_eq!(command.command, "{\necho a\n}");
        assert_eq!(command.output_start, 30);
    }
}
