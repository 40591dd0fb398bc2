//! A fake runtime for unit tests: the "process" is a pair of in-memory pipes that the test drives,
//! so that timers can run on tokio's paused clock without a real process in the way.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::io::DuplexStream;
use tokio::sync::watch;

use super::{GroupSignal, PtyProcess, PtyRuntime, RuntimeError, SpawnSpec, SpawnedPty};
use crate::domain::{ExitStatus, TerminalSize};

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
}

impl FakeTerminal {
    /// Makes the fake process exit with `status`.
    pub fn exit(&self, status: ExitStatus) {
        self.exit.send_replace(Some(status));
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

    async fn spawn(&self, _spec: &SpawnSpec) -> Result<SpawnedPty, RuntimeError> {
        let (session_end, terminal) = tokio::io::duplex(64 * 1024);
        let (output, input) = tokio::io::split(session_end);
        let exit = Arc::new(watch::Sender::new(None));
        self.spawned.lock().unwrap().push(FakeTerminal {
            terminal,
            exit: Arc::clone(&exit),
        });
        Ok(SpawnedPty {
            output: Box::pin(output),
            input: Box::pin(input),
            process: Box::new(FakeProcess { exit }),
        })
    }
}

#[derive(Debug)]
struct FakeProcess {
    exit: Arc<watch::Sender<Option<ExitStatus>>>,
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
