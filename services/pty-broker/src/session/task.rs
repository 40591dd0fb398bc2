//! The task that owns one session's PTY from spawn to close: reads output into the ring, hands
//! the input side to the controller's writes, resizes, resets, ends the process group, reaps the
//! idle session and keeps the tombstone of an exited one. It publishes what happens on the
//! [`EventBus`].
//!
//! Idle reaping is this task's: it keeps the session's one idle deadline, armed when the last
//! client leaves and disarmed by an attach, and closes the session itself (reason `idle_reaped`)
//! when the deadline passes. The broker's registry only forgets a session once its task ended.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{BufMut as _, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, sleep_until, timeout, timeout_at};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::handoff::{FrozenSession, Verdict};
use super::recording::{Mark, Recorder};
use super::typing_first::{FloodGate, RecentInput};
use super::{
    AttachRequest, AttachedClient, Command, InputGuard, PtyInput, SessionSettings, Shared,
};
use crate::domain::{
    Attendee, BrokerEventKind, ClientEvent, CloseReason, ExitStatus, Role, SessionInfo,
    SessionPhase,
};
use crate::error::{ClientAction, Error};
use crate::events::EventBus;
use crate::runtime::{GroupSignal, PtyProcess, PtyRuntime, SpawnSpec};

/// Bytes reserved for PTY reads at a time. Chunks are split off this block, so a session's
/// output shares a few blocks rather than allocating per read.
const READ_BLOCK: usize = 16 * 1024;
/// Below this much free space the read buffer gets a new block.
const MIN_READ_SPACE: usize = 2 * 1024;
/// After the session leader exits, output still readable is taken for at most this long ...
const DRAIN_LIMIT: Duration = Duration::from_secs(1);
/// ... and until the PTY stays quiet this long (a background process may hold it open forever).
const DRAIN_QUIET: Duration = Duration::from_millis(100);
/// How often an ending process group is checked for survivors.
const GROUP_POLL: Duration = Duration::from_millis(20);
/// How long processes get to vanish after SIGKILL.
const KILL_CONFIRM: Duration = Duration::from_secs(1);
/// How long the leader's exit status may take to arrive once its group was ended.
const REAP_LIMIT: Duration = Duration::from_secs(1);
/// How long attached clients get to hear that the session closed before their streams end.
const CLOSE_FLUSH: Duration = Duration::from_secs(1);
/// How long a hand-off lets input held for a shell's first prompt reach the PTY before it freezes.
const HELD_INPUT_FLUSH: Duration = Duration::from_secs(1);
/// Activity reaches `WatchEvents` at most this often per session.
const ACTIVITY_INTERVAL: Duration = Duration::from_secs(1);
/// The window of the input tally: each principal's bytes are reported at most once per window.
const TYPED_WINDOW: Duration = Duration::from_secs(1);

/// What a session task needs from the broker around it.
#[derive(Debug, Clone)]
pub(crate) struct TaskContext {
    pub runtime: Arc<dyn PtyRuntime>,
    pub spec: SpawnSpec,
    pub events: EventBus,
    pub shutdown: CancellationToken,
    pub tracker: TaskTracker,
    /// The broker's record of which sessions were typed in lately (`session/typing_first.rs`).
    pub recent_input: Arc<RecentInput>,
}

/// The session task's own state.
#[derive(Debug)]
pub(crate) struct SessionTask {
    id: Uuid,
    shared: Arc<Shared>,
    settings: SessionSettings,
    context: TaskContext,
    commands: mpsc::Receiver<Command>,
    /// Held while no process takes input yet: from creation to the first spawn, and during a
    /// reset or restart.
    input: Option<InputGuard>,
    /// The one idle-reaping deadline; set while no client is attached.
    idle_deadline: Option<Instant>,
    reported_counts: (u32, u32),
    /// Who was attached as last published; and when the attachments next change by
    /// themselves: the first typist stops counting as one, or a request for control is due
    /// (granted by timeout, or ended).
    reported_presence: Vec<Attendee>,
    attachments_due: Option<Instant>,
    /// When the input tally's window ends and it is reported; set when the window opens.
    typed_report_at: Option<Instant>,
    activity: ActivityReport,
    /// Ends the screen's feeder when the session closes.
    screen_done: CancellationToken,
    /// When the tombstone of an exited session taken over from the previous broker process
    /// ends (the rest of the time it had there).
    tombstone_deadline: Option<Instant>,
    /// The session's recorder until it is started; `None` when the session is not recorded.
    recorder: Option<Recorder>,
    /// Ends the recorder when the session closes ...
    recording_done: CancellationToken,
    /// ... which says when it has read the ring to its end.
    recording_drained: Option<oneshot::Receiver<()>>,
}

/// A running process and its PTY's output; its input side is in [`Shared::input`].
pub(crate) struct Pty {
    pub output: Pin<Box<dyn AsyncRead + Send>>,
    /// Cancels writes waiting on this process's input.
    pub input_ended: CancellationToken,
    pub process: Arc<dyn PtyProcess>,
    /// [`crate::runtime::SpawnedPty::output_buffered`]: reads of small pieces may be paced.
    pub output_buffered: bool,
}

/// The frozen session's answer and its verdict, as the task receives them.
type HandOffRequest = (
    oneshot::Sender<Result<FrozenSession, Error>>,
    oneshot::Receiver<Verdict>,
    oneshot::Sender<()>,
);

/// Why an exited session's tombstone ended.
enum TombstoneEnd {
    Close {
        reason: CloseReason,
        reply: Option<oneshot::Sender<SessionInfo>>,
    },
    /// A reset: the same command starts again in place, with the same id and offsets.
    Restart {
        reply: oneshot::Sender<Result<SessionInfo, Error>>,
    },
    /// The next broker process took the session over.
    HandedOver,
}

/// Why `drive` stopped.
enum ProcessEnd {
    Exited(ExitStatus),
    Reset {
        reply: oneshot::Sender<Result<SessionInfo, Error>>,
    },
    Close {
        reason: CloseReason,
        reply: Option<oneshot::Sender<SessionInfo>>,
    },
    HandOff(HandOffRequest),
}

impl SessionTask {
    pub(super) fn new(
        id: Uuid,
        shared: Arc<Shared>,
        settings: SessionSettings,
        context: TaskContext,
        commands: mpsc::Receiver<Command>,
        input: InputGuard,
        recorder: Option<Recorder>,
    ) -> Self {
        Self {
            id,
            shared,
            settings,
            context,
            commands,
            input: Some(input),
            idle_deadline: None,
            reported_counts: (0, 0),
            reported_presence: Vec::new(),
            attachments_due: None,
            typed_report_at: None,
            activity: ActivityReport::default(),
            screen_done: CancellationToken::new(),
            tombstone_deadline: None,
            recorder,
            recording_done: CancellationToken::new(),
            recording_drained: None,
        }
    }

    /// The task of a session taken over from the previous broker process (`Session::adopt`),
    /// whose input side, if it runs, is installed already.
    pub(super) fn adopted(
        id: Uuid,
        shared: Arc<Shared>,
        settings: SessionSettings,
        context: TaskContext,
        commands: mpsc::Receiver<Command>,
        tombstone_deadline: Option<Instant>,
        recorder: Option<Recorder>,
    ) -> Self {
        Self {
            id,
            shared,
            settings,
            context,
            commands,
            input: None,
            idle_deadline: None,
            reported_counts: (0, 0),
            reported_presence: Vec::new(),
            attachments_due: None,
            typed_report_at: None,
            activity: ActivityReport::default(),
            screen_done: CancellationToken::new(),
            tombstone_deadline,
            // Goes on with the previous process's recording, from where it stopped.
            recorder,
            recording_done: CancellationToken::new(),
            recording_drained: None,
        }
    }

    /// Runs a session taken over from the previous broker process to its end: `pty` is its
    /// running process, `None` for an exited session (a tombstone).
    pub async fn run_adopted(mut self, pty: Option<Pty>) {
        self.context.tracker.spawn(super::screen::feed_screen_until(
            Arc::clone(&self.shared),
            self.settings.screen_sleep,
            self.screen_done.clone(),
        ));
        let _feeder = self.screen_done.clone().drop_guard();
        self.start_recorder();
        let _recorder = self.recording_done.clone().drop_guard();
        self.attachments_changed();
        self.serve(pty).await;
    }

    /// Starts the session's recorder, when it records.
    fn start_recorder(&mut self) {
        if let Some(recorder) = self.recorder.take() {
            let (drained, drained_rx) = oneshot::channel();
            self.recording_drained = Some(drained_rx);
            self.context.tracker.spawn(super::recording::record_until(
                Arc::clone(&self.shared),
                self.id,
                recorder,
                self.recording_done.clone(),
                drained,
            ));
        }
    }

    /// Runs the session to its end. `started` hears whether the first spawn worked.
    pub async fn run(mut self, started: oneshot::Sender<Result<SessionInfo, Error>>) {
        self.context.tracker.spawn(super::screen::feed_screen_until(
            Arc::clone(&self.shared),
            self.settings.screen_sleep,
            self.screen_done.clone(),
        ));
        let _feeder = self.screen_done.clone().drop_guard();
        self.start_recorder();
        let _recorder = self.recording_done.clone().drop_guard();
        let spec = self.context.spec.clone();
        let pty = match self.spawn(&spec).await {
            Ok(pty) => pty,
            Err(error) => {
                tracing::info!(session_id = %self.id, %error, "spawn failed");
                // Closed before the caller hears of it: the id is free again at once.
                self.shared.lock().phase = SessionPhase::Closed(CloseReason::SpawnFailed);
                let _ = started.send(Err(error));
                return;
            }
        };
        let info = self.shared.lock().info(self.id);
        tracing::info!(session_id = %self.id, pid = ?info.pid, size = %info.size, "session started");
        self.context
            .events
            .publish(BrokerEventKind::Started(info.clone()));
        // The caller may have gone away (a cancelled Spawn call); the session lives on and the
        // event stream tells its owner about it.
        let _ = started.send(Ok(info));
        self.attachments_changed();
        self.serve(Some(pty)).await;
    }

    /// Serves the session from `pty` (its running process, or `None` once it exited) until it
    /// closes or goes to the next broker process.
    async fn serve(mut self, mut pty: Option<Pty>) {
        loop {
            let Some(running) = pty.as_mut() else {
                match self.keep_tombstone().await {
                    TombstoneEnd::Close { reason, reply } => {
                        self.close(reason, reply).await;
                        return;
                    }
                    TombstoneEnd::HandedOver => return,
                    TombstoneEnd::Restart { reply } => match self.restart_exited().await {
                        Ok(new_pty) => {
                            pty = Some(new_pty);
                            let _ = reply.send(Ok(self.shared.lock().info(self.id)));
                        }
                        Err(error) => {
                            tracing::warn!(session_id = %self.id, %error, "restart after exit failed");
                            let _ = reply.send(Err(error));
                            self.close(CloseReason::SpawnFailed, None).await;
                            return;
                        }
                    },
                }
                continue;
            };
            let end = self.drive(running).await;
            // Whatever ends the process, nobody waits for the echo of input given to it.
            self.shared.typist.forget();
            match end {
                ProcessEnd::Exited(status) => {
                    let ended = pty.take().expect("a process ran");
                    self.take_input(&ended.input_ended).await;
                    self.exited(status, ended);
                }
                ProcessEnd::Reset { reply } => {
                    let old = pty.take().expect("a process ran");
                    match self.reset(old).await {
                        Ok(new_pty) => {
                            pty = Some(new_pty);
                            let _ = reply.send(Ok(self.shared.lock().info(self.id)));
                        }
                        Err(error) => {
                            tracing::warn!(session_id = %self.id, %error, "reset could not restart the command");
                            let _ = reply.send(Err(error));
                            self.close(CloseReason::SpawnFailed, None).await;
                            return;
                        }
                    }
                }
                ProcessEnd::Close { reason, reply } => {
                    let ended = pty.take().expect("a process ran");
                    self.take_input(&ended.input_ended).await;
                    self.end_process(&ended.process).await;
                    drop(ended);
                    self.close(reason, reply).await;
                    return;
                }
                ProcessEnd::HandOff(request) => {
                    let running = pty.as_mut().expect("a process runs");
                    if self.freeze(Some(running), request).await == Verdict::Commit {
                        return;
                    }
                }
            }
        }
    }

    /// Stops reading, answers what the session is, and waits for the verdict: on `Commit` the
    /// next broker process owns the session (and `pty`'s process, whose crash record stays);
    /// on `Resume` (or when the hand-off went away) the session goes on as before.
    async fn freeze(&mut self, pty: Option<&mut Pty>, request: HandOffRequest) -> Verdict {
        let (reply, verdict, let_go) = request;
        // Input held for the shell's first prompt is written now (below), but the wait goes on
        // for what comes later: on the next process, or here again should the hand-off fail.
        let prompt_wait_left = pty
            .as_ref()
            .and_then(|_| self.shared.prompt_gate.time_left());
        // Input waits for the verdict; a write blocked on a process that does not read gives way.
        let mut held = match self.input.take() {
            Some(held) => held,
            None => {
                let input_ended = pty.as_ref().map(|pty| pty.input_ended.clone());
                input_for_freeze(&self.shared, input_ended).await
            }
        };
        let input = held.take();
        let process = match pty.as_ref().map(|pty| pty.process.hand_off()).transpose() {
            Ok(process) => process,
            Err(error) => {
                let _ = reply.send(Err(error.into()));
                self.thaw(pty, held, input);
                return Verdict::Resume;
            }
        };
        // Nothing is read meanwhile: the recorder writes up to the end of the ring and waits
        // for the verdict too.
        let (recording, recorder_verdict) = self.shared.freeze_recording().await.unzip();
        // The screen first (its lock comes before the state's), as of the end of the ring.
        let (screen, activity) = self.shared.snapshot_and_activity().unzip();
        let frozen = {
            let mut state = self.shared.lock();
            state.attachments.end_every_stream();
            FrozenSession {
                id: self.id,
                spec: self.context.spec.clone(),
                phase: state.phase,
                size: state.size,
                ring_start: state.ring.start(),
                ring: state.ring.chunks().cloned().collect(),
                exit: state.exit,
                pid: state.pid,
                created_at: state.created_at,
                last_activity_at: state.last_activity_at,
                title: state.title.clone(),
                last_bell_at: state.last_bell_at,
                controller_generation: state.attachments.generation(),
                control_mode: state.attachments.control_mode(),
                control: state.attachments.freeze_control(Instant::now()),
                screen,
                activity,
                tombstone_left: None,
                process,
                recording,
                prompt_wait_left,
            }
        };
        self.shared.notify_clients();
        let frozen = FrozenSession {
            tombstone_left: self
                .tombstone_deadline
                .map(|deadline| deadline.saturating_duration_since(Instant::now())),
            ..frozen
        };
        if reply.send(Ok(frozen)).is_err() {
            self.thaw(pty, held, input);
            self.hold_input_again(prompt_wait_left);
            return Verdict::Resume;
        }
        match verdict.await {
            Ok(Verdict::Commit) => {
                if let Some(pty) = &pty {
                    pty.process.handed_over();
                }
                if let Some(recorder) = recorder_verdict {
                    let _ = recorder.send(Verdict::Commit);
                }
                let _ = let_go.send(());
                tracing::info!(session_id = %self.id, "session handed to the next broker process");
                Verdict::Commit
            }
            Ok(Verdict::Resume) | Err(_) => {
                tracing::info!(session_id = %self.id, "hand-off failed: the session goes on here");
                self.thaw(pty, held, input);
                self.hold_input_again(prompt_wait_left);
                Verdict::Resume
            }
        }
    }

    /// After a hand-off that did not happen, holds input again for what was left of the wait
    /// for the shell's first prompt (the freeze wrote what was held); the screen lets it go at
    /// the prompt's mark, should that have come meanwhile.
    fn hold_input_again(&self, prompt_wait_left: Option<Duration>) {
        if let Some(left) = prompt_wait_left {
            self.shared.prompt_gate.hold_for(left);
        }
    }

    /// Gives the input side back after a hand-off that did not happen.
    fn thaw(&mut self, pty: Option<&mut Pty>, mut held: InputGuard, input: Option<PtyInput>) {
        match (pty, input) {
            (Some(pty), Some(input)) => {
                let ended = CancellationToken::new();
                pty.input_ended = ended.clone();
                *held = Some(PtyInput {
                    writer: input.writer,
                    ended,
                });
            }
            // An exited session takes no input.
            _ => *held = None,
        }
        drop(held);
    }

    /// Starts `spec` and gives its input side to the controller's writes.
    async fn spawn(&mut self, spec: &SpawnSpec) -> Result<Pty, Error> {
        let mut input = match self.input.take() {
            Some(held) => held,
            None => Arc::clone(&self.shared.input).lock_owned().await,
        };
        // On failure the guard goes with `None` in it: input is refused as for an exited process.
        let spawned = self.context.runtime.spawn(spec).await?;
        self.shared.start_activity(spawned.shell_integration);
        // Input waits for the shell's first prompt, where its marks will be read to show it.
        if spawned.shell_integration.is_some() && self.shared.screen.is_some() {
            self.shared.prompt_gate.hold();
        }
        let process: Arc<dyn PtyProcess> = Arc::from(spawned.process);
        {
            let mut state = self.shared.lock();
            state.phase = SessionPhase::Running;
            state.pid = process.pid();
        }
        let input_ended = CancellationToken::new();
        *input = Some(PtyInput {
            writer: spawned.input,
            ended: input_ended.clone(),
        });
        Ok(Pty {
            output: spawned.output,
            input_ended,
            process,
            output_buffered: spawned.output_buffered,
        })
    }

    /// Takes the input side back before the process is ended or replaced, and holds it (input
    /// sent meanwhile waits for the next process, or finds none). A write blocked on the old
    /// process gives way first.
    async fn hold_input(&mut self, input_ended: Option<&CancellationToken>) {
        if let Some(ended) = input_ended {
            ended.cancel();
        }
        let mut held = match self.input.take() {
            Some(held) => held,
            None => Arc::clone(&self.shared.input).lock_owned().await,
        };
        *held = None;
        self.input = Some(held);
    }

    /// Takes the input side away for good: the process ended and no other follows now.
    async fn take_input(&mut self, input_ended: &CancellationToken) {
        self.hold_input(Some(input_ended)).await;
        self.input = None;
    }

    /// Serves one process until it exits or must end.
    ///
    /// The loop runs once for every read of output and every keystroke's wake, so what it waits
    /// on is made once and kept: the shutdown, the task's wake, and one timer set to the first of
    /// its deadlines (idle reaping, the activity report, the attachments' next change, the input
    /// tally's window), moved only when that one changes. Made afresh at every turn, each would
    /// be registered with its `Notify` or the runtime's timer and taken off it again, for every
    /// keystroke of every session.
    async fn drive(&mut self, pty: &mut Pty) -> ProcessEnd {
        let Pty {
            output,
            process,
            output_buffered,
            ..
        } = pty;
        let mut wait = process.wait();
        let mut read_buf = BytesMut::new();
        let mut output_ended = false;
        let mut pacer = ReadPacer::new(*output_buffered);
        let mut streak = ReadStreak::default();
        let mut gate = FloodGate::new(self.settings.flood_rate_while_typing);
        let shutdown = self.context.shutdown.clone();
        let mut shutdown = std::pin::pin!(shutdown.cancelled());
        let shared = Arc::clone(&self.shared);
        let mut woken = std::pin::pin!(shared.task_wake.notified());
        let mut timer = std::pin::pin!(sleep_until(Instant::now()));
        loop {
            if streak.turn_is_due() {
                // Between two slices of a flood, the worker runs what else is ready and looks
                // for I/O (a keystroke on another session) before this task reads on.
                tokio::task::yield_now().await;
            }
            let allowance = if output_ended {
                0
            } else {
                self.read_allowance()
            };
            if allowance > 0 && read_buf.capacity() - read_buf.len() < MIN_READ_SPACE {
                read_buf.reserve(pacer.read_block());
            }
            let offered = (read_buf.capacity() - read_buf.len()).min(allowance);
            let idle_deadline = self.idle_deadline;
            let activity_due = self.activity.due();
            let attachments_due = self.attachments_due;
            let typed_report_at = self.typed_report_at;
            let due = [
                idle_deadline,
                activity_due,
                attachments_due,
                typed_report_at,
            ]
            .into_iter()
            .flatten()
            .min();
            if let Some(due) = due
                && timer.deadline() != due
            {
                timer.as_mut().reset(due);
            }
            tokio::select! {
                biased;
                () = &mut shutdown => {
                    return ProcessEnd::Close { reason: CloseReason::Shutdown, reply: None };
                }
                command = self.commands.recv() => {
                    let Some(command) = command else {
                        return ProcessEnd::Close { reason: CloseReason::Killed, reply: None };
                    };
                    if let Command::HandOff { reply, verdict, let_go } = command {
                        return ProcessEnd::HandOff((reply, verdict, let_go));
                    }
                    if let Some(end) = self.command_while_running(command, process.as_ref()).await {
                        return end;
                    }
                }
                () = &mut woken => {
                    woken.set(shared.task_wake.notified());
                    let state = self.shared.lock();
                    if state.input_since_report || state.marks_since_report {
                        self.activity.mark();
                    }
                    // Input opens the tally's window, reported when it ends.
                    if state.input_since_report && self.typed_report_at.is_none() {
                        self.typed_report_at = Some(Instant::now() + TYPED_WINDOW);
                    }
                    drop(state);
                    self.report_terminal();
                    self.attachments_changed();
                }
                read = noting_wait(pacer.paced(gate.not_before(), read_some(output, &mut read_buf, allowance))), if allowance > 0 => {
                    let (read, waited) = read;
                    match read {
                        Ok(0) => output_ended = true,
                        Ok(read) => {
                            let last_input_at = self.push_output(read_buf.split().freeze());
                            let now = Instant::now();
                            pacer.read(read, offered, last_input_at, now);
                            gate.read(read, last_input_at, &self.shared.typist, now);
                            streak.read(read, waited);
                        }
                        Err(error) => {
                            tracing::debug!(session_id = %self.id, %error, "pty output ended with an error");
                            output_ended = true;
                        }
                    }
                }
                status = &mut wait => {
                    let status = status.unwrap_or_else(|error| {
                        tracing::warn!(session_id = %self.id, %error, "exit status unknown");
                        ExitStatus::exited(-1)
                    });
                    if !output_ended {
                        self.drain_output(output, &mut read_buf).await;
                    }
                    return ProcessEnd::Exited(status);
                }
                () = &mut timer, if due.is_some() => {
                    let now = Instant::now();
                    let past = |deadline: Option<Instant>| deadline.is_some_and(|at| at <= now);
                    if past(idle_deadline) {
                        tracing::info!(session_id = %self.id, "no client attached for the detached timeout");
                        return ProcessEnd::Close { reason: CloseReason::IdleReaped, reply: None };
                    }
                    if past(activity_due) {
                        self.report_activity();
                    }
                    if past(attachments_due) {
                        self.attachments_changed();
                    }
                    if past(typed_report_at) {
                        self.report_typed();
                    }
                }
            }
        }
    }

    async fn command_while_running(
        &mut self,
        command: Command,
        process: &dyn PtyProcess,
    ) -> Option<ProcessEnd> {
        match command {
            Command::Attach { request, reply } => {
                let attached = self.attach(request, Some(process)).await;
                let _ = reply.send(attached);
            }
            Command::Resize {
                generation,
                size,
                reply,
            } => {
                let result = if self
                    .shared
                    .lock()
                    .attachments
                    .is_current_controller(generation)
                {
                    self.resize(size, process).await;
                    Ok(())
                } else {
                    Err(Error::TakenOver(ClientAction::Resize))
                };
                let _ = reply.send(result);
            }
            Command::Reset { generation, reply } => {
                if generation.is_some()
                    && !self
                        .shared
                        .lock()
                        .attachments
                        .is_current_controller(generation)
                {
                    let _ = reply.send(Err(Error::TakenOver(ClientAction::Reset)));
                } else {
                    return Some(ProcessEnd::Reset { reply });
                }
            }
            Command::Interrupt { reply } => {
                let signalled =
                    process
                        .signal_group(GroupSignal::Interrupt)
                        .await
                        .map_err(|error| {
                            tracing::warn!(session_id = %self.id, %error, "interrupt failed");
                            Error::InterruptNotSent(error)
                        });
                let _ = reply.send(signalled);
            }
            Command::Kill { reply } => {
                return Some(ProcessEnd::Close {
                    reason: CloseReason::Killed,
                    reply: Some(reply),
                });
            }
            Command::HandOff {
                reply,
                verdict,
                let_go,
            } => {
                return Some(ProcessEnd::HandOff((reply, verdict, let_go)));
            }
        }
        None
    }

    /// Registers a client. A controller's size is applied first, so its `Connected` already
    /// shows it. `process` is `None` once the process has exited.
    async fn attach(
        &mut self,
        request: AttachRequest,
        process: Option<&dyn PtyProcess>,
    ) -> Result<AttachedClient, Error> {
        // A client that may see only the present names no point in the past: nothing of the
        // ring is replayed to it, and no gap tells it how much there was.
        let request = AttachRequest {
            since: request.since.filter(|_| !request.present_only),
            ..request
        };
        {
            let state = self.shared.lock();
            let end = state.ring.end();
            if let Some(since) = request.since
                && since > end
            {
                return Err(Error::ResumeBeyondOutput { since, end });
            }
            // Every viewer is a queue and a stream the broker serves: bounded per session.
            let (_, viewers) = state.attachments.counts();
            if request.role == Role::Viewer
                && viewers as usize >= ptyhub_wire::limits::MAX_VIEWERS_PER_SESSION
            {
                return Err(Error::TooManyViewers(viewers as usize));
            }
        }
        if request.role == Role::Controller
            && let (Some(size), Some(process)) = (request.size, process)
        {
            self.resize(size, process).await;
        }
        // A snapshot stands in for the replay when the client asked for one or the ring no
        // longer holds where it would resume. The task reads nothing meanwhile, so the snapshot is
        // as of the end of the ring, where the client's output then starts.
        let wants_snapshot = request.snapshot
            || request
                .since
                .is_some_and(|since| since < self.shared.lock().ring.start());
        let snapshot = if request.present_only {
            self.shared.present_snapshot()
        } else if wants_snapshot {
            self.shared.snapshot()
        } else {
            None
        };
        let attached = {
            let mut state = self.shared.lock();
            let state = &mut *state;
            let start = state.ring.start();
            let end = state.ring.end();
            let since = match &snapshot {
                Some(snapshot) => snapshot.offset,
                // Without screens the present is only what comes next.
                None if request.present_only => end,
                None => request.since.unwrap_or(start),
            };
            let attached = state.attachments.attach(
                request.role,
                request.holder.clone(),
                request.may_control,
                since,
                end,
            );
            state.attachments.push_event(
                attached.client,
                0,
                ClientEvent::Connected {
                    role: request.role,
                    offset: since.max(start),
                    size: state.size,
                    phase: state.phase,
                },
            );
            // The shared mode makes a viewer whose ticket admits a controller one: it is told
            // as it would be of a grant, so that a client that follows `RoleChanged` needs
            // nothing else.
            if request.role == Role::Viewer && attached.generation.is_some() {
                state.attachments.push_event(
                    attached.client,
                    0,
                    ClientEvent::RoleChanged(Role::Controller),
                );
            }
            if let Some(snapshot) = snapshot {
                debug_assert_eq!(
                    snapshot.offset, end,
                    "a snapshot is as of the end of the ring"
                );
                if let Some(asked) = request.since
                    && asked < snapshot.offset
                {
                    // The raw bytes the snapshot stands in for.
                    state.attachments.push_event(
                        attached.client,
                        0,
                        ClientEvent::Gap {
                            lost: snapshot.offset - asked,
                            offset: snapshot.offset,
                        },
                    );
                }
                state
                    .attachments
                    .push_event(attached.client, 0, ClientEvent::Snapshot(snapshot));
            }
            if let (SessionPhase::Exited, Some(exit)) = (state.phase, state.exit) {
                state
                    .attachments
                    .push_event(attached.client, end, ClientEvent::Exit(exit));
            }
            attached
        };
        if let Some(previous) = attached.superseded {
            tracing::info!(session_id = %self.id, ?previous, "controller taken over");
        }
        self.shared.notify_clients();
        self.attachments_changed();
        Ok(AttachedClient {
            client: attached.client,
        })
    }

    /// Applies `size` to the PTY and tells every client. A failed resize is logged and never
    /// ends the session.
    async fn resize(&mut self, size: crate::domain::TerminalSize, process: &dyn PtyProcess) {
        if let Err(error) = process.resize(size).await {
            tracing::warn!(session_id = %self.id, %error, "resize failed");
            return;
        }
        self.shared.resize_screen(size);
        let mut state = self.shared.lock();
        if state.size != size {
            state.size = size;
            let end = state.ring.end();
            state.attachments.broadcast(end, &ClientEvent::Resize(size));
            drop(state);
            self.shared.record_mark(Mark::Resize {
                offset: end,
                at: Instant::now(),
                size,
            });
            self.shared.notify_clients();
        }
    }

    /// How much may be read now (flow control), noting whether the task waits for the controller
    /// or the screen; a screen it waits for, or one that fell half a ring behind, has its feeder
    /// woken (the latter so that the task need not wait for it).
    fn read_allowance(&self) -> usize {
        let screens = self.shared.screen.is_some();
        let mut state = self.shared.lock();
        let allowance = state.read_allowance(screens);
        let held_for_screen = allowance == 0 && screens && state.read_allowance(false) > 0;
        if held_for_screen && !state.reader_waiting {
            state.reads_held_for_screen += 1;
        }
        state.reader_waiting = allowance == 0;
        let wake_feeder = screens && (allowance == 0 || state.feeder_falls_behind());
        drop(state);
        if wake_feeder {
            self.shared.feeder_wake.notify_one();
        }
        allowance
    }

    /// Appends a chunk to the ring and wakes whoever waits for output: the clients, and the
    /// screen's feeder and the recorder unless they are batching (which neither does for long);
    /// a batching recorder only when output piles up. A recorded session notes when the chunk
    /// was read, which is the time its recording gives it.
    ///
    /// Returns when input last reached the PTY, for the read pacer.
    fn push_output(&mut self, chunk: Bytes) -> Option<Instant> {
        let (wake_recorder, last_input_at) = {
            let mut state = self.shared.lock();
            let state = &mut *state;
            let now = Instant::now();
            let offset = state.ring.push(chunk);
            state.last_activity_at = SystemTime::now();
            state.last_output_at = now;
            let wake_recorder = state.output_timeline.as_mut().is_some_and(|timeline| {
                timeline.pushed(offset, now, state.ring.end(), state.ring.capacity())
            });
            (wake_recorder, state.last_input_at)
        };
        self.shared.notify_clients();
        if wake_recorder {
            self.shared.wake_recorder();
        }
        self.activity.mark();
        last_input_at
    }

    /// Takes what is still readable after the leader exited: until the end of output, a quiet
    /// moment or a time limit, whichever comes first, and never beyond what flow control allows.
    async fn drain_output(
        &mut self,
        output: &mut Pin<Box<dyn AsyncRead + Send>>,
        read_buf: &mut BytesMut,
    ) {
        let deadline = Instant::now() + DRAIN_LIMIT;
        loop {
            let allowance = self.read_allowance();
            if allowance == 0 {
                break;
            }
            if read_buf.capacity() - read_buf.len() < MIN_READ_SPACE {
                read_buf.reserve(READ_BLOCK);
            }
            let quiet_until = (Instant::now() + DRAIN_QUIET).min(deadline);
            match timeout_at(quiet_until, read_some(output, read_buf, allowance)).await {
                Ok(Ok(read)) if read > 0 => {
                    self.push_output(read_buf.split().freeze());
                }
                _ => break,
            }
        }
    }

    /// Records the exit, tells every client, and ends what is left of the process group.
    fn exited(&mut self, status: ExitStatus, pty: Pty) {
        self.shared.activity_exited();
        {
            let mut state = self.shared.lock();
            state.phase = SessionPhase::Exited;
            state.exit = Some(status);
            state.pid = None;
            let end = state.ring.end();
            state.attachments.broadcast(end, &ClientEvent::Exit(status));
        }
        self.shared.notify_clients();
        tracing::info!(session_id = %self.id, code = status.code, signal = ?status.signal, "process exited");
        self.context.events.publish(BrokerEventKind::Exited {
            session_id: self.id,
            exit: status,
        });
        self.report_activity();
        self.report_typed();
        let Pty { process, .. } = pty;
        let grace = self.settings.kill_grace;
        let session_id = self.id;
        // Background processes may still hold the terminal; they go now, without delaying the
        // exit report.
        self.context.tracker.spawn(async move {
            end_process_group(process.as_ref(), grace, session_id).await;
        });
    }

    /// Keeps an exited session's output and status for late attaches until the tombstone
    /// period ends, a kill, shutdown, or a reset that starts the command again.
    async fn keep_tombstone(&mut self) -> TombstoneEnd {
        let close = |reason, reply| TombstoneEnd::Close { reason, reply };
        let deadline = self
            .tombstone_deadline
            .unwrap_or_else(|| Instant::now() + self.settings.tombstone);
        self.tombstone_deadline = Some(deadline);
        loop {
            let attachments_due = self.attachments_due;
            tokio::select! {
                biased;
                () = self.context.shutdown.cancelled() => return close(CloseReason::Shutdown, None),
                command = self.commands.recv() => match command {
                    None => return close(CloseReason::Killed, None),
                    Some(Command::Kill { reply }) => return close(CloseReason::Killed, Some(reply)),
                    Some(Command::Attach { request, reply }) => {
                        let attached = self.attach(request, None).await;
                        let _ = reply.send(attached);
                    }
                    Some(Command::Resize { reply, .. }) => {
                        let _ = reply.send(Err(Error::ProcessExited));
                    }
                    Some(Command::Interrupt { reply }) => {
                        let _ = reply.send(Err(Error::ProcessExited));
                    }
                    Some(Command::HandOff { reply, verdict, let_go }) => {
                        if self.freeze(None, (reply, verdict, let_go)).await == Verdict::Commit {
                            return TombstoneEnd::HandedOver;
                        }
                    }
                    Some(Command::Reset { generation, reply }) => {
                        if generation.is_none()
                            || self.shared.lock().attachments.is_current_controller(generation)
                        {
                            return TombstoneEnd::Restart { reply };
                        }
                        let _ = reply.send(Err(Error::TakenOver(ClientAction::Reset)));
                    }
                },
                () = self.shared.task_wake.notified() => self.attachments_changed(),
                () = sleep_until(attachments_due.unwrap_or(deadline)), if attachments_due.is_some() => {
                    self.attachments_changed();
                }
                () = sleep_until(deadline) => return close(CloseReason::Exited, None),
            }
        }
    }

    /// Ends the process group and starts the command again at the current size.
    async fn reset(&mut self, mut pty: Pty) -> Result<Pty, Error> {
        // Clients clear their terminals when they hear `Resetting`; the screen does at the same
        // offset.
        self.shared.reset_screen();
        let (size, end) = {
            let mut state = self.shared.lock();
            state.phase = SessionPhase::Resetting;
            let end = state.ring.end();
            state.attachments.broadcast(end, &ClientEvent::Resetting);
            (state.size, end)
        };
        self.record_reset(end);
        self.shared.notify_clients();
        tracing::info!(session_id = %self.id, "resetting");
        self.hold_input(Some(&pty.input_ended)).await;
        self.end_process(&pty.process).await;
        let mut read_buf = BytesMut::new();
        self.drain_output(&mut pty.output, &mut read_buf).await;
        drop(pty);
        self.start_again(size).await
    }

    /// Starts the command of an exited session again, in place: same id, offsets go on.
    async fn restart_exited(&mut self) -> Result<Pty, Error> {
        self.tombstone_deadline = None;
        self.hold_input(None).await;
        self.shared.reset_screen();
        let (size, end) = {
            let mut state = self.shared.lock();
            state.phase = SessionPhase::Resetting;
            state.exit = None;
            let end = state.ring.end();
            state.attachments.broadcast(end, &ClientEvent::Resetting);
            (state.size, end)
        };
        self.record_reset(end);
        self.shared.notify_clients();
        tracing::info!(session_id = %self.id, "restarting after exit");
        self.start_again(size).await
    }

    /// Spawns the session's command at `size` and tells clients and subscribers it runs.
    async fn start_again(&mut self, size: crate::domain::TerminalSize) -> Result<Pty, Error> {
        // The old process may have written on after `resetting` until it ended (that output was
        // drained into the ring): the new process draws on a clean screen all the same, as
        // clients clear theirs again at its `connected`.
        self.shared.reset_screen();
        let mut spec = self.context.spec.clone();
        spec.size = size;
        let new_pty = self.spawn(&spec).await?;
        let info = {
            let mut state = self.shared.lock();
            let end = state.ring.end();
            let size = state.size;
            state
                .attachments
                .broadcast_connected(end, |role| ClientEvent::Connected {
                    role,
                    offset: end,
                    size,
                    phase: SessionPhase::Running,
                });
            state.info(self.id)
        };
        self.shared.notify_clients();
        self.context
            .events
            .publish(BrokerEventKind::ResetDone(info));
        Ok(new_pty)
    }

    /// Ends the running process's group and collects the leader's exit status.
    async fn end_process(&mut self, process: &Arc<dyn PtyProcess>) {
        end_process_group(process.as_ref(), self.settings.kill_grace, self.id).await;
        if timeout(REAP_LIMIT, process.wait()).await.is_err() {
            tracing::warn!(session_id = %self.id, "session leader did not report its exit");
        }
    }

    /// Marks the session closed (lookups stop finding it) and tells clients and subscribers.
    async fn close(&mut self, reason: CloseReason, reply: Option<oneshot::Sender<SessionInfo>>) {
        self.screen_done.cancel();
        let info = {
            let mut state = self.shared.lock();
            state.phase = SessionPhase::Closed(reason);
            state.pid = None;
            state
                .attachments
                .broadcast_final(&ClientEvent::Closed(reason));
            state.info(self.id)
        };
        self.shared.notify_clients();
        // Lookups no longer find the session from here on (its phase is closed); the broker
        // removes it from the registry once this task ends.
        self.context.events.publish(BrokerEventKind::Closed {
            session_id: self.id,
            reason,
        });
        tracing::info!(session_id = %self.id, reason = reason.as_str(), "session closed");
        if let Some(reply) = reply {
            let _ = reply.send(info);
        }
        self.finish_recording().await;
        // Clients that keep reading hear `Closed` and leave; a stalled one is cut off, and the
        // output it never read is not kept for it.
        let _ = timeout(CLOSE_FLUSH, async {
            while !self.shared.lock().attachments.is_empty() {
                self.shared.task_wake.notified().await;
            }
        })
        .await;
        let freed = {
            let mut state = self.shared.lock();
            let held = state.ring.len();
            state.ring.clear();
            held
        };
        // What the ring held stays with the allocator otherwise.
        crate::memory::release_freed_soon(freed);
    }

    /// Tells the recorder that a reset starts at `offset` (a marker between the two processes).
    fn record_reset(&self, offset: u64) {
        self.shared.record_mark(Mark::Reset {
            offset,
            at: Instant::now(),
        });
    }

    /// Ends the recorder and waits (bounded) until it has read the ring to its end, which the
    /// close is about to clear. Publishing the file happens afterwards, on the recorder's task.
    async fn finish_recording(&mut self) {
        self.recording_done.cancel();
        if let Some(drained) = self.recording_drained.take()
            && timeout(CLOSE_FLUSH, drained).await.is_err()
        {
            tracing::warn!(session_id = %self.id, "the recorder did not catch up before the close");
        }
    }

    /// Re-reads who is attached: publishes a changed presence (with the counts) and arms or
    /// disarms the idle timer.
    fn attachments_changed(&mut self) {
        self.settle_control();
        let (counts, nobody) = {
            let state = self.shared.lock();
            (state.attachments.counts(), state.attachments.is_empty())
        };
        if counts != self.reported_counts {
            self.reported_counts = counts;
            // A client coming or going is activity too (docs/CONTRACT.md): it goes out with the
            // next batched activity report, off every client's stream.
            self.shared.lock().last_activity_at = SystemTime::now();
            self.activity.mark();
        }
        self.publish_presence_if_changed();
        if !nobody {
            self.idle_deadline = None;
        } else if self.idle_deadline.is_none() {
            self.idle_deadline = Some(Instant::now() + self.settings.detached_timeout);
        }
    }

    /// Grants a request for control that waited the instance's grant timeout out (ending
    /// standing requests and a reservation past their time), and publishes every change of
    /// control since the last look, for the audit trail.
    fn settle_control(&mut self) {
        let mut state = self.shared.lock();
        let end = state.ring.end();
        let changed = state.attachments.grant_overdue(Instant::now(), end);
        let changes = state.attachments.take_control_changes();
        drop(state);
        if changed {
            self.shared.notify_clients();
        }
        for change in changes {
            self.context
                .events
                .publish(BrokerEventKind::ControlChanged {
                    session_id: self.id,
                    change,
                });
        }
    }

    /// Publishes who is attached when that changed since the last report (a client came or
    /// went, control moved, someone started or stopped typing), and arms the timer for the next
    /// typist to stop.
    fn publish_presence_if_changed(&mut self) {
        let now = Instant::now();
        let (presence, counts, typing_ends_at, control_due) = {
            let state = self.shared.lock();
            (
                state.attachments.presence(now),
                state.attachments.counts(),
                state.attachments.typing_ends_at(now),
                state.attachments.next_control_deadline(),
            )
        };
        self.attachments_due = typing_ends_at.into_iter().chain(control_due).min();
        if presence == self.reported_presence {
            return;
        }
        self.reported_presence = presence.clone();
        self.context
            .events
            .publish(BrokerEventKind::AttachmentsChanged {
                session_id: self.id,
                controllers: counts.0,
                viewers: counts.1,
                presence,
            });
    }

    /// Publishes the input tally of the window that ended: per principal and surface, how many
    /// bytes (never which).
    fn report_typed(&mut self) {
        self.typed_report_at = None;
        let Some(tally) = self.shared.lock().attachments.take_typed() else {
            return;
        };
        for (holder, bytes) in tally.bytes {
            self.context.events.publish(BrokerEventKind::InputTyped {
                session_id: self.id,
                principal: holder.principal,
                surface: holder.surface,
                bytes,
                since: tally.since,
            });
        }
    }

    /// Publishes what the terminal is doing when it changed: at once, since a client waiting
    /// for a command's end or a prompt waits on it.
    fn report_terminal(&mut self) {
        let (terminal, commands) = {
            let mut state = self.shared.lock();
            if !std::mem::take(&mut state.terminal_changed) {
                return;
            }
            (
                state.terminal.clone(),
                std::mem::take(&mut state.terminal_commands),
            )
        };
        self.context.events.publish(BrokerEventKind::Terminal {
            session_id: self.id,
            terminal,
            commands,
        });
    }

    fn report_activity(&mut self) {
        if !self.activity.pending {
            return;
        }
        let (last_activity_at, output_offset, title, last_bell_at) = {
            let mut state = self.shared.lock();
            state.input_since_report = false;
            state.marks_since_report = false;
            (
                state.last_activity_at,
                state.ring.end(),
                state.title.clone(),
                state.last_bell_at,
            )
        };
        self.activity.reported();
        self.context.events.publish(BrokerEventKind::Activity {
            session_id: self.id,
            last_activity_at,
            output_offset,
            title,
            last_bell_at,
        });
    }
}

/// Batches activity: at most one report per interval, and only after something happened.
#[derive(Debug, Default)]
struct ActivityReport {
    pending: bool,
    last_report: Option<Instant>,
}

impl ActivityReport {
    fn mark(&mut self) {
        self.pending = true;
    }

    fn due(&self) -> Option<Instant> {
        if !self.pending {
            return None;
        }
        Some(
            self.last_report
                .map_or_else(Instant::now, |last| last + ACTIVITY_INTERVAL),
        )
    }

    fn reported(&mut self) {
        self.pending = false;
        self.last_report = Some(Instant::now());
    }
}

/// Paces the reads of output that flows in pieces, where the output is buffered on its way
/// ([`crate::runtime::SpawnedPty::output_buffered`]: a container's). During a flood, a
/// container's output reaches the broker through the engine in pieces of a few bytes to 8 KiB,
/// a burst of them every 100 µs or so; read as they come, each costs a read, a ring chunk, a
/// screen wake and a frame to every client (with a wake of each task on its way), thousands of
/// wakeups a second on the cores the engine needs to produce them.
///
/// Once a read comes less than [`PACE`] after the one before it, or after the moment the pace
/// allowed it, and takes all there was (less than the room it had), the next read waits until
/// [`PACE`] after it and takes what arrived meanwhile: one read, one chunk and one frame a tick
/// for as long as the output flows, with blocks of [`PACED_READ_BLOCK`] to read into. A held
/// read counts from the moment it was allowed, give or take the timer's tick, not from when it
/// ran: a socket a read emptied is ready again only at the runtime's next look, and other wakes
/// of the task come between.
///
/// Never paced: the first read after a pause, a read that filled its room (a producer that
/// outruns the pace is read as fast as it writes), a held read whose output came later (the
/// flow stopped), and any read within [`ANSWER_WINDOW`] of input, which is taken as the input's
/// answer (echo, a prompt, a program driven keystroke by keystroke).
#[derive(Debug)]
struct ReadPacer {
    enabled: bool,
    last_read: Option<Instant>,
    next_read: Option<Instant>,
    /// The last read was part of a flow the pacer holds reads of (paced or not: one that
    /// filled its room is followed at once, and the flow goes on).
    flowing: bool,
}

/// How close two reads are for the output to count as flowing, and how long the next read then
/// waits (tokio's timer rounds it up to its millisecond tick).
const PACE: Duration = Duration::from_micros(500);
/// tokio's timer tick: a sleep ends at the first tick after its deadline.
const TIMER_TICK: Duration = Duration::from_millis(1);
/// The block the read buffer gets when it runs out of room while output flows and is paced:
/// what piles up in a tick at 64 MiB/s (twice the fastest container flood measured here), and
/// one output frame at most. Like [`READ_BLOCK`], it is replaced only once less than
/// [`MIN_READ_SPACE`] is left, so the chunks the ring keeps never hold on to much more than
/// their bytes.
const PACED_READ_BLOCK: usize = 64 * 1024;
/// Output read this soon after input is never paced.
const ANSWER_WINDOW: Duration = Duration::from_millis(100);

impl ReadPacer {
    /// A pacer for output that is buffered on its way (`enabled`), else one that never waits.
    fn new(enabled: bool) -> Self {
        Self {
            enabled,
            last_read: None,
            next_read: None,
            flowing: false,
        }
    }

    /// The block the read buffer gets when it runs out of room.
    fn read_block(&self) -> usize {
        if self.flowing {
            PACED_READ_BLOCK
        } else {
            READ_BLOCK
        }
    }

    /// `read`, once the pace allows it, and not before `held_until` (the [`FloodGate`]'s).
    async fn paced<T>(&self, held_until: Option<Instant>, read: impl Future<Output = T>) -> T {
        if let Some(at) = self.next_read.max(held_until) {
            sleep_until(at).await;
        }
        read.await
    }

    /// Notes a read of `len` bytes, done at `now` with room for `offered`, with input last
    /// written at `last_input_at`.
    fn read(&mut self, len: usize, offered: usize, last_input_at: Option<Instant>, now: Instant) {
        // Soon after the read before it, or after the moment the pace let this one go (the
        // timer's wake comes up to a tick later).
        let flowing = self.last_read.is_some_and(|last| now - last < PACE)
            || self
                .next_read
                .is_some_and(|allowed| now - allowed < PACE + TIMER_TICK);
        let took_all = len < offered;
        let answering = last_input_at.is_some_and(|input| now - input < ANSWER_WINDOW);
        self.flowing = self.enabled && flowing && !answering;
        self.next_read = (self.flowing && took_all).then(|| now + PACE);
        self.last_read = Some(now);
    }
}

/// Bounds how much output the task reads in one go while the PTY always has more: a flood read
/// as fast as it comes would otherwise keep the worker thread for up to tokio's budget of 128
/// reads (half a MiB) per poll, and the tasks of a keystroke on another session, woken by I/O
/// that the worker only looks for between polls, would wait behind it. After
/// [`FLOOD_SLICE_BYTES`] read without the read ever having to wait, the task yields once: the
/// worker runs what else is ready and polls for I/O, then this task reads on. Output that comes
/// at typing speed never fills a slice (each read waits for its output), so it never yields.
#[derive(Debug, Default)]
struct ReadStreak {
    /// Bytes read in a row without a read having to wait, since the last yield.
    bytes: usize,
}

/// Output read in a row without waiting after which the session task gives its worker up once.
/// Nine full PTY reads (a PTY gives at most 4095 bytes a read): a slice costs the worker tens
/// of microseconds, and a yield a few, so a flood's throughput barely notices.
const FLOOD_SLICE_BYTES: usize = 32 * 1024;

impl ReadStreak {
    /// Notes a read of `len` bytes; `waited` says whether it had to wait for its output.
    fn read(&mut self, len: usize, waited: bool) {
        self.bytes = if waited { len } else { self.bytes + len };
    }

    /// Whether the task should yield now (once: the streak starts again).
    fn turn_is_due(&mut self) -> bool {
        let due = self.bytes >= FLOOD_SLICE_BYTES;
        if due {
            self.bytes = 0;
        }
        due
    }
}

/// `future`'s output, and whether it had to wait for it (returned `Pending` at least once).
async fn noting_wait<F: Future>(future: F) -> (F::Output, bool) {
    let mut future = std::pin::pin!(future);
    let mut waited = false;
    std::future::poll_fn(|context| match future.as_mut().poll(context) {
        std::task::Poll::Ready(output) => std::task::Poll::Ready((output, waited)),
        std::task::Poll::Pending => {
            waited = true;
            std::task::Poll::Pending
        }
    })
    .await
}

async fn read_some(
    output: &mut Pin<Box<dyn AsyncRead + Send>>,
    read_buf: &mut BytesMut,
    allowance: usize,
) -> io::Result<usize> {
    let mut limited = read_buf.limit(allowance);
    output.read_buf(&mut limited).await
}

/// Ends every process of a session: SIGHUP, then SIGTERM, then SIGKILL, each only if something
/// is still alive, with the grace period split between the first two.
pub(crate) async fn end_process_group(process: &dyn PtyProcess, grace: Duration, session_id: Uuid) {
    let steps = [
        (GroupSignal::Hangup, grace / 2),
        (GroupSignal::Terminate, grace / 2),
        (GroupSignal::Kill, KILL_CONFIRM),
    ];
    for (signal, patience) in steps {
        if !group_alive(process, session_id).await {
            return;
        }
        if let Err(error) = process.signal_group(signal).await {
            tracing::warn!(%session_id, ?signal, %error, "signalling the process group failed");
        }
        let deadline = Instant::now() + patience;
        while Instant::now() < deadline {
            tokio::time::sleep(GROUP_POLL).await;
            if !group_alive(process, session_id).await {
                tracing::debug!(%session_id, ?signal, "process group ended");
                return;
            }
        }
    }
    tracing::warn!(%session_id, "processes of the session survived SIGKILL");
}

async fn group_alive(process: &dyn PtyProcess, session_id: Uuid) -> bool {
    process.group_alive().await.unwrap_or_else(|error| {
        tracing::warn!(%session_id, %error, "cannot tell whether the process group is alive");
        // Assume it is: signalling a dead group is harmless, leaving a live one is not.
        true
    })
}

/// Takes the input side for a freeze. Input held for the shell's first prompt is written
/// first (it would not outlive this process's hold on the PTY), for at most
/// [`HELD_INPUT_FLUSH`]; then a write blocked on a process that does not read gives way.
async fn input_for_freeze(shared: &Shared, input_ended: Option<CancellationToken>) -> InputGuard {
    let input = Arc::clone(&shared.input);
    if shared.prompt_gate.release()
        && let Ok(held) = timeout(HELD_INPUT_FLUSH, Arc::clone(&input).lock_owned()).await
    {
        return held;
    }
    if let Some(input_ended) = input_ended {
        input_ended.cancel();
    }
    input.lock_owned().await
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: usize = 128;

    #[test]
    fn output_read_without_waiting_yields_once_per_slice() {
        let mut streak = ReadStreak::default();
        streak.read(FLOOD_SLICE_BYTES / 2, false);
        assert!(!streak.turn_is_due());
        streak.read(FLOOD_SLICE_BYTES / 2, false);
        assert!(streak.turn_is_due(), "a slice read without waiting");
        assert!(!streak.turn_is_due(), "once per slice");
    }

    #[tokio::test]
    async fn a_flood_gives_the_thread_back_before_all_of_it_is_read() {
        use tokio::io::AsyncWriteExt as _;
        let unscreened = SessionSettings {
            scrollback_lines: None,
            ..crate::runtime::fake::FakeSession::settings()
        };
        let mut fake = crate::runtime::fake::FakeSession::start(unscreened, None).await;
        // Two slices, ready at once: the session task could read both without waiting.
        let ready = vec![b'x'; 2 * FLOOD_SLICE_BYTES];
        fake.terminal.terminal.write_all(&ready).await.unwrap();
        tokio::task::yield_now().await;
        let read_in_one_turn = fake.session.info().output_offset;
        assert!(
            read_in_one_turn > 0 && read_in_one_turn < ready.len() as u64,
            "{read_in_one_turn} of {} bytes read before this task's next turn",
            ready.len()
        );
        let read_all = tokio::time::timeout(Duration::from_secs(30), async {
            while fake.session.info().output_offset < ready.len() as u64 {
                tokio::task::yield_now().await;
            }
        });
        assert!(
            read_all.await.is_ok(),
            "the rest of the flood was never read"
        );
        fake.kill().await;
    }

    /// Writes `bytes` of output into `fake`'s terminal; the (paused) time until the session task
    /// had read all of it.
    async fn time_to_read(fake: &mut crate::runtime::fake::FakeSession, bytes: usize) -> Duration {
        use tokio::io::AsyncWriteExt as _;
        let started = Instant::now();
        let until = fake.session.info().output_offset + bytes as u64;
        fake.terminal
            .terminal
            .write_all(&vec![b'x'; bytes])
            .await
            .unwrap();
        while fake.session.info().output_offset < until {
            tokio::time::sleep(Duration::from_micros(100)).await;
        }
        started.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_is_read_at_the_typing_rate_only_while_another_session_is_typed_in() {
        use crate::runtime::fake::FakeSession;
        use crate::session::InputItem;
        const RATE: u64 = 1 << 20;
        const FLOOD: usize = 512 * 1024;
        let settings = SessionSettings {
            scrollback_lines: None,
            flood_rate_while_typing: std::num::NonZeroU64::new(RATE),
            ..FakeSession::settings()
        };
        let recent = Arc::new(RecentInput::default());
        let mut flood = FakeSession::start_beside(settings, &recent).await;
        let mut typed = FakeSession::start_beside(settings, &recent).await;
        let type_into = async |fake: &FakeSession| {
            let key = vec![InputItem::Text("x".to_owned())];
            fake.session.send_input(key, false).await.unwrap();
        };
        let at_rate = Duration::from_secs_f64(FLOOD as f64 / RATE as f64);
        // The last read starts before its own bytes are paid for: it may be a whole block.
        let burst_and_last_read = Duration::from_secs_f64(
            (super::super::typing_first::FLOOD_BURST_BYTES + READ_BLOCK as u64) as f64
                / RATE as f64,
        );

        // Nobody types: the flood is read as it comes.
        let alone = time_to_read(&mut flood, FLOOD).await;
        assert!(alone < Duration::from_millis(20), "took {alone:?} alone");

        // The flood's own input does not hold it back.
        type_into(&flood).await;
        let own = time_to_read(&mut flood, FLOOD).await;
        assert!(
            own < Duration::from_millis(20),
            "took {own:?} after its own input"
        );

        // Another session is typed in: the flood goes at the rate, less its burst.
        type_into(&typed).await;
        let held = time_to_read(&mut flood, FLOOD).await;
        assert!(
            held >= at_rate - burst_and_last_read - Duration::from_millis(2) && held <= at_rate,
            "{FLOOD} bytes at {RATE} bytes a second took {held:?}"
        );

        // The other session answers its input with a flood of its own: that input was not
        // typing, so neither holds the other.
        let answered = time_to_read(&mut typed, FLOOD).await;
        assert!(
            answered < Duration::from_millis(20),
            "took {answered:?} to answer"
        );
        let after_answer = time_to_read(&mut flood, FLOOD).await;
        assert!(
            after_answer < Duration::from_millis(20),
            "took {after_answer:?} after the other's input was answered by a flood"
        );

        // Typed in again, then not for a typing window: read as it comes again.
        type_into(&typed).await;
        tokio::time::sleep(crate::domain::TYPING_WINDOW).await;
        let after = time_to_read(&mut flood, FLOOD).await;
        assert!(
            after < Duration::from_millis(20),
            "took {after:?} after the typing"
        );
        // Typed in again, and its process is ended: nobody waits for that echo.
        type_into(&typed).await;
        typed.kill().await;
        let after_end = time_to_read(&mut flood, FLOOD).await;
        assert!(
            after_end < Duration::from_millis(20),
            "took {after_end:?} after the typed session was killed"
        );

        // Nothing was lost on the way.
        assert_eq!(flood.session.info().output_offset, 6 * FLOOD as u64);
        flood.kill().await;
    }

    #[test]
    fn a_read_that_waited_starts_the_streak_again() {
        let mut streak = ReadStreak::default();
        streak.read(FLOOD_SLICE_BYTES - 1, false);
        streak.read(1, true);
        assert!(!streak.turn_is_due(), "typing-speed output never yields");
    }

    /// Notes a read of `len` bytes at `at`, with room for [`READ_BLOCK`] and no input.
    fn read_at(pacer: &mut ReadPacer, len: usize, at: Instant) {
        pacer.read(len, READ_BLOCK, None, at);
    }

    #[test]
    fn reads_in_quick_succession_that_take_all_there_is_pace_the_next() {
        let mut pacer = ReadPacer::new(true);
        let start = Instant::now();
        read_at(&mut pacer, 8 * 1024, start);
        assert_eq!(
            pacer.next_read, None,
            "the first read after a pause is never paced"
        );
        assert_eq!(pacer.read_block(), READ_BLOCK);
        let second = start + Duration::from_micros(20);
        read_at(&mut pacer, 8 * 1024, second);
        assert_eq!(pacer.next_read, Some(second + PACE));
        assert_eq!(
            pacer.read_block(),
            PACED_READ_BLOCK,
            "the held read gets room for what piles up"
        );
    }

    #[test]
    fn a_read_that_fills_its_room_or_a_pause_lifts_the_pace() {
        let mut pacer = ReadPacer::new(true);
        let start = Instant::now();
        read_at(&mut pacer, SMALL, start);
        read_at(&mut pacer, READ_BLOCK, start + Duration::from_micros(20));
        assert_eq!(pacer.next_read, None, "a read that filled its room");
        read_at(&mut pacer, SMALL, start + Duration::from_micros(40));
        let allowed = pacer.next_read.expect("paced");
        read_at(&mut pacer, SMALL, allowed + PACE + TIMER_TICK);
        assert_eq!(pacer.next_read, None, "output that paused");
    }

    #[test]
    fn output_read_straight_from_a_pty_is_never_paced() {
        let mut pacer = ReadPacer::new(false);
        let start = Instant::now();
        read_at(&mut pacer, SMALL, start);
        read_at(&mut pacer, SMALL, start + Duration::from_micros(20));
        assert_eq!(pacer.next_read, None);
        assert_eq!(pacer.read_block(), READ_BLOCK);
    }

    #[test]
    fn output_soon_after_input_is_never_paced() {
        let mut pacer = ReadPacer::new(true);
        let start = Instant::now();
        let typed = Some(start);
        let first = start + Duration::from_micros(100);
        pacer.read(1, READ_BLOCK, typed, first);
        pacer.read(1, READ_BLOCK, typed, first + Duration::from_micros(50));
        assert_eq!(pacer.next_read, None);
        assert_eq!(pacer.read_block(), READ_BLOCK);
        // Long after the last keystroke, a flood is paced again.
        let later = start + ANSWER_WINDOW;
        pacer.read(SMALL, READ_BLOCK, typed, later);
        pacer.read(SMALL, READ_BLOCK, typed, later + Duration::from_micros(20));
        assert!(pacer.next_read.is_some());
    }

    #[test]
    fn a_held_read_that_gets_output_at_once_and_takes_all_of_it_keeps_the_pace() {
        let mut pacer = ReadPacer::new(true);
        let start = Instant::now();
        read_at(&mut pacer, SMALL, start);
        read_at(&mut pacer, SMALL, start + Duration::from_micros(20));
        let allowed = pacer.next_read.expect("paced");
        // The held read runs after the pace allowed it (at the timer's next tick, then the
        // runtime's next look), with what piled up: the flow goes on, and so does the pace.
        let read = allowed + Duration::from_micros(1200);
        pacer.read(20 * 1024, PACED_READ_BLOCK, None, read);
        assert_eq!(pacer.next_read, Some(read + PACE));
        // A held read that filled its room: the producer outruns the pace, so the next read
        // comes at once, still with the flow's blocks.
        let full = read + PACE;
        pacer.read(16 * 1024, 16 * 1024, None, full);
        assert_eq!(pacer.next_read, None);
        assert_eq!(pacer.read_block(), PACED_READ_BLOCK);
        // It takes the rest: paced again.
        let rest = full + Duration::from_micros(3);
        pacer.read(12 * 1024, PACED_READ_BLOCK, None, rest);
        assert_eq!(pacer.next_read, Some(rest + PACE));
        // Output that paused: reads as they come, into ordinary blocks.
        let later = rest + PACE + PACE + TIMER_TICK;
        pacer.read(SMALL, PACED_READ_BLOCK, None, later);
        assert_eq!(pacer.next_read, None);
        assert_eq!(pacer.read_block(), READ_BLOCK);
    }

    #[test]
    fn a_held_read_whose_output_came_later_lifts_the_pace() {
        let mut pacer = ReadPacer::new(true);
        let start = Instant::now();
        read_at(&mut pacer, SMALL, start);
        read_at(&mut pacer, SMALL, start + Duration::from_micros(20));
        let allowed = pacer.next_read.expect("paced");
        pacer.read(SMALL, PACED_READ_BLOCK, None, allowed + PACE + TIMER_TICK);
        assert_eq!(pacer.next_read, None, "the flow had stopped");
    }
}
