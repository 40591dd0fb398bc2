//! The `webhook_deliveries` table: the queue of webhook deliveries, shared by every replica.
//! A row is claimed for one attempt with a lease, and kept a day after it ended so that an event
//! reported again (a broker's replay after a reconnect) finds its key taken.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_deliveries")]
pub struct Model {
    /// Sent as `X-Ptyhub-Delivery`, the same on every attempt.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// Deleted with its webhook.
    pub webhook_id: Uuid,
    /// `WebhookEvent::as_str`.
    pub event: String,
    /// What makes the event one: unique per webhook, so that the same event queued twice (by
    /// two replicas, or reported twice) is delivered once.
    pub event_key: String,
    /// The JSON body, exactly as signed and sent.
    pub body: String,
    pub created_at: DateTimeUtc,
    pub attempts: i32,
    /// `DeliveryOutcome::as_str`: `pending` until delivered or out of attempts.
    pub outcome: String,
    /// When a pending delivery is due; when a finished one finished.
    pub next_attempt_at: DateTimeUtc,
    /// Until when the replica that claimed it owns its attempt.
    pub lease_until: Option<DateTimeUtc>,
    /// The claim that holds the lease: only its attempt's result is recorded.
    pub claim: Option<Uuid>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
