//! The old process's side: listening for a successor, freezing every session, sending them,
//! and either letting go (committed) or thawing them (aborted).

use std::collections::HashSet;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use tokio::net::UnixListener;
use tokio::time::timeout;

use super::wire::Channel;
use super::{
    ANSWER_TIMEOUT, Acceptance, Answer, FORMAT_VERSION, FREEZE_TIMEOUT, HandOffError, Hello,
    Outcome, SessionHeader, WireActivity, WireControl, WireExit, WireProcess, WireRecording,
    WireSpec, bind_fresh, running,
};
use crate::broker::Broker;
use crate::error::Error;
use crate::runtime::docker::SESSION_MARKER_VARIABLE;
use crate::runtime::procfs::{self, ProcStat};
use crate::session::{Frozen, Verdict};

/// How long a successor that connected may take to say hello. A successor says it at once;
/// waiting on one that does not holds up this broker's shutdown, never a session.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// How far up a peer's parents the check for a session's process looks.
const MAX_ANCESTORS: usize = 64;

/// Where a running broker waits for its successor.
#[derive(Debug)]
pub(crate) struct HandOffListener {
    listener: UnixListener,
    path: PathBuf,
}

/// A successor that connected, not yet heard.
#[derive(Debug)]
pub(crate) struct Successor {
    channel: Channel,
}

impl HandOffListener {
    pub fn bind(path: &Path) -> std::io::Result<Self> {
        Ok(Self {
            listener: bind_fresh(path)?,
            path: path.to_owned(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub async fn accept(&self) -> std::io::Result<Successor> {
        let (stream, _) = self.listener.accept().await?;
        Ok(Successor {
            channel: Channel::new(stream),
        })
    }
}

impl Broker {
    /// Hands every session and the listener `listener_fd` to `successor`. `Ok` once the
    /// successor owns them (this process must then exit without touching a session); an error
    /// when the hand-off did not happen, with every session going on here as before.
    pub(crate) async fn give_sessions(
        &self,
        successor: Successor,
        listener_fd: RawFd,
    ) -> Result<(), HandOffError> {
        let mut channel = successor.channel;
        let peer = channel.peer_pid();
        if let Err(reason) = self.check_peer(&channel) {
            tracing::warn!(?peer, %reason, "a process that may not take over connected to the hand-off socket");
            refuse(&mut channel, &reason).await;
            return Err(HandOffError::Refused(reason));
        }
        let hello: Hello = timeout(HELLO_TIMEOUT, channel.receive())
            .await
            .map_err(|_| HandOffError::TimedOut("the hello"))??;
        tracing::info!(?peer, version = %hello.version, "a successor asks to take over");
        if let Err(reason) = self.check_successor(&hello) {
            refuse(&mut channel, &reason).await;
            return Err(HandOffError::Refused(reason));
        }

        self.begin_hand_off();
        let frozen = match timeout(FREEZE_TIMEOUT, self.freeze_every_session()).await {
            Ok(Ok(frozen)) => frozen,
            Ok(Err(error)) => {
                self.end_hand_off();
                refuse(&mut channel, &error.to_string()).await;
                return Err(error);
            }
            Err(_) => {
                self.end_hand_off();
                refuse(&mut channel, "the sessions did not stop in time").await;
                return Err(HandOffError::TimedOut("the sessions to stop"));
            }
        };
        // Every session is frozen from here until the verdict: a successor that stops reading
        // holds them for one deadline at most, never longer.
        let sent = match timeout(
            ANSWER_TIMEOUT,
            send_sessions(&mut channel, &frozen, listener_fd),
        )
        .await
        {
            Ok(sent) => sent,
            Err(_) => Err(HandOffError::TimedOut("the successor to read the sessions")),
        };
        let accepted = match sent {
            Ok(()) => match timeout(ANSWER_TIMEOUT, channel.receive::<Acceptance>()).await {
                Ok(Ok(Acceptance::Accepted)) => Ok(()),
                Ok(Ok(Acceptance::Refused { reason })) => {
                    Err(HandOffError::RefusedBySuccessor(reason))
                }
                Ok(Err(error)) => Err(error),
                Err(_) => Err(HandOffError::TimedOut("the successor's acceptance")),
            },
            Err(error) => Err(error),
        };
        if let Err(error) = accepted {
            let aborted = Outcome::Aborted {
                reason: error.to_string(),
            };
            let _ = timeout(ANSWER_TIMEOUT, channel.send(&aborted)).await;
            for session in frozen {
                let _ = session.verdict.send(Verdict::Resume);
            }
            self.end_hand_off();
            return Err(error);
        }
        self.mark_handed_over();
        let sessions = frozen.len();
        let mut letting_go = Vec::with_capacity(sessions);
        for session in frozen {
            let _ = session.verdict.send(Verdict::Commit);
            letting_go.push(session.let_go);
        }
        // Each task marks its crash record as kept before this process may exit: an exit
        // that dropped a task first would remove the record the successor relies on.
        let _ = timeout(FREEZE_TIMEOUT, futures::future::join_all(letting_go)).await;
        // Committed whether or not the successor hears it: it owns the sessions from here, and
        // should it be gone, the crash records let the next start end them.
        match timeout(ANSWER_TIMEOUT, channel.send(&Outcome::Committed)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "the successor did not hear the commit"),
            Err(_) => tracing::warn!("the successor did not read the commit in time"),
        }
        tracing::info!(
            sessions,
            ?peer,
            "every session handed to the next broker process"
        );
        Ok(())
    }

    /// Why the process at the other end of `channel` may not take over, if it may not: it must
    /// run as this broker's user, in its PID namespace, and be no process of a session (no
    /// program in a terminal may freeze every terminal, or take them): not carrying a
    /// session's marker, and neither in the Unix session of a session's leader nor below one.
    fn check_peer(&self, channel: &Channel) -> Result<(), String> {
        let Some((uid, pid)) = channel.peer_credentials() else {
            return Err("the successor's credentials cannot be read".to_owned());
        };
        let own_uid = nix::unistd::geteuid().as_raw();
        if uid != own_uid {
            return Err(format!(
                "the successor runs as uid {uid}, not as this broker's {own_uid}"
            ));
        }
        let Some(pid) = pid
            .and_then(|pid| u32::try_from(pid).ok())
            .filter(|pid| *pid > 0)
        else {
            return Err("the successor runs in another PID namespace".to_owned());
        };
        if procfs::pid_namespace(pid) != procfs::pid_namespace(std::process::id()) {
            return Err("the successor runs in another PID namespace".to_owned());
        }
        let of_a_session = "the successor is a process of one of this broker's sessions";
        if procfs::environment_sets(pid, SESSION_MARKER_VARIABLE) {
            return Err(of_a_session.to_owned());
        }
        let leaders: HashSet<u32> = self
            .list()
            .into_iter()
            .filter_map(|info| info.pid)
            .collect();
        let mut current = pid;
        // Up the parents to init: a session's process was started below its leader, and keeps
        // the leader's Unix session unless it made one of its own.
        for _ in 0..MAX_ANCESTORS {
            let Some(stat) = ProcStat::read(current) else {
                break;
            };
            if leaders.contains(&current) || leaders.contains(&stat.session) {
                return Err(of_a_session.to_owned());
            }
            if stat.parent <= 1 {
                break;
            }
            current = stat.parent;
        }
        Ok(())
    }

    /// Why `hello`'s sender may not take over, if it may not.
    fn check_successor(&self, hello: &Hello) -> Result<(), String> {
        if hello.format != FORMAT_VERSION {
            return Err(format!(
                "hand-off format {} is not this broker's {FORMAT_VERSION}: upgrade through a \
                 version that speaks both, or restart (ending the sessions)",
                hello.format
            ));
        }
        let config = self.config();
        if hello.broker_id != config.broker_id {
            return Err(format!(
                "broker id {:?} is not this broker's {:?}",
                hello.broker_id, config.broker_id
            ));
        }
        for backend in &config.backends {
            let name = backend.to_string();
            if !hello.backends.contains(&name) {
                return Err(format!("the successor does not offer the {name} runtime"));
            }
        }
        Ok(())
    }

    /// Freezes every session; a session that closed meanwhile is left out. On an error every
    /// session frozen so far resumes (its verdict is dropped).
    async fn freeze_every_session(&self) -> Result<Vec<Frozen>, HandOffError> {
        let sessions = self.sessions_to_hand_off();
        let results =
            futures::future::join_all(sessions.iter().map(|session| session.freeze())).await;
        let mut frozen = Vec::with_capacity(results.len());
        for (session, result) in sessions.iter().zip(results) {
            match result {
                Ok(one) => frozen.push(one),
                Err(Error::SessionNotFound(_)) => {}
                Err(error) => return Err(HandOffError::Freeze(session.id, error.to_string())),
            }
        }
        Ok(frozen)
    }
}

async fn send_sessions(
    channel: &mut Channel,
    frozen: &[Frozen],
    listener_fd: RawFd,
) -> Result<(), HandOffError> {
    channel
        .send(&Answer::Welcome {
            format: FORMAT_VERSION,
            sessions: frozen.len(),
        })
        .await?;
    channel.send_fds(&[listener_fd]).await?;
    for Frozen { session, .. } in frozen {
        let running = running(session.phase).ok_or_else(|| {
            HandOffError::Freeze(
                session.id,
                format!("a session in phase {:?} cannot move", session.phase),
            )
        })?;
        let header = SessionHeader {
            session_id: session.id,
            spec: WireSpec::from_spec(&session.spec),
            running,
            cols: session.size.cols(),
            rows: session.size.rows(),
            ring_start: session.ring_start,
            exit: session.exit.map(WireExit::from),
            pid: session.pid,
            created_at: session.created_at,
            last_activity_at: session.last_activity_at,
            title: session.title.clone(),
            last_bell_at: session.last_bell_at,
            controller_generation: session.controller_generation,
            screen: session
                .screen
                .as_ref()
                .map(|snapshot| (snapshot.size.cols(), snapshot.size.rows())),
            tombstone_left: session.tombstone_left,
            process: session
                .process
                .as_ref()
                .map(|process| WireProcess::from(process.process.clone())),
            recording: session.recording.as_ref().map(WireRecording::from_frozen),
            activity: session.activity.as_ref().map(WireActivity::from_parts),
            prompt_wait_left: session.prompt_wait_left,
            control_mode: Some(session.control_mode.as_str().to_owned()),
            control: Some(WireControl::from_frozen(&session.control)),
        };
        channel.send(&header).await?;
        if let Some(process) = &session.process {
            channel.send_fds(&process.fds).await?;
        }
        channel.send_blob(&session.ring).await?;
        let screen = session
            .screen
            .as_ref()
            .map(|snapshot| snapshot.data.clone())
            .unwrap_or_else(Bytes::new);
        channel.send_blob(&[screen]).await?;
    }
    Ok(())
}

/// Tells the other end why it may not take over, giving up when it does not read.
async fn refuse(channel: &mut Channel, reason: &str) {
    let answer = Answer::Refused {
        reason: reason.to_owned(),
    };
    let _ = timeout(ANSWER_TIMEOUT, channel.send(&answer)).await;
}
