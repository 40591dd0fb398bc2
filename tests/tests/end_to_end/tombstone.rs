//! The tombstone through the real binaries: a session whose process exits is `exited` (with its
//! exit code and its aliases) while the broker keeps its final output, and when a broker started
//! with a short `--tombstone` lets it go, session-api closes the record with reason `exited`,
//! its slot and alias are free again, and the gateway refuses a reattach with 4004.
//!
//! No test races the tombstone: both transitions are read in order from session-api's change
//! stream, watched before the session is created, so they are seen however long the create or
//! the exit takes. The timer itself is pinned with a paused clock in the broker's own tests
//! (`an_exited_session_is_kept_for_its_tombstone_then_closed_as_exited`).

use std::time::Duration;

use ptyhub_proto::session::v1 as session_pb;
use serde_json::json;
use session_pb::SessionStatus;
use session_pb::session_change::Kind;
use tests::cluster::Cluster;
use tests::terminal::Terminal;

use crate::{create_session, created_session, next_change_of, session_changes, start};

/// Short, so that the test takes seconds; nothing needs to happen within it.
const TOMBSTONE: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_of_the_tombstone_closes_the_session_as_exited_and_frees_its_slot_and_alias() {
    let Some(cluster) = start(
        Cluster::builder()
            .session_apis(1)
            .brokers(1)
            .gateways(1)
            .broker_flag("tombstone", format!("{}s", TOMBSTONE.as_secs())),
    )
    .await
    else {
        return;
    };
    let instance = cluster
        .register_instance("tombstoned", 0, &["sh", "-c", "echo last words; exit 3"], 1)
        .await
        .expect("register an instance");
    let mut changes = session_changes(&cluster, &instance.id).await;
    let session = created_session(&cluster, &instance.id, json!({"aliases": ["job-1"]})).await;

    // Its transitions until it closes, in the order session-api made them.
    let mut transitions = Vec::new();
    let closed = loop {
        match next_change_of(&mut changes, &session).await {
            (Kind::Status, record) if record.status() != SessionStatus::Active => {
                transitions.push(record);
            }
            (Kind::Closed, record) => break record,
            _ => {}
        }
    };
    // Exited first: the exit code is kept, and the session still holds its alias.
    let [exited] = transitions.as_slice() else {
        panic!("one transition before the close, to exited: {transitions:?}");
    };
    assert_eq!(exited.status(), SessionStatus::Exited, "{exited:?}");
    assert_eq!(exited.exit.map(|exit| exit.code), Some(3), "{exited:?}");
    assert_eq!(exited.aliases, ["job-1"], "{exited:?}");
    // Then closed, by the end of the tombstone, with the exit code still on the record.
    assert_eq!(
        closed.close_reason(),
        session_pb::CloseReason::Exited,
        "{closed:?}"
    );
    assert_eq!(closed.exit.map(|exit| exit.code), Some(3), "{closed:?}");

    // The one slot is free again, and so is the alias: a new session takes both.
    let (status, body) =
        create_session(&cluster, &instance.id, json!({"aliases": ["job-1"]})).await;
    assert_eq!(
        status, 201,
        "the slot and alias of a closed session are free: {body}"
    );
    assert_ne!(body["id"], session, "{body}");

    // The closed session is gone for clients.
    let mut reattach = Terminal::open(cluster.gateways[0].port(), &instance.id, &session, None)
        .await
        .expect("the WebSocket opens");
    assert_eq!(
        reattach.close_code().await.expect("a close"),
        Some(4004),
        "reattach after the tombstone"
    );
}
