//! What happens to sessions outside any API call: one watcher per broker follows its event
//! stream (reconnecting with backoff), records exits, closes, attachments and who they are
//! (presence) and what terminals do (both at once: after the events that arrived together,
//! in one transaction each), activity, window titles and bells (the last three batched), who
//! typed how much (batched: the audit's input windows), and reconciles the records with the
//! broker's Snapshot each time the stream (re)connects; a supervisor starts watchers for new
//! brokers, marks silent brokers down, and closes (`broker_lost`) the sessions of a broker that
//! stays down past the heartbeat timeout. Two sweeps keep the records from growing without
//! bound: closed sessions past their retention, and audit events past theirs.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use futures::{FutureExt as _, StreamExt};
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
use crate::store::{ActivityUpdate, ReportedEvent, TerminalReport, now};

/// At most this many events that arrived together are applied before what they leave to be
/// written at once is written: a stream that never pauses still has its presence and terminal
/// reports written within this many events.
const READY_EVENTS: usize = 1024;

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
                event = events.next() => {
                    let ended = self
                        .apply_arrived(broker, event, &mut events, &mut batch, connected)
                        .await;
                    if let Some(ended) = ended {
                        break ended;
                    }
                }
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

    /// Applies `arrived` (what the stream gave: `None` once it ended) and every event after it
    /// that is here already in `events` (a burst: a thousand terminals that start working
    /// together; at most [`READY_EVENTS`]), then writes what they leave to be written at once:
    /// one transaction for the burst's presence and one for its terminal reports, rather than
    /// one per event. A lone event is written as soon as it is applied. Sets `connected` once a
    /// Snapshot has been applied. `Some` with how the stream ended, once it has (what the
    /// burst left is then written by the flush that follows); a failed write ends it too.
    async fn apply_arrived<S>(
        &self,
        broker: &Broker,
        arrived: Option<Result<BrokerEvent, Error>>,
        events: &mut S,
        batch: &mut Batch,
        connected: &mut bool,
    ) -> Option<Result<(), Error>>
    where
        S: futures::Stream<Item = Result<BrokerEvent, Error>> + Unpin,
    {
        let mut next = arrived;
        let mut applied = 0;
        loop {
            let event = match next {
                None => return Some(Ok(())),
                Some(Err(error)) => return Some(Err(error)),
                Some(Ok(event)) => event,
            };
            let snapshot = matches!(event, BrokerEvent::Snapshot { .. });
            if let Err(error) = self.apply(broker, event, batch).await {
                return Some(Err(error));
            }
            if snapshot && !*connected {
                *connected = true;
                if let Err(error) = self.service.store.record_heartbeat(&broker.id).await {
                    return Some(Err(error));
                }
            }
            applied += 1;
            if applied == READY_EVENTS {
                break;
            }
            match events.next().now_or_never() {
                Some(ready) => next = ready,
                None => break,
            }
        }
        self.write_at_once(batch).await.err().map(Err)
    }

    async fn flush(&self, batch: &mut Batch) -> Result<(), Error> {
        self.write_at_once(batch).await?;
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
        // The records keep the stream's order: what is written at once (presence, terminal
        // reports) and the input windows gathered so far are written before any other event
        // is applied (a close, or an answer to a request for control, writes to the trail
        // itself). Presence and terminal reports write nothing to the trail.
        if !matches!(
            event,
            BrokerEvent::Typed { .. }
                | BrokerEvent::Activity { .. }
                | BrokerEvent::Attachments { .. }
                | BrokerEvent::Terminal { .. }
        ) {
            self.write_at_once(batch).await?;
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
            } => batch.terminals.push(TerminalReported {
                session_id,
                terminal,
                commands,
            }),
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
                // moves, or typing starts or stops. A later report of the session's presence
                // among the events that arrived together replaces an earlier one; it also
                // replaces the older count a start or snapshot left for the next flush.
                if let Some(pending) = batch.pending.get_mut(&session_id) {
                    pending.attached_clients = None;
                }
                batch.presence.insert(
                    session_id,
                    ActivityUpdate {
                        attached_clients: Some(attached_clients),
                        presence: Some(presence),
                        ..ActivityUpdate::default()
                    },
                );
            }
        }
        Ok(())
    }

    /// Records in the audit trail the input windows `batch` gathered (attribution: the count,
    /// never the bytes), each once across replicas: with one read of the instances of the
    /// sessions this connection had not recorded windows of before, and the store's write
    /// transactions for the batch (one on SQLite, one per `REPORTED_SESSIONS_PER_TRANSACTION`
    /// sessions on PostgreSQL), rather than a read and a transaction each. A window of a session
    /// without a record is dropped.
    async fn record_typed(&self, batch: &mut Batch) -> Result<(), Error> {
        if batch.typed.is_empty() {
            return Ok(());
        }
        let store = &self.service.store;
        let mut unknown: Vec<Uuid> = batch
            .typed
            .iter()
            .map(|typed| typed.session_id)
            .filter(|session_id| !batch.instances.contains_key(session_id))
            .collect();
        if !unknown.is_empty() {
            unknown.sort_unstable();
            unknown.dedup();
            batch
                .instances
                .extend(store.session_instances(&unknown).await?);
        }
        let reports: Vec<ReportedEvent> = batch
            .typed
            .iter()
            .filter_map(|typed| Some(typed.report(*batch.instances.get(&typed.session_id)?)))
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

    /// Writes what the events applied since the last such write left to be written at once:
    /// the presence of each session that reported it (one transaction for all of them), then
    /// every terminal report in the stream's order (one more), and publishes the changes. What
    /// could not be written is kept, and tried again by the next write.
    async fn write_at_once(&self, batch: &mut Batch) -> Result<(), Error> {
        let store = &self.service.store;
        let changes = &self.service.changes;
        if !batch.presence.is_empty() {
            let changed = store.record_activity(&batch.presence).await?;
            batch.presence.clear();
            for (kind, session) in &changed {
                changes.publish(*kind, session);
            }
        }
        if batch.terminals.is_empty() {
            return Ok(());
        }
        let reports: Vec<TerminalReport<'_>> = batch
            .terminals
            .iter()
            .map(|reported| TerminalReport {
                session_id: reported.session_id,
                terminal: &reported.terminal,
                commands: &reported.commands,
            })
            .collect();
        let recorded = store.record_terminals(&reports).await?;
        if recorded
            .iter()
            .any(|recorded| recorded.webhook_deliveries > 0)
        {
            self.service.webhooks.deliveries_queued();
        }
        for (reported, recorded) in std::mem::take(&mut batch.terminals)
            .into_iter()
            .zip(recorded)
        {
            match recorded.changed {
                Some(session) => changes.publish_terminal(&session, reported.commands),
                // The record said so already (a replay after a reconnect), but commands that
                // started or ended are news all the same.
                None if !reported.commands.is_empty() => {
                    if let Some(session) = store.find_session(reported.session_id).await? {
                        changes.publish_terminal(&session, reported.commands);
                    }
                }
                None => {}
            }
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
                batch.terminals.push(TerminalReported {
                    session_id: session.id,
                    terminal: terminal.clone(),
                    commands: Vec::new(),
                });
            }
            if let Some(at) = on_broker.last_activity_at {
                batch
                    .pending
                    .entry(session.id)
                    .or_default()
                    .last_activity_at = Some(at);
            }
            if matches!(
                on_broker.state,
                BrokerSessionState::Closed | BrokerSessionState::Exited
            ) {
                // What its terminal did is written before its end, as the broker reported it.
                self.write_at_once(batch).await?;
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
    /// Presence reported by the events being applied, written at once after them: the last
    /// report of each session.
    presence: HashMap<Uuid, ActivityUpdate>,
    /// Terminal reports of the events being applied, written at once after them, in the
    /// stream's order.
    terminals: Vec<TerminalReported>,
    /// The instance of each session whose input windows were recorded, read once per session
    /// (a session never changes instance): a broker whose sessions are all typed in reports
    /// each of them every second.
    instances: HashMap<Uuid, Uuid>,
}

/// What a session's terminal is doing, with the commands that started or ended since its last
/// report, as the broker reported it (`BrokerEvent::Terminal`).
#[derive(Debug)]
struct TerminalReported {
    session_id: Uuid,
    terminal: TerminalActivity,
    commands: Vec<Command>,
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
        self.instances.remove(&session_id);
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
    use crate::domain::{NewInstance, Session, SessionChange, Target};
    use crate::store::{Reservation, SessionReservation, Store};
    use ptyhub_attach_ticket::TicketSigningKey;
    use ptyhub_model::{Attendee, ControlMode, ExitStatus, TerminalSize, TerminalState};
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
    async fn a_sessions_instance_is_looked_up_once_a_connection_and_forgotten_at_its_close() {
        let (_directory, watcher, instance_id, sessions) = watcher_with_sessions(3).await;
        let broker = broker(true, None);
        let mut batch = Batch::default();
        let first = now() - chrono::Duration::seconds(2);
        let second = first + chrono::Duration::seconds(1);
        for session_id in &sessions {
            watcher
                .apply(&broker, typed(*session_id, "alice", 1, first), &mut batch)
                .await
                .expect("typed");
        }
        watcher.flush(&mut batch).await.expect("flush");
        let known: HashMap<Uuid, Uuid> = sessions.iter().map(|id| (*id, instance_id)).collect();
        assert_eq!(batch.instances, known, "looked up with the first windows");
        // The next second's windows are recorded in the same instance, from what is known.
        for session_id in &sessions {
            watcher
                .apply(&broker, typed(*session_id, "alice", 2, second), &mut batch)
                .await
                .expect("typed again");
        }
        watcher.flush(&mut batch).await.expect("flush again");
        let recorded: Vec<(Option<Uuid>, Option<Uuid>, String)> = trail(&watcher)
            .await
            .into_iter()
            .map(|event| {
                (
                    event.session_id,
                    event.instance_id,
                    event.detail["bytes"].clone(),
                )
            })
            .collect();
        let expected: Vec<(Option<Uuid>, Option<Uuid>, String)> = ["1", "2"]
            .iter()
            .flat_map(|bytes| {
                sessions
                    .iter()
                    .map(move |id| (Some(*id), Some(instance_id), (*bytes).to_owned()))
            })
            .collect();
        assert_eq!(recorded, expected);
        watcher
            .apply(
                &broker,
                BrokerEvent::Closed {
                    session_id: sessions[0],
                    reason: CloseReason::Exited,
                },
                &mut batch,
            )
            .await
            .expect("closed");
        assert!(
            !batch.instances.contains_key(&sessions[0]),
            "forgotten at its close"
        );
        assert_eq!(batch.instances.len(), 2);
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

    fn attendee(principal: &str, typing: bool) -> Attendee {
        Attendee {
            principal: principal.into(),
            role: ptyhub_model::Role::Controller,
            surface: "web".into(),
            since: now(),
            typing,
        }
    }

    fn presence(session_id: Uuid, typing: bool) -> BrokerEvent {
        BrokerEvent::Attachments {
            session_id,
            attached_clients: 1,
            presence: vec![attendee("alice", typing)],
        }
    }

    fn terminal(session_id: Uuid, state: TerminalState) -> BrokerEvent {
        BrokerEvent::Terminal {
            session_id,
            terminal: TerminalActivity {
                state,
                notification: None,
                progress: None,
                cwd: None,
                integrated: false,
                running_command: None,
            },
            commands: Vec::new(),
        }
    }

    /// `events`, then a stream that stays open with nothing more, as a broker's does.
    fn live(events: Vec<BrokerEvent>) -> impl futures::Stream<Item = Result<BrokerEvent, Error>> {
        futures::stream::iter(events.into_iter().map(Ok)).chain(futures::stream::pending())
    }

    /// Applies what arrived first on `stream` and what arrived with it.
    async fn apply_first<S>(
        watcher: &Watcher,
        stream: &mut S,
        batch: &mut Batch,
    ) -> Option<Result<(), Error>>
    where
        S: futures::Stream<Item = Result<BrokerEvent, Error>> + Unpin,
    {
        let arrived = stream.next().await;
        let mut connected = true;
        watcher
            .apply_arrived(&broker(true, None), arrived, stream, batch, &mut connected)
            .await
    }

    fn changes_of(
        feed: &mut tokio::sync::broadcast::Receiver<SessionChange>,
    ) -> Vec<(ChangeKind, Uuid)> {
        std::iter::from_fn(|| feed.try_recv().ok())
            .map(|change| (change.kind, change.session.id))
            .collect()
    }

    #[tokio::test]
    async fn a_burst_of_presence_and_terminal_reports_is_written_in_two_transactions() {
        let (_directory, watcher, _instance_id, sessions) = watcher_with_sessions(50).await;
        let store = &watcher.service.store;
        let mut feed = watcher.service.changes.subscribe();
        // Every session starts typing and its terminal starts working, as a thousand typists
        // who start at once do; the first session's terminal reports twice.
        let mut events = Vec::new();
        for session_id in &sessions {
            events.push(presence(*session_id, true));
            events.push(terminal(*session_id, TerminalState::Running));
        }
        events.push(terminal(sessions[0], TerminalState::WaitingForInput));
        let mut stream = Box::pin(live(events));
        let mut batch = Batch::default();
        let before = store.write_transactions_begun();
        assert!(
            apply_first(&watcher, &mut stream, &mut batch)
                .await
                .is_none(),
            "the stream goes on"
        );
        assert_eq!(
            store.write_transactions_begun() - before,
            2,
            "one transaction for the presence of 50 sessions, one for 51 terminal reports"
        );
        for (index, session_id) in sessions.iter().enumerate() {
            let session = store.find_session(*session_id).await.unwrap().unwrap();
            assert_eq!(session.attached_clients, 1);
            assert_eq!(session.presence.len(), 1);
            assert!(session.presence[0].typing);
            let expected = match index {
                0 => TerminalState::WaitingForInput,
                _ => TerminalState::Running,
            };
            assert_eq!(
                session.terminal.map(|terminal| terminal.state),
                Some(expected)
            );
        }
        let published = changes_of(&mut feed);
        let count = |kind| published.iter().filter(|(seen, _)| *seen == kind).count();
        assert_eq!(count(ChangeKind::Attachments), 50);
        assert_eq!(
            count(ChangeKind::Terminal),
            51,
            "each report of a change is published"
        );
        let first_sessions: Vec<&Uuid> = published
            .iter()
            .filter(|(kind, session_id)| {
                *kind == ChangeKind::Terminal && *session_id == sessions[0]
            })
            .map(|(_, session_id)| session_id)
            .collect();
        assert_eq!(first_sessions.len(), 2);
        // Nothing is left for the next write.
        watcher.flush(&mut batch).await.expect("flush");
        assert_eq!(store.write_transactions_begun() - before, 2);
    }

    #[tokio::test]
    async fn a_lone_report_is_written_as_soon_as_it_is_applied() {
        let (_directory, watcher, _instance_id, sessions) = watcher_with_sessions(1).await;
        let store = &watcher.service.store;
        let mut stream = Box::pin(live(vec![presence(sessions[0], false)]));
        let mut batch = Batch::default();
        let before = store.write_transactions_begun();
        assert!(
            apply_first(&watcher, &mut stream, &mut batch)
                .await
                .is_none()
        );
        assert_eq!(store.write_transactions_begun() - before, 1);
        let session = store.find_session(sessions[0]).await.unwrap().unwrap();
        assert_eq!(session.attached_clients, 1);
        assert!(!session.presence[0].typing);
    }

    #[tokio::test]
    async fn presence_and_terminal_reports_are_written_before_a_later_close() {
        let (_directory, watcher, _instance_id, sessions) = watcher_with_sessions(2).await;
        let mut feed = watcher.service.changes.subscribe();
        let [first, second] = sessions[..] else {
            panic!("two sessions")
        };
        let mut stream = Box::pin(live(vec![
            presence(first, true),
            terminal(first, TerminalState::Running),
            BrokerEvent::Closed {
                session_id: first,
                reason: CloseReason::Exited,
            },
            presence(second, true),
        ]));
        let mut batch = Batch::default();
        assert!(
            apply_first(&watcher, &mut stream, &mut batch)
                .await
                .is_none()
        );
        assert_eq!(
            changes_of(&mut feed),
            [
                (ChangeKind::Attachments, first),
                (ChangeKind::Terminal, first),
                (ChangeKind::Closed, first),
                (ChangeKind::Attachments, second),
            ],
            "in the stream's order"
        );
    }

    #[tokio::test]
    async fn what_arrived_before_the_stream_ended_is_written_by_the_flush_after_it() {
        let (_directory, watcher, _instance_id, sessions) = watcher_with_sessions(1).await;
        let store = &watcher.service.store;
        let mut stream = futures::stream::iter([Ok(presence(sessions[0], true))]);
        let mut batch = Batch::default();
        let ended = apply_first(&watcher, &mut stream, &mut batch).await;
        assert!(matches!(ended, Some(Ok(()))), "the stream ended");
        watcher.flush(&mut batch).await.expect("flush");
        let session = store.find_session(sessions[0]).await.unwrap().unwrap();
        assert!(session.presence[0].typing);
    }

    #[tokio::test]
    async fn a_burst_longer_than_the_bound_is_written_in_parts() {
        let (_directory, watcher, _instance_id, sessions) = watcher_with_sessions(1).await;
        let store = &watcher.service.store;
        let events = (0..READY_EVENTS + 1)
            .map(|index| presence(sessions[0], index % 2 == 0))
            .collect();
        let mut stream = Box::pin(live(events));
        let mut batch = Batch::default();
        let before = store.write_transactions_begun();
        assert!(
            apply_first(&watcher, &mut stream, &mut batch)
                .await
                .is_none()
        );
        assert_eq!(store.write_transactions_begun() - before, 1);
        let session = store.find_session(sessions[0]).await.unwrap().unwrap();
        assert!(!session.presence[0].typing, "the bound's last report");
        assert!(
            apply_first(&watcher, &mut stream, &mut batch)
                .await
                .is_none()
        );
        assert_eq!(store.write_transactions_begun() - before, 2);
        let session = store.find_session(sessions[0]).await.unwrap().unwrap();
        assert!(session.presence[0].typing, "the report after the bound");
    }

    #[tokio::test]
    async fn a_snapshot_writes_what_terminals_do_and_each_before_its_sessions_end() {
        let (_directory, watcher, _instance_id, sessions) = watcher_with_sessions(2).await;
        let store = &watcher.service.store;
        let mut feed = watcher.service.changes.subscribe();
        let [running, exited] = sessions[..] else {
            panic!("two sessions")
        };
        let on_broker = |session_id, state, terminal: BrokerEvent| {
            let BrokerEvent::Terminal { terminal, .. } = terminal else {
                unreachable!("a terminal report")
            };
            BrokerSession {
                session_id,
                state,
                exit: (state == BrokerSessionState::Exited).then(|| ExitStatus::exited(3)),
                close_reason: None,
                attached_clients: 0,
                last_activity_at: None,
                screen: ScreenFacts::default(),
                terminal: Some(terminal),
            }
        };
        let snapshot = BrokerEvent::Snapshot {
            boot_id: "boot".into(),
            sessions: vec![
                on_broker(
                    running,
                    BrokerSessionState::Running,
                    terminal(running, TerminalState::Running),
                ),
                on_broker(
                    exited,
                    BrokerSessionState::Exited,
                    terminal(exited, TerminalState::WaitingForInput),
                ),
            ],
        };
        let mut stream = Box::pin(live(vec![snapshot]));
        let mut batch = Batch::default();
        assert!(
            apply_first(&watcher, &mut stream, &mut batch)
                .await
                .is_none()
        );
        let state_of = |session: Session| session.terminal.map(|terminal| terminal.state);
        let session = store.find_session(running).await.unwrap().unwrap();
        assert_eq!(session.status, SessionStatus::Active);
        assert_eq!(state_of(session), Some(TerminalState::Running));
        let session = store.find_session(exited).await.unwrap().unwrap();
        assert_eq!(session.status, SessionStatus::Exited);
        assert_eq!(state_of(session), Some(TerminalState::WaitingForInput));
        let of_exited: Vec<ChangeKind> = changes_of(&mut feed)
            .into_iter()
            .filter(|(_, session_id)| *session_id == exited)
            .map(|(kind, _)| kind)
            .collect();
        assert_eq!(of_exited, [ChangeKind::Terminal, ChangeKind::Status]);
    }

    #[tokio::test]
    async fn presence_reported_after_a_start_is_not_undone_by_the_starts_count() {
        let (_directory, watcher, _instance_id, sessions) = watcher_with_sessions(1).await;
        let store = &watcher.service.store;
        let session_id = sessions[0];
        // The broker reports the session started with nobody attached; a page attaches before
        // the next flush of batched activity.
        let started = BrokerEvent::Started(BrokerSession {
            session_id,
            state: BrokerSessionState::Running,
            exit: None,
            close_reason: None,
            attached_clients: 0,
            last_activity_at: None,
            screen: ScreenFacts::default(),
            terminal: None,
        });
        let mut stream = Box::pin(live(vec![started, presence(session_id, false)]));
        let mut batch = Batch::default();
        assert!(
            apply_first(&watcher, &mut stream, &mut batch)
                .await
                .is_none()
        );
        watcher.flush(&mut batch).await.expect("flush");
        let session = store.find_session(session_id).await.unwrap().unwrap();
        assert_eq!(session.attached_clients, 1, "the later report's count");
        assert_eq!(session.presence.len(), 1);
    }
}
