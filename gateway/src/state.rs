//! What every handler shares, and the checks every instance-scoped request goes through: the
//! caller's scope covers the instance, and the session belongs to it.

use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth::{Authenticator, Principal};
use crate::domain::{Instance, Session, SessionStatus};
use ptyhub_wire::ErrorCode;

use crate::error::ApiError;
use crate::grpc::Upstreams;
use crate::metrics::Metrics;

#[derive(Clone, Debug)]
pub struct AppState {
    pub upstreams: Upstreams,
    pub authenticator: Authenticator,
    pub metrics: Metrics,
    pub allowed_origins: Vec<String>,
    pub static_dir: Option<PathBuf>,
    /// Where the brokers put recordings; `None` when the gateway serves none.
    pub recordings: Option<ptyhub_wire::RecordingStore>,
    pub metrics_require_auth: bool,
    pub heartbeat_interval: Duration,
    /// Cancelled when a shutdown begins: `/readyz` answers 503 from then on, while everything
    /// else keeps serving for the drain delay.
    pub draining: CancellationToken,
    /// Cancelled when the gateway stops serving; WebSockets and streams end with it.
    pub shutdown: CancellationToken,
    /// Every WebSocket bridge, so shutdown can wait for them.
    pub bridges: TaskTracker,
}

impl AppState {
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

    /// Looks up a session of an instance the caller may use; a session of another instance is
    /// 404, never an action on the other instance.
    pub async fn authorize_session(
        &self,
        instance: &Instance,
        session_id: &str,
    ) -> Result<Session, ApiError> {
        if uuid::Uuid::parse_str(session_id).is_err() {
            return Err(ApiError::not_found("session not found"));
        }
        let session = self.upstreams.get_session(&instance.id, session_id).await?;
        if session.instance_id != instance.id {
            return Err(ApiError::not_found("session not found"));
        }
        Ok(session)
    }

    /// Like [`AppState::authorize_session`], for the calls that need the session's process
    /// (its screen, its input): a closed session is 404 too.
    pub async fn authorize_live_session(
        &self,
        instance: &Instance,
        session_id: &str,
    ) -> Result<Session, ApiError> {
        let session = self.authorize_session(instance, session_id).await?;
        if session.status == SessionStatus::Closed {
            return Err(ApiError::not_found("session not found or closed"));
        }
        Ok(session)
    }
}

fn forbidden_instance() -> ApiError {
    ApiError::forbidden("not allowed for this instance")
}
