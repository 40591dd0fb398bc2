//! An authorising proxy of session-api's service: every unary call and `WatchSessions`, checked
//! against the caller's credential and scope, then forwarded to session-api with the gateway's
//! service credential. Messages pass through unchanged. `server.rs` serves it as plain gRPC and,
//! through tonic-web, as gRPC-web for browsers.
//!
//! The screen calls (`GetScreen`, `SendInput`, `WaitForScreen`) and the command calls
//! (`ListCommands`, `GetCommandOutput`) answer without the session's record, so their session is
//! checked before they are forwarded: it must be the instance's and not closed. The command
//! calls are the session's past, which a share link's credential does not see
//! (`PERMISSION_DENIED`), as it does not see a recording, nor the commands of a session change
//! nor the working directory a session's shell reported. `Run` types like `SendInput` (a share
//! link's credential may not) and waits like `WaitForScreen`, on the channel without a per-call
//! bound.
//!
//! A session's command is the instance's unless the caller may choose one
//! ([`crate::scope::Access::may_choose_command`]); an override from anyone else is refused with
//! `PERMISSION_DENIED`, as REST refuses it with 403.
//!
//! The webhook calls are an instance's settings: a viewer-only credential (a share link's) may
//! neither register, list nor delete one (`PERMISSION_DENIED`).
//!
//! Every attach target it hands out (`CreateSession`, `ResolveSession`, `IssueAttachTicket`)
//! names the gateway as its `broker_endpoint`, never a broker's internal address: a caller of
//! the gateway streams through the gateway ([`crate::attach_relay`]).

use std::pin::Pin;

use futures::{Stream, StreamExt};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as pb;
use ptyhub_proto::session::v1::session_api_server::{SessionApi, SessionApiServer};
use ptyhub_wire::ErrorCode;
use tonic::{Request, Response, Status};

use ptyhub_wire::Surface;

use crate::auth::Principal;
use crate::domain::{ControlState, Instance, TerminalActivity};
use crate::front_door::{grpc_surface_of as surface_of, principal_of};
use crate::grpc::SessionApiClient;
use crate::grpc::{instance_from_proto, instance_to_proto, session_from_proto};
use crate::scope::{Access, SeenBy as _, commands_seen_by};
use crate::state::AppState;

/// Implements session-api's service by forwarding, after the gateway's own checks.
#[derive(Debug, Clone)]
pub struct SessionApiProxy {
    state: AppState,
}

impl SessionApiProxy {
    pub fn new(state: AppState) -> Self {
        Self { state }
    }

    /// The proxy as the gRPC service it serves.
    pub fn into_server(self) -> SessionApiServer<Self> {
        SessionApiServer::new(self)
    }

    /// session-api's client, acting for `principal` through `surface`.
    fn client(&self, principal: &Principal, surface: Surface) -> SessionApiClient {
        self.state
            .upstreams
            .acting_for(&principal.actor(surface))
            .session_api_client()
    }

    /// The caller's principal, as the front door authenticated it (the `authorization`
    /// metadata alone: gRPC callers are programs, never the page's cookie).
    async fn authenticate<T>(&self, request: &Request<T>) -> Result<Principal, Status> {
        principal_of(request).await
    }

    /// Checks the caller may use `instance` and returns its id.
    async fn authorize_instance(
        &self,
        principal: &Principal,
        instance: &str,
        surface: Surface,
    ) -> Result<String, Status> {
        self.authorized_instance(principal, instance, surface)
            .await
            .map(|instance| instance.id)
    }

    /// Authenticates the caller and checks its scope for the request's instance, which it
    /// replaces by the instance's id: what every instance-scoped call does first.
    async fn scoped_principal<M: InstanceScoped>(
        &self,
        request: Request<M>,
    ) -> Result<(Principal, M, SessionApiClient), Status> {
        let principal = self.authenticate(&request).await?;
        let surface = surface_of(&request);
        let mut message = request.into_inner();
        let instance = self
            .authorize_instance(&principal, message.instance(), surface)
            .await?;
        *message.instance_mut() = instance;
        let client = self.client(&principal, surface);
        Ok((principal, message, client))
    }

    /// [`SessionApiProxy::scoped_principal`] for a call that changes something: a viewer-only
    /// credential (a share link's) is PERMISSION_DENIED.
    async fn controlled<M: InstanceScoped>(
        &self,
        request: Request<M>,
        action: &str,
    ) -> Result<(M, SessionApiClient), Status> {
        let (principal, message, client) = self.scoped_principal(request).await?;
        principal
            .access
            .require_control(action)
            .map_err(|error| error.to_status())?;
        Ok((message, client))
    }

    /// Like [`SessionApiProxy::scoped_principal`], and the request's session must be a live one
    /// of that instance: for the calls whose answer does not say which instance it is about.
    async fn scoped_live_session<M: SessionScoped>(
        &self,
        request: Request<M>,
    ) -> Result<(Principal, M, SessionApiClient), Status> {
        let principal = self.authenticate(&request).await?;
        let surface = surface_of(&request);
        let mut message = request.into_inner();
        let instance = self
            .authorized_instance(&principal, message.instance(), surface)
            .await?;
        self.state
            .authorize_live_session(&principal, &instance, message.session_id())
            .await
            .map_err(|error| error.to_status())?;
        *message.instance_mut() = instance.id;
        let client = self.client(&principal, surface);
        Ok((principal, message, client))
    }

    /// The instance, once the principal may use it; a refusal for scope goes to the audit
    /// trail.
    async fn authorized_instance(
        &self,
        principal: &Principal,
        instance: &str,
        surface: Surface,
    ) -> Result<Instance, Status> {
        if instance.is_empty() {
            return Err(ErrorCode::Invalid.status("instance is required"));
        }
        self.state
            .authorize_instance_through(principal, instance, surface)
            .await
            .map_err(|error| error.to_status())
    }

    fn require_admin(principal: &Principal, action: &str) -> Result<(), Status> {
        if principal.access.is_admin() {
            Ok(())
        } else {
            Err(ErrorCode::Forbidden.status(format!("{action} needs an admin credential")))
        }
    }
}

/// Where a caller of the gateway attaches: the configured public URL, else the scheme and
/// authority its request came in with ([`RequestOrigin`], recorded by the router).
fn public_endpoint<T>(state: &AppState, request: &Request<T>) -> String {
    if let Some(url) = &state.public_url {
        return url.trim_end_matches('/').to_owned();
    }
    match request.extensions().get::<RequestOrigin>() {
        Some(origin) => origin.0.clone(),
        // The router records every request's origin; without one the answer cannot say where
        // to attach, and an internal address must never stand in for it.
        None => String::new(),
    }
}

/// `scheme://authority` of a request as the client addressed it, recorded by the router before
/// the request reaches a gRPC service.
#[derive(Debug, Clone)]
pub struct RequestOrigin(pub String);

/// A viewer-only credential asks for tickets of the viewer role alone.
fn require_viewer_role(role: i32) -> Result<(), Status> {
    if broker_pb::Role::try_from(role) == Ok(broker_pb::Role::Viewer) {
        Ok(())
    } else {
        Err(ErrorCode::Forbidden.status("this credential may only view: ask for the viewer role"))
    }
}

/// Points an attach target at the gateway.
fn rewrite_endpoint(target: Option<&mut pb::AttachTarget>, endpoint: &str) {
    if let Some(target) = target {
        target.broker_endpoint = endpoint.to_owned();
    }
}

/// A session-api error as the browser should see it: the service credential is the gateway's
/// business, so its refusal is reported as unavailability.
fn forwarded(status: Status) -> Status {
    if status.code() == tonic::Code::Unauthenticated {
        tracing::error!("session-api refused the gateway's service credential");
        return ErrorCode::Unavailable.status("session-api refused the gateway's service token");
    }
    // A lost session-api (frozen, gone mid-stream) is UNAVAILABLE, not tonic's UNKNOWN.
    if ptyhub_wire::is_connection_failure(&status) {
        return ErrorCode::Unavailable
            .status(format!("session-api is unavailable: {}", status.message()));
    }
    status
}

/// Checks that an answer is about the instance that was authorised; a session id of another
/// instance is never answered.
fn same_instance(instance_id: &str, session: Option<&pb::Session>) -> Result<(), Status> {
    match session {
        Some(session) if session.instance_id != instance_id => {
            Err(ErrorCode::NotFound.status("session not found"))
        }
        _ => Ok(()),
    }
}

/// A request about one instance, named by id or name in its `instance` field.
trait InstanceScoped {
    fn instance(&self) -> &str;
    fn instance_mut(&mut self) -> &mut String;
}

macro_rules! instance_scoped {
    ($($request:ty),* $(,)?) => {
        $(impl InstanceScoped for $request {
            fn instance(&self) -> &str {
                &self.instance
            }
            fn instance_mut(&mut self) -> &mut String {
                &mut self.instance
            }
        })*
    };
}

/// A request about one session of an instance.
trait SessionScoped: InstanceScoped {
    fn session_id(&self) -> &str;
}

macro_rules! session_scoped {
    ($($request:ty),* $(,)?) => {
        $(impl SessionScoped for $request {
            fn session_id(&self) -> &str {
                &self.session_id
            }
        })*
    };
}

session_scoped!(
    pb::GetControlRequest,
    pb::RequestControlRequest,
    pb::AnswerControlRequest,
    pb::GetScreenRequest,
    pb::SendInputRequest,
    pb::WaitForScreenRequest,
    pb::ListCommandsRequest,
    pb::GetCommandOutputRequest,
    pb::RunRequest,
    pb::WatchCommandsRequest,
);

instance_scoped!(
    pb::GetControlRequest,
    pb::RequestControlRequest,
    pb::AnswerControlRequest,
    pb::WatchCommandsRequest,
    pb::GetScreenRequest,
    pb::SendInputRequest,
    pb::WaitForScreenRequest,
    pb::ListCommandsRequest,
    pb::GetCommandOutputRequest,
    pb::RunRequest,
    pb::GetInstanceRequest,
    pb::CreateSessionRequest,
    pb::GetSessionRequest,
    pb::ListSessionsRequest,
    pb::ResolveSessionRequest,
    pb::RenameSessionRequest,
    pb::AddSessionAliasesRequest,
    pb::UpdateSessionRequest,
    pb::ResetSessionRequest,
    pb::CloseSessionRequest,
    pb::CreateWebhookRequest,
    pb::ListWebhooksRequest,
    pb::DeleteWebhookRequest,
);

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::SessionChange, Status>> + Send>>;
type CommandStream = Pin<Box<dyn Stream<Item = Result<broker_pb::Command, Status>> + Send>>;

#[tonic::async_trait]
impl SessionApi for SessionApiProxy {
    async fn register_instance(
        &self,
        request: Request<pb::RegisterInstanceRequest>,
    ) -> Result<Response<pb::Instance>, Status> {
        let principal = self.authenticate(&request).await?;
        Self::require_admin(&principal, "registering instances")?;
        self.client(&principal, surface_of(&request))
            .register_instance(request.into_inner())
            .await
            .map_err(forwarded)
    }

    async fn get_instance(
        &self,
        request: Request<pb::GetInstanceRequest>,
    ) -> Result<Response<pb::Instance>, Status> {
        let (principal, message, mut client) = self.scoped_principal(request).await?;
        let mut response = client.get_instance(message).await.map_err(forwarded)?;
        instance_as_seen_by(response.get_mut(), &principal.access);
        Ok(response)
    }

    async fn list_instances(
        &self,
        request: Request<pb::ListInstancesRequest>,
    ) -> Result<Response<pb::ListInstancesResponse>, Status> {
        let principal = self.authenticate(&request).await?;
        let mut response = self
            .client(&principal, surface_of(&request))
            .list_instances(request.into_inner())
            .await
            .map_err(forwarded)?;
        response.get_mut().instances.retain(|instance| {
            principal
                .access
                .allows_id_or_name(&instance.id, &instance.name)
        });
        for instance in &mut response.get_mut().instances {
            instance_as_seen_by(instance, &principal.access);
        }
        Ok(response)
    }

    async fn delete_instance(
        &self,
        request: Request<pb::DeleteInstanceRequest>,
    ) -> Result<Response<pb::DeleteInstanceResponse>, Status> {
        let principal = self.authenticate(&request).await?;
        Self::require_admin(&principal, "deleting instances")?;
        let surface = surface_of(&request);
        let mut message = request.into_inner();
        message.instance = self
            .authorize_instance(&principal, &message.instance, surface)
            .await?;
        self.client(&principal, surface)
            .delete_instance(message)
            .await
            .map_err(forwarded)
    }

    async fn create_session(
        &self,
        request: Request<pb::CreateSessionRequest>,
    ) -> Result<Response<pb::SessionAttachment>, Status> {
        let endpoint = public_endpoint(&self.state, &request);
        let (principal, message, mut client) = self.scoped_principal(request).await?;
        principal
            .access
            .require_control("creating a session")
            .map_err(|error| error.to_status())?;
        // Refused, never dropped: a caller that asked for a program must not get a shell it
        // did not ask for, nor the one it asked for without the right to.
        principal
            .access
            .check_command_override(&message.command)
            .map_err(|error| error.to_status())?;
        let instance_id = message.instance.clone();
        let mut response = client.create_session(message).await.map_err(forwarded)?;
        same_instance(&instance_id, response.get_ref().session.as_ref())?;
        rewrite_endpoint(response.get_mut().attach.as_mut(), &endpoint);
        Ok(response)
    }

    async fn get_session(
        &self,
        request: Request<pb::GetSessionRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let (principal, message, mut client) = self.scoped_principal(request).await?;
        let instance_id = message.instance.clone();
        let mut response = client.get_session(message).await.map_err(forwarded)?;
        same_instance(&instance_id, Some(response.get_ref()))?;
        if !principal.access.allows_session(&response.get_ref().id) {
            return Err(ErrorCode::NotFound.status("session not found"));
        }
        session_as_seen_by(response.get_mut(), &principal.access)?;
        Ok(response)
    }

    async fn list_sessions(
        &self,
        request: Request<pb::ListSessionsRequest>,
    ) -> Result<Response<pb::ListSessionsResponse>, Status> {
        let (principal, message, mut client) = self.scoped_principal(request).await?;
        let mut response = client.list_sessions(message).await.map_err(forwarded)?;
        response
            .get_mut()
            .sessions
            .retain(|session| principal.access.allows_session(&session.id));
        for session in &mut response.get_mut().sessions {
            session_as_seen_by(session, &principal.access)?;
        }
        Ok(response)
    }

    async fn resolve_session(
        &self,
        request: Request<pb::ResolveSessionRequest>,
    ) -> Result<Response<pb::SessionAttachment>, Status> {
        let endpoint = public_endpoint(&self.state, &request);
        let (principal, message, mut client) = self.scoped_principal(request).await?;
        if principal.access.is_viewer_only() {
            if message.create_if_absent {
                return Err(ErrorCode::Forbidden
                    .status("creating a session is not allowed: this credential may only view"));
            }
            require_viewer_role(message.role)?;
        }
        let instance_id = message.instance.clone();
        let mut response = client.resolve_session(message).await.map_err(forwarded)?;
        same_instance(&instance_id, response.get_ref().session.as_ref())?;
        if let Some(session) = &response.get_ref().session
            && !principal.access.allows_session(&session.id)
        {
            return Err(ErrorCode::NotFound.status("session not found"));
        }
        if let Some(session) = &mut response.get_mut().session {
            session_as_seen_by(session, &principal.access)?;
        }
        rewrite_endpoint(response.get_mut().attach.as_mut(), &endpoint);
        Ok(response)
    }

    async fn issue_attach_ticket(
        &self,
        request: Request<pb::IssueAttachTicketRequest>,
    ) -> Result<Response<pb::AttachTarget>, Status> {
        let principal = self.authenticate(&request).await?;
        let endpoint = public_endpoint(&self.state, &request);
        let surface = surface_of(&request);
        let mut message = request.into_inner();
        if principal.access.is_viewer_only() {
            require_viewer_role(message.role)?;
        }
        let instance = self
            .authorized_instance(&principal, &message.instance, surface)
            .await?;
        // Make sure the session is this instance's before a ticket for it leaves the gateway.
        self.state
            .authorize_session(&principal, &instance, &message.session_id)
            .await
            .map_err(|error| error.to_status())?;
        message.instance = instance.id;
        let mut response = self
            .client(&principal, surface)
            .issue_attach_ticket(message)
            .await
            .map_err(forwarded)?;
        rewrite_endpoint(Some(response.get_mut()), &endpoint);
        Ok(response)
    }

    async fn rename_session(
        &self,
        request: Request<pb::RenameSessionRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let (message, mut client) = self.controlled(request, "renaming a session").await?;
        let instance_id = message.instance.clone();
        let response = client.rename_session(message).await.map_err(forwarded)?;
        same_instance(&instance_id, Some(response.get_ref()))?;
        Ok(response)
    }

    async fn add_session_aliases(
        &self,
        request: Request<pb::AddSessionAliasesRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let (message, mut client) = self
            .controlled(request, "adding aliases to a session")
            .await?;
        let instance_id = message.instance.clone();
        let response = client
            .add_session_aliases(message)
            .await
            .map_err(forwarded)?;
        same_instance(&instance_id, Some(response.get_ref()))?;
        Ok(response)
    }

    async fn update_session(
        &self,
        request: Request<pb::UpdateSessionRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let (message, mut client) = self.controlled(request, "changing a session").await?;
        let instance_id = message.instance.clone();
        let response = client.update_session(message).await.map_err(forwarded)?;
        same_instance(&instance_id, Some(response.get_ref()))?;
        Ok(response)
    }

    async fn reset_session(
        &self,
        request: Request<pb::ResetSessionRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let (message, mut client) = self.controlled(request, "resetting a session").await?;
        let instance_id = message.instance.clone();
        let response = client.reset_session(message).await.map_err(forwarded)?;
        same_instance(&instance_id, Some(response.get_ref()))?;
        Ok(response)
    }

    async fn close_session(
        &self,
        request: Request<pb::CloseSessionRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let (message, mut client) = self.controlled(request, "closing a session").await?;
        let instance_id = message.instance.clone();
        let response = client.close_session(message).await.map_err(forwarded)?;
        same_instance(&instance_id, Some(response.get_ref()))?;
        Ok(response)
    }

    async fn get_screen(
        &self,
        request: Request<pb::GetScreenRequest>,
    ) -> Result<Response<broker_pb::Screen>, Status> {
        let (principal, message, mut client) = self.scoped_live_session(request).await?;
        principal
            .access
            .check_scrollback(message.scrollback)
            .map_err(|error| error.to_status())?;
        let mut screen = client.get_screen(message).await.map_err(forwarded)?;
        let shown = screen.get_mut();
        shown.terminal = terminal_seen_by(shown.terminal.take(), &principal.access);
        Ok(screen)
    }

    async fn send_input(
        &self,
        request: Request<pb::SendInputRequest>,
    ) -> Result<Response<broker_pb::SendInputResponse>, Status> {
        let (principal, message, mut client) = self.scoped_live_session(request).await?;
        principal
            .access
            .require_control("typing")
            .map_err(|error| error.to_status())?;
        client.send_input(message).await.map_err(forwarded)
    }

    /// Any credential of the instance; a share link's sees no principals (as in presence).
    async fn get_control(
        &self,
        request: Request<pb::GetControlRequest>,
    ) -> Result<Response<broker_pb::ControlState>, Status> {
        let (principal, message, mut client) = self.scoped_live_session(request).await?;
        let state = client
            .get_control(message)
            .await
            .map_err(forwarded)?
            .into_inner();
        let state = ControlState::try_from(state)
            .map_err(|invalid| ErrorCode::Internal.status(invalid.to_string()))?
            .seen_by(&principal.access);
        Ok(Response::new((&state).into()))
    }

    async fn request_control(
        &self,
        request: Request<pb::RequestControlRequest>,
    ) -> Result<Response<broker_pb::ControlRequest>, Status> {
        let (principal, message, mut client) = self.scoped_live_session(request).await?;
        principal
            .access
            .require_control("asking for control")
            .map_err(|error| error.to_status())?;
        client.request_control(message).await.map_err(forwarded)
    }

    async fn grant_control(
        &self,
        request: Request<pb::AnswerControlRequest>,
    ) -> Result<Response<broker_pb::ControlState>, Status> {
        let (principal, message, mut client) = self.scoped_live_session(request).await?;
        principal
            .access
            .require_control("answering a request for control")
            .map_err(|error| error.to_status())?;
        client.grant_control(message).await.map_err(forwarded)
    }

    async fn decline_control(
        &self,
        request: Request<pb::AnswerControlRequest>,
    ) -> Result<Response<broker_pb::ControlState>, Status> {
        let (principal, message, mut client) = self.scoped_live_session(request).await?;
        principal
            .access
            .require_control("answering a request for control")
            .map_err(|error| error.to_status())?;
        client.decline_control(message).await.map_err(forwarded)
    }

    async fn wait_for_screen(
        &self,
        request: Request<pb::WaitForScreenRequest>,
    ) -> Result<Response<broker_pb::WaitForScreenResponse>, Status> {
        let (principal, message, _) = self.scoped_live_session(request).await?;
        principal
            .access
            .check_scrollback(message.scrollback)
            .map_err(|error| error.to_status())?;
        // A wait is held open like a stream: it counts among the principal's, on every surface,
        // and ends with its credential.
        let open = self
            .state
            .streams
            .open(&principal)
            .map_err(|error| error.to_status())?;
        // Not the channel every other call uses: a wait may outlast its per-call bound.
        let mut answer = open
            .unless_credential_ends(self.state.upstreams.forward_wait_for_screen(message))
            .await
            .map_err(|end| ErrorCode::Unauthenticated.status(end.reason()))?
            .map_err(forwarded)?;
        // What the terminal was doing, as the credential may see it.
        let answered = answer.get_mut();
        answered.terminal = terminal_seen_by(answered.terminal.take(), &principal.access);
        if let Some(screen) = answered.screen.as_mut() {
            screen.terminal = terminal_seen_by(screen.terminal.take(), &principal.access);
        }
        Ok(answer)
    }

    async fn list_commands(
        &self,
        request: Request<pb::ListCommandsRequest>,
    ) -> Result<Response<broker_pb::ListCommandsResponse>, Status> {
        let (principal, message, mut client) = self.scoped_live_session(request).await?;
        principal
            .access
            .require_control("reading a session's commands")
            .map_err(|error| error.to_status())?;
        client.list_commands(message).await.map_err(forwarded)
    }

    async fn get_command_output(
        &self,
        request: Request<pb::GetCommandOutputRequest>,
    ) -> Result<Response<broker_pb::CommandOutput>, Status> {
        let (principal, message, mut client) = self.scoped_live_session(request).await?;
        principal
            .access
            .require_control("reading a command's output")
            .map_err(|error| error.to_status())?;
        client.get_command_output(message).await.map_err(forwarded)
    }

    async fn run(
        &self,
        request: Request<pb::RunRequest>,
    ) -> Result<Response<broker_pb::RunResponse>, Status> {
        let surface = surface_of(&request);
        let (principal, message, _) = self.scoped_live_session(request).await?;
        principal
            .access
            .require_control("running a command")
            .map_err(|error| error.to_status())?;
        // Acting for the caller: session-api records what it typed as their input.
        self.state
            .upstreams
            .acting_for(&principal.actor(surface))
            .forward_run(message)
            .await
            .map_err(forwarded)
    }

    type WatchCommandsStream = CommandStream;

    /// As `ListCommands` (a share link's credential is refused), a stream that counts among the
    /// principal's and ends with the gateway or the credential, as `WatchSessions` does.
    async fn watch_commands(
        &self,
        request: Request<pb::WatchCommandsRequest>,
    ) -> Result<Response<Self::WatchCommandsStream>, Status> {
        let (principal, message, mut client) = self.scoped_live_session(request).await?;
        principal
            .access
            .require_control("reading a session's commands")
            .map_err(|error| error.to_status())?;
        let (slot, credential) = self
            .state
            .streams
            .open(&principal)
            .map_err(|error| error.to_status())?
            .into_parts();
        let commands = client
            .watch_commands(message)
            .await
            .map_err(forwarded)?
            .into_inner();
        let shutdown = self.state.shutdown.clone();
        let stream = commands
            .map(move |command| {
                let _held = &slot;
                command.map_err(forwarded)
            })
            .take_until(async move {
                tokio::select! {
                    () = shutdown.cancelled() => {}
                    _ = credential.ended() => {}
                }
            });
        Ok(Response::new(Box::pin(stream)))
    }

    /// Only gateways report to the audit trail: a caller of the gateway could otherwise write
    /// whatever history it liked.
    async fn record_audit_event(
        &self,
        request: Request<pb::RecordAuditEventRequest>,
    ) -> Result<Response<pb::RecordAuditEventResponse>, Status> {
        self.authenticate(&request).await?;
        Err(ErrorCode::Forbidden
            .status("audit events are recorded by ptyhub itself, never reported by its callers"))
    }

    /// A scoped principal lists the events of its own instances only.
    async fn list_audit_events(
        &self,
        request: Request<pb::ListAuditEventsRequest>,
    ) -> Result<Response<pb::ListAuditEventsResponse>, Status> {
        let principal = self.authenticate(&request).await?;
        let surface = surface_of(&request);
        let listing = crate::grpc::audit_listing_from_proto(request.into_inner())
            .map_err(|error| error.to_status())?;
        let listing = crate::rest::audit::scope_audit_listing(&self.state, &principal, listing)
            .await
            .map_err(|error| error.to_status())?;
        self.client(&principal, surface)
            .list_audit_events(crate::grpc::audit_listing_to_proto(listing))
            .await
            .map_err(forwarded)
    }

    async fn create_webhook(
        &self,
        request: Request<pb::CreateWebhookRequest>,
    ) -> Result<Response<pb::Webhook>, Status> {
        let (message, mut client) = self.controlled(request, "registering webhooks").await?;
        client.create_webhook(message).await.map_err(forwarded)
    }

    async fn list_webhooks(
        &self,
        request: Request<pb::ListWebhooksRequest>,
    ) -> Result<Response<pb::ListWebhooksResponse>, Status> {
        let (message, mut client) = self.controlled(request, "listing webhooks").await?;
        client.list_webhooks(message).await.map_err(forwarded)
    }

    async fn delete_webhook(
        &self,
        request: Request<pb::DeleteWebhookRequest>,
    ) -> Result<Response<pb::Webhook>, Status> {
        let (message, mut client) = self.controlled(request, "deleting webhooks").await?;
        client.delete_webhook(message).await.map_err(forwarded)
    }

    type WatchSessionsStream = WatchStream;

    async fn watch_sessions(
        &self,
        request: Request<pb::WatchSessionsRequest>,
    ) -> Result<Response<Self::WatchSessionsStream>, Status> {
        let principal = self.authenticate(&request).await?;
        let surface = surface_of(&request);
        let mut message = request.into_inner();
        if message.instance.is_empty() {
            if !principal.access.covers_all_instances() {
                return Err(ErrorCode::Forbidden
                    .status("watching every instance needs a credential for all instances"));
            }
        } else {
            message.instance = self
                .authorize_instance(&principal, &message.instance, surface)
                .await?;
        }
        let (slot, credential) = self
            .state
            .streams
            .open(&principal)
            .map_err(|error| error.to_status())?
            .into_parts();
        let changes = self
            .client(&principal, surface)
            .watch_sessions(message)
            .await
            .map_err(forwarded)?
            .into_inner();
        // The stream ends with the gateway, so a watching browser never holds up shutdown, and
        // with the credential it was opened with.
        let shutdown = self.state.shutdown.clone();
        let access = principal.access.clone();
        let seeing = principal.access.clone();
        let stream = changes
            .filter(move |change| {
                let covered = match change {
                    Ok(change) => change
                        .session
                        .as_ref()
                        .is_none_or(|session| access.allows_session(&session.id)),
                    Err(_) => true,
                };
                std::future::ready(covered)
            })
            .map(move |change| {
                // Held while the changes flow: they count among the principal's streams.
                let _held = &slot;
                let mut change = change.map_err(forwarded)?;
                change_as_seen_by(&mut change, &seeing)?;
                Ok(change)
            })
            .take_until(async move {
                tokio::select! {
                    () = shutdown.cancelled() => {}
                    _ = credential.ended() => {}
                }
            });
        Ok(Response::new(Box::pin(stream)))
    }
}

/// A session as `access` may see it: `crate::scope`'s one rule, applied to the model's record
/// the message reads as, and written back. A session session-api answered that does not read
/// is its fault (`INTERNAL`).
fn session_as_seen_by(session: &mut pb::Session, access: &Access) -> Result<(), Status> {
    let record = session_from_proto(std::mem::take(session)).map_err(|error| error.to_status())?;
    *session = pb::Session::from(&record.seen_by(access));
    Ok(())
}

/// A session change as `access` may see it: the session by the same rule, and its commands
/// only for a credential that may read commands.
fn change_as_seen_by(change: &mut pb::SessionChange, access: &Access) -> Result<(), Status> {
    change.commands = commands_seen_by(std::mem::take(&mut change.commands), access);
    if let Some(session) = &mut change.session {
        session_as_seen_by(session, access)?;
    }
    Ok(())
}

/// An instance as `access` may see it, by `crate::scope`'s one rule.
fn instance_as_seen_by(instance: &mut pb::Instance, access: &Access) {
    let record = instance_from_proto(std::mem::take(instance));
    *instance = instance_to_proto(record.seen_by(access));
}

/// A broker's terminal activity as `access` may see it ([`SeenBy`] for [`TerminalActivity`]);
/// one the model cannot read is left out rather than passed on unfiltered.
fn terminal_seen_by(
    terminal: Option<broker_pb::TerminalActivity>,
    access: &Access,
) -> Option<broker_pb::TerminalActivity> {
    terminal
        .and_then(|terminal| TerminalActivity::try_from(terminal).ok())
        .map(|terminal| terminal.seen_by(access).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> pb::Session {
        pb::Session {
            id: uuid::Uuid::from_u128(1).to_string(),
            instance_id: uuid::Uuid::from_u128(2).to_string(),
            name: "Session 1".to_owned(),
            status: pb::SessionStatus::Active as i32,
            size: Some(broker_pb::TerminalSize { cols: 80, rows: 24 }),
            created_at: Some(prost_types::Timestamp::default()),
            last_activity_at: Some(prost_types::Timestamp::default()),
            terminal: Some(broker_pb::TerminalActivity {
                state: broker_pb::TerminalState::Running as i32,
                cwd: "/src".to_owned(),
                shell_integration: true,
                running_command_id: 7,
                ..broker_pb::TerminalActivity::default()
            }),
            // A record always carries its mode; an unspecified one reads as exclusive.
            control_mode: broker_pb::ControlMode::Exclusive as i32,
            ..pb::Session::default()
        }
    }

    #[test]
    fn a_share_sees_a_grpc_session_by_the_same_rule_as_rest() {
        let share = Access::shared(&uuid::Uuid::from_u128(2).to_string(), None);
        let mut seen = session();
        session_as_seen_by(&mut seen, &share).expect("a valid session");
        let terminal = seen.terminal.expect("what the terminal is doing");
        assert_eq!(
            (terminal.cwd.as_str(), terminal.running_command_id),
            ("", 0)
        );
        assert!(terminal.shell_integration);
        let mut full = session();
        session_as_seen_by(&mut full, &Access::admin()).expect("a valid session");
        assert_eq!(full, session());
    }

    #[test]
    fn a_session_that_does_not_read_is_an_internal_error_not_a_panic() {
        let mut broken = pb::Session {
            id: "not-a-uuid".to_owned(),
            ..session()
        };
        let refused = session_as_seen_by(&mut broken, &Access::admin()).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Internal, "{refused:?}");
    }

    #[test]
    fn a_share_sees_a_grpc_instance_without_its_settings() {
        let instance = pb::Instance {
            id: "web".to_owned(),
            name: "web".to_owned(),
            target: Some(ptyhub_model::Target::Local.into()),
            command: vec!["bash".to_owned()],
            env: [("API_KEY".to_owned(), "secret".to_owned())].into(),
            cwd: "/srv".to_owned(),
            user: "app".to_owned(),
            record: broker_pb::RecordMode::Off as i32,
            ..pb::Instance::default()
        };
        let mut seen = instance.clone();
        instance_as_seen_by(&mut seen, &Access::shared("web", None));
        assert_eq!(seen.target, None);
        assert!(seen.command.is_empty() && seen.env.is_empty());
        assert!(seen.cwd.is_empty() && seen.user.is_empty());
        let mut full = instance.clone();
        instance_as_seen_by(&mut full, &Access::admin());
        assert_eq!(full, instance);
    }
}
