//! Reading sessions: one by id (within its instance or any), an instance's list, a broker's
//! open sessions, and the statuses of a set of ids.

use std::collections::HashMap;

use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use uuid::Uuid;

use super::entities::terminal_session;
use super::{Store, load_session, parse_status, sessions_from_models};
use crate::domain::{Session, SessionStatus};
use crate::error::Error;

impl Store {
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

    /// The instance of each of `ids` that has a record (a missing one has none).
    pub async fn session_instances(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, Uuid>, Error> {
        let mut instances = HashMap::new();
        for chunk in ids.chunks(500) {
            let rows: Vec<(Uuid, Uuid)> = terminal_session::Entity::find()
                .select_only()
                .column(terminal_session::Column::Id)
                .column(terminal_session::Column::InstanceId)
                .filter(terminal_session::Column::Id.is_in(chunk.iter().copied()))
                .into_tuple()
                .all(&self.db)
                .await?;
            instances.extend(rows);
        }
        Ok(instances)
    }
}
