//! A real pseudo-terminal for `ptyhub attach`: the test holds the master (reads what the user
//! would see, writes what they would type) and `ptyhub` runs on the slave as its controlling
//! terminal (util-linux `setsid --ctty`), so raw mode, SIGWINCH and the restored modes are the
//! kernel's, not a simulation.

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use nix::pty::{Winsize, openpty};
use nix::sys::termios::{Termios, tcgetattr};

use super::{PATIENCE, Up, wait_bounded};

/// `ptyhub` running on the slave side of a PTY the test owns.
#[derive(Debug)]
pub struct Terminal {
    child: Child,
    master: File,
    slave: OwnedFd,
    /// The slave's modes before `ptyhub` started on it.
    initial_modes: Termios,
    screen: Arc<Screen>,
    /// Everything before this byte of the output has been matched by [`Terminal::expect`].
    cursor: usize,
}

#[derive(Debug, Default)]
struct Screen {
    output: Mutex<Vec<u8>>,
    grew: Condvar,
}

impl Terminal {
    /// Runs `ptyhub --data-dir <up's> ARGS...` on a new PTY of `rows` x `cols`.
    pub fn spawn(up: &Up, args: &[&str], rows: u16, cols: u16) -> Self {
        Self::spawn_command(&up.ptyhub(), args, rows, cols)
    }

    /// Runs `ptyhub` (a command with its program, first arguments and environment, such as
    /// `--server URL --token T`) with `args` after them, on a new PTY of `rows` x `cols`.
    pub fn spawn_command(
        ptyhub: &std::process::Command,
        args: &[&str],
        rows: u16,
        cols: u16,
    ) -> Self {
        let size = Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = openpty(&size, None).expect("openpty");
        let master = File::from(pty.master);
        let slave = pty.slave;
        let initial_modes = tcgetattr(&slave).expect("tcgetattr on the new slave");
        let mut command = std::process::Command::new("setsid");
        // `--ctty` makes the slave (stdin) the controlling terminal of the new session, so the
        // kernel delivers SIGWINCH to ptyhub; `--wait` keeps the exit status if setsid forks.
        command
            .args(["--ctty", "--wait"])
            .arg(ptyhub.get_program())
            .args(ptyhub.get_args())
            .args(args)
            .stdin(Stdio::from(slave.try_clone().expect("dup slave")))
            .stdout(Stdio::from(slave.try_clone().expect("dup slave")))
            .stderr(Stdio::from(slave.try_clone().expect("dup slave")));
        for (name, value) in ptyhub.get_envs() {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        command.env("TERM", "xterm");
        let child = command.spawn().expect("spawn setsid ptyhub");
        let screen = Arc::new(Screen::default());
        let mut reader = master.try_clone().expect("dup master");
        let shared = Arc::clone(&screen);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 8192];
            loop {
                match reader.read(&mut buffer) {
                    Ok(0) | Err(_) => return,
                    Ok(read) => {
                        shared
                            .output
                            .lock()
                            .expect("screen lock")
                            .extend_from_slice(&buffer[..read]);
                        shared.grew.notify_all();
                    }
                }
            }
        });
        Self {
            child,
            master,
            slave,
            initial_modes,
            screen,
            cursor: 0,
        }
    }

    /// Types `keys` as the user would.
    pub fn type_keys(&mut self, keys: &str) {
        self.master
            .write_all(keys.as_bytes())
            .expect("write to the PTY master");
    }

    /// Waits until `needle` appears in the output after what earlier calls matched, and moves
    /// past it. Fails the test, showing the output, when it does not come.
    pub fn expect(&mut self, needle: &str) {
        let deadline = Instant::now() + PATIENCE;
        let mut output = self.screen.output.lock().expect("screen lock");
        loop {
            if let Some(at) = find(&output[self.cursor..], needle.as_bytes()) {
                self.cursor += at + needle.len();
                return;
            }
            let now = Instant::now();
            if now >= deadline {
                let seen = String::from_utf8_lossy(&output).into_owned();
                drop(output);
                panic!(
                    "{needle:?} did not appear within {PATIENCE:?}; the terminal showed:\n{seen:?}"
                );
            }
            output = self
                .screen
                .grew
                .wait_timeout(output, deadline - now)
                .expect("screen lock")
                .0;
        }
    }

    /// Everything shown so far.
    pub fn shown(&self) -> String {
        String::from_utf8_lossy(&self.screen.output.lock().expect("screen lock")).into_owned()
    }

    /// Changes the window size as a terminal emulator would; the kernel sends SIGWINCH to the
    /// terminal's foreground process group.
    pub fn resize(&self, rows: u16, cols: u16) {
        let size = rustix::termios::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        rustix::termios::tcsetwinsize(&self.master, size).expect("TIOCSWINSZ");
    }

    /// The slave's terminal modes before `ptyhub` started.
    pub fn initial_modes(&self) -> &Termios {
        &self.initial_modes
    }

    /// The slave's current terminal modes.
    pub fn modes(&self) -> Termios {
        tcgetattr(&self.slave).expect("tcgetattr on the slave")
    }

    /// Sends `signal` to `ptyhub` (setsid did not fork, so the child is ptyhub itself).
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("pid"));
        nix::sys::signal::kill(pid, signal).expect("signal ptyhub");
    }

    /// Waits for `ptyhub` to exit, failing the test after [`PATIENCE`].
    pub fn wait(&mut self) -> ExitStatus {
        match wait_bounded(&mut self.child, PATIENCE) {
            Some(status) => status,
            None => panic!(
                "ptyhub did not exit within {PATIENCE:?}; the terminal showed:\n{:?}",
                self.shown()
            ),
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// The modes a terminal is in before `ptyhub attach` starts: a test compares them to the modes
/// after it has exited.
pub fn termios_summary(modes: &Termios) -> String {
    format!(
        "iflag={:?} oflag={:?} cflag={:?} lflag={:?} cc={:?}",
        modes.input_flags,
        modes.output_flags,
        modes.control_flags,
        modes.local_flags,
        modes.control_chars
    )
}
