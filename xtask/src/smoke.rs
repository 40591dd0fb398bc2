//! The README's first command on a clean checkout: clone the repository's HEAD into a temporary
//! directory, run `cargo xtask up` there as a newcomer would, and check that the printed URL
//! reaches the page, the health check and the API, then stop it with Ctrl-C (SIGINT to its
//! process group, as a terminal sends it) and wait until every process of it has gone.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How long the clone may take to build (the workspace crates compile again, the clone's files
/// being newer than their output; dependencies come from the shared target directory) and print
/// its URL.
const STARTUP_LIMIT: Duration = Duration::from_secs(30 * 60);
/// How long a request, and the shutdown after Ctrl-C, may take.
const PATIENCE: Duration = Duration::from_secs(60);

/// Clones `root`'s HEAD into a temporary directory, runs `cargo xtask up --listen 127.0.0.1:0`
/// there (with this process's `CARGO_TARGET_DIR`, if any), fetches `/` and `/healthz` and checks
/// the token on the API, lists and calls the gRPC services with Python's `grpcio` (see
/// `interop`), then stops it. The temporary directory is removed in every case, and `root`'s
/// sources are then marked newer than the clone's build ([`mark_sources_newer`]).
pub fn fresh_clone_up(root: &Path) -> Result<()> {
    let outcome = run_fresh_clone(root);
    let marked = mark_sources_newer(root);
    outcome.and(marked)
}

fn run_fresh_clone(root: &Path) -> Result<()> {
    let scratch = ScratchDir::create()?;
    let checkout = scratch.path.join("ptyhub");
    let data_dir = scratch.path.join("data");
    crate::run::status(
        Command::new("git")
            .args(["clone", "--quiet", "--no-hardlinks"])
            .arg(root)
            .arg(&checkout),
    )?;

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut command = Command::new(cargo);
    command
        .args(["xtask", "up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data_dir)
        .current_dir(&checkout)
        .env_remove("PTYHUB_TOKEN")
        .env_remove("PTYHUB_SERVER")
        .env_remove("PTYHUB_DATA_DIR")
        .env_remove("PTYHUB_LISTEN")
        .env_remove("PTYHUB_WEB_DIR")
        // Its own process group, so that Ctrl-C reaches every process of it (cargo, xtask,
        // ptyhub) and nothing else.
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    eprintln!(
        "$ cargo xtask up --listen 127.0.0.1:0 (in {})",
        checkout.display()
    );
    let child = command.spawn().context("cannot run cargo xtask up")?;
    let mut running = Running {
        child,
        stopped: false,
    };
    let result = check_running_system(&mut running, &checkout);
    let stopped = running.interrupt_and_wait();
    result.and(stopped)
}

/// Marks every file of `root` that git tracks or would track as modified now. `root` is the
/// top of a checkout: git does not look above it for one.
///
/// Cargo names a workspace crate's build output after the crate and its settings, not after the
/// checkout it was built in, and takes the output for current when it is newer than the sources
/// it was built from. The clone, built in the same target directory, has just replaced this
/// checkout's output of every workspace crate with its own, which is HEAD's, and newer than any
/// file here: without this, the next build here would take HEAD's code for current and leave out
/// every change not committed yet.
fn mark_sources_newer(root: &Path) -> Result<()> {
    let mut git = Command::new("git");
    if let Some(parent) = root.parent() {
        // A directory inside another checkout (a scratch directory under a `TMPDIR` in one)
        // is no checkout of its own.
        git.env("GIT_CEILING_DIRECTORIES", parent);
    }
    let listed = git
        .arg("-C")
        .arg(root)
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run git ls-files")?;
    if !listed.status.success() {
        bail!(
            "git ls-files failed in {}: {}",
            root.display(),
            listed.status
        );
    }
    let now = std::time::SystemTime::now();
    for name in listed.stdout.split(|&byte| byte == 0) {
        if name.is_empty() {
            continue;
        }
        let path = root.join(std::ffi::OsStr::from_bytes(name));
        // A tracked file deleted in the working tree is listed too.
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => {
                return Err(error).with_context(|| format!("cannot open {}", path.display()));
            }
        };
        file.set_modified(now)
            .with_context(|| format!("cannot mark {} modified", path.display()))?;
    }
    Ok(())
}

/// Waits for the URL, then checks what it serves.
fn check_running_system(running: &mut Running, checkout: &Path) -> Result<()> {
    let (address, token) = wait_for_page_url(running)?;
    eprintln!("up at {address}; checking /, /healthz and the API");
    let health = http_get(address, "/healthz", None)?;
    if health.status != 200 || !health.body.contains("ok") {
        bail!("/healthz answered {}: {}", health.status, health.body);
    }
    let page = http_get(address, "/", Some(&token))?;
    if page.status != 200 || !page.body.to_ascii_lowercase().contains("<html") {
        bail!("/ answered {} without a page: {}", page.status, page.body);
    }
    let api = http_get(address, "/api/v1/instances", Some(&token))?;
    if api.status != 200 || !api.body.contains("\"local\"") {
        bail!(
            "/api/v1/instances with the printed token answered {}: {}",
            api.status,
            api.body
        );
    }
    let refused = http_get(address, "/api/v1/instances", Some("not-the-token"))?;
    if refused.status != 401 {
        bail!(
            "/api/v1/instances with a wrong token answered {} instead of 401",
            refused.status
        );
    }
    // The gRPC surface on the same port, as a client that is not ours sees it.
    crate::interop::python_grpc_reflection_client(checkout, address, &token)
}

/// Reads the output of `cargo xtask up` until the `web page:` line, within [`STARTUP_LIMIT`].
fn wait_for_page_url(running: &mut Running) -> Result<(SocketAddr, String)> {
    let stdout = running
        .child
        .stdout
        .take()
        .context("no stdout pipe from cargo xtask up")?;
    let (lines, printed) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            println!("{line}");
            // Keep draining after the URL, so the system never blocks on a full pipe.
            let _ = lines.send(line);
        }
    });
    let deadline = Instant::now() + STARTUP_LIMIT;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match printed.recv_timeout(remaining) {
            Ok(line) => {
                if let Some(url) = line.trim().strip_prefix("web page:") {
                    return parse_page_url(url.trim());
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                bail!("cargo xtask up printed no web page URL within {STARTUP_LIMIT:?}")
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = running.child.wait()?;
                bail!("cargo xtask up ended ({status}) before printing the web page URL");
            }
        }
    }
}

/// `http://IP:PORT/?token=TOKEN` into the address and the token.
fn parse_page_url(url: &str) -> Result<(SocketAddr, String)> {
    let (authority, token) = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split_once("/?token="))
        .with_context(|| format!("the printed URL {url:?} is not http://ADDRESS/?token=TOKEN"))?;
    let address = authority
        .parse()
        .with_context(|| format!("the printed URL {url:?} has no IP:port"))?;
    if token.is_empty() {
        bail!("the printed URL {url:?} has an empty token");
    }
    Ok((address, token.to_owned()))
}

/// The process group of `cargo xtask up`.
#[derive(Debug)]
struct Running {
    child: Child,
    stopped: bool,
}

impl Running {
    /// Sends SIGINT to the whole group, as Ctrl-C in a terminal does, and waits until no process
    /// of the group is left; SIGKILL after [`PATIENCE`].
    fn interrupt_and_wait(&mut self) -> Result<()> {
        self.stopped = true;
        let group = self.child.id();
        signal_group(group, "INT");
        let deadline = Instant::now() + PATIENCE;
        // The direct child (cargo, which became xtask) ends at once; ptyhub, its child, shuts
        // down cleanly in its own time.
        loop {
            let child_done = self.child.try_wait()?.is_some();
            if child_done && !group_alive(group) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                signal_group(group, "KILL");
                let _ = self.child.wait();
                bail!("cargo xtask up did not stop within {PATIENCE:?} of Ctrl-C");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.stopped {
            signal_group(self.child.id(), "KILL");
            let _ = self.child.wait();
        }
    }
}

/// `kill -s SIGNAL -- -GROUP` (the kill command, since xtask has no signal bindings).
fn signal_group(group: u32, signal: &str) {
    let _ = Command::new("kill")
        .args(["-s", signal, "--", &format!("-{group}")])
        .stderr(Stdio::null())
        .status();
}

fn group_alive(group: u32) -> bool {
    crate::run::succeeds(Command::new("kill").args(["-s", "0", "--", &format!("-{group}")]))
}

/// A directory under the system's temporary directory, removed when dropped.
#[derive(Debug)]
struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    fn create() -> Result<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.subsec_nanos())
            .unwrap_or_default();
        let path =
            std::env::temp_dir().join(format!("ptyhub-fresh-clone-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&path).with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Self { path })
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// An HTTP answer: the status code and the body.
#[derive(Debug)]
struct HttpAnswer {
    status: u16,
    body: String,
}

/// A plain HTTP/1.1 GET, enough for a smoke check without an HTTP client dependency.
fn http_get(address: SocketAddr, path: &str, token: Option<&str>) -> Result<HttpAnswer> {
    let mut stream = TcpStream::connect_timeout(&address, PATIENCE)
        .with_context(|| format!("cannot connect to {address}"))?;
    stream.set_read_timeout(Some(PATIENCE))?;
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n");
    if let Some(token) = token {
        request.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes())?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .with_context(|| format!("no answer to GET {path}"))?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .with_context(|| format!("GET {path}: not an HTTP answer"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("GET {path}: no status in {head:?}"))?;
    Ok(HttpAnswer {
        status,
        body: body.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    fn git(root: &Path, args: &[&str]) {
        let status = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .stdout(Stdio::null())
            .status()
            .expect("git runs");
        assert!(status.success(), "git {args:?} failed");
    }

    fn modified(path: &Path) -> SystemTime {
        std::fs::metadata(path).unwrap().modified().unwrap()
    }

    #[test]
    fn the_sources_git_tracks_or_would_track_are_marked_newer_and_nothing_else() {
        let scratch = ScratchDir::create().unwrap();
        let root = &scratch.path;
        git(root, &["init", "--quiet"]);
        std::fs::write(root.join(".gitignore"), "ignored.rs\n").unwrap();
        for name in [
            "committed.rs",
            "edited.rs",
            "deleted.rs",
            "new.rs",
            "ignored.rs",
        ] {
            std::fs::write(root.join(name), "fn main() {}\n").unwrap();
        }
        git(
            root,
            &[
                "add",
                ".gitignore",
                "committed.rs",
                "edited.rs",
                "deleted.rs",
            ],
        );
        std::fs::write(root.join("edited.rs"), "fn main() { edited() }\n").unwrap();
        std::fs::remove_file(root.join("deleted.rs")).unwrap();
        let long_ago = SystemTime::now() - Duration::from_secs(24 * 3600);
        for name in [
            ".gitignore",
            "committed.rs",
            "edited.rs",
            "new.rs",
            "ignored.rs",
        ] {
            std::fs::File::open(root.join(name))
                .unwrap()
                .set_modified(long_ago)
                .unwrap();
        }

        let before = SystemTime::now() - Duration::from_secs(60);
        mark_sources_newer(root).unwrap();

        for name in [".gitignore", "committed.rs", "edited.rs", "new.rs"] {
            assert!(
                modified(&root.join(name)) > before,
                "{name} is marked newer"
            );
        }
        assert_eq!(
            modified(&root.join("ignored.rs")),
            long_ago,
            "an ignored file is left alone"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("edited.rs")).unwrap(),
            "fn main() { edited() }\n",
            "only the time changes"
        );
    }

    #[test]
    fn a_directory_that_is_no_repository_is_an_error() {
        let scratch = ScratchDir::create().unwrap();
        let error = mark_sources_newer(&scratch.path).unwrap_err();
        assert!(
            format!("{error:#}").contains("git ls-files failed"),
            "{error:#}"
        );
    }
}
