//! The new process's side: asking the running broker for its sessions, checking what arrives,
//! and adopting it once the old process has let go.

use std::os::fd::OwnedFd;
use std::path::Path;

use bytes::Bytes;
use ptyhub_model::ControlMode;
use tokio::net::UnixStream;
use uuid::Uuid;

use super::wire::Channel;
use super::{
    Acceptance, Answer, FORMAT_VERSION, HandOffError, Hello, Outcome, SessionHeader, size,
};
use crate::broker::Broker;
use crate::domain::SessionPhase;
use crate::screen::Snapshot;
use crate::session::FrozenSession;

/// The test hook: `PTYHUB_BROKER_HANDOFF_STOP_AT=<step>` makes the new process stop itself
/// (SIGSTOP) at that step, so that a test can kill it exactly there. Steps: `hello` (sent),
/// `received` (every session arrived), `accepted` (sent), `committed` (heard, nothing adopted).
pub const STOP_AT_VARIABLE: &str = "PTYHUB_BROKER_HANDOFF_STOP_AT";

/// A connection to the running broker, not yet used.
#[derive(Debug)]
pub struct TakeOver {
    channel: Channel,
}

/// Connects to the running broker's hand-off socket; `None` when no broker listens there (the
/// new process then starts afresh).
pub async fn connect_to_predecessor(socket: &Path) -> Result<Option<TakeOver>, HandOffError> {
    match UnixStream::connect(socket).await {
        Ok(stream) => Ok(Some(TakeOver {
            channel: Channel::new(stream),
        })),
        Err(error)
            if matches!(
                error.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            Ok(None)
        }
        Err(error) => Err(error.into()),
    }
}

/// One session as it arrived.
struct Received {
    header: SessionHeader,
    fds: Vec<OwnedFd>,
    ring: Bytes,
    screen: Bytes,
}

impl Broker {
    /// Takes every session and the listening socket over from the running broker. Returns the
    /// listener to serve once the sessions run here; on an error nothing was adopted and the
    /// processes were not touched (the old broker keeps them, unless it is gone).
    pub async fn take_over(
        &self,
        take_over: TakeOver,
    ) -> Result<std::net::TcpListener, HandOffError> {
        let mut channel = take_over.channel;
        let config = self.config();
        channel
            .send(&Hello {
                format: FORMAT_VERSION,
                broker_id: config.broker_id.clone(),
                backends: config.backends.iter().map(ToString::to_string).collect(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
            })
            .await?;
        stop_here_for_tests("hello");
        let count = match channel.receive::<Answer>().await? {
            Answer::Refused { reason } => return Err(HandOffError::Refused(reason)),
            Answer::Welcome { format, .. } if format != FORMAT_VERSION => {
                return Err(HandOffError::Protocol(format!(
                    "the running broker answered in format {format}, not {FORMAT_VERSION}"
                )));
            }
            Answer::Welcome { sessions, .. } => sessions,
        };
        let listener = channel.receive_fds(1).await?.pop().expect("one descriptor");
        let mut received = Vec::with_capacity(count);
        for _ in 0..count {
            let header: SessionHeader = channel.receive().await?;
            let fds = match &header.process {
                Some(process) => channel.receive_fds(process.descriptors()).await?,
                None => Vec::new(),
            };
            let ring = channel.receive_blob().await?;
            let screen = channel.receive_blob().await?;
            received.push(Received {
                header,
                fds,
                ring,
                screen,
            });
        }
        stop_here_for_tests("received");
        if let Err(reason) = self.check_received(&received) {
            let _ = channel
                .send(&Acceptance::Refused {
                    reason: reason.clone(),
                })
                .await;
            return Err(HandOffError::Protocol(reason));
        }
        channel.send(&Acceptance::Accepted).await?;
        stop_here_for_tests("accepted");
        match channel.receive::<Outcome>().await? {
            Outcome::Committed => {}
            Outcome::Aborted { reason } => return Err(HandOffError::Aborted(reason)),
        }
        stop_here_for_tests("committed");
        let sessions = received.len();
        for one in received {
            self.adopt_received(one).await;
        }
        tracing::info!(
            sessions,
            "took every session over from the previous broker process"
        );
        Ok(std::net::TcpListener::from(listener))
    }

    /// Why this process cannot run what arrived, if it cannot.
    fn check_received(&self, received: &[Received]) -> Result<(), String> {
        for one in received {
            let header = &one.header;
            if let Some(process) = &header.process {
                let kind = process.backend();
                if !self.has_runtime(kind) {
                    return Err(format!(
                        "session {} needs the {kind} runtime, which this broker does not offer",
                        header.session_id,
                    ));
                }
            } else if header.running {
                return Err(format!(
                    "session {} runs but came without its process",
                    header.session_id
                ));
            }
            size(header.cols, header.rows).map_err(|error| error.to_string())?;
        }
        Ok(())
    }

    async fn adopt_received(&self, received: Received) {
        let Received {
            header,
            fds,
            ring,
            screen,
        } = received;
        let session_id = header.session_id;
        let adopted = async {
            let spec = header.spec.into_spec(session_id)?;
            let size = size(header.cols, header.rows)?;
            let ring_end = header.ring_start + ring.len() as u64;
            let screen = match header.screen {
                Some((cols, rows)) => Some(Snapshot {
                    offset: ring_end,
                    size: super::size(cols, rows)?,
                    data: screen,
                }),
                None => None,
            };
            // A recording that does not fit the ring is dropped, never the session: its spool
            // file stays for the next start to publish.
            let recording = header.recording.and_then(|recording| {
                recording
                    .into_frozen(header.ring_start, ring_end)
                    .inspect_err(|error| {
                        tracing::warn!(%session_id, %error, "the session's recording cannot go on here");
                    })
                    .ok()
            });
            // An activity that does not read is dropped, never the session.
            let activity = header.activity.and_then(|activity| {
                activity
                    .into_parts()
                    .inspect_err(|error| {
                        tracing::warn!(%session_id, %error, "the session's commands cannot go on here");
                    })
                    .ok()
            });
            // A control state that does not read is dropped (the session starts with none of
            // it, as from a predecessor that did not carry it), never the session.
            let control = header
                .control
                .and_then(|control| {
                    control
                        .into_frozen()
                        .inspect_err(|error| {
                            tracing::warn!(%session_id, %error, "the session's control state cannot go on here");
                        })
                        .ok()
                })
                .unwrap_or_default();
            let frozen = FrozenSession {
                id: session_id,
                spec,
                phase: if header.running {
                    SessionPhase::Running
                } else {
                    SessionPhase::Exited
                },
                size,
                ring_start: header.ring_start,
                ring: if ring.is_empty() {
                    Vec::new()
                } else {
                    vec![ring]
                },
                exit: header.exit.map(Into::into),
                pid: header.pid,
                created_at: header.created_at,
                last_activity_at: header.last_activity_at,
                title: header.title,
                last_bell_at: header.last_bell_at,
                controller_generation: header.controller_generation,
                screen,
                activity,
                tombstone_left: header.tombstone_left,
                process: None,
                recording,
                // Bounded as the wait itself is: a longer one is a predecessor's mistake.
                prompt_wait_left: header
                    .prompt_wait_left
                    .map(|left| left.min(crate::session::FIRST_PROMPT_WAIT)),
                control_mode: control_mode_taken(header.control_mode.as_deref(), session_id),
                control,
            };
            self.adopt(frozen, header.process.map(|process| (process.into(), fds)))
                .await
                .map_err(|error| HandOffError::Protocol(error.to_string()))
        };
        if let Err(error) = adopted.await {
            // Nobody can serve it: its descriptors close, and the crash record lets the next
            // start end whatever of it survives the hangup.
            tracing::error!(%session_id, %error, "could not take the session over");
        }
    }
}

/// The control mode a predecessor handed over. One this process does not know (from a newer
/// predecessor) is taken as exclusive, the mode with the fewest writers, rather than losing the
/// session.
fn control_mode_taken(handed: Option<&str>, session_id: Uuid) -> ControlMode {
    let Some(handed) = handed else {
        return ControlMode::Exclusive;
    };
    handed.parse().unwrap_or_else(|error| {
        tracing::warn!(%session_id, %error, "taken over as exclusive");
        ControlMode::Exclusive
    })
}

/// Stops this process at `step` when the test hook asks for it.
fn stop_here_for_tests(step: &str) {
    if std::env::var(STOP_AT_VARIABLE).is_ok_and(|asked| asked == step) {
        tracing::warn!(step, "stopping at the hand-off step the test hook names");
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
    }
}
