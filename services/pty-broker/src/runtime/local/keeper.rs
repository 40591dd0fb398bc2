//! The session keeper: a small process between the broker and a local session's leader, so that
//! the leader's exit status outlives the broker process that started it.
//!
//! Only a parent can collect a process's exit status, and a broker that hands its sessions to its
//! next process (`handoff/`) stops being anyone's parent when it exits. So the broker binaries
//! (`pty-broker`, `ptyhub`) start each local session through themselves in keeper mode:
//!
//! 1. The broker runs its own executable (`/proc/self/exe`, which still works after the file on
//!    disk was replaced by an upgrade) with `argv[0]` = [`KEEPER_ARGV0`], the write end of a pipe
//!    named by number in `argv[1]`, and the session's argv after it. The PTY's slave is its stdin,
//!    stdout and stderr; the environment, the working directory and the user are the session's.
//! 2. The keeper leads a Unix session of its own (so no terminal's signals reach it), forks the
//!    session leader, which calls `setsid`, takes the PTY as its controlling terminal and execs
//!    the argv, then lets go of the PTY itself.
//! 3. Over the pipe it writes fixed records of five bytes, a tag and a big-endian `i32`:
//!    `P` pid once the exec succeeded, or `E` errno when it failed; then `X` code or `S` signal
//!    when the leader ends. Then it exits.
//!
//! The pipe's read end is what a broker process hands to the next one with the PTY master; the
//! keeper itself is reparented to init when the broker that started it exits. Binaries that
//! never hand off (tests running a broker in their own process) start sessions directly.

#![allow(unsafe_code)]

use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStringExt as _;

use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use nix::sys::signal::{SigHandler, Signal, signal};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, execvp, fork, pipe2, setsid};

/// The `argv[0]` that makes a broker binary a session keeper.
pub const KEEPER_ARGV0: &str = "ptyhub-session-keeper";

/// The size of one record on the keeper's pipe.
pub(super) const RECORD_BYTES: usize = 5;

/// What the keeper reports, in order: the exec's outcome, then the leader's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeeperRecord {
    Started { pid: u32 },
    ExecFailed { errno: i32 },
    Exited { code: i32 },
    Signalled { signal: i32 },
}

impl KeeperRecord {
    pub fn encode(self) -> [u8; RECORD_BYTES] {
        let (tag, value) = match self {
            KeeperRecord::Started { pid } => (b'P', pid as i32),
            KeeperRecord::ExecFailed { errno } => (b'E', errno),
            KeeperRecord::Exited { code } => (b'X', code),
            KeeperRecord::Signalled { signal } => (b'S', signal),
        };
        let mut record = [tag, 0, 0, 0, 0];
        record[1..].copy_from_slice(&value.to_be_bytes());
        record
    }

    pub fn decode(record: [u8; RECORD_BYTES]) -> Option<Self> {
        let value = i32::from_be_bytes([record[1], record[2], record[3], record[4]]);
        Some(match record[0] {
            b'P' => KeeperRecord::Started { pid: value as u32 },
            b'E' => KeeperRecord::ExecFailed { errno: value },
            b'X' => KeeperRecord::Exited { code: value },
            b'S' => KeeperRecord::Signalled { signal: value },
            _ => return None,
        })
    }
}

/// Runs the session keeper and exits when this process was started as one; returns at once
/// otherwise. Binaries that start local sessions through a keeper call it first thing in `main`,
/// before any thread exists (the keeper forks).
pub fn run_session_keeper_if_asked() {
    let mut args = std::env::args_os();
    let is_keeper = args
        .next()
        .is_some_and(|argv0| argv0.as_encoded_bytes() == KEEPER_ARGV0.as_bytes());
    if !is_keeper {
        return;
    }
    let code = match keep(args.collect()) {
        Ok(()) => 0,
        Err(error) => {
            // The broker reads the pipe, not stderr (which is the session's terminal): this is
            // for a person who ran the keeper by hand.
            eprintln!("{KEEPER_ARGV0}: {error}");
            2
        }
    };
    std::process::exit(code);
}

fn keep(args: Vec<OsString>) -> io::Result<()> {
    let mut args = args.into_iter();
    let status_fd: i32 = args
        .next()
        .and_then(|fd| fd.into_string().ok())
        .and_then(|fd| fd.parse().ok())
        .filter(|fd| *fd > 2)
        .ok_or_else(|| io::Error::other("usage: the status pipe's fd, then the argv"))?;
    let argv: Vec<CString> = args
        .map(|arg| CString::new(arg.into_vec()).map_err(io::Error::other))
        .collect::<Result<_, _>>()?;
    if argv.is_empty() {
        return Err(io::Error::other("no command to run"));
    }
    // SAFETY: the broker passed this descriptor for the keeper to own; nothing else here uses it.
    let mut status = File::from(unsafe { OwnedFd::from_raw_fd(status_fd) });
    fcntl(&status, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
    // The keeper must outlive hangups and terminals; it ends when its leader does. A broker that
    // is gone closes the pipe: writing then fails with EPIPE instead of killing the keeper.
    for ignored in [
        Signal::SIGHUP,
        Signal::SIGINT,
        Signal::SIGQUIT,
        Signal::SIGTERM,
        Signal::SIGPIPE,
        Signal::SIGTSTP,
        Signal::SIGTTIN,
        Signal::SIGTTOU,
    ] {
        // SAFETY: installing SIG_IGN runs no code of ours in a signal handler.
        unsafe { signal(ignored, SigHandler::SigIgn) }?;
    }
    setsid()?;
    let (exec_error_read, exec_error_write) = pipe2(OFlag::O_CLOEXEC)?;

    // SAFETY: the keeper is single-threaded (it runs before `main` starts anything), so the child
    // may do anything a fresh process may.
    match unsafe { fork() }? {
        ForkResult::Child => {
            drop(exec_error_read);
            let errno = start_leader(&argv);
            let mut exec_error = File::from(exec_error_write);
            let _ = exec_error.write_all(&errno.to_be_bytes());
            // SAFETY: `_exit` ends the child without running the parent's exit handlers twice.
            unsafe { libc::_exit(127) }
        }
        ForkResult::Parent { child } => {
            drop(exec_error_write);
            // The terminal belongs to the session: the keeper holds no end of it, so the output
            // ends when the session's processes are gone.
            let null = File::options().read(true).write(true).open("/dev/null")?;
            for target in 0..=2 {
                // SAFETY: replacing stdio with /dev/null; no Rust object owns 0..=2 here.
                if unsafe { libc::dup2(null.as_raw_fd(), target) } == -1 {
                    return Err(io::Error::last_os_error());
                }
            }
            let mut errno = [0u8; 4];
            let started = match File::from(exec_error_read).read_exact(&mut errno) {
                // The exec closed the pipe without a word: the command runs.
                Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => true,
                Err(error) => return Err(error),
                Ok(()) => false,
            };
            let first = if started {
                KeeperRecord::Started {
                    pid: child.as_raw() as u32,
                }
            } else {
                KeeperRecord::ExecFailed {
                    errno: i32::from_be_bytes(errno),
                }
            };
            // A broker that went away meanwhile cannot hear it; the leader runs on regardless.
            let _ = status.write_all(&first.encode());
            let end = loop {
                match waitpid(child, None) {
                    Ok(WaitStatus::Exited(_, code)) => break KeeperRecord::Exited { code },
                    Ok(WaitStatus::Signaled(_, signal, _)) => {
                        break KeeperRecord::Signalled {
                            signal: signal as i32,
                        };
                    }
                    Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                    Err(errno) => return Err(errno.into()),
                }
            };
            if started {
                let _ = status.write_all(&end.encode());
            }
            Ok(())
        }
    }
}

/// In the forked child: becomes the session leader on the PTY (stdin) and execs `argv`. Returns
/// the errno of what failed.
fn start_leader(argv: &[CString]) -> i32 {
    // Ignored signals survive exec: the session's programs get the defaults back.
    for number in 1..32 {
        // SAFETY: restoring default dispositions runs no code of ours.
        unsafe {
            libc::signal(number, libc::SIG_DFL);
        }
    }
    if let Err(errno) = setsid() {
        return errno as i32;
    }
    // SAFETY: TIOCSCTTY on stdin, the PTY's slave, takes an integer argument.
    if unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) } == -1 {
        return io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
    }
    match execvp(&argv[0], argv) {
        Ok(never) => match never {},
        Err(errno) => errno as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_encoding() {
        for record in [
            KeeperRecord::Started { pid: 4_194_304 },
            KeeperRecord::ExecFailed { errno: 2 },
            KeeperRecord::Exited { code: -1 },
            KeeperRecord::Exited { code: 255 },
            KeeperRecord::Signalled { signal: 9 },
        ] {
            assert_eq!(KeeperRecord::decode(record.encode()), Some(record));
        }
        assert_eq!(KeeperRecord::decode([b'?', 0, 0, 0, 0]), None);
    }
}
