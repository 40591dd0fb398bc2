//! The `session_aliases` table: the names a session answers to. A row is live until its
//! session stops being live (`released_at` set); a partial unique index keeps one live holder
//! per instance and alias.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "session_aliases")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub session_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub alias: String,
    pub instance_id: Uuid,
    pub created_at: DateTimeUtc,
    pub released_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
