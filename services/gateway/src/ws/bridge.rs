//! One terminal WebSocket bridged to one broker `Attach` stream, in one task ([`Bridge::run`]):
//! it reads the client's frames and queues them as `Attach` commands, turns `Attach` events into
//! WebSocket frames, sends the heartbeats, and goes on reading while a frame it sent waits for
//! the client to take it.
//!
//! One task, not one per direction: a keystroke is read and handed to the `Attach` stream by the
//! task that also drives that stream, so it reaches the broker without waking another task, and
//! a socket costs one task's memory.

use std::pin::Pin;
use std::time::{Duration, Instant};

use axum::extract::ws::{Message, WebSocket};
use bytes::Bytes;
use futures::stream::{SplitSink, SplitStream};
use futures::{FutureExt, SinkExt, StreamExt};
use ptyhub_model::Role;
use ptyhub_wire::{ErrorCode, close_code};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::PreparedAttach;
use super::frames::{
    DetachReason, ServerFrame, SessionName, StreamStatus, close_message, parse_client_frame,
};
use crate::audit::{StreamAudit, detach_reason};
use crate::domain::{TerminalCommand, TerminalEvent};
use crate::error::ApiError;
use crate::grpc::{AttachCommands, AttachEvents};
use crate::metrics::{GaugeGuard, Metrics};
use crate::state::AppState;
use crate::streams::{CredentialEnd, CredentialWatch, StreamSlot};

/// Output that piled up while the client was busy is coalesced into frames of at most about
/// this size; what is there is always sent at once.
const OUTPUT_BATCH_BYTES: usize = 64 * 1024;

/// Output forwarded in a row without waiting for the broker or the client after which the
/// bridge gives its worker up once: the slice the session's reader in the broker gives its
/// worker up after. With the broker in process this task reads the session's ring itself, which
/// a flood read on the other worker can keep full for as long as it lasts; a slice costs the
/// worker tens of microseconds, and a yield a few.
const FLOOD_SLICE_BYTES: usize = 32 * 1024;

/// How long a closing socket may take to answer our close frame before it is dropped.
pub(super) const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// How long the input a client sent before it left may take to be written before the stream to
/// the broker is dropped anyway.
const INPUT_DRAIN: Duration = Duration::from_secs(2);

/// The id of the gateway's own last input on a stream, which writes nothing and is acknowledged
/// once every input before it was written. Clients' ids are never empty, so its receipt is never
/// one of theirs.
const LAST_INPUT_ID: &str = "";

/// How long the broker may take to answer an attach with its first frame.
const ATTACH_ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

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

/// What the checks before the upgrade settled: the session to attach, or the refusal to close
/// the upgraded socket with.
pub(super) struct Opening {
    pub(super) state: AppState,
    pub(super) prepared: Result<PreparedAttach, ApiError>,
    /// The instance as the request named it, for a refusal's log line.
    pub(super) instance_reference: String,
}

/// Runs one terminal WebSocket to its end: attaches to the broker, waits for its `connected`,
/// then bridges the two until either ends.
///
/// A socket's task is one allocation the size of its future's largest state, kept for as long as
/// the socket lives, and every `async` layer keeps what it was given by value for its whole life,
/// moved on or not. So the future has two steps: the opening (the attach, the broker's first
/// answer, a refusal) is boxed and freed once done, and hands over an [`OpenBridge`] that the
/// second step holds once and runs by reference. The opening comes boxed too, so that the
/// upgrade's own future, which keeps the callback that brought it, holds only a pointer.
pub(super) fn serve_terminal(
    socket: WebSocket,
    opening: Box<Opening>,
) -> impl Future<Output = ()> + Send {
    Box::pin(open_bridge(socket, opening)).then(|mut opened| async move {
        if let Some(bridge) = opened.as_mut() {
            let span = bridge.span.clone();
            bridge.run_to_end().instrument(span).await;
        }
    })
}

/// The opening step: refuses the socket, or attaches and reads the broker's `connected`.
async fn open_bridge(socket: WebSocket, opening: Box<Opening>) -> Option<OpenBridge> {
    let Opening {
        state,
        prepared,
        instance_reference,
    } = *opening;
    match prepared {
        Ok(prepared) => {
            let span = tracing::info_span!(
                "terminal",
                instance_id = %prepared.instance_id,
                session_id = %prepared.session_id,
                role = prepared.role.as_str(),
            );
            attach(state, socket, prepared, span.clone())
                .instrument(span)
                .await
        }
        Err(error) => {
            tracing::info!(instance = %instance_reference, code = error.websocket_close_code(), reason = %error.message, "terminal websocket refused");
            refuse(socket, &error).await;
            None
        }
    }
}

/// Attaches to the broker and reads its first frame; on a failure closes the socket with its
/// code and returns `None`.
async fn attach(
    state: AppState,
    socket: WebSocket,
    prepared: PreparedAttach,
    span: tracing::Span,
) -> Option<OpenBridge> {
    let websocket_gauge = state.metrics.websocket_opened(prepared.since.is_some());
    tracing::info!(
        resume = prepared.since.is_some(),
        snapshot = prepared.snapshot,
        "terminal websocket opened"
    );
    let attached = prepared
        .upstreams
        .attach(
            &prepared.attach,
            prepared.size,
            prepared.since,
            prepared.snapshot,
        )
        .await;
    let (mut events, commands) = match attached {
        Ok(attached) => attached,
        Err(error) => {
            tracing::warn!(error = %error, "attach failed");
            refuse(socket, &error).await;
            return None;
        }
    };
    let attach_gauge = state.metrics.attach_stream_opened();
    // The broker's first frame says where the stream starts; nothing is sent before it.
    let connected = match first_event(&mut events).await {
        Ok(connected) => connected,
        Err(error) => {
            refuse(socket, &error).await;
            return None;
        }
    };
    let audit = StreamAudit::attached(
        prepared.upstreams,
        &prepared.instance_id,
        &prepared.session_id,
        prepared.role,
    );
    let (sink, stream) = socket.split();
    let bridge = Bridge {
        client: ClientSink {
            sink,
            send_timeout: state.heartbeat_interval * 2,
            unflushed_since: None,
            metrics: state.metrics.clone(),
        },
        stream,
        commands,
        waiting_command: None,
        role: prepared.role,
        last_heard: Instant::now(),
        state: state.clone(),
        instance_id: prepared.instance_id,
        session_id: prepared.session_id,
        session_name: prepared.session_name,
        connected_before: false,
        heartbeat_interval: state.heartbeat_interval,
        shutdown: state.shutdown.clone(),
        credential: Some(prepared.credential),
        audit,
    };
    Some(OpenBridge {
        bridge,
        events: Some(events),
        connected: Some(Box::new(connected)),
        span,
        _stream_slot: prepared._stream_slot,
        _attach_gauge: attach_gauge,
        _websocket_gauge: websocket_gauge,
    })
}

/// An attached socket: what the bridge runs on, and what it holds until it ends.
struct OpenBridge {
    bridge: Bridge,
    /// The `Attach` stream's events; dropped as the bridge ends, before the client is given
    /// time to answer our close.
    events: Option<AttachEvents>,
    /// The broker's first frame, sent to the client first (boxed: it is needed once).
    connected: Option<Box<TerminalEvent>>,
    span: tracing::Span,
    _stream_slot: StreamSlot,
    _attach_gauge: GaugeGuard,
    _websocket_gauge: GaugeGuard,
}

impl OpenBridge {
    /// Bridges until either side ends, then writes the input the client sent before it went,
    /// and lets the client answer our close.
    async fn run_to_end(&mut self) {
        let (Some(events), Some(connected)) = (self.events.as_mut(), self.connected.take()) else {
            return;
        };
        let ending = self.bridge.run(connected, events).await;
        if ending.upstream_open && self.bridge.role == Role::Controller {
            // Boxed: it runs once, as the socket ends.
            Box::pin(self.bridge.finish_input(events, !ending.await_client_close)).await;
        }
        self.events = None;
        self.bridge.audit.ending(detach_reason(ending.reason));
        if ending.await_client_close {
            // Give the client time to read our last frames and answer the close; what it sends
            // meanwhile is read and not applied.
            let _ = tokio::time::timeout(CLOSE_GRACE, async {
                while let Some(Ok(_)) = self.bridge.stream.next().await {}
            })
            .await;
        }
        tracing::info!(reason = ending.reason, "terminal websocket closed");
    }
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

fn is_oversized(error: axum::Error) -> bool {
    error
        .into_inner()
        .downcast_ref::<tungstenite::Error>()
        .is_some_and(|error| matches!(error, tungstenite::Error::Capacity(_)))
}

/// The sending half of the socket. Frames are queued and then flushed while the bridge goes on
/// reading the client; a client that takes nothing for two heartbeat intervals is gone.
struct ClientSink {
    sink: SplitSink<WebSocket, Message>,
    send_timeout: Duration,
    /// Since when frames have waited for the client to take them; `None` when all were taken.
    unflushed_since: Option<Instant>,
    metrics: Metrics,
}

/// The client stopped accepting frames.
#[derive(Debug)]
struct ClientGone;

impl ClientSink {
    /// Queues a frame; [`ClientSink::flush`] sends it. Waits only while frames queued before it
    /// wait for the client, and no longer than they may.
    ///
    /// Once the frames before were flushed the socket takes the frame at once, which is how the
    /// bridge queues output, so the wait and its timer are boxed: an idle socket's task, sized
    /// by its largest state, does not keep a timer for the rare frame queued behind others.
    async fn queue(&mut self, message: Message) -> Result<(), ClientGone> {
        let deadline = self
            .flush_deadline()
            .unwrap_or_else(|| tokio::time::Instant::now() + self.send_timeout);
        let mut feed = self.sink.feed(message);
        let fed = match (&mut feed).now_or_never() {
            Some(fed) => fed,
            None => match Box::pin(tokio::time::timeout_at(deadline, feed)).await {
                Ok(fed) => fed,
                Err(_) => return Err(ClientGone),
            },
        };
        match fed {
            Ok(()) => {
                self.unflushed_since.get_or_insert_with(Instant::now);
                Ok(())
            }
            Err(_) => Err(ClientGone),
        }
    }

    fn is_flushed(&self) -> bool {
        self.unflushed_since.is_none()
    }

    /// When the frames waiting now must have been taken by; `None` when nothing waits.
    fn flush_deadline(&self) -> Option<tokio::time::Instant> {
        self.unflushed_since
            .map(|since| tokio::time::Instant::from_std(since + self.send_timeout))
    }

    /// Sends what was queued. Cancel-safe: what is not sent stays queued.
    async fn flush(&mut self) -> Result<(), ClientGone> {
        match self.sink.flush().await {
            Ok(()) => {
                self.unflushed_since = None;
                Ok(())
            }
            Err(_) => Err(ClientGone),
        }
    }

    /// Queues a frame and waits until it is sent: for the last frames of a socket.
    async fn send(&mut self, message: Message) -> Result<(), ClientGone> {
        self.queue(message).await?;
        let deadline = self
            .flush_deadline()
            .unwrap_or_else(|| tokio::time::Instant::now() + self.send_timeout);
        match tokio::time::timeout_at(deadline, self.flush()).await {
            Ok(sent) => sent,
            Err(_) => Err(ClientGone),
        }
    }

    async fn queue_frame(&mut self, frame: &ServerFrame<'_>) -> Result<(), ClientGone> {
        self.queue(frame.to_message()).await
    }

    async fn queue_output(&mut self, data: Bytes) -> Result<(), ClientGone> {
        self.metrics.bytes_to_client(data.len());
        self.queue(Message::Binary(data)).await
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

/// Both directions of one terminal WebSocket.
struct Bridge {
    client: ClientSink,
    stream: SplitStream<WebSocket>,
    commands: AttachCommands,
    /// A command the full queue could not take yet: no client frame is read until it is queued.
    waiting_command: Option<TerminalCommand>,
    role: Role,
    /// When the client last sent a frame (any frame, pongs included).
    last_heard: Instant,
    /// Reports the attach, the resets the client asks for, and the detach.
    audit: StreamAudit,
    /// For the session's current name when a reset connects again.
    state: AppState,
    instance_id: String,
    session_id: String,
    session_name: String,
    /// Whether `connected` was sent already: the next one follows a reset.
    connected_before: bool,
    heartbeat_interval: Duration,
    shutdown: CancellationToken,
    /// What ends the credential the socket opened with (a JWT's `exp`, a share's end or
    /// revocation): the socket ends then with 4001, as a new one would be refused. Taken by
    /// [`Bridge::run`].
    credential: Option<CredentialWatch>,
}

/// How a bridge ended.
#[derive(Debug)]
struct Ending {
    reason: &'static str,
    /// We sent a close frame and should let the client answer it.
    await_client_close: bool,
    /// The `Attach` stream still runs: the input the client sent is written before it is
    /// dropped.
    upstream_open: bool,
}

impl Ending {
    fn closed(reason: &'static str) -> Self {
        Self {
            reason,
            await_client_close: true,
            upstream_open: true,
        }
    }

    fn client_gone(reason: &'static str) -> Self {
        Self {
            reason,
            await_client_close: false,
            upstream_open: true,
        }
    }

    /// The broker ended the stream (or it failed): no input can follow.
    fn upstream_ended(self) -> Self {
        Self {
            upstream_open: false,
            ..self
        }
    }
}

/// What to do after a frame or an event.
enum Flow {
    Continue,
    Stop(Ending),
}

impl From<Result<(), ClientGone>> for Flow {
    fn from(sent: Result<(), ClientGone>) -> Self {
        match sent {
            Ok(()) => Flow::Continue,
            Err(ClientGone) => Flow::Stop(Ending::client_gone("client stopped reading")),
        }
    }
}

impl Bridge {
    /// Sends `connected`, then runs until the stream, the client or the gateway ends. The
    /// client's frames are read even while output waits for the client to take it (input such
    /// as a Ctrl-C still goes through); no further event is taken from the broker until then.
    ///
    /// An idle socket's task holds the largest state of this loop for as long as it lives, so
    /// what runs now and then (a client frame, a heartbeat, an event that is not output) is boxed
    /// and costs its memory only while it runs; the output path stays inline. For the same
    /// reason the loop has one timer, set to whichever comes first of the next heartbeat and the
    /// deadline of output the client has not taken, and the wait for the credential's end is
    /// boxed and made only for a credential that can end.
    async fn run(&mut self, connected: Box<TerminalEvent>, events: &mut AttachEvents) -> Ending {
        if let Flow::Stop(ending) = Box::pin(self.forward_event(*connected)).await {
            return ending;
        }
        let mut next_heartbeat = tokio::time::Instant::now() + self.heartbeat_interval;
        let timer = tokio::time::sleep_until(next_heartbeat);
        tokio::pin!(timer);
        // Made once, as the timer is: every socket waits on the same token, and a wait made
        // afresh at every turn would join and leave its list for every frame.
        let shutdown = self.shutdown.clone();
        let mut shutdown = std::pin::pin!(shutdown.cancelled());
        // An event read while batching output that is not output itself, handled next.
        let mut pending: Option<Box<EventOrFailure>> = None;
        let mut credential_end = self.credential.take().and_then(watch_credential);
        let mut streak = OutputStreak::default();
        loop {
            if streak.turn_is_due() {
                // Between two slices of a flood, the worker runs what else is ready and looks
                // for I/O (a keystroke on another socket) before this task forwards on.
                tokio::task::yield_now().await;
            }
            let flush_deadline = self.client.flush_deadline();
            let flushed = flush_deadline.is_none();
            let wake_at = flush_deadline.map_or(next_heartbeat, |flush| flush.min(next_heartbeat));
            if timer.deadline() != wake_at {
                timer.as_mut().reset(wake_at);
            }
            let next = match pending.take() {
                Some(next) if flushed => *next,
                held => {
                    pending = held;
                    tokio::select! {
                        biased;
                        () = &mut shutdown => {
                            let _ = Box::pin(self.client.close(close_code::SERVICE_RESTART, "gateway shutting down")).await;
                            return Ending::closed("gateway shutdown");
                        }
                        end = wait_for_end(&mut credential_end) => {
                            let _ = Box::pin(self.client.close(close_code::UNAUTHENTICATED, end.reason())).await;
                            return Ending::closed(end.reason());
                        }
                        (sent, waited) = noting_wait(self.client.flush()), if !flushed => {
                            streak.waited_if(waited);
                            if sent.is_err() {
                                return Ending::client_gone("client stopped reading");
                            }
                            continue;
                        }
                        // The client's frames come before the broker's events: a keystroke (a
                        // Ctrl-C) is not kept behind a flood of output.
                        message = self.stream.next(), if self.waiting_command.is_none() => {
                            match Box::pin(self.client_frame(message)).await {
                                Flow::Continue => continue,
                                Flow::Stop(ending) => return ending,
                            }
                        }
                        () = queue_waiting(&mut self.commands, &mut self.waiting_command), if self.waiting_command.is_some() => continue,
                        () = &mut timer => {
                            let now = tokio::time::Instant::now();
                            if flush_deadline.is_some_and(|deadline| deadline <= now) {
                                return Ending::client_gone("client stopped reading");
                            }
                            // The next one an interval after this one, however late it ran.
                            next_heartbeat = now + self.heartbeat_interval;
                            match Box::pin(self.heartbeat()).await {
                                Flow::Continue => continue,
                                Flow::Stop(ending) => return ending,
                            }
                        }
                        (next, waited) = noting_wait(events.next()), if flushed && pending.is_none() => {
                            streak.waited_if(waited);
                            next
                        }
                    }
                }
            };
            let flow = match next {
                Ok(Some(TerminalEvent::Output { data, .. })) => {
                    let (batch, after) = collect_output(data, events);
                    pending = after.map(Box::new);
                    streak.forwarded(batch.len());
                    self.client.queue_output(batch).await.into()
                }
                Ok(Some(event)) => Box::pin(self.forward_event(event)).await,
                Ok(None) => {
                    let ended = ApiError::unavailable("broker ended the stream");
                    let _ = Box::pin(self.client.close_with(&ended)).await;
                    Flow::Stop(Ending::closed("broker ended the stream").upstream_ended())
                }
                Err(error) => {
                    tracing::warn!(error = %error, "attach stream failed");
                    let _ = Box::pin(self.client.close_with(&failed_after_attach(error))).await;
                    Flow::Stop(Ending::closed("attach stream failed").upstream_ended())
                }
            };
            if let Flow::Stop(ending) = flow {
                return ending;
            }
        }
    }

    /// Applies one of the client's frames: input, a resize or a reset is queued for the broker;
    /// a frame that cannot be applied is answered with an error frame.
    async fn client_frame(&mut self, message: Option<Result<Message, axum::Error>>) -> Flow {
        let message = match message {
            None => return Flow::Stop(Ending::client_gone("client left")),
            Some(Ok(message)) => message,
            Some(Err(error)) => {
                if !is_oversized(error) {
                    return Flow::Stop(Ending::client_gone("client left"));
                }
                tracing::info!("client sent a frame over 1 MiB");
                let too_big = ApiError::new(ErrorCode::LimitExceeded, "frame larger than 1 MiB");
                let _ = self.client.close_with(&too_big).await;
                return Flow::Stop(Ending::closed("client frame refused"));
            }
        };
        self.last_heard = Instant::now();
        let command = match message {
            Message::Binary(data) => Ok(Some(TerminalCommand::Input { data, id: None })),
            Message::Text(text) => parse_client_frame(text.as_str()),
            Message::Ping(_) | Message::Pong(_) | Message::Close(_) => Ok(None),
        };
        let command = match command {
            Ok(Some(command)) => command,
            Ok(None) => return Flow::Continue,
            Err(message) => return self.refuse_frame(&message, None).await,
        };
        if self.role == Role::Viewer {
            let refused = match &command {
                TerminalCommand::Input { id, .. } => {
                    Some(("viewers cannot send input", id.as_deref()))
                }
                TerminalCommand::Resize(_) => Some(("viewers cannot resize", None)),
                TerminalCommand::Reset => Some(("viewers cannot reset", None)),
                // Control requests are the broker's to refuse: it knows the lease and what
                // the stream's credential admits.
                TerminalCommand::RequestControl | TerminalCommand::AnswerControl { .. } => None,
            };
            if let Some((refusal, id)) = refused {
                return self.refuse_frame(refusal, id).await;
            }
        }
        match &command {
            // Nothing to write and no receipt asked for. With an id it goes to the broker,
            // which answers once the input before it was written.
            TerminalCommand::Input { data, id: None } if data.is_empty() => return Flow::Continue,
            TerminalCommand::Input { data, .. } => {
                self.client.metrics.bytes_from_client(data.len());
            }
            TerminalCommand::Reset => self.audit.reset(),
            TerminalCommand::Resize(_)
            | TerminalCommand::RequestControl
            | TerminalCommand::AnswerControl { .. } => {}
        }
        // A full queue keeps the command here and stops reading the client until there is
        // room; output goes on meanwhile. A queue that is gone means the stream ended, which
        // the broker's side reports.
        if let Ok(full) = self.commands.try_send(command) {
            self.waiting_command = full;
        }
        Flow::Continue
    }

    /// Applies the frames a departed client sent that were not read yet, until its stream ends.
    async fn queue_unread_frames(&mut self) {
        loop {
            if self.waiting_command.is_some() {
                queue_waiting(&mut self.commands, &mut self.waiting_command).await;
            }
            let message = self.stream.next().await;
            if let Flow::Stop(_) = self.client_frame(message).await {
                return;
            }
        }
    }

    /// Answers a frame that was not applied with `{"type":"error"}`, naming the input's `id`
    /// when it carried one.
    async fn refuse_frame(&mut self, message: &str, id: Option<&str>) -> Flow {
        self.client
            .queue_frame(&ServerFrame::Error { message, id })
            .await
            .into()
    }

    /// Once the client is gone (or the gateway ends the socket), writes the input it sent before:
    /// with `read_rest` (the client went, we sent no close) the frames it sent that were not read
    /// yet (a line, then a hang-up that made a send to it fail first), then the command that
    /// waited for room in the queue, then the gateway's own last input, whose receipt says
    /// everything before it was written. Dropping the stream earlier would drop what was still on
    /// its way to the broker. Bounded by [`INPUT_DRAIN`]: input the process does not read, or a
    /// client that goes on sending, keeps nothing open.
    async fn finish_input(&mut self, events: &mut AttachEvents, read_rest: bool) {
        let mut last = Some(TerminalCommand::Input {
            data: Bytes::new(),
            id: Some(LAST_INPUT_ID.to_owned()),
        });
        let written = async {
            if read_rest {
                self.queue_unread_frames().await;
            }
            queue_waiting(&mut self.commands, &mut self.waiting_command).await;
            if self.commands.send_when_room(&mut last).await.is_err() {
                return;
            }
            loop {
                match events.next().await {
                    Ok(Some(TerminalEvent::InputAck { id, .. })) if id == LAST_INPUT_ID => return,
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => return,
                }
            }
        };
        if tokio::time::timeout(INPUT_DRAIN, written).await.is_err() {
            tracing::info!("the client's last input was not written within the drain");
        }
    }

    /// Drops a client silent for two heartbeat intervals, else pings it (both as a JSON frame
    /// and as a WebSocket ping). No ping is queued behind output the client has not taken.
    async fn heartbeat(&mut self) -> Flow {
        if self.last_heard.elapsed() >= self.heartbeat_interval * 2 {
            // The contract's code for a dropped client: reconnect with backoff.
            let _ = self
                .client
                .close(close_code::BACKEND_FAILURE, "heartbeat timeout")
                .await;
            return Flow::Stop(Ending::client_gone(
                "client silent for two heartbeat intervals",
            ));
        }
        if !self.client.is_flushed() {
            return Flow::Continue;
        }
        let pinged = match self.client.queue_frame(&ServerFrame::Ping).await {
            Ok(()) => self.client.queue(Message::Ping(Bytes::new())).await,
            Err(gone) => Err(gone),
        };
        pinged.into()
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
                self.client.queue_frame(&frame).await
            }
            TerminalEvent::Output { data, .. } => self.client.queue_output(data).await,
            TerminalEvent::Gap { lost, .. } => {
                self.client.queue_frame(&ServerFrame::Gap { lost }).await
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
                match self.client.queue_frame(&frame).await {
                    Ok(()) => self.client.queue_output(data).await,
                    Err(gone) => Err(gone),
                }
            }
            TerminalEvent::Resize(size) => {
                self.client.queue_frame(&ServerFrame::resize(size)).await
            }
            TerminalEvent::Resetting => {
                self.client
                    .queue_frame(&ServerFrame::Status(StreamStatus::Resetting))
                    .await
            }
            TerminalEvent::Error { message, input_id } => {
                let frame = ServerFrame::Error {
                    message: &message,
                    id: input_id.as_deref(),
                };
                self.client.queue_frame(&frame).await
            }
            // The gateway's own last input is answered after the client left; never forwarded.
            TerminalEvent::InputAck { id, .. } if id == LAST_INPUT_ID => Ok(()),
            TerminalEvent::InputAck { id, offset, bytes } => {
                let frame = ServerFrame::InputAck {
                    id: &id,
                    offset,
                    bytes,
                };
                self.client.queue_frame(&frame).await
            }
            TerminalEvent::ControlRequested {
                request_id,
                requester,
            } => {
                let frame = ServerFrame::ControlRequested {
                    request_id,
                    requester: requester.as_ref(),
                };
                self.client.queue_frame(&frame).await
            }
            TerminalEvent::ControlDeclined { request_id } => {
                self.client
                    .queue_frame(&ServerFrame::ControlDeclined { request_id })
                    .await
            }
            TerminalEvent::RoleChanged(role) => {
                tracing::info!(role = role.as_str(), "control moved by a grant");
                self.role = role;
                self.audit.role_changed(role);
                self.client.queue_frame(&ServerFrame::Role { role }).await
            }
            TerminalEvent::TakenOver => {
                tracing::info!("controller taken over");
                let detached = ServerFrame::SessionDetached {
                    reason: DetachReason::TakenOver,
                };
                let _ = self.client.queue_frame(&detached).await;
                let _ = self
                    .client
                    .close(close_code::TAKEN_OVER, "taken over")
                    .await;
                return Flow::Stop(Ending::closed("taken over").upstream_ended());
            }
            TerminalEvent::Exit(exit) => {
                tracing::info!(code = exit.code, signal = exit.signal, "session exited");
                let frame = ServerFrame::Exit {
                    code: exit.code,
                    signal: exit.signal,
                };
                let _ = self.client.queue_frame(&frame).await;
                let _ = self
                    .client
                    .close(close_code::NORMAL, "session exited")
                    .await;
                return Flow::Stop(Ending::closed("session exited").upstream_ended());
            }
            TerminalEvent::Closed => {
                let _ = self
                    .client
                    .close(close_code::NORMAL, "session closed")
                    .await;
                return Flow::Stop(Ending::closed("session closed").upstream_ended());
            }
            TerminalEvent::HandingOver => {
                let _ = self
                    .client
                    .close(close_code::SERVICE_RESTART, "broker handing over")
                    .await;
                return Flow::Stop(Ending::closed("broker handing over").upstream_ended());
            }
        };
        sent.into()
    }
}

/// Queues the command that waited for room once there is room. Cancel-safe: the command stays
/// where it is until it is queued. When the stream has ended it is dropped (the client is read
/// again, and the broker's side of the stream says why): kept, it would make this ready again at
/// once, forever.
async fn queue_waiting(commands: &mut AttachCommands, waiting: &mut Option<TerminalCommand>) {
    // An error is the stream's end, which the broker's side of the stream reports.
    let _ = commands.send_when_room(waiting).await;
}

/// What the `Attach` stream gave: an event, its end (`None`), or its failure.
type EventOrFailure = Result<Option<TerminalEvent>, ApiError>;

/// The wait for the end of `credential`, boxed, for a credential that can end; `None` for one
/// that never does (a static API token).
fn watch_credential(
    credential: CredentialWatch,
) -> Option<Pin<Box<impl Future<Output = CredentialEnd> + Send>>> {
    credential
        .can_end()
        .then(|| Box::pin(async move { credential.ended().await }))
}

/// Completes when the credential's end does; never without one.
async fn wait_for_end<F: Future<Output = CredentialEnd>>(
    end: &mut Option<Pin<Box<F>>>,
) -> CredentialEnd {
    match end {
        Some(end) => end.as_mut().await,
        None => std::future::pending().await,
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

/// Output forwarded to the client in a row, counted to bound the work of one poll of a bridge.
#[derive(Debug, Default)]
struct OutputStreak {
    /// Bytes forwarded since the bridge last waited for the broker or the client, or yielded.
    bytes: usize,
}

impl OutputStreak {
    /// Notes output of `len` bytes queued for the client.
    fn forwarded(&mut self, len: usize) {
        self.bytes += len;
    }

    /// Notes that the bridge had to wait (for an event or for the client to take a frame), or
    /// not: a wait gave the worker up, so the streak starts again.
    fn waited_if(&mut self, waited: bool) {
        if waited {
            self.bytes = 0;
        }
    }

    /// Whether the bridge should yield now (once: the streak starts again). Output at typing
    /// speed waits for every event and never fills a slice, so an echo is never delayed by it.
    fn turn_is_due(&mut self) -> bool {
        let due = self.bytes >= FLOOD_SLICE_BYTES;
        if due {
            self.bytes = 0;
        }
        due
    }
}

/// `future`'s output, and whether it had to wait for it (returned `Pending` at least once).
async fn noting_wait<F: Future>(future: F) -> (F::Output, bool) {
    let mut future = std::pin::pin!(future);
    let mut waited = false;
    std::future::poll_fn(|context| match future.as_mut().poll(context) {
        std::task::Poll::Ready(output) => std::task::Poll::Ready((output, waited)),
        std::task::Poll::Pending => {
            waited = true;
            std::task::Poll::Pending
        }
    })
    .await
}

/// Takes the output chunks that are already here, up to [`OUTPUT_BATCH_BYTES`], without
/// waiting for more. Returns the batch and the first non-output event read, if any: a snapshot
/// is such an event, so its bytes are never part of a batch.
fn collect_output(first: Bytes, events: &mut AttachEvents) -> (Bytes, Option<EventOrFailure>) {
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

    #[tokio::test]
    async fn a_waiting_command_is_queued_once_there_is_room_and_dropped_when_the_stream_ended() {
        let (mut commands, mut receiver) = AttachCommands::channel(1);
        assert!(commands.try_send(TerminalCommand::Reset).unwrap().is_none());
        let full = commands.try_send(TerminalCommand::Input {
            data: Bytes::from_static(b"a"),
            id: None,
        });
        let mut waiting = full.unwrap();
        assert!(waiting.is_some(), "a full queue hands the command back");
        assert!(matches!(
            receiver.next().await,
            Some(TerminalCommand::Reset)
        ));
        queue_waiting(&mut commands, &mut waiting).await;
        assert!(waiting.is_none());
        assert!(
            matches!(receiver.next().await, Some(TerminalCommand::Input { data, .. }) if data == "a")
        );

        assert!(commands.try_send(TerminalCommand::Reset).unwrap().is_none());
        let mut waiting = commands.try_send(TerminalCommand::Reset).unwrap();
        drop(receiver);
        assert!(commands.try_send(TerminalCommand::Reset).is_err());
        queue_waiting(&mut commands, &mut waiting).await;
        assert!(
            waiting.is_none(),
            "an ended stream's command is dropped, not kept waiting"
        );
    }

    #[test]
    fn a_slice_forwarded_without_waiting_gives_the_worker_up_once() {
        let mut streak = OutputStreak::default();
        streak.forwarded(FLOOD_SLICE_BYTES / 2);
        streak.waited_if(false);
        assert!(!streak.turn_is_due());
        streak.forwarded(FLOOD_SLICE_BYTES / 2);
        assert!(streak.turn_is_due(), "a slice forwarded without waiting");
        assert!(!streak.turn_is_due(), "once per slice");
    }

    #[test]
    fn a_wait_for_the_broker_or_the_client_starts_the_streak_again() {
        let mut streak = OutputStreak::default();
        streak.forwarded(FLOOD_SLICE_BYTES - 1);
        streak.waited_if(true);
        streak.forwarded(1);
        assert!(!streak.turn_is_due(), "typing-speed output never yields");
    }

    #[tokio::test]
    async fn noting_wait_says_whether_the_future_returned_pending() {
        assert_eq!(noting_wait(async { 7 }).await, (7, false));
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let waiting = tokio::spawn(noting_wait(receiver));
        tokio::task::yield_now().await;
        sender.send(8).unwrap();
        let (received, waited) = waiting.await.unwrap();
        assert_eq!(received.unwrap(), 8);
        assert!(waited);
    }

    /// The size of the future `serve` returns, without making one.
    fn future_size<F: Future>(_serve: impl FnOnce(WebSocket, Box<Opening>) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    #[test]
    fn an_open_socket_holds_its_bridge_once_and_a_small_run_loop() {
        // Every open socket's task is this size for as long as it lives: the bridge, the run
        // loop's largest state, and pointers. Each `async` layer that took the socket, the
        // attach or the bridge by value would hold a copy of them (half a KiB to a KiB each),
        // and each timer or rare wait kept inline in the run loop a hundred bytes or more (the
        // loop was 1.5 KiB with a heartbeat interval, a flush timer, a send timeout and the
        // credential's expiry inline; it is under 0.8 KiB with one timer).
        let bridge = std::mem::size_of::<OpenBridge>();
        let served = future_size(serve_terminal);
        assert!(
            served < bridge + 1024,
            "{served} bytes, the bridge {bridge}"
        );
    }

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
