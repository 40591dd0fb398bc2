//! One running exec as a [`PtyProcess`]: its exit status (learnt by asking the engine, which has
//! no wait call for an exec), resizing, and signalling its session's processes.

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::OnceCell;

use super::DockerError;
use super::engine::Engine;
use super::group::SessionGroup;
use super::handoff::ConnectionHandOff;
use super::resize_options;
use super::state::RecordGuard;
use crate::domain::{ExitStatus, TerminalSize};
use crate::runtime::{GroupSignal, ProcessHandOff, PtyProcess, RuntimeError};

/// Docker reports a process killed by signal N as 128 + N, as shells do.
fn exit_status_from_code(code: i64) -> ExitStatus {
    match i32::try_from(code) {
        Ok(code) if (129..=128 + 64).contains(&code) => ExitStatus::signalled(code - 128),
        Ok(code) => ExitStatus::exited(code),
        Err(_) => ExitStatus::exited(-1),
    }
}

/// What one inspection of an exec says of its end: its status once the engine reports it
/// stopped with an exit code. An exec reported not running and without an exit code has not
/// started yet: the engine reports one so between its creation and its start (a failed start
/// gets 126), and the start of one that was just asked for can take a while on a busy engine. So
/// that is no end, or a session would be reported exited with no code while its process runs.
fn exit_status_of(running: Option<bool>, exit_code: Option<i64>) -> Option<ExitStatus> {
    match (running, exit_code) {
        (Some(true), _) | (_, None) => None,
        (_, Some(code)) => Some(exit_status_from_code(code)),
    }
}

/// One exec in a container.
#[derive(Debug)]
pub(super) struct DockerProcess {
    pub engine: Engine,
    /// The container as the session named it, for messages.
    pub container: String,
    pub exec_id: String,
    /// The exec's pid as the engine reports it.
    pub host_pid: Option<u32>,
    pub group: SessionGroup,
    pub exit_status_timeout: Duration,
    pub exit_status: OnceCell<ExitStatus>,
    /// Turns true when the output stream has ended.
    pub output_ended: tokio::sync::watch::Receiver<bool>,
    /// The exec stream's connection, for a hand-off.
    pub connection: ConnectionHandOff,
    /// Held for its drop, which removes the session's crash-recovery record (unless the session
    /// was handed over).
    pub record: Option<RecordGuard>,
}

/// How often a running exec is asked whether it has exited while its output still flows (its
/// leader can exit while a background job keeps the terminal open).
const RUNNING_POLL_INTERVAL: Duration = Duration::from_secs(2);

impl DockerProcess {
    /// The exit status, once the engine reports the exec stopped. Docker has no wait call for an
    /// exec: while the output flows the engine is asked every [`RUNNING_POLL_INTERVAL`]; once
    /// the output ended, the status follows within moments, so it is asked at a quickening pace
    /// for at most `exit_status_timeout`.
    async fn poll_exit_status(&self) -> Result<ExitStatus, RuntimeError> {
        let mut output_ended = self.output_ended.clone();
        loop {
            if let Some(status) = self.exit_status_now().await? {
                return Ok(status);
            }
            tokio::select! {
                // A dropped sender means the output reader is gone: as good as ended.
                _ = output_ended.wait_for(|ended| *ended) => break,
                () = tokio::time::sleep(RUNNING_POLL_INTERVAL) => {}
            }
        }
        let deadline = tokio::time::Instant::now() + self.exit_status_timeout;
        let mut interval = Duration::from_millis(5);
        loop {
            if let Some(status) = self.exit_status_now().await? {
                return Ok(status);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(RuntimeError::Other(format!(
                    "exec in container {} has no exit status {:?} after its output ended",
                    self.container, self.exit_status_timeout
                )));
            }
            tokio::time::sleep(interval).await;
            interval = (interval * 2).min(Duration::from_millis(200));
        }
    }

    /// One look at the exec: its exit status if it has stopped.
    async fn exit_status_now(&self) -> Result<Option<ExitStatus>, RuntimeError> {
        match self.engine.docker.inspect_exec(&self.exec_id).await {
            Ok(inspected) => Ok(exit_status_of(inspected.running, inspected.exit_code)),
            // The container was removed, and every process in it with it.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {
                tracing::warn!(container = %self.container, exec_id = %self.exec_id, "exec vanished with its container");
                Ok(Some(ExitStatus::signalled(libc::SIGKILL)))
            }
            Err(error) => Err(DockerError::from(error).into()),
        }
    }
}

/// The exec's output stream, which says when it has ended (end of stream or an error), since
/// the end of the output is when the exec's exit status is due.
pub(super) struct SignalsEnd<R> {
    pub inner: R,
    pub ended: tokio::sync::watch::Sender<bool>,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for SignalsEnd<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let filled = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        match &polled {
            std::task::Poll::Ready(Ok(())) if buf.filled().len() == filled => {
                self.ended.send_replace(true);
            }
            std::task::Poll::Ready(Err(_)) => {
                self.ended.send_replace(true);
            }
            _ => {}
        }
        polled
    }
}

#[async_trait]
impl PtyProcess for DockerProcess {
    fn pid(&self) -> Option<u32> {
        if self.exit_status.initialized() {
            None
        } else {
            self.host_pid
        }
    }

    async fn resize(&self, size: TerminalSize) -> Result<(), RuntimeError> {
        let Err(error) = self
            .engine
            .docker
            .resize_exec(&self.exec_id, resize_options(size))
            .await
        else {
            return Ok(());
        };
        // A resize that races with the exit is not a failure.
        let exited = self.exit_status.initialized()
            || match self.engine.docker.inspect_exec(&self.exec_id).await {
                Ok(inspected) => inspected.running != Some(true),
                Err(_) => true,
            };
        if exited {
            return Ok(());
        }
        Err(DockerError::from(error).into())
    }

    async fn signal_group(&self, signal: GroupSignal) -> Result<(), RuntimeError> {
        self.group
            .signal(&self.engine.docker, signal)
            .await
            .map_err(RuntimeError::from)
    }

    async fn group_alive(&self) -> Result<bool, RuntimeError> {
        Ok(!self
            .group
            .members(&self.engine.docker)
            .await
            .map_err(RuntimeError::from)?
            .is_empty())
    }

    async fn wait(&self) -> Result<ExitStatus, RuntimeError> {
        self.exit_status
            .get_or_try_init(|| self.poll_exit_status())
            .await
            .copied()
    }

    fn hand_off(&self) -> Result<ProcessHandOff, RuntimeError> {
        self.connection_hand_off()
    }

    fn handed_over(&self) {
        if let Some(record) = &self.record {
            record.keep();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_exit_codes_map_like_the_local_runtime() {
        assert_eq!(exit_status_from_code(0), ExitStatus::exited(0));
        assert_eq!(exit_status_from_code(127), ExitStatus::exited(127));
        assert_eq!(exit_status_from_code(130), ExitStatus::signalled(2));
        assert_eq!(exit_status_from_code(137), ExitStatus::signalled(9));
        assert_eq!(exit_status_from_code(255), ExitStatus::exited(255));
        assert_eq!(exit_status_from_code(i64::MAX), ExitStatus::exited(-1));
    }

    #[test]
    fn an_exec_not_started_yet_has_not_ended() {
        // As the engine reports an exec between its creation and its start.
        assert_eq!(exit_status_of(Some(false), None), None);
        assert_eq!(exit_status_of(None, None), None);
        assert_eq!(exit_status_of(Some(true), None), None);
        assert_eq!(exit_status_of(Some(true), Some(0)), None);
        assert_eq!(
            exit_status_of(Some(false), Some(0)),
            Some(ExitStatus::exited(0))
        );
        assert_eq!(
            exit_status_of(Some(false), Some(137)),
            Some(ExitStatus::signalled(9))
        );
        assert_eq!(exit_status_of(None, Some(3)), Some(ExitStatus::exited(3)));
    }
}
