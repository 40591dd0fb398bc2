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
