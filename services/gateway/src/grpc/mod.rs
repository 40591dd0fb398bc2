//! The gateway's only contact with generated protobuf types on the way to its upstreams:
//! [`Upstreams`] and its typed calls to session-api (about records in `records.rs`, about what a
//! terminal shows and does in `terminal.rs`), `Attach` streams to brokers (`attach.rs`), and the
//! conversions to [`crate::domain`] (`convert.rs`).
//!
//! The session proxy (`session_proxy.rs`) and the relay (`attach_relay.rs`) forward protobuf
//! messages as they are; everything else goes through here.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ptyhub_model::{AuditKind, Role};
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_wire::{Actor, BearerAuth, ServiceCredential};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::brokers::{BrokerChannels, InProcessBrokers};
use crate::domain::SessionChange;
use crate::error::ApiError;

mod attach;
mod convert;
mod records;
mod terminal;
mod webhooks;

pub use attach::{AttachCommands, AttachEvents};
pub use convert::{
    audit_listing_from_proto, audit_listing_to_proto, instance_from_proto, instance_to_proto,
    session_from_proto,
};
pub use records::BrokerHealth;

/// What the gateway reports to the audit trail (see [`Upstreams::report_audit_event`]).
#[derive(Debug, Clone)]
pub struct AuditReport {
    pub kind: AuditKind,
    pub instance_id: Option<String>,
    pub session_id: Option<String>,
    pub role: Option<Role>,
    pub attachment_id: Option<uuid::Uuid>,
    pub detail: BTreeMap<String, String>,
}

impl AuditReport {
    pub fn new(kind: AuditKind) -> Self {
        Self {
            kind,
            instance_id: None,
            session_id: None,
            role: None,
            attachment_id: None,
            detail: BTreeMap::new(),
        }
    }

    /// One stream's attach or detach.
    pub fn stream(
        kind: AuditKind,
        instance_id: &str,
        session_id: &(impl std::fmt::Display + ?Sized),
        role: Role,
        attachment_id: uuid::Uuid,
    ) -> Self {
        Self {
            instance_id: Some(instance_id.to_owned()),
            session_id: Some(session_id.to_string()),
            role: Some(role),
            attachment_id: Some(attachment_id),
            ..Self::new(kind)
        }
    }

    pub fn detail(mut self, key: &str, value: impl Into<String>) -> Self {
        self.detail.insert(key.to_owned(), value.into());
        self
    }
}

/// Session changes as [`Upstreams::watch_sessions`] streams them.
pub type SessionChanges = std::pin::Pin<
    Box<dyn futures::Stream<Item = Result<SessionChange, ApiError>> + Send + 'static>,
>;

/// The raw session-api client, with the service credential (and, acting for a user, the
/// [`Actor`]) on every call.
pub type SessionApiClient =
    session_pb::session_api_client::SessionApiClient<InterceptedService<Channel, SessionApiAuth>>;

/// What every call to session-api carries: the gateway's service credential, and the end user
/// the call is made for, whom session-api's audit trail names.
#[derive(Clone, Debug)]
pub struct SessionApiAuth {
    credential: BearerAuth,
    actor: Option<Arc<Actor>>,
}

impl Interceptor for SessionApiAuth {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        self.credential.authorize(&mut request);
        if let Some(actor) = &self.actor {
            actor.insert_into(request.metadata_mut());
        }
        Ok(request)
    }
}
type BrokerRegistryClient = session_pb::broker_registry_client::BrokerRegistryClient<
    InterceptedService<Channel, BearerAuth>,
>;
type ShareRegistryClient = session_pb::share_registry_client::ShareRegistryClient<
    InterceptedService<Channel, SessionApiAuth>,
>;

const SESSION_API: &str = "session-api";
const BROKER: &str = "pty-broker";

/// The session-api endpoint cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("invalid session-api endpoint {endpoint:?}: {source}")]
pub struct UpstreamError {
    endpoint: String,
    source: ptyhub_wire::TlsError,
}

/// The services the gateway forwards to: session-api, and the brokers it names. A handle: every
/// stream holds one (acting for its principal), and a clone costs a reference count.
#[derive(Clone, Debug)]
pub struct Upstreams(Arc<UpstreamClients>);

impl std::ops::Deref for Upstreams {
    type Target = UpstreamClients;

    fn deref(&self) -> &UpstreamClients {
        &self.0
    }
}

/// The clients of [`Upstreams`].
#[derive(Clone, Debug)]
pub struct UpstreamClients {
    session_api: SessionApiClient,
    /// The channels and credential the session-api clients are built on, for
    /// [`Upstreams::acting_for`].
    channel: Channel,
    waits_channel: Channel,
    credential: BearerAuth,
    /// The same service on a channel without a per-call bound, for screen waits.
    session_api_waits: SessionApiClient,
    broker_registry: BrokerRegistryClient,
    share_registry: ShareRegistryClient,
    brokers: BrokerChannels,
    /// How long an answer may take beyond a wait's own timeout.
    answer_margin: Duration,
    /// Acting for someone (see [`Upstreams::acting_for`]): who, and the upstreams acting for
    /// no one these were made from.
    acting: Option<(Arc<Actor>, Upstreams)>,
}

impl Upstreams {
    /// Connects lazily: the gateway starts even when session-api is down, and `/healthz` says so.
    /// `keep_alive` is the HTTP/2 ping interval and timeout of every backend connection.
    pub fn new(
        endpoint: &str,
        service_credential: &ServiceCredential,
        timeout: Duration,
        keep_alive: Duration,
        tls: &ptyhub_wire::TlsConfig,
        in_process_brokers: InProcessBrokers,
    ) -> Result<Self, UpstreamError> {
        let endpoint = tls
            .endpoint(endpoint)
            .map_err(|source| UpstreamError {
                endpoint: endpoint.to_owned(),
                source,
            })?
            .connect_timeout(timeout)
            .http2_keep_alive_interval(keep_alive)
            .keep_alive_timeout(keep_alive);
        // Screen waits last as long as their caller asks (up to five minutes), so they cannot
        // share the channel whose every call gives up after `timeout`: the channel's bound
        // would cut them short (tonic takes the shorter of it and the call's own). Their
        // channel has no bound of its own; each wait carries its own deadline instead.
        let waits = endpoint.clone().connect_lazy();
        let channel = endpoint.timeout(timeout).connect_lazy();
        let interceptor = service_credential.bearer_auth();
        let auth = SessionApiAuth {
            credential: interceptor.clone(),
            actor: None,
        };
        Ok(Self(Arc::new(UpstreamClients {
            session_api: session_pb::session_api_client::SessionApiClient::with_interceptor(
                channel.clone(),
                auth.clone(),
            ),
            session_api_waits: session_pb::session_api_client::SessionApiClient::with_interceptor(
                waits.clone(),
                auth.clone(),
            ),
            broker_registry:
                session_pb::broker_registry_client::BrokerRegistryClient::with_interceptor(
                    channel.clone(),
                    interceptor.clone(),
                ),
            share_registry:
                session_pb::share_registry_client::ShareRegistryClient::with_interceptor(
                    channel.clone(),
                    auth,
                ),
            channel,
            waits_channel: waits,
            credential: interceptor,
            brokers: BrokerChannels::new(timeout, tls.clone(), in_process_brokers)
                .with_keep_alive(keep_alive),
            answer_margin: timeout,
            acting: None,
        })))
    }

    /// The same upstreams, whose calls to session-api say they are made for `actor`: what
    /// every call that changes something, or attaches, uses, so the audit trail names the user.
    pub fn acting_for(&self, actor: &Actor) -> Upstreams {
        self.acting_for_shared(Arc::new(actor.clone()))
    }

    /// Who these upstreams act for, if anyone, and the upstreams acting for no one they were
    /// made from: what a holder that calls only now and then keeps instead of these (a copy of
    /// every client, half a KiB), to act for the actor again when it calls
    /// ([`Upstreams::acting_for_shared`]).
    pub fn actor_and_base(&self) -> (Option<Arc<Actor>>, Upstreams) {
        match &self.acting {
            Some((actor, base)) => (Some(actor.clone()), base.clone()),
            None => (None, self.clone()),
        }
    }

    /// [`Upstreams::acting_for`] with an actor already shared.
    pub fn acting_for_shared(&self, actor: Arc<Actor>) -> Upstreams {
        let (_, base) = self.actor_and_base();
        let auth = SessionApiAuth {
            credential: self.credential.clone(),
            actor: Some(actor.clone()),
        };
        let mut upstreams = UpstreamClients::clone(self);
        upstreams.acting = Some((actor, base));
        upstreams.session_api = session_pb::session_api_client::SessionApiClient::with_interceptor(
            self.channel.clone(),
            auth.clone(),
        );
        upstreams.share_registry =
            session_pb::share_registry_client::ShareRegistryClient::with_interceptor(
                self.channel.clone(),
                auth.clone(),
            );
        upstreams.session_api_waits =
            session_pb::session_api_client::SessionApiClient::with_interceptor(
                self.waits_channel.clone(),
                auth,
            );
        Self(Arc::new(upstreams))
    }
}

fn session_api_error(status: tonic::Status) -> ApiError {
    ApiError::from_backend(SESSION_API, &status)
}

fn broker_error(status: tonic::Status) -> ApiError {
    ApiError::from_backend(BROKER, &status)
}

#[cfg(test)]
mod tests {
    use ptyhub_wire::Surface;

    use super::*;

    fn upstreams() -> Upstreams {
        let credential = ServiceCredential::new("gateway-test-token-0123456789abcdef").unwrap();
        Upstreams::new(
            "http://127.0.0.1:9",
            &credential,
            Duration::from_secs(1),
            Duration::from_secs(30),
            &ptyhub_wire::TlsConfig::default(),
            InProcessBrokers::default(),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn upstreams_acting_for_someone_give_back_the_actor_and_the_upstreams_they_came_from() {
        let base = upstreams();
        let (actor, same) = base.actor_and_base();
        assert!(actor.is_none());
        assert!(Arc::ptr_eq(&same.0, &base.0));

        let alice = Actor::new("alice", None, Surface::WebSocket);
        let acting = base.acting_for(&alice);
        let (actor, from) = acting.actor_and_base();
        assert_eq!(actor.as_deref(), Some(&alice));
        assert!(Arc::ptr_eq(&from.0, &base.0));

        // Acting for someone else again starts from the same base, not from a chain of copies.
        let bob = Arc::new(Actor::new("bob", None, Surface::Rest));
        let (actor, from) = acting.acting_for_shared(bob.clone()).actor_and_base();
        assert!(Arc::ptr_eq(&actor.unwrap(), &bob));
        assert!(Arc::ptr_eq(&from.0, &base.0));
    }
}
