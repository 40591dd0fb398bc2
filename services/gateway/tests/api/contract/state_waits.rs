//! Waiting for what a terminal is doing, and watching its commands (docs/CONTRACT.md,
//! "Screens" and "Watching commands"), through the gateway: `POST .../wait` with `"for"`
//! answers at once for a shell already at its prompt, and with `after_offset` only at the
//! prompt that follows a command typed after it; bad waits are 422. The gateway's gRPC
//! `WatchCommands` sends each command typed into bash once started and once ended, and refuses a
//! share link's credential.

use ptyhub_proto::session::v1 as session_pb;
use ptyhub_test_support::stack::TestStack;
use serde_json::json;

use super::commands::{at_prompt, bash_instance, share_token, with_bearer};
use super::support::{
    PATIENCE, as_admin, create_session, gateway_grpc, type_input, wait_for_screen,
};

/// A bash instance with shell integration and a session of it at its prompt.
async fn bash_at_prompt(stack: &TestStack, name: &str) -> (String, String) {
    let instance = bash_instance(stack, name, None).await["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let session_id = create_session(stack, &instance, json!({})).await;
    at_prompt(stack, &instance, &session_id).await;
    (instance, session_id)
}

#[tokio::test]
async fn a_wait_for_the_prompt_answers_at_once_or_at_the_next_prompt_after_an_offset() {
    let stack = TestStack::builder().start().await;
    let (instance, session_id) = bash_at_prompt(&stack, "bash").await;

    let ready = wait_for_screen(&stack, &instance, &session_id, json!({"for": "prompt"}))
        .await
        .expect(200, "a shell at its prompt is at its prompt");
    assert_eq!(ready["outcome"], "state", "{ready}");
    assert_eq!(ready["state"], "at_prompt", "{ready}");
    assert_eq!(ready["matched"], serde_json::Value::Null, "{ready}");
    assert_eq!(ready["terminal"]["state"], "at_prompt", "{ready}");

    let typed = type_input(
        &stack,
        &instance,
        &session_id,
        json!({"text": "sleep 0.3; echo slept-$((6*7))", "keys": ["Enter"]}),
    )
    .await
    .expect(200, "type a command");
    let back = wait_for_screen(
        &stack,
        &instance,
        &session_id,
        json!({"for": "prompt", "after_offset": typed["offset"], "timeout_ms": 20_000}),
    )
    .await
    .expect(200, "the prompt after the command");
    assert_eq!(back["outcome"], "state", "{back}");
    assert!(
        back["screen"]["text"]
            .as_str()
            .expect("the screen's text")
            .contains("slept-42"),
        "answered at the prompt after the command's output, not the one before: {back}"
    );

    for (refused, what) in [
        (json!({"for": "busy"}), "an unknown state"),
        (json!({"for": "running"}), "a state no wait waits for"),
        (
            json!({"for": "prompt", "pattern": "\\$ $"}),
            "a pattern and a state",
        ),
        (
            json!({"for": "idle", "quiet_ms": 100}),
            "quiet with a state",
        ),
    ] {
        let detail = wait_for_screen(&stack, &instance, &session_id, refused)
            .await
            .expect_error(422, what);
        assert!(!detail.is_empty(), "{what}");
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn watch_commands_through_the_gateway_sends_each_command_started_then_ended() {
    let stack = TestStack::builder().start().await;
    let (instance, session_id) = bash_at_prompt(&stack, "bash").await;
    let mut client = gateway_grpc(&stack).await;
    let watch = session_pb::WatchCommandsRequest {
        instance: "bash".to_owned(),
        session_id: session_id.clone(),
        after_id: 0,
    };
    let mut commands = client
        .watch_commands(as_admin(&stack, watch.clone()))
        .await
        .expect("watch the session's commands")
        .into_inner();
    type_input(
        &stack,
        &instance,
        &session_id,
        json!({"text": "(exit 4)", "keys": ["Enter"]}),
    )
    .await
    .expect(200, "type a command");
    let mut next = async || {
        tokio::time::timeout(PATIENCE, commands.message())
            .await
            .expect("a command record in time")
            .expect("the stream goes on")
            .expect("a record")
    };
    let started = next().await;
    let ended = next().await;
    assert_eq!((started.id, started.command.as_str()), (1, "(exit 4)"));
    assert!(started.ended_at.is_none(), "{started:?}");
    assert_eq!((ended.id, ended.exit_code), (1, Some(4)), "{ended:?}");
    assert!(ended.ended_at.is_some(), "{ended:?}");

    let token = share_token(&stack, &instance, &session_id).await;
    let refused = client
        .watch_commands(with_bearer(&token, watch))
        .await
        .expect_err("a share sees no commands");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    stack.shutdown().await;
}
