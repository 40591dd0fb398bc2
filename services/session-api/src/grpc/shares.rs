//! The `ShareRegistry` server over [`ShareService`]: requests checked into domain values, shares
//! back into messages.

use std::time::Duration;

use ptyhub_proto::session::v1 as pb;
use ptyhub_proto::session::v1::share_registry_server::ShareRegistry;
use tonic::{Request, Response, Status};
use uuid::Uuid;

use super::from_pb::required;
use super::to_pb::share_to_pb;
use crate::error::Error;
use crate::shares::ShareService;

/// The gRPC face of [`ShareService`].
#[derive(Debug, Clone)]
pub struct GrpcShareRegistry {
    shares: ShareService,
}

impl GrpcShareRegistry {
    pub(crate) fn new(shares: ShareService) -> Self {
        Self { shares }
    }
}

fn uuid_field(field: &'static str, text: &str) -> Result<Uuid, Error> {
    Uuid::parse_str(text).map_err(|_| Error::InvalidRequest(format!("{field} is not a uuid")))
}

#[tonic::async_trait]
impl ShareRegistry for GrpcShareRegistry {
    async fn create_share(
        &self,
        request: Request<pb::CreateShareRequest>,
    ) -> Result<Response<pb::CreatedShare>, Status> {
        let message = request.into_inner();
        let instance = required("instance", &message.instance)?;
        let session_id = match message.session_id.as_str() {
            "" => None,
            text => Some(uuid_field("session_id", text)?),
        };
        let (share, token) = self
            .shares
            .create(
                instance,
                session_id,
                Duration::from_secs(message.ttl_seconds),
                &message.created_by,
            )
            .await?;
        Ok(Response::new(pb::CreatedShare {
            share: Some(share_to_pb(&share)),
            token,
        }))
    }

    async fn list_shares(
        &self,
        request: Request<pb::ListSharesRequest>,
    ) -> Result<Response<pb::ListSharesResponse>, Status> {
        let message = request.into_inner();
        let instance = required("instance", &message.instance)?;
        let shares = self.shares.list(instance, message.include_ended).await?;
        Ok(Response::new(pb::ListSharesResponse {
            shares: shares.iter().map(share_to_pb).collect(),
        }))
    }

    async fn revoke_share(
        &self,
        request: Request<pb::RevokeShareRequest>,
    ) -> Result<Response<pb::Share>, Status> {
        let message = request.into_inner();
        let instance = required("instance", &message.instance)?;
        let share_id = uuid_field("share_id", &message.share_id)?;
        let share = self.shares.revoke(instance, share_id).await?;
        Ok(Response::new(share_to_pb(&share)))
    }

    async fn find_share(
        &self,
        request: Request<pb::FindShareRequest>,
    ) -> Result<Response<pb::Share>, Status> {
        let share = match request.into_inner().by {
            Some(pb::find_share_request::By::Token(token)) => {
                self.shares.find_by_token(&token).await?
            }
            Some(pb::find_share_request::By::ShareId(id)) => {
                // An id that is no uuid names no share.
                let id = Uuid::parse_str(&id).map_err(|_| Error::ShareNotFound)?;
                self.shares.find_by_id(id).await?
            }
            None => {
                return Err(Error::InvalidRequest("a token or share_id is required".into()).into());
            }
        };
        Ok(Response::new(share_to_pb(&share)))
    }
}
