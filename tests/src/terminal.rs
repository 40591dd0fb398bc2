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
        let mut url =
            format!("ws://127.0.0.1:{port}/ws/tool-instances/{instance_id}/terminal/{session_id}");
        if let Some(since) = since {
            url.push_str(&format!("?since={since}"));
        }
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
        match terminal.next().await? {
            Event::Json(status) if status["status"] == "connected" => {
                let offset = status["offset"]
                    .as_u64()
                    .context("connected status without an offset")?;
                Ok((terminal, offset))
            }
            other => bail!("expected the connected status first, got {other:?}"),
        }
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

    /// Sends input bytes.
    pub async fn input(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.socket
            .send(Message::Binary(bytes.to_vec().into()))
            .await
            .context("cannot send input")
    }

    async fn send_json(&mut self, value: &serde_json::Value) -> anyhow::Result<()> {
        self.socket
            .send(Message::Text(value.to_string().into()))
            .await
            .context("cannot send a text frame")
    }
}
