//! Recordings through the gateway: an instance registered with `record: output+input` has its
//! sessions recorded, and `GET .../sessions/{sid}/recording` serves the asciicast v2 file once
//! the session closed: it parses with a strict reader, its output events are the bytes the
//! WebSocket client saw (split UTF-8 and a reset included), and one byte range comes back as 206.
//! A share link's credential is refused (403).

use ptyhub_test_support::asciicast::Cast;
use ptyhub_test_support::stack::TestStack;
use reqwest::Method;
use serde_json::{Value, json};

use super::support::{Terminal, create_session, eventually, rest, sessions_path};

/// Registers a local `sh` instance that records `record` and returns its id.
async fn recorded_instance(stack: &TestStack, name: &str, record: &str) -> Value {
    rest(
        stack,
        Method::POST,
        "/api/v1/instances",
        Some(json!({
            "name": name,
            "target": {"local": {}},
            "command": ["/bin/sh"],
            "env": {"PS1": "$ ", "TERM": "xterm-256color"},
            "record": record,
        })),
    )
    .await
    .expect(201, "register a recorded instance")
}

async fn recording(stack: &TestStack, path: &str, range: Option<&str>) -> reqwest::Response {
    recording_as(stack, path, range, &stack.admin_token).await
}

async fn recording_as(
    stack: &TestStack,
    path: &str,
    range: Option<&str>,
    token: &str,
) -> reqwest::Response {
    let mut request = stack
        .http
        .get(format!("{}{path}", stack.gateway_url))
        .bearer_auth(token);
    if let Some(range) = range {
        request = request.header(reqwest::header::RANGE, range);
    }
    request.send().await.expect("the gateway answers")
}

#[tokio::test]
async fn a_recording_holds_the_bytes_the_websocket_saw_across_a_reset() {
    let stack = TestStack::builder().start().await;
    let instance = recorded_instance(&stack, "recorded", "output+input").await;
    assert_eq!(instance["record"], "output+input", "{instance}");
    assert_eq!(instance["record_is_default"], false, "{instance}");
    let instance = instance["id"].as_str().unwrap().to_owned();
    let session_id = create_session(&stack, &instance, json!({"name": "taped"})).await;
    let session_path = format!("{}/{session_id}", sessions_path(&instance));

    // Shares of the instance and of the session, made while the session is open.
    let mut shares = Vec::new();
    for share in [json!({}), json!({"session_id": session_id})] {
        let created = rest(
            &stack,
            Method::POST,
            &format!("/api/v1/instances/{instance}/shares"),
            Some(share.clone()),
        )
        .await
        .expect(201, "share the recorded instance");
        shares.push((share, created["token"].as_str().unwrap().to_owned()));
    }

    // Before the session closes there is nothing to serve yet.
    let early = recording(&stack, &format!("{session_path}/recording"), None).await;
    assert_eq!(early.status(), 404);

    let mut terminal = Terminal::open(
        &stack,
        &format!("/ws/tool-instances/{instance}/terminal/{session_id}?since=0"),
    )
    .await;
    terminal.connected().await;
    // An e-acute and a euro sign, each written in two pieces.
    terminal
        .send_input(
            "printf '\\303'; printf '\\251 \\342\\202'; printf '\\254\\n'; echo one-$((0+1))\n",
        )
        .await;
    terminal.read_until_output("one-1").await;
    terminal.send_json(json!({"type": "reset"})).await;
    terminal
        .read_until_text("status resetting", |text| {
            text["type"] == "status" && text["status"] == "resetting"
        })
        .await;
    terminal
        .read_until_text("status connected after the reset", |text| {
            text["type"] == "status" && text["status"] == "connected"
        })
        .await;
    terminal.send_input("echo two-$((1+1))\n").await;
    terminal.read_until_output("two-2").await;
    rest(&stack, Method::DELETE, &session_path, None)
        .await
        .expect(200, "close the session");
    terminal.read_until_closed().await;

    let response = eventually("the recording is published", || async {
        let response = recording(&stack, &format!("{session_path}/recording"), None).await;
        (response.status() == 200).then_some(response)
    })
    .await;
    assert_eq!(
        response.headers()[reqwest::header::CONTENT_TYPE],
        "application/x-asciicast"
    );
    assert_eq!(response.headers()[reqwest::header::ACCEPT_RANGES], "bytes");
    let whole = response.bytes().await.unwrap();
    let cast = Cast::parse(&whole).expect("a strict asciicast v2 file");
    assert!(
        cast.output() == terminal.output,
        "the recording's output differs from the WebSocket's:\n{:?}\n{:?}",
        String::from_utf8_lossy(&cast.output()),
        String::from_utf8_lossy(&terminal.output)
    );
    assert!(
        String::from_utf8_lossy(&terminal.output).contains("é €"),
        "{}",
        String::from_utf8_lossy(&terminal.output)
    );
    assert_eq!(cast.title.as_deref(), Some("recorded / taped"));
    assert!(
        cast.input().contains("echo two-$((1+1))"),
        "{:?}",
        cast.input()
    );
    // The reset is marked once; every other marker names who typed, and none reads as a reset.
    let markers: Vec<&str> = cast
        .events_of("m")
        .map(|event| event.data.as_str())
        .collect();
    assert_eq!(
        markers.iter().filter(|data| **data == "reset").count(),
        1,
        "one reset marker: {markers:?}"
    );
    assert!(
        markers
            .iter()
            .all(|data| *data == "reset" || data.starts_with("input: ")),
        "{markers:?}"
    );
    assert!(
        markers
            .first()
            .is_some_and(|data| data.starts_with("input: ")),
        "the WebSocket's typist is named before its input: {markers:?}"
    );

    // One range, and one past the end.
    let partial = recording(
        &stack,
        &format!("{session_path}/recording"),
        Some("bytes=0-15"),
    )
    .await;
    assert_eq!(partial.status(), 206);
    assert_eq!(
        partial.headers()[reqwest::header::CONTENT_RANGE],
        format!("bytes 0-15/{}", whole.len()).as_str()
    );
    assert_eq!(partial.bytes().await.unwrap(), whole.slice(0..16));
    let beyond = format!("bytes={}-", whole.len() + 10);
    let refused = recording(&stack, &format!("{session_path}/recording"), Some(&beyond)).await;
    assert_eq!(refused.status(), 416);
    assert_eq!(
        refused.headers()[reqwest::header::CONTENT_RANGE],
        format!("bytes */{}", whole.len()).as_str()
    );

    // A share link watches a terminal from now on: neither a share of the instance nor one of
    // the session downloads its past (and the keystrokes in it).
    for (share, token) in shares {
        let refused =
            recording_as(&stack, &format!("{session_path}/recording"), None, &token).await;
        assert_eq!(refused.status(), 403, "a share {share}");
        let body: Value = refused.json().await.unwrap();
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains("recording"), "{detail}");
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn sessions_of_an_instance_that_records_nothing_have_no_recording() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let listed = rest(
        &stack,
        Method::GET,
        &format!("/api/v1/instances/{instance}"),
        None,
    )
    .await
    .expect(200, "the default instance");
    assert_eq!(listed["record"], "off", "{listed}");
    assert_eq!(listed["record_is_default"], true, "{listed}");
    let session_id = create_session(&stack, &instance, json!({})).await;
    let session_path = format!("{}/{session_id}", sessions_path(&instance));
    rest(&stack, Method::DELETE, &session_path, None)
        .await
        .expect(200, "close the session");
    let reply = rest(
        &stack,
        Method::GET,
        &format!("{session_path}/recording"),
        None,
    )
    .await;
    let detail = reply.expect_error(404, "an unrecorded session's recording");
    assert!(detail.contains("no recording"), "{detail}");
    // A session id of no session, and one that is not an id at all.
    let missing = format!(
        "{}/{}/recording",
        sessions_path(&instance),
        uuid::Uuid::new_v4()
    );
    rest(&stack, Method::GET, &missing, None)
        .await
        .expect_error(404, "a recording of no session");
    stack.shutdown().await;
}

#[tokio::test]
async fn an_unknown_record_mode_is_refused() {
    let stack = TestStack::builder().start().await;
    let reply = rest(
        &stack,
        Method::POST,
        "/api/v1/instances",
        Some(json!({"name": "bad", "target": {"local": {}}, "record": "everything"})),
    )
    .await;
    let detail = reply.expect_error(422, "record everything");
    assert!(detail.contains("record"), "{detail}");
    stack.shutdown().await;
}
