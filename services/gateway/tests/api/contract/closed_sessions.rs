//! How sessions end and what is left of them: the close reasons a user can see (`spawn_failed`
//! in the REST history, `instance_deleted` on the change stream), close 1000 for a socket whose
//! session is closed, 4004 for a later open, and the errors for renaming or resetting it.

use ptyhub_proto::session::v1 as session_pb;
use ptyhub_test_support::stack::TestStack;
use reqwest::Method;
use serde_json::json;

use super::support::{
    Terminal, create_session, get_session, list_sessions, next_change_of, rest, sessions_path,
    watch_sessions,
};

#[tokio::test]
async fn a_command_that_cannot_start_leaves_a_spawn_failed_record_and_no_live_session() {
    let stack = TestStack::builder().start().await;
    let instance = stack
        .register_instance_with(
            "missing-command",
            5,
            &[],
            vec!["/nonexistent/ptyhub-no-such-program".to_owned()],
        )
        .await;

    let refused = rest(
        &stack,
        Method::POST,
        &sessions_path(&instance),
        Some(json!({"name": "doomed"})),
    )
    .await;
    assert!(
        refused.status >= 400,
        "a session whose command cannot start was created: {refused:?}"
    );
    let detail = refused.expect_error(refused.status, "create with a missing command");
    assert!(
        detail.contains("/nonexistent/ptyhub-no-such-program"),
        "the error does not name the command: {detail}"
    );

    assert_eq!(
        list_sessions(&stack, &instance, false).await,
        Vec::<serde_json::Value>::new()
    );
    let history = list_sessions(&stack, &instance, true).await;
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0]["name"], "doomed");
    assert_eq!(history[0]["status"], "closed");
    assert_eq!(history[0]["close_reason"], "spawn_failed");
    stack.shutdown().await;
}

#[tokio::test]
async fn deleting_an_instance_closes_its_sessions_as_instance_deleted() {
    let stack = TestStack::builder().start().await;
    let instance = stack.register_instance("doomed-instance", 5, &[]).await;
    let session_id = create_session(&stack, &instance, json!({"name": "inside"})).await;
    let mut terminal = Terminal::open(
        &stack,
        &format!("/ws/tool-instances/{instance}/terminal/{session_id}"),
    )
    .await;
    terminal.connected().await;
    let mut changes = watch_sessions(&stack, &instance).await;

    let deleted = rest(
        &stack,
        Method::DELETE,
        &format!("/api/v1/instances/{instance}"),
        None,
    )
    .await
    .expect(200, "delete the instance");
    assert_eq!(deleted["closed_sessions"], 1, "{deleted}");

    // The records go with the instance, so the change stream is where the reason is seen.
    let closed = next_change_of(
        &mut changes,
        &session_id,
        "the session closed with its instance",
        |change, _| change.kind == session_pb::session_change::Kind::Closed as i32,
    )
    .await;
    assert_eq!(closed.status, session_pb::SessionStatus::Closed as i32);
    assert_eq!(
        closed.close_reason,
        session_pb::CloseReason::InstanceDeleted as i32,
        "{closed:?}"
    );
    // The attached client is told its session is over.
    assert_eq!(terminal.read_until_closed().await.code, 1000);
    rest(
        &stack,
        Method::GET,
        &format!("/api/v1/instances/{instance}"),
        None,
    )
    .await
    .expect_error(404, "the deleted instance");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_closed_session_closes_its_socket_with_1000_and_later_opens_with_4004() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let session_id = create_session(&stack, &instance, json!({"name": "short-lived"})).await;
    let path = format!("/ws/tool-instances/{instance}/terminal/{session_id}");
    let mut attached = Terminal::open(&stack, &path).await;
    attached.connected().await;

    let closed = rest(
        &stack,
        Method::DELETE,
        &format!("{}/{session_id}", sessions_path(&instance)),
        None,
    )
    .await
    .expect(200, "close the session");
    assert_eq!(
        closed,
        json!({"status": "closed", "session_id": session_id})
    );
    assert_eq!(attached.read_until_closed().await.code, 1000);

    let mut late = Terminal::open(&stack, &path).await;
    let refused = late.read_until_closed().await;
    assert_eq!(refused.code, 4004, "{refused:?}");
    assert!(
        late.texts.is_empty(),
        "frames before the refusal: {:?}",
        late.texts
    );

    let record = get_session(&stack, &instance, &session_id).await;
    assert_eq!(record["status"], "closed");
    assert_eq!(record["close_reason"], "closed_by_user");
    stack.shutdown().await;
}

#[tokio::test]
async fn renaming_or_resetting_a_closed_session_is_a_409_that_changes_nothing() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let session_id = create_session(&stack, &instance, json!({"name": "finished"})).await;
    let session_path = format!("{}/{session_id}", sessions_path(&instance));
    rest(&stack, Method::DELETE, &session_path, None)
        .await
        .expect(200, "close the session");

    let renamed = rest(
        &stack,
        Method::POST,
        &format!("{session_path}/rename"),
        Some(json!({"name": "revived"})),
    )
    .await;
    let detail = renamed.expect_error(409, "rename a closed session");
    assert!(detail.contains("closed"), "{detail}");

    let reset = rest(&stack, Method::POST, &format!("{session_path}/reset"), None).await;
    let detail = reset.expect_error(409, "reset a closed session");
    assert!(detail.contains("closed"), "{detail}");

    let record = get_session(&stack, &instance, &session_id).await;
    assert_eq!(record["name"], "finished");
    assert_eq!(record["status"], "closed");
    assert_eq!(record["close_reason"], "closed_by_user");
    assert!(list_sessions(&stack, &instance, false).await.is_empty());
    stack.shutdown().await;
}
