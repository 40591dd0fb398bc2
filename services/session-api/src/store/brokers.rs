//! The broker registry: configured and self-registered brokers, heartbeats, boot ids, marking
//! silent brokers down, and placing an instance on the least loaded one.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait, OnConflict};
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

use super::entities::{broker, terminal_session};
use super::{Store, live_status_names, now};
use crate::domain::{Broker, Target};
use crate::error::Error;

impl Store {
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

    /// A broker registering itself: stored (or updated, at a new endpoint as a rescheduled pod
    /// registers) and up. Whose id it is was checked before: the configuration binds each
    /// broker's credential to its id.
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
