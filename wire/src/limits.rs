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
