//! The `ShareRegistry` server over [`ShareService`]: requests checked into domain values, shares
//! back into messages.

use std::sync::Arc;
use std::time::Duration;

use ptyhub_proto::session::v1 as pb;
use ptyhub_proto::session::v1::share_registry_server::ShareRegistry;
use tonic::{Request, Response, Status};
use uuid::Uuid;

use super::actor_of;
use super::from_pb::required;
use super::to_pb::share_to_pb;
use crate::audit::{AuditKind, NewAuditEvent};
use crate::domain::{NewShare, Share};
use crate::error::Error;
use crate::service::SessionService;
use crate::shares::ShareService;

/// The gRPC face of [`ShareService`]. Making and revoking a share are audit events of the
/// actor the gateway names; its uses are the attach and refusal events of `share:<id>`.
#[derive(Debug, Clone)]
pub struct GrpcShareRegistry {
    shares: ShareService,
    /// Where the audit events go.
    sessions: Arc<SessionService>,
}

impl GrpcShareRegistry {
    pub(crate) fn new(shares: ShareService, sessions: Arc<SessionService>) -> Self {
        Self { shares, sessions }
    }

    async fn record(&self, kind: AuditKind, actor: &ptyhub_wire::Actor, share: &Share) {
        let event = NewAuditEvent::new(kind, actor);
        let event = match share.session_id {
            Some(session_id) => event.session(share.instance_id, session_id),
            None => event.instance(share.instance_id),
        };
        self.sessions
            .record(
                event
                    .detail("share_id", share.id.to_string())
                    .detail("expires_at", share.expires_at.to_rfc3339())
                    .detail("history", share.history.to_string()),
            )
            .await;
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
        let actor = actor_of(&request);
        let message = request.into_inner();
        let instance = required("instance", &message.instance)?;
        let session_id = match message.session_id.as_str() {
            "" => None,
            text => Some(uuid_field("session_id", text)?),
        };
        let (share, token) = self
            .shares
            .create(&NewShare {
                instance: instance.to_owned(),
                session_id,
                ttl: Duration::from_secs(message.ttl_seconds),
                created_by: message.created_by,
                history: message.history,
            })
            .await?;
        self.record(AuditKind::ShareCreated, &actor, &share).await;
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
        let actor = actor_of(&request);
        let message = request.into_inner();
        let instance = required("instance", &message.instance)?;
        let share_id = uuid_field("share_id", &message.share_id)?;
        let (share, ended) = self.shares.revoke(instance, share_id).await?;
        if ended {
            self.record(AuditKind::ShareRevoked, &actor, &share).await;
        }
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
