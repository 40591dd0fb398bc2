//! The gRPC adapter: the `PtyBroker` service over the domain, the conversions between protobuf
//! and domain types (validated here, on the way in), and the one mapping from [`Error`] to
//! `tonic::Status`. Generated types go no further than this module.

use std::pin::Pin;
use std::time::{Duration, SystemTime};

use futures::Stream;
use ptyhub_proto::broker::v1 as pb;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Response, Status, Streaming};
use uuid::Uuid;

use crate::broker::{Broker, Hello};
use crate::domain::{
    BrokerEvent, BrokerEventKind, ClientEvent, CloseReason, ExitStatus, Role, SessionInfo,
    SessionPhase, TerminalSize,
};
use crate::error::Error;
use crate::runtime::{SpawnSpec, Target};
use crate::session::{AttachRequest, Attachment, AttachmentHandle};

/// Largest input frame accepted, as in the contract.
pub const MAX_INPUT_BYTES: usize = 1024 * 1024;
/// The decoder's limit: an input frame of the largest size plus protobuf framing. Anything
/// larger ends the stream with RESOURCE_EXHAUSTED.
pub const MAX_CLIENT_FRAME_BYTES: usize = MAX_INPUT_BYTES + 1024;
/// How long a client has to send its Hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Replies (error frames) queued per attached client between its inbound and outbound sides.
const OUTBOUND_REPLIES: usize = 8;
/// Events queued per `WatchEvents` subscriber between the broker and the transport.
const OUTBOUND_EVENTS: usize = 64;

/// The `PtyBroker` gRPC service.
#[derive(Debug, Clone)]
pub struct PtyBrokerService {
    broker: Broker,
}

impl PtyBrokerService {
    pub fn new(broker: Broker) -> Self {
        Self { broker }
    }

    /// The tonic server for this service, with the client frame limit set.
    pub fn into_server(self) -> pb::pty_broker_server::PtyBrokerServer<Self> {
        pb::pty_broker_server::PtyBrokerServer::new(self)
            .max_decoding_message_size(MAX_CLIENT_FRAME_BYTES)
    }

    fn authorize<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let presented = request
            .metadata()
            .get(ptyhub_proto::AUTHORIZATION_METADATA)
            .ok_or_else(|| Status::unauthenticated("missing service token"))?
            .to_str()
            .map_err(|_| Status::unauthenticated("malformed authorization metadata"))?;
        let token = presented
            .strip_prefix("Bearer ")
            .ok_or_else(|| Status::unauthenticated("authorization must be a bearer token"))?;
        if !self.broker.service_token().matches(token.trim()) {
            return Err(Status::unauthenticated("invalid service token"));
        }
        Ok(())
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl pb::pty_broker_server::PtyBroker for PtyBrokerService {
    async fn spawn(
        &self,
        request: Request<pb::SpawnRequest>,
    ) -> Result<Response<pb::SpawnResponse>, Status> {
        self.authorize(&request)?;
        let spec = SpawnSpec::try_from(request.into_inner())?;
        let session = self.broker.spawn(spec).await?;
        Ok(Response::new(pb::SpawnResponse {
            session: Some(session.into()),
        }))
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

    type AttachStream = BoxStream<pb::ServerFrame>;

    async fn attach(
        &self,
        request: Request<Streaming<pb::ClientFrame>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let mut inbound = request.into_inner();
        let first = match tokio::time::timeout(HELLO_TIMEOUT, inbound.message()).await {
            Err(_) => {
                return Err(Status::invalid_argument("no hello frame within 10 seconds"));
            }
            Ok(Err(status)) => return Err(inbound_status(status)),
            Ok(Ok(None)) => {
                return Err(Status::invalid_argument(
                    "stream ended before the hello frame",
                ));
            }
            Ok(Ok(Some(frame))) => frame,
        };
        let Some(pb::client_frame::Frame::Hello(hello)) = first.frame else {
            return Err(Status::invalid_argument(
                "the first client frame must be a hello",
            ));
        };
        let hello = Hello::try_from(hello)?;
        let attachment = self.broker.attach(hello).await?;
        let (replies, reply_receiver) = mpsc::channel(OUTBOUND_REPLIES);
        let inbound_task = tokio::spawn(apply_client_frames(attachment.handle(), inbound, replies));
        Ok(Response::new(Box::pin(outbound_frames(Outbound {
            attachment,
            replies: Some(reply_receiver),
            _inbound_task: AbortOnDrop(inbound_task),
            ended: false,
        }))))
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
        }
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
    _inbound_task: AbortOnDrop,
    /// Set after the last frame: the stream ends at the next poll.
    ended: bool,
}

/// Ends the inbound task with the response stream: the client left, or its stream failed.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
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

/// Applies a client's frames after its hello. Refused frames are answered with an error frame
/// and the stream goes on; an oversized or undecodable frame ends the stream.
async fn apply_client_frames(
    handle: AttachmentHandle,
    mut inbound: Streaming<pb::ClientFrame>,
    sender: mpsc::Sender<Result<pb::ServerFrame, Status>>,
) {
    loop {
        let frame = match inbound.message().await {
            Ok(Some(frame)) => frame,
            // The client closed its side; it may still be reading.
            Ok(None) => return,
            Err(status) => {
                let _ = sender.send(Err(inbound_status(status))).await;
                return;
            }
        };
        let result = match frame.frame {
            Some(pb::client_frame::Frame::Input(input)) => {
                if input.data.len() > MAX_INPUT_BYTES {
                    let _ = sender
                        .send(Err(Status::resource_exhausted(format!(
                            "input frame of {} bytes is over the 1 MiB limit",
                            input.data.len()
                        ))))
                        .await;
                    return;
                }
                handle.write_input(input.data).await
            }
            Some(pb::client_frame::Frame::Resize(size)) => match TerminalSize::try_from(size) {
                Ok(size) => handle.resize(size).await,
                Err(error) => Err(error),
            },
            Some(pb::client_frame::Frame::Reset(_)) => handle.reset().await,
            Some(pb::client_frame::Frame::Hello(_)) => Err(Error::InvalidArgument(
                "hello was already sent on this stream".to_owned(),
            )),
            None => Err(Error::InvalidArgument("empty client frame".to_owned())),
        };
        if let Err(error) = result {
            let status = Status::from(error);
            let frame = pb::ServerFrame {
                frame: Some(pb::server_frame::Frame::Error(pb::Error {
                    code: status.code() as i32,
                    message: status.message().to_owned(),
                })),
            };
            if sender.send(Ok(frame)).await.is_err() {
                return;
            }
        }
    }
}

/// A decoding failure of a client frame, as the client should see it.
fn inbound_status(status: Status) -> Status {
    if status.code() == Code::OutOfRange {
        // tonic's code for a message over the decoding limit.
        Status::resource_exhausted("client frame is over the 1 MiB limit")
    } else {
        status
    }
}

fn parse_session_id(text: &str) -> Result<Uuid, Status> {
    Uuid::parse_str(text)
        .map_err(|_| Status::invalid_argument(format!("session id {text:?} is not a uuid")))
}

fn timestamp(time: SystemTime) -> prost_types::Timestamp {
    prost_types::Timestamp::from(time)
}

// ---- errors ----

impl From<Error> for Status {
    fn from(error: Error) -> Self {
        use crate::runtime::RuntimeError;
        let message = error.to_string();
        match error {
            Error::SessionNotFound(_) => Status::not_found(message),
            Error::SessionExists(_) => Status::already_exists(message),
            Error::InvalidArgument(_) | Error::InvalidSize(_) => Status::invalid_argument(message),
            Error::Unauthenticated(_) => Status::unauthenticated(message),
            Error::PermissionDenied(_) => Status::permission_denied(message),
            Error::FailedPrecondition(_) => Status::failed_precondition(message),
            Error::ResourceExhausted(_) => Status::resource_exhausted(message),
            Error::BackendNotConfigured(_) | Error::ShuttingDown => Status::unavailable(message),
            Error::Runtime(runtime) => match runtime {
                RuntimeError::Unavailable(_) => Status::unavailable(message),
                RuntimeError::TargetNotFound(_) => Status::not_found(message),
                RuntimeError::TargetNotRunning(_) | RuntimeError::SpawnFailed(_) => {
                    Status::failed_precondition(message)
                }
                RuntimeError::Io { .. } | RuntimeError::Other(_) => Status::internal(message),
            },
            Error::Config(_) | Error::Transport(_) | Error::Io { .. } => Status::internal(message),
        }
    }
}

// ---- protobuf to domain (validated) ----

impl TryFrom<pb::TerminalSize> for TerminalSize {
    type Error = Error;

    fn try_from(size: pb::TerminalSize) -> Result<Self, Error> {
        Ok(TerminalSize::new(size.cols, size.rows)?)
    }
}

impl TryFrom<pb::SpawnRequest> for SpawnSpec {
    type Error = Status;

    fn try_from(request: pb::SpawnRequest) -> Result<Self, Status> {
        let session_id = parse_session_id(&request.session_id)?;
        let target = match request.target.and_then(|target| target.kind) {
            Some(pb::target::Kind::Local(_)) => Target::Local,
            Some(pb::target::Kind::Docker(docker)) => {
                if docker.container.trim().is_empty() {
                    return Err(Status::invalid_argument("docker target needs a container"));
                }
                Target::Docker {
                    container: docker.container,
                }
            }
            None => return Err(Status::invalid_argument("spawn needs a target")),
        };
        if request.command.iter().any(|arg| arg.contains('\0')) {
            return Err(Status::invalid_argument(
                "command arguments must not contain NUL",
            ));
        }
        if request.command.first().is_some_and(String::is_empty) {
            return Err(Status::invalid_argument(
                "command program must not be empty",
            ));
        }
        let mut env: Vec<(String, String)> = request.env.into_iter().collect();
        for (name, value) in &env {
            if name.is_empty() || name.contains('=') || name.contains('\0') || value.contains('\0')
            {
                return Err(Status::invalid_argument(format!(
                    "invalid environment variable {name:?}"
                )));
            }
        }
        env.sort();
        let size = match request.size {
            Some(size) => TerminalSize::try_from(size)?,
            None => TerminalSize::DEFAULT,
        };
        let non_empty = |text: String| (!text.is_empty()).then_some(text);
        Ok(SpawnSpec {
            session_id,
            target,
            command: request.command,
            env,
            cwd: non_empty(request.cwd),
            user: non_empty(request.user),
            size,
        })
    }
}

impl TryFrom<pb::Hello> for Hello {
    type Error = Status;

    fn try_from(hello: pb::Hello) -> Result<Self, Status> {
        if hello.ticket.is_empty() {
            return Err(Status::unauthenticated("hello carries no attach ticket"));
        }
        let session_id = parse_session_id(&hello.session_id)?;
        let role = match pb::Role::try_from(hello.role) {
            Ok(pb::Role::Controller) => Role::Controller,
            Ok(pb::Role::Viewer) => Role::Viewer,
            _ => return Err(Status::invalid_argument("hello needs a role")),
        };
        let size = hello.size.map(TerminalSize::try_from).transpose()?;
        Ok(Hello {
            ticket: hello.ticket,
            session_id,
            request: AttachRequest {
                role,
                size,
                since: hello.since,
            },
        })
    }
}

// ---- domain to protobuf ----

impl From<TerminalSize> for pb::TerminalSize {
    fn from(size: TerminalSize) -> Self {
        pb::TerminalSize {
            cols: u32::from(size.cols()),
            rows: u32::from(size.rows()),
        }
    }
}

impl From<ExitStatus> for pb::ExitStatus {
    fn from(exit: ExitStatus) -> Self {
        pb::ExitStatus {
            code: exit.code,
            signal: exit.signal,
        }
    }
}

fn state(phase: SessionPhase) -> pb::SessionState {
    match phase {
        SessionPhase::Starting => pb::SessionState::Starting,
        SessionPhase::Running => pb::SessionState::Running,
        SessionPhase::Resetting => pb::SessionState::Resetting,
        SessionPhase::Exited => pb::SessionState::Exited,
        SessionPhase::Closed(_) => pb::SessionState::Closed,
    }
}

fn close_reason(reason: CloseReason) -> pb::CloseReason {
    match reason {
        CloseReason::Killed => pb::CloseReason::Killed,
        CloseReason::Exited => pb::CloseReason::Exited,
        CloseReason::IdleReaped => pb::CloseReason::IdleReaped,
        CloseReason::Shutdown => pb::CloseReason::Shutdown,
        CloseReason::SpawnFailed => pb::CloseReason::SpawnFailed,
    }
}

fn role(role: Role) -> pb::Role {
    match role {
        Role::Controller => pb::Role::Controller,
        Role::Viewer => pb::Role::Viewer,
    }
}

impl From<SessionInfo> for pb::SessionInfo {
    fn from(info: SessionInfo) -> Self {
        let reason = match info.phase {
            SessionPhase::Closed(reason) => close_reason(reason),
            _ => pb::CloseReason::Unspecified,
        };
        pb::SessionInfo {
            session_id: info.session_id.to_string(),
            state: state(info.phase) as i32,
            size: Some(info.size.into()),
            created_at: Some(timestamp(info.created_at)),
            last_activity_at: Some(timestamp(info.last_activity_at)),
            output_offset: info.output_offset,
            controllers: info.controllers,
            viewers: info.viewers,
            exit: info.exit.map(Into::into),
            close_reason: reason as i32,
            pid: info.pid.unwrap_or(0),
        }
    }
}

impl From<BrokerEvent> for pb::BrokerEvent {
    fn from(event: BrokerEvent) -> Self {
        use pb::broker_event::Event;
        let at = event.at;
        let event = match event.kind {
            BrokerEventKind::Started(info) => Event::Started(pb::Started {
                session: Some(info.into()),
            }),
            BrokerEventKind::Exited { session_id, exit } => Event::Exited(pb::Exited {
                session_id: session_id.to_string(),
                exit: Some(exit.into()),
            }),
            BrokerEventKind::Activity {
                session_id,
                last_activity_at,
                output_offset,
            } => Event::Activity(pb::Activity {
                session_id: session_id.to_string(),
                last_activity_at: Some(timestamp(last_activity_at)),
                output_offset,
            }),
            BrokerEventKind::Closed { session_id, reason } => Event::Closed(pb::Closed {
                session_id: session_id.to_string(),
                reason: close_reason(reason) as i32,
            }),
            BrokerEventKind::AttachmentsChanged {
                session_id,
                controllers,
                viewers,
            } => Event::AttachmentsChanged(pb::AttachmentsChanged {
                session_id: session_id.to_string(),
                controllers,
                viewers,
            }),
            BrokerEventKind::ResetDone(info) => Event::Reset(pb::ResetDone {
                session: Some(info.into()),
            }),
        };
        pb::BrokerEvent {
            at: Some(timestamp(at)),
            event: Some(event),
        }
    }
}

fn server_frame(session_id: Uuid, event: ClientEvent) -> pb::ServerFrame {
    use pb::server_frame::Frame;
    let frame = match event {
        ClientEvent::Connected {
            role: client_role,
            offset,
            size,
            phase,
        } => Frame::Connected(pb::Connected {
            session_id: session_id.to_string(),
            role: role(client_role) as i32,
            offset,
            size: Some(size.into()),
            state: state(phase) as i32,
        }),
        ClientEvent::Output { offset, data } => Frame::Output(pb::Output { offset, data }),
        ClientEvent::Gap { lost, offset } => Frame::Gap(pb::Gap { lost, offset }),
        ClientEvent::Resize(size) => Frame::Resize(size.into()),
        ClientEvent::Resetting => Frame::Resetting(pb::Resetting {}),
        ClientEvent::TakenOver => Frame::Detached(pb::Detached {
            reason: pb::DetachReason::TakenOver as i32,
        }),
        ClientEvent::Exit(exit) => Frame::Exit(exit.into()),
        ClientEvent::Closed(reason) => Frame::Closed(pb::Closed {
            session_id: session_id.to_string(),
            reason: close_reason(reason) as i32,
        }),
    };
    pb::ServerFrame { frame: Some(frame) }
}

/// A client of session-api's `BrokerRegistry`, for [`crate::registration`]: the broker's own
/// registration and heartbeats.
#[derive(Debug, Clone)]
pub(crate) struct RegistryClient {
    client: ptyhub_proto::session::v1::broker_registry_client::BrokerRegistryClient<
        tonic::transport::Channel,
    >,
    authorization: tonic::metadata::MetadataValue<tonic::metadata::Ascii>,
    timeout: Duration,
}

impl RegistryClient {
    /// Connects lazily: session-api may start after the broker.
    pub(crate) fn new(
        session_api: &str,
        token: &crate::config::ServiceToken,
        timeout: Duration,
    ) -> Result<Self, Error> {
        let channel = tonic::transport::Endpoint::from_shared(session_api.to_owned())
            .map_err(|error| Error::Config(format!("session-api url {session_api:?}: {error}")))?
            .connect_timeout(timeout)
            .tcp_nodelay(true)
            .connect_lazy();
        let authorization = format!("Bearer {}", token.expose())
            .parse()
            .map_err(|_| Error::Config("the service token is not a valid header value".into()))?;
        Ok(Self {
            client: ptyhub_proto::session::v1::broker_registry_client::BrokerRegistryClient::new(
                channel,
            ),
            authorization,
            timeout,
        })
    }

    fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        request.set_timeout(self.timeout);
        request.metadata_mut().insert(
            ptyhub_proto::AUTHORIZATION_METADATA,
            self.authorization.clone(),
        );
        request
    }

    /// Registers (or re-registers) this broker as up at `endpoint`.
    pub(crate) async fn register(
        &mut self,
        id: &str,
        endpoint: &str,
        docker: bool,
    ) -> Result<(), Status> {
        let request = self.request(ptyhub_proto::session::v1::RegisterBrokerRequest {
            id: id.to_owned(),
            endpoint: endpoint.to_owned(),
            docker,
        });
        self.client.register_broker(request).await?;
        Ok(())
    }

    /// Sends a heartbeat; returns how long to wait before the next one. `NOT_FOUND` means
    /// session-api does not know this broker (any more): register again.
    pub(crate) async fn heartbeat(&mut self, id: &str) -> Result<Duration, Status> {
        let request =
            self.request(ptyhub_proto::session::v1::HeartbeatRequest { id: id.to_owned() });
        let response = self.client.heartbeat(request).await?.into_inner();
        Ok(Duration::from_secs(u64::from(
            response.interval_seconds.max(1),
        )))
    }
}
