//! One service as a child process on a loopback port, with its output in a log file, ended by
//! SIGKILL (a crash) or SIGTERM (an operator), and always ended when dropped.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A port on 127.0.0.1 that was free a moment ago. The services take their listen address as a
/// flag and must be known to their peers before they start, so the port is chosen here.
pub fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("cannot bind 127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// A running service.
#[derive(Debug)]
pub struct Service {
    name: String,
    port: u16,
    log: PathBuf,
    child: Option<Child>,
}

impl Service {
    /// Starts `binary` with `args`, without any `PTYHUB_*` variable of the caller's environment.
    pub fn spawn(
        name: &str,
        binary: &Path,
        port: u16,
        args: &[String],
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
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("cannot start {name} ({})", binary.display()))?;
        Ok(Self {
            name: name.to_owned(),
            port,
            log,
            child: Some(child),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
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
        let Some(child) = self.child.as_ref() else {
            bail!("{} is not running", self.name);
        };
        let pid = Pid::from_raw(i32::try_from(child.id())?);
        kill(pid, Signal::SIGTERM).with_context(|| format!("cannot signal {}", self.name))
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
