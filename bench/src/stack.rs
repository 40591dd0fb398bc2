//! The system under test, in this process on 127.0.0.1:0: a pty-broker offering local PTYs and
//! (when the engine answers) Docker, session-api on a fresh SQLite file, the gateway in front,
//! one `local` instance and one instance in a throwaway busybox container.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use attach_ticket::TicketKey;
use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};
use ptyhub_proto::broker::v1 as broker;
use ptyhub_proto::session::v1 as session;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

pub const SERVICE_TOKEN: &str = "bench-service-token-0123456789";
pub const TICKET_SECRET: &str = "bench-ticket-secret-0123456789";
/// The gateway's static API token the bench uses for REST and WebSockets.
pub const ADMIN_TOKEN: &str = "bench-admin-token-0123456789";
/// The image `cargo xtask test` builds (static busybox).
pub const TEST_IMAGE: &str = "ptyhub-test-busybox:latest";
const CONTAINER_LABEL: &str = "ptyhub.bench";
/// Liveness bound for start-up, not a performance figure.
const START_PATIENCE: Duration = Duration::from_secs(60);

/// session-api's client with the service token on every call.
pub type SessionApiClient =
    session::session_api_client::SessionApiClient<InterceptedService<Channel, ServiceAuth>>;
/// The broker's client with the service token on every call.
pub type BrokerClient =
    broker::pty_broker_client::PtyBrokerClient<InterceptedService<Channel, ServiceAuth>>;

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

/// Which runtime a session runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Local,
    Docker,
}

/// A running stack; [`Stack::stop`] ends it and removes the container.
#[derive(Debug)]
pub struct Stack {
    pub gateway_url: String,
    /// session-api's gRPC endpoint, for a gateway started as a separate process.
    pub session_api_endpoint: String,
    pub broker_endpoint: String,
    pub session_api: SessionApiClient,
    pub broker: BrokerClient,
    pub http: reqwest::Client,
    pub local_instance: String,
    /// The Docker instance's id and its container, when Docker answers.
    pub docker: Option<DockerTarget>,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    _data: tempfile::TempDir,
}

/// The container the Docker instance runs in.
#[derive(Debug, Clone)]
pub struct DockerTarget {
    pub engine: Docker,
    pub container_id: String,
    pub instance: String,
}

/// Options of the stack.
#[derive(Debug, Clone)]
pub struct StackOptions {
    pub ring_bytes: u64,
    pub max_sessions: u32,
}

impl Stack {
    pub async fn start(options: StackOptions) -> Result<Self> {
        let data = tempfile::tempdir().context("temporary directory")?;
        let shutdown = CancellationToken::new();
        let mut tasks = Vec::new();
        let engine = docker_engine().await;

        let broker_listener = bind().await?;
        let broker_endpoint = endpoint(&broker_listener)?;
        let mut broker_config = pty_broker::Config::new(
            pty_broker::ServiceToken::new(SERVICE_TOKEN).map_err(anyhow::Error::msg)?,
            TicketKey::new(TICKET_SECRET.as_bytes().to_vec())?,
        );
        broker_config.broker_id = "bench".to_owned();
        broker_config.ring_bytes = options.ring_bytes;
        broker_config.shutdown_grace = Duration::from_secs(3);
        broker_config.kill_grace = Duration::from_millis(500);
        if engine.is_some() {
            broker_config.backends = vec![
                pty_broker::BackendKind::Local,
                pty_broker::BackendKind::Docker,
            ];
        }
        let stop = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(error) =
                pty_broker::run(broker_config, broker_listener, stop.cancelled_owned()).await
            {
                eprintln!("pty-broker failed: {error}");
            }
        }));

        let session_listener = bind().await?;
        let session_api_endpoint = endpoint(&session_listener)?;
        let database_url = format!(
            "sqlite://{}?mode=rwc",
            data.path().join("sessions.db").display()
        );
        let mut session_config = session_api::Config::new(
            database_url,
            session_api::ServiceToken::new(SERVICE_TOKEN).map_err(anyhow::Error::msg)?,
            TicketKey::new(TICKET_SECRET.as_bytes().to_vec())?,
        );
        session_config.brokers = vec![session_api::StaticBroker {
            id: "bench".to_owned(),
            endpoint: broker_endpoint.clone(),
        }];
        session_config.shutdown_grace = Duration::from_secs(3);
        let stop = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(error) =
                session_api::run(session_config, session_listener, stop.cancelled_owned()).await
            {
                eprintln!("session-api failed: {error}");
            }
        }));

        let gateway_listener = bind().await?;
        let gateway_url = endpoint(&gateway_listener)?;
        let mut gateway_config = gateway::Config::new(
            session_api_endpoint.clone(),
            gateway::ServiceCredential::new(SERVICE_TOKEN)?,
        );
        gateway_config.auth.api_tokens = vec![gateway::SecretString::from(ADMIN_TOKEN)];
        gateway_config.shutdown_grace = Duration::from_secs(3);
        let stop = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(error) =
                gateway::run(gateway_config, gateway_listener, stop.cancelled_owned()).await
            {
                eprintln!("gateway failed: {error}");
            }
        }));

        let session_api = session::session_api_client::SessionApiClient::with_interceptor(
            Channel::from_shared(session_api_endpoint.clone())?.connect_lazy(),
            ServiceAuth,
        )
        .max_decoding_message_size(16 << 20);
        let broker = broker::pty_broker_client::PtyBrokerClient::with_interceptor(
            Channel::from_shared(broker_endpoint.clone())?.connect_lazy(),
            ServiceAuth,
        )
        .max_decoding_message_size(16 << 20);
        let mut stack = Self {
            gateway_url,
            session_api_endpoint,
            broker_endpoint,
            session_api,
            broker,
            http: reqwest::Client::new(),
            local_instance: String::new(),
            docker: None,
            shutdown,
            tasks,
            _data: data,
        };
        let local = broker::Target {
            kind: Some(broker::target::Kind::Local(broker::LocalTarget {})),
        };
        stack.local_instance = stack
            .register("bench-local", local, options.max_sessions)
            .await?;
        if let Some(engine) = engine {
            let container_id = start_container(&engine).await?;
            let target = broker::Target {
                kind: Some(broker::target::Kind::Docker(broker::DockerTarget {
                    container: container_id.clone(),
                })),
            };
            let registered = stack
                .register("bench-docker", target, options.max_sessions)
                .await;
            let instance = match registered {
                Ok(instance) => instance,
                Err(error) => {
                    remove_container(&engine, &container_id).await;
                    return Err(error);
                }
            };
            stack.docker = Some(DockerTarget {
                engine,
                container_id,
                instance,
            });
        }
        Ok(stack)
    }

    /// `ws://127.0.0.1:<port>` of the gateway.
    pub fn websocket_url(&self) -> String {
        self.gateway_url.replacen("http://", "ws://", 1)
    }

    /// The instance id of `backend`, if that backend is available.
    pub fn instance(&self, backend: Backend) -> Option<&str> {
        match backend {
            Backend::Local => Some(&self.local_instance),
            Backend::Docker => self.docker.as_ref().map(|docker| docker.instance.as_str()),
        }
    }

    /// Registers an instance, retrying until session-api sees the broker (bounded).
    pub async fn register(
        &self,
        name: &str,
        target: broker::Target,
        max_sessions: u32,
    ) -> Result<String> {
        let env: HashMap<String, String> = [("PS1", "$ "), ("TERM", "xterm-256color")]
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect();
        let request = session::RegisterInstanceRequest {
            name: name.to_owned(),
            target: Some(target),
            command: vec!["/bin/sh".to_owned()],
            env,
            cwd: String::new(),
            user: String::new(),
            max_sessions,
            labels: HashMap::new(),
            broker_id: String::new(),
        };
        let deadline = tokio::time::Instant::now() + START_PATIENCE;
        loop {
            match self
                .session_api
                .clone()
                .register_instance(request.clone())
                .await
            {
                Ok(instance) => return Ok(instance.into_inner().id),
                Err(status) if tokio::time::Instant::now() < deadline => {
                    tracing_status(&status);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(status) => bail!("register instance {name}: {status}"),
            }
        }
    }

    /// Stops the services and removes the container.
    pub async fn stop(self) {
        self.shutdown.cancel();
        for task in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
        }
        if let Some(docker) = &self.docker {
            remove_container(&docker.engine, &docker.container_id).await;
        }
    }
}

fn tracing_status(status: &tonic::Status) {
    if std::env::var_os("BENCH_DEBUG").is_some() {
        eprintln!("register instance: {status}");
    }
}

/// The Docker engine when it answers and has the test image; `None` otherwise.
async fn docker_engine() -> Option<Docker> {
    let engine = Docker::connect_with_defaults().ok()?;
    let engine = tokio::time::timeout(Duration::from_secs(5), engine.negotiate_version())
        .await
        .ok()?
        .ok()?;
    engine.inspect_image(TEST_IMAGE).await.ok()?;
    Some(engine)
}

async fn start_container(engine: &Docker) -> Result<String> {
    let name = format!("ptyhub-bench-{}", uuid::Uuid::new_v4().simple());
    let body = ContainerCreateBody {
        image: Some(TEST_IMAGE.to_owned()),
        cmd: Some(vec!["sleep".to_owned(), "86400".to_owned()]),
        labels: Some(HashMap::from([(
            CONTAINER_LABEL.to_owned(),
            "1".to_owned(),
        )])),
        host_config: Some(HostConfig {
            network_mode: Some("none".to_owned()),
            init: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    };
    let created = engine
        .create_container(
            Some(CreateContainerOptions {
                name: Some(name),
                ..Default::default()
            }),
            body,
        )
        .await
        .context("create the bench container")?;
    if let Err(error) = engine.start_container(&created.id, None).await {
        remove_container(engine, &created.id).await;
        return Err(error).context("start the bench container");
    }
    Ok(created.id)
}

async fn remove_container(engine: &Docker, id: &str) {
    let options = RemoveContainerOptions {
        force: true,
        ..Default::default()
    };
    if let Err(error) = engine.remove_container(id, Some(options)).await {
        eprintln!("could not remove container {id}: {error}");
    }
}

async fn bind() -> Result<TcpListener> {
    TcpListener::bind("127.0.0.1:0")
        .await
        .context("bind 127.0.0.1:0")
}

fn endpoint(listener: &TcpListener) -> Result<String> {
    Ok(format!("http://{}", listener.local_addr()?))
}
