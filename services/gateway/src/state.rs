//! What every handler shares ([`AppState`]): the upstream clients, the credential checks, the
//! open streams, the browser policy and the audit trail's refusals, one allocation behind a
//! cheap handle.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{Extensions, HeaderMap, Uri};
use ptyhub_wire::Surface;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth::{Authenticator, Principal};
use crate::browser::{HostPolicy, request_is_https};
use crate::cookie::{CookieSite, RequestCookie};
use crate::grpc::Upstreams;
use crate::metrics::Metrics;
use crate::rate_limit::{FailedAuthLimiter, client_address};
use crate::refusals::{Refusal, RefusalAudit};
use crate::streams::StreamRegistry;

// What a stream keeps of its credential, named where every handler finds the rest of what it
// shares.
pub use crate::streams::CredentialWatch;

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
    /// How often an idle session event stream carries a keep-alive comment.
    pub events_keep_alive: Duration,
    /// Cancelled when a shutdown begins: `/readyz` answers 503 from then on, while everything
    /// else keeps serving for the drain delay.
    pub draining: CancellationToken,
    /// Cancelled when the gateway stops serving; WebSockets and streams end with it.
    pub shutdown: CancellationToken,
    /// Every WebSocket bridge and public `Attach` relay, so shutdown can wait for them.
    pub bridges: TaskTracker,
    /// Every principal's open streams on every surface, bounded per principal, and what ends
    /// them when their credential does.
    pub streams: StreamRegistry,
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
    /// What the probes wait for besides the backends (`Config::readiness`).
    pub readiness: crate::Readiness,
    /// The clock credentials' expiry is read by (`Config::clock`).
    pub clock: crate::Clock,
}

impl AppState {
    /// The client address of a request.
    pub fn client_address(&self, headers: &HeaderMap, extensions: &Extensions) -> Option<IpAddr> {
        client_address(extensions, headers, self.trust_forwarded_for)
    }

    /// Whether the browser reached the gateway over TLS ([`request_is_https`]).
    pub fn is_https(&self, headers: &HeaderMap) -> bool {
        request_is_https(self.serves_tls, self.public_url.as_deref(), headers)
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
}
