//! Handing live sessions to the next broker process, so that an upgrade ends no terminal.
//!
//! A broker with a data directory listens on `<data_dir>/handoff.sock` for its successor. A new
//! broker started with `--take-over <that socket>` connects there (and starts afresh when nothing
//! listens), and the two speak this protocol, one JSON message or blob at a time (`wire.rs`):
//!
//! 1. **Hello** (new → old): the format version, broker id and runtimes. The old process refuses
//!    a format other than [`FORMAT_VERSION`], another broker id, or a successor without a runtime
//!    its sessions need, with a reason, before anything moves.
//! 2. **Freeze** (old): it stops accepting connections (its gRPC server sends GOAWAY) and new
//!    sessions, ends `WatchEvents` and every attached stream with `UNAVAILABLE` (clients reattach
//!    with `since`), stops its heartbeats, and stops every session's task: nothing reads a PTY
//!    from here on, input waits.
//! 3. **Sessions** (old → new): `Welcome` with the count, the listening socket's descriptor, then
//!    per session its header (spec, phase, size, offsets, exit, pid, times, title, lease
//!    generation, what is left of a tombstone), its descriptors (PTY master and keeper pipe), the
//!    ring's contents and the screen as a snapshot at the end of the ring.
//! 4. **Accepted** (new → old): the new process checked everything and can run it; or `Refused`.
//! 5. **Committed** (old → new): the old process lets go (its tasks end without touching the
//!    processes, their crash records stay) and exits; only then does the new one adopt the
//!    sessions, start reading, serve the listener and register with session-api. Anything else
//!    (an error, `Aborted`, the old process gone) and the new process drops what it received
//!    without touching the processes and exits with an error.
//!
//! Failure is safe because the old process owns every session until it sends `Committed`: if the
//! new process refuses, dies or stalls before `Accepted`, the old one sends `Aborted`, thaws its
//! sessions and serves again. After `Committed` the new process alone owns them; should it die
//! before adopting, nobody does, and the crash records in the data directory let the next start
//! end those processes (no orphan is left).
//!
//! Screens travel as snapshots (`Screen::snapshot`) rather than by replaying the ring: a replay
//! would lose the scrollback older than the ring and parse up to a ring per session (a second
//! per MiB at vt100's speed). The successor keeps each one asleep
//! (`Screen::asleep_from_snapshot`) and draws it when the session next needs its screen, so a
//! hand-off parses none: drawing a thousand snapshots took 3-5 s of the successor's start.

mod give;
mod take;
mod wire;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use ptyhub_attach_ticket::TicketHolder;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub(crate) use give::HandOffListener;
pub use take::{STOP_AT_VARIABLE, TakeOver, connect_to_predecessor};

use crate::activity::ActivityParts;
use crate::config::{BackendKind, Config};
use crate::domain::{
    Command, ExitStatus, Notification, Progress, SessionPhase, TerminalSize, TerminalState,
};
use crate::recording::{CastHeader, Checkpoint, OutputIndex, RecordMode};
use crate::runtime::docker::DockerHandOff;
use crate::runtime::{HandedProcess, SpawnSpec, Target};
use crate::session::{FrozenControl, FrozenRecording, FrozenRequest, FrozenReservation};
use crate::shell_integration::Shell;

/// The version of this protocol. Both processes must speak the same one.
pub const FORMAT_VERSION: u32 = 1;

/// The hand-off socket's name in the data directory.
pub const HANDOFF_SOCKET: &str = "handoff.sock";

/// Where a broker with `config` listens for its successor.
pub fn handoff_socket(config: &Config) -> Option<PathBuf> {
    config
        .data_dir
        .as_deref()
        .map(|data_dir| data_dir.join(HANDOFF_SOCKET))
}

/// How long the old process waits for each answer of the new one.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long every session together may take to freeze.
const FREEZE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a hand-off did not happen.
#[derive(Debug, thiserror::Error)]
pub enum HandOffError {
    #[error("hand-off socket i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("the other broker process went away during the hand-off")]
    PeerGone,
    #[error("cannot encode a hand-off message: {0}")]
    Encode(#[source] serde_json::Error),
    #[error("cannot decode a hand-off message: {0}")]
    Decode(#[source] serde_json::Error),
    #[error("a hand-off {0} is over its limit")]
    TooLarge(&'static str),
    #[error("hand-off protocol: {0}")]
    Protocol(String),
    #[error("the running broker refused the hand-off: {0}")]
    Refused(String),
    #[error("the next broker process refused the hand-off: {0}")]
    RefusedBySuccessor(String),
    #[error("the running broker aborted the hand-off: {0}")]
    Aborted(String),
    #[error("the hand-off timed out waiting for {0}")]
    TimedOut(&'static str),
    #[error("session {0} could not be frozen: {1}")]
    Freeze(Uuid, String),
}

/// The new process's first message. `format` comes first so that any version can read it.
#[derive(Debug, Serialize, Deserialize)]
struct Hello {
    format: u32,
    broker_id: String,
    /// The runtimes the new process offers (`local`, `docker`).
    backends: Vec<String>,
    /// The new binary's version, for the old process's log.
    version: String,
}

/// The old process's answer to the hello.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
enum Answer {
    /// The sessions follow (and the listener before them).
    Welcome {
        format: u32,
        sessions: usize,
    },
    Refused {
        reason: String,
    },
}

/// The new process's answer once it has received everything.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
enum Acceptance {
    Accepted,
    Refused { reason: String },
}

/// The old process's last word.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
enum Outcome {
    Committed,
    Aborted { reason: String },
}

/// One session's header; its descriptors, ring and screen follow it.
#[derive(Debug, Serialize, Deserialize)]
struct SessionHeader {
    session_id: Uuid,
    spec: WireSpec,
    running: bool,
    cols: u16,
    rows: u16,
    ring_start: u64,
    exit: Option<WireExit>,
    pid: Option<u32>,
    created_at: SystemTime,
    last_activity_at: SystemTime,
    title: String,
    last_bell_at: Option<SystemTime>,
    controller_generation: u64,
    /// The screen snapshot's size when one follows (its offset is the end of the ring).
    screen: Option<(u16, u16)>,
    tombstone_left: Option<Duration>,
    process: Option<WireProcess>,
    /// The recording in progress, which the new process appends to. Absent from a predecessor
    /// that did not carry recordings over: its spool file is published as it was.
    #[serde(default)]
    recording: Option<WireRecording>,
    /// What the terminal was doing and the commands it ran. Absent from a predecessor that did
    /// not track them, or ran without screens.
    #[serde(default)]
    activity: Option<WireActivity>,
    /// What is left of the wait for an integrated shell's first prompt, while input is held for
    /// it (`session/input.rs`): the next process holds input that long at most.
    #[serde(default)]
    prompt_wait_left: Option<Duration>,
    /// Who may type (`exclusive`, `shared`): the next process moves no stream's role, since
    /// every stream reattaches. Absent from a predecessor without control modes: exclusive.
    #[serde(default)]
    control_mode: Option<String>,
    /// The grant timeout, standing requests and a reservation. Absent from a predecessor that
    /// did not carry them: none of them.
    #[serde(default)]
    control: Option<WireControl>,
}

/// A session's control state beyond its mode (`session/attachments/requests.rs`): a stream's
/// request is not in it, since it ends with its stream.
#[derive(Debug, Serialize, Deserialize)]
struct WireControl {
    grant_timeout: Option<Duration>,
    last_request_id: u64,
    standing_requests: Vec<WireRequest>,
    /// The principal control is reserved for, and what is left of the reservation.
    reservation: Option<(String, Duration)>,
}

/// A standing request for control, and how long it has waited.
#[derive(Debug, Serialize, Deserialize)]
struct WireRequest {
    id: u64,
    principal: String,
    surface: String,
    since: SystemTime,
    waited: Duration,
}

impl WireControl {
    fn from_frozen(control: &FrozenControl) -> Self {
        Self {
            grant_timeout: control.grant_timeout,
            last_request_id: control.last_request_id,
            standing_requests: control
                .standing_requests
                .iter()
                .map(|request| WireRequest {
                    id: request.id,
                    principal: request.holder.principal.clone(),
                    surface: request.holder.surface.clone(),
                    since: request.since,
                    waited: request.waited,
                })
                .collect(),
            reservation: control
                .reservation
                .as_ref()
                .map(|reservation| (reservation.principal.clone(), reservation.left)),
        }
    }

    /// The control state, checked: a grant timeout of no time is a protocol error (a spawn
    /// refuses one). The session checks the requests and the reservation as it takes them
    /// (`Attachments::with_frozen_control`).
    fn into_frozen(self) -> Result<FrozenControl, HandOffError> {
        if self.grant_timeout == Some(Duration::ZERO) {
            return Err(HandOffError::Protocol(
                "a grant timeout of no time".to_owned(),
            ));
        }
        Ok(FrozenControl {
            grant_timeout: self.grant_timeout,
            last_request_id: self.last_request_id,
            standing_requests: self
                .standing_requests
                .into_iter()
                .map(|request| FrozenRequest {
                    id: request.id,
                    holder: TicketHolder {
                        principal: request.principal,
                        surface: request.surface,
                    },
                    since: request.since,
                    waited: request.waited,
                })
                .collect(),
            reservation: self
                .reservation
                .map(|(principal, left)| FrozenReservation { principal, left }),
        })
    }
}

/// A session's activity (`activity/`): its state and its commands.
#[derive(Debug, Serialize, Deserialize)]
struct WireActivity {
    /// The contract's spelling.
    state: String,
    /// The shell started with its integration (`bash`, `sh`, `zsh`, `fish`).
    shell: Option<String>,
    integrated: bool,
    marks_output_start: bool,
    cwd: Option<String>,
    /// The contract's spelling of the kind, and the percent.
    progress: Option<(String, Option<u8>)>,
    notification: Option<(String, SystemTime)>,
    commands_kept: usize,
    next_command_id: u64,
    commands: Vec<WireCommand>,
    /// Where the command line being typed starts on the screen (row, column).
    #[serde(default)]
    input_at: Option<(u16, u16)>,
    /// The offsets of the last prompt's and the last question's marks, for waits with an
    /// offset. Absent from a predecessor that did not carry them: a wait with an offset then
    /// waits for the next one.
    #[serde(default)]
    prompt_at: Option<u64>,
    #[serde(default)]
    asked_at: Option<u64>,
    /// The command line about to start, and the line feeds of a multi-line one `run` typed
    /// still to come.
    #[serde(default)]
    pending_line: Option<String>,
    #[serde(default)]
    typed_lines_left: usize,
    /// The program draws on the alternate screen.
    #[serde(default)]
    full_screen: bool,
    /// Input reached a program waiting for it.
    #[serde(default)]
    answered: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct WireCommand {
    id: u64,
    command: String,
    cwd: Option<String>,
    started_at: SystemTime,
    ended_at: Option<SystemTime>,
    exit_code: Option<i32>,
    output_start: u64,
    output_end: Option<u64>,
}

impl WireActivity {
    fn from_parts(parts: &ActivityParts) -> Self {
        Self {
            state: parts.state.as_str().to_owned(),
            shell: parts.shell.map(|shell| shell.kind().to_owned()),
            integrated: parts.integrated,
            marks_output_start: parts.marks_output_start,
            cwd: parts.cwd.clone(),
            progress: parts
                .progress
                .map(|progress| (progress.kind().to_owned(), progress.percent())),
            notification: parts
                .notification
                .as_ref()
                .map(|notification| (notification.text.clone(), notification.at)),
            commands_kept: parts.commands_kept,
            next_command_id: parts.next_command_id,
            commands: parts
                .commands
                .iter()
                .map(|command| WireCommand {
                    id: command.id,
                    command: command.command.clone(),
                    cwd: command.cwd.clone(),
                    started_at: command.started_at,
                    ended_at: command.ended_at,
                    exit_code: command.exit_code,
                    output_start: command.output_start,
                    output_end: command.output_end,
                })
                .collect(),
            input_at: parts.input_at,
            prompt_at: parts.prompt_at,
            asked_at: parts.asked_at,
            pending_line: parts.pending_line.clone(),
            typed_lines_left: parts.typed_lines_left,
            full_screen: parts.full_screen,
            answered: parts.answered,
        }
    }

    /// The activity, checked: a state this process does not know, or commands out of order,
    /// are a protocol error.
    fn into_parts(self) -> Result<ActivityParts, HandOffError> {
        let state = TerminalState::parse(&self.state).ok_or_else(|| {
            HandOffError::Protocol(format!("unknown terminal state {:?}", self.state))
        })?;
        let consecutive = self
            .commands
            .windows(2)
            .all(|pair| pair[1].id == pair[0].id + 1);
        if !consecutive
            || self
                .commands
                .last()
                .is_some_and(|last| last.id >= self.next_command_id)
        {
            return Err(HandOffError::Protocol("commands out of order".to_owned()));
        }
        Ok(ActivityParts {
            state,
            shell: self.shell.as_deref().and_then(Shell::from_kind),
            integrated: self.integrated,
            marks_output_start: self.marks_output_start,
            cwd: self.cwd,
            progress: self
                .progress
                .and_then(|(kind, percent)| Progress::from_parts(&kind, percent)),
            notification: self
                .notification
                .map(|(text, at)| Notification { text, at }),
            commands_kept: self.commands_kept.max(1),
            next_command_id: self.next_command_id,
            commands: self
                .commands
                .into_iter()
                .map(|command| Command {
                    id: command.id,
                    command: command.command,
                    cwd: command.cwd,
                    started_at: command.started_at,
                    ended_at: command.ended_at,
                    exit_code: command.exit_code,
                    output_start: command.output_start,
                    output_end: command.output_end,
                })
                .collect(),
            input_at: self.input_at,
            prompt_at: self.prompt_at,
            asked_at: self.asked_at,
            pending_line: self.pending_line,
            typed_lines_left: self.typed_lines_left,
            full_screen: self.full_screen,
            answered: self.answered,
        })
    }
}

/// A recording in progress: its header, its spool file, and how far it got.
#[derive(Debug, Serialize, Deserialize)]
struct WireRecording {
    /// Whether input is recorded too.
    input: bool,
    cols: u16,
    rows: u16,
    timestamp: u64,
    command: Option<String>,
    title: Option<String>,
    term: Option<String>,
    spool: PathBuf,
    started_at: SystemTime,
    last_time: Duration,
    offset: u64,
    held_input: Vec<u8>,
    /// Where the file holds each stretch of output (`recording/index.rs`): checkpoints as
    /// `(offset, position, resync)`, and the offset it holds output up to. Absent from a
    /// predecessor that kept none: the output it recorded is not read back.
    #[serde(default)]
    checkpoints: Vec<(u64, u64, bool)>,
    #[serde(default)]
    held_to: u64,
}

impl WireRecording {
    fn from_frozen(recording: &FrozenRecording) -> Self {
        Self {
            input: recording.mode.records_input(),
            cols: recording.header.size.cols(),
            rows: recording.header.size.rows(),
            timestamp: recording.header.timestamp,
            command: recording.header.command.clone(),
            title: recording.header.title.clone(),
            term: recording.header.term.clone(),
            spool: recording.spool.clone(),
            started_at: recording.started_at,
            last_time: recording.last_time,
            offset: recording.offset,
            held_input: recording.held_input.clone(),
            checkpoints: recording
                .index
                .checkpoints()
                .iter()
                .map(|checkpoint| (checkpoint.offset, checkpoint.position, checkpoint.resync))
                .collect(),
            held_to: recording.index.held_to(),
        }
    }

    /// The recording, checked against the ring it continues from (`ring_start..=ring_end`).
    fn into_frozen(self, ring_start: u64, ring_end: u64) -> Result<FrozenRecording, HandOffError> {
        if !(ring_start..=ring_end).contains(&self.offset) {
            return Err(HandOffError::Protocol(format!(
                "a recording at offset {} outside the ring {ring_start}..{ring_end}",
                self.offset
            )));
        }
        let checkpoints = self
            .checkpoints
            .into_iter()
            .map(|(offset, position, resync)| Checkpoint {
                offset,
                position,
                resync,
            })
            .collect();
        let index = OutputIndex::from_parts(checkpoints, self.held_to)
            .ok_or_else(|| HandOffError::Protocol("a recording's index out of order".to_owned()))?;
        if self.held_input.len() > 3 {
            return Err(HandOffError::Protocol(format!(
                "{} held input bytes (at most 3)",
                self.held_input.len()
            )));
        }
        Ok(FrozenRecording {
            mode: if self.input {
                RecordMode::OutputAndInput
            } else {
                RecordMode::Output
            },
            header: CastHeader {
                size: size(self.cols, self.rows)?,
                timestamp: self.timestamp,
                command: self.command,
                title: self.title,
                term: self.term,
            },
            spool: self.spool,
            started_at: self.started_at,
            last_time: self.last_time,
            offset: self.offset,
            held_input: self.held_input,
            index,
        })
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct WireSpec {
    /// `None` for the local host, else the container.
    container: Option<String>,
    command: Vec<String>,
    env: Vec<(String, String)>,
    cwd: Option<String>,
    user: Option<String>,
    cols: u16,
    rows: u16,
    /// Absent from a predecessor without shell integration.
    #[serde(default)]
    shell_integration: bool,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct WireExit {
    code: i32,
    signal: Option<i32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "runtime", rename_all = "snake_case")]
enum WireProcess {
    /// Descriptors: the PTY master, then the keeper's pipe.
    Local {
        leader_pid: u32,
        leader_start_time: u64,
    },
    /// Descriptor: the exec stream's hijacked connection to the engine.
    Docker(DockerHandOff),
}

impl WireProcess {
    fn descriptors(&self) -> usize {
        match self {
            WireProcess::Local { .. } => 2,
            WireProcess::Docker(_) => 1,
        }
    }

    fn backend(&self) -> BackendKind {
        match self {
            WireProcess::Local { .. } => BackendKind::Local,
            WireProcess::Docker(_) => BackendKind::Docker,
        }
    }
}

impl From<HandedProcess> for WireProcess {
    fn from(process: HandedProcess) -> Self {
        match process {
            HandedProcess::Local {
                leader_pid,
                leader_start_time,
            } => WireProcess::Local {
                leader_pid,
                leader_start_time,
            },
            HandedProcess::Docker(docker) => WireProcess::Docker(docker),
        }
    }
}

impl From<WireProcess> for HandedProcess {
    fn from(process: WireProcess) -> Self {
        match process {
            WireProcess::Local {
                leader_pid,
                leader_start_time,
            } => HandedProcess::Local {
                leader_pid,
                leader_start_time,
            },
            WireProcess::Docker(docker) => HandedProcess::Docker(docker),
        }
    }
}

impl WireSpec {
    fn from_spec(spec: &SpawnSpec) -> Self {
        Self {
            container: match &spec.target {
                Target::Local => None,
                Target::Docker { container } => Some(container.clone()),
            },
            command: spec.command.clone(),
            env: spec.env.clone(),
            cwd: spec.cwd.clone(),
            user: spec.user.clone(),
            cols: spec.size.cols(),
            rows: spec.size.rows(),
            shell_integration: spec.shell_integration,
        }
    }

    fn into_spec(self, session_id: Uuid) -> Result<SpawnSpec, HandOffError> {
        Ok(SpawnSpec {
            session_id,
            target: match self.container {
                None => Target::Local,
                Some(container) => Target::Docker { container },
            },
            command: self.command,
            env: self.env,
            cwd: self.cwd,
            user: self.user,
            size: size(self.cols, self.rows)?,
            shell_integration: self.shell_integration,
        })
    }
}

fn size(cols: u16, rows: u16) -> Result<TerminalSize, HandOffError> {
    TerminalSize::new(u32::from(cols), u32::from(rows))
        .map_err(|error| HandOffError::Protocol(format!("bad size: {error}")))
}

impl From<ExitStatus> for WireExit {
    fn from(exit: ExitStatus) -> Self {
        Self {
            code: exit.code,
            signal: exit.signal,
        }
    }
}

impl From<WireExit> for ExitStatus {
    fn from(exit: WireExit) -> Self {
        ExitStatus {
            code: exit.code,
            signal: exit.signal,
        }
    }
}

/// Whether a phase can be handed over: a process runs, or a tombstone is kept.
fn running(phase: SessionPhase) -> Option<bool> {
    match phase {
        SessionPhase::Running => Some(true),
        SessionPhase::Exited => Some(false),
        _ => None,
    }
}

/// Binds `path` afresh: whatever was there is a previous run's, or the predecessor's that has
/// let go of it.
fn bind_fresh(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    tokio::net::UnixListener::bind(path)
}
