//! One session: the task that owns its PTY, the state that clients read, and the handle clients
//! and the broker talk to it through.
//!
//! The session task owns the PTY: it reads output into the ring, resizes, signals and respawns.
//! Clients reach it through a bounded command channel or read the shared state under a short
//! lock. Input is the one exception: the controller's handler writes it straight to the PTY's
//! input side, which the task installs at every spawn and takes back when the process ends, so a
//! keystroke does not wait for the task to be scheduled (and a burst of input never delays a
//! kill). Each attached client pulls output from the ring at its own cursor, so a slow client
//! slows nobody but itself; the controller's cursor is what the task waits for before reading
//! more than a ring's worth ahead (flow control).

mod attachments;
mod command_watch;
mod handoff;
mod input;
mod recording;
mod run;
mod screen;
mod task;
mod typing_first;
mod wait;

use std::num::NonZeroU64;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use ptyhub_attach_ticket::TicketHolder;
use ptyhub_model::ControlMode;
use tokio::io::AsyncWrite;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use attachments::{ClientId, FrozenControl, FrozenRequest, FrozenReservation};
pub use command_watch::CommandWatch;
pub use handoff::{Frozen, FrozenSession, Verdict};
pub use input::{FIRST_PROMPT_WAIT, INTERRUPT, InputSent};
pub(crate) use recording::{FrozenRecording, SessionRecording};
pub use run::{MAX_RUN_OUTPUT, RunOutcome};
pub use screen::{CommandPage, FAST_FORWARD_RING_PART, InputItem};
pub(crate) use task::{SessionTask, TaskContext};
pub use wait::{ScreenReading, ScreenWait, WaitEnd, WaitOutcome, WaitTarget};

use crate::activity::Activity;
use crate::domain::{
    ClientEvent, ControlRequest, ControlState, ExitStatus, Role, SessionInfo, SessionPhase,
    TerminalActivity, TerminalSize,
};
use crate::error::{ClientAction, Error};
use crate::ring::{OutputRing, RingRead};
use crate::screen::Screen;
use attachments::Attachments;
pub(crate) use typing_first::RecentInput;
use typing_first::Typist;

/// Largest output frame sent to a client.
const MAX_OUTPUT_FRAME: usize = 64 * 1024;

/// Bounded queue of commands from clients to the session task.
const COMMAND_QUEUE: usize = 16;

/// The per-session timing and sizes, taken from the broker's `Config`.
#[derive(Debug, Clone, Copy)]
pub struct SessionSettings {
    pub ring_bytes: usize,
    /// Scrollback rows each session's screen keeps; `None` runs sessions without a screen.
    pub scrollback_lines: Option<usize>,
    /// A screen with no new output for this long sleeps (kept as its compressed snapshot).
    pub screen_sleep: Duration,
    pub tombstone: Duration,
    pub detached_timeout: Duration,
    pub kill_grace: Duration,
    /// A full-screen program whose output is quiet this long is `idle`.
    pub idle_after: Duration,
    /// How many commands the session keeps.
    pub commands_kept: usize,
    /// Bytes a second each session reads its output at, at most, while another session of the
    /// broker is typed in (`session/typing_first.rs`); `None`: as fast as it comes.
    pub flood_rate_while_typing: Option<NonZeroU64>,
}

/// A client's request to attach, after its ticket was checked.
#[derive(Debug, Clone)]
pub struct AttachRequest {
    pub role: Role,
    /// Applied by a controller on attach.
    pub size: Option<TerminalSize>,
    /// Resume offset; `None` means the oldest byte held.
    pub since: Option<u64>,
    /// Start with a snapshot of the screen rather than a replay of raw bytes.
    pub snapshot: bool,
    /// Only the present: a snapshot without scrollback (nothing without screens), then the
    /// output from the end of the ring, whatever `since` and `snapshot` say; no gap.
    pub present_only: bool,
    /// Who the client is for, as its verified ticket said.
    pub holder: TicketHolder,
    /// Whether its ticket admits a controller: a viewer may then ask for control.
    pub may_control: bool,
}

/// The handle on a session that the registry holds and clients reach it through.
#[derive(Debug)]
pub struct Session {
    pub id: Uuid,
    shared: Arc<Shared>,
    commands: mpsc::Sender<Command>,
}

/// What the session task and the clients share.
#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Bumped whenever a client may have something new to send (output, an event, the end).
    changed: watch::Sender<()>,
    /// Wakes the session task: a client left, or the controller took output the task waits on.
    task_wake: Notify,
    /// Wakes the screen's feeder while it lets a flood run ahead or batches output: the task
    /// stopped reading because the screen is a ring behind, so the feeder should feed (or
    /// fast-forward) now rather than at its next look.
    feeder_wake: Notify,
    /// The running process's input side; `None` once no process runs. The task holds the lock
    /// while it starts a process, so input sent meanwhile waits for the new process.
    input: Arc<tokio::sync::Mutex<Option<PtyInput>>>,
    /// Holds input while an integrated shell has not shown its first prompt (`session/input.rs`).
    prompt_gate: input::PromptGate,
    /// Counts interrupts, so that input queued or blocked before one gives way to it.
    interrupts: input::Interrupts,
    /// The session's terminal emulator, fed from the ring off the output path (`session/screen.rs`);
    /// `None` on a broker that runs without screens. Lock order: this before `state`.
    screen: Option<Mutex<Screen>>,
    /// Where input, resizes and resets go for the session's recorder (`session/recording.rs`);
    /// `None` when the session is not recorded.
    recorder: Option<recording::RecorderTap>,
    /// A full-screen program whose output is quiet this long is `idle`.
    idle_after: Duration,
    /// Notes the session's input in the broker's record, and tells whether another session was
    /// typed in lately (`session/typing_first.rs`).
    typist: Typist,
}

/// The session task's hold on the input side (see [`Shared::input`]).
type InputGuard = tokio::sync::OwnedMutexGuard<Option<PtyInput>>;

/// The PTY's input side while its process runs.
struct PtyInput {
    writer: Pin<Box<dyn AsyncWrite + Send>>,
    /// Cancelled when the process ends: a write blocked on a process that stopped reading its
    /// input gives way, so the task can take the input side back.
    ended: CancellationToken,
}

impl std::fmt::Debug for PtyInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtyInput")
            .field("ended", &self.ended.is_cancelled())
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct State {
    phase: SessionPhase,
    size: TerminalSize,
    ring: OutputRing,
    exit: Option<ExitStatus>,
    pid: Option<u32>,
    created_at: SystemTime,
    last_activity_at: SystemTime,
    attachments: Attachments,
    /// Set by the task while it waits for the controller to take output before reading more.
    reader_waiting: bool,
    /// Input arrived since the task last reported activity (set by the writer, which wakes the
    /// task once per report rather than once per keystroke).
    input_since_report: bool,
    /// When input last reached the PTY: output read soon after is taken as its answer, which
    /// the task reads without pacing (`task::ReadPacer`).
    last_input_at: Option<tokio::time::Instant>,
    /// How far the screen has been fed: the task reads no more than a ring ahead of it, so the
    /// screen never misses a byte.
    screen_offset: u64,
    /// The `screen_offset` at which the task last woke the feeder for falling behind
    /// (`State::feeder_falls_behind`, `session/screen.rs`): once per batch, not per read.
    feeder_woken_at: Option<u64>,
    /// How often the task stopped reading for the screen alone (the controller would have let
    /// it read on): [`Session::reads_held_for_screen`].
    reads_held_for_screen: u64,
    /// The window title and last bell as the screen last saw them.
    title: String,
    last_bell_at: Option<SystemTime>,
    /// The title or bell changed since the task last reported activity.
    marks_since_report: bool,
    /// What the terminal is doing, as the screen last read it.
    terminal: TerminalActivity,
    /// Commands that started or finished since the task last reported the terminal, in their
    /// latest form; `terminal_changed` is set when there is something to report.
    terminal_commands: Vec<ptyhub_model::Command>,
    terminal_changed: bool,
    /// When output last arrived (for waits that want a quiet screen).
    last_output_at: tokio::time::Instant,
    /// When each chunk of output not yet recorded was read, for the recorder; `None` when the
    /// session is not recorded.
    output_timeline: Option<recording::OutputTimeline>,
}

impl State {
    fn info(&self, session_id: Uuid) -> SessionInfo {
        let (controllers, viewers) = self.attachments.counts();
        SessionInfo {
            session_id,
            phase: self.phase,
            size: self.size,
            created_at: self.created_at,
            last_activity_at: self.last_activity_at,
            output_offset: self.ring.end(),
            controllers,
            viewers,
            exit: self.exit,
            pid: self.pid,
            title: self.title.clone(),
            last_bell_at: self.last_bell_at,
            terminal: self.terminal.clone(),
        }
    }

    /// How many bytes the task may read from the PTY now: as many as keep the controller and the
    /// screen within a ring's length of the end.
    fn read_allowance(&self, screens: bool) -> usize {
        let within_ring = |cursor: u64| {
            let lag = self.ring.end().saturating_sub(cursor);
            (self.ring.capacity() as u64).saturating_sub(lag) as usize
        };
        let controller = self
            .attachments
            .controller_cursor()
            .map_or(usize::MAX, within_ring);
        let screen = if screens {
            within_ring(self.screen_offset)
        } else {
            usize::MAX
        };
        controller.min(screen)
    }
}

/// Requests to the session task.
#[derive(Debug)]
enum Command {
    Attach {
        request: AttachRequest,
        reply: oneshot::Sender<Result<AttachedClient, Error>>,
    },
    Resize {
        generation: Option<u64>,
        size: TerminalSize,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    /// `generation` is `None` for the service's own Reset call.
    Reset {
        generation: Option<u64>,
        reply: oneshot::Sender<Result<SessionInfo, Error>>,
    },
    Kill {
        reply: oneshot::Sender<SessionInfo>,
    },
    /// Signal the running process's group with SIGINT: an interrupt the terminal's full input
    /// buffer would hold back (`session/input.rs`).
    Interrupt {
        reply: oneshot::Sender<Result<(), Error>>,
    },
    /// Stop reading, answer what the session is, and wait for the hand-off's verdict.
    HandOff {
        reply: oneshot::Sender<Result<FrozenSession, Error>>,
        verdict: oneshot::Receiver<Verdict>,
        /// Told once the task has let go after a commit (the crash record is kept).
        let_go: oneshot::Sender<()>,
    },
}

/// Who may type into a new session, and how long a request for control may wait: set in the
/// spawn itself, so that no stream ever meets a session without them and a spawn never half
/// succeeds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ControlSettings {
    pub mode: ControlMode,
    /// The instance's grant timeout; `None`: a request waits until it is answered.
    pub grant_timeout: Option<Duration>,
}

#[derive(Debug)]
struct AttachedClient {
    client: ClientId,
}

impl Session {
    /// Creates a session in `Starting` and the task that will run it; the caller spawns the task.
    pub(crate) fn new(
        id: Uuid,
        size: TerminalSize,
        settings: SessionSettings,
        context: TaskContext,
        recording: Option<SessionRecording>,
        control: ControlSettings,
    ) -> (Arc<Session>, SessionTask) {
        let now = SystemTime::now();
        let (recorder_tap, recorder) = recording.map(recording::recorder).unzip();
        let screen = settings.scrollback_lines.map(|lines| {
            let mut screen = Screen::new(size, lines, 0);
            *screen.activity_mut() = Activity::new(None, settings.commands_kept);
            Mutex::new(screen)
        });
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                phase: SessionPhase::Starting,
                size,
                ring: OutputRing::new(settings.ring_bytes),
                exit: None,
                pid: None,
                created_at: now,
                last_activity_at: now,
                attachments: Attachments::default()
                    .in_control_mode(control.mode)
                    .with_grant_timeout(control.grant_timeout),
                reader_waiting: false,
                input_since_report: false,
                last_input_at: None,
                screen_offset: 0,
                feeder_woken_at: None,
                reads_held_for_screen: 0,
                title: String::new(),
                last_bell_at: None,
                marks_since_report: false,
                terminal: TerminalActivity::default(),
                terminal_commands: Vec::new(),
                terminal_changed: false,
                last_output_at: tokio::time::Instant::now(),
                output_timeline: recorder_tap
                    .is_some()
                    .then(recording::OutputTimeline::default),
            }),
            changed: watch::Sender::new(()),
            task_wake: Notify::new(),
            feeder_wake: Notify::new(),
            input: Arc::new(tokio::sync::Mutex::new(None)),
            prompt_gate: input::PromptGate::open(),
            interrupts: input::Interrupts::default(),
            screen,
            recorder: recorder_tap,
            idle_after: settings.idle_after,
            typist: Typist::new(Arc::clone(&context.recent_input), id),
        });
        // Held from the start, so input waits for the first spawn rather than finding nothing.
        let input = Arc::clone(&shared.input)
            .try_lock_owned()
            .expect("a new session's input lock is free");
        let (command_tx, command_rx) = mpsc::channel(COMMAND_QUEUE);
        let session = Arc::new(Session {
            id,
            shared: Arc::clone(&shared),
            commands: command_tx,
        });
        let task = SessionTask::new(id, shared, settings, context, command_rx, input, recorder);
        (session, task)
    }

    pub fn info(&self) -> SessionInfo {
        self.shared.lock().info(self.id)
    }

    /// Changes who may type (docs/CONTRACT.md, "Control modes"): the attached clients whose
    /// role changed are told at the end of the ring, and the task publishes the presence that
    /// changed with it.
    pub fn set_control_mode(&self, mode: ControlMode) -> SessionInfo {
        let mut state = self.shared.lock();
        let end = state.ring.end();
        state.attachments.set_control_mode(mode, end);
        let info = state.info(self.id);
        drop(state);
        self.shared.notify_clients();
        self.shared.task_wake.notify_one();
        info
    }

    /// Who controls the session, for whom control is reserved, and the requests for control
    /// that wait (docs/CONTRACT.md, "Control requests").
    pub fn control_state(&self) -> ControlState {
        self.shared
            .lock()
            .attachments
            .control_state(tokio::time::Instant::now())
    }

    /// A standing request for control by `holder`, made without a stream: the controller's
    /// stream is sent it as a stream's request.
    pub fn request_control_for(&self, holder: TicketHolder) -> Result<ControlRequest, Error> {
        let mut state = self.shared.lock();
        let end = state.ring.end();
        let request = state.attachments.request_control_for(holder, end)?;
        drop(state);
        self.control_changed();
        Ok(request)
    }

    /// `principal`'s answer to request `request_id`, made without a stream (the controller's
    /// principal, or the requester's own withdrawing it); the control state after it.
    pub fn answer_control_as(
        &self,
        principal: &str,
        request_id: u64,
        grant: bool,
    ) -> Result<ControlState, Error> {
        let mut state = self.shared.lock();
        let end = state.ring.end();
        state
            .attachments
            .answer_control_as(principal, request_id, grant, end)?;
        let answer = state.attachments.control_state(tokio::time::Instant::now());
        drop(state);
        self.control_changed();
        Ok(answer)
    }

    /// Wakes whoever reads control: the clients (an event may be queued for them) and the
    /// task (which publishes presence and changes of control, and arms the timeout's timer).
    fn control_changed(&self) {
        self.shared.notify_clients();
        self.shared.task_wake.notify_one();
    }

    /// Whether the session has closed (its task may still be telling its clients).
    pub fn is_closed(&self) -> bool {
        matches!(self.shared.lock().phase, SessionPhase::Closed(_))
    }

    /// Ends the session's process group and closes it.
    pub async fn kill(&self) -> Result<SessionInfo, Error> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Kill { reply }).await?;
        answer.await.map_err(|_| Error::SessionNotFound(self.id))
    }

    /// Restarts the command at the current size; offsets go on.
    pub async fn reset(&self) -> Result<SessionInfo, Error> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Reset {
            generation: None,
            reply,
        })
        .await?;
        answer.await.map_err(|_| Error::SessionNotFound(self.id))?
    }

    /// Attaches a client whose ticket was checked.
    pub async fn attach(self: &Arc<Self>, request: AttachRequest) -> Result<Attachment, Error> {
        let (reply, answer) = oneshot::channel();
        let role = request.role;
        self.send(Command::Attach { request, reply }).await?;
        let attached = answer
            .await
            .map_err(|_| Error::SessionNotFound(self.id))??;
        Ok(Attachment {
            handle: AttachmentHandle {
                session: Arc::clone(self),
                client: attached.client,
                role,
            },
            changed: self.shared.changed.subscribe(),
            attached: Arc::new(Attached {
                session: Arc::clone(self),
                client: attached.client,
            }),
        })
    }

    /// Writes input a call sent (REST or MCP `input`, the broker's SendInput). A lone Ctrl-C goes
    /// ahead of whatever input waits, exactly as one typed on a stream does: an interrupt from
    /// any controller is never held behind a paste the program does not read.
    async fn write_call_input(
        &self,
        data: &[u8],
        still_allowed: impl Fn() -> Result<(), Error>,
    ) -> Result<InputSent, Error> {
        if data == [INTERRUPT] {
            return self
                .shared
                .interrupt(None, still_allowed, self.interrupt_process())
                .await;
        }
        self.shared.write_to_pty(None, data, still_allowed).await
    }

    /// Sends the running process's group SIGINT (an interrupt the terminal cannot take).
    async fn interrupt_process(&self) -> Result<(), Error> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Interrupt { reply }).await?;
        answer.await.map_err(|_| Error::SessionClosed)?
    }

    async fn send(&self, command: Command) -> Result<(), Error> {
        self.commands
            .send(command)
            .await
            .map_err(|_| Error::SessionNotFound(self.id))
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep serving it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn notify_clients(&self) {
        self.changed.send_modify(|_| {});
    }
}

/// One attached client's stream: pulls what it must send next. Dropping it detaches the client,
/// unless its [`AttachedInput`] still lives: then that detaches it.
#[derive(Debug)]
pub struct Attachment {
    handle: AttachmentHandle,
    changed: watch::Receiver<()>,
    attached: Arc<Attached>,
}

/// The input side of an attached client's stream: its handle, holding the client attached, so
/// that input the client sent before its stream went away is still written under its lease when
/// the output side is dropped first (a client that sends and leaves at once).
#[derive(Debug)]
pub struct AttachedInput {
    handle: AttachmentHandle,
    _attached: Arc<Attached>,
}

impl AttachedInput {
    pub fn handle(&self) -> &AttachmentHandle {
        &self.handle
    }
}

/// A client's place among the session's attachments; the last side of its stream that drops it
/// detaches the client.
#[derive(Debug)]
struct Attached {
    session: Arc<Session>,
    client: ClientId,
}

impl Drop for Attached {
    fn drop(&mut self) {
        let shared = &self.session.shared;
        let detached = shared.lock().attachments.detach(self.client);
        if detached {
            shared.task_wake.notify_one();
        }
    }
}

/// What an attached client may ask of the session (input, resize, reset). Cheap to clone; the
/// client stays attached as long as its [`Attachment`] lives.
#[derive(Debug, Clone)]
pub struct AttachmentHandle {
    session: Arc<Session>,
    client: ClientId,
    role: Role,
}

impl Attachment {
    pub fn handle(&self) -> AttachmentHandle {
        self.handle.clone()
    }

    /// The input side of this client's stream, which keeps it attached while it lives.
    pub fn input(&self) -> AttachedInput {
        AttachedInput {
            handle: self.handle.clone(),
            _attached: Arc::clone(&self.attached),
        }
    }

    /// The next event to send this client, waiting for one if needed. `None` once the stream is
    /// over (after exit or close); an error when the client fell too far behind to keep.
    pub async fn next_event(&mut self) -> Option<Result<ClientEvent, Error>> {
        loop {
            self.changed.borrow_and_update();
            match self.poll_event() {
                Poll::Event(event) => return Some(Ok(event)),
                Poll::Finished => return None,
                Poll::Overflowed => {
                    return Some(Err(Error::ClientTooSlow));
                }
                Poll::HandingOver => return Some(Err(Error::HandingOver)),
                Poll::Wait => {}
            }
            if self.changed.changed().await.is_err() {
                return None;
            }
        }
    }

    fn poll_event(&mut self) -> Poll {
        let shared = &self.handle.session.shared;
        let mut state = shared.lock();
        let state = &mut *state;
        let Some(client) = state.attachments.get_mut(self.handle.client) else {
            return Poll::Finished;
        };
        if client.finished {
            return Poll::Finished;
        }
        if client.overflowed {
            return Poll::Overflowed;
        }
        if client.handing_over {
            return Poll::HandingOver;
        }
        if let Some(queued) = client.events.front()
            && queued.after_offset <= client.cursor
        {
            let event = client.events.pop_front().map(|queued| queued.event);
            if matches!(event, Some(ClientEvent::Exit(_) | ClientEvent::Closed(_))) {
                client.finished = true;
            }
            return event.map_or(Poll::Wait, Poll::Event);
        }
        let limit = client
            .events
            .front()
            .map_or(u64::MAX, |queued| queued.after_offset);
        let max_len = limit
            .saturating_sub(client.cursor)
            .min(MAX_OUTPUT_FRAME as u64) as usize;
        match state.ring.read_gathered(client.cursor, max_len) {
            RingRead::Gap { lost, resume_at } => {
                client.cursor = resume_at;
                Poll::Event(ClientEvent::Gap {
                    lost,
                    offset: resume_at,
                })
            }
            RingRead::Data(data) => {
                let offset = client.cursor;
                client.cursor += data.len() as u64;
                let generation = client.generation;
                let is_controller = state.attachments.is_current_controller(generation);
                if is_controller && state.reader_waiting {
                    shared.task_wake.notify_one();
                }
                Poll::Event(ClientEvent::Output { offset, data })
            }
            RingRead::UpToDate => Poll::Wait,
        }
    }
}

enum Poll {
    Event(ClientEvent),
    Wait,
    Finished,
    Overflowed,
    HandingOver,
}

impl AttachmentHandle {
    pub fn role(&self) -> Role {
        self.role
    }

    pub fn session_id(&self) -> Uuid {
        self.session.id
    }

    /// Writes input to the PTY if this client is the current controller. Returns once the PTY
    /// took all of it, with its receipt; while the process does not read its input, that waits
    /// (and so does the client's stream: flow control) until it does or the process ends, and
    /// while a shell shows no first prompt it is held (`session/input.rs`). Empty input writes
    /// nothing and answers once the input before it was written.
    pub async fn write_input(&self, data: Bytes) -> Result<InputSent, Error> {
        self.check_controller(ClientAction::WriteInput)?;
        if data.as_ref() == [INTERRUPT] {
            // Ahead of whatever waits (`session/input.rs`).
            return self
                .session
                .shared
                .interrupt(
                    Some(self.client),
                    || self.check_controller(ClientAction::WriteInput).map(drop),
                    self.session.interrupt_process(),
                )
                .await;
        }
        // Control may have moved while this client waited for the input side.
        self.session
            .shared
            .write_to_pty(Some(self.client), &data, || {
                self.check_controller(ClientAction::WriteInput).map(drop)
            })
            .await
    }

    /// Resizes the PTY if this client is the current controller.
    pub async fn resize(&self, size: TerminalSize) -> Result<(), Error> {
        let generation = self.check_controller(ClientAction::Resize)?;
        let (reply, answer) = oneshot::channel();
        self.session
            .send(Command::Resize {
                generation: Some(generation),
                size,
                reply,
            })
            .await?;
        answer.await.map_err(|_| Error::SessionClosed)?
    }

    /// Resets the session if this client is the current controller.
    pub async fn reset(&self) -> Result<(), Error> {
        let generation = self.check_controller(ClientAction::Reset)?;
        let (reply, answer) = oneshot::channel();
        self.session
            .send(Command::Reset {
                generation: Some(generation),
                reply,
            })
            .await?;
        answer.await.map_err(|_| Error::SessionClosed)?.map(drop)
    }

    /// Asks the controller for control (docs/CONTRACT.md, "Control requests"); the request's
    /// id.
    pub fn request_control(&self) -> Result<u64, Error> {
        let mut state = self.session.shared.lock();
        let end = state.ring.end();
        let request_id = state.attachments.request_control(self.client, end)?;
        drop(state);
        // In the shared mode the request was granted at once: the task publishes the presence
        // and audits the change.
        self.session.control_changed();
        Ok(request_id)
    }

    /// Grants or declines request `request_id`, as the current controller. A grant moves the
    /// lease on the same streams; the task publishes the presence that changed with it.
    pub fn answer_control(&self, request_id: u64, grant: bool) -> Result<(), Error> {
        let mut state = self.session.shared.lock();
        let end = state.ring.end();
        state
            .attachments
            .answer_control(self.client, request_id, grant, end)?;
        drop(state);
        self.session.shared.notify_clients();
        if grant {
            self.session.shared.task_wake.notify_one();
        }
        Ok(())
    }

    /// The controller generation this client holds now (attached with or granted), refused
    /// for a viewer and for a controller that was taken over from.
    fn check_controller(&self, action: ClientAction) -> Result<u64, Error> {
        let state = self.session.shared.lock();
        let Some(generation) = state.attachments.generation_of(self.client) else {
            return Err(Error::ViewerMayNot(action));
        };
        if !state.attachments.is_current_controller(Some(generation)) {
            return Err(Error::TakenOver(action));
        }
        Ok(generation)
    }
}
