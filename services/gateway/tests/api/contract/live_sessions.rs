//! What open pages rely on to follow an instance live: the session-change events
//! (`GET .../terminal/events`, Server-Sent Events), the current name in the `connected` that
//! follows a reset, and `default` as a session id wherever one goes (REST and WebSocket).

use ptyhub_test_support::stack::TestStack;
use reqwest::Method;
use serde_json::json;

use super::support::{
    Events, Terminal, create_session, get_session, list_sessions, rest, sessions_path,
};

#[tokio::test]
async fn the_events_stream_lists_the_sessions_then_follows_creates_renames_and_closes() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let first = create_session(&stack, &instance, json!({"name": "first"})).await;

    let mut events = Events::open(&stack, &instance).await;
    let (name, listed) = events.next().await;
    assert_eq!(name, "sessions");
    let listed = listed["sessions"].as_array().expect("a sessions list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["id"], first.as_str());
    assert_eq!(listed[0]["name"], "first");

    let second = create_session(&stack, &instance, json!({"name": "second"})).await;
    let created = events.until("created", &second, |_| true).await;
    assert_eq!(created["name"], "second");
    assert_eq!(created["instance_id"], instance.as_str());

    rest(
        &stack,
        Method::POST,
        &format!("{}/{first}/rename", sessions_path(&instance)),
        Some(json!({"name": "renamed elsewhere"})),
    )
    .await
    .expect(200, "rename");
    events
        .until("renamed", &first, |session| {
            session["name"] == "renamed elsewhere"
        })
        .await;

    rest(
        &stack,
        Method::DELETE,
        &format!("{}/{second}", sessions_path(&instance)),
        None,
    )
    .await
    .expect(200, "close");
    events
        .until("closed", &second, |session| session["status"] == "closed")
        .await;
    stack.shutdown().await;
}

#[tokio::test]
async fn the_events_stream_needs_a_credential_and_a_known_instance() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let path = format!("/api/v1/instances/{instance}/terminal/events");
    let anonymous = stack
        .http
        .get(format!("{}{path}", stack.gateway_url))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    rest(
        &stack,
        Method::GET,
        "/api/v1/instances/no-such-instance/terminal/events",
        None,
    )
    .await
    .expect_error(404, "unknown instance");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_reset_after_a_rename_connects_again_with_the_current_name() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let session_id = create_session(&stack, &instance, json!({"name": "before"})).await;
    let mut terminal = Terminal::open(
        &stack,
        &format!("/ws/tool-instances/{instance}/terminal/{session_id}"),
    )
    .await;
    let connected = terminal.connected().await;
    assert_eq!(connected["session"]["name"], "before");

    rest(
        &stack,
        Method::POST,
        &format!("{}/{session_id}/rename", sessions_path(&instance)),
        Some(json!({"name": "after"})),
    )
    .await
    .expect(200, "rename while the socket is open");
    terminal.send_json(json!({"type": "reset"})).await;
    terminal
        .read_until_text("status resetting", |text| {
            text["type"] == "status" && text["status"] == "resetting"
        })
        .await;
    let again = terminal
        .read_until_text("connected after the reset", |text| {
            text["type"] == "status" && text["status"] == "connected"
        })
        .await;
    assert_eq!(again["session"]["id"], session_id.as_str());
    assert_eq!(again["session"]["name"], "after", "{again}");
    assert_eq!(
        get_session(&stack, &instance, &session_id).await["name"],
        "after"
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn default_as_a_session_id_names_the_default_session_in_rest() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let default_path = format!("{}/default", sessions_path(&instance));

    // None yet: reading it is 404; resetting it creates it, as the legacy reset does.
    rest(&stack, Method::GET, &default_path, None)
        .await
        .expect_error(404, "no default session yet");
    rest(
        &stack,
        Method::POST,
        &format!("{default_path}/rename"),
        Some(json!({"name": "x"})),
    )
    .await
    .expect_error(404, "no default session to rename");
    let reset = rest(&stack, Method::POST, &format!("{default_path}/reset"), None)
        .await
        .expect(200, "reset creates the default session");
    let id = reset["id"].as_str().expect("an id").to_owned();
    let sessions = list_sessions(&stack, &instance, false).await;
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(sessions[0]["aliases"], json!(["default"]));

    let session = rest(&stack, Method::GET, &default_path, None)
        .await
        .expect(200, "get default");
    assert_eq!(session["id"], id.as_str());
    let renamed = rest(
        &stack,
        Method::POST,
        &format!("{default_path}/rename"),
        Some(json!({"name": "legacy"})),
    )
    .await
    .expect(200, "rename default");
    assert_eq!(renamed, json!({"id": id, "name": "legacy"}));
    // The same as the legacy route: a reset of the existing session, not a new one.
    let again = rest(&stack, Method::POST, &format!("{default_path}/reset"), None)
        .await
        .expect(200, "reset default");
    assert_eq!(again["id"], id.as_str());
    let legacy = rest(
        &stack,
        Method::POST,
        &format!("/api/v1/instances/{instance}/terminal/reset"),
        None,
    )
    .await
    .expect(200, "legacy reset");
    assert_eq!(legacy["id"], id.as_str());
    let screen = rest(&stack, Method::GET, &format!("{default_path}/screen"), None)
        .await
        .expect(200, "the default session's screen");
    assert_eq!(screen["session_id"], id.as_str());

    let closed = rest(&stack, Method::DELETE, &default_path, None)
        .await
        .expect(200, "close default");
    assert_eq!(closed, json!({"status": "closed", "session_id": id}));
    rest(&stack, Method::GET, &default_path, None)
        .await
        .expect_error(404, "the default session is closed");
    // Another word is still not a session id.
    rest(
        &stack,
        Method::GET,
        &format!("{}/defaults", sessions_path(&instance)),
        None,
    )
    .await
    .expect_error(404, "not a session id");
    stack.shutdown().await;
}

#[tokio::test]
async fn default_as_a_session_id_opens_the_default_session_on_the_websocket() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let mut by_word = Terminal::open(
        &stack,
        &format!("/ws/tool-instances/{instance}/terminal/default"),
    )
    .await;
    let connected = by_word.connected().await;
    let id = connected["session"]["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let session = get_session(&stack, &instance, &id).await;
    assert_eq!(session["aliases"], json!(["default"]));
    drop(by_word);

    // The instance route without a session id opens the same one.
    let mut plain =
        Terminal::open(&stack, &format!("/ws/tool-instances/{instance}/terminal")).await;
    assert_eq!(plain.connected().await["session"]["id"], id.as_str());
    drop(plain);
    stack.shutdown().await;
}
