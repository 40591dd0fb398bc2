//! ptyhub-client: ptyhub from Rust through its gateway alone, with the URL and a token.
//!
//! ```no_run
//! # async fn example() -> Result<(), ptyhub_client::Error> {
//! use ptyhub_client::{AttachOptions, Client, Event};
//!
//! let client = Client::connect("http://127.0.0.1:8080", "my-token").await?;
//! let session = client.create_session("local", Default::default()).await?;
//! let mut terminal = client
//!     .attach("local", &session.id, AttachOptions::default())
//!     .await?;
//! terminal.send_input("echo hello\n").await?;
//! while let Some(event) = terminal.next().await? {
//!     if let Event::Output { data, .. } = event {
//!         print!("{}", String::from_utf8_lossy(&data));
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! - [`Client`]: instances, sessions (create, resolve by alias or client id, rename, reset,
//!   close, control mode), control without a stream ([`Client::control_state`],
//!   [`Client::request_control`], [`Client::grant_control`], [`Client::decline_control`]), the
//!   screen calls, the commands a session's shell ran ([`Client::list_commands`],
//!   [`Client::command_output`]), [`Client::attach`] and [`Client::exec`];
//! - [`Attachment`] (`attach.rs`): one terminal stream that resumes by offset on its own after
//!   a dropped connection, with input, resize, reset, the takeover notice, and control asked
//!   for, granted and declined on the stream ([`Attachment::request_control`],
//!   [`Attachment::answer_control`]);
//! - [`Exec`] (`exec.rs`): a command in a session of its own, its output byte for byte and its
//!   exit code.
//!
//! Records (instances, sessions, screens, commands) are the protobuf messages of `proto/`,
//! re-exported as [`proto`]; the terminal stream is typed here ([`Event`]). The contract's nouns
//! of a terminal's activity ([`Command`], [`TerminalActivity`]) convert from those messages with
//! `From` and `TryFrom`.

#![forbid(unsafe_code)]

mod attach;
mod error;
mod exec;

use std::time::Duration;

use ptyhub_model::proto::ProtoEnum as _;
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_proto::session::v1::session_api_client::SessionApiClient;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

pub use attach::{AttachOptions, Attachment, Event, InputReceipt};
pub use error::Error;
pub use exec::{CanonicalInput, Exec, ExecOutput};
pub use ptyhub_model::{
    Attendee, BrokerCloseReason, Command, ControlMode, ExitStatus, Notification, Progress, Role,
    TerminalActivity, TerminalSize, TerminalState,
};
pub use ptyhub_wire::{BearerAuth, ErrorCode};

/// The protobuf messages the calls take and answer with (`ptyhub.session.v1`,
/// `ptyhub.broker.v1`), for the fields this crate has no type of its own for.
pub mod proto {
    pub use ptyhub_proto::broker::v1 as broker;
    pub use ptyhub_proto::session::v1 as session;
}

/// The metadata entry that names the instance of an `Attach` on the gateway.
pub const INSTANCE_METADATA: &str = "ptyhub-instance";

/// How a session is found by [`Client::resolve_session`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// By its id.
    Id(String),
    /// By an alias (`build`, `conversation:42`...).
    Alias(String),
    /// A browser tab's own session (alias `client:<id>`).
    ClientId(String),
    /// The instance's `default` session.
    Default,
}

/// What a new session should be; every field may stay at its default.
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    /// Empty gives `Session N`.
    pub name: String,
    pub aliases: Vec<String>,
    /// Absent means 80x24.
    pub size: Option<TerminalSize>,
    /// Overrides the instance's command (argv, never a shell string).
    pub command: Vec<String>,
    /// Who may type; the default is exclusive.
    pub control_mode: ControlMode,
}

/// What [`Client::resolve_session`] found, or created.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub session: proto::session::Session,
    /// True when this call created the session.
    pub created: bool,
}

type SessionService = SessionApiClient<InterceptedService<Channel, BearerAuth>>;

/// The user agent of a [`Client`] that names none.
const DEFAULT_USER_AGENT: &str = concat!("ptyhub-client/", env!("CARGO_PKG_VERSION"));

/// How [`Client::connect_with`] reaches the gateway; every field may stay at its default.
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    /// What the program calls itself in the gateway's audit trail; default
    /// `ptyhub-client/<version>`.
    pub user_agent: Option<String>,
    /// The certificate authority (one or more PEM certificates) an `https://` gateway's
    /// certificate must chain to, instead of the system's roots: a private CA, or a gateway's
    /// self-signed certificate (one not marked as a CA itself, which rustls refuses as a
    /// server's: deploy/README.md, "TLS"). Unused with `http://`.
    pub ca_certificate: Option<Vec<u8>>,
}

/// The TLS of an `https://` gateway: the given CA alone, or the system's roots.
fn tls_config(ca_certificate: Option<&[u8]>) -> Result<ClientTlsConfig, Error> {
    let config = ClientTlsConfig::new();
    let Some(pem) = ca_certificate else {
        return Ok(config.with_native_roots());
    };
    ptyhub_wire::pem_certificate_count(pem).map_err(Error::InvalidCaCertificate)?;
    Ok(config.ca_certificate(Certificate::from_pem(pem)))
}

/// A connection to a ptyhub gateway with one credential. Cheap to clone; clones share the
/// connection, which comes back by itself after the gateway restarts.
#[derive(Debug, Clone)]
pub struct Client {
    url: String,
    channel: Channel,
    auth: BearerAuth,
}

impl Client {
    /// Connects to the gateway at `url` (`http://host:port`, or `https://host:port` for a
    /// gateway serving TLS, whose certificate the system's roots must trust) with `token` (an
    /// API token or a JWT). Fails at once when the gateway cannot be reached.
    pub async fn connect(url: &str, token: &str) -> Result<Self, Error> {
        Self::connect_with(url, token, ConnectOptions::default()).await
    }

    /// Like [`Client::connect`], with the user agent a program names itself by (the gateway's
    /// audit trail tells the `ptyhub` CLI apart by its own).
    pub async fn connect_as(url: &str, token: &str, user_agent: &str) -> Result<Self, Error> {
        let options = ConnectOptions {
            user_agent: Some(user_agent.to_owned()),
            ..ConnectOptions::default()
        };
        Self::connect_with(url, token, options).await
    }

    /// Like [`Client::connect`], with [`ConnectOptions`]: the user agent, and the certificate
    /// authority an `https://` gateway's certificate is checked against.
    pub async fn connect_with(
        url: &str,
        token: &str,
        options: ConnectOptions,
    ) -> Result<Self, Error> {
        let auth = BearerAuth::new(token).map_err(|_| Error::InvalidToken)?;
        let invalid_url = |source| Error::InvalidUrl {
            url: url.to_owned(),
            source,
        };
        let user_agent = options
            .user_agent
            .unwrap_or_else(|| DEFAULT_USER_AGENT.to_owned());
        let mut endpoint = Endpoint::from_shared(url.to_owned())
            .map_err(invalid_url)?
            .user_agent(user_agent)
            .map_err(invalid_url)?
            .connect_timeout(Duration::from_secs(5))
            .http2_keep_alive_interval(Duration::from_secs(20))
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(true)
            .tcp_nodelay(true);
        if endpoint.uri().scheme_str() == Some("https") {
            endpoint = endpoint
                .tls_config(tls_config(options.ca_certificate.as_deref())?)
                .map_err(invalid_url)?;
        }
        let channel = endpoint
            .connect()
            .await
            .map_err(|source| Error::Unreachable {
                url: url.to_owned(),
                source,
            })?;
        Ok(Self {
            url: url.to_owned(),
            channel,
            auth,
        })
    }

    /// The gateway URL this client was connected with.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn sessions_service(&self) -> SessionService {
        SessionApiClient::with_interceptor(self.channel.clone(), self.auth.clone())
            .max_decoding_message_size(usize::MAX)
    }

    /// The instances the credential may use.
    pub async fn instances(&self) -> Result<Vec<proto::session::Instance>, Error> {
        Ok(self
            .sessions_service()
            .list_instances(session_pb::ListInstancesRequest::default())
            .await?
            .into_inner()
            .instances)
    }

    /// One instance, by id or name.
    pub async fn instance(&self, instance: &str) -> Result<proto::session::Instance, Error> {
        Ok(self
            .sessions_service()
            .get_instance(session_pb::GetInstanceRequest {
                instance: instance.to_owned(),
            })
            .await?
            .into_inner())
    }

    /// Registers an instance (an admin credential's call).
    pub async fn register_instance(
        &self,
        request: proto::session::RegisterInstanceRequest,
    ) -> Result<proto::session::Instance, Error> {
        Ok(self
            .sessions_service()
            .register_instance(request)
            .await?
            .into_inner())
    }

    /// Removes an instance, closing its sessions (an admin credential's call).
    pub async fn delete_instance(
        &self,
        instance: &str,
    ) -> Result<proto::session::DeleteInstanceResponse, Error> {
        Ok(self
            .sessions_service()
            .delete_instance(session_pb::DeleteInstanceRequest {
                instance: instance.to_owned(),
            })
            .await?
            .into_inner())
    }

    /// The sessions of an instance: live ones, or with `include_closed` the history too.
    pub async fn sessions(
        &self,
        instance: &str,
        include_closed: bool,
    ) -> Result<Vec<proto::session::Session>, Error> {
        Ok(self
            .sessions_service()
            .list_sessions(session_pb::ListSessionsRequest {
                instance: instance.to_owned(),
                include_closed,
            })
            .await?
            .into_inner()
            .sessions)
    }

    /// One session of an instance.
    pub async fn session(
        &self,
        instance: &str,
        session_id: &str,
    ) -> Result<proto::session::Session, Error> {
        Ok(self
            .sessions_service()
            .get_session(session_pb::GetSessionRequest {
                instance: instance.to_owned(),
                session_id: session_id.to_owned(),
            })
            .await?
            .into_inner())
    }

    /// Starts a new session. RESOURCE_EXHAUSTED ([`ErrorCode::CapReached`]) at the instance's
    /// cap, ALREADY_EXISTS when an alias is taken.
    pub async fn create_session(
        &self,
        instance: &str,
        new: NewSession,
    ) -> Result<proto::session::Session, Error> {
        let attachment = self
            .sessions_service()
            .create_session(session_pb::CreateSessionRequest {
                instance: instance.to_owned(),
                name: new.name,
                aliases: new.aliases,
                size: new.size.map(size_to_proto),
                command: new.command,
                control_mode: new.control_mode.to_proto(),
            })
            .await?
            .into_inner();
        attachment
            .session
            .ok_or_else(|| Error::Protocol("a created session without its record".into()))
    }

    /// Finds the live session `selector` names; with `create_if_absent` an alias, client id or
    /// `default` that has none gets one (of `size`), and concurrent calls get the same one.
    /// Asks as one who may control it; a credential that may only view (a share link's) uses
    /// [`Client::resolve_session_as`] with [`Role::Viewer`].
    pub async fn resolve_session(
        &self,
        instance: &str,
        selector: Selector,
        create_if_absent: bool,
        size: Option<TerminalSize>,
    ) -> Result<Resolved, Error> {
        self.resolve_session_as(instance, selector, create_if_absent, size, Role::Controller)
            .await
    }

    /// [`Client::resolve_session`] for the role the caller will attach with: a viewer's
    /// resolve is what a share link's credential is allowed (PERMISSION_DENIED for a
    /// controller's).
    pub async fn resolve_session_as(
        &self,
        instance: &str,
        selector: Selector,
        create_if_absent: bool,
        size: Option<TerminalSize>,
        role: Role,
    ) -> Result<Resolved, Error> {
        use session_pb::resolve_session_request::Selector as Wire;
        let selector = match selector {
            Selector::Id(id) => Wire::SessionId(id),
            Selector::Alias(alias) => Wire::Alias(alias),
            Selector::ClientId(client_id) => Wire::ClientId(client_id),
            Selector::Default => Wire::Default(true),
        };
        let attachment = self
            .sessions_service()
            .resolve_session(session_pb::ResolveSessionRequest {
                instance: instance.to_owned(),
                selector: Some(selector),
                create_if_absent,
                size: size.map(size_to_proto),
                role: role.to_proto(),
            })
            .await?
            .into_inner();
        let session = attachment
            .session
            .ok_or_else(|| Error::Protocol("a resolved session without its record".into()))?;
        Ok(Resolved {
            session,
            created: attachment.created,
        })
    }

    pub async fn rename_session(
        &self,
        instance: &str,
        session_id: &str,
        name: &str,
    ) -> Result<proto::session::Session, Error> {
        Ok(self
            .sessions_service()
            .rename_session(session_pb::RenameSessionRequest {
                instance: instance.to_owned(),
                session_id: session_id.to_owned(),
                name: name.to_owned(),
            })
            .await?
            .into_inner())
    }

    /// Sets a live session's control mode; its broker moves the attached streams' roles at once
    /// (docs/CONTRACT.md, "Control modes"). Answers the session as it is now.
    pub async fn set_control_mode(
        &self,
        instance: &str,
        session_id: &str,
        control_mode: ControlMode,
    ) -> Result<proto::session::Session, Error> {
        Ok(self
            .sessions_service()
            .update_session(session_pb::UpdateSessionRequest {
                instance: instance.to_owned(),
                session_id: session_id.to_owned(),
                control_mode: control_mode.to_proto(),
            })
            .await?
            .into_inner())
    }

    /// Who controls a live session, for whom control is reserved, and the requests for control
    /// that wait (docs/CONTRACT.md, "Control requests"). A share link's credential sees no
    /// principals in it.
    pub async fn control_state(
        &self,
        instance: &str,
        session_id: &str,
    ) -> Result<proto::broker::ControlState, Error> {
        Ok(self
            .sessions_service()
            .get_control(session_pb::GetControlRequest {
                instance: instance.to_owned(),
                session_id: session_id.to_owned(),
            })
            .await?
            .into_inner())
    }

    /// Asks for control of a live session for the credential's principal, without a stream (a
    /// standing request): the controller is shown it and answers it by its id; a grant gives
    /// control to the principal's newest attached stream that may control, or reserves it for
    /// its next attach. FAILED_PRECONDITION when the principal controls or asked already, or
    /// the session is shared; PERMISSION_DENIED for a credential that may only view.
    pub async fn request_control(
        &self,
        instance: &str,
        session_id: &str,
    ) -> Result<proto::broker::ControlRequest, Error> {
        Ok(self
            .sessions_service()
            .request_control(session_pb::RequestControlRequest {
                instance: instance.to_owned(),
                session_id: session_id.to_owned(),
            })
            .await?
            .into_inner())
    }

    /// Grants a pending request for control (a stream's or a standing one) by its id, as the
    /// controller's principal. Answers the control state after the grant; PERMISSION_DENIED
    /// for another principal, NOT_FOUND for an unknown or answered request.
    pub async fn grant_control(
        &self,
        instance: &str,
        session_id: &str,
        request_id: u64,
    ) -> Result<proto::broker::ControlState, Error> {
        Ok(self
            .sessions_service()
            .grant_control(answer_control_request(instance, session_id, request_id))
            .await?
            .into_inner())
    }

    /// Declines a pending request for control by its id, as the controller's principal (or
    /// the requester's own: a withdrawal). Answers the control state after it; the errors of
    /// [`Client::grant_control`].
    pub async fn decline_control(
        &self,
        instance: &str,
        session_id: &str,
        request_id: u64,
    ) -> Result<proto::broker::ControlState, Error> {
        Ok(self
            .sessions_service()
            .decline_control(answer_control_request(instance, session_id, request_id))
            .await?
            .into_inner())
    }

    /// Gives a live session more aliases, with the rules and the cap of creation's: an alias it
    /// holds already is no change; ALREADY_EXISTS ([`ErrorCode::AlreadyExists`]) when another
    /// live session holds one. Answers the session with every alias it holds.
    pub async fn add_session_aliases(
        &self,
        instance: &str,
        session_id: &str,
        aliases: Vec<String>,
    ) -> Result<proto::session::Session, Error> {
        Ok(self
            .sessions_service()
            .add_session_aliases(session_pb::AddSessionAliasesRequest {
                instance: instance.to_owned(),
                session_id: session_id.to_owned(),
                aliases,
            })
            .await?
            .into_inner())
    }

    /// Restarts the session's command in place: same id, size, aliases and offsets.
    pub async fn reset_session(
        &self,
        instance: &str,
        session_id: &str,
    ) -> Result<proto::session::Session, Error> {
        Ok(self
            .sessions_service()
            .reset_session(session_pb::ResetSessionRequest {
                instance: instance.to_owned(),
                session_id: session_id.to_owned(),
            })
            .await?
            .into_inner())
    }

    /// Closes the session, ending its whole process group.
    pub async fn close_session(
        &self,
        instance: &str,
        session_id: &str,
    ) -> Result<proto::session::Session, Error> {
        Ok(self
            .sessions_service()
            .close_session(session_pb::CloseSessionRequest {
                instance: instance.to_owned(),
                session_id: session_id.to_owned(),
            })
            .await?
            .into_inner())
    }

    /// The session's screen as its terminal emulator holds it.
    pub async fn screen(
        &self,
        request: proto::session::GetScreenRequest,
    ) -> Result<proto::broker::Screen, Error> {
        Ok(self
            .sessions_service()
            .get_screen(request)
            .await?
            .into_inner())
    }

    /// Types into the session without attaching: all items or none.
    /// FAILED_PRECONDITION ([`ErrorCode::WrongState`]) while a client holds control, unless
    /// `force`.
    pub async fn send_input(
        &self,
        request: proto::session::SendInputRequest,
    ) -> Result<proto::broker::SendInputResponse, Error> {
        Ok(self
            .sessions_service()
            .send_input(request)
            .await?
            .into_inner())
    }

    /// Waits until the screen matches `request.pattern`, or, with `request.wait_for` (a
    /// `TerminalState`: `AT_PROMPT`, `IDLE`, `WAITING_FOR_INPUT` or `EXITED`) instead, until the
    /// terminal is in that state (`OUTCOME_STATE`; at once when it already is, and with
    /// `after_offset` only a state entered by output from there on). DEADLINE_EXCEEDED
    /// ([`ErrorCode::TimedOut`]) when the wait's own timeout passes first; INVALID_ARGUMENT
    /// ([`ErrorCode::Invalid`]) for both a pattern and a state.
    pub async fn wait_for_screen(
        &self,
        request: proto::session::WaitForScreenRequest,
    ) -> Result<proto::broker::WaitForScreenResponse, Error> {
        let timeout_ms = match request.timeout_ms {
            0 => ptyhub_wire::limits::DEFAULT_WAIT_MS,
            other => other.min(ptyhub_wire::limits::MAX_WAIT_MS),
        };
        let mut request = tonic::Request::new(request);
        // The wait is bounded by its own timeout; the call may take that plus an answer's time.
        request.set_timeout(Duration::from_millis(timeout_ms.into()) + Duration::from_secs(30));
        Ok(self
            .sessions_service()
            .wait_for_screen(request)
            .await?
            .into_inner())
    }

    /// The commands the session's shell ran, oldest first (those with an id above `after`, at
    /// most `limit`: 0 means 100, over 1000 is INVALID_ARGUMENT), with what its terminal is
    /// doing. A session whose program has no shell integration lists none. A share link's
    /// credential may not read them (PERMISSION_DENIED).
    pub async fn list_commands(
        &self,
        instance: &str,
        session_id: &str,
        after: u64,
        limit: u32,
    ) -> Result<proto::broker::ListCommandsResponse, Error> {
        Ok(self
            .sessions_service()
            .list_commands(session_pb::ListCommandsRequest {
                instance: instance.to_owned(),
                session_id: session_id.to_owned(),
                after,
                limit,
            })
            .await?
            .into_inner())
    }

    /// The session's commands as they happen: first those it keeps with an id above
    /// `after_id`, as they are, then each command once as it starts and again once it ended
    /// (the same id). The stream ends when the session's process exits or the session closes;
    /// an UNAVAILABLE error ([`ErrorCode::Unavailable`]) ends it when a server in between
    /// stops: watch again from the last id seen. PERMISSION_DENIED for a share link's
    /// credential.
    pub async fn watch_commands(
        &self,
        instance: &str,
        session_id: &str,
        after_id: u64,
    ) -> Result<
        impl tokio_stream::Stream<Item = Result<proto::broker::Command, Error>> + Send + use<>,
        Error,
    > {
        use tokio_stream::StreamExt as _;
        let commands = self
            .sessions_service()
            .watch_commands(session_pb::WatchCommandsRequest {
                instance: instance.to_owned(),
                session_id: session_id.to_owned(),
                after_id,
            })
            .await?
            .into_inner();
        Ok(commands.map(|command| command.map_err(Error::from)))
    }

    /// One command's output, up to now while it runs: as plain text, or with `ansi` the bytes
    /// as the program wrote them. NOT_FOUND ([`ErrorCode::NotFound`]) for a command the session
    /// does not keep; OUT_OF_RANGE ([`ErrorCode::Gone`]) when neither the session's output ring
    /// nor, for a recorded session, its recording holds all of it, with how much is lost in the
    /// message.
    pub async fn command_output(
        &self,
        instance: &str,
        session_id: &str,
        command_id: u64,
        ansi: bool,
    ) -> Result<proto::broker::CommandOutput, Error> {
        let format = if ansi {
            broker_pb::ScreenFormat::Ansi
        } else {
            broker_pb::ScreenFormat::Text
        };
        Ok(self
            .sessions_service()
            .get_command_output(session_pb::GetCommandOutputRequest {
                instance: instance.to_owned(),
                session_id: session_id.to_owned(),
                command_id,
                format: format as i32,
            })
            .await?
            .into_inner())
    }

    /// Types `request.command` at the session's shell prompt, as a colleague would, and
    /// answers once it ended: the command (its `exit_code`), its output (at most the last
    /// 1 MiB, `truncated` otherwise). INVALID_ARGUMENT ([`ErrorCode::Invalid`]) for an empty or
    /// NUL-bearing command, a timeout over 300 s or a program without shell integration;
    /// FAILED_PRECONDITION ([`ErrorCode::WrongState`]) while a program runs, or while a client
    /// holds control without `force`; DEADLINE_EXCEEDED ([`ErrorCode::TimedOut`]) when it did
    /// not end within its timeout (it goes on running); PERMISSION_DENIED for a share link's
    /// credential.
    pub async fn run(
        &self,
        request: proto::session::RunRequest,
    ) -> Result<proto::broker::RunResponse, Error> {
        let timeout_ms = match request.timeout_ms {
            0 => ptyhub_wire::limits::DEFAULT_WAIT_MS,
            other => other.min(ptyhub_wire::limits::MAX_WAIT_MS),
        };
        let mut request = tonic::Request::new(request);
        // The run is bounded by its own timeout; the call may take that plus an answer's time.
        request.set_timeout(Duration::from_millis(timeout_ms.into()) + Duration::from_secs(30));
        Ok(self.sessions_service().run(request).await?.into_inner())
    }

    /// Attaches to a session through the gateway: see [`Attachment`].
    pub async fn attach(
        &self,
        instance: &str,
        session_id: &str,
        options: AttachOptions,
    ) -> Result<Attachment, Error> {
        Attachment::open(self.clone(), instance, session_id, options).await
    }

    /// Runs `command` (argv) in a new session of `instance` (80x24) and streams its output:
    /// see [`Exec`].
    pub async fn exec(&self, instance: &str, command: Vec<String>) -> Result<Exec, Error> {
        Exec::start(self.clone(), instance, command, None).await
    }

    /// [`Client::exec`] on a terminal of `size` (for output that wraps like the caller's).
    pub async fn exec_at_size(
        &self,
        instance: &str,
        command: Vec<String>,
        size: TerminalSize,
    ) -> Result<Exec, Error> {
        Exec::start(self.clone(), instance, command, Some(size)).await
    }

    /// Runs `command` to its end and returns its exit status and output.
    pub async fn exec_output(
        &self,
        instance: &str,
        command: Vec<String>,
    ) -> Result<ExecOutput, Error> {
        let mut exec = self.exec(instance, command).await?;
        exec.close_input().await?;
        let mut output = Vec::new();
        while let Some(chunk) = exec.next_output().await? {
            output.extend_from_slice(&chunk);
        }
        let status = exec.wait().await?;
        Ok(ExecOutput { status, output })
    }

    /// The raw `Attach` call on the gateway: one stream, no resume.
    async fn attach_stream(
        &self,
        instance: &str,
        frames: tokio::sync::mpsc::Receiver<broker_pb::ClientFrame>,
    ) -> Result<tonic::Streaming<broker_pb::ServerFrame>, Error> {
        let mut request = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(frames));
        let instance_value = instance
            .parse()
            .map_err(|_| Error::InvalidMetadata(instance.to_owned()))?;
        request
            .metadata_mut()
            .insert(INSTANCE_METADATA, instance_value);
        self.auth.authorize(&mut request);
        let mut broker =
            ptyhub_proto::broker::v1::pty_broker_client::PtyBrokerClient::new(self.channel.clone())
                .max_decoding_message_size(usize::MAX);
        Ok(broker.attach(request).await?.into_inner())
    }
}

fn size_to_proto(size: TerminalSize) -> broker_pb::TerminalSize {
    broker_pb::TerminalSize {
        cols: size.cols().into(),
        rows: size.rows().into(),
    }
}

fn answer_control_request(
    instance: &str,
    session_id: &str,
    request_id: u64,
) -> session_pb::AnswerControlRequest {
    session_pb::AnswerControlRequest {
        instance: instance.to_owned(),
        session_id: session_id.to_owned(),
        request_id,
    }
}
