//! The gRPC adapter: the `PtyBroker` service over the domain, and the one mapping from
//! [`Error`] to `tonic::Status` (through the closed [`ptyhub_wire::ErrorCode`] table). Generated
//! types go no further than this module and its children: `convert` (protobuf to domain,
//! validated, and back) and `registry_client` (the broker's client of session-api).

mod convert;
mod registry_client;

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::{Stream, StreamExt as _, TryStreamExt as _};
use ptyhub_proto::broker::v1 as pb;
use ptyhub_wire::{AttachInProcess, ClientFrames, RequireCredential, ServerFrames, limits};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::{CancellationToken, DropGuard};
use tonic::codegen::{BoxFuture, BoxStream};
use tonic::{Code, Request, Response, Status, Streaming};

use crate::broker::{Broker, Hello};
use crate::domain::SessionInfo;
use crate::error::Error;
use crate::runtime::{SpawnSpec, Target};
use crate::screen::ScreenFormat;
use crate::session::{AttachedInput, Attachment, AttachmentHandle, INTERRUPT};
use crate::session::{CommandWatch, ControlSettings, ScreenWait};
use convert::{
    commands_limit, holder_from_pb, input_items, parse_session_id, screen, screen_format,
    scrollback, server_frame, terminal_size, timestamp, wait_response, wait_timeout,
};
pub(crate) use registry_client::RegistryClient;

/// The decoder's limit: an input frame of the contract's largest size
/// ([`limits::MAX_FRAME_BYTES`]) plus protobuf framing. Anything larger ends the stream with
/// RESOURCE_EXHAUSTED.
pub const MAX_CLIENT_FRAME_BYTES: usize = limits::MAX_FRAME_BYTES + 1024;
/// How long a client has to send its Hello.
const HELLO_TIMEOUT: Duration = limits::HELLO_TIMEOUT;
/// Replies (error frames) queued per attached client between its inbound and outbound sides.
const OUTBOUND_REPLIES: usize = 8;
/// How long a client's frames are still applied once its response stream is gone.
const INPUT_DRAIN: Duration = Duration::from_secs(2);
/// Events queued per `WatchEvents` subscriber between the broker and the transport.
const OUTBOUND_EVENTS: usize = 64;
/// Command records queued per `WatchCommands` watcher between the broker and the transport.
const OUTBOUND_COMMANDS: usize = 16;

/// The `PtyBroker` gRPC service.
#[derive(Debug, Clone)]
pub struct PtyBrokerService {
    broker: Broker,
    /// Admits the control calls (the unary ones and `WatchEvents`) from session-api alone;
    /// `Attach` is admitted by its ticket instead.
    credential_check: RequireCredential,
}

impl PtyBrokerService {
    pub fn new(broker: Broker) -> Self {
        let credential_check = broker.config().secrets.session_api_token.require();
        Self {
            broker,
            credential_check,
        }
    }

    /// The service's full name, as health checks and reflection list it.
    pub const NAME: &'static str =
        <pb::pty_broker_server::PtyBrokerServer<Self> as tonic::server::NamedService>::NAME;

    /// The tonic server for this service, with the client frame limit set.
    pub fn into_server(self) -> pb::pty_broker_server::PtyBrokerServer<Self> {
        pb::pty_broker_server::PtyBrokerServer::new(self)
            .max_decoding_message_size(MAX_CLIENT_FRAME_BYTES)
    }

    fn authorize<T>(&self, request: &Request<T>) -> Result<(), Status> {
        self.credential_check.check(request.metadata())
    }

    /// `Attach` on a stream of client frames, from the port (decoded by tonic) or from the
    /// gateway in this process (as they are): the hello first, then the session's frames for
    /// this client while its frames are applied.
    async fn attach_frames(&self, mut inbound: ClientFrames) -> Result<ServerFrames, Status> {
        let malformed = |message: &str| Status::from(Error::MalformedStream(message.to_owned()));
        let first = match tokio::time::timeout(HELLO_TIMEOUT, inbound.try_next()).await {
            Err(_) => return Err(malformed("no hello frame within 10 seconds")),
            Ok(Err(status)) => return Err(inbound_status(status)),
            Ok(Ok(None)) => return Err(malformed("stream ended before the hello frame")),
            Ok(Ok(Some(frame))) => frame,
        };
        let Some(pb::client_frame::Frame::Hello(hello)) = first.frame else {
            return Err(malformed("the first client frame must be a hello"));
        };
        let hello = Hello::try_from(hello)?;
        let attachment = self.broker.attach(hello).await?;
        let (replies, reply_receiver) = mpsc::channel(OUTBOUND_REPLIES);
        let response_gone = CancellationToken::new();
        tokio::spawn(apply_client_frames_until(
            attachment.input(),
            inbound,
            replies,
            response_gone.clone(),
        ));
        // Fused: a caller in process may poll again after the end (the relay does, for the
        // receipt of its last input), and hears the end again, as from tonic's `Streaming`.
        Ok(Box::pin(
            outbound_frames(Outbound {
                attachment,
                replies: Some(reply_receiver),
                _response_gone: response_gone.drop_guard(),
                ended: false,
            })
            .fuse(),
        ))
    }
}

/// The in-process road's `Attach` (`ptyhub_wire::AttachInProcess`): the port's handler, with
/// the frames as values.
impl AttachInProcess for PtyBrokerService {
    fn attach(&self, frames: ClientFrames) -> BoxFuture<ServerFrames, Status> {
        let service = self.clone();
        Box::pin(async move { service.attach_frames(frames).await })
    }
}

#[tonic::async_trait]
impl pb::pty_broker_server::PtyBroker for PtyBrokerService {
    async fn spawn(
        &self,
        request: Request<pb::SpawnRequest>,
    ) -> Result<Response<pb::SpawnResponse>, Status> {
        self.authorize(&request)?;
        let request = request.into_inner();
        let recording = convert::recording_request(&request)?;
        let control = ControlSettings {
            mode: convert::control_mode(request.control_mode)?.unwrap_or_default(),
            grant_timeout: convert::control_grant_timeout(request.control_grant_timeout_secs)?,
        };
        let spec = SpawnSpec::try_from(request)?;
        let session = self.broker.spawn_recorded(spec, recording, control).await?;
        Ok(Response::new(pb::SpawnResponse {
            session: Some(session.into()),
        }))
    }

    async fn check_target(
        &self,
        request: Request<pb::CheckTargetRequest>,
    ) -> Result<Response<pb::CheckTargetResponse>, Status> {
        self.authorize(&request)?;
        let request = request.into_inner();
        let target = Target::try_from(request.target.unwrap_or_default())
            .map_err(|refused| Error::InvalidRequest(refused.0))?;
        let user = (!request.user.is_empty()).then_some(request.user);
        self.broker.check_target(target, user).await?;
        Ok(Response::new(pb::CheckTargetResponse {}))
    }

    async fn kill(
        &self,
        request: Request<pb::KillRequest>,
    ) -> Result<Response<pb::KillResponse>, Status> {
        self.authorize(&request)?;
        let session_id = parse_session_id(&request.get_ref().session_id)?;
        let session = self.broker.kill(session_id).await?;
        Ok(Response::new(pb::KillResponse {
            session: Some(session.into()),
        }))
    }

    async fn reset(
        &self,
        request: Request<pb::ResetRequest>,
    ) -> Result<Response<pb::ResetResponse>, Status> {
        self.authorize(&request)?;
        let session_id = parse_session_id(&request.get_ref().session_id)?;
        let session = self.broker.reset(session_id).await?;
        Ok(Response::new(pb::ResetResponse {
            session: Some(session.into()),
        }))
    }

    async fn set_control_mode(
        &self,
        request: Request<pb::SetControlModeRequest>,
    ) -> Result<Response<pb::SetControlModeResponse>, Status> {
        self.authorize(&request)?;
        let request = request.get_ref();
        let session_id = parse_session_id(&request.session_id)?;
        let control_mode = convert::control_mode(request.control_mode)?
            .ok_or_else(|| Error::InvalidRequest("control mode is missing".to_owned()))?;
        let session = self.broker.set_control_mode(session_id, control_mode)?;
        Ok(Response::new(pb::SetControlModeResponse {
            session: Some(session.into()),
        }))
    }

    async fn list(
        &self,
        request: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        self.authorize(&request)?;
        Ok(Response::new(pb::ListResponse {
            sessions: self.broker.list().into_iter().map(Into::into).collect(),
        }))
    }

    async fn get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::SessionInfo>, Status> {
        self.authorize(&request)?;
        let session_id = parse_session_id(&request.get_ref().session_id)?;
        Ok(Response::new(self.broker.get(session_id)?.into()))
    }

    type WatchEventsStream = BoxStream<pb::BrokerEvent>;

    async fn watch_events(
        &self,
        request: Request<pb::WatchEventsRequest>,
    ) -> Result<Response<Self::WatchEventsStream>, Status> {
        self.authorize(&request)?;
        let (sender, receiver) = mpsc::channel(OUTBOUND_EVENTS);
        tokio::spawn(forward_events(self.broker.clone(), sender));
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }

    async fn get_screen(
        &self,
        request: Request<pb::GetScreenRequest>,
    ) -> Result<Response<pb::Screen>, Status> {
        self.authorize(&request)?;
        let request = request.into_inner();
        let session_id = parse_session_id(&request.session_id)?;
        let format = screen_format(request.format)?;
        let scrollback = scrollback(request.scrollback)?;
        let (reading, info) = self.broker.screen(session_id, format, scrollback)?;
        Ok(Response::new(screen(session_id, reading, &info)))
    }

    async fn get_control(
        &self,
        request: Request<pb::GetControlRequest>,
    ) -> Result<Response<pb::ControlState>, Status> {
        self.authorize(&request)?;
        let session_id = parse_session_id(&request.get_ref().session_id)?;
        let state = self.broker.control_state(session_id)?;
        Ok(Response::new((&state).into()))
    }

    async fn request_control_for(
        &self,
        request: Request<pb::StandingControlRequest>,
    ) -> Result<Response<pb::ControlRequest>, Status> {
        self.authorize(&request)?;
        let request = request.into_inner();
        let session_id = parse_session_id(&request.session_id)?;
        let made = self
            .broker
            .request_control_for(session_id, holder_from_pb(request.requester))?;
        Ok(Response::new((&made).into()))
    }

    async fn answer_control_as(
        &self,
        request: Request<pb::ControlAnswer>,
    ) -> Result<Response<pb::ControlState>, Status> {
        self.authorize(&request)?;
        let request = request.into_inner();
        let session_id = parse_session_id(&request.session_id)?;
        let state = self.broker.answer_control_as(
            session_id,
            &request.principal,
            request.request_id,
            request.grant,
        )?;
        Ok(Response::new((&state).into()))
    }

    async fn list_commands(
        &self,
        request: Request<pb::ListCommandsRequest>,
    ) -> Result<Response<pb::ListCommandsResponse>, Status> {
        self.authorize(&request)?;
        let request = request.into_inner();
        let session_id = parse_session_id(&request.session_id)?;
        let limit = commands_limit(request.limit)?;
        let page = self.broker.commands(session_id, request.after, limit)?;
        Ok(Response::new(pb::ListCommandsResponse {
            commands: page.commands.into_iter().map(Into::into).collect(),
            first_kept_id: page.first_kept_id,
            terminal: Some(page.terminal.into()),
            last_id: page.last_id,
        }))
    }

    async fn get_command_output(
        &self,
        request: Request<pb::GetCommandOutputRequest>,
    ) -> Result<Response<pb::CommandOutput>, Status> {
        self.authorize(&request)?;
        let request = request.into_inner();
        let session_id = parse_session_id(&request.session_id)?;
        let text = output_is_text(request.format)?;
        let (command, data) = self
            .broker
            .command_output(session_id, request.command_id)
            .await?;
        let data = if text {
            Bytes::from(crate::activity::plain_text(&data))
        } else {
            data
        };
        Ok(Response::new(pb::CommandOutput {
            command: Some(command.into()),
            data,
        }))
    }

    async fn run(
        &self,
        request: Request<pb::RunRequest>,
    ) -> Result<Response<pb::RunResponse>, Status> {
        self.authorize(&request)?;
        let request = request.into_inner();
        let session_id = parse_session_id(&request.session_id)?;
        let text = output_is_text(request.format)?;
        let timeout = wait_timeout(request.timeout_ms)?;
        let outcome = self
            .broker
            .run(session_id, &request.command, timeout, request.force)
            .await?;
        let output = if text {
            Bytes::from(crate::activity::plain_text(&outcome.output))
        } else {
            outcome.output
        };
        Ok(Response::new(pb::RunResponse {
            command: Some(outcome.command.into()),
            output,
            truncated: outcome.truncated,
        }))
    }

    type WatchCommandsStream = BoxStream<pb::Command>;

    async fn watch_commands(
        &self,
        request: Request<pb::WatchCommandsRequest>,
    ) -> Result<Response<Self::WatchCommandsStream>, Status> {
        self.authorize(&request)?;
        let request = request.into_inner();
        let session_id = parse_session_id(&request.session_id)?;
        let watch = self.broker.watch_commands(session_id, request.after_id)?;
        let (sender, receiver) = mpsc::channel(OUTBOUND_COMMANDS);
        tokio::spawn(forward_commands(self.broker.clone(), watch, sender));
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }

    async fn send_input(
        &self,
        request: Request<pb::SendInputRequest>,
    ) -> Result<Response<pb::SendInputResponse>, Status> {
        self.authorize(&request)?;
        let request = request.into_inner();
        let session_id = parse_session_id(&request.session_id)?;
        let items = input_items(request.items)?;
        let sent = self
            .broker
            .send_input(session_id, items, request.force)
            .await?;
        Ok(Response::new(sent.into()))
    }

    async fn wait_for_screen(
        &self,
        request: Request<pb::WaitForScreenRequest>,
    ) -> Result<Response<pb::WaitForScreenResponse>, Status> {
        self.authorize(&request)?;
        let request = request.into_inner();
        let session_id = parse_session_id(&request.session_id)?;
        let wait = ScreenWait::try_from(request)?;
        let outcome = self.broker.wait_for_screen(session_id, wait).await?;
        Ok(Response::new(wait_response(session_id, outcome)))
    }

    type AttachStream = ServerFrames;

    async fn attach(
        &self,
        request: Request<Streaming<pb::ClientFrame>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let inbound: Streaming<pb::ClientFrame> = request.into_inner();
        self.attach_frames(inbound.boxed()).await.map(Response::new)
    }
}

/// Sends the snapshot, then every event; a subscriber that fell behind is sent a fresh snapshot.
async fn forward_events(broker: Broker, sender: mpsc::Sender<Result<pb::BrokerEvent, Status>>) {
    let (sessions, mut events) = broker.watch_events();
    let mut next = Some(snapshot_event(&broker, sessions));
    loop {
        if let Some(event) = next.take() {
            tokio::select! {
                sent = sender.send(Ok(event)) => if sent.is_err() { return },
                () = broker.shutting_down() => return,
                () = broker.handing_over() => {
                    let _ = sender.send(Err(Error::HandingOver.into())).await;
                    return;
                }
            }
        }
        tokio::select! {
            received = events.recv() => match received {
                Ok(event) => next = Some(event.into()),
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(missed, "event subscriber lagged; sending a new snapshot");
                    let (sessions, resubscribed) = broker.watch_events();
                    events = resubscribed;
                    next = Some(snapshot_event(&broker, sessions));
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            () = sender.closed() => return,
            () = broker.shutting_down() => return,
            () = broker.handing_over() => {
                // The subscriber reconnects, and reaches the next broker process (or this one
                // again, should the hand-off fail).
                let _ = sender.send(Err(Error::HandingOver.into())).await;
                return;
            }
        }
    }
}

/// Sends the watch's command records until it ends (the stream then ends too), the watcher
/// leaves, or the broker stops serving the session: shutting down or handing it over, which the
/// watcher hears as UNAVAILABLE and answers by watching again from the last id it saw.
async fn forward_commands(
    broker: Broker,
    mut watch: CommandWatch,
    sender: mpsc::Sender<Result<pb::Command, Status>>,
) {
    loop {
        let ended = tokio::select! {
            command = watch.next() => match command {
                Some(command) => {
                    if sender.send(Ok(command.into())).await.is_err() {
                        return;
                    }
                    continue;
                }
                None => return,
            },
            () = sender.closed() => return,
            () = broker.shutting_down() => Error::ShuttingDown,
            () = broker.handing_over() => Error::HandingOver,
        };
        let _ = sender.send(Err(ended.into())).await;
        return;
    }
}

fn snapshot_event(broker: &Broker, sessions: Vec<SessionInfo>) -> pb::BrokerEvent {
    pb::BrokerEvent {
        at: Some(timestamp(SystemTime::now())),
        event: Some(pb::broker_event::Event::Snapshot(pb::Snapshot {
            boot_id: broker.boot_id().to_string(),
            sessions: sessions.into_iter().map(Into::into).collect(),
        })),
    }
}

/// One attached client's side of the `Attach` response. The transport polls it directly, so
/// output goes from the ring to the connection without another task in between.
struct Outbound {
    attachment: Attachment,
    /// What the inbound side answers (error frames, and the error that ends the stream);
    /// `None` once the client closed its side.
    replies: Option<mpsc::Receiver<Result<pb::ServerFrame, Status>>>,
    /// Tells the inbound task that the response stream is gone (the client left, or its stream
    /// failed): it applies what the client sent before, for at most [`INPUT_DRAIN`], and ends.
    _response_gone: DropGuard,
    /// Set after the last frame: the stream ends at the next poll.
    ended: bool,
}

/// The frames for one attached client: what the session has for it, with the inbound side's
/// replies in between. Dropping the stream detaches the client.
fn outbound_frames(outbound: Outbound) -> impl Stream<Item = Result<pb::ServerFrame, Status>> {
    let session_id = outbound.attachment.handle().session_id();
    futures::stream::unfold(outbound, move |mut outbound| async move {
        if outbound.ended {
            return None;
        }
        loop {
            let reply = async {
                match outbound.replies.as_mut() {
                    Some(replies) => replies.recv().await,
                    None => std::future::pending().await,
                }
            };
            let frame = tokio::select! {
                biased;
                reply = reply => match reply {
                    Some(reply) => reply,
                    // The client closed its side; it may still be reading.
                    None => {
                        outbound.replies = None;
                        continue;
                    }
                },
                event = outbound.attachment.next_event() => match event {
                    Some(event) => event
                        .map(|event| server_frame(session_id, event))
                        .map_err(Status::from),
                    None => return None,
                },
            };
            outbound.ended = frame.is_err();
            return Some((frame, outbound));
        }
    })
}

/// Applies a client's frames after its hello until its side of the stream ends, and, once the
/// response stream is gone, for at most [`INPUT_DRAIN`] more: input the client sent just before
/// it left is typed (the client stays attached, under its lease, meanwhile), and a client that
/// left without ending its side, or input the process does not read, holds nothing for long.
async fn apply_client_frames_until(
    input: AttachedInput,
    inbound: ClientFrames,
    sender: mpsc::Sender<Result<pb::ServerFrame, Status>>,
    response_gone: CancellationToken,
) {
    let drain_over = async {
        response_gone.cancelled().await;
        tokio::time::sleep(INPUT_DRAIN).await;
    };
    tokio::select! {
        () = apply_client_frames(input.handle(), inbound, sender) => {}
        () = drain_over => {
            tracing::debug!(
                session_id = %input.handle().session_id(),
                "client gone: input it sent was not all taken within the drain"
            );
        }
    }
}

/// Applies a client's frames after its hello. Refused frames are answered with an error frame
/// and the stream goes on; an oversized or undecodable frame ends the stream. A reply nobody
/// reads any more (the response stream is gone) stops nothing: what the client sent before is
/// still applied.
async fn apply_client_frames(
    handle: &AttachmentHandle,
    mut inbound: ClientFrames,
    sender: mpsc::Sender<Result<pb::ServerFrame, Status>>,
) {
    // The one frame read while an input was being written, applied next.
    let mut ahead: Option<Result<Option<pb::ClientFrame>, Status>> = None;
    loop {
        let next = match ahead.take() {
            Some(next) => next,
            None => inbound.try_next().await,
        };
        let frame = match next {
            Ok(Some(frame)) => frame,
            // The client closed its side; it may still be reading.
            Ok(None) => return,
            Err(status) => {
                let _ = sender.send(Err(inbound_status(status))).await;
                return;
            }
        };
        let refused = |error| Refusal {
            error,
            input_id: None,
        };
        let result = match frame.frame {
            Some(pb::client_frame::Frame::Input(input)) => {
                if input.data.len() > limits::MAX_FRAME_BYTES {
                    let too_large = Error::InputTooLarge(input.data.len());
                    let _ = sender.send(Err(too_large.into())).await;
                    return;
                }
                write_input_reading_ahead(handle, input, &mut inbound, &mut ahead, &sender).await
            }
            Some(pb::client_frame::Frame::Resize(size)) => match terminal_size(size) {
                Ok(size) => handle.resize(size).await.map_err(refused),
                Err(error) => Err(refused(error)),
            },
            Some(pb::client_frame::Frame::Reset(_)) => handle.reset().await.map_err(refused),
            Some(pb::client_frame::Frame::RequestControl(_)) => {
                handle.request_control().map(drop).map_err(refused)
            }
            Some(pb::client_frame::Frame::AnswerControl(answer)) => handle
                .answer_control(answer.request_id, answer.grant)
                .map_err(refused),
            Some(pb::client_frame::Frame::Hello(_)) => Err(refused(Error::MalformedStream(
                "hello was already sent on this stream".to_owned(),
            ))),
            None => Err(refused(Error::MalformedStream(
                "empty client frame".to_owned(),
            ))),
        };
        if let Err(refusal) = result {
            send_refusal(&sender, refusal).await;
        }
    }
}

/// A client frame that was not applied, and the id of the input it was, if it carried one.
struct Refusal {
    error: Error,
    input_id: Option<String>,
}

/// Writes one input, answering with its receipt when it carried an id (nobody reads the answer
/// once the response stream is gone; the input is written all the same).
async fn write_input(
    handle: &AttachmentHandle,
    input: pb::Input,
    sender: &mpsc::Sender<Result<pb::ServerFrame, Status>>,
) -> Result<(), Refusal> {
    let input_id = convert::input_id(input.input_id).map_err(|error| Refusal {
        error,
        input_id: None,
    })?;
    match handle.write_input(input.data).await {
        Ok(sent) => {
            if let Some(input_id) = input_id {
                let _ = sender.send(Ok(convert::input_ack(input_id, sent))).await;
            }
            Ok(())
        }
        Err(error) => Err(Refusal { error, input_id }),
    }
}

/// Writes one input as [`write_input`] does, reading the stream's next frame meanwhile: an
/// interrupt there goes at once, ahead of the input that waits (a program that does not read
/// may hold it for as long as it runs), which then gives way unwritten; any other frame is kept
/// in `ahead`, applied next, and nothing more is read until the input is written (flow
/// control).
async fn write_input_reading_ahead(
    handle: &AttachmentHandle,
    input: pb::Input,
    inbound: &mut ClientFrames,
    ahead: &mut Option<Result<Option<pb::ClientFrame>, Status>>,
    sender: &mpsc::Sender<Result<pb::ServerFrame, Status>>,
) -> Result<(), Refusal> {
    let write = write_input(handle, input, sender);
    tokio::pin!(write);
    loop {
        tokio::select! {
            biased;
            written = &mut write => return written,
            next = inbound.try_next(), if ahead.is_none() => match next {
                Ok(Some(pb::ClientFrame {
                    frame: Some(pb::client_frame::Frame::Input(interrupt)),
                })) if interrupt.data.as_ref() == [INTERRUPT] => {
                    // Both polled: the waiting write must see the interrupt to give way to it.
                    let (written, interrupted) =
                        tokio::join!(&mut write, write_input(handle, interrupt, sender));
                    if let Err(refusal) = interrupted {
                        send_refusal(sender, refusal).await;
                    }
                    return written;
                }
                next => *ahead = Some(next),
            },
        }
    }
}

/// Answers a refused frame with an error frame; the stream goes on.
async fn send_refusal(
    sender: &mpsc::Sender<Result<pb::ServerFrame, Status>>,
    Refusal { error, input_id }: Refusal,
) {
    let status = Status::from(error);
    let frame = pb::ServerFrame {
        frame: Some(pb::server_frame::Frame::Error(pb::Error {
            code: status.code() as i32,
            message: status.message().to_owned(),
            input_id,
        })),
    };
    // Nobody reads the answer once the response stream is gone; the frames go on.
    let _ = sender.send(Ok(frame)).await;
}

/// A decoding failure of a client frame, as the client should see it.
fn inbound_status(status: Status) -> Status {
    if status.code() == Code::OutOfRange {
        // tonic's code for a message over the decoding limit.
        Error::FrameTooLarge.into()
    } else {
        status
    }
}

impl From<Error> for Status {
    fn from(error: Error) -> Self {
        match error {
            // Marked, so that the gateway tells its WebSocket clients to reconnect at once.
            Error::HandingOver => ptyhub_wire::handing_over_status(error.to_string()),
            error => error.code().status(error.to_string()),
        }
    }
}

/// Whether a command's output is asked for as text (TEXT or unspecified) or as the bytes (ANSI).
fn output_is_text(format: i32) -> Result<bool, Error> {
    match screen_format(format)? {
        ScreenFormat::Text => Ok(true),
        ScreenFormat::Ansi => Ok(false),
        ScreenFormat::Cells => Err(Error::InvalidRequest(
            "a command's output is text or ansi, not cells".to_owned(),
        )),
    }
}
