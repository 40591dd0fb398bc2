//! The tombstone through the real binaries: a session whose process exits stays `exited` (with
//! its exit code and its aliases) while the broker keeps its final output, and when a broker
//! started with a short `--tombstone` lets it go, session-api closes the record with reason
//! `exited`, its slot and alias are free again, and the gateway refuses a reattach with 4004.

use std::time::Duration;

use serde_json::json;
use tests::cluster::Cluster;
use tests::terminal::Terminal;

use crate::{create_session, created_session, session_record, start};

/// Short, so that the test takes seconds, yet long enough that the record, read from the moment
/// the create answered, is seen `exited` before the tombstone ends even on a loaded machine.
const TOMBSTONE: Duration = Duration::from_secs(8);

/// Waits until the record of `session_id` satisfies `done`, and returns it.
async fn wait_record(
    cluster: &Cluster,
    instance_id: &str,
    session_id: &str,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let done = &done;
    cluster
        .eventually(&format!("session {session_id} {what}"), || async move {
            let record = session_record(cluster, instance_id, session_id).await;
            done(&record).then_some(record)
        })
        .await
}

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
    let session = created_session(&cluster, &instance.id, json!({"aliases": ["job-1"]})).await;

    // Exited first: the exit code is kept, and the session still holds its alias.
    let exited = wait_record(&cluster, &instance.id, &session, "is exited", |record| {
        record["status"] != "active" && record["status"] != "starting"
    })
    .await;
    assert_eq!(
        exited["status"], "exited",
        "seen before the tombstone ended: {exited}"
    );
    assert_eq!(exited["exit_code"], 3, "{exited}");
    assert_eq!(exited["aliases"], json!(["job-1"]), "{exited}");

    // Then closed, by the end of the tombstone, with the exit code still on the record.
    let closed = wait_record(&cluster, &instance.id, &session, "is closed", |record| {
        record["status"] == "closed"
    })
    .await;
    assert_eq!(closed["close_reason"], "exited", "{closed}");
    assert_eq!(closed["exit_code"], 3, "{closed}");

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
