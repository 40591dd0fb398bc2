//! A share link shows the present, and the past only when its creator says `history`: a line a
//! session printed before the share was made (and that scrolled off the screen since) never
//! reaches the share's WebSocket, whatever `since` and `snapshot` it asks for, nor its relayed
//! gRPC `Attach`, nor its screen call (whose scrollback is refused), while a line printed after
//! does; with `"history": true` the share sees both, as any viewer does. Against a real broker.

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::broker::v1::pty_broker_client::PtyBrokerClient;
use ptyhub_proto::broker::v1::server_frame::Frame;
use ptyhub_test_support::stack::TestStack;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use crate::common::{PATIENCE, Terminal, create_session, post, send};

/// What the session printed before the share existed. Typed as `before""-share`, so that the
/// command line's echo never spells it: only the output does.
const PAST: &str = "before-share";

/// A session that printed [`PAST`] and then enough lines to scroll it off the 24 visible rows:
/// it is in the ring and the scrollback, and no longer on the screen.
async fn session_with_a_past(stack: &TestStack) -> String {
    let session = create_session(stack, &stack.instance_id, json!({"name": "watched"})).await;
    type_and_wait(
        stack,
        &session,
        "echo before\"\"-share; seq 1 60\n",
        "(?m)^60$",
    )
    .await;
    session
}

/// Types `text` as the admin, then waits until the screen matches `pattern`. What is typed
/// right after a command may be echoed before the shell's next prompt (`$ ` then follows it on
/// the line), so patterns match a line's end, not its start.
async fn type_and_wait(stack: &TestStack, session: &str, text: &str, pattern: &str) {
    let one = format!(
        "/api/v1/instances/{}/terminal/sessions/{session}",
        stack.instance_id
    );
    let (status, body) = post(stack, &format!("{one}/input"), Some(json!({"text": text}))).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = post(
        stack,
        &format!("{one}/wait"),
        Some(json!({"pattern": pattern, "timeout_ms": 20_000})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

async fn create_share(stack: &TestStack, session: &str, history: Option<bool>) -> String {
    let mut body = json!({"session_id": session});
    if let Some(history) = history {
        body["history"] = Value::Bool(history);
    }
    let (status, created) = post(
        stack,
        &format!("/api/v1/instances/{}/shares", stack.instance_id),
        Some(body),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["history"], history.unwrap_or(false), "{created}");
    created["token"].as_str().unwrap().to_owned()
}

/// Everything a share's WebSocket opened with `query` receives (a snapshot's bytes included)
/// until the line printed after it opened, [`PAST`] or not.
async fn websocket_sees(
    stack: &TestStack,
    session: &str,
    token: &str,
    query: &str,
    after: &str,
) -> String {
    let url = format!(
        "{}/ws/tool-instances/{}/terminal/{session}?token={token}{query}",
        stack.websocket_url(),
        stack.instance_id
    );
    let mut socket = Terminal::open_url(&url, &[]).await.expect("a share socket");
    socket.connected().await;
    type_and_wait(
        stack,
        session,
        &format!("echo {after}\"\"-share\n"),
        &format!("(?m){after}-share$"),
    )
    .await;
    socket.read_until_output(&format!("{after}-share")).await;
    let seen = socket.output_text();
    let gaps: Vec<&Value> = socket
        .texts
        .iter()
        .filter(|frame| frame["type"] == "gap")
        .collect();
    format!("{seen}\ngaps: {gaps:?}")
}

/// Everything a share's relayed gRPC `Attach` from offset 0 receives (snapshots, output, gaps)
/// until the line printed after it opened, as text.
async fn relayed_attach_sees(stack: &TestStack, session: &str, token: &str, after: &str) -> String {
    let channel = Channel::from_shared(stack.gateway_url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let (frames, receiver) = mpsc::channel(4);
    frames
        .send(broker_pb::ClientFrame {
            frame: Some(broker_pb::client_frame::Frame::Hello(broker_pb::Hello {
                session_id: session.to_owned(),
                role: broker_pb::Role::Viewer as i32,
                since: Some(0),
                ..Default::default()
            })),
        })
        .await
        .unwrap();
    let mut request = tonic::Request::new(ReceiverStream::new(receiver));
    let metadata = request.metadata_mut();
    metadata.insert("authorization", format!("Bearer {token}").parse().unwrap());
    metadata.insert("ptyhub-instance", stack.instance_id.parse().unwrap());
    let mut inbound = PtyBrokerClient::new(channel)
        .attach(request)
        .await
        .expect("a share may attach as a viewer")
        .into_inner();
    type_and_wait(
        stack,
        session,
        &format!("echo {after}\"\"-share\n"),
        &format!("(?m){after}-share$"),
    )
    .await;
    let mut seen = String::new();
    while !seen.contains(&format!("{after}-share\r\n")) {
        let frame = tokio::time::timeout(PATIENCE, inbound.message())
            .await
            .expect("a frame in time")
            .expect("the stream goes on")
            .expect("a frame");
        match frame.frame {
            Some(Frame::Output(output)) => seen.push_str(&String::from_utf8_lossy(&output.data)),
            Some(Frame::Snapshot(snapshot)) => {
                seen.push_str(&String::from_utf8_lossy(&snapshot.data));
            }
            Some(Frame::Gap(gap)) => seen.push_str(&format!("\ngap of {}\n", gap.lost)),
            _ => {}
        }
    }
    drop(frames);
    seen
}

/// The share's screen call: its status and text.
async fn screen_sees(stack: &TestStack, session: &str, token: &str, query: &str) -> (u16, Value) {
    send(
        stack,
        Method::GET,
        &format!(
            "/api/v1/instances/{}/terminal/sessions/{session}/screen{query}",
            stack.instance_id
        ),
        Some(token),
        None,
    )
    .await
}

#[tokio::test]
async fn a_share_sees_only_what_was_printed_after_it_unless_made_with_history() {
    let stack = TestStack::builder().start().await;
    let session = session_with_a_past(&stack).await;
    let token = create_share(&stack, &session, None).await;

    for (round, query) in ["", "&since=0", "&snapshot=1", "&since=0&snapshot=1"]
        .into_iter()
        .enumerate()
    {
        let after = format!("after{round}");
        let seen = websocket_sees(&stack, &session, &token, query, &after).await;
        assert!(
            seen.contains(&format!("{after}-share")),
            "{query:?}: the present is missing: {seen}"
        );
        assert!(
            !seen.contains(PAST),
            "{query:?}: the past reached a share without history: {seen}"
        );
        assert!(
            seen.ends_with("gaps: []"),
            "{query:?}: a gap told a share without history how much it missed: {seen}"
        );
    }
    let seen = relayed_attach_sees(&stack, &session, &token, "after-grpc").await;
    assert!(
        !seen.contains(PAST) && !seen.contains("gap of"),
        "the past reached a share's relayed attach: {seen}"
    );

    let (status, screen) = screen_sees(&stack, &session, &token, "").await;
    assert_eq!(status, 200, "{screen}");
    assert!(!screen["text"].as_str().unwrap().contains(PAST), "{screen}");
    let (status, refused) = screen_sees(&stack, &session, &token, "?scrollback=100").await;
    assert_eq!(status, 403, "{refused}");
    assert!(
        refused["detail"]
            .as_str()
            .unwrap()
            .starts_with("scrollback is not allowed"),
        "{refused}"
    );
    let (status, waited) = post_as(
        &stack,
        &format!(
            "/api/v1/instances/{}/terminal/sessions/{session}/wait",
            stack.instance_id
        ),
        &token,
        json!({"pattern": "", "scrollback": 100}),
    )
    .await;
    assert_eq!(status, 403, "{waited}");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_share_made_with_history_sees_the_past_as_any_viewer_does() {
    let stack = TestStack::builder().start().await;
    let session = session_with_a_past(&stack).await;
    let token = create_share(&stack, &session, Some(true)).await;

    for (round, query) in ["", "&since=0", "&snapshot=1"].into_iter().enumerate() {
        let after = format!("after{round}");
        let seen = websocket_sees(&stack, &session, &token, query, &after).await;
        assert!(
            seen.contains(PAST) && seen.contains(&format!("{after}-share")),
            "{query:?}: a share with history sees the past and the present: {seen}"
        );
    }
    let seen = relayed_attach_sees(&stack, &session, &token, "after-grpc").await;
    assert!(seen.contains(PAST), "{seen}");

    let (status, screen) = screen_sees(&stack, &session, &token, "?scrollback=100").await;
    assert_eq!(status, 200, "{screen}");
    assert!(screen["text"].as_str().unwrap().contains(PAST), "{screen}");
    stack.shutdown().await;
}

/// POSTs `body` with `token` as the credential.
async fn post_as(stack: &TestStack, path: &str, token: &str, body: Value) -> (u16, Value) {
    send(stack, Method::POST, path, Some(token), Some(body)).await
}
