//! `cargo xtask bench [--quick]`: prepares the dependencies (Docker engine and test image), builds
//! the web page (the reload scenario loads it in Chromium), the `bench` binary and the service
//! binaries it runs as separate processes for the scale scenario (release for the full run, dev
//! for the quick one), and runs it, writing its table to `target/bench-table.md`; the quick mode
//! (small sizes) is a check that every scenario still completes with the right bytes, and
//! `cargo xtask test` runs it.

use std::path::PathBuf;
use std::process::Command;

use anyhow::Result;

use crate::{deps, run, web};

/// Chromium as Debian installs it; `PTYHUB_TEST_CHROMIUM` overrides (as for the browser tests).
const DEFAULT_CHROMIUM: &str = "/usr/bin/chromium";

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
    let root = run::workspace_root();
    // Outside CI a page that does not build, or no Chromium, leaves the reload scenario out with
    // a SKIP line (the bench says why); under CI both are required.
    let web_dir = match web::build_page(&root) {
        Ok(directory) => Some(directory),
        Err(error) if !deps::in_ci() => {
            eprintln!(
                "warning: the web page did not build, the reload scenario will skip: {error:#}"
            );
            None
        }
        Err(error) => return Err(error.context("the bench's reload scenario needs the web page")),
    };
    let chromium = chromium()?;
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
        .current_dir(&root)
        .envs(variables.iter().map(|(name, value)| (name, value)));
    if let Some(web_dir) = web_dir {
        command.arg("--web-dir").arg(web_dir);
    }
    if let Some(chromium) = chromium {
        command.arg("--chromium").arg(chromium);
    }
    if quick {
        command.arg("--quick");
    }
    run::status(&mut command)
}

/// The Chromium the reload scenario drives: `PTYHUB_TEST_CHROMIUM`, else Debian's, installed
/// when missing under CI (where the quick bench runs before the browser tests that would
/// install it). `None` outside CI when there is none: the bench skips the scenario and says so.
fn chromium() -> Result<Option<PathBuf>> {
    if let Some(configured) = std::env::var_os("PTYHUB_TEST_CHROMIUM") {
        return Ok(Some(PathBuf::from(configured)));
    }
    let default = PathBuf::from(DEFAULT_CHROMIUM);
    if default.is_file() {
        return Ok(Some(default));
    }
    if !deps::in_ci() {
        return Ok(None);
    }
    run::install_debian_packages(&["chromium"])?;
    if !default.is_file() {
        anyhow::bail!("Debian's chromium package installed no {DEFAULT_CHROMIUM}");
    }
    Ok(Some(default))
}
