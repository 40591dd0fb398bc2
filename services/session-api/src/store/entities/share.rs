//! The `shares` table: share links, each a viewer-only grant of an instance or one session.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "shares")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub instance_id: Uuid,
    /// `None`: every session of the instance.
    pub session_id: Option<Uuid>,
    /// The SHA-256 of the link's token, hex: the token itself is never stored.
    #[sea_orm(unique)]
    pub token_sha256: String,
    pub created_by: String,
    pub created_at: DateTimeUtc,
    pub expires_at: DateTimeUtc,
    pub revoked_at: Option<DateTimeUtc>,
    /// Whether the share sees the session's past (false: only the present screen).
    pub history: bool,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
