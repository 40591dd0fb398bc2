//! The instance and session a request names, looked up through session-api and checked
//! against its principal's [`crate::scope::Access`], the same way on every surface (REST, the
//! WebSockets, gRPC, the relay): an instance outside the scope is 403 whether it exists or not,
//! a session of another instance or outside a share's one session is 404.

use ptyhub_wire::{ErrorCode, Surface};

use crate::auth::Principal;
use crate::domain::{Instance, Session, SessionStatus};
use crate::error::ApiError;
use crate::state::AppState;

/// What a session id in a path may also be: the session with the `default` alias (the legacy
/// single session), as `/terminal/reset` and the WebSocket's `/terminal` name it.
pub const DEFAULT_SESSION: &str = "default";

impl AppState {
    /// [`AppState::authorize_instance`], reporting a refusal for scope (403) to the audit trail
    /// as an attempt through `surface`: what every surface's instance check is.
    pub async fn authorize_instance_through(
        &self,
        principal: &Principal,
        instance_reference: &str,
        surface: Surface,
    ) -> Result<Instance, ApiError> {
        self.authorize_instance(principal, instance_reference)
            .await
            .inspect_err(|error| {
                if error.code == ErrorCode::Forbidden {
                    self.report_refusal(
                        Some(principal),
                        principal.client_address,
                        surface,
                        "forbidden",
                        format!("instance {instance_reference}"),
                    );
                }
            })
    }

    /// Looks up the instance and checks that the principal may use it.
    ///
    /// An unknown instance the scope does not name is 403, not 404, so a scoped token cannot
    /// probe which instances exist.
    pub async fn authorize_instance(
        &self,
        principal: &Principal,
        instance_reference: &str,
    ) -> Result<Instance, ApiError> {
        let instance = match self.upstreams.get_instance(instance_reference).await {
            Ok(instance) => instance,
            Err(error) if error.code == ErrorCode::NotFound => {
                return Err(if principal.access.names(instance_reference) {
                    ApiError::not_found("instance not found")
                } else {
                    forbidden_instance()
                });
            }
            Err(error) => return Err(error),
        };
        if !principal.access.allows(&instance) {
            return Err(forbidden_instance());
        }
        Ok(instance)
    }

    /// Looks up a session of an instance the caller may use; a session of another instance, or
    /// one a share of another session does not cover, is 404, never an action on the other.
    /// [`DEFAULT_SESSION`] names the live session with the `default` alias (404 while there is
    /// none).
    pub async fn authorize_session(
        &self,
        principal: &Principal,
        instance: &Instance,
        session_id: &str,
    ) -> Result<Session, ApiError> {
        let session = self.find_session(instance, session_id).await?;
        if !principal.access.allows_session_record(&session) {
            return Err(ApiError::not_found("session not found"));
        }
        Ok(session)
    }

    async fn find_session(
        &self,
        instance: &Instance,
        session_id: &str,
    ) -> Result<Session, ApiError> {
        if session_id == DEFAULT_SESSION {
            return self
                .upstreams
                .list_sessions(&instance.id, false)
                .await?
                .into_iter()
                .find(|session| session.aliases.iter().any(|alias| alias == DEFAULT_SESSION))
                .ok_or_else(|| ApiError::not_found("the instance has no default session"));
        }
        if uuid::Uuid::parse_str(session_id).is_err() {
            return Err(ApiError::not_found("session not found"));
        }
        let session = self.upstreams.get_session(&instance.id, session_id).await?;
        if session.instance_id.to_string() != instance.id {
            return Err(ApiError::not_found("session not found"));
        }
        Ok(session)
    }

    /// Like [`AppState::authorize_session`], for the calls that need the session's process
    /// (its screen, its input): a closed session is 404 too.
    pub async fn authorize_live_session(
        &self,
        principal: &Principal,
        instance: &Instance,
        session_id: &str,
    ) -> Result<Session, ApiError> {
        let session = self
            .authorize_session(principal, instance, session_id)
            .await?;
        if session.status == SessionStatus::Closed {
            return Err(ApiError::not_found("session not found or closed"));
        }
        Ok(session)
    }
}

fn forbidden_instance() -> ApiError {
    ApiError::forbidden("not allowed for this instance")
}
