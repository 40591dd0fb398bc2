//! What the `ptyhub` binary tests share: a real `ptyhub up` on port 0 with its own data
//! directory, the client commands pointed at it, plain HTTP requests to the gateway, and a real
//! pseudo-terminal to drive `ptyhub attach` through.

pub mod pty;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;

/// How long anything the tests wait for may take before the test fails. Generous: the machine
/// may be busy building; a healthy run takes a fraction of it.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The page the tests serve as `--web-dir`, to recognise it in answers.
pub const TEST_PAGE: &str = "<!doctype html><title>ptyhub test page</title><p>test-page-marker</p>";

/// The `ptyhub` binary under test.
pub fn ptyhub_binary() -> &'static str {
    env!("CARGO_BIN_EXE_ptyhub")
}

/// A `ptyhub` command with none of the caller's `PTYHUB_*` settings.
pub fn ptyhub_command() -> Command {
    let mut command = Command::new(ptyhub_binary());
    for variable in [
        "PTYHUB_TOKEN",
        "PTYHUB_SERVER",
        "PTYHUB_DATA_DIR",
        "PTYHUB_LISTEN",
        "PTYHUB_BACKENDS",
        "PTYHUB_WEB_DIR",
        "PTYHUB_LOG",
        "PTYHUB_DETACH_KEYS",
        "PTYHUB_TOKEN_FILE",
        "PTYHUB_CA_CERT",
        "PTYHUB_TLS_CERT",
        "PTYHUB_TLS_KEY",
    ] {
        command.env_remove(variable);
    }
    command
}

/// A running `ptyhub up`, stopped with SIGTERM when dropped.
#[derive(Debug)]
pub struct Up {
    child: Option<Child>,
    /// The data directory and the web directory, handed back by [`Up::stop`].
    dirs: Option<(TempDir, TempDir)>,
    /// Scratch space for files the sessions' shells and the test exchange.
    pub scratch: TempDir,
    /// The gateway's address, as the printed URL says.
    pub address: SocketAddr,
    /// The user token the printed URL carries.
    pub token: String,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

impl Up {
    /// Starts `ptyhub up` with the local backend on a fresh data directory.
    pub fn start() -> Self {
        Self::start_with_backends("local")
    }

    /// Starts `ptyhub up` with these `--backend`s on a fresh data directory.
    pub fn start_with_backends(backends: &str) -> Self {
        let data_dir = tempfile::tempdir().expect("data dir");
        let web_dir = tempfile::tempdir().expect("web dir");
        std::fs::write(web_dir.path().join("index.html"), TEST_PAGE).expect("write index.html");
        Self::launch(data_dir, web_dir, backends)
    }

    /// Starts `ptyhub up` with these `--backend`s and more flags of `up`.
    pub fn start_with_flags(backends: &str, flags: &[&str]) -> Self {
        let data_dir = tempfile::tempdir().expect("data dir");
        let web_dir = tempfile::tempdir().expect("web dir");
        std::fs::write(web_dir.path().join("index.html"), TEST_PAGE).expect("write index.html");
        Self::launch_with(data_dir, web_dir, backends, flags)
    }

    /// Starts `ptyhub up` serving HTTPS with these certificates' server certificate.
    pub fn start_with_tls(certificates: &ptyhub_test_support::tls::TestCertificates) -> Self {
        let data_dir = tempfile::tempdir().expect("data dir");
        let web_dir = tempfile::tempdir().expect("web dir");
        std::fs::write(web_dir.path().join("index.html"), TEST_PAGE).expect("write index.html");
        let (cert, key) = (
            certificates.cert.to_str().expect("a UTF-8 path"),
            certificates.key.to_str().expect("a UTF-8 path"),
        );
        Self::launch_with(
            data_dir,
            web_dir,
            "local",
            &["--tls-cert", cert, "--tls-key", key],
        )
    }

    /// Starts `ptyhub up` (local backend) on an existing data directory: a restart.
    pub fn start_on(data_dir: TempDir, web_dir: TempDir) -> Self {
        Self::launch(data_dir, web_dir, "local")
    }

    fn launch(data_dir: TempDir, web_dir: TempDir, backends: &str) -> Self {
        Self::launch_with(data_dir, web_dir, backends, &[])
    }

    /// Replaces this `ptyhub up` with a `ptyhub up --upgrade` on the same data directory: the
    /// new process takes every session over, and the old one must exit by itself, successfully.
    pub fn upgrade(&mut self) {
        let (data_dir, web_dir) = self.dirs.take().expect("running");
        let mut old = self.child.take().expect("running");
        let old_stderr = self.stderr();
        let next = Self::launch_with(data_dir, web_dir, "local", &["--upgrade"]);
        let status = wait_bounded(&mut old, PATIENCE);
        assert!(
            status.is_some_and(|status| status.success()),
            "the old ptyhub up did not exit cleanly after the upgrade ({status:?})\nold stderr:\n{old_stderr}\nnew stderr:\n{}",
            next.stderr()
        );
        *self = next;
    }

    fn launch_with(data_dir: TempDir, web_dir: TempDir, backends: &str, extra: &[&str]) -> Self {
        let mut command = ptyhub_command();
        command
            .arg("--data-dir")
            .arg(data_dir.path())
            .args(["up", "--listen", "127.0.0.1:0", "--backend", backends])
            .args(extra)
            .arg("--web-dir")
            .arg(web_dir.path())
            .args(["--log", "warn"])
            // The sessions' shell: dash is small, predictable and has no line editor.
            .env("SHELL", "/bin/sh")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("start ptyhub up");
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let stderr_pipe = child.stderr.take().expect("stderr pipe");
        collect_lines(stderr_pipe, Arc::clone(&stderr));
        let (lines, printed) = mpsc::channel();
        forward_lines(
            child.stdout.take().expect("stdout pipe"),
            lines,
            Arc::clone(&stdout),
        );
        let mut up = Self {
            child: Some(child),
            dirs: Some((data_dir, web_dir)),
            scratch: tempfile::tempdir().expect("scratch dir"),
            address: "127.0.0.1:1".parse().expect("placeholder address"),
            token: String::new(),
            stdout,
            stderr,
        };
        let deadline = Instant::now() + PATIENCE;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match printed.recv_timeout(remaining) {
                Ok(line) => {
                    if let Some(url) = line.trim().strip_prefix("web page:") {
                        let (address, token) = parse_page_url(url.trim());
                        up.address = address;
                        up.token = token;
                        return up;
                    }
                }
                Err(_) => panic!(
                    "ptyhub up printed no web page URL within {PATIENCE:?}\nstdout:\n{}\nstderr:\n{}",
                    up.stdout(),
                    up.stderr()
                ),
            }
        }
    }

    pub fn data_dir(&self) -> &Path {
        self.dirs.as_ref().expect("running").0.path()
    }

    pub fn stdout(&self) -> String {
        self.stdout.lock().expect("stdout lock").clone()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr lock").clone()
    }

    /// A client command that finds the server and token through the data directory, as a user
    /// who ran `ptyhub up` there would.
    pub fn ptyhub(&self) -> Command {
        let mut command = ptyhub_command();
        command.arg("--data-dir").arg(self.data_dir());
        command
    }

    /// Runs a client command to completion (stdin empty), failing the test if it hangs.
    pub fn run(&self, args: &[&str]) -> Output {
        let mut command = self.ptyhub();
        command.args(args);
        run_bounded(&mut command, None)
    }

    /// Runs a client command that must succeed, and returns its stdout.
    pub fn run_ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "ptyhub {args:?} failed with {}:\nstdout: {}\nstderr: {}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).expect("utf-8 output")
    }

    /// `ptyhub ls INSTANCE --all --json`, parsed.
    pub fn sessions(&self, instance: &str) -> Vec<serde_json::Value> {
        let listed: serde_json::Value =
            serde_json::from_str(&self.run_ok(&["--json", "ls", instance, "--all"]))
                .expect("ls --json prints JSON");
        listed["sessions"]
            .as_array()
            .expect("ls --json prints {\"sessions\": [...]}")
            .clone()
    }

    /// The session of `instance` that has `alias`, if any (live or not).
    pub fn session_with_alias(&self, instance: &str, alias: &str) -> Option<serde_json::Value> {
        self.sessions(instance).into_iter().find(|session| {
            session["aliases"]
                .as_array()
                .is_some_and(|aliases| aliases.iter().any(|name| name == alias))
        })
    }

    /// A GET on the gateway.
    pub fn get(&self, path: &str, token: Option<&str>) -> HttpAnswer {
        http_get(self.address, path, token)
    }

    /// A POST of `json` on the gateway, with the user's token.
    pub fn post(&self, path: &str, json: &str) -> HttpAnswer {
        http_request(self.address, "POST", path, Some(&self.token), Some(json))
    }

    /// Stops it with SIGTERM, requires a clean exit, and hands back the data directory for a
    /// restart.
    pub fn stop(mut self) -> (TempDir, TempDir) {
        let mut child = self.child.take().expect("running");
        let status = terminate(&mut child);
        assert!(
            status.success(),
            "ptyhub up exited with {status} after SIGTERM\nstderr:\n{}",
            self.stderr()
        );
        self.dirs.take().expect("running")
    }
}

impl Up {
    /// Kills it outright (SIGKILL): the server vanishes without closing anything.
    pub fn kill(mut self) {
        let mut child = self.child.take().expect("running");
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            terminate(&mut child);
        }
    }
}

/// SIGTERM, then SIGKILL if it does not stop within [`PATIENCE`].
fn terminate(child: &mut Child) -> ExitStatus {
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid fits i32"));
    let _ = kill(pid, Signal::SIGTERM);
    match wait_bounded(child, PATIENCE) {
        Some(status) => status,
        None => {
            let _ = child.kill();
            let status = child.wait().expect("wait after SIGKILL");
            panic!("ptyhub up did not stop within {PATIENCE:?} of SIGTERM ({status})");
        }
    }
}

/// Waits for a child to exit, up to `patience`.
pub fn wait_bounded(child: &mut Child, patience: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + patience;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs a command to completion with `stdin` as its input, killing it and failing the test if it
/// takes longer than [`PATIENCE`].
pub fn run_bounded(command: &mut Command, stdin: Option<Vec<u8>>) -> Output {
    command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("spawn ptyhub");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin pipe");
        std::thread::spawn(move || {
            // The command may exit without reading everything; that is for the test to judge.
            let _ = pipe.write_all(&input);
        });
    }
    let stdout = read_all_in_background(child.stdout.take().expect("stdout pipe"));
    let stderr = read_all_in_background(child.stderr.take().expect("stderr pipe"));
    let Some(status) = wait_bounded(&mut child, PATIENCE) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "{command:?} did not finish within {PATIENCE:?}; stderr so far: {}",
            String::from_utf8_lossy(&stderr.join().unwrap_or_default())
        );
    };
    Output {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

fn read_all_in_background(
    mut pipe: impl std::io::Read + Send + 'static,
) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

pub fn collect_lines(pipe: impl std::io::Read + Send + 'static, into: Arc<Mutex<String>>) {
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { return };
            let mut text = into.lock().expect("lock");
            text.push_str(&line);
            text.push('\n');
        }
    });
}

fn forward_lines(pipe: ChildStdout, lines: mpsc::Sender<String>, into: Arc<Mutex<String>>) {
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { return };
            {
                let mut text = into.lock().expect("lock");
                text.push_str(&line);
                text.push('\n');
            }
            // The test may have stopped listening; keep draining so `up` never blocks on stdout.
            let _ = lines.send(line);
        }
    });
}

/// `http://127.0.0.1:PORT/?token=TOKEN` into the address and the token.
fn parse_page_url(url: &str) -> (SocketAddr, String) {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .unwrap_or_else(|| panic!("the page URL {url:?} is neither http:// nor https://"));
    let (authority, query) = rest
        .split_once("/?token=")
        .unwrap_or_else(|| panic!("the page URL {url:?} carries no token"));
    let address = authority
        .parse()
        .unwrap_or_else(|_| panic!("the page URL {url:?} has no IP:port"));
    assert!(!query.is_empty(), "the page URL {url:?} has an empty token");
    (address, query.to_owned())
}

/// An HTTP answer: the status code and the body.
#[derive(Debug)]
pub struct HttpAnswer {
    pub status: u16,
    pub body: String,
}

/// A plain HTTP/1.1 GET (a few lines of std, so the test needs no HTTP client).
pub fn http_get(address: SocketAddr, path: &str, token: Option<&str>) -> HttpAnswer {
    http_request(address, "GET", path, token, None)
}

/// A plain HTTP/1.1 request, with a JSON body when one is given.
pub fn http_request(
    address: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    json: Option<&str>,
) -> HttpAnswer {
    try_http_request(address, method, path, token, json, PATIENCE)
        .unwrap_or_else(|error| panic!("{method} {path} on {address}: {error}"))
}

/// A plain HTTP/1.1 request; an error when nothing answers it in HTTP within `patience` (no
/// listener, a server of another protocol).
pub fn try_http_request(
    address: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    json: Option<&str>,
    patience: Duration,
) -> Result<HttpAnswer, String> {
    let mut stream =
        TcpStream::connect_timeout(&address, patience).map_err(|error| error.to_string())?;
    stream
        .set_read_timeout(Some(patience))
        .map_err(|error| error.to_string())?;
    let mut request =
        format!("{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n");
    if let Some(token) = token {
        request.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    if let Some(json) = json {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            json.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(json.unwrap_or_default());
    stream
        .write_all(request.as_bytes())
        .map_err(|error| error.to_string())?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .map_err(|error| error.to_string())?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("not an HTTP answer: {answer:?}"))?;
    let status = head
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    let chunked = head
        .lines()
        .any(|line| line.eq_ignore_ascii_case("transfer-encoding: chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Ok(HttpAnswer { status, body })
}

fn dechunk(mut body: &str) -> String {
    let mut joined = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        joined.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    joined
}

/// Polls `condition` until it holds, failing the test after [`PATIENCE`].
pub fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let held =
        ptyhub_test_support::poll_until_blocking(PATIENCE, Duration::from_millis(50), || {
            condition().then_some(())
        });
    assert!(held.is_some(), "{what}: not within {PATIENCE:?}");
}

/// Asserts the command failed with exactly one non-empty line on stderr, and returns it.
pub fn one_error_line(output: &Output) -> String {
    assert!(
        !output.status.success(),
        "expected a failure, got {}; stdout: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout)
    );
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "expected one line on stderr, got {stderr:?}"
    );
    assert!(!lines[0].trim().is_empty(), "an empty error line");
    lines[0].to_owned()
}
