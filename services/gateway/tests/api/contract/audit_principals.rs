//! The audit trail's principals and surfaces the audit module does not reach: `system` for what
//! ptyhub does by itself (an idle reap), `share:<id>` for a share link's streams, and the
//! `grpc`, `grpc-web` and `cli` (a gRPC call with the `ptyhub` CLI's user agent) surfaces of calls
//! made through them.

use std::time::Duration;

use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_proto::session::v1::session_api_client::SessionApiClient;
use ptyhub_test_support::stack::TestStack;
use reqwest::Method;
use serde_json::{Value, json};
use tonic_web::GrpcWebClientLayer;

use super::support::{Terminal, as_admin, eventually, gateway_grpc, rest, sessions_path};

/// The events of `instance` the admin lists, oldest first (one page is enough here).
async fn instance_events(stack: &TestStack, instance: &str) -> Vec<Value> {
    rest(
        stack,
        Method::GET,
        &format!("/api/v1/audit?instance={instance}&limit=1000"),
        None,
    )
    .await
    .expect(200, "the audit trail")["events"]
        .as_array()
        .expect("an events array")
        .clone()
}

/// Waits for an event of `instance` for which `wanted` holds, and returns it.
async fn audited(
    stack: &TestStack,
    instance: &str,
    what: &str,
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    eventually(what, || async {
        instance_events(stack, instance)
            .await
            .into_iter()
            .find(|event| wanted(event))
    })
    .await
}

#[tokio::test]
async fn an_idle_reap_is_recorded_as_the_system_s_doing() {
    let stack = TestStack::builder()
        .detached_timeout(Duration::from_millis(300))
        .start()
        .await;
    let instance = stack.register_instance("reaped", 5, &[]).await;
    let id = super::support::create_session(&stack, &instance, json!({})).await;
    let closed = audited(&stack, &instance, "the reap's session_closed", |event| {
        event["kind"] == "session_closed" && event["session_id"] == id.as_str()
    })
    .await;
    assert_eq!(closed["principal"], "system", "{closed}");
    assert_eq!(closed["surface"], "system", "{closed}");
    assert_eq!(closed["detail"]["reason"], "idle_reaped", "{closed}");
    let created = audited(&stack, &instance, "the create", |event| {
        event["kind"] == "session_created" && event["session_id"] == id.as_str()
    })
    .await;
    assert_eq!(created["principal"], "api-token-0", "{created}");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_share_links_streams_are_recorded_under_its_share_principal() {
    let stack = TestStack::builder().start().await;
    let instance = stack.register_instance("shared", 5, &[]).await;
    let id = super::support::create_session(&stack, &instance, json!({})).await;
    let share = rest(
        &stack,
        Method::POST,
        &format!("/api/v1/instances/{instance}/shares"),
        Some(json!({"session_id": id})),
    )
    .await
    .expect(201, "a share link");
    let share_id = share["id"].as_str().expect("a share id");
    let token = share["token"].as_str().expect("a share token");
    let principal = format!("share:{share_id}");

    let mut viewer = Terminal::open_as(
        &stack,
        &format!("/ws/tool-instances/{instance}/terminal/{id}"),
        token,
    )
    .await;
    assert_eq!(viewer.connected().await["role"], "viewer");
    viewer.close_at_once().await;
    for kind in ["attached", "detached"] {
        let event = audited(&stack, &instance, kind, |event| {
            event["kind"] == kind && event["session_id"] == id.as_str()
        })
        .await;
        assert_eq!(event["principal"], principal.as_str(), "{event}");
        assert_eq!(event["surface"], "websocket", "{event}");
        assert_eq!(event["role"], "viewer", "{event}");
    }
    // Nothing anywhere names the share's token.
    let everything = instance_events(&stack, &instance).await;
    assert!(
        !serde_json::to_string(&everything).unwrap().contains(token),
        "the trail holds the share's token"
    );
    stack.shutdown().await;
}

/// session-api's surface through the gateway as gRPC-web over HTTP/1.1, as a browser program
/// calls it.
fn grpc_web_client(
    stack: &TestStack,
) -> SessionApiClient<
    tonic_web::GrpcWebClientService<
        Client<
            hyper_util::client::legacy::connect::HttpConnector,
            tonic_web::GrpcWebCall<tonic::body::Body>,
        >,
    >,
> {
    let http = Client::builder(TokioExecutor::new()).build_http();
    let service = tower::ServiceBuilder::new()
        .layer(GrpcWebClientLayer::new())
        .service(http);
    SessionApiClient::with_origin(
        service,
        stack.gateway_url.parse().expect("the gateway's url"),
    )
}

fn create_request(instance: &str, name: &str) -> session_pb::CreateSessionRequest {
    session_pb::CreateSessionRequest {
        instance: instance.to_owned(),
        name: name.to_owned(),
        ..Default::default()
    }
}

#[tokio::test]
async fn calls_over_grpc_grpc_web_and_the_cli_are_recorded_with_their_surface() {
    let stack = TestStack::builder().start().await;
    let instance = stack.register_instance("surfaces", 5, &[]).await;

    gateway_grpc(&stack)
        .await
        .create_session(as_admin(&stack, create_request(&instance, "over-grpc")))
        .await
        .expect("a create over gRPC");
    grpc_web_client(&stack)
        .create_session(as_admin(&stack, create_request(&instance, "over-grpc-web")))
        .await
        .expect("a create over gRPC-web");
    // The `ptyhub` CLI is known by its user agent on the gRPC surface it calls.
    let cli_channel = tonic::transport::Endpoint::from_shared(stack.gateway_url.clone())
        .expect("the gateway's url")
        .user_agent(format!("{}0.1.0", ptyhub_wire::CLI_USER_AGENT_PREFIX))
        .expect("a user agent")
        .connect()
        .await
        .expect("an http/2 connection to the gateway");
    SessionApiClient::new(cli_channel)
        .create_session(as_admin(&stack, create_request(&instance, "over-cli")))
        .await
        .expect("a create as the CLI makes it");
    rest(
        &stack,
        Method::POST,
        &sessions_path(&instance),
        Some(json!({"name": "over-rest"})),
    )
    .await
    .expect(201, "a create over REST");

    for (name, surface) in [
        ("over-grpc", "grpc"),
        ("over-grpc-web", "grpc-web"),
        ("over-cli", "cli"),
        ("over-rest", "rest"),
    ] {
        let created = audited(&stack, &instance, name, |event| {
            event["kind"] == "session_created" && event["detail"]["name"] == name
        })
        .await;
        assert_eq!(created["surface"], surface, "{created}");
        assert_eq!(created["principal"], "api-token-0", "{created}");
    }
    stack.shutdown().await;
}
