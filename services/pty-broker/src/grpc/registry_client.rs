//! The broker's one client: session-api's `BrokerRegistry`, for registering and heartbeating
//! (see [`crate::registration`]). Every call carries the service credential.

use std::time::Duration;

use ptyhub_proto::session::v1 as session_pb;
use ptyhub_wire::{BearerAuth, ServiceCredential};
use session_pb::broker_registry_client::BrokerRegistryClient;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Status};

use crate::error::StartError;

/// A client of session-api's `BrokerRegistry`, each call carrying the service credential.
#[derive(Debug, Clone)]
pub(crate) struct RegistryClient {
    client: BrokerRegistryClient<InterceptedService<Channel, BearerAuth>>,
    timeout: Duration,
}

impl RegistryClient {
    /// Connects lazily: session-api may start after the broker.
    pub(crate) fn new(
        session_api: &str,
        credential: &ServiceCredential,
        timeout: Duration,
        tls: &ptyhub_wire::TlsConfig,
    ) -> Result<Self, StartError> {
        let channel = tls
            .endpoint(session_api)?
            .connect_timeout(timeout)
            .tcp_nodelay(true)
            .connect_lazy();
        Ok(Self {
            client: BrokerRegistryClient::with_interceptor(channel, credential.bearer_auth()),
            timeout,
        })
    }

    fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        request.set_timeout(self.timeout);
        request
    }

    /// Registers (or re-registers) this broker as up at `endpoint`.
    pub(crate) async fn register(
        &mut self,
        id: &str,
        endpoint: &str,
        docker: bool,
    ) -> Result<(), Status> {
        let request = self.request(session_pb::RegisterBrokerRequest {
            id: id.to_owned(),
            endpoint: endpoint.to_owned(),
            docker,
        });
        self.client.register_broker(request).await?;
        Ok(())
    }

    /// Sends a heartbeat; returns how long to wait before the next one. `NOT_FOUND` means
    /// session-api does not know this broker (any more): register again.
    pub(crate) async fn heartbeat(&mut self, id: &str) -> Result<Duration, Status> {
        let request = self.request(session_pb::HeartbeatRequest { id: id.to_owned() });
        let response = self.client.heartbeat(request).await?.into_inner();
        Ok(Duration::from_secs(u64::from(
            response.interval_seconds.max(1),
        )))
    }
}
