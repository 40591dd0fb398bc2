//! One service as a child process listening on a port of `127.0.0.1` that the kernel chose,
//! with its output in a log file; ended by SIGKILL (a crash) or SIGTERM (an operator), frozen by
//! SIGSTOP (a hung peer), and always ended when dropped.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::sockets::listening_addresses;

/// How long a service may take to start listening.
const START_PATIENCE: Duration = Duration::from_secs(60);

/// A running service.
#[derive(Debug)]
pub struct Service {
    name: String,
    address: SocketAddr,
    log: PathBuf,
    child: Option<Child>,
}

impl Service {
    /// Starts `binary` with `args` and `--listen=127.0.0.1:0`, without any `PTYHUB_*` variable
    /// of the caller's environment, and waits until it listens. The port is the one the
    /// process holds, read from `/proc` (see [`crate::sockets`]): no port is chosen before the
    /// process binds it, so no other process can take it in between.
    pub async fn start(
        name: &str,
        binary: &Path,
        args: &[String],
        log_dir: &Path,
    ) -> anyhow::Result<Self> {
        Self::start_with_env(name, binary, args, &[], log_dir).await
    }

    /// Like [`Service::start`], with extra environment variables.
    pub async fn start_with_env(
        name: &str,
        binary: &Path,
        args: &[String],
        env: &[(String, String)],
        log_dir: &Path,
    ) -> anyhow::Result<Self> {
        let log = log_dir.join(format!("{name}.log"));
        let out = File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let err = out.try_clone()?;
        let mut command = Command::new(binary);
        for (variable, _) in std::env::vars_os() {
            if variable.to_string_lossy().starts_with("PTYHUB_") {
                command.env_remove(variable);
            }
        }
        let child = command
            .arg("--listen=127.0.0.1:0")
            .args(args)
            .envs(env.iter().map(|(name, value)| (name, value)))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("cannot start {name} ({})", binary.display()))?;
        let mut service = Self {
            name: name.to_owned(),
            address: SocketAddr::from(([127, 0, 0, 1], 0)),
            log,
            child: Some(child),
        };
        service.address = service.wait_listening().await?;
        Ok(service)
    }

    /// Waits until the process listens on one address, and returns it.
    async fn wait_listening(&mut self) -> anyhow::Result<SocketAddr> {
        let pid = self.pid().context("the process is gone")?;
        let deadline = tokio::time::Instant::now() + START_PATIENCE;
        loop {
            // Read the sockets before checking the process, so that a socket seen belongs to
            // the live process and not to a reused pid.
            let listening = listening_addresses(pid);
            if !self.is_running() {
                bail!("{} exited before listening:\n{}", self.name, self.log());
            }
            match listening.as_deref() {
                Ok([address]) => return Ok(*address),
                Ok([]) => {}
                Ok(several) => bail!("{} listens on several addresses: {several:?}", self.name),
                Err(error) => bail!("cannot read the sockets of {} ({pid}): {error}", self.name),
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "{} did not listen within {START_PATIENCE:?}:\n{}",
                    self.name,
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where the process listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The process id, while the process runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The resident memory of the process (`VmRSS`), in bytes.
    pub fn resident_bytes(&self) -> anyhow::Result<u64> {
        let pid = self
            .pid()
            .with_context(|| format!("{} is not running", self.name))?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let kib = status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| value.trim().strip_suffix("kB"))
            .and_then(|value| value.trim().parse::<u64>().ok())
            .with_context(|| format!("no VmRSS in /proc/{pid}/status"))?;
        Ok(kib * 1024)
    }

    /// What the service has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether the process has not exited.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Ends the process as a crash would: SIGKILL, nothing said to anyone.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            bail!("{} is not running", self.name);
        };
        child
            .kill()
            .with_context(|| format!("cannot kill {}", self.name))?;
        child.wait()?;
        Ok(())
    }

    /// Sends SIGTERM and waits up to `patience` for the process to exit.
    pub fn terminate(&mut self, patience: Duration) -> anyhow::Result<ExitStatus> {
        self.send_terminate()?;
        self.wait(patience)
    }

    /// Sends SIGTERM, as an operator or Kubernetes would, and returns at once.
    pub fn send_terminate(&self) -> anyhow::Result<()> {
        self.signal(Signal::SIGTERM)
    }

    /// Stops the process with SIGSTOP: its sockets stay open and the kernel still acknowledges
    /// what its peers send, but it answers nothing, as a hung or partitioned peer would.
    pub fn freeze(&self) -> anyhow::Result<()> {
        self.signal(Signal::SIGSTOP)
    }

    /// Lets a frozen process go on (SIGCONT).
    pub fn thaw(&self) -> anyhow::Result<()> {
        self.signal(Signal::SIGCONT)
    }

    fn signal(&self, signal: Signal) -> anyhow::Result<()> {
        let Some(child) = self.child.as_ref() else {
            bail!("{} is not running", self.name);
        };
        let pid = Pid::from_raw(i32::try_from(child.id())?);
        kill(pid, signal).with_context(|| format!("cannot send {signal} to {}", self.name))
    }

    /// Waits up to `patience` for the process to exit.
    pub fn wait(&mut self, patience: Duration) -> anyhow::Result<ExitStatus> {
        let Some(child) = self.child.as_mut() else {
            bail!("{} is not running", self.name);
        };
        let deadline = Instant::now() + patience;
        loop {
            if let Some(status) = child.try_wait()? {
                self.child = None;
                return Ok(status);
            }
            if Instant::now() >= deadline {
                bail!("{} did not exit within {patience:?}", self.name);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
