//! The `webhooks` table: an instance's HTTP callbacks, each with the result of its last
//! delivery attempt (so that a listing needs no look at the deliveries).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhooks")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// Deleted with its instance.
    pub instance_id: Uuid,
    pub url: String,
    /// The events it asked for, `WebhookEvent::as_str` joined by commas.
    pub events: String,
    /// The HMAC key of the signatures. Kept as given, since every delivery is signed with it;
    /// never answered.
    pub secret: String,
    pub created_by: String,
    pub created_at: DateTimeUtc,
    /// Events not queued because the webhook had as many undelivered deliveries as it may.
    pub dropped_events: i64,
    pub last_delivery_id: Option<Uuid>,
    pub last_event: Option<String>,
    pub last_attempt_at: Option<DateTimeUtc>,
    pub last_attempts: Option<i32>,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    /// `DeliveryOutcome::as_str` of the last delivery after its last attempt.
    pub last_outcome: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
