//! The `audit_events` table: the audit trail, appended to and never changed; rows past the
//! retention are deleted.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "audit_events")]
pub struct Model {
    /// Increasing in the order of recording: the listing's order and page token.
    #[sea_orm(primary_key)]
    pub id: i64,
    pub at: DateTimeUtc,
    /// `AuditKind::as_str`.
    pub kind: String,
    pub principal: String,
    /// No foreign keys: the trail outlives the instances and sessions it names.
    pub instance_id: Option<Uuid>,
    pub session_id: Option<Uuid>,
    pub client_address: Option<String>,
    pub surface: String,
    /// `controller` or `viewer`.
    pub role: Option<String>,
    pub attachment_id: Option<Uuid>,
    /// A JSON object of strings.
    pub detail: Json,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
