//! One of two brokers down, as the gateway reports it: `/healthz` is 503 and names the broker,
//! `/readyz` stays 200 (one lost node must not take every gateway out of service), a create on
//! an instance of that broker is 503 with a `detail` and leaves no live session, and the other
//! broker's instances go on.

use serde_json::json;
use tests::cluster::{Cluster, broker_id};

use crate::{create_session, created_session, start};

/// `GET <path>` on gateway 0: the status and the JSON body.
async fn probe(cluster: &Cluster, path: &str) -> (u16, serde_json::Value) {
    cluster
        .rest(0, reqwest::Method::GET, path, None)
        .await
        .unwrap_or_else(|error| panic!("{path}: {error:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_broker_fails_health_but_not_readiness_and_its_creates_are_unavailable() {
    let Some(mut cluster) = start(Cluster::builder().session_apis(1).brokers(2).gateways(1)).await
    else {
        return;
    };
    let lost = cluster
        .register_instance("on-the-lost-broker", 1, &["sh"], 5)
        .await
        .expect("register an instance");
    let kept = cluster
        .register_instance("on-the-kept-broker", 0, &["sh"], 5)
        .await
        .expect("register an instance");
    assert_eq!(probe(&cluster, "/healthz").await.0, 200);
    assert_eq!(probe(&cluster, "/readyz").await.0, 200);

    cluster.brokers[1].kill().expect("kill broker 1");
    let health = cluster
        .eventually("/healthz reports the dead broker", || {
            let cluster = &cluster;
            async move {
                let (status, body) = probe(cluster, "/healthz").await;
                (status == 503).then_some(body)
            }
        })
        .await;
    let status_of = |id: String| {
        health["brokers"]
            .as_array()
            .and_then(|brokers| brokers.iter().find(|broker| broker["id"] == id.as_str()))
            .map(|broker| broker["status"].clone())
    };
    assert_eq!(status_of(broker_id(0)), Some(json!("ok")), "{health}");
    assert!(
        status_of(broker_id(1)).is_some_and(|status| status != "ok"),
        "{health}"
    );
    let (status, body) = probe(&cluster, "/readyz").await;
    assert_eq!(status, 200, "readiness does not depend on brokers: {body}");

    let (status, body) = create_session(&cluster, &lost.id, json!({})).await;
    assert_eq!(status, 503, "create on the dead broker's instance: {body}");
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|detail| !detail.is_empty()),
        "{body}"
    );
    let (status, body) = cluster
        .rest(
            0,
            reqwest::Method::GET,
            &format!("/api/v1/instances/{}/terminal/sessions", lost.id),
            None,
        )
        .await
        .expect("list sessions");
    assert_eq!(
        (status, &body["sessions"]),
        (200, &json!([])),
        "a refused create leaves no live session"
    );

    created_session(&cluster, &kept.id, json!({})).await;
}
