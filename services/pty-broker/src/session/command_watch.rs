//! `WatchCommands`: one session's commands as they happen. First the commands the session keeps
//! after the id the watcher asked from, as they are; then each command that starts, once as it
//! starts and again once it ended, with the same id; the watch ends after the process exits or
//! the session closes.
//!
//! The command log is the truth and the event bus only the doorbell: every `terminal` event of
//! the session (and its exit and close) makes the watch read the log again from the last command
//! it has not seen end. So a watcher that lags behind the bus loses nothing the log still keeps,
//! and a command that started and ended between two reads (`true` runs in a millisecond, and
//! the screen reads both of its marks in one feed) is still sent as started before it is sent
//! as ended: its started form is the ended record without its end, exactly what a read in
//! between would have found.

use std::collections::VecDeque;
use std::sync::Arc;

use ptyhub_model::Command;
use tokio::sync::broadcast;

use super::Session;
use crate::domain::{BrokerEvent, BrokerEventKind, SessionPhase};
use crate::error::Error;

/// A session's commands as they happen ([`CommandWatch::next`]).
#[derive(Debug)]
pub struct CommandWatch {
    session: Arc<Session>,
    /// Subscribed before the first read of the log, so that no change after it goes unheard.
    events: broadcast::Receiver<BrokerEvent>,
    /// Found and not yet taken, in order.
    pending: VecDeque<Command>,
    /// Every command up to this id was sent ended (or was before the watch's start).
    ended_through: u64,
    /// The command sent as running and not yet as ended.
    running: Option<u64>,
    /// The first read sends the kept commands as they are, without a started form for the
    /// ended ones: the watcher asked for their records, not for their history.
    first_read: bool,
    /// The process exited or the session closed, and the log was read after that.
    done: bool,
}

impl CommandWatch {
    /// The commands of `session` after `after_id`; `events` must be the broker's event bus,
    /// subscribed now.
    pub(crate) fn new(
        session: Arc<Session>,
        after_id: u64,
        events: broadcast::Receiver<BrokerEvent>,
    ) -> Result<Self, Error> {
        session.check_open()?;
        if session.shared.screen.is_none() {
            return Err(Error::ScreensOff);
        }
        Ok(Self {
            session,
            events,
            pending: VecDeque::new(),
            ended_through: after_id,
            running: None,
            first_read: true,
            done: false,
        })
    }

    /// The next command record, or `None` once the process exited or the session closed and
    /// every record before that was taken.
    pub async fn next(&mut self) -> Option<Command> {
        loop {
            if let Some(command) = self.pending.pop_front() {
                return Some(command);
            }
            if self.done {
                return None;
            }
            self.read_log();
            if self.pending.is_empty() && !self.done {
                self.wait_for_news().await;
            }
        }
    }

    /// Reads the log from the first command not yet seen ended and queues what changed.
    fn read_log(&mut self) {
        // The phase first: a log read after the exit holds every command the process ran (the
        // session ends its activity before it says the process exited).
        let phase = self.session.shared.lock().phase;
        let read_after = self.running.map_or(self.ended_through, |id| id - 1);
        let commands = match self.session.shared.current_screen() {
            Some(screen) => screen.activity().commands().after(read_after, usize::MAX),
            None => Vec::new(),
        };
        if let Some(running) = self.running
            && commands.first().is_none_or(|first| first.id != running)
        {
            // Dropped from the log unended: over a thousand commands went by since.
            self.running = None;
        }
        for command in commands {
            self.queue(command);
        }
        self.first_read = false;
        self.done = matches!(phase, SessionPhase::Exited | SessionPhase::Closed(_));
    }

    fn queue(&mut self, command: Command) {
        let id = command.id;
        if command.is_running() {
            if self.running != Some(id) {
                self.running = Some(id);
                self.pending.push_back(command);
            }
            return;
        }
        if !self.first_read && self.running != Some(id) {
            self.pending.push_back(as_started(&command));
        }
        if self.running == Some(id) {
            self.running = None;
        }
        self.ended_through = id;
        self.pending.push_back(command);
    }

    /// Until the session's terminal changed, its process exited or it closed, or the watch
    /// missed events (the log is read again either way).
    async fn wait_for_news(&mut self) {
        let session_id = self.session.id;
        loop {
            match self.events.recv().await {
                Ok(event) => {
                    let about = match &event.kind {
                        BrokerEventKind::Terminal { session_id, .. }
                        | BrokerEventKind::Exited { session_id, .. }
                        | BrokerEventKind::Closed { session_id, .. } => *session_id,
                        BrokerEventKind::ResetDone(info) => info.session_id,
                        _ => continue,
                    };
                    if about == session_id {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => {
                    self.done = true;
                    return;
                }
            }
        }
    }
}

/// The record of `command` as it was while it ran.
fn as_started(command: &Command) -> Command {
    Command {
        ended_at: None,
        exit_code: None,
        output_end: None,
        ..command.clone()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt as _;

    use super::*;
    use crate::events::EventBus;
    use crate::runtime::fake::FakeSession;

    #[test]
    fn a_started_form_is_the_record_without_its_end() {
        let now = std::time::SystemTime::now();
        let ended = Command {
            id: 3,
            command: "make test".into(),
            cwd: Some("/src".into()),
            started_at: now,
            ended_at: Some(now),
            exit_code: Some(2),
            output_start: 10,
            output_end: Some(90),
        };
        let started = as_started(&ended);
        assert!(started.is_running());
        assert_eq!((started.exit_code, started.output_end), (None, None));
        assert_eq!(
            (started.id, started.command.as_str(), started.output_start),
            (3, "make test", 10)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_command_that_ended_between_two_reads_is_sent_started_then_ended() {
        let mut fake = FakeSession::start(FakeSession::settings(), None).await;
        let session_id = fake.session.id;
        let bus = EventBus::new();
        let terminal = &mut fake.terminal.terminal;
        // One command before the watch, which it asks to skip, and one it keeps.
        terminal
            .write_all(
                b"\x1b]133;A\x07$ \x1b]133;B\x07\x1b]633;E;old\x07\x1b]133;C\x07\x1b]133;D;0\x07",
            )
            .await
            .unwrap();
        terminal
            .write_all(b"\x1b]133;A\x07$ \x1b]133;B\x07\x1b]633;E;kept\x07\x1b]133;C\x07\x1b]133;D;1\x07\x1b]133;A\x07$ ")
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let mut watch = CommandWatch::new(Arc::clone(&fake.session), 1, bus.subscribe()).unwrap();
        let kept = watch.next().await.unwrap();
        assert_eq!((kept.id, kept.command.as_str()), (2, "kept"));
        assert_eq!(
            kept.exit_code,
            Some(1),
            "a kept command comes as it is, once"
        );

        // `true`: both marks in one write, read in one feed.
        terminal
            .write_all(
                b"\x1b]133;B\x07\x1b]633;E;true\x07\x1b]133;C\x07\x1b]133;D;0\x07\x1b]133;A\x07$ ",
            )
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        bus.publish(BrokerEventKind::Terminal {
            session_id,
            terminal: Default::default(),
            commands: Vec::new(),
        });
        let started = watch.next().await.unwrap();
        let ended = watch.next().await.unwrap();
        assert_eq!((started.id, started.command.as_str()), (3, "true"));
        assert!(started.is_running(), "{started:?}");
        assert_eq!((ended.id, ended.exit_code), (3, Some(0)));

        // A command seen running is sent once as running, then ended when it ends.
        terminal
            .write_all(b"\x1b]133;B\x07\x1b]633;E;sleep 1\x07\x1b]133;C\x07")
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let running = watch.next().await.unwrap();
        assert_eq!((running.id, running.is_running()), (4, true));
        terminal
            .write_all(b"\x1b]133;D;0\x07\x1b]133;A\x07$ ")
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        bus.publish(BrokerEventKind::Exited {
            session_id,
            exit: crate::domain::ExitStatus::exited(0),
        });
        let ended = watch.next().await.unwrap();
        assert_eq!((ended.id, ended.is_running()), (4, false));
        fake.kill().await;
        bus.publish(BrokerEventKind::Closed {
            session_id,
            reason: crate::domain::CloseReason::Killed,
        });
        assert_eq!(watch.next().await, None, "the watch ends with the session");
    }
}
