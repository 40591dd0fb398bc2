//! A ptyhub cluster of real processes on 127.0.0.1: session-api replicas on one PostgreSQL
//! database, brokers (local runtime, separate data directories) that register themselves with
//! them, and gateways; broker and gateway `i` talk to replica `i` modulo the replica count.
//! By default two of each; [`Cluster::builder`] picks other counts and flags. Clients for its
//! REST and gRPC surfaces, and restarts of its processes.
//!
//! Every process listens on a port the kernel chose (see [`Service::start`]). A restarted broker
//! comes back on a new port and registers it, as a rescheduled pod would. Gateways and brokers
//! reach session-api replica `i` through a [`Front`] the test holds, so a restarted replica can
//! listen anywhere and still be found at the address they were given.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::time::Duration;

use anyhow::{Context, bail};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::broker::v1::pty_broker_client::PtyBrokerClient;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_proto::session::v1::broker_registry_client::BrokerRegistryClient;
use ptyhub_proto::session::v1::session_api_client::SessionApiClient;
use ptyhub_test_support::postgres::TestDatabase;
use tempfile::TempDir;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::binaries::binary;
use crate::front::Front;
use crate::process::Service;

/// session-api's own credential, which no broker of the cluster holds: each has its own
/// ([`broker_token`]), and its control calls accept the one derived from it alone.
pub const SESSION_API_TOKEN: &str = "cluster-test-session-api-token";
/// The gateways' credential: session-api's session calls accept it alone.
pub const GATEWAY_TOKEN: &str = "cluster-test-gateway-token";
/// The private key session-api signs attach tickets with (as `openssl genpkey -algorithm
/// ed25519` writes one); the brokers get its public half ([`ticket_public_key`]).
pub const TICKET_SIGNING_KEY: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIImjYKWyzsvoG63b0M0T+tix++x0xKruLai9LMHUSyAS
-----END PRIVATE KEY-----
";
pub const API_TOKEN: &str = "cluster-test-api-token-0123456789";
/// session-api's default heartbeat timeout in the cluster: a broker silent this long is down,
/// and its sessions are lost.
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(3);
/// Generous bound for things that happen asynchronously.
pub const PATIENCE: Duration = Duration::from_secs(60);

pub type SessionClient = SessionApiClient<InterceptedService<Channel, BearerToken>>;
pub type RegistryClient = BrokerRegistryClient<InterceptedService<Channel, BearerToken>>;
pub type BrokerClient = PtyBrokerClient<InterceptedService<Channel, BearerToken>>;

/// Adds a tier's credential to every gRPC call.
#[derive(Debug, Clone)]
pub struct BearerToken(pub String);

impl tonic::service::Interceptor for BearerToken {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        let value = format!("Bearer {}", self.0)
            .parse()
            .map_err(|_| tonic::Status::internal("bad token"))?;
        request.metadata_mut().insert("authorization", value);
        Ok(request)
    }
}

/// The shape of a cluster and the flags of its processes. A flag set here replaces the
/// cluster's default for it.
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    session_apis: usize,
    brokers: usize,
    gateways: usize,
    session_api_flags: BTreeMap<String, String>,
    broker_flags: BTreeMap<String, String>,
    gateway_flags: BTreeMap<String, String>,
    /// Environment variables of every broker and gateway.
    env: Vec<(String, String)>,
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        let flags = |pairs: &[(&str, String)]| {
            pairs
                .iter()
                .map(|(name, value)| ((*name).to_owned(), value.clone()))
                .collect()
        };
        Self {
            session_apis: 2,
            brokers: 2,
            gateways: 2,
            session_api_flags: flags(&[
                (
                    "heartbeat-timeout",
                    format!("{}ms", HEARTBEAT_TIMEOUT.as_millis()),
                ),
                ("activity-flush-interval", "200ms".to_owned()),
                ("shutdown-grace", "5s".to_owned()),
            ]),
            broker_flags: flags(&[
                ("backends", "local".to_owned()),
                ("kill-grace", "500ms".to_owned()),
            ]),
            gateway_flags: flags(&[
                ("drain-delay", "2s".to_owned()),
                ("shutdown-grace", "5s".to_owned()),
            ]),
            env: Vec::new(),
        }
    }
}

impl ClusterBuilder {
    /// How many session-api replicas (at least one).
    pub fn session_apis(mut self, count: usize) -> Self {
        self.session_apis = count.max(1);
        self
    }

    pub fn brokers(mut self, count: usize) -> Self {
        self.brokers = count;
        self
    }

    pub fn gateways(mut self, count: usize) -> Self {
        self.gateways = count;
        self
    }

    /// `--<name>=<value>` for every session-api replica.
    pub fn session_api_flag(mut self, name: &str, value: impl Display) -> Self {
        self.session_api_flags
            .insert(name.to_owned(), value.to_string());
        self
    }

    /// `--<name>=<value>` for every broker.
    pub fn broker_flag(mut self, name: &str, value: impl Display) -> Self {
        self.broker_flags.insert(name.to_owned(), value.to_string());
        self
    }

    /// An environment variable of every broker and gateway.
    pub fn env(mut self, name: &str, value: impl Display) -> Self {
        self.env.push((name.to_owned(), value.to_string()));
        self
    }

    /// `--<name>=<value>` for every gateway.
    pub fn gateway_flag(mut self, name: &str, value: impl Display) -> Self {
        self.gateway_flags
            .insert(name.to_owned(), value.to_string());
        self
    }

    /// Starts the cluster on `database` (fresh) and waits until every broker is registered and
    /// every gateway is healthy.
    pub async fn start(self, database: TestDatabase) -> anyhow::Result<Cluster> {
        let logs = tempfile::tempdir()?;
        let http = ptyhub_test_support::http::client()
            .timeout(Duration::from_secs(30))
            .build()?;
        let mut api_fronts = Vec::new();
        for _ in 0..self.session_apis {
            api_fronts.push(Front::bind().await?);
        }
        let mut cluster = Cluster {
            brokers: Vec::new(),
            retired: Vec::new(),
            apis: Vec::new(),
            gateways: Vec::new(),
            http,
            api_fronts,
            shape: self,
            logs,
            database,
        };
        // session-api first, with no broker list: the brokers register themselves. One replica
        // after the other: the first applies the migrations.
        for index in 0..cluster.shape.session_apis {
            let api = cluster.start_session_api(index).await?;
            cluster.apis.push(api);
            cluster.wait_session_api(index).await?;
        }
        for index in 0..cluster.shape.brokers {
            let broker = cluster.start_broker(index).await?;
            cluster.brokers.push(broker);
        }
        cluster.wait_brokers_registered().await?;
        for index in 0..cluster.shape.gateways {
            let gateway = cluster.start_gateway(index).await?;
            cluster.gateways.push(gateway);
            cluster.wait_healthy(index).await?;
        }
        Ok(cluster)
    }
}

/// The running cluster. Dropping it ends every process.
#[derive(Debug)]
pub struct Cluster {
    pub brokers: Vec<Service>,
    /// Brokers that handed their sessions to a successor and exited, kept for their logs.
    retired: Vec<Service>,
    pub apis: Vec<Service>,
    pub gateways: Vec<Service>,
    pub http: reqwest::Client,
    /// The stable address of each session-api replica.
    api_fronts: Vec<Front>,
    shape: ClusterBuilder,
    logs: TempDir,
    database: TestDatabase,
}

/// The cluster's environment variables for one process, `secrets` first: a service reads its
/// secrets from variables or files, never from its command line.
fn env_with(secrets: &[(&str, String)], env: &[(String, String)]) -> Vec<(String, String)> {
    secrets
        .iter()
        .map(|(name, value)| ((*name).to_owned(), value.clone()))
        .chain(env.iter().cloned())
        .collect()
}

fn args(flags: &BTreeMap<String, String>, own: &[(&str, String)]) -> Vec<String> {
    let mut flags = flags.clone();
    for (name, value) in own {
        flags.insert((*name).to_owned(), value.clone());
    }
    flags
        .into_iter()
        .map(|(name, value)| format!("--{name}={value}"))
        .collect()
}

impl Cluster {
    /// Two session-api replicas, two brokers and two gateways with the default flags.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    /// Starts the default cluster on `database` (fresh).
    pub async fn start(database: TestDatabase) -> anyhow::Result<Self> {
        Self::builder().start(database).await
    }

    /// The endpoint brokers and gateways reach session-api replica `index` at.
    pub fn session_api_endpoint(&self, index: usize) -> String {
        self.api_fronts[index].endpoint()
    }

    async fn start_broker(&self, index: usize) -> anyhow::Result<Service> {
        let data_dir = self.logs.path().join(format!("broker-{index}-data"));
        std::fs::create_dir_all(&data_dir)?;
        let args = args(
            &self.shape.broker_flags,
            &[
                ("broker-id", broker_id(index)),
                (
                    "session-api",
                    self.session_api_endpoint(index % self.apis.len()),
                ),
                ("data-dir", data_dir.display().to_string()),
            ],
        );
        Service::start_with_env(
            &format!("broker-{index}"),
            &binary("pty-broker")?,
            &args,
            &self.broker_env(index),
            self.logs.path(),
        )
        .await
    }

    /// Upgrades broker `index` in place, as `maxSurge: 1` rolls the DaemonSet: a new process
    /// with the same flags takes its sessions and its socket over (`--take-over`), and the old
    /// one exits once it has let go.
    pub async fn hand_off_broker(&mut self, index: usize) -> anyhow::Result<()> {
        let data_dir = self.logs.path().join(format!("broker-{index}-data"));
        let args = args(
            &self.shape.broker_flags,
            &[
                ("broker-id", broker_id(index)),
                (
                    "session-api",
                    self.session_api_endpoint(index % self.apis.len()),
                ),
                ("data-dir", data_dir.display().to_string()),
                (
                    "take-over",
                    data_dir.join("handoff.sock").display().to_string(),
                ),
            ],
        );
        let next = Service::start_with_env(
            &format!("broker-{index}-next-{}", uuid::Uuid::new_v4().simple()),
            &binary("pty-broker")?,
            &args,
            &self.broker_env(index),
            self.logs.path(),
        )
        .await?;
        let status = tokio::task::block_in_place(|| self.brokers[index].wait(PATIENCE))?;
        anyhow::ensure!(
            status.success(),
            "the old broker-{index} exited with {status}:\n{}",
            self.brokers[index].log()
        );
        let previous = std::mem::replace(&mut self.brokers[index], next);
        self.retired.push(previous);
        Ok(())
    }

    /// Starts broker `index` again after it ended (same id and data directory), as a node's
    /// supervisor would, and waits until it has registered again, with the endpoint of the
    /// port it listens on now.
    pub async fn restart_broker(&mut self, index: usize) -> anyhow::Result<()> {
        self.brokers[index] = self.start_broker(index).await?;
        self.wait_brokers_registered().await
    }

    /// Broker `index`'s variables: its own credential and session-api's ticket public key, then
    /// the cluster's.
    fn broker_env(&self, index: usize) -> Vec<(String, String)> {
        env_with(
            &[
                ("PTYHUB_BROKER_SERVICE_TOKEN", broker_token(index)),
                ("PTYHUB_BROKER_TICKET_PUBLIC_KEY", ticket_public_key()),
            ],
            &self.shape.env,
        )
    }

    async fn start_session_api(&self, index: usize) -> anyhow::Result<Service> {
        // Each broker's own credential, bound to its id.
        let broker_tokens: Vec<String> = (0..self.shape.brokers)
            .map(|broker| format!("{}={}", broker_id(broker), broker_token(broker)))
            .collect();
        let args = args(
            &self.shape.session_api_flags,
            &[("database-url", self.database.url().to_owned())],
        );
        let env = env_with(
            &[
                (
                    "PTYHUB_SESSION_API_SERVICE_TOKEN",
                    SESSION_API_TOKEN.to_owned(),
                ),
                (
                    "PTYHUB_SESSION_API_GATEWAY_TOKENS",
                    GATEWAY_TOKEN.to_owned(),
                ),
                ("PTYHUB_SESSION_API_BROKER_TOKENS", broker_tokens.join(",")),
                (
                    "PTYHUB_SESSION_API_TICKET_SIGNING_KEY",
                    TICKET_SIGNING_KEY.to_owned(),
                ),
            ],
            &[],
        );
        let service = Service::start_with_env(
            &format!("session-api-{index}"),
            &binary("session-api")?,
            &args,
            &env,
            self.logs.path(),
        )
        .await?;
        self.api_fronts[index].route_to(service.address());
        Ok(service)
    }

    /// Starts session-api replica `index` again after it ended, and waits until it answers at
    /// its stable address.
    pub async fn restart_session_api(&mut self, index: usize) -> anyhow::Result<()> {
        self.apis[index] = self.start_session_api(index).await?;
        self.wait_session_api(index).await
    }

    /// Waits until session-api replica `index` answers a registry call.
    async fn wait_session_api(&mut self, index: usize) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Ok(mut registry) = self.registry_client(index).await
                && registry
                    .list_brokers(session_pb::ListBrokersRequest {})
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
                        .list_brokers(session_pb::ListBrokersRequest {})
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

    async fn start_gateway(&self, index: usize) -> anyhow::Result<Service> {
        let args = args(
            &self.shape.gateway_flags,
            &[(
                "session-api",
                self.session_api_endpoint(index % self.apis.len()),
            )],
        );
        let env = env_with(
            &[
                ("PTYHUB_GATEWAY_SERVICE_TOKEN", GATEWAY_TOKEN.to_owned()),
                ("PTYHUB_GATEWAY_API_TOKENS", API_TOKEN.to_owned()),
            ],
            &self.shape.env,
        );
        Service::start_with_env(
            &format!("gateway-{index}"),
            &binary("gateway")?,
            &args,
            &env,
            self.logs.path(),
        )
        .await
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

    /// Every process's log (brokers that handed over first), for failure messages.
    pub fn logs(&self) -> String {
        self.retired
            .iter()
            .chain(&self.brokers)
            .chain(&self.apis)
            .chain(&self.gateways)
            .map(|service| format!("--- {}\n{}", service.name(), service.log()))
            .collect()
    }

    /// Polls `check` until it returns `Some`, within [`PATIENCE`]; panics with `what` and every
    /// process's log when it never does.
    pub async fn eventually<T, F, Fut>(&self, what: &str, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        self.eventually_within(PATIENCE, what, check).await
    }

    /// [`Cluster::eventually`] with another patience.
    pub async fn eventually_within<T, F, Fut>(&self, patience: Duration, what: &str, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        ptyhub_test_support::poll_until(patience, Duration::from_millis(100), check)
            .await
            .unwrap_or_else(|| {
                panic!(
                    "gave up after {patience:?} waiting: {what}\n{}",
                    self.logs()
                )
            })
    }

    /// A gRPC client of session-api replica `index` (at its stable address).
    pub async fn session_client(&self, index: usize) -> anyhow::Result<SessionClient> {
        let channel = Channel::from_shared(self.session_api_endpoint(index))?
            .connect()
            .await
            .context("cannot connect to session-api")?;
        Ok(SessionApiClient::with_interceptor(
            channel,
            BearerToken(GATEWAY_TOKEN.to_owned()),
        ))
    }

    /// A gRPC client of session-api replica `index`'s broker registry, which reads it as a
    /// gateway does.
    pub async fn registry_client(&self, index: usize) -> anyhow::Result<RegistryClient> {
        let channel = Channel::from_shared(self.session_api_endpoint(index))?
            .connect()
            .await
            .context("cannot connect to session-api")?;
        Ok(BrokerRegistryClient::with_interceptor(
            channel,
            BearerToken(GATEWAY_TOKEN.to_owned()),
        ))
    }

    /// A gRPC client of broker `index`, presenting what session-api presents to it: the
    /// credential derived from the broker's own.
    pub async fn broker_client(&self, index: usize) -> anyhow::Result<BrokerClient> {
        let channel = Channel::from_shared(self.brokers[index].endpoint())?
            .connect()
            .await
            .context("cannot connect to the broker")?;
        Ok(PtyBrokerClient::with_interceptor(
            channel,
            BearerToken(broker_control_token(index)),
        ))
    }

    /// Registers an instance on broker `broker` (local runtime) running `command`.
    pub async fn register_instance(
        &self,
        name: &str,
        broker: usize,
        command: &[&str],
        max_sessions: u32,
    ) -> anyhow::Result<session_pb::Instance> {
        self.register_instance_with(
            broker,
            session_pb::RegisterInstanceRequest {
                name: name.to_owned(),
                target: Some(broker_pb::Target {
                    kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
                }),
                command: command.iter().map(|part| (*part).to_owned()).collect(),
                max_sessions,
                ..Default::default()
            },
        )
        .await
    }

    /// Registers the instance `request` describes on broker `broker`.
    pub async fn register_instance_with(
        &self,
        broker: usize,
        request: session_pb::RegisterInstanceRequest,
    ) -> anyhow::Result<session_pb::Instance> {
        let mut client = self.session_client(0).await?;
        let instance = client
            .register_instance(session_pb::RegisterInstanceRequest {
                broker_id: broker_id(broker),
                ..request
            })
            .await
            .context("register instance")?
            .into_inner();
        Ok(instance)
    }

    /// A REST call through gateway `gateway` with the API token: the status and the JSON body
    /// (`null` when the body is empty).
    pub async fn rest(
        &self,
        gateway: usize,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> anyhow::Result<(u16, serde_json::Value)> {
        let url = format!("{}{path}", self.gateways[gateway].endpoint());
        let mut request = self.http.request(method, url).bearer_auth(API_TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await?;
        let body = if bytes.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_slice(&bytes).with_context(|| {
                format!(
                    "the answer ({status}) is not JSON: {:?}",
                    String::from_utf8_lossy(&bytes)
                )
            })?
        };
        Ok((status, body))
    }

    /// `POST /api/v1/instances/{iid}/terminal/sessions` through gateway `gateway`: the status
    /// and the JSON body.
    pub async fn create_session(
        &self,
        gateway: usize,
        instance_id: &str,
    ) -> anyhow::Result<(u16, serde_json::Value)> {
        self.rest(
            gateway,
            reqwest::Method::POST,
            &format!("/api/v1/instances/{instance_id}/terminal/sessions"),
            Some(serde_json::json!({})),
        )
        .await
    }

    /// Ids of the sessions broker `index` has a process for.
    pub async fn broker_processes(&self, index: usize) -> anyhow::Result<Vec<String>> {
        let mut client = self.broker_client(index).await?;
        let sessions = client
            .list(broker_pb::ListRequest {})
            .await?
            .into_inner()
            .sessions;
        Ok(sessions
            .into_iter()
            .filter(|session| {
                matches!(
                    broker_pb::SessionState::try_from(session.state),
                    Ok(broker_pb::SessionState::Starting
                        | broker_pb::SessionState::Running
                        | broker_pb::SessionState::Resetting)
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

/// Broker `index`'s own credential, which session-api binds to [`broker_id`]`(index)`.
pub fn broker_token(index: usize) -> String {
    format!("cluster-test-broker-{index}-token")
}

/// What session-api presents on broker `index`'s control calls: the credential derived from
/// [`broker_token`]`(index)`.
pub fn broker_control_token(index: usize) -> String {
    ptyhub_wire::ServiceCredential::new(broker_token(index))
        .expect("a valid broker credential")
        .broker_control_credential()
        .expose()
        .to_owned()
}

/// [`TICKET_SIGNING_KEY`], read.
pub fn ticket_signing_key() -> ptyhub_attach_ticket::TicketSigningKey {
    ptyhub_attach_ticket::TicketSigningKey::from_pem(TICKET_SIGNING_KEY)
        .expect("the cluster's signing key")
}

/// The public half of [`TICKET_SIGNING_KEY`] (PEM): all a broker holds to check tickets.
pub fn ticket_public_key() -> String {
    ticket_signing_key().verifying_key().to_pem()
}
