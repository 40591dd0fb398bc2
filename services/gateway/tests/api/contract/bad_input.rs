//! Bad input gets a clear error and changes nothing: 400 `{"detail"}` for malformed JSON on
//! every route that takes a body, 409 `{"detail"}` for an alias another live session holds, and
//! close 1008 for a malformed WebSocket open.

use ptyhub_test_support::stack::TestStack;
use reqwest::Method;
use serde_json::json;

use super::support::{
    Terminal, create_session, get_session, list_sessions, rest, rest_raw, sessions_path,
};

/// Bodies that are not JSON at all, cut short, or with a trailing comma.
const MALFORMED_BODIES: [&str; 3] = ["not json", "{\"name\": ", "{\"name\": \"x\",}"];

#[tokio::test]
async fn malformed_json_is_400_with_a_detail_on_every_route_with_a_body() {
    let stack = TestStack::builder().start().await;
    let instance = stack
        .register_instance(
            "labelled",
            5,
            &[("project_id", "p1"), ("repository_id", "r1")],
        )
        .await;
    let session_id = create_session(&stack, &instance, json!({"name": "untouched"})).await;
    let seed_sessions =
        format!("/projects/p1/repositories/r1/instances/{instance}/terminal/sessions");
    // CONTRACT.md's routes with a body, under both path layouts.
    let routes = [
        "/api/v1/instances".to_owned(),
        sessions_path(&instance),
        format!("{}/{session_id}/rename", sessions_path(&instance)),
        seed_sessions.clone(),
        format!("{seed_sessions}/{session_id}/rename"),
    ];
    let instances_before = rest(&stack, Method::GET, "/api/v1/instances", None)
        .await
        .expect(200, "list instances");

    for route in &routes {
        for body in MALFORMED_BODIES {
            let reply = rest_raw(&stack, Method::POST, route, body).await;
            reply.expect_error(400, &format!("POST {route} with {body:?}"));
        }
    }

    let instances_after = rest(&stack, Method::GET, "/api/v1/instances", None)
        .await
        .expect(200, "list instances");
    assert_eq!(
        instances_after, instances_before,
        "an instance was registered"
    );
    let sessions = list_sessions(&stack, &instance, true).await;
    assert_eq!(sessions.len(), 1, "a session was created: {sessions:?}");
    assert_eq!(
        get_session(&stack, &instance, &session_id).await["name"],
        "untouched"
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn an_alias_held_by_a_live_session_is_409_and_opening_it_reattaches() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let holder = create_session(
        &stack,
        &instance,
        json!({"name": "holder", "aliases": ["conversation-7"]}),
    )
    .await;

    let conflict = rest(
        &stack,
        Method::POST,
        &sessions_path(&instance),
        Some(json!({"name": "duplicate", "aliases": ["other", "conversation-7"]})),
    )
    .await;
    let detail = conflict.expect_error(409, "create with a taken alias");
    assert!(detail.contains("conversation-7"), "{detail}");
    let live = list_sessions(&stack, &instance, true).await;
    assert_eq!(
        live.len(),
        1,
        "the conflicting create left a session: {live:?}"
    );

    // Opening by the alias reaches the holder; it never spawns a second process.
    let mut terminal = Terminal::open(
        &stack,
        &format!("/ws/tool-instances/{instance}/terminal?alias=conversation-7"),
    )
    .await;
    assert_eq!(terminal.connected().await["session"]["id"], holder.as_str());
    assert_eq!(list_sessions(&stack, &instance, true).await.len(), 1);
    stack.shutdown().await;
}

#[tokio::test]
async fn a_malformed_websocket_open_closes_1008_and_creates_nothing() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let queries = [
        "cols=abc&rows=24",
        "cols=80&rows=-1",
        "cols=80",
        "cols=5000&rows=24",
        "since=yesterday",
        "mode=bogus",
        "snapshot=maybe",
        "alias=conversation-7",
    ];
    for query in queries {
        // Each open would create the tab's session if the query were accepted.
        let path = format!("/ws/tool-instances/{instance}/terminal?client_id=tab-1&{query}");
        let mut terminal = Terminal::open(&stack, &path).await;
        let closed = terminal.read_until_closed().await;
        assert_eq!(closed.code, 1008, "{query}: {closed:?}");
        assert!(
            !closed.reason.is_empty(),
            "{query}: a close without a reason"
        );
        assert!(terminal.texts.is_empty(), "{query}: {:?}", terminal.texts);
    }
    assert!(list_sessions(&stack, &instance, true).await.is_empty());
    stack.shutdown().await;
}
