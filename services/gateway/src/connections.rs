//! The gateway's client connections: each one its listener accepts, served by hyper as
//! HTTP/1.1 (with upgrades, for WebSockets) or HTTP/2, with HTTP/2 keepalive toward the client.
//!
//! This is `axum::serve` with the one thing it cannot be told: a keepalive. A client whose
//! process is frozen, or whose machine dropped off the network, keeps its TCP connection open
//! (its kernel, if it still runs, goes on acknowledging what the gateway sends), so nothing the
//! gateway writes ever fails; only a ping the client itself must answer finds it. The gateway
//! pings an HTTP/2 connection silent for the keepalive interval and drops it when the answer
//! takes as long again: its streams end, a relayed `Attach` with them, and the broker frees
//! that client's controller lease. (WebSockets have their own heartbeat, in `ws/bridge.rs`.)

use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::serve::Listener;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt as _;

/// Serves `app` on every connection `listener` accepts until `shutdown` completes. Then it
/// accepts no more, asks each open connection to finish (HTTP/2 with a GOAWAY, HTTP/1.1 after
/// the request in flight) and returns once all have. Each request carries its connection's
/// peer as `ConnectInfo<SocketAddr>`.
pub(crate) async fn serve_connections<L>(
    mut listener: L,
    app: Router,
    client_keep_alive: Duration,
    shutdown: impl Future<Output = ()>,
) where
    L: Listener<Addr = SocketAddr>,
{
    let stopping = CancellationToken::new();
    let connections = TaskTracker::new();
    let mut shutdown = pin!(shutdown);
    loop {
        let (io, peer) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        connections.spawn(serve_connection(
            TokioIo::new(io),
            peer,
            app.clone(),
            client_keep_alive,
            stopping.clone(),
        ));
    }
    drop(listener);
    stopping.cancel();
    connections.close();
    connections.wait().await;
}

/// Serves one connection until it closes, finishing it gracefully once `stopping` is cancelled.
async fn serve_connection<I>(
    io: TokioIo<I>,
    peer: SocketAddr,
    app: Router,
    client_keep_alive: Duration,
    stopping: CancellationToken,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = app.map_request(move |request: Request<Incoming>| {
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(ConnectInfo(peer));
        request
    });
    let builder = connection_builder(client_keep_alive);
    let mut connection =
        pin!(builder.serve_connection_with_upgrades(io, TowerToHyperService::new(service)));
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        () = stopping.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = ended {
        // Clients that go away mid-request are ordinary; a keepalive timeout is one of them.
        tracing::debug!(%peer, %error, "client connection ended with an error");
    }
}

/// HTTP/1.1 or HTTP/2 by what the client speaks; on HTTP/2 the extended CONNECT that
/// WebSockets over HTTP/2 need (as `axum::serve` enables), and the keepalive.
fn connection_builder(client_keep_alive: Duration) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http2()
        .enable_connect_protocol()
        .timer(TokioTimer::new())
        .keep_alive_interval(client_keep_alive)
        .keep_alive_timeout(client_keep_alive);
    builder
}
