//! Share links: storing one (within the instance's bound of live shares), listing an
//! instance's, revoking one, and finding the live one a token's hash or an id names.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder};
use uuid::Uuid;

use super::entities::share;
use super::{Store, lock_instance, now};
use crate::domain::{NewShare, Share};
use crate::error::Error;

impl Store {
    /// Stores a share of `instance_id` (and `session_id`) until `expires_at`, refused with
    /// [`Error::TooManyShares`] when the instance has `max_live` live shares already.
    pub async fn insert_share(
        &self,
        instance_id: Uuid,
        grant: &NewShare,
        token_sha256: String,
        expires_at: DateTime<Utc>,
        max_live: usize,
    ) -> Result<Share, Error> {
        let transaction = self.begin_write().await?;
        lock_instance(&transaction, instance_id).await?;
        let at = now();
        let live = live_shares(instance_id, at).count(&transaction).await?;
        if live >= max_live as u64 {
            return Err(Error::TooManyShares(max_live));
        }
        let model = share::Model {
            id: Uuid::new_v4(),
            instance_id,
            session_id: grant.session_id,
            token_sha256,
            created_by: grant.created_by.clone(),
            created_at: at,
            expires_at,
            revoked_at: None,
            history: grant.history,
        };
        share::Entity::insert(share::ActiveModel::from(model.clone()))
            .exec_without_returning(&transaction)
            .await?;
        transaction.commit().await?;
        Ok(share_from_model(model))
    }

    /// An instance's shares, newest first: the live ones, or all of them.
    pub async fn list_shares(
        &self,
        instance_id: Uuid,
        include_ended: bool,
    ) -> Result<Vec<Share>, Error> {
        let query = if include_ended {
            share::Entity::find().filter(share::Column::InstanceId.eq(instance_id))
        } else {
            live_shares(instance_id, now())
        };
        let models = query
            .order_by_desc(share::Column::CreatedAt)
            .all(&self.db)
            .await?;
        Ok(models.into_iter().map(share_from_model).collect())
    }

    /// Ends a share of `instance_id` (a share of another instance is not found), once: answers
    /// it, and whether this call is the one that ended it (a second revoke, or one racing it,
    /// answers the share as the first left it).
    pub async fn revoke_share(
        &self,
        instance_id: Uuid,
        share_id: Uuid,
    ) -> Result<(Share, bool), Error> {
        let ended = share::Entity::update_many()
            .col_expr(share::Column::RevokedAt, Expr::value(now()))
            .filter(share::Column::Id.eq(share_id))
            .filter(share::Column::InstanceId.eq(instance_id))
            .filter(share::Column::RevokedAt.is_null())
            .exec(&self.db)
            .await?
            .rows_affected
            == 1;
        let model = share::Entity::find_by_id(share_id)
            .filter(share::Column::InstanceId.eq(instance_id))
            .one(&self.db)
            .await?
            .ok_or(Error::ShareNotFound)?;
        Ok((share_from_model(model), ended))
    }

    /// The live share with this token hash or id.
    pub async fn find_live_share(&self, by: ShareKey<'_>) -> Result<Share, Error> {
        let query = match by {
            ShareKey::TokenSha256(hash) => {
                share::Entity::find().filter(share::Column::TokenSha256.eq(hash))
            }
            ShareKey::Id(id) => share::Entity::find_by_id(id),
        };
        let model = query.one(&self.db).await?.ok_or(Error::ShareNotFound)?;
        if model.revoked_at.is_some() || model.expires_at <= now() {
            return Err(Error::ShareNotFound);
        }
        Ok(share_from_model(model))
    }
}

/// What names a share.
#[derive(Debug, Clone, Copy)]
pub enum ShareKey<'a> {
    TokenSha256(&'a str),
    Id(Uuid),
}

fn live_shares(instance_id: Uuid, at: DateTime<Utc>) -> sea_orm::Select<share::Entity> {
    share::Entity::find()
        .filter(share::Column::InstanceId.eq(instance_id))
        .filter(share::Column::RevokedAt.is_null())
        .filter(share::Column::ExpiresAt.gt(at))
}

fn share_from_model(model: share::Model) -> Share {
    Share {
        id: model.id,
        instance_id: model.instance_id,
        session_id: model.session_id,
        created_by: model.created_by,
        created_at: model.created_at,
        expires_at: model.expires_at,
        revoked_at: model.revoked_at,
        history: model.history,
    }
}
