//! The end-to-end tests, one binary (linked once): the deployment files against the binaries,
//! and clusters of real service processes on loopback ports under faults and churn, reached
//! through REST, WebSockets and gRPC as their clients reach them.

mod churn;
mod cluster;
mod contract;
mod deployment;
mod handoff;
mod health;
mod idle_reaping;
mod input;
mod keepalive;
mod nodelay;
mod outside_client;
mod recordings;
mod stopped_container;
mod teardown;
mod tickets;
mod tombstone;

use ptyhub_proto::session::v1 as session_pb;
use ptyhub_test_support::Requirement;
use ptyhub_test_support::postgres::TestDatabase;
use tests::cluster::{Cluster, ClusterBuilder};

/// Starts `cluster` on a fresh database; `None` when PostgreSQL is unavailable (the test is
/// skipped, or fails under `CI=true`).
async fn start(cluster: ClusterBuilder) -> Option<Cluster> {
    if !ptyhub_test_support::require(Requirement::Postgres) {
        return None;
    }
    let database = TestDatabase::create().await.expect("a fresh database");
    Some(cluster.start(database).await.expect("the cluster starts"))
}

/// `GET /api/v1/instances/{iid}/terminal/sessions/{sid}` through gateway 0: the session's JSON.
async fn session_record(
    cluster: &Cluster,
    instance_id: &str,
    session_id: &str,
) -> serde_json::Value {
    let (status, body) = cluster
        .rest(
            0,
            reqwest::Method::GET,
            &format!("/api/v1/instances/{instance_id}/terminal/sessions/{session_id}"),
            None,
        )
        .await
        .expect("get the session");
    assert_eq!(status, 200, "get session {session_id}: {body}");
    body
}

/// `POST /api/v1/instances/{iid}/terminal/sessions` through gateway 0 with `body`: the status
/// and the answer.
async fn create_session(
    cluster: &Cluster,
    instance_id: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    cluster
        .rest(
            0,
            reqwest::Method::POST,
            &format!("/api/v1/instances/{instance_id}/terminal/sessions"),
            Some(body),
        )
        .await
        .expect("an answer to the create")
}

/// Creates a session through gateway 0 and returns its id; panics unless the answer is 201.
async fn created_session(cluster: &Cluster, instance_id: &str, body: serde_json::Value) -> String {
    let (status, answer) = create_session(cluster, instance_id, body).await;
    assert_eq!(status, 201, "create: {answer}");
    answer["id"].as_str().expect("a session id").to_owned()
}

/// session-api's changes to the sessions of `instance_id` from now on, as replica 0 streams
/// them (`WatchSessions`), drained as they come so that the replica never sees this watcher lag.
/// A test reads a sequence of transitions from it in order, however fast they follow each other.
async fn session_changes(
    cluster: &Cluster,
    instance_id: &str,
) -> tokio::sync::mpsc::UnboundedReceiver<session_pb::SessionChange> {
    let mut stream = cluster
        .session_client(0)
        .await
        .expect("a session-api client")
        .watch_sessions(session_pb::WatchSessionsRequest {
            instance: instance_id.to_owned(),
        })
        .await
        .expect("watch the sessions")
        .into_inner();
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(change)) = stream.message().await {
            if sender.send(change).is_err() {
                return;
            }
        }
    });
    receiver
}

/// The next change of session `session_id` on `changes`; panics when none comes within
/// [`tests::cluster::PATIENCE`] (a hang, not a slow machine).
async fn next_change_of(
    changes: &mut tokio::sync::mpsc::UnboundedReceiver<session_pb::SessionChange>,
    session_id: &str,
) -> (session_pb::session_change::Kind, session_pb::Session) {
    loop {
        let (kind, session) = next_change(changes).await;
        if session.id == session_id {
            return (kind, session);
        }
    }
}

/// The next change on `changes`, of any session; panics when none comes within
/// [`tests::cluster::PATIENCE`] (a hang, not a slow machine).
async fn next_change(
    changes: &mut tokio::sync::mpsc::UnboundedReceiver<session_pb::SessionChange>,
) -> (session_pb::session_change::Kind, session_pb::Session) {
    let change = tokio::time::timeout(tests::cluster::PATIENCE, changes.recv())
        .await
        .expect("a session change in time")
        .expect("the change stream goes on");
    let kind = change.kind();
    (kind, change.session.expect("a change carries its session"))
}

/// Skips changes of session `session_id` until it closes, and returns it closed.
async fn closed_session(
    changes: &mut tokio::sync::mpsc::UnboundedReceiver<session_pb::SessionChange>,
    session_id: &str,
) -> session_pb::Session {
    loop {
        if let (session_pb::session_change::Kind::Closed, session) =
            next_change_of(changes, session_id).await
        {
            return session;
        }
    }
}
