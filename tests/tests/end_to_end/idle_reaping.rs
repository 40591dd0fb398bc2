//! Idle reaping through the real binaries: a broker started with a short `--detached-timeout`
//! closes a session that no client is attached to, session-api records it as `idle_reaped` and
//! frees its slot and aliases, and the gateway refuses a reattach with 4004. Attaching cancels
//! the timer, and a session has one timer however often it is detached and attached.
//!
//! No test waits for a time to pass: "the timeout has passed" is shown by a witness session,
//! created and left alone at a known point, being reaped, and the sessions' transitions are read
//! in order from session-api's change stream or the broker's event stream. Nothing must happen
//! within the timeout either: a step that a loaded machine makes slower than the timeout is
//! taken as what it then is (a reap), never as a failure. The timer itself is pinned with a
//! paused clock in the broker's own tests (`idle_session_is_reaped_by_one_timer_that_attach_cancels`).

use std::time::{Duration, Instant};

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use serde_json::json;
use session_pb::CloseReason;
use session_pb::session_change::Kind;
use tests::cluster::{Cluster, PATIENCE};
use tests::terminal::Terminal;
use tokio::sync::mpsc;

use crate::{
    closed_session, create_session, created_session, next_change, next_change_of, session_changes,
    session_record, start,
};

/// Short, so that the tests take seconds.
const DETACHED_TIMEOUT: Duration = Duration::from_secs(4);

async fn start_reaping_cluster() -> Option<Cluster> {
    start(
        Cluster::builder()
            .session_apis(1)
            .brokers(1)
            .gateways(1)
            .broker_flag(
                "detached-timeout",
                format!("{}s", DETACHED_TIMEOUT.as_secs()),
            ),
    )
    .await
}

async fn register_shell(cluster: &Cluster, name: &str, max_sessions: u32) -> session_pb::Instance {
    cluster
        .register_instance(name, 0, &["sh"], max_sessions)
        .await
        .expect("register an instance")
}

/// Waits until the record of `session_id` is closed, and checks that it was reaped.
async fn wait_reaped(cluster: &Cluster, instance_id: &str, session_id: &str) {
    let record = cluster
        .eventually(&format!("session {session_id} is closed"), || async move {
            let record = session_record(cluster, instance_id, session_id).await;
            (record["status"] == "closed").then_some(record)
        })
        .await;
    assert_eq!(record["close_reason"], "idle_reaped", "{record}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_is_reaped_and_frees_its_slot_and_its_alias() {
    let Some(cluster) = start_reaping_cluster().await else {
        return;
    };
    let instance = register_shell(&cluster, "reaped", 1).await;
    let mut changes = session_changes(&cluster, &instance.id).await;
    let aliased = created_session(&cluster, &instance.id, json!({"aliases": ["agent-7"]})).await;
    // The cap holds while it lives: a create is refused, or, should this machine take a whole
    // timeout to get here, answered only once the session was reaped.
    let (status, body) = create_session(&cluster, &instance.id, json!({})).await;
    assert!(matches!(status, 201 | 409), "{status}: {body}");
    // However it went, the change stream shows no other session created before the reap.
    let reaped = loop {
        match next_change(&mut changes).await {
            (Kind::Closed, record) if record.id == aliased => break record,
            (kind, record) => assert!(
                record.id == aliased || kind != Kind::Created,
                "a second session while the first lived: {record:?}"
            ),
        }
    };
    assert_eq!(reaped.close_reason(), CloseReason::IdleReaped, "{reaped:?}");
    if status == 201 {
        let late = body["id"].as_str().expect("a session id");
        let late = closed_session(&mut changes, late).await;
        assert_eq!(late.close_reason(), CloseReason::IdleReaped, "{late:?}");
    }

    // The slot is free again, and so is the alias.
    let (status, body) =
        create_session(&cluster, &instance.id, json!({"aliases": ["agent-7"]})).await;
    assert_eq!(status, 201, "the alias of a reaped session is free: {body}");
    let successor = body["id"].as_str().expect("a session id");
    assert_ne!(successor, aliased, "{body}");
    let (kind, record) = next_change_of(&mut changes, successor).await;
    assert_eq!(kind, Kind::Created, "{record:?}");
    assert_eq!(record.aliases, ["agent-7"], "{record:?}");

    // The reaped session is gone for clients: a reattach is refused as not found.
    let mut reattach = Terminal::open(cluster.gateways[0].port(), &instance.id, &aliased, None)
        .await
        .expect("the WebSocket opens");
    assert_eq!(
        reattach.close_code().await.expect("a close"),
        Some(4004),
        "reattach to a reaped session"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attaching_cancels_the_timer_and_one_timer_reaps_a_session_once() {
    let Some(cluster) = start_reaping_cluster().await else {
        return;
    };
    let instance = register_shell(&cluster, "attached", 5).await;
    let mut events = broker_events(&cluster).await;
    let port = cluster.gateways[0].port();
    let tab_path = format!(
        "/ws/tool-instances/{}/terminal?client_id=reaping-tab",
        instance.id
    );

    // The tab's open creates its session and attaches to it.
    let mut tab = Terminal::open_path(port, &tab_path).await.expect("open");
    let status = tab.connected().await.expect("connected");
    let mut session = status["session"]["id"]
        .as_str()
        .expect("a session id")
        .to_owned();
    // Each close starts a timer and each open cancels it: five timers that must never fire.
    for round in 0..5 {
        let detached_at = Instant::now();
        tab.close().await.expect("close");
        tab = Terminal::open_path(port, &tab_path).await.expect("open");
        let status = tab.connected().await.expect("connected");
        let reopened = status["session"]["id"].as_str().expect("a session id");
        if reopened != session {
            // Reaped while detached, and the tab's open made it a new session: only a machine
            // slower than the whole timeout between a close and an open may see that. The
            // test's clock started before the broker's, so it shows a reap that came early.
            let detached_for = detached_at.elapsed();
            assert!(
                detached_for >= DETACHED_TIMEOUT,
                "round {round}: reaped {detached_for:?} after the detach, before its timeout"
            );
            reopened.clone_into(&mut session);
        }
    }

    // Attached now. A witness left alone from here is reaped one timeout later, when every
    // timer the detaches above started would have run out too.
    let witness = created_session(&cluster, &instance.id, json!({})).await;
    wait_reaped(&cluster, &instance.id, &witness).await;
    let record = session_record(&cluster, &instance.id, &session).await;
    assert_eq!(
        record["status"], "active",
        "an attached session outlives the timeout: {record}"
    );

    // Detached for good: the session is reaped. A second witness, left alone after that, is
    // reaped after any other timer of the session would have fired; the broker's event stream
    // is in order, so every close of the session comes before the witness's.
    tab.close().await.expect("close");
    wait_reaped(&cluster, &instance.id, &session).await;
    let late_witness = created_session(&cluster, &instance.id, json!({})).await;
    wait_reaped(&cluster, &instance.id, &late_witness).await;
    let mut closes = Vec::new();
    loop {
        let closed = tokio::time::timeout(PATIENCE, events.recv())
            .await
            .expect("the broker reports the witness's close")
            .expect("the event stream goes on");
        if closed.session_id == late_witness {
            break;
        }
        if closed.session_id == session {
            closes.push(closed.reason());
        }
    }
    assert_eq!(
        closes,
        [broker_pb::CloseReason::IdleReaped],
        "the session is closed once, by its timer"
    );
}

/// The `Closed` events of the broker's event stream, from now on.
async fn broker_events(cluster: &Cluster) -> mpsc::UnboundedReceiver<broker_pb::Closed> {
    let mut stream = cluster
        .broker_client(0)
        .await
        .expect("a broker client")
        .watch_events(broker_pb::WatchEventsRequest {})
        .await
        .expect("watch the broker's events")
        .into_inner();
    let (sender, receiver) = mpsc::unbounded_channel();
    // Drained as it comes, so that the broker never sees this subscriber lag.
    tokio::spawn(async move {
        while let Ok(Some(event)) = stream.message().await {
            if let Some(broker_pb::broker_event::Event::Closed(closed)) = event.event
                && sender.send(closed).is_err()
            {
                return;
            }
        }
    });
    receiver
}
