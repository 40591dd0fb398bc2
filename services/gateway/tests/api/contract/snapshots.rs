//! Snapshots on the terminal WebSocket (docs/CONTRACT.md, "WebSocket"): with `snapshot=1`, and
//! on a resume from before the ring, `connected` is followed by a `snapshot` frame and exactly
//! one binary frame that redraws the screen, then the output from the snapshot's offset on,
//! nothing lost and nothing doubled.

use ptyhub_test_support::stack::TestStack;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::support::{
    Frame, PATIENCE, Terminal, create_session, screen, type_input, wait_for_screen,
};

/// What a snapshot starts with: `ESC c`, a full reset of the terminal it is written to.
const FULL_RESET: &[u8] = b"\x1bc";

/// Reads the frames that follow `connected` up to the snapshot's bytes: an optional `gap`, the
/// `snapshot` frame, and the one binary frame. Returns the gap (if any), the snapshot frame and
/// its bytes.
async fn snapshot_after_connected(terminal: &mut Terminal) -> (Option<Value>, Value, Vec<u8>) {
    let deadline = Instant::now() + PATIENCE;
    let mut gap = None;
    let announced = loop {
        match terminal.next_frame(deadline).await {
            Frame::Text(frame) if frame["type"] == "gap" && gap.is_none() => gap = Some(frame),
            Frame::Text(frame) if frame["type"] == "snapshot" => break frame,
            other => panic!("expected a snapshot frame (after at most a gap), got {other:?}"),
        }
    };
    match terminal.next_frame(deadline).await {
        Frame::Output(data) => (gap, announced, data),
        other => panic!("the snapshot frame is not followed by its bytes: {other:?}"),
    }
}

fn offset_of(frame: &Value) -> u64 {
    frame["offset"].as_u64().expect("an offset")
}

#[tokio::test]
async fn a_snapshot_open_gets_connected_then_the_snapshot_then_the_output_from_its_offset() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let session_id = create_session(&stack, &instance, json!({"name": "drawn"})).await;
    let typed = type_input(
        &stack,
        &instance,
        &session_id,
        json!({"text": "echo before-$((6*7))", "keys": ["Enter"]}),
    )
    .await
    .expect(200, "type a command before anyone attaches");
    wait_for_screen(
        &stack,
        &instance,
        &session_id,
        json!({"pattern": "before-42\n", "after_offset": typed["offset"]}),
    )
    .await
    .expect(200, "the command's output");

    let path = format!("/ws/tool-instances/{instance}/terminal/{session_id}");
    let mut terminal = Terminal::open(&stack, &format!("{path}?snapshot=1")).await;
    let connected = terminal.connected().await;
    let (gap, announced, snapshot) = snapshot_after_connected(&mut terminal).await;
    assert_eq!(gap, None, "a gap without since: {:?}", terminal.texts);
    let start = offset_of(&announced);
    assert_eq!(offset_of(&connected), start, "{connected} then {announced}");
    assert_eq!(
        announced,
        json!({"type": "snapshot", "offset": start, "cols": 80, "rows": 24})
    );
    assert!(snapshot.starts_with(FULL_RESET), "{snapshot:?}");
    let drawn = String::from_utf8_lossy(&snapshot);
    assert!(drawn.contains("before-42"), "{drawn:?}");

    // Output after the snapshot: exactly the bytes from its offset on.
    let output_start = terminal.output.len();
    terminal.send_input("echo after-$((6*7))\n").await;
    let quiet = wait_for_screen(
        &stack,
        &instance,
        &session_id,
        json!({"pattern": "after-42\n", "quiet_ms": 300}),
    )
    .await
    .expect(200, "the new command's output, then quiet");
    let end = offset_of(&quiet["screen"]);
    let expected = usize::try_from(end - start).expect("a small output");
    let deadline = Instant::now() + PATIENCE;
    while terminal.output.len() - output_start < expected {
        if let Frame::Closed(closed) = terminal.next_frame(deadline).await {
            panic!("closed ({closed:?}) before the output reached offset {end}");
        }
    }
    let after = &terminal.output[output_start..];
    assert_eq!(after.len(), expected, "more output than the offsets allow");
    let after = String::from_utf8_lossy(after);
    assert!(after.contains("after-42"), "{after:?}");
    assert!(!after.contains("before-42"), "replayed: {after:?}");
    assert!(!after.as_bytes().starts_with(FULL_RESET), "{after:?}");
    let snapshots = terminal
        .texts
        .iter()
        .filter(|text| text["type"] == "snapshot")
        .count();
    assert_eq!(snapshots, 1, "{:?}", terminal.texts);
    stack.shutdown().await;
}

#[tokio::test]
async fn a_resume_from_before_the_ring_gets_a_gap_then_a_snapshot_in_place_of_the_lost_bytes() {
    let stack = TestStack::builder().ring_bytes(1024).start().await;
    let instance = stack.instance_id.clone();
    let session_id = create_session(&stack, &instance, json!({"name": "overflowing"})).await;
    // About 8 KB of output: far more than the ring holds.
    let typed = type_input(
        &stack,
        &instance,
        &session_id,
        json!({
            "text": "i=0; while [ $i -lt 200 ]; do echo line-$i-of-the-overflow; i=$((i+1)); done; echo done-$((6*7))",
            "keys": ["Enter"],
        }),
    )
    .await
    .expect(200, "print more than the ring holds");
    let printed = wait_for_screen(
        &stack,
        &instance,
        &session_id,
        json!({"pattern": "done-42\n", "after_offset": typed["offset"]}),
    )
    .await
    .expect(200, "the output's end");
    assert!(offset_of(&printed["screen"]) > 4096, "{printed}");

    let path = format!("/ws/tool-instances/{instance}/terminal/{session_id}");
    let mut viewer = Terminal::open(&stack, &format!("{path}?mode=view&since=0")).await;
    let connected = viewer.connected().await;
    let (gap, announced, snapshot) = snapshot_after_connected(&mut viewer).await;
    let start = offset_of(&announced);
    assert_eq!(offset_of(&connected), start, "{connected} then {announced}");
    // The gap counts the raw bytes the snapshot stands in for: everything before its offset.
    assert_eq!(
        gap,
        Some(json!({"type": "gap", "lost": start})),
        "{:?}",
        viewer.texts
    );
    assert!(snapshot.starts_with(FULL_RESET), "{snapshot:?}");
    assert!(
        String::from_utf8_lossy(&snapshot).contains("done-42"),
        "{snapshot:?}"
    );
    let now = screen(&stack, &instance, &session_id, "")
        .await
        .expect(200, "the screen");
    assert!(offset_of(&now) >= start, "{now}");
    stack.shutdown().await;
}
