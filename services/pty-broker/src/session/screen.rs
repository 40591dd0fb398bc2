//! A session's screen beside its ring: the feeder that keeps the emulator fed off the output path,
//! the catch-up that makes every read of the screen current (a snapshot is never stale), and the
//! screen calls clients make without an `Attach` stream: read the screen and the commands, type
//! (the waits are `wait.rs`'s).
//!
//! The feeder is a task of its own that reads the ring at the screen's offset, as a client reads
//! it at its cursor, so the PTY's reader never parses. Whoever needs the screen current (an attach
//! that sends a snapshot, a screen read, a wait) feeds the rest of the ring under the same lock
//! first: feeding is idempotent by offset. The session task reads no further than a ring ahead of
//! the screen ([`super::State::read_allowance`]), so the screen never misses a byte. A screen far
//! behind first tries to skip the part of a plain-text flood nobody can see any more
//! ([`Screen::look_ahead`]), which is what lets a flood run at the PTY's pace.
//!
//! The feeder batches, because nobody waits for it: woken by output after it had caught up, it
//! lets output come for [`FEED_BATCH_INTERVAL`] before it feeds, and while output keeps coming it
//! feeds a batch an interval, woken by the timer and not by the chunks, so a fast typist's echoes
//! do not each wake it beside the client they are for. The PTY's reader wakes it at once
//! ([`Shared::feeder_wake`]) when the screen falls half a ring behind, so that a flood is skipped
//! before the reader would have to wait for the screen, and when it waits for the screen all
//! the same, so flow control and floods never wait for the timer. The screen is as current as
//! ever for its readers (they feed it first); what the feeder publishes, the title and the last
//! bell, may be an interval late.

use std::sync::{Arc, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use ptyhub_wire::limits;
use tokio_util::sync::CancellationToken;

use super::{InputSent, ScreenReading, Session, Shared, State};
use crate::activity::{ActivityParts, Change};
use crate::domain::{Command, TerminalActivity, TerminalState};
use crate::error::Error;
use crate::recording::{MAX_COMMAND_OUTPUT, RecordedRange};
use crate::ring::RingRead;
use crate::screen::{LookAhead, Screen, ScreenFormat, Snapshot, key_bytes};
use crate::shell_integration::Shell;

/// Bytes the feeder parses before it lets other tasks run.
const FEED_SLICE: usize = 16 * 1024;
/// The feeder lets plain text run this part of the ring ahead before it fast-forwards: far
/// enough that most of a flood is skipped, near enough that the PTY's reader (at most a ring
/// ahead of the screen) never waits for it.
pub const FAST_FORWARD_RING_PART: usize = 4;
/// A reader that needs the screen now fast-forwards when it is at least this far behind.
const FAST_FORWARD_LEAST: usize = 32 * 1024;
/// The feeder waits for plain text to become a flood worth skipping only when at least this much
/// of it is ahead (within a batching interval, 256 KiB/s): less is parsed at once, well under a
/// millisecond of the emulator's time, rather than looked at again a [`FLOOD_TICK`] later. A
/// keystroke's echo is a few bytes: the feeder parses it in the wake that ends its batching
/// interval, instead of waking once more for a flood that is not coming.
const FLOOD_LEAST: u64 = 4 * 1024;
/// While a plain-text flood runs ahead, the feeder looks at it this often (at 46 MiB/s about a
/// fifth of a 1 MiB ring arrives in between), and at once when the screen falls half a ring
/// behind ([`FALLS_BEHIND_RING_PART`]: a local PTY's flood, at 200-300 MiB/s here, fills the
/// ring within a tick); when nothing came in between, the flood stopped and it parses the rest.
const FLOOD_TICK: Duration = Duration::from_millis(4);
/// Woken by output after it had caught up, the feeder lets output come this long before it
/// feeds, and feeds at most this often while output keeps coming, so that a burst of chunks or
/// a fast typist's echoes wake it once per interval rather than once per chunk: on a machine of
/// few cores every wake beside the echo's own costs the echo latency. 16 ms (a frame at 60 Hz) is
/// long against the gap between keystrokes echoed back to back (well under a millisecond) and
/// short against everything that waits for what the feeder publishes: the title and bell reach
/// `WatchEvents` at most once a second anyway, and a reader of the screen feeds it itself
/// ([`Shared::current_screen`]). Output that puts the screen half a ring behind within an
/// interval (a flood) wakes the feeder at once through [`Shared::feeder_wake`].
const FEED_BATCH_INTERVAL: Duration = Duration::from_millis(16);

/// The PTY's reader wakes the feeder as soon as the screen is this part of a ring behind
/// ([`State::feeder_falls_behind`]), once for each time it falls behind: a flood that fills the
/// ring faster than the feeder looks ([`FLOOD_TICK`]) is then skipped while the reader reads on
/// into the other half, instead of the reader stopping at a full ring to wait for the screen.
const FALLS_BEHIND_RING_PART: usize = 2;

/// While a slow client holds a plain-text flood back, the feeder looks again when output comes,
/// or after this long in case the flood ended just where the client stopped it: the rest is then
/// parsed at most this late (nobody waits for it: readers of the screen feed it first).
const HELD_FLOOD_RECHECK: Duration = Duration::from_millis(250);

/// What [`Shared::look_ahead`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ahead {
    Skipped,
    Wait,
    Parse,
}

/// How far [`Shared::feed_screen`] went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fed {
    UpToDate,
    /// The budget ran out first.
    Partly,
    /// It waits for more of a plain-text flood.
    Waiting,
}
/// Whether a plain-text flood the feeder waits for goes on ([`Shared::flood_since`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flood {
    /// Output came meanwhile.
    Coming,
    /// Nothing came because the PTY's reader waits for a client that reads slower than the flood
    /// comes (flow control): the flood goes on as soon as the client reads.
    HeldByClient,
    /// Nothing came and nothing holds it back: the rest can be parsed.
    Stopped,
}

impl State {
    /// Whether the PTY's reader should wake the feeder now, off its batching interval and its
    /// flood tick: the screen is [`FALLS_BEHIND_RING_PART`] of the ring behind and the feeder
    /// was not woken for it since it last moved on. A wake per batch of output, not per read.
    pub(super) fn feeder_falls_behind(&mut self) -> bool {
        let behind = self.ring.end().saturating_sub(self.screen_offset);
        let part = (self.ring.capacity() / FALLS_BEHIND_RING_PART) as u64;
        if behind < part || self.feeder_woken_at == Some(self.screen_offset) {
            return false;
        }
        self.feeder_woken_at = Some(self.screen_offset);
        true
    }
}

/// One piece of input for [`Session::send_input`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputItem {
    /// Written as UTF-8, as given.
    Text(String),
    /// A key name (`Enter`, `C-c`, `Up`, ...).
    Key(String),
    /// Raw bytes.
    Data(Bytes),
}

impl Shared {
    fn screen_lock(&self) -> Option<MutexGuard<'_, Screen>> {
        self.screen.as_ref().map(|screen| {
            screen
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
        })
    }

    /// Feeds `screen` from the ring, at most `budget` bytes, unless `may_wait` and the output
    /// ahead is plain text that a fast-forward may soon skip.
    fn feed_screen(&self, screen: &mut Screen, budget: usize, may_wait: bool) -> Fed {
        loop {
            match self.look_ahead(screen, may_wait) {
                Ahead::Wait => return Fed::Waiting,
                // After a skip, the rows that stay are plain text too: look again, and the
                // feeder waits for the flood to go on (it skips them too) rather than parse them.
                Ahead::Skipped => {}
                Ahead::Parse => break,
            }
        }
        let mut fed = 0;
        while fed < budget {
            let at = screen.offset();
            let (read, last_input_at) = {
                let state = self.lock();
                (state.ring.read_at(at, budget - fed), state.last_input_at)
            };
            if let Some(input_at) = last_input_at {
                let input_at = SystemTime::now()
                    .checked_sub(input_at.elapsed())
                    .unwrap_or(UNIX_EPOCH);
                screen.activity_mut().input_reached(input_at);
            }
            match read {
                RingRead::Data(data) => {
                    screen.feed_at(at, &data);
                    fed += data.len();
                }
                RingRead::UpToDate => return Fed::UpToDate,
                RingRead::Gap { lost, resume_at } => {
                    // Flow control keeps the screen within the ring; only a closed session's
                    // cleared ring gets here.
                    tracing::debug!(lost, resume_at, "screen skipped output the ring dropped");
                    screen.skip_to(resume_at);
                }
            }
        }
        Fed::Partly
    }

    /// Lets the screen look at the output it has not parsed ([`Screen::look_ahead`]) and skip the
    /// part of a plain-text flood that would scroll out of it before the ring's end: a flood then
    /// costs the screen a scan, not a parse. Parsing waits only when `may_wait`, the output ahead
    /// is plain text, too little of it is there yet to be worth skipping, and enough that it may
    /// be a flood ([`FLOOD_LEAST`]).
    fn look_ahead(&self, screen: &mut Screen, may_wait: bool) -> Ahead {
        let (output, behind, try_skip) = {
            let state = self.lock();
            let behind = state.ring.end().saturating_sub(screen.offset());
            if behind == 0 {
                return Ahead::Parse;
            }
            // The feeder lets a flood run a part of the ring ahead before it skips, so that the
            // skip is long and the rows parsed after it are few beside it; a reader that needs
            // the screen now skips whatever it can.
            let skip_from = if may_wait {
                state.ring.capacity() / FAST_FORWARD_RING_PART
            } else {
                FAST_FORWARD_LEAST
            };
            let output: Vec<Bytes> = state.ring.pieces_from(screen.offset()).collect();
            (output, behind, behind >= skip_from as u64)
        };
        match screen.look_ahead(&output, try_skip) {
            LookAhead::Skipped(skipped) => {
                tracing::trace!(skipped, "screen fast-forwarded over plain text");
                Ahead::Skipped
            }
            LookAhead::Plain if may_wait && !try_skip && behind >= FLOOD_LEAST => Ahead::Wait,
            LookAhead::Plain | LookAhead::Parse => Ahead::Parse,
        }
    }

    /// Whether the flood goes on, given where the output ended when the feeder last looked. A
    /// reader held back by flow control reads nothing, yet the flood has not stopped: taken for
    /// one that stopped, its rest would be parsed slice by slice while it goes on, at the
    /// emulator's pace rather than a scan's (a slow client did that to every flood). The feeder
    /// waits only while the screen is less than a ring behind, so what holds the reader then is
    /// the controller.
    fn flood_since(&self, end_before: u64) -> Flood {
        let state = self.lock();
        if state.ring.end() != end_before {
            Flood::Coming
        } else if state.read_allowance(true) == 0 {
            Flood::HeldByClient
        } else {
            Flood::Stopped
        }
    }

    /// Tells the session task how far the screen got (it may read on) and what it saw.
    fn publish_screen(&self, screen: &mut Screen) {
        let (marks, changed) = screen.take_changes();
        let terminal = screen
            .activity()
            .summary(SystemTime::now(), self.idle_after);
        let mut commands: Vec<Command> = Vec::new();
        for change in screen.activity_mut().take_changes() {
            if let Change::CommandStarted(id) | Change::CommandFinished(id) = change
                && let Some(command) = screen.activity().command(id)
            {
                commands.retain(|seen| seen.id != id);
                commands.push(command);
            }
        }
        let mut state = self.lock();
        state.screen_offset = screen.offset();
        if changed {
            state.title = marks.title;
            state.last_bell_at = marks.last_bell_at;
            state.marks_since_report = true;
        }
        // A shell's first prompt lets input held for it go (`session/input.rs`).
        if terminal.state != TerminalState::Starting && self.prompt_gate.is_held() {
            self.prompt_gate.release();
        }
        let terminal_changed = terminal != state.terminal || !commands.is_empty();
        if terminal_changed {
            state.terminal = terminal;
            for command in commands {
                state.terminal_commands.retain(|seen| seen.id != command.id);
                state.terminal_commands.push(command);
            }
            state.terminal_changed = true;
        }
        let wake_task = state.reader_waiting || changed || terminal_changed;
        drop(state);
        if wake_task {
            self.task_wake.notify_one();
        }
    }

    /// The screen fed to the end of the ring, locked; `None` without screens.
    pub(super) fn current_screen(&self) -> Option<MutexGuard<'_, Screen>> {
        let mut screen = self.screen_lock()?;
        self.feed_screen(&mut screen, usize::MAX, false);
        self.publish_screen(&mut screen);
        Some(screen)
    }

    /// A snapshot as of the end of the ring; `None` without screens.
    pub(super) fn snapshot(&self) -> Option<Snapshot> {
        self.current_screen().map(|screen| screen.snapshot())
    }

    /// A snapshot of the present screen alone, without scrollback, as of the end of the ring;
    /// `None` without screens.
    pub(super) fn present_snapshot(&self) -> Option<Snapshot> {
        self.current_screen()
            .map(|mut screen| screen.present_snapshot())
    }

    /// Feeds the screen what came before a resize, then resizes it.
    pub(super) fn resize_screen(&self, size: crate::domain::TerminalSize) {
        if let Some(mut screen) = self.current_screen() {
            screen.resize(size);
        }
    }

    /// Feeds the screen what the old process wrote before a reset, then clears it for the new one.
    pub(super) fn reset_screen(&self) {
        if let Some(mut screen) = self.current_screen() {
            screen.reset();
            self.publish_screen(&mut screen);
        }
    }

    /// A process started: its activity starts over (the commands stay); `shell` when it is a
    /// shell started with its integration.
    pub(super) fn start_activity(&self, shell: Option<Shell>) {
        if let Some(mut screen) = self.current_screen() {
            let offset = screen.offset();
            screen
                .activity_mut()
                .restart(shell, SystemTime::now(), offset);
            self.publish_screen(&mut screen);
        }
    }

    /// The process ended, after all it wrote.
    pub(super) fn activity_exited(&self) {
        if let Some(mut screen) = self.current_screen() {
            let offset = screen.offset();
            screen.activity_mut().exited(SystemTime::now(), offset);
            self.publish_screen(&mut screen);
        }
    }

    /// A snapshot and the activity as of the end of the ring, for a hand-off.
    pub(super) fn snapshot_and_activity(&self) -> Option<(Snapshot, ActivityParts)> {
        self.current_screen()
            .map(|screen| (screen.snapshot(), screen.activity_parts()))
    }
}

/// Keeps the session's screen fed until `done`: a reader of the ring like any client, that
/// parses in slices so that it never holds a worker for long. Caught up, it waits for the next
/// change; woken by one, it lets output come for [`FEED_BATCH_INTERVAL`] before it feeds, and
/// while output keeps coming it goes on a batch at a time, woken by the timer and not by the
/// chunks (nor the keystrokes' echoes), or at once by [`Shared::feeder_wake`] when the PTY's
/// reader waits for it. A screen with nothing new for `sleep_after` goes to sleep (see
/// [`Screen::sleep`]).
pub(super) async fn feed_screen_until(
    shared: Arc<Shared>,
    sleep_after: Duration,
    done: CancellationToken,
) {
    if shared.screen.is_none() {
        return;
    }
    let mut changed = shared.changed.subscribe();
    let mut may_wait = true;
    // Where the output ended when a flood was last taken for stopped.
    let mut stopped_at = 0;
    // Something changed during the last batching interval: the next interval follows the feed
    // at once, without waiting to be woken.
    let mut busy = false;
    loop {
        let waiting = loop {
            let fed = {
                let Some(mut screen) = shared.screen_lock() else {
                    return;
                };
                let fed = shared.feed_screen(&mut screen, FEED_SLICE, may_wait);
                shared.publish_screen(&mut screen);
                fed
            };
            match fed {
                Fed::UpToDate => break false,
                Fed::Waiting => break true,
                Fed::Partly => {
                    tokio::task::yield_now().await;
                    // A flood taken for stopped came on again (its reader was only late, on a
                    // busy machine): wait for it again rather than parse it to the end.
                    if !may_wait && shared.lock().ring.end() != stopped_at {
                        may_wait = true;
                    }
                }
            }
        };
        if waiting {
            // A flood goes on: look again after a while rather than at every read of the PTY
            // (or at once when the PTY's reader waits for the screen), and parse what came once
            // it stops coming.
            let end_before = shared.lock().ring.end();
            tokio::select! {
                () = done.cancelled() => return,
                () = tokio::time::sleep(FLOOD_TICK) => {}
                () = shared.feeder_wake.notified() => {}
            }
            match shared.flood_since(end_before) {
                Flood::Coming => {}
                Flood::HeldByClient => {
                    // Nothing comes until the client reads on; then the flood goes on, and a tick
                    // from then is soon enough to look again. A client that stopped reading does
                    // not keep the feeder looking every tick meanwhile.
                    changed.borrow_and_update();
                    tokio::select! {
                        changed = changed.changed() => if changed.is_err() { return },
                        () = done.cancelled() => return,
                        () = tokio::time::sleep(HELD_FLOOD_RECHECK) => {}
                    }
                }
                Flood::Stopped => {
                    may_wait = false;
                    stopped_at = end_before;
                }
            }
            continue;
        }
        may_wait = true;
        if !busy {
            let (awake, idle_at) = shared.screen_lock().map_or((false, None), |screen| {
                let idle_at = screen
                    .activity()
                    .idle_at(SystemTime::now(), shared.idle_after);
                (!screen.is_asleep(), idle_at)
            });
            // A full-screen program turns idle with no output to tell: the feeder looks then.
            let idle_in = idle_at.map(|at| {
                at.duration_since(SystemTime::now())
                    .unwrap_or_default()
                    // The state is read at the moment; a millisecond later it is surely past.
                    + Duration::from_millis(1)
            });
            tokio::select! {
                changed = changed.changed() => if changed.is_err() { return },
                () = done.cancelled() => return,
                () = tokio::time::sleep(idle_in.unwrap_or_default()), if idle_in.is_some() => {
                    if let Some(mut screen) = shared.screen_lock() {
                        shared.publish_screen(&mut screen);
                    }
                    continue;
                }
                () = tokio::time::sleep(sleep_after), if awake => {
                    let freed = shared.screen_lock().map_or(0, |mut screen| screen.sleep());
                    // The grid and scrollback it let go of stay with the allocator otherwise.
                    crate::memory::release_freed_soon(freed);
                    continue;
                }
            }
        }
        // Output is coming: let more of it come and feed it in one go. Nothing that arrives
        // meanwhile wakes the feeder (`changed` is not listened to), except the PTY's reader
        // waiting for the screen (flow control: a flood never waits for this timer).
        tokio::select! {
            () = done.cancelled() => return,
            () = tokio::time::sleep(FEED_BATCH_INTERVAL) => {}
            () = shared.feeder_wake.notified() => {}
        }
        // Marked seen before the feed, so that what comes from here on counts for the next
        // interval: nothing pushed before the feed reads the ring goes unfed.
        busy = changed.has_changed().unwrap_or(false);
        changed.borrow_and_update();
    }
}

/// A page of a session's commands ([`Session::commands`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandPage {
    pub commands: Vec<Command>,
    /// The id of the oldest command the session keeps.
    pub first_kept_id: u64,
    /// The id of the newest command the shell ran (0 before its first).
    pub last_id: u64,
    pub terminal: TerminalActivity,
}

impl Session {
    /// How often the PTY's reader stopped for the screen, a ring behind it, while the controller
    /// would have let it read on: what the screen cost the output's pace. A plain-text flood is
    /// skipped before that (the feeder is woken at half a ring); output the emulator must parse
    /// all of, coming faster than it parses, is read at the emulator's pace. Read by the tests
    /// that pin both.
    #[cfg(test)]
    pub fn reads_held_for_screen(&self) -> u64 {
        self.shared.lock().reads_held_for_screen
    }

    /// The commands after `after` (0 for all kept), at most `limit`, as of the end of the ring.
    pub fn commands(&self, after: u64, limit: usize) -> Result<CommandPage, Error> {
        self.check_open()?;
        let screen = self.shared.current_screen().ok_or(Error::ScreensOff)?;
        let activity = screen.activity();
        Ok(CommandPage {
            commands: activity.commands().after(after, limit),
            first_kept_id: activity.commands().first_id(),
            last_id: activity.commands().next_id() - 1,
            terminal: activity.summary(SystemTime::now(), self.shared.idle_after),
        })
    }

    /// One command and its output (so far, while it runs), at most [`MAX_COMMAND_OUTPUT`] of it:
    /// from the ring while it holds it; when the ring let go of its start, that part from the
    /// session's recording, when there is one, and the rest from the ring.
    pub async fn command_output(&self, id: u64) -> Result<(Command, Bytes), Error> {
        self.check_open()?;
        let command = {
            let screen = self.shared.current_screen().ok_or(Error::ScreensOff)?;
            screen
                .activity()
                .command(id)
                .ok_or(Error::CommandNotFound(id))?
        };
        let end = command
            .output_end
            .unwrap_or_else(|| self.shared.lock().ring.end());
        // Checked before anything is read: a command that never ends (`yes`, a log tail) has
        // an output as long as the session's, and no answer may hold that.
        let size = end.saturating_sub(command.output_start);
        if size > MAX_COMMAND_OUTPUT {
            return Err(Error::CommandOutputTooLong { command: id, size });
        }
        let ring_start = match self.ring_output(command.output_start, end) {
            Ok(output) => return Ok((command, output.freeze())),
            Err(ring_start) => ring_start,
        };
        let lost = ring_start - command.output_start;
        let recorded = self
            .shared
            .recorded_output(self.id, command.output_start, ring_start)
            .await;
        let mut output = match recorded {
            None => return Err(Error::CommandOutputLost { command: id, lost }),
            Some(RecordedRange::Missing(lost)) => {
                return Err(Error::CommandOutputNotRecorded { command: id, lost });
            }
            Some(RecordedRange::Data(head)) => bytes::BytesMut::from(&head[..]),
        };
        // The ring moves on meanwhile: what it let go of since is missing too (a flood of more
        // than a ring during the read).
        match self.ring_output(ring_start, end) {
            Ok(tail) => output.extend_from_slice(&tail),
            Err(moved_to) => {
                return Err(Error::CommandOutputNotRecorded {
                    command: id,
                    lost: moved_to - ring_start,
                });
            }
        }
        Ok((command, output.freeze()))
    }

    /// The output `from..to` as the ring holds it; `Err` with where the ring starts when it
    /// let go of some of it. The caller bounds `to - from` (it is allocated up front).
    fn ring_output(&self, from: u64, to: u64) -> Result<bytes::BytesMut, u64> {
        let state = self.shared.lock();
        let mut output = bytes::BytesMut::with_capacity(to.saturating_sub(from) as usize);
        let mut at = from;
        while at < to {
            match state.ring.read_at(at, (to - at) as usize) {
                RingRead::Data(data) => {
                    at += data.len() as u64;
                    output.extend_from_slice(&data);
                }
                RingRead::Gap { resume_at, .. } => return Err(resume_at.min(to)),
                RingRead::UpToDate => break,
            }
        }
        Ok(output)
    }

    /// The screen as of the end of the ring.
    pub fn screen(&self, format: ScreenFormat, scrollback: usize) -> Result<ScreenReading, Error> {
        self.check_open()?;
        let mut screen = self.shared.current_screen().ok_or(Error::ScreensOff)?;
        Ok(ScreenReading::read(
            &self.shared,
            &mut screen,
            format,
            scrollback,
            SystemTime::now(),
        ))
    }

    /// Writes input as a brief controller: refused while a client holds the controller lease
    /// unless `force`, and never taking the lease from it.
    pub async fn send_input(&self, items: Vec<InputItem>, force: bool) -> Result<InputSent, Error> {
        self.check_open()?;
        // Keys are translated for the modes the program set as of now.
        let application_cursor = self
            .shared
            .current_screen()
            .is_some_and(|mut screen| screen.application_cursor());
        let mut bytes = Vec::new();
        for item in items {
            match item {
                InputItem::Text(text) => bytes.extend_from_slice(text.as_bytes()),
                InputItem::Key(name) => bytes.extend(key_bytes(&name, application_cursor)?),
                InputItem::Data(data) => bytes.extend_from_slice(&data),
            }
            if bytes.len() > limits::MAX_FRAME_BYTES {
                return Err(Error::InputTooLarge(bytes.len()));
            }
        }
        if bytes.is_empty() {
            return Err(Error::InvalidRequest("the input is empty".to_owned()));
        }
        let control_check = || {
            if !force && self.shared.lock().attachments.controller_cursor().is_some() {
                return Err(Error::ControlHeld);
            }
            Ok(())
        };
        control_check()?;
        self.write_call_input(&bytes, control_check).await
    }

    pub(super) fn check_open(&self) -> Result<(), Error> {
        if self.is_closed() {
            return Err(Error::SessionNotFound(self.id));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt as _;
    use tokio::time::{Instant, advance};

    use ptyhub_attach_ticket::TicketHolder;

    use super::*;
    use crate::domain::{ClientEvent, Role};
    use crate::runtime::fake::FakeSession;
    use crate::session::{AttachRequest, SessionSettings};

    /// Lets every task that output, a timer or a message woke run to its next wait.
    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    /// How far the feeder (or a reader of the screen) fed the screen, as the session task knows.
    fn fed(session: &Session) -> u64 {
        session.shared.lock().screen_offset
    }

    fn output_end(session: &Session) -> u64 {
        session.shared.lock().ring.end()
    }

    #[tokio::test(start_paused = true)]
    async fn feeder_is_not_woken_per_chunk_yet_every_screen_read_is_current() {
        let mut fake = FakeSession::start(FakeSession::settings(), None).await;
        let session = Arc::clone(&fake.session);
        let start = Instant::now();
        let mut feeds = 0;
        let mut last_fed = fed(&session);
        for line in 0..40 {
            // Bold, as a prompt or a build's log would be: plain text arriving this often is a
            // flood to the feeder, which waits for it to stop instead (`FLOOD_TICK`).
            let chunk = format!("\x1b[1mline {line}\x1b[m\r\n");
            fake.terminal
                .terminal
                .write_all(chunk.as_bytes())
                .await
                .unwrap();
            settle().await;
            if line == 0 {
                assert_eq!(
                    fed(&session),
                    0,
                    "the feeder fed the first chunk at once, not after a batching interval"
                );
            }
            if fed(&session) != last_fed {
                feeds += 1;
            }
            if line % 8 == 5 {
                // Behind or not, the feeder never makes a read of the screen stale.
                let view = session.screen(ScreenFormat::Text, 0).unwrap().view;
                assert_eq!(view.offset, output_end(&session));
                assert!(
                    view.lines.iter().any(|row| *row == format!("line {line}")),
                    "{:?}",
                    view.lines
                );
            }
            last_fed = fed(&session);
            advance(Duration::from_millis(2)).await;
        }
        let elapsed = start.elapsed();
        let intervals = (elapsed.as_millis() / FEED_BATCH_INTERVAL.as_millis()) as usize;
        assert!(
            feeds <= intervals + 1,
            "{feeds} feeds for 40 chunks in {elapsed:?}: the feeder was woken per chunk"
        );
        // Once output stops, the feeder catches up by itself and goes back to waiting.
        advance(FEED_BATCH_INTERVAL).await;
        settle().await;
        assert_eq!(fed(&session), output_end(&session));
        fake.kill().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_title_reaches_the_session_within_one_batching_interval() {
        let mut fake = FakeSession::start(FakeSession::settings(), None).await;
        fake.terminal
            .terminal
            .write_all(b"\x1b]2;building\x07")
            .await
            .unwrap();
        settle().await;
        advance(FEED_BATCH_INTERVAL).await;
        settle().await;
        assert_eq!(fake.session.info().title, "building");
        fake.kill().await;
    }

    #[tokio::test(start_paused = true)]
    async fn an_echo_is_parsed_when_the_batching_interval_ends_not_a_flood_tick_later() {
        let mut fake = FakeSession::start(FakeSession::settings(), None).await;
        // What a typist's keystrokes echo: plain text, a few bytes at a time.
        for key in [b"l", b"s"] {
            fake.terminal.terminal.write_all(key).await.unwrap();
            settle().await;
            advance(FEED_BATCH_INTERVAL).await;
            settle().await;
            assert_eq!(
                fed(&fake.session),
                output_end(&fake.session),
                "the feeder waited for the echo to become a flood"
            );
            advance(FEED_BATCH_INTERVAL * 4).await;
        }
        // As much plain text within one interval may be a flood starting: the feeder waits a
        // tick to see whether it goes on, so that it can skip it rather than parse it.
        fake.terminal
            .terminal
            .write_all(&plain_flood(1)[..FLOOD_LEAST as usize])
            .await
            .unwrap();
        settle().await;
        advance(FEED_BATCH_INTERVAL).await;
        settle().await;
        assert!(fed(&fake.session) < output_end(&fake.session));
        advance(FLOOD_TICK).await;
        settle().await;
        assert_eq!(fed(&fake.session), output_end(&fake.session));
        fake.kill().await;
    }

    /// `mib` MiB of `yes`'s kind of output: plain text the screen can fast-forward over.
    fn plain_flood(mib: usize) -> Vec<u8> {
        let mut line = vec![b'y'; 63];
        line.push(b'\n');
        line.repeat(mib * (1 << 20) / line.len())
    }

    /// Lines in eight colours: output the screen parses all of rather than fast-forwarding.
    fn coloured_flood(lines: usize) -> Vec<u8> {
        (0..lines)
            .flat_map(|line| format!("\x1b[3{}mline {line}\x1b[0m\r\n", line % 8).into_bytes())
            .collect()
    }

    /// Writes `flood` as the session's output and waits until the screen has it all (on the
    /// paused clock, for at most a minute of it).
    async fn flood_the_screen(fake: &mut FakeSession, flood: &[u8]) {
        fake.terminal.terminal.write_all(flood).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while fed(&fake.session) < flood.len() as u64 {
            assert!(
                Instant::now() < deadline,
                "the screen was fed {} of {} bytes",
                fed(&fake.session),
                flood.len()
            );
            tokio::time::sleep(FLOOD_TICK).await;
        }
    }

    fn bytes_parsed(session: &Session) -> u64 {
        session.shared.screen_lock().unwrap().bytes_parsed()
    }

    #[tokio::test(start_paused = true)]
    async fn a_plain_flood_that_waits_for_the_screen_is_skipped_not_parsed() {
        let mut fake = FakeSession::start(FakeSession::settings(), None).await;
        // Many rings' worth, read as fast as it is written: the screen falls behind again and
        // again.
        let flood = plain_flood(16);
        flood_the_screen(&mut fake, &flood).await;
        // What stays is the screen and its scrollback (124 rows of 64 bytes here); a flood that
        // ran ahead of the screen is no reason to parse it.
        let parsed = bytes_parsed(&fake.session);
        assert!(
            parsed <= 64 * 1024,
            "the screen parsed {parsed} bytes of a {} byte plain flood",
            flood.len()
        );
        fake.kill().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_plain_flood_is_skipped_before_the_reader_waits_for_the_screen() {
        let mut fake = FakeSession::start(FakeSession::settings(), None).await;
        // Sixteen rings, read as fast as they are written with no timer firing meanwhile (the
        // paused clock moves only when every task waits): only the reader can wake the feeder
        // in time.
        let flood = plain_flood(16);
        flood_the_screen(&mut fake, &flood).await;
        assert_eq!(
            fake.session.reads_held_for_screen(),
            0,
            "the PTY's reader waited for the screen during a plain flood"
        );
        fake.kill().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_the_screen_must_parse_is_read_at_its_pace_and_counted() {
        // The counter's other side: output that must be parsed holds the reader back.
        let settings = SessionSettings {
            ring_bytes: 16 * 1024,
            ..FakeSession::settings()
        };
        let mut fake = FakeSession::start(settings, None).await;
        let flood = coloured_flood(5_000);
        flood_the_screen(&mut fake, &flood).await;
        assert!(fake.session.reads_held_for_screen() > 0);
        fake.kill().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_plain_flood_that_waits_for_a_slow_controller_is_skipped_not_parsed() {
        let mut fake = FakeSession::start(FakeSession::settings(), None).await;
        let mut controller = fake
            .session
            .attach(AttachRequest {
                role: Role::Controller,
                size: None,
                since: None,
                snapshot: false,
                present_only: false,
                holder: TicketHolder::default(),
                may_control: true,
            })
            .await
            .unwrap();
        let flood = plain_flood(16);
        let flood_bytes = flood.len() as u64;
        // A frame a millisecond: the PTY's reader waits for this client, not for the screen,
        // and nothing new comes meanwhile, as when a flood stops.
        let client = tokio::spawn(async move {
            let mut received = 0;
            while received < flood_bytes {
                match controller.next_event().await {
                    Some(Ok(ClientEvent::Output { data, .. })) => received += data.len() as u64,
                    Some(Ok(_)) => {}
                    other => panic!("the controller's stream ended: {other:?}"),
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
        flood_the_screen(&mut fake, &flood).await;
        client.await.unwrap();
        let parsed = bytes_parsed(&fake.session);
        assert!(
            parsed <= 64 * 1024,
            "the screen parsed {parsed} bytes of a {flood_bytes} byte plain flood"
        );
        fake.kill().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_never_waits_for_the_feeders_batching_interval() {
        // A ring much smaller than the flood: the PTY's reader waits for the screen often.
        let settings = SessionSettings {
            ring_bytes: 16 * 1024,
            ..FakeSession::settings()
        };
        let mut fake = FakeSession::start(settings, None).await;
        let session = Arc::clone(&fake.session);
        let flood = coloured_flood(20_000);
        assert!(flood.len() > 16 * settings.ring_bytes);
        let start = Instant::now();
        fake.terminal.terminal.write_all(&flood).await.unwrap();
        for _ in 0..100_000 {
            if fed(&session) == flood.len() as u64 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(output_end(&session), flood.len() as u64);
        assert_eq!(
            fed(&session),
            flood.len() as u64,
            "the feeder stopped feeding"
        );
        // The paused clock moves only when every task waits for a timer.
        assert_eq!(
            start.elapsed(),
            Duration::ZERO,
            "the PTY's reader waited for the feeder's timer"
        );
        fake.kill().await;
    }
}
