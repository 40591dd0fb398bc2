//! "Input is never lost or blind": a line sent on a WebSocket that closes (or hangs up) at once
//! is typed, a hundred times over, with the broker in process and over TCP; the same through the
//! relayed gRPC `Attach` when the call ends right after the input; receipts (`input_ack`) come
//! in order with offsets that never decrease and the answer at or after them; bad ids are
//! refused with nothing typed; a viewer's input is refused by its id; REST `input`'s offset is
//! the receipt's.

use std::path::Path;

use bytes::Bytes;
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::broker::v1::pty_broker_client::PtyBrokerClient;
use ptyhub_test_support::stack::TestStack;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use super::support::{Frame, PATIENCE, Terminal, create_session, rest, type_input};
use broker_pb::client_frame::Frame as ClientFrameKind;
use broker_pb::server_frame::Frame as ServerFrameKind;

/// How many times a client sends a line and leaves at once.
const ROUNDS: usize = 100;

/// The broker in the gateway's process, or behind its TCP port.
#[derive(Debug, Clone, Copy)]
enum BrokerRoad {
    InProcess,
    Tcp,
}

async fn stack_on(road: BrokerRoad) -> TestStack {
    let builder = TestStack::builder();
    match road {
        BrokerRoad::InProcess => builder.start().await,
        BrokerRoad::Tcp => builder.broker_over_tcp().start().await,
    }
}

fn terminal_path(stack: &TestStack, session_id: &str) -> String {
    format!(
        "/ws/tool-instances/{}/terminal/{session_id}",
        stack.instance_id
    )
}

/// The command line that appends `line-<round>` to `file`.
fn append_line(file: &Path, round: usize) -> String {
    format!("echo line-{round} >> {}\n", file.display())
}

/// Waits until `file` holds exactly the lines of rounds `0..=round`, in order.
async fn wait_for_lines(file: &Path, round: usize) {
    let expected: Vec<String> = (0..=round).map(|round| format!("line-{round}")).collect();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let text = tokio::fs::read_to_string(file).await.unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "line-{round} was not typed after every round before it, each once: {lines:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_input_before_a_close_is_typed_with_the_broker_in_process() {
    websocket_input_before_a_close_is_typed(BrokerRoad::InProcess).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_input_before_a_close_is_typed_with_the_broker_over_tcp() {
    websocket_input_before_a_close_is_typed(BrokerRoad::Tcp).await;
}

/// Each round opens a socket, sends one line (as text or binary) without waiting for anything,
/// and leaves at once, with a close frame or by hanging up; every line is typed, once, in order.
async fn websocket_input_before_a_close_is_typed(road: BrokerRoad) {
    let stack = stack_on(road).await;
    let session_id = create_session(&stack, &stack.instance_id, json!({})).await;
    let directory = tempfile::tempdir().expect("a temporary directory");
    let file = directory.path().join("lines");
    for round in 0..ROUNDS {
        let mut terminal = Terminal::open(&stack, &terminal_path(&stack, &session_id)).await;
        let line = append_line(&file, round);
        if round % 2 == 0 {
            terminal
                .send_json(json!({"type": "input", "data": line}))
                .await;
        } else {
            terminal.send_input(&line).await;
        }
        if round % 4 < 2 {
            terminal.close_at_once().await;
        } else {
            terminal.hang_up_at_once().await;
        }
        // The next round's socket would take control from this one: it waits until this
        // round's line is in (and fails the test if it never comes).
        wait_for_lines(&file, round).await;
    }
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_input_before_the_call_ends_is_typed_with_the_broker_in_process() {
    grpc_input_before_the_call_ends_is_typed(BrokerRoad::InProcess).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_input_before_the_call_ends_is_typed_with_the_broker_over_tcp() {
    grpc_input_before_the_call_ends_is_typed(BrokerRoad::Tcp).await;
}

/// Each round resets the session (its new shell holds input until its first prompt), opens a
/// relayed `Attach`, sends a line and a second hello, and ends the call as soon as the gateway
/// refuses that hello: the gateway had the line by then, and the broker had not written it yet.
/// Every line is typed, once, in order.
async fn grpc_input_before_the_call_ends_is_typed(road: BrokerRoad) {
    let stack = stack_on(road).await;
    let session_id = create_session(&stack, &stack.instance_id, json!({})).await;
    let directory = tempfile::tempdir().expect("a temporary directory");
    let file = directory.path().join("lines");
    let channel = gateway_channel(&stack).await;
    let reset = format!(
        "/api/v1/instances/{}/terminal/sessions/{session_id}/reset",
        stack.instance_id
    );
    for round in 0..ROUNDS {
        rest(&stack, reqwest::Method::POST, &reset, None)
            .await
            .expect(200, "reset the session");
        let mut call = RelayedAttach::open(&stack, &channel, &session_id).await;
        call.send(input(append_line(&file, round), None)).await;
        call.send(hello(&session_id)).await;
        call.until(|frame| matches!(frame, ServerFrameKind::Error(_)))
            .await;
        if round % 2 == 0 {
            // The client's side ends, then the call.
            drop(call.frames);
        }
        drop(call.server);
        wait_for_lines(&file, round).await;
    }
    stack.shutdown().await;
}

/// Receipts pass the relay as the broker sends them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relayed_attach_passes_receipts() {
    let stack = TestStack::builder().start().await;
    let session_id = create_session(&stack, &stack.instance_id, json!({})).await;
    let channel = gateway_channel(&stack).await;
    let mut call = RelayedAttach::open(&stack, &channel, &session_id).await;
    call.send(input("echo relayed-$((4*4))\n", Some("relayed")))
        .await;
    let ServerFrameKind::InputAck(ack) = call
        .until(|frame| matches!(frame, ServerFrameKind::InputAck(_)))
        .await
    else {
        unreachable!()
    };
    assert_eq!(ack.input_id, "relayed");
    assert_eq!(ack.bytes, "echo relayed-$((4*4))\n".len() as u64);
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_receipts_come_in_order_with_the_answer_at_or_after_their_offset() {
    const LINES: usize = 20;
    let stack = TestStack::builder().start().await;
    let session_id = create_session(&stack, &stack.instance_id, json!({})).await;
    let mut terminal = Terminal::open(
        &stack,
        &format!("{}?since=0", terminal_path(&stack, &session_id)),
    )
    .await;
    let start = terminal.connected().await["offset"]
        .as_u64()
        .expect("an offset");
    for number in 0..LINES {
        let data = format!("echo answer-$((1000+{number}))\n");
        terminal
            .send_json(json!({"type": "input", "data": data, "id": format!("r{number}")}))
            .await;
    }
    // Input without bytes and with an id: answered once the lines before it were written.
    terminal
        .send_json(json!({"type": "input", "data": "", "id": "flush"}))
        .await;
    // Binary input asks for no receipt.
    terminal.send_input("echo binary-$((2+2))\n").await;
    let last = format!("answer-{}", 1000 + LINES - 1);
    let acks = read_acks_until(&mut terminal, LINES + 1, &[&last, "binary-4"]).await;
    let mut previous = 0;
    for (number, ack) in acks.iter().take(LINES).enumerate() {
        let data = format!("echo answer-$((1000+{number}))\n");
        assert_eq!(ack["id"], format!("r{number}"), "in order: {acks:?}");
        assert_eq!(ack["bytes"], data.len() as u64);
        let offset = ack["offset"].as_u64().expect("an offset");
        assert!(offset >= previous, "offsets went back: {acks:?}");
        previous = offset;
        let answer = format!("answer-{}", 1000 + number);
        let answered_at = start + position(&terminal.output, &answer).expect("answered") as u64;
        assert!(
            answered_at >= offset,
            "{answer} at {answered_at}, before its receipt's offset {offset}"
        );
    }
    let flush = &acks[LINES];
    assert_eq!(flush["id"], "flush");
    assert_eq!(flush["bytes"], 0);
    assert!(flush["offset"].as_u64().unwrap() >= previous);
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_input_id_gets_an_error_frame_naming_it_and_nothing_is_typed() {
    let stack = TestStack::builder().start().await;
    let session_id = create_session(&stack, &stack.instance_id, json!({})).await;
    let mut terminal = Terminal::open(
        &stack,
        &format!("{}?since=0", terminal_path(&stack, &session_id)),
    )
    .await;
    terminal.connected().await;
    let refusals = [
        (
            json!("x".repeat(65)),
            "input id is 65 characters long: at most 64",
        ),
        (
            json!(7),
            "input id must be a string of 1 to 64 characters, not a number",
        ),
        (
            json!(["a"]),
            "input id must be a string of 1 to 64 characters, not an array",
        ),
        (
            json!(""),
            "input id is empty: send 1 to 64 characters, or no id",
        ),
    ];
    for (id, message) in refusals {
        terminal
            .send_json(json!({"type": "input", "data": "echo refused\n", "id": id}))
            .await;
        let error = terminal
            .read_until_text("the error frame", |value| value["type"] == "error")
            .await;
        assert_eq!(
            error,
            json!({"type": "error", "message": message}),
            "for id {id}"
        );
    }
    // The socket stays open, and the next good input is typed and answered.
    terminal
        .send_json(json!({"type": "input", "data": "echo typed-$((3+3))\n", "id": "ok"}))
        .await;
    let acks = read_acks_until(&mut terminal, 1, &["typed-6"]).await;
    assert_eq!(acks[0]["id"], "ok");
    assert!(
        position(&terminal.output, "refused").is_none(),
        "a refused frame was typed: {}",
        terminal.output_tail()
    );
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewers_input_is_refused_by_its_id() {
    let stack = TestStack::builder().start().await;
    let session_id = create_session(&stack, &stack.instance_id, json!({})).await;
    let mut viewer = Terminal::open(
        &stack,
        &format!("{}?mode=view", terminal_path(&stack, &session_id)),
    )
    .await;
    viewer.connected().await;
    viewer
        .send_json(json!({"type": "input", "data": "echo viewer\n", "id": "v1"}))
        .await;
    let error = viewer
        .read_until_text("the error frame", |value| value["type"] == "error")
        .await;
    assert_eq!(
        error,
        json!({"type": "error", "message": "viewers cannot send input", "id": "v1"})
    );
    stack.shutdown().await;
}

/// REST `input` answers with the receipt's offset: the answer comes at or after it, in the
/// session's output as a client from offset 0 reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_inputs_offset_is_the_receipts() {
    let stack = TestStack::builder().start().await;
    let session_id = create_session(&stack, &stack.instance_id, json!({})).await;
    let sent = type_input(
        &stack,
        &stack.instance_id,
        &session_id,
        json!({"text": "echo rest-$((5*5))\n"}),
    )
    .await
    .expect(200, "rest input");
    let offset = sent["offset"].as_u64().expect("an offset");
    assert_eq!(sent["bytes_written"], "echo rest-$((5*5))\n".len());
    let mut viewer = Terminal::open(
        &stack,
        &format!("{}?mode=view&since=0", terminal_path(&stack, &session_id)),
    )
    .await;
    let start = viewer.connected().await["offset"].as_u64().expect("offset");
    viewer.read_until_output("rest-25").await;
    let answered_at = start + position(&viewer.output, "rest-25").expect("answered") as u64;
    assert!(answered_at >= offset, "{answered_at} before {offset}");
    stack.shutdown().await;
}

/// Reads until `count` `input_ack` frames came and the output holds every one of `needles`;
/// returns the acks in order. Fails on an error frame.
async fn read_acks_until(terminal: &mut Terminal, count: usize, needles: &[&str]) -> Vec<Value> {
    let deadline = Instant::now() + PATIENCE;
    let mut acks = Vec::new();
    while acks.len() < count
        || needles
            .iter()
            .any(|needle| position(&terminal.output, needle).is_none())
    {
        match terminal.next_frame(deadline).await {
            Frame::Text(value) if value["type"] == "input_ack" => acks.push(value),
            Frame::Text(value) if value["type"] == "error" => panic!("refused: {value}"),
            Frame::Closed(closed) => panic!("closed: {closed:?}"),
            _ => {}
        }
    }
    acks
}

fn position(haystack: &[u8], needle: &str) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle.as_bytes())
}

// ---- the relayed gRPC `Attach` ----------------------------------------------------------------

async fn gateway_channel(stack: &TestStack) -> Channel {
    Channel::from_shared(stack.gateway_url.clone())
        .expect("gateway url")
        .connect()
        .await
        .expect("an http/2 connection to the gateway")
}

fn hello(session_id: &str) -> broker_pb::ClientFrame {
    broker_pb::ClientFrame {
        frame: Some(ClientFrameKind::Hello(broker_pb::Hello {
            session_id: session_id.to_owned(),
            role: broker_pb::Role::Controller as i32,
            ..Default::default()
        })),
    }
}

fn input(data: impl Into<Bytes>, input_id: Option<&str>) -> broker_pb::ClientFrame {
    broker_pb::ClientFrame {
        frame: Some(ClientFrameKind::Input(broker_pb::Input {
            data: data.into(),
            input_id: input_id.map(str::to_owned),
        })),
    }
}

/// One controller `Attach` through the gateway.
struct RelayedAttach {
    frames: mpsc::Sender<broker_pb::ClientFrame>,
    server: tonic::Streaming<broker_pb::ServerFrame>,
}

impl RelayedAttach {
    async fn open(stack: &TestStack, channel: &Channel, session_id: &str) -> RelayedAttach {
        let (frames, receiver) = mpsc::channel(16);
        frames.send(hello(session_id)).await.expect("an open queue");
        let mut request = tonic::Request::new(ReceiverStream::new(receiver));
        let metadata = request.metadata_mut();
        let bearer = format!("Bearer {}", stack.admin_token);
        metadata.insert("authorization", bearer.parse().expect("ascii"));
        metadata.insert("ptyhub-instance", stack.instance_id.parse().expect("ascii"));
        let server = PtyBrokerClient::new(channel.clone())
            .attach(request)
            .await
            .expect("the gateway relays the attach")
            .into_inner();
        RelayedAttach { frames, server }
    }

    async fn send(&self, frame: broker_pb::ClientFrame) {
        self.frames.send(frame).await.expect("the stream is open");
    }

    /// Reads server frames until one for which `wanted` holds.
    async fn until(&mut self, wanted: impl Fn(&ServerFrameKind) -> bool) -> ServerFrameKind {
        loop {
            let frame = tokio::time::timeout(PATIENCE, self.server.message())
                .await
                .expect("a server frame in time")
                .expect("the stream goes on")
                .and_then(|frame| frame.frame)
                .expect("the stream goes on");
            if wanted(&frame) {
                return frame;
            }
        }
    }
}
