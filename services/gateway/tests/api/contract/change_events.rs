//! The session event stream's changes that the live-sessions module does not follow, and its
//! ends: `status` (resetting, active, exited), `attachments` (a socket came, a socket went) and
//! `screen` (a new window title) events; a comment line while nothing changes; and the end of
//! the stream, and of gRPC `WatchSessions` through the gateway, when the gateway stops and when
//! the credential they were opened with has expired.

use std::time::Duration;

use ptyhub_proto::session::v1 as session_pb;
use ptyhub_test_support::stack::TestStack;
use reqwest::Method;
use serde_json::json;
use tokio::time::Instant;

use super::support::{
    Events, PATIENCE, Terminal, create_session, gateway_grpc, rest, sessions_path,
};

/// A keep-alive interval far below the contract's 15 s, so the test sees one at once.
const SHORT_KEEP_ALIVE: Duration = Duration::from_millis(200);

#[tokio::test]
async fn status_attachments_and_screen_changes_arrive_as_named_events() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let mut events = Events::open(&stack, &instance).await;
    let (first, _) = events.next().await;
    assert_eq!(first, "sessions");

    let id = create_session(&stack, &instance, json!({"name": "followed"})).await;
    events.until("created", &id, |_| true).await;

    let mut terminal = Terminal::open(
        &stack,
        &format!("/ws/tool-instances/{instance}/terminal/{id}"),
    )
    .await;
    terminal.connected().await;
    let attached = events
        .until("attachments", &id, |session| {
            session["has_websockets"] == true
        })
        .await;
    assert_eq!(attached["name"], "followed", "{attached}");

    terminal
        .send_input("printf '\\033]0;%s\\007' events-title\n")
        .await;
    let titled = events
        .until("screen", &id, |session| session["title"] == "events-title")
        .await;
    assert_eq!(titled["status"], "active", "{titled}");

    rest(
        &stack,
        Method::POST,
        &format!("{}/{id}/reset", sessions_path(&instance)),
        None,
    )
    .await
    .expect(200, "reset the session");
    events
        .until("status", &id, |session| session["status"] == "resetting")
        .await;
    events
        .until("status", &id, |session| session["status"] == "active")
        .await;

    terminal
        .read_until_text("connected again after the reset", |frame| {
            frame["type"] == "status" && frame["status"] == "connected"
        })
        .await;
    terminal.send_input("exit 7\n").await;
    let exited = events
        .until("status", &id, |session| session["status"] == "exited")
        .await;
    assert_eq!(exited["exit_code"], 7, "{exited}");
    let closed = terminal.read_until_closed().await;
    assert_eq!(closed.code, 1000, "{closed:?}");
    let detached = events
        .until("attachments", &id, |session| {
            session["has_websockets"] == false
        })
        .await;
    assert_eq!(detached["status"], "exited", "{detached}");
    stack.shutdown().await;
}

/// Reads raw Server-Sent Events text from `response` until a comment line (`:`) comes after
/// the opening `sessions` event, and returns everything read.
async fn read_until_comment_after_sessions(response: &mut reqwest::Response) -> String {
    let deadline = Instant::now() + PATIENCE;
    let mut text = String::new();
    loop {
        if let Some(start) = text.find("event: sessions")
            && text[start..]
                .lines()
                .skip(1)
                .any(|line| line.starts_with(':'))
        {
            return text;
        }
        let chunk = tokio::time::timeout_at(deadline, response.chunk())
            .await
            .unwrap_or_else(|_| panic!("no keep-alive comment within {PATIENCE:?}: {text:?}"))
            .expect("the stream reads")
            .unwrap_or_else(|| panic!("the stream ended: {text:?}"));
        text.push_str(std::str::from_utf8(&chunk).expect("UTF-8 events"));
    }
}

#[tokio::test]
async fn an_idle_event_stream_carries_a_comment_line_every_keep_alive_interval() {
    let stack = TestStack::builder()
        .configure(|stack| stack.gateway.events_keep_alive = SHORT_KEEP_ALIVE)
        .start()
        .await;
    let mut response = stack
        .http
        .get(format!(
            "{}/api/v1/instances/{}/terminal/events",
            stack.gateway_url, stack.instance_id
        ))
        .bearer_auth(&stack.admin_token)
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(response.status().as_u16(), 200);
    let text = read_until_comment_after_sessions(&mut response).await;
    // Nothing happened on the instance: the comment is all that came after the list.
    let after_list = &text[text.find("event: sessions").unwrap()..];
    let events: Vec<_> = after_list
        .lines()
        .filter(|line| line.starts_with("event:"))
        .collect();
    assert_eq!(events, ["event: sessions"], "{text:?}");
    stack.shutdown().await;
}

/// Opens the events stream and `WatchSessions` through the gateway as `token`, and reads the
/// stream's opening `sessions` event.
async fn open_both(
    stack: &TestStack,
    token: &str,
) -> (
    reqwest::Response,
    tonic::Streaming<session_pb::SessionChange>,
) {
    let response = stack
        .http
        .get(format!(
            "{}/api/v1/instances/{}/terminal/events",
            stack.gateway_url, stack.instance_id
        ))
        .bearer_auth(token)
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(response.status().as_u16(), 200);
    let mut request = tonic::Request::new(session_pb::WatchSessionsRequest {
        instance: stack.instance_id.clone(),
    });
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("an ascii token"),
    );
    let changes = gateway_grpc(stack)
        .await
        .watch_sessions(request)
        .await
        .expect("watch sessions through the gateway")
        .into_inner();
    (response, changes)
}

/// Reads the events stream to its end; fails if it is still open after [`PATIENCE`].
async fn events_end(mut response: reqwest::Response, why: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match tokio::time::timeout_at(deadline, response.chunk()).await {
            Err(_) => panic!("the event stream was still open {PATIENCE:?} after {why}"),
            Ok(Ok(Some(_))) => {}
            // A clean end, or a connection the stopping server closed: either way it ended.
            Ok(Ok(None)) | Ok(Err(_)) => return,
        }
    }
}

/// Reads `WatchSessions` to its end, which must be clean; fails if it is still open after
/// [`PATIENCE`].
async fn changes_end(mut changes: tonic::Streaming<session_pb::SessionChange>, why: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match tokio::time::timeout_at(deadline, changes.message()).await {
            Err(_) => panic!("WatchSessions was still open {PATIENCE:?} after {why}"),
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) => return,
            Ok(Err(status)) => panic!("WatchSessions failed after {why}: {status:?}"),
        }
    }
}

#[tokio::test]
async fn event_streams_and_session_watches_end_when_the_gateway_stops() {
    let mut stack = TestStack::builder().start().await;
    let (response, changes) = open_both(&stack, &stack.admin_token.clone()).await;
    let ended = tokio::spawn(async move {
        tokio::join!(
            events_end(response, "the gateway stopped"),
            changes_end(changes, "the gateway stopped"),
        )
    });
    stack.stop_gateway().await;
    tokio::time::timeout(PATIENCE, ended)
        .await
        .expect("both streams end")
        .expect("the readers finish");
    stack.shutdown().await;
}

#[tokio::test]
async fn event_streams_and_session_watches_end_when_their_credential_has_expired() {
    let stack = TestStack::builder().start().await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs();
    // Past its `exp`, but within the minute of clock skew a JWT is still accepted by: the
    // streams open, and end at once, since the credential they opened with has ended.
    let expired = stack.jwt_expiring_at("expired", &["*"], now - 10);
    let (response, changes) = open_both(&stack, &expired).await;
    events_end(response, "the credential expired").await;
    changes_end(changes, "the credential expired").await;

    // A credential that has not expired keeps its streams: they carry the next change.
    let fresh = stack.jwt("fresh", &["*"], false);
    let mut events = Events::open_as(&stack, &stack.instance_id, &fresh).await;
    let (_fresh_events, mut changes) = open_both(&stack, &fresh).await;
    let id = create_session(&stack, &stack.instance_id, json!({"name": "after"})).await;
    events.until("created", &id, |_| true).await;
    super::support::next_change_of(&mut changes, &id, "the create", |_, _| true).await;
    stack.shutdown().await;
}
