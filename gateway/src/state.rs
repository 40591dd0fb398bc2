//! What every handler shares, and the checks every instance-scoped request goes through: the
//! caller's scope covers the instance, and the session belongs to it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ptyhub_proto::session::v1::AuditKind;
use ptyhub_wire::{Actor, Surface};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth::{Authenticator, Principal};
use crate::domain::{Instance, Session, SessionStatus};
use ptyhub_wire::ErrorCode;

use crate::error::ApiError;
use crate::grpc::{AuditReport, Upstreams};
use crate::metrics::Metrics;

/// What a session id in a path may also be: the session with the `default` alias (the legacy
/// single session), as `/terminal/reset` and the WebSocket's `/terminal` name it.
pub const DEFAULT_SESSION: &str = "default";

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
    /// Every WebSocket bridge and public `Attach` relay, so shutdown can wait for them.
    pub bridges: TaskTracker,
    /// The terminal streams each principal holds open, bounded per principal.
    pub stream_slots: StreamSlots,
    /// The configured public URL of the gateway, handed out as the attach endpoint.
    pub public_url: Option<String>,
    /// Bounds the refusals being reported to the audit trail at once, so that a flood of bad
    /// credentials costs session-api a bounded number of writes in flight.
    pub refusal_reports: Arc<Semaphore>,
    /// Whether the public port is TLS: the scheme of the attach endpoints handed out when the
    /// request does not say.
    pub serves_tls: bool,
}

/// How many refused attempts may be on their way to the audit trail at once; more are logged
/// and dropped.
pub const MAX_REFUSAL_REPORTS_IN_FLIGHT: usize = 64;

/// Counts the terminal streams of each principal (by subject), so that one credential cannot
/// hold an unbounded number of broker streams and sockets open.
#[derive(Clone, Debug)]
pub struct StreamSlots {
    held: Arc<Mutex<HashMap<String, usize>>>,
    max_per_principal: usize,
}

impl StreamSlots {
    pub fn new(max_per_principal: usize) -> Self {
        Self {
            held: Arc::default(),
            max_per_principal,
        }
    }

    /// A slot for one more stream of `subject`, given back when dropped; 429 when it holds
    /// the most it may.
    pub fn acquire(&self, subject: &str) -> Result<StreamSlot, ApiError> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = held.entry(subject.to_owned()).or_default();
        if *count >= self.max_per_principal {
            return Err(ApiError::new(
                ErrorCode::TooManyRequests,
                format!(
                    "this credential holds {} terminal streams already, the most it may",
                    self.max_per_principal
                ),
            ));
        }
        *count += 1;
        Ok(StreamSlot {
            slots: self.clone(),
            subject: subject.to_owned(),
        })
    }
}

/// One held stream of [`StreamSlots`].
#[derive(Debug)]
pub struct StreamSlot {
    slots: StreamSlots,
    subject: String,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut held = self
            .slots
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.subject) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.subject);
            }
        }
    }
}

impl AppState {
    /// Reports a refused attempt to the audit trail, in the background: `principal` is `None`
    /// when the credential itself was refused. `reason` is `unauthenticated` or `forbidden`,
    /// `action` what was tried (a method and path, a gRPC method).
    pub fn report_refusal(
        &self,
        principal: Option<&Principal>,
        client_address: Option<String>,
        surface: Surface,
        reason: &'static str,
        action: String,
    ) {
        let Ok(permit) = self.refusal_reports.clone().try_acquire_owned() else {
            tracing::warn!(reason, %action, "too many refusals in flight: one is not in the audit trail");
            return;
        };
        let actor = match principal {
            Some(principal) => Actor::new(&principal.subject, client_address, surface),
            None => Actor::unknown(client_address, surface),
        };
        let upstreams = self.upstreams.acting_for(&actor);
        tokio::spawn(async move {
            let report = AuditReport::new(AuditKind::Refused)
                .detail("reason", reason)
                .detail("action", action);
            upstreams.report_audit_event(report).await;
            drop(permit);
        });
    }

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
                        principal.client_address.clone(),
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

    /// Looks up a session of an instance the caller may use; a session of another instance is
    /// 404, never an action on the other instance. [`DEFAULT_SESSION`] names the live session
    /// with the `default` alias (404 while there is none).
    pub async fn authorize_session(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_holds_at_most_its_streams_and_gets_them_back() {
        let slots = StreamSlots::new(2);
        let first = slots.acquire("alice").expect("a slot");
        let _second = slots.acquire("alice").expect("a slot");
        let refused = slots.acquire("alice").expect_err("over the limit");
        assert_eq!(refused.code, ErrorCode::TooManyRequests);
        assert_eq!(refused.code.http_status().as_u16(), 429);
        let _other = slots.acquire("bob").expect("another principal has its own");
        drop(first);
        slots.acquire("alice").expect("a slot given back");
    }
}
