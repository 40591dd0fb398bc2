//! The local runtime: a process on a `nix` PTY on the broker's own host, for development and for
//! `ptyhub up` without Docker.
//!
//! The child becomes a session leader (`setsid`) with the PTY as its controlling terminal, so
//! every process it starts (job-control groups included) belongs to one Unix session whose id is
//! the child's pid. Ending a session signals that whole Unix session, found through `/proc`, not
//! only the leader's process group: an interactive shell puts each background job in a process
//! group of its own.
//!
//! The master is non-blocking and registered with tokio (`AsyncFd`): no thread per session. It is
//! watched for output always, and for room to write only while a write waits for it.
//!
//! With a session keeper ([`LocalRuntime::with_session_keeper`], `keeper.rs`) the leader is the
//! keeper's child rather than the broker's, and its exit status arrives over the keeper's pipe:
//! then the master and that pipe are all a session is, and both can go to the next broker
//! process ([`PtyProcess::hand_off`], [`PtyRuntime::adopt`]).
//!
//! This is the one module of the broker that calls into the PTY system calls directly; every
//! `unsafe` block says why it is sound. The window size goes through `rustix`, which needs none.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd as _, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use async_trait::async_trait;
use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use nix::pty::{Winsize, openpty};
use nix::sys::signal::Signal;
use nix::unistd::User;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, ReadBuf};
use tokio::net::unix::pipe;
use tokio::process::Child;
use tokio::sync::{Mutex, OnceCell};
use uuid::Uuid;

use super::procfs::{self, Leader};
use super::{
    GroupSignal, HandedProcess, ProcessHandOff, PtyProcess, PtyRuntime, RuntimeError, SpawnSpec,
    SpawnedPty, Target,
};
use crate::domain::{ExitStatus, TerminalSize};
use crate::policy::{SessionUser, SpawnPolicy, resolve_user};

mod keeper;
mod records;

pub use keeper::{KEEPER_ARGV0, run_session_keeper_if_asked};
use keeper::{KeeperRecord, RECORD_BYTES};
pub use records::{LocalReapReport, reap_local_orphans};
use records::{RecordDirectory, RecordGuard};

/// Spawns processes on PTYs of the broker's host.
#[derive(Debug, Clone, Default)]
pub struct LocalRuntime {
    /// The shell used when a spawn gives no command; `$SHELL`, else `/bin/sh`.
    default_shell: Option<String>,
    /// Where each live session's leader is recorded, so that the next start after a crash can
    /// end what survived it. No records without a data directory.
    records: Option<RecordDirectory>,
    /// The executable that runs as each session's keeper (`keeper.rs`); sessions are the
    /// broker's own children without one, and cannot be handed over.
    keeper: Option<PathBuf>,
}

impl LocalRuntime {
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses `shell` when a spawn gives no command.
    pub fn with_default_shell(shell: impl Into<String>) -> Self {
        Self {
            default_shell: Some(shell.into()),
            ..Self::default()
        }
    }

    /// Starts every session through `executable` in keeper mode (a binary that calls
    /// [`run_session_keeper_if_asked`] first), so that its sessions can be handed over.
    pub fn with_session_keeper(mut self, executable: impl Into<PathBuf>) -> Self {
        self.keeper = Some(executable.into());
        self
    }

    /// Records every live session under `data_dir`, for [`reap_local_orphans`] after a crash.
    pub fn with_data_dir(mut self, data_dir: &Path) -> Self {
        self.records = Some(RecordDirectory::under(data_dir));
        self
    }

    fn argv(&self, spec: &SpawnSpec) -> Vec<String> {
        if !spec.command.is_empty() {
            return spec.command.clone();
        }
        let shell = self
            .default_shell
            .clone()
            .or_else(|| {
                std::env::var("SHELL")
                    .ok()
                    .filter(|shell| !shell.is_empty())
            })
            .unwrap_or_else(|| "/bin/sh".to_owned());
        vec![shell]
    }
}

/// The variables a local terminal starts with before the instance's own: `TERM`, `LANG`, `HOME`,
/// `PATH`, `USER` and `SHELL`, each from the session's user where one is named, else from the
/// broker's own value, else a default. Nothing else of the broker's environment is passed on.
fn session_environment(program: &str, user: Option<&User>) -> Vec<(&'static str, String)> {
    let inherited = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    let (home, user_name) = match user {
        Some(user) => (
            Some(user.dir.display().to_string()),
            Some(user.name.clone()),
        ),
        None => (inherited("HOME"), inherited("USER")),
    };
    let mut environment = vec![
        ("TERM", "xterm-256color".to_owned()),
        (
            "LANG",
            inherited("LANG").unwrap_or_else(|| "C.UTF-8".to_owned()),
        ),
        (
            "PATH",
            inherited("PATH").unwrap_or_else(|| DEFAULT_PATH.to_owned()),
        ),
        (
            "SHELL",
            match user {
                Some(user) => user.shell.display().to_string(),
                None => inherited("SHELL").unwrap_or_else(|| program.to_owned()),
            },
        ),
    ];
    environment.extend(home.map(|home| ("HOME", home)));
    environment.extend(user_name.map(|name| ("USER", name)));
    environment
}

/// `PATH` for a terminal when the broker has none: the usual directories of a Linux host.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A user name's uid on this host, as the spawn will look it up.
fn local_uid_of(name: &str) -> Option<u32> {
    User::from_name(name)
        .ok()
        .flatten()
        .map(|user| user.uid.as_raw())
}

#[async_trait]
impl PtyRuntime for LocalRuntime {
    /// A local session runs as the user it names, else as the broker's own; `--deny-user`
    /// applies to either (root is the operator's to deny here: a broker running as root hands
    /// out root shells by design).
    async fn admit(&self, spec: &SpawnSpec, policy: &SpawnPolicy) -> Result<(), RuntimeError> {
        if !policy.checks_users(false) {
            return Ok(());
        }
        let user = match spec.user.as_deref().filter(|name| !name.is_empty()) {
            Some(name) => resolve_user(name, None),
            None => {
                let uid = nix::unistd::getuid();
                SessionUser {
                    name: User::from_uid(uid).ok().flatten().map(|user| user.name),
                    uid: Some(uid.as_raw()),
                }
            }
        };
        let user = SessionUser {
            uid: user
                .uid
                .or_else(|| user.name.as_deref().and_then(local_uid_of)),
            name: user.name,
        };
        policy.check_user(&user, false, &local_uid_of)?;
        Ok(())
    }

    async fn spawn(&self, spec: &SpawnSpec) -> Result<SpawnedPty, RuntimeError> {
        if spec.target != Target::Local {
            return Err(RuntimeError::Unavailable(
                "the local runtime only runs local targets".to_owned(),
            ));
        }
        let argv = self.argv(spec);
        let program = argv[0].clone();
        let integrated = spec
            .shell_integration
            .then(|| crate::shell_integration::integrate(&argv))
            .flatten();
        let shell_integration = integrated.as_ref().map(|integrated| integrated.shell);
        let (argv, integration_env) = match integrated {
            Some(integrated) => (integrated.argv, integrated.env),
            None => (argv, Vec::new()),
        };
        let pty = openpty(&winsize(spec.size), None)
            .map_err(|errno| RuntimeError::io("openpty", io::Error::from(errno)))?;
        // Neither end may leak into other children the broker spawns: a leaked slave would keep
        // another session's output from ever ending.
        set_cloexec(&pty.master)?;
        set_cloexec(&pty.slave)?;
        fcntl(&pty.master, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).map_err(|errno| {
            RuntimeError::io("set pty master non-blocking", io::Error::from(errno))
        })?;

        // With a keeper, the keeper writes the leader's pid and end into this pipe.
        let keeper_pipe = match &self.keeper {
            Some(_) => Some(nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|errno| {
                RuntimeError::io("create the keeper's pipe", io::Error::from(errno))
            })?),
            None => None,
        };
        let mut command = match (&self.keeper, &keeper_pipe) {
            (Some(keeper), Some((_, write_end))) => {
                let mut command = std::process::Command::new(keeper);
                command
                    .arg0(KEEPER_ARGV0)
                    .arg(write_end.as_raw_fd().to_string())
                    .args(&argv);
                command
            }
            _ => {
                let mut command = std::process::Command::new(&argv[0]);
                command.args(&argv[1..]);
                command
            }
        };
        let keeper_fd = keeper_pipe
            .as_ref()
            .map(|(_, write_end)| write_end.as_raw_fd());
        // A terminal starts from a clean environment: the broker's own holds its secrets (the
        // service credential and the ticket secret may come from variables), and anything a
        // session may read is set here on purpose.
        command.env_clear();
        let user = match &spec.user {
            Some(name) => Some(
                User::from_name(name)
                    .map_err(|errno| {
                        RuntimeError::SpawnFailed(format!("cannot look up user {name}: {errno}"))
                    })?
                    .ok_or_else(|| RuntimeError::SpawnFailed(format!("unknown user {name}")))?,
            ),
            None => None,
        };
        for (name, value) in session_environment(&program, user.as_ref()) {
            command.env(name, value);
        }
        command.envs(spec.env.iter().map(|(name, value)| (name, value)));
        command.envs(integration_env.iter().map(|(name, value)| (name, value)));
        if let Some(cwd) = &spec.cwd {
            command.current_dir(cwd);
        } else if let Some(user) = &user {
            command.current_dir(&user.dir);
        } else if let Some(home) = std::env::var_os("HOME") {
            command.current_dir(home);
        }
        if let Some(user) = &user {
            command.uid(user.uid.as_raw()).gid(user.gid.as_raw());
        }
        let stdio = |fd: &OwnedFd| -> Result<Stdio, RuntimeError> {
            fd.try_clone()
                .map(Stdio::from)
                .map_err(|error| RuntimeError::io("duplicate pty slave", error))
        };
        command
            .stdin(stdio(&pty.slave)?)
            .stdout(stdio(&pty.slave)?)
            .stderr(stdio(&pty.slave)?);
        // SAFETY: the closure runs in the child between fork and exec, so it may only call
        // async-signal-safe functions. `signal` (sigaction), `setsid` and `ioctl(TIOCSCTTY)` are
        // plain system calls that allocate nothing and take no locks. stdin is already the slave
        // (dup2'ed by std before this closure runs).
        // With a keeper, `fcntl` (also a plain system call) lets the keeper inherit its pipe's
        // write end, and the keeper makes the session leader itself.
        unsafe {
            command.pre_exec(move || {
                // Handlers do not survive exec, but ignored signals do: a broker started with
                // SIGINT or SIGHUP ignored (nohup, some supervisors) would hand that on, and the
                // terminal's ^C and the teardown's SIGHUP would do nothing. (std already resets
                // the signal mask and SIGPIPE.) SIGKILL and SIGSTOP refuse, harmlessly.
                for signal in 1..32 {
                    libc::signal(signal, libc::SIG_DFL);
                }
                if let Some(fd) = keeper_fd {
                    if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                        return Err(io::Error::last_os_error());
                    }
                    return Ok(());
                }
                nix::unistd::setsid().map_err(io::Error::from)?;
                if libc::ioctl(0, libc::TIOCSCTTY, 0) == -1 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut command = tokio::process::Command::from(command);
        command.kill_on_drop(false);
        let child = command.spawn().map_err(|error| {
            RuntimeError::SpawnFailed(format!("cannot start {}: {error}", argv[0]))
        })?;
        // The parent's copies of the slave must go, or the output would never end.
        drop(pty.slave);
        let (pid, exit) = match keeper_pipe {
            Some((read_end, write_end)) => {
                // Only the keeper may hold the write end, or the pipe would never report its end.
                drop(write_end);
                let mut status = pipe::Receiver::from_owned_fd(read_end)
                    .map_err(|error| RuntimeError::io("read the keeper's pipe", error))?;
                let pid = match read_keeper_record(&mut status).await {
                    Ok(KeeperRecord::Started { pid }) => pid,
                    Ok(KeeperRecord::ExecFailed { errno }) => {
                        // The keeper is collected by its parent, which is this broker.
                        let mut child = child;
                        let _ = child.wait().await;
                        return Err(RuntimeError::SpawnFailed(format!(
                            "cannot start {}: {}",
                            argv[0],
                            io::Error::from_raw_os_error(errno)
                        )));
                    }
                    Ok(other) => {
                        return Err(RuntimeError::Other(format!(
                            "the session keeper reported {other:?} before the start"
                        )));
                    }
                    Err(error) => {
                        return Err(RuntimeError::SpawnFailed(format!(
                            "the session keeper for {} ended before the start: {error}",
                            argv[0]
                        )));
                    }
                };
                (
                    pid,
                    ExitSource::Keeper {
                        status: Mutex::new(status),
                        keeper: Mutex::new(Some(child)),
                    },
                )
            }
            None => {
                let pid = child
                    .id()
                    .ok_or_else(|| RuntimeError::Other("spawned child has no pid".to_owned()))?;
                (pid, ExitSource::Child(Mutex::new(child)))
            }
        };
        // Not reaped yet (we hold the child), so its /proc entry is there even if it exited.
        let leader = Leader::of(pid).unwrap_or(Leader { pid, start_time: 0 });
        let record = match &self.records {
            Some(records) => Some(records.record(spec.session_id, leader).map_err(|error| {
                RuntimeError::io("write the session's crash-recovery record", error)
            })?),
            None => None,
        };

        let mut spawned = spawned_pty(pty.master, pid, leader, exit, record)?;
        spawned.shell_integration = shell_integration;
        Ok(spawned)
    }

    async fn adopt(
        &self,
        session_id: Uuid,
        process: HandedProcess,
        fds: Vec<OwnedFd>,
    ) -> Result<SpawnedPty, RuntimeError> {
        let HandedProcess::Local {
            leader_pid,
            leader_start_time,
        } = process
        else {
            return Err(RuntimeError::Unavailable(
                "the local runtime cannot take over a docker session".to_owned(),
            ));
        };
        let [master, status]: [OwnedFd; 2] = fds.try_into().map_err(|fds: Vec<OwnedFd>| {
            RuntimeError::Other(format!(
                "a local session comes with 2 descriptors, not {}",
                fds.len()
            ))
        })?;
        let leader = Leader {
            pid: leader_pid,
            start_time: leader_start_time,
        };
        let status = pipe::Receiver::from_owned_fd(status)
            .map_err(|error| RuntimeError::io("read the keeper's pipe", error))?;
        // The same record as the previous process wrote: it stays true, and this process removes
        // it when the session ends.
        let record = match &self.records {
            Some(records) => Some(records.record(session_id, leader).map_err(|error| {
                RuntimeError::io("write the session's crash-recovery record", error)
            })?),
            None => None,
        };
        let exit = ExitSource::Keeper {
            status: Mutex::new(status),
            keeper: Mutex::new(None),
        };
        spawned_pty(master, leader_pid, leader, exit, record)
    }
}

/// The three faces of a local PTY whose master is `master`.
fn spawned_pty(
    master: OwnedFd,
    pid: u32,
    leader: Leader,
    exit: ExitSource,
    record: Option<RecordGuard>,
) -> Result<SpawnedPty, RuntimeError> {
    // Readable only: see `PtyMasterWriter` for why not writable.
    // SAFETY: an `OwnedFd` is a valid open descriptor, always returns the same raw fd, and
    // stays open until the `AsyncFd` that owns it is dropped.
    let master = unsafe { AsyncFd::register_with_interest(master, Interest::READABLE) }
        .map_err(|error| RuntimeError::io("register pty master", error.into_parts().1))?;
    let master = Arc::new(master);
    Ok(SpawnedPty {
        output_buffered: false,
        shell_integration: None,
        output: Box::pin(PtyMasterReader {
            master: Arc::clone(&master),
        }),
        input: Box::pin(PtyMasterWriter {
            master: Arc::clone(&master),
            waiting: None,
        }),
        process: Box::new(LocalProcess {
            master,
            pid,
            leader,
            exit,
            exit_status: OnceCell::new(),
            record: std::sync::Mutex::new(record),
        }),
    })
}

/// Reads the keeper's next record; an error once the keeper has gone without one.
async fn read_keeper_record(status: &mut pipe::Receiver) -> io::Result<KeeperRecord> {
    let mut record = [0u8; RECORD_BYTES];
    status.read_exact(&mut record).await?;
    KeeperRecord::decode(record)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unknown keeper record"))
}

/// Where a local process's exit status comes from.
#[derive(Debug)]
enum ExitSource {
    /// The broker's own child.
    Child(Mutex<Child>),
    /// The keeper's pipe; `keeper` is the keeper process when this broker started it (and so
    /// collects it).
    Keeper {
        status: Mutex<pipe::Receiver>,
        keeper: Mutex<Option<Child>>,
    },
}

fn winsize(size: TerminalSize) -> Winsize {
    Winsize {
        ws_row: size.rows(),
        ws_col: size.cols(),
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

fn set_cloexec(fd: &OwnedFd) -> Result<(), RuntimeError> {
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .map(drop)
        .map_err(|errno| RuntimeError::io("set close-on-exec", io::Error::from(errno)))
}

/// The read half of a PTY master.
struct PtyMasterReader {
    master: Arc<AsyncFd<OwnedFd>>,
}

/// A read of the master shorter than this ends what the terminal held: a keystroke's echo, a
/// prompt, a line of a slow log. Only then is the master's readiness cleared, sparing the read
/// that would fail with `EAGAIN` after each. A longer read that did not fill the buffer is not
/// taken for an emptied terminal: the terminal hands over what its line discipline holds, a few
/// KiB, and refills it in the background, so during a flood most reads are short, and waiting
/// for the runtime's next look at epoll after each cost a local flood up to twice the CPU a MiB
/// (docs/benchmarks-history.md, the runs of 2026-12-07 from 06:30).
const SMALL_READ: usize = 256;

impl AsyncRead for PtyMasterReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.master.poll_read_ready(cx))?;
            // Read into the buffer's spare capacity as it is: zero-filling it first
            // (`initialize_unfilled`) cost a 16 KiB memset for every read, a keystroke's echo
            // included.
            // SAFETY: `read` only writes into the slice (never de-initialises a byte), and it
            // returns the part it wrote.
            let unfilled = unsafe { buf.unfilled_mut() };
            let room = unfilled.len();
            match guard.try_io(|master| {
                rustix::io::read(master.get_ref(), &mut *unfilled)
                    .map(|(written, _)| written.len())
                    .map_err(io::Error::from)
            }) {
                Ok(Ok(read)) => {
                    // SAFETY: `read` bytes at the start of the unfilled part were just written.
                    unsafe { buf.assume_init(read) };
                    buf.advance(read);
                    if read > 0 && read < SMALL_READ && read < room {
                        // The terminal held no more than this: the next read waits for epoll
                        // to say output came, rather than fail with `EAGAIN` first. A wake-up
                        // that came since the guard was taken stays (tokio clears only the
                        // readiness it handed out). An end (a read of nothing) keeps its
                        // readiness, so that a reader asking again is told again, not left
                        // waiting for output that cannot come.
                        guard.clear_ready();
                    }
                    return Poll::Ready(Ok(()));
                }
                // Linux reports EIO on the master once no process holds the slave any more: that
                // is the end of the output, not a failure.
                Ok(Err(error)) if error.raw_os_error() == Some(libc::EIO) => {
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(error)) => return Poll::Ready(Err(error)),
                Err(_would_block) => continue,
            }
        }
    }
}

/// The write half of a PTY master.
///
/// It writes without asking first, and watches the master for room only while a write waits
/// for it. The kernel wakes a PTY master's writers each time the program reads its input, so a
/// master watched for writability all along would wake the broker once for every keystroke the
/// program reads, for nothing (the echo comes later, with its own wake-up). The master's own
/// registration is readable only; a write the PTY refuses registers a duplicate of the master
/// for writability, and drops it once that write went in.
struct PtyMasterWriter {
    master: Arc<AsyncFd<OwnedFd>>,
    /// The duplicate watched for room while a write waits for the program to read.
    waiting: Option<AsyncFd<OwnedFd>>,
}

impl PtyMasterWriter {
    /// Watches the master for room; a fresh registration reports room already there, so a read
    /// by the program between the refused write and this call is not missed.
    fn watch_for_room(&self) -> io::Result<AsyncFd<OwnedFd>> {
        let duplicate = self.master.get_ref().try_clone()?;
        // SAFETY: the duplicate is a valid open descriptor, owned by the `AsyncFd` until it is
        // dropped, and always returns the same raw fd.
        unsafe { AsyncFd::register_with_interest(duplicate, Interest::WRITABLE) }
            .map_err(|error| error.into_parts().1)
    }
}

impl AsyncWrite for PtyMasterWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let Some(waiting) = &self.waiting else {
                match nix::unistd::write(self.master.get_ref().as_fd(), data) {
                    Err(nix::errno::Errno::EAGAIN) => self.waiting = Some(self.watch_for_room()?),
                    Err(nix::errno::Errno::EINTR) => {}
                    written => return Poll::Ready(written.map_err(io::Error::from)),
                }
                continue;
            };
            let written = {
                let mut guard = ready!(waiting.poll_write_ready(cx))?;
                match guard.try_io(|duplicate| {
                    nix::unistd::write(duplicate.get_ref().as_fd(), data).map_err(io::Error::from)
                }) {
                    Ok(written) => written,
                    Err(_would_block) => continue,
                }
            };
            self.waiting = None;
            return Poll::Ready(written);
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A process on a local PTY. Its pid is also its process group and Unix session id.
#[derive(Debug)]
struct LocalProcess {
    master: Arc<AsyncFd<OwnedFd>>,
    pid: u32,
    /// The leader's identity, so that its session's members are found by a pid that cannot
    /// have been reused.
    leader: Leader,
    exit: ExitSource,
    exit_status: OnceCell<ExitStatus>,
    /// Removes the crash-recovery record when the session is done with the process (unless it
    /// was handed over).
    record: std::sync::Mutex<Option<RecordGuard>>,
}

#[async_trait]
impl PtyProcess for LocalProcess {
    fn pid(&self) -> Option<u32> {
        if self.exit_status.initialized() {
            None
        } else {
            Some(self.pid)
        }
    }

    async fn resize(&self, size: TerminalSize) -> Result<(), RuntimeError> {
        // rustix wraps TIOCSWINSZ safely; nix offers it only as an unsafe ioctl.
        let winsize = rustix::termios::Winsize {
            ws_row: size.rows(),
            ws_col: size.cols(),
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        rustix::termios::tcsetwinsize(self.master.get_ref(), winsize)
            .map_err(|errno| RuntimeError::io("resize pty", io::Error::from(errno)))
    }

    async fn signal_group(&self, signal: GroupSignal) -> Result<(), RuntimeError> {
        let mut members = procfs::members_of_session(self.leader)
            .await
            .map_err(|error| RuntimeError::io("list session processes", error))?;
        if signal == GroupSignal::Interrupt {
            members = procfs::foreground_members(members);
        }
        procfs::signal_members(&members, nix_signal(signal))
            .map_err(|error| RuntimeError::io("signal session processes", error))
    }

    async fn group_alive(&self) -> Result<bool, RuntimeError> {
        Ok(!procfs::members_of_session(self.leader)
            .await
            .map_err(|error| RuntimeError::io("list session processes", error))?
            .is_empty())
    }

    async fn wait(&self) -> Result<ExitStatus, RuntimeError> {
        self.exit_status
            .get_or_try_init(|| async {
                match &self.exit {
                    ExitSource::Child(child) => {
                        let status =
                            child.lock().await.wait().await.map_err(|error| {
                                RuntimeError::io("wait for session process", error)
                            })?;
                        Ok(exit_status_from(status))
                    }
                    ExitSource::Keeper { status, keeper } => {
                        let record = read_keeper_record(&mut *status.lock().await)
                            .await
                            .map_err(|error| RuntimeError::io("read the leader's exit", error))?;
                        if let Some(mut keeper) = keeper.lock().await.take() {
                            // It exits right after the record: collect it, leave no zombie.
                            let _ = keeper.wait().await;
                        }
                        match record {
                            KeeperRecord::Exited { code } => Ok(ExitStatus::exited(code)),
                            KeeperRecord::Signalled { signal } => Ok(ExitStatus::signalled(signal)),
                            other => Err(RuntimeError::Other(format!(
                                "the session keeper reported {other:?} as the end"
                            ))),
                        }
                    }
                }
            })
            .await
            .copied()
    }

    fn hand_off(&self) -> Result<ProcessHandOff, RuntimeError> {
        let ExitSource::Keeper { status, .. } = &self.exit else {
            return Err(RuntimeError::Unavailable(
                "the session was started without a session keeper".to_owned(),
            ));
        };
        // The session task is frozen while the hand-off runs: nobody reads the pipe meanwhile.
        let status_fd = status
            .try_lock()
            .map_err(|_| RuntimeError::Other("the keeper's pipe is being read".to_owned()))?
            .as_raw_fd();
        Ok(ProcessHandOff {
            process: HandedProcess::Local {
                leader_pid: self.leader.pid,
                leader_start_time: self.leader.start_time,
            },
            fds: vec![self.master.get_ref().as_raw_fd(), status_fd],
        })
    }

    fn handed_over(&self) {
        if let Some(record) = self
            .record
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .as_mut()
        {
            record.keep();
        }
    }
}

fn exit_status_from(status: std::process::ExitStatus) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitStatus::exited(code),
        (None, Some(signal)) => ExitStatus::signalled(signal),
        // Stopped or continued statuses never come out of a wait for exit.
        (None, None) => ExitStatus::exited(-1),
    }
}

fn nix_signal(signal: GroupSignal) -> Signal {
    match signal {
        GroupSignal::Hangup => Signal::SIGHUP,
        GroupSignal::Terminate => Signal::SIGTERM,
        GroupSignal::Kill => Signal::SIGKILL,
        GroupSignal::Interrupt => Signal::SIGINT,
    }
}

/// The pids of the live (not zombie) processes whose Unix session id is `session_id`.
pub fn unix_session_members(session_id: u32) -> io::Result<Vec<u32>> {
    // A session outlives its leader; with the leader gone, its pid cannot have been reused
    // while members still carry it as their session id.
    let leader = Leader::of(session_id).unwrap_or(Leader {
        pid: session_id,
        start_time: 0,
    });
    Ok(procfs::session_members(None, None, Some(leader))?
        .into_iter()
        .map(|member| member.pid)
        .collect())
}
