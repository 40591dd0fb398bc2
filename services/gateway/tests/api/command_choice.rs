//! Who may choose a session's command: an admin, or a credential whose JWT has the
//! `choose_command` claim. Anyone else gets the instance's command, and an override from them is
//! refused (403 on REST, `PERMISSION_DENIED` on gRPC) before anything is spawned, never silently
//! dropped.

use ptyhub_proto::session::v1 as session_pb;
use ptyhub_proto::session::v1::session_api_client::SessionApiClient;
use ptyhub_test_support::stack::TestStack;
use reqwest::Method;
use serde_json::{Value, json};
use tonic::Code;
use tonic::transport::Channel;

use crate::common::send;

/// A command that says it ran in a way the instance's shell would not by itself.
fn chosen_command() -> Vec<String> {
    ["/bin/sh", "-c", "echo chosen-$((6*7)); exec sleep 600"]
        .map(str::to_owned)
        .to_vec()
}

fn sessions_path(stack: &TestStack) -> String {
    format!("/api/v1/instances/{}/terminal/sessions", stack.instance_id)
}

async fn live_sessions(stack: &TestStack) -> usize {
    let (status, listed) = send(
        stack,
        Method::GET,
        &sessions_path(stack),
        Some(&stack.admin_token),
        None,
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    listed["sessions"].as_array().expect("a list").len()
}

/// Waits on the session's screen for the chosen command's line.
async fn shows_chosen_line(stack: &TestStack, session_id: &str) {
    let (status, waited) = send(
        stack,
        Method::POST,
        &format!("{}/{session_id}/wait", sessions_path(stack)),
        Some(&stack.admin_token),
        Some(json!({"pattern": "chosen-42", "timeout_ms": 20000})),
    )
    .await;
    assert_eq!(status, 200, "{waited}");
    assert_eq!(waited["outcome"], "matched", "{waited}");
}

#[tokio::test]
async fn rest_refuses_a_scoped_users_command_and_runs_an_admins() {
    let stack = TestStack::builder().start().await;
    let user = stack.jwt("alice", &["local"], false);
    let path = sessions_path(&stack);

    let (status, body) = send(
        &stack,
        Method::POST,
        &path,
        Some(&user),
        Some(json!({"command": chosen_command()})),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    let detail = body["detail"].as_str().expect("a detail");
    assert!(detail.contains("command"), "{detail}");
    assert_eq!(
        live_sessions(&stack).await,
        0,
        "a refused create spawns nothing"
    );

    // Without an override the same user gets the instance's command.
    let (status, body) = send(&stack, Method::POST, &path, Some(&user), Some(json!({}))).await;
    assert_eq!(status, 201, "{body}");

    // An empty argv is no program: 422, whoever asks.
    let (status, body) = send(
        &stack,
        Method::POST,
        &path,
        Some(&stack.admin_token),
        Some(json!({"command": []})),
    )
    .await;
    assert_eq!(status, 422, "{body}");

    let (status, created) = send(
        &stack,
        Method::POST,
        &path,
        Some(&stack.admin_token),
        Some(json!({"command": chosen_command()})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    shows_chosen_line(&stack, created["id"].as_str().expect("an id")).await;
    stack.shutdown().await;
}

#[tokio::test]
async fn the_choose_command_claim_lets_a_scoped_user_override() {
    let stack = TestStack::builder().start().await;
    let chooser = stack.jwt_with_claims("ci", &["local"], json!({"choose_command": true}));
    let (status, created) = send(
        &stack,
        Method::POST,
        &sessions_path(&stack),
        Some(&chooser),
        Some(json!({"command": chosen_command()})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    shows_chosen_line(&stack, created["id"].as_str().expect("an id")).await;

    // The claim is about commands, not instances: another instance stays out of reach.
    let other = stack.register_instance("other", 5, &[]).await;
    let (status, body) = send(
        &stack,
        Method::POST,
        &format!("/api/v1/instances/{other}/terminal/sessions"),
        Some(&chooser),
        Some(json!({"command": chosen_command()})),
    )
    .await;
    assert_eq!(
        (status, body),
        (403, json!({"detail": "not allowed for this instance"}))
    );
    stack.shutdown().await;
}

fn create_request(
    stack: &TestStack,
    token: &str,
    command: Vec<String>,
) -> tonic::Request<session_pb::CreateSessionRequest> {
    let mut request = tonic::Request::new(session_pb::CreateSessionRequest {
        instance: stack.instance_id.clone(),
        name: String::new(),
        aliases: Vec::new(),
        size: None,
        command,
        control_mode: 0,
    });
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("an ascii token"),
    );
    request
}

#[tokio::test]
async fn grpc_refuses_a_scoped_users_command_with_permission_denied() {
    let stack = TestStack::builder().start().await;
    let channel = Channel::from_shared(stack.gateway_url.clone())
        .expect("gateway url")
        .connect()
        .await
        .expect("a connection to the gateway");
    let mut client = SessionApiClient::new(channel);
    let user = stack.jwt("alice", &["local"], false);

    let refused = client
        .create_session(create_request(&stack, &user, chosen_command()))
        .await
        .expect_err("a scoped user's override is refused");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().contains("command"), "{refused:?}");
    assert_eq!(
        live_sessions(&stack).await,
        0,
        "a refused create spawns nothing"
    );

    // No override: the instance's command, for the same user.
    client
        .create_session(create_request(&stack, &user, Vec::new()))
        .await
        .expect("a create without an override");

    let admin = client
        .create_session(create_request(&stack, &stack.admin_token, chosen_command()))
        .await
        .expect("an admin's override")
        .into_inner();
    let session = admin.session.expect("the session");
    shows_chosen_line(&stack, &session.id).await;

    // The user's session and the admin's; nothing of the refused create.
    let listed: Value = send(
        &stack,
        Method::GET,
        &sessions_path(&stack),
        Some(&stack.admin_token),
        None,
    )
    .await
    .1;
    assert_eq!(listed["sessions"].as_array().map(Vec::len), Some(2));
    stack.shutdown().await;
}
