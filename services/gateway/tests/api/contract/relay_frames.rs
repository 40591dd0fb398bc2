//! The gateway's relayed `Attach` passes the broker's frames an outside gRPC client needs besides
//! output: a `Gap` saying how many bytes a resume from before the ring lost, a `Snapshot` of the
//! screen when asked (and in place of those bytes), a `Resize` when another client resizes, and
//! `Closed` when the session is closed under it.

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::broker::v1::pty_broker_client::PtyBrokerClient;
use ptyhub_test_support::stack::TestStack;
use reqwest::Method;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use super::support::{PATIENCE, Terminal, create_session, rest, screen_matching, sessions_path};

use broker_pb::client_frame::Frame as ClientFrameKind;
use broker_pb::server_frame::Frame as ServerFrameKind;

/// A broker ring this small is outgrown by a few lines of output.
const SMALL_RING: u64 = 1024;

/// One relayed `Attach` through the gateway's port, as an outside client opens it.
struct Relayed {
    _frames: mpsc::Sender<broker_pb::ClientFrame>,
    server: tonic::Streaming<broker_pb::ServerFrame>,
}

impl Relayed {
    async fn open(stack: &TestStack, session_id: &str, hello: broker_pb::Hello) -> Relayed {
        let (frames, receiver) = mpsc::channel(16);
        let first = broker_pb::ClientFrame {
            frame: Some(ClientFrameKind::Hello(broker_pb::Hello {
                session_id: session_id.to_owned(),
                ..hello
            })),
        };
        frames.send(first).await.expect("an open queue");
        let channel = Channel::from_shared(stack.gateway_url.clone())
            .expect("the gateway's url")
            .connect()
            .await
            .expect("an http/2 connection to the gateway");
        let mut request = tonic::Request::new(ReceiverStream::new(receiver));
        let metadata = request.metadata_mut();
        metadata.insert(
            "authorization",
            format!("Bearer {}", stack.admin_token)
                .parse()
                .expect("an ascii token"),
        );
        metadata.insert(
            "ptyhub-instance",
            stack.instance_id.parse().expect("an ascii id"),
        );
        let server = PtyBrokerClient::new(channel)
            .attach(request)
            .await
            .expect("the relay accepts the attach")
            .into_inner();
        Relayed {
            _frames: frames,
            server,
        }
    }

    /// The next frame; fails the test on an error, an end, or nothing by `deadline`.
    async fn next(&mut self, deadline: Instant) -> ServerFrameKind {
        let frame = tokio::time::timeout_at(deadline, self.server.message())
            .await
            .expect("a relayed frame in time")
            .expect("the relayed stream does not fail")
            .expect("the relayed stream does not end");
        frame.frame.expect("a frame with content")
    }

    /// Reads frames until `wanted` picks one, and returns what it picked and every frame before.
    async fn until<T>(
        &mut self,
        what: &str,
        wanted: impl Fn(&ServerFrameKind) -> Option<T>,
    ) -> (T, Vec<ServerFrameKind>) {
        let deadline = Instant::now() + PATIENCE;
        let mut before = Vec::new();
        loop {
            let frame = self.next(deadline).await;
            if let Some(found) = wanted(&frame) {
                return (found, before);
            }
            assert!(
                !matches!(frame, ServerFrameKind::Closed(_) | ServerFrameKind::Exit(_)),
                "the stream ended before {what}: {frame:?}"
            );
            before.push(frame);
        }
    }
}

fn viewer_hello() -> broker_pb::Hello {
    broker_pb::Hello {
        role: broker_pb::Role::Viewer as i32,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_resume_from_before_the_ring_is_relayed_as_a_gap_then_a_snapshot() {
    let stack = TestStack::builder().ring_bytes(SMALL_RING).start().await;
    let instance = stack.instance_id.clone();
    let id = create_session(&stack, &instance, json!({"cols": 80, "rows": 24})).await;
    let flood = "i=0; while [ $i -lt 200 ]; do echo line-$i-of-the-flood; i=$((i+1)); done; \
                 echo flood-$((100+99))\n";
    super::support::type_input(&stack, &instance, &id, json!({"text": flood}))
        .await
        .expect(200, "flood the ring");
    screen_matching(&stack, &instance, &id, "flood-199").await;

    let mut relayed = Relayed::open(
        &stack,
        &id,
        broker_pb::Hello {
            since: Some(0),
            ..viewer_hello()
        },
    )
    .await;
    let (connected, _) = relayed
        .until("connected", |frame| match frame {
            ServerFrameKind::Connected(connected) => Some(connected.clone()),
            _ => None,
        })
        .await;
    let (gap, _) = relayed
        .until("the gap", |frame| match frame {
            ServerFrameKind::Gap(gap) => Some(*gap),
            _ => None,
        })
        .await;
    let (snapshot, _) = relayed
        .until("the snapshot", |frame| match frame {
            ServerFrameKind::Snapshot(snapshot) => Some(snapshot.clone()),
            _ => None,
        })
        .await;
    // The gap counts every byte from `since` to where the snapshot stands in.
    assert_eq!(gap.lost, snapshot.offset, "{gap:?} {snapshot:?}");
    assert!(
        snapshot.offset > SMALL_RING,
        "the flood outgrew the ring: {snapshot:?}"
    );
    assert_eq!(connected.session_id, id);
    let shown = String::from_utf8_lossy(&snapshot.data);
    assert!(shown.contains("flood-199"), "{shown}");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_snapshot_asked_for_is_relayed_with_its_offset_and_size() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let id = create_session(&stack, &instance, json!({"cols": 90, "rows": 30})).await;
    super::support::type_input(
        &stack,
        &instance,
        &id,
        json!({"text": "echo drawn-$((5*5))\n"}),
    )
    .await
    .expect(200, "draw something");
    let shown = screen_matching(&stack, &instance, &id, "drawn-25").await;

    let mut relayed = Relayed::open(
        &stack,
        &id,
        broker_pb::Hello {
            snapshot: true,
            ..viewer_hello()
        },
    )
    .await;
    let (snapshot, before) = relayed
        .until("the snapshot", |frame| match frame {
            ServerFrameKind::Snapshot(snapshot) => Some(snapshot.clone()),
            _ => None,
        })
        .await;
    assert!(
        matches!(before.as_slice(), [ServerFrameKind::Connected(_)]),
        "only connected comes before the snapshot: {before:?}"
    );
    let size = snapshot.size.expect("the snapshot's size");
    assert_eq!((size.cols, size.rows), (90, 30));
    assert!(
        snapshot.offset >= shown["screen"]["offset"].as_u64().expect("an offset"),
        "{snapshot:?}"
    );
    assert!(
        String::from_utf8_lossy(&snapshot.data).contains("drawn-25"),
        "{snapshot:?}"
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn a_resize_by_another_client_and_the_sessions_close_are_relayed() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let id = create_session(&stack, &instance, json!({"cols": 80, "rows": 24})).await;
    let mut relayed = Relayed::open(&stack, &id, viewer_hello()).await;
    relayed
        .until("connected", |frame| {
            matches!(frame, ServerFrameKind::Connected(_)).then_some(())
        })
        .await;

    let mut controller = Terminal::open(
        &stack,
        &format!("/ws/tool-instances/{instance}/terminal/{id}"),
    )
    .await;
    controller.connected().await;
    controller
        .send_json(json!({"type": "resize", "cols": 132, "rows": 43}))
        .await;
    let (size, _) = relayed
        .until("the resize", |frame| match frame {
            ServerFrameKind::Resize(size) if size.cols == 132 => Some(*size),
            _ => None,
        })
        .await;
    assert_eq!(size.rows, 43);

    rest(
        &stack,
        Method::DELETE,
        &format!("{}/{id}", sessions_path(&instance)),
        None,
    )
    .await
    .expect(200, "close the session");
    let deadline = Instant::now() + PATIENCE;
    let closed = loop {
        match relayed.next(deadline).await {
            ServerFrameKind::Closed(closed) => break closed,
            ServerFrameKind::Output(_) | ServerFrameKind::Exit(_) => {}
            other => panic!("neither output, exit nor closed: {other:?}"),
        }
    };
    assert_eq!(closed.session_id, id);
    assert_ne!(
        closed.reason,
        broker_pb::CloseReason::Unspecified as i32,
        "{closed:?}"
    );
    stack.shutdown().await;
}
