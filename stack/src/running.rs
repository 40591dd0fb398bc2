//! A running stack: where each service listens, clients that carry the service credential, and
//! the shutdown tree (one root token for the stack, a child for the gateway so that it can be
//! stopped alone) with a task per service to wait on.

use std::future::{Future as _, poll_fn};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_wire::{BearerAuth, ServiceCredential, TierCredentials};
use tokio::net::TcpListener;
use tokio::task::{JoinError, JoinHandle};
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::builder::StackBuilder;
use crate::error::{Service, StackError};
use crate::listener_handoff::ListenerOffer;

/// session-api's client with the gateway's credential on every call.
pub type SessionApiClient =
    session_pb::session_api_client::SessionApiClient<InterceptedService<Channel, BearerAuth>>;

/// session-api's broker registry with the broker's credential on every call.
pub type BrokerRegistryClient = session_pb::broker_registry_client::BrokerRegistryClient<
    InterceptedService<Channel, BearerAuth>,
>;

/// The broker's client with session-api's credential on every call.
pub type BrokerClient =
    broker_pb::pty_broker_client::PtyBrokerClient<InterceptedService<Channel, BearerAuth>>;

/// How long one readiness call may take before it is tried again.
const READINESS_CALL_PATIENCE: Duration = Duration::from_secs(5);
/// The pause between readiness calls.
const READINESS_INTERVAL: Duration = Duration::from_millis(50);

/// The three services, running in this process. Dropping it asks them all to stop without
/// waiting; [`Stack::shutdown`] also waits.
#[derive(Debug)]
pub struct Stack {
    addresses: Addresses,
    credentials: TierCredentials,
    broker: pty_broker::Broker,
    broker_id: String,
    /// The brokers the gateway calls in process: the stack's own unless
    /// [`StackBuilder::broker_in_process`] turned it off.
    in_process_brokers: gateway::InProcessBrokers,
    shutdown: CancellationToken,
    gateway_shutdown: CancellationToken,
    tasks: Vec<ServiceTask>,
    /// Offers the gateway's listener to an upgrade ([`ListenerOffer`]); it outlives the gateway
    /// for as long as the next process takes to ask, once the broker handed over.
    listener_offer: Option<JoinHandle<()>>,
    /// What the stack's own clients dial the services with: the services' CA and certificate
    /// when they speak TLS.
    client_tls: ptyhub_wire::TlsConfig,
    /// The temporary directory of the default SQLite database, removed with the stack.
    _data: Option<tempfile::TempDir>,
}

/// The bound address of each service.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Addresses {
    pub broker: SocketAddr,
    pub session_api: SocketAddr,
    pub gateway: SocketAddr,
    /// Whether the broker serves TLS.
    pub broker_tls: bool,
    /// Whether session-api serves TLS.
    pub session_api_tls: bool,
    /// Whether the gateway's port is TLS.
    pub gateway_tls: bool,
}

fn scheme(tls: bool) -> &'static str {
    if tls { "https" } else { "http" }
}

impl Addresses {
    pub fn broker_endpoint(&self) -> String {
        format!("{}://{}", scheme(self.broker_tls), self.broker)
    }

    pub fn session_api_endpoint(&self) -> String {
        format!("{}://{}", scheme(self.session_api_tls), self.session_api)
    }

    pub fn gateway_url(&self) -> String {
        format!("{}://{}", scheme(self.gateway_tls), self.gateway)
    }
}

/// Each service's configuration and the listener it serves on.
#[derive(Debug)]
pub(crate) struct Services {
    pub broker: (pty_broker::Broker, TcpListener),
    pub session_api: (session_api::Config, TcpListener),
    pub gateway: (gateway::Config, TcpListener),
    /// The gateway's listener, offered to the next stack that takes the broker over.
    pub listener_offer: Option<ListenerOffer>,
}

#[derive(Debug)]
struct ServiceTask {
    service: Service,
    /// `None` once the task's end has been seen.
    handle: Option<JoinHandle<Result<(), StackError>>>,
}

impl Stack {
    /// A stack of the three services' configs at the defaults of one process
    /// ([`StackBuilder::embedded`]), for the caller to change.
    pub fn builder() -> Result<StackBuilder, StackError> {
        StackBuilder::embedded()
    }

    pub(crate) fn spawn(
        services: Services,
        addresses: Addresses,
        credentials: TierCredentials,
        broker_id: String,
        data: Option<tempfile::TempDir>,
        client_tls: ptyhub_wire::TlsConfig,
    ) -> Self {
        let shutdown = CancellationToken::new();
        let gateway_shutdown = shutdown.child_token();
        let (broker, broker_listener) = services.broker;
        let (session_api_config, session_api_listener) = services.session_api;
        let (gateway_config, gateway_listener) = services.gateway;
        let in_process_brokers = gateway_config.in_process_brokers.clone();
        let listener_offer = services
            .listener_offer
            .map(|offer| tokio::spawn(offer.serve(broker.clone(), gateway_shutdown.clone())));

        let stopped = shutdown.clone().cancelled_owned();
        let serving = broker.clone();
        let broker_task = tokio::spawn(async move {
            serving
                .serve(broker_listener, stopped)
                .await
                .map_err(|error| failed(Service::Broker, error))
        });
        let stopped = shutdown.clone().cancelled_owned();
        let session_api = tokio::spawn(async move {
            session_api::run(session_api_config, session_api_listener, stopped)
                .await
                .map_err(|error| failed(Service::SessionApi, error))
        });
        let stopped = gateway_shutdown.clone().cancelled_owned();
        let gateway = tokio::spawn(async move {
            gateway::run(gateway_config, gateway_listener, stopped)
                .await
                .map_err(|error| failed(Service::Gateway, error))
        });

        Self {
            addresses,
            credentials,
            broker,
            broker_id,
            in_process_brokers,
            shutdown,
            gateway_shutdown,
            tasks: vec![
                ServiceTask::new(Service::Broker, broker_task),
                ServiceTask::new(Service::SessionApi, session_api),
                ServiceTask::new(Service::Gateway, gateway),
            ],
            listener_offer,
            client_tls,
            _data: data,
        }
    }

    /// The broker's bound address.
    pub fn broker_address(&self) -> SocketAddr {
        self.addresses.broker
    }

    /// session-api's bound address.
    pub fn session_api_address(&self) -> SocketAddr {
        self.addresses.session_api
    }

    /// The table of brokers the gateway calls without a socket: a broker started beside the
    /// stack in the same process can be added to it (as the bench's second broker is).
    pub fn in_process_brokers(&self) -> &gateway::InProcessBrokers {
        &self.in_process_brokers
    }

    /// The gateway's bound address.
    pub fn gateway_address(&self) -> SocketAddr {
        self.addresses.gateway
    }

    /// `http://<broker address>` (`https://` under TLS), as session-api knows it.
    pub fn broker_endpoint(&self) -> String {
        self.addresses.broker_endpoint()
    }

    /// `http://<session-api address>` (`https://` under TLS), as the gateway knows it.
    pub fn session_api_endpoint(&self) -> String {
        self.addresses.session_api_endpoint()
    }

    /// `http://<gateway address>`, `https://` when the gateway serves TLS.
    pub fn gateway_url(&self) -> String {
        self.addresses.gateway_url()
    }

    /// Whether the broker handed its sessions to another process (a `ptyhub up --upgrade`): it
    /// has stopped, and the stack should stop without it.
    pub fn broker_handed_over(&self) -> bool {
        self.broker.handed_over()
    }

    /// The broker's name in session-api's registry.
    pub fn broker_id(&self) -> &str {
        &self.broker_id
    }

    /// session-api's credential, the seed of the others ([`StackBuilder::with_credentials`]).
    pub fn service_credential(&self) -> &ServiceCredential {
        &self.credentials.session_api
    }

    /// Each tier's credential.
    pub fn credentials(&self) -> &TierCredentials {
        &self.credentials
    }

    /// A client of session-api (connected on first use), presenting the gateway's credential.
    pub fn session_api_client(&self) -> SessionApiClient {
        session_pb::session_api_client::SessionApiClient::with_interceptor(
            self.lazy_channel(&self.addresses.session_api_endpoint()),
            self.credentials.gateway.bearer_auth(),
        )
    }

    /// A client of session-api's broker registry (connected on first use), presenting the
    /// broker's credential.
    pub fn broker_registry_client(&self) -> BrokerRegistryClient {
        session_pb::broker_registry_client::BrokerRegistryClient::with_interceptor(
            self.lazy_channel(&self.addresses.session_api_endpoint()),
            self.credentials.broker.bearer_auth(),
        )
    }

    /// A client of the broker (connected on first use), presenting what session-api presents
    /// to it: the credential derived from the broker's own.
    pub fn broker_client(&self) -> BrokerClient {
        broker_pb::pty_broker_client::PtyBrokerClient::with_interceptor(
            self.lazy_channel(&self.addresses.broker_endpoint()),
            self.credentials
                .broker
                .broker_control_credential()
                .bearer_auth(),
        )
    }

    fn lazy_channel(&self, endpoint: &str) -> Channel {
        self.client_tls
            .endpoint(endpoint)
            .expect("the stack's own endpoints and TLS settings are usable")
            .connect_lazy()
    }

    /// Whether every service that was not asked to stop is still running.
    pub fn is_running(&self) -> bool {
        self.tasks.iter().all(|task| {
            task.handle
                .as_ref()
                .is_none_or(|handle| !handle.is_finished())
        })
    }

    /// Waits until a service ends on its own and says why: its error, its panic, or that it
    /// stopped unexpectedly. Pends for ever while every service runs.
    pub async fn failure(&mut self) -> StackError {
        let (index, outcome) = poll_fn(|context| {
            for (index, task) in self.tasks.iter_mut().enumerate() {
                if let Some(handle) = task.handle.as_mut()
                    && let Poll::Ready(outcome) = Pin::new(handle).poll(context)
                {
                    return Poll::Ready((index, outcome));
                }
            }
            Poll::Pending
        })
        .await;
        let task = &mut self.tasks[index];
        task.handle = None;
        match ended(task.service, outcome) {
            Ok(()) => StackError::StoppedUnexpectedly {
                service: task.service,
            },
            Err(error) => error,
        }
    }

    /// Stops the gateway alone and waits for it; session-api and the broker go on.
    pub async fn stop_gateway(&mut self) -> Result<(), StackError> {
        self.gateway_shutdown.cancel();
        let mut result = Ok(());
        for task in &mut self.tasks {
            if task.service == Service::Gateway {
                result = task.wait().await;
            }
        }
        result
    }

    /// Asks every service to stop and waits for each (each has its own shutdown grace). The
    /// first failure among them is the result.
    pub async fn shutdown(mut self) -> Result<(), StackError> {
        self.shutdown.cancel();
        let mut result = Ok(());
        for task in &mut self.tasks {
            let ended = task.wait().await;
            if result.is_ok() {
                result = ended;
            }
        }
        // After a hand-off, the address stays open until the next process has it.
        if let Some(offer) = self.listener_offer.take() {
            let _ = offer.await;
        }
        result
    }

    /// Returns once session-api's registry shows the broker up, so that instances can be
    /// registered on it. A service that ends meanwhile fails the start, and the others are
    /// stopped.
    pub(crate) async fn wait_until_broker_is_up(
        mut self,
        patience: Duration,
    ) -> Result<Self, StackError> {
        let mut registry = self.broker_registry_client();
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            if !self.is_running() {
                let failure = self.failure().await;
                // The failure is the news; how the others end after it is not.
                let _ = self.shutdown().await;
                return Err(failure);
            }
            let answer = tokio::time::timeout(
                READINESS_CALL_PATIENCE,
                registry.list_brokers(session_pb::ListBrokersRequest {}),
            )
            .await;
            let last = match answer {
                Ok(Ok(listed)) => {
                    let brokers = listed.into_inner().brokers;
                    if brokers
                        .iter()
                        .any(|broker| broker.id == self.broker_id && broker.up)
                    {
                        return Ok(self);
                    }
                    format!("registry lists {brokers:?}")
                }
                Ok(Err(status)) => status.to_string(),
                Err(_) => format!("no answer within {READINESS_CALL_PATIENCE:?}"),
            };
            if tokio::time::Instant::now() >= deadline {
                let _ = self.shutdown().await;
                return Err(StackError::BrokerNotUp { patience, last });
            }
            tokio::time::sleep(READINESS_INTERVAL).await;
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl ServiceTask {
    fn new(service: Service, handle: JoinHandle<Result<(), StackError>>) -> Self {
        Self {
            service,
            handle: Some(handle),
        }
    }

    /// Waits for the task to end, once; later calls return at once.
    async fn wait(&mut self) -> Result<(), StackError> {
        match self.handle.take() {
            Some(handle) => ended(self.service, handle.await),
            None => Ok(()),
        }
    }
}

fn failed(service: Service, error: impl std::error::Error + Send + Sync + 'static) -> StackError {
    StackError::Failed {
        service,
        source: Box::new(error),
    }
}

/// How a service task ended, as the stack reports it.
fn ended(
    service: Service,
    outcome: Result<Result<(), StackError>, JoinError>,
) -> Result<(), StackError> {
    match outcome {
        Ok(result) => result,
        Err(error) if error.is_panic() => {
            let payload = error.into_panic();
            let message = payload
                .downcast_ref::<&str>()
                .map(|text| (*text).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            Err(StackError::Panicked { service, message })
        }
        Err(_) => Err(StackError::StoppedUnexpectedly { service }),
    }
}
