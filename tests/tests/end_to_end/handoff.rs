//! A broker upgraded by hand-offs (`--take-over`) under a whole cluster: WebSocket and gRPC
//! clients through the gateway resume by offset on each next process with every byte once, the
//! processes keep their pids, session-api never marks a session lost, and the cap holds.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ptyhub_client::{AttachOptions, Attachment, Client, Event as ClientEvent};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_test_support::Requirement;
use tests::cluster::{API_TOKEN, Cluster, PATIENCE};
use tests::container::Container;
use tests::terminal::{Event, Terminal};

use crate::{session_record, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_handed_over_three_times_keeps_its_session_and_every_byte() {
    let Some(mut cluster) = start(Cluster::builder().session_apis(1).brokers(1).gateways(1)).await
    else {
        return;
    };
    let instance: session_pb::Instance = cluster
        .register_instance("upgraded", 0, &["sh"], 5)
        .await
        .unwrap();
    let (status, body) = cluster.create_session(0, &instance.id).await.unwrap();
    assert_eq!(status, 201, "{body}");
    let session_id = body["id"].as_str().expect("a session id").to_owned();
    let port = cluster.gateways[0].port();

    let (mut terminal, mut offset) = Terminal::attach(port, &instance.id, &session_id, None)
        .await
        .unwrap();
    terminal.input(b"echo \"pid=$$.\"\n").await.unwrap();
    let seen = terminal.read_until("pid=").await.unwrap();
    let seen = if seen.matches("pid=").count() < 2 {
        // The echo of the command line, then the shell's answer.
        format!("{seen}{}", terminal.read_until(".\r\n").await.unwrap())
    } else {
        seen
    };
    offset += seen.len() as u64;
    let pid: String = seen
        .rsplit("pid=")
        .next()
        .and_then(|rest| rest.split('.').next())
        .expect("the shell printed its pid")
        .to_owned();
    assert!(pid.parse::<u32>().is_ok(), "{seen:?}");

    for round in 1..=3 {
        cluster.hand_off_broker(0).await.unwrap();
        // The stream to the old process ended with a hand-off: the gateway says reconnect now
        // (1012), or, when its connection to the old process broke a moment before the stream's
        // end arrived, reconnect with backoff (1011; deploy/README.md, "Brokers").
        let code = loop {
            match terminal.next().await {
                Ok(Event::Closed(code)) => break code,
                Ok(Event::Output(bytes)) => offset += bytes.len() as u64,
                Ok(Event::Json(_)) => {}
                Err(error) => panic!("round {round}: the WebSocket broke: {error}"),
            }
        };
        assert!(
            matches!(code, Some(1011 | 1012)),
            "round {round}: the close says reconnect ({code:?})"
        );

        let (resumed, connected_at) =
            Terminal::attach(port, &instance.id, &session_id, Some(offset))
                .await
                .unwrap();
        assert_eq!(
            connected_at, offset,
            "round {round}: resumed exactly where it left"
        );
        terminal = resumed;
        let marker = format!("round-{round} pid={pid}.");
        terminal
            .input(format!("echo \"round-$((0+{round})) pid=$$.\"\n").as_bytes())
            .await
            .unwrap();
        let seen = terminal.read_until(&marker).await.unwrap();
        offset += seen.len() as u64;
        assert!(
            seen.matches(&marker).count() == 1,
            "round {round}: the same process answered once: {seen:?}"
        );

        let record = session_record(&cluster, &instance.id, &session_id).await;
        assert_eq!(
            record["status"], "active",
            "round {round}: session-api kept the session: {record}"
        );
    }
}

/// Sessions per instance: the contract's default cap, which every instance here is full to.
const CAP: usize = 5;
/// Instances per backend: two of flooding sessions and two of echoing ones.
const INSTANCES_PER_BACKEND: usize = 4;

/// Once `dir/go` exists (after every client attached: with no controller the PTY is read
/// as fast as it writes, and the ring keeps only its last MiB), prints numbered lines as fast
/// as they are read until `dir/stop` exists, then exits 3.
fn flood(dir: &str) -> String {
    format!(
        r#"while [ ! -e {dir}/go ]; do sleep 0.1; done; i=0; while [ ! -e {dir}/stop ]; do echo "$i"; i=$((i+1)); done; exit 3"#
    )
}

/// What one session runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    Flood,
    Echo,
}

/// How its client reaches the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    WebSocket,
    Grpc,
}

/// What a client saw next, in the terms the test checks.
#[derive(Debug)]
enum Step {
    Output,
    /// The stream a hand-off ended was replaced by one that starts where it left off.
    Resumed,
    Exited(i64),
}

/// A controller attached through the gateway, by WebSocket or by the gRPC client library,
/// that resumes at its next offset whenever a hand-off ends its stream, and fails on any byte
/// lost or repeated.
struct ResumingClient {
    instance_id: String,
    session_id: String,
    port: u16,
    connection: Connection,
    /// The offset of the next byte.
    offset: u64,
    /// Output not yet taken by the caller.
    fresh: Vec<u8>,
    resumes: usize,
}

enum Connection {
    /// `None` after a hand-off closed it, until the next read reattaches.
    WebSocket(Option<Box<Terminal>>),
    Grpc(Attachment),
}

impl ResumingClient {
    async fn attach(
        cluster: &Cluster,
        transport: Transport,
        instance_id: &str,
        session_id: &str,
    ) -> anyhow::Result<Self> {
        let port = cluster.gateways[0].port();
        let connection = match transport {
            Transport::WebSocket => {
                let (terminal, offset) =
                    Terminal::attach(port, instance_id, session_id, Some(0)).await?;
                anyhow::ensure!(offset == 0, "attached at {offset}, not at the start");
                Connection::WebSocket(Some(Box::new(terminal)))
            }
            Transport::Grpc => {
                let client = Client::connect(&cluster.gateways[0].endpoint(), API_TOKEN).await?;
                let options = AttachOptions {
                    since: Some(0),
                    ..AttachOptions::default()
                };
                Connection::Grpc(client.attach(instance_id, session_id, options).await?)
            }
        };
        Ok(Self {
            instance_id: instance_id.to_owned(),
            session_id: session_id.to_owned(),
            port,
            connection,
            offset: 0,
            fresh: Vec::new(),
            resumes: 0,
        })
    }

    fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.fresh)
    }

    async fn input(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        match &mut self.connection {
            Connection::WebSocket(Some(terminal)) => terminal.input(bytes).await,
            Connection::WebSocket(None) => anyhow::bail!("typing while detached"),
            Connection::Grpc(attachment) => Ok(attachment.send_input(bytes.to_vec()).await?),
        }
    }

    async fn next(&mut self) -> anyhow::Result<Step> {
        match &mut self.connection {
            Connection::WebSocket(terminal) => {
                let Some(open) = terminal else {
                    *terminal = Some(Box::new(
                        reattach_websocket(
                            self.port,
                            &self.instance_id,
                            &self.session_id,
                            self.offset,
                        )
                        .await?,
                    ));
                    self.resumes += 1;
                    return Ok(Step::Resumed);
                };
                match open.next().await? {
                    Event::Output(bytes) => {
                        self.offset += bytes.len() as u64;
                        self.fresh.extend_from_slice(&bytes);
                        Ok(Step::Output)
                    }
                    Event::Json(frame) if frame["type"] == "exit" => {
                        Ok(Step::Exited(frame["code"].as_i64().unwrap_or(-1)))
                    }
                    Event::Json(frame) if frame["type"] == "gap" => {
                        anyhow::bail!("bytes lost at {}: {frame}", self.offset)
                    }
                    Event::Json(_) => Box::pin(self.next()).await,
                    // The hand-off's close (1012: reconnect now), or the connection to the
                    // old process broke first (1011: reconnect with backoff). Either way the
                    // contract's client resumes at its offset.
                    Event::Closed(Some(1011 | 1012)) => {
                        *terminal = None;
                        Box::pin(self.next()).await
                    }
                    Event::Closed(code) => anyhow::bail!("closed with {code:?}"),
                }
            }
            Connection::Grpc(attachment) => loop {
                match attachment.next().await? {
                    Some(ClientEvent::Output { offset, data }) => {
                        anyhow::ensure!(
                            offset == self.offset,
                            "output at {offset} where {} was next: a byte lost or repeated",
                            self.offset
                        );
                        self.offset += data.len() as u64;
                        self.fresh.extend_from_slice(&data);
                        return Ok(Step::Output);
                    }
                    Some(ClientEvent::Connected {
                        offset,
                        resumed: true,
                        ..
                    }) => {
                        anyhow::ensure!(
                            offset == self.offset,
                            "resumed at {offset} instead of {}",
                            self.offset
                        );
                        self.resumes += 1;
                        return Ok(Step::Resumed);
                    }
                    Some(ClientEvent::Exited(status)) => {
                        return Ok(Step::Exited(i64::from(status.code)));
                    }
                    Some(ClientEvent::Gap { lost, offset }) => {
                        anyhow::bail!("{lost} bytes lost at {offset}")
                    }
                    Some(
                        event @ (ClientEvent::TakenOver
                        | ClientEvent::Closed(_)
                        | ClientEvent::Refused { .. }),
                    ) => anyhow::bail!("the stream ended: {event:?}"),
                    Some(_) => {}
                    None => anyhow::bail!("the stream ended without an exit"),
                }
            },
        }
    }

    /// Reads until the process exits; its exit code.
    async fn until_exit(&mut self, mut output: impl FnMut(Vec<u8>)) -> anyhow::Result<i64> {
        loop {
            let step = self.next().await?;
            output(self.take_output());
            if let Step::Exited(code) = step {
                return Ok(code);
            }
        }
    }
}

/// Opens the WebSocket again at the next offset, retrying while the next broker takes
/// over.
async fn reattach_websocket(
    port: u16,
    instance_id: &str,
    session_id: &str,
    next_offset: u64,
) -> anyhow::Result<Terminal> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let attached = Terminal::attach(port, instance_id, session_id, Some(next_offset)).await;
        match attached {
            Ok((terminal, offset)) => {
                anyhow::ensure!(
                    offset == next_offset,
                    "resumed at {offset} instead of {}",
                    next_offset
                );
                return Ok(terminal);
            }
            Err(error) if tokio::time::Instant::now() >= deadline => {
                return Err(error.context("could not reattach in time"));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Checks a flood's output as it comes, in constant memory: the numbers from 0 on, each once,
/// in order, one per line.
#[derive(Debug, Default)]
struct FloodCheck {
    lines: u64,
    partial: Vec<u8>,
}

impl FloodCheck {
    fn feed(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.partial.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(end) = self.partial[start..]
            .windows(2)
            .position(|pair| pair == b"\r\n")
        {
            let line = &self.partial[start..start + end];
            anyhow::ensure!(
                line == self.lines.to_string().as_bytes(),
                "line {} is {:?}",
                self.lines,
                String::from_utf8_lossy(line)
            );
            self.lines += 1;
            start += end + 2;
        }
        self.partial.drain(..start);
        Ok(())
    }
}

/// Every session's pid on broker 0, by id.
async fn broker_pids(cluster: &Cluster) -> BTreeMap<String, u32> {
    let mut broker = cluster.broker_client(0).await.expect("a broker client");
    broker
        .list(broker_pb::ListRequest {})
        .await
        .expect("the broker lists its sessions")
        .into_inner()
        .sessions
        .into_iter()
        .map(|session| (session.session_id, session.pid))
        .collect()
}

/// Every instance is full and stays so: its `CAP` sessions are all active (none marked lost),
/// and one more is refused.
async fn assert_full_and_active(cluster: &Cluster, instances: &[String], round: usize) {
    for instance_id in instances {
        let (status, body) = cluster
            .rest(
                0,
                reqwest::Method::GET,
                &format!("/api/v1/instances/{instance_id}/terminal/sessions?include=closed"),
                None,
            )
            .await
            .expect("list the sessions");
        assert_eq!(status, 200, "{body}");
        let sessions = body["sessions"].as_array().expect("a list of sessions");
        let states: Vec<(&serde_json::Value, &serde_json::Value)> = sessions
            .iter()
            .map(|session| (&session["status"], &session["close_reason"]))
            .collect();
        assert!(
            sessions.len() == CAP && states.iter().all(|(status, _)| *status == "active"),
            "round {round}: instance {instance_id} has {states:?}\n{}",
            cluster.logs()
        );
        let (status, body) = cluster.create_session(0, instance_id).await.unwrap();
        assert_eq!(
            (status, body["detail"].as_str()),
            (
                409,
                Some("Maximum of 5 terminal sessions reached for this instance")
            ),
            "round {round}: a sixth session on {instance_id}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_sessions_per_backend_and_both_kinds_of_client_survive_three_hand_offs() {
    if !ptyhub_test_support::require(Requirement::Docker) {
        return;
    }
    let container = Container::start().await;
    let Some(mut cluster) = start(
        Cluster::builder()
            .session_apis(1)
            .brokers(1)
            .gateways(1)
            .broker_flag("backends", "local,docker")
            .broker_flag(
                "log",
                "info,pty_broker::registration=debug,pty_broker::handoff=debug",
            ),
    )
    .await
    else {
        return;
    };
    // Where the floods look for their go and stop files.
    let signals = tempfile::tempdir().unwrap();
    let local_dir = signals.path().display().to_string();
    let container_dir = "/tmp";

    // Per backend: two instances of floods and two of echoes, each full to the cap; every
    // other session's client is a WebSocket, the rest gRPC.
    let mut instances = Vec::new();
    let mut sessions = Vec::new();
    for docker in [false, true] {
        for index in 0..INSTANCES_PER_BACKEND {
            let work = if index % 2 == 0 {
                Work::Flood
            } else {
                Work::Echo
            };
            let (target, dir, user) = if docker {
                let container = broker_pb::target::Kind::Docker(broker_pb::DockerTarget {
                    container: container.name.clone(),
                });
                // Not root: the broker refuses root in containers by default.
                (container, container_dir, "tester")
            } else {
                let local = broker_pb::target::Kind::Local(broker_pb::LocalTarget {});
                (local, local_dir.as_str(), "")
            };
            let script = match work {
                Work::Flood => flood(dir),
                Work::Echo => "exec cat".to_owned(),
            };
            let instance = cluster
                .register_instance_with(
                    0,
                    session_pb::RegisterInstanceRequest {
                        name: format!(
                            "handed-over-{}-{index}",
                            if docker { "docker" } else { "local" }
                        ),
                        target: Some(broker_pb::Target { kind: Some(target) }),
                        command: vec!["sh".to_owned(), "-c".to_owned(), script],
                        user: user.to_owned(),
                        max_sessions: CAP as u32,
                        ..Default::default()
                    },
                )
                .await
                .expect("register an instance");
            for number in 0..CAP {
                let (status, body) = cluster.create_session(0, &instance.id).await.unwrap();
                assert_eq!(status, 201, "{body}");
                let session_id = body["id"].as_str().expect("a session id").to_owned();
                let transport = if number % 2 == 0 {
                    Transport::WebSocket
                } else {
                    Transport::Grpc
                };
                sessions.push((instance.id.clone(), session_id, work, transport));
            }
            instances.push(instance.id);
        }
    }
    assert_full_and_active(&cluster, &instances, 0).await;
    let pids = broker_pids(&cluster).await;
    assert_eq!(pids.len(), sessions.len(), "{pids:?}");

    // Echoers type a line only while no hand-off runs (input in flight when a stream ends is
    // not retried, as after any reconnect), and after a hand-off first wait for their stream
    // to resume on the next process.
    let round = Arc::new(tokio::sync::RwLock::new(0usize));
    let (stop_typing, typing_stopped) = tokio::sync::watch::channel(false);
    // How many lines every flood has shown, to hand over only while each one streams.
    let flooded: Arc<Vec<AtomicU64>> =
        Arc::new((0..sessions.len()).map(|_| AtomicU64::new(0)).collect());
    let mut clients = Vec::new();
    for (index, (instance_id, session_id, work, transport)) in sessions.iter().enumerate() {
        let mut client = ResumingClient::attach(&cluster, *transport, instance_id, session_id)
            .await
            .expect("attach");
        let flooded = Arc::clone(&flooded);
        let round = Arc::clone(&round);
        let typing_stopped = typing_stopped.clone();
        let work = *work;
        clients.push(tokio::spawn(async move {
            match work {
                Work::Flood => {
                    let mut check = FloodCheck::default();
                    let mut failed = None;
                    let code = client
                        .until_exit(|bytes| {
                            if failed.is_none()
                                && let Err(error) = check.feed(&bytes)
                            {
                                failed = Some(error);
                            }
                            flooded[index].store(check.lines, Ordering::Relaxed);
                        })
                        .await?;
                    if let Some(error) = failed {
                        return Err(error);
                    }
                    anyhow::ensure!(check.partial.is_empty(), "a partial last line");
                    anyhow::ensure!(code == 3, "the flood exited with {code}");
                    Ok((client.resumes, check.lines))
                }
                Work::Echo => {
                    let mut seen_round = 0;
                    let mut lines = 0u64;
                    let mut echoed = Vec::new();
                    loop {
                        let round = round.read().await;
                        if *round != seen_round {
                            seen_round = *round;
                            while !matches!(client.next().await?, Step::Resumed) {}
                            echoed.extend(client.take_output());
                        }
                        if *typing_stopped.borrow() {
                            break;
                        }
                        let line = format!("line {lines}\r\n");
                        client.input(format!("line {lines}\n").as_bytes()).await?;
                        // The terminal's echo of the line, then cat's.
                        let expected = format!("{line}{line}");
                        let mut got = Vec::new();
                        while got.len() < expected.len() {
                            anyhow::ensure!(
                                matches!(client.next().await?, Step::Output),
                                "line {lines}: no echo"
                            );
                            got.extend(client.take_output());
                        }
                        anyhow::ensure!(
                            got == expected.as_bytes(),
                            "line {lines}: {:?}",
                            String::from_utf8_lossy(&got)
                        );
                        echoed.extend(got);
                        lines += 1;
                    }
                    client.input(b"\x04").await?;
                    let code = client.until_exit(|bytes| echoed.extend(bytes)).await?;
                    let typed: String = (0..lines)
                        .map(|line| format!("line {line}\r\n").repeat(2))
                        .collect();
                    anyhow::ensure!(
                        echoed == typed.as_bytes(),
                        "the echoes differ from the lines typed"
                    );
                    anyhow::ensure!(code == 0, "cat exited with {code}");
                    Ok((client.resumes, lines))
                }
            }
        }));
    }

    std::fs::write(signals.path().join("go"), b"").unwrap();
    container
        .exec(&["touch", &format!("{container_dir}/go")])
        .await
        .expect("start the floods in the container");
    let floods: Vec<usize> = sessions
        .iter()
        .enumerate()
        .filter(|(_, (_, _, work, _))| *work == Work::Flood)
        .map(|(index, _)| index)
        .collect();
    let mut shown: Vec<u64> = vec![0; sessions.len()];
    for number in 1..=3 {
        // Every flood is streaming: each has shown more since the last hand-off.
        cluster
            .eventually("every flood streams before the hand-off", || {
                let flooded = Arc::clone(&flooded);
                let shown = shown.clone();
                let floods = floods.clone();
                async move {
                    floods
                        .iter()
                        .all(|&index| flooded[index].load(Ordering::Relaxed) > shown[index] + 100)
                        .then_some(())
                }
            })
            .await;
        for &index in &floods {
            shown[index] = flooded[index].load(Ordering::Relaxed);
        }
        let mut quiet = round.write().await;
        *quiet = number;
        cluster.hand_off_broker(0).await.expect("the hand-off");
        drop(quiet);
        assert_eq!(
            broker_pids(&cluster).await,
            pids,
            "round {number}: the same processes"
        );
        assert_full_and_active(&cluster, &instances, number).await;
    }

    stop_typing.send_replace(true);
    std::fs::write(signals.path().join("stop"), b"").unwrap();
    container
        .exec(&["touch", &format!("{container_dir}/stop")])
        .await
        .expect("stop the floods in the container");
    let mut totals = BTreeMap::new();
    for (client, (_, session_id, work, transport)) in clients.into_iter().zip(&sessions) {
        let (resumes, lines) = client.await.unwrap().unwrap_or_else(|error| {
            panic!(
                "{work:?} over {transport:?} in {session_id}: {error:#}\n{}",
                cluster.logs()
            )
        });
        assert_eq!(
            resumes, 3,
            "{work:?} over {transport:?} in {session_id}: one resume per hand-off"
        );
        assert!(
            lines > 0,
            "{work:?} over {transport:?} in {session_id}: nothing went through"
        );
        *totals
            .entry(format!("{work:?} over {transport:?}"))
            .or_insert(0) += lines;
    }
    eprintln!("lines through three hand-offs: {totals:?}");
    // Exited, never lost: once session-api has the exits the broker reports.
    for instance_id in &instances {
        let path = format!("/api/v1/instances/{instance_id}/terminal/sessions?include=closed");
        let sessions = cluster
            .eventually("session-api records every exit", || async {
                let (_, body) = cluster
                    .rest(0, reqwest::Method::GET, &path, None)
                    .await
                    .ok()?;
                let sessions = body["sessions"].as_array()?.clone();
                sessions
                    .iter()
                    .all(|session| session["status"] != "active")
                    .then_some(sessions)
            })
            .await;
        assert_eq!(sessions.len(), CAP, "{sessions:?}");
        for session in sessions {
            assert!(
                session["status"] == "exited"
                    || (session["status"] == "closed" && session["close_reason"] == "exited"),
                "{session}"
            );
        }
    }
}
