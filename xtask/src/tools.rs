//! The cargo plugins the CI gates run, `cargo-deny` and `cargo-machete`: each installed with
//! `cargo install --locked` at a pinned version into a cache outside the checkout
//! (`PTYHUB_TOOLS_DIR`, default `/var/cache/ptyhub-tools`) when it is not there yet, so that a
//! re-run or a fresh clone on the same machine does not build it again.
//!
//! - `cargo deny check`: licences, bans (duplicate versions warn), sources, and security
//!   advisories. The advisory database is a git repository that this machine may not reach; when
//!   it cannot be fetched, the check uses the copy fetched before, and with none it runs without
//!   advisories and says so in a `SKIP:` line of the run's final list (never silently).
//! - `cargo machete`: dependencies declared but never used.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result};

use crate::run;
use crate::skips::SkipList;

/// A cargo plugin at the version the gates were written against.
#[derive(Debug, Clone, Copy)]
struct Tool {
    package: &'static str,
    version: &'static str,
}

const CARGO_DENY: Tool = Tool {
    package: "cargo-deny",
    version: "0.20.2",
};

const CARGO_MACHETE: Tool = Tool {
    package: "cargo-machete",
    version: "0.9.2",
};

const DEFAULT_TOOLS_DIR: &str = "/var/cache/ptyhub-tools";

/// `cargo deny check`, with the advisories as the database allows (see the module docs).
pub fn deny(skips: &SkipList) -> Result<()> {
    let path = ensure_installed(CARGO_DENY)?;
    let fetched = run::status(cargo_with_tools(&path).args(["deny", "fetch", "db"]));
    match fetched {
        Ok(()) => deny_check(&path, &[]),
        Err(error) if advisory_database_cached() => {
            eprintln!(
                "note: the advisory database cannot be fetched ({error:#}); checking against the \
                 copy fetched before"
            );
            deny_check(&path, &["--disable-fetch"])
        }
        Err(error) => {
            skips.record(
                "cargo deny advisories",
                &format!(
                    "the advisory database cannot be fetched and none was fetched before \
                     ({error:#}); licences, bans and sources are still checked"
                ),
            );
            deny_check(&path, &["licenses", "bans", "sources"])
        }
    }
}

/// `cargo deny check ARGS...`, without the inclusion graph of every duplicate (they are
/// warnings; the graphs would bury the result).
fn deny_check(bin: &Path, args: &[&str]) -> Result<()> {
    run::status(
        cargo_with_tools(bin)
            .args(["deny", "check", "--hide-inclusion-graph"])
            .args(args),
    )
}

/// `cargo machete`: fails when a crate declares a dependency it does not use.
pub fn machete() -> Result<()> {
    let path = ensure_installed(CARGO_MACHETE)?;
    // Called directly: through the toolchain's own cargo (as `CARGO` names it) the plugin takes
    // its subcommand name for the directory to analyse.
    run::status(Command::new(path.join(CARGO_MACHETE.package)).current_dir(run::workspace_root()))
}

/// The tool's binary directory, after installing it there if it is missing or another version.
fn ensure_installed(tool: Tool) -> Result<PathBuf> {
    let root = tools_dir();
    let bin = root.join("bin");
    if installed_version(&bin, tool).is_some_and(|version| version == tool.version) {
        return Ok(bin);
    }
    eprintln!(
        "installing {}@{} into {} (once per machine)",
        tool.package,
        tool.version,
        root.display()
    );
    std::fs::create_dir_all(&root)
        .with_context(|| format!("cannot create the tools directory {}", root.display()))?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    run::status(
        Command::new(cargo)
            .args(["install", "--locked", "--root"])
            .arg(&root)
            .arg(format!("{}@{}", tool.package, tool.version))
            // Its own build directory: the workspace's target must not be locked or changed.
            .env_remove("CARGO_TARGET_DIR"),
    )?;
    Ok(bin)
}

/// The version the installed binary reports (`cargo-deny 0.20.2`), if there is one.
fn installed_version(bin: &Path, tool: Tool) -> Option<String> {
    let output = Command::new(bin.join(tool.package))
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    parse_version(&text)
}

/// The last word of the first line of `--version` output.
fn parse_version(text: &str) -> Option<String> {
    text.lines()
        .next()?
        .split_whitespace()
        .last()
        .map(str::to_owned)
}

fn tools_dir() -> PathBuf {
    std::env::var_os("PTYHUB_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_TOOLS_DIR))
}

/// `cargo` with the tools directory first on `PATH`, so `cargo deny` finds the plugin there.
fn cargo_with_tools(bin: &Path) -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bin.to_path_buf()];
    paths.extend(std::env::split_paths(&path));
    let mut command = Command::new(cargo);
    command.current_dir(run::workspace_root());
    if let Ok(joined) = std::env::join_paths(paths) {
        command.env("PATH", joined);
    }
    command
}

/// Whether cargo-deny has a copy of an advisory database from an earlier fetch (it keeps them
/// under `$CARGO_HOME/advisory-dbs`).
fn advisory_database_cached() -> bool {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")));
    cargo_home
        .map(|home| home.join("advisory-dbs"))
        .and_then(|databases| std::fs::read_dir(databases).ok())
        .is_some_and(|mut entries| {
            entries.any(|entry| entry.is_ok_and(|entry| entry.path().join(".git").exists()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_read_from_the_first_line() {
        assert_eq!(
            parse_version("cargo-deny 0.20.2\n"),
            Some("0.20.2".to_owned())
        );
        assert_eq!(
            parse_version("cargo-machete 0.9.2\nmore\n"),
            Some("0.9.2".to_owned())
        );
        assert_eq!(parse_version(""), None);
    }
}
