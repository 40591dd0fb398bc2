//! `cargo xtask`: the project's build, test and CI entry points, in Rust rather than shell.
//!
//! `cargo xtask test` is the one command that runs every test on a fresh machine: it installs and
//! starts what the tests need (a Docker engine with the test image, PostgreSQL, Chromium, the
//! page's npm packages), runs the workspace's tests with nextest, then the web page's browser
//! tests against a real `ptyhub up`. `cargo xtask ci` adds the format and lint gates; `.ci/run`
//! calls it. `cargo xtask up` builds the web page and runs `ptyhub up`.

#![forbid(unsafe_code)]

mod bench;
mod deps;
mod run;
mod web;

use anyhow::Result;
use clap::{Parser, Subcommand};

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
    /// Install and start the test dependencies, then run every test.
    Test {
        /// Skip the browser tests of the web page.
        #[arg(long)]
        no_browser: bool,
        /// Extra arguments for `cargo nextest run` (a filter, `--no-capture`, ...). A filter
        /// also skips the browser tests.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        nextest_args: Vec<String>,
    },
    /// Format check, clippy with warnings denied, then `test`.
    Ci,
    /// Install and start the test dependencies only (Docker engine, test image, PostgreSQL) and
    /// print the environment the tests expect.
    Deps,
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
        Task::Test {
            no_browser,
            nextest_args,
        } => test(&nextest_args, !no_browser && nextest_args.is_empty()),
        Task::Ci => {
            run::cargo(&["fmt", "--all", "--", "--check"])?;
            run::cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ])?;
            test(&[], true)
        }
        Task::Deps => {
            let environment = deps::prepare()?;
            for (name, value) in environment.variables() {
                println!("export {name}={value}");
            }
            Ok(())
        }
        Task::Bench { quick } => bench::bench(quick),
    }
}

fn up(up_args: &[String]) -> Result<()> {
    let root = run::workspace_root();
    let web_dir = web::build_page(&root)?;
    let web_dir = web_dir.to_string_lossy();
    let mut args = vec![
        "run",
        "--quiet",
        "--package",
        "cli",
        "--bin",
        "ptyhub",
        "--",
        "up",
        "--web-dir",
    ];
    args.push(&web_dir);
    args.extend(up_args.iter().map(String::as_str));
    run::cargo(&args)
}

fn test(nextest_args: &[String], with_browser: bool) -> Result<()> {
    let environment = deps::prepare()?;
    let mut args = vec!["nextest", "run", "--workspace", "--no-fail-fast"];
    if deps::in_ci() {
        args.extend(["--profile", "ci"]);
    }
    args.extend(nextest_args.iter().map(String::as_str));
    let workspace_tests = run::cargo_with_env(&args, &environment.variables())
        // The benchmarks at a small size, so that they never rot (not a speed check).
        .and_then(|()| {
            if nextest_args.is_empty() {
                bench::run_bench(true, &environment)
            } else {
                Ok(())
            }
        });
    if !with_browser {
        return workspace_tests;
    }
    // The browser tests run even when a workspace test failed, so one run shows everything.
    // Built with every target, as nextest built them, so that feature unification is the same
    // and this is a no-op after a full test run rather than a rebuild of the dependencies.
    let browser_tests =
        run::cargo(&["build", "--quiet", "--workspace", "--all-targets"]).and_then(|()| {
            web::run_browser_tests(
                &run::workspace_root(),
                &run::target_dir().join("debug/ptyhub"),
            )
        });
    match (workspace_tests, browser_tests) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(error), Ok(())) | (Ok(()), Err(error)) => Err(error),
        (Err(workspace), Err(browser)) => {
            Err(workspace.context(format!("and the browser tests failed too: {browser:#}")))
        }
    }
}
