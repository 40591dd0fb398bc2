//! What every handler shares, and the checks every instance-scoped request goes through: the
//! caller's scope covers the instance, and the session belongs to it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::net::{IpAddr, SocketAddr};

use axum::http::{Extensions, HeaderMap, Uri};
use tokio::time::Instant;

use ptyhub_wire::Surface;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth::AuthError;
use crate::auth::{
    Access, Authenticator, Principal, SHARE_TOKEN_PREFIX, Via, bearer_token, peer_address,
};
use crate::browser::HostPolicy;
use crate::cookie::{CookieSite, RequestCookie};
use crate::domain::{Instance, Session, SessionStatus, ShareLookup};
use crate::rate_limit::{FailedAuthLimiter, client_address};
use ptyhub_wire::ErrorCode;

use crate::error::ApiError;
use crate::grpc::Upstreams;
use crate::metrics::Metrics;
use crate::refusals::{Refusal, RefusalAudit};

/// What a session id in a path may also be: the session with the `default` alias (the legacy
/// single session), as `/terminal/reset` and the WebSocket's `/terminal` name it.
pub const DEFAULT_SESSION: &str = "default";

/// What every handler and stream shares: one allocation, so that a clone (every request and
/// every WebSocket bridge holds one) costs a reference count, not a copy of every field.
#[derive(Clone, Debug)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The fields of [`AppState`].
#[derive(Debug)]
pub struct Shared {
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
    /// The shares whose credentials hold streams open here.
    pub share_watches: ShareWatches,
    /// The terminal streams each principal holds open, bounded per principal.
    pub stream_slots: StreamSlots,
    /// The configured public URL of the gateway, handed out as the attach endpoint.
    pub public_url: Option<String>,
    /// Refused attempts on their way to the audit trail, coalesced per principal, address and
    /// reason into a row a minute.
    pub refusals: RefusalAudit,
    /// Whether the public port is TLS: the scheme of the attach endpoints handed out when the
    /// request does not say.
    pub serves_tls: bool,
    /// Which `Host` names the gateway answers.
    pub host_policy: HostPolicy,
    /// Refused credentials per client address.
    pub failed_auth: FailedAuthLimiter,
    /// Whether the client address is the last `X-Forwarded-For` entry.
    pub trust_forwarded_for: bool,
}

/// The credentials a request presents: a bearer token or JWT (a header, a WebSocket's query or
/// protocol, gRPC metadata), and the page's session cookie. A bearer credential, when given,
/// is the one checked; the cookie stands in only without one.
#[derive(Debug, Clone, Default)]
pub struct Presented {
    pub bearer: Option<String>,
    pub cookie: Option<RequestCookie>,
    /// Where the request came from, for the limit on refused credentials.
    pub client: Option<IpAddr>,
    /// The TCP peer, the address the audit trail records.
    pub peer: Option<SocketAddr>,
}

impl Presented {
    /// The `Authorization: Bearer` header and the session cookie of a request.
    pub fn from_request(
        state: &AppState,
        headers: &HeaderMap,
        uri: &Uri,
        extensions: &Extensions,
    ) -> Self {
        Self {
            bearer: bearer_token(headers).map(str::to_owned),
            cookie: state.session_cookie(headers, uri),
            client: state.client_address(headers, extensions),
            peer: peer_address(extensions),
        }
    }

    /// Whether the cookie is what will be checked.
    pub fn by_cookie(&self) -> bool {
        self.bearer.as_deref().is_none_or(str::is_empty) && self.cookie.is_some()
    }
}

/// Whether a refusal looks like a guess: a bearer credential that did not verify, or a cookie
/// that is not ours. Missing credentials and cookies that expired or were signed out do not
/// count, so a browser with an old cookie is never locked out.
fn counts_as_a_guess(presented: &Presented, error: &ApiError) -> bool {
    if error.code != ErrorCode::Unauthenticated {
        return false;
    }
    let by_bearer = presented
        .bearer
        .as_deref()
        .is_some_and(|bearer| !bearer.is_empty());
    if by_bearer {
        return true;
    }
    presented.cookie.is_some() && error.message == AuthError::Invalid.to_string()
}

/// Whether [`AppState::authenticate`] refused the credential: 401, or 429 for an address out of
/// tries, whose credential was refused all the same (the limit changes only the answer). Both
/// are refusals in the audit trail, where a flood costs a row a minute ([`RefusalAudit`]).
pub fn credential_refused(error: &ApiError) -> bool {
    matches!(
        error.code,
        ErrorCode::Unauthenticated | ErrorCode::TooManyRequests
    )
}

/// Why a credential's streams end before their clients leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialEnd {
    Expired,
    Revoked,
}

impl CredentialEnd {
    /// The words a closing stream gives (a WebSocket's close reason, a gRPC status message).
    pub fn reason(self) -> &'static str {
        match self {
            CredentialEnd::Expired => "credential expired",
            CredentialEnd::Revoked => "share link revoked",
        }
    }
}

/// What ends the streams a credential opened: its expiry, and for a share's credential the
/// share's revocation. Clones share one watch.
#[derive(Debug, Clone)]
pub struct CredentialWatch {
    expires_at: Option<u64>,
    revoked: Option<Arc<ShareWatch>>,
}

impl CredentialWatch {
    /// Completes when the credential ends, saying why; never for one that does not.
    pub async fn ended(&self) -> CredentialEnd {
        match &self.revoked {
            None => {
                credential_expired(self.expires_at).await;
                CredentialEnd::Expired
            }
            Some(watch) => tokio::select! {
                () = credential_expired(self.expires_at) => CredentialEnd::Expired,
                () = watch.ended.cancelled() => CredentialEnd::Revoked,
            },
        }
    }
}

/// How often a gateway asks session-api whether a share with open streams still stands, so
/// that a revoke made through another replica ends them too (one made here ends them at once).
const SHARE_RECHECK: Duration = Duration::from_secs(1);

/// The shares whose credentials hold streams open here, each with a token cancelled when the
/// share ends, and how many streams watch it.
#[derive(Debug, Clone, Default)]
pub struct ShareWatches {
    watched: Arc<Mutex<HashMap<String, (CancellationToken, usize)>>>,
}

/// One stream's watch of a share; the share is looked up while any stream watches it.
#[derive(Debug)]
pub struct ShareWatch {
    watches: ShareWatches,
    share_id: String,
    ended: CancellationToken,
}

impl Drop for ShareWatch {
    fn drop(&mut self) {
        let mut watched = self
            .watches
            .watched
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((_, count)) = watched.get_mut(&self.share_id) {
            *count -= 1;
            if *count == 0 {
                watched.remove(&self.share_id);
            }
        }
    }
}

impl ShareWatches {
    /// Ends the streams of `share_id` now: it was revoked through this gateway.
    pub fn revoked(&self, share_id: &str) {
        let watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((ended, _)) = watched.get(share_id) {
            ended.cancel();
        }
    }

    fn watch(&self, state: &AppState, share_id: &str) -> ShareWatch {
        let mut watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        let (ended, count) = watched.entry(share_id.to_owned()).or_insert_with(|| {
            let ended = CancellationToken::new();
            tokio::spawn(recheck_share(
                state.clone(),
                share_id.to_owned(),
                ended.clone(),
            ));
            (ended, 0)
        });
        *count += 1;
        ShareWatch {
            watches: self.clone(),
            share_id: share_id.to_owned(),
            ended: ended.clone(),
        }
    }

    fn is_watched(&self, share_id: &str) -> bool {
        self.watched
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(share_id)
    }
}

/// Looks `share_id` up every [`SHARE_RECHECK`] while streams watch it, and cancels `ended` once
/// session-api no longer finds it live (revoked or expired). A failed lookup is tried again:
/// streams end for a share that ended, never for a session-api that did not answer.
async fn recheck_share(state: AppState, share_id: String, ended: CancellationToken) {
    loop {
        tokio::select! {
            () = ended.cancelled() => return,
            () = state.shutdown.cancelled() => return,
            () = tokio::time::sleep(SHARE_RECHECK) => {}
        }
        if !state.share_watches.is_watched(&share_id) {
            return;
        }
        match state.upstreams.find_share(ShareLookup::Id(&share_id)).await {
            Ok(_) => {}
            Err(error) if error.code == ErrorCode::NotFound || error.code == ErrorCode::Invalid => {
                tracing::info!(%share_id, "share ended: ending its streams");
                ended.cancel();
                return;
            }
            Err(error) => {
                tracing::debug!(%share_id, %error, "cannot check a share: trying again");
            }
        }
    }
}

/// Completes when a credential that expires at `expires_at` (Unix seconds) does; never for one
/// without an expiry. Every stream a credential opened ends with it.
pub async fn credential_expired(expires_at: Option<u64>) {
    match expires_at {
        None => std::future::pending().await,
        Some(at) => tokio::time::sleep(Duration::from_secs(at.saturating_sub(unix_now()))).await,
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// Counts the long-lived streams of each principal (by subject) on every surface (terminal
/// WebSockets, relayed `Attach` streams, session events as Server-Sent Events and gRPC
/// `WatchSessions`), so that one credential cannot hold an unbounded number of them open.
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
                    "this credential holds {} streams already, the most it may",
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
    /// The client address of a request.
    pub fn client_address(&self, headers: &HeaderMap, extensions: &Extensions) -> Option<IpAddr> {
        client_address(extensions, headers, self.trust_forwarded_for)
    }

    /// Whether the browser reached the gateway over TLS: the gateway serves TLS itself
    /// (`--tls-cert`), its public URL is `https`, or the proxy that terminates TLS in front of it
    /// says so.
    pub fn is_https(&self, headers: &HeaderMap) -> bool {
        self.serves_tls
            || self
                .public_url
                .as_deref()
                .is_some_and(|url| url.starts_with("https://"))
            || headers
                .get("x-forwarded-proto")
                .and_then(|value| value.to_str().ok())
                .is_some_and(|value| value.split(',').next().map(str::trim) == Some("https"))
    }

    /// The site a request addressed, which its session cookie is bound to.
    pub fn cookie_site(&self, headers: &HeaderMap, uri: &Uri) -> Option<CookieSite> {
        CookieSite::of_request(headers, uri, self.is_https(headers))
    }

    /// The request's session cookie for the site it addressed, if it carries one.
    pub fn session_cookie(&self, headers: &HeaderMap, uri: &Uri) -> Option<RequestCookie> {
        let site = self.cookie_site(headers, uri)?;
        self.authenticator.cookies().find(headers, &site)
    }

    /// What ends the streams `principal` opens: its credential's expiry, and a share's
    /// revocation.
    pub fn credential_watch(&self, principal: &Principal) -> CredentialWatch {
        let revoked = match &principal.via {
            Via::Share(share_id) => Some(Arc::new(self.share_watches.watch(self, share_id))),
            _ => None,
        };
        CredentialWatch {
            expires_at: principal.expires_at,
            revoked,
        }
    }

    /// The principal of a request's credentials. Each refused credential (not a missing one,
    /// nor a cookie that merely ended) counts against its client address; once an address is
    /// out of tries, a credential it presents that is refused is answered 429 instead of 401.
    /// A valid credential always passes, so that nobody (a page of another site firing bad
    /// tokens at the gateway, a stranger behind the same proxy) can lock its owner out.
    pub async fn authenticate(&self, presented: &Presented) -> Result<Principal, ApiError> {
        let now = Instant::now();
        let result = self
            .authenticate_unlimited(presented)
            .await
            .map(|principal| principal.from_address(presented.peer));
        if let (Err(error), Some(client)) = (&result, presented.client)
            && counts_as_a_guess(presented, error)
        {
            if let Err(wait) = self.failed_auth.check(client, now) {
                return Err(ApiError::new(
                    ErrorCode::TooManyRequests,
                    format!(
                        "too many refused credentials from this address: try again in {} s",
                        wait.as_secs().max(1)
                    ),
                ));
            }
            self.failed_auth.record_failure(client, now);
            tracing::info!(%client, reason = %error.message, "credential refused");
        }
        result
    }

    async fn authenticate_unlimited(&self, presented: &Presented) -> Result<Principal, ApiError> {
        let principal = match (&presented.bearer, &presented.cookie) {
            (Some(bearer), _) if bearer.starts_with(SHARE_TOKEN_PREFIX) => {
                return self.share_principal(ShareLookup::Token(bearer)).await;
            }
            (Some(bearer), _) if !bearer.is_empty() => {
                self.authenticator.authenticate(Some(bearer))?
            }
            (_, Some(cookie)) => {
                let (principal, _) = self.authenticator.authenticate_cookie(cookie, unix_now())?;
                match &principal.via {
                    // A share's cookie is as good as its share: revoked or expired, it ends.
                    Via::Share(share_id) => {
                        let mut shared = self.share_principal(ShareLookup::Id(share_id)).await?;
                        shared.expires_at = match (shared.expires_at, principal.expires_at) {
                            (Some(share), Some(cookie)) => Some(share.min(cookie)),
                            (share, cookie) => share.or(cookie),
                        };
                        shared
                    }
                    _ => principal,
                }
            }
            _ => self.authenticator.authenticate(None)?,
        };
        Ok(principal)
    }

    /// The viewer-only principal of a live share.
    async fn share_principal(&self, lookup: ShareLookup<'_>) -> Result<Principal, ApiError> {
        let share = match self.upstreams.find_share(lookup).await {
            Ok(share) => share,
            Err(error) if error.code == ErrorCode::NotFound || error.code == ErrorCode::Invalid => {
                return Err(ApiError::unauthenticated(
                    "share link not found, expired or revoked",
                ));
            }
            Err(error) => return Err(error),
        };
        Ok(Principal {
            subject: format!("share:{}", share.id),
            access: Access::shared(&share.instance_id, share.session_id.as_deref()),
            expires_at: share
                .expires_at
                .and_then(|at| u64::try_from(at.timestamp()).ok()),
            via: Via::Share(share.id),
            client_address: None,
        })
    }

    /// Counts a refused attempt for the audit trail ([`RefusalAudit`]): `principal` is `None`
    /// when the credential itself was refused. `reason` is `unauthenticated` or `forbidden`,
    /// `action` what was tried (a method and path, a gRPC method).
    pub fn report_refusal(
        &self,
        principal: Option<&Principal>,
        peer: Option<SocketAddr>,
        surface: Surface,
        reason: &'static str,
        action: String,
    ) {
        self.refusals.record(Refusal {
            principal: principal.map(|principal| principal.subject.clone()),
            address: peer.map(|peer| peer.ip()),
            surface,
            reason,
            action,
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
        if !principal.access.allows_session(&session.id) {
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
        if session.instance_id != instance.id {
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
