//! `cargo xtask bench [--quick]`: prepares the dependencies (Docker engine and test image) and
//! runs the `bench` binary, in release mode for the full run, writing its table to
//! `target/bench-table.md`; the quick mode (small sizes, dev build) is a check that every
//! scenario still completes with the right bytes, and `cargo xtask test` runs it.

use anyhow::Result;

use crate::{deps, run};

/// Runs the benchmarks; `quick` for the small check that `cargo xtask test` runs.
pub fn bench(quick: bool) -> Result<()> {
    run_bench(quick, &deps::prepare()?)
}

/// Runs the benchmarks with the dependencies already prepared.
pub fn run_bench(quick: bool, environment: &deps::TestEnvironment) -> Result<()> {
    let table = run::target_dir().join(if quick {
        "bench-table-quick.md"
    } else {
        "bench-table.md"
    });
    let table = table.to_string_lossy();
    let mut args = vec!["run", "--quiet", "--package", "bench", "--bin", "bench"];
    if !quick {
        args.push("--release");
    }
    args.extend(["--", "--out", &table]);
    if quick {
        args.push("--quick");
    }
    run::cargo_with_env(&args, &environment.variables())
}
