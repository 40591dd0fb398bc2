//! The gRPC adapter: `SessionApi` and `BrokerRegistry` served over the generated types, input
//! validated into domain types here, and the one mapping of [`Error`] to `tonic::Status`.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::SystemTime;

use chrono::{DateTime, Utc};
use futures::{Stream, StreamExt};
use ptyhub_proto::broker::v1 as broker_wire;
use ptyhub_proto::session::v1 as wire;
use ptyhub_proto::session::v1::broker_registry_server::BrokerRegistry;
use ptyhub_proto::session::v1::session_api_server::SessionApi;
use ptyhub_wire::{ErrorCode, Role, TerminalSize};
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use uuid::Uuid;

use crate::domain::{
    Alias, AttachTarget, Broker, ChangeKind, CloseReason, DEFAULT_MAX_SESSIONS, Instance,
    MAX_SESSIONS_LIMIT, NewInstance, Session, SessionAttachment, SessionChange, SessionName,
    SessionSelector, SessionStatus, Target,
};
use crate::error::Error;
use crate::service::{CreateSession, SessionService};

impl From<Error> for Status {
    fn from(error: Error) -> Self {
        let code = error.code();
        if code == ErrorCode::Internal {
            tracing::error!(%error, "internal error");
        }
        match error {
            // The broker's own code goes on unchanged, even one the table has no entry for.
            Error::BrokerRefused { code, .. } => Status::new(code, error.to_string()),
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

impl GrpcSessionApi {
    pub(crate) fn new(service: Arc<SessionService>, shutdown: CancellationToken) -> Self {
        Self { service, shutdown }
    }
}

type ChangeStream = Pin<Box<dyn Stream<Item = Result<wire::SessionChange, Status>> + Send>>;

#[tonic::async_trait]
impl SessionApi for GrpcSessionApi {
    async fn register_instance(
        &self,
        request: Request<wire::RegisterInstanceRequest>,
    ) -> Result<Response<wire::Instance>, Status> {
        let new = new_instance_from_wire(request.into_inner())?;
        let instance = self.service.register_instance(new).await?;
        Ok(Response::new(instance_to_wire(&instance)))
    }

    async fn get_instance(
        &self,
        request: Request<wire::GetInstanceRequest>,
    ) -> Result<Response<wire::Instance>, Status> {
        let instance = required("instance", &request.get_ref().instance)?;
        let instance = self.service.get_instance(instance).await?;
        Ok(Response::new(instance_to_wire(&instance)))
    }

    async fn list_instances(
        &self,
        request: Request<wire::ListInstancesRequest>,
    ) -> Result<Response<wire::ListInstancesResponse>, Status> {
        let selector: BTreeMap<String, String> =
            request.into_inner().label_selector.into_iter().collect();
        let instances = self.service.list_instances(&selector).await?;
        Ok(Response::new(wire::ListInstancesResponse {
            instances: instances.iter().map(instance_to_wire).collect(),
        }))
    }

    async fn delete_instance(
        &self,
        request: Request<wire::DeleteInstanceRequest>,
    ) -> Result<Response<wire::DeleteInstanceResponse>, Status> {
        let instance = required("instance", &request.get_ref().instance)?;
        let (instance_id, closed_sessions) = self.service.delete_instance(instance).await?;
        Ok(Response::new(wire::DeleteInstanceResponse {
            instance_id: instance_id.to_string(),
            closed_sessions,
        }))
    }

    async fn create_session(
        &self,
        request: Request<wire::CreateSessionRequest>,
    ) -> Result<Response<wire::SessionAttachment>, Status> {
        let request = request.into_inner();
        let instance = required("instance", &request.instance)?;
        let name = if request.name.is_empty() {
            None
        } else {
            Some(SessionName::parse(&request.name)?)
        };
        let aliases = request
            .aliases
            .iter()
            .map(|alias| Alias::parse(alias))
            .collect::<Result<Vec<_>, _>>()?;
        let command = if request.command.is_empty() {
            None
        } else {
            Some(validated_command(request.command)?)
        };
        let create = CreateSession {
            name,
            aliases,
            size: size_from_wire(request.size)?,
            command,
        };
        let attachment = self.service.create_session(instance, create).await?;
        Ok(Response::new(attachment_to_wire(&attachment)))
    }

    async fn get_session(
        &self,
        request: Request<wire::GetSessionRequest>,
    ) -> Result<Response<wire::Session>, Status> {
        let request = request.get_ref();
        let instance = required("instance", &request.instance)?;
        let session_id = session_id_from_wire(&request.session_id)?;
        let session = self.service.get_session(instance, session_id).await?;
        Ok(Response::new(session_to_wire(&session)))
    }

    async fn list_sessions(
        &self,
        request: Request<wire::ListSessionsRequest>,
    ) -> Result<Response<wire::ListSessionsResponse>, Status> {
        let request = request.get_ref();
        let instance = required("instance", &request.instance)?;
        let sessions = self
            .service
            .list_sessions(instance, request.include_closed)
            .await?;
        Ok(Response::new(wire::ListSessionsResponse {
            sessions: sessions.iter().map(session_to_wire).collect(),
        }))
    }

    async fn resolve_session(
        &self,
        request: Request<wire::ResolveSessionRequest>,
    ) -> Result<Response<wire::SessionAttachment>, Status> {
        use wire::resolve_session_request::Selector;
        let request = request.into_inner();
        let instance = required("instance", &request.instance)?;
        let selector = match request.selector {
            None => {
                return Err(Error::InvalidRequest(
                    "a selector (session_id, alias, client_id or default) is required".into(),
                )
                .into());
            }
            Some(Selector::SessionId(id)) => SessionSelector::Id(session_id_from_wire(&id)?),
            Some(Selector::Alias(alias)) => SessionSelector::Alias(Alias::parse(&alias)?),
            Some(Selector::ClientId(client_id)) => {
                SessionSelector::Alias(Alias::client(&client_id)?)
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
                size_from_wire(request.size)?,
                role_from_wire(request.role)?,
            )
            .await?;
        Ok(Response::new(attachment_to_wire(&attachment)))
    }

    async fn issue_attach_ticket(
        &self,
        request: Request<wire::IssueAttachTicketRequest>,
    ) -> Result<Response<wire::AttachTarget>, Status> {
        let request = request.get_ref();
        let instance = required("instance", &request.instance)?;
        let session_id = session_id_from_wire(&request.session_id)?;
        let target = self
            .service
            .issue_attach_ticket(instance, session_id, role_from_wire(request.role)?)
            .await?;
        Ok(Response::new(attach_target_to_wire(&target)))
    }

    async fn rename_session(
        &self,
        request: Request<wire::RenameSessionRequest>,
    ) -> Result<Response<wire::Session>, Status> {
        let request = request.get_ref();
        let instance = required("instance", &request.instance)?;
        let session_id = session_id_from_wire(&request.session_id)?;
        let name = SessionName::parse(&request.name)?;
        let session = self
            .service
            .rename_session(instance, session_id, &name)
            .await?;
        Ok(Response::new(session_to_wire(&session)))
    }

    async fn reset_session(
        &self,
        request: Request<wire::ResetSessionRequest>,
    ) -> Result<Response<wire::Session>, Status> {
        let request = request.get_ref();
        let instance = required("instance", &request.instance)?;
        let session_id = session_id_from_wire(&request.session_id)?;
        let session = self.service.reset_session(instance, session_id).await?;
        Ok(Response::new(session_to_wire(&session)))
    }

    async fn close_session(
        &self,
        request: Request<wire::CloseSessionRequest>,
    ) -> Result<Response<wire::Session>, Status> {
        let request = request.get_ref();
        let instance = required("instance", &request.instance)?;
        let session_id = session_id_from_wire(&request.session_id)?;
        let session = self.service.close_session(instance, session_id).await?;
        Ok(Response::new(session_to_wire(&session)))
    }

    type WatchSessionsStream = ChangeStream;

    async fn watch_sessions(
        &self,
        request: Request<wire::WatchSessionsRequest>,
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
                        Some(Ok(change_to_wire(&change)))
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

/// The gRPC face of the broker registry.
#[derive(Debug, Clone)]
pub struct GrpcBrokerRegistry {
    service: Arc<SessionService>,
}

impl GrpcBrokerRegistry {
    pub(crate) fn new(service: Arc<SessionService>) -> Self {
        Self { service }
    }
}

#[tonic::async_trait]
impl BrokerRegistry for GrpcBrokerRegistry {
    async fn register_broker(
        &self,
        request: Request<wire::RegisterBrokerRequest>,
    ) -> Result<Response<wire::Broker>, Status> {
        let request = request.into_inner();
        let id = validated_broker_id(&request.id)?;
        let endpoint = validated_endpoint(&request.endpoint)?;
        let broker = self
            .service
            .register_broker(id, endpoint, request.docker)
            .await?;
        Ok(Response::new(broker_to_wire(&broker)))
    }

    async fn heartbeat(
        &self,
        request: Request<wire::HeartbeatRequest>,
    ) -> Result<Response<wire::HeartbeatResponse>, Status> {
        let id = validated_broker_id(&request.get_ref().id)?;
        let interval = self.service.heartbeat(id).await?;
        Ok(Response::new(wire::HeartbeatResponse {
            interval_seconds: u32::try_from(interval.as_secs().max(1)).unwrap_or(u32::MAX),
        }))
    }

    async fn list_brokers(
        &self,
        _request: Request<wire::ListBrokersRequest>,
    ) -> Result<Response<wire::ListBrokersResponse>, Status> {
        let brokers = self.service.list_brokers().await?;
        Ok(Response::new(wire::ListBrokersResponse {
            brokers: brokers.iter().map(broker_to_wire).collect(),
        }))
    }
}

// ---- validation: wire to domain ---------------------------------------------------------

fn required<'a>(field: &'static str, value: &'a str) -> Result<&'a str, Error> {
    if value.is_empty() {
        return Err(Error::InvalidRequest(format!("{field} is required")));
    }
    Ok(value)
}

fn session_id_from_wire(text: &str) -> Result<Uuid, Error> {
    required("session_id", text)?;
    Uuid::parse_str(text)
        .map_err(|_| Error::InvalidRequest(format!("session_id {text:?} is not a uuid")))
}

fn size_from_wire(size: Option<broker_wire::TerminalSize>) -> Result<TerminalSize, Error> {
    match size {
        None => Ok(TerminalSize::DEFAULT),
        Some(size) => Ok(TerminalSize::new(size.cols, size.rows)?),
    }
}

fn role_from_wire(role: i32) -> Result<Role, Error> {
    match broker_wire::Role::try_from(role) {
        Ok(broker_wire::Role::Unspecified | broker_wire::Role::Controller) => Ok(Role::Controller),
        Ok(broker_wire::Role::Viewer) => Ok(Role::Viewer),
        Err(_) => Err(Error::InvalidRequest(format!("role {role} is unknown"))),
    }
}

fn validated_command(command: Vec<String>) -> Result<Vec<String>, Error> {
    if command.iter().any(|argument| argument.contains('\0')) {
        return Err(Error::InvalidRequest(
            "command arguments must not contain NUL bytes".into(),
        ));
    }
    Ok(command)
}

fn validated_broker_id(id: &str) -> Result<&str, Error> {
    let valid = (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if !valid {
        return Err(Error::InvalidRequest(format!(
            "broker id {id:?} must match ^[A-Za-z0-9_.-]{{1,128}}$"
        )));
    }
    Ok(id)
}

fn validated_endpoint(endpoint: &str) -> Result<&str, Error> {
    let valid = (endpoint.starts_with("http://") || endpoint.starts_with("https://"))
        && endpoint.parse::<tonic::transport::Uri>().is_ok();
    if !valid {
        return Err(Error::InvalidRequest(format!(
            "broker endpoint {endpoint:?} must be an http:// or https:// url"
        )));
    }
    Ok(endpoint)
}

fn validated_instance_name(name: &str) -> Result<String, Error> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 255 || name.chars().any(char::is_control) {
        return Err(Error::InvalidRequest(
            "instance name must be 1..=255 characters after trimming, without control characters"
                .into(),
        ));
    }
    if Uuid::parse_str(name).is_ok() {
        // Instances are addressed by id or name: a name that is a uuid would be ambiguous.
        return Err(Error::InvalidRequest(
            "instance name must not be a uuid".into(),
        ));
    }
    Ok(name.to_owned())
}

fn validated_env(
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<BTreeMap<String, String>, Error> {
    let env: BTreeMap<String, String> = env.into_iter().collect();
    for (key, value) in &env {
        if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
            return Err(Error::InvalidRequest(format!(
                "environment variable {key:?} is invalid: names are non-empty without = or NUL, values without NUL"
            )));
        }
    }
    Ok(env)
}

fn new_instance_from_wire(request: wire::RegisterInstanceRequest) -> Result<NewInstance, Error> {
    let target = match request.target.and_then(|target| target.kind) {
        None => return Err(Error::InvalidRequest("target is required".into())),
        Some(broker_wire::target::Kind::Local(_)) => Target::Local,
        Some(broker_wire::target::Kind::Docker(docker)) => {
            if docker.container.trim().is_empty() {
                return Err(Error::InvalidRequest(
                    "target.docker.container is required".into(),
                ));
            }
            Target::Docker {
                container: docker.container,
            }
        }
    };
    let max_sessions = match request.max_sessions {
        0 => DEFAULT_MAX_SESSIONS,
        n if n <= MAX_SESSIONS_LIMIT => n,
        n => {
            return Err(Error::InvalidRequest(format!(
                "max_sessions {n} is out of bounds (1..={MAX_SESSIONS_LIMIT})"
            )));
        }
    };
    Ok(NewInstance {
        name: validated_instance_name(&request.name)?,
        target,
        command: validated_command(request.command)?,
        env: validated_env(request.env)?,
        cwd: request.cwd,
        user: request.user,
        max_sessions,
        labels: request.labels.into_iter().collect(),
        broker_id: if request.broker_id.is_empty() {
            None
        } else {
            Some(validated_broker_id(&request.broker_id)?.to_owned())
        },
    })
}

// ---- conversion: domain to wire ---------------------------------------------------------

fn timestamp(at: DateTime<Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: at.timestamp(),
        nanos: i32::try_from(at.timestamp_subsec_nanos()).unwrap_or(0),
    }
}

fn system_timestamp(at: SystemTime) -> prost_types::Timestamp {
    timestamp(DateTime::<Utc>::from(at))
}

fn target_to_wire(target: &Target) -> broker_wire::Target {
    let kind = match target {
        Target::Local => broker_wire::target::Kind::Local(broker_wire::LocalTarget {}),
        Target::Docker { container } => {
            broker_wire::target::Kind::Docker(broker_wire::DockerTarget {
                container: container.clone(),
            })
        }
    };
    broker_wire::Target { kind: Some(kind) }
}

fn instance_to_wire(instance: &Instance) -> wire::Instance {
    wire::Instance {
        id: instance.id.to_string(),
        name: instance.name.clone(),
        target: Some(target_to_wire(&instance.target)),
        command: instance.command.clone(),
        env: instance.env.clone().into_iter().collect(),
        cwd: instance.cwd.clone(),
        user: instance.user.clone(),
        max_sessions: instance.max_sessions,
        labels: instance.labels.clone().into_iter().collect(),
        broker_id: instance.broker_id.clone(),
        created_at: Some(timestamp(instance.created_at)),
        live_sessions: instance.live_sessions,
    }
}

fn status_to_wire(status: SessionStatus) -> wire::SessionStatus {
    match status {
        SessionStatus::Starting => wire::SessionStatus::Starting,
        SessionStatus::Active => wire::SessionStatus::Active,
        SessionStatus::Resetting => wire::SessionStatus::Resetting,
        SessionStatus::Exited => wire::SessionStatus::Exited,
        SessionStatus::Closed => wire::SessionStatus::Closed,
    }
}

fn close_reason_to_wire(reason: Option<CloseReason>) -> wire::CloseReason {
    match reason {
        None => wire::CloseReason::Unspecified,
        Some(CloseReason::ClosedByUser) => wire::CloseReason::ClosedByUser,
        Some(CloseReason::Exited) => wire::CloseReason::Exited,
        Some(CloseReason::IdleReaped) => wire::CloseReason::IdleReaped,
        Some(CloseReason::BrokerLost) => wire::CloseReason::BrokerLost,
        Some(CloseReason::InstanceDeleted) => wire::CloseReason::InstanceDeleted,
        Some(CloseReason::SpawnFailed) => wire::CloseReason::SpawnFailed,
    }
}

fn session_to_wire(session: &Session) -> wire::Session {
    wire::Session {
        id: session.id.to_string(),
        instance_id: session.instance_id.to_string(),
        name: session.name.clone(),
        status: status_to_wire(session.status).into(),
        close_reason: close_reason_to_wire(session.close_reason).into(),
        exit: session.exit.map(|exit| broker_wire::ExitStatus {
            code: exit.code,
            signal: exit.signal,
        }),
        aliases: session.aliases.clone(),
        size: Some(broker_wire::TerminalSize {
            cols: u32::from(session.size.cols()),
            rows: u32::from(session.size.rows()),
        }),
        broker_id: session.broker_id.clone(),
        created_at: Some(timestamp(session.created_at)),
        last_activity_at: Some(timestamp(session.last_activity_at)),
        closed_at: session.closed_at.map(timestamp),
        attached_clients: session.attached_clients,
    }
}

fn role_to_wire(role: Role) -> broker_wire::Role {
    match role {
        Role::Controller => broker_wire::Role::Controller,
        Role::Viewer => broker_wire::Role::Viewer,
    }
}

fn attach_target_to_wire(target: &AttachTarget) -> wire::AttachTarget {
    wire::AttachTarget {
        session_id: target.session_id.to_string(),
        broker_endpoint: target.broker_endpoint.clone(),
        ticket: target.ticket.clone(),
        ticket_expires_at: Some(system_timestamp(target.ticket_expires_at)),
        role: role_to_wire(target.role).into(),
    }
}

fn attachment_to_wire(attachment: &SessionAttachment) -> wire::SessionAttachment {
    wire::SessionAttachment {
        session: Some(session_to_wire(&attachment.session)),
        attach: Some(attach_target_to_wire(&attachment.attach)),
        created: attachment.created,
    }
}

fn change_to_wire(change: &SessionChange) -> wire::SessionChange {
    use wire::session_change::Kind;
    let kind = match change.kind {
        ChangeKind::Created => Kind::Created,
        ChangeKind::Renamed => Kind::Renamed,
        ChangeKind::Status => Kind::Status,
        ChangeKind::Closed => Kind::Closed,
        ChangeKind::Attachments => Kind::Attachments,
    };
    wire::SessionChange {
        kind: kind.into(),
        session: Some(session_to_wire(&change.session)),
        at: Some(timestamp(change.at)),
    }
}

fn broker_to_wire(broker: &Broker) -> wire::Broker {
    wire::Broker {
        id: broker.id.clone(),
        endpoint: broker.endpoint.clone(),
        up: broker.up,
        last_heartbeat_at: broker.last_heartbeat_at.map(timestamp),
        docker: broker.docker,
    }
}

#[cfg(test)]
mod tests {
    use tonic::Code;

    use super::*;

    #[test]
    fn every_error_keeps_its_grpc_code_and_its_message() {
        let id = Uuid::nil();
        let refused = |code| Error::BrokerRefused {
            broker_id: "b1".into(),
            code,
            message: "refused".into(),
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
            let status = Status::from(error);
            assert_eq!(status.code(), code, "{message}");
            assert_eq!(status.message(), message);
        }
        assert_eq!(
            Status::from(Error::CapReached(5)).message(),
            "Maximum of 5 terminal sessions reached for this instance"
        );
    }
}
