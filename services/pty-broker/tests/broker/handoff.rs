//! Hand-offs between real `pty-broker` processes (`--take-over`): attached clients resume by
//! offset on the next process with every byte exactly once, the processes keep their pids and
//! still deliver their exit codes, a shell's commands, first-prompt hold, recorded output, control
//! mode, standing requests, reservation and grant timeout go along; and a successor killed at any step of the hand-off leaves
//! every session with exactly one owner (the old process, or the crash records for the next
//! start when the old one had already let go).

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, bail, ensure};
use bytes::Bytes;
use ptyhub_attach_ticket::{TicketRole, TicketSigningKey};
use ptyhub_proto::broker::v1 as pb;
use ptyhub_proto::broker::v1::pty_broker_client::PtyBrokerClient;
use tokio::sync::{RwLock, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use crate::support::docker::DockerFixture;
use crate::support::{PATIENCE, POLL_INTERVAL, SERVICE_TOKEN, TICKET_PUBLIC_KEY, authorized};

/// Prints [`FLOOD_READY`] with echo off and waits for a line, then prints numbered lines as fast
/// as it is read until the stop file appears, then exits 3. Its reader sends the line once
/// attached at offset 0: a flood started at spawn could fill the ring before a reader on a loaded
/// machine attached, and its first lines would be gone before anyone asked for them.
const FLOOD: &str = r#"stty -echo; printf R; read -r go; i=0; while [ ! -e "$STOP" ]; do echo "$i"; i=$((i+1)); done; exit 3"#;
/// What [`FLOOD`] prints before it waits.
const FLOOD_READY: &[u8] = b"R";

/// A `pty-broker` process.
struct BrokerProcess {
    child: Child,
    /// The process's JSON log lines, from the one after "pty-broker serving" on.
    log: mpsc::UnboundedReceiver<serde_json::Value>,
    _secrets: tempfile::TempDir,
}

/// Where every broker of one test listens: the address the first one bound.
#[derive(Clone)]
struct Address(String);

impl BrokerProcess {
    /// Starts a broker on `data_dir`, taking over from the one listening there when `take_over`;
    /// with `stop_at`, the hand-off test hook stops it at that step (and this returns at once).
    fn start(
        data_dir: &Path,
        take_over: bool,
        stop_at: Option<&str>,
    ) -> anyhow::Result<(Self, Option<Address>)> {
        Self::start_with(data_dir, take_over, stop_at, &[])
    }

    /// [`BrokerProcess::start`] with `extra` arguments.
    fn start_with(
        data_dir: &Path,
        take_over: bool,
        stop_at: Option<&str>,
        extra: &[&std::ffi::OsStr],
    ) -> anyhow::Result<(Self, Option<Address>)> {
        let secrets = tempfile::tempdir()?;
        let token_file = secrets.path().join("session-api-token");
        std::fs::write(&token_file, format!("{SERVICE_TOKEN}\n"))?;
        let ticket_file = secrets.path().join("ticket-public-key.pem");
        std::fs::write(&ticket_file, TICKET_PUBLIC_KEY)?;
        let mut command = Command::new(env!("CARGO_BIN_EXE_pty-broker"));
        command
            .args([
                "--listen",
                "127.0.0.1:0",
                "--log-json",
                "--backends",
                "local,docker",
                // The test image's sessions run as root.
                "--allow-root",
            ])
            .arg("--data-dir")
            .arg(data_dir)
            .args(extra)
            .env("PTYHUB_BROKER_SESSION_API_TOKEN_FILE", &token_file)
            .env("PTYHUB_BROKER_TICKET_PUBLIC_KEY_FILE", &ticket_file)
            .env_remove(pty_broker::handoff::STOP_AT_VARIABLE)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if take_over {
            command
                .arg("--take-over")
                .arg(data_dir.join(pty_broker::handoff::HANDOFF_SOCKET));
        }
        if let Some(step) = stop_at {
            command.env(pty_broker::handoff::STOP_AT_VARIABLE, step);
        }
        let mut child = command.spawn().context("start pty-broker")?;
        let stdout = child.stdout.take().context("broker stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let (log_lines, log) = mpsc::unbounded_channel();
        let broker = Self {
            child,
            log,
            _secrets: secrets,
        };
        // Read to the end, so that the process never waits on a full pipe, and kept for a test
        // that waits for a line.
        let keep_the_rest = move |lines: std::io::Lines<BufReader<std::process::ChildStdout>>| {
            std::thread::spawn(move || {
                for line in lines.map_while(Result::ok) {
                    if let Ok(line) = serde_json::from_str(&line) {
                        let _ = log_lines.send(line);
                    }
                }
            });
        };
        if stop_at.is_some() {
            keep_the_rest(lines);
            return Ok((broker, None));
        }
        let address = loop {
            let Some(line) = lines.next() else {
                bail!("pty-broker exited before serving");
            };
            let line: serde_json::Value = serde_json::from_str(&line?)?;
            if line["fields"]["message"] == "pty-broker serving" {
                break line["fields"]["address"]
                    .as_str()
                    .context("serving line without address")?
                    .to_owned();
            }
        };
        keep_the_rest(lines);
        Ok((broker, Some(Address(format!("http://{address}")))))
    }

    /// Waits, up to [`PATIENCE`], for the log line whose message is `message`.
    async fn logged(&mut self, message: &str) -> anyhow::Result<serde_json::Value> {
        tokio::time::timeout(PATIENCE, async {
            while let Some(line) = self.log.recv().await {
                if line["fields"]["message"] == message {
                    return Ok(line);
                }
            }
            bail!("the broker's log ended without {message:?}")
        })
        .await
        .with_context(|| format!("the broker never logged {message:?}"))?
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the process to exit on its own and returns whether it succeeded.
    async fn exited(&mut self) -> anyhow::Result<bool> {
        let status = ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || {
            let status = self.child.try_wait().ok().flatten();
            async move { status }
        })
        .await
        .context("the old broker did not exit")?;
        Ok(status.success())
    }

    fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits until the hand-off test hook has stopped the process.
    async fn stopped(&self) -> anyhow::Result<()> {
        let pid = self.pid();
        ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || async move {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let state = stat[stat.rfind(')')? + 1..].split_whitespace().next()?;
            (state == "T").then_some(())
        })
        .await
        .context("the successor never reached its step")
    }

    fn kill_hard(&mut self) -> anyhow::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn control(address: &Address) -> anyhow::Result<PtyBrokerClient<tonic::transport::Channel>> {
    PtyBrokerClient::connect(address.0.clone())
        .await
        .context("connect to the broker")
}

/// Where a test's sessions run, and the file whose appearance stops the floods there.
#[derive(Clone, Copy)]
enum On<'a> {
    Local(&'a Path),
    Docker(&'a DockerFixture),
}

/// Where a flood in a container looks for its stop file.
const CONTAINER_STOP: &str = "/tmp/stop-flooding";

impl On<'_> {
    fn target(self) -> pb::Target {
        let kind = match self {
            On::Local(_) => pb::target::Kind::Local(pb::LocalTarget {}),
            On::Docker(fixture) => pb::target::Kind::Docker(pb::DockerTarget {
                container: fixture.name().to_owned(),
            }),
        };
        pb::Target { kind: Some(kind) }
    }

    fn stop_file(self) -> String {
        match self {
            On::Local(stop) => stop.display().to_string(),
            On::Docker(_) => CONTAINER_STOP.to_owned(),
        }
    }

    async fn stop_floods(self) -> anyhow::Result<()> {
        match self {
            On::Local(stop) => std::fs::write(stop, b"")?,
            On::Docker(fixture) => {
                fixture.exec_output(&["touch", CONTAINER_STOP]).await;
            }
        }
        Ok(())
    }
}

async fn spawn_sh(address: &Address, script: &str, on: On<'_>) -> anyhow::Result<pb::SessionInfo> {
    let session = control(address)
        .await?
        .spawn(authorized(pb::SpawnRequest {
            session_id: uuid::Uuid::new_v4().to_string(),
            target: Some(on.target()),
            command: vec!["sh".into(), "-c".into(), script.into()],
            env: [("STOP".to_owned(), on.stop_file())].into(),
            ..Default::default()
        }))
        .await?
        .into_inner()
        .session
        .context("spawn answered without a session")?;
    Ok(session)
}

/// Every live session's pid, by id.
async fn pids(address: &Address) -> anyhow::Result<Vec<(String, u32)>> {
    let listed = control(address)
        .await?
        .list(authorized(pb::ListRequest {}))
        .await?;
    Ok(sorted_pids(listed.into_inner()))
}

/// The listed sessions' pids, by id, in id order.
fn sorted_pids(listed: pb::ListResponse) -> Vec<(String, u32)> {
    let mut sessions: Vec<(String, u32)> = listed
        .sessions
        .into_iter()
        .map(|session| (session.session_id, session.pid))
        .collect();
    sessions.sort();
    sessions
}

/// A controller that reattaches with `since` whenever its stream ends with UNAVAILABLE, and
/// checks that every output frame starts exactly where the previous one ended.
struct ResumingClient {
    address: Address,
    session_id: String,
    ticket_key: TicketSigningKey,
    next_offset: u64,
    output: Vec<u8>,
    stream: Option<(mpsc::Sender<pb::ClientFrame>, Streaming<pb::ServerFrame>)>,
    reattaches: usize,
}

impl ResumingClient {
    fn new(address: Address, session_id: String) -> Self {
        Self {
            address,
            session_id,
            ticket_key: crate::support::ticket_signing_key(),
            next_offset: 0,
            output: Vec::new(),
            stream: None,
            reattaches: 0,
        }
    }

    /// Attaches (again) at the next offset, retrying while the broker hands over.
    async fn attach(&mut self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            match self.try_attach().await {
                Ok(stream) => {
                    self.stream = Some(stream);
                    return Ok(());
                }
                Err(error) if tokio::time::Instant::now() < deadline => {
                    tracing::debug!(%error, "reattach failed; trying again");
                    tokio::time::sleep(POLL_INTERVAL).await;
                }
                Err(error) => return Err(error.context("could not reattach in time")),
            }
        }
    }

    async fn try_attach(
        &self,
    ) -> anyhow::Result<(mpsc::Sender<pb::ClientFrame>, Streaming<pb::ServerFrame>)> {
        let mut client = control(&self.address).await?;
        let (sender, receiver) = mpsc::channel(16);
        sender
            .send(pb::ClientFrame {
                frame: Some(pb::client_frame::Frame::Hello(pb::Hello {
                    ticket: self.ticket_key.sign(
                        uuid::Uuid::parse_str(&self.session_id)?,
                        TicketRole::Controller,
                        SystemTime::now() + Duration::from_secs(300),
                    ),
                    session_id: self.session_id.clone(),
                    role: pb::Role::Controller as i32,
                    size: None,
                    since: Some(self.next_offset),
                    snapshot: false,
                    present_only: false,
                })),
            })
            .await?;
        let mut inbound = client
            .attach(ReceiverStream::new(receiver))
            .await?
            .into_inner();
        match inbound.message().await? {
            Some(pb::ServerFrame {
                frame: Some(pb::server_frame::Frame::Connected(connected)),
            }) => {
                ensure!(
                    connected.offset == self.next_offset,
                    "resumed at {} instead of {}",
                    connected.offset,
                    self.next_offset
                );
                Ok((sender, inbound))
            }
            other => bail!("expected connected, got {other:?}"),
        }
    }

    /// Drops the current stream (one a hand-off ended), to attach afresh at the next use.
    fn reattach_next(&mut self) {
        if self.stream.take().is_some() {
            self.reattaches += 1;
        }
    }

    async fn send_input(&mut self, data: impl Into<Bytes>) -> anyhow::Result<()> {
        if self.stream.is_none() {
            self.attach().await?;
        }
        let (sender, inbound) = self.stream.as_mut().expect("attached");
        let sent = sender
            .send(pb::ClientFrame {
                frame: Some(pb::client_frame::Frame::Input(pb::Input {
                    data: data.into(),
                    input_id: None,
                })),
            })
            .await;
        if sent.is_err() {
            let why = inbound.message().await;
            bail!("the attach stream closed: {why:?}");
        }
        Ok(())
    }

    /// Reads until the output ends with `suffix` (`None`: until the process exits); returns the
    /// exit status when it came.
    async fn read(&mut self, suffix: Option<&[u8]>) -> anyhow::Result<Option<pb::ExitStatus>> {
        loop {
            if let Some(suffix) = suffix
                && self.output.ends_with(suffix)
            {
                return Ok(None);
            }
            if self.stream.is_none() {
                self.attach().await?;
            }
            let (_, inbound) = self.stream.as_mut().expect("attached");
            let message = tokio::time::timeout(PATIENCE, inbound.message())
                .await
                .context("no frame in time")?;
            let frame = match message {
                Ok(Some(frame)) => frame.frame,
                Ok(None) => bail!("the stream ended without an exit"),
                Err(status) if status.code() == tonic::Code::Unavailable => {
                    self.stream = None;
                    self.reattaches += 1;
                    continue;
                }
                Err(status) => bail!("the stream failed: {status}"),
            };
            match frame {
                Some(pb::server_frame::Frame::Output(output)) => {
                    ensure!(
                        output.offset == self.next_offset,
                        "output at {} where {} was next: a byte lost or repeated",
                        output.offset,
                        self.next_offset
                    );
                    self.next_offset += output.data.len() as u64;
                    self.output.extend_from_slice(&output.data);
                }
                Some(pb::server_frame::Frame::Gap(gap)) => bail!("a gap of {} bytes", gap.lost),
                Some(pb::server_frame::Frame::Exit(exit)) => return Ok(Some(exit)),
                _ => {}
            }
        }
    }
}

/// The flood's output is [`FLOOD_READY`], then the numbers from 0 on, each once, in order.
fn check_flood(output: &[u8]) -> anyhow::Result<usize> {
    let output = output
        .strip_prefix(FLOOD_READY)
        .context("the flood did not start with its ready mark")?;
    let text = std::str::from_utf8(output)?;
    let lines: Vec<&str> = text.split_terminator("\r\n").collect();
    for (index, line) in lines.iter().enumerate() {
        ensure!(
            *line == index.to_string(),
            "line {index} is {line:?} (the lines around it: {:?})",
            &lines[index.saturating_sub(2)..(index + 2).min(lines.len())]
        );
    }
    Ok(lines.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_sessions_survive_three_hand_offs_with_every_byte_once() -> anyhow::Result<()> {
    ptyhub_test_support::init_test_logging();
    survive_three_hand_offs(None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_and_local_sessions_survive_three_hand_offs_with_every_byte_once()
-> anyhow::Result<()> {
    let Some(fixture) = DockerFixture::start().await else {
        return Ok(());
    };
    survive_three_hand_offs(Some(&fixture)).await
}

/// Per backend, flooding and echoing sessions (each with a resuming gRPC controller) through
/// three hand-offs: every byte once, the same pids, the exit codes delivered.
async fn survive_three_hand_offs(docker: Option<&DockerFixture>) -> anyhow::Result<()> {
    const FLOODING: usize = 10;
    const ECHOING: usize = 10;
    let data_dir = tempfile::tempdir()?;
    let stop = data_dir.path().join("stop-flooding");
    let mut places = vec![On::Local(&stop)];
    places.extend(docker.map(On::Docker));
    let (mut broker, address) = BrokerProcess::start(data_dir.path(), false, None)?;
    let address = address.expect("serving");

    let mut flooders = Vec::new();
    // An echoing client types a line only while no hand-off runs (input in flight when a stream
    // ends is not retried, as after any reconnect), and waits for the PTY's echo and cat's.
    let typing = Arc::new(RwLock::new(0usize));
    let (stop_typing, typing_stopped) = tokio::sync::watch::channel(false);
    let mut echoers = Vec::new();
    for &on in &places {
        for _ in 0..FLOODING {
            let session = spawn_sh(&address, FLOOD, on).await?;
            let mut client = ResumingClient::new(address.clone(), session.session_id);
            flooders.push(tokio::spawn(async move {
                client.read(Some(FLOOD_READY)).await?;
                client.send_input(Bytes::from_static(b"go\n")).await?;
                let exit = client.read(None).await?;
                anyhow::Ok((client, exit))
            }));
        }
        for _ in 0..ECHOING {
            let session = spawn_sh(&address, "exec cat", on).await?;
            let mut client = ResumingClient::new(address.clone(), session.session_id);
            let typing = Arc::clone(&typing);
            let stop_typing = typing_stopped.clone();
            echoers.push(tokio::spawn(async move {
                let mut expected = Vec::new();
                let mut lines = 0;
                let mut seen_round = 0;
                while !*stop_typing.borrow() {
                    let round = typing.read().await;
                    // A hand-off since the last line ended the stream: a line sent on it now
                    // would be lost, so attach again first.
                    if *round != seen_round {
                        seen_round = *round;
                        client.reattach_next();
                    }
                    let line = format!("line {lines}\r\n");
                    client.send_input(format!("line {lines}\n")).await?;
                    expected.extend_from_slice(line.as_bytes());
                    expected.extend_from_slice(line.as_bytes());
                    client.read(Some(&expected)).await?;
                    lines += 1;
                }
                if *typing.read().await != seen_round {
                    client.reattach_next();
                }
                client.send_input(Bytes::from_static(b"\x04")).await?;
                let exit = client.read(None).await?;
                ensure!(
                    client.output == expected,
                    "the echoes differ from what was typed"
                );
                anyhow::Ok((client, exit, lines))
            }));
        }
    }
    let before = pids(&address).await?;
    ensure!(
        before.len() == (FLOODING + ECHOING) * places.len(),
        "{before:?}"
    );

    for round in 1..=3 {
        let mut quiet = typing.write().await;
        *quiet = round;
        let (next, next_address) = BrokerProcess::start(data_dir.path(), true, None)?;
        let next_address = next_address.expect("serving");
        ensure!(
            next_address.0 == address.0,
            "round {round}: the next process serves {} instead of {}",
            next_address.0,
            address.0
        );
        ensure!(
            broker.exited().await?,
            "round {round}: the old broker failed"
        );
        drop(quiet);
        broker = next;
        let after = pids(&address).await?;
        ensure!(
            after == before,
            "round {round}: sessions or pids changed: {after:?}"
        );
    }

    stop_typing.send_replace(true);
    for &on in &places {
        on.stop_floods().await?;
    }
    for flooder in flooders {
        let (client, exit) = flooder.await??;
        let exit = exit.context("no exit")?;
        ensure!(exit.code == 3, "the flood exited with {exit:?}");
        let lines = check_flood(&client.output)?;
        ensure!(lines > 0, "the flood printed nothing");
        ensure!(
            client.reattaches >= 3,
            "a flooding client reattached {} times over three hand-offs",
            client.reattaches
        );
    }
    for echoer in echoers {
        let (_, exit, lines) = echoer.await??;
        ensure!(exit.context("no exit")?.code == 0);
        ensure!(lines > 0, "nothing was typed");
    }
    drop(broker);
    Ok(())
}

/// Which steps leave the old process owning the sessions: it let go at `accepted`.
const STEPS: [(&str, bool); 4] = [
    ("hello", true),
    ("received", true),
    ("accepted", false),
    ("committed", false),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_killed_at_any_step_leaves_every_session_one_owner() -> anyhow::Result<()> {
    ptyhub_test_support::init_test_logging();
    let unused = tempfile::tempdir()?;
    killed_at_each_step(On::Local(&unused.path().join("unused"))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_killed_at_any_step_leaves_every_docker_session_one_owner() -> anyhow::Result<()>
{
    let Some(fixture) = DockerFixture::start().await else {
        return Ok(());
    };
    killed_at_each_step(On::Docker(&fixture)).await
}

/// The live processes of `session`: its leader's Unix session (local), or the processes that
/// carry its marker in their environment (in the container).
async fn session_members(on: On<'_>, session: &pb::SessionInfo) -> Vec<u32> {
    match on {
        On::Local(_) => {
            pty_broker::runtime::local::unix_session_members(session.pid).unwrap_or_default()
        }
        On::Docker(fixture) => {
            let script = format!(
                // A zombie's environment reads empty: only live processes match.
                "for p in /proc/[0-9]*; do grep -q '{}={}' $p/environ 2>/dev/null && echo ${{p#/proc/}}; done; true",
                pty_broker::runtime::docker::SESSION_MARKER_VARIABLE,
                session.session_id
            );
            fixture
                .exec_output(&["sh", "-c", &script])
                .await
                .lines()
                .filter_map(|line| line.trim().parse().ok())
                .collect()
        }
    }
}

/// A successor stopped by the test hook at each step and SIGKILLed there.
async fn killed_at_each_step(on: On<'_>) -> anyhow::Result<()> {
    for (step, old_keeps) in STEPS {
        let data_dir = tempfile::tempdir()?;
        let (mut old, address) = BrokerProcess::start(data_dir.path(), false, None)?;
        let address = address.expect("serving");
        let stubborn = spawn_sh(&address, "trap '' HUP TERM; cat; sleep 600", on).await?;
        let mut client = ResumingClient::new(address.clone(), stubborn.session_id.clone());
        client.send_input(Bytes::from_static(b"before\n")).await?;
        client.read(Some(b"before\r\nbefore\r\n")).await?;

        let (mut successor, _) = BrokerProcess::start(data_dir.path(), true, Some(step))?;
        successor.stopped().await?;
        successor.kill_hard()?;

        if old_keeps {
            // The old process thaws the session and serves on, same process, same bytes.
            client.reattach_next();
            client.send_input(Bytes::from_static(b"after\n")).await?;
            client
                .read(Some(b"before\r\nbefore\r\nafter\r\nafter\r\n"))
                .await
                .with_context(|| format!("step {step}: the old broker lost the session"))?;
            ensure!(old.is_running(), "step {step}: the old broker exited");
            ensure!(
                pids(&address).await? == vec![(stubborn.session_id.clone(), stubborn.pid)],
                "step {step}: the session changed"
            );
        } else {
            ensure!(old.exited().await?, "step {step}: the old broker failed");
            ensure!(
                !session_members(on, &stubborn).await.is_empty(),
                "step {step}: the session ended with its owner"
            );
            // Nobody owns it: the next start ends it from its crash record.
            let (fresh, _) = BrokerProcess::start(data_dir.path(), false, None)?;
            let ended = ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || async {
                session_members(on, &stubborn)
                    .await
                    .is_empty()
                    .then_some(())
            })
            .await;
            ensure!(
                ended.is_some(),
                "step {step}: an orphan is left: {:?}",
                session_members(on, &stubborn).await
            );
            drop(fresh);
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_with_another_broker_id_is_refused_before_anything_moves() -> anyhow::Result<()>
{
    ptyhub_test_support::init_test_logging();
    let data_dir = tempfile::tempdir()?;
    let stop = data_dir.path().join("unused");
    let (mut old, address) = BrokerProcess::start(data_dir.path(), false, None)?;
    let address = address.expect("serving");
    let session = spawn_sh(&address, "exec cat", On::Local(&stop)).await?;
    let mut client = ResumingClient::new(address.clone(), session.session_id.clone());
    client.send_input(Bytes::from_static(b"one\n")).await?;
    client.read(Some(b"one\r\none\r\n")).await?;

    let output = Command::new(env!("CARGO_BIN_EXE_pty-broker"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--backends",
            "local",
            "--broker-id",
            "another",
        ])
        .arg("--data-dir")
        .arg(data_dir.path())
        .arg("--take-over")
        .arg(data_dir.path().join(pty_broker::handoff::HANDOFF_SOCKET))
        .env("PTYHUB_BROKER_SESSION_API_TOKEN", SERVICE_TOKEN)
        .env("PTYHUB_BROKER_TICKET_PUBLIC_KEY", TICKET_PUBLIC_KEY)
        .stdin(Stdio::null())
        .output()?;
    ensure!(!output.status.success(), "the successor started");
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(
        stderr.contains("refused") && stderr.contains("broker id"),
        "the refusal does not say why: {stderr}"
    );
    // Nothing moved: the client's stream was never ended.
    client.send_input(Bytes::from_static(b"two\n")).await?;
    client.read(Some(b"one\r\none\r\ntwo\r\ntwo\r\n")).await?;
    ensure!(
        client.reattaches == 0,
        "the stream was ended by a refused hand-off"
    );
    ensure!(old.is_running());
    Ok(())
}

/// A recorded session handed over twice: one recording, published once at the close, with one
/// header, every byte the client saw and every line typed, in time order, and a marker where
/// each next process took over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_goes_on_across_hand_offs_as_one_file() -> anyhow::Result<()> {
    ptyhub_test_support::init_test_logging();
    let data_dir = tempfile::tempdir()?;
    let store = tempfile::tempdir()?;
    let recording_args = ["--recordings".as_ref(), store.path().as_os_str()];
    let (mut broker, address) =
        BrokerProcess::start_with(data_dir.path(), false, None, &recording_args)?;
    let address = address.expect("serving");
    let session = control(&address)
        .await?
        .spawn(authorized(pb::SpawnRequest {
            session_id: uuid::Uuid::new_v4().to_string(),
            target: Some(pb::Target {
                kind: Some(pb::target::Kind::Local(pb::LocalTarget {})),
            }),
            command: vec!["sh".into(), "-c".into(), "exec cat".into()],
            env: [("TERM".to_owned(), "xterm-256color".to_owned())].into(),
            size: Some(pb::TerminalSize { cols: 80, rows: 24 }),
            record: pb::RecordMode::OutputAndInput as i32,
            recording_title: "handed".to_owned(),
            ..Default::default()
        }))
        .await?
        .into_inner()
        .session
        .context("spawn answered without a session")?;
    let mut client = ResumingClient::new(address.clone(), session.session_id.clone());
    let mut expected = Vec::new();
    let mut line = Vec::new();
    // "€" is three bytes: split across two inputs, it is held back by the recorder when a
    // hand-off comes between them.
    let typed: [&[u8]; 5] = [b"one\n", b"two \xe2\x82", b"\xac\n", b"three\n", b"four\n"];
    for (index, input) in typed.iter().enumerate() {
        if index == 2 || index == 4 {
            let (next, next_address) =
                BrokerProcess::start_with(data_dir.path(), true, None, &recording_args)?;
            ensure!(next_address.expect("serving").0 == address.0);
            ensure!(broker.exited().await?, "the old broker failed");
            broker = next;
            client.reattach_next();
        }
        client.send_input(Bytes::copy_from_slice(input)).await?;
        // The PTY echoes what it is given at once (a newline as CR LF); cat writes the line
        // back once it is whole. Waiting for the echo keeps input out of a hand-off's way.
        match input.strip_suffix(b"\n") {
            Some(rest) => {
                expected.extend_from_slice(rest);
                expected.extend_from_slice(b"\r\n");
                line.extend_from_slice(rest);
                expected.append(&mut line);
                expected.extend_from_slice(b"\r\n");
            }
            None => {
                expected.extend_from_slice(input);
                line.extend_from_slice(input);
            }
        }
        client.read(Some(&expected)).await?;
    }
    ensure!(
        client.output == expected,
        "the echoes differ from what was typed"
    );
    control(&address)
        .await?
        .kill(authorized(pb::KillRequest {
            session_id: session.session_id.clone(),
        }))
        .await?;

    let path = store.path().join(format!("{}.cast", session.session_id));
    let published = ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || {
        let path = path.clone();
        async move { std::fs::read(&path).ok() }
    })
    .await
    .with_context(|| format!("{} was never published", path.display()))?;
    let cast = ptyhub_test_support::asciicast::Cast::parse(&published)?;
    ensure!(cast.title.as_deref() == Some("handed"), "{cast:?}");
    ensure!(
        cast.output().starts_with(&expected),
        "the recording's output differs from what the client saw:\n{:?}\n{:?}",
        String::from_utf8_lossy(&cast.output()),
        String::from_utf8_lossy(&expected)
    );
    ensure!(
        cast.input() == "one\ntwo €\nthree\nfour\n",
        "input events: {:?}",
        cast.input()
    );
    let markers: Vec<_> = cast
        .events_of("m")
        .map(|event| event.data.clone())
        .collect();
    ensure!(
        markers
            == [
                "ptyhub: taken over by the next broker process",
                "ptyhub: taken over by the next broker process"
            ],
        "markers {markers:?}"
    );
    let times: Vec<f64> = cast.events.iter().map(|event| event.time).collect();
    ensure!(
        times.windows(2).all(|pair| pair[0] <= pair[1]),
        "times go backwards: {times:?}"
    );
    // Nothing is left in the spool (the broker removes its file after the upload the test saw,
    // so wait for that), and the store holds this one file.
    let spool = data_dir.path().join("recording-spool");
    let spool_empty = ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || {
        let empty = std::fs::read_dir(&spool).is_ok_and(|mut entries| entries.next().is_none());
        async move { empty.then_some(()) }
    })
    .await;
    ensure!(spool_empty.is_some(), "the spool still holds a file");
    ensure!(std::fs::read_dir(store.path())?.count() == 1);
    drop(broker);
    Ok(())
}

/// A program in one of the broker's own terminals (same user, same host) that connects to the
/// hand-off socket is refused before it can say anything: it can neither take the sessions nor
/// freeze them. It hears why, and the sessions go on. A successor started outside any session
/// still takes over afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_of_a_session_may_not_take_over_nor_freeze_the_sessions() -> anyhow::Result<()> {
    ptyhub_test_support::init_test_logging();
    let data_dir = tempfile::tempdir()?;
    let answer_dir = tempfile::tempdir()?;
    let answer = answer_dir.path().join("answer");
    let stop = data_dir.path().join("unused");
    let (mut old, address) = BrokerProcess::start(data_dir.path(), false, None)?;
    let address = address.expect("serving");
    let bystander = spawn_sh(&address, "exec cat", On::Local(&stop)).await?;
    // Connects as a successor would and writes down the first answer, a length-prefixed JSON
    // message, without sending anything itself.
    let client = answer_dir.path().join("successor.py");
    std::fs::write(
        &client,
        "import socket, struct, sys, time\n\
         s = socket.socket(socket.AF_UNIX)\n\
         s.connect(sys.argv[1])\n\
         data = b''\n\
         while True:\n\
         \x20   chunk = s.recv(65536)\n\
         \x20   if not chunk:\n\
         \x20       break\n\
         \x20   data += chunk\n\
         \x20   if len(data) >= 4 and len(data) >= 4 + struct.unpack('>I', data[:4])[0]:\n\
         \x20       break\n\
         open(sys.argv[2], 'wb').write(data[4:])\n\
         time.sleep(600)\n",
    )?;
    let script = format!(
        "exec python3 {} {} {} 2>{}.err",
        client.display(),
        data_dir
            .path()
            .join(pty_broker::handoff::HANDOFF_SOCKET)
            .display(),
        answer.display(),
        answer.display()
    );
    spawn_sh(&address, &script, On::Local(&stop)).await?;
    let heard = ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || {
        let text = std::fs::read_to_string(&answer).ok();
        async move { text.filter(|text| text.ends_with('}')) }
    })
    .await
    .with_context(|| {
        let errors = std::fs::read_to_string(answer.with_extension("err")).unwrap_or_default();
        format!("the session's process heard no answer: {errors}")
    })?;
    let heard: serde_json::Value = serde_json::from_str(&heard)?;
    ensure!(heard["answer"] == "refused", "{heard}");
    ensure!(
        heard["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("a process of one of this broker's sessions")),
        "{heard}"
    );
    // Nothing was frozen: the broker serves both sessions as before.
    let listed = pids(&address).await?;
    ensure!(listed.len() == 2, "{listed:?}");
    ensure!(
        listed
            .iter()
            .any(|(id, pid)| *id == bystander.session_id && *pid == bystander.pid),
        "{listed:?}"
    );

    // A successor from outside every session still takes over.
    let (mut new, _) = BrokerProcess::start(data_dir.path(), true, None)?;
    ensure!(old.exited().await?, "the old broker failed");
    ensure!(pids(&address).await? == listed, "the sessions did not move");
    // SIGTERM: a clean stop, which ends the sessions.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(new.pid())?),
        nix::sys::signal::Signal::SIGTERM,
    )?;
    ensure!(new.exited().await?, "the successor failed to stop");
    Ok(())
}

/// The commands a shell ran, and what its terminal is doing, go with a hand-off: the next
/// process lists the same commands, a wait for the prompt after the last command's input sees
/// the prompt that came before the hand-off, and `run` types the next command, which gets the
/// next id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shells_commands_go_on_across_a_hand_off() -> anyhow::Result<()> {
    ptyhub_test_support::init_test_logging();
    let data_dir = tempfile::tempdir()?;
    let (broker, address) = BrokerProcess::start(data_dir.path(), false, None)?;
    let address = address.expect("serving");
    let session_id = control(&address)
        .await?
        .spawn(authorized(pb::SpawnRequest {
            session_id: uuid::Uuid::new_v4().to_string(),
            target: Some(pb::Target {
                kind: Some(pb::target::Kind::Local(pb::LocalTarget {})),
            }),
            command: vec!["/bin/sh".into()],
            shell_integration: true,
            ..Default::default()
        }))
        .await?
        .into_inner()
        .session
        .context("spawn answered without a session")?
        .session_id;
    let finished = |page: &pb::ListCommandsResponse| {
        page.commands
            .iter()
            .filter(|command| command.ended_at.is_some())
            .count()
    };
    let list = |address: Address, session_id: String| async move {
        anyhow::Ok(
            control(&address)
                .await?
                .list_commands(authorized(pb::ListCommandsRequest {
                    session_id,
                    after: 0,
                    limit: 0,
                }))
                .await?
                .into_inner(),
        )
    };
    let type_line = |address: Address, session_id: String, line: &'static str| async move {
        let sent = control(&address)
            .await?
            .send_input(authorized(pb::SendInputRequest {
                session_id,
                items: vec![pb::InputItem {
                    item: Some(pb::input_item::Item::Text(format!("{line}\r"))),
                }],
                force: false,
            }))
            .await?
            .into_inner();
        anyhow::Ok(sent)
    };
    let wait_for = |address: Address, session_id: String, count: usize| async move {
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let page = list(address.clone(), session_id.clone()).await?;
            let at_prompt = page.terminal.as_ref().map(|terminal| terminal.state)
                == Some(pb::TerminalState::AtPrompt as i32);
            if finished(&page) >= count && at_prompt {
                return anyhow::Ok(page);
            }
            ensure!(std::time::Instant::now() < deadline, "{page:?}");
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    };
    wait_for(address.clone(), session_id.clone(), 0).await?;
    type_line(address.clone(), session_id.clone(), "true").await?;
    wait_for(address.clone(), session_id.clone(), 1).await?;
    let typed_false = type_line(address.clone(), session_id.clone(), "false").await?;
    let before = wait_for(address.clone(), session_id.clone(), 2).await?;

    let (next, _) = BrokerProcess::start(data_dir.path(), true, None)?;
    let mut broker = broker;
    ensure!(broker.exited().await?, "the old broker failed");
    let after = list(address.clone(), session_id.clone()).await?;
    ensure!(
        after.commands == before.commands,
        "{:?} became {:?}",
        before.commands,
        after.commands
    );
    ensure!(
        after.terminal.as_ref().map(|terminal| terminal.state)
            == Some(pb::TerminalState::AtPrompt as i32),
        "{:?}",
        after.terminal
    );
    // The prompt after `false` came before the hand-off; the next process knows where.
    let waited = control(&address)
        .await?
        .wait_for_screen(authorized(pb::WaitForScreenRequest {
            session_id: session_id.clone(),
            after_offset: Some(typed_false.output_offset),
            wait_for: pb::TerminalState::AtPrompt.into(),
            timeout_ms: 10_000,
            ..Default::default()
        }))
        .await
        .context("the prompt before the hand-off answers the wait")?
        .into_inner();
    ensure!(
        waited.outcome() == pb::wait_for_screen_response::Outcome::State
            && waited.state() == pb::TerminalState::AtPrompt,
        "{waited:?}"
    );
    let ran = control(&address)
        .await?
        .run(authorized(pb::RunRequest {
            session_id: session_id.clone(),
            command: "(exit 3)".to_owned(),
            ..Default::default()
        }))
        .await
        .context("run at the prompt after the hand-off")?
        .into_inner();
    let last = ran.command.context("the command run")?;
    ensure!(
        (last.id, last.command.as_str(), last.exit_code) == (3, "(exit 3)", Some(3)),
        "{last:?}"
    );
    let page = wait_for(address.clone(), session_id.clone(), 3).await?;
    ensure!(page.last_id == 3, "{page:?}");
    drop(next);
    Ok(())
}

/// The log filter under which a broker says when input waits for a shell's first prompt.
const HELD_INPUT_LOG: &str = "info,pty_broker::session::input=debug";

/// Input to a shell that has not shown its first prompt when its broker hands it over is still
/// held, by the next process, until the prompt: its receipt's offset is past the output the
/// shell printed before the prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_waits_for_the_first_prompt_across_a_hand_off() -> anyhow::Result<()> {
    ptyhub_test_support::init_test_logging();
    let data_dir = tempfile::tempdir()?;
    let scripts = tempfile::tempdir()?;
    let go = scripts.path().join("go");
    // The user's startup file, which sh's integration runs first: the shell's first prompt
    // comes once the test lets it.
    let startup = scripts.path().join("startup.sh");
    std::fs::write(
        &startup,
        format!(
            "printf 'starting\\n'\nwhile [ ! -e '{}' ]; do sleep 0.05; done\n",
            go.display()
        ),
    )?;
    let (broker, address) = BrokerProcess::start(data_dir.path(), false, None)?;
    let address = address.expect("serving");
    let session_id = control(&address)
        .await?
        .spawn(authorized(pb::SpawnRequest {
            session_id: uuid::Uuid::new_v4().to_string(),
            target: Some(pb::Target {
                kind: Some(pb::target::Kind::Local(pb::LocalTarget {})),
            }),
            command: vec!["/bin/sh".into()],
            env: [("ENV".to_owned(), startup.display().to_string())].into(),
            shell_integration: true,
            ..Default::default()
        }))
        .await?
        .into_inner()
        .session
        .context("spawn answered without a session")?
        .session_id;
    let screen = |address: Address, session_id: String| async move {
        anyhow::Ok(
            control(&address)
                .await?
                .get_screen(authorized(pb::GetScreenRequest {
                    session_id,
                    ..Default::default()
                }))
                .await?
                .into_inner(),
        )
    };
    let deadline = std::time::Instant::now() + PATIENCE;
    while !screen(address.clone(), session_id.clone())
        .await?
        .lines
        .iter()
        .any(|line| line.contains("starting"))
    {
        ensure!(
            std::time::Instant::now() < deadline,
            "the startup file never ran"
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }

    // The next process says when it holds input, so the test lets the prompt come only then.
    let (mut next, _) = BrokerProcess::start_with(
        data_dir.path(),
        true,
        None,
        &["--log".as_ref(), HELD_INPUT_LOG.as_ref()],
    )?;
    let mut broker = broker;
    ensure!(broker.exited().await?, "the old broker failed");
    // Nothing is printed until the test lets the startup file end.
    let before_prompt = screen(address.clone(), session_id.clone()).await?.offset;
    let send = {
        let address = address.clone();
        let session_id = session_id.clone();
        async move {
            anyhow::Ok(
                control(&address)
                    .await?
                    .send_input(authorized(pb::SendInputRequest {
                        session_id,
                        items: vec![pb::InputItem {
                            item: Some(pb::input_item::Item::Text("echo typed\r".to_owned())),
                        }],
                        force: false,
                    }))
                    .await?
                    .into_inner(),
            )
        }
    };
    let send = tokio::spawn(send);
    // Written at once (the input not held), the receipt comes with nothing to wait for and
    // shows it; held, the next process says so, and then the startup file lets the prompt come.
    tokio::pin!(send);
    let sent = tokio::select! {
        sent = &mut send => sent??,
        held = next.logged("input held for the shell's first prompt") => {
            held?;
            std::fs::write(&go, b"")?;
            send.await??
        }
    };
    ensure!(
        sent.output_offset > before_prompt,
        "typed at {} before the prompt (output stood at {before_prompt})",
        sent.output_offset
    );
    drop(next);
    Ok(())
}

/// A recorded session's command whose output the ring let go of is read back from the
/// recording after a hand-off: where each stretch of output is in the recording goes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commands_output_the_ring_lost_is_read_from_the_recording_after_a_hand_off()
-> anyhow::Result<()> {
    ptyhub_test_support::init_test_logging();
    let data_dir = tempfile::tempdir()?;
    let store = tempfile::tempdir()?;
    let arguments = [
        "--recordings".as_ref(),
        store.path().as_os_str(),
        "--ring-bytes".as_ref(),
        "65536".as_ref(),
    ];
    let (broker, address) = BrokerProcess::start_with(data_dir.path(), false, None, &arguments)?;
    let address = address.expect("serving");
    let session_id = control(&address)
        .await?
        .spawn(authorized(pb::SpawnRequest {
            session_id: uuid::Uuid::new_v4().to_string(),
            target: Some(pb::Target {
                kind: Some(pb::target::Kind::Local(pb::LocalTarget {})),
            }),
            command: vec!["bash".into()],
            env: [("PS1".to_owned(), "$ ".to_owned())].into(),
            record: pb::RecordMode::Output as i32,
            shell_integration: true,
            ..Default::default()
        }))
        .await?
        .into_inner()
        .session
        .context("spawn answered without a session")?
        .session_id;
    let waited = control(&address)
        .await?
        .wait_for_screen(authorized(pb::WaitForScreenRequest {
            session_id: session_id.clone(),
            wait_for: pb::TerminalState::AtPrompt.into(),
            ..Default::default()
        }))
        .await?
        .into_inner();
    ensure!(waited.state() == pb::TerminalState::AtPrompt, "{waited:?}");
    // One and a half rings, paced so that the recorder (which never holds the terminal back)
    // keeps up however busy the machine is.
    let ran = control(&address)
        .await?
        .run(authorized(pb::RunRequest {
            session_id: session_id.clone(),
            command: "for i in $(seq 1 40); do seq 1 500; sleep 0.02; done".to_owned(),
            ..Default::default()
        }))
        .await?
        .into_inner();
    let command = ran.command.context("the command run")?;
    ensure!(ran.truncated, "the ring let go of the output's start");

    let (next, _) = BrokerProcess::start_with(data_dir.path(), true, None, &arguments)?;
    let mut broker = broker;
    ensure!(broker.exited().await?, "the old broker failed");
    let output = control(&address)
        .await?
        .get_command_output(authorized(pb::GetCommandOutputRequest {
            session_id: session_id.clone(),
            command_id: command.id,
            format: pb::ScreenFormat::Ansi.into(),
        }))
        .await
        .context("the output, read back from the recording")?
        .into_inner();
    let expected = (1..=500)
        .map(|n| format!("{n}\r\n"))
        .collect::<String>()
        .repeat(40);
    ensure!(
        output.data == expected.as_bytes(),
        "{} bytes read back, {} printed",
        output.data.len(),
        expected.len()
    );
    drop(next);
    Ok(())
}

/// A shared session stays shared on the next broker process: two controllers attached after
/// the hand-off both control (an exclusive session would count one, the other taken over).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_session_stays_shared_across_a_hand_off() -> anyhow::Result<()> {
    ptyhub_test_support::init_test_logging();
    let data_dir = tempfile::tempdir()?;
    let (broker, address) = BrokerProcess::start(data_dir.path(), false, None)?;
    let address = address.expect("serving");
    let session_id = control(&address)
        .await?
        .spawn(authorized(pb::SpawnRequest {
            session_id: uuid::Uuid::new_v4().to_string(),
            target: Some(pb::Target {
                kind: Some(pb::target::Kind::Local(pb::LocalTarget {})),
            }),
            command: vec!["cat".into()],
            control_mode: pb::ControlMode::Shared as i32,
            ..Default::default()
        }))
        .await?
        .into_inner()
        .session
        .context("spawn answered without a session")?
        .session_id;

    let (next, _) = BrokerProcess::start(data_dir.path(), true, None)?;
    let mut broker = broker;
    ensure!(broker.exited().await?, "the old broker failed");
    let mut first = ResumingClient::new(address.clone(), session_id.clone());
    first.attach().await?;
    let mut second = ResumingClient::new(address.clone(), session_id.clone());
    second.attach().await?;
    let info = control(&address)
        .await?
        .get(authorized(pb::GetRequest { session_id }))
        .await?
        .into_inner();
    ensure!(
        (info.controllers, info.viewers) == (2, 0),
        "controllers and viewers after the hand-off: {} and {}",
        info.controllers,
        info.viewers
    );
    drop((first, second, next));
    Ok(())
}

/// Spawns `cat` on the local host, with a grant timeout of `grant_timeout_secs` when given.
async fn spawn_cat(address: &Address, grant_timeout_secs: Option<u32>) -> anyhow::Result<String> {
    let session = control(address)
        .await?
        .spawn(authorized(pb::SpawnRequest {
            session_id: uuid::Uuid::new_v4().to_string(),
            target: Some(pb::Target {
                kind: Some(pb::target::Kind::Local(pb::LocalTarget {})),
            }),
            command: vec!["cat".into()],
            control_grant_timeout_secs: grant_timeout_secs,
            ..Default::default()
        }))
        .await?
        .into_inner()
        .session
        .context("spawn answered without a session")?;
    Ok(session.session_id)
}

/// A standing request for control by `principal`, as session-api asks for a REST caller.
async fn request_control_for(
    address: &Address,
    session_id: &str,
    principal: &str,
) -> anyhow::Result<pb::ControlRequest> {
    Ok(control(address)
        .await?
        .request_control_for(authorized(pb::StandingControlRequest {
            session_id: session_id.to_owned(),
            requester: Some(pb::TicketHolder {
                principal: principal.to_owned(),
                surface: "rest".to_owned(),
            }),
        }))
        .await?
        .into_inner())
}

/// `principal`'s answer to request `request_id`.
async fn answer_control_as(
    address: &Address,
    session_id: &str,
    principal: &str,
    request_id: u64,
    grant: bool,
) -> Result<pb::ControlState, tonic::Status> {
    let mut client = control(address)
        .await
        .map_err(|error| tonic::Status::unavailable(error.to_string()))?;
    client
        .answer_control_as(authorized(pb::ControlAnswer {
            session_id: session_id.to_owned(),
            principal: principal.to_owned(),
            request_id,
            grant,
        }))
        .await
        .map(tonic::Response::into_inner)
}

async fn control_state(address: &Address, session_id: &str) -> anyhow::Result<pb::ControlState> {
    Ok(control(address)
        .await?
        .get_control(authorized(pb::GetControlRequest {
            session_id: session_id.to_owned(),
        }))
        .await?
        .into_inner())
}

/// The principal control is reserved for, if any.
fn reserved_for(state: &pb::ControlState) -> Option<&str> {
    state
        .reserved_for
        .as_ref()
        .map(|reserved| reserved.principal.as_str())
}

/// A standing request and a reservation made before a hand-off are there after it, as they
/// were: the request listed with its id and time and answered by the principal control is
/// reserved for (no one else), which moves the reservation to the requester.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standing_request_and_a_reservation_survive_a_hand_off() -> anyhow::Result<()> {
    ptyhub_test_support::init_test_logging();
    let data_dir = tempfile::tempdir()?;
    let (broker, address) = BrokerProcess::start(data_dir.path(), false, None)?;
    let address = address.expect("serving");
    let session_id = spawn_cat(&address, None).await?;
    // Nobody controls: any principal answers, and control granted to bob, who has no stream,
    // is reserved for his next attach. The agent then asks bob.
    let bobs = request_control_for(&address, &session_id, "bob").await?;
    let state = answer_control_as(&address, &session_id, "carol", bobs.id, true).await?;
    ensure!(reserved_for(&state) == Some("bob"), "{state:?}");
    let agents = request_control_for(&address, &session_id, "agent").await?;
    let before = control_state(&address, &session_id).await?;

    let (next, _) = BrokerProcess::start(data_dir.path(), true, None)?;
    let mut broker = broker;
    ensure!(broker.exited().await?, "the old broker failed");
    let after = control_state(&address, &session_id).await?;
    ensure!(
        after.requests == [agents.clone()],
        "requests after the hand-off: {:?}",
        after.requests
    );
    ensure!(
        reserved_for(&after) == Some("bob"),
        "reserved after the hand-off: {after:?}"
    );
    // Counted from the hand-off, the reservation ends no later than it did.
    let until = |state: &pb::ControlState| {
        state
            .reserved_for
            .as_ref()
            .and_then(|reserved| reserved.until)
            .map(|until| until.seconds)
    };
    ensure!(
        until(&after) >= until(&before) && until(&after) <= until(&before).map(|at| at + 60),
        "reserved until {:?}, before the hand-off {:?}",
        until(&after),
        until(&before)
    );
    let refused = answer_control_as(&address, &session_id, "carol", agents.id, true)
        .await
        .expect_err("carol answers while control is reserved for bob");
    ensure!(
        refused.code() == tonic::Code::PermissionDenied,
        "carol's answer: {refused}"
    );
    let granted = answer_control_as(&address, &session_id, "bob", agents.id, true).await?;
    ensure!(
        reserved_for(&granted) == Some("agent") && granted.requests.is_empty(),
        "after bob's grant: {granted:?}"
    );
    drop(next);
    Ok(())
}

/// A session whose instance grants unanswered requests after a second still does so on the
/// next broker process: a request made after the hand-off, to a session nobody controls, is
/// granted (reserved for the requester) without an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_grant_timeout_still_grants_after_a_hand_off() -> anyhow::Result<()> {
    ptyhub_test_support::init_test_logging();
    let data_dir = tempfile::tempdir()?;
    let (broker, address) = BrokerProcess::start(data_dir.path(), false, None)?;
    let address = address.expect("serving");
    let session_id = spawn_cat(&address, Some(1)).await?;

    let (next, _) = BrokerProcess::start(data_dir.path(), true, None)?;
    let mut broker = broker;
    ensure!(broker.exited().await?, "the old broker failed");
    let request = request_control_for(&address, &session_id, "agent").await?;
    let granted = ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || {
        let (address, session_id) = (address.clone(), session_id.clone());
        async move {
            let state = control_state(&address, &session_id).await.ok()?;
            (reserved_for(&state) == Some("agent")).then_some(state)
        }
    })
    .await
    .with_context(|| format!("request {} was never granted by the timeout", request.id))?;
    ensure!(granted.requests.is_empty(), "{granted:?}");
    drop(next);
    Ok(())
}
