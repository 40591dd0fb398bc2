//! Flow control and the ring, checked byte for byte on a deterministic numbered stream: a viewer
//! that falls behind gets `{"type":"gap","lost":N}` and then exactly the bytes that follow the
//! loss (nothing twice, nothing reordered, lost + received = produced), while the controller
//! gets every byte; a resume from before the ring is told it lost every byte up to the end of
//! the output, where the snapshot that stands in for them is taken.

use std::io::Write as _;

use ptyhub_test_support::stack::TestStack;
use serde_json::json;
use tokio::time::Instant;

use super::support::{Frame, PATIENCE, Terminal};

/// The broker's ring in these tests: small enough that a stalled viewer falls out of it, large
/// enough that the flow-controlled controller is not slowed to a crawl.
const RING_BYTES: u64 = 64 * 1024;

/// The session's program: with echo and newline translation off, it writes `ready`, waits for
/// a line, writes `lines` numbered lines of 8 bytes, then `END`, and waits.
fn numbered_stream_command(lines: u32) -> Vec<String> {
    vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        format!(
            "stty -echo -onlcr; echo ready; read go; seq -w 1 {lines} | cat; echo END; read done"
        ),
    ]
}

/// Exactly what the program writes: `ready`, the numbers zero-padded to the width of the last,
/// `END`.
fn numbered_stream(lines: u32) -> Vec<u8> {
    let width = lines.to_string().len();
    let mut stream = b"ready\n".to_vec();
    for number in 1..=lines {
        writeln!(stream, "{number:0width$}").expect("write to a vector");
    }
    stream.extend_from_slice(b"END\n");
    stream
}

/// A client's view of the stream, checked as it arrives: every output byte must be the
/// produced byte at the client's position, and a gap moves the position by what it lost.
#[derive(Debug)]
struct ExactStream<'a> {
    produced: &'a [u8],
    position: usize,
    received: usize,
    lost: usize,
    gaps: usize,
}

impl<'a> ExactStream<'a> {
    fn starting_at(produced: &'a [u8], offset: u64) -> Self {
        Self {
            produced,
            position: usize::try_from(offset).expect("an offset that fits"),
            received: 0,
            lost: 0,
            gaps: 0,
        }
    }

    fn output(&mut self, data: &[u8]) {
        let end = self.position + data.len();
        assert!(
            end <= self.produced.len(),
            "{end} bytes received by position, but only {} were produced",
            self.produced.len()
        );
        if data != &self.produced[self.position..end] {
            let differs = data
                .iter()
                .zip(&self.produced[self.position..end])
                .position(|(got, want)| got != want)
                .unwrap_or(0);
            let at = self.position + differs;
            panic!(
                "byte {at} is not the produced byte (duplicated or reordered output): got {:?}, \
                 produced {:?}",
                String::from_utf8_lossy(&data[differs..(differs + 32).min(data.len())]),
                String::from_utf8_lossy(&self.produced[at..(at + 32).min(self.produced.len())]),
            );
        }
        self.position = end;
        self.received += data.len();
    }

    fn gap(&mut self, lost: u64) {
        assert!(lost > 0, "a gap that lost nothing");
        let lost = usize::try_from(lost).expect("a loss that fits");
        self.position += lost;
        self.lost += lost;
        self.gaps += 1;
        assert!(
            self.position <= self.produced.len(),
            "a gap past the end of what was produced"
        );
    }

    fn is_complete(&self) -> bool {
        self.position == self.produced.len()
    }

    /// Reads `terminal` until the whole stream is accounted for. Text frames other than `gap`
    /// and heartbeats fail the test.
    async fn read_all(&mut self, terminal: &mut Terminal) {
        let deadline = Instant::now() + PATIENCE;
        while !self.is_complete() {
            match terminal.next_frame(deadline).await {
                Frame::Output(data) => self.output(&data),
                Frame::Text(text) if text["type"] == "gap" => {
                    self.gap(text["lost"].as_u64().expect("gap.lost is a number"));
                }
                Frame::Text(text) if text["type"] == "ping" => {}
                Frame::Text(text) => panic!("unexpected frame in the stream: {text}"),
                Frame::Closed(closed) => panic!("closed ({closed:?}) at byte {}", self.position),
            }
        }
    }
}

/// Registers an instance running the numbered stream and opens its session as the controller;
/// returns the controller, the session's socket path and what the program will write. The
/// program waits for `go` before writing the numbers.
async fn numbered_session(stack: &TestStack, lines: u32) -> (Terminal, String, Vec<u8>) {
    let instance = stack
        .register_instance_with("numbers", 5, &[], numbered_stream_command(lines))
        .await;
    let path = format!("/ws/tool-instances/{instance}/terminal?client_id=numbers");
    let mut controller = Terminal::open(stack, &path).await;
    controller.connected().await;
    // Echo is off once `ready` is out, so the `go` typed next is not part of the stream.
    controller.read_until_output("ready\n").await;
    (controller, path, numbered_stream(lines))
}

fn connected_offset(terminal: &Terminal) -> u64 {
    terminal.texts[0]["offset"]
        .as_u64()
        .expect("connected.offset")
}

#[tokio::test]
async fn a_viewer_that_falls_behind_gets_a_gap_then_exactly_the_bytes_after_it() {
    let stack = TestStack::builder().ring_bytes(RING_BYTES).start().await;
    // 16 MB: well beyond the ring plus what the sockets and HTTP/2 windows between the broker
    // and a stalled viewer can hold (a few MB), so the viewer must fall out of the ring.
    let (mut controller, path, produced) = numbered_session(&stack, 2_000_000).await;
    let mut viewer =
        Terminal::open_with_small_receive_buffer(&stack, &format!("{path}&mode=view")).await;
    viewer.connected().await;
    assert_eq!(viewer.texts[0]["role"], "viewer");

    // The viewer reads nothing while the whole stream is produced; the controller, which the
    // PTY waits for, gets every byte.
    let mut controller_view = ExactStream::starting_at(&produced, connected_offset(&controller));
    controller_view.output(&controller.output);
    controller.send_input("go\n").await;
    controller_view.read_all(&mut controller).await;
    assert_eq!(controller_view.gaps, 0, "the controller lost output");

    let mut viewer_view = ExactStream::starting_at(&produced, connected_offset(&viewer));
    viewer_view.output(&viewer.output);
    viewer_view.read_all(&mut viewer).await;
    assert!(
        viewer_view.gaps >= 1,
        "the stalled viewer never fell behind"
    );
    assert_eq!(
        viewer_view.lost + viewer_view.received,
        produced.len() - usize::try_from(connected_offset(&viewer)).expect("an offset"),
        "lost + received is not what was produced"
    );
    // The viewer goes on as a live client after its gap.
    controller.send_input("\n").await;
    let closed = viewer.read_until_closed().await;
    assert_eq!(closed.code, 1000, "{closed:?}");
    assert_eq!(
        viewer.texts.last(),
        Some(&json!({"type": "exit", "code": 0, "signal": null}))
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn a_resume_from_before_the_ring_gets_a_gap_for_every_byte_then_a_snapshot() {
    let stack = TestStack::builder().ring_bytes(RING_BYTES).start().await;
    let (mut controller, path, produced) = numbered_session(&stack, 100_000).await;
    let mut controller_view = ExactStream::starting_at(&produced, connected_offset(&controller));
    controller_view.output(&controller.output);
    controller.send_input("go\n").await;
    controller_view.read_all(&mut controller).await;

    let mut resumed = Terminal::open(&stack, &format!("{path}&mode=view&since=0")).await;
    resumed.connected().await;
    let mut resumed_view = ExactStream::starting_at(&produced, 0);
    resumed_view.read_all(&mut resumed).await;
    // No raw byte is replayed: the one gap accounts for all of them, up to where the output
    // ends and `connected.offset` says the stream goes on.
    assert_eq!(resumed_view.gaps, 1, "{:?}", resumed.texts);
    assert_eq!(resumed_view.received, 0, "raw bytes replayed");
    assert_eq!(resumed_view.lost, produced.len());
    assert_eq!(
        connected_offset(&resumed),
        u64::try_from(produced.len()).expect("a length that fits")
    );
    let deadline = Instant::now() + PATIENCE;
    match resumed.next_frame(deadline).await {
        Frame::Text(snapshot) if snapshot["type"] == "snapshot" => {
            assert_eq!(
                snapshot["offset"].as_u64(),
                Some(connected_offset(&resumed))
            );
        }
        other => panic!("expected the snapshot frame after the gap, got {other:?}"),
    }
    match resumed.next_frame(deadline).await {
        Frame::Output(redraw) => {
            assert!(
                String::from_utf8_lossy(&redraw).contains("END"),
                "{redraw:?}"
            );
        }
        other => panic!("expected the snapshot's bytes, got {other:?}"),
    }
    stack.shutdown().await;
}
