//! The sequences the screen makes itself instead of leaving them to vt100, found in the output in
//! one pass, so that the screen shows what xterm.js shows, which is what users see:
//!
//! - the switches between the normal and the alternate screen, `CSI ? Pm h` and `CSI ? Pm l` with
//!   mode 47, 1047 or 1049 among the parameters (vt100 makes them otherwise; see
//!   [`super::Emulator::switch_screen`]);
//! - the erases, `CSI Ps J` (ED), `CSI Ps K` (EL), `CSI Ps X` (ECH) and their selective forms
//!   `CSI ? Ps J` and `CSI ? Ps K`, the insertion and deletion of characters, `CSI Ps @` (ICH)
//!   and `CSI Ps P` (DCH), and of lines, `CSI Ps L` (IL) and `CSI Ps M` (DL), and the scroll up,
//!   `CSI Ps S` (SU): xterm leaves blanks in the current background colour alone, where vt100
//!   leaves them with every current attribute, or with none (see `background_erase.rs`);
//! - what moves a line in at a margin besides a line feed, `ESC D` (IND), `ESC E` (NEL) and
//!   `ESC M` (RI), which vt100 ignores (IND, NEL) or fills without the background (RI);
//! - what the blanks above depend on: the scroll margins, `CSI Pt ; Pb r` (DECSTBM), and the
//!   reset that ends them, `ESC c` (RIS).
//!
//! Only these sequences are read here: every other byte, and every other mode of a mode-setting
//! sequence, is vt100's to parse. A sequence cut off by the end of a read is reported as
//! unfinished, so that the emulator holds it back until the rest arrives instead of letting vt100
//! make it its own way.

/// A sequence the screen makes itself: where it starts (its `ESC`) and ends (after its final
/// byte), and what it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Sequence {
    pub start: usize,
    pub end: usize,
    pub action: Action,
}

/// What a [`Sequence`] does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Action {
    /// Sets (`h`) or resets (`l`) modes, a switch of screens among them; the parameters in order,
    /// read as vte reads them (a missing one is 0).
    SetModes { set: bool, modes: Vec<u16> },
    /// ED, EL or ECH, or a selective one: blanks with the attributes of the moment.
    Erase,
    /// ICH: this many blanks inserted at the cursor (at least one, as vt100 counts).
    InsertCharacters(u16),
    /// DCH: this many characters deleted at the cursor, blanks coming in at the row's end.
    DeleteCharacters(u16),
    /// IL: this many blank lines inserted at the cursor's row.
    InsertLines(u16),
    /// DL: this many lines deleted at the cursor's row, blank lines coming in at the bottom
    /// margin.
    DeleteLines(u16),
    /// SU: the region scrolled up this many lines.
    ScrollUp(u16),
    /// DECSTBM with its first two parameters as written (0 for a missing one).
    SetMargins { top: u16, bottom: u16 },
    /// IND: a line feed.
    Index,
    /// NEL: a carriage return and a line feed.
    NextLine,
    /// RI: the cursor up a row, the region scrolled down at the top margin.
    ReverseIndex,
    /// RIS: everything reset.
    FullReset,
}

/// What [`next_sequence`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Found {
    Sequence(Sequence),
    /// From here to the end, the output may be the start of a sequence made here.
    Unfinished(usize),
}

/// The modes that switch screens.
pub(super) const SCREEN_MODES: [u16; 3] = [47, 1047, 1049];

/// The longest unfinished sequence held back; a longer one cannot be a real program's, and is
/// left to vt100.
const MAX_UNFINISHED: usize = 64;

/// vte keeps at most this many parameters; a sequence with more is not read here.
const MAX_PARAMS: usize = 32;

/// The first sequence made here in `data`, or the unfinished sequence at its end that may be one.
pub(super) fn next_sequence(data: &[u8]) -> Option<Found> {
    let mut from = 0;
    while let Some(found) = memchr::memchr(0x1b, &data[from..]) {
        let start = from + found;
        match read_csi(data, start) {
            Read::Sequence(sequence) => return Some(Found::Sequence(sequence)),
            Read::Unfinished if data.len() - start <= MAX_UNFINISHED => {
                return Some(Found::Unfinished(start));
            }
            Read::Other { end } => from = end,
            Read::Unfinished => from = start + 1,
        }
    }
    None
}

/// What starts at an `ESC`.
enum Read {
    /// A sequence made here.
    Sequence(Sequence),
    /// The output ends before the sequence could be told.
    Unfinished,
    /// Anything else, which the scan resumes after (at `end`).
    Other { end: usize },
}

/// Reads `CSI [?] Pm F` at `start`, with digits and `;` alone between, the form of every
/// sequence made here but the four `ESC F`. The bytes are read once, up to the final byte.
fn read_csi(data: &[u8], start: usize) -> Read {
    let escape = |action| {
        Read::Sequence(Sequence {
            start,
            end: start + 2,
            action,
        })
    };
    let (private, params_start) = match &data[start..] {
        [0x1b] | [0x1b, b'['] | [0x1b, b'[', b'?'] => return Read::Unfinished,
        [0x1b, b'D', ..] => return escape(Action::Index),
        [0x1b, b'E', ..] => return escape(Action::NextLine),
        [0x1b, b'M', ..] => return escape(Action::ReverseIndex),
        [0x1b, b'c', ..] => return escape(Action::FullReset),
        [0x1b, b'[', b'?', ..] => (true, start + 3),
        [0x1b, b'[', ..] => (false, start + 2),
        _ => return Read::Other { end: start + 1 },
    };
    let Some(length) = data[params_start..]
        .iter()
        .position(|byte| !(byte.is_ascii_digit() || *byte == b';'))
    else {
        return Read::Unfinished;
    };
    let final_at = params_start + length;
    let end = final_at + 1;
    let params = &data[params_start..final_at];
    let other = Read::Other { end: final_at };
    if params.iter().filter(|byte| **byte == b';').count() >= MAX_PARAMS {
        return other;
    }
    let action = match (private, data[final_at]) {
        (true, final_byte @ (b'h' | b'l')) => {
            let modes: Vec<u16> = params.split(|byte| *byte == b';').map(number).collect();
            if !modes.iter().any(|mode| SCREEN_MODES.contains(mode)) {
                return Read::Other { end };
            }
            Action::SetModes {
                set: final_byte == b'h',
                modes,
            }
        }
        (_, b'J' | b'K') | (false, b'X') => Action::Erase,
        (false, b'@') => Action::InsertCharacters(first_count(params)),
        (false, b'P') => Action::DeleteCharacters(first_count(params)),
        (false, b'L') => Action::InsertLines(first_count(params)),
        (false, b'M') => Action::DeleteLines(first_count(params)),
        (false, b'S') => Action::ScrollUp(first_count(params)),
        (false, b'r') => {
            let mut values = params.split(|byte| *byte == b';').map(number);
            Action::SetMargins {
                top: values.next().unwrap_or(0),
                bottom: values.next().unwrap_or(0),
            }
        }
        _ => return other,
    };
    Read::Sequence(Sequence { start, end, action })
}

/// A parameter as vte reads it: missing is 0, too large is the largest.
fn number(digits: &[u8]) -> u16 {
    digits.iter().fold(0u16, |value, digit| {
        value
            .saturating_mul(10)
            .saturating_add(u16::from(digit - b'0'))
    })
}

/// The first parameter as vt100 reads a count: 0 or missing is 1.
fn first_count(params: &[u8]) -> u16 {
    let first = params.split(|byte| *byte == b';').next().unwrap_or(&[]);
    number(first).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(start: usize, end: usize, action: Action) -> Option<Found> {
        Some(Found::Sequence(Sequence { start, end, action }))
    }

    fn modes(set: bool, modes: &[u16]) -> Action {
        Action::SetModes {
            set,
            modes: modes.to_vec(),
        }
    }

    #[test]
    fn finds_each_screen_mode_set_and_reset() {
        assert_eq!(
            next_sequence(b"ab\x1b[?1049h"),
            found(2, 10, modes(true, &[1049]))
        );
        assert_eq!(
            next_sequence(b"\x1b[?1047l."),
            found(0, 8, modes(false, &[1047]))
        );
        assert_eq!(next_sequence(b"\x1b[?47h"), found(0, 6, modes(true, &[47])));
        // Among other modes, with leading zeros, as vte reads them.
        assert_eq!(
            next_sequence(b"\x1b[?1;01049;25h"),
            found(0, 14, modes(true, &[1, 1049, 25]))
        );
    }

    #[test]
    fn finds_each_erase_and_the_counts_of_insertions_and_deletions() {
        for erase in [
            &b"\x1b[K"[..],
            b"\x1b[0K",
            b"\x1b[1K",
            b"\x1b[2K",
            b"\x1b[J",
            b"\x1b[1J",
            b"\x1b[2J",
            b"\x1b[3J",
            b"\x1b[?K",
            b"\x1b[?1J",
            b"\x1b[X",
            b"\x1b[12X",
        ] {
            assert_eq!(
                next_sequence(erase),
                found(0, erase.len(), Action::Erase),
                "{erase:?}"
            );
        }
        assert_eq!(
            next_sequence(b"x\x1b[@"),
            found(1, 4, Action::InsertCharacters(1))
        );
        assert_eq!(
            next_sequence(b"\x1b[0@"),
            found(0, 4, Action::InsertCharacters(1)),
            "0 counts as 1"
        );
        assert_eq!(
            next_sequence(b"\x1b[7;2@"),
            found(0, 6, Action::InsertCharacters(7))
        );
        assert_eq!(
            next_sequence(b"\x1b[99999P"),
            found(0, 8, Action::DeleteCharacters(u16::MAX))
        );
        assert_eq!(
            next_sequence(b"\x1b[2L"),
            found(0, 4, Action::InsertLines(2))
        );
        assert_eq!(
            next_sequence(b"\x1b[M"),
            found(0, 3, Action::DeleteLines(1))
        );
        assert_eq!(next_sequence(b"\x1b[3S"), found(0, 4, Action::ScrollUp(3)));
    }

    #[test]
    fn finds_the_margins_and_what_moves_lines_in() {
        assert_eq!(
            next_sequence(b"\x1b[3;9r"),
            found(0, 6, Action::SetMargins { top: 3, bottom: 9 })
        );
        assert_eq!(
            next_sequence(b"\x1b[r"),
            found(0, 3, Action::SetMargins { top: 0, bottom: 0 })
        );
        assert_eq!(
            next_sequence(b"\x1b[;5r"),
            found(0, 5, Action::SetMargins { top: 0, bottom: 5 })
        );
        assert_eq!(next_sequence(b"a\x1bD"), found(1, 3, Action::Index));
        assert_eq!(next_sequence(b"\x1bEb"), found(0, 2, Action::NextLine));
        assert_eq!(next_sequence(b"\x1bM"), found(0, 2, Action::ReverseIndex));
        assert_eq!(next_sequence(b"\x1bc"), found(0, 2, Action::FullReset));
        // SD fills with no background in xterm as in vt100, and a private DECSTBM is no DECSTBM.
        assert_eq!(next_sequence(b"\x1b[T\x1b[?3;9r\x1b(B\x1b\\"), None);
    }

    #[test]
    fn other_sequences_are_passed_over() {
        assert_eq!(
            next_sequence(b"\x1b[?25l\x1b[1049h\x1b[?2004h\x1b[1;31mtext\x1b[5;1H\x1b]2;x\x07"),
            None
        );
        assert_eq!(
            next_sequence(b"\x1b[?25l\x1b[?1049h"),
            found(6, 14, modes(true, &[1049]))
        );
        assert_eq!(next_sequence(b"\x1b[?1049$p"), None, "a mode request");
        assert_eq!(
            next_sequence(b"\x1b[?X\x1b[?5@\x1b[>1J"),
            None,
            "private forms"
        );
        assert_eq!(next_sequence(b"\x1b[2 K"), None, "an intermediate byte");
        assert_eq!(next_sequence(b"\x1b[38:5:1K"), None, "sub-parameters");
        let too_many = format!("\x1b[{}K", "1;".repeat(MAX_PARAMS));
        assert_eq!(
            next_sequence(too_many.as_bytes()),
            None,
            "more than vte keeps"
        );
        // An erase's final byte after another sequence's is not mistaken for one.
        assert_eq!(next_sequence(b"\x1b[31mK\x1bK"), None);
    }

    #[test]
    fn a_sequence_cut_off_at_the_end_is_unfinished() {
        for data in [
            &b"x\x1b"[..],
            b"x\x1b[",
            b"x\x1b[?",
            b"x\x1b[?104",
            b"x\x1b[?1;",
            b"x\x1b[2",
            b"x\x1b[12;",
        ] {
            assert_eq!(next_sequence(data), Some(Found::Unfinished(1)), "{data:?}");
        }
        // Too long to be a program's: left to vt100.
        let mut long = b"\x1b[?".to_vec();
        long.extend([b'1'; 100]);
        assert_eq!(next_sequence(&long), None);
    }

    /// Every sequence, cut at every byte: the part before the cut is unfinished from the
    /// sequence's `ESC`, and the whole is found.
    #[test]
    fn every_sequence_cut_at_every_byte_is_held_until_whole() {
        let cases = [
            (&b"ab\x1b[?1;1049h"[..], modes(true, &[1, 1049])),
            (b"ab\x1b[?47l", modes(false, &[47])),
            (b"ab\x1b[2K", Action::Erase),
            (b"ab\x1b[?1J", Action::Erase),
            (b"ab\x1b[10X", Action::Erase),
            (b"ab\x1b[3@", Action::InsertCharacters(3)),
            (b"ab\x1b[P", Action::DeleteCharacters(1)),
            (b"ab\x1b[12L", Action::InsertLines(12)),
            (b"ab\x1b[1;24r", Action::SetMargins { top: 1, bottom: 24 }),
            (b"ab\x1bD", Action::Index),
            (b"ab\x1bc", Action::FullReset),
        ];
        for (data, action) in cases {
            for cut in 3..data.len() {
                assert_eq!(
                    next_sequence(&data[..cut]),
                    Some(Found::Unfinished(2)),
                    "{data:?} cut at {cut}"
                );
            }
            assert_eq!(next_sequence(data), found(2, data.len(), action));
        }
    }
}
