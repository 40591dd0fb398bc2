//! A fake runtime for unit tests: the "process" is a pair of in-memory pipes that the test drives,
//! so that timers can run on tokio's paused clock without a real process in the way; and
//! [`FakeSession`], one session on it without a broker around, for the tests of a session's
//! parts (its screen's feeder, its recorder).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::DuplexStream;
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::{GroupSignal, PtyProcess, PtyRuntime, RuntimeError, SpawnSpec, SpawnedPty, Target};
use crate::domain::{ExitStatus, TerminalSize};
use crate::events::EventBus;
use crate::session::{
    ControlSettings, RecentInput, Session, SessionRecording, SessionSettings, TaskContext,
};

/// Spawns fake processes and hands the test the other end of each.
#[derive(Debug, Default)]
pub struct FakeRuntime {
    spawned: Mutex<Vec<FakeTerminal>>,
}

/// The test's side of one fake process.
#[derive(Debug)]
pub struct FakeTerminal {
    /// Write here to produce output; read here to see the session's input.
    pub terminal: DuplexStream,
    exit: Arc<watch::Sender<Option<ExitStatus>>>,
    signals_refused: Arc<AtomicBool>,
}

impl FakeTerminal {
    /// Makes the fake process exit with `status`.
    pub fn exit(&self, status: ExitStatus) {
        self.exit.send_replace(Some(status));
    }

    /// Makes every signal sent to the fake process fail from now on, as a runtime that cannot
    /// reach its processes does.
    pub fn refuse_signals(&self) {
        self.signals_refused.store(true, Ordering::Relaxed);
    }
}

impl FakeRuntime {
    /// The terminal of the oldest spawned process not taken yet.
    pub fn take_terminal(&self) -> Option<FakeTerminal> {
        let mut spawned = self.spawned.lock().unwrap();
        (!spawned.is_empty()).then(|| spawned.remove(0))
    }
}

#[async_trait]
impl PtyRuntime for FakeRuntime {
    /// The fake has no users or containers for a policy to judge.
    async fn admit(
        &self,
        _spec: &SpawnSpec,
        _policy: &crate::policy::SpawnPolicy,
    ) -> Result<(), RuntimeError> {
        Ok(())
    }

    /// A spec that asks for shell integration gets a fake POSIX shell with it: its marks are
    /// whatever the test writes.
    async fn spawn(&self, spec: &SpawnSpec) -> Result<SpawnedPty, RuntimeError> {
        let (session_end, terminal) = tokio::io::duplex(64 * 1024);
        let (output, input) = tokio::io::split(session_end);
        let exit = Arc::new(watch::Sender::new(None));
        let signals_refused = Arc::new(AtomicBool::new(false));
        self.spawned.lock().unwrap().push(FakeTerminal {
            terminal,
            exit: Arc::clone(&exit),
            signals_refused: Arc::clone(&signals_refused),
        });
        Ok(SpawnedPty {
            output: Box::pin(output),
            input: Box::pin(input),
            process: Box::new(FakeProcess {
                exit,
                signals_refused,
            }),
            output_buffered: false,
            shell_integration: spec
                .shell_integration
                .then_some(crate::shell_integration::Shell::Posix),
        })
    }
}

#[derive(Debug)]
struct FakeProcess {
    exit: Arc<watch::Sender<Option<ExitStatus>>>,
    signals_refused: Arc<AtomicBool>,
}

#[async_trait]
impl PtyProcess for FakeProcess {
    fn pid(&self) -> Option<u32> {
        None
    }

    async fn resize(&self, _size: TerminalSize) -> Result<(), RuntimeError> {
        Ok(())
    }

    async fn signal_group(&self, signal: GroupSignal) -> Result<(), RuntimeError> {
        if self.signals_refused.load(Ordering::Relaxed) {
            return Err(RuntimeError::Unavailable(
                "the fake runtime refuses signals".to_owned(),
            ));
        }
        let number = match signal {
            GroupSignal::Hangup => 1,
            GroupSignal::Interrupt => 2,
            GroupSignal::Kill => 9,
            GroupSignal::Terminate => 15,
        };
        self.exit.send_if_modified(|exit| {
            let first = exit.is_none();
            exit.get_or_insert(ExitStatus::signalled(number));
            first
        });
        Ok(())
    }

    async fn group_alive(&self) -> Result<bool, RuntimeError> {
        Ok(self.exit.borrow().is_none())
    }

    async fn wait(&self) -> Result<ExitStatus, RuntimeError> {
        let mut exit = self.exit.subscribe();
        let status = exit
            .wait_for(Option::is_some)
            .await
            .map_err(|_| RuntimeError::Other("fake process vanished".to_owned()))?;
        Ok(status.expect("waited for a status"))
    }
}

/// One running session on the fake runtime, with the test's end of its terminal.
#[derive(Debug)]
pub struct FakeSession {
    pub session: Arc<Session>,
    pub terminal: FakeTerminal,
    /// The session's task and the tasks beside it (screen feeder, recorder).
    tracker: TaskTracker,
}

impl FakeSession {
    /// Settings as a broker's defaults make them (screens on, 1 MiB ring).
    pub fn settings() -> SessionSettings {
        SessionSettings {
            ring_bytes: 1 << 20,
            scrollback_lines: Some(100),
            screen_sleep: Duration::from_secs(30),
            tombstone: Duration::from_secs(300),
            detached_timeout: Duration::from_secs(1800),
            kill_grace: Duration::from_secs(2),
            idle_after: crate::activity::DEFAULT_IDLE_AFTER,
            commands_kept: crate::activity::DEFAULT_COMMANDS_KEPT,
            flood_rate_while_typing: None,
        }
    }

    /// What a test spawns on the fake runtime: a new session id, the default size.
    pub fn spec() -> SpawnSpec {
        SpawnSpec {
            session_id: Uuid::new_v4(),
            target: Target::Local,
            command: vec!["fake".to_owned()],
            env: Vec::new(),
            cwd: None,
            user: None,
            size: TerminalSize::DEFAULT,
            shell_integration: false,
        }
    }

    /// Starts a session with `settings`, recorded as `recording` says, once its process runs.
    pub async fn start(settings: SessionSettings, recording: Option<SessionRecording>) -> Self {
        Self::start_spec(settings, recording, Self::spec(), Arc::default()).await
    }

    /// Starts a session with `settings` beside others of the same broker: they share its record
    /// of which sessions were typed in lately.
    pub async fn start_beside(settings: SessionSettings, recent_input: &Arc<RecentInput>) -> Self {
        Self::start_spec(settings, None, Self::spec(), Arc::clone(recent_input)).await
    }

    /// Starts a session whose process is a shell with its integration (the test prints its
    /// marks).
    pub async fn start_shell(settings: SessionSettings) -> Self {
        let spec = SpawnSpec {
            shell_integration: true,
            ..Self::spec()
        };
        Self::start_spec(settings, None, spec, Arc::default()).await
    }

    async fn start_spec(
        settings: SessionSettings,
        recording: Option<SessionRecording>,
        spec: SpawnSpec,
        recent_input: Arc<RecentInput>,
    ) -> Self {
        let runtime = Arc::new(FakeRuntime::default());
        let tracker = TaskTracker::new();
        let context = TaskContext {
            runtime: runtime.clone(),
            spec: spec.clone(),
            events: EventBus::new(),
            shutdown: CancellationToken::new(),
            tracker: tracker.clone(),
            recent_input,
        };
        let (session, task) = Session::new(
            spec.session_id,
            spec.size,
            settings,
            context,
            recording,
            ControlSettings::default(),
        );
        let (started, answer) = oneshot::channel();
        tracker.spawn(task.run(started));
        answer
            .await
            .expect("the session task answers")
            .expect("the fake process starts");
        let terminal = runtime.take_terminal().expect("one fake process");
        Self {
            session,
            terminal,
            tracker,
        }
    }

    /// Kills the session and waits until every task of it ended (a recorder has published).
    pub async fn kill(self) {
        self.session.kill().await.expect("the session is killed");
        self.tracker.close();
        self.tracker.wait().await;
    }
}
