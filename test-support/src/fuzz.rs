//! The budget of the fuzz-style property tests: a short pass by default (what every test run and
//! CI does), or as many cases as fit in `PTYHUB_FUZZ_SECONDS` (`cargo xtask fuzz --minutes N`).
//! Pure properties run under proptest's runner, which shrinks a failure to a small input;
//! properties against a running stack draw their inputs from the same strategies in batches
//! ([`samples`]) and print the input that failed.

use std::time::{Duration, Instant};

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, TestCaseError, TestError, TestRng, TestRunner};

/// The variable `cargo xtask fuzz` sets: how long each fuzz test runs.
pub const FUZZ_SECONDS_VARIABLE: &str = "PTYHUB_FUZZ_SECONDS";

/// How long each fuzz test keeps going: `None` for the short pass.
pub fn budget() -> Option<Duration> {
    std::env::var(FUZZ_SECONDS_VARIABLE)
        .ok()
        .and_then(|seconds| seconds.trim().parse::<u64>().ok())
        .filter(|seconds| *seconds > 0)
        .map(Duration::from_secs)
}

/// Checks `property` on `cases` inputs of `strategy` (the short pass), or on batches of them
/// until the budget is spent, with a fresh seed per batch; panics with the shrunk input on the
/// first failure.
pub fn check<S>(cases: u32, strategy: S, property: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S: Strategy,
    S::Value: std::fmt::Debug,
{
    let deadline = budget().map(|budget| Instant::now() + budget);
    loop {
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        });
        match runner.run(&strategy, &property) {
            Ok(()) => {}
            Err(TestError::Fail(reason, input)) => {
                panic!("property failed: {reason}\nminimal failing input: {input:?}")
            }
            Err(TestError::Abort(reason)) => panic!("property aborted: {reason}"),
        }
        match deadline {
            Some(deadline) if Instant::now() < deadline => continue,
            _ => return,
        }
    }
}

/// `count` inputs drawn from `strategy` with a fresh seed: for properties that need an async
/// stack, which proptest's runner cannot drive.
pub fn samples<S: Strategy>(count: usize, strategy: &S) -> Vec<S::Value> {
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(proptest::test_runner::RngAlgorithm::ChaCha, &rand_seed()),
    );
    (0..count)
        .filter_map(|_| {
            strategy
                .new_tree(&mut runner)
                .ok()
                .map(|tree| tree.current())
        })
        .collect()
}

/// Whether a batch-driven fuzz loop should draw another batch (always once; then while the budget
/// lasts).
pub fn another_batch(started: Instant, batches_done: usize) -> bool {
    match budget() {
        None => batches_done == 0,
        Some(budget) => batches_done == 0 || started.elapsed() < budget,
    }
}

fn rand_seed() -> [u8; 32] {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    let mut seed = [0u8; 32];
    seed[..16].copy_from_slice(&nanos.to_le_bytes());
    seed[16..20].copy_from_slice(&std::process::id().to_le_bytes());
    seed
}
