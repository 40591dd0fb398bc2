//! The audit trail: appending events, recording what brokers report once across replicas (in
//! batches), deriving takeovers, listing with filters and pages, and deleting the events past
//! the trail's retention.
//!
//! A takeover needs two facts that reach session-api separately, often from two gateways: the
//! old controller's detach for `taken_over` and the new controller's attach. Whichever arrives
//! second records the takeover, under a lock per session (SQLite's write lock, a PostgreSQL
//! advisory lock), so that it is recorded exactly once whatever the order.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveValue, ColumnTrait, Condition, ConnectionTrait, DatabaseTransaction, DbBackend,
    EntityTrait, FromQueryResult, QueryFilter, QueryOrder, QuerySelect, Statement,
};
use uuid::Uuid;

use super::entities::audit_event;
use super::{Store, now};
use crate::audit::{AuditEvent, AuditFilter, AuditKind, AuditPage, NewAuditEvent};
use crate::error::Error;
use ptyhub_model::Role;

/// How many of a session's latest stream events a takeover is looked for in: the two facts of
/// one takeover arrive within moments of each other.
const TAKEOVER_WINDOW: u64 = 64;

/// The detach reason of a controller that another took control from.
pub const TAKEN_OVER: &str = "taken_over";

/// How many events one statement of [`Store::prune_audit_events`] deletes: each batch is a
/// short write of its own, so a sweep of a large trail never holds the writers up for long
/// (SQLite has one), and its ids stay within the databases' parameter limits.
pub const AUDIT_PRUNE_BATCH: u64 = 500;

/// How many sessions' reports one transaction of [`Store::record_reported`] records on
/// PostgreSQL: it holds an advisory lock per session, of which a server keeps a bounded table.
/// On SQLite, whose one writer takes no lock per session, a batch is one transaction: 1,000
/// sessions' input windows cost about a fifth less CPU that way than in four transactions.
pub const REPORTED_SESSIONS_PER_TRANSACTION: usize = 256;

/// How many audit rows one statement inserts: 10 values each, well within SQLite's and
/// PostgreSQL's limits on the values of one statement.
const AUDIT_ROWS_PER_INSERT: usize = 500;

/// Something a broker reported, for [`Store::record_reported`]: recorded once whichever replica
/// hears it first.
#[derive(Debug, Clone)]
pub struct ReportedEvent {
    pub event: NewAuditEvent,
    /// The detail that tells the report apart from the session's other reports of its kind by
    /// the same principal and surface (`window`, `at`).
    pub key: &'static str,
    /// When what was reported began: the event is never recorded before it, so the lookup
    /// for it reads no older event.
    pub reported_at: DateTime<Utc>,
}

/// The columns of a recorded event that [`ReportIdentity::of_row`] reads: a broker's reports
/// come every second for every session typed in, so the lookup decodes nothing else.
#[derive(Debug, FromQueryResult)]
struct RecordedReport {
    session_id: Option<Uuid>,
    kind: String,
    principal: String,
    surface: String,
    detail: sea_orm::JsonValue,
}

/// What makes two reports the same one: the session, kind, principal, surface and the value of
/// the report's detail key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ReportIdentity {
    session_id: Uuid,
    kind: String,
    principal: String,
    surface: String,
    key: &'static str,
    value: String,
}

impl ReportIdentity {
    fn of(report: &ReportedEvent) -> Result<Self, Error> {
        let event = &report.event;
        let (Some(session_id), Some(value)) = (event.session_id, event.detail.get(report.key))
        else {
            return Err(Error::InvalidRequest(format!(
                "a reported event names its session and its {}",
                report.key
            )));
        };
        Ok(Self {
            session_id,
            kind: event.kind.as_str().to_owned(),
            principal: event.actor.principal.clone(),
            surface: event.actor.surface.as_str().to_owned(),
            key: report.key,
            value: value.clone(),
        })
    }

    /// The identity `row` has under `key`, when it has that detail.
    fn of_row(row: &RecordedReport, key: &'static str) -> Option<Self> {
        Some(Self {
            session_id: row.session_id?,
            kind: row.kind.clone(),
            principal: row.principal.clone(),
            surface: row.surface.clone(),
            key,
            value: row.detail.get(key)?.as_str()?.to_owned(),
        })
    }
}

impl Store {
    /// Appends one event; an attach or detach of a controller may record a takeover too.
    /// Returns the event's id.
    pub async fn record_audit_event(&self, event: NewAuditEvent) -> Result<u64, Error> {
        let transaction = self.begin_write().await?;
        let stream_event = matches!(event.kind, AuditKind::Attached | AuditKind::Detached)
            && event.role == Some(Role::Controller);
        let session_id = event.session_id;
        if stream_event && let Some(session_id) = session_id {
            lock_session_trail(&transaction, session_id).await?;
        }
        let id = insert_audit_event(&transaction, &event).await?;
        if stream_event && let Some(session_id) = session_id {
            record_takeovers(&transaction, session_id).await?;
        }
        transaction.commit().await?;
        Ok(id)
    }

    /// Appends the event of something a broker reported unless it is recorded already
    /// ([`Store::record_reported`] for one report). Whether this call recorded it.
    pub async fn record_once(
        &self,
        event: NewAuditEvent,
        key: &'static str,
        reported_at: DateTime<Utc>,
    ) -> Result<bool, Error> {
        let report = ReportedEvent {
            event,
            key,
            reported_at,
        };
        Ok(self.record_reported(std::slice::from_ref(&report)).await? == 1)
    }

    /// Appends the events of what a broker reported (a principal's input window, whose
    /// `detail.window` is when its first byte was written; an answer to a request for control,
    /// whose `detail.at` is when it was answered), each unless it is recorded already: every
    /// replica hears the broker's reports, and the first to take a session's lock records that
    /// session's. Each event's session and detail `key` must be set. Returns how many this call
    /// recorded.
    ///
    /// A batch costs one write transaction (on PostgreSQL one per
    /// [`REPORTED_SESSIONS_PER_TRANSACTION`] sessions, whose locks are taken in one order, so
    /// that replicas recording overlapping batches never deadlock), and one indexed lookup of
    /// what those sessions have recorded since the earliest report, which reads only what tells
    /// reports apart. A session's events are appended in the order of `reports`.
    pub async fn record_reported(&self, reports: &[ReportedEvent]) -> Result<usize, Error> {
        let mut by_session: Vec<(Uuid, Vec<(&ReportedEvent, ReportIdentity)>)> = Vec::new();
        let mut position: HashMap<Uuid, usize> = HashMap::new();
        for report in reports {
            let identity = ReportIdentity::of(report)?;
            let index = *position.entry(identity.session_id).or_insert_with(|| {
                by_session.push((identity.session_id, Vec::new()));
                by_session.len() - 1
            });
            by_session[index].1.push((report, identity));
        }
        let per_transaction = match self.db.get_database_backend() {
            DbBackend::Postgres => REPORTED_SESSIONS_PER_TRANSACTION,
            _ => by_session.len().max(1),
        };
        let mut recorded = 0;
        for sessions in by_session.chunks(per_transaction) {
            recorded += self.record_reported_sessions(sessions).await?;
        }
        Ok(recorded)
    }

    /// One transaction of [`Store::record_reported`]: the reports of `sessions`.
    async fn record_reported_sessions(
        &self,
        sessions: &[(Uuid, Vec<(&ReportedEvent, ReportIdentity)>)],
    ) -> Result<usize, Error> {
        let transaction = self.begin_write().await?;
        let session_ids: Vec<Uuid> = sessions.iter().map(|(session_id, _)| *session_id).collect();
        lock_session_trails(&transaction, &session_ids).await?;
        let reports = || sessions.iter().flat_map(|(_, reports)| reports);
        let kinds: BTreeSet<&str> = reports()
            .map(|(report, _)| report.event.kind.as_str())
            .collect();
        let keys: BTreeSet<&str> = reports().map(|(report, _)| report.key).collect();
        let since = reports()
            .map(|(report, _)| report.reported_at)
            .min()
            .unwrap_or_else(now);
        let mut seen: HashSet<ReportIdentity> = HashSet::new();
        for row in recorded_since(&transaction, &session_ids, &kinds, since).await? {
            for key in &keys {
                if let Some(identity) = ReportIdentity::of_row(&row, key) {
                    seen.insert(identity);
                }
            }
        }
        let mut rows = Vec::new();
        for (report, identity) in reports() {
            if seen.insert(identity.clone()) {
                rows.push(audit_row(&report.event)?);
            }
        }
        let recorded = rows.len();
        // Several rows a statement, within both databases' limits on bound values.
        let mut rows = rows.into_iter().peekable();
        while rows.peek().is_some() {
            let chunk: Vec<audit_event::ActiveModel> =
                rows.by_ref().take(AUDIT_ROWS_PER_INSERT).collect();
            audit_event::Entity::insert_many(chunk)
                .exec_without_returning(&transaction)
                .await?;
        }
        transaction.commit().await?;
        Ok(recorded)
    }

    /// Deletes the events recorded before `cutoff`, [`AUDIT_PRUNE_BATCH`] at a time. Returns how
    /// many went.
    pub async fn prune_audit_events(&self, cutoff: DateTime<Utc>) -> Result<u64, Error> {
        let mut pruned = 0;
        loop {
            let ids: Vec<i64> = audit_event::Entity::find()
                .select_only()
                .column(audit_event::Column::Id)
                .filter(audit_event::Column::At.lt(cutoff))
                .limit(AUDIT_PRUNE_BATCH)
                .into_tuple()
                .all(&self.db)
                .await?;
            if ids.is_empty() {
                return Ok(pruned);
            }
            let batch = ids.len() as u64;
            pruned += audit_event::Entity::delete_many()
                .filter(audit_event::Column::Id.is_in(ids))
                .exec(&self.db)
                .await?
                .rows_affected;
            if batch < AUDIT_PRUNE_BATCH {
                return Ok(pruned);
            }
        }
    }

    /// One page of the events the filter selects, oldest first.
    pub async fn list_audit_events(&self, filter: &AuditFilter) -> Result<AuditPage, Error> {
        let mut condition = Condition::all();
        if let Some(instance_id) = filter.instance_id {
            condition = condition.add(audit_event::Column::InstanceId.eq(instance_id));
        }
        if let Some(session_id) = filter.session_id {
            condition = condition.add(audit_event::Column::SessionId.eq(session_id));
        }
        if let Some(principal) = &filter.principal {
            condition = condition.add(audit_event::Column::Principal.eq(principal.as_str()));
        }
        if let Some(since) = filter.since {
            condition = condition.add(audit_event::Column::At.gte(since));
        }
        if let Some(until) = filter.until {
            condition = condition.add(audit_event::Column::At.lt(until));
        }
        if let Some(instances) = &filter.only_instances {
            condition =
                condition.add(audit_event::Column::InstanceId.is_in(instances.iter().copied()));
        }
        if let Some(after_id) = filter.after_id {
            condition = condition.add(audit_event::Column::Id.gt(id_to_db(after_id)));
        }
        let rows = audit_event::Entity::find()
            .filter(condition)
            .order_by_asc(audit_event::Column::Id)
            .limit(u64::from(filter.page_size) + 1)
            .all(&self.db)
            .await?;
        let more = rows.len() > filter.page_size as usize;
        let events = rows
            .into_iter()
            .take(filter.page_size as usize)
            .map(event_from_model)
            .collect::<Result<Vec<_>, _>>()?;
        let next_after_id = if more {
            events.last().map(|event| event.id)
        } else {
            None
        };
        Ok(AuditPage {
            events,
            next_after_id,
        })
    }
}

/// Appends `event` in `transaction`: also used by the writes that record their own event in
/// the same transaction as the change (a close).
pub(super) async fn insert_audit_event(
    transaction: &DatabaseTransaction,
    event: &NewAuditEvent,
) -> Result<u64, Error> {
    let inserted = audit_event::Entity::insert(audit_row(event)?)
        .exec(transaction)
        .await?;
    Ok(id_from_db(inserted.last_insert_id))
}

/// The row that records `event` now.
fn audit_row(event: &NewAuditEvent) -> Result<audit_event::ActiveModel, Error> {
    let detail = serde_json::to_value(&event.detail)
        .map_err(|error| Error::CorruptRecord(format!("audit detail: {error}")))?;
    Ok(audit_event::ActiveModel {
        id: ActiveValue::NotSet,
        at: ActiveValue::Set(now()),
        kind: ActiveValue::Set(event.kind.as_str().to_owned()),
        principal: ActiveValue::Set(event.actor.principal.clone()),
        instance_id: ActiveValue::Set(event.instance_id),
        session_id: ActiveValue::Set(event.session_id),
        client_address: ActiveValue::Set(event.actor.client_address.clone()),
        surface: ActiveValue::Set(event.actor.surface.as_str().to_owned()),
        role: ActiveValue::Set(event.role.map(|role| role.as_str().to_owned())),
        attachment_id: ActiveValue::Set(event.attachment_id),
        detail: ActiveValue::Set(detail),
    })
}

/// The events of `kinds` that `sessions` recorded at or after `since`: an indexed lookup
/// (`session_id`, `kind`, `at`), in chunks within the databases' limits on bound values.
async fn recorded_since(
    transaction: &DatabaseTransaction,
    sessions: &[Uuid],
    kinds: &BTreeSet<&str>,
    since: DateTime<Utc>,
) -> Result<Vec<RecordedReport>, Error> {
    let mut rows = Vec::new();
    for chunk in sessions.chunks(500) {
        rows.extend(
            recorded_since_query(chunk, kinds, since)
                .select_only()
                .columns([
                    audit_event::Column::SessionId,
                    audit_event::Column::Kind,
                    audit_event::Column::Principal,
                    audit_event::Column::Surface,
                    audit_event::Column::Detail,
                ])
                .into_model::<RecordedReport>()
                .all(transaction)
                .await?,
        );
    }
    Ok(rows)
}

fn recorded_since_query(
    sessions: &[Uuid],
    kinds: &BTreeSet<&str>,
    since: DateTime<Utc>,
) -> sea_orm::Select<audit_event::Entity> {
    audit_event::Entity::find()
        .filter(audit_event::Column::SessionId.is_in(sessions.iter().copied()))
        .filter(audit_event::Column::Kind.is_in(kinds.iter().copied()))
        .filter(audit_event::Column::At.gte(since))
}

/// Serialises the stream events of one session, and the recording of what its broker reported,
/// for the rest of the transaction. SQLite's writers are serialised already (`BEGIN IMMEDIATE`).
async fn lock_session_trail(
    transaction: &DatabaseTransaction,
    session_id: Uuid,
) -> Result<(), Error> {
    if transaction.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    lock_trail_key(transaction, trail_lock_key(session_id)).await
}

/// The advisory lock of a session's trail: its id's first 32 bits (two sessions may share one,
/// which only makes them wait for each other).
fn trail_lock_key(session_id: Uuid) -> i32 {
    let (high, _) = session_id.as_u64_pair();
    (high >> 32) as i32
}

async fn lock_trail_key(transaction: &DatabaseTransaction, key: i32) -> Result<(), Error> {
    // Namespaced by the two-key form, apart from the migrations' single-key lock.
    transaction
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT pg_advisory_xact_lock(1817, $1)",
            [sea_orm::Value::from(key)],
        ))
        .await?;
    Ok(())
}

/// [`lock_session_trail`] for each of `sessions`, always in the same order, so that two
/// transactions locking overlapping sets wait for each other rather than deadlock.
async fn lock_session_trails(
    transaction: &DatabaseTransaction,
    sessions: &[Uuid],
) -> Result<(), Error> {
    if transaction.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    let keys: BTreeSet<i32> = sessions
        .iter()
        .map(|session_id| trail_lock_key(*session_id))
        .collect();
    for key in keys {
        lock_trail_key(transaction, key).await?;
    }
    Ok(())
}

/// Records the takeovers of `session_id` whose two facts (the old controller's detach for
/// `taken_over`, the first controller attach after the old one's attach) are both known now
/// and that are not recorded yet. A stream that attached to watch and was granted control
/// later has a viewer's attach: its new controller is the first controller attach after it
/// that no recorded takeover names already (one that came between the attach and the grant
/// took control from another stream).
async fn record_takeovers(
    transaction: &DatabaseTransaction,
    session_id: Uuid,
) -> Result<(), Error> {
    let mut recent = audit_event::Entity::find()
        .filter(audit_event::Column::SessionId.eq(session_id))
        .filter(audit_event::Column::Role.eq(Role::Controller.as_str()))
        .filter(audit_event::Column::Kind.is_in([
            AuditKind::Attached.as_str(),
            AuditKind::Detached.as_str(),
            AuditKind::Takeover.as_str(),
        ]))
        .order_by_desc(audit_event::Column::Id)
        .limit(TAKEOVER_WINDOW)
        .all(transaction)
        .await?;
    recent.reverse();
    let events = recent
        .into_iter()
        .map(event_from_model)
        .collect::<Result<Vec<_>, _>>()?;
    let recorded: HashSet<&str> = events
        .iter()
        .filter(|event| event.kind == AuditKind::Takeover)
        .filter_map(|event| event.detail.get("from_attachment").map(String::as_str))
        .collect();
    let mut new_controllers: HashSet<Uuid> = events
        .iter()
        .filter(|event| event.kind == AuditKind::Takeover)
        .filter_map(|event| event.attachment_id)
        .collect();
    let mut takeovers = Vec::new();
    for detach in events.iter().filter(|event| {
        event.kind == AuditKind::Detached
            && event.detail.get("reason").map(String::as_str) == Some(TAKEN_OVER)
    }) {
        let Some(old) = detach.attachment_id else {
            continue;
        };
        if recorded.contains(old.to_string().as_str()) {
            continue;
        }
        let (since, granted) = match events
            .iter()
            .find(|event| event.kind == AuditKind::Attached && event.attachment_id == Some(old))
        {
            Some(old_attach) => (old_attach.id, false),
            None => match viewer_attach_id(transaction, session_id, old).await? {
                Some(id) => (id, true),
                None => continue,
            },
        };
        let Some(new_attach) = events.iter().find(|event| {
            event.kind == AuditKind::Attached
                && event.id > since
                && event.attachment_id != Some(old)
                && !(granted
                    && event
                        .attachment_id
                        .is_some_and(|id| new_controllers.contains(&id)))
        }) else {
            continue;
        };
        if let Some(id) = new_attach.attachment_id {
            new_controllers.insert(id);
        }
        let mut detail = BTreeMap::new();
        detail.insert("from".to_owned(), detach.principal.clone());
        detail.insert("from_attachment".to_owned(), old.to_string());
        let surface =
            ptyhub_wire::Surface::parse(&new_attach.surface).unwrap_or(ptyhub_wire::Surface::Grpc);
        takeovers.push(NewAuditEvent {
            kind: AuditKind::Takeover,
            actor: ptyhub_wire::Actor::new(
                &new_attach.principal,
                new_attach.client_address.clone(),
                surface,
            ),
            instance_id: new_attach.instance_id,
            session_id: Some(session_id),
            role: Some(Role::Controller),
            attachment_id: new_attach.attachment_id,
            detail,
        });
    }
    for takeover in takeovers {
        insert_audit_event(transaction, &takeover).await?;
    }
    Ok(())
}

/// The id of the event of `attachment`'s attach to `session_id` as a viewer, if it is recorded.
async fn viewer_attach_id(
    transaction: &DatabaseTransaction,
    session_id: Uuid,
    attachment: Uuid,
) -> Result<Option<u64>, Error> {
    let attach = audit_event::Entity::find()
        .filter(audit_event::Column::SessionId.eq(session_id))
        .filter(audit_event::Column::AttachmentId.eq(attachment))
        .filter(audit_event::Column::Kind.eq(AuditKind::Attached.as_str()))
        .filter(audit_event::Column::Role.eq(Role::Viewer.as_str()))
        .one(transaction)
        .await?;
    Ok(attach.map(|attach| id_from_db(attach.id)))
}

fn event_from_model(model: audit_event::Model) -> Result<AuditEvent, Error> {
    let kind = AuditKind::parse(&model.kind)
        .ok_or_else(|| Error::CorruptRecord(format!("audit kind {:?}", model.kind)))?;
    let role = model
        .role
        .as_deref()
        .map(|role| {
            role.parse::<Role>()
                .map_err(|_| Error::CorruptRecord(format!("audit role {role:?}")))
        })
        .transpose()?;
    let detail: BTreeMap<String, String> = serde_json::from_value(model.detail)
        .map_err(|error| Error::CorruptRecord(format!("audit detail: {error}")))?;
    Ok(AuditEvent {
        id: id_from_db(model.id),
        at: model.at,
        kind,
        principal: model.principal,
        instance_id: model.instance_id,
        session_id: model.session_id,
        client_address: model.client_address,
        surface: model.surface,
        role,
        attachment_id: model.attachment_id,
        detail,
    })
}

/// Ids are positive (both databases count from 1).
fn id_from_db(id: i64) -> u64 {
    u64::try_from(id).unwrap_or(0)
}

fn id_to_db(id: u64) -> i64 {
    i64::try_from(id).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use sea_orm::QueryTrait;

    use super::*;
    use crate::store::migration::REPORTED_AUDIT_EVENTS_INDEX;

    #[tokio::test]
    async fn the_lookup_of_recorded_reports_searches_the_reported_index() {
        let directory = tempfile::tempdir().expect("temporary directory");
        let url = format!(
            "sqlite://{}?mode=rwc",
            directory.path().join("session-api.db").display()
        );
        let migrating = Store::connect(&url).await.expect("connect");
        migrating.migrate().await.expect("migrate");
        migrating.close().await;
        // A connection of its own: an EXPLAIN does not check for a schema changed since the
        // connection read it (a statement that runs does), so one opened before the migration
        // would explain the plan without the index.
        let store = Store::connect(&url).await.expect("connect");
        let sessions = [Uuid::new_v4(), Uuid::new_v4()];
        let kinds = BTreeSet::from([AuditKind::Input.as_str()]);
        let lookup = recorded_since_query(&sessions, &kinds, now()).build(DbBackend::Sqlite);
        let plan = store
            .connection()
            .query_all_raw(Statement::from_sql_and_values(
                DbBackend::Sqlite,
                format!("EXPLAIN QUERY PLAN {}", lookup.sql),
                lookup
                    .values
                    .clone()
                    .map(|values| values.0)
                    .unwrap_or_default(),
            ))
            .await
            .expect("explain");
        let steps: Vec<String> = plan
            .iter()
            .map(|row| row.try_get::<String>("", "detail").expect("detail"))
            .collect();
        assert!(
            steps
                .iter()
                .any(|step| step.contains(REPORTED_AUDIT_EVENTS_INDEX)
                    && step.contains("session_id=? AND kind=? AND at>?")),
            "{steps:?} for {}",
            lookup.sql
        );
    }
}
