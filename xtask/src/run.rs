//! Running commands: cargo with the workspace's own toolchain, and system tools, with the command
//! line echoed so a CI log shows what happened.

use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// Runs `cargo ARGS...` in the workspace root.
pub fn cargo(args: &[&str]) -> Result<()> {
    cargo_with_env(args, &[])
}

/// Runs `cargo ARGS...` in the workspace root with extra environment variables.
pub fn cargo_with_env(args: &[&str], env: &[(String, String)]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut command = Command::new(cargo);
    command
        .args(args)
        .current_dir(workspace_root())
        .envs(env.iter().map(|(name, value)| (name, value)));
    status(&mut command)
}

/// Installs Debian packages with apt-get. Waits for the package lock rather than failing when
/// another apt-get holds it (a second test run, or a person installing something).
pub fn install_debian_packages(packages: &[&str]) -> Result<()> {
    const LOCK_WAIT: &str = "DPkg::Lock::Timeout=600";
    status(Command::new("apt-get").args(["-o", LOCK_WAIT, "update", "-qq"]))?;
    status(
        Command::new("apt-get")
            .args([
                "-o",
                LOCK_WAIT,
                "install",
                "-y",
                "-qq",
                "--no-install-recommends",
            ])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
    .with_context(|| format!("cannot install {}", packages.join(" ")))
}

/// Runs a command to completion, failing when it exits non-zero.
pub fn status(command: &mut Command) -> Result<()> {
    eprintln!("$ {}", describe(command));
    let status = command
        .status()
        .with_context(|| format!("cannot run {}", describe(command)))?;
    if !status.success() {
        bail!("{} failed: {status}", describe(command));
    }
    Ok(())
}

/// Runs a command and reports only whether it succeeded, hiding its output.
pub fn succeeds(command: &mut Command) -> bool {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Where cargo puts build output: `CARGO_TARGET_DIR`, else `target/` in the workspace.
pub fn target_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

pub fn workspace_root() -> std::path::PathBuf {
    // xtask lives one level below the workspace root. The directory comes from `cargo run` at
    // run time: with a target dir shared between checkouts (as CI's fresh-clone check does), the
    // binary may have been built in another checkout, so its compile-time path can be wrong.
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    manifest_dir
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_else(|| ".".into())
}

fn describe(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|part| part.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}
