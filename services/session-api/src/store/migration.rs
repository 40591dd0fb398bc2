//! The schema, as `sea-orm-migration` migrations that session-api applies at start.
//!
//! Migrations are append-only: a released one is never edited, a change is a new migration.

use sea_orm::{ConnectionTrait, DbBackend, DbErr, TransactionTrait};
use sea_orm_migration::prelude::*;

mod webhooks;

/// The index of a session's audit events by kind and time ([`IndexReportedAuditEvents`]).
pub const REPORTED_AUDIT_EVENTS_INDEX: &str = "idx_audit_events_reported";

/// Every migration of session-api, oldest first.
#[derive(Debug)]
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(CreateTables),
            Box::new(AddSessionTitleAndBell),
            Box::new(AddBrokerCredential),
            Box::new(AddShares),
            Box::new(AddInstanceRecord),
            Box::new(CreateAuditEvents),
            Box::new(AddTerminalActivity),
            Box::new(webhooks::CreateWebhooks),
            Box::new(AddShareHistory),
            Box::new(AddSessionPresence),
            Box::new(AddSessionControlMode),
            Box::new(AddInstanceControlGrantTimeout),
            Box::new(IndexReportedAuditEvents),
        ]
    }
}

/// Applies the pending migrations. On PostgreSQL the whole run holds a transaction-scoped
/// advisory lock, so replicas that start together migrate one after the other.
pub async fn apply_migrations(db: &sea_orm::DatabaseConnection) -> Result<(), DbErr> {
    match db.get_database_backend() {
        DbBackend::Postgres => {
            let transaction = db.begin().await?;
            transaction
                .execute_unprepared("SELECT pg_advisory_xact_lock(7417720253661)")
                .await?;
            Migrator::up(&transaction, None).await?;
            transaction.commit().await
        }
        _ => Migrator::up(db, None).await,
    }
}

#[derive(DeriveIden)]
enum Instances {
    Table,
    Id,
    Name,
    TargetKind,
    TargetContainer,
    Command,
    Env,
    Cwd,
    RunAsUser,
    MaxSessions,
    Labels,
    BrokerId,
    CreatedAt,
    UpdatedAt,
    Record,
    ShellIntegration,
    ControlGrantTimeoutSecs,
}

#[derive(DeriveIden)]
enum TerminalSessions {
    Table,
    Id,
    InstanceId,
    Name,
    Status,
    CloseReason,
    ExitCode,
    ExitSignal,
    Cols,
    Rows,
    BrokerId,
    AttachedClients,
    CreatedAt,
    LastActivityAt,
    ClosedAt,
    UpdatedAt,
    Title,
    LastBellAt,
    Terminal,
    Presence,
    ControlMode,
}

#[derive(DeriveIden)]
enum SessionAliases {
    Table,
    SessionId,
    Alias,
    InstanceId,
    CreatedAt,
    ReleasedAt,
}

#[derive(DeriveIden)]
enum Brokers {
    Table,
    Id,
    Endpoint,
    Docker,
    Configured,
    Up,
    LastHeartbeatAt,
    BootId,
    CreatedAt,
    UpdatedAt,
    CredentialFingerprint,
}

#[derive(DeriveIden)]
enum AuditEvents {
    Table,
    Id,
    At,
    Kind,
    Principal,
    InstanceId,
    SessionId,
    ClientAddress,
    Surface,
    Role,
    AttachmentId,
    Detail,
}

struct CreateTables;

impl MigrationName for CreateTables {
    // Stored in `seaql_migrations`: never rename.
    fn name(&self) -> &str {
        "m20261129_000001_create_tables"
    }
}

fn timestamp(column: impl IntoIden) -> ColumnDef {
    ColumnDef::new(column)
        .timestamp_with_time_zone()
        .not_null()
        .take()
}

#[async_trait::async_trait]
impl MigrationTrait for CreateTables {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Brokers::Table)
                    .col(
                        ColumnDef::new(Brokers::Id)
                            .string()
                            .not_null()
                            .primary_key(),
                    )
                    .col(ColumnDef::new(Brokers::Endpoint).string().not_null())
                    .col(ColumnDef::new(Brokers::Docker).boolean().not_null())
                    .col(ColumnDef::new(Brokers::Configured).boolean().not_null())
                    .col(ColumnDef::new(Brokers::Up).boolean().not_null())
                    .col(ColumnDef::new(Brokers::LastHeartbeatAt).timestamp_with_time_zone())
                    .col(ColumnDef::new(Brokers::BootId).string())
                    .col(timestamp(Brokers::CreatedAt))
                    .col(timestamp(Brokers::UpdatedAt))
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(Instances::Table)
                    .col(
                        ColumnDef::new(Instances::Id)
                            .uuid()
                            .not_null()
                            .primary_key(),
                    )
                    .col(
                        ColumnDef::new(Instances::Name)
                            .string()
                            .not_null()
                            .unique_key(),
                    )
                    .col(ColumnDef::new(Instances::TargetKind).string().not_null())
                    .col(ColumnDef::new(Instances::TargetContainer).string())
                    .col(ColumnDef::new(Instances::Command).json().not_null())
                    .col(ColumnDef::new(Instances::Env).json().not_null())
                    .col(ColumnDef::new(Instances::Cwd).string().not_null())
                    .col(ColumnDef::new(Instances::RunAsUser).string().not_null())
                    .col(ColumnDef::new(Instances::MaxSessions).integer().not_null())
                    .col(ColumnDef::new(Instances::Labels).json().not_null())
                    .col(ColumnDef::new(Instances::BrokerId).string().not_null())
                    .col(timestamp(Instances::CreatedAt))
                    .col(timestamp(Instances::UpdatedAt))
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(TerminalSessions::Table)
                    .col(
                        ColumnDef::new(TerminalSessions::Id)
                            .uuid()
                            .not_null()
                            .primary_key(),
                    )
                    .col(
                        ColumnDef::new(TerminalSessions::InstanceId)
                            .uuid()
                            .not_null(),
                    )
                    .col(ColumnDef::new(TerminalSessions::Name).string().not_null())
                    .col(ColumnDef::new(TerminalSessions::Status).string().not_null())
                    .col(ColumnDef::new(TerminalSessions::CloseReason).string())
                    .col(ColumnDef::new(TerminalSessions::ExitCode).integer())
                    .col(ColumnDef::new(TerminalSessions::ExitSignal).integer())
                    .col(ColumnDef::new(TerminalSessions::Cols).integer().not_null())
                    .col(ColumnDef::new(TerminalSessions::Rows).integer().not_null())
                    .col(
                        ColumnDef::new(TerminalSessions::BrokerId)
                            .string()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(TerminalSessions::AttachedClients)
                            .integer()
                            .not_null(),
                    )
                    .col(timestamp(TerminalSessions::CreatedAt))
                    .col(timestamp(TerminalSessions::LastActivityAt))
                    .col(ColumnDef::new(TerminalSessions::ClosedAt).timestamp_with_time_zone())
                    .col(timestamp(TerminalSessions::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_terminal_sessions_instance")
                            .from(TerminalSessions::Table, TerminalSessions::InstanceId)
                            .to(Instances::Table, Instances::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        // Counting live sessions for the cap, listing an instance's sessions.
        manager
            .create_index(
                Index::create()
                    .name("idx_terminal_sessions_instance_status")
                    .table(TerminalSessions::Table)
                    .col(TerminalSessions::InstanceId)
                    .col(TerminalSessions::Status)
                    .to_owned(),
            )
            .await?;
        // Reconciling a broker's sessions, and load for placement.
        manager
            .create_index(
                Index::create()
                    .name("idx_terminal_sessions_broker_status")
                    .table(TerminalSessions::Table)
                    .col(TerminalSessions::BrokerId)
                    .col(TerminalSessions::Status)
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(SessionAliases::Table)
                    .col(ColumnDef::new(SessionAliases::SessionId).uuid().not_null())
                    .col(ColumnDef::new(SessionAliases::Alias).string().not_null())
                    .col(ColumnDef::new(SessionAliases::InstanceId).uuid().not_null())
                    .col(timestamp(SessionAliases::CreatedAt))
                    .col(ColumnDef::new(SessionAliases::ReleasedAt).timestamp_with_time_zone())
                    .primary_key(
                        Index::create()
                            .col(SessionAliases::SessionId)
                            .col(SessionAliases::Alias),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_session_aliases_session")
                            .from(SessionAliases::Table, SessionAliases::SessionId)
                            .to(TerminalSessions::Table, TerminalSessions::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        // One live holder per instance and alias, whatever the callers race: the backstop of
        // the per-instance serialisation in the store.
        manager
            .create_index(
                Index::create()
                    .name("uq_session_aliases_live_alias")
                    .table(SessionAliases::Table)
                    .col(SessionAliases::InstanceId)
                    .col(SessionAliases::Alias)
                    .unique()
                    .and_where(Expr::col(SessionAliases::ReleasedAt).is_null())
                    .to_owned(),
            )
            .await?;
        // Alias lookups that include released aliases (history).
        manager
            .create_index(
                Index::create()
                    .name("idx_session_aliases_instance_alias")
                    .table(SessionAliases::Table)
                    .col(SessionAliases::InstanceId)
                    .col(SessionAliases::Alias)
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            SessionAliases::Table.into_iden(),
            TerminalSessions::Table.into_iden(),
            Instances::Table.into_iden(),
            Brokers::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}

/// The window title and the last bell on the session record. Both nullable,
/// so existing rows need no value and PostgreSQL adds them without rewriting the table.
struct AddSessionTitleAndBell;

impl MigrationName for AddSessionTitleAndBell {
    // Stored in `seaql_migrations`: never rename.
    fn name(&self) -> &str {
        "m20261201_000001_add_session_title_and_bell"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for AddSessionTitleAndBell {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite's ALTER TABLE adds one at a time.
        manager
            .alter_table(
                Table::alter()
                    .table(TerminalSessions::Table)
                    .add_column(ColumnDef::new(TerminalSessions::Title).text().null())
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(TerminalSessions::Table)
                    .add_column(
                        ColumnDef::new(TerminalSessions::LastBellAt)
                            .timestamp_with_time_zone()
                            .null(),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [TerminalSessions::LastBellAt, TerminalSessions::Title] {
            manager
                .alter_table(
                    Table::alter()
                        .table(TerminalSessions::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}

/// The credential a broker registered with: nullable, so that brokers registered
/// before it are bound to the credential they next register with.
///
/// No longer read or written: session-api's configuration binds each broker's credential to its
/// id (`broker-id=token`), so a first registration binds nothing. The column stays, nullable, so
/// that replicas of an earlier version, which still write it, keep working through a rolling
/// upgrade.
struct AddBrokerCredential;

impl MigrationName for AddBrokerCredential {
    // Stored in `seaql_migrations`: never rename.
    fn name(&self) -> &str {
        "m20261215_000001_add_broker_credential"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for AddBrokerCredential {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Brokers::Table)
                    .add_column(ColumnDef::new(Brokers::CredentialFingerprint).text().null())
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Brokers::Table)
                    .drop_column(Brokers::CredentialFingerprint)
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum Shares {
    Table,
    Id,
    InstanceId,
    SessionId,
    TokenSha256,
    CreatedBy,
    CreatedAt,
    ExpiresAt,
    RevokedAt,
    History,
}

/// Share links: viewer-only grants of an instance or a session, ended with their
/// instance.
struct AddShares;

impl MigrationName for AddShares {
    // Stored in `seaql_migrations`: never rename.
    fn name(&self) -> &str {
        "m20261216_000001_add_shares"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for AddShares {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Shares::Table)
                    .col(ColumnDef::new(Shares::Id).uuid().not_null().primary_key())
                    .col(ColumnDef::new(Shares::InstanceId).uuid().not_null())
                    .col(ColumnDef::new(Shares::SessionId).uuid())
                    .col(
                        ColumnDef::new(Shares::TokenSha256)
                            .string()
                            .not_null()
                            .unique_key(),
                    )
                    .col(ColumnDef::new(Shares::CreatedBy).string().not_null())
                    .col(timestamp(Shares::CreatedAt))
                    .col(timestamp(Shares::ExpiresAt))
                    .col(ColumnDef::new(Shares::RevokedAt).timestamp_with_time_zone())
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_shares_instance")
                            .from(Shares::Table, Shares::InstanceId)
                            .to(Instances::Table, Instances::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_shares_instance")
                    .table(Shares::Table)
                    .col(Shares::InstanceId)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(Shares::Table).to_owned())
            .await
    }
}

/// The per-instance recording setting. Nullable: existing instances follow the
/// server's default.
struct AddInstanceRecord;

impl MigrationName for AddInstanceRecord {
    // Stored in `seaql_migrations`: never rename.
    fn name(&self) -> &str {
        "m20261220_000001_add_instance_record"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for AddInstanceRecord {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Instances::Table)
                    .add_column(ColumnDef::new(Instances::Record).string().null())
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Instances::Table)
                    .drop_column(Instances::Record)
                    .to_owned(),
            )
            .await
    }
}

/// The audit trail: one row per event, never updated. No foreign keys, so pruning a
/// closed session or deleting an instance leaves its history in place.
struct CreateAuditEvents;

impl MigrationName for CreateAuditEvents {
    // Stored in `seaql_migrations`: never rename.
    fn name(&self) -> &str {
        "m20261221_000001_create_audit_events"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for CreateAuditEvents {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(AuditEvents::Table)
                    .col(
                        ColumnDef::new(AuditEvents::Id)
                            .big_integer()
                            .not_null()
                            .auto_increment()
                            .primary_key(),
                    )
                    .col(timestamp(AuditEvents::At))
                    .col(ColumnDef::new(AuditEvents::Kind).string().not_null())
                    .col(ColumnDef::new(AuditEvents::Principal).string().not_null())
                    .col(ColumnDef::new(AuditEvents::InstanceId).uuid().null())
                    .col(ColumnDef::new(AuditEvents::SessionId).uuid().null())
                    .col(ColumnDef::new(AuditEvents::ClientAddress).string().null())
                    .col(ColumnDef::new(AuditEvents::Surface).string().not_null())
                    .col(ColumnDef::new(AuditEvents::Role).string().null())
                    .col(ColumnDef::new(AuditEvents::AttachmentId).uuid().null())
                    .col(ColumnDef::new(AuditEvents::Detail).json().not_null())
                    .to_owned(),
            )
            .await?;
        // The listing's filters: by instance, by session, by principal, each in id order.
        for (name, column) in [
            ("idx_audit_events_instance", AuditEvents::InstanceId),
            ("idx_audit_events_session", AuditEvents::SessionId),
            ("idx_audit_events_principal", AuditEvents::Principal),
            ("idx_audit_events_attachment", AuditEvents::AttachmentId),
        ] {
            manager
                .create_index(
                    Index::create()
                        .name(name)
                        .table(AuditEvents::Table)
                        .col(column)
                        .col(AuditEvents::Id)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .create_index(
                Index::create()
                    .name("idx_audit_events_at")
                    .table(AuditEvents::Table)
                    .col(AuditEvents::At)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(AuditEvents::Table).to_owned())
            .await
    }
}

/// What a session's terminal is doing, as its broker last reported it (a JSON object, NULL
/// until reported), and the per-instance shell-integration setting (on for existing
/// instances, as for new ones).
struct AddTerminalActivity;

impl MigrationName for AddTerminalActivity {
    // Stored in `seaql_migrations`: never rename.
    fn name(&self) -> &str {
        "m20261205_000001_add_terminal_activity"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for AddTerminalActivity {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(TerminalSessions::Table)
                    .add_column(ColumnDef::new(TerminalSessions::Terminal).text().null())
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Instances::Table)
                    .add_column(
                        ColumnDef::new(Instances::ShellIntegration)
                            .boolean()
                            .not_null()
                            .default(true),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Instances::Table)
                    .drop_column(Instances::ShellIntegration)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(TerminalSessions::Table)
                    .drop_column(TerminalSessions::Terminal)
                    .to_owned(),
            )
            .await
    }
}

/// Whether a share sees the session's past. Existing shares see only the present, as every
/// share does now unless its creator asks: none of their creators chose the past.
struct AddShareHistory;

impl MigrationName for AddShareHistory {
    // Stored in `seaql_migrations`: never rename.
    fn name(&self) -> &str {
        "m20261205_000004_add_share_history"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for AddShareHistory {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Shares::Table)
                    .add_column(
                        ColumnDef::new(Shares::History)
                            .boolean()
                            .not_null()
                            .default(false),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Shares::Table)
                    .drop_column(Shares::History)
                    .to_owned(),
            )
            .await
    }
}

/// Who is attached to a session, as its broker last reported it (a JSON array of attendees, NULL
/// until reported).
struct AddSessionPresence;

impl MigrationName for AddSessionPresence {
    // Stored in `seaql_migrations`: never rename.
    fn name(&self) -> &str {
        "m20261205_000005_add_session_presence"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for AddSessionPresence {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(TerminalSessions::Table)
                    .add_column(ColumnDef::new(TerminalSessions::Presence).text().null())
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(TerminalSessions::Table)
                    .drop_column(TerminalSessions::Presence)
                    .to_owned(),
            )
            .await
    }
}

/// Who may type into a session: `exclusive` or `shared`. Every session before it had one
/// controller at a time, so existing rows are `exclusive`.
struct AddSessionControlMode;

impl MigrationName for AddSessionControlMode {
    // Stored in `seaql_migrations`: never rename.
    fn name(&self) -> &str {
        "m20261205_000006_add_session_control_mode"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for AddSessionControlMode {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(TerminalSessions::Table)
                    .add_column(
                        ColumnDef::new(TerminalSessions::ControlMode)
                            .string()
                            .not_null()
                            .default("exclusive"),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(TerminalSessions::Table)
                    .drop_column(TerminalSessions::ControlMode)
                    .to_owned(),
            )
            .await
    }
}

/// How long a request for control to an instance's sessions may wait before it is granted.
/// Every instance before it let requests wait for their answer, so existing rows are NULL.
struct AddInstanceControlGrantTimeout;

impl MigrationName for AddInstanceControlGrantTimeout {
    // Stored in `seaql_migrations`: never rename.
    fn name(&self) -> &str {
        "m20261205_000007_add_instance_control_grant_timeout"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for AddInstanceControlGrantTimeout {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Instances::Table)
                    .add_column(
                        ColumnDef::new(Instances::ControlGrantTimeoutSecs)
                            .integer()
                            .null(),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Instances::Table)
                    .drop_column(Instances::ControlGrantTimeoutSecs)
                    .to_owned(),
            )
            .await
    }
}

/// The lookup that tells whether a report a broker sent (an input window, an answer to a request
/// for control) is recorded already: a session's events of one kind since a time. Without it
/// the lookup walked every event of the session.
struct IndexReportedAuditEvents;

impl MigrationName for IndexReportedAuditEvents {
    // Stored in `seaql_migrations`: never rename.
    fn name(&self) -> &str {
        "m20261205_000008_index_reported_audit_events"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for IndexReportedAuditEvents {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name(REPORTED_AUDIT_EVENTS_INDEX)
                    .table(AuditEvents::Table)
                    .col(AuditEvents::SessionId)
                    .col(AuditEvents::Kind)
                    .col(AuditEvents::At)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name(REPORTED_AUDIT_EVENTS_INDEX)
                    .table(AuditEvents::Table)
                    .to_owned(),
            )
            .await
    }
}
