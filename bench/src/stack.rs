//! The system under test, in this process on 127.0.0.1:0, started by `ptyhub-stack`: a pty-broker
//! offering local PTYs and (when the engine answers) Docker, session-api on a fresh SQLite file,
//! the gateway in front, one `local` instance and one instance in a throwaway busybox container.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use attach_ticket::TicketKey;
use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_stack::BackendKind;
use ptyhub_wire::{BearerAuth, ServiceCredential};

pub use ptyhub_stack::{BrokerClient, SessionApiClient};

pub const SERVICE_TOKEN: &str = "bench-service-token-0123456789";
pub const TICKET_SECRET: &str = "bench-ticket-secret-0123456789";
/// The gateway's static API token the bench uses for REST and WebSockets.
pub const ADMIN_TOKEN: &str = "bench-admin-token-0123456789";
/// The image `cargo xtask test` builds (static busybox).
pub const TEST_IMAGE: &str = "ptyhub-test-busybox:latest";
const CONTAINER_LABEL: &str = "ptyhub.bench";
/// Liveness bound for start-up, not a performance figure.
const START_PATIENCE: Duration = Duration::from_secs(60);

/// The credential the bench's services share, for a client of a broker the bench started as a
/// process of its own.
pub fn service_auth() -> BearerAuth {
    BearerAuth::new(SERVICE_TOKEN).expect("the bench's service token is printable ascii")
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
    services: ptyhub_stack::Stack,
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
    /// Starts the services and registers the instances. Without a Docker engine (or its test
    /// image) the Docker paths are left out with a printed SKIP line; under `CI=true`, where
    /// nothing may be skipped, that is an error instead.
    pub async fn start(options: StackOptions) -> Result<Self> {
        let engine = match docker_engine().await {
            Ok(engine) => Some(engine),
            Err(reason) if in_ci() => {
                bail!("Docker is required under CI=true and does not answer: {reason}")
            }
            Err(reason) => {
                report_skip(&format!("SKIP: bench Docker paths: {reason}"));
                None
            }
        };
        let backends = if engine.is_some() {
            vec![BackendKind::Local, BackendKind::Docker]
        } else {
            vec![BackendKind::Local]
        };
        let services = ptyhub_stack::Stack::builder()
            .service_credential(ServiceCredential::new(SERVICE_TOKEN)?)
            .ticket_key(TicketKey::new(TICKET_SECRET.as_bytes().to_vec())?)
            .broker_id("bench")
            .backends(backends)
            .ring_bytes(options.ring_bytes)
            .shutdown_grace(Duration::from_secs(3))
            .kill_grace(Duration::from_millis(500))
            .api_token(ADMIN_TOKEN)
            .start_patience(START_PATIENCE)
            .start()
            .await?;
        let mut stack = Self {
            gateway_url: services.gateway_url(),
            session_api_endpoint: services.session_api_endpoint(),
            broker_endpoint: services.broker_endpoint(),
            session_api: services
                .session_api_client()
                .max_decoding_message_size(16 << 20),
            broker: services.broker_client().max_decoding_message_size(16 << 20),
            http: reqwest::Client::new(),
            local_instance: String::new(),
            docker: None,
            services,
        };
        let local = broker_pb::Target {
            kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
        };
        stack.local_instance = stack
            .register("bench-local", local, options.max_sessions)
            .await?;
        if let Some(engine) = engine {
            let container_id = start_container(&engine).await?;
            let target = broker_pb::Target {
                kind: Some(broker_pb::target::Kind::Docker(broker_pb::DockerTarget {
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

    /// Registers an instance (the stack is up: session-api sees the broker).
    pub async fn register(
        &self,
        name: &str,
        target: broker_pb::Target,
        max_sessions: u32,
    ) -> Result<String> {
        let env: HashMap<String, String> = [("PS1", "$ "), ("TERM", "xterm-256color")]
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect();
        let request = session_pb::RegisterInstanceRequest {
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
        let instance = self
            .session_api
            .clone()
            .register_instance(request)
            .await
            .with_context(|| format!("register instance {name}"))?;
        Ok(instance.into_inner().id)
    }

    /// Stops the services and removes the container.
    pub async fn stop(self) {
        if let Err(error) = self.services.shutdown().await {
            eprintln!("the bench's services did not stop cleanly: {error}");
        }
        if let Some(docker) = &self.docker {
            remove_container(&docker.engine, &docker.container_id).await;
        }
    }
}

/// Prints a skip, and appends it to the list `cargo xtask test` prints at the end (the file
/// named by `PTYHUB_TEST_SKIP_LOG`, as the tests do).
fn report_skip(line: &str) {
    use std::io::Write as _;
    eprintln!("{line}");
    if let Some(log) = std::env::var_os("PTYHUB_TEST_SKIP_LOG") {
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut file| file.write_all(format!("{line}\n").as_bytes()));
        if let Err(error) = appended {
            eprintln!(
                "cannot record the skip in {}: {error}",
                log.to_string_lossy()
            );
        }
    }
}

/// True under CI, where no part of the bench may be left out.
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| value == "true" || value == "1")
}

/// The Docker engine when it answers and has the test image; why not otherwise.
async fn docker_engine() -> Result<Docker, String> {
    let engine =
        Docker::connect_with_defaults().map_err(|error| format!("no Docker client: {error}"))?;
    let engine = tokio::time::timeout(Duration::from_secs(5), engine.negotiate_version())
        .await
        .map_err(|_| "the engine did not answer within 5 s".to_owned())?
        .map_err(|error| format!("the engine does not answer: {error}"))?;
    engine
        .inspect_image(TEST_IMAGE)
        .await
        .map_err(|error| format!("no {TEST_IMAGE} image (cargo xtask deps builds it): {error}"))?;
    Ok(engine)
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
