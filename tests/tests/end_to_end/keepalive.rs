//! Half-open peers on each hop, found by heartbeats: a peer frozen with SIGSTOP keeps its
//! sockets open and the kernel keeps acknowledging what is sent to it, but it answers nothing,
//! as a hung process or a partitioned node would. The other side must treat it as a close of
//! that peer alone, within a bounded time:
//!
//! - a broker frozen under a gateway's `Attach`: the gateway's HTTP/2 keepalive (20 s, fixed)
//!   ends the stream and closes that WebSocket with 1011; a client of another broker goes on;
//! - session-api frozen under the broker's event stream: the broker's keepalive (`--keepalive-interval`)
//!   hangs up on it (its socket is left in CLOSE-WAIT), and after SIGCONT it subscribes again;
//! - a gateway frozen under a client's stream: the broker's keepalive drops the gateway's
//!   `Attach`, and once the gateway wakes its client is closed with 1011 and can attach again;
//! - a WebSocket client that stops answering: the gateway's heartbeat (`--heartbeat-interval`)
//!   hangs up on it and detaches it from the broker.
//!
//! Every wait is one poll with a generous deadline; a frozen process is woken before the test
//! ends, so that it exits cleanly when the cluster is dropped.

use std::net::SocketAddr;
use std::time::Duration;

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use serde_json::json;
use tests::cluster::Cluster;
use tests::sockets::{TcpState, tcp_sockets};
use tests::terminal::{Event, Terminal};

use crate::{created_session, start};

/// The gateway's keepalive toward brokers is fixed at 20 s, so it notices a frozen broker
/// within 40 s plus a ping interval; this is three times that.
const GATEWAY_KEEPALIVE_PATIENCE: Duration = Duration::from_secs(180);
/// Short heartbeats for the hops that have a flag for them.
const SHORT_INTERVAL: &str = "1s";
/// session-api's heartbeat timeout where a frozen process must not be declared lost by it,
/// so that only the heartbeat under test can end the connection.
const NEVER: &str = "1h";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_broker_closes_the_websockets_attached_through_it_and_no_other() {
    let Some(cluster) = start(
        Cluster::builder()
            .session_apis(1)
            .brokers(2)
            .gateways(1)
            .session_api_flag("heartbeat-timeout", NEVER)
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
    let ended = tokio::time::timeout(GATEWAY_KEEPALIVE_PATIENCE, async {
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
            "the WebSocket of the frozen broker stayed open for {GATEWAY_KEEPALIVE_PATIENCE:?}\n{}",
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
        .eventually(
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
    tokio::time::timeout(tests::cluster::PATIENCE, async {
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
        .eventually("the broker drops the frozen gateway's attach", || {
            let cluster = &cluster;
            let session = &session;
            async move { (attached_clients(cluster, session).await == (0, 0)).then_some(()) }
        })
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
        .eventually("the gateway detaches the silent client", || {
            let cluster = &cluster;
            let session = &session;
            async move { (attached_clients(cluster, session).await == (0, 0)).then_some(()) }
        })
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
