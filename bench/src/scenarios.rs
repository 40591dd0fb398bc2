//! The measurements of BENCHMARKS.md, each over every path that applies, side by side in one run:
//! output throughput, keystroke echo, Ctrl-C under a flood, isolation from a stalled flood, and
//! session start. Every loop is bounded in count and in time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use ptyhub_attach_ticket::TicketRole;
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;

use anyhow::{Context as _, Result, bail, ensure};
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use futures::StreamExt as _;
use serde_json::Value;

use crate::stack::{ADMIN_TOKEN, Backend, BrokerClient, Screens, Stack, ticket_signing_key};
use crate::term::{
    Path, READ_PATIENCE, Reads, SMALL_READ_BYTES, Term, attach_broker, attach_broker_at,
    close_session, connect_gateway, create_session, create_session_on,
};

/// One line of the flood: 63 printable bytes and a newline.
pub const LINE: &str = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.";

/// `stty raw -echo`, then `R` to say so, then wait for a newline, then `bytes` of `LINE`s, then
/// wait for another newline before exiting (so the end of the output never races the exit).
fn flood_script(bytes: u64) -> String {
    format!("stty raw -echo; printf R; read -r go; yes {LINE} | head -c {bytes}; read -r done")
}

/// An echo server in the terminal's process, as a shell's line editor is: raw mode, no kernel
/// echo, `cat` writes back each byte it reads.
pub const ECHO_SCRIPT: &str = "stty raw -echo; printf R; exec cat";

/// Checks that `chunk`, starting at stream position `position`, is the flood's pattern.
fn verify_flood(chunk: &[u8], position: u64) -> Result<()> {
    let line = LINE.as_bytes();
    for (index, byte) in chunk.iter().enumerate() {
        let at = position + index as u64;
        let expected = if at % 64 == 63 {
            b'\n'
        } else {
            line[(at % 64) as usize]
        };
        if *byte != expected {
            bail!("byte {at} of the output is {byte:#04x}, expected {expected:#04x}");
        }
    }
    Ok(())
}

/// One throughput run: how fast, and the CPU this process spent meanwhile.
#[derive(Debug, Clone, Copy)]
pub struct Throughput {
    /// MiB/s from the go keystroke until the client has all the bytes.
    pub mib_per_second: f64,
    /// CPU time of the whole bench process (the in-process services and the client, every
    /// thread) per MiB over the same interval, in ms. Processes outside it (the flood's `yes`
    /// and `head`, dockerd and containerd-shim) are not in it.
    pub cpu_ms_per_mib: f64,
}

/// One throughput run: from the go keystroke until the client has all `bytes`, checked.
pub async fn throughput_once(stack: &Stack, path: Path, bytes: u64) -> Result<Throughput> {
    if let Path::GatewayPython(backend, reads) = path {
        return throughput_python(stack, backend, reads, bytes).await;
    }
    let mut term = Term::open(stack, path, &flood_script(bytes)).await?;
    let result = async {
        let ready = term.read_until(b"R", 4096).await?;
        ensure!(
            ready == b"R",
            "unexpected output before the flood: {ready:?}"
        );
        let started = Instant::now();
        let cpu_before = process_cpu_seconds()?;
        term.send(b"\n").await?;
        let mut received = 0u64;
        while received < bytes {
            let chunk = term
                .recv()
                .await
                .with_context(|| format!("after {received} of {bytes} bytes"))?
                .with_context(|| format!("the terminal ended after {received} of {bytes} bytes"))?;
            let wanted = (bytes - received).min(chunk.len() as u64) as usize;
            verify_flood(&chunk[..wanted], received)?;
            ensure!(
                wanted == chunk.len(),
                "more output than the {bytes} bytes written"
            );
            received += chunk.len() as u64;
        }
        let elapsed = started.elapsed();
        let cpu = process_cpu_seconds()? - cpu_before;
        term.send(b"\n").await?;
        let mib = bytes as f64 / (1024.0 * 1024.0);
        Ok(Throughput {
            mib_per_second: mib / elapsed.as_secs_f64(),
            cpu_ms_per_mib: cpu * 1e3 / mib,
        })
    }
    .await;
    term.close(stack).await;
    result
}

/// The Python client of [`Path::GatewayPython`].
const PYTHON_CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/python/ws_flood.py");

/// The Python with `websockets` the bench runs its other client with: `PTYHUB_TEST_PYTHON`
/// (the venv `cargo xtask` prepares), else `python3`; why not, when it lacks the package.
pub fn python_client() -> Result<std::path::PathBuf, String> {
    let python = std::env::var_os("PTYHUB_TEST_PYTHON")
        .map_or_else(|| "python3".into(), std::path::PathBuf::from);
    match std::process::Command::new(&python)
        .args(["-c", "import websockets.asyncio.client"])
        .output()
    {
        Ok(output) if output.status.success() => Ok(python),
        Ok(output) => Err(format!(
            "{} cannot import websockets (`cargo xtask deps` installs it): {}",
            python.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )),
        Err(error) => Err(format!("cannot run {}: {error}", python.display())),
    }
}

/// The flood read through the gateway by the Python client in a process of its own, timed by
/// the client from its newline to the last byte. The CPU column is the bench process's (the
/// services') over the client's whole run, its start and connection included.
async fn throughput_python(
    stack: &Stack,
    backend: Backend,
    reads: Reads,
    bytes: u64,
) -> Result<Throughput> {
    let python = python_client().map_err(anyhow::Error::msg)?;
    let command = vec!["/bin/sh".to_owned(), "-c".to_owned(), flood_script(bytes)];
    let (instance, attach) = create_session(stack, backend, Screens::On, command).await?;
    let url = format!(
        "{}/ws/tool-instances/{instance}/terminal/{}?token={ADMIN_TOKEN}",
        stack.websocket_url(),
        attach.session_id
    );
    let mut client = tokio::process::Command::new(python);
    client
        .arg(PYTHON_CLIENT)
        .arg(&url)
        .arg(bytes.to_string())
        .kill_on_drop(true);
    if reads == Reads::Small {
        client.arg("--read-size").arg(SMALL_READ_BYTES.to_string());
    }
    // At 1 MiB/s at least, with the client's own 60 s bound on every frame inside it.
    let patience = READ_PATIENCE + Duration::from_secs(bytes >> 20);
    let result = async {
        let cpu_before = process_cpu_seconds()?;
        let output = tokio::time::timeout(patience, client.output())
            .await
            .map_err(|_| anyhow::anyhow!("the Python client took over {patience:?}"))?
            .context("run the Python client")?;
        let cpu = process_cpu_seconds()? - cpu_before;
        ensure!(
            output.status.success(),
            "the Python client failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
        let report: Value = serde_json::from_slice(&output.stdout).with_context(|| {
            format!(
                "the Python client printed {:?}",
                String::from_utf8_lossy(&output.stdout)
            )
        })?;
        let seconds = report["seconds"]
            .as_f64()
            .filter(|seconds| *seconds > 0.0)
            .context("the Python client's report has no seconds")?;
        let mib = bytes as f64 / (1024.0 * 1024.0);
        Ok(Throughput {
            mib_per_second: mib / seconds,
            cpu_ms_per_mib: cpu * 1e3 / mib,
        })
    }
    .await;
    close_session(stack, &instance, &attach.session_id).await;
    result
}

/// User and system CPU time of this process so far (every thread, living or ended), in seconds.
fn process_cpu_seconds() -> Result<f64> {
    cpu_seconds_of("self")
}

/// User and system CPU time so far of process `pid` (a number, or `self`), in seconds, from
/// `/proc/<pid>/stat` (clock ticks of 1/100 s: Linux reports them in `USER_HZ`, always 100).
pub(crate) fn cpu_seconds_of(pid: &str) -> Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
    parse_cpu_seconds(&stat).with_context(|| format!("no utime and stime in {path}"))
}

/// `utime + stime` in seconds from the text of `/proc/PID/stat` (fields 14 and 15, counted after
/// the command name, which is in parentheses and may contain spaces).
fn parse_cpu_seconds(stat: &str) -> Option<f64> {
    const USER_HZ: f64 = 100.0;
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first after the name: utime and stime are fields 14 and 15.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

/// Sends `keys` single keystrokes one at a time, each after the previous one's echo, after a
/// few unrecorded warm-up keys; the round trip of each.
pub async fn echo_series(term: &mut Term, keys: usize) -> Result<Vec<Duration>> {
    const WARM_UP: usize = 20;
    let alphabet = b"abcdefghijklmnopqrstuvwxyz";
    let mut samples = Vec::with_capacity(keys);
    for index in 0..keys + WARM_UP {
        let key = alphabet[index % alphabet.len()];
        let sent = Instant::now();
        term.send(&[key]).await?;
        let mut echoed = Vec::new();
        while echoed.is_empty() {
            let chunk = term.recv().await?.context("the terminal ended")?;
            echoed.extend_from_slice(&chunk);
        }
        let round_trip = sent.elapsed();
        ensure!(
            echoed == [key],
            "keystroke {:?} came back as {:?}",
            key as char,
            String::from_utf8_lossy(&echoed)
        );
        if index >= WARM_UP {
            samples.push(round_trip);
        }
    }
    Ok(samples)
}

/// Opens an echo terminal on `path` and waits until it is ready.
pub async fn open_echo(stack: &Stack, path: Path) -> Result<Term> {
    let mut term = Term::open(stack, path, ECHO_SCRIPT).await?;
    let ready = term.read_until(b"R", 4096).await?;
    ensure!(ready == b"R", "unexpected output before echo: {ready:?}");
    Ok(term)
}

/// One echo run of `keys` keystrokes in a fresh terminal.
pub async fn echo_once(stack: &Stack, path: Path, keys: usize) -> Result<Vec<Duration>> {
    let mut term = open_echo(stack, path).await?;
    let result = echo_series(&mut term, keys).await;
    term.close(stack).await;
    result
}

/// Liveness bound from ^C to the prompt.
const CTRL_C_PATIENCE: Duration = Duration::from_secs(30);

/// Ctrl-C under a `yes` flood with the controller reading: from the ^C keystroke until the
/// shell's prompt is back. `flood_bytes` of the flood arrive first.
pub async fn ctrl_c_once(stack: &Stack, path: Path, flood_bytes: usize) -> Result<Duration> {
    if !path.has_controlling_terminal() {
        bail!("{} has no controlling terminal for ^C", path.label());
    }
    let mut term = Term::open(stack, path, "exec /bin/sh -i").await?;
    let result = async {
        term.read_until(b"$ ", 64 * 1024).await?;
        term.send(b"yes\r").await?;
        let mut flooded = 0usize;
        while flooded < flood_bytes {
            let chunk = term.recv().await?.context("the terminal ended")?;
            flooded += chunk.len();
        }
        let sent = Instant::now();
        term.send(&[0x03]).await?;
        // The flood stops at ^C; what is buffered until then is far below these bounds. A
        // flood that goes on (SIGINT ignored by the shell's children) fails here.
        tokio::time::timeout(CTRL_C_PATIENCE, term.read_until(b"$ ", 256 << 20))
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "no prompt within {CTRL_C_PATIENCE:?} of ^C: does the session ignore SIGINT?"
                )
            })??;
        Ok(sent.elapsed())
    }
    .await;
    term.close(stack).await;
    result
}

/// Isolation: the echo of a quiet session, unloaded and then while another session of the
/// same backend floods with a controller that stopped reading. (unloaded, loaded) samples.
pub async fn isolation_once(
    stack: &Stack,
    backend: Backend,
    keys: usize,
) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let path = Path::Gateway(backend, Screens::On);
    let mut quiet = open_echo(stack, path).await?;
    let result = async {
        let unloaded = echo_series(&mut quiet, keys).await?;
        let flood = Term::open(stack, path, &format!("exec yes {LINE}")).await?;
        // The flood's controller never reads again: its socket, the gateway's and the
        // broker's buffers fill and the broker must stop reading that PTY only.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let loaded = echo_series(&mut quiet, keys).await;
        flood.close(stack).await;
        Ok((unloaded, loaded?))
    }
    .await;
    quiet.close(stack).await;
    result
}

/// Typing under a flood: the echo of a quiet session, idle, then while another session of the
/// same broker writes `flood_bytes` as fast as it can to a controller that reads every byte,
/// again and again until the keystrokes are done (so every keystroke meets a flood).
#[derive(Debug)]
pub struct TypingUnderFlood {
    pub idle: Vec<Duration>,
    pub flooded: Vec<Duration>,
    /// MiB a second of the floods read, each byte checked, while the keys were typed: what
    /// typing first (the broker's `--flood-rate-while-typing`) left the flood.
    pub flood_rate: f64,
}

/// An endless flood on demand: each newline asks for `bytes` more of the pattern.
fn repeated_flood_script(bytes: u64) -> String {
    format!("stty raw -echo; printf R; while read -r go; do yes {LINE} | head -c {bytes}; done")
}

/// Both sessions on `path`: the gateway's, or bare PTYs of this process for the floor (the
/// same floods and keystrokes with nothing of ptyhub's between them).
pub async fn typing_under_flood_once(
    stack: &Stack,
    path: Path,
    keys: usize,
    flood_bytes: u64,
) -> Result<TypingUnderFlood> {
    let mut quiet = open_echo(stack, path).await?;
    let result = async {
        let idle = echo_series(&mut quiet, keys).await?;
        let mut flood = Term::open(stack, path, &repeated_flood_script(flood_bytes)).await?;
        let ready = flood.read_until(b"R", 4096).await;
        if let Err(error) = ready {
            flood.close(stack).await;
            return Err(error.context("the flood's terminal"));
        }
        let typing_done = Arc::new(AtomicBool::new(false));
        let flood_read = Arc::new(AtomicU64::new(0));
        let reader = tokio::spawn(read_floods_until(
            flood,
            flood_bytes,
            typing_done.clone(),
            flood_read.clone(),
        ));
        let typing = Instant::now();
        let flooded = echo_series(&mut quiet, keys).await;
        let typed_for = typing.elapsed();
        let read_meanwhile = flood_read.load(Ordering::Relaxed);
        typing_done.store(true, Ordering::Relaxed);
        let (flood, read) = reader.await.context("the flood's reader panicked")?;
        flood.close(stack).await;
        read?;
        Ok(TypingUnderFlood {
            idle,
            flooded: flooded?,
            flood_rate: read_meanwhile as f64 / f64::from(1 << 20) / typed_for.as_secs_f64(),
        })
    }
    .await;
    quiet.close(stack).await;
    result
}

/// Reads floods of `bytes` back to back, each asked for as soon as the previous one is
/// complete, until `done` is set (the flood under way is read to its end); adds each byte
/// checked to `read`. The terminal back.
async fn read_floods_until(
    mut flood: Term,
    bytes: u64,
    done: Arc<AtomicBool>,
    read: Arc<AtomicU64>,
) -> (Term, Result<()>) {
    let result = async {
        while !done.load(Ordering::Relaxed) {
            flood.send(b"\n").await?;
            let mut received = 0u64;
            while received < bytes {
                let chunk = flood.recv().await?.with_context(|| {
                    format!("the flood ended after {received} of {bytes} bytes")
                })?;
                ensure!(
                    received + chunk.len() as u64 <= bytes,
                    "more output than the {bytes} bytes asked for"
                );
                verify_flood(&chunk, received)?;
                received += chunk.len() as u64;
                read.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
        }
        Ok(())
    }
    .await;
    (flood, result)
}

/// Session start through the gateway: REST create, WebSocket `connected`, first prompt byte.
#[derive(Debug, Clone, Copy)]
pub struct StartTimes {
    pub created: Duration,
    pub connected: Duration,
    pub first_byte: Duration,
}

pub async fn session_start_once(stack: &Stack, backend: Backend) -> Result<StartTimes> {
    let instance = stack
        .instance(backend)
        .context("that backend is not available")?
        .to_owned();
    let started = Instant::now();
    let response = stack
        .http
        .post(format!(
            "{}/api/v1/instances/{instance}/terminal/sessions",
            stack.gateway_url
        ))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({}))
        .send()
        .await?;
    let status = response.status();
    let body: Value = response.json().await?;
    ensure!(status.as_u16() == 201, "create session: {status} {body}");
    let session_id = body["id"].as_str().context("no session id")?.to_owned();
    let created = started.elapsed();
    let result = async {
        let mut term = connect_gateway(stack, &instance, &session_id, "").await?;
        let connected = started.elapsed();
        let first = term.recv().await?.context("the terminal ended")?;
        ensure!(!first.is_empty(), "empty first output");
        let first_byte = started.elapsed();
        Ok(StartTimes {
            created,
            connected,
            first_byte,
        })
    }
    .await;
    close_session(stack, &instance, &session_id).await;
    result
}

/// Session start without the gateway: session-api's `CreateSession` over gRPC (which spawns on
/// the broker), the broker's `Attach` with the ticket it returned, the first prompt byte. Beside
/// the gateway's figures, it shows which hop the time goes to.
pub async fn grpc_start_once(stack: &Stack, backend: Backend) -> Result<StartTimes> {
    let instance = stack
        .instance(backend)
        .context("that backend is not available")?
        .to_owned();
    let started = Instant::now();
    let attach = create_session_on(stack, &instance, Vec::new()).await?;
    let created = started.elapsed();
    let session_id = attach.session_id.clone();
    let result = async {
        let term = attach_broker(stack, instance.clone(), attach).await?;
        attached_times(term, started, created).await
    }
    .await;
    close_session(stack, &instance, &session_id).await;
    result
}

/// Session start on a broker alone (`client` at `endpoint`), local backend: `Spawn` of the
/// `sh -i` over gRPC, `Attach` with a ticket the bench signs itself, the first prompt byte; the
/// session killed after.
pub async fn broker_start_once(client: &BrokerClient, endpoint: &str) -> Result<StartTimes> {
    let session_id = uuid::Uuid::new_v4();
    let started = Instant::now();
    let request = broker_pb::SpawnRequest {
        session_id: session_id.to_string(),
        target: Some(broker_pb::Target {
            kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
        }),
        command: vec!["/bin/sh".to_owned(), "-i".to_owned()],
        env: [("PS1".to_owned(), "$ ".to_owned())].into_iter().collect(),
        cwd: String::new(),
        user: String::new(),
        size: Some(broker_pb::TerminalSize { cols: 80, rows: 24 }),
        ..Default::default()
    };
    tokio::time::timeout(READ_PATIENCE, client.clone().spawn(request))
        .await
        .context("spawn took too long")?
        .context("spawn")?;
    let created = started.elapsed();
    let result = async {
        let ticket = ticket_signing_key()?.sign(
            session_id,
            TicketRole::Controller,
            SystemTime::now() + Duration::from_secs(60),
        );
        let attach = session_pb::AttachTarget {
            session_id: session_id.to_string(),
            broker_endpoint: endpoint.to_owned(),
            ticket,
            ..Default::default()
        };
        let term = attach_broker_at(client, endpoint, String::new(), attach).await?;
        attached_times(term, started, created).await
    }
    .await;
    let kill = broker_pb::KillRequest {
        session_id: session_id.to_string(),
    };
    let _ = tokio::time::timeout(READ_PATIENCE, client.clone().kill(kill)).await;
    result
}

/// A bare `docker exec -it sh -i` in the same container: create, start, first output byte.
pub async fn docker_exec_start_once(stack: &Stack) -> Result<Duration> {
    let docker = stack.docker.as_ref().context("Docker is not available")?;
    let started = Instant::now();
    let exec = docker
        .engine
        .create_exec(
            &docker.container_id,
            CreateExecOptions {
                cmd: Some(vec!["/bin/sh".to_owned(), "-i".to_owned()]),
                attach_stdin: Some(true),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                tty: Some(true),
                env: Some(vec!["PS1=$ ".to_owned()]),
                ..Default::default()
            },
        )
        .await?;
    let StartExecResults::Attached { mut output, input } = docker
        .engine
        .start_exec(
            &exec.id,
            Some(StartExecOptions {
                detach: false,
                tty: true,
                output_capacity: None,
            }),
        )
        .await?
    else {
        bail!("the exec started detached");
    };
    let first = tokio::time::timeout(crate::term::READ_PATIENCE, output.next())
        .await
        .context("no prompt from docker exec")?
        .context("docker exec ended")??;
    let elapsed = started.elapsed();
    ensure!(!first.into_bytes().is_empty(), "empty first output");
    // Closing stdin ends the shell.
    drop(input);
    Ok(elapsed)
}

/// A bare local PTY running `sh -i`: spawn until the first prompt byte.
pub async fn bare_pty_start_once(stack: &Stack) -> Result<Duration> {
    let started = Instant::now();
    let mut term = Term::open(stack, Path::BarePty, "exec /bin/sh -i").await?;
    let first = term.recv().await?.context("the terminal ended")?;
    let elapsed = started.elapsed();
    ensure!(!first.is_empty(), "empty first output");
    term.close(stack).await;
    Ok(elapsed)
}

/// A start's times once its terminal is attached: connected now, then the first output byte.
async fn attached_times(mut term: Term, started: Instant, created: Duration) -> Result<StartTimes> {
    let connected = started.elapsed();
    let first = term.recv().await?.context("the terminal ended")?;
    ensure!(!first.is_empty(), "empty first output");
    Ok(StartTimes {
        created,
        connected,
        first_byte: started.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_read_after_a_command_name_with_spaces_and_parentheses() {
        // pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
        // utime stime ...
        let stat = "42 (tokio (x) y) S 1 42 42 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 9 0";
        assert_eq!(parse_cpu_seconds(stat), Some(3.0));
        assert_eq!(parse_cpu_seconds("42 (bench) S 1"), None);
        assert!(process_cpu_seconds().expect("this process's stat") >= 0.0);
    }

    #[test]
    fn the_flood_pattern_is_checked_across_chunks() {
        let mut stream = Vec::new();
        for _ in 0..3 {
            stream.extend_from_slice(LINE.as_bytes());
            stream.push(b'\n');
        }
        assert!(verify_flood(&stream[..70], 0).is_ok());
        assert!(verify_flood(&stream[70..], 70).is_ok());
        assert!(verify_flood(&stream[1..], 0).is_err());
        let mut broken = stream.clone();
        broken[100] = b'!';
        assert!(verify_flood(&broken, 0).is_err());
    }
}
