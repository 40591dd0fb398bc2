//! `Clock`: the wall clock the gateway reads every credential's time by, in Unix seconds: a
//! JWT's `exp` and `nbf`, a session cookie's end, how long a new share link may last, and the
//! moment a stream opened with a credential ends with it. A running gateway reads the system
//! clock; a test gives its gateway a [`ManualClock`] and moves it, so that a credential valid
//! for an hour expires when the test says so, not when a real timer happens to fire.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

/// Where the gateway reads the time of credentials. The default is the system clock. Cheap to
/// clone: clones read the same clock.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    source: Source,
}

#[derive(Debug, Clone, Default)]
enum Source {
    #[default]
    System,
    Manual(ManualClock),
}

impl Clock {
    /// The system's wall clock: what a gateway that is not under test reads.
    pub fn system() -> Self {
        Self::default()
    }

    /// Seconds since the Unix epoch.
    pub fn now(&self) -> u64 {
        match &self.source {
            Source::System => system_now(),
            Source::Manual(manual) => manual.now(),
        }
    }

    /// Completes once the clock reads `at` (Unix seconds) or later; at once for a moment
    /// already past.
    pub async fn reached(&self, at: u64) {
        match &self.source {
            // The timer runs on the monotonic clock, which the wall clock may drift from: the
            // clock is read again after each sleep. Written here rather than as a function of
            // its own, whose future would hold a second copy of `at` on every idle WebSocket.
            Source::System => loop {
                let left = at.saturating_sub(system_now());
                if left == 0 {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(left)).await;
            },
            // Boxed, so that a test's clock adds a few words (24 bytes, measured) to every
            // stream's wait for its credential's expiry (one per idle WebSocket), not the
            // manual wait's whole state.
            Source::Manual(manual) => Box::pin(manual.reached(at)).await,
        }
    }
}

/// A clock that stands still until it is moved ([`ManualClock::advance`]), for tests. Clones
/// move together; [`ManualClock::clock`] is the [`Clock`] a gateway reads it through.
#[derive(Debug, Clone)]
pub struct ManualClock {
    /// The time in Unix seconds; waiters subscribe to see it move.
    now: Arc<watch::Sender<u64>>,
}

impl ManualClock {
    /// A clock that reads `unix_seconds` until it is moved.
    pub fn starting_at(unix_seconds: u64) -> Self {
        Self {
            now: Arc::new(watch::Sender::new(unix_seconds)),
        }
    }

    /// A clock that reads the system's time of now until it is moved: credentials signed with
    /// the real time of day look as they would to a gateway reading the system clock.
    pub fn starting_now() -> Self {
        Self::starting_at(system_now())
    }

    /// Seconds since the Unix epoch, as this clock reads.
    pub fn now(&self) -> u64 {
        *self.now.borrow()
    }

    /// Moves the clock on by `by`, in whole seconds (credentials count time in seconds: a
    /// fraction is dropped), waking whatever waits for a moment it reaches.
    pub fn advance(&self, by: Duration) {
        self.now.send_modify(|now| *now += by.as_secs());
    }

    /// The [`Clock`] that reads this one, for a gateway's `Config::clock`.
    pub fn clock(&self) -> Clock {
        Clock {
            source: Source::Manual(self.clone()),
        }
    }

    async fn reached(&self, at: u64) {
        let mut moves = self.now.subscribe();
        // The sender lives as long as `self`, which this future borrows, so the wait cannot
        // end for want of a sender; it ends only when the clock reads `at`.
        let _ = moves.wait_for(|now| *now >= at).await;
    }
}

/// The system's seconds since the Unix epoch (0 for a clock set before it).
fn system_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wait_on_a_manual_clock_ends_when_the_clock_reaches_its_moment() {
        let manual = ManualClock::starting_at(1_000);
        let clock = manual.clock();
        let waiting = tokio::spawn({
            let clock = clock.clone();
            async move { clock.reached(1_060).await }
        });
        manual.advance(Duration::from_secs(59));
        assert_eq!(clock.now(), 1_059);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "it ended a second early");
        manual.advance(Duration::from_secs(1));
        waiting
            .await
            .expect("the wait ends once the clock reads its moment");
    }

    #[tokio::test]
    async fn a_moment_already_past_is_reached_at_once() {
        ManualClock::starting_at(1_000).clock().reached(999).await;
        Clock::system().reached(0).await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_system_clock_is_not_reached_an_hour_early() {
        let at = system_now() + 3600;
        let clock = Clock::system();
        let waiting = tokio::spawn(async move { clock.reached(at).await });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "an hour away is not now");
    }
}
