//! The gateway's only contact with generated protobuf types on the way to its upstreams: typed
//! calls to session-api, `Attach` streams to brokers, and the conversions to [`crate::domain`].
//!
//! The session proxy (`session_proxy.rs`) forwards protobuf messages as they are; everything
//! else goes through here.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::{FutureExt, StreamExt};
use ptyhub_model::proto::{self, ProtoEnum as _};
use ptyhub_model::{AuditKind, Role, TerminalSize};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_wire::limits::{DEFAULT_WAIT_MS, MAX_WAIT_MS};
use ptyhub_wire::{Actor, BearerAuth, ServiceCredential};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::brokers::{BrokerChannels, InProcessBrokers};
use crate::domain::{
    AttachTarget, AuditEvent, AuditEventPage, AuditListing, Cell, ChangeKind, Color, Command,
    CommandListing, CommandOutput, CommandOutputFormat, CommandPage, CommandRun, CommandRunResult,
    Cursor, ExitStatus, InputItem, InputWritten, Instance, NewInstance, RecordMode, Screen,
    ScreenContent, ScreenFormat, ScreenRequest, ScreenRow, ScreenWait, ScreenWaitResult, Session,
    SessionAttachment, SessionChange, SessionSelector, SessionStatus, Share, ShareLookup, Target,
    TerminalActivity, TerminalCommand, TerminalEvent, WaitOutcome,
};
use crate::error::ApiError;

/// What the gateway reports to the audit trail (see [`Upstreams::report_audit_event`]).
#[derive(Debug, Clone)]
pub struct AuditReport {
    pub kind: AuditKind,
    pub instance_id: Option<String>,
    pub session_id: Option<String>,
    pub role: Option<Role>,
    pub attachment_id: Option<uuid::Uuid>,
    pub detail: BTreeMap<String, String>,
}

impl AuditReport {
    pub fn new(kind: AuditKind) -> Self {
        Self {
            kind,
            instance_id: None,
            session_id: None,
            role: None,
            attachment_id: None,
            detail: BTreeMap::new(),
        }
    }

    /// One stream's attach or detach.
    pub fn stream(
        kind: AuditKind,
        instance_id: &str,
        session_id: &str,
        role: Role,
        attachment_id: uuid::Uuid,
    ) -> Self {
        Self {
            instance_id: Some(instance_id.to_owned()),
            session_id: Some(session_id.to_owned()),
            role: Some(role),
            attachment_id: Some(attachment_id),
            ..Self::new(kind)
        }
    }

    pub fn detail(mut self, key: &str, value: impl Into<String>) -> Self {
        self.detail.insert(key.to_owned(), value.into());
        self
    }
}

/// Session changes as [`Upstreams::watch_sessions`] streams them.
pub type SessionChanges = std::pin::Pin<
    Box<dyn futures::Stream<Item = Result<SessionChange, ApiError>> + Send + 'static>,
>;

/// The raw session-api client, with the service credential (and, acting for a user, the
/// [`Actor`]) on every call.
pub type SessionApiClient =
    session_pb::session_api_client::SessionApiClient<InterceptedService<Channel, SessionApiAuth>>;

/// What every call to session-api carries: the gateway's service credential, and the end user
/// the call is made for, whom session-api's audit trail names.
#[derive(Clone, Debug)]
pub struct SessionApiAuth {
    credential: BearerAuth,
    actor: Option<Arc<Actor>>,
}

impl Interceptor for SessionApiAuth {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        self.credential.authorize(&mut request);
        if let Some(actor) = &self.actor {
            actor.insert_into(request.metadata_mut());
        }
        Ok(request)
    }
}
type BrokerRegistryClient = session_pb::broker_registry_client::BrokerRegistryClient<
    InterceptedService<Channel, BearerAuth>,
>;
type ShareRegistryClient = session_pb::share_registry_client::ShareRegistryClient<
    InterceptedService<Channel, SessionApiAuth>,
>;

const SESSION_API: &str = "session-api";
const BROKER: &str = "pty-broker";

/// The session-api endpoint cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("invalid session-api endpoint {endpoint:?}: {source}")]
pub struct UpstreamError {
    endpoint: String,
    source: ptyhub_wire::TlsError,
}

/// The services the gateway forwards to: session-api, and the brokers it names. A handle: every
/// stream holds one (acting for its principal), and a clone costs a reference count.
#[derive(Clone, Debug)]
pub struct Upstreams(Arc<UpstreamClients>);

impl std::ops::Deref for Upstreams {
    type Target = UpstreamClients;

    fn deref(&self) -> &UpstreamClients {
        &self.0
    }
}

/// The clients of [`Upstreams`].
#[derive(Clone, Debug)]
pub struct UpstreamClients {
    session_api: SessionApiClient,
    /// The channels and credential the session-api clients are built on, for
    /// [`Upstreams::acting_for`].
    channel: Channel,
    waits_channel: Channel,
    credential: BearerAuth,
    /// The same service on a channel without a per-call bound, for screen waits.
    session_api_waits: SessionApiClient,
    broker_registry: BrokerRegistryClient,
    share_registry: ShareRegistryClient,
    brokers: BrokerChannels,
    /// How long an answer may take beyond a wait's own timeout.
    answer_margin: Duration,
}

impl Upstreams {
    /// Connects lazily: the gateway starts even when session-api is down, and `/healthz` says so.
    pub fn new(
        endpoint: &str,
        service_credential: &ServiceCredential,
        timeout: Duration,
        tls: &ptyhub_wire::TlsConfig,
        in_process_brokers: InProcessBrokers,
    ) -> Result<Self, UpstreamError> {
        let endpoint = tls
            .endpoint(endpoint)
            .map_err(|source| UpstreamError {
                endpoint: endpoint.to_owned(),
                source,
            })?
            .connect_timeout(timeout)
            .http2_keep_alive_interval(Duration::from_secs(20))
            .keep_alive_timeout(Duration::from_secs(20));
        // Screen waits last as long as their caller asks (up to five minutes), so they cannot
        // share the channel whose every call gives up after `timeout`: the channel's bound
        // would cut them short (tonic takes the shorter of it and the call's own). Their
        // channel has no bound of its own; each wait carries its own deadline instead.
        let waits = endpoint.clone().connect_lazy();
        let channel = endpoint.timeout(timeout).connect_lazy();
        let interceptor = service_credential.bearer_auth();
        let auth = SessionApiAuth {
            credential: interceptor.clone(),
            actor: None,
        };
        Ok(Self(Arc::new(UpstreamClients {
            session_api: session_pb::session_api_client::SessionApiClient::with_interceptor(
                channel.clone(),
                auth.clone(),
            ),
            session_api_waits: session_pb::session_api_client::SessionApiClient::with_interceptor(
                waits.clone(),
                auth.clone(),
            ),
            broker_registry:
                session_pb::broker_registry_client::BrokerRegistryClient::with_interceptor(
                    channel.clone(),
                    interceptor.clone(),
                ),
            share_registry:
                session_pb::share_registry_client::ShareRegistryClient::with_interceptor(
                    channel.clone(),
                    auth,
                ),
            channel,
            waits_channel: waits,
            credential: interceptor,
            brokers: BrokerChannels::new(timeout, tls.clone(), in_process_brokers),
            answer_margin: timeout,
        })))
    }

    /// The same upstreams, whose calls to session-api say they are made for `actor`: what
    /// every call that changes something, or attaches, uses, so the audit trail names the user.
    pub fn acting_for(&self, actor: &Actor) -> Upstreams {
        let auth = SessionApiAuth {
            credential: self.credential.clone(),
            actor: Some(Arc::new(actor.clone())),
        };
        let mut upstreams = UpstreamClients::clone(self);
        upstreams.session_api = session_pb::session_api_client::SessionApiClient::with_interceptor(
            self.channel.clone(),
            auth.clone(),
        );
        upstreams.share_registry =
            session_pb::share_registry_client::ShareRegistryClient::with_interceptor(
                self.channel.clone(),
                auth.clone(),
            );
        upstreams.session_api_waits =
            session_pb::session_api_client::SessionApiClient::with_interceptor(
                self.waits_channel.clone(),
                auth,
            );
        Self(Arc::new(upstreams))
    }

    /// Reports what only the gateway sees (an attach, a detach, a refusal) to the audit trail,
    /// for the actor these upstreams act for. A failure is logged: the stream or the refusal
    /// goes on regardless.
    pub async fn report_audit_event(&self, report: AuditReport) {
        let request = session_pb::RecordAuditEventRequest {
            kind: report.kind.to_proto(),
            instance_id: report.instance_id.unwrap_or_default(),
            session_id: report.session_id.unwrap_or_default(),
            role: proto::optional_to_proto(report.role),
            attachment_id: report
                .attachment_id
                .map(|id| id.to_string())
                .unwrap_or_default(),
            detail: report.detail.into_iter().collect(),
        };
        if let Err(status) = self.session_api.clone().record_audit_event(request).await {
            tracing::error!(code = ?status.code(), message = status.message(),
                "session-api did not record an audit event");
        }
    }

    /// One page of the audit trail.
    pub async fn list_audit_events(
        &self,
        listing: AuditListing,
    ) -> Result<AuditEventPage, ApiError> {
        let page = self
            .session_api
            .clone()
            .list_audit_events(audit_listing_to_proto(listing))
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(audit_page_from_proto(page))
    }

    /// The raw client, for the gRPC-web surface that forwards messages unchanged.
    pub fn session_api_client(&self) -> SessionApiClient {
        self.session_api.clone()
    }

    /// Forwards a screen wait as it is, with a deadline of the wait's own timeout plus the time
    /// an answer may take: the one call that may outlast the channel's per-call bound.
    pub async fn forward_wait_for_screen(
        &self,
        message: session_pb::WaitForScreenRequest,
    ) -> Result<tonic::Response<broker_pb::WaitForScreenResponse>, tonic::Status> {
        let deadline = self.waiting_deadline(message.timeout_ms);
        let mut request = tonic::Request::new(message);
        request.set_timeout(deadline);
        self.session_api_waits
            .clone()
            .wait_for_screen(request)
            .await
    }

    /// Forwards a `Run` as it is, which waits for the command it types to end: like a screen
    /// wait, with a deadline of its own timeout plus the time an answer may take.
    pub async fn forward_run(
        &self,
        message: session_pb::RunRequest,
    ) -> Result<tonic::Response<broker_pb::RunResponse>, tonic::Status> {
        let deadline = self.waiting_deadline(message.timeout_ms);
        let mut request = tonic::Request::new(message);
        request.set_timeout(deadline);
        self.session_api_waits.clone().run(request).await
    }

    /// How long a call that waits `timeout_ms` (0: the default) may take to answer.
    fn waiting_deadline(&self, timeout_ms: u32) -> Duration {
        let timeout_ms = match timeout_ms {
            0 => DEFAULT_WAIT_MS,
            // A timeout over the maximum is refused upstream, quickly; it needs no longer bound.
            timeout_ms => timeout_ms.min(MAX_WAIT_MS),
        };
        Duration::from_millis(timeout_ms.into()) + self.answer_margin
    }

    pub async fn get_screen(
        &self,
        instance_id: &str,
        session_id: &str,
        screen: ScreenRequest,
    ) -> Result<Screen, ApiError> {
        let request = session_pb::GetScreenRequest {
            instance: instance_id.to_owned(),
            session_id: session_id.to_owned(),
            format: screen_format_to_proto(screen.format) as i32,
            scrollback: screen.scrollback,
        };
        let screen = self
            .session_api
            .clone()
            .get_screen(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        screen_from_proto(screen)
    }

    /// Types `items` in order, all or nothing; `force` types even while a client holds control.
    pub async fn send_input(
        &self,
        instance_id: &str,
        session_id: &str,
        items: Vec<InputItem>,
        force: bool,
    ) -> Result<InputWritten, ApiError> {
        use broker_pb::input_item::Item;
        let items = items
            .into_iter()
            .map(|item| broker_pb::InputItem {
                item: Some(match item {
                    InputItem::Text(text) => Item::Text(text),
                    InputItem::Key(key) => Item::Key(key),
                }),
            })
            .collect();
        let written = self
            .session_api
            .clone()
            .send_input(session_pb::SendInputRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_owned(),
                items,
                force,
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(InputWritten {
            bytes_written: written.bytes_written,
            offset: written.output_offset,
        })
    }

    pub async fn wait_for_screen(
        &self,
        instance_id: &str,
        session_id: &str,
        wait: ScreenWait,
    ) -> Result<ScreenWaitResult, ApiError> {
        let request = session_pb::WaitForScreenRequest {
            instance: instance_id.to_owned(),
            session_id: session_id.to_owned(),
            pattern: wait.pattern,
            timeout_ms: millis(wait.timeout),
            quiet_ms: millis(wait.quiet),
            after_offset: wait.after_offset,
            format: screen_format_to_proto(wait.screen.format) as i32,
            scrollback: wait.screen.scrollback,
        };
        let answer = self
            .forward_wait_for_screen(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        wait_result_from_proto(answer)
    }

    /// A page of the commands the session's shell ran, oldest first, with what its terminal
    /// is doing.
    pub async fn list_commands(
        &self,
        instance_id: &str,
        session_id: &str,
        listing: CommandListing,
    ) -> Result<CommandPage, ApiError> {
        let page = self
            .session_api
            .clone()
            .list_commands(session_pb::ListCommandsRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_owned(),
                after: listing.after,
                limit: listing.limit,
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(CommandPage {
            commands: page.commands.into_iter().map(Command::from).collect(),
            first_kept_id: page.first_kept_id,
            terminal: terminal_from_proto(page.terminal).unwrap_or_default(),
        })
    }

    /// One command's output: NOT_FOUND for a command the session does not keep, `Gone` when
    /// the ring no longer holds all of it (the message says how much is lost).
    pub async fn command_output(
        &self,
        instance_id: &str,
        session_id: &str,
        command_id: u64,
        format: CommandOutputFormat,
    ) -> Result<CommandOutput, ApiError> {
        let format = command_output_format_to_proto(format);
        let output = self
            .session_api
            .clone()
            .get_command_output(session_pb::GetCommandOutputRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_owned(),
                command_id,
                format: format as i32,
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        let command = output
            .command
            .ok_or_else(|| ApiError::internal("session-api answered output without its command"))?;
        Ok(CommandOutput {
            command: Command::from(command),
            data: output.data,
        })
    }

    /// Types a command at the session's shell prompt and answers once it ended: the command
    /// and its output. INVALID_ARGUMENT (no shell integration), FAILED_PRECONDITION (not at
    /// the prompt, or control held without `force`) and DEADLINE_EXCEEDED (it goes on running)
    /// come back with the broker's words.
    pub async fn run(
        &self,
        instance_id: &str,
        session_id: &str,
        run: CommandRun,
    ) -> Result<CommandRunResult, ApiError> {
        let answer = self
            .forward_run(session_pb::RunRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_owned(),
                command: run.command,
                timeout_ms: run.timeout_ms,
                force: run.force,
                format: command_output_format_to_proto(run.format) as i32,
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        let command = answer
            .command
            .ok_or_else(|| ApiError::internal("session-api answered a run without its command"))?;
        Ok(CommandRunResult {
            command: Command::from(command),
            output: answer.output,
            truncated: answer.truncated,
        })
    }

    pub async fn register_instance(&self, new: NewInstance) -> Result<Instance, ApiError> {
        let request = session_pb::RegisterInstanceRequest {
            name: new.name,
            target: Some(new.target.into()),
            command: new.command,
            env: new.env.into_iter().collect(),
            cwd: new.cwd,
            user: new.user,
            max_sessions: new.max_sessions,
            labels: new.labels.into_iter().collect(),
            broker_id: String::new(),
            record: proto::optional_to_proto(new.record),
            shell_integration: new.shell_integration,
        };
        let instance = self
            .session_api
            .clone()
            .register_instance(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(instance_from_proto(instance))
    }

    /// A share of an instance (or one session of it) for `ttl`, and its token.
    pub async fn create_share(
        &self,
        instance_id: &str,
        session_id: Option<&str>,
        ttl: Duration,
        created_by: &str,
    ) -> Result<(Share, String), ApiError> {
        let request = session_pb::CreateShareRequest {
            instance: instance_id.to_owned(),
            session_id: session_id.unwrap_or_default().to_owned(),
            ttl_seconds: ttl.as_secs(),
            created_by: created_by.to_owned(),
        };
        let created = self
            .share_registry
            .clone()
            .create_share(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok((
            share_from_proto(created.share.unwrap_or_default()),
            created.token,
        ))
    }

    pub async fn list_shares(
        &self,
        instance_id: &str,
        include_ended: bool,
    ) -> Result<Vec<Share>, ApiError> {
        let request = session_pb::ListSharesRequest {
            instance: instance_id.to_owned(),
            include_ended,
        };
        let listed = self
            .share_registry
            .clone()
            .list_shares(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(listed.shares.into_iter().map(share_from_proto).collect())
    }

    pub async fn revoke_share(&self, instance_id: &str, share_id: &str) -> Result<Share, ApiError> {
        let request = session_pb::RevokeShareRequest {
            instance: instance_id.to_owned(),
            share_id: share_id.to_owned(),
        };
        let share = self
            .share_registry
            .clone()
            .revoke_share(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(share_from_proto(share))
    }

    /// The live share of a share link's token, or of a share id.
    pub async fn find_share(&self, by: ShareLookup<'_>) -> Result<Share, ApiError> {
        let by = match by {
            ShareLookup::Token(token) => {
                session_pb::find_share_request::By::Token(token.to_owned())
            }
            ShareLookup::Id(id) => session_pb::find_share_request::By::ShareId(id.to_owned()),
        };
        let share = self
            .share_registry
            .clone()
            .find_share(session_pb::FindShareRequest { by: Some(by) })
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(share_from_proto(share))
    }

    pub async fn get_instance(&self, instance: &str) -> Result<Instance, ApiError> {
        let request = session_pb::GetInstanceRequest {
            instance: instance.to_owned(),
        };
        let instance = self
            .session_api
            .clone()
            .get_instance(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(instance_from_proto(instance))
    }

    pub async fn list_instances(&self) -> Result<Vec<Instance>, ApiError> {
        let response = self
            .session_api
            .clone()
            .list_instances(session_pb::ListInstancesRequest::default())
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(response
            .instances
            .into_iter()
            .map(instance_from_proto)
            .collect())
    }

    /// Returns how many sessions the deletion closed.
    pub async fn delete_instance(&self, instance_id: &str) -> Result<u32, ApiError> {
        let response = self
            .session_api
            .clone()
            .delete_instance(session_pb::DeleteInstanceRequest {
                instance: instance_id.to_owned(),
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(response.closed_sessions)
    }

    /// Creates a session; an empty `command` runs the instance's. Whether the caller may choose
    /// one is checked before (`Access::check_command_override`).
    pub async fn create_session(
        &self,
        instance_id: &str,
        name: Option<String>,
        aliases: Vec<String>,
        size: Option<TerminalSize>,
        command: Vec<String>,
    ) -> Result<SessionAttachment, ApiError> {
        let request = session_pb::CreateSessionRequest {
            instance: instance_id.to_owned(),
            name: name.unwrap_or_default(),
            aliases,
            size: size.map(Into::into),
            command,
        };
        let attachment = self
            .session_api
            .clone()
            .create_session(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        attachment_from_proto(attachment)
    }

    pub async fn get_session(
        &self,
        instance_id: &str,
        session_id: &str,
    ) -> Result<Session, ApiError> {
        let session = self
            .session_api
            .clone()
            .get_session(session_pb::GetSessionRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_owned(),
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(session_from_proto(session))
    }

    /// The changes of `instance_id`'s sessions from now on, as session-api's `WatchSessions`
    /// reports them; changes of a kind this gateway does not know are skipped.
    pub async fn watch_sessions(&self, instance_id: &str) -> Result<SessionChanges, ApiError> {
        let changes = self
            .session_api
            .clone()
            .watch_sessions(session_pb::WatchSessionsRequest {
                instance: instance_id.to_owned(),
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(Box::pin(changes.filter_map(|change| {
            std::future::ready(match change {
                Ok(change) => change_from_proto(change).map(Ok),
                Err(status) => Some(Err(session_api_error(status))),
            })
        })))
    }

    pub async fn list_sessions(
        &self,
        instance_id: &str,
        include_closed: bool,
    ) -> Result<Vec<Session>, ApiError> {
        let response = self
            .session_api
            .clone()
            .list_sessions(session_pb::ListSessionsRequest {
                instance: instance_id.to_owned(),
                include_closed,
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(response
            .sessions
            .into_iter()
            .map(session_from_proto)
            .collect())
    }

    pub async fn resolve_session(
        &self,
        instance_id: &str,
        selector: SessionSelector,
        create_if_absent: bool,
        size: Option<TerminalSize>,
        role: Role,
    ) -> Result<SessionAttachment, ApiError> {
        use session_pb::resolve_session_request::Selector;
        let selector = match selector {
            SessionSelector::Id(id) => Selector::SessionId(id),
            SessionSelector::Alias(alias) => Selector::Alias(alias),
            SessionSelector::ClientId(client_id) => Selector::ClientId(client_id),
            SessionSelector::Default => Selector::Default(true),
        };
        let request = session_pb::ResolveSessionRequest {
            instance: instance_id.to_owned(),
            selector: Some(selector),
            create_if_absent,
            size: size.map(Into::into),
            role: role.to_proto(),
        };
        let attachment = self
            .session_api
            .clone()
            .resolve_session(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        attachment_from_proto(attachment)
    }

    pub async fn rename_session(
        &self,
        instance_id: &str,
        session_id: &str,
        name: String,
    ) -> Result<Session, ApiError> {
        let session = self
            .session_api
            .clone()
            .rename_session(session_pb::RenameSessionRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_owned(),
                name,
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(session_from_proto(session))
    }

    pub async fn reset_session(
        &self,
        instance_id: &str,
        session_id: &str,
    ) -> Result<Session, ApiError> {
        let session = self
            .session_api
            .clone()
            .reset_session(session_pb::ResetSessionRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_owned(),
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(session_from_proto(session))
    }

    pub async fn close_session(
        &self,
        instance_id: &str,
        session_id: &str,
    ) -> Result<Session, ApiError> {
        let session = self
            .session_api
            .clone()
            .close_session(session_pb::CloseSessionRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_owned(),
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(session_from_proto(session))
    }

    /// Whether session-api answers (a registry read, which also proves its database answers).
    pub async fn check_session_api(&self) -> Result<(), ApiError> {
        self.broker_registry
            .clone()
            .list_brokers(session_pb::ListBrokersRequest {})
            .await
            .map_err(session_api_error)?;
        Ok(())
    }

    /// Every registered broker and whether it answers its own health check.
    pub async fn check_brokers(&self) -> Result<Vec<BrokerHealth>, ApiError> {
        let brokers = self
            .broker_registry
            .clone()
            .list_brokers(session_pb::ListBrokersRequest {})
            .await
            .map_err(session_api_error)?
            .into_inner()
            .brokers;
        let checks = brokers.into_iter().map(|broker| async move {
            let answered = if broker.up {
                self.brokers.check_health(&broker.endpoint).await
            } else {
                Err("missed its heartbeats".to_owned())
            };
            BrokerHealth {
                id: broker.id,
                endpoint: broker.endpoint,
                problem: answered.err(),
            }
        });
        Ok(futures::future::join_all(checks).await)
    }

    /// Opens an `Attach` stream and sends its `Hello`. The first event is read by the caller.
    /// With `snapshot`, the stream starts with a snapshot of the screen instead of a replay.
    pub async fn attach(
        &self,
        target: &AttachTarget,
        size: Option<TerminalSize>,
        since: Option<u64>,
        snapshot: bool,
    ) -> Result<(AttachEvents, AttachCommands), ApiError> {
        let broker = self.brokers.transport(&target.broker_endpoint)?;
        // The queue holds commands, not client frames: a bounded channel allocates its first
        // block of slots up front, and a frame (the hello's variant) is twice a command's size.
        let (commands, command_receiver) = mpsc::channel(ATTACH_COMMAND_QUEUE);
        let hello = broker_pb::ClientFrame {
            frame: Some(broker_pb::client_frame::Frame::Hello(broker_pb::Hello {
                ticket: target.ticket.clone(),
                session_id: target.session_id.clone(),
                role: target.role.to_proto(),
                size: size.map(Into::into),
                since,
                snapshot,
            })),
        };
        let frames = futures::stream::once(std::future::ready(hello))
            .chain(ReceiverStream::new(command_receiver).map(command_frame));
        let events = broker_pb::pty_broker_client::PtyBrokerClient::new(broker)
            .attach(frames)
            .await
            .map_err(broker_error)?
            .into_inner();
        Ok((AttachEvents { events }, AttachCommands { commands }))
    }
}

impl Upstreams {
    /// A fresh ticket for a session the caller was checked for, with the broker it lives on.
    pub async fn issue_attach_ticket(
        &self,
        instance_id: &str,
        session_id: &str,
        role: Role,
    ) -> Result<AttachTarget, ApiError> {
        let target = self
            .session_api
            .clone()
            .issue_attach_ticket(session_pb::IssueAttachTicketRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_owned(),
                role: role.to_proto(),
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(attach_target_from_proto(target))
    }

    /// Opens a broker `Attach` whose client frames are `frames` (the first one the hello) and
    /// returns its server frames unchanged: the public relay passes them through as they are.
    pub async fn attach_frames(
        &self,
        broker_endpoint: &str,
        frames: mpsc::Receiver<broker_pb::ClientFrame>,
    ) -> Result<tonic::Streaming<broker_pb::ServerFrame>, ApiError> {
        let broker = self.brokers.transport(broker_endpoint)?;
        broker_pb::pty_broker_client::PtyBrokerClient::new(broker)
            .attach(ReceiverStream::new(frames))
            .await
            .map(tonic::Response::into_inner)
            .map_err(broker_error)
    }
}

/// How many client frames may wait for the broker before the WebSocket stops reading the client.
const ATTACH_COMMAND_QUEUE: usize = 64;

/// A broker's health as `/healthz` reports it.
#[derive(Debug, Clone)]
pub struct BrokerHealth {
    pub id: String,
    pub endpoint: String,
    /// Why the broker is considered down, when it is.
    pub problem: Option<String>,
}

/// The server half of an `Attach` stream.
#[derive(Debug)]
pub struct AttachEvents {
    events: tonic::Streaming<broker_pb::ServerFrame>,
}

impl AttachEvents {
    /// The next event; `None` when the broker ended the stream.
    pub async fn next(&mut self) -> Result<Option<TerminalEvent>, ApiError> {
        loop {
            let message = match self.events.message().await {
                Err(status) if ptyhub_wire::is_handing_over(&status) => {
                    return Ok(Some(TerminalEvent::HandingOver));
                }
                message => message.map_err(broker_error)?,
            };
            match message {
                None => return Ok(None),
                Some(frame) => {
                    if let Some(event) = event_from_proto(frame) {
                        return Ok(Some(event));
                    }
                }
            }
        }
    }

    /// The next event if one is already here, without waiting.
    pub fn next_ready(&mut self) -> Option<Result<Option<TerminalEvent>, ApiError>> {
        self.next().now_or_never()
    }
}

/// The client half of an `Attach` stream.
#[derive(Debug, Clone)]
pub struct AttachCommands {
    commands: mpsc::Sender<TerminalCommand>,
}

impl AttachCommands {
    /// A queue of `capacity` commands and the receiving end a stream would read.
    #[cfg(test)]
    pub(crate) fn channel(capacity: usize) -> (Self, mpsc::Receiver<TerminalCommand>) {
        let (commands, receiver) = mpsc::channel(capacity);
        (Self { commands }, receiver)
    }

    /// Queues a command if there is room, without waiting: `Ok(Some(command))` hands it back
    /// when the queue is full, an error means the stream has ended.
    pub fn try_send(&self, command: TerminalCommand) -> Result<Option<TerminalCommand>, ApiError> {
        match self.commands.try_send(command) {
            Ok(()) => Ok(None),
            Err(mpsc::error::TrySendError::Full(command)) => Ok(Some(command)),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(attach_stream_ended()),
        }
    }

    /// Waits for room for one command; an error means the stream has ended.
    pub async fn reserve(&self) -> Result<mpsc::Permit<'_, TerminalCommand>, ApiError> {
        self.commands
            .reserve()
            .await
            .map_err(|_| attach_stream_ended())
    }
}

fn attach_stream_ended() -> ApiError {
    ApiError::unavailable("attach stream ended")
}

/// The client frame that carries `command`.
fn command_frame(command: TerminalCommand) -> broker_pb::ClientFrame {
    let frame = match command {
        TerminalCommand::Input(data) => {
            broker_pb::client_frame::Frame::Input(broker_pb::Input { data })
        }
        TerminalCommand::Resize(size) => broker_pb::client_frame::Frame::Resize(size.into()),
        TerminalCommand::Reset => {
            broker_pb::client_frame::Frame::Reset(broker_pb::ResetTerminal {})
        }
    };
    broker_pb::ClientFrame { frame: Some(frame) }
}

fn session_api_error(status: tonic::Status) -> ApiError {
    ApiError::from_backend(SESSION_API, &status)
}

fn broker_error(status: tonic::Status) -> ApiError {
    ApiError::from_backend(BROKER, &status)
}

fn share_from_proto(share: session_pb::Share) -> Share {
    Share {
        id: share.id,
        instance_id: share.instance_id,
        session_id: Some(share.session_id).filter(|id| !id.is_empty()),
        created_by: share.created_by,
        created_at: timestamp_from_proto(share.created_at),
        expires_at: timestamp_from_proto(share.expires_at),
        revoked_at: timestamp_from_proto(share.revoked_at),
    }
}

/// An outside client's audit listing (the gRPC surface), its times checked.
pub fn audit_listing_from_proto(
    request: session_pb::ListAuditEventsRequest,
) -> Result<AuditListing, ApiError> {
    let time = |name: &str, at: Option<prost_types::Timestamp>| match at {
        None => Ok(None),
        Some(at) => timestamp_from_proto(Some(at))
            .map(Some)
            .ok_or_else(|| ApiError::invalid(format!("{name} is not a valid time"))),
    };
    Ok(AuditListing {
        since: time("since", request.since)?,
        until: time("until", request.until)?,
        instance: request.instance,
        session_id: request.session_id,
        principal: request.principal,
        page_size: request.page_size,
        page_token: request.page_token,
        only_instances: request
            .only_listed_instances
            .then_some(request.only_instances),
    })
}

/// A listing as session-api's request.
pub fn audit_listing_to_proto(listing: AuditListing) -> session_pb::ListAuditEventsRequest {
    let only_listed_instances = listing.only_instances.is_some();
    session_pb::ListAuditEventsRequest {
        instance: listing.instance,
        session_id: listing.session_id,
        principal: listing.principal,
        since: listing.since.map(timestamp_to_proto),
        until: listing.until.map(timestamp_to_proto),
        page_size: listing.page_size,
        page_token: listing.page_token,
        only_instances: listing.only_instances.unwrap_or_default(),
        only_listed_instances,
    }
}

fn audit_page_from_proto(page: session_pb::ListAuditEventsResponse) -> AuditEventPage {
    let present = |value: String| Some(value).filter(|value| !value.is_empty());
    AuditEventPage {
        events: page
            .events
            .into_iter()
            .map(|event| AuditEvent {
                id: event.id,
                at: timestamp_from_proto(event.at),
                kind: AuditKind::from_proto(event.kind).ok(),
                principal: event.principal,
                instance_id: present(event.instance_id),
                session_id: present(event.session_id),
                client_address: present(event.client_address),
                surface: event.surface,
                role: proto::optional_role(event.role).ok().flatten(),
                attachment_id: present(event.attachment_id),
                detail: event.detail.into_iter().collect(),
            })
            .collect(),
        next_page_token: present(page.next_page_token),
    }
}

fn timestamp_to_proto(at: DateTime<Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: at.timestamp(),
        nanos: i32::try_from(at.timestamp_subsec_nanos()).unwrap_or(0),
    }
}

fn timestamp_from_proto(timestamp: Option<prost_types::Timestamp>) -> Option<DateTime<Utc>> {
    let timestamp = timestamp?;
    DateTime::from_timestamp(timestamp.seconds, u32::try_from(timestamp.nanos).ok()?)
}

/// A role as session-api names it: the controller's unless it says viewer.
fn role_from_proto(role: i32) -> Role {
    Role::from_proto(role).unwrap_or(Role::Controller)
}

fn instance_from_proto(instance: session_pb::Instance) -> Instance {
    Instance {
        id: instance.id,
        name: instance.name,
        target: instance
            .target
            .and_then(|target| Target::try_from(target).ok()),
        command: instance.command,
        env: instance.env.into_iter().collect::<BTreeMap<_, _>>(),
        cwd: instance.cwd,
        user: instance.user,
        max_sessions: instance.max_sessions,
        labels: instance.labels.into_iter().collect::<BTreeMap<_, _>>(),
        broker_id: instance.broker_id,
        created_at: timestamp_from_proto(instance.created_at),
        live_sessions: instance.live_sessions,
        record: RecordMode::from_proto(instance.record).unwrap_or(RecordMode::Off),
        record_is_default: instance.record_is_default,
        shell_integration: instance.shell_integration,
    }
}

fn change_from_proto(change: session_pb::SessionChange) -> Option<SessionChange> {
    Some(SessionChange {
        kind: ChangeKind::from_proto(change.kind).ok()?,
        session: session_from_proto(change.session?),
        commands: change.commands.into_iter().map(Command::from).collect(),
    })
}

fn session_from_proto(session: session_pb::Session) -> Session {
    // A value this build does not know (a newer session-api) reads as the nearest it does:
    // a status as starting, a close reason as none.
    let status = SessionStatus::from_proto(session.status).unwrap_or(SessionStatus::Starting);
    let close_reason = proto::optional_close_reason(session.close_reason).unwrap_or(None);
    Session {
        id: session.id,
        instance_id: session.instance_id,
        name: session.name,
        status,
        close_reason,
        exit: session.exit.map(ExitStatus::from),
        aliases: session.aliases,
        size: session
            .size
            .and_then(|size| TerminalSize::try_from(size).ok()),
        created_at: timestamp_from_proto(session.created_at),
        last_activity_at: timestamp_from_proto(session.last_activity_at),
        closed_at: timestamp_from_proto(session.closed_at),
        attached_clients: session.attached_clients,
        title: session.title,
        last_bell_at: timestamp_from_proto(session.last_bell_at),
        terminal: terminal_from_proto(session.terminal),
    }
}

/// What a terminal is doing; a report this build cannot read (a progress kind of a newer
/// broker) reads as none, as an unknown status does.
fn terminal_from_proto(terminal: Option<broker_pb::TerminalActivity>) -> Option<TerminalActivity> {
    terminal.and_then(|terminal| TerminalActivity::try_from(terminal).ok())
}

fn attachment_from_proto(
    attachment: session_pb::SessionAttachment,
) -> Result<SessionAttachment, ApiError> {
    let session = attachment
        .session
        .ok_or_else(|| ApiError::internal("session-api answered without a session"))?;
    let attach = attachment
        .attach
        .ok_or_else(|| ApiError::internal("session-api answered without an attach target"))?;
    Ok(SessionAttachment {
        session: session_from_proto(session),
        attach: attach_target_from_proto(attach),
        created: attachment.created,
    })
}

fn attach_target_from_proto(attach: session_pb::AttachTarget) -> AttachTarget {
    AttachTarget {
        session_id: attach.session_id,
        broker_endpoint: attach.broker_endpoint,
        ticket: attach.ticket,
        role: role_from_proto(attach.role),
    }
}

fn event_from_proto(frame: broker_pb::ServerFrame) -> Option<TerminalEvent> {
    use broker_pb::server_frame::Frame;
    let event = match frame.frame? {
        Frame::Connected(connected) => TerminalEvent::Connected {
            offset: connected.offset,
            size: connected
                .size
                .and_then(|size| TerminalSize::try_from(size).ok()),
            role: role_from_proto(connected.role),
        },
        Frame::Output(output) => TerminalEvent::Output {
            offset: output.offset,
            data: output.data,
        },
        Frame::Gap(gap) => TerminalEvent::Gap {
            lost: gap.lost,
            offset: gap.offset,
        },
        Frame::Resize(size) => TerminalEvent::Resize(TerminalSize::try_from(size).ok()?),
        Frame::Resetting(_) => TerminalEvent::Resetting,
        Frame::Detached(_) => TerminalEvent::TakenOver,
        Frame::Exit(exit) => TerminalEvent::Exit(ExitStatus::from(exit)),
        Frame::Error(error) => TerminalEvent::Error {
            message: error.message,
        },
        Frame::Closed(_) => TerminalEvent::Closed,
        Frame::Snapshot(snapshot) => TerminalEvent::Snapshot {
            offset: snapshot.offset,
            size: snapshot
                .size
                .and_then(|size| TerminalSize::try_from(size).ok()),
            data: snapshot.data,
        },
    };
    Some(event)
}

fn millis(duration: Duration) -> u32 {
    u32::try_from(duration.as_millis()).unwrap_or(u32::MAX)
}

fn command_output_format_to_proto(format: CommandOutputFormat) -> broker_pb::ScreenFormat {
    match format {
        CommandOutputFormat::Text => broker_pb::ScreenFormat::Text,
        CommandOutputFormat::Ansi => broker_pb::ScreenFormat::Ansi,
    }
}

fn screen_format_to_proto(format: ScreenFormat) -> broker_pb::ScreenFormat {
    match format {
        ScreenFormat::Text => broker_pb::ScreenFormat::Text,
        ScreenFormat::Ansi => broker_pb::ScreenFormat::Ansi,
        ScreenFormat::Cells => broker_pb::ScreenFormat::Cells,
    }
}

/// The broker's session state in the words of a session's status.
fn state_from_proto(state: i32) -> SessionStatus {
    match broker_pb::SessionState::try_from(state) {
        Ok(broker_pb::SessionState::Running) => SessionStatus::Active,
        Ok(broker_pb::SessionState::Resetting) => SessionStatus::Resetting,
        Ok(broker_pb::SessionState::Exited) => SessionStatus::Exited,
        Ok(broker_pb::SessionState::Closed) => SessionStatus::Closed,
        Ok(broker_pb::SessionState::Starting | broker_pb::SessionState::Unspecified) | Err(_) => {
            SessionStatus::Starting
        }
    }
}

fn screen_from_proto(screen: broker_pb::Screen) -> Result<Screen, ApiError> {
    let format = match broker_pb::ScreenFormat::try_from(screen.format) {
        Ok(broker_pb::ScreenFormat::Text | broker_pb::ScreenFormat::Unspecified) => {
            ScreenFormat::Text
        }
        Ok(broker_pb::ScreenFormat::Ansi) => ScreenFormat::Ansi,
        Ok(broker_pb::ScreenFormat::Cells) => ScreenFormat::Cells,
        Err(_) => {
            return Err(ApiError::internal(format!(
                "session-api answered with an unknown screen format {}",
                screen.format
            )));
        }
    };
    let content = match format {
        ScreenFormat::Text => ScreenContent::Text(screen.lines),
        ScreenFormat::Ansi => ScreenContent::Ansi(screen.ansi.into()),
        ScreenFormat::Cells => ScreenContent::Cells(
            screen
                .rows
                .into_iter()
                .map(|row| ScreenRow {
                    cells: row.cells.into_iter().map(cell_from_proto).collect(),
                    wrapped: row.wrapped,
                })
                .collect(),
        ),
    };
    let cursor = screen.cursor.unwrap_or_default();
    Ok(Screen {
        session_id: screen.session_id,
        offset: screen.offset,
        size: screen
            .size
            .and_then(|size| TerminalSize::try_from(size).ok()),
        cursor: Cursor {
            row: cursor.row,
            col: cursor.col,
            visible: cursor.visible,
        },
        title: screen.title,
        alternate_screen: screen.alternate_screen,
        status: state_from_proto(screen.state),
        exit: screen.exit.map(ExitStatus::from),
        scrollback_rows: screen.scrollback_rows,
        content,
    })
}

fn cell_from_proto(cell: broker_pb::Cell) -> Cell {
    Cell {
        text: cell.text,
        wide: cell.wide,
        fg: cell.fg.and_then(color_from_proto),
        bg: cell.bg.and_then(color_from_proto),
        bold: cell.bold,
        dim: cell.dim,
        italic: cell.italic,
        underline: cell.underline,
        inverse: cell.inverse,
    }
}

/// A colour; one out of range reads as the default rather than failing the whole screen.
fn color_from_proto(color: broker_pb::Color) -> Option<Color> {
    match color.kind? {
        broker_pb::color::Kind::Indexed(index) => u8::try_from(index).ok().map(Color::Indexed),
        broker_pb::color::Kind::Rgb(rgb) if rgb <= 0xff_ffff => {
            let [_, red, green, blue] = rgb.to_be_bytes();
            Some(Color::Rgb { red, green, blue })
        }
        broker_pb::color::Kind::Rgb(_) => None,
    }
}

fn wait_result_from_proto(
    answer: broker_pb::WaitForScreenResponse,
) -> Result<ScreenWaitResult, ApiError> {
    use broker_pb::wait_for_screen_response::Outcome;
    let screen = answer
        .screen
        .ok_or_else(|| ApiError::internal("session-api answered a wait without a screen"))?;
    let (outcome, matched) = match Outcome::try_from(answer.outcome) {
        Ok(Outcome::Matched) => (WaitOutcome::Matched, Some(answer.matched)),
        Ok(Outcome::Exited) => (WaitOutcome::Exited, None),
        Ok(Outcome::Unspecified) | Err(_) => {
            return Err(ApiError::internal(format!(
                "session-api answered a wait with an unknown outcome {}",
                answer.outcome
            )));
        }
    };
    Ok(ScreenWaitResult {
        outcome,
        matched,
        screen: screen_from_proto(screen)?,
    })
}
