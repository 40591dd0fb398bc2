//! The database: connecting (SQLite file with WAL, or PostgreSQL), migrating, and the helpers
//! that read rows into domain types. The queries live in one file per subject (instances,
//! reservations, session reads and writes, brokers, shares, webhooks), all as methods of [`Store`]. The cap and
//! alias checks run inside transactions that serialise the writers of one instance, so that no
//! count is ever kept in memory.

mod audit;
mod brokers;
pub mod entities;
mod instances;
pub mod migration;
mod reservations;
mod session_reads;
mod session_writes;
mod shares;
mod terminal;
mod webhooks;

pub use audit::{AUDIT_PRUNE_BATCH, REPORTED_SESSIONS_PER_TRANSACTION, ReportedEvent, TAKEN_OVER};
pub use reservations::{Reservation, SessionReservation};
pub use session_writes::{ACTIVITY_ROWS_PER_UPDATE, ActivityUpdate, closed_event};
pub use shares::ShareKey;
pub use terminal::{RecordedTerminal, TerminalReport};
pub use webhooks::{AttemptResult, ClaimedDelivery};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use ptyhub_model::TerminalSize;
use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
use sea_orm::{
    ColumnTrait, ConnectOptions, ConnectionTrait, Database, DatabaseConnection,
    DatabaseTransaction, DbBackend, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
    SqliteTransactionMode, TransactionOptions, TransactionTrait,
};
use uuid::Uuid;

use crate::domain::{CloseReason, ExitStatus, Instance, Session, SessionStatus, Target};
use crate::error::{Error, StartError};
use entities::{instance, session_alias, terminal_session};

/// How long a SQLite writer waits for the write lock before giving up.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// The current time at the precision both databases keep (microseconds), so that a record read
/// back equals the one written.
pub fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

/// The database of session-api.
#[derive(Debug, Clone)]
pub struct Store {
    db: DatabaseConnection,
    /// How many write transactions this store and its clones began: what a test reads to see
    /// what a batch of writes cost.
    write_transactions: Arc<AtomicU64>,
}

impl Store {
    /// Connects to `url`: `sqlite://path?mode=rwc` (WAL, created when missing) or
    /// `postgres://...`.
    pub async fn connect(url: &str) -> Result<Self, StartError> {
        let mut options = ConnectOptions::new(url.to_owned());
        options.sqlx_logging(false);
        if url.starts_with("sqlite:") {
            if url.contains(":memory:") || url.contains("mode=memory") {
                return Err(StartError::InvalidDatabaseUrl(
                    "an in-memory SQLite database is not supported: every pooled connection \
                     would see its own; use a file",
                ));
            }
            // The database is for session-api's user alone: SQLite gives its WAL and shared
            // memory files the main file's mode, so a 0600 main file keeps all three private.
            if let Some(path) = sqlite_path(url) {
                for file in [
                    path.to_owned(),
                    format!("{path}-wal"),
                    format!("{path}-shm"),
                ] {
                    let file = std::path::Path::new(&file);
                    if file == std::path::Path::new(path) || file.exists() {
                        ptyhub_wire::create_private_file(file).map_err(StartError::DatabaseFile)?;
                    }
                }
            }
            options.max_connections(4).map_sqlx_sqlite_opts(|sqlite| {
                sqlite
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal)
                    .busy_timeout(SQLITE_BUSY_TIMEOUT)
                    .foreign_keys(true)
            });
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            options.max_connections(16);
        } else {
            return Err(StartError::InvalidDatabaseUrl(
                "must start with sqlite: or postgres:",
            ));
        }
        let db = Database::connect(options)
            .await
            .map_err(|source| StartError::Connect {
                database: redact_password(url),
                source,
            })?;
        Ok(Self {
            db,
            write_transactions: Arc::default(),
        })
    }

    /// Applies the pending migrations (idempotent).
    pub async fn migrate(&self) -> Result<(), StartError> {
        migration::apply_migrations(&self.db)
            .await
            .map_err(StartError::Migrate)
    }

    /// The connection, for tests and tools that inspect the tables.
    pub fn connection(&self) -> &DatabaseConnection {
        &self.db
    }

    /// How many write transactions this store and its clones have begun, for tests that check
    /// what a batch of writes costs.
    pub fn write_transactions_begun(&self) -> u64 {
        self.write_transactions.load(Ordering::Relaxed)
    }

    /// Closes the pool.
    pub async fn close(self) {
        let _ = self.db.close().await;
    }

    /// A transaction that may write. On SQLite it takes the write lock at `BEGIN IMMEDIATE`,
    /// so that no transaction ever has to upgrade a read lock (which SQLite would refuse with
    /// SQLITE_BUSY instead of waiting) and writers queue on the busy timeout.
    async fn begin_write(&self) -> Result<DatabaseTransaction, Error> {
        let options = TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            ..TransactionOptions::default()
        };
        self.write_transactions.fetch_add(1, Ordering::Relaxed);
        Ok(self.db.begin_with_options(options).await?)
    }
}

fn live_status_names() -> [&'static str; 4] {
    SessionStatus::LIVE.map(SessionStatus::as_str)
}

/// Reads the instance row, locking it for the rest of the transaction on PostgreSQL
/// (`SELECT ... FOR UPDATE`); on SQLite the transaction already holds the write lock.
async fn lock_instance(
    transaction: &DatabaseTransaction,
    instance_id: Uuid,
) -> Result<instance::Model, Error> {
    let mut query = instance::Entity::find_by_id(instance_id);
    if transaction.get_database_backend() == DbBackend::Postgres {
        query = query.lock_exclusive();
    }
    query
        .one(transaction)
        .await?
        .ok_or_else(|| Error::InstanceNotFound(instance_id.to_string()))
}

async fn load_session(db: &impl ConnectionTrait, session_id: Uuid) -> Result<Session, Error> {
    let model = terminal_session::Entity::find_by_id(session_id)
        .one(db)
        .await?
        .ok_or(Error::SessionNotFound(session_id))?;
    let mut sessions = sessions_from_models(db, vec![model]).await?;
    Ok(sessions.remove(0))
}

/// The sessions `session_ids` names that have a record, in no particular order: two reads
/// (the rows, then their aliases) per 500 sessions, however many there are.
async fn load_sessions(
    db: &impl ConnectionTrait,
    session_ids: &[Uuid],
) -> Result<Vec<Session>, Error> {
    let mut models = Vec::with_capacity(session_ids.len());
    for chunk in session_ids.chunks(500) {
        models.extend(
            terminal_session::Entity::find()
                .filter(terminal_session::Column::Id.is_in(chunk.iter().copied()))
                .all(db)
                .await?,
        );
    }
    sessions_from_models(db, models).await
}

async fn sessions_from_models(
    db: &impl ConnectionTrait,
    models: Vec<terminal_session::Model>,
) -> Result<Vec<Session>, Error> {
    let mut aliases: HashMap<Uuid, Vec<String>> = HashMap::new();
    let ids: Vec<Uuid> = models.iter().map(|model| model.id).collect();
    for chunk in ids.chunks(500) {
        let rows = session_alias::Entity::find()
            .filter(session_alias::Column::SessionId.is_in(chunk.iter().copied()))
            .order_by_asc(session_alias::Column::Alias)
            .all(db)
            .await?;
        for row in rows {
            aliases.entry(row.session_id).or_default().push(row.alias);
        }
    }
    models
        .into_iter()
        .map(|model| {
            let held = aliases.remove(&model.id).unwrap_or_default();
            session_from_model(model, held)
        })
        .collect()
}

fn parse_status(text: &str) -> Result<SessionStatus, Error> {
    SessionStatus::parse(text).ok_or_else(|| Error::CorruptRecord(format!("status {text:?}")))
}

fn session_from_model(
    model: terminal_session::Model,
    aliases: Vec<String>,
) -> Result<Session, Error> {
    let close_reason = match model.close_reason.as_deref() {
        Some(text) => Some(
            CloseReason::parse(text)
                .ok_or_else(|| Error::CorruptRecord(format!("close reason {text:?}")))?,
        ),
        None => None,
    };
    let size = TerminalSize::new(non_negative(model.cols), non_negative(model.rows))
        .map_err(|_| Error::CorruptRecord(format!("size {}x{}", model.cols, model.rows)))?;
    Ok(Session {
        id: model.id,
        instance_id: model.instance_id,
        name: model.name,
        status: parse_status(&model.status)?,
        close_reason,
        exit: model.exit_code.map(|code| ExitStatus {
            code,
            signal: model.exit_signal,
        }),
        aliases,
        size,
        broker_id: model.broker_id,
        created_at: model.created_at,
        last_activity_at: model.last_activity_at,
        closed_at: model.closed_at,
        attached_clients: non_negative(model.attached_clients),
        title: model.title,
        last_bell_at: model.last_bell_at,
        terminal: model
            .terminal
            .as_deref()
            .map(terminal::from_json)
            .transpose()?,
        presence: match model.presence.as_deref() {
            Some(json) => serde_json::from_str(json)
                .map_err(|error| Error::CorruptRecord(format!("presence: {error}")))?,
            None => Vec::new(),
        },
        control_mode: model
            .control_mode
            .parse()
            .map_err(|error| Error::CorruptRecord(format!("{error}")))?,
    })
}

fn string_map(value: serde_json::Value, what: &str) -> Result<BTreeMap<String, String>, Error> {
    serde_json::from_value(value).map_err(|error| Error::CorruptRecord(format!("{what}: {error}")))
}

fn instance_from_model(model: instance::Model, live_sessions: u32) -> Result<Instance, Error> {
    let target = match (model.target_kind.as_str(), model.target_container) {
        ("local", _) => Target::Local,
        ("docker", Some(container)) => Target::Docker { container },
        (kind, _) => return Err(Error::CorruptRecord(format!("target kind {kind:?}"))),
    };
    Ok(Instance {
        id: model.id,
        name: model.name,
        target,
        command: serde_json::from_value(model.command)
            .map_err(|error| Error::CorruptRecord(format!("command: {error}")))?,
        env: string_map(model.env, "env")?,
        cwd: model.cwd,
        user: model.run_as_user,
        max_sessions: non_negative(model.max_sessions),
        labels: string_map(model.labels, "labels")?,
        broker_id: model.broker_id,
        created_at: model.created_at,
        live_sessions,
        record: model
            .record
            .map(|mode| {
                mode.parse()
                    .map_err(|error: ptyhub_model::InvalidRecordMode| {
                        Error::CorruptRecord(error.to_string())
                    })
            })
            .transpose()?,
        shell_integration: model.shell_integration,
        // Stored only as registration checked it (1..=3600); anything else reads as never.
        control_grant_timeout: model
            .control_grant_timeout_secs
            .and_then(|seconds| u64::try_from(seconds).ok())
            .filter(|seconds| *seconds > 0)
            .map(Duration::from_secs),
    })
}

/// A stored count or size as unsigned; a negative value (never written) reads as 0.
fn non_negative(value: i32) -> u32 {
    u32::try_from(value).unwrap_or(0)
}

/// The file of a `sqlite://PATH?options` or `sqlite:PATH` URL.
fn sqlite_path(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or(rest);
    (!path.is_empty()).then_some(path)
}

/// `url` with the password of its user info replaced by `***`; unchanged without one. A URL
/// the parser cannot read but that has an `@` (where a password could hide) keeps only its
/// scheme. Errors and the config's `Debug` name the database this way.
pub fn redact_password(url: &str) -> String {
    const MASK: &str = "***";
    match reqwest::Url::parse(url) {
        Ok(parsed) if parsed.password().is_none() => url.to_owned(),
        Ok(mut parsed) => match parsed.set_password(Some(MASK)) {
            Ok(()) => parsed.into(),
            Err(()) => masked_after_scheme(url),
        },
        // Without an `@` there is no user info, so no password, to hide.
        Err(_) if !url.contains('@') => url.to_owned(),
        Err(_) => masked_after_scheme(url),
    }
}

/// Everything after the scheme hidden: for a URL whose password cannot be told apart.
fn masked_after_scheme(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, _)) => format!("{scheme}://***"),
        None => "***".to_owned(),
    }
}
