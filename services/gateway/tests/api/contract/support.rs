//! What the contract tests share: one patience for every wait, REST calls with the admin token,
//! a terminal WebSocket client that keeps what it reads, a gRPC client on the gateway's port, and
//! attach tickets signed the way session-api signs them.
//!
//! Built on `ptyhub_test_support` and plain clients only (reqwest, tokio-tungstenite, the generated
//! tonic clients), so these tests see the gateway exactly as a user's program does.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_proto::session::v1::session_api_client::SessionApiClient;
use ptyhub_test_support::stack::TestStack;
use serde_json::Value;
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tonic::transport::Channel;

/// How long any one wait may take: a liveness bound for a loaded two-core machine, never a
/// performance assertion.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// How often a polled condition is checked again.
const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// The private key (PEM) the stack's session-api signs attach tickets with; the broker holds its
/// public half.
pub use ptyhub_test_support::stack::TICKET_SIGNING_KEY as STACK_TICKET_SIGNING_KEY;

// ---- waiting ------------------------------------------------------------------------------

/// Polls `check` until it gives a value, failing the test with `what` after [`PATIENCE`].
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, check)
        .await
        .unwrap_or_else(|| panic!("not within {PATIENCE:?}: {what}"))
}

// ---- REST ---------------------------------------------------------------------------------

/// A REST answer: the status and the body as JSON (a JSON string when it was not JSON).
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

impl Reply {
    /// Asserts the contract's error shape: `status`, and a body that is exactly
    /// `{"detail": "<message>"}` with a non-empty message that does not start in upper case.
    /// Returns the message.
    pub fn expect_error(&self, status: u16, what: &str) -> String {
        assert_eq!(self.status, status, "{what}: {}", self.body);
        let object = self
            .body
            .as_object()
            .unwrap_or_else(|| panic!("{what}: error body is not an object: {}", self.body));
        assert_eq!(
            object.len(),
            1,
            "{what}: error body has more than detail: {}",
            self.body
        );
        let detail = object["detail"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: detail is not a string: {}", self.body));
        assert!(!detail.is_empty(), "{what}: empty detail");
        assert!(
            !detail.starts_with(char::is_uppercase),
            "{what}: detail is not lowercase: {detail:?}"
        );
        detail.to_owned()
    }

    /// Asserts `status` (a success) and returns the body.
    pub fn expect(self, status: u16, what: &str) -> Value {
        assert_eq!(self.status, status, "{what}: {}", self.body);
        self.body
    }
}

/// A request to the gateway with the admin token and an optional JSON body.
pub async fn rest(
    stack: &TestStack,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Reply {
    let mut request = stack
        .http
        .request(method, format!("{}{path}", stack.gateway_url))
        .bearer_auth(&stack.admin_token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    answer(request).await
}

/// A request with `token` (`None`: no credential) and an optional JSON body.
pub async fn rest_as(
    stack: &TestStack,
    token: Option<&str>,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Reply {
    let mut request = stack
        .http
        .request(method, format!("{}{path}", stack.gateway_url));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    answer(request).await
}

/// A request with the admin token and `body` sent as is, labelled as JSON.
pub async fn rest_raw(stack: &TestStack, method: reqwest::Method, path: &str, body: &str) -> Reply {
    let request = stack
        .http
        .request(method, format!("{}{path}", stack.gateway_url))
        .bearer_auth(&stack.admin_token)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_owned());
    answer(request).await
}

/// A request without any credential (the probes need none).
pub async fn rest_anonymous(stack: &TestStack, path: &str) -> Reply {
    answer(stack.http.get(format!("{}{path}", stack.gateway_url))).await
}

async fn answer(request: reqwest::RequestBuilder) -> Reply {
    let response = request.send().await.expect("the gateway answers");
    let status = response.status().as_u16();
    let text = response.text().await.expect("a response body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Reply { status, body }
}

/// `/api/v1/instances/{instance}/terminal/sessions`.
pub fn sessions_path(instance: &str) -> String {
    format!("/api/v1/instances/{instance}/terminal/sessions")
}

/// Creates a session through REST and returns its id.
pub async fn create_session(stack: &TestStack, instance: &str, body: Value) -> String {
    let created = rest(
        stack,
        reqwest::Method::POST,
        &sessions_path(instance),
        Some(body),
    )
    .await
    .expect(201, "create a session");
    created["id"].as_str().expect("a session id").to_owned()
}

/// The sessions REST lists: live ones, or with `include_closed` the history too.
pub async fn list_sessions(stack: &TestStack, instance: &str, include_closed: bool) -> Vec<Value> {
    let query = if include_closed {
        "?include=closed"
    } else {
        ""
    };
    let listed = rest(
        stack,
        reqwest::Method::GET,
        &format!("{}{query}", sessions_path(instance)),
        None,
    )
    .await
    .expect(200, "list sessions");
    listed["sessions"]
        .as_array()
        .expect("a sessions array")
        .clone()
}

/// One session as REST shows it.
pub async fn get_session(stack: &TestStack, instance: &str, session_id: &str) -> Value {
    rest(
        stack,
        reqwest::Method::GET,
        &format!("{}/{session_id}", sessions_path(instance)),
        None,
    )
    .await
    .expect(200, "get a session")
}

/// Waits until REST shows the session with `status`, and returns it.
pub async fn session_with_status(
    stack: &TestStack,
    instance: &str,
    session_id: &str,
    status: &str,
) -> Value {
    eventually(&format!("session {session_id} is {status}"), || async {
        let session = get_session(stack, instance, session_id).await;
        (session["status"] == status).then_some(session)
    })
    .await
}

// ---- session events -------------------------------------------------------------------------

/// A client of the events stream that keeps what it has read and not yet parsed.
pub struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    pub async fn open(stack: &TestStack, instance: &str) -> Events {
        Self::open_as(stack, instance, &stack.admin_token).await
    }

    /// The stream as `token` (a share link's, say) sees it.
    pub async fn open_as(stack: &TestStack, instance: &str, token: &str) -> Events {
        let response = stack
            .http
            .get(format!(
                "{}/api/v1/instances/{instance}/terminal/events",
                stack.gateway_url
            ))
            .bearer_auth(token)
            .send()
            .await
            .expect("the gateway answers");
        assert_eq!(response.status().as_u16(), 200);
        let content_type = response.headers()[reqwest::header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(content_type, "text/event-stream");
        Events {
            response,
            buffer: String::new(),
        }
    }

    /// The next event's name and JSON data; keep-alive comments are skipped.
    pub async fn next(&mut self) -> (String, Value) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut name = String::from("message");
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(value) = line.strip_prefix("event:") {
                        name = value.trim().to_owned();
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push_str(value.trim_start());
                    }
                }
                if data.is_empty() {
                    continue;
                }
                let data = serde_json::from_str(&data)
                    .unwrap_or_else(|error| panic!("event data is not JSON ({error}): {data}"));
                return (name, data);
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .expect("an event within the patience")
                .expect("the stream reads")
                .expect("the stream stays open");
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// Skips events until one named `name` about `session_id` satisfies `wanted`.
    pub async fn until(
        &mut self,
        name: &str,
        session_id: &str,
        wanted: impl Fn(&Value) -> bool,
    ) -> Value {
        self.until_named(name, |data| data["id"] == session_id && wanted(data))
            .await
    }

    /// Skips events until one named `name` whose data satisfies `wanted`.
    pub async fn until_named(&mut self, name: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        loop {
            let (event, data) = self.next().await;
            if event == name && wanted(&data) {
                return data;
            }
        }
    }
}

// ---- screens ------------------------------------------------------------------------------

/// `GET .../sessions/{session_id}/screen` with `query` (`""` or `"?format=json"` and the like).
pub async fn screen(stack: &TestStack, instance: &str, session_id: &str, query: &str) -> Reply {
    let path = format!("{}/{session_id}/screen{query}", sessions_path(instance));
    rest(stack, reqwest::Method::GET, &path, None).await
}

/// `POST .../sessions/{session_id}/input` with `body`.
pub async fn type_input(stack: &TestStack, instance: &str, session_id: &str, body: Value) -> Reply {
    let path = format!("{}/{session_id}/input", sessions_path(instance));
    rest(stack, reqwest::Method::POST, &path, Some(body)).await
}

/// `POST .../sessions/{session_id}/wait` with `body`.
pub async fn wait_for_screen(
    stack: &TestStack,
    instance: &str,
    session_id: &str,
    body: Value,
) -> Reply {
    let path = format!("{}/{session_id}/wait", sessions_path(instance));
    rest(stack, reqwest::Method::POST, &path, Some(body)).await
}

/// Waits over REST until the screen text matches `pattern` and returns the answer, which must
/// be `matched`.
pub async fn screen_matching(
    stack: &TestStack,
    instance: &str,
    session_id: &str,
    pattern: &str,
) -> Value {
    let answer = wait_for_screen(
        stack,
        instance,
        session_id,
        serde_json::json!({"pattern": pattern}),
    )
    .await
    .expect(200, &format!("wait for {pattern:?}"));
    assert_eq!(answer["outcome"], "matched", "{answer}");
    answer
}

// ---- gRPC on the gateway's port -------------------------------------------------------------

/// session-api's surface as the gateway serves it over plain gRPC (HTTP/2) on its own port.
pub async fn gateway_grpc(stack: &TestStack) -> SessionApiClient<Channel> {
    let channel = Channel::from_shared(stack.gateway_url.clone())
        .expect("gateway url")
        .connect()
        .await
        .expect("an http/2 connection to the gateway");
    SessionApiClient::new(channel)
}

/// `message` with the admin token as its bearer credential.
pub fn as_admin<T>(stack: &TestStack, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {}", stack.admin_token)
            .parse()
            .expect("an ascii token"),
    );
    request
}

/// Watches an instance's session changes through the gateway.
pub async fn watch_sessions(
    stack: &TestStack,
    instance: &str,
) -> tonic::Streaming<session_pb::SessionChange> {
    gateway_grpc(stack)
        .await
        .watch_sessions(as_admin(
            stack,
            session_pb::WatchSessionsRequest {
                instance: instance.to_owned(),
            },
        ))
        .await
        .expect("watch sessions through the gateway")
        .into_inner()
}

/// Reads changes until one of session `session_id` satisfies `wanted`, and returns it.
pub async fn next_change_of(
    changes: &mut tonic::Streaming<session_pb::SessionChange>,
    session_id: &str,
    what: &str,
    wanted: impl Fn(&session_pb::SessionChange, &session_pb::Session) -> bool,
) -> session_pb::Session {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let change = tokio::time::timeout_at(deadline, changes.message())
            .await
            .unwrap_or_else(|_| panic!("no change within {PATIENCE:?}: {what}"))
            .expect("the change stream failed")
            .unwrap_or_else(|| panic!("the change stream ended before: {what}"));
        if let Some(changed) = &change.session
            && changed.id == session_id
            && wanted(&change, changed)
        {
            return changed.clone();
        }
    }
}

// ---- the terminal WebSocket ---------------------------------------------------------------------

/// How the server closed a socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    pub code: u16,
    pub reason: String,
}

/// One frame from the server, as the contract names them.
#[derive(Debug)]
pub enum Frame {
    Output(Vec<u8>),
    Text(Value),
    Closed(Closed),
}

/// A terminal WebSocket client. It keeps every output byte and text frame it read.
#[derive(Debug)]
pub struct Terminal {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    pub output: Vec<u8>,
    pub texts: Vec<Value>,
}

impl Terminal {
    /// Opens `path_and_query` on the gateway with the admin token.
    pub async fn open(stack: &TestStack, path_and_query: &str) -> Terminal {
        Terminal::open_as(stack, path_and_query, &stack.admin_token).await
    }

    /// Opens `path_and_query` on the gateway with `token`.
    pub async fn open_as(stack: &TestStack, path_and_query: &str, token: &str) -> Terminal {
        let url = terminal_url(stack, path_and_query, token);
        let (socket, _) = tokio_tungstenite::connect_async(url.as_str())
            .await
            .unwrap_or_else(|error| panic!("websocket handshake for {path_and_query}: {error}"));
        Terminal::new(socket)
    }

    /// Opens like [`Terminal::open`] on a socket with a small receive buffer, so that a client
    /// that stops reading is soon behind.
    pub async fn open_with_small_receive_buffer(
        stack: &TestStack,
        path_and_query: &str,
    ) -> Terminal {
        let address: SocketAddr = stack
            .gateway_url
            .trim_start_matches("http://")
            .parse()
            .expect("the gateway's socket address");
        let socket = TcpSocket::new_v4().expect("a tcp socket");
        socket
            .set_recv_buffer_size(4096)
            .expect("a small receive buffer");
        let stream = socket
            .connect(address)
            .await
            .expect("connect to the gateway");
        let request = terminal_url(stack, path_and_query, &stack.admin_token)
            .into_client_request()
            .expect("a websocket request");
        let (socket, _) = tokio_tungstenite::client_async(request, MaybeTlsStream::Plain(stream))
            .await
            .unwrap_or_else(|error| panic!("websocket handshake for {path_and_query}: {error}"));
        Terminal::new(socket)
    }

    fn new(socket: WebSocketStream<MaybeTlsStream<TcpStream>>) -> Terminal {
        Terminal {
            socket,
            output: Vec::new(),
            texts: Vec::new(),
        }
    }

    /// The next contract frame (WebSocket pings and pongs are skipped), failing the test at
    /// `deadline`. Output and text frames are also kept.
    pub async fn next_frame(&mut self, deadline: Instant) -> Frame {
        loop {
            let message = tokio::time::timeout_at(deadline, self.socket.next())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "no frame in time; texts so far: {:?}; output so far: {:?}",
                        self.texts,
                        self.output_tail()
                    )
                });
            let message = match message {
                None => panic!("the socket ended without a close frame"),
                Some(Err(error)) => panic!("websocket error: {error}"),
                Some(Ok(message)) => message,
            };
            match message {
                Message::Binary(data) => {
                    self.output.extend_from_slice(&data);
                    return Frame::Output(data.to_vec());
                }
                Message::Text(text) => {
                    let value: Value = serde_json::from_str(text.as_str())
                        .unwrap_or_else(|_| panic!("a text frame that is not JSON: {text}"));
                    self.texts.push(value.clone());
                    return Frame::Text(value);
                }
                Message::Close(frame) => {
                    let CloseFrame { code, reason } = frame.expect("a close frame with a code");
                    return Frame::Closed(Closed {
                        code: code.into(),
                        reason: reason.to_string(),
                    });
                }
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
            }
        }
    }

    /// Reads the first frame, which must be `status connected`, and returns it.
    pub async fn connected(&mut self) -> Value {
        match self.next_frame(Instant::now() + PATIENCE).await {
            Frame::Text(value) if value["type"] == "status" && value["status"] == "connected" => {
                value
            }
            other => panic!("the first frame is not status connected: {other:?}"),
        }
    }

    /// Sends input bytes as a binary frame.
    pub async fn send_input(&mut self, text: &str) {
        self.socket
            .send(Message::Binary(text.as_bytes().to_vec().into()))
            .await
            .expect("send input");
    }

    /// Sends a close frame and goes, without waiting for the server's answer or anything else.
    pub async fn close_at_once(mut self) {
        let _ = self.socket.send(Message::Close(None)).await;
    }

    /// Ends the connection without a close frame: what was sent is flushed and the TCP
    /// connection shut down at once.
    pub async fn hang_up_at_once(mut self) {
        let _ = self.socket.flush().await;
        let _ = tokio::io::AsyncWriteExt::shutdown(self.socket.get_mut()).await;
    }

    /// Sends one JSON text frame.
    pub async fn send_json(&mut self, value: Value) {
        self.socket
            .send(Message::Text(value.to_string().into()))
            .await
            .expect("send a text frame");
    }

    /// Reads until the output from byte `from` on contains `needle`; fails on a close.
    pub async fn read_until_output_from(&mut self, from: usize, needle: &str) {
        let deadline = Instant::now() + PATIENCE;
        while !contains(
            &self.output[from.min(self.output.len())..],
            needle.as_bytes(),
        ) {
            if let Frame::Closed(closed) = self.next_frame(deadline).await {
                panic!(
                    "closed ({closed:?}) before the output contained {needle:?}; output: {:?}",
                    self.output_tail()
                );
            }
        }
    }

    /// Reads until the output contains `needle`; fails on a close.
    pub async fn read_until_output(&mut self, needle: &str) {
        self.read_until_output_from(0, needle).await;
    }

    /// Reads until a text frame for which `wanted` holds, and returns it; fails on a close.
    pub async fn read_until_text(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            match self.next_frame(deadline).await {
                Frame::Text(value) if wanted(&value) => return value,
                Frame::Closed(closed) => {
                    panic!("closed ({closed:?}) before {what}; texts: {:?}", self.texts)
                }
                _ => {}
            }
        }
    }

    /// Reads until the server closes the socket, keeping what came before.
    pub async fn read_until_closed(&mut self) -> Closed {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Frame::Closed(closed) = self.next_frame(deadline).await {
                return closed;
            }
        }
    }

    /// Sends `command` to the shell and returns the number it prints after `marker=`: the
    /// command must print `<marker>=<digits>;`.
    pub async fn shell_number(&mut self, marker: &str, command: &str) -> u64 {
        let from = self.output.len();
        self.send_input(command).await;
        self.read_number(from, marker).await
    }

    /// Reads until the output from byte `from` on holds `<marker>=<digits>;`, and returns the
    /// number. The terminal's echo of a command line never matches, since there a `$` follows
    /// the marker.
    pub async fn read_number(&mut self, from: usize, marker: &str) -> u64 {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(number) = number_after(&self.output[from..], marker) {
                return number;
            }
            if let Frame::Closed(closed) = self.next_frame(deadline).await {
                panic!("closed ({closed:?}) before {marker}= was printed");
            }
        }
    }

    /// The last bytes of the output, for failure messages.
    pub fn output_tail(&self) -> String {
        let start = self.output.len().saturating_sub(400);
        String::from_utf8_lossy(&self.output[start..]).into_owned()
    }
}

fn terminal_url(stack: &TestStack, path_and_query: &str, token: &str) -> String {
    let separator = if path_and_query.contains('?') {
        '&'
    } else {
        '?'
    };
    format!(
        "{}{path_and_query}{separator}token={token}",
        stack.websocket_url(),
    )
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// The first `<marker>=<digits>;` in `output`.
fn number_after(output: &[u8], marker: &str) -> Option<u64> {
    let text = String::from_utf8_lossy(output);
    let pattern = format!("{marker}=");
    text.match_indices(&pattern).find_map(|(at, _)| {
        let rest = &text[at + pattern.len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let terminated = rest[digits.len()..].starts_with(';');
        (!digits.is_empty() && terminated)
            .then(|| digits.parse().ok())
            .flatten()
    })
}

// ---- attach tickets -------------------------------------------------------------------------

/// Signs an attach ticket as session-api does (`v2.<payload>.<signature>`, both base64url
/// without padding; the payload `<session>.<role>.<expiry seconds>`; the signature Ed25519 over
/// `v2.` and the encoded payload), with the private key `signing_key_pem` (PKCS#8 PEM).
pub fn sign_ticket(
    signing_key_pem: &str,
    session_id: &str,
    role: &str,
    expires_at_seconds: i64,
) -> String {
    let payload = ticket_payload(session_id, role, expires_at_seconds);
    format!(
        "v2.{payload}.{}",
        ticket_signature(signing_key_pem, &payload)
    )
}

/// A ticket like [`sign_ticket`]'s that also names its holder, as session-api signs the tickets
/// it issues: the surface asked on, then the principal in base64url.
pub fn sign_ticket_for(
    signing_key_pem: &str,
    session_id: &str,
    role: &str,
    expires_at_seconds: i64,
    (surface, principal): (&str, &str),
) -> String {
    let payload = base64url(
        format!(
            "{session_id}.{role}.{expires_at_seconds}.{surface}.{}",
            base64url(principal.as_bytes())
        )
        .as_bytes(),
    );
    format!(
        "v2.{payload}.{}",
        ticket_signature(signing_key_pem, &payload)
    )
}

/// The encoded payload of a ticket.
pub fn ticket_payload(session_id: &str, role: &str, expires_at_seconds: i64) -> String {
    base64url(format!("{session_id}.{role}.{expires_at_seconds}").as_bytes())
}

/// The signature part of a ticket whose encoded payload is `payload`, made with the private key
/// `signing_key_pem`: an implementation other than session-api's (jsonwebtoken's), so that the
/// format is checked, not only agreed with itself.
pub fn ticket_signature(signing_key_pem: &str, payload: &str) -> String {
    let key =
        jsonwebtoken::EncodingKey::from_ed_pem(signing_key_pem.as_bytes()).expect("an Ed25519 key");
    // jsonwebtoken's EdDSA signature is exactly base64url(Ed25519(key, message)).
    jsonwebtoken::crypto::sign(
        format!("v2.{payload}").as_bytes(),
        &key,
        jsonwebtoken::Algorithm::EdDSA,
    )
    .expect("an Ed25519 signature")
}

/// A ticket in the format before tickets were signed with session-api's private key: HMAC-SHA256
/// keyed by a secret every broker held (`v1.<payload>.<mac>`), which any broker could make.
pub fn shared_secret_ticket(
    secret: &str,
    session_id: &str,
    role: &str,
    expires_at_seconds: i64,
) -> String {
    let payload = ticket_payload(session_id, role, expires_at_seconds);
    let key = jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()).expect("an hmac key");
    // jsonwebtoken's HS256 signature is exactly base64url(HMAC-SHA256(key, message)).
    let mac = jsonwebtoken::crypto::sign(
        format!("v1.{payload}").as_bytes(),
        &key,
        jsonwebtoken::Algorithm::HS256,
    )
    .expect("an hmac signature");
    format!("v1.{payload}.{mac}")
}

/// Base64url without padding (RFC 4648 §5).
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut encoded = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let group = chunk.iter().enumerate().fold(0u32, |group, (index, byte)| {
            group | u32::from(*byte) << (16 - 8 * index)
        });
        // n input bytes give n + 1 output characters; padding is left out.
        for position in 0..=chunk.len() {
            let index = (group >> (18 - 6 * position)) & 0x3f;
            encoded.push(char::from(ALPHABET[index as usize]));
        }
    }
    encoded
}

#[test]
fn base64url_matches_the_rfc_examples() {
    // RFC 4648 §10, without padding, and a byte that differs between the two alphabets.
    let cases: [(&[u8], &str); 6] = [
        (b"", ""),
        (b"f", "Zg"),
        (b"fo", "Zm8"),
        (b"foo", "Zm9v"),
        (b"foobar", "Zm9vYmFy"),
        (&[0xfb, 0xff], "-_8"),
    ];
    for (bytes, expected) in cases {
        assert_eq!(base64url(bytes), expected);
    }
}

#[test]
fn shell_numbers_are_read_from_the_output_not_from_the_echo() {
    assert_eq!(
        number_after(b"echo pid=$$;\r\npid=4242;\r\n$ ", "pid"),
        Some(4242)
    );
    assert_eq!(number_after(b"echo pid=$$;\r\npid=42", "pid"), None);
}
