//! Every hop of a keystroke has Nagle's algorithm off: a keystroke and its echo are writes of a
//! few bytes, which Nagle would hold until the previous write is acknowledged (up to the
//! peer's delayed-ACK timer, 40 ms on Linux). Read from the service processes' own sockets once
//! a terminal has echoed through them, so each hop is a real connection.

use std::net::SocketAddr;

use serde_json::json;
use tests::cluster::Cluster;
use tests::socket_options::{TcpConnection, tcp_connections};
use tests::terminal::Terminal;

use crate::{created_session, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hop_of_a_keystroke_has_tcp_nodelay() {
    let Some(cluster) = start(Cluster::builder().session_apis(1).brokers(1).gateways(1)).await
    else {
        return;
    };
    let instance = cluster
        .register_instance("nodelay", 0, &["sh"], 5)
        .await
        .expect("register an instance");
    let session = created_session(&cluster, &instance.id, json!({})).await;
    let (mut terminal, _) =
        Terminal::attach(cluster.gateways[0].port(), &instance.id, &session, None)
            .await
            .expect("attach through the gateway");
    terminal.input(b"echo typed-$((40+2))\n").await.unwrap();
    terminal.read_until("typed-42").await.unwrap();

    let gateway = &cluster.gateways[0];
    let api = &cluster.apis[0];
    let broker = &cluster.brokers[0];
    let api_front: SocketAddr = cluster
        .session_api_endpoint(0)
        .trim_start_matches("http://")
        .parse()
        .expect("session-api's front is an address");
    let of = |service: &tests::process::Service| {
        tcp_connections(service.pid().expect("the service runs"))
            .unwrap_or_else(|error| panic!("the sockets of {}: {error}", service.name()))
    };
    let (gateway_sockets, api_sockets, broker_sockets) = (of(gateway), of(api), of(broker));
    assert_nodelay(
        "the gateway's side of the client's WebSocket",
        &gateway_sockets,
        |socket| socket.local == gateway.address(),
    );
    assert_nodelay("the gateway to session-api", &gateway_sockets, |socket| {
        socket.remote == api_front
    });
    assert_nodelay("the gateway to the broker", &gateway_sockets, |socket| {
        socket.remote == broker.address()
    });
    assert_nodelay(
        "session-api's side of its callers",
        &api_sockets,
        |socket| socket.local == api.address(),
    );
    assert_nodelay("session-api to the broker", &api_sockets, |socket| {
        socket.remote == broker.address()
    });
    assert_nodelay(
        "the broker's side of its callers",
        &broker_sockets,
        |socket| socket.local == broker.address(),
    );
    assert_nodelay("the broker to session-api", &broker_sockets, |socket| {
        socket.remote == api_front
    });
}

/// Asserts that `hop` has at least one connection among `sockets` (those `on_hop` picks), and
/// that each has `TCP_NODELAY`.
fn assert_nodelay(hop: &str, sockets: &[TcpConnection], on_hop: impl Fn(&TcpConnection) -> bool) {
    let connections: Vec<&TcpConnection> = sockets.iter().filter(|socket| on_hop(socket)).collect();
    assert!(
        !connections.is_empty(),
        "no connection for {hop}: {sockets:?}"
    );
    for socket in connections {
        assert!(socket.nodelay, "{hop} has Nagle's algorithm on: {socket:?}");
    }
}
