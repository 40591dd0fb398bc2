//! A ptyhub service run as a separate process (the real binary, built next to the bench's own
//! executable), so that its resident memory can be read from `/proc/PID/status` alone. It listens
//! on `127.0.0.1:0` and the bench reads the port it bound from `/proc`, so no port is guessed.
//! Ended by SIGTERM with a bounded wait, and by SIGKILL when dropped still running.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How often [`Service::stop`] looks whether the process exited.
const STOP_POLL: Duration = Duration::from_millis(50);

/// A running service process.
#[derive(Debug)]
pub struct Service {
    name: &'static str,
    /// The port it listens on, once it does.
    port: OnceLock<u16>,
    log: PathBuf,
    child: Option<Child>,
}

impl Service {
    /// Starts the binary `name` from the bench's own directory with `--listen=127.0.0.1:0`, then
    /// `args`, and the variables `env` (its secrets: a service reads none from its command line)
    /// instead of any `PTYHUB_*` of the bench's own. Its output goes to a log file in `log_dir`.
    pub fn spawn(
        name: &'static str,
        args: &[String],
        env: &[(String, String)],
        log_dir: &Path,
    ) -> Result<Self> {
        let binary = sibling_binary(name)?;
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
            .arg("--listen=127.0.0.1:0")
            .args(args)
            .envs(env.iter().map(|(variable, value)| (variable, value)))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("start {}", binary.display()))?;
        Ok(Self {
            name,
            port: OnceLock::new(),
            log,
            child: Some(child),
        })
    }

    /// `http://127.0.0.1:<port>`; an error until the process listens (callers poll).
    pub fn endpoint(&self) -> Result<String> {
        let port = match self.port.get() {
            Some(port) => *port,
            None => {
                let child = self.child.as_ref().context("the process was stopped")?;
                let port = listening_port(child.id())?
                    .with_context(|| format!("{} does not listen yet", self.name))?;
                *self.port.get_or_init(|| port)
            }
        };
        Ok(format!("http://127.0.0.1:{port}"))
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

    /// Waits up to `patience` for the process to exit by itself.
    pub async fn exited(&mut self, patience: Duration) -> Result<std::process::ExitStatus> {
        let child = self.child.as_mut().context("the process was stopped")?;
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("{} still runs after {patience:?}", self.name);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// SIGTERM, then up to `patience` for the process to exit, then SIGKILL; how long it took to
    /// exit by itself (to [`STOP_POLL`]), `None` when it had to be killed.
    pub async fn stop(mut self, patience: Duration) -> Option<Duration> {
        let mut child = self.child.take()?;
        let signalled = tokio::time::Instant::now();
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let deadline = signalled + patience;
        while tokio::time::Instant::now() < deadline {
            if !matches!(child.try_wait(), Ok(None)) {
                return Some(signalled.elapsed());
            }
            tokio::time::sleep(STOP_POLL).await;
        }
        eprintln!("{} did not stop within {patience:?}: killed", self.name);
        let _ = child.kill();
        let _ = child.wait();
        None
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

/// The TCP port the process `pid` listens on: the listening sockets of its network namespace
/// (`/proc/PID/net/tcp`) that are open in the process (`/proc/PID/fd`). `None` while there is
/// none.
fn listening_port(pid: u32) -> Result<Option<u16>> {
    let fds = format!("/proc/{pid}/fd");
    let mut sockets = HashSet::new();
    for entry in std::fs::read_dir(&fds).with_context(|| format!("read {fds}"))? {
        // A descriptor closed since the listing has no link to read.
        let Ok(target) = std::fs::read_link(entry?.path()) else {
            continue;
        };
        if let Some(inode) = target
            .to_str()
            .and_then(|target| target.strip_prefix("socket:["))
            .and_then(|target| target.strip_suffix(']'))
        {
            sockets.insert(inode.to_owned());
        }
    }
    let table_path = format!("/proc/{pid}/net/tcp");
    let table =
        std::fs::read_to_string(&table_path).with_context(|| format!("read {table_path}"))?;
    Ok(parse_listening_port(&table, &sockets))
}

/// The port of the first listening socket (state `0A`) in a `/proc/net/tcp` table whose inode is
/// one of `sockets`.
fn parse_listening_port(table: &str, sockets: &HashSet<String>) -> Option<u16> {
    const LISTEN: &str = "0A";
    table.lines().skip(1).find_map(|line| {
        // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (local, state, inode) = (fields.get(1)?, fields.get(3)?, fields.get(9)?);
        if *state != LISTEN || !sockets.contains(*inode) {
            return None;
        }
        u16::from_str_radix(local.rsplit_once(':')?.1, 16).ok()
    })
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
    fn the_listening_port_is_the_one_of_the_process_own_listening_socket() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0
   1: 0100007F:C350 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1 0 100 0 0 10 0
   2: 0100007F:C351 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 333 1 0 20 4 30 10 -1
";
        let ours: HashSet<String> = ["222".to_owned(), "333".to_owned()].into();
        assert_eq!(parse_listening_port(table, &ours), Some(0xC350));
        let connected_only: HashSet<String> = ["333".to_owned()].into();
        assert_eq!(parse_listening_port(table, &connected_only), None);
    }

    #[test]
    fn the_port_of_a_listener_of_this_process_is_found() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("bound").port();
        // No other test of this binary listens.
        assert_eq!(
            listening_port(std::process::id()).expect("read /proc"),
            Some(port)
        );
        drop(listener);
    }

    #[test]
    fn this_process_has_an_open_files_limit() {
        assert!(open_files_limit().expect("limit") > 0);
    }
}
