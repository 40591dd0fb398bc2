//! A ptyhub service run as a separate process (the real binary, built next to the bench's own
//! executable), so that its resident memory can be read from `/proc/PID/status` alone. Ended by
//! SIGTERM with a bounded wait, and by SIGKILL when dropped still running.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A running service process.
#[derive(Debug)]
pub struct Service {
    name: &'static str,
    port: u16,
    log: PathBuf,
    child: Option<Child>,
}

impl Service {
    /// Starts the binary `name` from the bench's own directory on a free loopback port; `args`
    /// gets `--listen=127.0.0.1:<port>` first. Its output goes to a log file in `log_dir`.
    pub fn spawn(name: &'static str, args: &[String], log_dir: &Path) -> Result<Self> {
        let binary = sibling_binary(name)?;
        let port = free_port()?;
        let log = log_dir.join(format!("{name}.log"));
        let out = File::create(&log).with_context(|| format!("create {}", log.display()))?;
        let err = out.try_clone()?;
        let mut command = Command::new(&binary);
        for (variable, _) in std::env::vars_os() {
            if variable.to_string_lossy().starts_with("PTYHUB_") {
                command.env_remove(variable);
            }
        }
        let child = command
            .arg(format!("--listen=127.0.0.1:{port}"))
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("start {}", binary.display()))?;
        Ok(Self {
            name,
            port,
            log,
            child: Some(child),
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Fails with the end of the log when the process has exited.
    pub fn check_running(&mut self) -> Result<()> {
        let Some(child) = self.child.as_mut() else {
            bail!("{} was stopped", self.name);
        };
        if let Some(status) = child.try_wait()? {
            bail!("{} exited ({status}):\n{}", self.name, self.log_tail());
        }
        Ok(())
    }

    /// Resident memory of the process, KiB (`VmRSS`).
    pub fn resident_kib(&self) -> Result<u64> {
        let child = self.child.as_ref().context("the process was stopped")?;
        let path = format!("/proc/{}/status", child.id());
        let status = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
        parse_vm_rss(&status).with_context(|| format!("no VmRSS in {path}"))
    }

    /// The last lines of the service's log.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// SIGTERM, then up to `patience` for the process to exit, then SIGKILL.
    pub async fn stop(mut self, patience: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let deadline = tokio::time::Instant::now() + patience;
        while tokio::time::Instant::now() < deadline {
            if !matches!(child.try_wait(), Ok(None)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!("{} did not stop within {patience:?}: killed", self.name);
        let _ = child.kill();
        let _ = child.wait();
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

/// `VmRSS` in KiB from the text of `/proc/PID/status`.
pub fn parse_vm_rss(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The soft limit on open files of this process (children inherit it), from `/proc/self/limits`.
pub fn open_files_limit() -> Result<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").context("read /proc/self/limits")?;
    limits
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|soft| {
            if soft == "unlimited" {
                Some(u64::MAX)
            } else {
                soft.parse().ok()
            }
        })
        .context("no open-files limit in /proc/self/limits")
}

/// `name` in the directory of the bench's own executable (`cargo xtask bench` builds the
/// service binaries there first).
fn sibling_binary(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe().context("find the bench executable")?;
    let path = exe
        .parent()
        .context("the bench executable has no directory")?
        .join(name);
    if !path.is_file() {
        bail!(
            "no {name} binary at {} (`cargo xtask bench` builds it; or `cargo build -p {name}` with the bench's profile)",
            path.display()
        );
    }
    Ok(path)
}

/// A port on 127.0.0.1 that was free a moment ago (the services take their address as a flag).
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("bind 127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_from_the_status_text() {
        let status = "Name:\tpty-broker\nVmPeak:\t  10 kB\nVmRSS:\t    5120 kB\nThreads:\t3\n";
        assert_eq!(parse_vm_rss(status), Some(5120));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
    }

    #[test]
    fn this_process_has_an_open_files_limit() {
        assert!(open_files_limit().expect("limit") > 0);
    }
}
