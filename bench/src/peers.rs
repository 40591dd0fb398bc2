//! (11) Echo timed by a client that is not the bench's, beside a peer: the Python client
//! `bench/python/ws_echo.py`, in a process of its own, types on a bare PTY it holds itself (the
//! floor as that client sees it), on ttyd (a one-hop web terminal in C, the peer) and on the
//! stack's gateway WebSocket with the broker in process (what `ptyhub up` runs), every path
//! running the same echo program.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

use crate::scenarios::{ECHO_SCRIPT, python_client};
use crate::stack::{ADMIN_TOKEN, Backend, Screens, Stack};
use crate::term::{READ_PATIENCE, close_session, create_session};

/// The Python client that types and times.
const ECHO_CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/python/ws_echo.py");

/// One path of the scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerPath {
    /// A PTY the client process opens itself, read with blocking reads: the floor.
    BarePty,
    /// ttyd's WebSocket (`-W`, one process for the scenario, a fresh command per connection).
    Ttyd,
    /// The stack's gateway WebSocket, broker in process, local backend, screens on.
    Ptyhub,
}

impl PeerPath {
    pub const ALL: [Self; 3] = [Self::BarePty, Self::Ttyd, Self::Ptyhub];

    pub fn label(self) -> &'static str {
        match self {
            Self::BarePty => "bare PTY held by the client (the floor)",
            Self::Ttyd => "ttyd (the peer)",
            Self::Ptyhub => "ptyhub gateway WebSocket, broker in process (`ptyhub up`), local",
        }
    }
}

/// The ttyd the scenario compares with: `PTYHUB_TEST_TTYD` (what `cargo xtask bench` installs),
/// else `ttyd` on the `PATH`; why not, when there is none that runs.
pub fn ttyd_binary() -> Result<PathBuf, String> {
    let ttyd = std::env::var_os("PTYHUB_TEST_TTYD").map_or_else(|| "ttyd".into(), PathBuf::from);
    match std::process::Command::new(&ttyd).arg("--version").output() {
        Ok(output) if output.status.success() => Ok(ttyd),
        Ok(output) => Err(format!(
            "{} --version failed: {}",
            ttyd.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )),
        Err(error) => Err(format!(
            "cannot run {} (`cargo xtask bench` installs ttyd): {error}",
            ttyd.display()
        )),
    }
}

/// A ttyd process serving the echo program on a loopback port it chose; killed when dropped.
#[derive(Debug)]
pub struct Ttyd {
    child: Child,
    port: u16,
}

impl Ttyd {
    /// Starts `binary` on 127.0.0.1, port 0, and reads the port it chose from its log.
    pub async fn start(binary: &std::path::Path) -> Result<Self> {
        let mut child = Command::new(binary)
            .args(["--writable", "--interface", "127.0.0.1", "--port", "0"])
            .args(["/bin/sh", "-c", ECHO_SCRIPT])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start {}", binary.display()))?;
        let stderr = child.stderr.take().context("ttyd's stderr")?;
        let port = tokio::time::timeout(Duration::from_secs(10), listening_port(stderr))
            .await
            .context("ttyd did not say its port within 10 s")??;
        Ok(Self { child, port })
    }

    /// Its WebSocket's URL.
    pub(crate) fn url(&self) -> String {
        format!("ws://127.0.0.1:{}/ws", self.port)
    }

    /// Its process id, while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// Reads ttyd's log until its `Listening on port: N` line, then drains the rest in the
/// background so that ttyd never blocks on a full pipe.
async fn listening_port(stderr: tokio::process::ChildStderr) -> Result<u16> {
    let mut lines = BufReader::new(stderr).lines();
    while let Some(line) = lines.next_line().await? {
        if let Some((_, port)) = line.split_once("Listening on port:") {
            let port = port.trim().parse().context("ttyd's port")?;
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return Ok(port);
        }
    }
    bail!("ttyd exited before it listened")
}

/// One run of `keys` keystrokes on `path`, timed by the Python client; the round trips.
pub async fn peer_echo_once(
    stack: &Stack,
    ttyd: &Ttyd,
    path: PeerPath,
    keys: usize,
) -> Result<Vec<Duration>> {
    match path {
        PeerPath::BarePty => run_client("pty", ECHO_SCRIPT, keys).await,
        PeerPath::Ttyd => run_client("ttyd", &ttyd.url(), keys).await,
        PeerPath::Ptyhub => {
            let command = vec![
                "/bin/sh".to_owned(),
                "-c".to_owned(),
                ECHO_SCRIPT.to_owned(),
            ];
            let (instance, attach) =
                create_session(stack, Backend::Local, Screens::On, command).await?;
            let url = format!(
                "{}/ws/tool-instances/{instance}/terminal/{}?token={ADMIN_TOKEN}",
                stack.websocket_url(),
                attach.session_id
            );
            let result = run_client("ptyhub", &url, keys).await;
            close_session(stack, &instance, &attach.session_id).await;
            result
        }
    }
}

/// Runs the client on one path and reads its samples.
async fn run_client(path: &str, target: &str, keys: usize) -> Result<Vec<Duration>> {
    let python = python_client().map_err(anyhow::Error::msg)?;
    let mut client = Command::new(python);
    client
        .arg(ECHO_CLIENT)
        .args([path, target, &keys.to_string()])
        .kill_on_drop(true);
    // The client bounds every read by 60 s itself; this bounds the whole run.
    let patience = READ_PATIENCE + Duration::from_millis(keys as u64 * 10);
    let output = tokio::time::timeout(patience, client.output())
        .await
        .map_err(|_| anyhow::anyhow!("the Python client took over {patience:?}"))?
        .context("run the Python client")?;
    ensure!(
        output.status.success(),
        "the Python client failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    parse_samples(&output.stdout, keys)
}

/// The client's `{"samples_us": [...]}`, which must hold one sample per key.
fn parse_samples(stdout: &[u8], keys: usize) -> Result<Vec<Duration>> {
    let report: Value = serde_json::from_slice(stdout).with_context(|| {
        format!(
            "the Python client printed {:?}",
            String::from_utf8_lossy(stdout)
        )
    })?;
    let samples = report["samples_us"]
        .as_array()
        .context("the Python client's report has no samples_us")?
        .iter()
        .map(|sample| {
            sample
                .as_f64()
                .filter(|micros| micros.is_finite() && *micros >= 0.0)
                .map(|micros| Duration::from_secs_f64(micros / 1e6))
                .context("a sample is not a duration in µs")
        })
        .collect::<Result<Vec<_>>>()?;
    ensure!(
        samples.len() == keys,
        "the Python client timed {} keystrokes of {keys}",
        samples.len()
    );
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clients_samples_are_read_in_microseconds_and_counted() {
        let samples = parse_samples(br#"{"samples_us": [150.0, 2500.5]}"#, 2).expect("two samples");
        assert_eq!(
            samples,
            [Duration::from_micros(150), Duration::from_nanos(2_500_500)]
        );
        assert!(parse_samples(br#"{"samples_us": [150.0]}"#, 2).is_err());
        assert!(parse_samples(br#"{"samples_us": [-1.0]}"#, 1).is_err());
        assert!(parse_samples(b"Traceback", 1).is_err());
    }
}
