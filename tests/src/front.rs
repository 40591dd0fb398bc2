//! A stable address in front of a service that comes back on a new port when it restarts,
//! as a Kubernetes Service or a compose service name is in front of a replica.
//!
//! Every service starts on `127.0.0.1:0`, so a restarted process listens on a port of its own
//! choosing. Brokers register their new endpoint themselves, but gateways and brokers are
//! started with session-api's address and keep it. Binding the old port again would race with
//! every other process that binds port 0 meanwhile; instead the test holds this listener for
//! the cluster's whole life, and each connection made to it is relayed byte for byte to where
//! the service listens now. While the service is down a connection is accepted and closed at
//! once, which its clients see as the service being unavailable, as they would through a
//! Service without a ready endpoint.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Context;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// The relay; dropping it closes the listener and every relayed connection.
#[derive(Debug)]
pub struct Front {
    address: SocketAddr,
    backend: Arc<Mutex<Option<SocketAddr>>>,
    relay: tokio::task::JoinHandle<()>,
}

impl Front {
    /// Listens on a port of `127.0.0.1` chosen by the kernel; relays nowhere until
    /// [`Front::route_to`].
    pub async fn bind() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("cannot bind 127.0.0.1:0")?;
        let address = listener.local_addr()?;
        let backend = Arc::new(Mutex::new(None));
        let relay = tokio::spawn(relay(listener, backend.clone()));
        Ok(Self {
            address,
            backend,
            relay,
        })
    }

    /// Relays the connections made to `listener`, an already bound socket (for example one
    /// made in another network namespace than the runtime this is called in, whose sockets
    /// the relay then connects from).
    pub fn serve(listener: std::net::TcpListener) -> anyhow::Result<Self> {
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let listener = TcpListener::from_std(listener)?;
        let backend = Arc::new(Mutex::new(None));
        let relay = tokio::spawn(relay(listener, backend.clone()));
        Ok(Self {
            address,
            backend,
            relay,
        })
    }

    /// `http://127.0.0.1:<port>` of the stable address.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Relays the connections made from now on to `backend`.
    pub fn route_to(&self, backend: SocketAddr) {
        *self.backend.lock().unwrap_or_else(PoisonError::into_inner) = Some(backend);
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.relay.abort();
    }
}

async fn relay(listener: TcpListener, backend: Arc<Mutex<Option<SocketAddr>>>) {
    // Aborting this task drops the set, which aborts every relayed connection with it.
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let Ok((mut client, _)) = listener.accept().await else {
            continue;
        };
        let target = *backend.lock().unwrap_or_else(PoisonError::into_inner);
        connections.spawn(async move {
            let Some(target) = target else {
                return;
            };
            let Ok(mut server) = TcpStream::connect(target).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            // Ends when either side closes or breaks; dropping both then closes the other.
            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Answers each connection with `name`, then echoes it.
    async fn echo_server(name: &'static [u8]) -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let (mut reader, mut writer) = socket.split();
                    writer.write_all(name).await.unwrap();
                    let _ = tokio::io::copy(&mut reader, &mut writer).await;
                });
            }
        });
        (address, task)
    }

    /// Sends `text`, and reads until the other side closes.
    async fn round_trip(front: &Front, text: &[u8]) -> std::io::Result<Vec<u8>> {
        let address = front.endpoint().trim_start_matches("http://").to_owned();
        let mut socket = TcpStream::connect(address).await?;
        socket.write_all(text).await?;
        socket.shutdown().await?;
        let mut answer = Vec::new();
        socket.read_to_end(&mut answer).await?;
        Ok(answer)
    }

    #[tokio::test]
    async fn connections_reach_the_current_backend_and_are_closed_without_one() {
        let front = Front::bind().await.unwrap();
        // Closed at once: an empty answer, or a reset when the close meets the unread text.
        match round_trip(&front, b"nobody").await {
            Ok(answer) => assert_eq!(answer, b""),
            Err(error) => assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset),
        }

        let (first, first_server) = echo_server(b"1:").await;
        front.route_to(first);
        assert_eq!(round_trip(&front, b"hello").await.unwrap(), b"1:hello");

        // The service restarts elsewhere: the same front address reaches it there.
        first_server.abort();
        let (second, _second_server) = echo_server(b"2:").await;
        front.route_to(second);
        assert_eq!(round_trip(&front, b"again").await.unwrap(), b"2:again");
    }
}
