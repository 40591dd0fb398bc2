//! The PTY runtimes: where a session's process actually runs.
//!
//! A runtime spawns one process on a fresh PTY and hands back its three faces: the output to read,
//! the input to write, and a [`PtyProcess`] handle to resize, signal and wait on it. The session
//! task owns all three; nothing else touches a PTY. Every runtime must behave the same from a
//! client's point of view: the local one (`nix` PTYs on the broker's host), the Docker one
//! (`docker exec` with a TTY through bollard) and the fake one used by unit tests.
//!
//! The shape follows what `docker exec` can do, the weaker of the two: there is no kill call, so
//! ending a process is "signal its process group", and the exit status is learnt only after the
//! output has ended.

use std::fmt;
use std::os::fd::{OwnedFd, RawFd};
use std::pin::Pin;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncWrite};
use uuid::Uuid;

use crate::domain::{ExitStatus, TerminalSize};
use crate::policy::{PolicyRefusal, SpawnPolicy};

/// Where a session's process runs: the broker's own host, or a running container of its
/// Docker engine by id or name.
pub use ptyhub_model::Target;

pub mod docker;
#[cfg(test)]
pub(crate) mod fake;
pub mod local;
pub(crate) mod procfs;

/// What to run, where, and at which size. Validated before it gets here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnSpec {
    pub session_id: Uuid,
    pub target: Target,
    /// argv; empty means the target's default shell.
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<String>,
    pub user: Option<String>,
    /// The size the PTY has from its first byte on; never corrected afterwards.
    pub size: TerminalSize,
    /// Start an interactive shell with its integration (`shell_integration/`), where the
    /// program is one that has it.
    pub shell_integration: bool,
}

/// The signals a session sends to its processes: the first three to end it, each to every
/// process of the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupSignal {
    Hangup,
    Terminate,
    Kill,
    /// A Ctrl-C the terminal could not take, sent as the terminal would have sent it: only to
    /// the processes in the terminal's foreground process group, never to background jobs.
    Interrupt,
}

/// A freshly spawned process and its PTY.
pub struct SpawnedPty {
    /// The PTY master's output. Ends (EOF) once every process holding the terminal has gone.
    pub output: Pin<Box<dyn AsyncRead + Send>>,
    /// The PTY master's input.
    pub input: Pin<Box<dyn AsyncWrite + Send>>,
    pub process: Box<dyn PtyProcess>,
    /// Whether the output reaches the broker through a buffer deep enough that a read may wait
    /// a moment without stalling the process: the engine's connection and its own copying do for
    /// a container; a local PTY's kernel buffer does not. The session then paces the reads of
    /// output that flows in small pieces (`session::task::ReadPacer`).
    pub output_buffered: bool,
    /// The shell the program is, started with its integration (which marks its prompts).
    pub shell_integration: Option<crate::shell_integration::Shell>,
}

impl fmt::Debug for SpawnedPty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpawnedPty")
            .field("process", &self.process)
            .finish_non_exhaustive()
    }
}

/// Which running process a broker hands to its next process (`handoff/`), beside the
/// descriptors that go with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandedProcess {
    /// A local session: the descriptors are the PTY master and the read end of its keeper's pipe.
    Local {
        leader_pid: u32,
        leader_start_time: u64,
    },
    /// A Docker session: the descriptor is the hijacked connection of its exec's TTY stream.
    Docker(docker::DockerHandOff),
}

/// A running process as it goes to the next broker process: what it is, and the descriptors
/// (borrowed from the process handle, which stays open until the hand-off ends) that carry it.
#[derive(Debug)]
pub struct ProcessHandOff {
    pub process: HandedProcess,
    pub fds: Vec<RawFd>,
}

/// Spawns processes on PTYs.
#[async_trait]
pub trait PtyRuntime: Send + Sync + fmt::Debug {
    /// Refuses `spec` where `policy` does not allow its target or its user, before anything is
    /// started ([`crate::Broker::spawn`] asks first).
    async fn admit(&self, spec: &SpawnSpec, policy: &SpawnPolicy) -> Result<(), RuntimeError>;

    /// Starts `spec` on a new PTY of `spec.size`.
    async fn spawn(&self, spec: &SpawnSpec) -> Result<SpawnedPty, RuntimeError>;

    /// Goes on with a process that the previous broker process started and handed over, from
    /// the descriptors it sent. Nothing is read from them before this returns.
    async fn adopt(
        &self,
        _session_id: Uuid,
        _process: HandedProcess,
        _fds: Vec<OwnedFd>,
    ) -> Result<SpawnedPty, RuntimeError> {
        Err(RuntimeError::Unavailable(
            "this runtime cannot take over running processes".to_owned(),
        ))
    }
}

/// Control over one spawned process.
#[async_trait]
pub trait PtyProcess: Send + Sync + fmt::Debug {
    /// The session leader's process id as the broker sees it, while it runs.
    fn pid(&self) -> Option<u32>;

    /// Applies a new size to the real PTY. Failing after the process exited is expected and
    /// must never end a session.
    async fn resize(&self, size: TerminalSize) -> Result<(), RuntimeError>;

    /// Sends `signal` to the session's processes (see [`GroupSignal`] for which).
    async fn signal_group(&self, signal: GroupSignal) -> Result<(), RuntimeError>;

    /// Whether any process of the session's process group is still alive.
    async fn group_alive(&self) -> Result<bool, RuntimeError>;

    /// Waits for the session leader to exit and returns how it ended. The session task waits on
    /// it for the whole life of the process, alongside reading the output; may be called more
    /// than once.
    async fn wait(&self) -> Result<ExitStatus, RuntimeError>;

    /// What the next broker process needs to go on with this process, or why it cannot.
    fn hand_off(&self) -> Result<ProcessHandOff, RuntimeError> {
        Err(RuntimeError::Unavailable(
            "this runtime cannot hand its processes over".to_owned(),
        ))
    }

    /// The next broker process owns the process now: dropping this handle must leave it (and
    /// its crash record) alone.
    fn handed_over(&self) {}
}

/// Why a runtime could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The target asked for has no runtime on this broker (for example no Docker engine).
    #[error("{0}")]
    Unavailable(String),
    /// The container or other target does not exist.
    #[error("{0}")]
    TargetNotFound(String),
    /// The target exists but cannot run a session now (for example a stopped container).
    #[error("{0}")]
    TargetNotRunning(String),
    /// The command could not be started (not found, not executable, bad user or cwd).
    #[error("{0}")]
    SpawnFailed(String),
    /// The broker's own policy does not allow this target or user.
    #[error(transparent)]
    Refused(#[from] PolicyRefusal),
    #[error("{context}: {source}")]
    Io {
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
}

impl RuntimeError {
    pub fn io(context: &'static str, source: impl Into<std::io::Error>) -> Self {
        RuntimeError::Io {
            context,
            source: source.into(),
        }
    }
}
