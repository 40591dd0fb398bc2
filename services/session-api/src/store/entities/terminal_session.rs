//! The `terminal_sessions` table: one row per PTY session, kept after the process is gone.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "terminal_sessions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub instance_id: Uuid,
    pub name: String,
    /// `starting`, `active`, `resetting`, `exited` or `closed`.
    pub status: String,
    pub close_reason: Option<String>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub cols: i32,
    pub rows: i32,
    pub broker_id: String,
    pub attached_clients: i32,
    pub created_at: DateTimeUtc,
    pub last_activity_at: DateTimeUtc,
    pub closed_at: Option<DateTimeUtc>,
    pub updated_at: DateTimeUtc,
    /// The window title as the broker last reported it, at most 1024 characters; `NULL` for
    /// none.
    #[sea_orm(column_type = "Text", nullable)]
    pub title: Option<String>,
    /// When the program last rang the bell, as the broker last reported it.
    pub last_bell_at: Option<DateTimeUtc>,
    /// What the terminal is doing as the broker last reported it, a JSON object
    /// (`store/terminal.rs`); `NULL` until reported.
    #[sea_orm(column_type = "Text", nullable)]
    pub terminal: Option<String>,
    /// Who is attached, as the broker last reported it: a JSON array of attendees
    /// (`ptyhub_model::Attendee`'s form); `NULL` until reported.
    #[sea_orm(column_type = "Text", nullable)]
    pub presence: Option<String>,
    /// Who may type: `exclusive` or `shared` (`ptyhub_model::ControlMode`'s spelling).
    pub control_mode: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
