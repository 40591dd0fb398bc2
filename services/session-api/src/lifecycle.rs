//! What happens to sessions outside any API call: one watcher per broker follows its event
//! stream (reconnecting with backoff), records exits, closes, activity, attachments and who
//! they are (presence, at once), window titles and bells (the last three batched), who typed
//! how much (batched: the audit's input windows), and reconciles the records with the broker's
//! Snapshot each time the stream (re)connects; a supervisor starts watchers for new brokers,
//! marks silent brokers down, and closes (`broker_lost`) the sessions of a broker that stays
//! down past the heartbeat timeout. Two sweeps keep the records from growing without bound:
//! closed sessions past their retention, and audit events past theirs.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use futures::StreamExt;
use ptyhub_attach_ticket::TicketHolder;
use ptyhub_model::{AuditKind, ControlChangeKind, surface_of_presence};
use ptyhub_wire::{Actor, Surface};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::audit::NewAuditEvent;
use crate::broker_client::{BrokerEvent, BrokerSession, BrokerSessionState};
use crate::domain::{
    Broker, ChangeKind, CloseReason, Command, ScreenFacts, SessionStatus, TerminalActivity,
};
use crate::error::Error;
use crate::service::SessionService;
use crate::store::{ActivityUpdate, ReportedEvent, now};

const FIRST_RECONNECT_DELAY: Duration = Duration::from_millis(100);
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(5);

/// The settings of the lifecycle tasks.
#[derive(Debug, Clone)]
pub struct LifecycleSettings {
    /// A broker with no heartbeat (its own, or a watcher's live stream) for this long is down.
    pub heartbeat_timeout: Duration,
    /// How often batched activity, window titles and bells are written.
    pub activity_flush_interval: Duration,
    /// A `starting` session younger than this is being spawned by some replica: reconciliation
    /// leaves it to that replica.
    pub spawn_grace: Duration,
    /// How long a closed session's record is kept before it is pruned.
    pub closed_session_retention: Duration,
    /// How long an audit event is kept before it is deleted; zero keeps every event.
    pub audit_retention: Duration,
}

impl LifecycleSettings {
    /// How often brokers (and watchers on their behalf) send a heartbeat.
    pub fn heartbeat_interval(&self) -> Duration {
        (self.heartbeat_timeout / 3).max(Duration::from_millis(100))
    }
}

/// Starts the supervisor; it and its watchers stop when `cancel` is cancelled.
pub(crate) fn start(
    service: Arc<SessionService>,
    settings: LifecycleSettings,
    cancel: CancellationToken,
    tracker: TaskTracker,
) {
    let store = service.store.clone();
    tracker.spawn(sweep(
        "closed sessions",
        settings.closed_session_retention,
        cancel.clone(),
        move |cutoff| {
            let store = store.clone();
            async move { store.prune_closed_sessions(cutoff).await }
        },
    ));
    if !settings.audit_retention.is_zero() {
        let store = service.store.clone();
        tracker.spawn(sweep(
            "audit events",
            settings.audit_retention,
            cancel.clone(),
            move |cutoff| {
                let store = store.clone();
                async move { store.prune_audit_events(cutoff).await }
            },
        ));
    }
    let supervisor = Supervisor {
        watcher: Arc::new(Watcher { service, settings }),
        cancel,
        tracker: tracker.clone(),
    };
    tracker.spawn(supervisor.run());
}

/// Removes the records (`what`) older than `retention` with `prune`, at start and then every
/// tenth of it (at most hourly), so that they do not grow without bound. Every replica may run
/// it: a delete is idempotent.
async fn sweep<F, Fut>(what: &'static str, retention: Duration, cancel: CancellationToken, prune: F)
where
    F: Fn(chrono::DateTime<chrono::Utc>) -> Fut,
    Fut: Future<Output = Result<u64, Error>>,
{
    let period = (retention / 10).clamp(Duration::from_millis(100), Duration::from_secs(3600));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => break,
            _ = tick.tick() => {}
        }
        // A retention longer than the calendar reaches back leaves nothing old enough.
        let Some(cutoff) = chrono::Duration::from_std(retention)
            .ok()
            .and_then(|retention| now().checked_sub_signed(retention))
        else {
            continue;
        };
        match prune(cutoff).await {
            Ok(0) => {}
            Ok(pruned) => tracing::info!(pruned, ?retention, "pruned {what}"),
            Err(error) => tracing::warn!(%error, "could not prune {what}"),
        }
    }
}

struct Supervisor {
    watcher: Arc<Watcher>,
    cancel: CancellationToken,
    tracker: TaskTracker,
}

impl Supervisor {
    async fn run(self) {
        let mut running: HashMap<String, (String, CancellationToken)> = HashMap::new();
        let mut tick = tokio::time::interval(self.watcher.settings.heartbeat_interval());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let brokers_changed = self.watcher.service.brokers_changed.clone();
        loop {
            tokio::select! {
                () = self.cancel.cancelled() => break,
                _ = tick.tick() => {}
                () = brokers_changed.notified() => {}
            }
            let store = &self.watcher.service.store;
            let cutoff = self.watcher.heartbeat_cutoff();
            match store.mark_stale_brokers_down(cutoff).await {
                Ok(down) => {
                    for broker_id in down {
                        tracing::warn!(broker_id, "broker missed its heartbeats: marked down");
                    }
                }
                Err(error) => tracing::warn!(%error, "could not check broker heartbeats"),
            }
            let brokers = match store.list_brokers().await {
                Ok(brokers) => brokers,
                Err(error) => {
                    tracing::warn!(%error, "could not list brokers");
                    continue;
                }
            };
            for broker in brokers.iter().filter(|broker| is_lost(broker, cutoff)) {
                self.watcher.close_lost_sessions(broker).await;
            }
            for broker in brokers {
                if let Some((endpoint, token)) = running.get(&broker.id) {
                    if *endpoint == broker.endpoint {
                        continue;
                    }
                    token.cancel();
                }
                let token = self.cancel.child_token();
                running.insert(broker.id.clone(), (broker.endpoint.clone(), token.clone()));
                self.tracker
                    .spawn(self.watcher.clone().watch_broker(broker, token));
            }
        }
        tracing::debug!("broker supervisor stopped");
    }
}

struct Watcher {
    service: Arc<SessionService>,
    settings: LifecycleSettings,
}

impl Watcher {
    /// Closes (`broker_lost`) the open sessions of a broker that has been down for longer than
    /// the heartbeat timeout: its processes died with it (a broker restart leaves none), and no
    /// client can reach them. A session still being spawned is left to the replica spawning it.
    /// The broker is read again, with the timeout counted from now, before anything is closed
    /// and before each close: the tick's list can be seconds old on a loaded host, and a broker
    /// that heartbeats in the meantime (the old process of a hand-off does until it exits) keeps
    /// its sessions.
    async fn close_lost_sessions(&self, broker: &Broker) {
        let store = &self.service.store;
        if !self.still_lost(broker).await {
            return;
        }
        let sessions = match store.open_sessions_on_broker(&broker.id).await {
            Ok(sessions) => sessions,
            Err(error) => {
                tracing::warn!(broker_id = %broker.id, %error, "could not list a lost broker's sessions");
                return;
            }
        };
        let spawn_cutoff = now()
            - chrono::Duration::from_std(self.settings.spawn_grace)
                .unwrap_or(chrono::Duration::MAX);
        let sessions: Vec<_> = sessions
            .into_iter()
            .filter(|session| {
                session.status != SessionStatus::Starting || session.created_at <= spawn_cutoff
            })
            .collect();
        // The records lag a broker that just came back (its watcher reconnects with backoff),
        // and a create may already have spawned on it: a broker that answers is not lost.
        if let Some(first) = sessions.first() {
            let probe = self.service.brokers.has_session(broker, first.id);
            if let Ok(Ok(_)) = tokio::time::timeout(self.settings.heartbeat_interval(), probe).await
            {
                tracing::info!(broker_id = %broker.id,
                    "a broker marked down answers again: its sessions are kept");
                return;
            }
        }
        for session in sessions {
            if !self.still_lost(broker).await {
                tracing::info!(broker_id = %broker.id,
                    "a broker marked down heartbeats again: its other sessions are kept");
                return;
            }
            match store
                .close_session(session.id, CloseReason::BrokerLost, Some(&Actor::system()))
                .await
            {
                Ok(Some(closed)) => {
                    tracing::info!(session_id = %session.id, broker_id = %broker.id,
                        "broker is down past its heartbeat timeout: session lost");
                    self.service.changes.publish(ChangeKind::Closed, &closed);
                }
                // Another replica closed it first.
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(session_id = %session.id, %error, "could not close a lost session");
                }
            }
        }
    }

    /// Whether `broker`, read again now, is still down with no heartbeat for the timeout.
    async fn still_lost(&self, broker: &Broker) -> bool {
        match self.service.store.get_broker(&broker.id).await {
            Ok(current) => is_lost(&current, self.heartbeat_cutoff()),
            Err(error) => {
                tracing::warn!(broker_id = %broker.id, %error, "could not read broker");
                false
            }
        }
    }

    /// The time before which a last heartbeat is too old: now less the heartbeat timeout.
    fn heartbeat_cutoff(&self) -> chrono::DateTime<chrono::Utc> {
        now()
            - chrono::Duration::from_std(self.settings.heartbeat_timeout)
                .unwrap_or(chrono::Duration::MAX)
    }

    /// Follows one broker's events until cancelled, reconnecting with backoff.
    async fn watch_broker(self: Arc<Self>, broker: Broker, cancel: CancellationToken) {
        let mut delay = FIRST_RECONNECT_DELAY;
        loop {
            let mut connected = false;
            let outcome = tokio::select! {
                () = cancel.cancelled() => break,
                outcome = self.follow_events(&broker, &mut connected) => outcome,
            };
            if connected {
                delay = FIRST_RECONNECT_DELAY;
                if let Err(error) = self.service.store.mark_broker_down(&broker.id).await {
                    tracing::warn!(broker_id = %broker.id, %error, "could not mark broker down");
                }
            }
            match outcome {
                Ok(()) => tracing::info!(broker_id = %broker.id, "broker event stream ended"),
                // A stream that was up is news; retries of one that never came up are not.
                Err(error) if connected => {
                    tracing::warn!(broker_id = %broker.id, %error, "broker event stream failed")
                }
                Err(error) => {
                    tracing::debug!(broker_id = %broker.id, %error, "broker not reachable yet")
                }
            }
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(MAX_RECONNECT_DELAY);
        }
        tracing::debug!(broker_id = %broker.id, "broker watcher stopped");
    }

    /// One connection's worth of events. Sets `connected` once the Snapshot has been applied.
    async fn follow_events(&self, broker: &Broker, connected: &mut bool) -> Result<(), Error> {
        let events = self.service.brokers.watch_events(broker).await?;
        let mut events = std::pin::pin!(events);
        let mut batch = Batch::default();
        let mut flush = tokio::time::interval(self.settings.activity_flush_interval);
        let mut heartbeat = tokio::time::interval(self.settings.heartbeat_interval());
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let result = loop {
            tokio::select! {
                event = events.next() => match event {
                    None => break Ok(()),
                    Some(Err(error)) => break Err(error),
                    Some(Ok(event)) => {
                        let snapshot = matches!(event, BrokerEvent::Snapshot { .. });
                        if let Err(error) = self.apply(broker, event, &mut batch).await {
                            break Err(error);
                        }
                        if snapshot && !*connected {
                            *connected = true;
                            self.service.store.record_heartbeat(&broker.id).await?;
                        }
                    }
                },
                _ = flush.tick() => self.flush(&mut batch).await?,
                _ = heartbeat.tick(), if *connected => {
                    self.service.store.record_heartbeat(&broker.id).await?;
                }
            }
        };
        // What was gathered before the stream ended is still true.
        let flushed = self.flush(&mut batch).await;
        result.and(flushed)
    }

    async fn flush(&self, batch: &mut Batch) -> Result<(), Error> {
        self.record_typed(batch).await?;
        if batch.pending.is_empty() {
            return Ok(());
        }
        let changed = self.service.store.record_activity(&batch.pending).await?;
        batch.pending.clear();
        for (kind, session) in &changed {
            self.service.changes.publish(*kind, session);
        }
        Ok(())
    }

    async fn apply(
        &self,
        broker: &Broker,
        event: BrokerEvent,
        batch: &mut Batch,
    ) -> Result<(), Error> {
        let store = &self.service.store;
        let changes = &self.service.changes;
        // The trail keeps the stream's order: the input windows gathered so far are recorded
        // before any event but another window or an activity report is applied (a close, or an
        // answer to a request for control, writes to the trail itself).
        if !matches!(
            event,
            BrokerEvent::Typed { .. } | BrokerEvent::Activity { .. }
        ) {
            self.record_typed(batch).await?;
        }
        match event {
            BrokerEvent::Snapshot { boot_id, sessions } => {
                self.flush(batch).await?;
                let previous = store.record_broker_boot(&broker.id, &boot_id).await?;
                if previous
                    .as_deref()
                    .is_some_and(|previous| previous != boot_id)
                {
                    tracing::info!(broker_id = %broker.id, boot_id, "broker restarted");
                }
                self.reconcile(broker, sessions, batch).await?;
            }
            BrokerEvent::Started(started) => {
                batch.note_reported(&started);
                match store.mark_session_running(started.session_id).await? {
                    Some(session) => changes.publish(ChangeKind::Status, &session),
                    None => self.kill_if_unknown(broker, started.session_id).await?,
                }
            }
            BrokerEvent::ResetDone(reset) => {
                batch.note_reported(&reset);
                if let Some(session) = store.mark_session_running(reset.session_id).await? {
                    changes.publish(ChangeKind::Status, &session);
                }
            }
            BrokerEvent::Exited { session_id, exit } => {
                if let Some(session) = store.record_exit(session_id, exit).await? {
                    changes.publish(ChangeKind::Status, &session);
                }
            }
            BrokerEvent::Closed { session_id, reason } => {
                batch.forget(session_id);
                if let Some(session) = store
                    .close_session(session_id, reason, closed_by_system(reason).as_ref())
                    .await?
                {
                    changes.publish(ChangeKind::Closed, &session);
                }
            }
            BrokerEvent::Activity {
                session_id,
                at,
                screen,
            } => {
                let update = batch.pending.entry(session_id).or_default();
                update.last_activity_at =
                    Some(update.last_activity_at.map_or(at, |seen| seen.max(at)));
                batch.note_screen(session_id, screen);
            }
            BrokerEvent::Terminal {
                session_id,
                terminal,
                commands,
            } => {
                self.record_terminal(session_id, &terminal, commands)
                    .await?
            }
            BrokerEvent::Typed {
                session_id,
                principal,
                surface,
                bytes,
                since,
            } => batch.typed.push(TypedWindow {
                session_id,
                principal,
                surface,
                bytes,
                since,
            }),
            BrokerEvent::ControlChanged {
                session_id,
                kind,
                from,
                to,
                request_id,
                at,
            } => {
                self.record_control(session_id, kind, from, &to, request_id, at)
                    .await?
            }
            BrokerEvent::Attachments {
                session_id,
                attached_clients,
                presence,
            } => {
                // Written at once, not batched: people wait on each other's presence (who
                // came, who types), and it changes only when a client comes or goes, control
                // moves, or typing starts or stops.
                let update = ActivityUpdate {
                    attached_clients: Some(attached_clients),
                    presence: Some(presence),
                    ..ActivityUpdate::default()
                };
                let changed = store
                    .record_activity(&HashMap::from([(session_id, update)]))
                    .await?;
                for (kind, session) in &changed {
                    changes.publish(*kind, session);
                }
            }
        }
        Ok(())
    }

    /// Records in the audit trail the input windows `batch` gathered (attribution: the count,
    /// never the bytes), each once across replicas: with one read of their sessions' instances
    /// and one write transaction for up to `REPORTED_SESSIONS_PER_TRANSACTION` sessions, rather
    /// than a read and a transaction each. A window of a session without a record is dropped.
    async fn record_typed(&self, batch: &mut Batch) -> Result<(), Error> {
        if batch.typed.is_empty() {
            return Ok(());
        }
        let store = &self.service.store;
        let mut session_ids: Vec<Uuid> = batch.typed.iter().map(|typed| typed.session_id).collect();
        session_ids.sort_unstable();
        session_ids.dedup();
        let instances = store.session_instances(&session_ids).await?;
        let reports: Vec<ReportedEvent> = batch
            .typed
            .iter()
            .filter_map(|typed| Some(typed.report(*instances.get(&typed.session_id)?)))
            .collect();
        store.record_reported(&reports).await?;
        // Kept until recorded: the flush at the end of a stream that failed tries once more.
        batch.typed.clear();
        Ok(())
    }

    /// Records in the audit trail how a request for control was answered, with both
    /// principals, once across replicas: by the controller that answered (the system's, for a
    /// grant by the instance's timeout).
    async fn record_control(
        &self,
        session_id: Uuid,
        kind: ControlChangeKind,
        from: Option<TicketHolder>,
        to: &TicketHolder,
        request_id: u64,
        at: DateTime<Utc>,
    ) -> Result<(), Error> {
        let store = &self.service.store;
        let Some(session) = store.find_session(session_id).await? else {
            return Ok(());
        };
        let actor = match (&from, kind) {
            (Some(from), ControlChangeKind::Granted | ControlChangeKind::Declined) => {
                Actor::new(&from.principal, None, surface_of_presence(&from.surface))
            }
            _ => Actor::new("", None, Surface::System),
        };
        let from = from.map(|from| from.principal).unwrap_or_default();
        let event = NewAuditEvent::new(AuditKind::Control, &actor)
            .session(session.instance_id, session_id)
            .detail("outcome", kind.as_str())
            .detail("from", from)
            .detail("to", to.principal.clone())
            .detail("to_surface", to.surface.clone())
            .detail("request", request_id.to_string())
            .detail("at", at.to_rfc3339_opts(SecondsFormat::Micros, true));
        store.record_once(event, "at", at).await?;
        Ok(())
    }

    /// Records what a session's terminal is doing and publishes the change, with the commands
    /// that started or ended since the last report.
    async fn record_terminal(
        &self,
        session_id: Uuid,
        terminal: &TerminalActivity,
        commands: Vec<Command>,
    ) -> Result<(), Error> {
        let store = &self.service.store;
        let changes = &self.service.changes;
        let recorded = store
            .record_terminal(session_id, terminal, &commands)
            .await?;
        if recorded.webhook_deliveries > 0 {
            self.service.webhooks.deliveries_queued();
        }
        match recorded.changed {
            Some(session) => changes.publish_terminal(&session, commands),
            // The record said so already (a replay after a reconnect), but commands that
            // started or ended are news all the same.
            None if !commands.is_empty() => {
                if let Some(session) = store.find_session(session_id).await? {
                    changes.publish_terminal(&session, commands);
                }
            }
            None => {}
        }
        Ok(())
    }

    /// Makes the records agree with what the broker has:
    /// - a session the broker no longer has is closed (`broker_lost`);
    /// - one the broker reports exited or closed is recorded so;
    /// - a process the broker has that no open record knows is killed.
    async fn reconcile(
        &self,
        broker: &Broker,
        reported: Vec<BrokerSession>,
        batch: &mut Batch,
    ) -> Result<(), Error> {
        let store = &self.service.store;
        let changes = &self.service.changes;
        let reported: HashMap<Uuid, BrokerSession> = reported
            .into_iter()
            .map(|session| (session.session_id, session))
            .collect();
        let spawn_cutoff = now()
            - chrono::Duration::from_std(self.settings.spawn_grace)
                .unwrap_or(chrono::Duration::MAX);

        for session in store.open_sessions_on_broker(&broker.id).await? {
            let Some(on_broker) = reported.get(&session.id) else {
                if session.status == SessionStatus::Starting && session.created_at > spawn_cutoff {
                    continue;
                }
                // The Snapshot was taken before this read: a session spawned in between is
                // missing from it but known to the broker now.
                if session.status != SessionStatus::Starting
                    && self.service.brokers.has_session(broker, session.id).await?
                {
                    continue;
                }
                if let Some(closed) = store
                    .close_session(session.id, CloseReason::BrokerLost, Some(&Actor::system()))
                    .await?
                {
                    tracing::info!(session_id = %session.id, broker_id = %broker.id,
                        "session lost with its broker");
                    changes.publish(ChangeKind::Closed, &closed);
                }
                continue;
            };
            batch.note_reported(on_broker);
            // What the terminal does now: a report missed while this replica was away (or
            // down) would otherwise stay stale until the terminal next changes.
            if let Some(terminal) = &on_broker.terminal
                && session.terminal.as_ref() != Some(terminal)
            {
                self.record_terminal(session.id, terminal, Vec::new())
                    .await?;
            }
            if let Some(at) = on_broker.last_activity_at {
                batch
                    .pending
                    .entry(session.id)
                    .or_default()
                    .last_activity_at = Some(at);
            }
            match on_broker.state {
                BrokerSessionState::Closed => {
                    if let Some(exit) = on_broker.exit {
                        store.record_exit(session.id, exit).await?;
                    }
                    let reason = on_broker.close_reason.unwrap_or(CloseReason::BrokerLost);
                    if let Some(closed) = store
                        .close_session(session.id, reason, closed_by_system(reason).as_ref())
                        .await?
                    {
                        changes.publish(ChangeKind::Closed, &closed);
                    }
                }
                BrokerSessionState::Exited => {
                    if let Some(exit) = on_broker.exit
                        && let Some(exited) = store.record_exit(session.id, exit).await?
                    {
                        changes.publish(ChangeKind::Status, &exited);
                    }
                }
                BrokerSessionState::Running => {
                    if matches!(
                        session.status,
                        SessionStatus::Starting | SessionStatus::Resetting
                    ) && let Some(active) = store.mark_session_running(session.id).await?
                    {
                        changes.publish(ChangeKind::Status, &active);
                    }
                }
                BrokerSessionState::Starting | BrokerSessionState::Resetting => {}
            }
        }

        let with_process: Vec<Uuid> = reported
            .values()
            .filter(|session| session.state.has_process())
            .map(|session| session.session_id)
            .collect();
        let known = store.session_statuses(&with_process).await?;
        for session_id in with_process {
            if matches!(known.get(&session_id), None | Some(SessionStatus::Closed)) {
                tracing::info!(%session_id, broker_id = %broker.id,
                    "ending a process that no open record knows");
                self.service.brokers.kill(broker, session_id).await?;
            }
        }
        Ok(())
    }

    /// Kills a process the broker started whose record is missing or closed.
    async fn kill_if_unknown(&self, broker: &Broker, session_id: Uuid) -> Result<(), Error> {
        let known = self.service.store.session_statuses(&[session_id]).await?;
        if matches!(known.get(&session_id), None | Some(SessionStatus::Closed)) {
            tracing::info!(%session_id, broker_id = %broker.id,
                "ending a process that no open record knows");
            self.service.brokers.kill(broker, session_id).await?;
        }
        Ok(())
    }
}

/// A broker is lost when it is down and its last heartbeat is older than `cutoff`. A broker that
/// never had a heartbeat is not: none of its sessions can have outlived it, and one just
/// configured may already run sessions its watcher has not seen yet.
fn is_lost(broker: &Broker, cutoff: chrono::DateTime<chrono::Utc>) -> bool {
    !broker.up && broker.last_heartbeat_at.is_some_and(|at| at < cutoff)
}

/// What one connection's events gathered for the next flush, and the screen facts each session
/// was last reported with on it. Every second's activity of a session carries its title: one
/// that did not change costs no statement.
#[derive(Debug, Default)]
struct Batch {
    pending: HashMap<Uuid, ActivityUpdate>,
    reported_screens: HashMap<Uuid, ScreenFacts>,
    /// The input windows reported since the last flush, in the stream's order.
    typed: Vec<TypedWindow>,
}

/// How many bytes one principal typed into a session on one surface in the window that began at
/// `since`, as the broker reported it (`BrokerEvent::Typed`).
#[derive(Debug)]
struct TypedWindow {
    session_id: Uuid,
    principal: String,
    surface: String,
    bytes: u64,
    since: DateTime<Utc>,
}

impl TypedWindow {
    /// The audit event of this window, in the session's instance: the same one whichever replica
    /// makes it, told apart from the principal's other windows by `detail.window`.
    fn report(&self, instance_id: Uuid) -> ReportedEvent {
        let actor = Actor::new(&self.principal, None, surface_of_presence(&self.surface));
        let event = NewAuditEvent::new(AuditKind::Input, &actor)
            .session(instance_id, self.session_id)
            .detail("bytes", self.bytes.to_string())
            .detail(
                "window",
                self.since.to_rfc3339_opts(SecondsFormat::Micros, true),
            )
            .detail("typed", "true");
        ReportedEvent {
            event,
            key: "window",
            reported_at: self.since,
        }
    }
}

impl Batch {
    /// The attachment count and screen facts of a session the broker described in full.
    fn note_reported(&mut self, session: &BrokerSession) {
        self.pending
            .entry(session.session_id)
            .or_default()
            .attached_clients = Some(session.attached_clients);
        self.note_screen(session.session_id, session.screen.clone());
    }

    /// Queues the screen facts for writing unless this connection reported them last time too.
    /// The first report on a connection is always queued: the record may lag behind it.
    fn note_screen(&mut self, session_id: Uuid, screen: ScreenFacts) {
        if self.reported_screens.get(&session_id) == Some(&screen) {
            return;
        }
        self.reported_screens.insert(session_id, screen.clone());
        self.pending.entry(session_id).or_default().screen = Some(screen);
    }

    /// A closed session reports nothing more.
    fn forget(&mut self, session_id: Uuid) {
        self.reported_screens.remove(&session_id);
    }
}

/// Who a close a broker reported is recorded as done by: session-api itself, except for a kill
/// (`closed_by_user`), which only a user's close asks for and which that close records with
/// its own principal (`SessionService::close_session`).
fn closed_by_system(reason: CloseReason) -> Option<Actor> {
    (reason != CloseReason::ClosedByUser).then(Actor::system)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{AuditEvent, AuditFilter};
    use crate::broker_client::BrokerClients;
    use crate::changes::ChangeFeed;
    use crate::domain::{NewInstance, Target};
    use crate::store::{Reservation, SessionReservation, Store};
    use ptyhub_attach_ticket::TicketSigningKey;
    use ptyhub_model::{ControlMode, TerminalSize};
    use ptyhub_wire::{ServiceCredential, TlsConfig};

    fn broker(up: bool, last_heartbeat_at: Option<chrono::DateTime<chrono::Utc>>) -> Broker {
        Broker {
            id: "b".into(),
            endpoint: "http://127.0.0.1:1".into(),
            up,
            docker: false,
            configured: true,
            last_heartbeat_at,
        }
    }

    #[test]
    fn only_a_down_broker_silent_past_the_cutoff_is_lost() {
        let cutoff = now();
        let before = cutoff - chrono::Duration::seconds(1);
        let after = cutoff + chrono::Duration::seconds(1);
        assert!(is_lost(&broker(false, Some(before)), cutoff));
        assert!(!is_lost(&broker(false, Some(after)), cutoff));
        assert!(!is_lost(&broker(true, Some(before)), cutoff));
        // Configured and never reached yet: a create may already have spawned on it.
        assert!(!is_lost(&broker(false, None), cutoff));
    }

    /// A watcher over a store on a fresh SQLite file, with `sessions` live sessions of one
    /// instance; no broker is called by what these tests apply.
    async fn watcher_with_sessions(
        sessions: usize,
    ) -> (tempfile::TempDir, Watcher, Uuid, Vec<Uuid>) {
        let directory = tempfile::tempdir().expect("temporary directory");
        let url = format!(
            "sqlite://{}?mode=rwc",
            directory.path().join("session-api.db").display()
        );
        let store = Store::connect(&url).await.expect("connect");
        store.migrate().await.expect("migrate");
        let instance = store
            .insert_instance(
                &NewInstance {
                    name: "typing".into(),
                    target: Target::Local,
                    command: vec!["sh".into()],
                    env: Default::default(),
                    cwd: String::new(),
                    user: String::new(),
                    max_sessions: u32::try_from(sessions).unwrap(),
                    labels: Default::default(),
                    broker_id: None,
                    record: None,
                    shell_integration: false,
                    control_grant_timeout: None,
                },
                "b",
            )
            .await
            .expect("instance");
        let mut session_ids = Vec::new();
        for _ in 0..sessions {
            let reservation = SessionReservation {
                instance_id: instance.id,
                name: None,
                aliases: Vec::new(),
                size: TerminalSize::DEFAULT,
                control_mode: ControlMode::default(),
                reuse_alias_holder: false,
            };
            let Reservation::Created { session, .. } =
                store.reserve_session(&reservation).await.expect("reserve")
            else {
                panic!("expected a new session")
            };
            session_ids.push(session.id);
        }
        let credential = ServiceCredential::new("test-service-token-0123456789").unwrap();
        let service = SessionService::new(
            store,
            BrokerClients::new(
                &credential,
                [],
                Duration::from_secs(1),
                TlsConfig::plain(),
                true,
            ),
            Arc::new(ChangeFeed::new()),
            TicketSigningKey::generate(),
            Duration::from_secs(60),
            Duration::from_secs(1),
            Duration::from_secs(1),
        );
        let watcher = Watcher {
            service: Arc::new(service),
            settings: LifecycleSettings {
                heartbeat_timeout: Duration::from_secs(15),
                activity_flush_interval: Duration::from_secs(1),
                spawn_grace: Duration::from_secs(60),
                closed_session_retention: Duration::from_secs(3600),
                audit_retention: Duration::ZERO,
            },
        };
        (directory, watcher, instance.id, session_ids)
    }

    fn typed(session_id: Uuid, principal: &str, bytes: u64, since: DateTime<Utc>) -> BrokerEvent {
        BrokerEvent::Typed {
            session_id,
            principal: principal.into(),
            surface: "web".into(),
            bytes,
            since,
        }
    }

    async fn trail(watcher: &Watcher) -> Vec<AuditEvent> {
        let filter = AuditFilter {
            page_size: 1000,
            ..AuditFilter::default()
        };
        watcher
            .service
            .store
            .list_audit_events(&filter.validated().expect("a valid filter"))
            .await
            .expect("list")
            .events
    }

    #[tokio::test]
    async fn a_flush_records_every_input_window_of_its_batch_in_one_write_transaction() {
        let (_directory, watcher, instance_id, sessions) = watcher_with_sessions(40).await;
        let broker = broker(true, None);
        let store = &watcher.service.store;
        let since = now() - chrono::Duration::seconds(1);
        // Every session's typist, and a second typist in the first ten: 50 reports.
        let mut reports = Vec::new();
        for (index, session_id) in sessions.iter().enumerate() {
            reports.push((*session_id, "alice", index as u64 + 1));
            if index < 10 {
                reports.push((*session_id, "bob", 100 + index as u64));
            }
        }
        let mut batch = Batch::default();
        let before = store.write_transactions_begun();
        for (session_id, principal, bytes) in &reports {
            watcher
                .apply(
                    &broker,
                    typed(*session_id, principal, *bytes, since),
                    &mut batch,
                )
                .await
                .expect("apply");
        }
        assert_eq!(
            store.write_transactions_begun(),
            before,
            "nothing is written before the flush"
        );
        watcher.flush(&mut batch).await.expect("flush");
        assert_eq!(
            store.write_transactions_begun() - before,
            1,
            "one write transaction for the batch's 50 reports"
        );
        let recorded: Vec<(Uuid, String, String)> = trail(&watcher)
            .await
            .into_iter()
            .map(|event| {
                assert_eq!(event.kind, AuditKind::Input);
                assert_eq!(event.instance_id, Some(instance_id));
                assert_eq!(event.surface, "websocket");
                assert_eq!(event.detail["typed"], "true");
                let window = DateTime::parse_from_rfc3339(&event.detail["window"]).unwrap();
                assert_eq!(window, since);
                (
                    event.session_id.unwrap(),
                    event.principal,
                    event.detail["bytes"].clone(),
                )
            })
            .collect();
        let reported: Vec<(Uuid, String, String)> = reports
            .iter()
            .map(|(session_id, principal, bytes)| {
                (*session_id, (*principal).to_owned(), bytes.to_string())
            })
            .collect();
        assert_eq!(
            recorded, reported,
            "each report once, in the stream's order"
        );
        // A second flush has nothing left to write.
        watcher.flush(&mut batch).await.expect("flush again");
        assert_eq!(store.write_transactions_begun() - before, 1);
    }

    #[tokio::test]
    async fn input_windows_are_recorded_before_a_later_close_of_their_session() {
        let (_directory, watcher, _instance_id, sessions) = watcher_with_sessions(1).await;
        let broker = broker(true, None);
        let session_id = sessions[0];
        let mut batch = Batch::default();
        let since = now() - chrono::Duration::seconds(1);
        watcher
            .apply(&broker, typed(session_id, "alice", 7, since), &mut batch)
            .await
            .expect("typed");
        watcher
            .apply(
                &broker,
                BrokerEvent::Closed {
                    session_id,
                    reason: CloseReason::Exited,
                },
                &mut batch,
            )
            .await
            .expect("closed");
        watcher.flush(&mut batch).await.expect("flush");
        let kinds: Vec<AuditKind> = trail(&watcher)
            .await
            .into_iter()
            .map(|event| event.kind)
            .collect();
        assert_eq!(kinds, [AuditKind::Input, AuditKind::SessionClosed]);
    }

    #[tokio::test]
    async fn an_input_window_of_a_session_without_a_record_is_dropped() {
        let (_directory, watcher, _instance_id, sessions) = watcher_with_sessions(1).await;
        let broker = broker(true, None);
        let mut batch = Batch::default();
        let since = now() - chrono::Duration::seconds(1);
        for session_id in [Uuid::new_v4(), sessions[0]] {
            watcher
                .apply(&broker, typed(session_id, "alice", 3, since), &mut batch)
                .await
                .expect("typed");
        }
        watcher.flush(&mut batch).await.expect("flush");
        let recorded: Vec<Option<Uuid>> = trail(&watcher)
            .await
            .into_iter()
            .map(|event| event.session_id)
            .collect();
        assert_eq!(recorded, [Some(sessions[0])]);
    }
}
