//! The caller's own terminal: its size, raw mode that is always undone, its display modes put
//! back after a session changed them, and the detach key sequence.

use std::io::{IsTerminal as _, Write as _};

use anyhow::{Result, bail};
use nix::sys::termios::{self, SetArg, Termios};

/// The size of the terminal on stdout (or stdin), if there is one.
pub fn local_size() -> Option<(u16, u16)> {
    for fd in [
        std::io::stdout().as_fd_owned(),
        std::io::stdin().as_fd_owned(),
    ] {
        if let Ok(size) = window_size(fd)
            && size.0 > 0
            && size.1 > 0
        {
            return Some(size);
        }
    }
    None
}

/// [`local_size`] as a size within the contract's bounds.
pub fn local_terminal_size() -> Option<ptyhub_client::TerminalSize> {
    let (cols, rows) = local_size()?;
    ptyhub_client::TerminalSize::new(cols.into(), rows.into()).ok()
}

trait AsFdOwned {
    fn as_fd_owned(&self) -> std::os::fd::BorrowedFd<'_>;
}

impl<T: std::os::fd::AsFd> AsFdOwned for T {
    fn as_fd_owned(&self) -> std::os::fd::BorrowedFd<'_> {
        self.as_fd()
    }
}

fn window_size(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<(u16, u16)> {
    // rustix wraps TIOCGWINSZ safely; nix only offers it as an unsafe ioctl.
    let size = rustix::termios::tcgetwinsize(fd)?;
    Ok((size.ws_col, size.ws_row))
}

/// Puts stdin into raw mode until dropped; restores the previous modes on every way out
/// (return, error, panic unwinding).
#[derive(Debug)]
pub struct RawModeGuard {
    saved: Option<Termios>,
}

impl RawModeGuard {
    /// Raw mode when stdin is a terminal; a no-op guard otherwise (piped input).
    pub fn enable() -> Result<Self> {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return Ok(Self { saved: None });
        }
        let saved = termios::tcgetattr(&stdin)?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(&stdin, SetArg::TCSANOW, &raw)?;
        Ok(Self { saved: Some(saved) })
    }
}

impl Drop for RawModeGuard {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            let _ = termios::tcsetattr(std::io::stdin(), SetArg::TCSANOW, saved);
        }
    }
}

/// `ESC c` (RIS): resets a terminal, as the broker's screen is reset when a session restarts.
pub const RESET_TERMINAL: &[u8] = b"\x1bc";

/// What a full-screen program (or a snapshot of one) may have switched on, switched back off:
/// the alternate screen left, normal cursor keys and keypad, no bracketed paste, no mouse or
/// focus reports, auto-wrap on, the cursor shown, attributes reset. Scrolling margins are left
/// alone: resetting them moves the cursor to the top left, over the user's screen.
pub const RESTORE_DISPLAY_MODES: &[u8] = concat!(
    "\x1b[?1049l",   // the normal screen
    "\x1b[?1l\x1b>", // cursor keys, keypad
    "\x1b[?2004l",   // bracketed paste
    "\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1005l\x1b[?1006l\x1b[?1015l", // mouse reports
    "\x1b[?1004l",   // focus reports
    "\x1b[?7h",      // auto-wrap
    "\x1b[?25h",     // the cursor
    "\x1b[0m",       // attributes
)
.as_bytes();

/// Writes [`RESTORE_DISPLAY_MODES`] to stdout when dropped, if stdout is a terminal: on every
/// way out of an attach (detach, exit, error, signal, panic unwinding).
#[derive(Debug)]
pub struct DisplayModesGuard {
    terminal: bool,
}

impl DisplayModesGuard {
    pub fn new() -> Self {
        Self {
            terminal: std::io::stdout().is_terminal(),
        }
    }
}

impl Drop for DisplayModesGuard {
    fn drop(&mut self) {
        if self.terminal {
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(RESTORE_DISPLAY_MODES);
            let _ = stdout.flush();
        }
    }
}

/// Watches the input for the detach key sequence (Ctrl-P Ctrl-Q by default, as Docker's).
#[derive(Debug, Clone)]
pub struct DetachKeys {
    sequence: Vec<u8>,
    matched: usize,
}

/// What one chunk of input means once the detach sequence is looked for.
#[derive(Debug, PartialEq, Eq)]
pub enum InputScan {
    /// Forward these bytes (may be empty while a partial sequence is held back).
    Forward(Vec<u8>),
    /// The sequence was typed: forward these bytes that came before it, then detach.
    Detach(Vec<u8>),
}

impl DetachKeys {
    /// Parses a comma-separated list like `ctrl-p,ctrl-q` (letters, `ctrl-<letter>`, `ctrl-@`,
    /// `ctrl-[`...). An empty string disables detaching.
    pub fn parse(text: &str) -> Result<Self> {
        let mut sequence = Vec::new();
        for key in text.split(',').filter(|key| !key.is_empty()) {
            let byte = match key.strip_prefix("ctrl-") {
                Some(rest) if rest.len() == 1 => {
                    let character = rest.as_bytes()[0].to_ascii_uppercase();
                    if !(b'@'..=b'_').contains(&character) {
                        bail!("cannot use {key:?} in --detach-keys");
                    }
                    character - b'@'
                }
                None if key.len() == 1 && key.is_ascii() => key.as_bytes()[0],
                _ => bail!("cannot use {key:?} in --detach-keys: use a letter or ctrl-<letter>"),
            };
            sequence.push(byte);
        }
        Ok(Self {
            sequence,
            matched: 0,
        })
    }

    /// Scans one chunk of input. Bytes that might start the sequence are held back until the
    /// next chunk shows whether they do.
    pub fn scan(&mut self, input: &[u8]) -> InputScan {
        if self.sequence.is_empty() {
            return InputScan::Forward(input.to_vec());
        }
        let mut forward = Vec::with_capacity(input.len());
        for &byte in input {
            if byte == self.sequence[self.matched] {
                self.matched += 1;
                if self.matched == self.sequence.len() {
                    self.matched = 0;
                    return InputScan::Detach(forward);
                }
                continue;
            }
            // A broken partial match: what was held back was real input after all.
            forward.extend_from_slice(&self.sequence[..self.matched]);
            self.matched = 0;
            if byte == self.sequence[0] {
                self.matched = 1;
            } else {
                forward.push(byte);
            }
        }
        InputScan::Forward(forward)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detach_sequence_is_found_across_chunks() {
        let mut keys = DetachKeys::parse("ctrl-p,ctrl-q").unwrap();
        assert_eq!(keys.scan(b"ls\x10"), InputScan::Forward(b"ls".to_vec()));
        assert_eq!(keys.scan(b"\x11rest"), InputScan::Detach(Vec::new()));
    }

    #[test]
    fn broken_partial_sequence_is_forwarded() {
        let mut keys = DetachKeys::parse("ctrl-p,ctrl-q").unwrap();
        assert_eq!(keys.scan(b"\x10"), InputScan::Forward(Vec::new()));
        assert_eq!(keys.scan(b"x"), InputScan::Forward(b"\x10x".to_vec()));
        assert_eq!(
            keys.scan(b"\x10\x10\x11"),
            InputScan::Detach(b"\x10".to_vec())
        );
    }

    #[test]
    fn empty_sequence_disables_detach() {
        let mut keys = DetachKeys::parse("").unwrap();
        assert_eq!(
            keys.scan(b"\x10\x11"),
            InputScan::Forward(b"\x10\x11".to_vec())
        );
    }

    #[test]
    fn bad_detach_keys_are_refused() {
        assert!(DetachKeys::parse("ctrl-pp").is_err());
        assert!(DetachKeys::parse("alt-x").is_err());
        assert!(DetachKeys::parse("ctrl-1").is_err());
    }
}
