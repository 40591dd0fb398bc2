//! A broker that does not answer: REST says 503, a WebSocket open closes 1011 (reconnect with
//! backoff), the attempted sessions are recorded as `spawn_failed`, and `/healthz` reports the
//! broker while `/readyz` stays 200 (one lost node must not take the gateway out of service).

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_proto::session::v1::broker_registry_client::BrokerRegistryClient;
use ptyhub_test_support::stack::{TestStack, other_broker_credential};
use reqwest::Method;
use serde_json::json;
use tokio::net::TcpListener;
use tonic::transport::Channel;

use super::support::{Terminal, eventually, list_sessions, rest, rest_anonymous, sessions_path};

/// The broker the tests play, which registers itself with a credential of its own.
const LOST_BROKER: &str = "hangs-up";

/// Registers a broker whose endpoint accepts connections and hangs up at once, and an instance
/// on it; returns the instance's id. The listener task lives as long as the test's runtime.
async fn instance_on_a_broker_that_hangs_up(stack: &TestStack) -> String {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let endpoint = format!("http://{}", listener.local_addr().expect("local address"));
    tokio::spawn(async move {
        while let Ok((connection, _)) = listener.accept().await {
            drop(connection);
        }
    });
    let channel = Channel::from_shared(stack.session_api_endpoint.clone())
        .expect("session-api endpoint")
        .connect_lazy();
    BrokerRegistryClient::with_interceptor(
        channel,
        other_broker_credential(LOST_BROKER).bearer_auth(),
    )
    .register_broker(session_pb::RegisterBrokerRequest {
        id: LOST_BROKER.to_owned(),
        endpoint,
        docker: false,
    })
    .await
    .expect("register the broker");
    stack
        .session_api
        .clone()
        .register_instance(session_pb::RegisterInstanceRequest {
            name: "on-a-lost-broker".to_owned(),
            target: Some(broker_pb::Target {
                kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
            }),
            command: vec!["/bin/sh".to_owned()],
            max_sessions: 5,
            broker_id: LOST_BROKER.to_owned(),
            ..Default::default()
        })
        .await
        .expect("register an instance on the broker")
        .into_inner()
        .id
}

#[tokio::test]
async fn a_broker_that_does_not_answer_is_503_over_rest_and_1011_over_websocket() {
    let stack = TestStack::builder().other_broker(LOST_BROKER).start().await;
    let instance = instance_on_a_broker_that_hangs_up(&stack).await;

    let refused = rest(
        &stack,
        Method::POST,
        &sessions_path(&instance),
        Some(json!({"name": "over-rest"})),
    )
    .await;
    refused.expect_error(503, "create a session on a lost broker");

    let mut terminal = Terminal::open(
        &stack,
        &format!("/ws/tool-instances/{instance}/terminal?client_id=tab-1"),
    )
    .await;
    let closed = terminal.read_until_closed().await;
    assert_eq!(closed.code, 1011, "{closed:?}");
    assert!(terminal.texts.is_empty(), "{:?}", terminal.texts);

    // Neither attempt holds a slot; both are in the history with their reason.
    assert!(list_sessions(&stack, &instance, false).await.is_empty());
    let history = list_sessions(&stack, &instance, true).await;
    assert_eq!(history.len(), 2, "{history:?}");
    for record in &history {
        assert_eq!(record["status"], "closed", "{record}");
        assert_eq!(record["close_reason"], "spawn_failed", "{record}");
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn a_lost_broker_fails_healthz_but_not_readyz() {
    let stack = TestStack::builder().other_broker(LOST_BROKER).start().await;
    let healthy = rest_anonymous(&stack, "/healthz").await;
    assert_eq!(healthy.status, 200, "{:?}", healthy.body);
    instance_on_a_broker_that_hangs_up(&stack).await;

    let unhealthy = eventually("/healthz reports the lost broker", || async {
        let reply = rest(&stack, reqwest::Method::GET, "/healthz", None).await;
        (reply.status == 503).then_some(reply.body)
    })
    .await;
    // Without a credential, the same answer says only that something is wrong.
    let anonymous = rest_anonymous(&stack, "/healthz").await;
    assert_eq!(anonymous.status, 503);
    assert_eq!(anonymous.body, serde_json::json!({"status": "unavailable"}));
    assert!(
        unhealthy["detail"]
            .as_str()
            .is_some_and(|detail| detail.contains("hangs-up")),
        "{unhealthy}"
    );
    let ready = rest_anonymous(&stack, "/readyz").await;
    assert_eq!(ready.status, 200, "{:?}", ready.body);
    stack.shutdown().await;
}
