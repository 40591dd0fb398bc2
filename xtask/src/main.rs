//! `cargo xtask`: the project's build, test and CI entry points, in Rust rather than shell.
//!
//! `cargo xtask test` is the one command that runs every test on a fresh machine: it installs and
//! starts what the tests need (a Docker engine with the test image, PostgreSQL, Chromium, the
//! page's npm packages), runs the workspace's tests with nextest, then the web page's browser
//! tests against a real `ptyhub up`. `cargo xtask ci` adds the format and lint gates and the
//! dependency checks (`cargo deny`, `cargo machete`) and the page's type check and linter;
//! `.ci/run` calls it. `cargo xtask up` builds the web page and runs `ptyhub up` with it built
//! in; `cargo xtask web` builds and checks the page only.

#![forbid(unsafe_code)]

mod bench;
mod deps;
mod dist;
mod interop;
mod run;
mod screen_fixtures;
mod skips;
mod smoke;
mod tidy;
mod tools;
mod web;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};

use crate::skips::SkipList;

#[derive(Debug, Parser)]
#[command(name = "cargo xtask", about = "Build, test and CI tasks for ptyhub")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Build the web page and run the whole system here (`ptyhub up`); extra arguments go to
    /// `ptyhub up` (for example `--listen 0.0.0.0:8080`).
    Up {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        up_args: Vec<String>,
    },
    /// Build the web page into web/dist (which the next `cargo build` puts into the `gateway`
    /// and `ptyhub` binaries), then type-check and lint its JavaScript.
    Web,
    /// Build the `ptyhub` binary as users get it: the page inside, release, stripped, checked,
    /// in `dist/ptyhub` under the target dir.
    Dist,
    /// Install and start the test dependencies, then run every test.
    Test {
        /// Skip the browser tests of the web page and the fresh-clone run of `cargo xtask up`.
        #[arg(long)]
        no_browser: bool,
        /// Extra arguments for `cargo nextest run` (a filter, `--no-capture`, ...). Any of them
        /// also skips the whole-system stages (quick benchmarks, browser tests, fresh clone),
        /// each listed as a `SKIP:` line at the end.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        nextest_args: Vec<String>,
    },
    /// Format check, clippy with warnings denied, `cargo deny check`, `cargo machete`, the
    /// page's type check (tsc on its JSDoc types) and linter (eslint), then `test`, then a
    /// minute of `fuzz`.
    Ci,
    /// The dependency checks of `ci` alone: `cargo deny check` (licences, advisories, bans,
    /// sources) and `cargo machete` (unused dependencies).
    Audit,
    /// Install and start the test dependencies only (Docker engine, test image, PostgreSQL) and
    /// print the environment the tests expect.
    Deps,
    /// The fuzz-style property suite (the gateway's `fuzz_` tests) for longer than the short
    /// pass every test run makes: each property draws inputs for its share of the minutes. A
    /// failure's seed is written to the suite's regression corpus, which every test run replays.
    Fuzz {
        /// How long the whole suite runs.
        #[arg(long, default_value_t = 5)]
        minutes: u64,
    },
    /// The checks that keep ARCHITECTURE.md true to the tree: named paths, the code map,
    /// module docs, where generated types and `unsafe` may appear, and import cycles per crate.
    Tidy,
    /// Record real programs (vim, less, top, a shell, tmux, a coding agent's UI) into
    /// tests/fixtures/screens/, the byte streams the broker's screen is held to xterm's with.
    ScreenFixtures {
        /// Only these fixtures (`vim`, `less`, ...); all of them when none is named.
        names: Vec<String>,
    },
    /// Measure throughput, echo latency, Ctrl-C, isolation and session start (BENCHMARKS.md).
    Bench {
        /// Small sizes: only checks that every scenario completes with the right bytes.
        #[arg(long)]
        quick: bool,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.task {
        Task::Up { up_args } => up(&up_args),
        Task::Web => {
            let root = run::workspace_root();
            let dist = web::build_page(&root)?;
            web::check_page(&root)?;
            println!("built {}", dist.display());
            Ok(())
        }
        Task::Dist => dist::dist(),
        Task::Test {
            no_browser,
            nextest_args,
        } => {
            let skips = SkipList::fresh()?;
            let stages = if no_browser {
                Stages::NoBrowser
            } else {
                Stages::All
            };
            let tested = test(&nextest_args, stages, &skips);
            skips.print();
            tested
        }
        Task::Ci => {
            let skips = SkipList::fresh()?;
            run::cargo(&["fmt", "--all", "--", "--check"])?;
            run::cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ])?;
            audit(&skips)?;
            web::check_page(&run::workspace_root())?;
            let tested = test(&[], Stages::AllThenFuzz, &skips);
            skips.print();
            tested
        }
        Task::Audit => {
            let skips = SkipList::fresh()?;
            let audited = audit(&skips);
            skips.print();
            audited
        }
        Task::Deps => {
            let environment = deps::prepare()?;
            for (name, value) in environment.variables() {
                println!("export {name}={value}");
            }
            Ok(())
        }
        Task::Tidy => tidy::tidy(),
        Task::Bench { quick } => bench::bench(quick),
        Task::ScreenFixtures { names } => screen_fixtures::capture(&names),
        Task::Fuzz { minutes } => fuzz(minutes * 60, &[]),
    }
}

/// How long `cargo xtask ci` fuzzes after the tests: long enough to try inputs beyond the short
/// pass of every test run, short enough not to dominate the run.
const CI_FUZZ_SECONDS: u64 = 60;

/// The gateway's fuzz tests, one at a time (each gets the same share of `total_seconds`), through
/// `cargo test` rather than nextest, whose slow-test timeout would end a long property.
fn fuzz(total_seconds: u64, variables: &[(String, String)]) -> Result<()> {
    /// The `fuzz_` tests in `services/gateway/tests/api/fuzz.rs`.
    const FUZZ_TESTS: u64 = 6;
    let seconds = (total_seconds / FUZZ_TESTS).max(1);
    let mut variables = variables.to_vec();
    variables.push(("PTYHUB_FUZZ_SECONDS".to_owned(), seconds.to_string()));
    run::cargo_with_env(
        &[
            "test",
            "--package",
            "gateway",
            "--test",
            "api",
            "fuzz::",
            "--",
            "--test-threads",
            "1",
        ],
        &variables,
    )
}

fn audit(skips: &SkipList) -> Result<()> {
    tools::deny(skips)?;
    tools::machete()
}

/// Builds the page first, so that `cargo run` builds it into the binary it runs.
fn up(up_args: &[String]) -> Result<()> {
    let root = run::workspace_root();
    web::build_page(&root)?;
    let mut args = vec![
        "run",
        "--quiet",
        "--package",
        "cli",
        "--bin",
        "ptyhub",
        "--",
        "up",
    ];
    args.extend(up_args.iter().map(String::as_str));
    run::cargo(&args)
}

/// Which stages `test` runs after the workspace's tests (a nextest argument drops them all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stages {
    /// The quick benchmarks, the browser tests and the fresh-clone run.
    All,
    /// The quick benchmarks only (`--no-browser`).
    NoBrowser,
    /// All, then a short fuzz run (`cargo xtask ci`).
    AllThenFuzz,
}

fn test(nextest_args: &[String], stages: Stages, skips: &SkipList) -> Result<()> {
    let environment = deps::prepare()?;
    let root = run::workspace_root();
    let mut variables = environment.variables();
    variables.push(skips.variable());
    variables.extend(test_home()?);
    let mut args = vec!["nextest", "run", "--workspace", "--no-fail-fast"];
    if deps::in_ci() {
        args.extend(["--profile", "ci"]);
    }
    args.extend(nextest_args.iter().map(String::as_str));
    // Every stage runs even when an earlier one failed, so one run shows every failure.
    let mut failures = Vec::new();
    let mut stage = |name: &str, result: Result<()>| {
        if let Err(error) = result {
            eprintln!("FAILED: {name}: {error:#}");
            failures.push(name.to_owned());
        }
    };
    stage("workspace tests", run::cargo_with_env(&args, &variables));
    // A filter asks for some tests only: the suites below are whole-system runs.
    let dropped_by = dropped_by(nextest_args);
    match &dropped_by {
        Some(reason) => skips.record("quick benchmarks", reason),
        // The benchmarks at a small size, so that they never rot (not a speed check).
        None => stage("quick benchmarks", bench::run_bench(true, &variables)),
    }
    match (&dropped_by, stages) {
        (Some(reason), _) => record_whole_system_skips(skips, reason),
        (None, Stages::NoBrowser) => record_whole_system_skips(skips, "--no-browser was given"),
        (None, Stages::All | Stages::AllThenFuzz) => {
            // The page first, then the binaries, which carry it (the binary test runs `ptyhub`
            // with no page beside it). Built with every target, as nextest built them, so that
            // feature unification is the same and only the crates that embed the page rebuild.
            stage(
                "browser tests",
                web::build_page(&root).and_then(|dist| {
                    run::cargo(&["build", "--quiet", "--workspace", "--all-targets"])?;
                    let ptyhub = run::target_dir().join("debug/ptyhub");
                    web::run_browser_tests(&root, &dist, &ptyhub, &variables)
                }),
            );
            // The README's first command, on a clean checkout.
            stage(
                "cargo xtask up on a fresh clone",
                smoke::fresh_clone_up(&root),
            );
        }
    }
    if dropped_by.is_none() && stages == Stages::AllThenFuzz {
        stage(
            &format!("fuzz ({CI_FUZZ_SECONDS} s)"),
            fuzz(CI_FUZZ_SECONDS, &variables),
        );
    }
    if failures.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("failed: {}", failures.join(", "))
    }
}

/// Why the whole-system stages do not run, if they do not: any argument for nextest asks for
/// some tests only, and the whole-system stages would not honour it.
fn dropped_by(nextest_args: &[String]) -> Option<String> {
    (!nextest_args.is_empty()).then(|| {
        format!(
            "nextest arguments were given (`{}`), so the whole-system stages do not run",
            nextest_args.join(" ")
        )
    })
}

/// The stages that need the browser, listed as skipped for `reason`.
fn record_whole_system_skips(skips: &SkipList, reason: &str) {
    skips.record("browser tests", reason);
    skips.record("cargo xtask up on a fresh clone", reason);
}

/// A `HOME` of the tests' own, empty at every run, with cargo's and rustup's homes kept where
/// they are. The shells that tests start read their user's startup files (shell integration
/// runs them first, as it must), and the machine's own would make the tests depend on it: a
/// `pyenv init` in root's `.bashrc` takes a lock while it rehashes, a test that ends a shell in
/// that moment leaves the lock behind, and every later shell then waits 60 s for it.
fn test_home() -> Result<Vec<(String, String)>> {
    let home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .context("HOME is not set")?;
    let kept = |variable: &str, default: &str| {
        std::env::var_os(variable).map_or_else(|| home.join(default), std::path::PathBuf::from)
    };
    let cargo_home = kept("CARGO_HOME", ".cargo");
    let rustup_home = kept("RUSTUP_HOME", ".rustup");
    let test_home = run::target_dir().join("ptyhub-test-home");
    if let Err(error) = std::fs::remove_dir_all(&test_home)
        && error.kind() != std::io::ErrorKind::NotFound
    {
        return Err(error).with_context(|| format!("cannot empty {}", test_home.display()));
    }
    std::fs::create_dir_all(&test_home)
        .with_context(|| format!("cannot create {}", test_home.display()))?;
    let text = |path: std::path::PathBuf| path.to_string_lossy().into_owned();
    Ok(vec![
        ("HOME".to_owned(), text(test_home)),
        ("CARGO_HOME".to_owned(), text(cargo_home)),
        ("RUSTUP_HOME".to_owned(), text(rustup_home)),
    ])
}
