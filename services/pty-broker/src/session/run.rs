//! `run`: a command typed into the shell people watch, as a colleague would type it, and its
//! end waited for through the shell's integration. Refused, with nothing typed, unless the shell
//! has integration and shows its prompt; the typing takes control as `SendInput` does.

use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use ptyhub_model::{Command, TerminalState};
use tokio::time::{Instant, sleep_until};

use super::Session;
use super::screen::InputItem;
use crate::domain::SessionPhase;
use crate::error::Error;
use crate::ring::RingRead;

/// The most output a `run` answers with; more is cut from the start (the end of a command's
/// output is where its verdict is) and the answer says `truncated`.
pub const MAX_RUN_OUTPUT: usize = 1024 * 1024;

/// How a `run` ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    pub command: Command,
    /// The command's output as the ring holds it, at most [`MAX_RUN_OUTPUT`] bytes of its end.
    pub output: Bytes,
    /// Whether output is missing from the start: over the limit, or gone from the ring.
    pub truncated: bool,
}

impl Session {
    /// Types `line` at the shell's prompt and waits, up to `timeout`, for the command it
    /// starts to end. `force` types while a client holds control (as [`Session::send_input`]).
    pub async fn run(
        &self,
        line: &str,
        timeout: Duration,
        force: bool,
    ) -> Result<RunOutcome, Error> {
        self.check_open()?;
        if line.trim().is_empty() {
            return Err(Error::InvalidRequest("the command is empty".to_owned()));
        }
        if line.contains('\0') {
            return Err(Error::InvalidRequest(
                "the command must not contain NUL".to_owned(),
            ));
        }
        let (first_id, bracketed_paste, shell) = {
            let mut screen = self.shared.current_screen().ok_or(Error::ScreensOff)?;
            let activity = screen.activity();
            if !activity.integrated() {
                return Err(Error::NoShellIntegration);
            }
            let state = activity.state(SystemTime::now(), self.shared.idle_after);
            if state != TerminalState::AtPrompt {
                return Err(Error::NotAtPrompt(state));
            }
            let first_id = activity.commands().next_id();
            let shell = activity.shell();
            (first_id, screen.modes().bracketed_paste, shell)
        };
        let line = line.trim_end_matches(['\r', '\n']);
        let line = match shell {
            Some(shell) if line.contains('\n') => shell.one_command(line),
            _ => line.to_owned(),
        };
        let typed = typed_line(&line, bracketed_paste);
        if let Some(mut screen) = self.shared.current_screen() {
            screen.activity_mut().expect_typed(&line);
        }
        if let Err(error) = self.send_input(vec![InputItem::Data(typed)], force).await {
            if let Some(mut screen) = self.shared.current_screen() {
                screen.activity_mut().forget_typed();
            }
            return Err(error);
        }

        let deadline = Instant::now() + timeout;
        let mut changed = self.shared.changed.subscribe();
        loop {
            changed.borrow_and_update();
            // Answered once the shell shows its prompt again, ready for the next command.
            let ended = {
                let screen = self.shared.current_screen().ok_or(Error::ScreensOff)?;
                let activity = screen.activity();
                let at_prompt = activity.state(SystemTime::now(), self.shared.idle_after)
                    == TerminalState::AtPrompt;
                activity
                    .commands()
                    .after(first_id - 1, 1)
                    .into_iter()
                    .next()
                    .filter(|command| !command.is_running() && at_prompt)
            };
            if let Some(command) = ended {
                return Ok(self.outcome(command));
            }
            let phase = self.shared.lock().phase;
            match phase {
                SessionPhase::Exited => return Err(Error::ProcessExited),
                SessionPhase::Closed(_) => return Err(Error::SessionClosed),
                _ => {}
            }
            tokio::select! {
                () = sleep_until(deadline) => return Err(Error::RunTimedOut(timeout)),
                changed = changed.changed() => if changed.is_err() {
                    return Err(Error::SessionClosed);
                },
            }
        }
    }

    fn outcome(&self, command: Command) -> RunOutcome {
        let state = self.shared.lock();
        let end = command.output_end.unwrap_or_else(|| state.ring.end());
        let from = end
            .saturating_sub(MAX_RUN_OUTPUT as u64)
            .max(command.output_start);
        let mut output = BytesMut::new();
        let mut at = from;
        let mut truncated = from > command.output_start;
        while at < end {
            match state.ring.read_at(at, (end - at) as usize) {
                RingRead::Data(data) => {
                    at += data.len() as u64;
                    output.extend_from_slice(&data);
                }
                RingRead::Gap { resume_at, .. } => {
                    truncated = true;
                    at = resume_at;
                }
                RingRead::UpToDate => break,
            }
        }
        RunOutcome {
            command,
            output: output.freeze(),
            truncated,
        }
    }
}

/// What is typed for `line`: inside a bracketed paste when the shell asked for one (so quotes
/// and line breaks are text, not keys), then Enter. A shell that asked for none gets the lines
/// as they are, each line break an Enter: a POSIX sh reads a quoted string or a compound command
/// across lines as one command.
fn typed_line(line: &str, bracketed_paste: bool) -> Bytes {
    let line = line.trim_end_matches(['\r', '\n']);
    let mut typed = Vec::with_capacity(line.len() + 16);
    if bracketed_paste {
        // The end marker inside the text would end the paste early.
        let line = line.replace("\x1b[201~", "");
        typed.extend_from_slice(b"\x1b[200~");
        typed.extend_from_slice(line.as_bytes());
        typed.extend_from_slice(b"\x1b[201~");
    } else {
        typed.extend_from_slice(line.replace('\n', "\r").as_bytes());
    }
    typed.push(b'\r');
    Bytes::from(typed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_pasted_when_the_shell_asks_for_it_and_typed_otherwise() {
        assert_eq!(
            typed_line("echo 'a\nb'\n", true),
            Bytes::from_static(b"\x1b[200~echo 'a\nb'\x1b[201~\r")
        );
        assert_eq!(
            typed_line("echo 'a\nb'", false),
            Bytes::from_static(b"echo 'a\rb'\r")
        );
        assert_eq!(
            typed_line("x\x1b[201~; rm -rf /", true),
            Bytes::from_static(b"\x1b[200~x; rm -rf /\x1b[201~\r")
        );
    }
}
