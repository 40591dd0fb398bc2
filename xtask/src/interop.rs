//! Clients that are not ours, against a running `ptyhub up`: Python's `grpcio` with
//! `grpcio-reflection` (which speaks only `grpc.reflection.v1alpha`) lists the services on the
//! gateway's port and calls them with message classes built from what reflection sent, knowing
//! no .proto file (`interop/grpc_reflection_client.py`). The official MCP SDK (`mcp`), which the
//! CLI's tests drive `/mcp` and `ptyhub mcp` with (`interop/mcp_client.py`), comes from the same
//! requirements file.
//!
//! The Python packages come from PyPI into a virtual environment under `/var/cache`, made once
//! and reused; Debian's `python3-venv` is installed when `venv` is missing.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::run;

/// Where the virtual environment with the Python clients lives, outside the clone.
const VENV: &str = "/var/cache/ptyhub-py";

/// Runs the Python reflection client against the gateway at `address` with the user's `token`.
pub fn python_grpc_reflection_client(root: &Path, address: SocketAddr, token: &str) -> Result<()> {
    let python = ensure_python_clients(root)?;
    run::status(
        Command::new(python)
            .arg(root.join("interop/grpc_reflection_client.py"))
            .arg(address.to_string())
            .arg(token),
    )
    .context("the Python grpcio client failed against the gateway's gRPC port")
}

/// The Python of the virtual environment, with `interop/requirements.txt`,
/// `examples/python/requirements.txt` and `bench/python/requirements.txt` installed.
pub fn ensure_python_clients(root: &Path) -> Result<PathBuf> {
    let venv = PathBuf::from(VENV);
    let python = venv.join("bin/python");
    if !python.is_file() {
        if !run::succeeds(Command::new("python3").args(["-m", "venv", "--help"])) {
            run::install_debian_packages(&["python3-venv"])?;
        }
        run::status(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    }
    // Quiet and quick when everything is installed already.
    run::status(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(root.join("interop/requirements.txt"))
            .arg("-r")
            .arg(root.join("examples/python/requirements.txt"))
            .arg("-r")
            .arg(root.join("bench/python/requirements.txt")),
    )
    .context("cannot install the Python clients from PyPI")?;
    Ok(python)
}
