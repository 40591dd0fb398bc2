//! Writing sessions: status transitions, renames, closes (releasing the aliases), exits, and
//! the batched activity, attachment counts, window titles and bells from the brokers' event
//! streams.

use std::collections::HashMap;

use chrono::{DateTime, SubsecRound, Utc};
use sea_orm::sea_query::{Alias, Expr, ExprTrait as _, IntoIden as _, Query, TableRef, ValueTuple};
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DatabaseTransaction, DbBackend, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect,
};
use uuid::Uuid;

use ptyhub_model::{Attendee, ControlMode};
use ptyhub_wire::Actor;

use super::audit::insert_audit_event;
use super::entities::{session_alias, terminal_session};
use super::{Store, load_session, load_sessions, now};
use crate::audit::{AuditKind, NewAuditEvent};
use crate::domain::{
    ChangeKind, CloseReason, ExitStatus, ScreenFacts, Session, SessionName, SessionStatus,
};
use crate::error::Error;

/// Batched lifecycle facts about one session, written together.
#[derive(Debug, Clone, Default)]
pub struct ActivityUpdate {
    pub last_activity_at: Option<DateTime<Utc>>,
    pub attached_clients: Option<u32>,
    /// Who is attached, as the broker reported it last.
    pub presence: Option<Vec<Attendee>>,
    /// The title and last bell as the broker reported them last.
    pub screen: Option<ScreenFacts>,
}

impl Store {
    /// Removes the history of sessions closed before `cutoff`: their rows and their released
    /// aliases. Live sessions are never touched. Returns how many sessions went.
    pub async fn prune_closed_sessions(&self, cutoff: DateTime<Utc>) -> Result<u64, Error> {
        let expired = || {
            Condition::all()
                .add(terminal_session::Column::Status.eq(SessionStatus::Closed.as_str()))
                .add(terminal_session::Column::ClosedAt.lt(cutoff))
        };
        let ids: Vec<Uuid> = terminal_session::Entity::find()
            .select_only()
            .column(terminal_session::Column::Id)
            .filter(expired())
            .into_tuple()
            .all(&self.db)
            .await?;
        // In batches, so that one statement stays within the databases' parameter limits and
        // no long transaction holds up the writers.
        let mut pruned = 0;
        for batch in ids.chunks(500) {
            session_alias::Entity::delete_many()
                .filter(session_alias::Column::SessionId.is_in(batch.iter().copied()))
                .exec(&self.db)
                .await?;
            pruned += terminal_session::Entity::delete_many()
                .filter(terminal_session::Column::Id.is_in(batch.iter().copied()))
                .filter(expired())
                .exec(&self.db)
                .await?
                .rows_affected;
        }
        Ok(pruned)
    }

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
        self.update_live_session(
            instance_id,
            session_id,
            terminal_session::Column::Name,
            name.as_str(),
        )
        .await
    }

    /// Sets the control mode of a session that is not closed.
    pub async fn set_control_mode(
        &self,
        instance_id: Uuid,
        session_id: Uuid,
        control_mode: ControlMode,
    ) -> Result<Session, Error> {
        self.update_live_session(
            instance_id,
            session_id,
            terminal_session::Column::ControlMode,
            control_mode.as_str(),
        )
        .await
    }

    /// Sets one text column of a session that is not closed (and its `updated_at`): a closed
    /// session's record is history, so the update is refused with the status it has.
    async fn update_live_session(
        &self,
        instance_id: Uuid,
        session_id: Uuid,
        column: terminal_session::Column,
        value: &str,
    ) -> Result<Session, Error> {
        let current = self.get_session(instance_id, session_id).await?;
        let updated = terminal_session::Entity::update_many()
            .col_expr(column, Expr::value(value))
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

    /// Closes a session that is not closed yet, releasing its aliases, and records the close
    /// in the audit trail as done `by` the actor (without one, the caller records it: a
    /// broker's report of a kill that a user's close asked for). `None` when it was already
    /// closed (or does not exist), and then nothing is recorded.
    pub async fn close_session(
        &self,
        session_id: Uuid,
        reason: CloseReason,
        by: Option<&Actor>,
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
        // The close and its audit event are one write: exactly one event per close.
        if let Some(by) = by {
            insert_audit_event(&transaction, &closed_event(&session, reason, by)).await?;
        }
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

    /// Writes a batch of activity, attachment and screen updates in one transaction; a row
    /// whose values are already those is not written. Returns the changes to publish: each
    /// session whose attachment count changed ([`ChangeKind::Attachments`]) or whose title or
    /// last bell changed ([`ChangeKind::Screen`]), as it was right after that change.
    ///
    /// Every replica writes the batches of every broker it follows, so two replicas update the
    /// same rows at once: rows are locked in id order, so that the batches never deadlock each
    /// other, and a deadlock with some other transaction is retried.
    ///
    /// A broker reports every session that did something once a second, so with many busy
    /// sessions this runs once a second with a row for each: their activity times are written
    /// by one statement per [`ACTIVITY_ROWS_PER_UPDATE`] rows, not one each.
    pub async fn record_activity(
        &self,
        updates: &HashMap<Uuid, ActivityUpdate>,
    ) -> Result<Vec<(ChangeKind, Session)>, Error> {
        let mut ordered: Vec<(&Uuid, &ActivityUpdate)> = updates.iter().collect();
        ordered.sort_unstable_by_key(|(session_id, _)| **session_id);
        retrying_deadlocks("activity batch", || self.record_activity_once(&ordered)).await
    }

    async fn record_activity_once(
        &self,
        updates: &[(&Uuid, &ActivityUpdate)],
    ) -> Result<Vec<(ChangeKind, Session)>, Error> {
        if updates.is_empty() {
            return Ok(Vec::new());
        }
        let transaction = self.begin_write().await?;
        lock_sessions_in_order(
            &transaction,
            updates.iter().map(|(session_id, _)| **session_id),
        )
        .await?;
        let activity: Vec<(Uuid, DateTime<Utc>)> = updates
            .iter()
            .filter_map(|(session_id, update)| Some((**session_id, update.last_activity_at?)))
            .collect();
        for chunk in activity.chunks(ACTIVITY_ROWS_PER_UPDATE) {
            record_last_activity(&transaction, chunk).await?;
        }
        let mut changes = Vec::new();
        // Sessions whose attachments changed and nothing else: read together once every row
        // is written, since nothing else in this transaction writes them.
        let mut attachments_changed = Vec::new();
        for &(session_id, update) in updates {
            if let Some(attached) = update.attached_clients
                && record_attachments(
                    &transaction,
                    *session_id,
                    attached,
                    update.presence.as_deref(),
                )
                .await?
            {
                if update.screen.is_none() {
                    attachments_changed.push(*session_id);
                } else {
                    // Read now, so that the screen change below is a change of its own to
                    // watchers, not one they have already seen.
                    let session = load_session(&transaction, *session_id).await?;
                    changes.push((ChangeKind::Attachments, session));
                }
            }
            if let Some(screen) = &update.screen
                && record_screen(&transaction, *session_id, screen).await?
            {
                let session = load_session(&transaction, *session_id).await?;
                changes.push((ChangeKind::Screen, session));
            }
        }
        for session in load_sessions(&transaction, &attachments_changed).await? {
            changes.push((ChangeKind::Attachments, session));
        }
        transaction.commit().await?;
        Ok(changes)
    }
}

/// How many sessions' activity times one statement writes: two values each, well within
/// SQLite's and PostgreSQL's limits on the values of one statement.
pub const ACTIVITY_ROWS_PER_UPDATE: usize = 500;

/// Locks the rows of `sessions` (in id order) for the rest of the transaction on PostgreSQL,
/// one statement per chunk, so that writers of overlapping batches take them in one order; on
/// SQLite the transaction already holds the write lock. A batch of one row (a lone presence or
/// terminal report) takes no statement: a transaction that locks a single row waits on no
/// other while it holds one, so it cannot deadlock.
pub(super) async fn lock_sessions_in_order(
    transaction: &DatabaseTransaction,
    sessions: impl Iterator<Item = Uuid>,
) -> Result<(), Error> {
    if transaction.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    let sessions: Vec<Uuid> = sessions.collect();
    if sessions.len() < 2 {
        return Ok(());
    }
    for chunk in sessions.chunks(ACTIVITY_ROWS_PER_UPDATE) {
        terminal_session::Entity::find()
            .select_only()
            .column(terminal_session::Column::Id)
            .filter(terminal_session::Column::Id.is_in(chunk.iter().copied()))
            .order_by_asc(terminal_session::Column::Id)
            .lock_exclusive()
            .into_tuple::<Uuid>()
            .all(transaction)
            .await?;
    }
    Ok(())
}

/// Moves each session's `last_activity_at` forward to its time in `activity` (never back: a
/// replica may write an older report after a newer one), in one statement:
/// `UPDATE terminal_session SET last_activity_at = reported.column2 FROM (VALUES (id, at), ...)
/// AS reported WHERE id = reported.column1 AND last_activity_at < reported.column2`. Both
/// databases name the columns of a `VALUES` list `column1`, `column2`, ...
async fn record_last_activity(
    db: &impl ConnectionTrait,
    activity: &[(Uuid, DateTime<Utc>)],
) -> Result<(), Error> {
    if activity.is_empty() {
        return Ok(());
    }
    let reported = Alias::new("reported");
    let id = (reported.clone(), Alias::new("column1"));
    let at = (reported.clone(), Alias::new("column2"));
    let rows = activity
        .iter()
        // Both databases keep microseconds: compare what would be stored.
        .map(|(session_id, at)| ValueTuple::Two((*session_id).into(), at.trunc_subsecs(6).into()))
        .collect();
    let update = Query::update()
        .table(terminal_session::Entity)
        .value(
            terminal_session::Column::LastActivityAt,
            Expr::col(at.clone()),
        )
        .from(TableRef::ValuesList(rows, reported.into_iden()))
        .and_where(Expr::col((terminal_session::Entity, terminal_session::Column::Id)).equals(id))
        .and_where(
            Expr::col((
                terminal_session::Entity,
                terminal_session::Column::LastActivityAt,
            ))
            .lt(Expr::col(at)),
        )
        .to_owned();
    db.execute(&update).await?;
    Ok(())
}

/// Writes how many clients are attached to a session and who they are (when the broker said),
/// unless the row says so already. Whether the row changed.
async fn record_attachments(
    db: &impl ConnectionTrait,
    session_id: Uuid,
    attached: u32,
    presence: Option<&[Attendee]>,
) -> Result<bool, Error> {
    let attached = i32::try_from(attached).unwrap_or(i32::MAX);
    let mut update = terminal_session::Entity::update_many()
        .col_expr(
            terminal_session::Column::AttachedClients,
            Expr::value(attached),
        )
        .filter(terminal_session::Column::Id.eq(session_id));
    let mut differs = Condition::any().add(terminal_session::Column::AttachedClients.ne(attached));
    if let Some(presence) = presence {
        let json = serde_json::to_string(presence).expect("attendees always serialize");
        update = update.col_expr(
            terminal_session::Column::Presence,
            Expr::value(json.clone()),
        );
        // Null-safe "differs", written out as in `record_screen`.
        differs = differs
            .add(terminal_session::Column::Presence.is_null())
            .add(terminal_session::Column::Presence.ne(json));
    }
    let changed = update.filter(differs).exec(db).await?;
    Ok(changed.rows_affected > 0)
}

/// Writes the title and last bell of a session that is not closed, unless they are already
/// those. Whether the row changed.
async fn record_screen(
    db: &impl ConnectionTrait,
    session_id: Uuid,
    screen: &ScreenFacts,
) -> Result<bool, Error> {
    // Both databases keep microseconds: compare what would be stored.
    let last_bell_at = screen.last_bell_at().map(|at| at.trunc_subsecs(6));
    // Null-safe "differs", written out: SQLite's `IS NOT` is not PostgreSQL's, and PostgreSQL's
    // `IS DISTINCT FROM` needs SQLite 3.39.
    let title_differs = match screen.title() {
        None => Condition::all().add(terminal_session::Column::Title.is_not_null()),
        Some(title) => Condition::any()
            .add(terminal_session::Column::Title.is_null())
            .add(terminal_session::Column::Title.ne(title)),
    };
    let bell_differs = match last_bell_at {
        None => Condition::all().add(terminal_session::Column::LastBellAt.is_not_null()),
        Some(at) => Condition::any()
            .add(terminal_session::Column::LastBellAt.is_null())
            .add(terminal_session::Column::LastBellAt.ne(at)),
    };
    let changed = terminal_session::Entity::update_many()
        .col_expr(
            terminal_session::Column::Title,
            Expr::value(screen.title().map(str::to_owned)),
        )
        .col_expr(
            terminal_session::Column::LastBellAt,
            Expr::value(last_bell_at),
        )
        .filter(terminal_session::Column::Id.eq(session_id))
        .filter(terminal_session::Column::Status.ne(SessionStatus::Closed.as_str()))
        .filter(Condition::any().add(title_differs).add(bell_differs))
        .exec(db)
        .await?;
    Ok(changed.rows_affected > 0)
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

/// Runs `transaction` (a write transaction from its start to its commit) again when the
/// database ended it to break a deadlock, up to three times in all.
pub(super) async fn retrying_deadlocks<T, F>(
    what: &str,
    mut transaction: impl FnMut() -> F,
) -> Result<T, Error>
where
    F: std::future::Future<Output = Result<T, Error>>,
{
    let mut attempt = 1;
    loop {
        match transaction().await {
            Err(Error::Database(error)) if attempt < 3 && is_deadlock(&error) => {
                tracing::debug!(attempt, what, "deadlocked: retrying");
                attempt += 1;
            }
            outcome => return outcome,
        }
    }
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

/// The audit event of a session's close.
pub fn closed_event(session: &Session, reason: CloseReason, by: &Actor) -> NewAuditEvent {
    NewAuditEvent::new(AuditKind::SessionClosed, by)
        .session(session.instance_id, session.id)
        .detail("reason", reason.as_str())
}
