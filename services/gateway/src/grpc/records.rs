//! Calls to session-api about records: instances, sessions, shares, the audit trail and the
//! health of the upstreams.

use std::time::Duration;

use futures::StreamExt;
use ptyhub_model::proto::{self, ProtoEnum as _};
use ptyhub_model::{ControlMode, Role, TerminalSize};
use ptyhub_proto::session::v1 as session_pb;

use crate::domain::{
    AuditEventPage, AuditListing, Instance, NewInstance, Session, SessionAttachment,
    SessionSelector, Share, ShareLookup,
};
use crate::error::ApiError;

use super::convert::{
    attachment_from_proto, audit_listing_to_proto, audit_page_from_proto, change_from_proto,
    instance_from_proto, session_from_proto, share_from_proto,
};
use super::{AuditReport, SessionApiClient, SessionChanges, Upstreams, session_api_error};

impl Upstreams {
    /// Reports what only the gateway sees (an attach, a detach, a refusal) to the audit trail,
    /// for the actor these upstreams act for. A failure is logged: the stream or the refusal
    /// goes on regardless.
    pub async fn report_audit_event(&self, report: AuditReport) {
        let request = session_pb::RecordAuditEventRequest {
            kind: report.kind.to_proto(),
            instance_id: report.instance_id.unwrap_or_default(),
            session_id: report.session_id.unwrap_or_default(),
            role: proto::optional_to_proto(report.role),
            attachment_id: report
                .attachment_id
                .map(|id| id.to_string())
                .unwrap_or_default(),
            detail: report.detail.into_iter().collect(),
        };
        if let Err(status) = self.session_api.clone().record_audit_event(request).await {
            tracing::error!(code = ?status.code(), message = status.message(),
                "session-api did not record an audit event");
        }
    }

    /// One page of the audit trail.
    pub async fn list_audit_events(
        &self,
        listing: AuditListing,
    ) -> Result<AuditEventPage, ApiError> {
        let page = self
            .session_api
            .clone()
            .list_audit_events(audit_listing_to_proto(listing))
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(audit_page_from_proto(page))
    }

    /// The raw client, for the gRPC-web surface that forwards messages unchanged.
    pub fn session_api_client(&self) -> SessionApiClient {
        self.session_api.clone()
    }

    pub async fn register_instance(&self, new: NewInstance) -> Result<Instance, ApiError> {
        let request = session_pb::RegisterInstanceRequest {
            name: new.name,
            target: Some(new.target.into()),
            command: new.command,
            env: new.env.into_iter().collect(),
            cwd: new.cwd,
            user: new.user,
            max_sessions: new.max_sessions,
            labels: new.labels.into_iter().collect(),
            broker_id: String::new(),
            record: proto::optional_to_proto(new.record),
            shell_integration: new.shell_integration,
            control_grant_timeout_secs: new.control_grant_timeout_secs,
        };
        let instance = self
            .session_api
            .clone()
            .register_instance(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(instance_from_proto(instance))
    }

    /// A share of an instance (or one session of it) for `ttl`, seeing the session's past or
    /// not (`history`), and its token.
    pub async fn create_share(
        &self,
        instance_id: &str,
        session_id: Option<&str>,
        ttl: Duration,
        created_by: &str,
        history: bool,
    ) -> Result<(Share, String), ApiError> {
        let request = session_pb::CreateShareRequest {
            instance: instance_id.to_owned(),
            session_id: session_id.unwrap_or_default().to_owned(),
            ttl_seconds: ttl.as_secs(),
            created_by: created_by.to_owned(),
            history,
        };
        let created = self
            .share_registry
            .clone()
            .create_share(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok((
            share_from_proto(created.share.unwrap_or_default()),
            created.token,
        ))
    }

    pub async fn list_shares(
        &self,
        instance_id: &str,
        include_ended: bool,
    ) -> Result<Vec<Share>, ApiError> {
        let request = session_pb::ListSharesRequest {
            instance: instance_id.to_owned(),
            include_ended,
        };
        let listed = self
            .share_registry
            .clone()
            .list_shares(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(listed.shares.into_iter().map(share_from_proto).collect())
    }

    pub async fn revoke_share(&self, instance_id: &str, share_id: &str) -> Result<Share, ApiError> {
        let request = session_pb::RevokeShareRequest {
            instance: instance_id.to_owned(),
            share_id: share_id.to_owned(),
        };
        let share = self
            .share_registry
            .clone()
            .revoke_share(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(share_from_proto(share))
    }

    /// The live share of a share link's token, or of a share id.
    pub async fn find_share(&self, by: ShareLookup<'_>) -> Result<Share, ApiError> {
        let by = match by {
            ShareLookup::Token(token) => {
                session_pb::find_share_request::By::Token(token.to_owned())
            }
            ShareLookup::Id(id) => session_pb::find_share_request::By::ShareId(id.to_owned()),
        };
        let share = self
            .share_registry
            .clone()
            .find_share(session_pb::FindShareRequest { by: Some(by) })
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(share_from_proto(share))
    }

    pub async fn get_instance(&self, instance: &str) -> Result<Instance, ApiError> {
        let request = session_pb::GetInstanceRequest {
            instance: instance.to_owned(),
        };
        let instance = self
            .session_api
            .clone()
            .get_instance(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(instance_from_proto(instance))
    }

    pub async fn list_instances(&self) -> Result<Vec<Instance>, ApiError> {
        let response = self
            .session_api
            .clone()
            .list_instances(session_pb::ListInstancesRequest::default())
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(response
            .instances
            .into_iter()
            .map(instance_from_proto)
            .collect())
    }

    /// Returns how many sessions the deletion closed.
    pub async fn delete_instance(&self, instance_id: &str) -> Result<u32, ApiError> {
        let response = self
            .session_api
            .clone()
            .delete_instance(session_pb::DeleteInstanceRequest {
                instance: instance_id.to_owned(),
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(response.closed_sessions)
    }

    /// Creates a session; an empty `command` runs the instance's. Whether the caller may choose
    /// one is checked before (`Access::check_command_override`).
    pub async fn create_session(
        &self,
        instance_id: &str,
        name: Option<String>,
        aliases: Vec<String>,
        size: Option<TerminalSize>,
        command: Vec<String>,
        control_mode: ControlMode,
    ) -> Result<SessionAttachment, ApiError> {
        let request = session_pb::CreateSessionRequest {
            instance: instance_id.to_owned(),
            name: name.unwrap_or_default(),
            aliases,
            size: size.map(Into::into),
            command,
            control_mode: control_mode.to_proto(),
        };
        let attachment = self
            .session_api
            .clone()
            .create_session(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        attachment_from_proto(attachment)
    }

    pub async fn get_session(
        &self,
        instance_id: &str,
        session_id: &(impl std::fmt::Display + ?Sized),
    ) -> Result<Session, ApiError> {
        let session = self
            .session_api
            .clone()
            .get_session(session_pb::GetSessionRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_string(),
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        session_from_proto(session)
    }

    /// The changes of `instance_id`'s sessions from now on, as session-api's `WatchSessions`
    /// reports them; changes of a kind this gateway does not know are skipped.
    pub async fn watch_sessions(&self, instance_id: &str) -> Result<SessionChanges, ApiError> {
        let changes = self
            .session_api
            .clone()
            .watch_sessions(session_pb::WatchSessionsRequest {
                instance: instance_id.to_owned(),
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(Box::pin(changes.filter_map(|change| {
            std::future::ready(match change {
                Ok(change) => change_from_proto(change).map(Ok),
                Err(status) => Some(Err(session_api_error(status))),
            })
        })))
    }

    pub async fn list_sessions(
        &self,
        instance_id: &str,
        include_closed: bool,
    ) -> Result<Vec<Session>, ApiError> {
        let response = self
            .session_api
            .clone()
            .list_sessions(session_pb::ListSessionsRequest {
                instance: instance_id.to_owned(),
                include_closed,
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        response
            .sessions
            .into_iter()
            .map(session_from_proto)
            .collect()
    }

    pub async fn resolve_session(
        &self,
        instance_id: &str,
        selector: SessionSelector,
        create_if_absent: bool,
        size: Option<TerminalSize>,
        role: Role,
    ) -> Result<SessionAttachment, ApiError> {
        use session_pb::resolve_session_request::Selector;
        let selector = match selector {
            SessionSelector::Id(id) => Selector::SessionId(id),
            SessionSelector::Alias(alias) => Selector::Alias(alias),
            SessionSelector::ClientId(client_id) => Selector::ClientId(client_id),
            SessionSelector::Default => Selector::Default(true),
        };
        let request = session_pb::ResolveSessionRequest {
            instance: instance_id.to_owned(),
            selector: Some(selector),
            create_if_absent,
            size: size.map(Into::into),
            role: role.to_proto(),
        };
        let attachment = self
            .session_api
            .clone()
            .resolve_session(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        attachment_from_proto(attachment)
    }

    pub async fn rename_session(
        &self,
        instance_id: &str,
        session_id: &(impl std::fmt::Display + ?Sized),
        name: String,
    ) -> Result<Session, ApiError> {
        let session = self
            .session_api
            .clone()
            .rename_session(session_pb::RenameSessionRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_string(),
                name,
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        session_from_proto(session)
    }

    /// Sets a live session's control mode; session-api tells its broker, which moves the
    /// attached streams' roles.
    pub async fn set_control_mode(
        &self,
        instance_id: &str,
        session_id: &(impl std::fmt::Display + ?Sized),
        control_mode: ControlMode,
    ) -> Result<Session, ApiError> {
        let session = self
            .session_api
            .clone()
            .update_session(session_pb::UpdateSessionRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_string(),
                control_mode: control_mode.to_proto(),
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        session_from_proto(session)
    }

    /// Gives a live session more aliases; session-api checks them as at creation.
    pub async fn add_session_aliases(
        &self,
        instance_id: &str,
        session_id: &(impl std::fmt::Display + ?Sized),
        aliases: Vec<String>,
    ) -> Result<Session, ApiError> {
        let session = self
            .session_api
            .clone()
            .add_session_aliases(session_pb::AddSessionAliasesRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_string(),
                aliases,
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        session_from_proto(session)
    }

    pub async fn reset_session(
        &self,
        instance_id: &str,
        session_id: &(impl std::fmt::Display + ?Sized),
    ) -> Result<Session, ApiError> {
        let session = self
            .session_api
            .clone()
            .reset_session(session_pb::ResetSessionRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_string(),
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        session_from_proto(session)
    }

    pub async fn close_session(
        &self,
        instance_id: &str,
        session_id: &(impl std::fmt::Display + ?Sized),
    ) -> Result<Session, ApiError> {
        let session = self
            .session_api
            .clone()
            .close_session(session_pb::CloseSessionRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_string(),
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        session_from_proto(session)
    }

    /// Whether session-api answers (a registry read, which also proves its database answers).
    pub async fn check_session_api(&self) -> Result<(), ApiError> {
        self.broker_registry
            .clone()
            .list_brokers(session_pb::ListBrokersRequest {})
            .await
            .map_err(session_api_error)?;
        Ok(())
    }

    /// Every registered broker and whether it answers its own health check.
    pub async fn check_brokers(&self) -> Result<Vec<BrokerHealth>, ApiError> {
        let brokers = self
            .broker_registry
            .clone()
            .list_brokers(session_pb::ListBrokersRequest {})
            .await
            .map_err(session_api_error)?
            .into_inner()
            .brokers;
        let checks = brokers.into_iter().map(|broker| async move {
            let answered = if broker.up {
                self.brokers.check_health(&broker.endpoint).await
            } else {
                Err("missed its heartbeats".to_owned())
            };
            BrokerHealth {
                id: broker.id,
                endpoint: broker.endpoint,
                problem: answered.err(),
            }
        });
        Ok(futures::future::join_all(checks).await)
    }
}

/// A broker's health as `/healthz` reports it.
#[derive(Debug, Clone)]
pub struct BrokerHealth {
    pub id: String,
    pub endpoint: String,
    /// Why the broker is considered down, when it is.
    pub problem: Option<String>,
}
