//! What the gateway's tests share: a WebSocket client that speaks the contract's frames, and
//! small REST helpers over the in-process stack.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use ptyhub_test_support::stack::TestStack;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Generous: a liveness bound, not a performance assertion.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A terminal WebSocket client.
pub struct Terminal {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// Every output byte received so far.
    pub output: Vec<u8>,
    /// Text frames received so far (after `connected`), in order.
    pub texts: Vec<Value>,
}

/// What ended a socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    pub code: u16,
    pub reason: String,
}

impl Terminal {
    /// Opens `path` (with its query) on the stack's gateway with the admin token.
    pub async fn open(stack: &TestStack, path_and_query: &str) -> Terminal {
        let separator = if path_and_query.contains('?') {
            '&'
        } else {
            '?'
        };
        let url = format!(
            "{}{path_and_query}{separator}token={}",
            stack.websocket_url(),
            stack.admin_token
        );
        Self::open_url(&url, &[])
            .await
            .expect("websocket handshake")
    }

    /// Opens `path` as [`Terminal::open`] does, on a TCP socket whose receive buffer is
    /// `bytes` (the kernel's floor applies): a client that stops reading backs up the gateway's
    /// sends after a few KiB.
    pub async fn open_with_receive_buffer(
        stack: &TestStack,
        path_and_query: &str,
        bytes: u32,
    ) -> Terminal {
        let url = format!(
            "{}{path_and_query}&token={}",
            stack.websocket_url(),
            stack.admin_token
        );
        let request = url.as_str().into_client_request().unwrap();
        let host = request.uri().host().expect("a host").to_owned();
        let port = request.uri().port_u16().expect("a port");
        let address = tokio::net::lookup_host((host.as_str(), port))
            .await
            .unwrap()
            .next()
            .expect("an address");
        let socket = if address.is_ipv4() {
            tokio::net::TcpSocket::new_v4()
        } else {
            tokio::net::TcpSocket::new_v6()
        }
        .unwrap();
        socket.set_recv_buffer_size(bytes).unwrap();
        let stream = socket.connect(address).await.expect("connect");
        let (socket, _response) =
            tokio_tungstenite::client_async(request, MaybeTlsStream::Plain(stream))
                .await
                .expect("websocket handshake");
        Terminal {
            socket,
            output: Vec::new(),
            texts: Vec::new(),
        }
    }

    /// Opens a URL as is, with extra request headers.
    pub async fn open_url(
        url: &str,
        headers: &[(&str, &str)],
    ) -> Result<Terminal, tungstenite::Error> {
        let mut request = url.into_client_request()?;
        for (name, value) in headers {
            request.headers_mut().insert(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        let (socket, _response) = tokio_tungstenite::connect_async(request).await?;
        Ok(Terminal {
            socket,
            output: Vec::new(),
            texts: Vec::new(),
        })
    }

    /// The next frame, failing the test if none comes within [`PATIENCE`].
    pub async fn next_message(&mut self) -> Option<Message> {
        match tokio::time::timeout(PATIENCE, self.socket.next()).await {
            Err(_) => panic!("no frame within {PATIENCE:?}"),
            Ok(None) => None,
            Ok(Some(Ok(message))) => Some(message),
            Ok(Some(Err(error))) => panic!("websocket error: {error}"),
        }
    }

    /// Reads the first frame, which must be `status connected`, and returns it.
    pub async fn connected(&mut self) -> Value {
        let message = self.next_message().await.expect("a first frame");
        let Message::Text(text) = message else {
            panic!("first frame is not text: {message:?}");
        };
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["type"], "status", "{value}");
        assert_eq!(value["status"], "connected", "{value}");
        value
    }

    pub async fn send_input(&mut self, text: &str) {
        self.socket
            .send(Message::Binary(text.as_bytes().to_vec().into()))
            .await
            .expect("send input");
    }

    pub async fn send_json(&mut self, value: Value) {
        self.socket
            .send(Message::Text(value.to_string().into()))
            .await
            .expect("send json");
    }

    pub async fn send(&mut self, message: Message) -> Result<(), tungstenite::Error> {
        self.socket.send(message).await
    }

    /// Reads until the output contains `needle`, keeping text frames; fails on close.
    pub async fn read_until_output(&mut self, needle: &str) {
        while !String::from_utf8_lossy(&self.output).contains(needle) {
            match self.next_message().await {
                Some(Message::Binary(data)) => self.output.extend_from_slice(&data),
                Some(Message::Text(text)) => self.texts.push(serde_json::from_str(&text).unwrap()),
                Some(Message::Close(frame)) => panic!(
                    "closed ({frame:?}) before output contained {needle:?}; output: {:?}",
                    String::from_utf8_lossy(&self.output)
                ),
                Some(_) => {}
                None => panic!("stream ended before output contained {needle:?}"),
            }
        }
    }

    /// Reads until a text frame of `kind` arrives and returns it, keeping output.
    pub async fn read_until_text(&mut self, kind: &str) -> Value {
        loop {
            match self.next_message().await {
                Some(Message::Binary(data)) => self.output.extend_from_slice(&data),
                Some(Message::Text(text)) => {
                    let value: Value = serde_json::from_str(&text).unwrap();
                    self.texts.push(value.clone());
                    if value["type"] == kind {
                        return value;
                    }
                }
                Some(Message::Close(frame)) => {
                    panic!(
                        "closed ({frame:?}) before a {kind:?} frame; texts: {:?}",
                        self.texts
                    )
                }
                Some(_) => {}
                None => panic!("stream ended before a {kind:?} frame"),
            }
        }
    }

    /// Reads until the server closes, keeping output and text frames; returns the close frame.
    pub async fn read_until_closed(&mut self) -> Closed {
        loop {
            match self.next_message().await {
                Some(Message::Binary(data)) => self.output.extend_from_slice(&data),
                Some(Message::Text(text)) => self.texts.push(serde_json::from_str(&text).unwrap()),
                Some(Message::Close(frame)) => {
                    let frame = frame.unwrap_or(CloseFrame {
                        code: tungstenite::protocol::frame::coding::CloseCode::Status,
                        reason: "".into(),
                    });
                    return Closed {
                        code: frame.code.into(),
                        reason: frame.reason.to_string(),
                    };
                }
                Some(_) => {}
                None => panic!("stream ended without a close frame"),
            }
        }
    }

    /// The client's end of the connection.
    pub fn local_address(&self) -> std::net::SocketAddr {
        match self.socket.get_ref() {
            MaybeTlsStream::Plain(stream) => stream.local_addr().expect("a connected socket"),
            _ => panic!("the test terminals connect over plain TCP"),
        }
    }

    pub fn output_text(&self) -> String {
        String::from_utf8_lossy(&self.output).into_owned()
    }
}

/// The gateway's `ptyhub_gateway_websockets_open` gauge: terminal WebSockets whose bridge has
/// not ended yet.
pub async fn open_websockets(stack: &TestStack) -> u64 {
    gateway_gauge(stack, "ptyhub_gateway_websockets_open").await
}

/// The gateway's `ptyhub_gateway_streams_open` gauge: streams and waits that hold a slot of
/// their credential's, on every surface.
pub async fn open_streams(stack: &TestStack) -> u64 {
    gateway_gauge(stack, "ptyhub_gateway_streams_open").await
}

/// The value of the gateway's gauge `name`, read from `/metrics`.
async fn gateway_gauge(stack: &TestStack, name: &str) -> u64 {
    let (status, body) = get(stack, "/metrics").await;
    assert_eq!(status, 200, "{body}");
    let text = body.as_str().expect("metrics are text");
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {name} gauge in {text}"))
}

/// Waits until exactly `count` terminal WebSockets are open on the gateway: the event that says
/// the others' bridges have ended, every frame they read handled.
pub async fn wait_for_open_websockets(stack: &TestStack, count: u64) {
    let reached = ptyhub_test_support::poll_until(PATIENCE, Duration::from_millis(20), || async {
        (open_websockets(stack).await == count).then_some(())
    })
    .await;
    assert!(
        reached.is_some(),
        "never {count} open websockets (now {})",
        open_websockets(stack).await
    );
}

/// `GET` with the admin token; returns status and JSON body.
pub async fn get(stack: &TestStack, path: &str) -> (u16, Value) {
    send(
        stack,
        reqwest::Method::GET,
        path,
        Some(&stack.admin_token),
        None,
    )
    .await
}

/// `POST` with the admin token.
pub async fn post(stack: &TestStack, path: &str, body: Option<Value>) -> (u16, Value) {
    send(
        stack,
        reqwest::Method::POST,
        path,
        Some(&stack.admin_token),
        body,
    )
    .await
}

/// `DELETE` with the admin token.
pub async fn delete(stack: &TestStack, path: &str) -> (u16, Value) {
    send(
        stack,
        reqwest::Method::DELETE,
        path,
        Some(&stack.admin_token),
        None,
    )
    .await
}

/// Any request, with or without a token.
pub async fn send(
    stack: &TestStack,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = stack
        .http
        .request(method, format!("{}{path}", stack.gateway_url));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

/// Creates a session through REST and returns its id.
pub async fn create_session(stack: &TestStack, instance: &str, body: Value) -> String {
    let (status, created) = post(
        stack,
        &format!("/api/v1/instances/{instance}/terminal/sessions"),
        Some(body),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    created["id"].as_str().unwrap().to_owned()
}
