//! Named keys (`Enter`, `C-c`, `Up`, `F5`, ...) as the bytes a terminal sends for them, the way
//! xterm does, for the input API. Cursor keys follow the application cursor mode (DECCKM) the
//! program set, as a real terminal's would.

use std::fmt;

/// A key name that is not one of [`KEY_NAMES`] nor a `C-`/`M-` chord of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKey(pub String);

impl fmt::Display for UnknownKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown key name {:?}: use one of {} or C-<key>, M-<key>",
            self.0,
            KEY_NAMES.join(", ")
        )
    }
}

impl std::error::Error for UnknownKey {}

/// The named keys, as the error message lists them.
pub const KEY_NAMES: [&str; 29] = [
    "Enter",
    "Tab",
    "Escape",
    "Backspace",
    "Space",
    "Up",
    "Down",
    "Left",
    "Right",
    "Home",
    "End",
    "PageUp",
    "PageDown",
    "Insert",
    "Delete",
    "F1",
    "F2",
    "F3",
    "F4",
    "F5",
    "F6",
    "F7",
    "F8",
    "F9",
    "F10",
    "F11",
    "F12",
    "BackTab",
    "Null",
];

/// The bytes for the key `name`. `application_cursor` is the mode the program set (DECCKM):
/// arrows, Home and End are `ESC O x` in it and `ESC [ x` otherwise.
pub fn key_bytes(name: &str, application_cursor: bool) -> Result<Vec<u8>, UnknownKey> {
    let unknown = || UnknownKey(name.to_owned());
    if let Some(rest) = name.strip_prefix("M-") {
        // Alt sends ESC before the key (xterm's metaSendsEscape, the common default).
        let mut bytes = vec![0x1b];
        bytes.extend(key_bytes(rest, application_cursor).map_err(|_| unknown())?);
        return Ok(bytes);
    }
    if let Some(rest) = name.strip_prefix("C-") {
        return control_key(rest).map(|byte| vec![byte]).ok_or_else(unknown);
    }
    let cursor = |final_byte: u8| {
        let introducer = if application_cursor { b'O' } else { b'[' };
        vec![0x1b, introducer, final_byte]
    };
    let bytes = match name {
        "Enter" => vec![b'\r'],
        "Tab" => vec![b'\t'],
        "BackTab" => b"\x1b[Z".to_vec(),
        "Escape" => vec![0x1b],
        "Backspace" => vec![0x7f],
        "Space" => vec![b' '],
        "Null" => vec![0],
        "Up" => cursor(b'A'),
        "Down" => cursor(b'B'),
        "Right" => cursor(b'C'),
        "Left" => cursor(b'D'),
        "Home" => cursor(b'H'),
        "End" => cursor(b'F'),
        "Insert" => b"\x1b[2~".to_vec(),
        "Delete" => b"\x1b[3~".to_vec(),
        "PageUp" => b"\x1b[5~".to_vec(),
        "PageDown" => b"\x1b[6~".to_vec(),
        "F1" => b"\x1bOP".to_vec(),
        "F2" => b"\x1bOQ".to_vec(),
        "F3" => b"\x1bOR".to_vec(),
        "F4" => b"\x1bOS".to_vec(),
        "F5" => b"\x1b[15~".to_vec(),
        "F6" => b"\x1b[17~".to_vec(),
        "F7" => b"\x1b[18~".to_vec(),
        "F8" => b"\x1b[19~".to_vec(),
        "F9" => b"\x1b[20~".to_vec(),
        "F10" => b"\x1b[21~".to_vec(),
        "F11" => b"\x1b[23~".to_vec(),
        "F12" => b"\x1b[24~".to_vec(),
        // A single printable character names itself (for `M-x`).
        other => {
            let mut chars = other.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) if !c.is_control() => c.to_string().into_bytes(),
                _ => return Err(unknown()),
            }
        }
    };
    Ok(bytes)
}

/// Ctrl with a letter or one of `@[\]^_ ?` and space, as a terminal sends it.
fn control_key(key: &str) -> Option<u8> {
    let mut chars = key.chars();
    let (Some(c), None) = (chars.next(), chars.next()) else {
        return match key {
            "Space" => Some(0),
            _ => None,
        };
    };
    match c {
        'a'..='z' => Some(c as u8 - b'a' + 1),
        'A'..='Z' => Some(c as u8 - b'A' + 1),
        '@' | ' ' => Some(0),
        '[' => Some(0x1b),
        '\\' => Some(0x1c),
        ']' => Some(0x1d),
        '^' => Some(0x1e),
        '_' => Some(0x1f),
        '?' => Some(0x7f),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_chords_are_the_ascii_control_codes() {
        assert_eq!(key_bytes("C-c", false).unwrap(), [0x03]);
        assert_eq!(key_bytes("C-C", false).unwrap(), [0x03]);
        assert_eq!(key_bytes("C-d", false).unwrap(), [0x04]);
        assert_eq!(key_bytes("C-[", false).unwrap(), [0x1b]);
        assert_eq!(key_bytes("C-Space", false).unwrap(), [0x00]);
        assert_eq!(key_bytes("C-?", false).unwrap(), [0x7f]);
    }

    #[test]
    fn cursor_keys_follow_the_application_cursor_mode() {
        assert_eq!(key_bytes("Up", false).unwrap(), b"\x1b[A");
        assert_eq!(key_bytes("Up", true).unwrap(), b"\x1bOA");
        assert_eq!(key_bytes("Home", true).unwrap(), b"\x1bOH");
        // Keys with a `~` form do not change with the mode.
        assert_eq!(key_bytes("PageUp", true).unwrap(), b"\x1b[5~");
    }

    #[test]
    fn alt_prefixes_escape() {
        assert_eq!(key_bytes("M-x", false).unwrap(), b"\x1bx");
        assert_eq!(key_bytes("M-Enter", false).unwrap(), b"\x1b\r");
        assert_eq!(key_bytes("M-C-a", false).unwrap(), b"\x1b\x01");
    }

    #[test]
    fn unknown_names_are_refused_with_the_list() {
        for name in ["Entr", "C-", "C-ab", "C-1", "M-", "", "F13", "\u{7}"] {
            let error = key_bytes(name, false).unwrap_err();
            assert_eq!(error.0, name);
            assert!(error.to_string().contains("Enter, Tab"), "{error}");
        }
    }

    #[test]
    fn every_listed_name_is_known() {
        for name in KEY_NAMES {
            assert!(key_bytes(name, false).is_ok(), "{name}");
        }
    }

    /// The rule written out apart from the code: a name is known when, past any `M-` prefixes,
    /// it is a listed key, one printable character, or `C-` with a letter, one of `@[\\]^_ ?`
    /// or `Space`.
    fn known(name: &str) -> bool {
        if let Some(rest) = name.strip_prefix("M-") {
            return known(rest);
        }
        if let Some(rest) = name.strip_prefix("C-") {
            let mut chars = rest.chars();
            return match (chars.next(), chars.next()) {
                (Some(c), None) => c.is_ascii_alphabetic() || "@[\\]^_ ?".contains(c),
                _ => rest == "Space",
            };
        }
        let mut chars = name.chars();
        KEY_NAMES.contains(&name)
            || matches!((chars.next(), chars.next()), (Some(c), None) if !c.is_control())
    }

    fn names() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let atom = prop_oneof![
            proptest::sample::select(KEY_NAMES.to_vec()).prop_map(str::to_owned),
            any::<char>().prop_map(|c| c.to_string()),
            "\\PC{0,4}",
            Just(String::new()),
        ];
        let prefix = proptest::sample::select(vec!["", "M-", "C-", "M-C-", "C-M-", "M-M-"]);
        (prefix, atom).prop_map(|(prefix, atom)| format!("{prefix}{atom}"))
    }

    proptest::proptest! {
        /// Any name gives bytes exactly when the rule knows it, never a panic; a refusal names
        /// the name; Alt is ESC before the key; only cursor keys change with DECCKM.
        #[test]
        fn fuzz_key_names_follow_the_rule(name in names(), application_cursor: bool) {
            match key_bytes(&name, application_cursor) {
                Ok(bytes) => {
                    proptest::prop_assert!(known(&name), "{name:?} gave {bytes:?}");
                    proptest::prop_assert!(!bytes.is_empty());
                    if let Some(rest) = name.strip_prefix("M-") {
                        let mut expected = vec![0x1b];
                        expected.extend(key_bytes(rest, application_cursor).unwrap());
                        proptest::prop_assert_eq!(&bytes, &expected);
                    }
                    let base = name.trim_start_matches("M-");
                    let moves = ["Up", "Down", "Left", "Right", "Home", "End"].contains(&base);
                    let other_mode = key_bytes(&name, !application_cursor).unwrap();
                    proptest::prop_assert_eq!(bytes == other_mode, !moves, "{}", name);
                }
                Err(error) => {
                    proptest::prop_assert!(!known(&name), "{name:?} refused: {error}");
                    proptest::prop_assert_eq!(error.0, name);
                }
            }
        }
    }
}
