//! Presence through the gateway: two browsers and a CLI attached to one session each see the
//! others listed (principal, role, surface) on the session record, "typing" shows and clears,
//! and a share link sees who is attached but not their names.

use std::time::{Duration, Instant};

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::broker::v1::pty_broker_client::PtyBrokerClient;
use ptyhub_test_support::stack::TestStack;
use ptyhub_wire::CLI_USER_AGENT_PREFIX;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Endpoint;

use crate::common::{PATIENCE, Terminal, create_session, get, send};

/// One attendee as the test compares it: principal, role, surface, typing.
type Seen = (String, String, String, bool);

fn seen(session: &Value) -> Vec<Seen> {
    session["presence"]
        .as_array()
        .unwrap_or_else(|| panic!("a session carries its presence: {session}"))
        .iter()
        .map(|attendee| {
            (
                attendee["principal"].as_str().unwrap_or("?").to_owned(),
                attendee["role"].as_str().unwrap_or("?").to_owned(),
                attendee["surface"].as_str().unwrap_or("?").to_owned(),
                attendee["typing"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

fn attendee(principal: &str, role: &str, surface: &str, typing: bool) -> Seen {
    (
        principal.to_owned(),
        role.to_owned(),
        surface.to_owned(),
        typing,
    )
}

/// Polls the session's record until its presence is `wanted`; how long that took.
async fn presence_becomes(stack: &TestStack, path: &str, wanted: &[Seen]) -> Duration {
    let started = Instant::now();
    let last = std::sync::Mutex::new(Vec::new());
    let reached = ptyhub_test_support::poll_until(PATIENCE, Duration::from_millis(20), || async {
        let (status, session) = get(stack, path).await;
        assert_eq!(status, 200, "{session}");
        let now = seen(&session);
        let done = now.as_slice() == wanted;
        *last.lock().unwrap() = now;
        done.then_some(())
    })
    .await;
    assert!(
        reached.is_some(),
        "presence never became {wanted:?}; last {:?}",
        last.lock().unwrap()
    );
    started.elapsed()
}

/// A viewer's `Attach` through the gateway as the `ptyhub` CLI makes it (its user agent), held
/// open until dropped.
async fn cli_viewer(
    stack: &TestStack,
    token: &str,
    session_id: &str,
) -> (
    mpsc::Sender<broker_pb::ClientFrame>,
    tonic::Streaming<broker_pb::ServerFrame>,
) {
    let channel = Endpoint::from_shared(stack.gateway_url.clone())
        .expect("gateway url")
        .user_agent(format!("{CLI_USER_AGENT_PREFIX}test"))
        .expect("a user agent")
        .connect()
        .await
        .expect("an http/2 connection to the gateway");
    let (frames, receiver) = mpsc::channel(4);
    let hello = broker_pb::Hello {
        ticket: String::new(),
        session_id: session_id.to_owned(),
        role: broker_pb::Role::Viewer as i32,
        size: None,
        since: None,
        snapshot: false,
        present_only: false,
    };
    frames
        .send(broker_pb::ClientFrame {
            frame: Some(broker_pb::client_frame::Frame::Hello(hello)),
        })
        .await
        .expect("an open queue");
    let mut request = tonic::Request::new(ReceiverStream::new(receiver));
    let metadata = request.metadata_mut();
    metadata.insert(
        "authorization",
        format!("Bearer {token}").parse().expect("an ascii token"),
    );
    metadata.insert(
        "ptyhub-instance",
        stack.instance_id.parse().expect("an ascii id"),
    );
    let mut server = PtyBrokerClient::new(channel)
        .attach(request)
        .await
        .expect("the attach is accepted")
        .into_inner();
    let first = tokio::time::timeout(PATIENCE, server.message())
        .await
        .expect("a first frame in time")
        .expect("no error")
        .and_then(|frame| frame.frame);
    assert!(
        matches!(first, Some(broker_pb::server_frame::Frame::Connected(_))),
        "{first:?}"
    );
    (frames, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_browsers_and_a_cli_see_each_other_and_who_is_typing() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let session_id = create_session(&stack, &instance, json!({})).await;
    let session_path = format!("/api/v1/instances/{instance}/terminal/sessions/{session_id}");
    let socket_url = |token: &str, query: &str| {
        format!(
            "{}/ws/tool-instances/{instance}/terminal/{session_id}?token={token}{query}",
            stack.websocket_url()
        )
    };
    let alice = stack.jwt("alice", &["*"], false);
    let bob = stack.jwt("bob", &["*"], false);
    let carol = stack.jwt("carol", &["*"], false);

    let mut alice_tab = Terminal::open_url(&socket_url(&alice, ""), &[])
        .await
        .expect("alice's socket");
    alice_tab.connected().await;
    let mut bob_tab = Terminal::open_url(&socket_url(&bob, "&mode=view"), &[])
        .await
        .expect("bob's socket");
    bob_tab.connected().await;
    let _carol_cli = cli_viewer(&stack, &carol, &session_id).await;
    let took = presence_becomes(
        &stack,
        &session_path,
        &[
            attendee("alice", "controller", "web", false),
            attendee("bob", "viewer", "web", false),
            attendee("carol", "viewer", "cli", false),
        ],
    )
    .await;
    println!("presence of all three on the record {took:?} after the last attach");

    // Alice types: the record says so, then, after 3 quiet seconds, no more.
    alice_tab.send_input("echo hi\n").await;
    let took = presence_becomes(
        &stack,
        &session_path,
        &[
            attendee("alice", "controller", "web", true),
            attendee("bob", "viewer", "web", false),
            attendee("carol", "viewer", "cli", false),
        ],
    )
    .await;
    println!("alice typing on the record {took:?} after her input");
    presence_becomes(
        &stack,
        &session_path,
        &[
            attendee("alice", "controller", "web", false),
            attendee("bob", "viewer", "web", false),
            attendee("carol", "viewer", "cli", false),
        ],
    )
    .await;

    // A share link sees the same people, nameless.
    let (status, share) = send(
        &stack,
        reqwest::Method::POST,
        &format!("/api/v1/instances/{instance}/shares"),
        Some(&stack.admin_token),
        Some(json!({"session_id": session_id})),
    )
    .await;
    assert_eq!(status, 201, "{share}");
    let share_token = share["token"].as_str().expect("a share token");
    let (status, seen_by_share) = send(
        &stack,
        reqwest::Method::GET,
        &session_path,
        Some(share_token),
        None,
    )
    .await;
    assert_eq!(status, 200, "{seen_by_share}");
    assert_eq!(
        seen(&seen_by_share),
        [
            attendee("", "controller", "web", false),
            attendee("", "viewer", "web", false),
            attendee("", "viewer", "cli", false),
        ]
    );

    // Bob leaves: the others see him go.
    drop(bob_tab);
    presence_becomes(
        &stack,
        &session_path,
        &[
            attendee("alice", "controller", "web", false),
            attendee("carol", "viewer", "cli", false),
        ],
    )
    .await;
    stack.shutdown().await;
}
