//! The database: connecting (SQLite file with WAL, or PostgreSQL), migrating, and every query
//! session-api makes, in domain types. The cap and alias checks live here, inside transactions
//! that serialise the writers of one instance, so that no count is ever kept in memory.

pub mod entities;
pub mod migration;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use ptyhub_wire::TerminalSize;
use sea_orm::sea_query::{Expr, ExprTrait, OnConflict};
use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectOptions, ConnectionTrait, Database, DatabaseConnection,
    DatabaseTransaction, DbBackend, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
    SqliteTransactionMode, TransactionOptions, TransactionTrait,
};
use uuid::Uuid;

use crate::domain::{
    Alias, Broker, CloseReason, ExitStatus, Instance, NewInstance, Session, SessionName,
    SessionStatus, Target, smallest_free_session_number,
};
use crate::error::{Error, StartError};
use entities::{broker, instance, session_alias, terminal_session};

/// How long a SQLite writer waits for the write lock before giving up.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// The current time at the precision both databases keep (microseconds), so that a record read
/// back equals the one written.
pub fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

/// A new session to reserve a slot for.
#[derive(Debug, Clone)]
pub struct SessionReservation {
    pub instance_id: Uuid,
    /// `None` gives `Session N`.
    pub name: Option<SessionName>,
    pub aliases: Vec<Alias>,
    pub size: TerminalSize,
    /// When true, a live session that already holds one of the aliases is returned instead of
    /// an [`Error::AliasTaken`] (resolve-or-create).
    pub reuse_alias_holder: bool,
}

/// What [`Store::reserve_session`] did.
#[derive(Debug, Clone)]
pub enum Reservation {
    /// A new row in `starting`; the caller spawns its process.
    Created {
        instance: Instance,
        session: Session,
    },
    /// A live session already held the alias.
    Existing {
        instance: Instance,
        session: Session,
    },
}

/// Batched lifecycle facts about one session, written together.
#[derive(Debug, Clone, Copy, Default)]
pub struct ActivityUpdate {
    pub last_activity_at: Option<DateTime<Utc>>,
    pub attached_clients: Option<u32>,
}

/// The database of session-api.
#[derive(Debug, Clone)]
pub struct Store {
    db: DatabaseConnection,
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
            .map_err(StartError::Connect)?;
        Ok(Self { db })
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
        Ok(self.db.begin_with_options(options).await?)
    }

    // ---- instances ----------------------------------------------------------------------

    /// Stores a new instance on `broker_id`.
    pub async fn insert_instance(
        &self,
        new: &NewInstance,
        broker_id: &str,
    ) -> Result<Instance, Error> {
        let transaction = self.begin_write().await?;
        let taken = instance::Entity::find()
            .filter(instance::Column::Name.eq(new.name.as_str()))
            .one(&transaction)
            .await?;
        if taken.is_some() {
            return Err(Error::InstanceNameTaken(new.name.clone()));
        }
        let at = now();
        let (target_kind, target_container) = match &new.target {
            Target::Local => ("local", None),
            Target::Docker { container } => ("docker", Some(container.clone())),
        };
        let model = instance::Model {
            id: Uuid::new_v4(),
            name: new.name.clone(),
            target_kind: target_kind.to_owned(),
            target_container,
            command: serde_json::json!(new.command),
            env: serde_json::json!(new.env),
            cwd: new.cwd.clone(),
            run_as_user: new.user.clone(),
            max_sessions: new.max_sessions as i32,
            labels: serde_json::json!(new.labels),
            broker_id: broker_id.to_owned(),
            created_at: at,
            updated_at: at,
        };
        instance::Entity::insert(instance::ActiveModel::from(model.clone()))
            .exec_without_returning(&transaction)
            .await?;
        transaction.commit().await?;
        instance_from_model(model, 0)
    }

    /// The instance with this id or name.
    pub async fn find_instance(&self, id_or_name: &str) -> Result<Instance, Error> {
        let model = find_instance_model(&self.db, id_or_name).await?;
        let live = self.live_session_counts(Some(model.id)).await?;
        let count = live.get(&model.id).copied().unwrap_or(0);
        instance_from_model(model, count)
    }

    /// Every instance, by name.
    pub async fn list_instances(&self) -> Result<Vec<Instance>, Error> {
        let models = instance::Entity::find()
            .order_by_asc(instance::Column::Name)
            .all(&self.db)
            .await?;
        let live = self.live_session_counts(None).await?;
        models
            .into_iter()
            .map(|model| {
                let count = live.get(&model.id).copied().unwrap_or(0);
                instance_from_model(model, count)
            })
            .collect()
    }

    async fn live_session_counts(
        &self,
        instance_id: Option<Uuid>,
    ) -> Result<HashMap<Uuid, u32>, Error> {
        let mut query = terminal_session::Entity::find()
            .select_only()
            .column(terminal_session::Column::InstanceId)
            .column_as(terminal_session::Column::Id.count(), "live")
            .filter(terminal_session::Column::Status.is_in(live_status_names()))
            .group_by(terminal_session::Column::InstanceId);
        if let Some(instance_id) = instance_id {
            query = query.filter(terminal_session::Column::InstanceId.eq(instance_id));
        }
        let rows: Vec<(Uuid, i64)> = query.into_tuple().all(&self.db).await?;
        Ok(rows
            .into_iter()
            .map(|(id, count)| (id, count as u32))
            .collect())
    }

    /// Closes the instance's sessions (`instance_deleted`) and removes it with its records.
    /// Returns the sessions that were not closed yet, as closed, so the caller can kill their
    /// processes and tell watchers.
    pub async fn delete_instance(&self, instance_id: Uuid) -> Result<Vec<Session>, Error> {
        let transaction = self.begin_write().await?;
        lock_instance(&transaction, instance_id).await?;
        let open = terminal_session::Entity::find()
            .filter(terminal_session::Column::InstanceId.eq(instance_id))
            .filter(terminal_session::Column::Status.ne(SessionStatus::Closed.as_str()))
            .all(&transaction)
            .await?;
        let mut closed = sessions_from_models(&transaction, open).await?;
        let at = now();
        for session in &mut closed {
            session.status = SessionStatus::Closed;
            session.close_reason = Some(CloseReason::InstanceDeleted);
            session.closed_at = Some(at);
        }
        instance::Entity::delete_by_id(instance_id)
            .exec(&transaction)
            .await?;
        transaction.commit().await?;
        Ok(closed)
    }

    // ---- sessions: the cap and aliases --------------------------------------------------

    /// Reserves a slot: in one transaction serialised per instance (a row lock on the instance
    /// on PostgreSQL, the database write lock on SQLite), checks the aliases and the cap and
    /// inserts the session in `starting` with its aliases. Nothing is written on an error.
    pub async fn reserve_session(
        &self,
        reservation: &SessionReservation,
    ) -> Result<Reservation, Error> {
        let transaction = self.begin_write().await?;
        let instance_model = lock_instance(&transaction, reservation.instance_id).await?;

        for alias in &reservation.aliases {
            if let Some(holder) =
                live_alias_holder(&transaction, reservation.instance_id, &alias.to_text()).await?
            {
                if !reservation.reuse_alias_holder {
                    return Err(Error::AliasTaken {
                        alias: alias.to_text(),
                        session_id: holder,
                    });
                }
                let session = load_session(&transaction, holder).await?;
                let live = live_names(&transaction, reservation.instance_id).await?;
                let instance = instance_from_model(instance_model, live.len() as u32)?;
                transaction.commit().await?;
                return Ok(Reservation::Existing { instance, session });
            }
        }

        let live = live_names(&transaction, reservation.instance_id).await?;
        let max_sessions = non_negative(instance_model.max_sessions);
        if live.len() as u32 >= max_sessions {
            return Err(Error::CapReached(max_sessions));
        }
        let name = match &reservation.name {
            Some(name) => name.as_str().to_owned(),
            None => SessionName::numbered(smallest_free_session_number(
                live.iter().map(String::as_str),
            ))
            .as_str()
            .to_owned(),
        };

        let at = now();
        let model = terminal_session::Model {
            id: Uuid::new_v4(),
            instance_id: reservation.instance_id,
            name,
            status: SessionStatus::Starting.as_str().to_owned(),
            close_reason: None,
            exit_code: None,
            exit_signal: None,
            cols: i32::from(reservation.size.cols()),
            rows: i32::from(reservation.size.rows()),
            broker_id: instance_model.broker_id.clone(),
            attached_clients: 0,
            created_at: at,
            last_activity_at: at,
            closed_at: None,
            updated_at: at,
        };
        terminal_session::Entity::insert(terminal_session::ActiveModel::from(model.clone()))
            .exec_without_returning(&transaction)
            .await?;
        let mut alias_texts: Vec<String> = reservation.aliases.iter().map(Alias::to_text).collect();
        alias_texts.sort();
        alias_texts.dedup();
        for alias in &alias_texts {
            session_alias::Entity::insert(session_alias::ActiveModel {
                session_id: Set(model.id),
                alias: Set(alias.clone()),
                instance_id: Set(reservation.instance_id),
                created_at: Set(at),
                released_at: Set(None),
            })
            .exec_without_returning(&transaction)
            .await?;
        }
        let session = session_from_model(model, alias_texts)?;
        let instance = instance_from_model(instance_model, live.len() as u32 + 1)?;
        transaction.commit().await?;
        Ok(Reservation::Created { instance, session })
    }

    /// The live session of `instance_id` that holds `alias`.
    pub async fn find_live_session_by_alias(
        &self,
        instance_id: Uuid,
        alias: &Alias,
    ) -> Result<Option<Session>, Error> {
        match live_alias_holder(&self.db, instance_id, &alias.to_text()).await? {
            Some(session_id) => Ok(Some(load_session(&self.db, session_id).await?)),
            None => Ok(None),
        }
    }

    // ---- sessions: reads ----------------------------------------------------------------

    /// The session `session_id` of `instance_id`; another instance's session is not found.
    pub async fn get_session(&self, instance_id: Uuid, session_id: Uuid) -> Result<Session, Error> {
        let session = load_session(&self.db, session_id).await?;
        if session.instance_id != instance_id {
            return Err(Error::SessionNotFound(session_id));
        }
        Ok(session)
    }

    /// The session `session_id`, of any instance, if it exists.
    pub async fn find_session(&self, session_id: Uuid) -> Result<Option<Session>, Error> {
        match load_session(&self.db, session_id).await {
            Ok(session) => Ok(Some(session)),
            Err(Error::SessionNotFound(_)) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// The instance's sessions, oldest first: those not closed, or all with `include_closed`.
    pub async fn list_sessions(
        &self,
        instance_id: Uuid,
        include_closed: bool,
    ) -> Result<Vec<Session>, Error> {
        let mut query = terminal_session::Entity::find()
            .filter(terminal_session::Column::InstanceId.eq(instance_id))
            .order_by_asc(terminal_session::Column::CreatedAt)
            .order_by_asc(terminal_session::Column::Id);
        if !include_closed {
            query =
                query.filter(terminal_session::Column::Status.ne(SessionStatus::Closed.as_str()));
        }
        let models = query.all(&self.db).await?;
        sessions_from_models(&self.db, models).await
    }

    /// The sessions hosted by `broker_id` that are not closed.
    pub async fn open_sessions_on_broker(&self, broker_id: &str) -> Result<Vec<Session>, Error> {
        let models = terminal_session::Entity::find()
            .filter(terminal_session::Column::BrokerId.eq(broker_id))
            .filter(terminal_session::Column::Status.ne(SessionStatus::Closed.as_str()))
            .all(&self.db)
            .await?;
        sessions_from_models(&self.db, models).await
    }

    /// The statuses of the sessions among `ids` that exist.
    pub async fn session_statuses(
        &self,
        ids: &[Uuid],
    ) -> Result<HashMap<Uuid, SessionStatus>, Error> {
        let mut statuses = HashMap::new();
        for chunk in ids.chunks(500) {
            let rows: Vec<(Uuid, String)> = terminal_session::Entity::find()
                .select_only()
                .column(terminal_session::Column::Id)
                .column(terminal_session::Column::Status)
                .filter(terminal_session::Column::Id.is_in(chunk.iter().copied()))
                .into_tuple()
                .all(&self.db)
                .await?;
            for (id, status) in rows {
                statuses.insert(id, parse_status(&status)?);
            }
        }
        Ok(statuses)
    }

    // ---- sessions: writes ---------------------------------------------------------------

    /// `starting` → `active` once the broker has spawned the process. `None` when the session
    /// is no longer starting (closed meanwhile, for example by its instance's deletion).
    pub async fn mark_session_active(&self, session_id: Uuid) -> Result<Option<Session>, Error> {
        self.transition(
            session_id,
            &[SessionStatus::Starting],
            SessionStatus::Active,
        )
        .await
    }

    /// `active` → `resetting`.
    pub async fn mark_session_resetting(&self, session_id: Uuid) -> Result<Option<Session>, Error> {
        self.transition(
            session_id,
            &[SessionStatus::Active, SessionStatus::Exited],
            SessionStatus::Resetting,
        )
        .await
    }

    /// `resetting` → `exited`, when a reset of an exited session failed and its old process
    /// status stands.
    pub async fn mark_session_exited_again(
        &self,
        session_id: Uuid,
    ) -> Result<Option<Session>, Error> {
        self.transition(
            session_id,
            &[SessionStatus::Resetting],
            SessionStatus::Exited,
        )
        .await
    }

    /// `resetting` (or `starting`) → `active`, when the broker reports the process running.
    pub async fn mark_session_running(&self, session_id: Uuid) -> Result<Option<Session>, Error> {
        self.transition(
            session_id,
            &[SessionStatus::Resetting, SessionStatus::Starting],
            SessionStatus::Active,
        )
        .await
    }

    async fn transition(
        &self,
        session_id: Uuid,
        from: &[SessionStatus],
        to: SessionStatus,
    ) -> Result<Option<Session>, Error> {
        let updated = terminal_session::Entity::update_many()
            .col_expr(terminal_session::Column::Status, Expr::value(to.as_str()))
            .col_expr(terminal_session::Column::UpdatedAt, Expr::value(now()))
            .filter(terminal_session::Column::Id.eq(session_id))
            .filter(terminal_session::Column::Status.is_in(from.iter().map(|s| s.as_str())))
            .exec(&self.db)
            .await?;
        if updated.rows_affected == 0 {
            return Ok(None);
        }
        Ok(Some(load_session(&self.db, session_id).await?))
    }

    /// Renames a session that is not closed.
    pub async fn rename_session(
        &self,
        instance_id: Uuid,
        session_id: Uuid,
        name: &SessionName,
    ) -> Result<Session, Error> {
        let current = self.get_session(instance_id, session_id).await?;
        let updated = terminal_session::Entity::update_many()
            .col_expr(terminal_session::Column::Name, Expr::value(name.as_str()))
            .col_expr(terminal_session::Column::UpdatedAt, Expr::value(now()))
            .filter(terminal_session::Column::Id.eq(session_id))
            .filter(terminal_session::Column::Status.ne(SessionStatus::Closed.as_str()))
            .exec(&self.db)
            .await?;
        if updated.rows_affected == 0 {
            return Err(Error::SessionNotLive {
                session_id,
                status: current.status.to_string(),
            });
        }
        load_session(&self.db, session_id).await
    }

    /// Closes a session that is not closed yet, releasing its aliases. `None` when it was
    /// already closed (or does not exist).
    pub async fn close_session(
        &self,
        session_id: Uuid,
        reason: CloseReason,
    ) -> Result<Option<Session>, Error> {
        let transaction = self.begin_write().await?;
        let at = now();
        let updated = terminal_session::Entity::update_many()
            .col_expr(
                terminal_session::Column::Status,
                Expr::value(SessionStatus::Closed.as_str()),
            )
            .col_expr(
                terminal_session::Column::CloseReason,
                Expr::value(reason.as_str()),
            )
            .col_expr(terminal_session::Column::ClosedAt, Expr::value(at))
            .col_expr(terminal_session::Column::UpdatedAt, Expr::value(at))
            .filter(terminal_session::Column::Id.eq(session_id))
            .filter(terminal_session::Column::Status.ne(SessionStatus::Closed.as_str()))
            .exec(&transaction)
            .await?;
        if updated.rows_affected == 0 {
            return Ok(None);
        }
        release_aliases(&transaction, session_id, at).await?;
        let session = load_session(&transaction, session_id).await?;
        transaction.commit().await?;
        Ok(Some(session))
    }

    /// Records how the process ended: a running session becomes `exited` (keeping its slot and
    /// aliases until it is closed); a session already exited or closed keeps its status but
    /// gains the exit status. `None` when nothing changed.
    pub async fn record_exit(
        &self,
        session_id: Uuid,
        exit: ExitStatus,
    ) -> Result<Option<Session>, Error> {
        let transaction = self.begin_write().await?;
        let at = now();
        let exited = terminal_session::Entity::update_many()
            .col_expr(
                terminal_session::Column::Status,
                Expr::value(SessionStatus::Exited.as_str()),
            )
            .col_expr(terminal_session::Column::ExitCode, Expr::value(exit.code))
            .col_expr(
                terminal_session::Column::ExitSignal,
                Expr::value(exit.signal),
            )
            .col_expr(terminal_session::Column::UpdatedAt, Expr::value(at))
            .filter(terminal_session::Column::Id.eq(session_id))
            .filter(terminal_session::Column::Status.is_in([
                SessionStatus::Starting.as_str(),
                SessionStatus::Active.as_str(),
                SessionStatus::Resetting.as_str(),
            ]))
            .exec(&transaction)
            .await?;
        let changed = if exited.rows_affected > 0 {
            true
        } else {
            let filled = terminal_session::Entity::update_many()
                .col_expr(terminal_session::Column::ExitCode, Expr::value(exit.code))
                .col_expr(
                    terminal_session::Column::ExitSignal,
                    Expr::value(exit.signal),
                )
                .col_expr(terminal_session::Column::UpdatedAt, Expr::value(at))
                .filter(terminal_session::Column::Id.eq(session_id))
                .filter(terminal_session::Column::ExitCode.is_null())
                .exec(&transaction)
                .await?;
            filled.rows_affected > 0
        };
        if !changed {
            return Ok(None);
        }
        let session = load_session(&transaction, session_id).await?;
        transaction.commit().await?;
        Ok(Some(session))
    }

    /// Writes a batch of activity and attachment updates in one transaction. Returns the
    /// sessions whose attachment count changed.
    ///
    /// Every replica writes the batches of every broker it follows, so two replicas update the
    /// same rows at once: rows are locked in id order, so that the batches never deadlock each
    /// other, and a deadlock with some other transaction is retried.
    pub async fn record_activity(
        &self,
        updates: &HashMap<Uuid, ActivityUpdate>,
    ) -> Result<Vec<Session>, Error> {
        let mut ordered: Vec<(&Uuid, &ActivityUpdate)> = updates.iter().collect();
        ordered.sort_unstable_by_key(|(session_id, _)| **session_id);
        let mut attempt = 1;
        loop {
            match self.record_activity_once(&ordered).await {
                Err(Error::Database(error)) if attempt < 3 && is_deadlock(&error) => {
                    tracing::debug!(attempt, "activity batch deadlocked: retrying");
                    attempt += 1;
                }
                outcome => return outcome,
            }
        }
    }

    async fn record_activity_once(
        &self,
        updates: &[(&Uuid, &ActivityUpdate)],
    ) -> Result<Vec<Session>, Error> {
        if updates.is_empty() {
            return Ok(Vec::new());
        }
        let transaction = self.begin_write().await?;
        let mut attachment_changes = Vec::new();
        for &(session_id, update) in updates {
            if let Some(at) = update.last_activity_at {
                terminal_session::Entity::update_many()
                    .col_expr(
                        terminal_session::Column::LastActivityAt,
                        Expr::value(at.trunc_subsecs(6)),
                    )
                    .filter(terminal_session::Column::Id.eq(*session_id))
                    .filter(terminal_session::Column::LastActivityAt.lt(at.trunc_subsecs(6)))
                    .exec(&transaction)
                    .await?;
            }
            if let Some(attached) = update.attached_clients {
                let changed = terminal_session::Entity::update_many()
                    .col_expr(
                        terminal_session::Column::AttachedClients,
                        Expr::value(attached as i32),
                    )
                    .filter(terminal_session::Column::Id.eq(*session_id))
                    .filter(terminal_session::Column::AttachedClients.ne(attached as i32))
                    .exec(&transaction)
                    .await?;
                if changed.rows_affected > 0 {
                    attachment_changes.push(*session_id);
                }
            }
        }
        let mut sessions = Vec::new();
        for session_id in attachment_changes {
            sessions.push(load_session(&transaction, session_id).await?);
        }
        transaction.commit().await?;
        Ok(sessions)
    }

    // ---- brokers ------------------------------------------------------------------------

    /// Records a broker from session-api's configuration. It is not up until a watcher has
    /// reached it. Configured brokers are assumed to support Docker targets.
    pub async fn upsert_configured_broker(&self, id: &str, endpoint: &str) -> Result<(), Error> {
        let at = now();
        broker::Entity::insert(broker::ActiveModel {
            id: Set(id.to_owned()),
            endpoint: Set(endpoint.to_owned()),
            docker: Set(true),
            configured: Set(true),
            up: Set(false),
            last_heartbeat_at: Set(None),
            boot_id: Set(None),
            created_at: Set(at),
            updated_at: Set(at),
        })
        .on_conflict(
            OnConflict::column(broker::Column::Id)
                .update_columns([
                    broker::Column::Endpoint,
                    broker::Column::Configured,
                    broker::Column::UpdatedAt,
                ])
                .to_owned(),
        )
        .exec_without_returning(&self.db)
        .await?;
        Ok(())
    }

    /// A broker registering itself: stored (or updated) and up.
    pub async fn register_broker(
        &self,
        id: &str,
        endpoint: &str,
        docker: bool,
    ) -> Result<Broker, Error> {
        let at = now();
        broker::Entity::insert(broker::ActiveModel {
            id: Set(id.to_owned()),
            endpoint: Set(endpoint.to_owned()),
            docker: Set(docker),
            configured: Set(false),
            up: Set(true),
            last_heartbeat_at: Set(Some(at)),
            boot_id: Set(None),
            created_at: Set(at),
            updated_at: Set(at),
        })
        .on_conflict(
            OnConflict::column(broker::Column::Id)
                .update_columns([
                    broker::Column::Endpoint,
                    broker::Column::Docker,
                    broker::Column::Up,
                    broker::Column::LastHeartbeatAt,
                    broker::Column::UpdatedAt,
                ])
                .to_owned(),
        )
        .exec_without_returning(&self.db)
        .await?;
        self.get_broker(id).await
    }

    /// A heartbeat (from the broker, or a watcher that has a live stream to it): the broker is
    /// up. [`Error::BrokerNotFound`] for a broker that never registered.
    pub async fn record_heartbeat(&self, id: &str) -> Result<(), Error> {
        let at = now();
        let updated = broker::Entity::update_many()
            .col_expr(broker::Column::Up, Expr::value(true))
            .col_expr(broker::Column::LastHeartbeatAt, Expr::value(at))
            .col_expr(broker::Column::UpdatedAt, Expr::value(at))
            .filter(broker::Column::Id.eq(id))
            .exec(&self.db)
            .await?;
        if updated.rows_affected == 0 {
            return Err(Error::BrokerNotFound(id.to_owned()));
        }
        Ok(())
    }

    /// Marks a broker down now (its event stream broke).
    pub async fn mark_broker_down(&self, id: &str) -> Result<(), Error> {
        broker::Entity::update_many()
            .col_expr(broker::Column::Up, Expr::value(false))
            .col_expr(broker::Column::UpdatedAt, Expr::value(now()))
            .filter(broker::Column::Id.eq(id))
            .exec(&self.db)
            .await?;
        Ok(())
    }

    /// Remembers the boot id of the broker's latest Snapshot; returns the previous one.
    pub async fn record_broker_boot(
        &self,
        id: &str,
        boot_id: &str,
    ) -> Result<Option<String>, Error> {
        let previous = broker::Entity::find_by_id(id.to_owned())
            .one(&self.db)
            .await?
            .and_then(|model| model.boot_id);
        broker::Entity::update_many()
            .col_expr(broker::Column::BootId, Expr::value(boot_id))
            .filter(broker::Column::Id.eq(id))
            .exec(&self.db)
            .await?;
        Ok(previous)
    }

    /// Marks down every broker whose last heartbeat is older than `cutoff` (or that never
    /// had one). Returns the ids that went down.
    pub async fn mark_stale_brokers_down(
        &self,
        cutoff: DateTime<Utc>,
    ) -> Result<Vec<String>, Error> {
        let stale: Vec<String> = broker::Entity::find()
            .select_only()
            .column(broker::Column::Id)
            .filter(broker::Column::Up.eq(true))
            .filter(
                broker::Column::LastHeartbeatAt
                    .is_null()
                    .or(broker::Column::LastHeartbeatAt.lt(cutoff)),
            )
            .into_tuple()
            .all(&self.db)
            .await?;
        if stale.is_empty() {
            return Ok(stale);
        }
        broker::Entity::update_many()
            .col_expr(broker::Column::Up, Expr::value(false))
            .col_expr(broker::Column::UpdatedAt, Expr::value(now()))
            .filter(broker::Column::Id.is_in(stale.clone()))
            .filter(
                broker::Column::LastHeartbeatAt
                    .is_null()
                    .or(broker::Column::LastHeartbeatAt.lt(cutoff)),
            )
            .exec(&self.db)
            .await?;
        Ok(stale)
    }

    pub async fn get_broker(&self, id: &str) -> Result<Broker, Error> {
        broker::Entity::find_by_id(id.to_owned())
            .one(&self.db)
            .await?
            .map(broker_from_model)
            .ok_or_else(|| Error::BrokerNotFound(id.to_owned()))
    }

    pub async fn list_brokers(&self) -> Result<Vec<Broker>, Error> {
        Ok(broker::Entity::find()
            .order_by_asc(broker::Column::Id)
            .all(&self.db)
            .await?
            .into_iter()
            .map(broker_from_model)
            .collect())
    }

    /// The up broker that can run `target` with the fewest live sessions (ties by id).
    pub async fn least_loaded_broker(&self, target: &Target) -> Result<Option<Broker>, Error> {
        let candidates: Vec<Broker> = self
            .list_brokers()
            .await?
            .into_iter()
            .filter(|broker| broker.up && (broker.docker || !target.needs_docker()))
            .collect();
        if candidates.is_empty() {
            return Ok(None);
        }
        let loads: Vec<(String, i64)> = terminal_session::Entity::find()
            .select_only()
            .column(terminal_session::Column::BrokerId)
            .column_as(terminal_session::Column::Id.count(), "live")
            .filter(terminal_session::Column::Status.is_in(live_status_names()))
            .group_by(terminal_session::Column::BrokerId)
            .into_tuple()
            .all(&self.db)
            .await?;
        let loads: HashMap<String, i64> = loads.into_iter().collect();
        Ok(candidates.into_iter().min_by_key(|broker| {
            (
                loads.get(&broker.id).copied().unwrap_or(0),
                broker.id.clone(),
            )
        }))
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

async fn find_instance_model(
    db: &impl ConnectionTrait,
    id_or_name: &str,
) -> Result<instance::Model, Error> {
    let by_id = match Uuid::parse_str(id_or_name) {
        Ok(id) => instance::Entity::find_by_id(id).one(db).await?,
        Err(_) => None,
    };
    let model = match by_id {
        Some(model) => Some(model),
        None => {
            instance::Entity::find()
                .filter(instance::Column::Name.eq(id_or_name))
                .one(db)
                .await?
        }
    };
    model.ok_or_else(|| Error::InstanceNotFound(id_or_name.to_owned()))
}

async fn live_alias_holder(
    db: &impl ConnectionTrait,
    instance_id: Uuid,
    alias: &str,
) -> Result<Option<Uuid>, Error> {
    Ok(session_alias::Entity::find()
        .filter(session_alias::Column::InstanceId.eq(instance_id))
        .filter(session_alias::Column::Alias.eq(alias))
        .filter(session_alias::Column::ReleasedAt.is_null())
        .one(db)
        .await?
        .map(|row| row.session_id))
}

async fn live_names(db: &impl ConnectionTrait, instance_id: Uuid) -> Result<Vec<String>, Error> {
    Ok(terminal_session::Entity::find()
        .select_only()
        .column(terminal_session::Column::Name)
        .filter(terminal_session::Column::InstanceId.eq(instance_id))
        .filter(terminal_session::Column::Status.is_in(live_status_names()))
        .into_tuple()
        .all(db)
        .await?)
}

async fn release_aliases(
    db: &impl ConnectionTrait,
    session_id: Uuid,
    at: DateTime<Utc>,
) -> Result<(), Error> {
    session_alias::Entity::update_many()
        .col_expr(session_alias::Column::ReleasedAt, Expr::value(at))
        .filter(session_alias::Column::SessionId.eq(session_id))
        .filter(session_alias::Column::ReleasedAt.is_null())
        .exec(db)
        .await?;
    Ok(())
}

async fn load_session(db: &impl ConnectionTrait, session_id: Uuid) -> Result<Session, Error> {
    let model = terminal_session::Entity::find_by_id(session_id)
        .one(db)
        .await?
        .ok_or(Error::SessionNotFound(session_id))?;
    let mut sessions = sessions_from_models(db, vec![model]).await?;
    Ok(sessions.remove(0))
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
    })
}

fn broker_from_model(model: broker::Model) -> Broker {
    Broker {
        id: model.id,
        endpoint: model.endpoint,
        up: model.up,
        docker: model.docker,
        configured: model.configured,
        last_heartbeat_at: model.last_heartbeat_at,
    }
}

/// A stored count or size as unsigned; a negative value (never written) reads as 0.
fn non_negative(value: i32) -> u32 {
    u32::try_from(value).unwrap_or(0)
}

/// Whether the database ended the statement's transaction to break a deadlock (PostgreSQL's
/// SQLSTATE 40P01); retrying the transaction is then the right answer.
fn is_deadlock(error: &sea_orm::DbErr) -> bool {
    let runtime = match error {
        sea_orm::DbErr::Exec(runtime) | sea_orm::DbErr::Query(runtime) => runtime,
        _ => return false,
    };
    match runtime {
        sea_orm::RuntimeErr::SqlxError(sqlx) => match sqlx.as_ref() {
            sea_orm::sqlx::Error::Database(database) => database.code().as_deref() == Some("40P01"),
            _ => false,
        },
        _ => false,
    }
}
