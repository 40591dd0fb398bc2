//! Presence through the gateway: two browsers and a CLI attached to one session each see the
//! others listed (principal, role, surface) on the session record, "typing" shows and clears,
//! and a share link sees who is attached but not their names. Control requests on the terminal
//! WebSocket: a viewer asks, the controller declines or grants (the lease moves, both sockets
//! stay open), and bad requests and answers are refused with an error frame.

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
    tracing::info!(
        ?took,
        "presence of all three on the record after the last attach"
    );

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
    tracing::info!(?took, "alice typing on the record after her input");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_asks_for_control_over_the_websocket_and_a_grant_moves_it() {
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
    let mut alice_tab = Terminal::open_url(&socket_url(&alice, ""), &[])
        .await
        .expect("alice's socket");
    alice_tab.connected().await;
    let mut bob_tab = Terminal::open_url(&socket_url(&bob, "&mode=view"), &[])
        .await
        .expect("bob's socket");
    bob_tab.connected().await;
    let (status, share) = send(
        &stack,
        reqwest::Method::POST,
        &format!("/api/v1/instances/{instance}/shares"),
        Some(&stack.admin_token),
        Some(json!({"session_id": session_id})),
    )
    .await;
    assert_eq!(status, 201, "{share}");
    let share_token = share["token"].as_str().expect("a share token").to_owned();
    let share_principal = format!("share:{}", share["id"].as_str().expect("a share id"));
    let mut share_tab = Terminal::open_url(&socket_url(&share_token, ""), &[])
        .await
        .expect("the share's socket");
    share_tab.connected().await;

    // Bad input: a share may not ask, a viewer may not answer, a frame without its id is
    // refused; each with a detail, and nothing moves.
    share_tab
        .send_json(json!({"type": "request_control"}))
        .await;
    let refused = share_tab.read_until_text("error").await;
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|message| message.contains("may only view")),
        "{refused}"
    );
    bob_tab
        .send_json(json!({"type": "grant_control", "request_id": 1}))
        .await;
    let refused = bob_tab.read_until_text("error").await;
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|message| message.contains("a viewer may not answer")),
        "{refused}"
    );
    alice_tab.send_json(json!({"type": "grant_control"})).await;
    let refused = alice_tab.read_until_text("error").await;
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|message| message.contains("request_id")),
        "{refused}"
    );
    alice_tab
        .send_json(json!({"type": "grant_control", "request_id": 99}))
        .await;
    let refused = alice_tab.read_until_text("error").await;
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|message| message.contains("no pending request for control 99")),
        "{refused}"
    );

    // Bob asks; Alice's page is sent the request and declines: Bob is told, nothing else moves.
    bob_tab.send_json(json!({"type": "request_control"})).await;
    let requested = alice_tab.read_until_text("control_requested").await;
    assert_eq!(requested["requester"]["principal"], "bob", "{requested}");
    assert_eq!(requested["requester"]["role"], "viewer", "{requested}");
    let request_id = requested["request_id"].as_u64().expect("a request id");
    alice_tab
        .send_json(json!({"type": "decline_control", "request_id": request_id}))
        .await;
    let declined = bob_tab.read_until_text("control_declined").await;
    assert_eq!(declined["request_id"], request_id);
    bob_tab.send_input("echo by-bob-too-early\n").await;
    let refused = bob_tab.read_until_text("error").await;
    assert_eq!(refused["message"], "viewers cannot send input");

    alice_tab.send_input("echo from-alice\n").await;
    alice_tab.read_until_output("from-alice\r\n").await;

    // Bob asks again; Alice grants: the lease moves and both sockets stay open.
    bob_tab.send_json(json!({"type": "request_control"})).await;
    let requested = alice_tab.read_until_text("control_requested").await;
    let request_id = requested["request_id"].as_u64().expect("a request id");
    alice_tab
        .send_json(json!({"type": "grant_control", "request_id": request_id}))
        .await;
    assert_eq!(bob_tab.read_until_text("role").await["role"], "controller");
    assert_eq!(alice_tab.read_until_text("role").await["role"], "viewer");
    bob_tab.send_input("echo typed-by-$((6*7))\n").await;
    bob_tab.read_until_output("typed-by-42").await;
    alice_tab.read_until_output("typed-by-42").await;
    alice_tab.send_input("echo alice-after\n").await;
    let refused = alice_tab.read_until_text("error").await;
    assert_eq!(refused["message"], "viewers cannot send input");
    presence_becomes(
        &stack,
        &session_path,
        &[
            attendee("alice", "viewer", "web", false),
            attendee("bob", "controller", "web", false),
            attendee(&share_principal, "viewer", "web", false),
        ],
    )
    .await;

    // The audit trail attributes each one's input, as counts of bytes.
    typed_bytes_become(&stack, &session_id, "alice", "echo from-alice\n".len()).await;
    typed_bytes_become(&stack, &session_id, "bob", "echo typed-by-$((6*7))\n".len()).await;

    // Bob's socket is audited with the role it has now: a reset it sends is a controller's,
    // and when a new controller takes over, its detach is a controller's taken over (it
    // attached to watch).
    bob_tab.send_json(json!({"type": "reset"})).await;
    while bob_tab.read_until_text("status").await["status"] != "connected" {}
    let carol = stack.jwt("carol", &["*"], false);
    let mut carol_tab = Terminal::open_url(&socket_url(&carol, ""), &[])
        .await
        .expect("carol's socket");
    carol_tab.connected().await;
    assert_eq!(bob_tab.read_until_closed().await.code, 4009);
    // Bob's reset and detach, and Carol's takeover from him (he attached to watch), once the
    // trail has them.
    let deadline = Instant::now() + PATIENCE;
    let (resets, taken_over, takeovers) = loop {
        let (status, page) = get(
            &stack,
            &format!("/api/v1/audit?session={session_id}&limit=1000"),
        )
        .await;
        assert_eq!(status, 200, "{page}");
        let bobs = |kind: &str| -> Vec<Value> {
            page["events"]
                .as_array()
                .expect("a list of events")
                .iter()
                .filter(|event| event["kind"] == kind && event["principal"] == "bob")
                .cloned()
                .collect()
        };
        let resets = bobs("session_reset");
        let taken_over: Vec<Value> = bobs("detached")
            .into_iter()
            .filter(|event| event["detail"]["reason"] == "taken_over")
            .collect();
        let takeovers: Vec<Value> = page["events"]
            .as_array()
            .expect("a list of events")
            .iter()
            .filter(|event| event["kind"] == "takeover" && event["detail"]["from"] == "bob")
            .cloned()
            .collect();
        let complete = !resets.is_empty() && !taken_over.is_empty() && !takeovers.is_empty();
        if complete || Instant::now() > deadline {
            break (resets, taken_over, takeovers);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(resets.len(), 1, "{resets:#?}");
    assert_eq!(resets[0]["role"], "controller", "{:#}", resets[0]);
    assert_eq!(taken_over.len(), 1, "{taken_over:#?}");
    assert_eq!(taken_over[0]["role"], "controller", "{:#}", taken_over[0]);
    assert_eq!(takeovers.len(), 1, "{takeovers:#?}");
    assert_eq!(takeovers[0]["principal"], "carol", "{:#}", takeovers[0]);
    assert_eq!(
        takeovers[0]["detail"]["from_attachment"], taken_over[0]["attachment_id"],
        "{:#}",
        takeovers[0]
    );
    stack.shutdown().await;
}

/// Polls the audit trail until `principal`'s typed input on `session_id` adds up to
/// `expected` bytes, each event a count through the WebSocket.
async fn typed_bytes_become(stack: &TestStack, session_id: &str, principal: &str, expected: usize) {
    let counted = ptyhub_test_support::poll_until(PATIENCE, Duration::from_millis(50), || async {
        let (status, audit) = get(stack, &format!("/api/v1/audit?session={session_id}")).await;
        assert_eq!(status, 200, "{audit}");
        let bytes: usize = audit["events"]
            .as_array()
            .expect("events")
            .iter()
            .filter(|event| {
                event["kind"] == "input"
                    && event["principal"] == principal
                    && event["detail"]["typed"] == "true"
            })
            .map(|event| {
                assert_eq!(event["surface"], "websocket", "{event}");
                event["detail"]["bytes"]
                    .as_str()
                    .and_then(|bytes| bytes.parse::<usize>().ok())
                    .expect("a byte count")
            })
            .sum();
        (bytes == expected).then_some(())
    })
    .await;
    assert!(
        counted.is_some(),
        "{principal} never had {expected} bytes attributed"
    );
}

/// PATCHes the session's `control_mode` as `token`.
async fn set_control_mode(stack: &TestStack, path: &str, token: &str, body: Value) -> (u16, Value) {
    send(stack, reqwest::Method::PATCH, path, Some(token), Some(body)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_controllers_type_alternately_over_websockets_and_the_audit_attributes_each() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let session_id = create_session(&stack, &instance, json!({"control_mode": "shared"})).await;
    let session_path = format!("/api/v1/instances/{instance}/terminal/sessions/{session_id}");
    let (status, session) = get(&stack, &session_path).await;
    assert_eq!(status, 200, "{session}");
    assert_eq!(session["control_mode"], "shared", "{session}");
    let socket_url = |token: &str| {
        format!(
            "{}/ws/tool-instances/{instance}/terminal/{session_id}?token={token}",
            stack.websocket_url()
        )
    };
    let alice = stack.jwt("alice", &["*"], false);
    let bob = stack.jwt("bob", &["*"], false);
    let mut alice_tab = Terminal::open_url(&socket_url(&alice), &[])
        .await
        .expect("alice's socket");
    assert_eq!(alice_tab.connected().await["role"], "controller");
    // In the exclusive mode Bob's attach would take control and close Alice's socket (4009).
    let mut bob_tab = Terminal::open_url(&socket_url(&bob), &[])
        .await
        .expect("bob's socket");
    assert_eq!(bob_tab.connected().await["role"], "controller");
    presence_becomes(
        &stack,
        &session_path,
        &[
            attendee("alice", "controller", "web", false),
            attendee("bob", "controller", "web", false),
        ],
    )
    .await;

    // Turns, each waiting for its own echo: both go in, in order.
    alice_tab.send_input("echo alice-$((1*1))\n").await;
    alice_tab.read_until_output("alice-1\r\n").await;
    bob_tab.send_input("echo bob-$((1*1))\n").await;
    bob_tab.read_until_output("bob-1\r\n").await;
    alice_tab.send_input("echo alice-$((2*1))\n").await;
    alice_tab.read_until_output("alice-2\r\n").await;
    bob_tab.send_input("echo bob-$((2*1))\n").await;
    bob_tab.read_until_output("bob-2\r\n").await;
    alice_tab.read_until_output("bob-2\r\n").await;
    let seen = alice_tab.output_text();
    let at = |needle: &str| {
        seen.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} not in {seen:?}"))
    };
    assert!(
        at("alice-1\r\n") < at("bob-1\r\n")
            && at("bob-1\r\n") < at("alice-2\r\n")
            && at("alice-2\r\n") < at("bob-2\r\n"),
        "in turn: {seen:?}"
    );

    let line = "echo alice-$((1*1))\n".len();
    typed_bytes_become(&stack, &session_id, "alice", 2 * line).await;
    typed_bytes_become(&stack, &session_id, "bob", 2 * "echo bob-$((1*1))\n".len()).await;
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_control_mode_moves_roles_without_closing_a_socket() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let sessions = format!("/api/v1/instances/{instance}/terminal/sessions");
    let session_id = create_session(&stack, &instance, json!({})).await;
    let session_path = format!("{sessions}/{session_id}");
    let socket_url = |token: &str, query: &str| {
        format!(
            "{}/ws/tool-instances/{instance}/terminal/{session_id}?token={token}{query}",
            stack.websocket_url()
        )
    };
    let alice = stack.jwt("alice", &["*"], false);
    let bob = stack.jwt("bob", &["*"], false);
    let mut alice_tab = Terminal::open_url(&socket_url(&alice, ""), &[])
        .await
        .expect("alice's socket");
    alice_tab.connected().await;
    let mut bob_tab = Terminal::open_url(&socket_url(&bob, "&mode=view"), &[])
        .await
        .expect("bob's socket");
    bob_tab.connected().await;
    let (status, session) = get(&stack, &session_path).await;
    assert_eq!(status, 200, "{session}");
    assert_eq!(
        session["control_mode"], "exclusive",
        "the default: {session}"
    );

    // Bad input first: an unknown mode or field, a viewer-only credential; nothing changes.
    for body in [json!({"control_mode": "both"}), json!({"control_mode": 1})] {
        let (status, refused) = set_control_mode(&stack, &session_path, &alice, body).await;
        assert_eq!(status, 422, "{refused}");
    }
    let (status, refused) = set_control_mode(
        &stack,
        &session_path,
        &alice,
        json!({"control_mode": "both"}),
    )
    .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(
        refused["detail"], "control mode \"both\" is not one of exclusive, shared",
        "{refused}"
    );
    let (status, refused) =
        set_control_mode(&stack, &session_path, &alice, json!({"control": "shared"})).await;
    assert_eq!(status, 422, "{refused}");
    let (status, refused) = send(
        &stack,
        reqwest::Method::POST,
        &sessions,
        Some(&alice),
        Some(json!({"control_mode": "shared-ish"})),
    )
    .await;
    assert_eq!(status, 422, "{refused}");
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
    let (status, refused) = set_control_mode(
        &stack,
        &session_path,
        share_token,
        json!({"control_mode": "shared"}),
    )
    .await;
    assert_eq!(status, 403, "{refused}");
    let (_, session) = get(&stack, &session_path).await;
    assert_eq!(session["control_mode"], "exclusive", "unchanged: {session}");

    // To shared: Bob's view watches on until he asks, then controls on the same socket.
    let (status, changed) = set_control_mode(
        &stack,
        &session_path,
        &alice,
        json!({"control_mode": "shared"}),
    )
    .await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(changed["control_mode"], "shared", "{changed}");
    presence_becomes(
        &stack,
        &session_path,
        &[
            attendee("alice", "controller", "web", false),
            attendee("bob", "viewer", "web", false),
        ],
    )
    .await;
    bob_tab.send_json(json!({"type": "request_control"})).await;
    assert_eq!(bob_tab.read_until_text("role").await["role"], "controller");
    bob_tab.send_input("echo bob-$((3*3))\n").await;
    bob_tab.read_until_output("bob-9\r\n").await;
    alice_tab.read_until_output("bob-9\r\n").await;
    presence_becomes(
        &stack,
        &session_path,
        &[
            attendee("alice", "controller", "web", false),
            attendee("bob", "controller", "web", false),
        ],
    )
    .await;

    // Back to exclusive: Alice, attached first, keeps control; Bob reads on as a viewer.
    let (status, changed) = set_control_mode(
        &stack,
        &session_path,
        &bob,
        json!({"control_mode": "exclusive"}),
    )
    .await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(bob_tab.read_until_text("role").await["role"], "viewer");
    bob_tab.send_input("echo bob-again\n").await;
    let refused = bob_tab.read_until_text("error").await;
    assert_eq!(refused["message"], "viewers cannot send input");
    alice_tab.send_input("echo alice-$((4*4))\n").await;
    alice_tab.read_until_output("alice-16\r\n").await;
    bob_tab.read_until_output("alice-16\r\n").await;
    presence_becomes(
        &stack,
        &session_path,
        &[
            attendee("alice", "controller", "web", false),
            attendee("bob", "viewer", "web", false),
        ],
    )
    .await;
    stack.shutdown().await;
}
