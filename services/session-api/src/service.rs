//! What session-api does, in domain terms: instances, sessions and their aliases, attach
//! tickets, the broker registry, and the checks before a screen call is forwarded. `grpc.rs`
//! calls this after validating its input.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ptyhub_attach_ticket::{TicketHolder, TicketRole, TicketSigningKey};
use ptyhub_model::{ControlMode, Role, TerminalSize, presence_surface};
use ptyhub_wire::Actor;
use tokio::sync::{Notify, broadcast};
use uuid::Uuid;

use crate::audit::{AuditFilter, AuditPage, NewAuditEvent, validate_reported};
use crate::broker_client::{BrokerClients, SpawnSpec};
use crate::changes::ChangeFeed;
use crate::domain::{
    Alias, AttachTarget, Broker, ChangeKind, CloseReason, Instance, NewInstance, RecordMode,
    Session, SessionAttachment, SessionChange, SessionName, SessionSelector, SessionStatus,
};
use crate::error::Error;
use crate::store::{Reservation, SessionReservation, Store, closed_event};
use crate::webhooks::WebhookService;

/// The placeholder in a command that is replaced by the new session's id at spawn.
pub const SESSION_ID_PLACEHOLDER: &str = "{session_id}";

/// How often a resolve that found its session still starting looks again.
const STARTING_POLL_INTERVAL: Duration = Duration::from_millis(25);

/// A request to create a session, validated.
#[derive(Debug, Clone, Default)]
pub struct CreateSession {
    pub name: Option<SessionName>,
    pub aliases: Vec<Alias>,
    pub size: TerminalSize,
    /// Replaces the instance's command for this session.
    pub command: Option<Vec<String>>,
    /// Who may type into it.
    pub control_mode: ControlMode,
}

/// The operations of session-api.
#[derive(Debug)]
pub struct SessionService {
    pub(crate) store: Store,
    pub(crate) brokers: BrokerClients,
    pub(crate) changes: Arc<ChangeFeed>,
    /// session-api's private key: no broker holds it, so no broker can make a ticket.
    ticket_signing_key: TicketSigningKey,
    ticket_ttl: Duration,
    /// How long a resolve waits for a session another caller is starting.
    start_wait: Duration,
    heartbeat_interval: Duration,
    /// Woken when a broker registers, so watchers start at once.
    pub(crate) brokers_changed: Arc<Notify>,
    /// What instances without a setting of their own record.
    pub(crate) default_record: RecordMode,
    /// Whether a broker may register an `http://` endpoint: not under TLS, unless the
    /// development setting allows it.
    plaintext_brokers_allowed: bool,
    /// The instances' webhooks, and the wake-up of this replica's delivery task.
    pub(crate) webhooks: WebhookService,
}

impl SessionService {
    pub(crate) fn new(
        store: Store,
        brokers: BrokerClients,
        changes: Arc<ChangeFeed>,
        ticket_signing_key: TicketSigningKey,
        ticket_ttl: Duration,
        start_wait: Duration,
        heartbeat_interval: Duration,
    ) -> Self {
        Self {
            webhooks: WebhookService::new(store.clone()),
            default_record: RecordMode::Off,
            plaintext_brokers_allowed: true,
            store,
            brokers,
            changes,
            ticket_signing_key,
            ticket_ttl,
            start_wait,
            heartbeat_interval,
            brokers_changed: Arc::new(Notify::new()),
        }
    }

    /// What instances without a `record` setting of their own record.
    pub(crate) fn with_default_record(mut self, mode: RecordMode) -> Self {
        self.default_record = mode;
        self
    }

    /// Whether brokers may register `http://` endpoints ([`crate::Config::plaintext_brokers_allowed`]).
    pub(crate) fn with_plaintext_brokers(mut self, allowed: bool) -> Self {
        self.plaintext_brokers_allowed = allowed;
        self
    }

    // ---- instances ----------------------------------------------------------------------

    /// Stores an instance on its explicit broker, or on the least-loaded up broker that can
    /// run its target.
    pub async fn register_instance(&self, new: NewInstance) -> Result<Instance, Error> {
        let broker = match &new.broker_id {
            Some(broker_id) => {
                let broker = self.store.get_broker(broker_id).await?;
                if new.target.needs_docker() && !broker.docker {
                    return Err(Error::BrokerUnsuitable {
                        broker_id: broker.id,
                        kind: new.target.kind_name(),
                    });
                }
                broker
            }
            None => self
                .store
                .least_loaded_broker(&new.target)
                .await?
                .ok_or(Error::NoBrokerAvailable(new.target.kind_name()))?,
        };
        self.check_target_admitted(&broker, &new).await?;
        self.store.insert_instance(&new, &broker.id).await
    }

    /// Refuses an instance whose sessions the broker's own policy would refuse every one of (a
    /// container that runs as root on a broker without `--allow-root`, a container or user it
    /// may not use), so that it is said when the instance is added. Only the policy's refusal
    /// refuses: a broker that does not answer, or a container not there yet, is judged again at
    /// each spawn.
    async fn check_target_admitted(&self, broker: &Broker, new: &NewInstance) -> Result<(), Error> {
        match self
            .brokers
            .check_target(broker, &new.target, &new.user)
            .await
        {
            Err(Error::BrokerRefused {
                code: tonic::Code::PermissionDenied,
                message,
                ..
            }) => Err(Error::TargetRefused(message)),
            Err(error) => {
                tracing::info!(broker_id = %broker.id, %error, "the broker could not check the instance's target now; its sessions are checked at spawn");
                Ok(())
            }
            Ok(()) => Ok(()),
        }
    }

    pub async fn get_instance(&self, id_or_name: &str) -> Result<Instance, Error> {
        self.store.find_instance(id_or_name).await
    }

    /// Every instance whose labels contain all of `label_selector`.
    pub async fn list_instances(
        &self,
        label_selector: &BTreeMap<String, String>,
    ) -> Result<Vec<Instance>, Error> {
        Ok(self
            .store
            .list_instances()
            .await?
            .into_iter()
            .filter(|instance| {
                label_selector
                    .iter()
                    .all(|(key, value)| instance.labels.get(key) == Some(value))
            })
            .collect())
    }

    /// Closes the instance's sessions (`instance_deleted`), ends their processes, and removes
    /// the instance. Returns its id and how many sessions were closed.
    pub async fn delete_instance(&self, id_or_name: &str) -> Result<(Uuid, u32), Error> {
        let instance = self.store.find_instance(id_or_name).await?;
        let closed = self.store.delete_instance(instance.id).await?;
        let broker = self.store.get_broker(&instance.broker_id).await.ok();
        for session in &closed {
            self.changes.publish(ChangeKind::Closed, session);
            if let Some(broker) = &broker {
                self.kill_quietly(broker, session.id).await;
            }
        }
        Ok((instance.id, closed.len() as u32))
    }

    // ---- sessions -----------------------------------------------------------------------

    /// Creates a session: reserves a slot (the cap and the aliases are checked there), spawns
    /// the process, and returns where to attach as a controller.
    pub async fn create_session(
        &self,
        instance: &str,
        request: CreateSession,
        actor: &Actor,
    ) -> Result<SessionAttachment, Error> {
        let instance = self.store.find_instance(instance).await?;
        let reservation = SessionReservation {
            instance_id: instance.id,
            name: request.name,
            aliases: request.aliases,
            size: request.size,
            control_mode: request.control_mode,
            reuse_alias_holder: false,
        };
        match self.store.reserve_session(&reservation).await? {
            Reservation::Created { instance, session } => {
                self.spawn_reserved(&instance, session, request.command, Role::Controller, actor)
                    .await
            }
            Reservation::Existing { session, .. } => Err(Error::AliasTaken {
                alias: session.aliases.first().cloned().unwrap_or_default(),
                session_id: session.id,
            }),
        }
    }

    /// Finds the live session that `selector` names, creating it (for an alias) when asked to
    /// and absent. Concurrent resolves of one alias give one session and one process.
    pub async fn resolve_session(
        &self,
        instance: &str,
        selector: SessionSelector,
        create_if_absent: bool,
        size: TerminalSize,
        role: Role,
        actor: &Actor,
    ) -> Result<SessionAttachment, Error> {
        let instance = self.store.find_instance(instance).await?;
        let alias = match selector {
            SessionSelector::Id(session_id) => {
                if create_if_absent {
                    return Err(Error::InvalidRequest(
                        "create_if_absent applies to aliases only, never to a session id".into(),
                    ));
                }
                let session = self.store.get_session(instance.id, session_id).await?;
                if session.status == SessionStatus::Closed {
                    return Err(Error::SessionClosed(session_id));
                }
                let session = self.wait_until_started(session).await?;
                return self.attachment(session, role, actor, false).await;
            }
            SessionSelector::Alias(alias) => alias,
        };
        // A found session may turn out to have failed to start, releasing the alias; then
        // the resolve starts over. Each round either returns or saw a session close.
        loop {
            if !create_if_absent {
                let session = self
                    .store
                    .find_live_session_by_alias(instance.id, &alias)
                    .await?
                    .ok_or_else(|| Error::AliasNotFound(alias.to_text()))?;
                let session = self.wait_until_started(session).await?;
                if session.status.is_live() {
                    return self.attachment(session, role, actor, false).await;
                }
                return Err(Error::AliasNotFound(alias.to_text()));
            }
            let reservation = SessionReservation {
                instance_id: instance.id,
                name: None,
                aliases: vec![alias.clone()],
                size,
                control_mode: ControlMode::default(),
                reuse_alias_holder: true,
            };
            match self.store.reserve_session(&reservation).await? {
                Reservation::Created { instance, session } => {
                    return self
                        .spawn_reserved(&instance, session, None, role, actor)
                        .await;
                }
                Reservation::Existing { session, .. } => {
                    let session = self.wait_until_started(session).await?;
                    if session.status.is_live() {
                        return self.attachment(session, role, actor, false).await;
                    }
                }
            }
        }
    }

    /// Spawns the process of a session reserved in `starting`. On failure the session is
    /// closed (`spawn_failed`) and the broker's error returned.
    async fn spawn_reserved(
        &self,
        instance: &Instance,
        session: Session,
        command: Option<Vec<String>>,
        role: Role,
        actor: &Actor,
    ) -> Result<SessionAttachment, Error> {
        self.changes.publish(ChangeKind::Created, &session);
        let spawned = async {
            let broker = self.store.get_broker(&session.broker_id).await?;
            let command = command
                .unwrap_or_else(|| instance.command.clone())
                .into_iter()
                .map(|argument| argument.replace(SESSION_ID_PLACEHOLDER, &session.id.to_string()))
                .collect();
            let spec = SpawnSpec {
                session_id: session.id,
                target: instance.target.clone(),
                command,
                env: instance.env.clone(),
                cwd: instance.cwd.clone(),
                user: instance.user.clone(),
                size: session.size,
                record: instance.record.unwrap_or(self.default_record),
                recording_title: format!("{} / {}", instance.name, session.name),
                shell_integration: instance.shell_integration,
                control_mode: session.control_mode,
                control_grant_timeout: instance.control_grant_timeout,
            };
            self.brokers.spawn(&broker, &spec).await?;
            // A broker that just spawned a process is up, whether or not this replica's
            // watcher has reached its event stream yet: the calls that follow at once (a
            // screen, an input) must not be refused as to a broker that is down.
            self.store.record_heartbeat(&broker.id).await?;
            Ok::<_, Error>(broker)
        }
        .await;
        let broker = match spawned {
            Ok(broker) => broker,
            Err(error) => {
                tracing::warn!(session_id = %session.id, %error, "spawn failed");
                if let Some(closed) = self
                    .store
                    .close_session(session.id, CloseReason::SpawnFailed, Some(&Actor::system()))
                    .await?
                {
                    self.changes.publish(ChangeKind::Closed, &closed);
                }
                return Err(error);
            }
        };
        // The broker's Started event may have made it active already, through any replica.
        let current = match self.store.mark_session_active(session.id).await? {
            Some(active) => {
                self.changes.publish(ChangeKind::Status, &active);
                Some(active)
            }
            None => self.store.find_session(session.id).await?,
        };
        match current {
            Some(current) if current.status != SessionStatus::Closed => {
                self.attachment(current, role, actor, true).await
            }
            current => {
                // Closed while it was starting (by a user, or with its instance): the process
                // must not outlive its record.
                self.kill_quietly(&broker, session.id).await;
                Err(Error::SessionNotLive {
                    session_id: session.id,
                    status: current
                        .map(|session| session.status.to_string())
                        .unwrap_or_else(|| "deleted".into()),
                })
            }
        }
    }

    /// Waits while another caller is starting `session`, and returns it once it is not.
    async fn wait_until_started(&self, session: Session) -> Result<Session, Error> {
        if session.status != SessionStatus::Starting {
            return Ok(session);
        }
        let session_id = session.id;
        let waited = tokio::time::timeout(self.start_wait, async {
            loop {
                tokio::time::sleep(STARTING_POLL_INTERVAL).await;
                match self.store.find_session(session_id).await? {
                    Some(session) if session.status == SessionStatus::Starting => continue,
                    Some(session) => return Ok(session),
                    None => return Err(Error::SessionNotFound(session_id)),
                }
            }
        })
        .await;
        waited.map_err(|_| Error::StartTimedOut(session_id))?
    }

    pub async fn get_session(&self, instance: &str, session_id: Uuid) -> Result<Session, Error> {
        let instance = self.store.find_instance(instance).await?;
        self.store.get_session(instance.id, session_id).await
    }

    pub async fn list_sessions(
        &self,
        instance: &str,
        include_closed: bool,
    ) -> Result<Vec<Session>, Error> {
        let instance = self.store.find_instance(instance).await?;
        self.store.list_sessions(instance.id, include_closed).await
    }

    /// A fresh ticket for a session that is not closed.
    pub async fn issue_attach_ticket(
        &self,
        instance: &str,
        session_id: Uuid,
        role: Role,
        actor: &Actor,
    ) -> Result<AttachTarget, Error> {
        let session = self.get_session(instance, session_id).await?;
        if session.status == SessionStatus::Closed {
            return Err(Error::SessionClosed(session_id));
        }
        Ok(self.attachment(session, role, actor, false).await?.attach)
    }

    pub async fn rename_session(
        &self,
        instance: &str,
        session_id: Uuid,
        name: &SessionName,
    ) -> Result<Session, Error> {
        let instance = self.store.find_instance(instance).await?;
        let session = self
            .store
            .rename_session(instance.id, session_id, name)
            .await?;
        self.changes.publish(ChangeKind::Renamed, &session);
        Ok(session)
    }

    /// Sets the control mode of a live session, on its broker (which moves the roles of the
    /// attached streams) and then in its record, so that the record never shows a mode the
    /// terminal does not have: when the broker cannot be told, the record keeps the old one and
    /// the caller may retry. Watchers hear it as an `attachments` change: who may type changed.
    /// Setting the mode it has tells the broker again (a retry after the broker could not be
    /// reached).
    pub async fn set_control_mode(
        &self,
        instance: &str,
        session_id: Uuid,
        control_mode: ControlMode,
    ) -> Result<Session, Error> {
        let instance = self.store.find_instance(instance).await?;
        let before = self.store.get_session(instance.id, session_id).await?;
        if before.status == SessionStatus::Closed {
            return Err(Error::SessionNotLive {
                session_id,
                status: before.status.to_string(),
            });
        }
        let broker = self.store.get_broker(&before.broker_id).await?;
        self.brokers
            .set_control_mode(&broker, session_id, control_mode)
            .await
            .map_err(|error| match error {
                // The process ended and the broker let the session go before its close reached
                // the record: to the caller, the session is closed.
                Error::BrokerRefused {
                    code: tonic::Code::NotFound,
                    ..
                } => Error::SessionNotLive {
                    session_id,
                    status: SessionStatus::Closed.to_string(),
                },
                error => error,
            })?;
        let session = self
            .store
            .set_control_mode(instance.id, session_id, control_mode)
            .await?;
        if before.control_mode != control_mode {
            self.changes.publish(ChangeKind::Attachments, &session);
        }
        Ok(session)
    }

    /// Gives a live session more aliases (idempotent; the creation's rules and cap). Watchers
    /// hear it as a `Renamed` change: the names the session answers to changed.
    pub async fn add_aliases(
        &self,
        instance: &str,
        session_id: Uuid,
        aliases: &[Alias],
    ) -> Result<Session, Error> {
        let instance = self.store.find_instance(instance).await?;
        let (session, changed) = self
            .store
            .add_aliases(instance.id, session_id, aliases)
            .await?;
        if changed {
            self.changes.publish(ChangeKind::Renamed, &session);
        }
        Ok(session)
    }

    /// Restarts the session's command on its PTY (same id, offsets go on).
    pub async fn reset_session(&self, instance: &str, session_id: Uuid) -> Result<Session, Error> {
        let session = self.get_session(instance, session_id).await?;
        let broker = self.store.get_broker(&session.broker_id).await?;
        let Some(resetting) = self.store.mark_session_resetting(session_id).await? else {
            return Err(Error::SessionNotLive {
                session_id,
                status: session.status.to_string(),
            });
        };
        self.changes.publish(ChangeKind::Status, &resetting);
        let reset = self.brokers.reset(&broker, session_id).await;
        // On success the new process runs. On failure the old one is as it was: running, or
        // exited (restarting an exited session is what failed); the broker's events report
        // anything else.
        let back = if reset.is_err() && session.status == SessionStatus::Exited {
            self.store.mark_session_exited_again(session_id).await?
        } else {
            self.store.mark_session_running(session_id).await?
        };
        let session = back.inspect(|changed| self.changes.publish(ChangeKind::Status, changed));
        reset?;
        match session {
            Some(session) => Ok(session),
            None => {
                self.store
                    .get_session(resetting.instance_id, session_id)
                    .await
            }
        }
    }

    /// Closes a session (`closed_by_user`), freeing its slot and aliases, and ends its
    /// process. Closing a closed session returns it unchanged.
    pub async fn close_session(
        &self,
        instance: &str,
        session_id: Uuid,
        by: &Actor,
    ) -> Result<Session, Error> {
        let session = self.get_session(instance, session_id).await?;
        if session.status == SessionStatus::Closed {
            return Ok(session);
        }
        // The process ends before the record closes, so the slot the close frees under the cap
        // is free for real: a create it lets in never runs beside the process it replaces.
        match self.store.get_broker(&session.broker_id).await {
            Ok(broker) => self.kill_quietly(&broker, session_id).await,
            Err(error) => tracing::warn!(%session_id, %error, "no broker to end the process on"),
        }
        match self
            .store
            .close_session(session_id, CloseReason::ClosedByUser, Some(by))
            .await?
        {
            Some(closed) => {
                self.changes.publish(ChangeKind::Closed, &closed);
                Ok(closed)
            }
            // The broker's report of the kill closed it first, through this or another replica,
            // and left the audit event to this close, which asked for the kill.
            None => {
                let closed = self
                    .store
                    .get_session(session.instance_id, session_id)
                    .await?;
                if closed.close_reason == Some(CloseReason::ClosedByUser) {
                    self.record(closed_event(&closed, CloseReason::ClosedByUser, by))
                        .await;
                }
                Ok(closed)
            }
        }
    }

    // ---- the audit trail -------------------------------------------------------------------

    /// Records an event of something that has happened already: a failure to record is logged
    /// (and counted by the log's alerting), never turned into a failure of the action.
    pub async fn record(&self, event: NewAuditEvent) {
        let kind = event.kind.as_str();
        if let Err(error) = self.store.record_audit_event(event).await {
            tracing::error!(%error, kind, "an audit event could not be recorded");
        }
    }

    /// Records what a gateway reports (an attach, a detach, a refusal), after checking it is a
    /// kind gateways report and within the bounds.
    pub async fn record_reported(&self, event: NewAuditEvent) -> Result<u64, Error> {
        validate_reported(&event)?;
        self.store.record_audit_event(event).await
    }

    /// One page of the audit trail. The instance filter is an id (kept after the instance is
    /// deleted) or the name of an instance that exists.
    pub async fn list_audit_events(
        &self,
        instance: Option<&str>,
        mut filter: AuditFilter,
    ) -> Result<AuditPage, Error> {
        if let Some(instance) = instance {
            filter.instance_id = Some(match Uuid::parse_str(instance) {
                Ok(id) => id,
                Err(_) => self.store.find_instance(instance).await?.id,
            });
        }
        self.store.list_audit_events(&filter.validated()?).await
    }

    /// forward to it (the screen calls). Refused without calling the broker: an unknown session
    /// or another instance's, a closed one ([`Error::SessionClosed`]), one whose broker is
    /// marked down ([`Error::BrokerDown`]).
    pub async fn broker_of_open_session(
        &self,
        instance: &str,
        session_id: Uuid,
    ) -> Result<Broker, Error> {
        let session = self.get_session(instance, session_id).await?;
        if session.status == SessionStatus::Closed {
            return Err(Error::SessionClosed(session_id));
        }
        let broker = self.store.get_broker(&session.broker_id).await?;
        if !broker.up {
            return Err(Error::BrokerDown(broker.id));
        }
        Ok(broker)
    }

    /// Session changes from now on; the caller filters by instance.
    pub fn watch_sessions(&self) -> broadcast::Receiver<SessionChange> {
        self.changes.subscribe()
    }

    /// Ends a process; on failure the broker's next Snapshot leads to another try, since the
    /// record is closed by then.
    async fn kill_quietly(&self, broker: &Broker, session_id: Uuid) {
        if let Err(error) = self.brokers.kill(broker, session_id).await {
            tracing::warn!(%session_id, broker_id = %broker.id, %error,
                "could not end the process now; the next reconciliation will");
        }
    }

    /// Where `actor` attaches to `session` as `role`: the broker's endpoint and a ticket that
    /// names the actor, so that the broker can say who is attached (presence).
    async fn attachment(
        &self,
        session: Session,
        role: Role,
        actor: &Actor,
        created: bool,
    ) -> Result<SessionAttachment, Error> {
        let broker = self.store.get_broker(&session.broker_id).await?;
        let ticket_expires_at = SystemTime::now() + self.ticket_ttl;
        let ticket_role = match role {
            Role::Controller => TicketRole::Controller,
            Role::Viewer => TicketRole::Viewer,
        };
        let holder = TicketHolder {
            principal: actor.principal.clone(),
            surface: presence_surface(actor.surface).to_owned(),
        };
        let ticket =
            self.ticket_signing_key
                .sign_for(session.id, ticket_role, ticket_expires_at, &holder);
        Ok(SessionAttachment {
            attach: AttachTarget {
                session_id: session.id,
                broker_endpoint: broker.endpoint,
                ticket,
                ticket_expires_at,
                role,
            },
            session,
            created,
        })
    }

    // ---- brokers ------------------------------------------------------------------------

    /// Registers (or re-registers) broker `id`, whose own credential the caller presented
    /// (the adapter checks that), at `endpoint`. Under TLS an `http://` endpoint is refused
    /// ([`Error::PlaintextBrokerEndpoint`]), unless the development setting allows it: session-api
    /// would call it, and hand it to gateways, in plain text.
    pub async fn register_broker(
        &self,
        id: &str,
        endpoint: &str,
        docker: bool,
    ) -> Result<Broker, Error> {
        if !self.plaintext_brokers_allowed && !endpoint.starts_with("https://") {
            return Err(Error::PlaintextBrokerEndpoint(endpoint.to_owned()));
        }
        let broker = self.store.register_broker(id, endpoint, docker).await?;
        self.brokers_changed.notify_one();
        Ok(broker)
    }

    /// Records a heartbeat of broker `id`, whose own credential the caller presented, and
    /// returns how often the broker should send one.
    pub async fn heartbeat(&self, id: &str) -> Result<Duration, Error> {
        self.store.record_heartbeat(id).await?;
        Ok(self.heartbeat_interval)
    }

    pub async fn list_brokers(&self) -> Result<Vec<Broker>, Error> {
        self.store.list_brokers().await
    }
}
