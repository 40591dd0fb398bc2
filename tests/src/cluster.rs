//! A ptyhub cluster of real processes on 127.0.0.1: two session-api replicas on one PostgreSQL
//! database, two brokers (local backend, separate data directories) that register themselves
//! with them, and two gateways, broker and gateway `i` talking to session-api `i`. Clients for
//! its REST and gRPC surfaces, and restarts of its processes.

use std::time::Duration;

use anyhow::{Context, bail};
use ptyhub_proto::broker::v1 as broker_wire;
use ptyhub_proto::broker::v1::pty_broker_client::PtyBrokerClient;
use ptyhub_proto::session::v1 as session_wire;
use ptyhub_proto::session::v1::broker_registry_client::BrokerRegistryClient;
use ptyhub_proto::session::v1::session_api_client::SessionApiClient;
use tempfile::TempDir;
use test_support::postgres::TestDatabase;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::binaries::binary;
use crate::process::{Service, free_port};

pub const SERVICE_TOKEN: &str = "cluster-test-service-token";
pub const TICKET_SECRET: &str = "cluster-test-ticket-secret-0123456789";
pub const API_TOKEN: &str = "cluster-test-api-token";
/// session-api's heartbeat timeout in the cluster: a broker silent this long is down, and its
/// sessions are lost.
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(3);
/// Generous bound for things that happen asynchronously.
pub const PATIENCE: Duration = Duration::from_secs(60);

pub type SessionClient = SessionApiClient<InterceptedService<Channel, BearerToken>>;
pub type RegistryClient = BrokerRegistryClient<InterceptedService<Channel, BearerToken>>;
pub type BrokerClient = PtyBrokerClient<InterceptedService<Channel, BearerToken>>;

/// Adds the service token to every gRPC call.
#[derive(Debug, Clone)]
pub struct BearerToken;

impl tonic::service::Interceptor for BearerToken {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        let value = format!("Bearer {SERVICE_TOKEN}")
            .parse()
            .map_err(|_| tonic::Status::internal("bad token"))?;
        request.metadata_mut().insert("authorization", value);
        Ok(request)
    }
}

/// The running cluster. Dropping it ends every process.
#[derive(Debug)]
pub struct Cluster {
    pub brokers: Vec<Service>,
    pub apis: Vec<Service>,
    pub gateways: Vec<Service>,
    pub http: reqwest::Client,
    logs: TempDir,
    _database: TestDatabase,
}

impl Cluster {
    /// Starts the cluster on `database` (fresh) and waits until both gateways are healthy.
    pub async fn start(database: TestDatabase) -> anyhow::Result<Self> {
        let logs = tempfile::tempdir()?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()?;
        let mut cluster = Self {
            brokers: Vec::new(),
            apis: Vec::new(),
            gateways: Vec::new(),
            http,
            logs,
            _database: database,
        };
        // session-api first, with no broker list: the brokers register themselves. One replica
        // after the other: the first applies the migrations.
        for index in 0..2 {
            let api = cluster.start_session_api(index, free_port()?)?;
            cluster.apis.push(api);
            cluster.wait_session_api(index).await?;
        }
        // Broker `i` registers with replica `i` (in Kubernetes: with the Service).
        for index in 0..2 {
            let broker = cluster.start_broker(index, free_port()?)?;
            cluster.brokers.push(broker);
        }
        cluster.wait_brokers_registered().await?;
        for index in 0..2 {
            let gateway = cluster.start_gateway(index)?;
            cluster.gateways.push(gateway);
            cluster.wait_healthy(index).await?;
        }
        Ok(cluster)
    }

    fn start_broker(&self, index: usize, port: u16) -> anyhow::Result<Service> {
        let data_dir = self.logs.path().join(format!("broker-{index}-data"));
        std::fs::create_dir_all(&data_dir)?;
        let args = vec![
            format!("--listen=127.0.0.1:{port}"),
            format!("--broker-id={}", broker_id(index)),
            format!("--session-api={}", self.apis[index].endpoint()),
            format!("--data-dir={}", data_dir.display()),
            format!("--service-token={SERVICE_TOKEN}"),
            format!("--ticket-secret={TICKET_SECRET}"),
            "--backends=local".to_owned(),
            "--kill-grace=500ms".to_owned(),
        ];
        Service::spawn(
            &format!("broker-{index}"),
            &binary("pty-broker")?,
            port,
            &args,
            self.logs.path(),
        )
    }

    /// Starts broker `index` again after it ended (same id, data directory and port), as a
    /// node's supervisor would, and waits until it has registered again.
    pub async fn restart_broker(&mut self, index: usize) -> anyhow::Result<()> {
        let port = self.brokers[index].port();
        self.brokers[index] = self.start_broker(index, port)?;
        self.wait_brokers_registered().await
    }

    fn start_session_api(&self, index: usize, port: u16) -> anyhow::Result<Service> {
        let args = vec![
            format!("--listen=127.0.0.1:{port}"),
            format!("--database-url={}", self._database.url()),
            format!("--service-token={SERVICE_TOKEN}"),
            format!("--ticket-secret={TICKET_SECRET}"),
            format!("--heartbeat-timeout={}ms", HEARTBEAT_TIMEOUT.as_millis()),
            "--activity-flush-interval=200ms".to_owned(),
            "--shutdown-grace=5s".to_owned(),
        ];
        Service::spawn(
            &format!("session-api-{index}"),
            &binary("session-api")?,
            port,
            &args,
            self.logs.path(),
        )
    }

    /// Starts session-api replica `index` again after it ended, on the same port, and waits
    /// until it answers.
    pub async fn restart_session_api(&mut self, index: usize) -> anyhow::Result<()> {
        let port = self.apis[index].port();
        self.apis[index] = self.start_session_api(index, port)?;
        self.wait_session_api(index).await
    }

    /// Waits until session-api replica `index` answers a registry call.
    async fn wait_session_api(&mut self, index: usize) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Ok(mut registry) = self.registry_client(index).await
                && registry
                    .list_brokers(session_wire::ListBrokersRequest {})
                    .await
                    .is_ok()
            {
                return Ok(());
            }
            if !self.apis[index].is_running() {
                bail!("session-api-{index} exited:\n{}", self.apis[index].log());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("session-api-{index} never answered:\n{}", self.logs());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until every broker is registered, up, at its endpoint (asking a running replica).
    async fn wait_brokers_registered(&mut self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let mut registered = Vec::new();
            for index in 0..self.apis.len() {
                if let Ok(mut registry) = self.registry_client(index).await
                    && let Ok(response) = registry
                        .list_brokers(session_wire::ListBrokersRequest {})
                        .await
                {
                    registered = response.into_inner().brokers;
                    break;
                }
            }
            let all_up = self.brokers.iter().enumerate().all(|(index, service)| {
                registered.iter().any(|broker| {
                    broker.id == broker_id(index)
                        && broker.up
                        && broker.endpoint == service.endpoint()
                })
            });
            if all_up {
                return Ok(());
            }
            for broker in &mut self.brokers {
                if !broker.is_running() {
                    bail!("{} exited:\n{}", broker.name(), broker.log());
                }
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "the brokers never registered ({registered:?}):\n{}",
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn start_gateway(&self, index: usize) -> anyhow::Result<Service> {
        let port = free_port()?;
        let args = vec![
            format!("--listen=127.0.0.1:{port}"),
            format!("--session-api={}", self.apis[index].endpoint()),
            format!("--service-token={SERVICE_TOKEN}"),
            format!("--api-token={API_TOKEN}"),
            "--drain-delay=2s".to_owned(),
            "--shutdown-grace=5s".to_owned(),
        ];
        Service::spawn(
            &format!("gateway-{index}"),
            &binary("gateway")?,
            port,
            &args,
            self.logs.path(),
        )
    }

    /// Waits until gateway `index` answers `/healthz` with 200 (its session-api and every
    /// broker answer).
    pub async fn wait_healthy(&mut self, index: usize) -> anyhow::Result<()> {
        let url = format!("{}/healthz", self.gateways[index].endpoint());
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Ok(response) = self.http.get(&url).send().await
                && response.status() == reqwest::StatusCode::OK
            {
                return Ok(());
            }
            for service in self
                .brokers
                .iter_mut()
                .chain(&mut self.apis)
                .chain(&mut self.gateways)
            {
                if !service.is_running() {
                    bail!("{} exited:\n{}", service.name(), service.log());
                }
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("gateway-{index} never became healthy:\n{}", self.logs());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every process's log, for failure messages.
    pub fn logs(&self) -> String {
        self.brokers
            .iter()
            .chain(&self.apis)
            .chain(&self.gateways)
            .map(|service| format!("--- {}\n{}", service.name(), service.log()))
            .collect()
    }

    /// A gRPC client of session-api replica `index`.
    pub async fn session_client(&self, index: usize) -> anyhow::Result<SessionClient> {
        let channel = Channel::from_shared(self.apis[index].endpoint())?
            .connect()
            .await
            .context("cannot connect to session-api")?;
        Ok(SessionApiClient::with_interceptor(channel, BearerToken))
    }

    /// A gRPC client of session-api replica `index`'s broker registry.
    pub async fn registry_client(&self, index: usize) -> anyhow::Result<RegistryClient> {
        let channel = Channel::from_shared(self.apis[index].endpoint())?
            .connect()
            .await
            .context("cannot connect to session-api")?;
        Ok(BrokerRegistryClient::with_interceptor(channel, BearerToken))
    }

    /// A gRPC client of broker `index`.
    pub async fn broker_client(&self, index: usize) -> anyhow::Result<BrokerClient> {
        let channel = Channel::from_shared(self.brokers[index].endpoint())?
            .connect()
            .await
            .context("cannot connect to the broker")?;
        Ok(PtyBrokerClient::with_interceptor(channel, BearerToken))
    }

    /// Registers an instance on broker `broker` (local backend) running `command`.
    pub async fn register_instance(
        &self,
        name: &str,
        broker: usize,
        command: &[&str],
        max_sessions: u32,
    ) -> anyhow::Result<session_wire::Instance> {
        let mut client = self.session_client(0).await?;
        let instance = client
            .register_instance(session_wire::RegisterInstanceRequest {
                name: name.to_owned(),
                target: Some(broker_wire::Target {
                    kind: Some(broker_wire::target::Kind::Local(
                        broker_wire::LocalTarget {},
                    )),
                }),
                command: command.iter().map(|part| (*part).to_owned()).collect(),
                max_sessions,
                broker_id: broker_id(broker),
                ..Default::default()
            })
            .await
            .context("register instance")?
            .into_inner();
        Ok(instance)
    }

    /// `POST /api/v1/instances/{iid}/terminal/sessions` through gateway `gateway`: the status
    /// and the JSON body.
    pub async fn create_session(
        &self,
        gateway: usize,
        instance_id: &str,
    ) -> anyhow::Result<(u16, serde_json::Value)> {
        let url = format!(
            "{}/api/v1/instances/{instance_id}/terminal/sessions",
            self.gateways[gateway].endpoint()
        );
        let response = self
            .http
            .post(url)
            .bearer_auth(API_TOKEN)
            .json(&serde_json::json!({}))
            .send()
            .await?;
        let status = response.status().as_u16();
        let body = response.json().await.context("the answer is not JSON")?;
        Ok((status, body))
    }

    /// Ids of the sessions broker `index` has a process for.
    pub async fn broker_processes(&self, index: usize) -> anyhow::Result<Vec<String>> {
        let mut client = self.broker_client(index).await?;
        let sessions = client
            .list(broker_wire::ListRequest {})
            .await?
            .into_inner()
            .sessions;
        Ok(sessions
            .into_iter()
            .filter(|session| {
                matches!(
                    broker_wire::SessionState::try_from(session.state),
                    Ok(broker_wire::SessionState::Starting
                        | broker_wire::SessionState::Running
                        | broker_wire::SessionState::Resetting)
                )
            })
            .map(|session| session.session_id)
            .collect())
    }
}

/// The id broker `index` runs with.
pub fn broker_id(index: usize) -> String {
    format!("broker-{index}")
}
