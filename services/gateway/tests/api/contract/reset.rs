//! Reset replaces the session's process in place: through REST and through the WebSocket's
//! `{"type":"reset"}` the shell afterwards has a new pid and none of the old one's variables,
//! the session id stays, and `resetting` is visible (the WebSocket's status frame, and the
//! session's status on the gRPC change stream).

use ptyhub_proto::session::v1 as session_pb;
use ptyhub_test_support::stack::TestStack;
use reqwest::Method;
use serde_json::{Value, json};

use super::support::{
    Terminal, create_session, get_session, next_change_of, rest, sessions_path, watch_sessions,
};

const STATE_COMMAND: &str = "MARK=$((40+2)); echo \"pid=$$;mark=$MARK;\"\n";
const AFTER_COMMAND: &str = "echo \"pid=$$;mark=${MARK:-0};\"\n";

/// Opens the session, records the shell's pid and sets a variable in it; returns the pid.
async fn shell_with_state(terminal: &mut Terminal) -> u64 {
    terminal.connected().await;
    let from = terminal.output.len();
    terminal.send_input(STATE_COMMAND).await;
    let pid = terminal.read_number(from, "pid").await;
    assert_eq!(terminal.read_number(from, "mark").await, 42);
    pid
}

/// Waits for `resetting` then a new `connected`, and returns the output position after it.
async fn resetting_then_connected(terminal: &mut Terminal) -> usize {
    terminal
        .read_until_text("status resetting", |text| {
            text["type"] == "status" && text["status"] == "resetting"
        })
        .await;
    let connected = terminal
        .read_until_text("status connected after the reset", |text| {
            text["type"] == "status" && text["status"] == "connected"
        })
        .await;
    assert_eq!(connected["role"], "controller", "{connected}");
    terminal.output.len()
}

/// Asserts that the shell now is a new process without the old one's variable.
async fn assert_replaced(terminal: &mut Terminal, old_pid: u64) {
    let from = terminal.output.len();
    terminal.send_input(AFTER_COMMAND).await;
    let new_pid = terminal.read_number(from, "pid").await;
    let mark = terminal.read_number(from, "mark").await;
    assert_ne!(new_pid, old_pid, "the reset kept the same process");
    assert_eq!(
        mark, 0,
        "the shell after the reset still has the old one's variable"
    );
}

/// A change that reports the session's status as `status`.
fn status_is(
    status: session_pb::SessionStatus,
) -> impl Fn(&session_pb::SessionChange, &session_pb::Session) -> bool {
    move |change, changed| {
        change.kind == session_pb::session_change::Kind::Status as i32
            && changed.status == status as i32
    }
}

#[tokio::test]
async fn reset_over_rest_replaces_the_process_and_shows_resetting() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let session_id = create_session(&stack, &instance, json!({"name": "resettable"})).await;
    let mut terminal = Terminal::open(
        &stack,
        &format!("/ws/tool-instances/{instance}/terminal/{session_id}"),
    )
    .await;
    let old_pid = shell_with_state(&mut terminal).await;
    let mut changes = watch_sessions(&stack, &instance).await;

    let reset = rest(
        &stack,
        Method::POST,
        &format!("{}/{session_id}/reset", sessions_path(&instance)),
        None,
    )
    .await
    .expect(200, "reset the session");
    assert_eq!(
        reset,
        json!({"id": session_id, "name": "resettable", "status": "active"})
    );

    next_change_of(
        &mut changes,
        &session_id,
        "status resetting on the change stream",
        status_is(session_pb::SessionStatus::Resetting),
    )
    .await;
    next_change_of(
        &mut changes,
        &session_id,
        "status active again after the reset",
        status_is(session_pb::SessionStatus::Active),
    )
    .await;

    resetting_then_connected(&mut terminal).await;
    assert_replaced(&mut terminal, old_pid).await;
    assert_eq!(
        get_session(&stack, &instance, &session_id).await["status"],
        "active"
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn reset_over_the_websocket_replaces_the_process_and_keeps_the_session() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let path = format!("/ws/tool-instances/{instance}/terminal?client_id=resetter");
    let mut terminal = Terminal::open(&stack, &path).await;
    let old_pid = shell_with_state(&mut terminal).await;
    let session_id = terminal.texts[0]["session"]["id"]
        .as_str()
        .expect("the session id")
        .to_owned();
    let offset_before = terminal.texts[0]["offset"].as_u64().expect("an offset");

    terminal.send_json(json!({"type": "reset"})).await;
    let position = resetting_then_connected(&mut terminal).await;
    let reconnected: &Value = terminal.texts.last().expect("the connected frame");
    assert_eq!(reconnected["session"]["id"], session_id.as_str());
    // Offsets go on across a reset: the new process's output follows the old one's.
    assert_eq!(
        reconnected["offset"].as_u64(),
        Some(offset_before + position as u64),
        "{reconnected}"
    );
    assert_replaced(&mut terminal, old_pid).await;

    let sessions = super::support::list_sessions(&stack, &instance, true).await;
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(sessions[0]["id"], session_id.as_str());
    stack.shutdown().await;
}
