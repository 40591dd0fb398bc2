//! Typing first: while a session of the broker is typed in, every other session of the broker
//! reads its output at no more than a set rate (`--flood-rate-while-typing`).
//!
//! A flood read as fast as it comes (a `cat` of a large file, a build's log) takes every core
//! the machine has: the program writing it, the broker reading it, the gateway forwarding it and
//! the client taking it. A keystroke in another terminal then waits for a core at each of its
//! hops, and its echo comes late. Held to the rate, the flood leaves the cores idle most of the
//! time, so the echo finds one free. A session's own input never holds it back, and nothing is
//! lost: output the broker does not read yet waits in the PTY (or the engine's stream), and the
//! program writing it blocks, as it would behind a slow terminal.
//!
//! Input counts as typing until its session answers it with more than [`ANSWER_BYTES`]: input
//! that a flood answers (the command that started it, or a client asking a program for its next
//! batch) is not a keystroke whose echo anyone waits for, so it holds no other session back.
//! Without that rule, sessions that each take a command and then flood, one after another,
//! would hold each other back for the typing window.
//!
//! The rate is enforced with the generic cell rate algorithm: each read of `n` bytes moves the
//! time the session has "paid until" forward by `n / rate`, and the next read waits while that
//! time is more than a burst ahead of now. The burst lets output that comes in short spurts (a
//! compiler's screenful) through at once. The broker's record is asked whether another session
//! is typed in only when a read would be held: an echo, or any output slower than the rate,
//! never takes its lock on the way from the PTY to the client.

use std::num::NonZeroU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use crate::domain::TYPING_WINDOW;

/// Output after which a session's last input no longer counts as typing: its answer is a
/// flood, not an echo.
pub(crate) const ANSWER_BYTES: u64 = 64 * 1024;

/// The broker's record of the last two sessions given input, and when: enough for any session to
/// tell whether another session was typed in lately, even when it was the latest itself.
#[derive(Debug, Default)]
pub(crate) struct RecentInput {
    /// The latest first; the two are different sessions.
    latest: Mutex<[Option<Input>; 2]>,
}

/// A session's last input, as [`RecentInput`] keeps it.
#[derive(Debug, Clone, Copy)]
struct Input {
    session: Uuid,
    at: Instant,
    /// The session answered it with more than [`ANSWER_BYTES`]: it was not typing.
    flooded: bool,
}

impl RecentInput {
    fn latest(&self) -> std::sync::MutexGuard<'_, [Option<Input>; 2]> {
        // A panic while holding the lock leaves plain data behind; keep serving it.
        self.latest
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn note(&self, session: Uuid, at: Instant) {
        let mut latest = self.latest();
        if latest[0].is_some_and(|input| input.session != session) {
            latest[1] = latest[0];
        }
        latest[0] = Some(Input {
            session,
            at,
            flooded: false,
        });
    }

    /// Notes that `session` answered its input given at `at` with a flood.
    fn flooded(&self, session: Uuid, at: Instant) {
        for input in self.latest().iter_mut().flatten() {
            if input.session == session && input.at == at {
                input.flooded = true;
            }
        }
    }

    /// Forgets `session`'s input: its process ended.
    fn forget(&self, session: Uuid) {
        let mut latest = self.latest();
        if latest[1].is_some_and(|input| input.session == session) {
            latest[1] = None;
        }
        if latest[0].is_some_and(|input| input.session == session) {
            latest[0] = latest[1].take();
        }
    }

    /// Whether a session other than `session` was typed in within [`TYPING_WINDOW`] of `now`.
    fn others_typing(&self, session: Uuid, now: Instant) -> bool {
        self.latest().iter().flatten().any(|input| {
            input.session != session && !input.flooded && now < input.at + TYPING_WINDOW
        })
    }
}

/// One session's part in typing first: it notes the session's input in the broker's record, and
/// tells whether another session is being typed in.
#[derive(Debug, Clone)]
pub(crate) struct Typist {
    recent: Arc<RecentInput>,
    session: Uuid,
}

impl Typist {
    pub(crate) fn new(recent: Arc<RecentInput>, session: Uuid) -> Self {
        Self { recent, session }
    }

    pub(crate) fn note_input(&self, at: Instant) {
        self.recent.note(self.session, at);
    }

    /// Whether another session of the broker was typed in within [`TYPING_WINDOW`] of `now` (the
    /// window within which presence shows an attendee as typing): given input that it has not
    /// answered with a flood.
    pub(crate) fn others_typing(&self, now: Instant) -> bool {
        self.recent.others_typing(self.session, now)
    }

    /// Notes that this session answered its input given at `at` with a flood.
    fn flooded(&self, at: Instant) {
        self.recent.flooded(self.session, at);
    }

    /// Forgets this session's input: its process ended (exited, or is being ended: a kill, a
    /// reset, a hand-off), so nobody waits for its echo.
    pub(crate) fn forget(&self) {
        self.recent.forget(self.session);
    }
}

/// Holds one session's output reads to a rate while another session of the broker is typed in.
#[derive(Debug)]
pub(crate) struct FloodGate {
    /// Bytes a second; `None`: the gate never holds.
    rate: Option<NonZeroU64>,
    /// When the output read since others began typing would have been read at `rate`; `None`
    /// while nobody else types.
    paid_until: Option<Instant>,
    /// When the next read may start, as of the last read; `None`: at once.
    held_until: Option<Instant>,
    /// The session's last input, when it was given, and the output read since.
    answering: Option<Instant>,
    answered: u64,
}

/// Output read at once beyond the rate, after a pause in the session's output: a slice of a
/// flood, or a screenful of a program's output, is never held.
pub(crate) const FLOOD_BURST_BYTES: u64 = 32 * 1024;

impl FloodGate {
    pub(crate) fn new(rate: Option<NonZeroU64>) -> Self {
        Self {
            rate,
            paid_until: None,
            held_until: None,
            answering: None,
            answered: 0,
        }
    }

    /// Notes a read of `len` bytes of `typist`'s session made at `now`, when its input was last
    /// given at `last_input_at`: the next read is held while another session is typed in and
    /// this one read faster than the rate.
    pub(crate) fn read(
        &mut self,
        len: usize,
        last_input_at: Option<Instant>,
        typist: &Typist,
        now: Instant,
    ) {
        if self.rate.is_none() {
            return;
        }
        if last_input_at != self.answering {
            self.answering = last_input_at;
            self.answered = 0;
        }
        if let Some(at) = self.answering {
            let before = self.answered;
            self.answered += len as u64;
            if before <= ANSWER_BYTES && self.answered > ANSWER_BYTES {
                typist.flooded(at);
            }
        }
        self.pace(len, now, || typist.others_typing(now));
    }

    /// Moves the time paid until by a read of `len` bytes at `now`. When that holds the next
    /// read, asks `others_typing`: if nobody else is typed in, the debt is forgiven instead, so
    /// a flood nobody is held for asks once per burst, not once per read.
    fn pace(&mut self, len: usize, now: Instant, others_typing: impl FnOnce() -> bool) {
        let Some(rate) = self.rate else {
            return;
        };
        let paid_until =
            self.paid_until.map_or(now, |paid| paid.max(now)) + time_for(len as u64, rate);
        let held_until = paid_until
            .checked_sub(time_for(FLOOD_BURST_BYTES, rate))
            .filter(|at| *at > now);
        if held_until.is_some() && !others_typing() {
            self.paid_until = None;
            self.held_until = None;
        } else {
            self.paid_until = Some(paid_until);
            self.held_until = held_until;
        }
    }

    /// When the next read may start, as of the last read; `None`: at once.
    pub(crate) fn not_before(&self) -> Option<Instant> {
        self.held_until
    }
}

/// How long `bytes` take at `rate` bytes a second.
fn time_for(bytes: u64, rate: NonZeroU64) -> Duration {
    let nanos = u128::from(bytes) * 1_000_000_000 / u128::from(rate.get());
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn rate(bytes_per_second: u64) -> Option<NonZeroU64> {
        NonZeroU64::new(bytes_per_second)
    }

    /// `N` sessions of one broker, sharing its record.
    fn typists<const N: usize>() -> [Typist; N] {
        let recent = Arc::new(RecentInput::default());
        std::array::from_fn(|_| Typist::new(Arc::clone(&recent), Uuid::new_v4()))
    }

    #[test]
    fn a_session_is_told_of_input_to_another_never_of_its_own() {
        let [a, b, c] = typists();
        let start = Instant::now();
        assert!(!a.others_typing(start), "nobody typed yet");

        a.note_input(start);
        assert!(!a.others_typing(start), "its own input");
        assert!(b.others_typing(start));

        // Typed in again and again, `a` is still the one `b` hears of, and `a` still hears of
        // nobody but itself.
        a.note_input(start + Duration::from_millis(1));
        assert!(!a.others_typing(start + Duration::from_millis(1)));

        b.note_input(start + Duration::from_millis(2));
        let now = start + Duration::from_millis(3);
        assert!(a.others_typing(now), "b was typed in");
        assert!(b.others_typing(now), "a is still remembered behind b");
        assert!(c.others_typing(now));

        // Past the typing window of the last input, nobody counts as typed in.
        let later = start + Duration::from_millis(2) + TYPING_WINDOW;
        assert!(!a.others_typing(later));
        assert!(!c.others_typing(later));
        // `a`'s input is older still than `b`'s: `b` stopped hearing of it first.
        assert!(!b.others_typing(start + Duration::from_millis(1) + TYPING_WINDOW));
        assert!(a.others_typing(start + Duration::from_millis(1) + TYPING_WINDOW));
    }

    #[test]
    fn input_answered_with_a_flood_is_not_typing() {
        let [a, b] = typists();
        let mut a_gate = FloodGate::new(rate(MIB));
        let start = Instant::now();
        a.note_input(start);
        // An echo, then a screenful: still typing.
        a_gate.read(1, Some(start), &a, start);
        a_gate.read(ANSWER_BYTES as usize - 1, Some(start), &a, start);
        assert!(b.others_typing(start));
        // One byte more answers it with a flood.
        a_gate.read(1, Some(start), &a, start);
        assert!(!b.others_typing(start));
        // Output after the flood does not make it typing again; new input does.
        a_gate.read(4096, Some(start), &a, start);
        assert!(!b.others_typing(start));
        let later = start + Duration::from_millis(1);
        a.note_input(later);
        assert!(b.others_typing(later));
        a_gate.read(1, Some(later), &a, later);
        assert!(b.others_typing(later), "a new answer is counted afresh");
    }

    #[test]
    fn input_to_a_session_whose_process_ended_is_forgotten() {
        let [a, b, c] = typists();
        let start = Instant::now();
        a.note_input(start);
        b.note_input(start);
        b.forget();
        assert!(c.others_typing(start), "a is still typed in");
        assert!(!a.others_typing(start), "b ended");
        a.forget();
        assert!(!c.others_typing(start));
        // The record takes input again after both were forgotten.
        b.note_input(start);
        assert!(c.others_typing(start));
    }

    #[test]
    fn a_session_typed_in_behind_one_that_flooded_still_counts() {
        let [a, b, c] = typists();
        let start = Instant::now();
        b.note_input(start);
        a.note_input(start);
        a.flooded(start);
        assert!(c.others_typing(start), "b was typed in, behind a's command");
        assert!(a.others_typing(start));
        assert!(!b.others_typing(start), "a's input was answered by a flood");
    }

    #[test]
    fn a_flood_is_held_to_the_rate_only_while_another_session_is_typed_in() {
        let start = Instant::now();
        let mut gate = FloodGate::new(rate(4 * MIB));
        // Nobody else types: read as fast as it comes, and the record is asked once a burst,
        // not once a read.
        let mut asked = 0;
        for _ in 0..1000 {
            gate.pace(4095, start, || {
                asked += 1;
                false
            });
        }
        assert_eq!(gate.not_before(), None);
        assert!(
            asked <= 1000 * 4095 / FLOOD_BURST_BYTES + 1,
            "asked {asked} times"
        );

        // Someone else types (a second later, when what was read alone is paid for): a burst
        // goes at once, then the reads wait their turn.
        let start = start + Duration::from_secs(1);
        let mut now = start;
        let mut read = 0u64;
        while gate.not_before().is_none() {
            gate.pace(4096, now, || true);
            read += 4096;
        }
        assert_eq!(
            read,
            FLOOD_BURST_BYTES + 4096,
            "a burst, and the read that crossed it"
        );
        // Each later read waits for its bytes' time at 4 MiB/s: 10 MiB take 2.5 s.
        for _ in 0..(10 * MIB / 4096) {
            now = gate.not_before().unwrap_or(now);
            gate.pace(4096, now, || true);
        }
        let took = now - start;
        assert!(
            took >= Duration::from_millis(2490) && took <= Duration::from_millis(2510),
            "10 MiB at 4 MiB/s took {took:?}"
        );

        // The typing stops: the next read is not held, and the debt is forgotten.
        gate.pace(4096, now, || false);
        assert_eq!(gate.not_before(), None);
    }

    #[test]
    fn output_slower_than_the_rate_is_never_held() {
        let start = Instant::now();
        let mut gate = FloodGate::new(rate(4 * MIB));
        // 100 KiB a second in reads of 1 KiB, ten milliseconds apart, for a minute.
        for tick in 0..6000u32 {
            let now = start + Duration::from_millis(10) * tick;
            assert!(
                gate.not_before().is_none_or(|at| at <= now),
                "held at tick {tick}"
            );
            gate.pace(1024, now, || {
                panic!("the record asked for output slower than the rate, at tick {tick}")
            });
        }
    }

    #[test]
    fn a_gate_without_a_rate_never_holds() {
        let start = Instant::now();
        let mut gate = FloodGate::new(None);
        let typist = Typist::new(Arc::default(), Uuid::new_v4());
        for _ in 0..10_000 {
            gate.read(4095, Some(start), &typist, start);
        }
        assert_eq!(gate.not_before(), None);
    }
}
