//! An in-process ptyhub on port 0: a pty-broker with local PTYs, session-api on a fresh SQLite
//! file, and the gateway in front, each started through its library's `run` on 127.0.0.1:0.
//!
//! ```ignore
//! let stack = TestStack::builder().ring_bytes(4096).start().await;
//! let response = stack.http.get(format!("{}/api/v1/instances", stack.gateway_url))
//!     .bearer_auth(&stack.admin_token).send().await?;
//! stack.shutdown().await;
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use attach_ticket::TicketKey;
use ptyhub_proto::broker::v1 as broker;
use ptyhub_proto::session::v1 as session;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// session-api's client as the stack hands it out: with the service token on every call.
pub type SessionApiClient =
    session::session_api_client::SessionApiClient<InterceptedService<Channel, ServiceAuth>>;

/// The pty-broker's client, with the service token on every call.
pub type BrokerClient =
    broker::pty_broker_client::PtyBrokerClient<InterceptedService<Channel, ServiceAuth>>;

const SERVICE_TOKEN: &str = "test-service-token-0123456789";
const TICKET_SECRET: &str = "test-ticket-secret-0123456789";
const JWT_SECRET: &str = "test-jwt-secret-0123456789abcdef";
const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

/// How long the stack may take to come up: a liveness bound, not a performance assertion.
const START_PATIENCE: Duration = Duration::from_secs(60);

/// Adds `authorization: Bearer <service token>`.
#[derive(Debug, Clone)]
pub struct ServiceAuth;

impl Interceptor for ServiceAuth {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        let value = format!("Bearer {SERVICE_TOKEN}")
            .parse()
            .map_err(|_| tonic::Status::internal("bad service token"))?;
        request
            .metadata_mut()
            .insert(ptyhub_proto::AUTHORIZATION_METADATA, value);
        Ok(request)
    }
}

/// Configures a [`TestStack`].
#[derive(Debug)]
pub struct TestStackBuilder {
    ring_bytes: Option<u64>,
    heartbeat_interval: Option<Duration>,
    static_dir: Option<PathBuf>,
    allowed_origins: Vec<String>,
    local_max_sessions: u32,
    local_command: Vec<String>,
}

impl Default for TestStackBuilder {
    fn default() -> Self {
        Self {
            ring_bytes: None,
            heartbeat_interval: None,
            static_dir: None,
            allowed_origins: Vec::new(),
            local_max_sessions: 5,
            local_command: vec!["/bin/sh".to_owned()],
        }
    }
}

impl TestStackBuilder {
    /// The broker's per-session replay ring (at least 1024 bytes).
    pub fn ring_bytes(mut self, bytes: u64) -> Self {
        self.ring_bytes = Some(bytes);
        self
    }

    /// The gateway's WebSocket heartbeat interval (default 25 s).
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = Some(interval);
        self
    }

    /// The gateway's web page directory.
    pub fn static_dir(mut self, directory: PathBuf) -> Self {
        self.static_dir = Some(directory);
        self
    }

    /// Origins the gateway allows besides its own.
    pub fn allowed_origins(mut self, origins: Vec<String>) -> Self {
        self.allowed_origins = origins;
        self
    }

    /// `max_sessions` of the `local` instance (default 5).
    pub fn local_max_sessions(mut self, max_sessions: u32) -> Self {
        self.local_max_sessions = max_sessions;
        self
    }

    /// The command of the `local` instance's sessions (default `/bin/sh`).
    pub fn local_command(mut self, command: Vec<String>) -> Self {
        self.local_command = command;
        self
    }

    /// Starts broker, session-api and gateway, registers the `local` instance, and waits until
    /// the gateway's `/healthz` says everything answers.
    pub async fn start(self) -> TestStack {
        crate::init_test_logging();
        let data = tempfile::tempdir().expect("temporary directory");
        let shutdown = CancellationToken::new();
        let mut tasks = Vec::new();

        let broker_listener = bind().await;
        let broker_endpoint = endpoint(&broker_listener);
        let mut broker_config = pty_broker::Config::new(
            pty_broker::ServiceToken::new(SERVICE_TOKEN).expect("service token"),
            TicketKey::new(TICKET_SECRET.as_bytes().to_vec()).expect("ticket key"),
        );
        broker_config.broker_id = "local".to_owned();
        broker_config.shutdown_grace = Duration::from_secs(2);
        broker_config.kill_grace = Duration::from_millis(500);
        if let Some(ring_bytes) = self.ring_bytes {
            broker_config.ring_bytes = ring_bytes;
        }
        let stop = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            let stopped = stop.cancelled_owned();
            if let Err(error) = pty_broker::run(broker_config, broker_listener, stopped).await {
                panic!("pty-broker failed: {error}");
            }
        }));

        let session_listener = bind().await;
        let session_api_endpoint = endpoint(&session_listener);
        let database_url = format!(
            "sqlite://{}?mode=rwc",
            data.path().join("sessions.db").display()
        );
        let mut session_config = session_api::Config::new(
            database_url,
            session_api::ServiceToken::new(SERVICE_TOKEN).expect("service token"),
            TicketKey::new(TICKET_SECRET.as_bytes().to_vec()).expect("ticket key"),
        );
        session_config.brokers = vec![session_api::StaticBroker {
            id: "local".to_owned(),
            endpoint: broker_endpoint.clone(),
        }];
        session_config.shutdown_grace = Duration::from_secs(2);
        let stop = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            let stopped = stop.cancelled_owned();
            if let Err(error) = session_api::run(session_config, session_listener, stopped).await {
                panic!("session-api failed: {error}");
            }
        }));

        let gateway_listener = bind().await;
        let gateway_url = endpoint(&gateway_listener);
        let gateway_shutdown = shutdown.child_token();
        let mut gateway_config = gateway::Config::new(
            session_api_endpoint.clone(),
            gateway::ServiceCredential::new(SERVICE_TOKEN).expect("service token"),
        );
        gateway_config.auth.api_tokens = vec![gateway::SecretString::from(ADMIN_TOKEN)];
        gateway_config.auth.jwt_hs256_secret = Some(gateway::SecretString::from(JWT_SECRET));
        gateway_config.allowed_origins = self.allowed_origins;
        gateway_config.static_dir = self.static_dir;
        gateway_config.shutdown_grace = Duration::from_secs(2);
        if let Some(interval) = self.heartbeat_interval {
            gateway_config.heartbeat_interval = interval;
        }
        let stop = gateway_shutdown.clone();
        let gateway_task = tokio::spawn(async move {
            let stopped = stop.cancelled_owned();
            if let Err(error) = gateway::run(gateway_config, gateway_listener, stopped).await {
                panic!("gateway failed: {error}");
            }
        });

        let session_channel = Channel::from_shared(session_api_endpoint.clone())
            .expect("session-api endpoint")
            .connect_lazy();
        let session_api = session::session_api_client::SessionApiClient::with_interceptor(
            session_channel,
            ServiceAuth,
        );
        let broker_channel = Channel::from_shared(broker_endpoint.clone())
            .expect("broker endpoint")
            .connect_lazy();
        let broker = broker::pty_broker_client::PtyBrokerClient::with_interceptor(
            broker_channel,
            ServiceAuth,
        );

        let mut stack = TestStack {
            gateway_url,
            admin_token: ADMIN_TOKEN.to_owned(),
            instance_id: String::new(),
            http: reqwest::Client::new(),
            session_api,
            broker,
            session_api_endpoint,
            broker_endpoint,
            shutdown,
            gateway_shutdown,
            gateway_task: Some(gateway_task),
            tasks,
            _data: data,
        };
        stack.wait_until_healthy().await;
        stack.instance_id = stack
            .register_instance_with(
                "local",
                self.local_max_sessions,
                &[],
                self.local_command.clone(),
            )
            .await;
        stack
    }
}

/// A running stack. Dropping it stops the services; [`TestStack::shutdown`] also waits.
#[derive(Debug)]
pub struct TestStack {
    /// `http://127.0.0.1:<port>` of the gateway.
    pub gateway_url: String,
    /// A static API token of the gateway: admin over every instance.
    pub admin_token: String,
    /// The id of the registered `local` instance (the broker's own host).
    pub instance_id: String,
    /// An HTTP client for the gateway.
    pub http: reqwest::Client,
    /// session-api directly, with the service token.
    pub session_api: SessionApiClient,
    /// The broker directly, with the service token.
    pub broker: BrokerClient,
    pub session_api_endpoint: String,
    pub broker_endpoint: String,
    shutdown: CancellationToken,
    gateway_shutdown: CancellationToken,
    gateway_task: Option<JoinHandle<()>>,
    /// The broker's and session-api's tasks.
    tasks: Vec<JoinHandle<()>>,
    _data: tempfile::TempDir,
}

impl TestStack {
    pub fn builder() -> TestStackBuilder {
        TestStackBuilder::default()
    }

    /// `ws://127.0.0.1:<port>` of the gateway.
    pub fn websocket_url(&self) -> String {
        self.gateway_url.replacen("http://", "ws://", 1)
    }

    /// An HS256 JWT the gateway accepts, valid for an hour, scoped to `instances` (ids or
    /// names, `*` for all).
    pub fn jwt(&self, subject: &str, instances: &[&str], admin: bool) -> String {
        sign_jwt(subject, instances, admin, unix_now() + 3600)
    }

    /// An HS256 JWT that expired an hour ago.
    pub fn jwt_expired(&self, subject: &str, instances: &[&str]) -> String {
        sign_jwt(subject, instances, false, unix_now() - 3600)
    }

    /// Registers a local instance running `/bin/sh` and returns its id.
    pub async fn register_instance(
        &self,
        name: &str,
        max_sessions: u32,
        labels: &[(&str, &str)],
    ) -> String {
        self.register_instance_with(name, max_sessions, labels, vec!["/bin/sh".to_owned()])
            .await
    }

    /// Registers a local instance with its command and returns its id.
    pub async fn register_instance_with(
        &self,
        name: &str,
        max_sessions: u32,
        labels: &[(&str, &str)],
        command: Vec<String>,
    ) -> String {
        let env: HashMap<String, String> = [("PS1", "$ "), ("TERM", "xterm-256color")]
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect();
        let request = session::RegisterInstanceRequest {
            name: name.to_owned(),
            target: Some(broker::Target {
                kind: Some(broker::target::Kind::Local(broker::LocalTarget {})),
            }),
            command,
            env,
            cwd: String::new(),
            user: String::new(),
            max_sessions,
            labels: labels
                .iter()
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
                .collect(),
            broker_id: String::new(),
        };
        self.session_api
            .clone()
            .register_instance(request)
            .await
            .unwrap_or_else(|status| panic!("register instance {name}: {status}"))
            .into_inner()
            .id
    }

    /// Stops the gateway only (its shutdown future completes) and waits for it; session-api
    /// and the broker go on.
    pub async fn stop_gateway(&mut self) {
        self.gateway_shutdown.cancel();
        if let Some(task) = self.gateway_task.take() {
            await_stopped(task).await;
        }
    }

    /// Stops every service and waits for them to finish.
    pub async fn shutdown(mut self) {
        self.stop_gateway().await;
        self.shutdown.cancel();
        for task in self.tasks.drain(..) {
            await_stopped(task).await;
        }
    }

    async fn wait_until_healthy(&self) {
        let url = format!("{}/healthz", self.gateway_url);
        let deadline = tokio::time::Instant::now() + START_PATIENCE;
        let mut last = String::new();
        loop {
            let gateway_stopped = self
                .gateway_task
                .as_ref()
                .is_none_or(JoinHandle::is_finished);
            if gateway_stopped || self.tasks.iter().any(JoinHandle::is_finished) {
                panic!("a service stopped while the stack was starting; last health: {last}");
            }
            match self.http.get(&url).send().await {
                Ok(response) if response.status().is_success() => {
                    let body = response.text().await.unwrap_or_default();
                    // All brokers must be listed and up, not merely none of them down.
                    if body.contains("\"brokers\":[{") {
                        return;
                    }
                    last = body;
                }
                Ok(response) => last = response.text().await.unwrap_or_default(),
                Err(error) => last = error.to_string(),
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the stack was not healthy within {START_PATIENCE:?}: {last}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for TestStack {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Waits for a service task, passing its panic on.
async fn await_stopped(task: JoinHandle<()>) {
    match tokio::time::timeout(Duration::from_secs(15), task).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Ok(Err(_)) => {}
        Err(_) => panic!("a service did not stop within 15 s of shutdown"),
    }
}

async fn bind() -> TcpListener {
    TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0")
}

fn endpoint(listener: &TcpListener) -> String {
    format!("http://{}", listener.local_addr().expect("local address"))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

fn sign_jwt(subject: &str, instances: &[&str], admin: bool, expires_at: u64) -> String {
    let claims = serde_json::json!({
        "sub": subject,
        "exp": expires_at,
        "instances": instances,
        "admin": admin,
    });
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()).expect("jwt secret"),
    )
    .expect("sign jwt")
}
