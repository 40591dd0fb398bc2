//! The broker: its runtimes, its session registry, its event bus, and the operations the gRPC
//! service offers, in domain types. The broker is where sessions join the registry (at spawn)
//! and leave it (when their task ends).

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use ptyhub_attach_ticket::{TicketHolder, TicketRole, TicketVerifyingKey};
use ptyhub_model::{ControlMode, TerminalSize};
use tokio::sync::{broadcast, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::config::{BackendKind, Config};
use crate::domain::{BrokerEvent, Command, ControlRequest, ControlState, Role, SessionInfo};
use crate::error::{Error, StartError};
use crate::events::EventBus;
use crate::policy::PolicyRefusal;
use crate::recording::{CastHeader, RecordMode, RecordingRequest, Recordings, RecordingsConfig};
use crate::registry::Registry;
use crate::runtime::docker::{DockerRuntime, DockerRuntimeConfig, reap_orphans_from_state};
use crate::runtime::local::{LocalRuntime, reap_local_orphans};
use crate::runtime::{HandedProcess, PtyRuntime, RuntimeError, SpawnSpec, Target};
use crate::screen::ScreenFormat;
use bytes::Bytes;

use crate::session::{
    AttachRequest, Attachment, CommandPage, CommandWatch, ControlSettings, FrozenSession,
    InputItem, InputSent, RecentInput, RunOutcome, ScreenReading, ScreenWait, Session,
    SessionRecording, SessionSettings, TaskContext, WaitOutcome,
};

/// A running broker. Cheap to clone; every clone is the same broker.
#[derive(Debug, Clone)]
pub struct Broker {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: Config,
    settings: SessionSettings,
    runtimes: HashMap<BackendKind, Arc<dyn PtyRuntime>>,
    registry: Arc<Registry>,
    events: EventBus,
    /// Where recorded sessions go; `None` when no store is configured.
    recordings: Option<Arc<Recordings>>,
    boot_id: Uuid,
    /// Cancelled when shutdown begins: every session ends its process group and closes.
    shutdown: CancellationToken,
    /// Every session task and every background group ending.
    tracker: TaskTracker,
    /// Which sessions were typed in lately: a flood in one gives way to typing in another.
    recent_input: Arc<RecentInput>,
    /// True while the sessions are being handed to the next broker process (`handoff/`).
    handing_over: watch::Sender<bool>,
    /// How many hand-offs have begun (frozen the sessions), whatever their end.
    hand_offs_begun: std::sync::atomic::AtomicU64,
    /// Set once the sessions went to the next broker process.
    handed_over: std::sync::atomic::AtomicBool,
}

/// Builds a [`Broker`] with explicit runtimes (tests inject theirs) or the configured ones.
#[derive(Debug)]
pub struct BrokerBuilder {
    config: Config,
    runtimes: HashMap<BackendKind, Arc<dyn PtyRuntime>>,
    /// The executable local sessions start through as their keeper (see
    /// `runtime/local/keeper.rs`); without one they cannot be handed over.
    session_keeper: Option<PathBuf>,
    /// The broker takes its sessions over from a running one: what the data directory records
    /// is that broker's, not a crashed run's, and must not be ended.
    taking_over: bool,
}

/// A client's first frame, validated.
#[derive(Debug, Clone)]
pub struct Hello {
    pub ticket: String,
    pub session_id: Uuid,
    pub request: AttachRequest,
}

impl BrokerBuilder {
    /// Serves targets of `kind` with `runtime`.
    pub fn runtime(mut self, kind: BackendKind, runtime: Arc<dyn PtyRuntime>) -> Self {
        self.runtimes.insert(kind, runtime);
        self
    }

    /// Starts local sessions through `executable` in keeper mode (a binary whose `main` calls
    /// `run_session_keeper_if_asked` first), so that they can be handed to a next process.
    pub fn session_keeper(mut self, executable: impl Into<PathBuf>) -> Self {
        self.session_keeper = Some(executable.into());
        self
    }

    /// Builds a broker that will take its sessions over from the running one: the crash
    /// records in the data directory are left alone.
    pub fn taking_over(mut self) -> Self {
        self.taking_over = true;
        self
    }

    /// Adds the runtimes `config.backends` names that were not given explicitly. Unless taking
    /// over, first ends whatever sessions a previous run that crashed left in `config.data_dir`.
    pub async fn configured_runtimes(mut self) -> Result<Self, StartError> {
        if let Some(data_dir) = &self.config.data_dir {
            // It names every session's processes: for the broker's user alone.
            ptyhub_wire::create_private_directory(data_dir).map_err(|source| StartError::Io {
                context: "create the data directory (0700)",
                source,
            })?;
        }
        for kind in self.config.backends.clone() {
            if self.runtimes.contains_key(&kind) {
                continue;
            }
            let runtime: Arc<dyn PtyRuntime> = match kind {
                BackendKind::Local => Arc::new(self.local_runtime().await),
                BackendKind::Docker => Arc::new(self.docker_runtime().await?),
            };
            self.runtimes.insert(kind, runtime);
        }
        Ok(self)
    }

    /// The local runtime; with a data dir, it first ends what a crashed previous run left.
    async fn local_runtime(&self) -> LocalRuntime {
        let mut runtime = LocalRuntime::new();
        if let Some(keeper) = &self.session_keeper {
            runtime = runtime.with_session_keeper(keeper);
        }
        let Some(data_dir) = self.config.data_dir.clone() else {
            return runtime;
        };
        if self.taking_over {
            return runtime.with_data_dir(&data_dir);
        }
        let reaped = {
            let data_dir = data_dir.clone();
            tokio::task::spawn_blocking(move || reap_local_orphans(&data_dir)).await
        };
        match reaped {
            Ok(Ok(report)) => tracing::info!(
                sessions = report.sessions,
                processes_ended = report.processes_ended,
                "ended the local sessions the previous run left behind"
            ),
            Ok(Err(error)) => {
                tracing::warn!(%error, "could not end the local sessions the previous run left behind");
            }
            Err(join_error) => tracing::warn!(%join_error, "reaping local orphans panicked"),
        }
        runtime.with_data_dir(&data_dir)
    }

    async fn docker_runtime(&self) -> Result<DockerRuntime, StartError> {
        let docker_config = DockerRuntimeConfig::with_endpoint(self.config.docker.host.clone());
        let mut runtime =
            DockerRuntime::new(docker_config.clone()).map_err(StartError::DockerEndpoint)?;
        if let Some(data_dir) = &self.config.data_dir {
            if self.taking_over {
                return Ok(runtime.with_data_dir(data_dir));
            }
            match reap_orphans_from_state(data_dir, &docker_config).await {
                Ok(report) => tracing::info!(
                    sessions = report.sessions,
                    processes_ended = report.processes_ended,
                    "ended what the previous run left behind"
                ),
                Err(error) => {
                    tracing::warn!(%error, "could not end what the previous run left behind");
                }
            }
            runtime = runtime.with_data_dir(data_dir);
        }
        Ok(runtime)
    }

    pub fn build(self) -> Broker {
        let config = self.config;
        let settings = SessionSettings {
            ring_bytes: usize::try_from(config.ring_bytes).unwrap_or(usize::MAX),
            scrollback_lines: config.screens.then_some(config.scrollback_lines as usize),
            screen_sleep: config.screen_sleep,
            tombstone: config.tombstone,
            detached_timeout: config.detached_timeout,
            kill_grace: config.kill_grace,
            idle_after: config.idle_after,
            commands_kept: config.commands_kept,
            flood_rate_while_typing: NonZeroU64::new(config.flood_rate_while_typing),
        };
        let boot_id = Uuid::new_v4();
        let recordings = config.recordings.store.clone().map(|store| {
            // Without a data dir the spool is this run's own: nothing of another broker's (or of
            // a previous run's) is ever taken for its own.
            let spool = config
                .recordings
                .spool
                .clone()
                .unwrap_or_else(|| match &config.data_dir {
                    Some(data_dir) => data_dir.join("recording-spool"),
                    None => std::env::temp_dir().join(format!("ptyhub-recording-spool-{boot_id}")),
                });
            Arc::new(Recordings::new(RecordingsConfig {
                store,
                spool,
                max_age: (!config.recordings.max_age.is_zero())
                    .then_some(config.recordings.max_age),
                max_bytes: (config.recordings.max_bytes > 0).then_some(config.recordings.max_bytes),
            }))
        });
        Broker {
            inner: Arc::new(Inner {
                config,
                settings,
                runtimes: self.runtimes,
                registry: Arc::new(Registry::new()),
                events: EventBus::new(),
                recordings,
                boot_id,
                shutdown: CancellationToken::new(),
                tracker: TaskTracker::new(),
                recent_input: Arc::default(),
                handing_over: watch::Sender::new(false),
                hand_offs_begun: std::sync::atomic::AtomicU64::new(0),
                handed_over: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }
}

impl Broker {
    pub fn builder(config: Config) -> BrokerBuilder {
        BrokerBuilder {
            config,
            runtimes: HashMap::new(),
            session_keeper: None,
            taking_over: false,
        }
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Changes every time a broker starts.
    pub fn boot_id(&self) -> Uuid {
        self.inner.boot_id
    }

    fn ticket_public_key(&self) -> &TicketVerifyingKey {
        &self.inner.config.secrets.ticket_public_key
    }

    /// Whether the broker's policy admits sessions on `target` as `user` (the target's own user
    /// when `None`), judged exactly as a spawn is and starting nothing. A root refusal says how
    /// to register the instance instead, since that is when it is asked.
    pub async fn check_target(&self, target: Target, user: Option<String>) -> Result<(), Error> {
        let runtime = self.runtime_for(&target)?;
        let spec = SpawnSpec {
            session_id: Uuid::nil(),
            target: target.clone(),
            command: Vec::new(),
            env: Vec::new(),
            cwd: None,
            user: user.clone(),
            size: TerminalSize::DEFAULT,
            shell_integration: false,
        };
        match runtime.admit(&spec, &self.inner.config.policy).await {
            Err(RuntimeError::Refused(PolicyRefusal::Root)) => {
                let runs_as = match &user {
                    Some(user) => format!("as {user}, which is root"),
                    None => "as root (the user its image runs as)".to_owned(),
                };
                let container = match &target {
                    Target::Docker { container } => container.as_str(),
                    Target::Local => "the target",
                };
                Err(Error::Runtime(RuntimeError::Refused(
                    PolicyRefusal::RootTarget(format!(
                        "sessions in container {container} would run {runs_as}, and this broker does not run sessions as root in containers: give the instance a user of the image (ptyhub instance add --user NAME, REST \"user\"), or start the broker with --allow-root"
                    )),
                )))
            }
            checked => checked.map_err(Error::from),
        }
    }

    /// Starts `spec` on a new PTY, unrecorded; answers once the process runs.
    pub async fn spawn(&self, spec: SpawnSpec) -> Result<SessionInfo, Error> {
        self.spawn_recorded(
            spec,
            RecordingRequest::default(),
            ControlSettings::default(),
        )
        .await
    }

    /// Publishes what a previous run left in the recording spool and keeps retention running
    /// until shutdown (no-op without a recordings store). The sessions live by now are those
    /// taken over from the previous process: their recorders go on with their spool files.
    pub fn keep_recordings(&self) {
        if let Some(recordings) = &self.inner.recordings {
            let live = self
                .inner
                .registry
                .list()
                .into_iter()
                .map(|session| session.session_id)
                .collect();
            recordings.keep_up(live, self.inner.shutdown.clone(), &self.inner.tracker);
        }
    }

    /// The recordings this broker keeps, when it has a store.
    pub fn recordings(&self) -> Option<&Arc<Recordings>> {
        self.inner.recordings.as_ref()
    }

    /// Starts `spec` on a new PTY with `control` and records it as `recording` asks (when the
    /// broker has a recordings store); answers once the process runs. The session has its
    /// control mode and grant timeout from the start, so no stream ever meets other ones and a
    /// spawn never half succeeds.
    pub async fn spawn_recorded(
        &self,
        spec: SpawnSpec,
        recording: RecordingRequest,
        control: ControlSettings,
    ) -> Result<SessionInfo, Error> {
        let recording = match (recording.mode, &self.inner.recordings) {
            (RecordMode::Off, _) => None,
            (_, None) => {
                tracing::warn!(session_id = %spec.session_id, "recording asked for, but this broker has no recordings store (--recordings)");
                None
            }
            (mode, Some(recordings)) => Some(SessionRecording {
                recordings: Arc::clone(recordings),
                mode,
                header: CastHeader {
                    size: spec.size,
                    timestamp: 0,
                    command: (!spec.command.is_empty()).then(|| spec.command.join(" ")),
                    title: recording.title,
                    term: spec
                        .env
                        .iter()
                        .find(|(name, _)| name == "TERM")
                        .map(|(_, value)| value.clone()),
                },
            }),
        };
        let runtime = self.runtime_for(&spec.target)?;
        // The broker's own rule, whoever asked: refused before the session exists.
        runtime.admit(&spec, &self.inner.config.policy).await?;
        let context = TaskContext {
            runtime,
            spec: spec.clone(),
            events: self.inner.events.clone(),
            shutdown: self.inner.shutdown.child_token(),
            tracker: self.inner.tracker.clone(),
            recent_input: Arc::clone(&self.inner.recent_input),
        };
        let (session, task) = Session::new(
            spec.session_id,
            spec.size,
            self.inner.settings,
            context,
            recording,
            control,
        );
        self.inner.registry.insert(Arc::clone(&session))?;
        let (started, answer) = oneshot::channel();
        let registry = Arc::clone(&self.inner.registry);
        self.inner.tracker.spawn(async move {
            task.run(started).await;
            registry.remove(&session);
        });
        answer
            .await
            .map_err(|_| Error::SessionNotFound(spec.session_id))?
    }

    pub async fn kill(&self, session_id: Uuid) -> Result<SessionInfo, Error> {
        self.refuse_while_handing_over()?;
        self.inner.registry.get(session_id)?.kill().await
    }

    pub async fn reset(&self, session_id: Uuid) -> Result<SessionInfo, Error> {
        self.refuse_while_handing_over()?;
        self.inner.registry.get(session_id)?.reset().await
    }

    pub fn get(&self, session_id: Uuid) -> Result<SessionInfo, Error> {
        Ok(self.inner.registry.get(session_id)?.info())
    }

    /// Changes who may type into the session, moving its attached clients' roles at once.
    pub fn set_control_mode(
        &self,
        session_id: Uuid,
        mode: ControlMode,
    ) -> Result<SessionInfo, Error> {
        let session = self.inner.registry.get(session_id)?;
        if session.is_closed() {
            return Err(Error::SessionNotFound(session_id));
        }
        Ok(session.set_control_mode(mode))
    }

    /// Every live and tombstoned session, oldest first.
    pub fn list(&self) -> Vec<SessionInfo> {
        self.inner.registry.list()
    }

    /// The session's screen as of the end of its output, and the session beside it.
    pub fn screen(
        &self,
        session_id: Uuid,
        format: ScreenFormat,
        scrollback: usize,
    ) -> Result<(ScreenReading, SessionInfo), Error> {
        let session = self.inner.registry.get(session_id)?;
        let reading = session.screen(format, scrollback)?;
        Ok((reading, session.info()))
    }

    /// Who controls the session and who asks to (see [`Session::control_state`]).
    pub fn control_state(&self, session_id: Uuid) -> Result<ControlState, Error> {
        Ok(self.inner.registry.get(session_id)?.control_state())
    }

    /// A standing request for control by `holder` (see [`Session::request_control_for`]).
    pub fn request_control_for(
        &self,
        session_id: Uuid,
        holder: TicketHolder,
    ) -> Result<ControlRequest, Error> {
        self.inner
            .registry
            .get(session_id)?
            .request_control_for(holder)
    }

    /// `principal`'s answer to a request for control (see [`Session::answer_control_as`]).
    pub fn answer_control_as(
        &self,
        session_id: Uuid,
        principal: &str,
        request_id: u64,
        grant: bool,
    ) -> Result<ControlState, Error> {
        self.inner
            .registry
            .get(session_id)?
            .answer_control_as(principal, request_id, grant)
    }

    /// The session's commands (see [`Session::commands`]).
    pub fn commands(
        &self,
        session_id: Uuid,
        after: u64,
        limit: usize,
    ) -> Result<CommandPage, Error> {
        self.inner.registry.get(session_id)?.commands(after, limit)
    }

    /// The session's commands after `after_id`, then as they happen (see [`CommandWatch`]).
    pub fn watch_commands(&self, session_id: Uuid, after_id: u64) -> Result<CommandWatch, Error> {
        // Subscribed before the watch reads the log, so that no change after the read is missed.
        let events = self.inner.events.subscribe();
        let session = self.inner.registry.get(session_id)?;
        CommandWatch::new(session, after_id, events)
    }

    /// One command's output (see [`Session::command_output`]).
    pub async fn command_output(
        &self,
        session_id: Uuid,
        command_id: u64,
    ) -> Result<(Command, Bytes), Error> {
        let session = self.inner.registry.get(session_id)?;
        session.command_output(command_id).await
    }

    /// Runs a command at the session's shell prompt (see [`Session::run`]).
    pub async fn run(
        &self,
        session_id: Uuid,
        line: &str,
        timeout: std::time::Duration,
        force: bool,
    ) -> Result<RunOutcome, Error> {
        let session = self.inner.registry.get(session_id)?;
        session.run(line, timeout, force).await
    }

    /// Types into the session without an attach (see [`Session::send_input`]).
    pub async fn send_input(
        &self,
        session_id: Uuid,
        items: Vec<InputItem>,
        force: bool,
    ) -> Result<InputSent, Error> {
        let session = self.inner.registry.get(session_id)?;
        session.send_input(items, force).await
    }

    /// Waits for the session's screen (see [`Session::wait_for_screen`]); ends early when the
    /// broker shuts down.
    pub async fn wait_for_screen(
        &self,
        session_id: Uuid,
        wait: ScreenWait,
    ) -> Result<WaitOutcome, Error> {
        let session = self.inner.registry.get(session_id)?;
        tokio::select! {
            outcome = session.wait_for_screen(wait) => outcome,
            () = self.shutting_down() => Err(Error::ShuttingDown),
            () = self.handing_over() => Err(Error::HandingOver),
        }
    }

    /// Lifecycle events from now on, and every session as of now.
    pub fn watch_events(&self) -> (Vec<SessionInfo>, broadcast::Receiver<BrokerEvent>) {
        // Subscribed before the snapshot is taken, so that nothing between the two is missed (an
        // event may repeat what the snapshot already shows, which a subscriber tolerates).
        let events = self.inner.events.subscribe();
        (self.inner.registry.list(), events)
    }

    /// Completes when shutdown begins.
    pub async fn shutting_down(&self) {
        self.inner.shutdown.cancelled().await;
    }

    /// Checks the ticket, then attaches. The ticket is checked before the session is looked up,
    /// so that an unauthenticated caller learns nothing about which sessions exist.
    pub async fn attach(&self, hello: Hello) -> Result<Attachment, Error> {
        let role = match hello.request.role {
            Role::Controller => TicketRole::Controller,
            Role::Viewer => TicketRole::Viewer,
        };
        let claims = self.ticket_public_key().verify(
            &hello.ticket,
            hello.session_id,
            role,
            SystemTime::now(),
        )?;
        self.refuse_while_handing_over()?;
        let session = self.inner.registry.get(hello.session_id)?;
        session
            .attach(AttachRequest {
                holder: claims.holder.unwrap_or_default(),
                may_control: claims.role == TicketRole::Controller,
                ..hello.request
            })
            .await
    }

    /// Completes when a hand-off to the next broker process begins (at once while one runs).
    pub async fn handing_over(&self) {
        let mut handing_over = self.inner.handing_over.subscribe();
        let _ = handing_over.wait_for(|handing_over| *handing_over).await;
    }

    fn refuse_while_handing_over(&self) -> Result<(), Error> {
        if *self.inner.handing_over.borrow() {
            return Err(Error::HandingOver);
        }
        Ok(())
    }

    pub(crate) fn has_runtime(&self, kind: BackendKind) -> bool {
        self.inner.runtimes.contains_key(&kind)
    }

    /// The runtime that runs sessions on `target`: the one place a target picks its backend, so
    /// a check, a spawn and an adoption can never disagree about it.
    fn runtime_for(&self, target: &Target) -> Result<Arc<dyn PtyRuntime>, Error> {
        let kind = match target {
            Target::Local => BackendKind::Local,
            Target::Docker { .. } => BackendKind::Docker,
        };
        self.inner
            .runtimes
            .get(&kind)
            .cloned()
            .ok_or(Error::RuntimeNotConfigured(kind))
    }

    /// Refuses new sessions, attaches and control calls, and ends the event streams, from now
    /// until [`Broker::end_hand_off`].
    pub(crate) fn begin_hand_off(&self) {
        self.inner
            .hand_offs_begun
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.handing_over.send_replace(true);
    }

    /// Whether this broker's sessions went to the next broker process: [`Broker::serve`]
    /// returned for that, and the process must end without touching a session.
    pub fn handed_over(&self) -> bool {
        self.inner
            .handed_over
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(crate) fn mark_handed_over(&self) {
        self.inner
            .handed_over
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub(crate) fn hand_offs_begun(&self) -> u64 {
        self.inner
            .hand_offs_begun
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Serves as before after a hand-off that did not happen.
    pub(crate) fn end_hand_off(&self) {
        self.inner.registry.end_hand_off();
        self.inner.handing_over.send_replace(false);
    }

    /// Every session to hand over; none joins until the hand-off ends.
    pub(crate) fn sessions_to_hand_off(&self) -> Vec<Arc<Session>> {
        self.inner.registry.begin_hand_off()
    }

    /// Goes on with a session the previous broker process handed over: `process` is its running
    /// process (what it is and its descriptors), `None` for an exited one.
    pub(crate) async fn adopt(
        &self,
        frozen: FrozenSession,
        process: Option<(HandedProcess, Vec<OwnedFd>)>,
    ) -> Result<(), Error> {
        let runtime = self.runtime_for(&frozen.spec.target)?;
        let spawned = match process {
            Some((process, fds)) => Some(runtime.adopt(frozen.id, process, fds).await?),
            None => None,
        };
        let context = TaskContext {
            runtime,
            spec: frozen.spec.clone(),
            events: self.inner.events.clone(),
            shutdown: self.inner.shutdown.child_token(),
            tracker: self.inner.tracker.clone(),
            recent_input: Arc::clone(&self.inner.recent_input),
        };
        let (session, task, pty) = Session::adopt(
            frozen,
            spawned,
            self.inner.settings,
            context,
            self.inner.recordings.as_ref(),
        );
        self.inner.registry.insert(Arc::clone(&session))?;
        let registry = Arc::clone(&self.inner.registry);
        self.inner.tracker.spawn(async move {
            task.run_adopted(pty).await;
            registry.remove(&session);
        });
        Ok(())
    }

    /// Stops taking sessions, closes every one (their clients hear `Closed` with reason
    /// shutdown, their process groups end) and waits for all of it.
    pub async fn shutdown(&self) {
        let sessions = self.inner.registry.stop_accepting();
        tracing::info!(sessions, "closing every session");
        self.inner.shutdown.cancel();
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use futures::FutureExt as _;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::time::{Instant, advance};

    use super::*;
    use crate::domain::{BrokerEventKind, ClientEvent, CloseReason};
    use crate::runtime::fake::{FakeRuntime, FakeSession};

    const MINUTE: Duration = Duration::from_secs(60);

    /// session-api's key in these tests: the broker holds its public half only.
    static SESSION_API_KEY: std::sync::LazyLock<ptyhub_attach_ticket::TicketSigningKey> =
        std::sync::LazyLock::new(ptyhub_attach_ticket::TicketSigningKey::generate);

    fn broker_with_fake_runtime() -> (Broker, Arc<FakeRuntime>) {
        let mut config = Config::new(
            ptyhub_wire::ServiceCredential::new("unit-test-service-token").unwrap(),
            SESSION_API_KEY.verifying_key(),
        );
        config.detached_timeout = 30 * MINUTE;
        let runtime = Arc::new(FakeRuntime::default());
        let broker = Broker::builder(config)
            .runtime(BackendKind::Local, runtime.clone())
            .build();
        (broker, runtime)
    }

    fn spec() -> SpawnSpec {
        FakeSession::spec()
    }

    fn hello(session_id: Uuid) -> Hello {
        let ticket = SESSION_API_KEY.sign(
            session_id,
            TicketRole::Controller,
            SystemTime::now() + Duration::from_secs(3600),
        );
        Hello {
            ticket,
            session_id,
            request: AttachRequest {
                role: Role::Controller,
                size: None,
                since: None,
                snapshot: false,
                present_only: false,
                holder: TicketHolder::default(),
                may_control: true,
            },
        }
    }

    /// Lets every task that a timer or a message woke run to its next wait.
    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    async fn next_attachments_change(events: &mut broadcast::Receiver<BrokerEvent>) -> (u32, u32) {
        loop {
            if let BrokerEventKind::AttachmentsChanged {
                controllers,
                viewers,
                ..
            } = events.recv().await.unwrap().kind
            {
                return (controllers, viewers);
            }
        }
    }

    async fn next_close(events: &mut broadcast::Receiver<BrokerEvent>) -> CloseReason {
        loop {
            if let BrokerEventKind::Closed { reason, .. } = events.recv().await.unwrap().kind {
                return reason;
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn idle_session_is_reaped_by_one_timer_that_attach_cancels() {
        let (broker, _runtime) = broker_with_fake_runtime();
        let (_, mut events) = broker.watch_events();
        let start = Instant::now();
        let session = broker.spawn(spec()).await.unwrap();
        let id = session.session_id;

        // Attached for a while: the timer armed at spawn (due at 30 min) is disarmed.
        advance(10 * MINUTE).await;
        let attachment = broker.attach(hello(id)).await.unwrap();
        assert_eq!(next_attachments_change(&mut events).await, (1, 0));
        advance(10 * MINUTE).await;
        drop(attachment);
        assert_eq!(next_attachments_change(&mut events).await, (0, 0));

        // Past the first deadline: one timer, re-armed at the detach, so nothing happens.
        advance(15 * MINUTE).await;
        // Give a reap that started by mistake (virtual) time to finish: none may arrive.
        let premature = tokio::time::timeout(Duration::from_secs(5), next_close(&mut events)).await;
        assert!(premature.is_err(), "reaped early: {premature:?}");
        assert!(broker.get(id).is_ok());

        // A full detached timeout after the detach, the session is reaped.
        advance(15 * MINUTE + Duration::from_secs(1)).await;
        let reason = next_close(&mut events).await;
        let reaped_after = start.elapsed();
        assert_eq!(reason, CloseReason::IdleReaped);
        assert!(
            (50 * MINUTE..51 * MINUTE).contains(&reaped_after),
            "reaped after {reaped_after:?}"
        );
        assert!(matches!(broker.get(id), Err(Error::SessionNotFound(_))));
        broker.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn an_exited_session_is_kept_for_its_tombstone_then_closed_as_exited() {
        let (broker, runtime) = broker_with_fake_runtime();
        let (_, mut events) = broker.watch_events();
        let session = broker.spawn(spec()).await.unwrap();
        let id = session.session_id;
        let mut terminal = runtime.take_terminal().unwrap();
        terminal.terminal.write_all(b"last words").await.unwrap();
        terminal.exit(crate::domain::ExitStatus::exited(3));
        let exited_at = loop {
            if let BrokerEventKind::Exited { exit, .. } = events.recv().await.unwrap().kind {
                assert_eq!(exit, crate::domain::ExitStatus::exited(3));
                break Instant::now();
            }
        };

        // A moment before the tombstone ends, the session is still there with its exit code,
        // and a late attach gets the final output.
        let tombstone = broker.inner.settings.tombstone;
        advance(tombstone - Duration::from_secs(1)).await;
        settle().await;
        while let Ok(event) = events.try_recv() {
            let closed = matches!(event.kind, BrokerEventKind::Closed { .. });
            assert!(!closed, "closed within the tombstone");
        }
        let info = broker.get(id).unwrap();
        assert_eq!(info.exit, Some(crate::domain::ExitStatus::exited(3)));
        let mut late = broker.attach(hello(id)).await.unwrap();
        let mut output = Vec::new();
        while !output.ends_with(b"last words") {
            match late.next_event().await {
                Some(Ok(ClientEvent::Output { data, .. })) => output.extend_from_slice(&data),
                Some(Ok(_)) => {}
                other => panic!("expected the final output, got {other:?}"),
            }
        }
        drop(late);

        // An attach does not prolong the tombstone: it ends on time, as `exited`.
        advance(Duration::from_secs(1)).await;
        let closed = tokio::time::timeout(MINUTE, next_close(&mut events)).await;
        assert_eq!(
            closed,
            Ok(CloseReason::Exited),
            "closed when the tombstone ends"
        );
        assert_eq!(exited_at.elapsed(), tombstone);
        assert!(matches!(broker.get(id), Err(Error::SessionNotFound(_))));
        broker.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_spawned_shared_lets_every_controller_type_from_the_start() {
        let (broker, runtime) = broker_with_fake_runtime();
        let session = broker
            .spawn_recorded(
                spec(),
                RecordingRequest::default(),
                ControlSettings {
                    mode: ControlMode::Shared,
                    grant_timeout: None,
                },
            )
            .await
            .unwrap();
        let mut terminal = runtime.take_terminal().unwrap();
        let first = broker.attach(hello(session.session_id)).await.unwrap();
        let second = broker.attach(hello(session.session_id)).await.unwrap();
        // In exclusive mode the second controller would have taken the first one over.
        for (attachment, typed) in [(&first, "one "), (&second, "two ")] {
            attachment
                .handle()
                .write_input(Bytes::from(typed))
                .await
                .unwrap_or_else(|error| panic!("{typed:?} refused: {error}"));
        }
        let mut written = vec![0; "one two ".len()];
        terminal.terminal.read_exact(&mut written).await.unwrap();
        assert_eq!(written, b"one two ");
        broker.shutdown().await;
    }

    /// A paste of more than the fake terminal holds, which its program never reads: the task
    /// writing it, once it waits on the terminal.
    async fn waiting_paste(
        handle: &crate::session::AttachmentHandle,
    ) -> tokio::task::JoinHandle<Result<crate::session::InputSent, Error>> {
        let paste = {
            let handle = handle.clone();
            tokio::spawn(async move {
                handle
                    .write_input(Bytes::from(vec![b'p'; 256 * 1024]))
                    .await
            })
        };
        settle().await;
        paste
    }

    #[tokio::test(start_paused = true)]
    async fn an_interrupt_the_runtime_cannot_send_says_why_not_that_the_process_exited() {
        let (broker, runtime) = broker_with_fake_runtime();
        let session = broker.spawn(spec()).await.unwrap();
        let terminal = runtime.take_terminal().unwrap();
        terminal.refuse_signals();
        let attachment = broker.attach(hello(session.session_id)).await.unwrap();
        let handle = attachment.handle();
        // The Ctrl-C must go as a signal.
        let paste = waiting_paste(&handle).await;
        let refused = handle
            .write_input(Bytes::from_static(&[crate::session::INTERRUPT]))
            .await
            .expect_err("the signal failed");
        assert!(matches!(refused, Error::InterruptNotSent(_)), "{refused:?}");
        assert!(refused.to_string().contains("refuses signals"), "{refused}");
        assert!(matches!(paste.await.unwrap(), Err(Error::InputInterrupted)));
        drop(terminal);
        broker.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn an_interrupt_after_a_paste_the_terminal_refused_goes_as_a_signal_though_it_has_room_again()
     {
        let (broker, runtime) = broker_with_fake_runtime();
        let (_, mut events) = broker.watch_events();
        let session = broker.spawn(spec()).await.unwrap();
        let mut terminal = runtime.take_terminal().unwrap();
        let attachment = broker.attach(hello(session.session_id)).await.unwrap();
        let handle = attachment.handle();
        let paste = waiting_paste(&handle).await;
        // The terminal makes room before the paste's writer runs again, as a kernel does when it
        // moves a piece of what it holds on to the line discipline: a byte written now would
        // still wait behind the rest of the paste.
        let mut moved_on = vec![0; 4096];
        terminal.terminal.read_exact(&mut moved_on).await.unwrap();
        let sent = handle
            .write_input(Bytes::from_static(&[crate::session::INTERRUPT]))
            .await
            .unwrap();
        assert_eq!(sent.bytes_written, 1);
        assert!(matches!(paste.await.unwrap(), Err(Error::InputInterrupted)));
        // SIGINT (the fake process ends by it), and no byte behind the paste.
        let exit = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if let BrokerEventKind::Exited { exit, .. } = events.recv().await.unwrap().kind {
                    break exit;
                }
            }
        })
        .await
        .expect("the process was sent no SIGINT");
        assert_eq!(exit, crate::domain::ExitStatus::signalled(2));
        let mut held = Vec::new();
        while let Some(Ok(read)) = terminal.terminal.read_buf(&mut held).now_or_never() {
            if read == 0 {
                break;
            }
        }
        assert!(
            held.iter().all(|byte| *byte == b'p'),
            "the terminal got more than the paste"
        );
        drop(terminal);
        broker.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn input_after_exit_is_refused_and_never_reaches_the_process() {
        let (broker, runtime) = broker_with_fake_runtime();
        let session = broker.spawn(spec()).await.unwrap();
        let mut terminal = runtime.take_terminal().unwrap();
        let mut attachment = broker.attach(hello(session.session_id)).await.unwrap();
        let handle = attachment.handle();
        handle
            .write_input(Bytes::from_static(b"before"))
            .await
            .unwrap();

        terminal.exit(crate::domain::ExitStatus::exited(0));
        loop {
            match attachment.next_event().await {
                Some(Ok(ClientEvent::Exit(_))) => break,
                Some(Ok(_)) => {}
                other => panic!("expected the exit, got {other:?}"),
            }
        }
        let refused = handle
            .write_input(Bytes::from_static(b"after"))
            .await
            .unwrap_err();
        assert!(matches!(refused, Error::ProcessExited), "{refused:?}");
        assert_eq!(refused.code(), ptyhub_wire::ErrorCode::WrongState);

        // The process's side ends with the input written while it ran, and nothing after.
        let mut received = Vec::new();
        terminal.terminal.read_to_end(&mut received).await.unwrap();
        assert_eq!(received, b"before");
        broker.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn activity_is_reported_at_most_once_a_second() {
        let (broker, runtime) = broker_with_fake_runtime();
        let (_, mut events) = broker.watch_events();
        let session = broker.spawn(spec()).await.unwrap();
        let mut terminal = runtime.take_terminal().unwrap();
        let mut reports = Vec::new();
        let start = Instant::now();
        // 100 chunks over 5 seconds.
        for _ in 0..100 {
            terminal.terminal.write_all(b"chunk").await.unwrap();
            advance(Duration::from_millis(50)).await;
            settle().await;
            while let Ok(event) = events.try_recv() {
                if let BrokerEventKind::Activity { output_offset, .. } = event.kind {
                    reports.push((Instant::now() - start, output_offset));
                }
            }
        }
        assert!(
            (4..=6).contains(&reports.len()),
            "{} activity reports for 5 seconds of output: {reports:?}",
            reports.len()
        );
        for pair in reports.windows(2) {
            assert!(
                pair[1].0 - pair[0].0 >= Duration::from_secs(1),
                "{reports:?}"
            );
            assert!(pair[1].1 > pair[0].1);
        }
        terminal.exit(crate::domain::ExitStatus::exited(0));
        broker.kill(session.session_id).await.unwrap();
        broker.shutdown().await;
    }
}
