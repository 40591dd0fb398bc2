//! The Docker runtime: a session is a `docker exec` with a TTY in a running container, driven
//! through bollard, and behaving like the local runtime from a client's point of view.
//!
//! # Spawning
//!
//! `create_exec` with a TTY and stdin, the session's argv (`/bin/sh` when empty), env
//! (`TERM=xterm-256color` unless given, plus the session marker `PTYHUB_SESSION_ID=<uuid>`),
//! working directory and user; then the exec is started over a connection of the broker's own
//! (see `attach`): bollard's stream decoder would take raw TTY output that begins with byte 0, 1
//! or 2 for a multiplexing header, so the hijacked connection is read as it is, byte for byte.
//!
//! With a TTY the engine watches stdin for a detach sequence (Ctrl-P Ctrl-Q by default, which
//! binary input contains) and ends the attachment on it; every exec gets its own 33-key sequence
//! instead (Ctrl-] and the session id), which no one types by accident.
//!
//! The PTY has the requested size from the process's first instruction on. Engines with API 1.42
//! or later take `ConsoleSize` in the start request and create the TTY at that size. Older engines
//! (Docker 20.10 speaks 1.41) ignore it, so there the argv is wrapped as
//! `/bin/sh -c 'stty cols C rows R 2>/dev/null; exec "$0" "$@"' argv...`: the size is set before
//! the program is exec'd in the same process. A container without `stty` still gets a resize just
//! after the start. The wrapper needs `/bin/sh` in the container on those old engines.
//!
//! # Exit
//!
//! Docker has no wait call for an exec: the exit status is learnt from `inspect_exec`, every two
//! seconds while the output flows (the leader may exit while a background job holds the terminal)
//! and quickly once the output has ended, until the engine reports the exec stopped (for at most
//! [`DockerRuntimeConfig::exit_status_timeout`] after the end of the output). Docker
//! reports a process killed by signal N as 128+N; the runtime reports that as "killed by N", as
//! the local runtime does for a real signal. An exec whose container was removed is reported as
//! killed by SIGKILL.
//!
//! # Ending a session without an exec-kill API
//!
//! A TTY exec leads its own Unix session inside the container. The session's processes are the
//! members of that Unix session plus every process that carries the session's marker in its
//! environment (which catches children that called `setsid`). They are looked up afresh for every
//! signal and every liveness check, in one of two ways, chosen per session at spawn:
//!
//! - **Host view.** When the broker shares the PID namespace of the engine (it runs on the host,
//!   or in a container with `--pid=host`), the exec's pid from `inspect_exec` is visible in the
//!   broker's `/proc`. The runtime uses this view only when it can prove it: `/proc/<pid>` exists,
//!   is in the same PID namespace as the container's init process (`/proc/<pid>/ns/pid`), leads
//!   its Unix session, and has the session's marker in its environment. Scans are then limited to
//!   that namespace and signals are sent directly with `kill(2)`.
//! - **Container view.** Otherwise (the broker runs in a container of its own and reaches the
//!   engine through its socket), every lookup is a short helper exec, `/bin/sh` as root in the
//!   container, that reads the container's `/proc` and sends the signal from inside. The leader
//!   is identified once at spawn by a helper running as the session's user (so it may read the
//!   environments): the process with the marker whose parent is outside the container (pid 0) and
//!   that leads its Unix session. This view needs `/bin/sh` and `cat` in the container.
//!
//! [`ProcessView::Container`] forces the second way (tests use it to cover both on one machine).
//! Either way a leader is identified by pid and start time: the Unix session is only followed
//! while the leader's pid is unused or still names the leader, and a pid cannot be reused while
//! any process still has it as its session id, so a reused pid is never signalled.
//!
//! # Surviving a broker crash
//!
//! With a data directory, each session has a small record in `<data_dir>/docker-sessions/`
//! (container, exec, boot id, leader identity), written before the exec starts and removed when
//! the process handle is dropped. [`reap_orphans_from_state`] ends whatever those records still
//! name when a killed broker starts again.
//!
//! # Errors
//!
//! An unreachable engine (socket missing, refused, timed out) is [`RuntimeError::Unavailable`];
//! an unknown container [`RuntimeError::TargetNotFound`]; a stopped or paused one
//! [`RuntimeError::TargetNotRunning`]. A command that does not exist in the container starts
//! anyway as far as Docker is concerned: the engine's (or the shell's) error text arrives as
//! output, the output ends, and `wait` reports 126 or 127. A container that stops under live
//! sessions ends their output and `wait` reports a non-zero status.
//!
//! The endpoint is [`DockerRuntimeConfig::endpoint`], else `DOCKER_HOST`, else
//! `unix:///var/run/docker.sock`; `unix://` and plain `tcp://` are supported.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use bollard::Docker;
use bollard::exec::ResizeExecOptions;
use bollard::models::ExecConfig;
use tokio::sync::OnceCell;

use super::{
    GroupSignal, PtyProcess, PtyRuntime, RuntimeError, SpawnSpec, SpawnedPty, Target, procfs,
};
use crate::domain::{ExitStatus, TerminalSize};

mod attach;
mod endpoint;
mod group;
mod state;

pub use endpoint::{DEFAULT_DOCKER_SOCKET, Endpoint};
pub use group::SESSION_MARKER_VARIABLE;
pub use state::{ReapReport, STATE_DIRECTORY, reap_orphans_from_state};

use group::{GroupView, Leader, SessionGroup};
use state::{RecordGuard, RecordedLeader, RecordedView, SessionRecord, StateDirectory};

/// How the Docker runtime reaches the engine and finds a session's processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerRuntimeConfig {
    /// `unix:///path` or `tcp://host:port`. `None`: `DOCKER_HOST`, else the local socket.
    pub endpoint: Option<String>,
    /// How a session's processes are found and signalled.
    pub process_view: ProcessView,
    /// How long `wait` polls the engine for the exit status after the output ended.
    pub exit_status_timeout: Duration,
    /// Timeout of each engine request (streams excluded).
    pub request_timeout: Duration,
}

impl DockerRuntimeConfig {
    /// The defaults, talking to `endpoint` (`None`: `DOCKER_HOST`, else the local socket).
    pub fn with_endpoint(endpoint: Option<String>) -> Self {
        Self {
            endpoint,
            ..Self::default()
        }
    }
}

impl Default for DockerRuntimeConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            process_view: ProcessView::Auto,
            exit_status_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// Which way the runtime looks for a session's processes (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProcessView {
    /// The host's `/proc` when the broker can prove it sees the exec there, else the container's.
    #[default]
    Auto,
    /// Always a helper exec inside the container.
    Container,
}

/// What can go wrong talking to the engine or reading the host's processes.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    #[error("invalid docker endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint { endpoint: String, reason: String },
    #[error("docker engine at {endpoint} is unreachable: {source}")]
    EngineUnreachable {
        endpoint: String,
        #[source]
        source: std::io::Error,
    },
    #[error("docker engine is unreachable: {0}")]
    Connection(String),
    #[error("docker engine answered {status}: {message}")]
    Engine { status: u16, message: String },
    #[error("docker engine: {0}")]
    Client(String),
    #[error("{context}: {source}")]
    Stream {
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("unexpected answer from the docker engine: {0}")]
    Protocol(String),
    #[error("cannot look at processes in container {container}: {message}")]
    Helper { container: String, message: String },
    #[error("{context}: {source}")]
    Host {
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("docker session state in {path}: {source}")]
    State {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Internal(String),
}

impl From<bollard::errors::Error> for DockerError {
    fn from(error: bollard::errors::Error) -> Self {
        use bollard::errors::Error as Bollard;
        match error {
            Bollard::DockerResponseServerError {
                status_code,
                message,
            } => DockerError::Engine {
                status: status_code,
                message,
            },
            Bollard::SocketNotFoundError(path) => {
                DockerError::Connection(format!("no socket at {path}"))
            }
            error @ (Bollard::IOError { .. }
            | Bollard::HyperLegacyError { .. }
            | Bollard::RequestTimeoutError) => DockerError::Connection(error.to_string()),
            error => DockerError::Client(error.to_string()),
        }
    }
}

impl From<DockerError> for RuntimeError {
    fn from(error: DockerError) -> Self {
        match error {
            DockerError::InvalidEndpoint { .. }
            | DockerError::EngineUnreachable { .. }
            | DockerError::Connection(_) => RuntimeError::Unavailable(error.to_string()),
            DockerError::Stream { context, source } | DockerError::Host { context, source } => {
                RuntimeError::Io { context, source }
            }
            error => RuntimeError::Other(error.to_string()),
        }
    }
}

/// The API version spoken with the engine after negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ApiVersion {
    major: usize,
    minor: usize,
}

impl ApiVersion {
    /// Engines from 1.42 on create an exec's TTY at the `ConsoleSize` given to start.
    fn applies_console_size_at_start(self) -> bool {
        self >= ApiVersion {
            major: 1,
            minor: 42,
        }
    }
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A connected engine: the bollard client, where it is, and the negotiated API version.
#[derive(Debug, Clone)]
pub(crate) struct Engine {
    docker: Docker,
    endpoint: Endpoint,
    api: ApiVersion,
}

/// What the runtime needs to know about a container.
#[derive(Debug, Clone)]
struct ContainerInfo {
    id: String,
    running: bool,
    /// The container's init process as the engine sees it.
    init_pid: Option<u32>,
    started_at: Option<String>,
}

impl Engine {
    async fn connect(config: &DockerRuntimeConfig) -> Result<Self, DockerError> {
        let endpoint = Endpoint::resolve(config.endpoint.as_deref())?;
        let timeout = config.request_timeout.as_secs().max(1);
        let docker = match &endpoint {
            Endpoint::Unix(path) => {
                if !path.exists() {
                    return Err(DockerError::EngineUnreachable {
                        endpoint: endpoint.to_string(),
                        source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such socket"),
                    });
                }
                Docker::connect_with_unix(
                    &path.to_string_lossy(),
                    timeout,
                    bollard::API_DEFAULT_VERSION,
                )
            }
            Endpoint::Tcp(address) => {
                Docker::connect_with_http(address, timeout, bollard::API_DEFAULT_VERSION)
            }
        }
        .map_err(|error| DockerError::Connection(format!("{endpoint}: {error}")))?;
        let docker =
            docker
                .negotiate_version()
                .await
                .map_err(|error| match DockerError::from(error) {
                    DockerError::Connection(message) => {
                        DockerError::Connection(format!("{endpoint}: {message}"))
                    }
                    other => other,
                })?;
        let version = docker.client_version();
        let api = ApiVersion {
            major: version.major_version,
            minor: version.minor_version,
        };
        tracing::debug!(%endpoint, %api, "connected to the docker engine");
        Ok(Self {
            docker,
            endpoint,
            api,
        })
    }

    async fn inspect_container(&self, container: &str) -> Result<ContainerInfo, DockerError> {
        let inspected = self.docker.inspect_container(container, None).await?;
        let state = inspected.state.unwrap_or_default();
        Ok(ContainerInfo {
            id: inspected.id.unwrap_or_else(|| container.to_owned()),
            running: state.running == Some(true) && state.paused != Some(true),
            init_pid: state
                .pid
                .and_then(|pid| u32::try_from(pid).ok())
                .filter(|pid| *pid > 0),
            started_at: state.started_at,
        })
    }
}

/// Spawns sessions as TTY execs in containers of one Docker engine.
#[derive(Debug)]
pub struct DockerRuntime {
    config: DockerRuntimeConfig,
    state: Option<StateDirectory>,
    engine: OnceCell<Engine>,
}

impl DockerRuntime {
    /// A runtime for `config`. The endpoint is checked now; the engine is first contacted at the
    /// first spawn, so a broker starts even while its engine is down.
    pub fn new(config: DockerRuntimeConfig) -> Result<Self, DockerError> {
        Endpoint::resolve(config.endpoint.as_deref())?;
        Ok(Self {
            config,
            state: None,
            engine: OnceCell::new(),
        })
    }

    /// Keeps crash-recovery records of live sessions under `data_dir` (see
    /// [`reap_orphans_from_state`]).
    pub fn with_data_dir(mut self, data_dir: &Path) -> Self {
        self.state = Some(StateDirectory::under(data_dir));
        self
    }

    async fn engine(&self) -> Result<&Engine, RuntimeError> {
        self.engine
            .get_or_try_init(|| Engine::connect(&self.config))
            .await
            .map_err(RuntimeError::from)
    }

    /// Finds where the session's processes can be seen, and its leader there.
    async fn identify_group(
        &self,
        engine: &Engine,
        container: &ContainerInfo,
        exec_id: &str,
        marker: &str,
        user: Option<&str>,
    ) -> (Option<u32>, SessionGroup) {
        let host_pid = exec_host_pid(engine, exec_id).await;
        let mut group = SessionGroup {
            container_id: container.id.clone(),
            marker: marker.to_owned(),
            view: GroupView::Container,
            leader: None,
        };
        if self.config.process_view == ProcessView::Auto
            && let Some(pid) = host_pid
            && let Some(pid_namespace) = container.init_pid.and_then(procfs::pid_namespace)
            && let Some(leader) =
                identify_host_leader(engine, exec_id, pid, &pid_namespace, marker).await
        {
            group.view = GroupView::Host { pid_namespace };
            group.leader = Some(leader);
            return (host_pid, group);
        }
        group.leader =
            identify_container_leader(engine, &container.id, exec_id, user, marker).await;
        (host_pid, group)
    }
}

#[async_trait]
impl PtyRuntime for DockerRuntime {
    async fn spawn(&self, spec: &SpawnSpec) -> Result<SpawnedPty, RuntimeError> {
        let Target::Docker { container } = &spec.target else {
            return Err(RuntimeError::Unavailable(
                "the docker runtime only runs docker targets".to_owned(),
            ));
        };
        let engine = self.engine().await?;
        let info = engine
            .inspect_container(container)
            .await
            .map_err(|error| container_error(container, error))?;
        if !info.running {
            return Err(RuntimeError::TargetNotRunning(format!(
                "container {container} is not running"
            )));
        }

        let marker = format!("{SESSION_MARKER_VARIABLE}={}", spec.session_id);
        let argv = if spec.command.is_empty() {
            vec!["/bin/sh".to_owned()]
        } else {
            spec.command.clone()
        };
        let size_at_start = engine.api.applies_console_size_at_start();
        let command = if size_at_start {
            argv
        } else {
            size_setting_wrapper(spec.size, argv)
        };
        let exec_config = ExecConfig {
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(true),
            console_size: Some(vec![
                usize::from(spec.size.rows()),
                usize::from(spec.size.cols()),
            ]),
            detach_keys: Some(detach_keys(spec.session_id)),
            env: Some(exec_environment(&spec.env, &marker)),
            cmd: Some(command),
            user: spec.user.clone(),
            working_dir: spec.cwd.clone(),
            ..Default::default()
        };
        let exec = engine
            .docker
            .create_exec(&info.id, exec_config)
            .await
            .map_err(|error| container_error(container, error.into()))?;

        // Written before the exec starts, so that a broker killed from here on leaves a trace.
        let mut record = SessionRecord {
            session_id: spec.session_id,
            container_id: info.id.clone(),
            container_started_at: info.started_at.clone(),
            exec_id: exec.id.clone(),
            boot_id: procfs::boot_id(),
            leader: None,
        };
        let record_guard = match &self.state {
            Some(directory) => {
                directory.write(&record)?;
                Some(RecordGuard {
                    directory: directory.clone(),
                    session_id: spec.session_id,
                })
            }
            None => None,
        };

        let attached =
            attach::start_exec_attached(&engine.endpoint, engine.api, &exec.id, spec.size)
                .await
                .map_err(|error| match error {
                    DockerError::Engine { .. } => container_error(container, error),
                    other => RuntimeError::from(other),
                })?;
        if !size_at_start {
            // Covers containers without `stty`; a resize to the same size changes nothing.
            let _ = engine
                .docker
                .resize_exec(&exec.id, resize_options(spec.size))
                .await;
        }

        let (host_pid, group) = self
            .identify_group(engine, &info, &exec.id, &marker, spec.user.as_deref())
            .await;
        tracing::debug!(
            session_id = %spec.session_id,
            container = %container,
            exec_id = %exec.id,
            view = ?group.view,
            leader = ?group.leader,
            "started docker exec"
        );
        if let (Some(directory), Some(leader)) = (&self.state, group.leader) {
            record.leader = Some(RecordedLeader {
                view: match group.view {
                    GroupView::Host { .. } => RecordedView::Host,
                    GroupView::Container => RecordedView::Container,
                },
                pid: leader.pid,
                start_time: leader.start_time,
            });
            directory.write(&record)?;
        }

        let (ended, output_ended) = tokio::sync::watch::channel(false);
        Ok(SpawnedPty {
            output: Box::pin(SignalsEnd {
                inner: attached.output,
                ended,
            }),
            input: Box::pin(attached.input),
            process: Box::new(DockerProcess {
                engine: engine.clone(),
                container: container.clone(),
                exec_id: exec.id,
                host_pid,
                group,
                exit_status_timeout: self.config.exit_status_timeout,
                exit_status: OnceCell::new(),
                output_ended,
                _record: record_guard,
            }),
        })
    }
}

/// How long spawn waits for the engine to report the exec's pid, and for the leader to show.
const IDENTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// The exec's pid as the engine reports it, once it started; `None` if it ended first.
async fn exec_host_pid(engine: &Engine, exec_id: &str) -> Option<u32> {
    let deadline = tokio::time::Instant::now() + IDENTIFY_TIMEOUT;
    loop {
        let inspected = engine.docker.inspect_exec(exec_id).await.ok()?;
        if let Some(pid) = inspected
            .pid
            .and_then(|pid| u32::try_from(pid).ok())
            .filter(|pid| *pid > 0)
        {
            return Some(pid);
        }
        if inspected.running == Some(false) && inspected.exit_code.is_some() {
            return None;
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Proves that host pid `pid` is this session's leader: in the container's PID namespace, leading
/// its Unix session, with the marker in its environment (once the runtime's own setup has
/// exec'd the command). `None` when the broker cannot see it so.
async fn identify_host_leader(
    engine: &Engine,
    exec_id: &str,
    pid: u32,
    pid_namespace: &str,
    marker: &str,
) -> Option<Leader> {
    let deadline = tokio::time::Instant::now() + IDENTIFY_TIMEOUT;
    loop {
        let stat = procfs::ProcStat::read(pid)?;
        if procfs::pid_namespace(pid).as_deref() != Some(pid_namespace) {
            return None;
        }
        if stat.session == pid && procfs::environment_has(pid, marker) {
            return Some(Leader {
                pid,
                start_time: stat.start_time,
            });
        }
        let running = engine
            .docker
            .inspect_exec(exec_id)
            .await
            .ok()
            .and_then(|inspected| inspected.running);
        if running == Some(false) || tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Finds the session's leader with a helper exec inside the container.
async fn identify_container_leader(
    engine: &Engine,
    container_id: &str,
    exec_id: &str,
    user: Option<&str>,
    marker: &str,
) -> Option<Leader> {
    let deadline = tokio::time::Instant::now() + IDENTIFY_TIMEOUT;
    loop {
        match group::find_leader_in_container(&engine.docker, container_id, user, marker).await {
            Ok(Some(leader)) => return Some(leader),
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(container = %container_id, %error, "cannot identify the session leader in the container");
                return None;
            }
        }
        let running = engine
            .docker
            .inspect_exec(exec_id)
            .await
            .ok()
            .and_then(|inspected| inspected.running);
        if running == Some(false) || tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The exec's environment: the session's env, `TERM` unless given, and the session marker (which
/// a session's env cannot override).
fn exec_environment(env: &[(String, String)], marker: &str) -> Vec<String> {
    let mut environment: Vec<String> = env
        .iter()
        .filter(|(name, _)| name != SESSION_MARKER_VARIABLE)
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    if !env.iter().any(|(name, _)| name == "TERM") {
        environment.insert(0, "TERM=xterm-256color".to_owned());
    }
    environment.push(marker.to_owned());
    environment
}

/// A detach sequence no one will type: with a TTY the engine watches stdin for one (by default
/// Ctrl-P Ctrl-Q, which binary input or an editor's key binding could contain) and ends the
/// attachment when it sees it. This one is Ctrl-] followed by the session id's 32 hex digits. The
/// engine holds back a byte that could begin the sequence until the next one arrives, so only a
/// write that ends with Ctrl-] is delayed, until the next keystroke.
fn detach_keys(session_id: uuid::Uuid) -> String {
    let mut keys = vec!["ctrl-]".to_owned()];
    keys.extend(session_id.simple().to_string().chars().map(String::from));
    keys.join(",")
}

/// Wraps `argv` so that the TTY has `size` before the program runs, for engines that cannot
/// create it at that size. `exec` keeps the pid, so the program stays the session leader.
fn size_setting_wrapper(size: TerminalSize, argv: Vec<String>) -> Vec<String> {
    let script = format!(
        "stty cols {} rows {} 2>/dev/null; exec \"$0\" \"$@\"",
        size.cols(),
        size.rows()
    );
    let mut command = vec!["/bin/sh".to_owned(), "-c".to_owned(), script];
    command.extend(argv);
    command
}

fn resize_options(size: TerminalSize) -> ResizeExecOptions {
    ResizeExecOptions {
        height: size.rows(),
        width: size.cols(),
    }
}

/// Maps an engine error about `container` to what the client should hear.
fn container_error(container: &str, error: DockerError) -> RuntimeError {
    match error {
        DockerError::Engine { status: 404, .. } => {
            RuntimeError::TargetNotFound(format!("container {container} not found"))
        }
        DockerError::Engine {
            status: 409,
            message,
        } => RuntimeError::TargetNotRunning(format!(
            "container {container} is not running: {message}"
        )),
        DockerError::Engine { status, message } if (400..500).contains(&status) => {
            RuntimeError::SpawnFailed(format!(
                "cannot start a session in container {container}: {message}"
            ))
        }
        other => RuntimeError::from(other),
    }
}

/// Docker reports a process killed by signal N as 128 + N, as shells do.
fn exit_status_from_code(code: i64) -> ExitStatus {
    match i32::try_from(code) {
        Ok(code) if (129..=128 + 64).contains(&code) => ExitStatus::signalled(code - 128),
        Ok(code) => ExitStatus::exited(code),
        Err(_) => ExitStatus::exited(-1),
    }
}

/// One exec in a container.
#[derive(Debug)]
struct DockerProcess {
    engine: Engine,
    /// The container as the session named it, for messages.
    container: String,
    exec_id: String,
    /// The exec's pid as the engine reports it.
    host_pid: Option<u32>,
    group: SessionGroup,
    exit_status_timeout: Duration,
    exit_status: OnceCell<ExitStatus>,
    /// Turns true when the output stream has ended.
    output_ended: tokio::sync::watch::Receiver<bool>,
    _record: Option<RecordGuard>,
}

/// How often a running exec is asked whether it has exited while its output still flows (its
/// leader can exit while a background job keeps the terminal open).
const RUNNING_POLL_INTERVAL: Duration = Duration::from_secs(2);

impl DockerProcess {
    /// The exit status, once the engine reports the exec stopped. Docker has no wait call for an
    /// exec: while the output flows the engine is asked every [`RUNNING_POLL_INTERVAL`]; once
    /// the output ended, the status follows within moments, so it is asked at a quickening pace
    /// for at most `exit_status_timeout`.
    async fn poll_exit_status(&self) -> Result<ExitStatus, RuntimeError> {
        let mut output_ended = self.output_ended.clone();
        loop {
            if let Some(status) = self.exit_status_now().await? {
                return Ok(status);
            }
            tokio::select! {
                // A dropped sender means the output reader is gone: as good as ended.
                _ = output_ended.wait_for(|ended| *ended) => break,
                () = tokio::time::sleep(RUNNING_POLL_INTERVAL) => {}
            }
        }
        let deadline = tokio::time::Instant::now() + self.exit_status_timeout;
        let mut interval = Duration::from_millis(5);
        loop {
            if let Some(status) = self.exit_status_now().await? {
                return Ok(status);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(RuntimeError::Other(format!(
                    "exec in container {} still runs {:?} after its output ended",
                    self.container, self.exit_status_timeout
                )));
            }
            tokio::time::sleep(interval).await;
            interval = (interval * 2).min(Duration::from_millis(200));
        }
    }

    /// One look at the exec: its exit status if it has stopped.
    async fn exit_status_now(&self) -> Result<Option<ExitStatus>, RuntimeError> {
        match self.engine.docker.inspect_exec(&self.exec_id).await {
            Ok(inspected) if inspected.running != Some(true) => Ok(Some(exit_status_from_code(
                inspected.exit_code.unwrap_or(-1),
            ))),
            Ok(_) => Ok(None),
            // The container was removed, and every process in it with it.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {
                tracing::warn!(container = %self.container, exec_id = %self.exec_id, "exec vanished with its container");
                Ok(Some(ExitStatus::signalled(libc::SIGKILL)))
            }
            Err(error) => Err(DockerError::from(error).into()),
        }
    }
}

/// The exec's output stream, which says when it has ended (end of stream or an error), since
/// the end of the output is when the exec's exit status is due.
struct SignalsEnd<R> {
    inner: R,
    ended: tokio::sync::watch::Sender<bool>,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for SignalsEnd<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let filled = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        match &polled {
            std::task::Poll::Ready(Ok(())) if buf.filled().len() == filled => {
                self.ended.send_replace(true);
            }
            std::task::Poll::Ready(Err(_)) => {
                self.ended.send_replace(true);
            }
            _ => {}
        }
        polled
    }
}

#[async_trait]
impl PtyProcess for DockerProcess {
    fn pid(&self) -> Option<u32> {
        if self.exit_status.initialized() {
            None
        } else {
            self.host_pid
        }
    }

    async fn resize(&self, size: TerminalSize) -> Result<(), RuntimeError> {
        let Err(error) = self
            .engine
            .docker
            .resize_exec(&self.exec_id, resize_options(size))
            .await
        else {
            return Ok(());
        };
        // A resize that races with the exit is not a failure.
        let exited = self.exit_status.initialized()
            || match self.engine.docker.inspect_exec(&self.exec_id).await {
                Ok(inspected) => inspected.running != Some(true),
                Err(_) => true,
            };
        if exited {
            return Ok(());
        }
        Err(DockerError::from(error).into())
    }

    async fn signal_group(&self, signal: GroupSignal) -> Result<(), RuntimeError> {
        self.group
            .signal(&self.engine.docker, signal)
            .await
            .map_err(RuntimeError::from)
    }

    async fn group_alive(&self) -> Result<bool, RuntimeError> {
        Ok(!self
            .group
            .members(&self.engine.docker)
            .await
            .map_err(RuntimeError::from)?
            .is_empty())
    }

    async fn wait(&self) -> Result<ExitStatus, RuntimeError> {
        self.exit_status
            .get_or_try_init(|| self.poll_exit_status())
            .await
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_sets_term_unless_given_and_always_carries_the_marker() {
        let marker = "PTYHUB_SESSION_ID=0";
        assert_eq!(
            exec_environment(&[("A".into(), "1".into())], marker),
            vec!["TERM=xterm-256color", "A=1", marker]
        );
        assert_eq!(
            exec_environment(
                &[
                    ("TERM".into(), "dumb".into()),
                    (SESSION_MARKER_VARIABLE.into(), "forged".into())
                ],
                marker
            ),
            vec!["TERM=dumb", marker]
        );
    }

    #[test]
    fn signal_exit_codes_map_like_the_local_runtime() {
        assert_eq!(exit_status_from_code(0), ExitStatus::exited(0));
        assert_eq!(exit_status_from_code(127), ExitStatus::exited(127));
        assert_eq!(exit_status_from_code(130), ExitStatus::signalled(2));
        assert_eq!(exit_status_from_code(137), ExitStatus::signalled(9));
        assert_eq!(exit_status_from_code(255), ExitStatus::exited(255));
        assert_eq!(exit_status_from_code(i64::MAX), ExitStatus::exited(-1));
    }

    #[test]
    fn api_versions_compare_numerically() {
        let version = |major, minor| ApiVersion { major, minor };
        assert!(!version(1, 41).applies_console_size_at_start());
        assert!(version(1, 42).applies_console_size_at_start());
        assert!(version(1, 100).applies_console_size_at_start());
        assert_eq!(version(1, 41).to_string(), "1.41");
    }

    #[test]
    fn detach_keys_start_with_a_rare_control_key_and_name_the_session() {
        let session_id = uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        let keys = detach_keys(session_id);
        assert!(keys.starts_with("ctrl-],0,1,2,3,4,5,6,7,8,9,a,b,c,d,e,f,0,1"));
        assert_eq!(keys.split(',').count(), 33);
    }

    #[test]
    fn size_wrapper_keeps_argv_intact() {
        let size = TerminalSize::new(132, 43).unwrap();
        let command =
            size_setting_wrapper(size, vec!["printf".into(), "%s\n".into(), "a b".into()]);
        assert_eq!(&command[..2], ["/bin/sh", "-c"]);
        assert!(command[2].starts_with("stty cols 132 rows 43 "));
        assert_eq!(&command[3..], ["printf", "%s\n", "a b"]);
    }
}
