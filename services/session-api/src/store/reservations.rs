//! Reserving a session's slot: the cap and the aliases, checked and written in one transaction
//! that serialises the writers of one instance, and the live holder of an alias.

use ptyhub_model::{ControlMode, TerminalSize};
use ptyhub_wire::limits::MAX_ALIASES_PER_SESSION;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect,
};
use uuid::Uuid;

use super::entities::{session_alias, terminal_session};
use super::{
    Store, instance_from_model, live_status_names, load_session, lock_instance, non_negative, now,
    session_from_model,
};
use crate::domain::{
    Alias, Instance, Session, SessionName, SessionStatus, smallest_free_session_number,
};
use crate::error::Error;

/// A new session to reserve a slot for.
#[derive(Debug, Clone)]
pub struct SessionReservation {
    pub instance_id: Uuid,
    /// `None` gives `Session N`.
    pub name: Option<SessionName>,
    pub aliases: Vec<Alias>,
    pub size: TerminalSize,
    /// Who may type into it.
    pub control_mode: ControlMode,
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

impl Store {
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
            title: None,
            last_bell_at: None,
            terminal: None,
            presence: None,
            control_mode: reservation.control_mode.as_str().to_owned(),
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

    /// Gives live session `session_id` of `instance_id` the `aliases` it does not hold yet, in
    /// one transaction serialised with the instance's other writers (as a reservation is), so
    /// that the creation's rules hold: an alias another live session holds is
    /// [`Error::AliasTaken`], more than [`MAX_ALIASES_PER_SESSION`] in all is refused, and
    /// nothing is written on an error. The partial unique index on live aliases holds it across
    /// replicas besides. Returns the session with every alias it holds, and whether any was
    /// new.
    pub async fn add_aliases(
        &self,
        instance_id: Uuid,
        session_id: Uuid,
        aliases: &[Alias],
    ) -> Result<(Session, bool), Error> {
        let transaction = self.begin_write().await?;
        lock_instance(&transaction, instance_id).await?;
        let session = load_session(&transaction, session_id).await?;
        if session.instance_id != instance_id {
            return Err(Error::SessionNotFound(session_id));
        }
        if !session.status.is_live() {
            return Err(Error::SessionNotLive {
                session_id,
                status: session.status.to_string(),
            });
        }
        let mut asked: Vec<String> = aliases.iter().map(Alias::to_text).collect();
        asked.sort();
        asked.dedup();
        let mut added = Vec::new();
        for alias in asked {
            match live_alias_holder(&transaction, instance_id, &alias).await? {
                Some(holder) if holder == session_id => {}
                Some(holder) => {
                    return Err(Error::AliasTaken {
                        alias,
                        session_id: holder,
                    });
                }
                None => added.push(alias),
            }
        }
        let total = session.aliases.len() + added.len();
        if total > MAX_ALIASES_PER_SESSION {
            return Err(Error::InvalidRequest(format!(
                "a session may have at most {MAX_ALIASES_PER_SESSION} aliases: session {session_id} has {} and would have {total}",
                session.aliases.len()
            )));
        }
        let at = now();
        let changed = !added.is_empty();
        for alias in added {
            session_alias::Entity::insert(session_alias::ActiveModel {
                session_id: Set(session_id),
                alias: Set(alias),
                instance_id: Set(instance_id),
                created_at: Set(at),
                released_at: Set(None),
            })
            .exec_without_returning(&transaction)
            .await?;
        }
        let session = load_session(&transaction, session_id).await?;
        transaction.commit().await?;
        Ok((session, changed))
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
