//! The contract's numeric limits (docs/CONTRACT.md), named once so that every surface checks the
//! same bounds.

/// The widest terminal a client may ask for.
pub const MAX_COLS: u16 = 1000;

/// The tallest terminal a client may ask for.
pub const MAX_ROWS: u16 = 500;

/// The size of a terminal whose creator named none.
pub const DEFAULT_COLS: u16 = 80;

/// See [`DEFAULT_COLS`].
pub const DEFAULT_ROWS: u16 = 24;

/// The largest frame a client may send: a WebSocket message, or one gRPC `Attach` client frame.
pub const MAX_FRAME_BYTES: usize = 1024 * 1024;

/// Scrollback lines a session's terminal emulator keeps unless configured otherwise.
pub const DEFAULT_SCROLLBACK_LINES: usize = 1000;

/// The most scrollback lines a screen read may ask for (`scrollback=N`).
pub const MAX_SCREEN_SCROLLBACK: u32 = 10_000;

/// How long a screen wait lasts when the caller names no timeout, in milliseconds.
pub const DEFAULT_WAIT_MS: u32 = 30_000;

/// The longest a screen wait may last, in milliseconds.
pub const MAX_WAIT_MS: u32 = 300_000;

/// The longest quiet period a screen wait may ask for, in milliseconds.
pub const MAX_QUIET_MS: u32 = 60_000;

/// The longest regular expression a screen wait may carry, in bytes.
pub const MAX_PATTERN_BYTES: usize = 4096;
