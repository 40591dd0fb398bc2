//! Half-open peers on each hop, found by heartbeats: a peer frozen with SIGSTOP keeps its
//! sockets open and the kernel keeps acknowledging what is sent to it, but it answers nothing,
//! as a hung process or a partitioned node would. The other side must treat it as a close of
//! that peer alone, within a bounded time. Every hop's heartbeat runs at 1 s here (its flag),
//! so each test takes seconds:
//!
//! - a broker frozen under a gateway's `Attach`: the gateway's HTTP/2 keepalive
//!   (`--backend-keep-alive`) ends the stream and closes that WebSocket with 1011; a client of
//!   another broker goes on;
//! - session-api frozen under a gateway: the same keepalive ends the session event stream,
//!   the relayed `WatchSessions` (`UNAVAILABLE`) and a REST call (503), and once session-api
//!   wakes the gateway serves again;
//! - a broker frozen under session-api: session-api's keepalive (`--keepalive-interval`) ends
//!   the broker's event stream, so the broker is marked down, and the `WatchCommands` forwarded
//!   to it (`UNAVAILABLE`); calls to its sessions are refused `UNAVAILABLE` until it wakes;
//! - session-api frozen under the broker's event stream: the broker's keepalive (`--keepalive-interval`)
//!   hangs up on it (its socket is left in CLOSE-WAIT), and after SIGCONT it subscribes again;
//! - a gateway frozen under a client's stream: the broker's keepalive drops the gateway's
//!   `Attach`, and once the gateway wakes its client is closed with 1011 and can attach again;
//! - a WebSocket client that stops answering: the gateway's heartbeat (`--heartbeat-interval`)
//!   hangs up on it and detaches it from the broker;
//! - an outside gRPC client (`ptyhub attach`) frozen under the gateway's relayed `Attach`: the
//!   gateway's HTTP/2 keepalive toward clients (`--client-keep-alive`) drops its connection,
//!   so the relay detaches it from the broker and its controller lease is free.
//!
//! Where a second mechanism could end the same connection (session-api's heartbeat timeout, the
//! gateway's call timeout) it is set to an hour, so that only the keepalive under test can. Every
//! wait is one poll or read with a generous deadline, a guard against a hang, never a measure; a
//! frozen process is woken (or killed) before the test ends, so that the cluster shuts down
//! cleanly.

use std::net::SocketAddr;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_proto::session::v1::session_api_client::SessionApiClient;
use serde_json::json;
use tests::cluster::{API_TOKEN, BearerToken, Cluster, PATIENCE};
use tests::sockets::{TcpState, tcp_sockets};
use tests::terminal::{Event, Terminal};
use tonic::Code;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::{created_session, start};

/// Short heartbeats on every hop: a frozen peer is found within two of them.
const SHORT_INTERVAL: &str = "1s";
/// How long a hop has to find its frozen peer: ten times the two short intervals it takes, and
/// well under the two default ones (20 s or 25 s each), so that a hop whose flag does not
/// reach its heartbeat fails too.
const FOUND_WITHIN: Duration = Duration::from_secs(20);
/// A timeout that must not end anything within a test (session-api's heartbeat timeout, the
/// gateway's call timeout), so that only the heartbeat under test can end the connection.
const NEVER: &str = "1h";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_broker_closes_the_websockets_attached_through_it_and_no_other() {
    let Some(cluster) = start(
        Cluster::builder()
            .session_apis(1)
            .brokers(2)
            .gateways(1)
            .session_api_flag("heartbeat-timeout", NEVER)
            .gateway_flag("backend-keep-alive", SHORT_INTERVAL)
            .gateway_flag("heartbeat-interval", "5s"),
    )
    .await
    else {
        return;
    };
    let port = cluster.gateways[0].port();
    let mut attached = Vec::new();
    for broker in 0..2 {
        let instance = cluster
            .register_instance(&format!("on-broker-{broker}"), broker, &["sh"], 5)
            .await
            .expect("register an instance");
        let session = created_session(&cluster, &instance.id, json!({})).await;
        let (mut terminal, _) = Terminal::attach(port, &instance.id, &session, None)
            .await
            .expect("attach");
        terminal.input(b"echo up-$((20+1))\n").await.unwrap();
        terminal.read_until("up-21").await.unwrap();
        attached.push((instance, session, terminal));
    }
    let (frozen_instance, frozen_session, mut frozen) = attached.remove(0);
    let (_, _, mut kept) = attached.remove(0);

    cluster.brokers[0].freeze().expect("SIGSTOP broker 0");
    // Both clients are read, so that both answer the gateway's pings meanwhile.
    let ended = tokio::time::timeout(FOUND_WITHIN, async {
        loop {
            tokio::select! {
                event = frozen.next() => match event {
                    Ok(Event::Closed(code)) => return code,
                    Ok(_) => {}
                    Err(error) => panic!("the client of the frozen broker broke: {error:#}"),
                },
                event = kept.next() => match event {
                    Ok(Event::Closed(code)) => panic!("the other broker's client closed: {code:?}"),
                    Ok(_) => {}
                    Err(error) => panic!("the other broker's client broke: {error:#}"),
                },
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the WebSocket of the frozen broker stayed open for {FOUND_WITHIN:?}\n{}",
            cluster.logs()
        )
    });
    assert_eq!(ended, Some(1011), "a lost broker is a backend failure");
    kept.input(b"echo still-$((40+2))\n").await.unwrap();
    kept.read_until("still-42").await.unwrap();

    // Awake again, the broker still has the session: only the stream was closed.
    cluster.brokers[0].thaw().expect("SIGCONT broker 0");
    let (mut again, _) = Terminal::attach(port, &frozen_instance.id, &frozen_session, None)
        .await
        .expect("reattach after the broker wakes");
    again.input(b"echo back-$((1+2))\n").await.unwrap();
    again.read_until("back-3").await.unwrap();
}

/// The sockets of process `pid` connected to `peer`.
fn sockets_to(pid: u32, peer: SocketAddr) -> Vec<TcpState> {
    tcp_sockets(pid)
        .unwrap_or_default()
        .into_iter()
        .filter(|socket| socket.remote == peer)
        .map(|socket| socket.state)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_session_api_is_hung_up_on_by_its_broker() {
    let Some(cluster) = start(
        Cluster::builder()
            .session_apis(1)
            .brokers(1)
            .gateways(0)
            .session_api_flag("heartbeat-timeout", NEVER)
            .broker_flag("keepalive-interval", SHORT_INTERVAL),
    )
    .await
    else {
        return;
    };
    let api = cluster.apis[0].pid().expect("session-api runs");
    let broker = cluster.brokers[0].address();
    // session-api watches the broker's events from the moment the broker registers.
    cluster
        .eventually("session-api is connected to the broker", || {
            let states = sockets_to(api, broker);
            async move { states.contains(&TcpState::Established).then_some(()) }
        })
        .await;

    cluster.apis[0].freeze().expect("SIGSTOP session-api");
    let states = cluster
        .eventually_within(
            FOUND_WITHIN,
            "the broker hangs up on every connection of the frozen session-api",
            || {
                let states = sockets_to(api, broker);
                async move {
                    (!states.is_empty() && states.iter().all(|state| *state == TcpState::CloseWait))
                        .then_some(states)
                }
            },
        )
        .await;
    assert!(!states.is_empty());

    // Awake again, session-api connects to the broker again and spawns through it.
    cluster.apis[0].thaw().expect("SIGCONT session-api");
    cluster
        .eventually("session-api reconnects to the broker", || {
            let states = sockets_to(api, broker);
            async move { states.contains(&TcpState::Established).then_some(()) }
        })
        .await;
    let instance = cluster
        .register_instance("after-the-freeze", 0, &["sh"], 5)
        .await
        .expect("register an instance");
    let created = cluster
        .session_client(0)
        .await
        .expect("a session-api client")
        .create_session(session_pb::CreateSessionRequest {
            instance: instance.id,
            ..Default::default()
        })
        .await
        .expect("a create after the freeze spawns");
    assert!(created.into_inner().created);
}

/// Controllers and viewers broker 0 counts on `session_id`.
async fn attached_clients(cluster: &Cluster, session_id: &str) -> (u32, u32) {
    let info = cluster
        .broker_client(0)
        .await
        .expect("a broker client")
        .get(broker_pb::GetRequest {
            session_id: session_id.to_owned(),
        })
        .await
        .expect("the broker knows the session")
        .into_inner();
    (info.controllers, info.viewers)
}

/// Reads `terminal` (answering the gateway's heartbeats) until broker 0 counts one controller
/// on `session_id`.
async fn read_until_counted(cluster: &Cluster, terminal: &mut Terminal, session_id: &str) {
    tokio::time::timeout(PATIENCE, async {
        loop {
            tokio::select! {
                event = terminal.next() => match event {
                    Ok(Event::Closed(code)) => panic!("closed ({code:?}) before being counted"),
                    Ok(_) => {}
                    Err(error) => panic!("the client broke before being counted: {error:#}"),
                },
                () = tokio::time::sleep(Duration::from_millis(100)) => {
                    if attached_clients(cluster, session_id).await == (1, 0) {
                        return;
                    }
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the broker never counted the client\n{}", cluster.logs()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_gateway_loses_its_attach_and_its_client_is_closed_when_it_wakes() {
    let Some(cluster) = start(
        Cluster::builder()
            .session_apis(1)
            .brokers(1)
            .gateways(1)
            .broker_flag("keepalive-interval", SHORT_INTERVAL),
    )
    .await
    else {
        return;
    };
    let port = cluster.gateways[0].port();
    let instance = cluster
        .register_instance("behind-a-gateway", 0, &["sh"], 5)
        .await
        .expect("register an instance");
    let session = created_session(&cluster, &instance.id, json!({})).await;
    let (mut terminal, _) = Terminal::attach(port, &instance.id, &session, None)
        .await
        .expect("attach");
    read_until_counted(&cluster, &mut terminal, &session).await;

    cluster.gateways[0].freeze().expect("SIGSTOP the gateway");
    cluster
        .eventually_within(
            FOUND_WITHIN,
            "the broker drops the frozen gateway's attach",
            || {
                let cluster = &cluster;
                let session = &session;
                async move { (attached_clients(cluster, session).await == (0, 0)).then_some(()) }
            },
        )
        .await;

    cluster.gateways[0].thaw().expect("SIGCONT the gateway");
    let code = terminal.close_code().await.expect("a close");
    assert_eq!(
        code,
        Some(1011),
        "the client of a lost stream is told to reconnect"
    );
    let (mut again, _) = Terminal::attach(port, &instance.id, &session, None)
        .await
        .expect("reattach");
    again.input(b"echo again-$((2+3))\n").await.unwrap();
    again.read_until("again-5").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_websocket_client_is_hung_up_on_and_detached_by_the_gateway() {
    let Some(cluster) = start(
        Cluster::builder()
            .session_apis(1)
            .brokers(1)
            .gateways(1)
            .gateway_flag("heartbeat-interval", SHORT_INTERVAL),
    )
    .await
    else {
        return;
    };
    let port = cluster.gateways[0].port();
    let instance = cluster
        .register_instance("silent", 0, &["sh"], 5)
        .await
        .expect("register an instance");
    let session = created_session(&cluster, &instance.id, json!({})).await;
    let (mut terminal, _) = Terminal::attach(port, &instance.id, &session, None)
        .await
        .expect("attach");
    read_until_counted(&cluster, &mut terminal, &session).await;

    // From here the client reads nothing, so it answers no ping: to the gateway it is a
    // browser tab whose machine went to sleep.
    cluster
        .eventually_within(
            FOUND_WITHIN,
            "the gateway detaches the silent client",
            || {
                let cluster = &cluster;
                let session = &session;
                async move { (attached_clients(cluster, session).await == (0, 0)).then_some(()) }
            },
        )
        .await;
    // And it has hung up: the client's socket waits for the client's own close. (The close
    // frame the gateway sent first cannot be read reliably: reading makes the client answer
    // the pings queued before it, and the gateway's side, gone, answers that with a reset.)
    let client = terminal.local_addr().expect("the client's address");
    let gateway = cluster.gateways[0].address();
    cluster
        .eventually("the gateway closes the silent client's connection", || {
            let state = tcp_sockets(std::process::id())
                .unwrap_or_default()
                .into_iter()
                .find(|socket| socket.local == client && socket.remote == gateway)
                .map(|socket| socket.state);
            async move { (state == Some(TcpState::CloseWait)).then_some(()) }
        })
        .await;
}

/// A gRPC client of gateway 0's session-api surface with the API token, on a connection of
/// its own.
async fn gateway_session_client(
    cluster: &Cluster,
) -> SessionApiClient<InterceptedService<Channel, BearerToken>> {
    let channel = Channel::from_shared(cluster.gateways[0].endpoint())
        .expect("the gateway's url")
        .connect()
        .await
        .expect("an http/2 connection to the gateway");
    SessionApiClient::with_interceptor(channel, BearerToken(API_TOKEN.to_owned()))
}

/// Gateway 0's session event stream of `instance`, opened (its first event read), and its
/// relayed `WatchSessions`.
async fn watch_through_the_gateway(
    cluster: &Cluster,
    instance: &str,
) -> (
    reqwest::Response,
    tonic::Streaming<session_pb::SessionChange>,
) {
    let mut events = cluster
        .http
        .get(format!(
            "{}/api/v1/instances/{instance}/terminal/events",
            cluster.gateways[0].endpoint()
        ))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(events.status(), 200);
    // The stream opens with the list of sessions: from here it waits on session-api's changes.
    let first = tokio::time::timeout(PATIENCE, events.chunk())
        .await
        .expect("the first event in time")
        .expect("the first event")
        .expect("the stream stays open");
    assert!(
        String::from_utf8_lossy(&first).contains("event: sessions"),
        "{first:?}"
    );
    let changes = gateway_session_client(cluster)
        .await
        .watch_sessions(session_pb::WatchSessionsRequest {
            instance: instance.to_owned(),
        })
        .await
        .expect("watch sessions through the gateway")
        .into_inner();
    (events, changes)
}

/// Reads a session event stream to its end (clean, or broken off); panics if it is still open
/// after [`FOUND_WITHIN`].
async fn event_stream_end(mut events: reqwest::Response) {
    tokio::time::timeout(FOUND_WITHIN, async {
        while let Ok(Some(_)) = events.chunk().await {}
    })
    .await
    .unwrap_or_else(|_| panic!("the event stream stayed open for {FOUND_WITHIN:?}"));
}

/// Reads a stream to its end and returns the status it ended with (`None`: it ended cleanly);
/// panics if it is still open after [`FOUND_WITHIN`].
async fn stream_end<T>(mut stream: tonic::Streaming<T>) -> Option<tonic::Status> {
    tokio::time::timeout(FOUND_WITHIN, async {
        loop {
            match stream.message().await {
                Ok(Some(_)) => {}
                Ok(None) => return None,
                Err(status) => return Some(status),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the stream stayed open for {FOUND_WITHIN:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_session_api_ends_the_gateways_streams_and_calls_and_is_served_again_when_it_wakes()
 {
    let Some(cluster) = start(
        Cluster::builder()
            .session_apis(1)
            .brokers(1)
            .gateways(1)
            .session_api_flag("heartbeat-timeout", NEVER)
            .gateway_flag("backend-keep-alive", SHORT_INTERVAL)
            .gateway_flag("backend-timeout", NEVER),
    )
    .await
    else {
        return;
    };
    let instance = cluster
        .register_instance("watched-while-frozen", 0, &["sh"], 5)
        .await
        .expect("register an instance");
    let (events, changes) = watch_through_the_gateway(&cluster, &instance.id).await;

    cluster.apis[0].freeze().expect("SIGSTOP session-api");
    let ((), watch_ended) = tokio::join!(event_stream_end(events), stream_end(changes));
    assert_eq!(
        watch_ended.as_ref().map(tonic::Status::code),
        Some(Code::Unavailable),
        "losing session-api is UNAVAILABLE: {watch_ended:?}\n{}",
        cluster.logs()
    );
    let instance_path = format!("/api/v1/instances/{}", instance.id);
    let (status, body) = tokio::time::timeout(
        FOUND_WITHIN,
        cluster.rest(0, reqwest::Method::GET, &instance_path, None),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "a REST call hung on the frozen session-api\n{}",
            cluster.logs()
        )
    })
    .expect("an answer");
    assert_eq!(status, 503, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|detail| !detail.is_empty()),
        "{body}"
    );

    // Awake again, session-api serves the gateway's new calls and streams.
    cluster.apis[0].thaw().expect("SIGCONT session-api");
    let (_events, mut changes) = watch_through_the_gateway(&cluster, &instance.id).await;
    let (status, body) = cluster
        .rest(0, reqwest::Method::GET, &instance_path, None)
        .await
        .expect("an answer");
    assert_eq!(status, 200, "{body}");
    let created = created_session(&cluster, &instance.id, json!({})).await;
    let announced = tokio::time::timeout(PATIENCE, async {
        loop {
            let change = changes
                .message()
                .await
                .expect("the new watch works")
                .expect("the new watch stays open");
            if change.session.is_some_and(|session| session.id == created) {
                return;
            }
        }
    })
    .await;
    assert!(announced.is_ok(), "the new session was never announced");
}

/// `WatchCommands` on `session` through session-api 0, open.
async fn watch_commands_through_session_api(
    cluster: &Cluster,
    instance: &str,
    session: &str,
) -> tonic::Streaming<broker_pb::Command> {
    cluster
        .session_client(0)
        .await
        .expect("a session-api client")
        .watch_commands(session_pb::WatchCommandsRequest {
            instance: instance.to_owned(),
            session_id: session.to_owned(),
            after_id: 0,
        })
        .await
        .expect("watch commands through session-api")
        .into_inner()
}

/// Whether session-api 0 lists broker 0 as up.
async fn broker_up(cluster: &Cluster) -> bool {
    let brokers = cluster
        .registry_client(0)
        .await
        .expect("a registry client")
        .list_brokers(session_pb::ListBrokersRequest {})
        .await
        .expect("the brokers")
        .into_inner()
        .brokers;
    brokers
        .iter()
        .any(|broker| broker.id == tests::cluster::broker_id(0) && broker.up)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_broker_is_marked_down_by_session_api_and_its_forwarded_calls_end() {
    let Some(cluster) = start(
        Cluster::builder()
            .session_apis(1)
            .brokers(1)
            .gateways(0)
            .session_api_flag("heartbeat-timeout", NEVER)
            .session_api_flag("keepalive-interval", SHORT_INTERVAL),
    )
    .await
    else {
        return;
    };
    let instance = cluster
        .register_instance("under-session-api", 0, &["sh"], 5)
        .await
        .expect("register an instance");
    let mut sessions = cluster
        .session_client(0)
        .await
        .expect("a session-api client");
    let session = sessions
        .create_session(session_pb::CreateSessionRequest {
            instance: instance.id.clone(),
            ..Default::default()
        })
        .await
        .expect("create a session")
        .into_inner()
        .session
        .expect("the session")
        .id;
    let screen = session_pb::GetScreenRequest {
        instance: instance.id.clone(),
        session_id: session.clone(),
        ..Default::default()
    };
    sessions
        .get_screen(screen.clone())
        .await
        .expect("the screen, forwarded to the broker");
    // A forwarded stream with no deadline: only the keepalive can end it.
    let commands = watch_commands_through_session_api(&cluster, &instance.id, &session).await;

    cluster.brokers[0].freeze().expect("SIGSTOP the broker");
    let ended = stream_end(commands).await;
    assert_eq!(
        ended.as_ref().map(tonic::Status::code),
        Some(Code::Unavailable),
        "losing the broker is UNAVAILABLE: {ended:?}\n{}",
        cluster.logs()
    );
    cluster
        .eventually_within(
            FOUND_WITHIN,
            "session-api marks the frozen broker down",
            || async { (!broker_up(&cluster).await).then_some(()) },
        )
        .await;
    // Marked down, the broker is not called: its sessions' calls are refused at once.
    let refused = tokio::time::timeout(PATIENCE, sessions.get_screen(screen.clone()))
        .await
        .expect("a screen call on a down broker is answered")
        .expect_err("a screen call on a down broker is refused");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");

    // Awake again, the broker is followed again and its session (still open) answers.
    cluster.brokers[0].thaw().expect("SIGCONT the broker");
    cluster
        .eventually("session-api marks the broker up again", || async {
            broker_up(&cluster).await.then_some(())
        })
        .await;
    sessions
        .get_screen(screen)
        .await
        .expect("the screen after the broker woke");
    let record = sessions
        .get_session(session_pb::GetSessionRequest {
            instance: instance.id.clone(),
            session_id: session.clone(),
        })
        .await
        .expect("the session")
        .into_inner();
    assert_ne!(
        record.status,
        session_pb::SessionStatus::Closed as i32,
        "a frozen broker is not a lost one: {record:?}"
    );
    watch_commands_through_session_api(&cluster, &instance.id, &session).await;
}

/// `ptyhub attach`, run against gateway 0 as a controller of `session`, its input a pipe held
/// open (as a person's terminal would be) and its output discarded.
struct OutsideAttach {
    child: std::process::Child,
    _stdin: std::process::ChildStdin,
}

impl OutsideAttach {
    fn start(cluster: &Cluster, instance: &str, session: &str) -> Self {
        let cli = tests::binaries::binary("ptyhub").expect("the ptyhub binary");
        let mut command = std::process::Command::new(cli);
        for (variable, _) in std::env::vars_os() {
            if variable.to_string_lossy().starts_with("PTYHUB_") {
                command.env_remove(variable);
            }
        }
        let mut child = command
            .args([
                "--server",
                &cluster.gateways[0].endpoint(),
                "--token",
                API_TOKEN,
            ])
            .args(["attach", instance, session, "--since", "0"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("ptyhub attach starts");
        let stdin = child.stdin.take().expect("attach's stdin");
        Self {
            child,
            _stdin: stdin,
        }
    }

    fn freeze(&self) {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).expect("a pid"));
        kill(pid, Signal::SIGSTOP).expect("SIGSTOP ptyhub attach");
    }
}

impl Drop for OutsideAttach {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Types `text` into `session` through session-api without `force`: refused while a client
/// holds control.
async fn input_without_force(
    cluster: &Cluster,
    instance: &str,
    session: &str,
    text: &str,
) -> Result<(), tonic::Status> {
    cluster
        .session_client(0)
        .await
        .expect("a session-api client")
        .send_input(session_pb::SendInputRequest {
            instance: instance.to_owned(),
            session_id: session.to_owned(),
            items: vec![broker_pb::InputItem {
                item: Some(broker_pb::input_item::Item::Text(text.to_owned())),
            }],
            force: false,
        })
        .await
        .map(drop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_grpc_client_is_dropped_by_the_gateway_and_its_control_released() {
    let Some(cluster) = start(
        Cluster::builder()
            .session_apis(1)
            .brokers(1)
            .gateways(1)
            .gateway_flag("client-keep-alive", SHORT_INTERVAL),
    )
    .await
    else {
        return;
    };
    let instance = cluster
        .register_instance("outside", 0, &["sh"], 5)
        .await
        .expect("register an instance");
    let session = created_session(&cluster, &instance.id, json!({})).await;
    let outside = OutsideAttach::start(&cluster, &instance.id, &session);
    cluster
        .eventually("the outside client attaches as the controller", || async {
            (attached_clients(&cluster, &session).await == (1, 0)).then_some(())
        })
        .await;
    let held = input_without_force(&cluster, &instance.id, &session, "x")
        .await
        .expect_err("input without force while a client holds control");
    assert_eq!(held.code(), Code::FailedPrecondition, "{held:?}");

    outside.freeze();
    cluster
        .eventually_within(
            FOUND_WITHIN,
            "the gateway detaches the frozen client",
            || async { (attached_clients(&cluster, &session).await == (0, 0)).then_some(()) },
        )
        .await;
    input_without_force(&cluster, &instance.id, &session, "echo free\n")
        .await
        .expect("no one holds control once the frozen client is dropped");
}
