//! A TCP relay in front of the gateway whose connections the test can cut at once, as a network
//! blip or a restarted proxy would: the client sees its connection drop, and the next one it
//! opens goes through.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

#[derive(Debug)]
pub struct Relay {
    address: SocketAddr,
    connections: Arc<Mutex<JoinSet<()>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Relay {
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("an address");
        let connections = Arc::new(Mutex::new(JoinSet::new()));
        let accepted = connections.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    continue;
                };
                accepted
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .spawn(async move {
                        let Ok(mut server) = TcpStream::connect(target).await else {
                            return;
                        };
                        let _ = client.set_nodelay(true);
                        let _ = server.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    });
            }
        });
        Self {
            address,
            connections,
            accept,
        }
    }

    /// `http://127.0.0.1:<port>` of the relay.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Drops every relayed connection at once.
    pub fn cut(&self) {
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .abort_all();
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
