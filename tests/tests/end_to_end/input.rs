//! Input sent right before a client leaves is typed, through real processes (a broker serving
//! local PTYs and Docker behind its TCP port, session-api, a gateway of its own), on both
//! runtimes: a hundred WebSockets that each send a line and close or hang up at once, and a
//! hundred relayed gRPC `Attach` calls that each end right after a line sent to a freshly reset
//! shell (which holds input until its first prompt).

use std::time::Duration;

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::broker::v1::pty_broker_client::PtyBrokerClient;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_test_support::Requirement;
use tests::cluster::{API_TOKEN, Cluster, PATIENCE};
use tests::container::Container;
use tests::terminal::Terminal;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::{created_session, start};
use broker_pb::client_frame::Frame as ClientFrameKind;
use broker_pb::server_frame::Frame as ServerFrameKind;

/// How many times a client sends a line and leaves at once, per kind of client and runtime.
const ROUNDS: usize = 100;

/// Where a session's lines are appended, and how the test reads them back.
enum Lines<'a> {
    Local(std::path::PathBuf),
    Container {
        container: &'a Container,
        path: String,
    },
}

impl Lines<'_> {
    fn path(&self) -> String {
        match self {
            Lines::Local(path) => path.display().to_string(),
            Lines::Container { path, .. } => path.clone(),
        }
    }

    async fn read(&self) -> Vec<String> {
        let text = match self {
            Lines::Local(path) => tokio::fs::read_to_string(path).await.unwrap_or_default(),
            Lines::Container { container, path } => {
                container.exec(&["cat", path]).await.unwrap_or_default()
            }
        };
        text.lines().map(str::to_owned).collect()
    }

    fn command(&self, round: usize) -> String {
        format!("echo line-{round} >> {}\n", self.path())
    }

    /// Waits until the file holds exactly `line-0` to `line-<round>`, in order; fails the test
    /// with what it holds and the services' logs when it never does.
    async fn wait_for(&self, round: usize, what: &str, cluster: &Cluster) {
        let expected: Vec<String> = (0..=round).map(|round| format!("line-{round}")).collect();
        let deadline = Instant::now() + PATIENCE;
        loop {
            let lines = self.read().await;
            if lines == expected {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: line-{round} was not typed after every round before it, each once: \
                 {lines:?}\n{}",
                cluster.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lines_sent_right_before_a_client_leaves_are_typed_on_both_runtimes() {
    if !ptyhub_test_support::require(Requirement::Docker) {
        return;
    }
    let container = Container::start().await;
    let Some(cluster) = start(
        Cluster::builder()
            .session_apis(1)
            .brokers(1)
            .gateways(1)
            .broker_flag("backends", "local,docker"),
    )
    .await
    else {
        return;
    };
    let directory = tempfile::tempdir().expect("a temporary directory");
    for docker in [false, true] {
        let runtime = if docker { "docker" } else { "local" };
        let (target, user) = if docker {
            let target = broker_pb::target::Kind::Docker(broker_pb::DockerTarget {
                container: container.name.clone(),
            });
            // Not root: the broker refuses root in containers by default.
            (target, "tester")
        } else {
            (
                broker_pb::target::Kind::Local(broker_pb::LocalTarget {}),
                "",
            )
        };
        let instance = cluster
            .register_instance_with(
                0,
                session_pb::RegisterInstanceRequest {
                    name: format!("input-{runtime}"),
                    target: Some(broker_pb::Target { kind: Some(target) }),
                    command: vec!["sh".to_owned()],
                    user: user.to_owned(),
                    max_sessions: 5,
                    ..Default::default()
                },
            )
            .await
            .expect("register an instance");
        let lines = |name: &str| {
            if docker {
                Lines::Container {
                    container: &container,
                    path: format!("/tmp/{name}"),
                }
            } else {
                Lines::Local(directory.path().join(name))
            }
        };
        websocket_rounds(&cluster, &instance.id, &lines("websocket"), runtime).await;
        grpc_rounds(&cluster, &instance.id, &lines("grpc"), runtime).await;
    }
}

/// Each round opens a socket, sends one line (text or binary) without waiting for anything and
/// leaves at once, with a close frame or by hanging up.
async fn websocket_rounds(cluster: &Cluster, instance_id: &str, lines: &Lines<'_>, runtime: &str) {
    let session_id = created_session(cluster, instance_id, serde_json::json!({})).await;
    let port = cluster.gateways[0].port();
    for round in 0..ROUNDS {
        let mut terminal = Terminal::open(port, instance_id, &session_id, None)
            .await
            .expect("a websocket");
        let command = lines.command(round);
        if round % 2 == 0 {
            terminal.input_text(&command).await.expect("send text");
        } else {
            terminal.input(command.as_bytes()).await.expect("send");
        }
        if round % 4 < 2 {
            terminal.close_at_once().await;
        } else {
            terminal.hang_up_at_once().await;
        }
        // The next socket would take control from this one: it waits for this round's line.
        lines
            .wait_for(round, &format!("{runtime} websocket"), cluster)
            .await;
    }
}

/// Each round resets the session, opens a relayed `Attach`, sends a line and a second hello,
/// and ends the call as soon as the gateway refused the hello: the line had reached the
/// gateway, and the new shell had not shown its prompt, so the broker held it.
async fn grpc_rounds(cluster: &Cluster, instance_id: &str, lines: &Lines<'_>, runtime: &str) {
    let session_id = created_session(cluster, instance_id, serde_json::json!({})).await;
    let channel = Channel::from_shared(cluster.gateways[0].endpoint())
        .expect("the gateway's endpoint")
        .connect()
        .await
        .expect("a connection to the gateway");
    let reset = format!("/api/v1/instances/{instance_id}/terminal/sessions/{session_id}/reset");
    for round in 0..ROUNDS {
        let (status, body) = cluster
            .rest(0, reqwest::Method::POST, &reset, None)
            .await
            .expect("reset");
        assert_eq!(status, 200, "reset: {body}");
        let (frames, receiver) = mpsc::channel(4);
        let hello = || broker_pb::ClientFrame {
            frame: Some(ClientFrameKind::Hello(broker_pb::Hello {
                session_id: session_id.clone(),
                role: broker_pb::Role::Controller as i32,
                ..Default::default()
            })),
        };
        frames.send(hello()).await.expect("an open queue");
        let client_frames = futures::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|frame| (frame, receiver))
        });
        let mut request = tonic::Request::new(client_frames);
        let bearer = format!("Bearer {API_TOKEN}");
        request
            .metadata_mut()
            .insert("authorization", bearer.parse().expect("ascii"));
        request
            .metadata_mut()
            .insert("ptyhub-instance", instance_id.parse().expect("ascii"));
        let mut server = PtyBrokerClient::new(channel.clone())
            .attach(request)
            .await
            .expect("the gateway relays the attach")
            .into_inner();
        let line = broker_pb::ClientFrame {
            frame: Some(ClientFrameKind::Input(broker_pb::Input {
                data: lines.command(round).into(),
                input_id: None,
            })),
        };
        frames.send(line).await.expect("the stream is open");
        frames.send(hello()).await.expect("the stream is open");
        loop {
            let frame = tokio::time::timeout(PATIENCE, server.message())
                .await
                .expect("a frame in time")
                .expect("the stream goes on")
                .and_then(|frame| frame.frame)
                .expect("the stream goes on");
            if matches!(frame, ServerFrameKind::Error(_)) {
                break;
            }
        }
        drop(frames);
        drop(server);
        lines
            .wait_for(round, &format!("{runtime} grpc"), cluster)
            .await;
    }
}
