//! Input's way to the PTY: written by whoever sent it (the controller's handler, a screen call's
//! brief controller), one writer at a time in the order they asked, each answered with the
//! output offset at which it went in; and held while a shell started with its integration has
//! not shown its first prompt.
//!
//! Why hold it: until the shell's line editor runs, typed-ahead bytes go to whatever reads the
//! terminal first (the user's startup files, the integration's bootstrap) and are echoed by the
//! terminal driver before the prompt, so a command would be typed blind and read from the screen
//! in the wrong place. So input to an integrated shell waits, in order, until its first prompt
//! mark (`A` or `B`) has been read, or [`FIRST_PROMPT_WAIT`] has passed since the process started
//! (a startup file that never ends, a shell that prints no marks after all), or the process
//! ended. A program without integration, or a broker without screens (no marks are read), writes
//! at once.
//!
//! An interrupt (Ctrl-C, [`INTERRUPT`], sent alone) always passes (docs/CONTRACT.md, "Ctrl-C
//! always passes"): input queued behind a write that a program which does not read holds up
//! would otherwise keep it waiting for as long as the program runs. So an interrupt counts
//! itself in [`Interrupts`], which cancels the write that waits on the PTY and makes every input
//! queued before it give way unwritten (as the terminal's own Ctrl-C drops the input it holds),
//! and then goes next. When the PTY takes no byte at all (its input buffer is full of what the
//! program did not read), the byte could not reach the line discipline that turns it into a
//! signal, so the broker sends the program's process group SIGINT itself, as the line
//! discipline would have. So it does after an input that the PTY had refused part of gave way
//! to the interrupt: the PTY may have made room since (the kernel moves what it holds on to the
//! line discipline a piece at a time), but a byte written there waits behind the rest of that
//! input for as long as the program does not read.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt as _;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{ClientId, PtyInput, Shared};
use crate::error::Error;

/// How long input waits for an integrated shell's first prompt after its process started.
pub const FIRST_PROMPT_WAIT: Duration = Duration::from_secs(5);

/// The byte an interrupt is: Ctrl-C, the terminal's default `VINTR`.
pub const INTERRUPT: u8 = 0x03;

/// How many interrupts came so far: input that started waiting before one gives way to it.
#[derive(Debug)]
pub(super) struct Interrupts {
    count: watch::Sender<u64>,
    /// Set by a write the terminal had refused part of when it gave way to an interrupt, for
    /// the interrupt to read (see [`Shared::interrupt`]).
    refused_write_gave_way: AtomicBool,
}

impl Default for Interrupts {
    fn default() -> Self {
        Self {
            count: watch::Sender::new(0),
            refused_write_gave_way: AtomicBool::new(false),
        }
    }
}

impl Interrupts {
    /// The interrupts so far; an input notes it before it waits for its turn.
    fn seen(&self) -> watch::Receiver<u64> {
        self.count.subscribe()
    }

    /// Counts one more interrupt: every input that noted an earlier count gives way.
    fn count_one(&self) -> watch::Receiver<u64> {
        self.count.send_modify(|count| *count += 1);
        self.count.subscribe()
    }

    /// Whether a write the terminal had refused part of gave way since this was last asked.
    fn take_refused_write(&self) -> bool {
        self.refused_write_gave_way.swap(false, Ordering::SeqCst)
    }
}

/// Whether an interrupt came since `seen` was noted.
fn interrupted_since(seen: &watch::Receiver<u64>) -> bool {
    seen.has_changed().unwrap_or(false)
}

/// What one input wrote: its receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputSent {
    pub bytes_written: u64,
    /// The session's output offset just before the first byte was written (after any input
    /// before it): every byte the program wrote in answer comes at this offset or after it.
    pub output_offset: u64,
}

/// Whether input is held for a shell's first prompt, and until when at the latest.
#[derive(Debug)]
pub(super) struct PromptGate {
    /// `Some(deadline)` while input waits; `None` while it goes at once.
    held_until: watch::Sender<Option<Instant>>,
}

impl PromptGate {
    /// A gate that holds nothing.
    pub(super) fn open() -> Self {
        Self {
            held_until: watch::Sender::new(None),
        }
    }

    /// Holds input from now until [`PromptGate::release`], at most [`FIRST_PROMPT_WAIT`].
    pub(super) fn hold(&self) {
        self.hold_for(FIRST_PROMPT_WAIT);
    }

    /// Holds input from now until [`PromptGate::release`], at most `wait` (what is left of a
    /// wait another broker process began).
    pub(super) fn hold_for(&self, wait: Duration) {
        self.held_until.send_replace(Some(Instant::now() + wait));
    }

    /// How long the gate holds input at most from now, while it does.
    pub(super) fn time_left(&self) -> Option<Duration> {
        self.held_until
            .borrow()
            .map(|deadline| deadline.saturating_duration_since(Instant::now()))
    }

    /// Lets held input go. Returns whether anything was held.
    pub(super) fn release(&self) -> bool {
        self.held_until
            .send_if_modified(|held| held.take().is_some())
    }

    pub(super) fn is_held(&self) -> bool {
        self.held_until.borrow().is_some()
    }

    /// Waits until the gate is open: released, or past its deadline (which opens it for every
    /// writer).
    async fn opened(&self) {
        let mut held_until = self.held_until.subscribe();
        loop {
            let Some(deadline) = *held_until.borrow_and_update() else {
                return;
            };
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {
                    if self.release() {
                        tracing::debug!("no first prompt within the wait: held input goes now");
                    }
                    return;
                }
                changed = held_until.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

impl Shared {
    /// Writes `data` to the running process once the input side is free, the shell's first
    /// prompt came (see the module's doc) and `still_allowed` (asked again then) says yes.
    /// Returns once the PTY took all of it, with the output offset it went in at. `client` is
    /// the attached client that wrote it (whose presence then shows it typing); `None` for
    /// input a call sent.
    pub(super) async fn write_to_pty(
        &self,
        client: Option<ClientId>,
        data: &[u8],
        still_allowed: impl Fn() -> Result<(), Error>,
    ) -> Result<InputSent, Error> {
        let mut interrupts = self.interrupts.seen();
        let mut input = self.input.lock().await;
        if interrupted_since(&interrupts) {
            return Err(Error::InputInterrupted);
        }
        still_allowed()?;
        let Some(PtyInput { writer, ended }) = input.as_mut() else {
            return Err(Error::ProcessExited);
        };
        // Held with the input side, so what comes later waits behind it and the order stays.
        if self.prompt_gate.is_held() {
            tracing::debug!("input held for the shell's first prompt");
            // The prompt may be in the ring already, not yet read by the screen's feeder.
            drop(self.current_screen());
            // An interrupt does not wait for the prompt: it goes first, and this input gives way.
            tokio::select! {
                biased;
                () = ended.cancelled() => return Err(Error::ProcessEndedBeforeInput),
                _ = interrupts.changed() => return Err(Error::InputInterrupted),
                () = self.prompt_gate.opened() => {}
            }
            // Control may have moved meanwhile.
            still_allowed()?;
        }
        // The lock on the input side is held, so no other input goes in between.
        let output_offset = self.lock().ring.end();
        if ended.is_cancelled() {
            return Err(Error::ProcessEndedBeforeInput);
        }
        if interrupted_since(&interrupts) {
            return Err(Error::InputInterrupted);
        }
        let written = {
            let mut write = std::pin::pin!(writer.write_all(data));
            match write.as_mut().now_or_never() {
                Some(written) => written,
                // The terminal took what it had room for and refused the rest: the program has
                // not read it. Until it does, what the terminal holds of this input stands ahead
                // of any byte written after it, an interrupt's too.
                None => tokio::select! {
                    biased;
                    () = ended.cancelled() => return Err(Error::ProcessEndedBeforeInput),
                    _ = interrupts.changed() => {
                        self.interrupts.refused_write_gave_way.store(true, Ordering::SeqCst);
                        return Err(Error::InputInterrupted);
                    }
                    written = &mut write => written,
                },
            }
        };
        drop(input);
        written.map_err(Error::InputNotTaken)?;
        if !data.is_empty() {
            self.record_input(client, data);
            self.note_input(client, data.len() as u64);
        }
        Ok(InputSent {
            bytes_written: data.len() as u64,
            output_offset,
        })
    }

    /// Writes an interrupt ahead of every input that waits (see the module's doc), once
    /// `still_allowed` says yes. When the PTY takes no byte now, the process group is sent
    /// SIGINT instead, through the task that owns the process.
    pub(super) async fn interrupt(
        &self,
        client: Option<ClientId>,
        still_allowed: impl Fn() -> Result<(), Error>,
        signal: impl Future<Output = Result<(), Error>>,
    ) -> Result<InputSent, Error> {
        let mine = self.interrupts.count_one();
        let mut input = self.input.lock().await;
        // A later interrupt went first; this one is answered as one more input it made give way.
        if interrupted_since(&mine) {
            return Err(Error::InputInterrupted);
        }
        still_allowed()?;
        let Some(PtyInput { writer, .. }) = input.as_mut() else {
            return Err(Error::ProcessExited);
        };
        let output_offset = self.lock().ring.end();
        let typed = [INTERRUPT];
        // After a write the terminal refused part of, a byte it takes now (it may have made
        // room meanwhile, moving what it held to the program's side) still waits behind what
        // it took of that write for as long as the program does not read: that is a terminal
        // that takes no input too, whichever way the race between the two went.
        let taken = !self.interrupts.take_refused_write()
            && match writer.write(&typed).now_or_never() {
                Some(Ok(1)) => true,
                Some(Ok(_)) | None => false,
                Some(Err(error)) => return Err(Error::InputNotTaken(error)),
            };
        if !taken {
            drop(input);
            tracing::debug!("the terminal takes no input: the interrupt goes as SIGINT");
            signal.await?;
        }
        self.record_input(client, &typed);
        self.note_input(client, 1);
        Ok(InputSent {
            bytes_written: 1,
            output_offset,
        })
    }

    /// Notes input for the activity report and, when an attached client wrote it, for its
    /// presence and its principal's tally; the task hears of it once per report, when the
    /// client starts typing, and when the tally's window opens.
    fn note_input(&self, client: Option<ClientId>, bytes: u64) {
        let mut state = self.lock();
        state.last_activity_at = std::time::SystemTime::now();
        let now = Instant::now();
        state.last_input_at = Some(now);
        self.typist.note_input(now);
        let noted = client.map(|client| state.attachments.note_input(client, bytes, now));
        let news = noted.is_some_and(|noted| noted.started_typing || noted.opened_tally);
        if !state.input_since_report || news {
            state.input_since_report = true;
            drop(state);
            self.task_wake.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;
    use crate::runtime::fake::FakeSession;
    use crate::session::InputItem;

    /// What a shell with the integration prints for its prompt: `A`, the prompt, `B`.
    const PROMPT: &[u8] = b"\x1b]133;A\x07$ \x1b]133;B\x07";

    fn text(text: &str) -> Vec<InputItem> {
        vec![InputItem::Text(text.to_owned())]
    }

    /// Reads exactly `len` bytes of what the session wrote to its process.
    async fn typed(fake: &mut FakeSession, len: usize) -> Vec<u8> {
        let mut typed = vec![0; len];
        fake.terminal.terminal.read_exact(&mut typed).await.unwrap();
        typed
    }

    #[tokio::test(start_paused = true)]
    async fn input_before_a_shells_first_prompt_is_typed_after_it_in_order() {
        let mut fake = FakeSession::start_shell(FakeSession::settings()).await;
        let session = std::sync::Arc::clone(&fake.session);
        let first = tokio::spawn({
            let session = std::sync::Arc::clone(&session);
            async move { session.send_input(text("echo one\n"), false).await }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        let second =
            tokio::spawn(async move { session.send_input(text("echo two\n"), false).await });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !first.is_finished() && !second.is_finished(),
            "held for the prompt"
        );

        fake.terminal
            .terminal
            .write_all(b"startup files\r\n")
            .await
            .unwrap();
        fake.terminal.terminal.write_all(PROMPT).await.unwrap();
        let first = first.await.unwrap().unwrap();
        let second = second.await.unwrap().unwrap();
        assert_eq!(typed(&mut fake, 18).await, b"echo one\necho two\n");
        let prompt_end = (b"startup files\r\n".len() + PROMPT.len()) as u64;
        assert_eq!(first.output_offset, prompt_end, "typed after the prompt");
        assert_eq!(first.bytes_written, 9);
        assert!(second.output_offset >= first.output_offset);
        fake.kill().await;
    }

    #[tokio::test(start_paused = true)]
    async fn held_input_goes_once_the_wait_for_a_first_prompt_is_over() {
        let mut fake = FakeSession::start_shell(FakeSession::settings()).await;
        let started = Instant::now();
        let sent = fake.session.send_input(text("x"), false).await.unwrap();
        assert_eq!(started.elapsed(), FIRST_PROMPT_WAIT);
        assert_eq!(sent.output_offset, 0);
        assert_eq!(typed(&mut fake, 1).await, b"x");
        // Open from then on.
        let again = Instant::now();
        fake.session.send_input(text("y"), false).await.unwrap();
        assert_eq!(again.elapsed(), Duration::ZERO);
        fake.kill().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_program_without_integration_takes_input_at_once() {
        let mut fake = FakeSession::start(FakeSession::settings(), None).await;
        let started = Instant::now();
        fake.terminal.terminal.write_all(b"hello").await.unwrap();
        let sent = loop {
            // The receipt's offset follows the output the session has read.
            let sent = fake.session.send_input(text("z"), false).await.unwrap();
            if sent.output_offset == 5 {
                break sent;
            }
            tokio::task::yield_now().await;
        };
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(sent.bytes_written, 1);
        fake.kill().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_gate_opens_when_released_or_at_its_deadline() {
        let gate = PromptGate::open();
        assert!(!gate.is_held());
        gate.opened().await;
        assert!(!gate.release(), "an open gate held nothing");

        gate.hold();
        let started = Instant::now();
        let waiting = gate.opened();
        tokio::pin!(waiting);
        assert!(
            futures::poll!(&mut waiting).is_pending(),
            "a held gate keeps its writers"
        );
        assert!(gate.release());
        waiting.await;
        assert_eq!(started.elapsed(), Duration::ZERO, "released at once");

        gate.hold();
        gate.opened().await;
        assert_eq!(started.elapsed(), FIRST_PROMPT_WAIT);
        assert!(!gate.is_held(), "the deadline opened it for everyone");
    }
}
