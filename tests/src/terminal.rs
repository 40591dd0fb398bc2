//! A terminal WebSocket client of the gateway: opens a session (optionally from an offset),
//! answers the gateway's pings, and hands out output bytes, JSON frames and the close code.

use std::time::Duration;

use anyhow::{Context, bail};
use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::cluster::API_TOKEN;

/// What the server sent next.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Output(Vec<u8>),
    Json(serde_json::Value),
    /// The close frame's code, if it had one.
    Closed(Option<u16>),
}

/// One attached WebSocket.
#[derive(Debug)]
pub struct Terminal {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl Terminal {
    /// Opens `/ws/tool-instances/{instance}/terminal/{session}` on the gateway at `port`.
    pub async fn open(
        port: u16,
        instance_id: &str,
        session_id: &str,
        since: Option<u64>,
    ) -> anyhow::Result<Self> {
        let mut path = format!("/ws/tool-instances/{instance_id}/terminal/{session_id}");
        if let Some(since) = since {
            path.push_str(&format!("?since={since}"));
        }
        Self::open_path(port, &path).await
    }

    /// Opens the WebSocket at `path_and_query` on the gateway at `port`, with the API token.
    pub async fn open_path(port: u16, path_and_query: &str) -> anyhow::Result<Self> {
        let url = format!("ws://127.0.0.1:{port}{path_and_query}");
        let mut request = url.into_client_request()?;
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {API_TOKEN}").parse().context("header")?,
        );
        let (socket, _) = tokio::time::timeout(
            Duration::from_secs(30),
            tokio_tungstenite::connect_async(request),
        )
        .await
        .context("the WebSocket did not open in time")?
        .context("cannot open the WebSocket")?;
        Ok(Self { socket })
    }

    /// Opens and reads the first frame, which must be the `connected` status; returns its
    /// `offset`.
    pub async fn attach(
        port: u16,
        instance_id: &str,
        session_id: &str,
        since: Option<u64>,
    ) -> anyhow::Result<(Self, u64)> {
        let mut terminal = Self::open(port, instance_id, session_id, since).await?;
        let status = terminal.connected().await?;
        let offset = status["offset"]
            .as_u64()
            .context("connected status without an offset")?;
        Ok((terminal, offset))
    }

    /// Reads the first frame, which must be the `connected` status, and returns it.
    pub async fn connected(&mut self) -> anyhow::Result<serde_json::Value> {
        match self.next().await? {
            Event::Json(status) if status["status"] == "connected" => Ok(status),
            other => bail!("expected the connected status first, got {other:?}"),
        }
    }

    /// Reads until the server closes, skipping JSON frames, and returns the close code. Output
    /// is an error: callers expect a session that has nothing (more) to say.
    pub async fn close_code(&mut self) -> anyhow::Result<Option<u16>> {
        loop {
            match self.next().await? {
                Event::Closed(code) => return Ok(code),
                Event::Json(_) => {}
                Event::Output(bytes) => bail!(
                    "output before the close: {:?}",
                    String::from_utf8_lossy(&bytes)
                ),
            }
        }
    }

    /// Reads output until `needle` shows up, and returns what was read; fails on a close.
    pub async fn read_until(&mut self, needle: &str) -> anyhow::Result<String> {
        let mut seen = Vec::new();
        loop {
            match self.next().await? {
                Event::Output(bytes) => {
                    seen.extend(bytes);
                    if String::from_utf8_lossy(&seen).contains(needle) {
                        return Ok(String::from_utf8_lossy(&seen).into_owned());
                    }
                }
                Event::Json(_) => {}
                Event::Closed(code) => bail!(
                    "closed ({code:?}) before {needle:?}; saw {:?}",
                    String::from_utf8_lossy(&seen)
                ),
            }
        }
    }

    /// Closes the WebSocket with a normal close frame, as a tab that is closed does.
    pub async fn close(mut self) -> anyhow::Result<()> {
        self.socket
            .close(None)
            .await
            .context("cannot close the WebSocket")?;
        // Read until the server's close answer, so the close is complete on both sides.
        while let Ok(Some(Ok(_))) =
            tokio::time::timeout(Duration::from_secs(30), self.socket.next()).await
        {}
        Ok(())
    }

    /// The next event, answering pings on the way. A broken connection is an error.
    pub async fn next(&mut self) -> anyhow::Result<Event> {
        loop {
            let message = tokio::time::timeout(Duration::from_secs(60), self.socket.next())
                .await
                .context("nothing from the gateway for 60 s")?;
            match message {
                None => return Ok(Event::Closed(None)),
                Some(Err(error)) => return Err(error).context("the WebSocket broke"),
                Some(Ok(Message::Binary(bytes))) => return Ok(Event::Output(bytes.to_vec())),
                Some(Ok(Message::Text(text))) => {
                    let value: serde_json::Value =
                        serde_json::from_str(text.as_str()).context("a text frame is not JSON")?;
                    if value["type"] == "ping" {
                        self.send_json(&serde_json::json!({"type": "pong"})).await?;
                        continue;
                    }
                    return Ok(Event::Json(value));
                }
                Some(Ok(Message::Close(frame))) => {
                    return Ok(Event::Closed(frame.map(|frame| u16::from(frame.code))));
                }
                Some(Ok(_)) => continue,
            }
        }
    }

    /// The client's end of the connection.
    pub fn local_addr(&self) -> anyhow::Result<std::net::SocketAddr> {
        match self.socket.get_ref() {
            MaybeTlsStream::Plain(stream) => Ok(stream.local_addr()?),
            _ => bail!("not a plain TCP connection"),
        }
    }

    /// Sends input bytes.
    pub async fn input(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.socket
            .send(Message::Binary(bytes.to_vec().into()))
            .await
            .context("cannot send input")
    }

    /// Sends input as a JSON text frame (`{"type":"input","data":...}`).
    pub async fn input_text(&mut self, data: &str) -> anyhow::Result<()> {
        self.send_json(&serde_json::json!({"type": "input", "data": data}))
            .await
    }

    /// Sends a close frame and goes, waiting for nothing.
    pub async fn close_at_once(mut self) {
        let _ = self.socket.send(Message::Close(None)).await;
    }

    /// Ends the connection without a close frame: what was sent is flushed, and the TCP
    /// connection shut down at once.
    pub async fn hang_up_at_once(mut self) {
        let _ = self.socket.flush().await;
        let _ = tokio::io::AsyncWriteExt::shutdown(self.socket.get_mut()).await;
    }

    async fn send_json(&mut self, value: &serde_json::Value) -> anyhow::Result<()> {
        self.socket
            .send(Message::Text(value.to_string().into()))
            .await
            .context("cannot send a text frame")
    }
}
