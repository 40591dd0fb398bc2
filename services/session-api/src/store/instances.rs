//! Instances: storing one, finding it by id or name with its live session count, listing
//! them, and deleting one with its sessions.

use std::collections::HashMap;

use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use uuid::Uuid;

use super::entities::{instance, terminal_session};
use super::{
    Store, instance_from_model, live_status_names, lock_instance, now, sessions_from_models,
};
use crate::domain::{CloseReason, Instance, NewInstance, Session, SessionStatus, Target};
use crate::error::Error;

impl Store {
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
            record: new.record.map(|mode| mode.as_str().to_owned()),
            shell_integration: new.shell_integration,
            control_grant_timeout_secs: new
                .control_grant_timeout
                .map(|timeout| i32::try_from(timeout.as_secs()).unwrap_or(i32::MAX)),
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
