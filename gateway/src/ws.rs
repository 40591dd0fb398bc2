//! The terminal WebSocket: checks the origin and the credential, resolves the session through
//! session-api, and bridges the socket to one broker `Attach` stream with one task per
//! direction, heartbeats, output batching and the contract's frames and close codes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use ptyhub_wire::limits::MAX_FRAME_BYTES;
use ptyhub_wire::{ErrorCode, Role, TerminalSize, close_code};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use utoipa::IntoParams;

use crate::auth::{
    WEBSOCKET_PROTOCOL, WEBSOCKET_TOKEN_PROTOCOL_PREFIX, bearer_token, websocket_protocol_token,
};
use crate::domain::{SessionSelector, SessionStatus, TerminalCommand, TerminalEvent};
use crate::error::{ApiError, ErrorBody};
use crate::grpc::{AttachCommands, AttachEvents};
use crate::metrics::Metrics;
use crate::rest::{InstancePath, SessionPath};
use crate::state::AppState;

/// Output that piled up while the client was busy is coalesced into frames of at most about
/// this size; what is there is always sent at once.
const OUTPUT_BATCH_BYTES: usize = 64 * 1024;

/// The WebSocket's read buffer. tungstenite's default (128 KiB) is zero-filled on the first
/// read, so every socket would keep 128 KiB resident for keystrokes of a few bytes; a larger
/// frame (a paste) still arrives whole, the buffer grows for it.
const READ_BUFFER_BYTES: usize = 8 * 1024;

/// How long a closing socket may take to answer our close frame before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// How many frames the reader may queue for the writer (error answers, close requests).
const CONTROL_QUEUE: usize = 16;

/// The query parameters of a terminal WebSocket.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TerminalQuery {
    /// The browser tab's id: opens (or creates) the session with alias `client:<client_id>`.
    pub client_id: Option<String>,
    /// Opens the live session with this alias; 4004 when there is none.
    pub alias: Option<String>,
    /// Columns, with `rows`: the size of a session this open creates, applied on attach.
    pub cols: Option<String>,
    /// Rows, with `cols`.
    pub rows: Option<String>,
    /// Resume from this output offset.
    pub since: Option<String>,
    /// `view` attaches read-only.
    pub mode: Option<String>,
    /// The credential, for browsers.
    pub token: Option<String>,
}

/// The `default` session (created when absent), the tab's own session with `?client_id=`, or an
/// aliased one with `?alias=`.
#[utoipa::path(
    get, path = "/ws/tool-instances/{iid}/terminal", tag = "websocket",
    params(InstancePath, TerminalQuery),
    responses(
        (status = 101, description = "WebSocket; see CONTRACT.md for frames and close codes"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "origin not allowed"),
        (status = 426, body = ErrorBody),
    ),
)]
pub async fn open_instance_terminal(
    State(state): State<AppState>,
    Path(path): Path<InstancePath>,
    Query(query): Query<TerminalQuery>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    open_terminal(state, path.iid, None, query, headers, upgrade).await
}

/// One session by id; 4004 when unknown or closed.
#[utoipa::path(
    get, path = "/ws/tool-instances/{iid}/terminal/{sid}", tag = "websocket",
    params(SessionPath, TerminalQuery),
    responses(
        (status = 101, description = "WebSocket; see CONTRACT.md for frames and close codes"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "origin not allowed"),
        (status = 426, body = ErrorBody),
    ),
)]
pub async fn open_session_terminal(
    State(state): State<AppState>,
    Path(path): Path<SessionPath>,
    Query(query): Query<TerminalQuery>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    open_terminal(state, path.iid, Some(path.sid), query, headers, upgrade).await
}

async fn open_terminal(
    state: AppState,
    instance_reference: String,
    session_id: Option<String>,
    query: TerminalQuery,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    if let Err(error) = check_origin(&state.allowed_origins, &headers) {
        return error.into_response();
    }
    let credential = query
        .token
        .clone()
        .or_else(|| websocket_protocol_token(&headers))
        .or_else(|| bearer_token(&headers).map(str::to_owned));
    let Ok(upgrade) = upgrade else {
        // A plain HTTP request: say what is wrong with it without creating anything.
        if let Err(error) = state.authenticator.authenticate(credential.as_deref()) {
            return ApiError::from(error).into_response();
        }
        return (
            StatusCode::UPGRADE_REQUIRED,
            Json(ErrorBody {
                detail: "this route needs a websocket upgrade".into(),
            }),
        )
            .into_response();
    };
    let prepared = prepare_attach(
        &state,
        credential.as_deref(),
        &instance_reference,
        session_id,
        &query,
    )
    .await;
    let bridges = state.bridges.clone();
    select_protocol(upgrade, &headers)
        .read_buffer_size(READ_BUFFER_BYTES)
        .max_message_size(MAX_FRAME_BYTES)
        .max_frame_size(MAX_FRAME_BYTES)
        .on_upgrade(move |socket| {
            bridges.track_future(async move {
                match prepared {
                    Ok(prepared) => bridge_terminal(state, socket, prepared).await,
                    Err(error) => {
                        tracing::info!(instance = %instance_reference, code = error.websocket_close_code(), reason = %error.message, "terminal websocket refused");
                        refuse(socket, &error).await;
                    }
                }
            })
        })
}

/// Echoes `ptyhub` when offered, else the `bearer.` entry (a browser fails the handshake when
/// it offered protocols and none is selected).
fn select_protocol(upgrade: WebSocketUpgrade, headers: &HeaderMap) -> WebSocketUpgrade {
    let offered: Vec<String> = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|protocol| protocol.trim().to_owned())
        .collect();
    if offered
        .iter()
        .any(|protocol| protocol == WEBSOCKET_PROTOCOL)
    {
        return upgrade.protocols([WEBSOCKET_PROTOCOL]);
    }
    match offered
        .into_iter()
        .find(|protocol| protocol.starts_with(WEBSOCKET_TOKEN_PROTOCOL_PREFIX))
    {
        Some(protocol) => upgrade.protocols([protocol]),
        None => upgrade,
    }
}

/// Refuses a browser origin that is not allowed. Requests without `Origin` come from programs,
/// not browsers, and cannot be forged cross-site, so they pass.
pub fn check_origin(allowed_origins: &[String], headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    if origin_allowed(allowed_origins, origin, headers.get(header::HOST)) {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::OriginRefused,
            "origin not allowed",
        ))
    }
}

/// Whether `origin` is on the list, or (with an empty list) is the gateway's own origin.
pub fn origin_allowed(
    allowed_origins: &[String],
    origin: &HeaderValue,
    host: Option<&HeaderValue>,
) -> bool {
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    let origin = origin.trim_end_matches('/');
    if allowed_origins.is_empty() {
        let Some(host) = host.and_then(|host| host.to_str().ok()) else {
            return false;
        };
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        return authority.is_some_and(|authority| authority.eq_ignore_ascii_case(host));
    }
    allowed_origins
        .iter()
        .any(|allowed| allowed == "*" || allowed.trim_end_matches('/').eq_ignore_ascii_case(origin))
}

/// A session resolved and authorised, ready to attach.
#[derive(Debug)]
struct PreparedAttach {
    instance_id: String,
    session_id: String,
    session_name: String,
    attach: crate::domain::AttachTarget,
    role: Role,
    size: Option<TerminalSize>,
    since: Option<u64>,
}

async fn prepare_attach(
    state: &AppState,
    credential: Option<&str>,
    instance_reference: &str,
    session_id: Option<String>,
    query: &TerminalQuery,
) -> Result<PreparedAttach, ApiError> {
    let principal = state.authenticator.authenticate(credential)?;
    let cols = parse_number::<u32>("cols", query.cols.as_deref())?;
    let rows = parse_number::<u32>("rows", query.rows.as_deref())?;
    let size = TerminalSize::from_optional(cols, rows)
        .map_err(|error| ApiError::bad_request(error.to_string()))?;
    let since = parse_number::<u64>("since", query.since.as_deref())?;
    let role = match query.mode.as_deref() {
        None | Some("") => Role::Controller,
        Some("view") => Role::Viewer,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown mode {other:?}, expected \"view\""
            )));
        }
    };
    let (selector, create_if_absent) = match (session_id, &query.client_id, &query.alias) {
        (Some(session_id), _, _) => {
            if uuid::Uuid::parse_str(&session_id).is_err() {
                return Err(ApiError::not_found("session not found"));
            }
            (SessionSelector::Id(session_id), false)
        }
        (None, Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "use either client_id or alias, not both",
            ));
        }
        (None, Some(client_id), None) => (SessionSelector::ClientId(client_id.clone()), true),
        (None, None, Some(alias)) => (SessionSelector::Alias(alias.clone()), false),
        (None, None, None) => (SessionSelector::Default, true),
    };
    let instance = state
        .authorize_instance(&principal, instance_reference, None)
        .await?;
    let resolved = state
        .upstreams
        .resolve_session(&instance.id, selector, create_if_absent, size, role)
        .await
        .map_err(|error| match error.code {
            // session-api refuses a session id it will not attach to (closed, another
            // instance's) as a failed precondition; for the client that is "not found".
            ErrorCode::WrongState | ErrorCode::AlreadyExists if !create_if_absent => {
                ApiError::not_found(error.message)
            }
            _ => error,
        })?;
    let session = resolved.session;
    if session.instance_id != instance.id || session.status == SessionStatus::Closed {
        return Err(ApiError::not_found("session not found or closed"));
    }
    Ok(PreparedAttach {
        instance_id: instance.id,
        session_id: session.id,
        session_name: session.name,
        attach: resolved.attach,
        role,
        size,
        since,
    })
}

fn parse_number<T: std::str::FromStr>(
    name: &str,
    value: Option<&str>,
) -> Result<Option<T>, ApiError> {
    match value {
        None | Some("") => Ok(None),
        Some(value) => value
            .parse()
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("{name} must be a non-negative integer"))),
    }
}

/// Closes a just-upgraded socket with the error's close code.
async fn refuse(mut socket: WebSocket, error: &ApiError) {
    let _ = socket
        .send(close_message(error.websocket_close_code(), &error.message))
        .await;
    // Wait briefly for the client's close answer so our frame is not lost to a reset.
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        while let Some(Ok(_)) = socket.recv().await {}
    })
    .await;
}

fn close_message(code: u16, reason: &str) -> Message {
    // A close reason is limited to 123 bytes.
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    Message::Close(Some(CloseFrame {
        code,
        reason: Utf8Bytes::from(&reason[..end]),
    }))
}

/// Runs one terminal WebSocket to its end.
async fn bridge_terminal(state: AppState, socket: WebSocket, prepared: PreparedAttach) {
    let span = tracing::info_span!(
        "terminal",
        instance_id = %prepared.instance_id,
        session_id = %prepared.session_id,
        role = prepared.role.as_str(),
    );
    async move {
        let _websocket_gauge = state.metrics.websocket_opened(prepared.since.is_some());
        tracing::info!(
            resume = prepared.since.is_some(),
            "terminal websocket opened"
        );
        let attached = state
            .upstreams
            .attach(&prepared.attach, prepared.size, prepared.since)
            .await;
        let (mut events, commands) = match attached {
            Ok(attached) => attached,
            Err(error) => {
                tracing::warn!(error = %error, "attach failed");
                return refuse(socket, &error).await;
            }
        };
        let _attach_gauge = state.metrics.attach_stream_opened();
        // The broker's first frame says where the stream starts; nothing is sent before it.
        let first = tokio::time::timeout(Duration::from_secs(30), events.next()).await;
        let connected = match first {
            Ok(Ok(Some(connected @ TerminalEvent::Connected { .. }))) => connected,
            Ok(Ok(Some(other))) => {
                tracing::warn!(?other, "broker answered an attach without connected");
                let error = ApiError::internal("broker answered without connected");
                return refuse(socket, &error).await;
            }
            Ok(Ok(None)) => {
                let error = ApiError::not_found("session not found or closed");
                return refuse(socket, &error).await;
            }
            Ok(Err(error)) => {
                tracing::info!(error = %error, "broker refused the attach");
                return refuse(socket, &error).await;
            }
            Err(_) => {
                let error = ApiError::unavailable("broker did not answer the attach");
                return refuse(socket, &error).await;
            }
        };
        let (sink, stream) = socket.split();
        let heard = Heard::new();
        let closing = Arc::new(AtomicBool::new(false));
        let (control, control_receiver) = mpsc::channel(CONTROL_QUEUE);
        let reader_cancel = state.shutdown.child_token();
        // Whatever way this function ends, the reader ends with it.
        let _reader_guard = reader_cancel.clone().drop_guard();
        let mut reader = tokio::spawn(
            forward_client_frames(ClientReader {
                stream,
                commands,
                control,
                role: prepared.role,
                heard: heard.clone(),
                closing: closing.clone(),
                cancel: reader_cancel,
                metrics: state.metrics.clone(),
            })
            .in_current_span(),
        );
        let writer = BrokerWriter {
            client: ClientSink {
                sink,
                send_timeout: state.heartbeat_interval * 2,
                metrics: state.metrics.clone(),
            },
            session_id: prepared.session_id,
            session_name: prepared.session_name,
            heartbeat_interval: state.heartbeat_interval,
            heard,
            closing: closing.clone(),
            shutdown: state.shutdown.clone(),
        };
        let ending = writer.run(connected, events, control_receiver).await;
        closing.store(true, Ordering::Release);
        if ending.await_client_close {
            // Give the client time to read our last frames and answer the close.
            let _ = tokio::time::timeout(CLOSE_GRACE, &mut reader).await;
        }
        reader.abort();
        tracing::info!(reason = ending.reason, "terminal websocket closed");
    }
    .instrument(span)
    .await;
}

/// When the client was last heard from (any frame), in milliseconds since `start`.
#[derive(Debug, Clone)]
struct Heard {
    start: Instant,
    last_millis: Arc<AtomicU64>,
}

impl Heard {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            last_millis: Arc::new(AtomicU64::new(0)),
        }
    }

    fn now(&self) {
        let millis = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_millis.store(millis, Ordering::Relaxed);
    }

    fn silent_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_millis.load(Ordering::Relaxed));
        self.start.elapsed().saturating_sub(last)
    }
}

/// What the reader asks of the writer, which owns the socket's sending half.
#[derive(Debug)]
enum Control {
    /// Answer a refused frame with `{"type":"error"}`.
    Error(String),
    /// Close the socket with this code.
    Close(u16, &'static str),
}

/// Client → broker: WebSocket frames become `Attach` client frames.
struct ClientReader {
    stream: SplitStream<WebSocket>,
    commands: AttachCommands,
    control: mpsc::Sender<Control>,
    role: Role,
    heard: Heard,
    /// Set once the writer is closing: frames are then read (to finish the close handshake)
    /// but no longer applied.
    closing: Arc<AtomicBool>,
    cancel: CancellationToken,
    metrics: Metrics,
}

async fn forward_client_frames(mut reader: ClientReader) {
    loop {
        let message = tokio::select! {
            () = reader.cancel.cancelled() => return,
            message = reader.stream.next() => message,
        };
        let message = match message {
            None => return,
            Some(Ok(message)) => message,
            Some(Err(error)) => {
                if is_oversized(error) {
                    tracing::info!("client sent a frame over 1 MiB");
                    let _ = reader
                        .control
                        .send(Control::Close(
                            close_code::TOO_BIG,
                            "frame larger than 1 MiB",
                        ))
                        .await;
                }
                return;
            }
        };
        reader.heard.now();
        if reader.closing.load(Ordering::Acquire) {
            continue;
        }
        let command = match message {
            Message::Binary(data) => Ok(Some(TerminalCommand::Input(data))),
            Message::Text(text) => parse_client_message(text.as_str()),
            Message::Ping(_) | Message::Pong(_) | Message::Close(_) => Ok(None),
        };
        let command = match command {
            Ok(Some(command)) => command,
            Ok(None) => continue,
            Err(message) => {
                if reader.control.send(Control::Error(message)).await.is_err() {
                    return;
                }
                continue;
            }
        };
        if reader.role == Role::Viewer {
            let refusal = match command {
                TerminalCommand::Input(_) => "viewers cannot send input",
                TerminalCommand::Resize(_) => "viewers cannot resize",
                TerminalCommand::Reset => "viewers cannot reset",
            };
            if reader
                .control
                .send(Control::Error(refusal.into()))
                .await
                .is_err()
            {
                return;
            }
            continue;
        }
        if let TerminalCommand::Input(data) = &command {
            if data.is_empty() {
                continue;
            }
            reader.metrics.bytes_from_client(data.len());
        }
        if reader.commands.send(command).await.is_err() {
            return;
        }
    }
}

/// A JSON frame from the client.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum ClientMessage {
    Input { data: String },
    Resize { cols: u32, rows: u32 },
    Reset,
    Pong,
}

/// Parses a text frame; `Ok(None)` for frames that only prove the client is alive.
fn parse_client_message(text: &str) -> Result<Option<TerminalCommand>, String> {
    let message: ClientMessage =
        serde_json::from_str(text).map_err(|error| format!("invalid message: {error}"))?;
    Ok(match message {
        ClientMessage::Input { data } => Some(TerminalCommand::Input(Bytes::from(data))),
        ClientMessage::Resize { cols, rows } => Some(TerminalCommand::Resize(
            TerminalSize::new(cols, rows).map_err(|error| error.to_string())?,
        )),
        ClientMessage::Reset => Some(TerminalCommand::Reset),
        ClientMessage::Pong => None,
    })
}

fn is_oversized(error: axum::Error) -> bool {
    error
        .into_inner()
        .downcast_ref::<tungstenite::Error>()
        .is_some_and(|error| matches!(error, tungstenite::Error::Capacity(_)))
}

/// The sending half of the socket, with a deadline on every send: a client that accepts
/// nothing for two heartbeat intervals is gone.
struct ClientSink {
    sink: SplitSink<WebSocket, Message>,
    send_timeout: Duration,
    metrics: Metrics,
}

/// The client stopped accepting frames.
#[derive(Debug)]
struct ClientGone;

impl ClientSink {
    async fn send(&mut self, message: Message) -> Result<(), ClientGone> {
        match tokio::time::timeout(self.send_timeout, self.sink.send(message)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) | Err(_) => Err(ClientGone),
        }
    }

    async fn send_json(&mut self, value: serde_json::Value) -> Result<(), ClientGone> {
        self.send(Message::Text(value.to_string().into())).await
    }

    async fn send_output(&mut self, data: Bytes) -> Result<(), ClientGone> {
        self.metrics.bytes_to_client(data.len());
        self.send(Message::Binary(data)).await
    }

    async fn close(&mut self, code: u16, reason: &str) -> Result<(), ClientGone> {
        self.send(close_message(code, reason)).await
    }
}

/// Broker → client: `Attach` server frames become WebSocket frames; also heartbeats.
struct BrokerWriter {
    client: ClientSink,
    session_id: String,
    session_name: String,
    heartbeat_interval: Duration,
    heard: Heard,
    /// Set before the last frames go out, so input the client sends meanwhile is not applied.
    closing: Arc<AtomicBool>,
    shutdown: CancellationToken,
}

/// How a bridge ended.
#[derive(Debug)]
struct Ending {
    reason: &'static str,
    /// We sent a close frame and should let the client answer it.
    await_client_close: bool,
}

impl Ending {
    fn closed(reason: &'static str) -> Self {
        Self {
            reason,
            await_client_close: true,
        }
    }

    fn client_gone(reason: &'static str) -> Self {
        Self {
            reason,
            await_client_close: false,
        }
    }
}

/// What to do after an event.
enum Flow {
    Continue,
    Stop(Ending),
}

impl BrokerWriter {
    async fn run(
        mut self,
        connected: TerminalEvent,
        mut events: AttachEvents,
        mut control: mpsc::Receiver<Control>,
    ) -> Ending {
        if let Flow::Stop(ending) = self.forward_event(connected).await {
            return ending;
        }
        let start = tokio::time::Instant::now() + self.heartbeat_interval;
        let mut heartbeat = tokio::time::interval_at(start, self.heartbeat_interval);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // An event read while batching output that is not output itself, handled next.
        let mut pending: Option<Result<Option<TerminalEvent>, ApiError>> = None;
        loop {
            let next = match pending.take() {
                Some(next) => next,
                None => tokio::select! {
                    biased;
                    () = self.shutdown.cancelled() => {
                        let _ = self.client.close(close_code::SERVICE_RESTART, "gateway shutting down").await;
                        return Ending::closed("gateway shutdown");
                    }
                    request = control.recv() => match request {
                        None => return Ending::client_gone("client left"),
                        Some(Control::Error(message)) => {
                            if self.client.send_json(json!({"type": "error", "message": message})).await.is_err() {
                                return Ending::client_gone("client stopped reading");
                            }
                            continue;
                        }
                        Some(Control::Close(code, reason)) => {
                            let _ = self.client.close(code, reason).await;
                            return Ending::closed(reason);
                        }
                    },
                    _ = heartbeat.tick() => {
                        if self.heard.silent_for() >= self.heartbeat_interval * 2 {
                            let _ = self.client.close(close_code::BACKEND_FAILURE, "heartbeat timeout").await;
                            return Ending::client_gone("client silent for two heartbeat intervals");
                        }
                        let ping = self.client.send_json(json!({"type": "ping"})).await;
                        if ping.is_err() || self.client.send(Message::Ping(Bytes::new())).await.is_err() {
                            return Ending::client_gone("client stopped reading");
                        }
                        continue;
                    }
                    next = events.next() => next,
                },
            };
            let flow = match next {
                Ok(Some(TerminalEvent::Output { data, .. })) => {
                    let (batch, after) = collect_output(data, &mut events);
                    pending = after;
                    match self.client.send_output(batch).await {
                        Ok(()) => Flow::Continue,
                        Err(ClientGone) => {
                            Flow::Stop(Ending::client_gone("client stopped reading"))
                        }
                    }
                }
                Ok(Some(event)) => self.forward_event(event).await,
                Ok(None) => {
                    let _ = self
                        .client
                        .close(close_code::BACKEND_FAILURE, "broker ended the stream")
                        .await;
                    Flow::Stop(Ending::closed("broker ended the stream"))
                }
                Err(error) => {
                    tracing::warn!(error = %error, "attach stream failed");
                    let code = match error.code {
                        ErrorCode::NotFound => close_code::NOT_FOUND,
                        _ => close_code::BACKEND_FAILURE,
                    };
                    let _ = self.client.close(code, &error.message).await;
                    Flow::Stop(Ending::closed("attach stream failed"))
                }
            };
            if let Flow::Stop(ending) = flow {
                return ending;
            }
        }
    }

    /// Forwards one non-output event.
    async fn forward_event(&mut self, event: TerminalEvent) -> Flow {
        let sent = match event {
            TerminalEvent::Connected { offset, size, role } => {
                let size = size.unwrap_or_default();
                self.client
                    .send_json(json!({
                        "type": "status",
                        "status": "connected",
                        "session": {"id": self.session_id, "name": self.session_name},
                        "role": role.as_str(),
                        "offset": offset,
                        "cols": size.cols(),
                        "rows": size.rows(),
                    }))
                    .await
            }
            TerminalEvent::Output { data, .. } => self.client.send_output(data).await,
            TerminalEvent::Gap { lost, .. } => {
                self.client
                    .send_json(json!({"type": "gap", "lost": lost}))
                    .await
            }
            TerminalEvent::Resize(size) => {
                self.client
                    .send_json(json!({"type": "resize", "cols": size.cols(), "rows": size.rows()}))
                    .await
            }
            TerminalEvent::Resetting => {
                self.client
                    .send_json(json!({"type": "status", "status": "resetting"}))
                    .await
            }
            TerminalEvent::Error { message } => {
                self.client
                    .send_json(json!({"type": "error", "message": message}))
                    .await
            }
            TerminalEvent::TakenOver => {
                self.closing.store(true, Ordering::Release);
                tracing::info!("controller taken over");
                let _ = self
                    .client
                    .send_json(json!({"type": "session_detached", "reason": "taken_over"}))
                    .await;
                let _ = self
                    .client
                    .close(close_code::TAKEN_OVER, "taken over")
                    .await;
                return Flow::Stop(Ending::closed("taken over"));
            }
            TerminalEvent::Exit(exit) => {
                self.closing.store(true, Ordering::Release);
                tracing::info!(code = exit.code, signal = exit.signal, "session exited");
                let _ = self
                    .client
                    .send_json(json!({"type": "exit", "code": exit.code, "signal": exit.signal}))
                    .await;
                let _ = self
                    .client
                    .close(close_code::NORMAL, "session exited")
                    .await;
                return Flow::Stop(Ending::closed("session exited"));
            }
            TerminalEvent::Closed => {
                self.closing.store(true, Ordering::Release);
                let _ = self
                    .client
                    .close(close_code::NORMAL, "session closed")
                    .await;
                return Flow::Stop(Ending::closed("session closed"));
            }
        };
        match sent {
            Ok(()) => Flow::Continue,
            Err(ClientGone) => Flow::Stop(Ending::client_gone("client stopped reading")),
        }
    }
}

/// Takes the output chunks that are already here, up to [`OUTPUT_BATCH_BYTES`], without
/// waiting for more. Returns the batch and the first non-output event read, if any.
fn collect_output(
    first: Bytes,
    events: &mut AttachEvents,
) -> (Bytes, Option<Result<Option<TerminalEvent>, ApiError>>) {
    if first.len() >= OUTPUT_BATCH_BYTES {
        return (first, None);
    }
    // The common case (an echo, a prompt): nothing else is waiting, and the chunk goes out as it
    // came, with no allocation.
    let second = match events.next_ready() {
        None => return (first, None),
        Some(Ok(Some(TerminalEvent::Output { data, .. }))) => data,
        Some(other) => return (first, Some(other)),
    };
    let mut batch =
        bytes::BytesMut::with_capacity(OUTPUT_BATCH_BYTES.max(first.len() + second.len()));
    batch.extend_from_slice(&first);
    batch.extend_from_slice(&second);
    let mut after = None;
    while batch.len() < OUTPUT_BATCH_BYTES {
        match events.next_ready() {
            None => break,
            Some(Ok(Some(TerminalEvent::Output { data, .. }))) => batch.extend_from_slice(&data),
            Some(other) => {
                after = Some(other);
                break;
            }
        }
    }
    (batch.freeze(), after)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(origin: &str, host: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ORIGIN, origin.parse().unwrap());
        headers.insert(header::HOST, host.parse().unwrap());
        headers
    }

    #[test]
    fn same_origin_is_the_default() {
        assert!(check_origin(&[], &headers("http://127.0.0.1:8080", "127.0.0.1:8080")).is_ok());
        assert!(check_origin(&[], &headers("http://evil.example", "127.0.0.1:8080")).is_err());
        assert!(check_origin(&[], &HeaderMap::new()).is_ok());
    }

    #[test]
    fn allow_list_is_exact() {
        let allowed = vec!["https://app.example.com".to_owned()];
        assert!(check_origin(&allowed, &headers("https://app.example.com", "gw:1")).is_ok());
        assert!(check_origin(&allowed, &headers("https://app.example.com.evil", "gw:1")).is_err());
        assert!(check_origin(&["*".into()], &headers("https://any.example", "gw:1")).is_ok());
    }

    #[test]
    fn client_messages_parse_or_explain() {
        assert_eq!(
            parse_client_message(r#"{"type":"input","data":"ls\n"}"#).unwrap(),
            Some(TerminalCommand::Input(Bytes::from_static(b"ls\n")))
        );
        assert_eq!(
            parse_client_message(r#"{"type":"resize","cols":100,"rows":40}"#).unwrap(),
            Some(TerminalCommand::Resize(TerminalSize::new(100, 40).unwrap()))
        );
        assert_eq!(parse_client_message(r#"{"type":"pong"}"#).unwrap(), None);
        assert!(parse_client_message(r#"{"type":"resize","cols":0,"rows":40}"#).is_err());
        assert!(parse_client_message(r#"{"type":"dance"}"#).is_err());
        assert!(parse_client_message("not json").is_err());
    }

    #[test]
    fn close_reasons_fit_the_limit() {
        let Message::Close(Some(frame)) = close_message(1011, &"é".repeat(100)) else {
            panic!("not a close frame");
        };
        assert!(frame.reason.as_str().len() <= 123);
    }
}
