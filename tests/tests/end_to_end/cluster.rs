//! A cluster of real processes on this machine (two brokers, two session-api replicas on one
//! PostgreSQL database, two gateways) under faults: routing across brokers, the cap across
//! replicas, SIGKILL of a session-api replica and of a gateway while clients stream, a rolling
//! restart (SIGTERM) of both, SIGKILL of a broker and its restart.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::join_all;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_test_support::Requirement;
use ptyhub_test_support::postgres::TestDatabase;
use tests::cluster::{Cluster, PATIENCE, broker_id};
use tests::terminal::{Event, Terminal};

const CAP_MESSAGE: &str = "Maximum of 5 terminal sessions reached for this instance";

async fn start_cluster() -> Option<Cluster> {
    if !ptyhub_test_support::require(Requirement::Postgres) {
        return None;
    }
    let database = TestDatabase::create().await.expect("a fresh database");
    Some(Cluster::start(database).await.expect("the cluster starts"))
}

async fn get_session(
    cluster: &Cluster,
    api: usize,
    instance: &session_pb::Instance,
    session_id: &str,
) -> session_pb::Session {
    cluster
        .session_client(api)
        .await
        .expect("session-api client")
        .get_session(session_pb::GetSessionRequest {
            instance: instance.id.clone(),
            session_id: session_id.to_owned(),
        })
        .await
        .expect("get session")
        .into_inner()
}

async fn create(cluster: &Cluster, gateway: usize, instance: &session_pb::Instance) -> String {
    let (status, body) = cluster
        .create_session(gateway, &instance.id)
        .await
        .expect("create session");
    assert_eq!(status, 201, "create through gateway-{gateway}: {body}");
    body["id"].as_str().expect("a session id").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_land_on_their_broker_and_the_cap_holds_across_replicas() {
    let Some(cluster) = start_cluster().await else {
        return;
    };
    let shells = [
        cluster
            .register_instance("on-broker-0", 0, &["sh"], 5)
            .await
            .unwrap(),
        cluster
            .register_instance("on-broker-1", 1, &["sh"], 5)
            .await
            .unwrap(),
    ];
    for (broker, instance) in shells.iter().enumerate() {
        assert_eq!(instance.broker_id, broker_id(broker));
        for gateway in 0..2 {
            let session_id = create(&cluster, gateway, instance).await;
            let session = get_session(&cluster, 1 - gateway, instance, &session_id).await;
            assert_eq!(session.broker_id, broker_id(broker));
            assert!(
                cluster
                    .broker_processes(broker)
                    .await
                    .unwrap()
                    .contains(&session_id)
            );
            assert!(
                !cluster
                    .broker_processes(1 - broker)
                    .await
                    .unwrap()
                    .contains(&session_id)
            );
            // Any gateway attaches to any broker: through the other gateway too.
            let (mut terminal, _) = Terminal::attach(
                cluster.gateways[1 - gateway].port(),
                &instance.id,
                &session_id,
                None,
            )
            .await
            .expect("attach");
            terminal.input(b"echo routed-$((40+2))\n").await.unwrap();
            terminal.read_until("routed-42").await.unwrap();
        }
    }

    // 50 concurrent creates on one instance, half through each gateway (and so each replica).
    let capped = cluster
        .register_instance("capped", 1, &["sh"], 5)
        .await
        .unwrap();
    let outcomes =
        join_all((0..50).map(|index| cluster.create_session(index % 2, &capped.id))).await;
    let mut created = Vec::new();
    for outcome in outcomes {
        let (status, body) = outcome.expect("an answer");
        match status {
            201 => created.push(body["id"].as_str().unwrap().to_owned()),
            409 => assert_eq!(body["detail"], CAP_MESSAGE),
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(created.len(), 5, "exactly max_sessions creates succeed");
    let processes = cluster.broker_processes(1).await.unwrap();
    let capped_processes = processes.iter().filter(|id| created.contains(id)).count();
    assert_eq!(capped_processes, 5);
    // Nothing beyond the cap was spawned: broker 1 runs the two shells above and these five.
    assert_eq!(processes.len(), 2 + 5, "{processes:?}");
}

/// The bytes the streaming command writes through a PTY when it was stopped after `lines` lines:
/// `line-0\r\n` .. `line-{lines-1}\r\n`, then `end\r\n`.
fn expected_stream(lines: usize) -> Vec<u8> {
    (0..lines)
        .flat_map(|i| format!("line-{i}\r\n").into_bytes())
        .chain(*b"end\r\n")
        .collect()
}

#[derive(Debug)]
struct StreamOutcome {
    bytes: Vec<u8>,
    /// The first connection broke before the process exited.
    broke: bool,
    /// The close code that ended the first connection, when it ended with a close frame.
    first_close: Option<u16>,
}

/// Attaches through `first` from offset 0 and reads until that connection breaks, then resumes
/// through `second` with `since` and reads until the exit. `received` counts bytes as they come.
async fn stream_across_gateways(
    first: u16,
    second: u16,
    instance_id: String,
    session_id: String,
    received: Arc<AtomicUsize>,
) -> anyhow::Result<StreamOutcome> {
    let mut bytes = Vec::new();
    let (mut terminal, offset) =
        Terminal::attach(first, &instance_id, &session_id, Some(0)).await?;
    anyhow::ensure!(offset == 0, "the first attach starts at {offset}");
    let (broke, first_close) = loop {
        match terminal.next().await {
            Ok(Event::Output(chunk)) => {
                bytes.extend(chunk);
                received.store(bytes.len(), Ordering::SeqCst);
            }
            Ok(Event::Json(frame)) if frame["type"] == "exit" => break (false, None),
            Ok(Event::Json(frame)) => anyhow::bail!("unexpected frame {frame}"),
            Ok(Event::Closed(code)) => break (true, code),
            Err(_) => break (true, None),
        }
    };
    if !broke {
        return Ok(StreamOutcome {
            bytes,
            broke,
            first_close,
        });
    }
    let since = bytes.len() as u64;
    let (mut terminal, offset) =
        Terminal::attach(second, &instance_id, &session_id, Some(since)).await?;
    anyhow::ensure!(offset == since, "resumed at {offset}, asked for {since}");
    loop {
        match terminal.next().await? {
            Event::Output(chunk) => {
                bytes.extend(chunk);
                received.store(bytes.len(), Ordering::SeqCst);
            }
            Event::Json(frame) if frame["type"] == "exit" => break,
            Event::Json(frame) => anyhow::bail!("unexpected frame after resuming: {frame}"),
            Event::Closed(code) => anyhow::bail!("closed ({code:?}) before the exit"),
        }
    }
    Ok(StreamOutcome {
        bytes,
        broke,
        first_close,
    })
}

/// Stops the streaming commands, waits for every client of [`stream_clients`] and checks that
/// each received exactly what its process wrote, no gap and no duplicate; returns how each went.
async fn finished_streams(
    cluster: &Cluster,
    streams: StreamingSessions,
    clients: Vec<tokio::task::JoinHandle<anyhow::Result<StreamOutcome>>>,
) -> Vec<StreamOutcome> {
    streams.stop();
    let mut outcomes = Vec::new();
    for (index, client) in clients.into_iter().enumerate() {
        let outcome = tokio::time::timeout(PATIENCE * 2, client)
            .await
            .expect("the client finishes")
            .expect("the client task")
            .unwrap_or_else(|error| panic!("client {index}: {error:#}\n{}", cluster.logs()));
        assert_exact_stream(index, &outcome);
        outcomes.push(outcome);
    }
    outcomes
}

/// Checks that `outcome` is exactly an [`expected_stream`], of as many lines as it holds.
fn assert_exact_stream(index: usize, outcome: &StreamOutcome) {
    let lines = outcome
        .bytes
        .windows(b"line-".len())
        .filter(|window| window == b"line-")
        .count();
    let expected = expected_stream(lines);
    assert!(
        outcome.bytes == expected,
        "client {index}: {} bytes, expected {}; first difference at {:?}",
        outcome.bytes.len(),
        expected.len(),
        outcome
            .bytes
            .iter()
            .zip(&expected)
            .position(|(a, b)| a != b)
    );
}

/// Sessions whose command writes `line-0`, `line-1`, ..., one line every 40 ms, until the test
/// stops them ([`StreamingSessions::stop`]), then `end`, and exits: however long the faults
/// between take on a slow machine, the streams outlast them.
struct StreamingSessions {
    /// The file whose existence stops every command; in a directory removed on drop.
    stop_file: std::path::PathBuf,
    _directory: tempfile::TempDir,
}

impl StreamingSessions {
    fn new() -> Self {
        let directory = tempfile::tempdir().expect("a directory for the stop file");
        Self {
            stop_file: directory.path().join("stop"),
            _directory: directory,
        }
    }

    /// The command's script. It also stops after 100,000 lines (over an hour), so that a test
    /// that failed before stopping it leaves no endless process behind.
    fn script(&self) -> String {
        format!(
            "i=0; while [ ! -e '{}' ] && [ $i -lt 100000 ]; do echo line-$i; i=$((i+1)); \
             sleep 0.04; done; echo end",
            self.stop_file.display()
        )
    }

    fn stop(&self) {
        std::fs::write(&self.stop_file, b"").expect("write the stop file");
    }
}

/// Two instances, one per broker, whose sessions run the [`StreamingSessions`] command, and
/// `clients` sessions alternating between them, created through alternating gateways: the
/// instances and the (instance id, session id) pairs.
async fn streaming_sessions(
    cluster: &Cluster,
    streams: &StreamingSessions,
    name: &str,
    clients: usize,
) -> ([session_pb::Instance; 2], Vec<(String, String)>) {
    let script = streams.script();
    let command = ["sh", "-c", script.as_str()];
    let instances = [
        cluster
            .register_instance(&format!("{name}-0"), 0, &command, 50)
            .await
            .unwrap(),
        cluster
            .register_instance(&format!("{name}-1"), 1, &command, 50)
            .await
            .unwrap(),
    ];
    let mut sessions = Vec::new();
    for index in 0..clients {
        let instance = &instances[index % 2];
        sessions.push((
            instance.id.clone(),
            create(cluster, index % 2, instance).await,
        ));
    }
    (instances, sessions)
}

/// Starts one client per session that attaches through gateway 0 and resumes through gateway 1
/// (see [`stream_across_gateways`]), and waits until each has received a few lines.
async fn stream_clients(
    cluster: &Cluster,
    sessions: &[(String, String)],
) -> (
    Vec<tokio::task::JoinHandle<anyhow::Result<StreamOutcome>>>,
    Vec<Arc<AtomicUsize>>,
) {
    let counters: Vec<Arc<AtomicUsize>> = sessions.iter().map(|_| Arc::default()).collect();
    let (first, second) = (cluster.gateways[0].port(), cluster.gateways[1].port());
    let clients = sessions
        .iter()
        .zip(&counters)
        .map(|((instance_id, session_id), received)| {
            tokio::spawn(stream_across_gateways(
                first,
                second,
                instance_id.clone(),
                session_id.clone(),
                received.clone(),
            ))
        })
        .collect();
    let marks = vec![3 * "line-0\r\n".len(); sessions.len()];
    wait_past(
        cluster,
        "every client streams through gateway-0",
        &counters,
        &marks,
    )
    .await;
    (clients, counters)
}

/// Waits until every counter has reached its mark.
async fn wait_past(cluster: &Cluster, what: &str, counters: &[Arc<AtomicUsize>], marks: &[usize]) {
    cluster
        .eventually(what, || {
            let past = counters
                .iter()
                .zip(marks)
                .all(|(counter, mark)| counter.load(Ordering::SeqCst) >= *mark);
            async move { past.then_some(()) }
        })
        .await;
}

/// Marks a few lines beyond where each counter is now.
fn marks_ahead(counters: &[Arc<AtomicUsize>]) -> Vec<usize> {
    counters
        .iter()
        .map(|counter| counter.load(Ordering::SeqCst) + 3 * "line-0\r\n".len())
        .collect()
}

/// `GET /readyz` of gateway `index`: the status, or `None` when nothing answers.
async fn readiness(cluster: &Cluster, index: usize) -> Option<u16> {
    let url = format!("{}/readyz", cluster.gateways[index].endpoint());
    let response = cluster.http.get(url).send().await.ok()?;
    Some(response.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn streams_survive_a_session_api_crash_and_resume_exactly_after_a_gateway_crash() {
    const CLIENTS: usize = 20;
    let Some(mut cluster) = start_cluster().await else {
        return;
    };
    let streams = StreamingSessions::new();
    let (instances, sessions) = streaming_sessions(&cluster, &streams, "stream", CLIENTS).await;
    let (clients, counters) = stream_clients(&cluster, &sessions).await;

    // session-api 0 (gateway-0's) dies: the streams through gateway-0 go on.
    cluster.apis[0].kill().unwrap();
    let marks = marks_ahead(&counters);
    wait_past(
        &cluster,
        "the streams go on without session-api 0",
        &counters,
        &marks,
    )
    .await;
    // Creates work through the other replica.
    let extra = create(&cluster, 1, &instances[1]).await;
    assert_eq!(
        get_session(&cluster, 1, &instances[1], &extra)
            .await
            .broker_id,
        broker_id(1)
    );

    // gateway-0 dies under its 20 clients: each resumes through gateway-1.
    cluster.gateways[0].kill().unwrap();
    for (index, outcome) in finished_streams(&cluster, streams, clients)
        .await
        .iter()
        .enumerate()
    {
        assert!(
            outcome.broke,
            "client {index}: the stream ended before the gateway died"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_restart_moves_clients_without_losing_a_byte() {
    const CLIENTS: usize = 10;
    let Some(mut cluster) = start_cluster().await else {
        return;
    };
    let streams = StreamingSessions::new();
    let (instances, sessions) = streaming_sessions(&cluster, &streams, "rolling", CLIENTS).await;
    let (clients, counters) = stream_clients(&cluster, &sessions).await;

    // session-api 0 is rolled: it stops within its grace period (5 s) with a clean exit, the
    // streams through gateway-0 go on, and creates work through the other replica meanwhile.
    let status = tokio::task::block_in_place(|| cluster.apis[0].terminate(PATIENCE))
        .expect("session-api exits after SIGTERM");
    assert!(status.success(), "session-api 0 exited with {status}");
    let marks = marks_ahead(&counters);
    wait_past(
        &cluster,
        "the streams go on while session-api 0 is away",
        &counters,
        &marks,
    )
    .await;
    create(&cluster, 1, &instances[0]).await;
    assert_eq!(
        readiness(&cluster, 0).await,
        Some(503),
        "gateway-0 without its session-api"
    );
    cluster.restart_session_api(0).await.unwrap();
    cluster
        .eventually("gateway-0 is ready again", || {
            let cluster = &cluster;
            async move { (readiness(cluster, 0).await == Some(200)).then_some(()) }
        })
        .await;
    create(&cluster, 0, &instances[1]).await;

    // gateway-0 is rolled under its 10 clients: /readyz turns 503 while it drains (2 s), then
    // every client is closed with 1012 and resumes through gateway-1 with nothing lost.
    cluster.gateways[0].send_terminate().unwrap();
    cluster
        .eventually("gateway-0 reports not ready once it drains", || {
            let cluster = &cluster;
            async move {
                match readiness(cluster, 0).await {
                    Some(503) => Some(()),
                    Some(200) => None,
                    other => panic!("gateway-0 answered {other:?} while draining"),
                }
            }
        })
        .await;
    let status = tokio::task::block_in_place(|| cluster.gateways[0].wait(PATIENCE))
        .expect("gateway-0 exits after SIGTERM");
    assert!(status.success(), "gateway-0 exited with {status}");
    for (index, outcome) in finished_streams(&cluster, streams, clients)
        .await
        .iter()
        .enumerate()
    {
        assert_eq!(
            (outcome.broke, outcome.first_close),
            (true, Some(1012)),
            "client {index}: the gateway's close says restart"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_broker_loses_its_sessions_and_the_other_broker_keeps_its_own() {
    let Some(mut cluster) = start_cluster().await else {
        return;
    };
    let doomed = cluster
        .register_instance("doomed", 0, &["sh"], 5)
        .await
        .unwrap();
    let survivor = cluster
        .register_instance("survivor", 1, &["sh"], 5)
        .await
        .unwrap();
    let lost_id = create(&cluster, 0, &doomed).await;
    let kept_id = create(&cluster, 1, &survivor).await;
    let (mut lost, _) = Terminal::attach(cluster.gateways[0].port(), &doomed.id, &lost_id, None)
        .await
        .unwrap();
    let (mut kept, _) = Terminal::attach(cluster.gateways[1].port(), &survivor.id, &kept_id, None)
        .await
        .unwrap();
    kept.input(b"echo before-$((1+1))\n").await.unwrap();
    kept.read_until("before-2").await.unwrap();
    // The doomed shell and a background job of its own, which a hangup does not reach.
    lost.input(b"sleep 7919 & echo \"pids=$$,$!.\"\n")
        .await
        .unwrap();
    let session_processes = read_pids(&mut lost).await;

    cluster.brokers[0].kill().unwrap();
    // The client attached to the dead broker is closed by the gateway, whose stream to it broke,
    // with the contract's code for a backend failure (a dropped connection is no close at all).
    let ended = loop {
        match lost.next().await {
            Ok(Event::Closed(code)) => break code,
            Err(error) => panic!("the socket broke instead of closing: {error:#}"),
            Ok(_) => {}
        }
    };
    assert_eq!(ended, Some(1011), "a broker crash is a backend failure");

    for api in 0..2 {
        cluster
            .eventually("the dead broker's session is broker_lost", || {
                let cluster = &cluster;
                let doomed = &doomed;
                let lost_id = &lost_id;
                async move {
                    let session = get_session(cluster, api, doomed, lost_id).await;
                    (session.status() == session_pb::SessionStatus::Closed
                        && session.close_reason() == session_pb::CloseReason::BrokerLost)
                        .then_some(())
                }
            })
            .await;
    }
    for gateway in 0..2 {
        let mut reattached =
            Terminal::open(cluster.gateways[gateway].port(), &doomed.id, &lost_id, None)
                .await
                .unwrap();
        let code = reattached.close_code().await.expect("a close");
        assert_eq!(code, Some(4004), "reattach through gateway-{gateway}");
    }

    // The other broker's session is untouched: same stream, still typing.
    kept.input(b"echo after-$((2+2))\n").await.unwrap();
    kept.read_until("after-4").await.unwrap();
    let session = get_session(&cluster, 0, &survivor, &kept_id).await;
    assert_eq!(session.status(), session_pb::SessionStatus::Active);
    assert!(
        cluster
            .broker_processes(1)
            .await
            .unwrap()
            .contains(&kept_id)
    );

    // The broker comes back (same id and data directory, a new port): it registers again,
    // nothing of its old sessions is left running, and its instance gets new sessions.
    cluster.restart_broker(0).await.unwrap();
    for pid in session_processes {
        cluster
            .eventually("no process of the lost session is left", || async move {
                (!process_alive(pid)).then_some(())
            })
            .await;
    }
    assert!(cluster.broker_processes(0).await.unwrap().is_empty());
    let fresh_id = create(&cluster, 0, &doomed).await;
    let (mut fresh, _) = Terminal::attach(cluster.gateways[1].port(), &doomed.id, &fresh_id, None)
        .await
        .unwrap();
    fresh.input(b"echo back-$((3+3))\n").await.unwrap();
    fresh.read_until("back-6").await.unwrap();
    let lost = get_session(&cluster, 1, &doomed, &lost_id).await;
    assert_eq!(lost.close_reason(), session_pb::CloseReason::BrokerLost);
}

/// Reads output until `pids=<shell>,<job>.` and returns the two pids.
async fn read_pids(terminal: &mut Terminal) -> [u32; 2] {
    let mut seen = String::new();
    loop {
        match terminal.next().await.expect("the terminal stays up") {
            Event::Output(bytes) => seen.push_str(&String::from_utf8_lossy(&bytes)),
            Event::Json(_) => continue,
            Event::Closed(code) => panic!("closed ({code:?}) before the pids; saw {seen:?}"),
        }
        // The echoed command line has `pids=$$`; the answer has digits.
        for (at, _) in seen.match_indices("pids=") {
            let rest = &seen[at + "pids=".len()..];
            if let Some((pids, _)) = rest.split_once('.')
                && let Some((shell, job)) = pids.split_once(',')
                && let (Ok(shell), Ok(job)) = (shell.parse(), job.parse())
            {
                return [shell, job];
            }
        }
    }
}

/// Whether `pid` is a live process (a zombie waiting for its reaper counts as gone).
fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        // `pid (comm) S ...`: the state follows the last `)`.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
    }
}
