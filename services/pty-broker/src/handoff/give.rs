//! The old process's side: listening for a successor, freezing every session, sending them,
//! and either letting go (committed) or thawing them (aborted).

use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use tokio::net::UnixListener;
use tokio::time::timeout;

use super::wire::Channel;
use super::{
    ANSWER_TIMEOUT, Acceptance, Answer, FORMAT_VERSION, FREEZE_TIMEOUT, HandOffError, Hello,
    Outcome, SessionHeader, WireExit, WireProcess, WireRecording, WireSpec, bind_fresh, running,
};
use crate::broker::Broker;
use crate::error::Error;
use crate::session::{Frozen, Verdict};

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
        let hello: Hello = timeout(ANSWER_TIMEOUT, channel.receive())
            .await
            .map_err(|_| HandOffError::TimedOut("the hello"))??;
        tracing::info!(?peer, version = %hello.version, "a successor asks to take over");
        if let Err(reason) = self.check_successor(&hello) {
            let _ = channel
                .send(&Answer::Refused {
                    reason: reason.clone(),
                })
                .await;
            return Err(HandOffError::Refused(reason));
        }

        self.begin_hand_off();
        let frozen = match timeout(FREEZE_TIMEOUT, self.freeze_every_session()).await {
            Ok(Ok(frozen)) => frozen,
            Ok(Err(error)) => {
                self.end_hand_off();
                let _ = channel
                    .send(&Answer::Refused {
                        reason: error.to_string(),
                    })
                    .await;
                return Err(error);
            }
            Err(_) => {
                self.end_hand_off();
                let reason = "the sessions did not stop in time".to_owned();
                let _ = channel
                    .send(&Answer::Refused {
                        reason: reason.clone(),
                    })
                    .await;
                return Err(HandOffError::TimedOut("the sessions to stop"));
            }
        };
        let sent = send_sessions(&mut channel, &frozen, listener_fd).await;
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
            let _ = channel
                .send(&Outcome::Aborted {
                    reason: error.to_string(),
                })
                .await;
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
        if let Err(error) = channel.send(&Outcome::Committed).await {
            tracing::warn!(%error, "the successor did not hear the commit");
        }
        tracing::info!(
            sessions,
            ?peer,
            "every session handed to the next broker process"
        );
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
