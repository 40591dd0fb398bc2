//! `cargo xtask bench [--quick]`: prepares the dependencies (Docker engine and test image),
//! builds the `bench` binary and the service binaries it runs as separate processes for the
//! scale scenario (release for the full run, dev for the quick one), and runs it, writing its
//! table to `target/bench-table.md`; the quick mode (small sizes) is a check that every scenario
//! still completes with the right bytes, and `cargo xtask test` runs it.

use std::process::Command;

use anyhow::Result;

use crate::{deps, run};

/// Runs the benchmarks; `quick` for the small check that `cargo xtask test` runs.
pub fn bench(quick: bool) -> Result<()> {
    run_bench(quick, &deps::prepare()?.variables())
}

/// Runs the benchmarks with the dependencies already prepared, `variables` in its environment.
pub fn run_bench(quick: bool, variables: &[(String, String)]) -> Result<()> {
    let target = run::target_dir();
    let table = target.join(if quick {
        "bench-table-quick.md"
    } else {
        "bench-table.md"
    });
    // The bench finds pty-broker and gateway next to its own executable.
    if quick {
        // Every target of the workspace, as `cargo nextest run --workspace` builds them, so that
        // after the tests this is a no-op rather than a rebuild with other features.
        run::cargo(&["build", "--quiet", "--workspace", "--all-targets"])?;
    } else {
        run::cargo(&[
            "build",
            "--quiet",
            "--release",
            "--package",
            "bench",
            "--package",
            "pty-broker",
            "--package",
            "session-api",
            "--package",
            "gateway",
            "--bins",
        ])?;
    }
    let binary = target
        .join(if quick { "debug" } else { "release" })
        .join("bench");
    let mut command = Command::new(binary);
    command
        .arg("--out")
        .arg(&table)
        .current_dir(run::workspace_root())
        .envs(variables.iter().map(|(name, value)| (name, value)));
    if quick {
        command.arg("--quick");
    }
    run::status(&mut command)
}
