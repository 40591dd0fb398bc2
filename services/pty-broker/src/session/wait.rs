//! Waits on a session without an `Attach` stream (docs/CONTRACT.md, "Screens"): until its screen
//! text matches a pattern (and is quiet, when asked), or until its terminal reaches a state (at
//! a prompt, idle, waiting for input, exited), or until the process ends first.
//!
//! A wait looks again whenever output came (at most every [`WAIT_RECHECK`]), feeding the screen
//! to the end of the ring first, so it never judges a stale screen. Waiting for a state reads
//! the session's [`Activity`], the one implementation of the state rules: `idle` is its
//! sustained-quiet rule, so a pause between two bursts never answers, and since quiet has no
//! output to wake the wait, the wait also wakes when the activity says the quiet will have
//! lasted long enough. A prompt or a question is judged by the offset of the mark that began
//! it ([`Activity::entered_at`]), so a wait sees one the terminal already left again, and
//! `after_offset` can tell a new one from an old one.

use std::time::{Duration, SystemTime};

use ptyhub_model::{TerminalActivity, TerminalState};
use regex::Regex;
use tokio::time::{Instant, sleep_until};

use super::{Session, Shared};
use crate::activity::Activity;
use crate::domain::{SessionInfo, SessionPhase};
use crate::error::Error;
use crate::screen::{Screen, ScreenFormat, ScreenView};

/// A wait looks at a changing screen at most this often.
const WAIT_RECHECK: Duration = Duration::from_millis(10);

/// What [`Session::wait_for_screen`] waits for, validated.
#[derive(Debug, Clone)]
pub struct ScreenWait {
    pub target: WaitTarget,
    pub timeout: Duration,
    /// Only a screen that reflects output from this offset on may match; for a state, only one
    /// entered by output from this offset on.
    pub after_offset: Option<u64>,
    pub format: ScreenFormat,
    pub scrollback: usize,
}

/// The two kinds of wait: for text, or for a state.
#[derive(Debug, Clone)]
pub enum WaitTarget {
    Screen {
        /// `None` matches any screen.
        pattern: Option<Regex>,
        /// The screen must also have had no output for this long.
        quiet: Option<Duration>,
    },
    /// One of [`TerminalState::AWAITABLE`].
    State(TerminalState),
}

/// How a wait ended (a timeout is [`Error::WaitTimedOut`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitEnd {
    /// The pattern matched this text.
    Matched(String),
    /// The terminal reached the state waited for.
    State(TerminalState),
    /// The process ended first.
    Exited,
}

/// A screen as a client reads it: the view, and what the terminal was doing as of the same
/// offset, read under the same lock (so a prompt the view shows is `at_prompt` here, where the
/// session's record follows by an event).
#[derive(Debug, Clone)]
pub struct ScreenReading {
    pub view: ScreenView,
    pub terminal: TerminalActivity,
    /// How long no output had come from the PTY at the reading, as a wait's `quiet` counts it;
    /// `None` before any output.
    pub quiet_for: Option<Duration>,
}

impl ScreenReading {
    /// Reads `screen`, current as of the end of the ring (`Shared::current_screen`), with the
    /// terminal's state as of `now`. The quiet is read from the session's state after the
    /// screen, so output that came meanwhile shortens it: it never claims more quiet than the
    /// view shows.
    pub(super) fn read(
        shared: &Shared,
        screen: &mut Screen,
        format: ScreenFormat,
        scrollback: usize,
        now: SystemTime,
    ) -> Self {
        let terminal = screen.activity().summary(now, shared.idle_after);
        let view = screen.view(format, scrollback);
        let quiet_for = {
            let state = shared.lock();
            (state.ring.end() > 0).then(|| state.last_output_at.elapsed())
        };
        Self {
            view,
            terminal,
            quiet_for,
        }
    }
}

/// A wait's answer.
#[derive(Debug, Clone)]
pub struct WaitOutcome {
    pub end: WaitEnd,
    /// The screen, and what the terminal is doing, as the wait answers.
    pub reading: ScreenReading,
    pub info: SessionInfo,
}

impl Session {
    /// Waits until the screen matches (and is quiet, when asked) or the terminal reaches the
    /// state asked for, the process ends, or the timeout passes.
    pub async fn wait_for_screen(&self, wait: ScreenWait) -> Result<WaitOutcome, Error> {
        self.check_open()?;
        if self.shared.screen.is_none() {
            return Err(Error::ScreensOff);
        }
        let deadline = Instant::now() + wait.timeout;
        let mut changed = self.shared.changed.subscribe();
        let mut began_at = None;
        loop {
            changed.borrow_and_update();
            let checked_at = Instant::now();
            let look = self.look(&wait, &mut began_at)?;
            let (phase, last_output_at) = {
                let state = self.shared.lock();
                (state.phase, state.last_output_at)
            };
            let exited = phase == SessionPhase::Exited;
            let mut wake_at = look.idle_in.map(|idle_in| Instant::now() + idle_in);
            if let Some(found) = look.found {
                let quiet_from = match wait.target {
                    WaitTarget::Screen {
                        quiet: Some(quiet), ..
                    } => Some(last_output_at + quiet),
                    _ => None,
                };
                match quiet_from {
                    Some(at) if !exited && at > Instant::now() => wake_at = Some(at),
                    _ => return Ok(found.answer(self.info())),
                }
            } else if exited {
                return self.exited_outcome(&wait);
            }
            if matches!(phase, SessionPhase::Closed(_)) {
                return Err(Error::SessionClosed);
            }
            tokio::select! {
                () = sleep_until(deadline) => {
                    return Err(Error::WaitTimedOut(wait.timeout));
                }
                () = sleep_until(wake_at.unwrap_or(deadline)), if wake_at.is_some() => {}
                changed = changed.changed() => {
                    if changed.is_err() {
                        return Err(Error::SessionClosed);
                    }
                    // A flood changes the screen per read; look again at most every few ms.
                    sleep_until((checked_at + WAIT_RECHECK).min(deadline)).await;
                }
            }
        }
    }

    /// One look at the screen, fed to the end of the ring, for `wait`; `began_at` is set to
    /// the screen's offset at the first look.
    fn look(&self, wait: &ScreenWait, began_at: &mut Option<u64>) -> Result<Look, Error> {
        let mut screen = self.shared.current_screen().ok_or(Error::ScreensOff)?;
        let offset = screen.offset();
        let began_at = *began_at.get_or_insert(offset);
        let now = SystemTime::now();
        let idle_after = self.shared.idle_after;
        let (end, idle_at) = match &wait.target {
            WaitTarget::Screen { pattern, .. } => {
                let reflects_after = wait.after_offset.is_none_or(|after| offset > after);
                let end = match pattern {
                    _ if !reflects_after => None,
                    None => Some(WaitEnd::Matched(String::new())),
                    Some(pattern) => pattern
                        .find(&screen.text(wait.scrollback))
                        .map(|found| WaitEnd::Matched(found.as_str().to_owned())),
                };
                (end, None)
            }
            &WaitTarget::State(target) => {
                let state_wait = StateWait {
                    target,
                    after_offset: wait.after_offset,
                    began_at,
                };
                let activity = screen.activity();
                let end = state_wait
                    .reached(activity, offset, now, idle_after)
                    .then_some(WaitEnd::State(target));
                let idle_at = (target == TerminalState::Idle)
                    .then(|| activity.idle_at(now, idle_after))
                    .flatten();
                (end, idle_at)
            }
        };
        let found = end.map(|end| Found {
            end,
            reading: ScreenReading::read(
                &self.shared,
                &mut screen,
                wait.format,
                wait.scrollback,
                now,
            ),
        });
        let idle_in = idle_at.map(|at| {
            at.duration_since(now).unwrap_or_default()
                // The state is read at the moment; a millisecond later it is surely past.
                + Duration::from_millis(1)
        });
        Ok(Look { found, idle_in })
    }

    fn exited_outcome(&self, wait: &ScreenWait) -> Result<WaitOutcome, Error> {
        let mut screen = self.shared.current_screen().ok_or(Error::ScreensOff)?;
        let reading = ScreenReading::read(
            &self.shared,
            &mut screen,
            wait.format,
            wait.scrollback,
            SystemTime::now(),
        );
        drop(screen);
        Ok(WaitOutcome {
            end: WaitEnd::Exited,
            reading,
            info: self.info(),
        })
    }
}

/// What one look at the screen found.
struct Look {
    found: Option<Found>,
    /// For a wait for `idle`: how long until the quiet will have lasted the idle time, if no
    /// output comes meanwhile.
    idle_in: Option<Duration>,
}

/// What a wait waited for, with the screen and the terminal as they were when it was seen.
struct Found {
    end: WaitEnd,
    reading: ScreenReading,
}

impl Found {
    fn answer(self, info: SessionInfo) -> WaitOutcome {
        WaitOutcome {
            end: self.end,
            reading: self.reading,
            info,
        }
    }
}

/// A wait for a terminal state, judged at each look by [`StateWait::reached`].
#[derive(Debug, Clone, Copy)]
struct StateWait {
    target: TerminalState,
    after_offset: Option<u64>,
    /// The screen's offset when the wait began.
    began_at: u64,
}

impl StateWait {
    /// Whether the terminal, as `activity` knows it after the output up to `offset`, reached the
    /// state as of `now`:
    ///
    /// - a prompt or a question (the states a mark begins) whose mark came from `after_offset`
    ///   on, or after the wait began, whether or not the terminal is still in it;
    /// - without `after_offset`, the state holding now, even if it held when the wait began (an
    ///   automation asking "is it at a prompt?" of a shell that is gets its answer at once);
    /// - with it, `idle` only after output from there on (then the quiet), and `exited` always:
    ///   the process ends once.
    fn reached(
        &self,
        activity: &Activity,
        offset: u64,
        now: SystemTime,
        idle_after: Duration,
    ) -> bool {
        let from = self.after_offset.unwrap_or(self.began_at);
        if activity
            .entered_at(self.target)
            .is_some_and(|mark| mark >= from)
        {
            return true;
        }
        if activity.state(now, idle_after) != self.target {
            return false;
        }
        match (self.target, self.after_offset) {
            (TerminalState::Exited, _) | (_, None) => true,
            (TerminalState::Idle, Some(after)) => offset > after,
            (_, Some(_)) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::UNIX_EPOCH;

    use tokio::io::AsyncWriteExt as _;

    use super::*;
    use crate::activity::{Mark, MarkAt, ScreenPoint};
    use crate::runtime::fake::FakeSession;
    use crate::shell_integration::Shell;

    const IDLE_AFTER: Duration = Duration::from_secs(5);

    fn second(n: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(n)
    }

    fn mark_at(offset: u64, now: SystemTime) -> MarkAt {
        MarkAt {
            start: offset,
            end: offset + 8,
            cursor: ScreenPoint { line: 0, col: 2 },
            now,
        }
    }

    fn waiting_for(target: TerminalState, after_offset: Option<u64>, began_at: u64) -> StateWait {
        StateWait {
            target,
            after_offset,
            began_at,
        }
    }

    #[test]
    fn a_pause_between_two_bursts_does_not_answer_a_wait_for_idle() {
        let mut activity = Activity::new(None, 10);
        let wait = waiting_for(TerminalState::Idle, None, 0);
        activity.output(second(0), true);
        // Three seconds of quiet, under the five the idle time asks for, then another burst.
        assert!(!wait.reached(&activity, 100, second(3), IDLE_AFTER));
        activity.output(second(3), true);
        assert!(
            !wait.reached(&activity, 200, second(5), IDLE_AFTER),
            "five seconds after the first burst, two after the second"
        );
        assert!(!wait.reached(&activity, 200, second(7), IDLE_AFTER));
        assert!(wait.reached(&activity, 200, second(8), IDLE_AFTER));
        assert_eq!(activity.idle_at(second(7), IDLE_AFTER), Some(second(8)));
    }

    #[test]
    fn idle_after_an_offset_needs_output_from_there_on() {
        let mut activity = Activity::new(None, 10);
        activity.output(second(0), true);
        let after_the_output = waiting_for(TerminalState::Idle, Some(100), 100);
        assert!(
            !after_the_output.reached(&activity, 100, second(9), IDLE_AFTER),
            "idle since before the offset: no change after it"
        );
        activity.output(second(10), true);
        assert!(!after_the_output.reached(&activity, 120, second(12), IDLE_AFTER));
        assert!(after_the_output.reached(&activity, 120, second(15), IDLE_AFTER));
    }

    #[test]
    fn a_prompt_counts_when_it_holds_or_came_after_the_offset() {
        let mut activity = Activity::new(Some(Shell::Bash), 10);
        activity.apply(Mark::PromptStart, mark_at(10, second(1)));
        let now = second(2);
        assert!(
            waiting_for(TerminalState::AtPrompt, None, 50).reached(&activity, 50, now, IDLE_AFTER),
            "at a prompt when the wait begins: answered at once"
        );
        let after_input = waiting_for(TerminalState::AtPrompt, Some(50), 50);
        assert!(
            !after_input.reached(&activity, 60, now, IDLE_AFTER),
            "the prompt is from before the offset"
        );
        activity.apply(Mark::OutputStart, mark_at(60, now));
        activity.apply(Mark::CommandEnd(Some(0)), mark_at(70, now));
        activity.apply(Mark::PromptStart, mark_at(80, now));
        // Typed ahead: the shell left its new prompt at once for the next command.
        activity.apply(Mark::OutputStart, mark_at(90, now));
        assert_eq!(activity.state(now, IDLE_AFTER), TerminalState::Running);
        assert!(
            after_input.reached(&activity, 100, now, IDLE_AFTER),
            "a prompt from the offset on, left already, was reached"
        );
        assert!(
            !waiting_for(TerminalState::AtPrompt, None, 100)
                .reached(&activity, 100, now, IDLE_AFTER)
        );
    }

    #[test]
    fn a_question_counts_from_its_notification_and_exit_whenever_it_came() {
        let mut activity = Activity::new(None, 10);
        activity.output(second(0), true);
        let wait = waiting_for(TerminalState::WaitingForInput, None, 0);
        assert!(!wait.reached(&activity, 40, second(1), IDLE_AFTER));
        activity.apply(
            Mark::Notification("needs your permission".into()),
            mark_at(40, second(1)),
        );
        assert!(wait.reached(&activity, 60, second(1), IDLE_AFTER));
        assert!(
            !waiting_for(TerminalState::WaitingForInput, Some(60), 60).reached(
                &activity,
                60,
                second(2),
                IDLE_AFTER
            ),
            "the question came before the offset"
        );
        activity.exited(second(3), 80);
        assert!(waiting_for(TerminalState::Exited, Some(1000), 80).reached(
            &activity,
            80,
            second(3),
            IDLE_AFTER
        ));
    }

    /// A wait for a state in a task of its own, and a look at whether it answered.
    async fn answered(wait: &tokio::task::JoinHandle<Result<WaitOutcome, Error>>) -> bool {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(WAIT_RECHECK * 3).await;
        wait.is_finished()
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_for_input_answers_at_the_notification_not_before() {
        let mut fake = FakeSession::start(FakeSession::settings(), None).await;
        let session = Arc::clone(&fake.session);
        let wait = tokio::spawn(async move {
            session
                .wait_for_screen(ScreenWait {
                    target: WaitTarget::State(TerminalState::WaitingForInput),
                    timeout: Duration::from_secs(60),
                    after_offset: None,
                    format: ScreenFormat::Text,
                    scrollback: 0,
                })
                .await
        });
        let terminal = &mut fake.terminal.terminal;
        terminal
            .write_all(b"\x1b[?1049h\x1b[Hworking 1")
            .await
            .unwrap();
        assert!(!answered(&wait).await, "a repaint asks nothing");
        terminal
            .write_all(b"\x1b[H\x1b[2JAllow? [y/n]\x1b]9;needs your permission\x07")
            .await
            .unwrap();
        assert!(answered(&wait).await, "the notification answers");
        let outcome = wait.await.unwrap().unwrap();
        assert_eq!(outcome.end, WaitEnd::State(TerminalState::WaitingForInput));
        assert_eq!(outcome.reading.view.lines[0], "Allow? [y/n]");
        assert_eq!(
            outcome
                .reading
                .terminal
                .notification
                .map(|asked| asked.text),
            Some("needs your permission".to_owned())
        );
        fake.kill().await;
    }
}
