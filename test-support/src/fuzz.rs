//! The budget and the regression seeds of the fuzz-style property tests: a short pass by default
//! (what every test run does), or as many cases as fit in `PTYHUB_FUZZ_SECONDS` (`cargo xtask
//! fuzz`, and a minute of it in `cargo xtask ci`).
//!
//! Every input is drawn from a seed, and a seed whose inputs failed is kept: appended to
//! `fuzz-regressions/<test>.seeds` in the package of the test (one hex seed per line), which the
//! test replays before it draws fresh ones, on every run. Committed, a failure found once by a
//! long run is checked by every test run after it.
//!
//! Pure properties run under proptest's runner ([`check`]), which shrinks a failure to a small
//! input; properties against a running stack draw their inputs from the same strategies in
//! batches ([`Batches`]) and print the input that failed.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};

/// The variable `cargo xtask fuzz` sets: how long each fuzz test runs.
pub const FUZZ_SECONDS_VARIABLE: &str = "PTYHUB_FUZZ_SECONDS";

/// The directory of kept seeds, in the package of the test (its `CARGO_MANIFEST_DIR`).
pub const REGRESSIONS_DIRECTORY: &str = "fuzz-regressions";

/// How long each fuzz test keeps going: `None` for the short pass.
pub fn budget() -> Option<Duration> {
    std::env::var(FUZZ_SECONDS_VARIABLE)
        .ok()
        .and_then(|seconds| seconds.trim().parse::<u64>().ok())
        .filter(|seconds| *seconds > 0)
        .map(Duration::from_secs)
}

/// The 32 bytes a run of inputs is drawn from.
pub type Seed = [u8; 32];

/// Checks `property` on `cases` inputs of `strategy` from each kept seed of the running test,
/// then from a fresh seed (the short pass) or from fresh seeds until the budget is spent. Panics
/// with the shrunk input on the first failure, after keeping its seed.
pub fn check<S>(cases: u32, strategy: S, property: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S: Strategy,
    S::Value: std::fmt::Debug,
{
    let regressions = Regressions::of_running_test();
    for seed in seeds(&regressions) {
        let mut runner = TestRunner::new_with_rng(
            Config {
                cases,
                failure_persistence: None,
                ..Config::default()
            },
            TestRng::from_seed(RngAlgorithm::ChaCha, &seed),
        );
        let failure = match runner.run(&strategy, &property) {
            Ok(()) => continue,
            Err(TestError::Fail(reason, input)) => {
                format!("property failed: {reason}\nminimal failing input: {input:?}")
            }
            Err(TestError::Abort(reason)) => format!("property aborted: {reason}"),
        };
        panic!("{failure}\n{}", regressions.keep(seed));
    }
}

/// Batches of inputs for a property against a running stack, which proptest's runner cannot
/// drive: one per kept seed of the running test, then one fresh (the short pass), or fresh ones
/// until the budget is spent. A panic while a [`Batch`] is alive keeps its seed.
pub struct Batches<'a, S> {
    strategy: &'a S,
    size: usize,
    regressions: Regressions,
    seeds: Box<dyn Iterator<Item = Seed>>,
}

impl<'a, S: Strategy> Batches<'a, S> {
    /// Batches of `size` inputs of `strategy`.
    pub fn new(size: usize, strategy: &'a S) -> Self {
        let regressions = Regressions::of_running_test();
        let seeds = Box::new(seeds(&regressions));
        Self {
            strategy,
            size,
            regressions,
            seeds,
        }
    }
}

impl<S> std::fmt::Debug for Batches<'_, S> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Batches")
            .field("size", &self.size)
            .field("regressions", &self.regressions)
            .finish_non_exhaustive()
    }
}

impl<S: Strategy> Iterator for Batches<'_, S> {
    type Item = Batch<S::Value>;

    fn next(&mut self) -> Option<Self::Item> {
        let seed = self.seeds.next()?;
        Some(Batch {
            inputs: draw(self.size, self.strategy, seed),
            seed,
            regressions: self.regressions.clone(),
        })
    }
}

/// The inputs drawn from one seed; dropped in a panic (a failed assertion on one of them), it
/// keeps the seed.
#[derive(Debug)]
pub struct Batch<T> {
    /// The inputs, in the order they were drawn.
    pub inputs: Vec<T>,
    seed: Seed,
    regressions: Regressions,
}

impl<T> Drop for Batch<T> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.regressions.keep(self.seed));
        }
    }
}

/// The kept seeds of `regressions`, then fresh ones while the budget lasts (one without one).
fn seeds(regressions: &Regressions) -> impl Iterator<Item = Seed> + 'static {
    let kept = regressions.seeds();
    let started = Instant::now();
    let budget = budget();
    let fresh = (0..).map_while(move |drawn: u64| {
        let another = drawn == 0 || budget.is_some_and(|budget| started.elapsed() < budget);
        another.then(fresh_seed)
    });
    kept.into_iter().chain(fresh)
}

/// `count` inputs drawn from `strategy`, the same for the same seed.
fn draw<S: Strategy>(count: usize, strategy: &S, seed: Seed) -> Vec<S::Value> {
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed),
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

/// A test's file of kept seeds (`None` when the package is unknown: nothing is kept then).
#[derive(Debug, Clone)]
struct Regressions {
    file: Option<PathBuf>,
}

impl Regressions {
    /// The running test's file: named after the test, in its package's regression directory.
    fn of_running_test() -> Self {
        let package = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
        let test = std::thread::current().name().map(str::to_owned);
        let file = package
            .zip(test)
            .map(|(package, test)| regressions_file(&package, &test));
        Self { file }
    }

    /// The seeds kept so far. A line that is not a seed fails the test: the file is corrupt.
    fn seeds(&self) -> Vec<Seed> {
        let Some(file) = &self.file else {
            return Vec::new();
        };
        match std::fs::read_to_string(file) {
            Ok(text) => {
                parse_seeds(&text).unwrap_or_else(|error| panic!("{}: {error}", file.display()))
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(error) => panic!("cannot read {}: {error}", file.display()),
        }
    }

    /// Keeps `seed` (once) and says where, for the failure message.
    fn keep(&self, seed: Seed) -> String {
        let Some(file) = &self.file else {
            return format!(
                "seed {}: not kept (the test's package is unknown)",
                hex(&seed)
            );
        };
        if self.seeds().contains(&seed) {
            return format!(
                "seed {}: a kept regression seed in {}",
                hex(&seed),
                file.display()
            );
        }
        match append_seed(file, seed) {
            Ok(()) => format!(
                "seed {}: kept in {}; commit it, so that every test run replays it",
                hex(&seed),
                file.display()
            ),
            Err(error) => format!(
                "seed {}: cannot be kept in {}: {error}",
                hex(&seed),
                file.display()
            ),
        }
    }
}

/// `<package>/fuzz-regressions/<test>.seeds`, the test's module path joined with dots.
fn regressions_file(package: &Path, test: &str) -> PathBuf {
    package
        .join(REGRESSIONS_DIRECTORY)
        .join(format!("{}.seeds", test.replace("::", ".")))
}

fn append_seed(file: &Path, seed: Seed) -> std::io::Result<()> {
    if let Some(directory) = file.parent() {
        std::fs::create_dir_all(directory)?;
    }
    let mut opened = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)?;
    opened.write_all(format!("{}\n", hex(&seed)).as_bytes())
}

/// One 64-digit hex seed per line; blank lines and `#` comments are ignored.
fn parse_seeds(text: &str) -> Result<Vec<Seed>, String> {
    text.lines()
        .enumerate()
        .map(|(index, line)| (index + 1, line.trim()))
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
        .map(|(number, line)| {
            parse_seed(line).ok_or_else(|| format!("line {number} is not a 64-digit hex seed"))
        })
        .collect()
}

fn parse_seed(line: &str) -> Option<Seed> {
    if line.len() != 64 || !line.is_ascii() {
        return None;
    }
    let mut seed = [0u8; 32];
    for (byte, pair) in seed.iter_mut().zip(line.as_bytes().chunks(2)) {
        let pair = std::str::from_utf8(pair).ok()?;
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(seed)
}

fn hex(seed: &Seed) -> String {
    seed.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A seed no earlier run used: the clock and the process.
fn fresh_seed() -> Seed {
    static DRAWN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    let count = DRAWN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut seed = [0u8; 32];
    seed[..16].copy_from_slice(&nanos.to_le_bytes());
    seed[16..20].copy_from_slice(&std::process::id().to_le_bytes());
    seed[20..28].copy_from_slice(&count.to_le_bytes());
    seed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_written_and_read_back_as_hex_lines() {
        let seed: Seed = std::array::from_fn(|index| index as u8 * 7);
        let text = format!("# found by a long run\n\n{}\n", hex(&seed));
        assert_eq!(parse_seeds(&text), Ok(vec![seed]));
    }

    #[test]
    fn a_line_that_is_not_a_seed_is_named() {
        let text = format!("{}\nnot a seed\n", "00".repeat(32));
        assert_eq!(
            parse_seeds(&text),
            Err("line 2 is not a 64-digit hex seed".to_owned())
        );
        assert_eq!(parse_seed(&"0g".repeat(32)), None);
        assert_eq!(parse_seed(&"00".repeat(31)), None);
    }

    #[test]
    fn the_same_seed_draws_the_same_inputs() {
        let seed = fresh_seed();
        let strategy = proptest::collection::vec(proptest::num::u64::ANY, 0..10);
        assert_eq!(draw(16, &strategy, seed), draw(16, &strategy, seed));
        assert_ne!(draw(16, &strategy, seed), draw(16, &strategy, fresh_seed()));
    }

    #[test]
    fn a_failing_seed_is_kept_once_and_replayed_first() {
        let file = std::env::temp_dir()
            .join(format!("ptyhub-fuzz-regressions-{}", std::process::id()))
            .join("module.test.seeds");
        let regressions = Regressions {
            file: Some(file.clone()),
        };
        let seed = fresh_seed();
        regressions.keep(seed);
        regressions.keep(seed);
        assert_eq!(regressions.seeds(), vec![seed]);
        assert_eq!(seeds(&regressions).next(), Some(seed));
        std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_test_path_names_its_file() {
        assert_eq!(
            regressions_file(Path::new("/repo/services/gateway"), "fuzz::fuzz_jwts"),
            PathBuf::from("/repo/services/gateway/fuzz-regressions/fuzz.fuzz_jwts.seeds")
        );
    }
}
