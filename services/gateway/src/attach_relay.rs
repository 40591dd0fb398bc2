//! The broker's `Attach` on the gateway's public port, for gRPC clients outside the cluster: the
//! caller's credential and the instance it names are checked as for a WebSocket, the gateway
//! obtains the ticket from session-api, and the frames are relayed to the owning broker and
//! back unchanged (offsets, gap, snapshot, detached, exit, all of it). Every other
//! `PtyBroker` method is refused: those are for session-api alone.
//!
//! Each stream holds one of its principal's stream slots (`--max-streams-per-principal`, shared
//! with the principal's WebSockets) from before its hello until it ends; a client that sends no
//! hello within [`HELLO_TIMEOUT`] is ended with `INVALID_ARGUMENT`.
//!
//! One task reads the client's frames and forwards those a client may send
//! ([`forward_client_frames`]); the response stream is polled by the transport and yields the
//! broker's frames with the reader's refusals in between ([`relay_frames`]). Nothing the
//! gateway refuses reaches the broker, so nothing refused reaches the PTY.
//!
//! The ticket admits a controller whenever the credential may control (as for a WebSocket), so
//! that a viewer may ask for control on the same stream. The stream's role is the broker's to
//! move: the response side follows its `RoleChanged` frames into a [`watch`] channel, which the
//! reader consults for each frame, so a granted viewer may type and a controller that granted
//! control away may not.

use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;

use futures::{Stream, TryStreamExt as _};
use ptyhub_model::Role;
use ptyhub_proto::broker::v1 as pb;
use ptyhub_proto::broker::v1::pty_broker_server::{PtyBroker, PtyBrokerServer};
use ptyhub_wire::ErrorCode;
use ptyhub_wire::limits::{HELLO_TIMEOUT, MAX_FRAME_BYTES};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tonic::{Code, Request, Response, Status, Streaming};
use tracing::Instrument;

use crate::audit::{StreamAudit, StreamResets};
use crate::front_door::{grpc_surface_of as surface_of, principal_of};
use crate::metrics::GaugeGuard;
use crate::state::AppState;
use crate::streams::{CredentialWatch, StreamSlot};

/// The metadata entry that names the instance of the session an `Attach` is for (id or name).
pub const INSTANCE_METADATA: &str = "ptyhub-instance";

/// Client frames queued for the broker before the reader waits for it.
const UPSTREAM_QUEUE: usize = 64;
/// How long the input a client sent before its call ended may take to be written before the
/// stream to the broker is dropped anyway.
const INPUT_DRAIN: Duration = Duration::from_secs(2);
/// Refusals queued for the client between the reader and the response stream.
const REPLY_QUEUE: usize = 8;
/// How long a stream goes on once the gateway begins to stop, before it ends with UNAVAILABLE
/// (reconnect, to another replica). When the whole system stops (`ptyhub up` ending), the
/// broker's own last frames (`closed`, reason shutdown) arrive within it, and the client learns
/// the session is gone instead of trying to reconnect.
const SHUTDOWN_RELAY_GRACE: Duration = Duration::from_secs(2);

/// The `PtyBroker` service as the gateway offers it: `Attach`, relayed.
#[derive(Debug, Clone)]
pub struct AttachRelay {
    state: AppState,
}

impl AttachRelay {
    pub fn new(state: AppState) -> Self {
        Self { state }
    }

    /// The tonic server, with the decoder's limit for one client frame.
    pub fn into_server(self, max_frame_bytes: usize) -> PtyBrokerServer<Self> {
        PtyBrokerServer::new(self).max_decoding_message_size(max_frame_bytes)
    }
}

/// A method the gateway does not offer. Not a code of the error table: nothing about the
/// request is wrong, the method lives elsewhere, which is what gRPC's UNIMPLEMENTED says.
fn not_offered(method: &str, instead: &str) -> Status {
    Status::unimplemented(format!(
        "the gateway offers only Attach of ptyhub.broker.v1.PtyBroker; {method} is not available here{instead}"
    ))
}

const SAME_CALL_ON_SESSION_API: &str =
    ": use the call of the same name on ptyhub.session.v1.SessionApi";
const SESSION_CALLS_INSTEAD: &str = ": use ptyhub.session.v1.SessionApi";

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl PtyBroker for AttachRelay {
    async fn spawn(
        &self,
        _request: Request<pb::SpawnRequest>,
    ) -> Result<Response<pb::SpawnResponse>, Status> {
        Err(not_offered(
            "Spawn",
            ": create sessions with ptyhub.session.v1.SessionApi/CreateSession",
        ))
    }

    async fn check_target(
        &self,
        _request: Request<pb::CheckTargetRequest>,
    ) -> Result<Response<pb::CheckTargetResponse>, Status> {
        Err(not_offered(
            "CheckTarget",
            ": register instances with ptyhub.session.v1.SessionApi/RegisterInstance",
        ))
    }

    async fn kill(
        &self,
        _request: Request<pb::KillRequest>,
    ) -> Result<Response<pb::KillResponse>, Status> {
        Err(not_offered(
            "Kill",
            ": close sessions with ptyhub.session.v1.SessionApi/CloseSession",
        ))
    }

    async fn reset(
        &self,
        _request: Request<pb::ResetRequest>,
    ) -> Result<Response<pb::ResetResponse>, Status> {
        Err(not_offered(
            "Reset",
            ": use ptyhub.session.v1.SessionApi/ResetSession",
        ))
    }

    async fn set_control_mode(
        &self,
        _request: Request<pb::SetControlModeRequest>,
    ) -> Result<Response<pb::SetControlModeResponse>, Status> {
        Err(not_offered(
            "SetControlMode",
            ": use ptyhub.session.v1.SessionApi/UpdateSession",
        ))
    }

    async fn list(
        &self,
        _request: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        Err(not_offered("List", SESSION_CALLS_INSTEAD))
    }

    async fn get(
        &self,
        _request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::SessionInfo>, Status> {
        Err(not_offered("Get", SESSION_CALLS_INSTEAD))
    }

    type WatchEventsStream = BoxStream<pb::BrokerEvent>;

    async fn watch_events(
        &self,
        _request: Request<pb::WatchEventsRequest>,
    ) -> Result<Response<Self::WatchEventsStream>, Status> {
        Err(not_offered(
            "WatchEvents",
            ": watch sessions with ptyhub.session.v1.SessionApi/WatchSessions",
        ))
    }

    async fn get_screen(
        &self,
        _request: Request<pb::GetScreenRequest>,
    ) -> Result<Response<pb::Screen>, Status> {
        Err(not_offered("GetScreen", SAME_CALL_ON_SESSION_API))
    }

    async fn get_control(
        &self,
        _request: Request<pb::GetControlRequest>,
    ) -> Result<Response<pb::ControlState>, Status> {
        Err(not_offered("GetControl", SAME_CALL_ON_SESSION_API))
    }

    async fn request_control_for(
        &self,
        _request: Request<pb::StandingControlRequest>,
    ) -> Result<Response<pb::ControlRequest>, Status> {
        Err(not_offered(
            "RequestControlFor",
            ": use ptyhub.session.v1.SessionApi/RequestControl",
        ))
    }

    async fn answer_control_as(
        &self,
        _request: Request<pb::ControlAnswer>,
    ) -> Result<Response<pb::ControlState>, Status> {
        Err(not_offered(
            "AnswerControlAs",
            ": use ptyhub.session.v1.SessionApi/GrantControl or DeclineControl",
        ))
    }

    async fn send_input(
        &self,
        _request: Request<pb::SendInputRequest>,
    ) -> Result<Response<pb::SendInputResponse>, Status> {
        Err(not_offered("SendInput", SAME_CALL_ON_SESSION_API))
    }

    async fn wait_for_screen(
        &self,
        _request: Request<pb::WaitForScreenRequest>,
    ) -> Result<Response<pb::WaitForScreenResponse>, Status> {
        Err(not_offered("WaitForScreen", SAME_CALL_ON_SESSION_API))
    }

    async fn list_commands(
        &self,
        _request: Request<pb::ListCommandsRequest>,
    ) -> Result<Response<pb::ListCommandsResponse>, Status> {
        Err(not_offered("ListCommands", SAME_CALL_ON_SESSION_API))
    }

    async fn get_command_output(
        &self,
        _request: Request<pb::GetCommandOutputRequest>,
    ) -> Result<Response<pb::CommandOutput>, Status> {
        Err(not_offered("GetCommandOutput", SAME_CALL_ON_SESSION_API))
    }

    async fn run(
        &self,
        _request: Request<pb::RunRequest>,
    ) -> Result<Response<pb::RunResponse>, Status> {
        Err(not_offered("Run", SAME_CALL_ON_SESSION_API))
    }

    type WatchCommandsStream = BoxStream<pb::Command>;

    async fn watch_commands(
        &self,
        _request: Request<pb::WatchCommandsRequest>,
    ) -> Result<Response<Self::WatchCommandsStream>, Status> {
        Err(not_offered("WatchCommands", SAME_CALL_ON_SESSION_API))
    }

    type AttachStream = BoxStream<pb::ServerFrame>;

    async fn attach(
        &self,
        request: Request<Streaming<pb::ClientFrame>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let state = &self.state;
        let principal = principal_of(&request).await?;
        let surface = surface_of(&request);
        // Taken before the hello is awaited: a stream that sends nothing holds a slot too, for
        // at most the hello timeout, so one credential cannot pile up silent streams either.
        let (stream_slot, credential) = state
            .streams
            .open(&principal)
            .map_err(|error| error.to_status())?
            .into_parts();
        let instance_reference = request
            .metadata()
            .get(INSTANCE_METADATA)
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
            .unwrap_or_default()
            .to_owned();
        let mut inbound = request.into_inner();
        let hello = read_hello(&mut inbound).await?;
        if instance_reference.is_empty() {
            return Err(ErrorCode::Invalid.status(format!(
                "the {INSTANCE_METADATA} metadata is required: the instance (id or name) the session belongs to"
            )));
        }
        let role = match pb::Role::try_from(hello.role) {
            Ok(pb::Role::Controller) => Role::Controller,
            Ok(pb::Role::Viewer) => Role::Viewer,
            _ => return Err(ErrorCode::Invalid.status("hello needs a role")),
        };
        if role == Role::Controller && principal.access.is_viewer_only() {
            return Err(ErrorCode::Forbidden
                .status("this credential may only view: attach with the viewer role"));
        }
        let instance = state
            .authorize_instance_through(&principal, &instance_reference, surface)
            .await
            .map_err(|error| error.to_status())?;
        let upstreams = state.upstreams.acting_for(&principal.actor(surface));
        let session = state
            .authorize_live_session(&principal, &instance, &hello.session_id)
            .await
            .map_err(|error| error.to_status())?;
        let target = upstreams
            .issue_attach_ticket(&instance.id, &session.id, ticket_role(&principal))
            .await
            .map_err(|error| error.to_status())?;

        let span = tracing::info_span!(
            "attach_relay",
            instance_id = %instance.id,
            session_id = %session.id,
            role = role.as_str(),
        );
        let (upstream, upstream_frames) = mpsc::channel(UPSTREAM_QUEUE);
        let broker_hello = pb::ClientFrame {
            frame: Some(pb::client_frame::Frame::Hello(pb::Hello {
                ticket: target.ticket,
                session_id: session.id.to_string(),
                // A share link without history sees the present screen and what follows,
                // whatever its client asked for.
                present_only: hello.present_only || !principal.access.sees_history(),
                ..hello
            })),
        };
        // The queue is empty and its receiver alive: this cannot fail.
        let _ = upstream.send(broker_hello).await;
        let frames = upstreams
            .attach_frames(&target.broker_endpoint, upstream_frames)
            .instrument(span.clone())
            .await
            .map_err(|error| error.to_status())?;
        let audit = StreamAudit::attached(
            upstreams.clone(),
            &instance.id,
            &session.id.to_string(),
            role,
        );
        let resets = audit.resets();
        span.in_scope(|| tracing::info!(resume = hello.since.is_some(), "grpc attach relayed"));
        let (replies, reply_receiver) = mpsc::channel(REPLY_QUEUE);
        let (role_now, role_watch) = watch::channel(role);
        let reader = tokio::spawn(
            forward_client_frames(
                inbound,
                upstream.clone(),
                replies,
                role_watch.clone(),
                resets,
            )
            .instrument(span.clone()),
        );
        Ok(Response::new(Box::pin(relay_frames(Relay {
            upstream: Some(Upstream {
                frames,
                sender: upstream,
                reader: AbortOnDropHandle::new(reader),
                role: role_watch,
                span,
                _tracked: state.bridges.token(),
            }),
            replies: Some(reply_receiver),
            role: role_now,
            shutdown: state.shutdown.clone(),
            _tracked: state.bridges.token(),
            _gauge: state.metrics.attach_stream_opened(),
            _stream_slot: stream_slot,
            stopping_at: None,
            credential,
            ended: false,
            audit,
        }))))
    }
}

/// The role the attach ticket admits: a controller whenever the credential may control, so that
/// a stream attached as a viewer may ask for control (the broker still attaches it as the role
/// its hello names); a viewer for a credential that may only view (a share link's).
fn ticket_role(principal: &crate::auth::Principal) -> Role {
    if principal.access.is_viewer_only() {
        Role::Viewer
    } else {
        Role::Controller
    }
}

/// The client's first frame, which must be a hello.
async fn read_hello(inbound: &mut Streaming<pb::ClientFrame>) -> Result<pb::Hello, Status> {
    let first = match tokio::time::timeout(HELLO_TIMEOUT, inbound.message()).await {
        Err(_) => {
            return Err(ErrorCode::Malformed.status(format!(
                "no hello frame within {} seconds",
                HELLO_TIMEOUT.as_secs()
            )));
        }
        Ok(Err(status)) => return Err(inbound_status(status)),
        Ok(Ok(None)) => {
            return Err(ErrorCode::Malformed.status("stream ended before the hello frame"));
        }
        Ok(Ok(Some(frame))) => frame,
    };
    match first.frame {
        Some(pb::client_frame::Frame::Hello(hello)) => Ok(hello),
        _ => Err(ErrorCode::Malformed.status("the first client frame must be a hello")),
    }
}

/// One relayed stream's response side.
struct Relay {
    /// The stream to the broker; `None` once it was handed to [`Upstream::finish_input`].
    upstream: Option<Upstream>,
    /// The reader's refusals (error frames, and the error that ends the stream); `None` once
    /// the reader is done.
    replies: Option<mpsc::Receiver<Result<pb::ServerFrame, Status>>>,
    /// The stream's role now, as the broker's `RoleChanged` frames move it; the reader and
    /// [`Upstream::finish_input`] read it.
    role: watch::Sender<Role>,
    /// The gateway is stopping: the stream ends with UNAVAILABLE, and the client resumes
    /// elsewhere with its offset.
    shutdown: CancellationToken,
    /// Shutdown waits for the stream like for a WebSocket bridge.
    _tracked: TaskTrackerToken,
    _gauge: GaugeGuard,
    /// The principal's stream slot, shared with its WebSockets, given back with the stream.
    _stream_slot: StreamSlot,
    /// When the stream ends because the gateway stops, once it began to.
    stopping_at: Option<Instant>,
    /// What ends the caller's credential (its expiry, a share's revocation): the stream ends
    /// then with UNAUTHENTICATED.
    credential: CredentialWatch,
    /// Set after the last frame: the stream ends at the next poll.
    ended: bool,
    /// Reports the detach, with why, when the stream is dropped.
    audit: StreamAudit,
}

impl Drop for Relay {
    /// The client is gone, or its stream ended: the stream to the broker ends once the input
    /// the client sent is written.
    fn drop(&mut self) {
        if let (Some(upstream), Ok(runtime)) =
            (self.upstream.take(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn(upstream.finish_input());
        }
    }
}

/// The stream to the broker: its frames, the relay's way to send it frames, and the reader of
/// the client's frames that forwards them.
struct Upstream {
    frames: ptyhub_wire::ServerFrames,
    /// Kept beside the reader's, so that the relay can still send its last input once the
    /// client's side ended.
    sender: mpsc::Sender<pb::ClientFrame>,
    reader: AbortOnDropHandle<()>,
    /// The stream's role now (see [`Relay::role`]).
    role: watch::Receiver<Role>,
    span: tracing::Span,
    /// Shutdown waits for the last input as for the stream.
    _tracked: TaskTrackerToken,
}

impl Upstream {
    /// Lets the reader forward what the client sent before it left, then sends the relay's own
    /// last input (no bytes, an id of its own) and waits for its receipt, which says that every
    /// input before it was written; then the stream to the broker is dropped. Dropping it at
    /// once would drop what was still on its way. At most [`INPUT_DRAIN`], so input the process
    /// does not read, or a client that keeps its side open, holds nothing for long. A stream
    /// that is a viewer when it ends sent no input the broker took: it is dropped at once.
    async fn finish_input(self) {
        let Upstream {
            mut frames,
            sender,
            reader,
            role,
            span,
            _tracked,
        } = self;
        if *role.borrow() == Role::Viewer {
            return;
        }
        let last_id = format!(
            "ptyhub-gateway-last-input-{}",
            uuid::Uuid::new_v4().simple()
        );
        let written = async {
            let _ = reader.await;
            let last = pb::ClientFrame {
                frame: Some(pb::client_frame::Frame::Input(pb::Input {
                    data: bytes::Bytes::new(),
                    input_id: Some(last_id.clone()),
                })),
            };
            if sender.send(last).await.is_err() {
                return;
            }
            while let Ok(Some(frame)) = frames.try_next().await {
                let answered = match &frame.frame {
                    Some(pb::server_frame::Frame::InputAck(ack)) => ack.input_id == last_id,
                    Some(pb::server_frame::Frame::Error(error)) => {
                        error.input_id.as_deref() == Some(last_id.as_str())
                    }
                    _ => false,
                };
                if answered {
                    return;
                }
            }
        };
        if tokio::time::timeout(INPUT_DRAIN, written).await.is_err() {
            span.in_scope(|| {
                tracing::info!("the client's last input was not written within the drain");
            });
        }
    }
}

/// The broker's frames as they come, the reader's refusals in between, and an end at shutdown.
/// Dropping the stream lets the client's last input be written, then drops the broker's stream,
/// which detaches the client there.
fn relay_frames(relay: Relay) -> impl Stream<Item = Result<pb::ServerFrame, Status>> {
    futures::stream::unfold(relay, |mut relay| async move {
        if relay.ended {
            return None;
        }
        loop {
            let reply = async {
                match relay.replies.as_mut() {
                    Some(replies) => replies.recv().await,
                    None => std::future::pending().await,
                }
            };
            let stopping = async {
                match relay.stopping_at {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => relay.shutdown.cancelled().await,
                }
            };
            let expired = relay.credential.ended();
            let item = tokio::select! {
                biased;
                end = expired => {
                    Err(ErrorCode::Unauthenticated.status(end.reason()))
                }
                () = stopping => {
                    if relay.stopping_at.is_none() {
                        relay.stopping_at = Some(Instant::now() + SHUTDOWN_RELAY_GRACE);
                        continue;
                    }
                    Err(ErrorCode::Unavailable.status(
                        "the gateway is shutting down: reconnect with since set to the next offset",
                    ))
                }
                reply = reply => match reply {
                    Some(reply) => reply,
                    None => {
                        relay.replies = None;
                        continue;
                    }
                },
                frame = upstream_frames(&mut relay.upstream).try_next() => match frame {
                    Ok(Some(frame)) => Ok(frame),
                    Ok(None) => return None,
                    Err(status) => Err(broker_status(&status)),
                },
            };
            relay.ended = item.is_err();
            match &item {
                Ok(frame) => match &frame.frame {
                    Some(pb::server_frame::Frame::RoleChanged(changed)) => {
                        let role_now = follow_role_change(&relay.role, changed.role);
                        relay.audit.role_changed(role_now);
                    }
                    Some(pb::server_frame::Frame::Detached(detached))
                        if detached.reason == pb::DetachReason::TakenOver as i32 =>
                    {
                        relay.audit.ending("taken_over");
                    }
                    Some(pb::server_frame::Frame::Exit(_)) => relay.audit.ending("exited"),
                    Some(pb::server_frame::Frame::Closed(_)) => {
                        relay.audit.ending("session_closed");
                    }
                    _ => {}
                },
                Err(status) if status.code() == Code::Unavailable => {
                    relay.audit.ending("shutdown");
                }
                Err(_) => relay.audit.ending("stream_ended"),
            }
            return Some((item, relay));
        }
    })
}

/// Moves the stream's role as the broker's `RoleChanged` says, before the client is sent it: a
/// client that reads it and types at once finds the reader already letting its input through.
fn follow_role_change(role: &watch::Sender<Role>, changed: i32) -> Role {
    let role_now = match pb::Role::try_from(changed) {
        Ok(pb::Role::Controller) => Role::Controller,
        Ok(pb::Role::Viewer) => Role::Viewer,
        // Not one the broker sends; least privilege until it says otherwise.
        _ => {
            tracing::warn!(
                role = changed,
                "the broker sent an unknown role: treated as a viewer"
            );
            Role::Viewer
        }
    };
    tracing::info!(role = role_now.as_str(), "control moved by a grant");
    role.send_replace(role_now);
    role_now
}

/// The broker's frames while the relay lives.
fn upstream_frames(upstream: &mut Option<Upstream>) -> &mut ptyhub_wire::ServerFrames {
    &mut upstream
        .as_mut()
        .expect("the stream to the broker lives as long as the relay")
        .frames
}

/// Forwards the client's frames after its hello, refusing what the client may not send: a
/// viewer's input, resize and reset (by its role when the frame comes, see [`Relay::role`]), a
/// second hello, an empty frame (answered with an error frame, the stream goes on) and a frame
/// over the limit (the stream ends). A refusal nobody
/// reads (the client's call is gone) stops nothing: what the client sent before it left is
/// forwarded all the same. The side towards the broker stays open after the client closed its
/// own, until the relay's last input was answered (see [`Upstream::finish_input`]).
async fn forward_client_frames(
    mut inbound: Streaming<pb::ClientFrame>,
    upstream: mpsc::Sender<pb::ClientFrame>,
    replies: mpsc::Sender<Result<pb::ServerFrame, Status>>,
    role: watch::Receiver<Role>,
    resets: StreamResets,
) {
    use pb::client_frame::Frame;
    loop {
        let frame = match inbound.message().await {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(status) => {
                let _ = replies.send(Err(inbound_status(status))).await;
                return;
            }
        };
        let role_now = *role.borrow();
        let viewer = role_now == Role::Viewer;
        let refusal = match &frame.frame {
            Some(Frame::Input(input)) if input.data.len() > MAX_FRAME_BYTES => {
                let too_large = ErrorCode::LimitExceeded.status(format!(
                    "input frame of {} bytes is over the 1 MiB limit",
                    input.data.len()
                ));
                let _ = replies.send(Err(too_large)).await;
                return;
            }
            Some(Frame::Input(_)) if viewer => {
                Some(ErrorCode::Forbidden.status("a viewer may not write input"))
            }
            Some(Frame::Resize(_)) if viewer => {
                Some(ErrorCode::Forbidden.status("a viewer may not resize"))
            }
            Some(Frame::Reset(_)) if viewer => {
                Some(ErrorCode::Forbidden.status("a viewer may not reset"))
            }
            Some(Frame::Hello(_)) => {
                Some(ErrorCode::Malformed.status("hello was already sent on this stream"))
            }
            None => Some(ErrorCode::Malformed.status("empty client frame")),
            Some(_) => None,
        };
        match refusal {
            Some(status) => {
                // A refused input that asked for a receipt is named, so its sender hears.
                let input_id = match frame.frame {
                    Some(Frame::Input(input)) => input.input_id,
                    _ => None,
                };
                let frame = pb::ServerFrame {
                    frame: Some(pb::server_frame::Frame::Error(pb::Error {
                        code: status.code() as i32,
                        message: status.message().to_owned(),
                        input_id,
                    })),
                };
                let _ = replies.send(Ok(frame)).await;
            }
            None => {
                if matches!(frame.frame, Some(Frame::Reset(_))) {
                    resets.reset(role_now);
                }
                if upstream.send(frame).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// A decoding failure of a client frame, as the client should see it.
fn inbound_status(status: Status) -> Status {
    if status.code() == Code::OutOfRange {
        // tonic's code for a message over the decoding limit.
        ErrorCode::LimitExceeded.status("client frame over the 1 MiB limit")
    } else {
        status
    }
}

/// A broker's error on an open stream, as the client should see it: its own words, except that
/// a refused ticket is the gateway's problem and a vanished broker is unavailability.
fn broker_status(status: &Status) -> Status {
    crate::error::ApiError::from_backend("pty-broker", status).to_status()
}
