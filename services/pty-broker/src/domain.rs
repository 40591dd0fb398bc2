//! The broker's domain types: validated on the way in by `grpc.rs`, used everywhere inside.

use std::fmt;

/// A terminal size that is within the contract's bounds (1..=1000 columns, 1..=500 rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TerminalSize {
    cols: u16,
    rows: u16,
}

impl TerminalSize {
    pub const MAX_COLS: u16 = 1000;
    pub const MAX_ROWS: u16 = 500;
    pub const DEFAULT: TerminalSize = TerminalSize { cols: 80, rows: 24 };

    pub fn new(cols: u32, rows: u32) -> Result<Self, InvalidSize> {
        let in_bounds = (1..=u32::from(Self::MAX_COLS)).contains(&cols)
            && (1..=u32::from(Self::MAX_ROWS)).contains(&rows);
        if !in_bounds {
            return Err(InvalidSize { cols, rows });
        }
        // Both fit in u16: checked just above.
        Ok(Self {
            cols: cols as u16,
            rows: rows as u16,
        })
    }

    pub fn cols(self) -> u16 {
        self.cols
    }

    pub fn rows(self) -> u16 {
        self.rows
    }
}

impl Default for TerminalSize {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Display for TerminalSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.cols, self.rows)
    }
}

/// A size outside the contract's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("terminal size {cols}x{rows} is out of bounds (columns 1..=1000, rows 1..=500)")]
pub struct InvalidSize {
    pub cols: u32,
    pub rows: u32,
}

/// How a session's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus {
    /// The exit code; 128 + the signal number when a signal ended the process, as shells report.
    pub code: i32,
    /// The signal that ended the process, if one did.
    pub signal: Option<i32>,
}

impl ExitStatus {
    pub fn exited(code: i32) -> Self {
        Self { code, signal: None }
    }

    pub fn signalled(signal: i32) -> Self {
        Self {
            code: 128 + signal,
            signal: Some(signal),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_bounds_are_inclusive() {
        assert!(TerminalSize::new(1, 1).is_ok());
        assert!(TerminalSize::new(1000, 500).is_ok());
        assert!(TerminalSize::new(0, 24).is_err());
        assert!(TerminalSize::new(80, 0).is_err());
        assert!(TerminalSize::new(1001, 24).is_err());
        assert!(TerminalSize::new(80, 501).is_err());
        assert!(TerminalSize::new(u32::MAX, u32::MAX).is_err());
    }
}
