//! The broker's `Attach` on the gateway's public port, as a gRPC client outside the cluster uses
//! it: attach targets from the gateway name the gateway, a stream authorised by the user's
//! credential and the `ptyhub-instance` metadata carries input and output and resumes by
//! offset, every bad input gets its code and reaches no PTY, the other broker methods are
//! UNIMPLEMENTED, and a stopping gateway ends its streams with UNAVAILABLE.

use std::time::Duration;

use bytes::Bytes;
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::broker::v1::pty_broker_client::PtyBrokerClient;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_proto::session::v1::session_api_client::SessionApiClient;
use ptyhub_test_support::stack::TestStack;
use ptyhub_wire::limits::MAX_FRAME_BYTES;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::transport::Channel;

use crate::common::PATIENCE;

use broker_pb::client_frame::Frame as ClientFrameKind;
use broker_pb::server_frame::Frame as ServerFrameKind;

async fn gateway_channel(stack: &TestStack) -> Channel {
    Channel::from_shared(stack.gateway_url.clone())
        .expect("gateway url")
        .connect()
        .await
        .expect("an http/2 connection to the gateway")
}

/// `message` with `token` (when given) as its bearer credential and `instance` (when given) as
/// the instance it is about.
fn request<T>(message: T, token: Option<&str>, instance: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = token {
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("an ascii token"),
        );
    }
    if let Some(instance) = instance {
        request
            .metadata_mut()
            .insert("ptyhub-instance", instance.parse().expect("an ascii name"));
    }
    request
}

fn hello(session_id: &str, role: broker_pb::Role, since: Option<u64>) -> broker_pb::ClientFrame {
    broker_pb::ClientFrame {
        frame: Some(ClientFrameKind::Hello(broker_pb::Hello {
            // Through the gateway no ticket is needed: the credential authorises the stream.
            ticket: String::new(),
            session_id: session_id.to_owned(),
            role: role as i32,
            size: None,
            since,
            snapshot: false,
            present_only: false,
        })),
    }
}

fn input(data: impl Into<Bytes>) -> broker_pb::ClientFrame {
    broker_pb::ClientFrame {
        frame: Some(ClientFrameKind::Input(broker_pb::Input {
            data: data.into(),
            input_id: None,
        })),
    }
}

/// One `Attach` through the gateway, its client side open until dropped.
struct Stream {
    frames: mpsc::Sender<broker_pb::ClientFrame>,
    server: tonic::Streaming<broker_pb::ServerFrame>,
    /// Output bytes in order, from the first output frame's offset.
    output: Vec<u8>,
    first_offset: Option<u64>,
}

impl Stream {
    /// Opens the stream with `first` as its first client frame.
    async fn open(
        stack: &TestStack,
        token: Option<&str>,
        instance: Option<&str>,
        first: broker_pb::ClientFrame,
    ) -> Result<Stream, tonic::Status> {
        let (frames, receiver) = mpsc::channel(16);
        frames.send(first).await.expect("an open queue");
        let mut client = PtyBrokerClient::new(gateway_channel(stack).await);
        let server = client
            .attach(request(ReceiverStream::new(receiver), token, instance))
            .await?
            .into_inner();
        Ok(Stream {
            frames,
            server,
            output: Vec::new(),
            first_offset: None,
        })
    }

    async fn send(&self, frame: broker_pb::ClientFrame) {
        self.frames.send(frame).await.expect("the stream is open");
    }

    /// The next server frame; `Err` when the stream ended with a status, `Ok(None)` when it
    /// ended cleanly.
    async fn next(&mut self) -> Result<Option<ServerFrameKind>, tonic::Status> {
        let frame = tokio::time::timeout(PATIENCE, self.server.message())
            .await
            .expect("a server frame in time")?;
        let Some(frame) = frame else {
            return Ok(None);
        };
        let frame = frame.frame.expect("a frame with content");
        if let ServerFrameKind::Output(output) = &frame {
            self.first_offset.get_or_insert(output.offset);
            self.output.extend_from_slice(&output.data);
        }
        Ok(Some(frame))
    }

    /// Reads until the output contains `text`, returning the frames that were not output.
    async fn read_until(&mut self, text: &str) -> Vec<ServerFrameKind> {
        let mut others = Vec::new();
        while !String::from_utf8_lossy(&self.output).contains(text) {
            match self.next().await {
                Ok(Some(ServerFrameKind::Output(_))) => {}
                Ok(Some(other)) => others.push(other),
                Ok(None) => panic!("the stream ended before {text:?}"),
                Err(status) => panic!("the stream failed before {text:?}: {status:?}"),
            }
        }
        others
    }

    /// Reads until the output holds `count` bytes.
    async fn read_bytes(&mut self, count: usize) {
        while self.output.len() < count {
            match self.next().await {
                Ok(Some(_)) => {}
                other => panic!("the stream ended before {count} bytes: {other:?}"),
            }
        }
    }

    /// The status that ends the stream, reading past any frames before it.
    async fn ending_status(&mut self) -> tonic::Status {
        loop {
            match self.next().await {
                Ok(Some(_)) => {}
                Ok(None) => panic!("the stream ended without a status"),
                Err(status) => return status,
            }
        }
    }
}

fn expect_connected(frame: Result<Option<ServerFrameKind>, tonic::Status>) -> broker_pb::Connected {
    match frame {
        Ok(Some(ServerFrameKind::Connected(connected))) => connected,
        other => panic!("expected connected first, got {other:?}"),
    }
}

/// Creates a session on `instance` through the gateway's gRPC surface.
async fn create_session(stack: &TestStack, instance: &str) -> session_pb::SessionAttachment {
    SessionApiClient::new(gateway_channel(stack).await)
        .create_session(request(
            session_pb::CreateSessionRequest {
                instance: instance.to_owned(),
                ..Default::default()
            },
            Some(&stack.admin_token),
            None,
        ))
        .await
        .expect("create a session through the gateway")
        .into_inner()
}

#[tokio::test]
async fn attach_targets_from_the_gateway_point_at_the_gateway() {
    let stack = TestStack::builder().start().await;
    let mut sessions = SessionApiClient::new(gateway_channel(&stack).await);
    let token = Some(stack.admin_token.as_str());

    let created = create_session(&stack, "local").await;
    let created_target = created.attach.expect("an attach target");
    let resolved = sessions
        .resolve_session(request(
            session_pb::ResolveSessionRequest {
                instance: "local".into(),
                selector: Some(session_pb::resolve_session_request::Selector::Alias(
                    "build".into(),
                )),
                create_if_absent: true,
                size: None,
                role: broker_pb::Role::Controller as i32,
            },
            token,
            None,
        ))
        .await
        .expect("resolve an alias")
        .into_inner()
        .attach
        .expect("an attach target");
    let issued = sessions
        .issue_attach_ticket(request(
            session_pb::IssueAttachTicketRequest {
                instance: "local".into(),
                session_id: created_target.session_id.clone(),
                role: broker_pb::Role::Viewer as i32,
            },
            token,
            None,
        ))
        .await
        .expect("issue a ticket")
        .into_inner();
    for (what, target) in [
        ("CreateSession", &created_target),
        ("ResolveSession", &resolved),
        ("IssueAttachTicket", &issued),
    ] {
        assert_eq!(target.broker_endpoint, stack.gateway_url, "{what}");
        assert_ne!(target.broker_endpoint, stack.broker_endpoint, "{what}");
        assert!(!target.ticket.is_empty(), "{what} still carries a ticket");
    }

    // session-api itself, asked directly, still names the broker: only the gateway's callers
    // are pointed at the gateway.
    let direct = stack
        .session_api
        .clone()
        .issue_attach_ticket(session_pb::IssueAttachTicketRequest {
            instance: stack.instance_id.clone(),
            session_id: created_target.session_id.clone(),
            role: broker_pb::Role::Viewer as i32,
        })
        .await
        .expect("a ticket from session-api")
        .into_inner();
    assert_eq!(direct.broker_endpoint, stack.broker_endpoint);
    stack.shutdown().await;
}

#[tokio::test]
async fn a_grpc_attach_through_the_gateway_carries_input_and_output_and_resumes_by_offset() {
    let stack = TestStack::builder().start().await;
    let session_id = create_session(&stack, "local")
        .await
        .session
        .expect("a session")
        .id;
    let token = Some(stack.admin_token.as_str());

    let mut first = Stream::open(
        &stack,
        token,
        Some("local"),
        hello(&session_id, broker_pb::Role::Controller, Some(0)),
    )
    .await
    .expect("the gateway relays the attach");
    let connected = expect_connected(first.next().await);
    assert_eq!(connected.session_id, session_id);
    assert_eq!(connected.role, broker_pb::Role::Controller as i32);
    first.send(input("echo relayed-$((6*7))\n")).await;
    first.read_until("relayed-42").await;
    let seen = first.output.clone();
    assert_eq!(first.first_offset, Some(0), "a replay from 0 starts at 0");
    drop(first);

    // Resumed by offset: exactly the same bytes from 0, then the rest from where it left off.
    let mut replay = Stream::open(
        &stack,
        token,
        Some(&stack.instance_id),
        hello(&session_id, broker_pb::Role::Viewer, Some(0)),
    )
    .await
    .expect("a viewer resumes from 0");
    let connected = expect_connected(replay.next().await);
    assert_eq!(connected.offset, 0);
    replay.read_bytes(seen.len()).await;
    assert_eq!(replay.output[..seen.len()], seen[..]);

    let next = u64::try_from(seen.len()).unwrap();
    let mut resumed = Stream::open(
        &stack,
        token,
        Some("local"),
        hello(&session_id, broker_pb::Role::Controller, Some(next)),
    )
    .await
    .expect("a controller resumes where it left off");
    let connected = expect_connected(resumed.next().await);
    assert_eq!(connected.offset, next);
    resumed.send(input("echo again-$((7*7))\n")).await;
    resumed.read_until("again-49").await;
    assert_eq!(
        resumed.first_offset,
        Some(next),
        "nothing before the offset twice"
    );
    stack.shutdown().await;
}

/// Every refused attempt types a line with `REFUSED` into the session; at the end the session's
/// whole output, replayed from 0, must not contain it.
#[tokio::test]
async fn bad_input_on_the_public_attach_gets_its_code_and_reaches_no_pty() {
    let stack = TestStack::builder().start().await;
    let session_id = create_session(&stack, "local")
        .await
        .session
        .expect("a session")
        .id;
    stack.register_instance("other", 5, &[]).await;
    let other_session = create_session(&stack, "other")
        .await
        .session
        .expect("a session")
        .id;
    let admin = Some(stack.admin_token.as_str());
    let controller = broker_pb::Role::Controller;
    let refused = |step: &str| input(format!("echo REFUSED-{step}\n"));

    let assert_refused =
        |result: Result<Stream, tonic::Status>, code: Code, words: &str, what: &str| match result {
            Ok(_) => panic!("{what} was admitted"),
            Err(status) => {
                assert_eq!(status.code(), code, "{what}: {status:?}");
                assert!(
                    status.message().contains(words),
                    "{what}: {:?} does not say {words:?}",
                    status.message()
                );
            }
        };

    assert_refused(
        Stream::open(
            &stack,
            None,
            Some("local"),
            hello(&session_id, controller, None),
        )
        .await,
        Code::Unauthenticated,
        "",
        "no credential",
    );
    assert_refused(
        Stream::open(
            &stack,
            Some("wrong"),
            Some("local"),
            hello(&session_id, controller, None),
        )
        .await,
        Code::Unauthenticated,
        "",
        "a wrong token",
    );
    let other_only = stack.jwt("someone", &["other"], false);
    assert_refused(
        Stream::open(
            &stack,
            Some(&other_only),
            Some("local"),
            hello(&session_id, controller, None),
        )
        .await,
        Code::PermissionDenied,
        "not allowed for this instance",
        "a token without the instance in scope",
    );
    assert_refused(
        Stream::open(&stack, admin, None, hello(&session_id, controller, None)).await,
        Code::InvalidArgument,
        "ptyhub-instance",
        "no instance named",
    );
    assert_refused(
        Stream::open(&stack, admin, Some("local"), refused("no-hello")).await,
        Code::InvalidArgument,
        "first client frame must be a hello",
        "input before any hello",
    );
    // A client that closes its side without a hello.
    let mut client = PtyBrokerClient::new(gateway_channel(&stack).await);
    let closed = client
        .attach(request(tokio_stream::empty(), admin, Some("local")))
        .await
        .map(|_| ());
    let status = closed.expect_err("an attach without frames is refused");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("before the hello"), "{status:?}");
    assert_refused(
        Stream::open(
            &stack,
            admin,
            Some("local"),
            hello(&other_session, controller, None),
        )
        .await,
        Code::NotFound,
        "not found",
        "a hello for another instance's session",
    );
    assert_refused(
        Stream::open(
            &stack,
            admin,
            Some("local"),
            hello(&uuid::Uuid::new_v4().to_string(), controller, None),
        )
        .await,
        Code::NotFound,
        "not found",
        "an unknown session",
    );
    assert_refused(
        Stream::open(
            &stack,
            admin,
            Some("local"),
            hello(&session_id, broker_pb::Role::Unspecified, None),
        )
        .await,
        Code::InvalidArgument,
        "role",
        "a hello without a role",
    );

    // A viewer's input, resize and reset are answered with an error frame; the stream goes on.
    let mut viewer = Stream::open(
        &stack,
        admin,
        Some("local"),
        hello(&session_id, broker_pb::Role::Viewer, None),
    )
    .await
    .expect("a viewer attaches");
    expect_connected(viewer.next().await);
    viewer.send(refused("viewer")).await;
    viewer
        .send(broker_pb::ClientFrame {
            frame: Some(ClientFrameKind::Resize(broker_pb::TerminalSize {
                cols: 100,
                rows: 30,
            })),
        })
        .await;
    viewer.send(hello(&session_id, controller, None)).await;
    let mut refusals = Vec::new();
    while refusals.len() < 3 {
        match viewer.next().await {
            Ok(Some(ServerFrameKind::Error(error))) => refusals.push(error),
            Ok(Some(ServerFrameKind::Output(_))) => {}
            other => panic!("expected error frames for the viewer, got {other:?}"),
        }
    }
    assert_eq!(refusals[0].code, Code::PermissionDenied as i32);
    assert_eq!(refusals[0].message, "a viewer may not write input");
    assert_eq!(refusals[1].code, Code::PermissionDenied as i32);
    assert_eq!(refusals[1].message, "a viewer may not resize");
    assert_eq!(refusals[2].code, Code::InvalidArgument as i32);
    assert!(refusals[2].message.contains("hello was already sent"));

    // Over the size limit: just over (decoded, refused by the relay), and far over (refused by
    // the decoder): both end the stream with RESOURCE_EXHAUSTED.
    for (what, size) in [
        ("just over", MAX_FRAME_BYTES + 1),
        ("far over", 2 * MAX_FRAME_BYTES),
    ] {
        let mut stream = Stream::open(
            &stack,
            admin,
            Some("local"),
            hello(&session_id, controller, None),
        )
        .await
        .expect("a controller attaches");
        expect_connected(stream.next().await);
        let mut oversized = b"echo REFUSED-".to_vec();
        oversized.resize(size, b'Z');
        stream.send(input(oversized)).await;
        let status = stream.ending_status().await;
        assert_eq!(status.code(), Code::ResourceExhausted, "{what}: {status:?}");
        assert!(status.message().contains("1 MiB"), "{what}: {status:?}");
    }

    // The session saw none of it: a controller's own line comes back, and the whole output
    // replayed from 0 holds no refused line.
    let mut check = Stream::open(
        &stack,
        admin,
        Some("local"),
        hello(&session_id, controller, Some(0)),
    )
    .await
    .expect("a controller attaches");
    expect_connected(check.next().await);
    check.send(input("echo accepted-$((2+3))\n")).await;
    check.read_until("accepted-5").await;
    let output = String::from_utf8_lossy(&check.output).into_owned();
    assert!(
        !output.contains("REFUSED"),
        "refused input reached the PTY: {output:?}"
    );
    assert!(
        !output.contains("ZZZZ"),
        "an oversized frame reached the PTY"
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn the_other_broker_methods_are_unimplemented_on_the_gateway() {
    let stack = TestStack::builder().start().await;
    let mut client = PtyBrokerClient::new(gateway_channel(&stack).await);
    let token = Some(stack.admin_token.as_str());
    let list = client
        .list(request(broker_pb::ListRequest {}, token, None))
        .await
        .expect_err("List is not offered");
    let spawn = client
        .spawn(request(broker_pb::SpawnRequest::default(), token, None))
        .await
        .expect_err("Spawn is not offered");
    let screen = client
        .get_screen(request(broker_pb::GetScreenRequest::default(), token, None))
        .await
        .expect_err("GetScreen is not offered");
    for (what, status, hint) in [
        ("List", list, "SessionApi"),
        ("Spawn", spawn, "CreateSession"),
        ("GetScreen", screen, "SessionApi"),
    ] {
        assert_eq!(status.code(), Code::Unimplemented, "{what}: {status:?}");
        assert!(
            status.message().contains("only Attach"),
            "{what}: {status:?}"
        );
        assert!(status.message().contains(hint), "{what}: {status:?}");
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn a_stopping_gateway_ends_relayed_streams_with_unavailable() {
    let mut stack = TestStack::builder().start().await;
    let session_id = create_session(&stack, "local")
        .await
        .session
        .expect("a session")
        .id;
    let mut stream = Stream::open(
        &stack,
        Some(&stack.admin_token),
        Some("local"),
        hello(&session_id, broker_pb::Role::Controller, None),
    )
    .await
    .expect("the gateway relays the attach");
    expect_connected(stream.next().await);
    let reader = tokio::spawn(async move { stream.ending_status().await });
    // The gateway waits for its streams as for its WebSockets: this returns once ours ended.
    tokio::time::timeout(Duration::from_secs(30), stack.stop_gateway())
        .await
        .expect("the gateway stops in time");
    let status = reader.await.expect("the reader");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("shutting down"), "{status:?}");
    stack.shutdown().await;
}

#[tokio::test]
async fn relayed_attaches_share_the_principals_stream_slots_with_its_websockets() {
    let stack = TestStack::builder()
        .max_streams_per_principal(2)
        .start()
        .await;
    let session_id = create_session(&stack, "local")
        .await
        .session
        .expect("a session")
        .id;
    let token = Some(stack.admin_token.as_str());
    let viewer = || hello(&session_id, broker_pb::Role::Viewer, None);

    // One WebSocket and one relayed attach of the same credential: its two slots.
    let mut socket = crate::common::Terminal::open(
        &stack,
        &format!(
            "/ws/tool-instances/{}/terminal/{session_id}?mode=view",
            stack.instance_id
        ),
    )
    .await;
    socket.connected().await;
    let mut first = Stream::open(&stack, token, Some("local"), viewer())
        .await
        .expect("a slot for the first attach");
    expect_connected(first.next().await);

    let refused = Stream::open(&stack, token, Some("local"), viewer())
        .await
        .err()
        .expect("no third stream for the credential");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("streams already"), "{refused:?}");

    // Another principal has slots of its own.
    let alice = stack.jwt("alice", &["local"], false);
    let mut theirs = Stream::open(&stack, Some(&alice), Some("local"), viewer())
        .await
        .expect("another principal's stream");
    expect_connected(theirs.next().await);

    // A stream that ends gives its slot back.
    drop(first);
    let reopened = ptyhub_test_support::poll_until(PATIENCE, Duration::from_millis(50), || async {
        Stream::open(&stack, token, Some("local"), viewer())
            .await
            .ok()
    })
    .await;
    assert!(
        reopened.is_some(),
        "the slot came back when the stream ended"
    );
    stack.shutdown().await;
}

/// Session event streams (Server-Sent Events) and gRPC `WatchSessions` count among a
/// principal's streams like its terminals: one credential cannot hold an unbounded number open.
#[tokio::test]
async fn event_streams_and_session_watches_share_the_principals_stream_slots() {
    let stack = TestStack::builder()
        .max_streams_per_principal(2)
        .start()
        .await;
    let events = format!(
        "{}/api/v1/instances/{}/terminal/events",
        stack.gateway_url, stack.instance_id
    );
    let open_events = || {
        stack
            .http
            .get(&events)
            .bearer_auth(&stack.admin_token)
            .send()
    };
    let first = open_events().await.unwrap();
    assert_eq!(first.status(), 200);
    let mut watcher = SessionApiClient::new(gateway_channel(&stack).await);
    let watch = |token: &str| {
        let mut request = tonic::Request::new(session_pb::WatchSessionsRequest {
            instance: "local".to_owned(),
        });
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        request
    };
    let watching = watcher
        .watch_sessions(watch(&stack.admin_token))
        .await
        .expect("the second slot");

    // Both slots are held: a third stream of either kind is refused.
    let refused = open_events().await.unwrap();
    assert_eq!(refused.status(), 429);
    let refused = watcher
        .watch_sessions(watch(&stack.admin_token))
        .await
        .expect_err("no third stream");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");

    // A stream that ends gives its slot back.
    drop(first);
    drop(watching);
    let reopened = ptyhub_test_support::poll_until(PATIENCE, Duration::from_millis(50), || async {
        let response = open_events().await.ok()?;
        (response.status() == 200).then_some(response)
    })
    .await;
    assert!(
        reopened.is_some(),
        "the slot came back when the stream ended"
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn a_relayed_attach_without_a_hello_is_ended_after_the_hello_timeout() {
    let stack = TestStack::builder().start().await;
    let (_frames, receiver) = mpsc::channel::<broker_pb::ClientFrame>(1);
    let mut client = PtyBrokerClient::new(gateway_channel(&stack).await);
    let answer = tokio::time::timeout(
        ptyhub_wire::limits::HELLO_TIMEOUT + PATIENCE,
        client.attach(request(
            ReceiverStream::new(receiver),
            Some(&stack.admin_token),
            Some("local"),
        )),
    )
    .await
    .expect("an answer once the hello timeout has passed");
    let status = answer.expect_err("the silent stream is ended");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("hello"), "{status:?}");
    stack.shutdown().await;
}

/// A relayed `Attach` ends `UNAUTHENTICATED` when the gateway's clock reaches its JWT's `exp`,
/// not a second before; the token is refused at the door once the minute of clock skew a
/// request's JWT is allowed has passed too. The gateway reads a clock the test moves, so the
/// hour-long token expires when the test says, however slow the machine.
#[tokio::test]
async fn a_relayed_attach_ends_unauthenticated_when_its_jwt_expires() {
    let clock = gateway::ManualClock::starting_now();
    let stack = TestStack::builder()
        .configure(|stack| stack.gateway.clock = clock.clock())
        .start()
        .await;
    let session_id = create_session(&stack, "local")
        .await
        .session
        .expect("a session")
        .id;
    let expires_at = clock.now() + 3600;
    let token = stack.jwt_expiring_at("expiring", &["*"], expires_at);
    let mut stream = Stream::open(
        &stack,
        Some(&token),
        Some("local"),
        hello(&session_id, broker_pb::Role::Controller, None),
    )
    .await
    .expect("the gateway relays the attach");
    expect_connected(stream.next().await);

    // A second before its expiry the stream still carries a command and its echo.
    clock.advance(Duration::from_secs(expires_at - 1 - clock.now()));
    stream.send(input("echo before-$((2*3))\n")).await;
    stream.read_until("before-6").await;

    clock.advance(Duration::from_secs(1));
    let status = stream.ending_status().await;
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert_eq!(status.message(), "credential expired");

    clock.advance(gateway::auth::JWT_CLOCK_SKEW + Duration::from_secs(1));
    let refused = open_status(
        Stream::open(
            &stack,
            Some(&token),
            Some("local"),
            hello(&session_id, broker_pb::Role::Controller, None),
        )
        .await,
    )
    .await;
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    assert_eq!(refused.message(), "expired credential");
    stack.shutdown().await;
}

/// The status a stream the gateway refuses ends with, whether it refuses the call itself or
/// ends the stream it accepted.
async fn open_status(opened: Result<Stream, tonic::Status>) -> tonic::Status {
    match opened {
        Err(status) => status,
        Ok(mut stream) => stream.ending_status().await,
    }
}

/// Reads frames, skipping output and the rest, until one that `wanted` picks.
async fn frame_where<T>(stream: &mut Stream, wanted: impl Fn(ServerFrameKind) -> Option<T>) -> T {
    loop {
        match stream.next().await {
            Ok(Some(frame)) => {
                if let Some(found) = wanted(frame) {
                    return found;
                }
            }
            other => panic!("the stream ended first: {other:?}"),
        }
    }
}

fn error_code(frame: ServerFrameKind) -> Option<i32> {
    match frame {
        ServerFrameKind::Error(error) => Some(error.code),
        _ => None,
    }
}

fn role_changed(frame: ServerFrameKind) -> Option<i32> {
    match frame {
        ServerFrameKind::RoleChanged(changed) => Some(changed.role),
        _ => None,
    }
}

#[tokio::test]
async fn a_viewer_granted_control_on_a_relayed_attach_types_into_the_pty() {
    let stack = TestStack::builder().start().await;
    let session_id = create_session(&stack, "local")
        .await
        .session
        .expect("a session")
        .id;
    let token = Some(stack.admin_token.as_str());
    let open = |role| Stream::open(&stack, token, Some("local"), hello(&session_id, role, None));
    let mut controller = open(broker_pb::Role::Controller)
        .await
        .expect("a controller");
    expect_connected(controller.next().await);
    let mut viewer = open(broker_pb::Role::Viewer).await.expect("a viewer");
    expect_connected(viewer.next().await);

    // Before a grant the viewer's input is refused.
    viewer.send(input("echo early-$((2*3))\n")).await;
    assert_eq!(
        frame_where(&mut viewer, error_code).await,
        Code::PermissionDenied as i32
    );

    viewer
        .send(broker_pb::ClientFrame {
            frame: Some(ClientFrameKind::RequestControl(
                broker_pb::RequestControl {},
            )),
        })
        .await;
    let request_id = frame_where(&mut controller, |frame| match frame {
        ServerFrameKind::ControlRequested(requested) => Some(requested.request_id),
        ServerFrameKind::Error(error) => panic!("the controller was sent an error: {error:?}"),
        _ => None,
    })
    .await;
    controller
        .send(broker_pb::ClientFrame {
            frame: Some(ClientFrameKind::AnswerControl(broker_pb::AnswerControl {
                request_id,
                grant: true,
            })),
        })
        .await;
    assert_eq!(
        frame_where(&mut viewer, role_changed).await,
        broker_pb::Role::Controller as i32
    );
    assert_eq!(
        frame_where(&mut controller, role_changed).await,
        broker_pb::Role::Viewer as i32
    );

    // The former viewer types on the same stream; the former controller may not.
    viewer.send(input("echo granted-$((5*5))\n")).await;
    viewer.read_until("granted-25").await;
    controller.send(input("echo late-$((3*3))\n")).await;
    assert_eq!(
        frame_where(&mut controller, error_code).await,
        Code::PermissionDenied as i32
    );
    assert!(!String::from_utf8_lossy(&viewer.output).contains("early-6"));
    stack.shutdown().await;
}

/// The session's audit events of `kind`, as the admin reads them.
async fn audit_events(stack: &TestStack, session_id: &str, kind: &str) -> Vec<serde_json::Value> {
    let (status, page) = crate::common::get(
        stack,
        &format!("/api/v1/audit?session={session_id}&limit=1000"),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    page["events"]
        .as_array()
        .expect("a list of events")
        .iter()
        .filter(|event| event["kind"] == kind)
        .cloned()
        .collect()
}

#[tokio::test]
async fn a_relayed_attach_granted_control_is_audited_with_the_role_it_has_then() {
    let stack = TestStack::builder().start().await;
    let session_id = create_session(&stack, "local")
        .await
        .session
        .expect("a session")
        .id;
    let token = Some(stack.admin_token.as_str());
    let open = |role| Stream::open(&stack, token, Some("local"), hello(&session_id, role, None));
    let mut controller = open(broker_pb::Role::Controller)
        .await
        .expect("a controller");
    expect_connected(controller.next().await);
    let mut granted = open(broker_pb::Role::Viewer).await.expect("a viewer");
    expect_connected(granted.next().await);

    granted
        .send(broker_pb::ClientFrame {
            frame: Some(ClientFrameKind::RequestControl(
                broker_pb::RequestControl {},
            )),
        })
        .await;
    let request_id = frame_where(&mut controller, |frame| match frame {
        ServerFrameKind::ControlRequested(requested) => Some(requested.request_id),
        _ => None,
    })
    .await;
    controller
        .send(broker_pb::ClientFrame {
            frame: Some(ClientFrameKind::AnswerControl(broker_pb::AnswerControl {
                request_id,
                grant: true,
            })),
        })
        .await;
    assert_eq!(
        frame_where(&mut granted, role_changed).await,
        broker_pb::Role::Controller as i32
    );

    // A reset it sends now is a controller's.
    granted
        .send(broker_pb::ClientFrame {
            frame: Some(ClientFrameKind::Reset(broker_pb::ResetTerminal {})),
        })
        .await;
    frame_where(&mut granted, |frame| {
        matches!(frame, ServerFrameKind::Resetting(_)).then_some(())
    })
    .await;

    // A new controller takes control from it: its detach is a controller's, taken over.
    let mut newcomer = open(broker_pb::Role::Controller)
        .await
        .expect("a new controller");
    expect_connected(newcomer.next().await);
    frame_where(&mut granted, |frame| {
        matches!(frame, ServerFrameKind::Detached(_)).then_some(())
    })
    .await;
    drop(granted);

    let deadline = tokio::time::Instant::now() + PATIENCE;
    let taken_over = loop {
        let taken_over: Vec<_> = audit_events(&stack, &session_id, "detached")
            .await
            .into_iter()
            .filter(|event| event["detail"]["reason"] == "taken_over")
            .collect();
        if !taken_over.is_empty() || tokio::time::Instant::now() > deadline {
            break taken_over;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(taken_over.len(), 1, "{taken_over:#?}");
    assert_eq!(taken_over[0]["role"], "controller", "{:#}", taken_over[0]);
    let attaches = audit_events(&stack, &session_id, "attached").await;
    let own_attach = attaches
        .iter()
        .find(|event| event["attachment_id"] == taken_over[0]["attachment_id"])
        .unwrap_or_else(|| panic!("the stream's attach: {attaches:#?}"));
    assert_eq!(own_attach["role"], "viewer", "it attached to watch");
    // session-api pairs the new controller's attach with it, as a takeover from it.
    let takeover = ptyhub_test_support::poll_until(PATIENCE, Duration::from_millis(50), || async {
        audit_events(&stack, &session_id, "takeover")
            .await
            .into_iter()
            .find(|event| event["detail"]["from_attachment"] == taken_over[0]["attachment_id"])
    })
    .await;
    assert!(takeover.is_some(), "no takeover from the granted stream");
    let resets = audit_events(&stack, &session_id, "session_reset").await;
    assert_eq!(resets.len(), 1, "{resets:#?}");
    assert_eq!(resets[0]["role"], "controller", "{:#}", resets[0]);
    drop((controller, newcomer));
    stack.shutdown().await;
}
