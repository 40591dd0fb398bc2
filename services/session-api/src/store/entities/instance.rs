//! The `instances` table: targets that terminals run in, and their caps.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "instances")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    #[sea_orm(unique)]
    pub name: String,
    /// `local` or `docker`.
    pub target_kind: String,
    pub target_container: Option<String>,
    /// The argv as a JSON array of strings.
    pub command: Json,
    /// A JSON object of strings.
    pub env: Json,
    pub cwd: String,
    pub run_as_user: String,
    pub max_sessions: i32,
    /// A JSON object of strings.
    pub labels: Json,
    pub broker_id: String,
    /// `off`, `output` or `output+input`; NULL follows the server's default.
    pub record: Option<String>,
    /// Whether new sessions start interactive shells with their integration.
    pub shell_integration: bool,
    /// Seconds a request for control may wait before it is granted; NULL: until answered.
    pub control_grant_timeout_secs: Option<i32>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
