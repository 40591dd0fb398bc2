//! The contract's numeric limits (docs/CONTRACT.md), named once so that every surface checks the
//! same bounds, and the one rule for which characters a name may hold.

use std::time::Duration;

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory as _};

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

/// Most characters in the id an input carries to ask for its receipt.
pub const MAX_INPUT_ID_CHARS: usize = 64;

/// Scrollback lines a session's terminal emulator keeps unless configured otherwise.
pub const DEFAULT_SCROLLBACK_LINES: usize = 1000;

/// The most scrollback lines a screen read may ask for (`scrollback=N`).
pub const MAX_SCREEN_SCROLLBACK: u32 = 10_000;

/// Commands in one page of a session's command list when the caller names no limit.
pub const DEFAULT_COMMANDS_PAGE: usize = 100;
/// The most commands one page of a session's command list may hold.
pub const MAX_COMMANDS_PAGE: usize = 1000;

/// How long a screen wait lasts when the caller names no timeout, in milliseconds.
pub const DEFAULT_WAIT_MS: u32 = 30_000;

/// The longest a screen wait may last, in milliseconds.
pub const MAX_WAIT_MS: u32 = 300_000;

/// The longest quiet period a screen wait may ask for, in milliseconds.
pub const MAX_QUIET_MS: u32 = 60_000;

/// The longest regular expression a screen wait may carry, in bytes.
pub const MAX_PATTERN_BYTES: usize = 4096;

/// The most aliases one session may hold (each a row the create writes in its transaction).
pub const MAX_ALIASES_PER_SESSION: usize = 16;

/// The longest alias, in characters (aliases are ASCII).
pub const MAX_ALIAS_CHARS: usize = 128;

/// The most viewers attached to one session at once, besides its controller.
pub const MAX_VIEWERS_PER_SESSION: usize = 32;

/// The longest an instance may let a request for control wait before it is granted.
pub const MAX_CONTROL_GRANT_TIMEOUT: Duration = Duration::from_secs(3600);

/// The most terminal streams (WebSockets) one principal may hold open at one gateway.
pub const MAX_STREAMS_PER_PRINCIPAL: usize = 64;

/// How long a client of `Attach` has to send its Hello before the stream is ended.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// The shortest a share link may last.
pub const MIN_SHARE_TTL: Duration = Duration::from_secs(60);

/// The longest a share link may last.
pub const MAX_SHARE_TTL: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// How long a share link lasts when its creator does not say.
pub const DEFAULT_SHARE_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The most live share links one instance may have.
pub const MAX_SHARES_PER_INSTANCE: usize = 100;

/// How long a closed session stays in the records (its history) by default.
pub const DEFAULT_CLOSED_SESSION_RETENTION: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// How long an audit event stays in the trail by default.
pub const DEFAULT_AUDIT_RETENTION: Duration = Duration::from_secs(90 * 24 * 60 * 60);

/// Whether `character` may not appear in a name (of an instance or a session): control
/// characters, format characters (which include the bidirectional overrides and isolates such as
/// U+202E, zero-width joiners and the byte-order mark) and line or paragraph separators. They
/// would make a name print as another name, or not print at all.
pub fn is_forbidden_in_names(character: char) -> bool {
    matches!(
        character.general_category(),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_refuse_controls_bidi_and_format_characters_only() {
        for forbidden in [
            '\u{0}', '\n', '\u{7f}', '\u{9b}', '\u{202e}', '\u{202a}', '\u{2066}', '\u{2069}',
            '\u{200e}', '\u{200f}', '\u{200b}', '\u{200d}', '\u{feff}', '\u{61c}', '\u{2028}',
            '\u{2029}',
        ] {
            assert!(is_forbidden_in_names(forbidden), "{forbidden:?}");
        }
        for allowed in ['a', ' ', 'é', '日', '🙂', '-', '\u{a0}'] {
            assert!(!is_forbidden_in_names(allowed), "{allowed:?}");
        }
    }
}
