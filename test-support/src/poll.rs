//! Waiting in tests for something that happens in another task or process: the condition is
//! polled at a short interval until it holds or the patience runs out, so a test that waits
//! fails with its own message rather than hanging.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `check` every `interval` until it returns `Some`; `None` once `patience` has passed
/// (after one last check).
pub async fn poll_until<T, F, Fut>(
    patience: Duration,
    interval: Duration,
    mut check: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(interval).await;
    }
}

/// [`poll_until`] for synchronous tests: sleeps the thread between checks.
pub fn poll_until_blocking<T>(
    patience: Duration,
    interval: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + patience;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn returns_the_first_value_and_gives_up_after_the_patience() {
        let mut calls = 0;
        let found = poll_until(Duration::from_secs(5), Duration::from_millis(1), || {
            calls += 1;
            let value = (calls == 3).then_some(calls);
            async move { value }
        })
        .await;
        assert_eq!(found, Some(3));

        let never: Option<()> = poll_until(
            Duration::from_millis(20),
            Duration::from_millis(5),
            || async { None },
        )
        .await;
        assert_eq!(never, None);
    }

    #[test]
    fn blocking_form_behaves_the_same() {
        let mut calls = 0;
        let found = poll_until_blocking(Duration::from_secs(5), Duration::from_millis(1), || {
            calls += 1;
            (calls == 2).then_some("ready")
        });
        assert_eq!(found, Some("ready"));
        let never: Option<()> =
            poll_until_blocking(Duration::from_millis(20), Duration::from_millis(5), || None);
        assert_eq!(never, None);
    }
}
