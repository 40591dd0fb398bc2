//! The audit trail: appending events, deriving takeovers, listing with filters and pages, and
//! deleting the events past the trail's retention.
//!
//! A takeover needs two facts that reach session-api separately, often from two gateways: the
//! old controller's detach for `taken_over` and the new controller's attach. Whichever arrives
//! second records the takeover, under a lock per session (SQLite's write lock, a PostgreSQL
//! advisory lock), so that it is recorded exactly once whatever the order.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveValue, ColumnTrait, Condition, ConnectionTrait, DatabaseTransaction, DbBackend,
    EntityTrait, QueryFilter, QueryOrder, QuerySelect, Statement,
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

    /// Appends the event of something a broker reported (one principal's input window, whose
    /// `detail.window` is when its first byte was written; an answer to a request for control,
    /// whose `detail.at` is when it was answered) unless it is recorded already: every replica
    /// hears the broker's report, and the first to take the session's lock records it. The
    /// report is the same one when the session, kind, principal and the detail `key` are, and
    /// the event is not recorded before `reported_at`. Whether this call recorded it.
    pub async fn record_once(
        &self,
        event: NewAuditEvent,
        key: &str,
        reported_at: DateTime<Utc>,
    ) -> Result<bool, Error> {
        let (Some(session_id), Some(value)) = (event.session_id, event.detail.get(key)) else {
            return Err(Error::InvalidRequest(format!(
                "a reported event names its session and its {key}"
            )));
        };
        let transaction = self.begin_write().await?;
        lock_session_trail(&transaction, session_id).await?;
        let recorded: Vec<audit_event::Model> = audit_event::Entity::find()
            .filter(audit_event::Column::SessionId.eq(session_id))
            .filter(audit_event::Column::Kind.eq(event.kind.as_str()))
            .filter(audit_event::Column::Principal.eq(event.actor.principal.as_str()))
            .filter(audit_event::Column::At.gte(reported_at))
            .all(&transaction)
            .await?;
        let already = recorded
            .iter()
            .any(|row| row.detail.get(key).and_then(|found| found.as_str()) == Some(value));
        if !already {
            insert_audit_event(&transaction, &event).await?;
        }
        transaction.commit().await?;
        Ok(!already)
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
    let detail = serde_json::to_value(&event.detail)
        .map_err(|error| Error::CorruptRecord(format!("audit detail: {error}")))?;
    let row = audit_event::ActiveModel {
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
    };
    let inserted = audit_event::Entity::insert(row).exec(transaction).await?;
    Ok(id_from_db(inserted.last_insert_id))
}

/// Serialises the stream events of one session for the rest of the transaction. SQLite's
/// writers are serialised already (`BEGIN IMMEDIATE`).
async fn lock_session_trail(
    transaction: &DatabaseTransaction,
    session_id: Uuid,
) -> Result<(), Error> {
    if transaction.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    let (high, _) = session_id.as_u64_pair();
    // Namespaced by the two-key form, apart from the migrations' single-key lock.
    let key = (high >> 32) as i32;
    transaction
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT pg_advisory_xact_lock(1817, $1)",
            [sea_orm::Value::from(key)],
        ))
        .await?;
    Ok(())
}

/// Records the takeovers of `session_id` whose two facts (the old controller's detach for
/// `taken_over`, the first controller attach after the old one's attach) are both known now
/// and that are not recorded yet.
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
        let Some(old_attach) = events
            .iter()
            .find(|event| event.kind == AuditKind::Attached && event.attachment_id == Some(old))
        else {
            continue;
        };
        let Some(new_attach) = events.iter().find(|event| {
            event.kind == AuditKind::Attached
                && event.id > old_attach.id
                && event.attachment_id != Some(old)
        }) else {
            continue;
        };
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
