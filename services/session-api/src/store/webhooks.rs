//! Webhooks and their deliveries: registering within the instance's bound, listing, deleting;
//! queueing a terminal change's deliveries inside the transaction that records it; claiming
//! due deliveries with a lease, recording each attempt, and deleting finished deliveries past
//! their retention.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait, OnConflict};
use sea_orm::{
    ActiveValue, ColumnTrait, Condition, ConnectionTrait, DatabaseTransaction, DbBackend,
    EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect,
    sea_query::{LockBehavior, LockType},
};
use uuid::Uuid;

use super::audit::insert_audit_event;
use super::entities::{webhook, webhook_delivery};
use super::{Store, lock_instance, now};
use crate::audit::{AuditKind, NewAuditEvent};
use crate::domain::{Command, Session, TerminalActivity};
use crate::error::Error;
use crate::webhooks::{
    DeliveryOutcome, LastDelivery, MAX_PENDING_DELIVERIES, NewWebhook, Webhook, WebhookEvent,
    payload,
};
use ptyhub_model::TerminalState;
use ptyhub_wire::Actor;

/// A delivery this replica claimed for one attempt.
#[derive(Debug, Clone)]
pub struct ClaimedDelivery {
    pub id: Uuid,
    pub webhook_id: Uuid,
    /// The webhook's instance, which the audit event of a delivery given up names.
    pub instance_id: Uuid,
    pub event: String,
    pub body: String,
    /// Attempts made before this one.
    pub attempts: u32,
    pub url: String,
    pub secret: String,
    /// The lease this attempt holds: only its result is recorded.
    claim: Uuid,
}

/// How one attempt ended, as the delivery task judged it.
#[derive(Debug, Clone)]
pub struct AttemptResult {
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub outcome: DeliveryOutcome,
    /// When a delivery still pending is due again.
    pub next_attempt_at: DateTime<Utc>,
}

/// What a terminal report asks the webhooks to be told.
#[derive(Debug)]
pub(super) struct TerminalEvents<'a> {
    /// The session as it is after the report.
    pub session: &'a Session,
    /// The state before, when this write changed the state.
    pub state_changed: Option<(Option<TerminalState>, &'a TerminalActivity)>,
    /// The commands the report says ended.
    pub finished: Vec<&'a Command>,
}

impl Store {
    /// Stores a webhook of `instance_id` made by `actor`, refused with
    /// [`Error::TooManyWebhooks`] when the instance has `max` already. Its `webhook_created`
    /// audit event is written in the same transaction.
    pub async fn insert_webhook(
        &self,
        instance_id: Uuid,
        new: &NewWebhook,
        actor: &Actor,
        max: usize,
    ) -> Result<Webhook, Error> {
        let transaction = self.begin_write().await?;
        lock_instance(&transaction, instance_id).await?;
        let existing = webhook::Entity::find()
            .filter(webhook::Column::InstanceId.eq(instance_id))
            .count(&transaction)
            .await?;
        if existing >= max as u64 {
            return Err(Error::TooManyWebhooks(max));
        }
        let model = webhook::Model {
            id: Uuid::new_v4(),
            instance_id,
            url: new.url.clone(),
            events: new
                .events
                .iter()
                .map(|event| event.as_str())
                .collect::<Vec<_>>()
                .join(","),
            secret: new.secret.clone(),
            created_by: actor.principal.clone(),
            created_at: now(),
            dropped_events: 0,
            last_delivery_id: None,
            last_event: None,
            last_attempt_at: None,
            last_attempts: None,
            last_status_code: None,
            last_error: None,
            last_outcome: None,
        };
        webhook::Entity::insert(webhook::ActiveModel::from(model.clone()))
            .exec_without_returning(&transaction)
            .await?;
        let webhook = webhook_from_model(model)?;
        insert_audit_event(
            &transaction,
            &webhook_audit_event(AuditKind::WebhookCreated, actor, &webhook),
        )
        .await?;
        transaction.commit().await?;
        Ok(webhook)
    }

    /// An instance's webhooks, oldest first.
    pub async fn list_webhooks(&self, instance_id: Uuid) -> Result<Vec<Webhook>, Error> {
        webhook::Entity::find()
            .filter(webhook::Column::InstanceId.eq(instance_id))
            .order_by_asc(webhook::Column::CreatedAt)
            .order_by_asc(webhook::Column::Id)
            .all(&self.db)
            .await?
            .into_iter()
            .map(webhook_from_model)
            .collect()
    }

    /// Deletes a webhook of `instance_id` (one of another instance is not found) and, through
    /// the foreign key, its deliveries; answers it as it was. Its `webhook_deleted` audit event,
    /// by `actor`, is written in the same transaction.
    pub async fn delete_webhook(
        &self,
        instance_id: Uuid,
        webhook_id: Uuid,
        actor: &Actor,
    ) -> Result<Webhook, Error> {
        let transaction = self.begin_write().await?;
        let model = webhook::Entity::find_by_id(webhook_id)
            .filter(webhook::Column::InstanceId.eq(instance_id))
            .one(&transaction)
            .await?
            .ok_or(Error::WebhookNotFound(webhook_id))?;
        webhook::Entity::delete_by_id(webhook_id)
            .exec(&transaction)
            .await?;
        let webhook = webhook_from_model(model)?;
        insert_audit_event(
            &transaction,
            &webhook_audit_event(AuditKind::WebhookDeleted, actor, &webhook),
        )
        .await?;
        transaction.commit().await?;
        Ok(webhook)
    }

    /// Claims up to `limit` due deliveries for one attempt each, leased for `lease`, at most
    /// `per_webhook` of one webhook in flight counting the `in_flight` ones (so that a receiver
    /// that hangs holds up its own deliveries alone). Rows another replica holds are skipped
    /// (`FOR UPDATE SKIP LOCKED` on PostgreSQL; SQLite's writers take turns), and a claimed row
    /// is not due again before its lease ends.
    pub async fn claim_due_deliveries(
        &self,
        limit: usize,
        lease: Duration,
        in_flight: &HashMap<Uuid, usize>,
        per_webhook: usize,
    ) -> Result<Vec<ClaimedDelivery>, Error> {
        let at = now();
        let saturated: Vec<Uuid> = in_flight
            .iter()
            .filter(|(_, count)| **count >= per_webhook)
            .map(|(webhook_id, _)| *webhook_id)
            .collect();
        let due_here = || {
            due_deliveries(at)
                .filter(webhook_delivery::Column::WebhookId.is_not_in(saturated.iter().copied()))
        };
        // Most polls find nothing: a read first, so they take no write lock.
        let any_due = due_here()
            .select_only()
            .column(webhook_delivery::Column::Id)
            .into_tuple::<Uuid>()
            .one(&self.db)
            .await?;
        if any_due.is_none() {
            return Ok(Vec::new());
        }
        let transaction = self.begin_write().await?;
        // Candidates beyond `limit`, since a webhook's bound may leave some of them out.
        let mut query = due_here()
            .order_by_asc(webhook_delivery::Column::NextAttemptAt)
            .limit((limit * 4) as u64);
        if transaction.get_database_backend() == DbBackend::Postgres {
            query = query.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
        }
        let mut counts = in_flight.clone();
        let due: Vec<_> = query
            .all(&transaction)
            .await?
            .into_iter()
            .filter(|row| {
                let count = counts.entry(row.webhook_id).or_default();
                *count += 1;
                *count <= per_webhook
            })
            .take(limit)
            .collect();
        if due.is_empty() {
            return Ok(Vec::new());
        }
        let claim = Uuid::new_v4();
        let lease_until = at + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::MAX);
        webhook_delivery::Entity::update_many()
            .col_expr(
                webhook_delivery::Column::LeaseUntil,
                Expr::value(lease_until),
            )
            .col_expr(webhook_delivery::Column::Claim, Expr::value(claim))
            .filter(webhook_delivery::Column::Id.is_in(due.iter().map(|row| row.id)))
            .exec(&transaction)
            .await?;
        let webhooks = webhook::Entity::find()
            .filter(webhook::Column::Id.is_in(due.iter().map(|row| row.webhook_id)))
            .all(&transaction)
            .await?;
        transaction.commit().await?;
        Ok(due
            .into_iter()
            .filter_map(|row| {
                // Deleting a webhook deletes its deliveries in the same statement.
                let webhook = webhooks
                    .iter()
                    .find(|webhook| webhook.id == row.webhook_id)?;
                Some(ClaimedDelivery {
                    id: row.id,
                    webhook_id: row.webhook_id,
                    instance_id: webhook.instance_id,
                    event: row.event,
                    body: row.body,
                    attempts: u32::try_from(row.attempts).unwrap_or(0),
                    url: webhook.url.clone(),
                    secret: webhook.secret.clone(),
                    claim,
                })
            })
            .collect())
    }

    /// Records how an attempt ended, on the delivery and as its webhook's last delivery,
    /// unless the claim was lost meanwhile (its lease ran out and another replica took it). A
    /// delivery given up (no attempt left) leaves a `webhook_delivery_failed` audit event of
    /// `system` in the same transaction, so that it is written once whichever replica made
    /// the last attempt.
    pub async fn record_attempt(
        &self,
        delivery: &ClaimedDelivery,
        result: &AttemptResult,
    ) -> Result<(), Error> {
        let at = now();
        let attempts = i32::try_from(delivery.attempts + 1).unwrap_or(i32::MAX);
        let next_attempt_at = match result.outcome {
            DeliveryOutcome::Pending => result.next_attempt_at,
            // A finished delivery's time is when it finished: its retention counts from there.
            DeliveryOutcome::Delivered | DeliveryOutcome::Failed => at,
        };
        let transaction = self.begin_write().await?;
        let updated = webhook_delivery::Entity::update_many()
            .col_expr(webhook_delivery::Column::Attempts, Expr::value(attempts))
            .col_expr(
                webhook_delivery::Column::Outcome,
                Expr::value(result.outcome.as_str()),
            )
            .col_expr(
                webhook_delivery::Column::NextAttemptAt,
                Expr::value(next_attempt_at),
            )
            .col_expr(
                webhook_delivery::Column::LeaseUntil,
                Expr::value(Option::<DateTime<Utc>>::None),
            )
            .col_expr(
                webhook_delivery::Column::Claim,
                Expr::value(Option::<Uuid>::None),
            )
            .filter(webhook_delivery::Column::Id.eq(delivery.id))
            .filter(webhook_delivery::Column::Claim.eq(delivery.claim))
            .exec(&transaction)
            .await?;
        if updated.rows_affected == 0 {
            return Ok(());
        }
        webhook::Entity::update_many()
            .col_expr(webhook::Column::LastDeliveryId, Expr::value(delivery.id))
            .col_expr(
                webhook::Column::LastEvent,
                Expr::value(delivery.event.clone()),
            )
            .col_expr(webhook::Column::LastAttemptAt, Expr::value(at))
            .col_expr(webhook::Column::LastAttempts, Expr::value(attempts))
            .col_expr(
                webhook::Column::LastStatusCode,
                Expr::value(result.status_code.map(i32::from)),
            )
            .col_expr(
                webhook::Column::LastError,
                Expr::value(result.error.clone()),
            )
            .col_expr(
                webhook::Column::LastOutcome,
                Expr::value(result.outcome.as_str()),
            )
            .filter(webhook::Column::Id.eq(delivery.webhook_id))
            .exec(&transaction)
            .await?;
        if result.outcome == DeliveryOutcome::Failed {
            insert_audit_event(
                &transaction,
                &delivery_failed_audit_event(delivery, attempts, result),
            )
            .await?;
        }
        transaction.commit().await?;
        Ok(())
    }

    /// Gives a claimed delivery back untried (its attempt was cut short by a shutdown), so
    /// that any replica may try it at once rather than after the lease.
    pub async fn release_claim(&self, delivery: &ClaimedDelivery) -> Result<(), Error> {
        webhook_delivery::Entity::update_many()
            .col_expr(
                webhook_delivery::Column::LeaseUntil,
                Expr::value(Option::<DateTime<Utc>>::None),
            )
            .col_expr(
                webhook_delivery::Column::Claim,
                Expr::value(Option::<Uuid>::None),
            )
            .filter(webhook_delivery::Column::Id.eq(delivery.id))
            .filter(webhook_delivery::Column::Claim.eq(delivery.claim))
            .exec(&self.db)
            .await?;
        Ok(())
    }

    /// Deletes the deliveries that finished (delivered or failed) before `cutoff`.
    pub async fn prune_finished_deliveries(&self, cutoff: DateTime<Utc>) -> Result<u64, Error> {
        Ok(webhook_delivery::Entity::delete_many()
            .filter(webhook_delivery::Column::Outcome.ne(DeliveryOutcome::Pending.as_str()))
            .filter(webhook_delivery::Column::NextAttemptAt.lt(cutoff))
            .exec(&self.db)
            .await?
            .rows_affected)
    }
}

/// Queues, in `transaction`, a delivery of each of `events` to each webhook of the session's
/// instance that asked for it; answers how many were queued. A `command_finished` already
/// queued for a webhook (by another replica, or from a report seen before) is not queued again,
/// and a webhook with [`MAX_PENDING_DELIVERIES`] waiting counts the event as dropped instead.
pub(super) async fn queue_terminal_events(
    transaction: &DatabaseTransaction,
    events: TerminalEvents<'_>,
) -> Result<usize, Error> {
    if events.state_changed.is_none() && events.finished.is_empty() {
        return Ok(0);
    }
    let webhooks = webhook::Entity::find()
        .filter(webhook::Column::InstanceId.eq(events.session.instance_id))
        .all(transaction)
        .await?;
    if webhooks.is_empty() {
        return Ok(0);
    }
    let at = now();
    let session = events.session;
    let mut queued = 0;
    if let Some((previous, terminal)) = events.state_changed {
        let body = payload::state_changed(session, previous, terminal, at);
        // Each change of the row is one event, whatever it changed to.
        let key = format!("state_changed:{}", Uuid::new_v4());
        queued += queue_event(
            transaction,
            &webhooks,
            WebhookEvent::StateChanged,
            &key,
            &body,
        )
        .await?;
    }
    for command in events.finished {
        let body = payload::command_finished(session, command, at);
        let key = format!("command_finished:{}:{}", session.id, command.id);
        queued += queue_event(
            transaction,
            &webhooks,
            WebhookEvent::CommandFinished,
            &key,
            &body,
        )
        .await?;
    }
    Ok(queued)
}

/// Queues one event for each of `webhooks` that asked for it.
async fn queue_event(
    transaction: &DatabaseTransaction,
    webhooks: &[webhook::Model],
    event: WebhookEvent,
    event_key: &str,
    body: &str,
) -> Result<usize, Error> {
    let at = now();
    let mut queued = 0;
    for webhook in webhooks.iter().filter(|webhook| subscribed(webhook, event)) {
        let pending = webhook_delivery::Entity::find()
            .filter(webhook_delivery::Column::WebhookId.eq(webhook.id))
            .filter(webhook_delivery::Column::Outcome.eq(DeliveryOutcome::Pending.as_str()))
            .count(transaction)
            .await?;
        if pending >= MAX_PENDING_DELIVERIES {
            tracing::warn!(webhook_id = %webhook.id, event = event.as_str(),
                "a webhook's receiver is behind: event dropped");
            webhook::Entity::update_many()
                .col_expr(
                    webhook::Column::DroppedEvents,
                    Expr::col(webhook::Column::DroppedEvents).add(1),
                )
                .filter(webhook::Column::Id.eq(webhook.id))
                .exec(transaction)
                .await?;
            continue;
        }
        let delivery = webhook_delivery::ActiveModel {
            id: ActiveValue::Set(Uuid::new_v4()),
            webhook_id: ActiveValue::Set(webhook.id),
            event: ActiveValue::Set(event.as_str().to_owned()),
            event_key: ActiveValue::Set(event_key.to_owned()),
            body: ActiveValue::Set(body.to_owned()),
            created_at: ActiveValue::Set(at),
            attempts: ActiveValue::Set(0),
            outcome: ActiveValue::Set(DeliveryOutcome::Pending.as_str().to_owned()),
            next_attempt_at: ActiveValue::Set(at),
            lease_until: ActiveValue::Set(None),
            claim: ActiveValue::Set(None),
        };
        let inserted = webhook_delivery::Entity::insert(delivery)
            .on_conflict(
                OnConflict::columns([
                    webhook_delivery::Column::WebhookId,
                    webhook_delivery::Column::EventKey,
                ])
                .do_nothing()
                .to_owned(),
            )
            .exec_without_returning(transaction)
            .await?;
        queued += usize::try_from(inserted).unwrap_or(0);
    }
    Ok(queued)
}

/// The audit event of a webhook made or deleted: what it is, never its secret (which a
/// [`Webhook`] does not hold).
fn webhook_audit_event(kind: AuditKind, actor: &Actor, webhook: &Webhook) -> NewAuditEvent {
    let events: Vec<&str> = webhook.events.iter().map(|event| event.as_str()).collect();
    NewAuditEvent::new(kind, actor)
        .instance(webhook.instance_id)
        .detail("webhook_id", webhook.id.to_string())
        .detail("url", webhook.url.clone())
        .detail("events", events.join(","))
}

/// The audit event of a delivery given up, by `system`: which webhook and delivery, how many
/// attempts, and the last answer (`status_code`) or why there was none (`error`). It names the
/// session whose event it was, read from the body session-api wrote.
fn delivery_failed_audit_event(
    delivery: &ClaimedDelivery,
    attempts: i32,
    result: &AttemptResult,
) -> NewAuditEvent {
    let event = NewAuditEvent::new(AuditKind::WebhookDeliveryFailed, &Actor::system());
    let event = match session_of_body(&delivery.body) {
        Some(session_id) => event.session(delivery.instance_id, session_id),
        None => event.instance(delivery.instance_id),
    };
    let event = event
        .detail("webhook_id", delivery.webhook_id.to_string())
        .detail("delivery_id", delivery.id.to_string())
        .detail("event", delivery.event.clone())
        .detail("attempts", attempts.to_string());
    match (result.status_code, &result.error) {
        (Some(status_code), _) => event.detail("status_code", status_code.to_string()),
        (None, Some(error)) => event.detail("error", error.clone()),
        (None, None) => event,
    }
}

/// The `session_id` of a delivery's body; every event a webhook is sent is about a session.
fn session_of_body(body: &str) -> Option<Uuid> {
    let body: serde_json::Value = serde_json::from_str(body).ok()?;
    Uuid::parse_str(body.get("session_id")?.as_str()?).ok()
}

fn subscribed(webhook: &webhook::Model, event: WebhookEvent) -> bool {
    webhook.events.split(',').any(|name| name == event.as_str())
}

/// Pending deliveries due at `at` that no live lease holds.
fn due_deliveries(at: DateTime<Utc>) -> sea_orm::Select<webhook_delivery::Entity> {
    webhook_delivery::Entity::find()
        .filter(webhook_delivery::Column::Outcome.eq(DeliveryOutcome::Pending.as_str()))
        .filter(webhook_delivery::Column::NextAttemptAt.lte(at))
        .filter(
            Condition::any()
                .add(webhook_delivery::Column::LeaseUntil.is_null())
                .add(webhook_delivery::Column::LeaseUntil.lt(at)),
        )
}

fn webhook_from_model(model: webhook::Model) -> Result<Webhook, Error> {
    let corrupt = |what: String| Error::CorruptRecord(format!("webhook {}: {what}", model.id));
    let events = model
        .events
        .split(',')
        .map(|name| WebhookEvent::parse(name).ok_or_else(|| corrupt(format!("event {name:?}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let last_delivery = match (
        model.last_delivery_id,
        model.last_event.as_deref(),
        model.last_attempt_at,
        model.last_outcome.as_deref(),
    ) {
        (Some(delivery_id), Some(event), Some(at), Some(outcome)) => Some(LastDelivery {
            delivery_id,
            event: WebhookEvent::parse(event).ok_or_else(|| corrupt(format!("event {event:?}")))?,
            at,
            attempts: u32::try_from(model.last_attempts.unwrap_or(0)).unwrap_or(0),
            status_code: model
                .last_status_code
                .and_then(|code| u16::try_from(code).ok()),
            error: model.last_error.clone(),
            outcome: DeliveryOutcome::parse(outcome)
                .ok_or_else(|| corrupt(format!("outcome {outcome:?}")))?,
        }),
        _ => None,
    };
    Ok(Webhook {
        id: model.id,
        instance_id: model.instance_id,
        url: model.url,
        events,
        created_by: model.created_by,
        created_at: model.created_at,
        dropped_events: u64::try_from(model.dropped_events).unwrap_or(0),
        last_delivery,
    })
}
