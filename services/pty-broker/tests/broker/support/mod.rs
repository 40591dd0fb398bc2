//! The broker test harness: a real broker on 127.0.0.1:0 with one backend (local PTYs or Docker),
//! typed gRPC clients, signed tickets, and a backend-neutral way to list a session's processes.
//!
//! Scenarios take a [`Backend`] and use only POSIX sh/busybox commands, so that the same scenario
//! runs against both runtimes; `backend_scenarios!` generates one test per backend for each.

pub mod docker;

pub use docker::ContainerInit;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use pty_broker::runtime::PtyRuntime;
use pty_broker::runtime::docker::{DockerRuntime, DockerRuntimeConfig};
use pty_broker::runtime::local::LocalRuntime;
use pty_broker::{BackendKind, Broker, Config, ServiceCredential};
use ptyhub_attach_ticket::{TicketRole, TicketSigningKey};
use ptyhub_proto::broker::v1 as pb;
use ptyhub_proto::broker::v1::pty_broker_client::PtyBrokerClient;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tonic::{Request, Status, Streaming};
use uuid::Uuid;

/// How long any single wait in a scenario may take before it fails: generous, because this is a
/// liveness bound on a shared machine, never a speed assertion.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// How often a test looks again for what it waits for.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

pub const SERVICE_TOKEN: &str = "test-service-token-0123456789";
/// session-api's ticket signing key, in these tests held by the test alone, which plays
/// session-api; the broker gets [`TICKET_PUBLIC_KEY`].
pub const TICKET_SIGNING_KEY: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIM5AQNINeDCRJfkja1jlQGDpIZQysEW9cc9AI6VsbsoX
-----END PRIVATE KEY-----
";
/// The public half of [`TICKET_SIGNING_KEY`], as `openssl pkey -pubout` writes it.
pub const TICKET_PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEA6XWI+tkE75ViFTcs3+LlB9O2jglmcKKcn+AO/NzNiQA=
-----END PUBLIC KEY-----
";

/// [`TICKET_SIGNING_KEY`], read.
pub fn ticket_signing_key() -> TicketSigningKey {
    TicketSigningKey::from_pem(TICKET_SIGNING_KEY).expect("the test signing key")
}

/// Generates `mod local { ... }` and `mod docker { ... }` with
/// one test per scenario function `async fn name(backend: Backend) -> anyhow::Result<()>`.
macro_rules! backend_scenarios {
    ($($scenario:ident),* $(,)?) => {
        mod local {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() -> anyhow::Result<()> {
                    crate::support::init_logging();
                    super::$scenario(crate::support::Backend::Local).await
                }
            )*
        }

        mod docker {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() -> anyhow::Result<()> {
                    crate::support::init_logging();
                    // Skips with a reason without an engine; fails under CI=true.
                    if !ptyhub_test_support::require(ptyhub_test_support::Requirement::Docker) {
                        return Ok(());
                    }
                    super::$scenario(crate::support::Backend::Docker).await
                }
            )*
        }
    };
}

/// Which runtime a scenario runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Local,
    Docker,
}

pub fn init_logging() {
    ptyhub_test_support::init_test_logging();
}

/// A broker serving on 127.0.0.1:0, and what a test needs to talk to it.
#[derive(Debug)]
pub struct TestBroker {
    pub backend: Backend,
    pub address: std::net::SocketAddr,
    pub client: PtyBrokerClient<Channel>,
    /// session-api's signing key, which the test plays: the broker holds its public half.
    pub ticket_key: TicketSigningKey,
    stop: CancellationToken,
    server: Option<JoinHandle<Result<(), pty_broker::StartError>>>,
    /// The Docker backend's own container, removed when the broker is dropped.
    container: Option<docker::DockerFixture>,
}

/// Adjusts the broker's configuration before it starts.
pub type Configure = Box<dyn FnOnce(&mut Config) + Send>;

impl TestBroker {
    pub async fn start(backend: Backend) -> anyhow::Result<Self> {
        Self::start_with(backend, Box::new(|_| {})).await
    }

    pub async fn start_with(backend: Backend, configure: Configure) -> anyhow::Result<Self> {
        Self::start_on(backend, configure, ContainerInit::Init).await
    }

    /// A Docker broker whose container has no init process: PID 1 is the container's own
    /// command, which reaps nothing and forwards no signal.
    pub async fn start_docker_without_init(configure: Configure) -> anyhow::Result<Self> {
        Self::start_on(Backend::Docker, configure, ContainerInit::None).await
    }

    async fn start_on(
        backend: Backend,
        configure: Configure,
        init: ContainerInit,
    ) -> anyhow::Result<Self> {
        let ticket_key = ticket_signing_key();
        let mut config = Config::new(
            ServiceCredential::new(SERVICE_TOKEN)?,
            ticket_key.verifying_key(),
        );
        config.kill_grace = Duration::from_millis(500);
        // The scenarios are about streams and processes, and the test image's processes run as
        // root: they opt out of the default that refuses root in containers (the `policy` tests
        // cover that default).
        config.policy.allow_root = backend == Backend::Docker;
        configure(&mut config);
        let mut container = None;
        let (kind, runtime): (BackendKind, Arc<dyn PtyRuntime>) = match backend {
            Backend::Local => (
                BackendKind::Local,
                Arc::new(LocalRuntime::with_default_shell("/bin/sh")),
            ),
            Backend::Docker => {
                let fixture = docker::DockerFixture::start_with(init)
                    .await
                    .context("a docker engine for the docker backend")?;
                container = Some(fixture);
                (
                    BackendKind::Docker,
                    Arc::new(DockerRuntime::new(DockerRuntimeConfig::default())?),
                )
            }
        };
        let broker = Broker::builder(config).runtime(kind, runtime).build();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let stop = CancellationToken::new();
        let server = tokio::spawn(broker.serve(listener, stop.clone().cancelled_owned()));
        let client = PtyBrokerClient::connect(format!("http://{address}"))
            .await
            .context("connect to the broker")?
            .max_decoding_message_size(8 << 20)
            .max_encoding_message_size(8 << 20);
        Ok(Self {
            backend,
            address,
            client,
            ticket_key,
            stop,
            server: Some(server),
            container,
        })
    }

    /// A client of the same broker on a connection of its own.
    pub async fn new_client(&self) -> anyhow::Result<PtyBrokerClient<Channel>> {
        Ok(PtyBrokerClient::connect(format!("http://{}", self.address))
            .await?
            .max_decoding_message_size(8 << 20)
            .max_encoding_message_size(8 << 20))
    }

    pub fn target(&self) -> pb::Target {
        let kind = match self.backend {
            Backend::Local => pb::target::Kind::Local(pb::LocalTarget {}),
            Backend::Docker => pb::target::Kind::Docker(pb::DockerTarget {
                container: self
                    .container
                    .as_ref()
                    .map(|fixture| fixture.name().to_owned())
                    .unwrap_or_default(),
            }),
        };
        pb::Target { kind: Some(kind) }
    }

    /// Spawns `sh -c script` at 80x24.
    pub async fn spawn_sh(&self, script: &str) -> anyhow::Result<pb::SessionInfo> {
        self.spawn(&["sh", "-c", script], 80, 24).await
    }

    pub async fn spawn(
        &self,
        command: &[&str],
        cols: u32,
        rows: u32,
    ) -> anyhow::Result<pb::SessionInfo> {
        let mut request = self.spawn_request(command, "");
        request.size = Some(pb::TerminalSize { cols, rows });
        Ok(self.spawn_as(request).await?)
    }

    /// A spawn of `command` on this broker's target as `user` (empty: the target's default).
    pub fn spawn_request(&self, command: &[&str], user: &str) -> pb::SpawnRequest {
        pb::SpawnRequest {
            session_id: Uuid::new_v4().to_string(),
            target: Some(self.target()),
            command: command.iter().map(|arg| (*arg).to_owned()).collect(),
            env: Default::default(),
            cwd: String::new(),
            user: user.to_owned(),
            size: Some(pb::TerminalSize { cols: 80, rows: 24 }),
            ..Default::default()
        }
    }

    /// Sends a spawn request as is; the error is the call's status.
    pub async fn spawn_as(&self, request: pb::SpawnRequest) -> Result<pb::SessionInfo, Status> {
        let response = self.client.clone().spawn(authorized(request)).await?;
        response
            .into_inner()
            .session
            .ok_or_else(|| Status::internal("spawn answered without a session"))
    }

    pub async fn kill(&self, session_id: &str) -> anyhow::Result<pb::SessionInfo> {
        let request = pb::KillRequest {
            session_id: session_id.to_owned(),
        };
        let response = self.client.clone().kill(authorized(request)).await?;
        response
            .into_inner()
            .session
            .context("kill answered without a session")
    }

    pub async fn reset(&self, session_id: &str) -> anyhow::Result<pb::SessionInfo> {
        let request = pb::ResetRequest {
            session_id: session_id.to_owned(),
        };
        let response = self.client.clone().reset(authorized(request)).await?;
        response
            .into_inner()
            .session
            .context("reset answered without a session")
    }

    pub async fn get(&self, session_id: &str) -> Result<pb::SessionInfo, Status> {
        let request = pb::GetRequest {
            session_id: session_id.to_owned(),
        };
        Ok(self
            .client
            .clone()
            .get(authorized(request))
            .await?
            .into_inner())
    }

    pub fn ticket(&self, session_id: &str, role: TicketRole) -> String {
        let session_id = Uuid::parse_str(session_id).expect("session ids are uuids");
        self.ticket_key.sign(
            session_id,
            role,
            SystemTime::now() + Duration::from_secs(300),
        )
    }

    /// Attaches as `role` with a valid ticket.
    pub async fn attach(
        &self,
        session_id: &str,
        role: pb::Role,
        since: Option<u64>,
    ) -> anyhow::Result<AttachedClient> {
        let ticket_role = match role {
            pb::Role::Controller => TicketRole::Controller,
            _ => TicketRole::Viewer,
        };
        let hello = pb::Hello {
            ticket: self.ticket(session_id, ticket_role),
            session_id: session_id.to_owned(),
            role: role as i32,
            size: None,
            since,
            snapshot: false,
            present_only: false,
        };
        Ok(self.attach_with(hello).await?)
    }

    pub async fn screen(
        &self,
        session_id: &str,
        format: pb::ScreenFormat,
        scrollback: u32,
    ) -> Result<pb::Screen, Status> {
        let request = pb::GetScreenRequest {
            session_id: session_id.to_owned(),
            format: format as i32,
            scrollback,
        };
        Ok(self
            .client
            .clone()
            .get_screen(authorized(request))
            .await?
            .into_inner())
    }

    pub async fn send_keys(
        &self,
        session_id: &str,
        items: Vec<pb::input_item::Item>,
        force: bool,
    ) -> Result<pb::SendInputResponse, Status> {
        let request = pb::SendInputRequest {
            session_id: session_id.to_owned(),
            items: items
                .into_iter()
                .map(|item| pb::InputItem { item: Some(item) })
                .collect(),
            force,
        };
        Ok(self
            .client
            .clone()
            .send_input(authorized(request))
            .await?
            .into_inner())
    }

    pub async fn wait_for_screen(
        &self,
        request: pb::WaitForScreenRequest,
    ) -> Result<pb::WaitForScreenResponse, Status> {
        Ok(self
            .client
            .clone()
            .wait_for_screen(authorized(request))
            .await?
            .into_inner())
    }

    /// Sends `hello` as the first frame; the error is the call's status.
    pub async fn attach_with(&self, hello: pb::Hello) -> Result<AttachedClient, Status> {
        self.attach_with_first_frame(pb::ClientFrame {
            frame: Some(pb::client_frame::Frame::Hello(hello)),
        })
        .await
    }

    pub async fn attach_with_first_frame(
        &self,
        first: pb::ClientFrame,
    ) -> Result<AttachedClient, Status> {
        let (sender, receiver) = mpsc::channel(64);
        sender
            .send(first)
            .await
            .map_err(|_| Status::internal("test channel closed"))?;
        let mut client = self
            .new_client()
            .await
            .map_err(|error| Status::unavailable(error.to_string()))?;
        let inbound = client
            .attach(ReceiverStream::new(receiver))
            .await?
            .into_inner();
        let mut attached = AttachedClient {
            sender,
            inbound,
            pending: Vec::new(),
            connected: None,
            next_offset: None,
        };
        match attached.next_frame().await {
            Ok(pb::server_frame::Frame::Connected(connected)) => {
                attached.next_offset = Some(connected.offset);
                attached.connected = Some(connected);
                Ok(attached)
            }
            Ok(other) => Err(Status::internal(format!(
                "first server frame was not connected: {other:?}"
            ))),
            Err(error) => Err(Status::internal(error.to_string())),
        }
    }

    /// The processes of the session whose leader was `leader_pid`, however the backend lists
    /// them. Empty once the session's process group has ended.
    pub async fn session_processes(&self, leader_pid: u32) -> anyhow::Result<Vec<u32>> {
        match self.backend {
            Backend::Local => Ok(pty_broker::runtime::local::unix_session_members(
                leader_pid,
            )?),
            // Each Docker broker has a container of its own: every process there that was not
            // there at its start belongs to one of this broker's sessions.
            Backend::Docker => {
                let fixture = self
                    .container
                    .as_ref()
                    .context("docker broker without container")?;
                Ok(fixture
                    .session_processes()
                    .await
                    .into_iter()
                    .map(|process| process.pid)
                    .collect())
            }
        }
    }

    /// Which of `pids` (from [`Self::session_processes`]) are still alive.
    pub async fn still_alive(&self, pids: &[u32]) -> anyhow::Result<Vec<u32>> {
        match self.backend {
            Backend::Local => Ok(pids
                .iter()
                .copied()
                .filter(|pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                        stat.rsplit_once(')')
                            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
                    })
                })
                .collect()),
            Backend::Docker => {
                let now = self.session_processes(0).await?;
                Ok(pids
                    .iter()
                    .copied()
                    .filter(|pid| now.contains(pid))
                    .collect())
            }
        }
    }

    /// Waits, within [`PATIENCE`], until none of `pids` is alive.
    pub async fn assert_all_ended(&self, pids: &[u32]) -> anyhow::Result<()> {
        let ended = ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || async {
            match self.still_alive(pids).await {
                Ok(left) if left.is_empty() => Some(Ok(())),
                Ok(_) => None,
                Err(error) => Some(Err(error)),
            }
        })
        .await;
        match ended {
            Some(result) => result,
            None => bail!(
                "processes of the session are still running: {:?}",
                self.still_alive(pids).await?
            ),
        }
    }

    /// Waits, within [`PATIENCE`], until the running session has at least `count` processes,
    /// and returns them.
    pub async fn wait_for_processes(
        &self,
        leader_pid: u32,
        count: usize,
    ) -> anyhow::Result<Vec<u32>> {
        let found = ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || async {
            match self.session_processes(leader_pid).await {
                Ok(processes) if processes.len() >= count => Some(Ok(processes)),
                Ok(_) => None,
                Err(error) => Some(Err(error)),
            }
        })
        .await;
        match found {
            Some(result) => result,
            None => bail!(
                "the session has only {:?}, expected {count} processes",
                self.session_processes(leader_pid).await?
            ),
        }
    }

    /// The text of the file at `path` where this broker's sessions run: this host for the
    /// local backend, the broker's own container for Docker.
    pub async fn read_session_file(&self, path: &str) -> anyhow::Result<String> {
        match self.backend {
            Backend::Local => std::fs::read_to_string(path).with_context(|| format!("read {path}")),
            Backend::Docker => {
                let fixture = self
                    .container
                    .as_ref()
                    .context("docker broker without container")?;
                Ok(fixture.exec_output(&["cat", path]).await)
            }
        }
    }

    /// Stops the broker the way a signal would and waits for it, keeping the harness (and the
    /// container) for checks afterwards.
    pub async fn stop_and_keep(mut self) -> anyhow::Result<Self> {
        self.stop.cancel();
        if let Some(server) = self.server.take() {
            server.await??;
        }
        Ok(self)
    }

    /// Stops the broker the way a signal would and waits for it.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.stop.cancel();
        if let Some(server) = self.server.take() {
            server.await??;
        }
        Ok(())
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Adds the service credential to an internal call.
pub fn authorized<T>(message: T) -> Request<T> {
    let mut request = Request::new(message);
    ServiceCredential::new(SERVICE_TOKEN)
        .expect("the test credential is valid")
        .bearer_auth()
        .authorize(&mut request);
    request
}

/// One attached stream.
#[derive(Debug)]
pub struct AttachedClient {
    pub sender: mpsc::Sender<pb::ClientFrame>,
    pub inbound: Streaming<pb::ServerFrame>,
    /// Frames read ahead while looking for something else.
    pending: Vec<pb::server_frame::Frame>,
    pub connected: Option<pb::Connected>,
    /// The offset the next output frame must have, when known.
    next_offset: Option<u64>,
}

impl AttachedClient {
    pub fn connected(&self) -> &pb::Connected {
        self.connected
            .as_ref()
            .expect("attached clients are connected")
    }

    pub async fn send(&self, frame: pb::client_frame::Frame) -> anyhow::Result<()> {
        self.sender
            .send(pb::ClientFrame { frame: Some(frame) })
            .await
            .context("the attach stream is closed")
    }

    pub async fn send_input(&self, data: impl Into<Bytes>) -> anyhow::Result<()> {
        self.send(pb::client_frame::Frame::Input(pb::Input {
            data: data.into(),
            input_id: None,
        }))
        .await
    }

    pub async fn send_resize(&self, cols: u32, rows: u32) -> anyhow::Result<()> {
        self.send(pb::client_frame::Frame::Resize(pb::TerminalSize {
            cols,
            rows,
        }))
        .await
    }

    /// The next server frame, within [`PATIENCE`]. Fails when the stream ends.
    pub async fn next_frame(&mut self) -> anyhow::Result<pb::server_frame::Frame> {
        if !self.pending.is_empty() {
            return Ok(self.pending.remove(0));
        }
        match self.next_message().await? {
            Some(frame) => Ok(frame),
            None => bail!("the attach stream ended"),
        }
    }

    /// The next server frame, or `None` when the stream ended cleanly.
    pub async fn next_message(&mut self) -> anyhow::Result<Option<pb::server_frame::Frame>> {
        if !self.pending.is_empty() {
            return Ok(Some(self.pending.remove(0)));
        }
        let message = tokio::time::timeout(PATIENCE, self.inbound.message())
            .await
            .context("no server frame in time")??;
        let frame = message.map(|frame| frame.frame.expect("server frames are never empty"));
        match &frame {
            Some(pb::server_frame::Frame::Output(chunk)) => self.check_offset(chunk)?,
            Some(pb::server_frame::Frame::Gap(gap)) => self.next_offset = Some(gap.offset),
            Some(pb::server_frame::Frame::Snapshot(snapshot)) => {
                self.next_offset = Some(snapshot.offset);
            }
            Some(pb::server_frame::Frame::Connected(connected)) => {
                self.next_offset = Some(connected.offset);
            }
            _ => {}
        }
        Ok(frame)
    }

    /// Collects output until it contains `needle`; returns all output read and every non-output
    /// frame seen on the way is kept for later.
    pub async fn read_until(&mut self, needle: &[u8]) -> anyhow::Result<Vec<u8>> {
        let mut output = Vec::new();
        let mut others = Vec::new();
        let mut searched = 0;
        let found = loop {
            if output[searched..]
                .windows(needle.len())
                .any(|window| window == needle)
            {
                break true;
            }
            searched = output.len().saturating_sub(needle.len());
            match self.next_message().await {
                Ok(Some(pb::server_frame::Frame::Output(chunk))) => {
                    output.extend_from_slice(&chunk.data)
                }
                Ok(Some(other)) => others.push(other),
                Ok(None) => break false,
                Err(error) => {
                    return Err(error.context(format!(
                        "waiting for {:?}; output so far: {:?}",
                        String::from_utf8_lossy(needle),
                        String::from_utf8_lossy(&output)
                    )));
                }
            }
        };
        self.pending.splice(0..0, others);
        if !found {
            bail!(
                "stream ended before {:?} arrived; output: {:?}",
                String::from_utf8_lossy(needle),
                String::from_utf8_lossy(&output)
            );
        }
        Ok(output)
    }

    /// Checks that `chunk` follows the output before it, without a hole or an overlap.
    fn check_offset(&mut self, chunk: &pb::Output) -> anyhow::Result<()> {
        if let Some(expected) = self.next_offset
            && chunk.offset != expected
        {
            bail!(
                "output at offset {} after output up to {expected}",
                chunk.offset
            );
        }
        self.next_offset = Some(chunk.offset + chunk.data.len() as u64);
        Ok(())
    }

    /// Reads frames, collecting output, until one matches `wanted`; returns the output and it.
    pub async fn read_until_frame(
        &mut self,
        wanted: impl Fn(&pb::server_frame::Frame) -> bool,
    ) -> anyhow::Result<(Vec<u8>, pb::server_frame::Frame)> {
        let mut output = Vec::new();
        loop {
            let frame = self.next_frame().await.with_context(|| {
                format!("output so far: {:?}", String::from_utf8_lossy(&output))
            })?;
            if wanted(&frame) {
                return Ok((output, frame));
            }
            if let pb::server_frame::Frame::Output(chunk) = frame {
                output.extend_from_slice(&chunk.data);
            }
        }
    }

    /// Output (with its offsets checked for continuity) until the process exits.
    pub async fn read_to_exit(&mut self) -> anyhow::Result<(Vec<u8>, pb::ExitStatus)> {
        let (output, frame) = self
            .read_until_frame(|frame| matches!(frame, pb::server_frame::Frame::Exit(_)))
            .await?;
        let pb::server_frame::Frame::Exit(exit) = frame else {
            unreachable!()
        };
        Ok((output, exit))
    }
}
