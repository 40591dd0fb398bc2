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
    for (after, decision) in plan(nextest_args, stages) {
        if let Decision::Skip(reason) = decision {
            skips.record(&after.name(), &reason);
            continue;
        }
        let name = after.name();
        match after {
            // The benchmarks at a small size, so that they never rot (not a speed check).
            After::QuickBenchmarks => stage(&name, bench::run_bench(true, &variables)),
            // The page first, then the binaries, which carry it (the binary test runs `ptyhub`
            // with no page beside it). Built with every target, as nextest built them, so that
            // feature unification is the same and only the crates that embed the page rebuild.
            After::BrowserTests => stage(
                &name,
                web::build_page(&root).and_then(|dist| {
                    run::cargo(&["build", "--quiet", "--workspace", "--all-targets"])?;
                    let ptyhub = run::target_dir().join("debug/ptyhub");
                    web::run_browser_tests(&root, &dist, &ptyhub, &variables)
                }),
            ),
            // The README's first command, on a clean checkout.
            After::FreshClone => stage(&name, smoke::fresh_clone_up(&root)),
            After::Fuzz => stage(&name, fuzz(CI_FUZZ_SECONDS, &variables)),
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("failed: {}", failures.join(", "))
    }
}

/// A stage `test` may run after the workspace's tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    QuickBenchmarks,
    BrowserTests,
    FreshClone,
    Fuzz,
}

impl After {
    /// The stage's name, as a failure or a skip names it.
    fn name(self) -> String {
        match self {
            After::QuickBenchmarks => "quick benchmarks".to_owned(),
            After::BrowserTests => "browser tests".to_owned(),
            After::FreshClone => "cargo xtask up on a fresh clone".to_owned(),
            After::Fuzz => format!("fuzz ({CI_FUZZ_SECONDS} s)"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Decision {
    Run,
    /// Listed as skipped, for this reason, in the run's final list.
    Skip(String),
}

/// What `test` does after the workspace's tests: every stage the command includes, in order,
/// run or skipped for a reason, so that a stage left out is always in the final list. Any
/// argument for nextest asks for some tests only, which the whole-system stages would not
/// honour, so it drops them all.
fn plan(nextest_args: &[String], stages: Stages) -> Vec<(After, Decision)> {
    let included: &[After] = match stages {
        Stages::All | Stages::NoBrowser => &[
            After::QuickBenchmarks,
            After::BrowserTests,
            After::FreshClone,
        ],
        Stages::AllThenFuzz => &[
            After::QuickBenchmarks,
            After::BrowserTests,
            After::FreshClone,
            After::Fuzz,
        ],
    };
    let filtered = (!nextest_args.is_empty()).then(|| {
        format!(
            "nextest arguments were given (`{}`), so the whole-system stages do not run",
            nextest_args.join(" ")
        )
    });
    included
        .iter()
        .map(|&after| {
            let decision = match (&filtered, stages, after) {
                (Some(reason), _, _) => Decision::Skip(reason.clone()),
                (None, Stages::NoBrowser, After::BrowserTests | After::FreshClone) => {
                    Decision::Skip("--no-browser was given".to_owned())
                }
                (None, _, _) => Decision::Run,
            };
            (after, decision)
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each stage's name, and the reason it is skipped for (`None`: it runs).
    fn planned(nextest_args: &[&str], stages: Stages) -> Vec<(String, Option<String>)> {
        let args: Vec<String> = nextest_args.iter().map(|&arg| arg.to_owned()).collect();
        plan(&args, stages)
            .into_iter()
            .map(|(after, decision)| {
                let reason = match decision {
                    Decision::Run => None,
                    Decision::Skip(reason) => Some(reason),
                };
                (after.name(), reason)
            })
            .collect()
    }

    #[test]
    fn without_a_filter_every_stage_runs_and_ci_fuzzes_last() {
        let test = planned(&[], Stages::All);
        assert_eq!(
            test,
            [
                ("quick benchmarks".to_owned(), None),
                ("browser tests".to_owned(), None),
                ("cargo xtask up on a fresh clone".to_owned(), None),
            ]
        );
        let mut ci = test;
        ci.push(("fuzz (60 s)".to_owned(), None));
        assert_eq!(planned(&[], Stages::AllThenFuzz), ci);
    }

    #[test]
    fn no_browser_lists_the_browser_tests_and_the_fresh_clone_as_skipped() {
        let why = Some("--no-browser was given".to_owned());
        assert_eq!(
            planned(&[], Stages::NoBrowser),
            [
                ("quick benchmarks".to_owned(), None),
                ("browser tests".to_owned(), why.clone()),
                ("cargo xtask up on a fresh clone".to_owned(), why),
            ]
        );
    }

    #[test]
    fn a_filter_lists_every_stage_of_the_command_as_skipped_the_fuzz_run_too() {
        for stages in [Stages::All, Stages::NoBrowser, Stages::AllThenFuzz] {
            let plan = planned(&["-E", "test(/audit/)"], stages);
            let expected = if stages == Stages::AllThenFuzz { 4 } else { 3 };
            assert_eq!(plan.len(), expected, "{stages:?}: {plan:?}");
            for (name, reason) in plan {
                assert_eq!(
                    reason.as_deref(),
                    Some(
                        "nextest arguments were given (`-E test(/audit/)`), so the whole-system \
                         stages do not run"
                    ),
                    "{stages:?}: {name}"
                );
            }
        }
    }
}
