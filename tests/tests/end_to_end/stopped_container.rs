//! A session asked of an instance whose container is stopped: refused at creation with an error
//! of its own, not the cap's, on REST (409 with `code: container_not_running`) and on gRPC
//! (`FAILED_PRECONDITION` with `ptyhub-error-code: container_not_running`), through the
//! gateway and from session-api alike; once the container runs again, a session starts.

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_proto::session::v1::session_api_client::SessionApiClient;
use ptyhub_test_support::Requirement;
use ptyhub_wire::ERROR_CODE_METADATA;
use serde_json::json;
use tests::cluster::{API_TOKEN, BearerToken, Cluster};
use tests::container::Container;
use tonic::transport::Channel;

use crate::start;

async fn docker(args: &[&str]) {
    let output = tokio::process::Command::new("docker")
        .args(args)
        .output()
        .await
        .expect("docker runs");
    assert!(
        output.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn create_request(instance: &str) -> session_pb::CreateSessionRequest {
    session_pb::CreateSessionRequest {
        instance: instance.to_owned(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_in_a_stopped_container_is_refused_with_its_own_code() {
    if !ptyhub_test_support::require(Requirement::Docker) {
        return;
    }
    let container = Container::start().await;
    let Some(cluster) = start(
        Cluster::builder()
            .session_apis(1)
            .brokers(1)
            .gateways(1)
            .broker_flag("backends", "docker"),
    )
    .await
    else {
        return;
    };
    let instance = cluster
        .register_instance_with(
            0,
            session_pb::RegisterInstanceRequest {
                name: "stopped".to_owned(),
                target: Some(broker_pb::Target {
                    kind: Some(broker_pb::target::Kind::Docker(broker_pb::DockerTarget {
                        container: container.name.clone(),
                    })),
                }),
                // Not root: the broker refuses root in containers by default.
                user: "tester".to_owned(),
                max_sessions: 1,
                ..Default::default()
            },
        )
        .await
        .expect("register a Docker instance");
    docker(&["stop", "--time", "0", &container.name]).await;

    let path = format!("/api/v1/instances/{}/terminal/sessions", instance.id);
    for _ in 0..2 {
        // Twice on a cap of one: the refused create held no slot.
        let (status, body) = cluster
            .rest(0, reqwest::Method::POST, &path, Some(json!({})))
            .await
            .expect("an answer");
        assert_eq!(
            (status, &body["code"]),
            (409, &json!("container_not_running")),
            "{body}"
        );
        let detail = body["detail"].as_str().expect("a detail");
        assert!(
            detail.contains(&format!("container {} is not running", container.name))
                && detail.contains("docker start"),
            "{detail}"
        );
        assert!(!detail.contains("Maximum"), "not the cap's: {detail}");
    }

    let gateway = Channel::from_shared(cluster.gateways[0].endpoint())
        .expect("the gateway's endpoint")
        .connect()
        .await
        .expect("connect to the gateway");
    let mut through_gateway =
        SessionApiClient::with_interceptor(gateway, BearerToken(API_TOKEN.to_owned()));
    let mut session_api = cluster.session_client(0).await.expect("session-api");
    for status in [
        through_gateway
            .create_session(create_request(&instance.id))
            .await
            .expect_err("refused through the gateway"),
        session_api
            .create_session(create_request(&instance.id))
            .await
            .expect_err("refused by session-api"),
    ] {
        assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
        assert_eq!(
            status
                .metadata()
                .get(ERROR_CODE_METADATA)
                .and_then(|value| value.to_str().ok()),
            Some("container_not_running"),
            "{status:?}"
        );
        assert!(status.message().contains("is not running"), "{status:?}");
    }

    docker(&["start", &container.name]).await;
    let (status, body) = cluster
        .rest(0, reqwest::Method::POST, &path, Some(json!({})))
        .await
        .expect("an answer");
    assert_eq!(status, 201, "a session once the container runs: {body}");
}
