//! Recordings in a cluster on object storage: two brokers and two gateways share one S3 bucket
//! (moto's server on loopback); a session recorded on broker 0 and closed through gateway 0 is
//! downloaded through gateway 1 and parses with a strict asciicast v2 reader.

use ptyhub_test_support::Requirement;
use ptyhub_test_support::asciicast::Cast;
use tests::cluster::Cluster;
use tests::s3::S3Server;

use crate::start;

const BUCKET: &str = "ptyhub-recordings";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_made_on_one_broker_is_served_by_the_other_gateway() {
    if !ptyhub_test_support::require(Requirement::S3Server) {
        return;
    }
    let logs = tempfile::tempdir().unwrap();
    let s3 = S3Server::start(logs.path())
        .await
        .expect("moto_server starts");
    let http = ptyhub_test_support::http::client().build().unwrap();
    s3.create_bucket(&http, BUCKET).await.expect("a bucket");
    let url = s3.recordings_url(BUCKET, "cluster-a");
    let mut builder = Cluster::builder()
        .session_apis(1)
        .broker_flag("recordings", &url)
        .gateway_flag("recordings", &url);
    for (name, value) in S3Server::credentials() {
        builder = builder.env(name, value);
    }
    let Some(cluster) = start(builder).await else {
        return;
    };
    let (status, instance) = cluster
        .rest(
            0,
            reqwest::Method::POST,
            "/api/v1/instances",
            Some(serde_json::json!({
                "name": "taped",
                "target": {"local": {}},
                "command": ["sh", "-c", "echo cluster-$((6*7)); exec sleep 600"],
                "record": "output+input",
            })),
        )
        .await
        .expect("register");
    assert_eq!(status, 201, "{instance}");
    let instance_id = instance["id"].as_str().unwrap().to_owned();
    let broker = instance["broker_id"].as_str().unwrap().to_owned();
    let (status, session) = cluster.create_session(0, &instance_id).await.unwrap();
    assert_eq!(status, 201, "{session}");
    let session_id = session["id"].as_str().unwrap().to_owned();
    let session_path = format!("/api/v1/instances/{instance_id}/terminal/sessions/{session_id}");
    cluster
        .eventually("the session printed", || async {
            let (status, screen) = cluster
                .rest(
                    0,
                    reqwest::Method::GET,
                    &format!("{session_path}/screen"),
                    None,
                )
                .await
                .ok()?;
            (status == 200 && screen["text"].as_str()?.contains("cluster-42")).then_some(())
        })
        .await;
    let (status, _) = cluster
        .rest(0, reqwest::Method::DELETE, &session_path, None)
        .await
        .unwrap();
    assert_eq!(status, 200);

    // Through the other gateway, which shares nothing with broker 0 but the bucket.
    let recording_url = format!("{}{session_path}/recording", cluster.gateways[1].endpoint());
    let downloaded = cluster
        .eventually("gateway 1 serves the recording", || async {
            let response = cluster
                .http
                .get(&recording_url)
                .bearer_auth(tests::cluster::API_TOKEN)
                .send()
                .await
                .ok()?;
            if response.status() != 200 {
                return None;
            }
            Some(response.bytes().await.ok()?.to_vec())
        })
        .await;
    let cast = Cast::parse(&downloaded).expect("a strict asciicast v2 file");
    let output = String::from_utf8(cast.output()).unwrap();
    assert!(
        output.contains("cluster-42"),
        "{output:?} (made on {broker})"
    );
}
