//! The gateway's one public port over TLS (`--tls-cert`, `--tls-key`): HTTPS, WSS, gRPC and
//! gRPC-web together, HTTP/2 or HTTP/1.1 by ALPN. [`TlsListener`] is an axum listener whose
//! accepted connections have finished their handshake: handshakes run concurrently on a task of
//! its own, each bounded in time, so a client that stalls in its handshake holds up nobody.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_util::task::AbortOnDropHandle;

/// How long a client has to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections handshaken and not yet taken by the server.
const READY_QUEUE: usize = 64;
/// After a failed accept (out of file descriptors, say), the pause before the next try, so the
/// loop does not spin while the condition lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// A TCP listener whose connections are handed out after their TLS handshake.
#[derive(Debug)]
pub struct TlsListener {
    local_addr: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    /// Accepts and handshakes; ends with the listener.
    _acceptor: AbortOnDropHandle<()>,
}

impl TlsListener {
    pub fn new(listener: TcpListener, config: Arc<ServerConfig>) -> io::Result<Self> {
        let local_addr = listener.local_addr()?;
        let (sender, ready) = mpsc::channel(READY_QUEUE);
        let acceptor = TlsAcceptor::from(config);
        let task = tokio::spawn(accept_and_handshake(listener, acceptor, sender));
        Ok(Self {
            local_addr,
            ready,
            _acceptor: AbortOnDropHandle::new(task),
        })
    }
}

async fn accept_and_handshake(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    let mut handshakes = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    // Keystroke echoes are small writes: see `crate::run`.
                    if let Err(error) = stream.set_nodelay(true) {
                        tracing::debug!(%error, "cannot set TCP_NODELAY");
                    }
                    let acceptor = acceptor.clone();
                    handshakes.spawn(async move {
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                            Ok(Ok(stream)) => Some((stream, peer)),
                            Ok(Err(error)) => {
                                tracing::debug!(%error, %peer, "tls handshake failed");
                                None
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "tls handshake timed out");
                                None
                            }
                        }
                    });
                }
                Err(error) => {
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                }
            },
            Some(done) = handshakes.join_next() => {
                if let Ok(Some(connection)) = done
                    && ready.send(connection).await.is_err()
                {
                    return;
                }
            }
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The acceptor ended (it never does while the listener lives): nothing more comes.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}
