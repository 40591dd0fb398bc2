//! One terminal WebSocket bridged to one broker `Attach` stream, with one task per direction:
//! the reader turns client frames into `Attach` commands ([`forward_client_frames`]), the writer
//! turns `Attach` events into WebSocket frames and sends the heartbeats ([`BrokerWriter::run`]).
//! The writer owns the socket's sending half; the reader asks it for error answers and closes
//! through a small control queue.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::extract::ws::{Message, WebSocket};
use bytes::Bytes;
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use ptyhub_wire::{ErrorCode, Role, close_code};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

use super::PreparedAttach;
use super::frames::{
    DetachReason, ServerFrame, SessionName, StreamStatus, close_message, parse_client_frame,
};
use crate::audit::{StreamAudit, StreamResets, detach_reason};
use crate::domain::{TerminalCommand, TerminalEvent};
use crate::error::ApiError;
use crate::grpc::{AttachCommands, AttachEvents};
use crate::metrics::Metrics;
use crate::state::{AppState, credential_expired};

/// Output that piled up while the client was busy is coalesced into frames of at most about
/// this size; what is there is always sent at once.
const OUTPUT_BATCH_BYTES: usize = 64 * 1024;

/// How long a closing socket may take to answer our close frame before it is dropped.
pub(super) const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// How long the broker may take to answer an attach with its first frame.
const ATTACH_ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// How many frames the reader may queue for the writer (error answers, close requests).
const CONTROL_QUEUE: usize = 16;

/// Closes a just-upgraded socket with the error's close code.
pub(super) async fn refuse(mut socket: WebSocket, error: &ApiError) {
    let _ = socket
        .send(close_message(error.websocket_close_code(), &error.message))
        .await;
    // Wait briefly for the client's close answer so our frame is not lost to a reset.
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        while let Some(Ok(_)) = socket.recv().await {}
    })
    .await;
}

/// Runs one terminal WebSocket to its end: attaches to the broker, waits for its `connected`,
/// then runs the two directions until either ends.
pub(super) async fn bridge_terminal(state: AppState, socket: WebSocket, prepared: PreparedAttach) {
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
            snapshot = prepared.snapshot,
            "terminal websocket opened"
        );
        // What is awaited once on the way in (the attach, its answer, a refusal) is boxed: a
        // socket's task is one allocation the size of its largest state, kept for as long as
        // the socket lives, and the attach's states would otherwise be part of it.
        let attached = Box::pin(prepared.upstreams.attach(
            &prepared.attach,
            prepared.size,
            prepared.since,
            prepared.snapshot,
        ))
        .await;
        let (mut events, commands) = match attached {
            Ok(attached) => attached,
            Err(error) => {
                tracing::warn!(error = %error, "attach failed");
                return Box::pin(refuse(socket, &error)).await;
            }
        };
        let _attach_gauge = state.metrics.attach_stream_opened();
        // The broker's first frame says where the stream starts; nothing is sent before it.
        let connected = match Box::pin(first_event(&mut events)).await {
            Ok(connected) => connected,
            Err(error) => return Box::pin(refuse(socket, &error)).await,
        };
        let mut audit = StreamAudit::attached(
            prepared.upstreams.clone(),
            &prepared.instance_id,
            &prepared.session_id,
            prepared.role,
        );
        let (sink, stream) = socket.split();
        let heard = Heard::new();
        let closing = Arc::new(AtomicBool::new(false));
        let (control, control_receiver) = mpsc::channel(CONTROL_QUEUE);
        // Whatever way this function ends, the reader task ends with it.
        let mut reader = AbortOnDropHandle::new(tokio::spawn(
            forward_client_frames(ClientReader {
                stream,
                commands,
                control,
                role: prepared.role,
                heard: heard.clone(),
                closing: closing.clone(),
                cancel: state.shutdown.child_token(),
                metrics: state.metrics.clone(),
                resets: audit.resets(),
            })
            .in_current_span(),
        ));
        let writer = BrokerWriter {
            client: ClientSink {
                sink,
                send_timeout: state.heartbeat_interval * 2,
                metrics: state.metrics.clone(),
            },
            state: state.clone(),
            instance_id: prepared.instance_id,
            session_id: prepared.session_id,
            session_name: prepared.session_name,
            connected_before: false,
            heartbeat_interval: state.heartbeat_interval,
            heard,
            closing: closing.clone(),
            shutdown: state.shutdown.clone(),
            expires_at: prepared.expires_at,
        };
        let ending = writer.run(connected, events, control_receiver).await;
        audit.ending(detach_reason(ending.reason));
        closing.store(true, Ordering::Release);
        if ending.await_client_close {
            // Give the client time to read our last frames and answer the close.
            let _ = tokio::time::timeout(CLOSE_GRACE, &mut reader).await;
        }
        tracing::info!(reason = ending.reason, "terminal websocket closed");
    }
    .instrument(span)
    .await;
}

/// The broker's answer to an attach, which must be `connected`; anything else refuses the socket.
async fn first_event(events: &mut AttachEvents) -> Result<TerminalEvent, ApiError> {
    match tokio::time::timeout(ATTACH_ANSWER_TIMEOUT, events.next()).await {
        Ok(Ok(Some(connected @ TerminalEvent::Connected { .. }))) => Ok(connected),
        Ok(Ok(Some(other))) => {
            tracing::warn!(?other, "broker answered an attach without connected");
            Err(ApiError::internal("broker answered without connected"))
        }
        Ok(Ok(None)) => Err(ApiError::not_found("session not found or closed")),
        Ok(Err(error)) => {
            tracing::info!(error = %error, "broker refused the attach");
            Err(error)
        }
        Err(_) => Err(ApiError::unavailable("broker did not answer the attach")),
    }
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
    /// Close the socket with the error's close code.
    Close(ApiError),
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
    resets: StreamResets,
}

/// The reader task: reads the client's frames until the client leaves, the stream ends or the
/// gateway shuts down.
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
                    let too_big =
                        ApiError::new(ErrorCode::LimitExceeded, "frame larger than 1 MiB");
                    let _ = reader.control.send(Control::Close(too_big)).await;
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
            Message::Text(text) => parse_client_frame(text.as_str()),
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
        if matches!(command, TerminalCommand::Reset) {
            reader.resets.reset();
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

    async fn send_frame(&mut self, frame: &ServerFrame<'_>) -> Result<(), ClientGone> {
        self.send(frame.to_message()).await
    }

    async fn send_output(&mut self, data: Bytes) -> Result<(), ClientGone> {
        self.metrics.bytes_to_client(data.len());
        self.send(Message::Binary(data)).await
    }

    async fn close(&mut self, code: u16, reason: &str) -> Result<(), ClientGone> {
        self.send(close_message(code, reason)).await
    }

    /// Closes with the close code the error table gives the error.
    async fn close_with(&mut self, error: &ApiError) -> Result<(), ClientGone> {
        self.close(error.websocket_close_code(), &error.message)
            .await
    }
}

/// Broker → client: `Attach` server frames become WebSocket frames; also heartbeats.
struct BrokerWriter {
    client: ClientSink,
    /// For the session's current name when a reset connects again.
    state: AppState,
    instance_id: String,
    session_id: String,
    session_name: String,
    /// Whether `connected` was sent already: the next one follows a reset.
    connected_before: bool,
    heartbeat_interval: Duration,
    heard: Heard,
    /// Set before the last frames go out, so input the client sends meanwhile is not applied.
    closing: Arc<AtomicBool>,
    shutdown: CancellationToken,
    /// When the credential the socket opened with expires (a JWT's `exp`, a share's end): the
    /// socket ends then with 4001, as a new one would be refused.
    expires_at: Option<u64>,
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
    /// The writer task: sends `connected`, then every event, heartbeat and control request until
    /// the stream, the client or the gateway ends.
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
        let expiry = credential_expired(self.expires_at);
        tokio::pin!(expiry);
        loop {
            let next = match pending.take() {
                Some(next) => next,
                None => tokio::select! {
                    biased;
                    () = self.shutdown.cancelled() => {
                        let _ = self.client.close(close_code::SERVICE_RESTART, "gateway shutting down").await;
                        return Ending::closed("gateway shutdown");
                    }
                    () = &mut expiry => {
                        let _ = self.client.close(close_code::UNAUTHENTICATED, "credential expired").await;
                        return Ending::closed("credential expired");
                    }
                    request = control.recv() => match request {
                        None => return Ending::client_gone("client left"),
                        Some(Control::Error(message)) => {
                            let frame = ServerFrame::Error { message: &message };
                            if self.client.send_frame(&frame).await.is_err() {
                                return Ending::client_gone("client stopped reading");
                            }
                            continue;
                        }
                        Some(Control::Close(error)) => {
                            let _ = self.client.close_with(&error).await;
                            return Ending::closed("client frame refused");
                        }
                    },
                    _ = heartbeat.tick() => {
                        if self.heard.silent_for() >= self.heartbeat_interval * 2 {
                            // The contract's code for a dropped client: reconnect with backoff.
                            let _ = self.client.close(close_code::BACKEND_FAILURE, "heartbeat timeout").await;
                            return Ending::client_gone("client silent for two heartbeat intervals");
                        }
                        let ping = self.client.send_frame(&ServerFrame::Ping).await;
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
                    let ended = ApiError::unavailable("broker ended the stream");
                    let _ = self.client.close_with(&ended).await;
                    Flow::Stop(Ending::closed("broker ended the stream"))
                }
                Err(error) => {
                    tracing::warn!(error = %error, "attach stream failed");
                    let _ = self.client.close_with(&failed_after_attach(error)).await;
                    Flow::Stop(Ending::closed("attach stream failed"))
                }
            };
            if let Flow::Stop(ending) = flow {
                return ending;
            }
        }
    }

    /// The name the session has now: it may have been renamed since the socket opened, and the
    /// `connected` after a reset must not bring the old name back. When session-api does not
    /// answer, the name known so far is sent.
    async fn refresh_session_name(&mut self) {
        match self
            .state
            .upstreams
            .get_session(&self.instance_id, &self.session_id)
            .await
        {
            Ok(session) => self.session_name = session.name,
            Err(error) => {
                tracing::info!(error = %error, "cannot read the session's name after a reset");
            }
        }
    }

    /// Forwards one event other than batched output.
    async fn forward_event(&mut self, event: TerminalEvent) -> Flow {
        let sent = match event {
            TerminalEvent::Connected { offset, size, role } => {
                if self.connected_before {
                    self.refresh_session_name().await;
                }
                self.connected_before = true;
                let session = SessionName {
                    id: &self.session_id,
                    name: &self.session_name,
                };
                let frame = ServerFrame::connected(session, role, offset, size.unwrap_or_default());
                self.client.send_frame(&frame).await
            }
            TerminalEvent::Output { data, .. } => self.client.send_output(data).await,
            TerminalEvent::Gap { lost, .. } => {
                self.client.send_frame(&ServerFrame::Gap { lost }).await
            }
            TerminalEvent::Snapshot { offset, size, data } => {
                // The announcement, then the snapshot's bytes as one binary frame of their own:
                // it arrives as an event apart from output, so `collect_output` never merges it
                // with output, and nothing else is sent between the two.
                let size = size.unwrap_or_default();
                let frame = ServerFrame::Snapshot {
                    offset,
                    cols: size.cols(),
                    rows: size.rows(),
                };
                match self.client.send_frame(&frame).await {
                    Ok(()) => self.client.send_output(data).await,
                    Err(gone) => Err(gone),
                }
            }
            TerminalEvent::Resize(size) => self.client.send_frame(&ServerFrame::resize(size)).await,
            TerminalEvent::Resetting => {
                self.client
                    .send_frame(&ServerFrame::Status(StreamStatus::Resetting))
                    .await
            }
            TerminalEvent::Error { message } => {
                self.client
                    .send_frame(&ServerFrame::Error { message: &message })
                    .await
            }
            TerminalEvent::TakenOver => {
                self.closing.store(true, Ordering::Release);
                tracing::info!("controller taken over");
                let detached = ServerFrame::SessionDetached {
                    reason: DetachReason::TakenOver,
                };
                let _ = self.client.send_frame(&detached).await;
                let _ = self
                    .client
                    .close(close_code::TAKEN_OVER, "taken over")
                    .await;
                return Flow::Stop(Ending::closed("taken over"));
            }
            TerminalEvent::Exit(exit) => {
                self.closing.store(true, Ordering::Release);
                tracing::info!(code = exit.code, signal = exit.signal, "session exited");
                let frame = ServerFrame::Exit {
                    code: exit.code,
                    signal: exit.signal,
                };
                let _ = self.client.send_frame(&frame).await;
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
            TerminalEvent::HandingOver => {
                self.closing.store(true, Ordering::Release);
                let _ = self
                    .client
                    .close(close_code::SERVICE_RESTART, "broker handing over")
                    .await;
                return Flow::Stop(Ending::closed("broker handing over"));
            }
        };
        match sent {
            Ok(()) => Flow::Continue,
            Err(ClientGone) => Flow::Stop(Ending::client_gone("client stopped reading")),
        }
    }
}

/// What an `Attach` stream that failed after `connected` means to the client: its session went
/// away (4004), or a failure to retry with backoff (1011). Codes about the request itself
/// (credential, size, cap) were settled when the broker answered the attach.
fn failed_after_attach(error: ApiError) -> ApiError {
    match error.code {
        ErrorCode::NotFound | ErrorCode::Unavailable => error,
        _ => ApiError::unavailable(error.message),
    }
}

/// Takes the output chunks that are already here, up to [`OUTPUT_BATCH_BYTES`], without
/// waiting for more. Returns the batch and the first non-output event read, if any: a snapshot
/// is such an event, so its bytes are never part of a batch.
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

    #[test]
    fn a_stream_failing_after_attach_closes_4004_or_1011() {
        let cases = [
            (ApiError::not_found("session gone"), close_code::NOT_FOUND),
            (
                ApiError::unavailable("broker down"),
                close_code::BACKEND_FAILURE,
            ),
            (
                ApiError::new(ErrorCode::CapReached, "input frame over the limit"),
                close_code::BACKEND_FAILURE,
            ),
            (ApiError::forbidden("ticket"), close_code::BACKEND_FAILURE),
            (ApiError::internal("bug"), close_code::BACKEND_FAILURE),
        ];
        for (error, close) in cases {
            let message = error.message.clone();
            let mapped = failed_after_attach(error);
            assert_eq!(mapped.websocket_close_code(), close, "{message}");
            assert_eq!(mapped.message, message);
        }
    }
}
