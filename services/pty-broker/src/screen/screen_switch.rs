//! The switches between the normal and the alternate screen, `CSI ? Pm h` and `CSI ? Pm l` with
//! mode 47, 1047 or 1049 among the parameters, found in the output so that the screen can make
//! them as xterm.js makes them, which is what users see (vt100 differs; see
//! [`super::Emulator::switch_screen`]).
//!
//! Only these sequences are read here: every other byte, and every other mode of the same
//! sequence, is vt100's to parse. A switch cut off by the end of a read is reported as
//! unfinished, so that the emulator holds it back until the rest arrives instead of letting vt100
//! make it its own way.

/// A mode-setting sequence that switches screens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ModeSequence {
    /// Where the sequence starts (its `ESC`) and ends (after its final byte).
    pub start: usize,
    pub end: usize,
    /// `h` (set) or `l` (reset).
    pub set: bool,
    /// Its parameters in order, read as vte reads them (a missing one is 0).
    pub modes: Vec<u16>,
}

/// What [`next_switch`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Found {
    Switch(ModeSequence),
    /// From here to the end, the output may be the start of a switch.
    Unfinished(usize),
}

/// The modes that switch screens.
pub(super) const SCREEN_MODES: [u16; 3] = [47, 1047, 1049];

/// The longest unfinished switch held back; a longer one cannot be a real program's, and is left
/// to vt100.
const MAX_UNFINISHED: usize = 64;

/// The first switch of screens in `data`, or the unfinished sequence at its end that may be one.
pub(super) fn next_switch(data: &[u8]) -> Option<Found> {
    let mut from = 0;
    while let Some(found) = memchr::memchr(0x1b, &data[from..]) {
        let start = from + found;
        match read_private_mode(data, start) {
            Read::Sequence(sequence) if sequence.modes.iter().any(is_screen_mode) => {
                return Some(Found::Switch(sequence));
            }
            Read::Sequence(sequence) => from = sequence.end,
            Read::Unfinished if data.len() - start <= MAX_UNFINISHED => {
                return Some(Found::Unfinished(start));
            }
            Read::Unfinished | Read::Other => from = start + 1,
        }
    }
    None
}

fn is_screen_mode(mode: &u16) -> bool {
    SCREEN_MODES.contains(mode)
}

/// What starts at an `ESC`.
enum Read {
    /// `CSI ? Pm h` or `CSI ? Pm l`, with digits and `;` alone between.
    Sequence(ModeSequence),
    /// The output ends before the sequence could be told.
    Unfinished,
    Other,
}

fn read_private_mode(data: &[u8], start: usize) -> Read {
    let rest = &data[start..];
    match rest {
        [0x1b] | [0x1b, b'['] => return Read::Unfinished,
        [0x1b, b'[', b'?', ..] => {}
        _ => return Read::Other,
    }
    let params_start = start + 3;
    let Some(length) = data[params_start..]
        .iter()
        .position(|byte| !(byte.is_ascii_digit() || *byte == b';'))
    else {
        return Read::Unfinished;
    };
    let final_at = params_start + length;
    let set = match data[final_at] {
        b'h' => true,
        b'l' => false,
        _ => return Read::Other,
    };
    let modes = data[params_start..final_at]
        .split(|byte| *byte == b';')
        .map(|digits| {
            digits.iter().fold(0u16, |value, digit| {
                value
                    .saturating_mul(10)
                    .saturating_add(u16::from(digit - b'0'))
            })
        })
        .collect();
    Read::Sequence(ModeSequence {
        start,
        end: final_at + 1,
        set,
        modes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn switch(start: usize, end: usize, set: bool, modes: &[u16]) -> Option<Found> {
        Some(Found::Switch(ModeSequence {
            start,
            end,
            set,
            modes: modes.to_vec(),
        }))
    }

    #[test]
    fn finds_each_screen_mode_set_and_reset() {
        assert_eq!(next_switch(b"ab\x1b[?1049h"), switch(2, 10, true, &[1049]));
        assert_eq!(next_switch(b"\x1b[?1047l."), switch(0, 8, false, &[1047]));
        assert_eq!(next_switch(b"\x1b[?47h"), switch(0, 6, true, &[47]));
        // Among other modes, with leading zeros, as vte reads them.
        assert_eq!(
            next_switch(b"\x1b[?1;01049;25h"),
            switch(0, 14, true, &[1, 1049, 25])
        );
    }

    #[test]
    fn other_sequences_are_passed_over() {
        assert_eq!(next_switch(b"\x1b[?25l\x1b[1049h\x1b[?2004h text"), None);
        assert_eq!(
            next_switch(b"\x1b[?25l\x1b[?1049h"),
            switch(6, 14, true, &[1049])
        );
        assert_eq!(next_switch(b"\x1b[?1049$p"), None, "a mode request");
    }

    #[test]
    fn a_sequence_cut_off_at_the_end_is_unfinished() {
        for data in [
            &b"x\x1b"[..],
            b"x\x1b[",
            b"x\x1b[?",
            b"x\x1b[?104",
            b"x\x1b[?1;",
        ] {
            assert_eq!(next_switch(data), Some(Found::Unfinished(1)), "{data:?}");
        }
        // Too long to be a program's switch: left to vt100.
        let mut long = b"\x1b[?".to_vec();
        long.extend([b'1'; 100]);
        assert_eq!(next_switch(&long), None);
    }
}
