//! A session as one broker process hands it to the next: frozen on the old side (its task reads
//! nothing and waits for the verdict), adopted on the new side (a session and a task that go on
//! from the same offsets, lease generation, screen and process).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use ptyhub_model::ControlMode;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::attachments::{Attachments, FrozenControl};
use super::input::PromptGate;
use super::recording::{FrozenRecording, OutputTimeline, resumed_recorder};
use super::task::{Pty, SessionTask, TaskContext};
use super::typing_first::Typist;
use super::{COMMAND_QUEUE, Command, PtyInput, Session, SessionSettings, Shared, State};
use crate::activity::ActivityParts;
use crate::domain::{ExitStatus, SessionPhase, TerminalActivity, TerminalSize};
use crate::error::Error;
use crate::recording::Recordings;
use crate::ring::OutputRing;
use crate::runtime::{ProcessHandOff, SpawnSpec, SpawnedPty};
use crate::screen::{Screen, ScreenMarks, Snapshot};
use bytes::Bytes;

/// Everything a session is, as of the moment its task stopped reading.
#[derive(Debug)]
pub struct FrozenSession {
    pub id: Uuid,
    pub spec: SpawnSpec,
    /// `Running` or `Exited` (a tombstone).
    pub phase: SessionPhase,
    pub size: TerminalSize,
    /// The ring's chunks from `ring_start` on.
    pub ring_start: u64,
    pub ring: Vec<Bytes>,
    pub exit: Option<ExitStatus>,
    pub pid: Option<u32>,
    pub created_at: SystemTime,
    pub last_activity_at: SystemTime,
    pub title: String,
    pub last_bell_at: Option<SystemTime>,
    /// The last controller lease given out: the next process gives only later ones.
    pub controller_generation: u64,
    /// The screen as of the end of the ring; `None` on a broker without screens.
    pub screen: Option<Snapshot>,
    /// What the terminal was doing, with its commands; `None` without screens.
    pub activity: Option<ActivityParts>,
    /// What is left of an exited session's tombstone.
    pub tombstone_left: Option<Duration>,
    /// The running process and its descriptors (borrowed: they stay open until the verdict).
    pub process: Option<ProcessHandOff>,
    /// The recording in progress, written up to the end of the ring.
    pub recording: Option<FrozenRecording>,
    /// What was left of the wait for the shell's first prompt, while input was held for it:
    /// the next process goes on holding input for that long at most.
    pub prompt_wait_left: Option<Duration>,
    /// Who may type, which the next process goes on with.
    pub control_mode: ControlMode,
    /// The grant timeout, standing requests and a reservation, which the next process goes on
    /// with.
    pub control: FrozenControl,
}

impl FrozenSession {
    /// The offset of the next byte the session's PTY will produce.
    pub fn end(&self) -> u64 {
        self.ring_start
            + self
                .ring
                .iter()
                .map(|chunk| chunk.len() as u64)
                .sum::<u64>()
    }
}

/// How a hand-off ended for one frozen session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The next process owns the session now: the task ends without touching the process.
    Commit,
    /// The hand-off failed: the task goes on as before.
    Resume,
}

/// A frozen session and the way to tell its task the verdict (dropping it resumes the session).
#[derive(Debug)]
pub struct Frozen {
    pub session: FrozenSession,
    pub verdict: oneshot::Sender<Verdict>,
    /// Completes once the task has let go after a commit: this process may exit from then on
    /// without disturbing the session (its crash record stays for the successor).
    pub let_go: oneshot::Receiver<()>,
}

impl Session {
    /// Stops the session's task from reading and returns what the session is. Every attached
    /// client's stream ends with [`Error::HandingOver`]; input waits. The task waits for the
    /// verdict.
    pub(crate) async fn freeze(&self) -> Result<Frozen, Error> {
        let (reply, answer) = oneshot::channel();
        let (verdict, verdict_receiver) = oneshot::channel();
        let (let_go_sender, let_go) = oneshot::channel();
        self.send(Command::HandOff {
            reply,
            verdict: verdict_receiver,
            let_go: let_go_sender,
        })
        .await?;
        let session = answer
            .await
            .map_err(|_| Error::SessionNotFound(self.id))??;
        Ok(Frozen {
            session,
            verdict,
            let_go,
        })
    }

    /// A session that goes on from `frozen` (without its process, which `spawned` now is: the
    /// descriptors the previous process sent, adopted by the runtime), and the task that runs
    /// it; the caller spawns [`SessionTask::run_adopted`] with the returned PTY. Its recording
    /// goes on into `recordings`.
    pub(crate) fn adopt(
        mut frozen: FrozenSession,
        spawned: Option<SpawnedPty>,
        settings: SessionSettings,
        context: TaskContext,
        recordings: Option<&Arc<Recordings>>,
    ) -> (Arc<Session>, SessionTask, Option<Pty>) {
        let (recorder_tap, recorder) = match (frozen.recording.take(), recordings) {
            (Some(recording), Some(recordings)) => {
                let (tap, recorder) = resumed_recorder(Arc::clone(recordings), recording);
                (Some(tap), Some(recorder))
            }
            (Some(recording), None) => {
                tracing::warn!(session_id = %frozen.id, spool = %recording.spool.display(),
                    "the session was recorded, but this broker has no recordings store: the recording so far stays in the spool");
                (None, None)
            }
            (None, _) => (None, None),
        };
        let ring = OutputRing::resume(settings.ring_bytes, frozen.ring_start, frozen.ring);
        let end = ring.end();
        let screen = settings.scrollback_lines.map(|lines| {
            let screen = match &frozen.screen {
                // Asleep: drawn when first needed, not all at once during the hand-off.
                Some(snapshot) if snapshot.offset == end => {
                    let marks = ScreenMarks {
                        title: frozen.title.clone(),
                        last_bell_at: frozen.last_bell_at,
                    };
                    Screen::asleep_from_snapshot(snapshot, lines, marks)
                }
                // The previous process ran without screens: this one's starts blank here.
                _ => Screen::new(frozen.size, lines, end),
            };
            Mutex::new(screen)
        });
        let now = SystemTime::now();
        let terminal = match (&screen, frozen.activity.take()) {
            (Some(screen), Some(parts)) => {
                let mut screen = screen
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                screen.resume_activity(parts, now);
                screen.activity().summary(now, settings.idle_after)
            }
            _ => TerminalActivity::default(),
        };
        let (pty, input) = match spawned {
            Some(spawned) => {
                let input_ended = CancellationToken::new();
                let input = PtyInput {
                    writer: spawned.input,
                    ended: input_ended.clone(),
                };
                let pty = Pty {
                    output: spawned.output,
                    input_ended,
                    process: Arc::from(spawned.process),
                    output_buffered: spawned.output_buffered,
                };
                (Some(pty), Some(input))
            }
            None => (None, None),
        };
        let phase = if pty.is_some() {
            SessionPhase::Running
        } else {
            SessionPhase::Exited
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                phase,
                size: frozen.size,
                ring,
                exit: frozen.exit,
                pid: if pty.is_some() { frozen.pid } else { None },
                created_at: frozen.created_at,
                last_activity_at: frozen.last_activity_at,
                attachments: Attachments::after_generation(frozen.controller_generation)
                    .in_control_mode(frozen.control_mode)
                    .with_frozen_control(frozen.control),
                reader_waiting: false,
                input_since_report: false,
                last_input_at: None,
                screen_offset: end,
                feeder_woken_at: None,
                reads_held_for_screen: 0,
                title: frozen.title,
                last_bell_at: frozen.last_bell_at,
                marks_since_report: false,
                terminal,
                terminal_commands: Vec::new(),
                terminal_changed: false,
                last_output_at: tokio::time::Instant::now(),
                output_timeline: recorder_tap
                    .is_some()
                    .then(|| OutputTimeline::starting_at(end)),
            }),
            changed: watch::Sender::new(()),
            task_wake: Notify::new(),
            feeder_wake: Notify::new(),
            input: Arc::new(tokio::sync::Mutex::new(input)),
            // What the previous process held it wrote before it froze; later input waits here
            // (below) while the shell has not shown its first prompt.
            prompt_gate: PromptGate::open(),
            interrupts: super::input::Interrupts::default(),
            screen,
            recorder: recorder_tap,
            idle_after: settings.idle_after,
            typist: Typist::new(Arc::clone(&context.recent_input), frozen.id),
        });
        // A shell that has not shown its first prompt yet still gets input only after it (the
        // screen lets it go at the prompt's mark, as for a shell started here).
        if let Some(left) = frozen.prompt_wait_left
            && shared.screen.is_some()
        {
            shared.prompt_gate.hold_for(left);
        }
        let (command_tx, command_rx) = mpsc::channel(COMMAND_QUEUE);
        let session = Arc::new(Session {
            id: frozen.id,
            shared: Arc::clone(&shared),
            commands: command_tx,
        });
        let tombstone_deadline = frozen
            .tombstone_left
            .map(|left| tokio::time::Instant::now() + left);
        let mut context = context;
        context.spec = frozen.spec;
        let task = SessionTask::adopted(
            frozen.id,
            shared,
            settings,
            context,
            command_rx,
            tombstone_deadline,
            recorder,
        );
        (session, task, pty)
    }
}
