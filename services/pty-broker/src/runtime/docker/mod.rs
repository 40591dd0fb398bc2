//! The Docker runtime: a session is a `docker exec` with a TTY in a running container, driven
//! through bollard, and behaving like the local runtime from a client's point of view.
//!
//! # Spawning
//!
//! First the broker's policy (`admit`, `crate::policy`): the container must be one
//! `--allow-containers` names, and the exec's user (the session's, else the container's
//! configured `User`, else root) must not be root unless `--allow-root`, nor a `--deny-user`.
//! User names are looked up in the container's `/etc/passwd`, read through the engine's archive
//! call, so a second name for uid 0 is root too.
//!
//! Then `create_exec` with a TTY and stdin, the session's argv (`/bin/sh` when empty), env
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

mod attach;
mod endpoint;
mod engine;
mod error;
mod group;
mod handoff;
mod identify;
mod process;
mod state;

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bollard::exec::ResizeExecOptions;
use bollard::models::ExecConfig;
use tokio::sync::OnceCell;

use super::{HandedProcess, PtyRuntime, RuntimeError, SpawnSpec, SpawnedPty, Target, procfs};
use crate::domain::TerminalSize;
use crate::policy::{ContainerFacts, SpawnPolicy, docker_exec_user, resolve_user};

pub use endpoint::{DEFAULT_DOCKER_SOCKET, Endpoint};
pub use error::DockerError;
pub use group::SESSION_MARKER_VARIABLE;
pub use handoff::DockerHandOff;
pub use state::{ReapReport, STATE_DIRECTORY, reap_orphans_from_state};

use attach::Unread;
use engine::Engine;
use group::GroupView;
use handoff::ConnectionHandOff;
use identify::identify_group;
use process::{DockerProcess, SignalsEnd};
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
}

#[async_trait]
impl PtyRuntime for DockerRuntime {
    /// The container must match `--allow-containers`, and the user the exec would run as (the
    /// session's, else the container's configured one, else root) must not be root (unless
    /// `--allow-root`) or denied. Names are looked up in the container's own passwd file.
    async fn admit(&self, spec: &SpawnSpec, policy: &SpawnPolicy) -> Result<(), RuntimeError> {
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
        policy.check_container(ContainerFacts {
            name: &info.name,
            labels: &info.labels,
        })?;
        if !policy.checks_users(true) {
            return Ok(());
        }
        let passwd = match engine.read_passwd(&info.id).await {
            Ok(passwd) => passwd,
            Err(error) => {
                // Numeric users are judged without it; names are then refused.
                tracing::debug!(%error, container = %container, "cannot read the container's passwd file");
                None
            }
        };
        let user = resolve_user(
            docker_exec_user(spec.user.as_deref(), info.user.as_deref()),
            passwd.as_ref(),
        );
        let uid_of = |name: &str| passwd.as_ref().and_then(|passwd| passwd.uid_of(name));
        policy.check_user(&user, true, &uid_of)?;
        Ok(())
    }

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
                "container {container} is not running: start it (docker start {container}) and try again"
            )));
        }

        let marker = format!("{SESSION_MARKER_VARIABLE}={}", spec.session_id);
        let argv = if spec.command.is_empty() {
            vec!["/bin/sh".to_owned()]
        } else {
            spec.command.clone()
        };
        let integrated = spec
            .shell_integration
            .then(|| crate::shell_integration::integrate(&argv))
            .flatten();
        let shell_integration = integrated.as_ref().map(|integrated| integrated.shell);
        let (argv, env) = match integrated {
            Some(integrated) => {
                let mut env = spec.env.clone();
                env.extend(integrated.env);
                (integrated.argv, env)
            }
            None => (argv, spec.env.clone()),
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
            env: Some(exec_environment(&env, &marker)),
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
                Some(RecordGuard::new(directory.clone(), spec.session_id))
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

        let (host_pid, group) = identify_group(
            engine,
            self.config.process_view,
            &info,
            &exec.id,
            &marker,
            spec.user.as_deref(),
        )
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
        let tcp = matches!(engine.endpoint, Endpoint::Tcp(_));
        Ok(SpawnedPty {
            output_buffered: true,
            shell_integration,
            process: Box::new(DockerProcess {
                engine: engine.clone(),
                container: container.clone(),
                exec_id: exec.id,
                host_pid,
                group,
                exit_status_timeout: self.config.exit_status_timeout,
                exit_status: OnceCell::new(),
                output_ended,
                connection: ConnectionHandOff {
                    fd: attached.fd,
                    tcp,
                    unread: Arc::clone(&attached.output.unread),
                },
                record: record_guard,
            }),
            output: Box::pin(SignalsEnd {
                inner: attached.output,
                ended,
            }),
            input: Box::pin(attached.input),
        })
    }

    async fn adopt(
        &self,
        session_id: uuid::Uuid,
        process: HandedProcess,
        fds: Vec<OwnedFd>,
    ) -> Result<SpawnedPty, RuntimeError> {
        let HandedProcess::Docker(handed) = process else {
            return Err(RuntimeError::Unavailable(
                "the docker runtime cannot take over a local session".to_owned(),
            ));
        };
        let engine = self.engine().await?;
        let [fd]: [OwnedFd; 1] = fds.try_into().map_err(|fds: Vec<OwnedFd>| {
            RuntimeError::Other(format!(
                "a docker session comes with 1 descriptor, not {}",
                fds.len()
            ))
        })?;
        let adopted = handoff::adopt_connection(fd, handed.tcp)
            .map_err(|error| RuntimeError::io("take over the exec stream's connection", error))?;
        let connection_fd = adopted.as_raw_fd();
        let (read_half, write_half) = tokio::io::split(adopted);
        let output = Unread::new(
            bytes::Bytes::from(handed.unread.clone()),
            Box::new(read_half) as Box<dyn tokio::io::AsyncRead + Send + Unpin>,
        );
        // The previous process's record stays true: this process removes it when the session
        // ends.
        let record = self
            .state
            .as_ref()
            .map(|directory| RecordGuard::new(directory.clone(), session_id));
        let (ended, output_ended) = tokio::sync::watch::channel(false);
        Ok(SpawnedPty {
            output_buffered: true,
            shell_integration: None,
            process: Box::new(DockerProcess {
                engine: engine.clone(),
                exec_id: handed.exec_id.clone(),
                host_pid: handed.host_pid,
                group: handed.group(session_id),
                container: handed.container,
                exit_status_timeout: self.config.exit_status_timeout,
                exit_status: OnceCell::new(),
                output_ended,
                connection: ConnectionHandOff {
                    fd: connection_fd,
                    tcp: handed.tcp,
                    unread: Arc::clone(&output.unread),
                },
                record,
            }),
            output: Box::pin(SignalsEnd {
                inner: output,
                ended,
            }),
            input: Box::pin(write_half),
        })
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
            "container {container} is not running ({message}): start it (docker start {container}) and try again"
        )),
        DockerError::Engine { status, message } if (400..500).contains(&status) => {
            RuntimeError::SpawnFailed(format!(
                "cannot start a session in container {container}: {message}"
            ))
        }
        other => RuntimeError::from(other),
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
