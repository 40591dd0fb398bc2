//! The gRPC adapter: `SessionApi` and `BrokerRegistry` served over the generated types, and the
//! one mapping of [`Error`] to `tonic::Status`. Requests become domain types in `from_pb.rs`,
//! answers become messages in `to_pb.rs`; no generated type goes further in. The screen calls,
//! which session-api checks and forwards, go from `forward.rs` to the broker adapter directly;
//! the webhook calls are in `webhooks.rs`.

mod forward;
mod from_pb;
mod shares;
mod to_pb;
mod webhooks;

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use ptyhub_model::presence_surface;
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as pb;
use ptyhub_proto::session::v1::broker_registry_server::BrokerRegistry;
use ptyhub_proto::session::v1::session_api_server::SessionApi;
use ptyhub_wire::{Actor, ErrorCode, RequireCredential, ServiceCredential, Surface};
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

pub use shares::GrpcShareRegistry;

use crate::audit::{AuditKind, NewAuditEvent};
use crate::domain::{Alias, SessionAttachment, SessionName, SessionSelector};
use crate::error::Error;
use crate::service::{CreateSession, SessionService};
use forward::to_session_broker;
use from_pb::{
    audit_filter_from_pb, control_mode_from_pb, new_instance_from_pb, parsed_aliases,
    reported_event_from_pb, required, role_from_pb, session_id_from_pb, size_from_pb,
    validated_broker_id, validated_command, validated_endpoint,
};
use to_pb::{
    attach_target_to_pb, attachment_to_pb, audit_page_to_pb, broker_to_pb, change_to_pb,
    instance_to_pb, session_to_pb,
};

impl From<Error> for Status {
    fn from(error: Error) -> Self {
        let code = error.code();
        if code == ErrorCode::Internal {
            tracing::error!(%error, "internal error");
        }
        match error {
            // The broker's own code goes on unchanged, even one the table has no entry for.
            Error::BrokerRefused { code, .. } | Error::Forwarded { code, .. } => {
                Status::new(code, error.to_string())
            }
            // What the database said (table and column names, constraint text, a PostgreSQL
            // host) is for the log above, never for a caller.
            Error::Database(_) | Error::CorruptRecord(_) => {
                code.status("internal error (details are in session-api's log)")
            }
            error => code.status(error.to_string()),
        }
    }
}

/// The gRPC face of [`SessionService`].
#[derive(Debug, Clone)]
pub struct GrpcSessionApi {
    service: Arc<SessionService>,
    /// Ends the change streams at shutdown.
    shutdown: CancellationToken,
}

/// session-api's three services added to `routes`, each admitting its tier: the gateways to
/// the session calls and share links, each broker to the registry under its own id (checked per
/// call there).
pub(crate) fn with_services(
    routes: tonic::service::Routes,
    service: Arc<SessionService>,
    shares: crate::shares::ShareService,
    shutdown: CancellationToken,
    gateways: RequireCredential,
    brokers: BrokerCredentials,
) -> tonic::service::Routes {
    use ptyhub_proto::session::v1::broker_registry_server::BrokerRegistryServer;
    use ptyhub_proto::session::v1::session_api_server::SessionApiServer;
    use ptyhub_proto::session::v1::share_registry_server::ShareRegistryServer;
    routes
        .add_service(SessionApiServer::with_interceptor(
            GrpcSessionApi::new(service.clone(), shutdown),
            gateways.clone(),
        ))
        // Share links are the gateways' business, like the session calls.
        .add_service(ShareRegistryServer::with_interceptor(
            GrpcShareRegistry::new(shares, service.clone()),
            gateways.clone(),
        ))
        .add_service(BrokerRegistryServer::new(GrpcBrokerRegistry::new(
            service, brokers, gateways,
        )))
}

impl GrpcSessionApi {
    pub(crate) fn new(service: Arc<SessionService>, shutdown: CancellationToken) -> Self {
        Self { service, shutdown }
    }
}

impl GrpcSessionApi {
    /// Forwards an answer to a request for control, by the caller's principal.
    async fn answer_control(
        &self,
        request: Request<pb::AnswerControlRequest>,
        grant: bool,
    ) -> Result<Response<broker_pb::ControlState>, Status> {
        let actor = actor_of(&request);
        let mut call = to_session_broker(&self.service, request.into_inner()).await?;
        call.request.principal = actor.principal;
        call.request.grant = grant;
        let state = self
            .service
            .brokers
            .answer_control_as(&call.broker, call.request)
            .await?;
        Ok(Response::new(state))
    }

    /// Records a session's creation, when the call created it.
    async fn record_created(&self, actor: &Actor, attachment: &SessionAttachment) {
        if attachment.created {
            let session = &attachment.session;
            self.service
                .record(
                    NewAuditEvent::new(AuditKind::SessionCreated, actor)
                        .session(session.instance_id, session.id)
                        .detail("name", session.name.clone()),
                )
                .await;
        }
    }
}

/// Who a call is for: the actor its gateway names in the metadata. A caller that names none
/// (a gateway credential used directly) is recorded as `gateway`.
pub(super) fn actor_of<T>(request: &Request<T>) -> Actor {
    Actor::from_metadata(request.metadata())
        .unwrap_or_else(|| Actor::new("gateway", None, Surface::Grpc))
}

type ChangeStream = Pin<Box<dyn Stream<Item = Result<pb::SessionChange, Status>> + Send>>;
type CommandStream = Pin<Box<dyn Stream<Item = Result<broker_pb::Command, Status>> + Send>>;

#[tonic::async_trait]
impl SessionApi for GrpcSessionApi {
    async fn register_instance(
        &self,
        request: Request<pb::RegisterInstanceRequest>,
    ) -> Result<Response<pb::Instance>, Status> {
        let actor = actor_of(&request);
        let new = new_instance_from_pb(request.into_inner())?;
        let instance = self.service.register_instance(new).await?;
        self.service
            .record(
                NewAuditEvent::new(AuditKind::InstanceCreated, &actor)
                    .instance(instance.id)
                    .detail("name", instance.name.clone()),
            )
            .await;
        Ok(Response::new(instance_to_pb(
            &instance,
            self.service.default_record,
        )))
    }

    async fn get_instance(
        &self,
        request: Request<pb::GetInstanceRequest>,
    ) -> Result<Response<pb::Instance>, Status> {
        let instance = required("instance", &request.get_ref().instance)?;
        let instance = self.service.get_instance(instance).await?;
        Ok(Response::new(instance_to_pb(
            &instance,
            self.service.default_record,
        )))
    }

    async fn list_instances(
        &self,
        request: Request<pb::ListInstancesRequest>,
    ) -> Result<Response<pb::ListInstancesResponse>, Status> {
        let selector: BTreeMap<String, String> =
            request.into_inner().label_selector.into_iter().collect();
        let instances = self.service.list_instances(&selector).await?;
        Ok(Response::new(pb::ListInstancesResponse {
            instances: instances
                .iter()
                .map(|instance| instance_to_pb(instance, self.service.default_record))
                .collect(),
        }))
    }

    async fn delete_instance(
        &self,
        request: Request<pb::DeleteInstanceRequest>,
    ) -> Result<Response<pb::DeleteInstanceResponse>, Status> {
        let actor = actor_of(&request);
        let instance = required("instance", &request.get_ref().instance)?;
        let (instance_id, closed_sessions) = self.service.delete_instance(instance).await?;
        // One event for the deletion and the closes it made (`closed_sessions`).
        self.service
            .record(
                NewAuditEvent::new(AuditKind::InstanceDeleted, &actor)
                    .instance(instance_id)
                    .detail("closed_sessions", closed_sessions.to_string()),
            )
            .await;
        Ok(Response::new(pb::DeleteInstanceResponse {
            instance_id: instance_id.to_string(),
            closed_sessions,
        }))
    }

    async fn create_session(
        &self,
        request: Request<pb::CreateSessionRequest>,
    ) -> Result<Response<pb::SessionAttachment>, Status> {
        let actor = actor_of(&request);
        let request = request.into_inner();
        let instance = required("instance", &request.instance)?;
        let name = if request.name.is_empty() {
            None
        } else {
            Some(SessionName::parse(&request.name).map_err(Error::from)?)
        };
        let aliases = parsed_aliases(&request.aliases)?;
        let command = if request.command.is_empty() {
            None
        } else {
            Some(validated_command(request.command)?)
        };
        let create = CreateSession {
            name,
            aliases,
            size: size_from_pb(request.size)?,
            command,
            control_mode: control_mode_from_pb(request.control_mode)?.unwrap_or_default(),
        };
        let attachment = self
            .service
            .create_session(instance, create, &actor)
            .await?;
        self.record_created(&actor, &attachment).await;
        Ok(Response::new(attachment_to_pb(&attachment)))
    }

    async fn get_session(
        &self,
        request: Request<pb::GetSessionRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let request = request.get_ref();
        let instance = required("instance", &request.instance)?;
        let session_id = session_id_from_pb(&request.session_id)?;
        let session = self.service.get_session(instance, session_id).await?;
        Ok(Response::new(session_to_pb(&session)))
    }

    async fn list_sessions(
        &self,
        request: Request<pb::ListSessionsRequest>,
    ) -> Result<Response<pb::ListSessionsResponse>, Status> {
        let request = request.get_ref();
        let instance = required("instance", &request.instance)?;
        let sessions = self
            .service
            .list_sessions(instance, request.include_closed)
            .await?;
        Ok(Response::new(pb::ListSessionsResponse {
            sessions: sessions.iter().map(session_to_pb).collect(),
        }))
    }

    async fn resolve_session(
        &self,
        request: Request<pb::ResolveSessionRequest>,
    ) -> Result<Response<pb::SessionAttachment>, Status> {
        use pb::resolve_session_request::Selector;
        let actor = actor_of(&request);
        let request = request.into_inner();
        let instance = required("instance", &request.instance)?;
        let selector = match request.selector {
            None => {
                return Err(Error::InvalidRequest(
                    "a selector (session_id, alias, client_id or default) is required".into(),
                )
                .into());
            }
            Some(Selector::SessionId(id)) => SessionSelector::Id(session_id_from_pb(&id)?),
            Some(Selector::Alias(alias)) => {
                SessionSelector::Alias(Alias::parse(&alias).map_err(Error::from)?)
            }
            Some(Selector::ClientId(client_id)) => {
                SessionSelector::Alias(Alias::client(&client_id).map_err(Error::from)?)
            }
            Some(Selector::Default(true)) => SessionSelector::Alias(Alias::Default),
            Some(Selector::Default(false)) => {
                return Err(Error::InvalidRequest("default must be true when set".into()).into());
            }
        };
        let attachment = self
            .service
            .resolve_session(
                instance,
                selector,
                request.create_if_absent,
                size_from_pb(request.size)?,
                role_from_pb(request.role)?,
                &actor,
            )
            .await?;
        self.record_created(&actor, &attachment).await;
        Ok(Response::new(attachment_to_pb(&attachment)))
    }

    async fn issue_attach_ticket(
        &self,
        request: Request<pb::IssueAttachTicketRequest>,
    ) -> Result<Response<pb::AttachTarget>, Status> {
        let actor = actor_of(&request);
        let request = request.get_ref();
        let instance = required("instance", &request.instance)?;
        let session_id = session_id_from_pb(&request.session_id)?;
        let target = self
            .service
            .issue_attach_ticket(instance, session_id, role_from_pb(request.role)?, &actor)
            .await?;
        Ok(Response::new(attach_target_to_pb(&target)))
    }

    async fn rename_session(
        &self,
        request: Request<pb::RenameSessionRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let actor = actor_of(&request);
        let request = request.get_ref();
        let instance = required("instance", &request.instance)?;
        let session_id = session_id_from_pb(&request.session_id)?;
        let name = SessionName::parse(&request.name).map_err(Error::from)?;
        let session = self
            .service
            .rename_session(instance, session_id, &name)
            .await?;
        self.service
            .record(
                NewAuditEvent::new(AuditKind::SessionRenamed, &actor)
                    .session(session.instance_id, session.id)
                    .detail("name", session.name.clone()),
            )
            .await;
        Ok(Response::new(session_to_pb(&session)))
    }

    async fn update_session(
        &self,
        request: Request<pb::UpdateSessionRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let actor = actor_of(&request);
        let request = request.get_ref();
        let instance = required("instance", &request.instance)?;
        let session_id = session_id_from_pb(&request.session_id)?;
        let Some(control_mode) = control_mode_from_pb(request.control_mode)? else {
            let session = self.service.get_session(instance, session_id).await?;
            return Ok(Response::new(session_to_pb(&session)));
        };
        let session = self
            .service
            .set_control_mode(instance, session_id, control_mode)
            .await?;
        self.service
            .record(
                NewAuditEvent::new(AuditKind::ControlModeChanged, &actor)
                    .session(session.instance_id, session.id)
                    .detail("control_mode", control_mode.as_str()),
            )
            .await;
        Ok(Response::new(session_to_pb(&session)))
    }

    async fn add_session_aliases(
        &self,
        request: Request<pb::AddSessionAliasesRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let request = request.into_inner();
        let instance = required("instance", &request.instance)?;
        let session_id = session_id_from_pb(&request.session_id)?;
        if request.aliases.is_empty() {
            return Err(Error::InvalidRequest("aliases: name at least one alias".into()).into());
        }
        let aliases = parsed_aliases(&request.aliases)?;
        let session = self
            .service
            .add_aliases(instance, session_id, &aliases)
            .await?;
        Ok(Response::new(session_to_pb(&session)))
    }

    async fn reset_session(
        &self,
        request: Request<pb::ResetSessionRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let actor = actor_of(&request);
        let request = request.get_ref();
        let instance = required("instance", &request.instance)?;
        let session_id = session_id_from_pb(&request.session_id)?;
        let session = self.service.reset_session(instance, session_id).await?;
        self.service
            .record(
                NewAuditEvent::new(AuditKind::SessionReset, &actor)
                    .session(session.instance_id, session.id),
            )
            .await;
        Ok(Response::new(session_to_pb(&session)))
    }

    async fn close_session(
        &self,
        request: Request<pb::CloseSessionRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let actor = actor_of(&request);
        let request = request.get_ref();
        let instance = required("instance", &request.instance)?;
        let session_id = session_id_from_pb(&request.session_id)?;
        let session = self
            .service
            .close_session(instance, session_id, &actor)
            .await?;
        Ok(Response::new(session_to_pb(&session)))
    }

    async fn get_screen(
        &self,
        request: Request<pb::GetScreenRequest>,
    ) -> Result<Response<broker_pb::Screen>, Status> {
        let call = to_session_broker(&self.service, request.into_inner()).await?;
        let screen = self
            .service
            .brokers
            .get_screen(&call.broker, call.request)
            .await?;
        Ok(Response::new(screen))
    }

    async fn list_commands(
        &self,
        request: Request<pb::ListCommandsRequest>,
    ) -> Result<Response<broker_pb::ListCommandsResponse>, Status> {
        let call = to_session_broker(&self.service, request.into_inner()).await?;
        let commands = self
            .service
            .brokers
            .list_commands(&call.broker, call.request)
            .await?;
        Ok(Response::new(commands))
    }

    async fn get_command_output(
        &self,
        request: Request<pb::GetCommandOutputRequest>,
    ) -> Result<Response<broker_pb::CommandOutput>, Status> {
        let call = to_session_broker(&self.service, request.into_inner()).await?;
        let output = self
            .service
            .brokers
            .get_command_output(&call.broker, call.request)
            .await?;
        Ok(Response::new(output))
    }

    async fn send_input(
        &self,
        request: Request<pb::SendInputRequest>,
    ) -> Result<Response<broker_pb::SendInputResponse>, Status> {
        let actor = actor_of(&request);
        let request = request.into_inner();
        let instance = request.instance.clone();
        let call = to_session_broker(&self.service, request).await?;
        let (session_id, force) = (call.session_id, call.request.force);
        let written = self
            .service
            .brokers
            .send_input(&call.broker, call.request)
            .await?;
        // The input is written: a failure to name its instance now only costs the event.
        match self.service.get_instance(&instance).await {
            Ok(instance) => {
                self.service
                    .record(
                        NewAuditEvent::new(AuditKind::Input, &actor)
                            .session(instance.id, session_id)
                            .detail("bytes", written.bytes_written.to_string())
                            .detail("force", force.to_string()),
                    )
                    .await;
            }
            Err(error) => {
                tracing::error!(%error, %session_id, "an input event could not be recorded");
            }
        }
        Ok(Response::new(written))
    }

    async fn run(
        &self,
        request: Request<pb::RunRequest>,
    ) -> Result<Response<broker_pb::RunResponse>, Status> {
        let actor = actor_of(&request);
        let request = request.into_inner();
        let instance = self
            .service
            .get_instance(required("instance", &request.instance)?)
            .await?;
        let call = to_session_broker(&self.service, request).await?;
        let session_id = call.session_id;
        let (command, force) = (call.request.command.clone(), call.request.force);
        let outcome = self.service.brokers.run(&call.broker, call.request).await;
        // Recorded when something was typed: a refusal types nothing, a timeout did.
        let typed = match &outcome {
            Ok(_) => true,
            Err(error) => error.code() == ErrorCode::TimedOut,
        };
        if typed {
            self.service
                .record(
                    NewAuditEvent::new(AuditKind::Input, &actor)
                        .session(instance.id, session_id)
                        .detail("run", truncated_line(&command))
                        .detail("force", force.to_string()),
                )
                .await;
        }
        Ok(Response::new(outcome?))
    }

    async fn get_control(
        &self,
        request: Request<pb::GetControlRequest>,
    ) -> Result<Response<broker_pb::ControlState>, Status> {
        let call = to_session_broker(&self.service, request.into_inner()).await?;
        let state = self
            .service
            .brokers
            .get_control(&call.broker, call.request)
            .await?;
        Ok(Response::new(state))
    }

    async fn request_control(
        &self,
        request: Request<pb::RequestControlRequest>,
    ) -> Result<Response<broker_pb::ControlRequest>, Status> {
        let actor = actor_of(&request);
        let mut call = to_session_broker(&self.service, request.into_inner()).await?;
        call.request.requester = Some(broker_pb::TicketHolder {
            principal: actor.principal.clone(),
            surface: presence_surface(actor.surface).to_owned(),
        });
        let made = self
            .service
            .brokers
            .request_control_for(&call.broker, call.request)
            .await?;
        Ok(Response::new(made))
    }

    async fn grant_control(
        &self,
        request: Request<pb::AnswerControlRequest>,
    ) -> Result<Response<broker_pb::ControlState>, Status> {
        self.answer_control(request, true).await
    }

    async fn decline_control(
        &self,
        request: Request<pb::AnswerControlRequest>,
    ) -> Result<Response<broker_pb::ControlState>, Status> {
        self.answer_control(request, false).await
    }

    async fn wait_for_screen(
        &self,
        request: Request<pb::WaitForScreenRequest>,
    ) -> Result<Response<broker_pb::WaitForScreenResponse>, Status> {
        let call = to_session_broker(&self.service, request.into_inner()).await?;
        // The caller going away drops this future and, with it, the broker call.
        let outcome = self
            .service
            .brokers
            .wait_for_screen(&call.broker, call.request)
            .await?;
        Ok(Response::new(outcome))
    }

    type WatchCommandsStream = CommandStream;

    async fn watch_commands(
        &self,
        request: Request<pb::WatchCommandsRequest>,
    ) -> Result<Response<Self::WatchCommandsStream>, Status> {
        let call = to_session_broker(&self.service, request.into_inner()).await?;
        let commands = self
            .service
            .brokers
            .watch_commands(&call.broker, call.request)
            .await?;
        let shutdown = self.shutdown.clone();
        let commands = commands
            .map(|item| item.map_err(Status::from))
            .take_until(self.shutdown.clone().cancelled_owned())
            // Ended by this replica's shutdown rather than the session's end: tell the client to
            // watch again.
            .chain(
                futures::stream::once(async move {
                    shutdown.is_cancelled().then(|| {
                        Err(Status::unavailable(
                            "session-api is shutting down; watch again from the last command seen",
                        ))
                    })
                })
                .filter_map(std::future::ready),
            );
        Ok(Response::new(Box::pin(commands)))
    }

    async fn record_audit_event(
        &self,
        request: Request<pb::RecordAuditEventRequest>,
    ) -> Result<Response<pb::RecordAuditEventResponse>, Status> {
        let actor = actor_of(&request);
        let event = reported_event_from_pb(request.into_inner(), &actor)?;
        let id = self.service.record_reported(event).await?;
        Ok(Response::new(pb::RecordAuditEventResponse { id }))
    }

    async fn list_audit_events(
        &self,
        request: Request<pb::ListAuditEventsRequest>,
    ) -> Result<Response<pb::ListAuditEventsResponse>, Status> {
        let request = request.into_inner();
        let filter = audit_filter_from_pb(&request)?;
        let instance = Some(request.instance.as_str()).filter(|instance| !instance.is_empty());
        let page = self.service.list_audit_events(instance, filter).await?;
        Ok(Response::new(audit_page_to_pb(&page)))
    }

    async fn create_webhook(
        &self,
        request: Request<pb::CreateWebhookRequest>,
    ) -> Result<Response<pb::Webhook>, Status> {
        let actor = actor_of(&request);
        let webhook =
            webhooks::create_webhook(&self.service.webhooks, request.into_inner(), &actor).await?;
        Ok(Response::new(webhook))
    }

    async fn list_webhooks(
        &self,
        request: Request<pb::ListWebhooksRequest>,
    ) -> Result<Response<pb::ListWebhooksResponse>, Status> {
        let listed = webhooks::list_webhooks(&self.service.webhooks, request.into_inner()).await?;
        Ok(Response::new(listed))
    }

    async fn delete_webhook(
        &self,
        request: Request<pb::DeleteWebhookRequest>,
    ) -> Result<Response<pb::Webhook>, Status> {
        let actor = actor_of(&request);
        let deleted =
            webhooks::delete_webhook(&self.service.webhooks, request.into_inner(), &actor).await?;
        Ok(Response::new(deleted))
    }

    type WatchSessionsStream = ChangeStream;

    async fn watch_sessions(
        &self,
        request: Request<pb::WatchSessionsRequest>,
    ) -> Result<Response<Self::WatchSessionsStream>, Status> {
        // Subscribe before looking the instance up, so no change after this call is missed.
        let receiver = self.service.watch_sessions();
        let instance_id = match request.get_ref().instance.as_str() {
            "" => None,
            instance => Some(self.service.get_instance(instance).await?.id),
        };
        let changes = BroadcastStream::new(receiver)
            .filter_map(move |change| async move {
                match change {
                    Ok(change) if instance_id.is_none_or(|id| id == change.session.instance_id) => {
                        Some(Ok(change_to_pb(&change)))
                    }
                    Ok(_) => None,
                    Err(BroadcastStreamRecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "a session watcher fell behind and missed changes");
                        None
                    }
                }
            })
            .take_until(self.shutdown.clone().cancelled_owned())
            // The feed ends only when this replica shuts down: tell the client to reconnect.
            .chain(futures::stream::once(async {
                Err(Status::unavailable(
                    "session-api is shutting down; watch again (another replica answers)",
                ))
            }));
        Ok(Response::new(Box::pin(changes)))
    }
}

/// Each broker's own credential, bound to its id: which broker a registry call comes from.
#[derive(Debug, Clone)]
pub struct BrokerCredentials {
    check: RequireCredential,
    owners: Arc<[(String, ServiceCredential)]>,
}

impl BrokerCredentials {
    /// The brokers' credentials, as `(broker id, its own credential)`.
    pub fn new(brokers: impl IntoIterator<Item = (String, ServiceCredential)>) -> Self {
        let owners: Arc<[(String, ServiceCredential)]> = brokers.into_iter().collect();
        Self {
            check: RequireCredential::any_of(
                owners.iter().map(|(_, credential)| credential.clone()),
            ),
            owners,
        }
    }

    /// `UNAUTHENTICATED` unless `metadata` carries a broker's credential.
    fn check(&self, metadata: &tonic::metadata::MetadataMap) -> Result<(), Status> {
        self.check.check(metadata)
    }

    /// Admits a call for broker `id` only with that broker's own credential: `UNAUTHENTICATED`
    /// without a broker's credential, `PERMISSION_DENIED` with another broker's.
    fn require_own(&self, metadata: &tonic::metadata::MetadataMap, id: &str) -> Result<(), Status> {
        let presented = self.check.identify(metadata)?;
        let owner = self
            .owners
            .iter()
            .find(|(_, credential)| credential == presented)
            .map(|(owner, _)| owner.as_str());
        if owner == Some(id) {
            Ok(())
        } else {
            Err(Error::NotThisBrokersCredential(id.to_owned()).into())
        }
    }
}

/// The gRPC face of the broker registry: each broker registers and heartbeats under its own id
/// with its own credential only; reads come from the gateways' credentials too.
#[derive(Debug, Clone)]
pub struct GrpcBrokerRegistry {
    service: Arc<SessionService>,
    brokers: BrokerCredentials,
    gateways: RequireCredential,
}

impl GrpcBrokerRegistry {
    pub(crate) fn new(
        service: Arc<SessionService>,
        brokers: BrokerCredentials,
        gateways: RequireCredential,
    ) -> Self {
        Self {
            service,
            brokers,
            gateways,
        }
    }
}

#[tonic::async_trait]
impl BrokerRegistry for GrpcBrokerRegistry {
    async fn register_broker(
        &self,
        request: Request<pb::RegisterBrokerRequest>,
    ) -> Result<Response<pb::Broker>, Status> {
        self.brokers
            .require_own(request.metadata(), &request.get_ref().id)?;
        let request = request.into_inner();
        let id = validated_broker_id(&request.id)?;
        let endpoint = validated_endpoint(&request.endpoint)?;
        let broker = self
            .service
            .register_broker(id, endpoint, request.docker)
            .await?;
        Ok(Response::new(broker_to_pb(&broker)))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        self.brokers
            .require_own(request.metadata(), &request.get_ref().id)?;
        let id = validated_broker_id(&request.get_ref().id)?;
        let interval = self.service.heartbeat(id).await?;
        Ok(Response::new(pb::HeartbeatResponse {
            interval_seconds: u32::try_from(interval.as_secs().max(1)).unwrap_or(u32::MAX),
        }))
    }

    async fn list_brokers(
        &self,
        request: Request<pb::ListBrokersRequest>,
    ) -> Result<Response<pb::ListBrokersResponse>, Status> {
        // The gateways read the registry to find brokers; brokers may read it too.
        self.gateways
            .check(request.metadata())
            .or_else(|_| self.brokers.check(request.metadata()))?;
        let brokers = self.service.list_brokers().await?;
        Ok(Response::new(pb::ListBrokersResponse {
            brokers: brokers.iter().map(broker_to_pb).collect(),
        }))
    }
}

/// A command line as an audit event keeps it: at most 1,024 characters.
fn truncated_line(line: &str) -> String {
    line.chars().take(1024).collect()
}

#[cfg(test)]
mod tests {
    use ptyhub_model::TerminalSize;
    use tonic::Code;
    use uuid::Uuid;

    use super::*;

    #[test]
    fn every_error_keeps_its_grpc_code_and_its_message() {
        let id = Uuid::nil();
        let refused = |code| Error::BrokerRefused {
            broker_id: "b1".into(),
            code,
            message: "refused".into(),
        };
        let forwarded = |code| Error::Forwarded {
            broker_id: "b1".into(),
            code,
            message: "the broker's own words".into(),
        };
        let cases = [
            (
                Error::InvalidRequest("instance is required".into()),
                Code::InvalidArgument,
            ),
            (
                Error::InvalidSize(TerminalSize::new(0, 24).expect_err("out of bounds")),
                Code::InvalidArgument,
            ),
            (Error::InstanceNotFound("nope".into()), Code::NotFound),
            (Error::SessionNotFound(id), Code::NotFound),
            (Error::SessionClosed(id), Code::NotFound),
            (Error::AliasNotFound("conversation".into()), Code::NotFound),
            (Error::BrokerNotFound("b1".into()), Code::NotFound),
            (Error::InstanceNameTaken("web".into()), Code::AlreadyExists),
            (
                Error::AliasTaken {
                    alias: "conversation".into(),
                    session_id: id,
                },
                Code::AlreadyExists,
            ),
            (Error::CapReached(5), Code::ResourceExhausted),
            (
                Error::SessionNotLive {
                    session_id: id,
                    status: "closed".into(),
                },
                Code::FailedPrecondition,
            ),
            (
                Error::BrokerUnsuitable {
                    broker_id: "b1".into(),
                    kind: "docker",
                },
                Code::FailedPrecondition,
            ),
            (Error::NoBrokerAvailable("docker"), Code::Unavailable),
            (
                Error::BrokerUnavailable {
                    broker_id: "b1".into(),
                    message: "connection refused".into(),
                },
                Code::Unavailable,
            ),
            (Error::StartTimedOut(id), Code::Unavailable),
            (Error::BrokerDown("b1".into()), Code::Unavailable),
            (forwarded(Code::InvalidArgument), Code::InvalidArgument),
            (
                forwarded(Code::FailedPrecondition),
                Code::FailedPrecondition,
            ),
            (forwarded(Code::DeadlineExceeded), Code::DeadlineExceeded),
            (forwarded(Code::NotFound), Code::NotFound),
            (refused(Code::FailedPrecondition), Code::FailedPrecondition),
            // Codes the table has no entry for still reach the caller as the broker sent them.
            (refused(Code::Aborted), Code::Aborted),
            (refused(Code::OutOfRange), Code::OutOfRange),
            (
                Error::Database(sea_orm::DbErr::Custom("gone".into())),
                Code::Internal,
            ),
            (Error::CorruptRecord("status \"x\"".into()), Code::Internal),
        ];
        for (error, code) in cases {
            let message = error.to_string();
            let internal = matches!(error, Error::Database(_) | Error::CorruptRecord(_));
            let status = Status::from(error);
            assert_eq!(status.code(), code, "{message}");
            if internal {
                // What the database said stays in the log.
                assert_eq!(
                    status.message(),
                    "internal error (details are in session-api's log)"
                );
            } else {
                assert_eq!(status.message(), message);
            }
        }
        assert_eq!(
            Status::from(Error::CapReached(5)).message(),
            "Maximum of 5 terminal sessions reached for this instance"
        );
        assert_eq!(
            Status::from(forwarded(Code::InvalidArgument)).message(),
            "the broker's own words",
            "a forwarded answer is the broker's, word for word"
        );
    }
}
