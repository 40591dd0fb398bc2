//! The gateway's way to a broker: one lazily connected gRPC channel per endpoint, or, for a
//! broker in the gateway's own process (`ptyhub up`), that broker called directly
//! (`ptyhub_wire::InProcessBroker`).
//!
//! A call in process is the same gRPC call, with the same messages, checks and limits, but
//! without HTTP/2, the loopback connection and the connection tasks on both sides of it; and
//! `Attach`, the call on a keystroke's path, hands its frames over as values, never encoded.
//! The gateway's WebSocket task polls the broker's `Attach` response stream itself, so an
//! output byte goes from the session's ring to the WebSocket without crossing another task,
//! and a keystroke crosses one (the broker's reader of the client's frames). Health checks
//! still go over the network: `/healthz` reports whether the broker answers on the port
//! session-api and every other client use. These are the only two roads: a broker in another
//! process, on this host or another, is called over the network.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use ptyhub_wire::{AttachInProcess, InProcessBroker};
use tonic::body::Body;
use tonic::service::Routes;
use tonic::transport::Channel;

use crate::error::ApiError;

/// Brokers running in the gateway's process, by the endpoint they registered with session-api:
/// a session-api answer naming that endpoint is served by calling the broker's service in
/// process. Cloned handles share one table, so a broker started after the gateway can be added.
#[derive(Clone, Default)]
pub struct InProcessBrokers {
    brokers: Arc<RwLock<HashMap<String, InProcessBroker>>>,
}

impl InProcessBrokers {
    /// From now on, calls to `endpoint` go to `broker` (a broker's `in_process()`).
    pub fn insert(&self, endpoint: impl Into<String>, broker: InProcessBroker) {
        self.brokers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(endpoint.into(), broker);
    }

    /// From now on, calls to `endpoint` go over the network again (streams already open stay
    /// as they are); returns the broker it called.
    pub fn remove(&self, endpoint: &str) -> Option<InProcessBroker> {
        self.brokers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(endpoint)
    }

    /// Whether calls to `endpoint` are made in process.
    pub fn contains(&self, endpoint: &str) -> bool {
        self.get(endpoint).is_some()
    }

    fn get(&self, endpoint: &str) -> Option<InProcessBroker> {
        self.brokers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(endpoint)
            .cloned()
    }
}

impl fmt::Debug for InProcessBrokers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let brokers = self.brokers.read().unwrap_or_else(PoisonError::into_inner);
        f.debug_set().entries(brokers.keys()).finish()
    }
}

/// What a broker client is built on: a channel to its endpoint, or its service in this process.
#[derive(Clone, Debug)]
pub enum BrokerTransport {
    Network(Channel),
    InProcess(Routes),
}

impl tower::Service<http::Request<Body>> for BrokerTransport {
    type Response = http::Response<Body>;
    type Error = tonic::codegen::StdError;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        match self {
            Self::Network(channel) => {
                tower::Service::<http::Request<Body>>::poll_ready(channel, cx).map_err(Into::into)
            }
            Self::InProcess(routes) => {
                tower::Service::<http::Request<Body>>::poll_ready(routes, cx).map_err(never)
            }
        }
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        match self {
            Self::Network(channel) => channel.call(request).map(|r| r.map_err(Into::into)).boxed(),
            Self::InProcess(routes) => routes.call(request).map(|r| r.map_err(never)).boxed(),
        }
    }
}

fn never(never: Infallible) -> tonic::codegen::StdError {
    match never {}
}

/// The brokers the gateway has reached: one lazily connected channel per endpoint, shared by
/// every stream to it, and the brokers of its own process.
#[derive(Clone, Debug)]
pub struct BrokerChannels {
    channels: Arc<Mutex<HashMap<String, Channel>>>,
    in_process: InProcessBrokers,
    timeout: Duration,
    /// The HTTP/2 keepalive interval and ping timeout that find a dead or frozen broker.
    keep_alive: Duration,
    /// `https://` brokers are dialled with TLS, trusting the configured CA.
    tls: ptyhub_wire::TlsConfig,
}

impl BrokerChannels {
    pub fn new(
        timeout: Duration,
        tls: ptyhub_wire::TlsConfig,
        in_process: InProcessBrokers,
    ) -> Self {
        Self {
            channels: Arc::default(),
            in_process,
            timeout,
            keep_alive: crate::config::Config::DEFAULT_BACKEND_KEEP_ALIVE,
            tls,
        }
    }

    /// Dials brokers with this HTTP/2 keepalive interval and ping timeout.
    pub fn with_keep_alive(mut self, keep_alive: Duration) -> Self {
        self.keep_alive = keep_alive;
        self
    }

    /// How to call the broker at `endpoint`: in process when it runs here, else over its
    /// channel.
    pub fn transport(&self, endpoint: &str) -> Result<BrokerTransport, ApiError> {
        match self.in_process.get(endpoint) {
            Some(broker) => Ok(BrokerTransport::InProcess(broker.service().clone())),
            None => Ok(BrokerTransport::Network(self.channel(endpoint)?)),
        }
    }

    /// The `Attach` of the broker at `endpoint` when it runs in this process, which takes the
    /// frames as values; `None` for a broker called over the network.
    pub fn attach_in_process(&self, endpoint: &str) -> Option<Arc<dyn AttachInProcess>> {
        self.in_process
            .get(endpoint)
            .map(|broker| broker.attach().clone())
    }

    fn channel(&self, endpoint: &str) -> Result<Channel, ApiError> {
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(channel) = channels.get(endpoint) {
            return Ok(channel.clone());
        }
        // No request timeout here: an Attach stream lives as long as its client. HTTP/2
        // keepalive finds a dead broker instead.
        let channel = self
            .tls
            .endpoint(endpoint)
            .map_err(|error| {
                ApiError::internal(format!(
                    "session-api returned a broker endpoint the gateway cannot use: {error}"
                ))
            })?
            .connect_timeout(self.timeout)
            .http2_keep_alive_interval(self.keep_alive)
            .keep_alive_timeout(self.keep_alive)
            .keep_alive_while_idle(true)
            .connect_lazy();
        channels.insert(endpoint.to_owned(), channel.clone());
        Ok(channel)
    }

    /// Whether the broker at `endpoint` answers its health check over the network.
    pub async fn check_health(&self, endpoint: &str) -> Result<(), String> {
        use tonic_health::pb::health_check_response::ServingStatus;
        let channel = self.channel(endpoint).map_err(|error| error.message)?;
        let mut client = tonic_health::pb::health_client::HealthClient::new(channel);
        let request = tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        };
        match tokio::time::timeout(self.timeout, client.check(request)).await {
            Err(_) => Err("health check timed out".into()),
            Ok(Err(status)) => Err(format!("health check failed: {}", status.message())),
            Ok(Ok(response)) if response.get_ref().status == ServingStatus::Serving as i32 => {
                Ok(())
            }
            Ok(Ok(_)) => Err("not serving".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::{HealthCheckRequest, health_check_response};

    use super::*;

    const HERE: &str = "http://127.0.0.1:1";

    /// An `Attach` that refuses every stream, as a broker without sessions would.
    struct RefusingAttach;

    impl AttachInProcess for RefusingAttach {
        fn attach(
            &self,
            _frames: ptyhub_wire::ClientFrames,
        ) -> tonic::codegen::BoxFuture<ptyhub_wire::ServerFrames, tonic::Status> {
            Box::pin(async { Err(tonic::Status::not_found("no such session")) })
        }
    }

    async fn brokers_with_a_health_service_in_process() -> BrokerChannels {
        let (reporter, service) = tonic_health::server::health_reporter();
        reporter
            .set_service_status("", tonic_health::ServingStatus::Serving)
            .await;
        let in_process = InProcessBrokers::default();
        in_process.insert(
            HERE,
            InProcessBroker::new(Routes::new(service), Arc::new(RefusingAttach)),
        );
        BrokerChannels::new(
            Duration::from_secs(2),
            ptyhub_wire::TlsConfig::plain(),
            in_process,
        )
    }

    async fn check(transport: BrokerTransport) -> Result<i32, tonic::Status> {
        let response = HealthClient::new(transport)
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await?;
        Ok(response.into_inner().status)
    }

    #[tokio::test]
    async fn a_registered_endpoint_is_called_in_process_without_a_socket() {
        let brokers = brokers_with_a_health_service_in_process().await;
        let transport = brokers.transport(HERE).unwrap();
        assert!(matches!(transport, BrokerTransport::InProcess(_)));
        // Nothing listens on port 1: the answer can only have come from the service itself.
        assert_eq!(
            check(transport).await.unwrap(),
            health_check_response::ServingStatus::Serving as i32
        );
    }

    #[tokio::test]
    async fn attach_in_process_is_the_registered_brokers_own() {
        let brokers = brokers_with_a_health_service_in_process().await;
        let attach = brokers
            .attach_in_process(HERE)
            .expect("registered in process");
        let refused = attach
            .attach(Box::pin(futures::stream::empty()))
            .await
            .err()
            .expect("the broker's own answer");
        assert_eq!(refused.code(), tonic::Code::NotFound, "{refused:?}");
        assert!(brokers.attach_in_process("http://127.0.0.1:2").is_none());
    }

    #[tokio::test]
    async fn an_unknown_or_removed_endpoint_goes_over_the_network() {
        let brokers = brokers_with_a_health_service_in_process().await;
        brokers.in_process.remove(HERE);
        assert!(brokers.attach_in_process(HERE).is_none());
        let transport = brokers.transport(HERE).unwrap();
        assert!(matches!(transport, BrokerTransport::Network(_)));
        let status = check(transport).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    }

    #[tokio::test]
    async fn a_method_the_service_lacks_is_unimplemented_in_process_too() {
        let brokers = brokers_with_a_health_service_in_process().await;
        let transport = brokers.transport(HERE).unwrap();
        let mut client =
            ptyhub_proto::broker::v1::pty_broker_client::PtyBrokerClient::new(transport);
        let status = client
            .list(ptyhub_proto::broker::v1::ListRequest::default())
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unimplemented, "{status:?}");
    }

    #[test]
    fn a_bad_endpoint_is_an_error_not_a_panic() {
        let brokers = BrokerChannels::new(
            Duration::from_secs(1),
            ptyhub_wire::TlsConfig::plain(),
            InProcessBrokers::default(),
        );
        let error = brokers.transport("not a uri at all").unwrap_err();
        assert!(error.message.contains("cannot use"), "{}", error.message);
    }
}
