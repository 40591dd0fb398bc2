//! A flood's WebSocket bridge shares its thread: output that is all there at once is forwarded
//! a slice at a time, with the other tasks of the thread run between two slices.

use futures::FutureExt;
use ptyhub_test_support::stack::TestStack;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use crate::common::{Terminal, create_session};

/// The most output a flood's bridge may forward between two turns of another task of its
/// thread: a few of its 64 KiB frames. A bridge that forwards for as long as output is ready
/// forwards until the client's socket is full, several times this on loopback.
const MOST_BETWEEN_TURNS: usize = 256 * 1024;

/// What the flood writes: more than the bound many times over, less than the ring holds.
const FLOOD_BYTES: usize = 4_000_000;

/// On the test's one thread (tokio's current-thread runtime) run the gateway, the broker in its
/// process and this test's client. A client resuming at the start of a flood the ring still holds
/// finds all of it ready at once; each time the client's task gets the thread it reads all the
/// bridge forwarded since its last turn, which is then at most a few frames.
#[tokio::test]
async fn a_flood_ready_at_once_is_forwarded_a_slice_per_turn_of_the_thread() {
    let stack = TestStack::builder().ring_bytes(16 << 20).start().await;
    let id = create_session(&stack, &stack.instance_id, json!({})).await;
    let path = format!(
        "/ws/tool-instances/{}/terminal/{id}?cols=80&rows=24",
        stack.instance_id
    );
    let mut writer = Terminal::open(&stack, &path).await;
    let start = writer.connected().await["offset"].as_u64().unwrap();
    writer
        .send_input(&format!(
            "yes ptyhub-flood-line | head -c {FLOOD_BYTES}; echo flood-end-$((6*7))\n"
        ))
        .await;
    writer.read_until_output("flood-end-42").await;
    let flood = writer.output.len();
    assert!(flood > FLOOD_BYTES, "{flood} bytes of output");
    drop(writer);

    let mut replay = Terminal::open(&stack, &format!("{path}&since={start}&mode=view")).await;
    replay.connected().await;
    let mut received = 0;
    let mut turns = Vec::new();
    while received < flood {
        // The first frame of this turn, then all that is already here.
        let mut turn = output_len(replay.next_message().await);
        while let Some(message) = replay.next_message().now_or_never() {
            turn += output_len(message);
        }
        received += turn;
        turns.push(turn);
    }
    let largest = turns.iter().copied().max().unwrap_or_default();
    assert!(
        largest <= MOST_BETWEEN_TURNS,
        "{largest} bytes forwarded between two turns of the client's task ({} turns for {received} bytes)",
        turns.len()
    );
    stack.shutdown().await;
}

/// The output bytes of a frame; a frame other than output (a text frame) counts none, the end
/// of the stream fails the test.
fn output_len(message: Option<Message>) -> usize {
    match message {
        Some(Message::Binary(data)) => data.len(),
        Some(Message::Close(frame)) => panic!("the replay closed: {frame:?}"),
        Some(_) => 0,
        None => panic!("the replay ended"),
    }
}
