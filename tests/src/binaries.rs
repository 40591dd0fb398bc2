//! Where the service binaries are: next to the test executable, in the same target directory and
//! profile. Integration tests get `CARGO_BIN_EXE_*` only for their own package's binaries, and a
//! library dependency does not build a package's binaries. `cargo nextest run --workspace` (as
//! `cargo xtask test` runs it) builds them in the same run, because each service has tests; when
//! one is missing (`cargo nextest run -p tests` on a fresh target directory) the first call runs
//! `cargo build --workspace --all-targets`, nextest's own feature set, so that the build does not
//! rebuild the dependencies with other features and replace the binaries nextest would build.
//! A binary that exists is not rebuilt: after editing a service, select these tests from a
//! workspace run (`cargo nextest run --workspace -E 'package(tests)'`), which builds it first.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context, bail};

/// The service binaries this crate runs.
pub const SERVICES: [&str; 3] = ["pty-broker", "session-api", "gateway"];

/// The path of `name` (one of [`SERVICES`]), built and up to date.
pub fn binary(name: &str) -> anyhow::Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let profile_dir = BUILT
        .get_or_init(|| build().map_err(|error| format!("{error:#}")))
        .clone()
        .map_err(anyhow::Error::msg)?;
    let path = profile_dir.join(name);
    if !path.is_file() {
        bail!("no {name} binary at {}", path.display());
    }
    Ok(path)
}

fn build() -> anyhow::Result<PathBuf> {
    let profile_dir = profile_dir()?;
    if SERVICES
        .iter()
        .all(|service| profile_dir.join(service).is_file())
    {
        return Ok(profile_dir);
    }
    let target_dir = profile_dir
        .parent()
        .context("the profile directory has no parent")?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "build",
            "--quiet",
            "--workspace",
            "--all-targets",
            "--target-dir",
        ])
        .arg(target_dir);
    match profile_dir.file_name().and_then(|name| name.to_str()) {
        Some("debug") => {}
        Some("release") => {
            command.arg("--release");
        }
        Some(profile) => {
            command.args(["--profile", profile]);
        }
        None => bail!(
            "cannot tell the build profile from {}",
            profile_dir.display()
        ),
    }
    let status = command.status().context("cannot run cargo build")?;
    if !status.success() {
        bail!("cargo build of the service binaries failed: {status}");
    }
    Ok(profile_dir)
}

fn profile_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the test executable")?;
    // <target dir>/<profile>/deps/<test executable>
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .context("the test executable is not in <target>/<profile>/deps")
}
