//! The `brokers` table: every pty-broker session-api knows, configured or self-registered.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "brokers")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub endpoint: String,
    pub docker: bool,
    /// From session-api's configuration rather than RegisterBroker.
    pub configured: bool,
    pub up: bool,
    pub last_heartbeat_at: Option<DateTimeUtc>,
    /// The boot id of the broker's last Snapshot.
    pub boot_id: Option<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
