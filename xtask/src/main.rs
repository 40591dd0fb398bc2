//! `cargo xtask`: the project's build, test and CI entry points, in Rust rather than shell.
//!
//! `cargo xtask test` is the one command that runs every test on a fresh machine: it installs and
//! starts what the tests need (a Docker engine with the test image, PostgreSQL) and then runs the
//! workspace's tests with nextest. `cargo xtask ci` adds the format and lint gates; `.ci/run`
//! calls it.

#![forbid(unsafe_code)]

mod deps;
mod run;

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
    /// Install and start the test dependencies, then run every test.
    Test {
        /// Extra arguments for `cargo nextest run` (a filter, `--no-capture`, ...).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        nextest_args: Vec<String>,
    },
    /// Format check, clippy with warnings denied, then `test`.
    Ci,
    /// Install and start the test dependencies only (Docker engine, test image, PostgreSQL) and
    /// print the environment the tests expect.
    Deps,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.task {
        Task::Test { nextest_args } => test(&nextest_args),
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
            test(&[])
        }
        Task::Deps => {
            let environment = deps::prepare()?;
            for (name, value) in environment.variables() {
                println!("export {name}={value}");
            }
            Ok(())
        }
    }
}

fn test(nextest_args: &[String]) -> Result<()> {
    let environment = deps::prepare()?;
    let mut args = vec!["nextest", "run", "--workspace", "--no-fail-fast"];
    if deps::in_ci() {
        args.extend(["--profile", "ci"]);
    }
    args.extend(nextest_args.iter().map(String::as_str));
    run::cargo_with_env(&args, &environment.variables())
}
