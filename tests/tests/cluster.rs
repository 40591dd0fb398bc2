//! A cluster of real processes on this machine (two brokers, two session-api replicas on one
//! PostgreSQL database, two gateways) under faults: routing across brokers, the cap across
//! replicas, SIGKILL of a session-api replica and of a gateway while clients stream, SIGKILL of
//! a broker.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::join_all;
use ptyhub_proto::session::v1 as session_wire;
use test_support::Requirement;
use test_support::postgres::TestDatabase;
use tests::cluster::{Cluster, PATIENCE, broker_id};
use tests::terminal::{Event, Terminal};

const CAP_MESSAGE: &str = "Maximum of 5 terminal sessions reached for this instance";

async fn start_cluster() -> Option<Cluster> {
    if !test_support::require(Requirement::Postgres) {
        return None;
    }
    let database = TestDatabase::create().await.expect("a fresh database");
    Some(Cluster::start(database).await.expect("the cluster starts"))
}

/// Polls `check` until it returns `Some`, within [`PATIENCE`].
async fn eventually<T, F, Fut>(cluster: &Cluster, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting: {what}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn get_session(
    cluster: &Cluster,
    api: usize,
    instance: &session_wire::Instance,
    session_id: &str,
) -> session_wire::Session {
    cluster
        .session_client(api)
        .await
        .expect("session-api client")
        .get_session(session_wire::GetSessionRequest {
            instance: instance.id.clone(),
            session_id: session_id.to_owned(),
        })
        .await
        .expect("get session")
        .into_inner()
}

async fn create(cluster: &Cluster, gateway: usize, instance: &session_wire::Instance) -> String {
    let (status, body) = cluster
        .create_session(gateway, &instance.id)
        .await
        .expect("create session");
    assert_eq!(status, 201, "create through gateway-{gateway}: {body}");
    body["id"].as_str().expect("a session id").to_owned()
}

/// Reads output until `needle` shows up; fails on exit or close.
async fn read_until(terminal: &mut Terminal, needle: &str) {
    let mut seen = Vec::new();
    loop {
        match terminal.next().await.expect("the terminal stays up") {
            Event::Output(bytes) => {
                seen.extend(bytes);
                if String::from_utf8_lossy(&seen).contains(needle) {
                    return;
                }
            }
            Event::Json(_) => {}
            Event::Closed(code) => panic!(
                "closed ({code:?}) before {needle:?}; saw {:?}",
                String::from_utf8_lossy(&seen)
            ),
        }
    }
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
            read_until(&mut terminal, "routed-42").await;
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

/// The bytes `line-0\r\n` .. `line-{n-1}\r\n` that the streaming command writes through a PTY.
fn expected_stream(lines: usize) -> Vec<u8> {
    (0..lines)
        .flat_map(|i| format!("line-{i}\r\n").into_bytes())
        .collect()
}

#[derive(Debug)]
struct StreamOutcome {
    bytes: Vec<u8>,
    /// The first connection broke before the process exited.
    broke: bool,
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
    let broke = loop {
        match terminal.next().await {
            Ok(Event::Output(chunk)) => {
                bytes.extend(chunk);
                received.store(bytes.len(), Ordering::SeqCst);
            }
            Ok(Event::Json(frame)) if frame["type"] == "exit" => break false,
            Ok(Event::Json(frame)) => anyhow::bail!("unexpected frame {frame}"),
            Ok(Event::Closed(_)) | Err(_) => break true,
        }
    };
    if !broke {
        return Ok(StreamOutcome { bytes, broke });
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
    Ok(StreamOutcome { bytes, broke })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn streams_survive_a_session_api_crash_and_resume_exactly_after_a_gateway_crash() {
    const CLIENTS: usize = 20;
    const LINES: usize = 500;
    let Some(mut cluster) = start_cluster().await else {
        return;
    };
    let script =
        format!("i=0; while [ $i -lt {LINES} ]; do echo line-$i; i=$((i+1)); sleep 0.04; done");
    let command = ["sh", "-c", script.as_str()];
    let instances = [
        cluster
            .register_instance("stream-0", 0, &command, 50)
            .await
            .unwrap(),
        cluster
            .register_instance("stream-1", 1, &command, 50)
            .await
            .unwrap(),
    ];
    let mut sessions = Vec::new();
    for index in 0..CLIENTS {
        let instance = &instances[index % 2];
        sessions.push((
            instance.id.clone(),
            create(&cluster, index % 2, instance).await,
        ));
    }
    let counters: Vec<Arc<AtomicUsize>> = (0..CLIENTS).map(|_| Arc::default()).collect();
    let (first, second) = (cluster.gateways[0].port(), cluster.gateways[1].port());
    let clients: Vec<_> = sessions
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
    let line = "line-0\r\n".len();
    let all_past = |counters: &[Arc<AtomicUsize>], marks: &[usize]| {
        counters
            .iter()
            .zip(marks)
            .all(|(counter, mark)| counter.load(Ordering::SeqCst) >= *mark)
    };
    eventually(&cluster, "every client streams through gateway-0", || {
        let ready = all_past(&counters, &[3 * line; CLIENTS]);
        async move { ready.then_some(()) }
    })
    .await;

    // session-api 0 (gateway-0's) dies: the streams through gateway-0 go on.
    cluster.apis[0].kill().unwrap();
    let marks: Vec<usize> = counters
        .iter()
        .map(|counter| counter.load(Ordering::SeqCst) + 3 * line)
        .collect();
    eventually(&cluster, "the streams go on without session-api 0", || {
        let moved = all_past(&counters, &marks);
        async move { moved.then_some(()) }
    })
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
    let expected = expected_stream(LINES);
    for (index, client) in clients.into_iter().enumerate() {
        let outcome = tokio::time::timeout(PATIENCE * 2, client)
            .await
            .expect("the client finishes")
            .expect("the client task")
            .unwrap_or_else(|error| panic!("client {index}: {error:#}\n{}", cluster.logs()));
        assert!(
            outcome.broke,
            "client {index}: the stream ended before the gateway died"
        );
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
    read_until(&mut kept, "before-2").await;

    cluster.brokers[0].kill().unwrap();
    // The client attached to the dead broker is closed (the gateway's stream to it broke).
    let ended = loop {
        match lost.next().await {
            Ok(Event::Closed(code)) => break code,
            Err(_) => break None,
            Ok(_) => {}
        }
    };
    assert_ne!(ended, Some(1000), "a broker crash is no normal close");

    for api in 0..2 {
        eventually(&cluster, "the dead broker's session is broker_lost", || {
            let cluster = &cluster;
            let doomed = &doomed;
            let lost_id = &lost_id;
            async move {
                let session = get_session(cluster, api, doomed, lost_id).await;
                (session.status() == session_wire::SessionStatus::Closed
                    && session.close_reason() == session_wire::CloseReason::BrokerLost)
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
        let code = loop {
            match reattached.next().await.expect("a close") {
                Event::Closed(code) => break code,
                Event::Json(_) => {}
                Event::Output(bytes) => panic!("output from a lost session: {bytes:?}"),
            }
        };
        assert_eq!(code, Some(4004), "reattach through gateway-{gateway}");
    }

    // The other broker's session is untouched: same stream, still typing.
    kept.input(b"echo after-$((2+2))\n").await.unwrap();
    read_until(&mut kept, "after-4").await;
    let session = get_session(&cluster, 0, &survivor, &kept_id).await;
    assert_eq!(session.status(), session_wire::SessionStatus::Active);
    assert!(
        cluster
            .broker_processes(1)
            .await
            .unwrap()
            .contains(&kept_id)
    );
}
