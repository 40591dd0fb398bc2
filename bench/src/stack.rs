//! The system under test, in this process on 127.0.0.1:0, started by `ptyhub-stack`: a pty-broker
//! offering local PTYs and (when the engine answers) Docker, session-api on a fresh SQLite file,
//! the gateway in front (serving the web page when it is built), one `local` instance and one
//! instance in a throwaway busybox container. Beside it, when asked, a second broker in the same
//! process with its terminal emulators off (`Config.screens = false`), registered with the same
//! session-api, and the same two instances on it: the throughput with and without screens.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};
use ptyhub_attach_ticket::TicketSigningKey;
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_stack::BackendKind;
use ptyhub_wire::{BearerAuth, ServiceCredential, TierCredentials};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

pub use ptyhub_stack::{BrokerClient, SessionApiClient};

pub const SERVICE_TOKEN: &str = "bench-service-token-0123456789";
/// The key the bench's session-api signs attach tickets with, and with which the bench signs
/// tickets of its own for brokers it started as processes; the brokers get its public half.
const TICKET_SIGNING_KEY: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEINk2hiiRAGmN6hto39bRN+1YknJS6qiDugLhcu7nJHM2
-----END PRIVATE KEY-----
";
/// The own credential of the broker without screens, bound to its id in the stack's session-api.
const UNSCREENED_BROKER_TOKEN: &str = "bench-unscreened-broker-token-0123456789";
/// The gateway's static API token the bench uses for REST and WebSockets.
pub const ADMIN_TOKEN: &str = "bench-admin-token-0123456789abcdef0123";
/// The image `cargo xtask test` builds (static busybox).
pub const TEST_IMAGE: &str = "ptyhub-test-busybox:latest";
const CONTAINER_LABEL: &str = "ptyhub.bench";
/// The id of the stack's broker (screens on, the default) in session-api's registry.
pub const BROKER_ID: &str = "bench";
/// The id of the second broker, the one without screens.
pub const UNSCREENED_BROKER_ID: &str = "bench-screens-off";
/// The streams the bench's one principal may hold open at the stack's gateway.
const MAX_BENCH_STREAMS: usize = 20_000;
/// Liveness bound for start-up, not a performance figure.
const START_PATIENCE: Duration = Duration::from_secs(60);

/// The credential the bench's services share, for a client of a broker the bench started as a
/// process of its own.
/// Each tier's credential in the bench's stack, derived from [`SERVICE_TOKEN`] as
/// `ptyhub-stack` derives them.
pub fn tier_credentials() -> Result<TierCredentials> {
    Ok(TierCredentials::derived_from(&ServiceCredential::new(
        SERVICE_TOKEN,
    )?))
}

pub fn service_auth() -> BearerAuth {
    BearerAuth::new(SERVICE_TOKEN).expect("the bench's service token is printable ascii")
}

/// [`TICKET_SIGNING_KEY`], read.
pub fn ticket_signing_key() -> Result<TicketSigningKey> {
    Ok(TicketSigningKey::from_pem(TICKET_SIGNING_KEY)?)
}

/// The variables that give a broker the bench starts as a process of its own its credential (the
/// services' shared `SERVICE_TOKEN`, as session-api's) and session-api's ticket public key: secrets
/// and keys are read from variables or files, never from the command line.
pub fn broker_secret_variables() -> Result<Vec<(String, String)>> {
    Ok(vec![
        (
            "PTYHUB_BROKER_SESSION_API_TOKEN".to_owned(),
            SERVICE_TOKEN.to_owned(),
        ),
        (
            "PTYHUB_BROKER_TICKET_PUBLIC_KEY".to_owned(),
            ticket_signing_key()?.verifying_key().to_pem(),
        ),
    ])
}

fn unscreened_broker_credential() -> Result<ServiceCredential> {
    Ok(ServiceCredential::new(UNSCREENED_BROKER_TOKEN)?)
}

/// While it lives, the gateway reaches the stack's broker over TCP ([`Stack::broker_over_tcp`]).
pub struct OverTcp<'a> {
    in_process: &'a ptyhub_stack::InProcessBrokers,
    endpoint: &'a str,
    service: Option<ptyhub_wire::InProcessBroker>,
}

impl Drop for OverTcp<'_> {
    fn drop(&mut self) {
        if let Some(service) = self.service.take() {
            self.in_process.insert(self.endpoint, service);
        }
    }
}

/// Which runtime a session runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Local,
    Docker,
}

/// Whether the session's broker keeps a terminal emulator per session (`Config.screens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Screens {
    /// The stack's broker, as ptyhub runs by default.
    On,
    /// The second broker, started with `screens = false`.
    Off,
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
    /// Instances on the stack's broker like the two above but recording output and input, so
    /// that recorded and unrecorded paths run side by side in one run: the local one, and the
    /// Docker one in the same container.
    pub recorded_local_instance: String,
    pub recorded_docker_instance: Option<String>,
    /// The broker without screens and its instances, when asked for.
    pub unscreened: Option<UnscreenedBroker>,
    /// The gateway serves the web page (built in this directory).
    pub web_dir: Option<PathBuf>,
    services: ptyhub_stack::Stack,
}

/// The second broker: the stack's settings but `screens = false`, in this process (as the
/// stack's broker is), registered with the stack's session-api.
#[derive(Debug)]
pub struct UnscreenedBroker {
    pub endpoint: String,
    pub client: BrokerClient,
    pub local_instance: String,
    pub docker_instance: Option<String>,
    stop: oneshot::Sender<()>,
    served: JoinHandle<Result<(), pty_broker::StartError>>,
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
    /// Also start the broker without screens.
    pub unscreened: bool,
    /// The built web page for the gateway to serve (`web/dist`).
    pub web_dir: Option<PathBuf>,
    /// Every session records output and input (session-api's server-wide default), into the
    /// stack's own recordings directory.
    pub record: bool,
}

/// The stack's broker settings that the second broker copies.
const KILL_GRACE: Duration = Duration::from_millis(500);
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

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
        // The services' own configs, at the defaults of one process, tuned for the bench.
        let mut builder = ptyhub_stack::Stack::builder()?
            .with_credentials(&ServiceCredential::new(SERVICE_TOKEN)?)
            .start_patience(START_PATIENCE);
        builder.session_api.secrets.ticket_signing_key = ticket_signing_key()?;
        builder.broker.broker_id = BROKER_ID.to_owned();
        builder.session_api.secrets.broker_tokens.push(
            ptyhub_stack::session_api::config::BrokerCredential {
                broker_id: UNSCREENED_BROKER_ID.to_owned(),
                credential: unscreened_broker_credential()?,
            },
        );
        // Every stream of the bench is the one admin's: the typing scenario alone holds a
        // thousand, beyond the per-principal limit meant for people.
        builder.gateway.max_streams_per_principal = MAX_BENCH_STREAMS;
        builder.broker.backends = backends.clone();
        // The bench container runs as root, which brokers refuse in containers by default.
        builder.broker.policy.allow_root = true;
        builder.broker.ring_bytes = options.ring_bytes;
        builder.broker.kill_grace = KILL_GRACE;
        builder.broker.shutdown_grace = SHUTDOWN_GRACE;
        builder.session_api.shutdown_grace = SHUTDOWN_GRACE;
        builder.gateway.shutdown_grace = SHUTDOWN_GRACE;
        builder.gateway.auth.api_tokens.push(ADMIN_TOKEN.into());
        builder.gateway.static_dir = options.web_dir.clone();
        if options.record {
            builder.session_api.default_record = session_api::RecordMode::OutputAndInput;
        }
        let services = builder.start().await?;
        let mut stack = Self {
            gateway_url: services.gateway_url(),
            session_api_endpoint: services.session_api_endpoint(),
            broker_endpoint: services.broker_endpoint(),
            session_api: services
                .session_api_client()
                .max_decoding_message_size(16 << 20),
            broker: services.broker_client().max_decoding_message_size(16 << 20),
            http: http_client(),
            local_instance: String::new(),
            docker: None,
            recorded_local_instance: String::new(),
            recorded_docker_instance: None,
            unscreened: None,
            web_dir: options.web_dir.clone(),
            services,
        };
        let local = broker_pb::Target {
            kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
        };
        stack.local_instance = stack
            .register("bench-local", local.clone(), options.max_sessions)
            .await?;
        stack.recorded_local_instance = stack
            .register_with(
                "bench-local-recorded",
                local,
                options.max_sessions,
                BROKER_ID,
                broker_pb::RecordMode::OutputAndInput,
            )
            .await?;
        if let Some(engine) = engine {
            let container_id = start_container(&engine).await?;
            let target = broker_pb::Target {
                kind: Some(broker_pb::target::Kind::Docker(broker_pb::DockerTarget {
                    container: container_id.clone(),
                })),
            };
            let registered = async {
                let instance = stack
                    .register("bench-docker", target.clone(), options.max_sessions)
                    .await?;
                let recorded = stack
                    .register_with(
                        "bench-docker-recorded",
                        target,
                        options.max_sessions,
                        BROKER_ID,
                        broker_pb::RecordMode::OutputAndInput,
                    )
                    .await?;
                anyhow::Ok((instance, recorded))
            }
            .await;
            let instance = match registered {
                Ok((instance, recorded)) => {
                    stack.recorded_docker_instance = Some(recorded);
                    instance
                }
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
        if options.unscreened {
            match stack.start_unscreened(&options, backends).await {
                Ok(unscreened) => stack.unscreened = Some(unscreened),
                Err(error) => {
                    stack.stop().await;
                    return Err(error.context("start the broker without screens"));
                }
            }
        }
        Ok(stack)
    }

    /// Starts the broker without screens (the stack's broker settings otherwise), waits until
    /// session-api knows it, and registers a local instance (and a Docker one in the same
    /// container) on it.
    async fn start_unscreened(
        &self,
        options: &StackOptions,
        backends: Vec<BackendKind>,
    ) -> Result<UnscreenedBroker> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("bind the broker without screens")?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let mut config = pty_broker::Config::with_own_credential(
            unscreened_broker_credential()?,
            ticket_signing_key()?.verifying_key(),
        );
        config.screens = false;
        config.broker_id = UNSCREENED_BROKER_ID.to_owned();
        config.backends = backends;
        config.policy.allow_root = true;
        config.ring_bytes = options.ring_bytes;
        config.kill_grace = KILL_GRACE;
        config.shutdown_grace = SHUTDOWN_GRACE;
        config.session_api = Some(self.session_api_endpoint.clone());
        config.advertise = Some(endpoint.clone());
        let broker = pty_broker::Broker::builder(config)
            .configured_runtimes()
            .await
            .context("start the broker without screens")?
            .build();
        // The gateway calls it in process as it calls the stack's broker: the two differ in
        // their screens alone.
        self.services
            .in_process_brokers()
            .insert(endpoint.clone(), broker.in_process());
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(broker.serve(listener, async move {
            let _ = stopped.await;
        }));
        let channel = Channel::from_shared(endpoint.clone())?.connect_lazy();
        let client = broker_pb::pty_broker_client::PtyBrokerClient::with_interceptor(
            channel,
            unscreened_broker_credential()?
                .broker_control_credential()
                .bearer_auth(),
        )
        .max_decoding_message_size(16 << 20);
        let mut unscreened = UnscreenedBroker {
            endpoint,
            client,
            local_instance: String::new(),
            docker_instance: None,
            stop,
            served,
        };
        let registered = async {
            let local = broker_pb::Target {
                kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
            };
            // The broker registers itself in the background: until then session-api does not
            // know its id.
            let deadline = tokio::time::Instant::now() + START_PATIENCE;
            unscreened.local_instance = loop {
                match self
                    .register_on(
                        "bench-local-screens-off",
                        local.clone(),
                        options.max_sessions,
                        UNSCREENED_BROKER_ID,
                    )
                    .await
                {
                    Ok(instance) => break instance,
                    Err(error) if tokio::time::Instant::now() >= deadline => {
                        return Err(error.context(format!(
                            "session-api did not learn of the broker without screens within {START_PATIENCE:?}"
                        )));
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            };
            if let Some(docker) = &self.docker {
                let target = broker_pb::Target {
                    kind: Some(broker_pb::target::Kind::Docker(broker_pb::DockerTarget {
                        container: docker.container_id.clone(),
                    })),
                };
                unscreened.docker_instance = Some(
                    self.register_on(
                        "bench-docker-screens-off",
                        target,
                        options.max_sessions,
                        UNSCREENED_BROKER_ID,
                    )
                    .await?,
                );
            }
            anyhow::Ok(())
        }
        .await;
        match registered {
            Ok(()) => Ok(unscreened),
            Err(error) => {
                unscreened.stop().await;
                Err(error)
            }
        }
    }

    /// Until the guard drops, the gateway reaches the stack's broker over its TCP port, as a
    /// gateway in a process of its own does, instead of in process.
    pub fn broker_over_tcp(&self) -> OverTcp<'_> {
        let in_process = self.services.in_process_brokers();
        OverTcp {
            service: in_process.remove(&self.broker_endpoint),
            in_process,
            endpoint: &self.broker_endpoint,
        }
    }

    /// `ws://127.0.0.1:<port>` of the gateway.
    pub fn websocket_url(&self) -> String {
        self.gateway_url.replacen("http://", "ws://", 1)
    }

    /// The instance id of `backend` on the stack's broker, if that backend is available.
    pub fn instance(&self, backend: Backend) -> Option<&str> {
        self.instance_with(backend, Screens::On)
    }

    /// The instance id of `backend` on the broker with or without screens, if available.
    pub fn instance_with(&self, backend: Backend, screens: Screens) -> Option<&str> {
        match (screens, backend) {
            (Screens::On, Backend::Local) => Some(&self.local_instance),
            (Screens::On, Backend::Docker) => {
                self.docker.as_ref().map(|docker| docker.instance.as_str())
            }
            (Screens::Off, Backend::Local) => self
                .unscreened
                .as_ref()
                .map(|broker| broker.local_instance.as_str()),
            (Screens::Off, Backend::Docker) => self
                .unscreened
                .as_ref()
                .and_then(|broker| broker.docker_instance.as_deref()),
        }
    }

    /// The instance id of `backend` whose sessions record output and input, if available.
    pub fn recorded_instance(&self, backend: Backend) -> Option<&str> {
        match backend {
            Backend::Local => Some(&self.recorded_local_instance),
            Backend::Docker => self.recorded_docker_instance.as_deref(),
        }
    }

    /// The broker with or without screens: a client and its endpoint, if it runs.
    pub fn broker_with(&self, screens: Screens) -> Option<(&BrokerClient, &str)> {
        match screens {
            Screens::On => Some((&self.broker, &self.broker_endpoint)),
            Screens::Off => self
                .unscreened
                .as_ref()
                .map(|broker| (&broker.client, broker.endpoint.as_str())),
        }
    }

    /// Registers an instance on the stack's broker (the stack is up: session-api sees it).
    pub async fn register(
        &self,
        name: &str,
        target: broker_pb::Target,
        max_sessions: u32,
    ) -> Result<String> {
        self.register_on(name, target, max_sessions, BROKER_ID)
            .await
    }

    /// Registers an instance on the broker `broker_id` (named, so that session-api never places
    /// it on the other broker).
    pub async fn register_on(
        &self,
        name: &str,
        target: broker_pb::Target,
        max_sessions: u32,
        broker_id: &str,
    ) -> Result<String> {
        self.register_with(
            name,
            target,
            max_sessions,
            broker_id,
            broker_pb::RecordMode::Unspecified,
        )
        .await
    }

    /// [`Stack::register_on`] with what the instance's sessions record (`Unspecified`: the
    /// server's default).
    pub async fn register_with(
        &self,
        name: &str,
        target: broker_pb::Target,
        max_sessions: u32,
        broker_id: &str,
        record: broker_pb::RecordMode,
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
            broker_id: broker_id.to_owned(),
            record: record as i32,
            shell_integration: None,
            control_grant_timeout_secs: None,
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
        if let Some(unscreened) = self.unscreened {
            unscreened.stop().await;
        }
        if let Err(error) = self.services.shutdown().await {
            eprintln!("the bench's services did not stop cleanly: {error}");
        }
        if let Some(docker) = &self.docker {
            remove_container(&docker.engine, &docker.container_id).await;
        }
    }
}

impl UnscreenedBroker {
    /// Ends its sessions and waits for it (bounded by its shutdown grace and a margin).
    async fn stop(self) {
        let _ = self.stop.send(());
        match tokio::time::timeout(SHUTDOWN_GRACE * 2, self.served).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => eprintln!("the broker without screens failed: {error}"),
            Ok(Err(error)) => eprintln!("the broker without screens panicked: {error}"),
            Err(_) => eprintln!("the broker without screens did not stop in time"),
        }
    }
}

/// Prints a skip, and appends it to the list `cargo xtask test` prints at the end (the file
/// named by `PTYHUB_TEST_SKIP_LOG`, as the tests do).
pub fn report_skip(line: &str) {
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
pub fn in_ci() -> bool {
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

/// The bench's plain-HTTP client. The workspace's reqwest has rustls without a crypto provider
/// of its own, so even an `http://`-only client carries a rustls config (on ring, no roots).
fn http_client() -> reqwest::Client {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring's protocol versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .build()
        .expect("an HTTP client")
}
