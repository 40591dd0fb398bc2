//! Fast-forward over a flood of plain text: when the screen is far behind the output and what it
//! has not parsed yet is printable ASCII, line feeds and carriage returns only, most of it will
//! scroll off the top and out of the scrollback before anyone can see it. Such text moves the
//! cursor by rules simple enough to follow without drawing (print, wrap at the right margin, feed
//! a line, return), so this finds the last point from which enough rows are still written to
//! replace every row on the screen and in the scrollback, and the emulator parses only from there.
//!
//! What the skipped text leaves behind that still matters afterwards is the cursor's row and
//! column (including a wrap pending at the right margin) and the last character printed (what
//! `CSI b` repeats). [`plan`] writes a few bytes of the same plain kind that put the emulator in
//! exactly that state: line feeds down to the bottom row, a return, then the last character
//! printed up to the column. The rows those bytes touch scroll away with the rest. The pen, the
//! modes and the title do not change with plain text, so nothing else differs: a screen that
//! fast-forwards equals one that parsed every byte, cell for cell (the tests check it).
//!
//! The caller checks what the text cannot tell: that the parser is in its ground state and the
//! screen scrolls as a whole ([`super::parse_state::ParseState::plain_scrolling`]).

use std::collections::VecDeque;

/// Where the emulator is when the unparsed output starts.
#[derive(Debug, Clone, Copy)]
pub(super) struct Start {
    /// The cursor as vt100 keeps it: `col == cols` is a wrap pending at the right margin.
    pub row: u16,
    pub col: u16,
    pub rows: u16,
    pub cols: u16,
    /// Rows kept above the screen: the scrollback's capacity (0 on the alternate screen).
    pub kept_above: usize,
}

/// What to do instead of parsing the first `skip` bytes.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Plan {
    pub skip: usize,
    /// Fed in their place.
    pub replacement: Vec<u8>,
}

/// Why there is no plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    /// The byte at this index is not plain text: nothing from there on can be skipped.
    NotPlain { at: usize },
    /// The output is plain to its end but does not scroll enough yet.
    TooShort,
}

/// Bytes looked at together when scanning for the end of a run: a loop with no early exit
/// inside, which the compiler turns into vector instructions. A flood is scanned at memory
/// speed rather than a byte at a time.
const SCAN_CHUNK: usize = 32;

/// Whether `byte` is plain text here: printable ASCII, a line feed or a return.
fn is_plain(byte: u8) -> bool {
    is_printable(byte) || matches!(byte, b'\n' | b'\r')
}

fn is_printable(byte: u8) -> bool {
    matches!(byte, 0x20..=0x7e)
}

/// The index of the first byte of `bytes` that `is_kind` refuses.
fn first_not(bytes: &[u8], is_kind: impl Fn(u8) -> bool) -> Option<usize> {
    let mut chunks = bytes.chunks_exact(SCAN_CHUNK);
    let mut checked = 0;
    for chunk in &mut chunks {
        if chunk
            .iter()
            .fold(false, |seen, &byte| seen | !is_kind(byte))
        {
            break;
        }
        checked += SCAN_CHUNK;
    }
    bytes[checked..]
        .iter()
        .position(|&byte| !is_kind(byte))
        .map(|at| checked + at)
}

/// The index of the first byte of `bytes` that is not plain text.
pub(super) fn first_not_plain(bytes: &[u8]) -> Option<usize> {
    first_not(bytes, is_plain)
}

/// The cursor after a scroll, and the last character printed by then.
#[derive(Debug, Clone, Copy)]
struct Scroll {
    /// The index of the byte after the one that scrolled.
    after: usize,
    col: u16,
    last_printed: Option<u8>,
}

/// The cursor as plain text moves it, and the last scrolls it made: all [`plan`] needs.
struct Follow {
    row: u16,
    col: u16,
    bottom: u16,
    cols: u16,
    last_printed: Option<u8>,
    /// The most recent scrolls, at most `keep`.
    scrolls: VecDeque<Scroll>,
    keep: usize,
}

impl Follow {
    /// A line feed: down a row, or a scroll at the bottom, recorded as ending at `after`.
    fn line_feed(&mut self, after: usize) {
        if self.row < self.bottom {
            self.row += 1;
            return;
        }
        if self.scrolls.len() == self.keep {
            self.scrolls.pop_front();
        }
        self.scrolls.push_back(Scroll {
            after,
            col: self.col,
            last_printed: self.last_printed,
        });
    }

    /// Prints `run` (printable ASCII only), whose first byte is at index `start` of the output:
    /// a stretch at a time up to the right margin, and a wrap (a return and a line feed) for the
    /// byte printed at a pending wrap, as vt100 does it.
    fn print(&mut self, run: &[u8], start: usize) {
        let mut printed = 0;
        while printed < run.len() {
            if self.col == self.cols {
                self.col = 1;
                self.last_printed = Some(run[printed]);
                printed += 1;
                self.line_feed(start + printed);
            } else {
                let fits = usize::from(self.cols - self.col).min(run.len() - printed);
                // `fits` is at most `cols - col`, a u16.
                self.col += fits as u16;
                printed += fits;
                self.last_printed = Some(run[printed - 1]);
            }
        }
    }
}

/// A plan to skip most of `output` (the pieces in order, from the screen's offset), or why there
/// is none.
pub(super) fn plan<'a>(
    start: Start,
    output: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Plan, Stop> {
    // Every row on the screen and above it must be written after the point skipped to.
    let needed = usize::from(start.rows) + start.kept_above;
    let bottom = start.rows - 1;
    let mut follow = Follow {
        row: start.row.min(bottom),
        col: start.col.min(start.cols),
        bottom,
        cols: start.cols,
        last_printed: None,
        scrolls: VecDeque::with_capacity(needed + 1),
        keep: needed + 1,
    };
    let mut piece_start = 0;
    let mut not_plain = None;
    'pieces: for piece in output {
        let mut at = 0;
        while at < piece.len() {
            let run = first_not(&piece[at..], is_printable).unwrap_or(piece.len() - at);
            if run > 0 {
                follow.print(&piece[at..at + run], piece_start + at);
                at += run;
                continue;
            }
            match piece[at] {
                b'\n' => follow.line_feed(piece_start + at + 1),
                b'\r' => follow.col = 0,
                _ => {
                    not_plain = Some(piece_start + at);
                    break 'pieces;
                }
            }
            at += 1;
        }
        piece_start += piece.len();
    }
    // The point skipped to must come after a scroll (so the cursor is on the bottom row), with
    // `needed` scrolls after it.
    let stop = not_plain.map_or(Stop::TooShort, |at| Stop::NotPlain { at });
    let scrolls = follow.scrolls;
    if scrolls.len() < needed + 1 {
        return Err(stop);
    }
    let point = scrolls[0];
    let Some(printed) = point.last_printed else {
        // Only line feeds: the column cannot be set without printing. Never worth it.
        return Err(stop);
    };
    let mut replacement = Vec::with_capacity(usize::from(start.rows) + usize::from(start.cols) + 2);
    replacement.extend(std::iter::repeat_n(
        b'\n',
        usize::from(bottom - row_at(start)),
    ));
    replacement.push(b'\r');
    if point.col == 0 {
        replacement.extend([printed, b'\r']);
    } else {
        replacement.extend(std::iter::repeat_n(printed, usize::from(point.col)));
    }
    Ok(Plan {
        skip: point.after,
        replacement,
    })
}

fn row_at(start: Start) -> u16 {
    start.row.min(start.rows - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(row: u16, col: u16) -> Start {
        Start {
            row,
            col,
            rows: 4,
            cols: 10,
            kept_above: 2,
        }
    }

    #[test]
    fn text_that_does_not_scroll_enough_is_not_skipped() {
        // Six rows must be written after the point; five scrolls are not enough.
        let output = b"1\n2\n3\n4\n5\n6\n7\n8\n";
        assert_eq!(plan(start(0, 0), [&output[..]]), Err(Stop::TooShort));
    }

    #[test]
    fn a_byte_that_is_not_plain_ends_what_can_be_skipped() {
        let output = b"a\nb\n\x1b[mc\n";
        assert_eq!(
            plan(start(3, 0), [&output[..]]),
            Err(Stop::NotPlain { at: 4 })
        );
    }

    #[test]
    fn the_replacement_puts_the_cursor_where_the_text_left_it() {
        // From the bottom row each line feed scrolls, and with no return the column goes on:
        // seven scrolls, and the point skipped to is after the first.
        let output = b"a\nb\nc\nd\ne\nf\ng\n";
        let from_bottom = plan(start(3, 0), [&output[..]]).expect("enough scrolls");
        assert_eq!(from_bottom.skip, 2);
        assert_eq!(from_bottom.replacement, b"\ra");
        // From the top row, three line feeds go down before the first scroll.
        let output = b"a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n";
        let from_top = plan(start(0, 0), [&output[..]]).expect("enough scrolls");
        assert_eq!(from_top.skip, 8);
        assert_eq!(from_top.replacement, b"\n\n\n\rdddd");
    }

    #[test]
    fn a_wrap_pending_at_the_margin_is_kept() {
        let line = b"0123456789";
        let mut output = Vec::new();
        for _ in 0..8 {
            output.extend_from_slice(line);
            output.push(b'\n');
        }
        // Each line wraps once and feeds once: fifteen scrolls; the seventh from the end is the
        // fifth line's feed, with the wrap pending.
        let plan = plan(start(3, 0), [&output[..]]).expect("enough scrolls");
        assert_eq!(plan.skip, 55);
        assert_eq!(plan.replacement, b"\r9999999999");
    }

    /// What [`plan`] must answer, a byte at a time as the emulator goes: the oracle for the
    /// stretch-at-a-time version.
    fn plan_bytewise(start: Start, output: &[u8]) -> Result<Plan, Stop> {
        let bottom = start.rows - 1;
        let needed = usize::from(start.rows) + start.kept_above;
        let (mut row, mut col) = (start.row.min(bottom), start.col.min(start.cols));
        let mut last_printed = None;
        let mut scrolls = VecDeque::new();
        let mut stop = Stop::TooShort;
        for (index, &byte) in output.iter().enumerate() {
            let feed = |row: &mut u16| {
                let scrolled = *row == bottom;
                *row = (*row + 1).min(bottom);
                scrolled
            };
            let scrolled = match byte {
                b'\n' => feed(&mut row),
                b'\r' => {
                    col = 0;
                    false
                }
                0x20..=0x7e => {
                    let scrolled = col == start.cols && {
                        col = 0;
                        feed(&mut row)
                    };
                    col += 1;
                    last_printed = Some(byte);
                    scrolled
                }
                _ => {
                    stop = Stop::NotPlain { at: index };
                    break;
                }
            };
            if scrolled {
                scrolls.push_back((index + 1, col, last_printed));
                if scrolls.len() > needed + 1 {
                    scrolls.pop_front();
                }
            }
        }
        if scrolls.len() < needed + 1 {
            return Err(stop);
        }
        let (skip, col, Some(printed)) = scrolls[0] else {
            return Err(stop);
        };
        let mut replacement = vec![b'\n'; usize::from(bottom - row_at(start))];
        replacement.push(b'\r');
        if col == 0 {
            replacement.extend([printed, b'\r']);
        } else {
            replacement.extend(std::iter::repeat_n(printed, usize::from(col)));
        }
        Ok(Plan { skip, replacement })
    }

    proptest::proptest! {
        #[test]
        fn stretches_plan_as_bytes_do(
            rows in 1u16..6,
            cols in 1u16..12,
            row in 0u16..8,
            col in 0u16..14,
            kept_above in 0usize..4,
            output in proptest::collection::vec(
                proptest::prop_oneof![
                    8 => 0x20u8..=0x7e,
                    2 => proptest::strategy::Just(b'\n'),
                    1 => proptest::strategy::Just(b'\r'),
                    1 => proptest::prelude::any::<u8>(),
                ],
                0..400,
            ),
            split in 0usize..400,
        ) {
            let start = Start { row, col, rows, cols, kept_above };
            let (left, right) = output.split_at(split.min(output.len()));
            proptest::prop_assert_eq!(plan(start, [left, right]), plan_bytewise(start, &output));
        }

        #[test]
        fn the_first_byte_not_plain_is_found(
            output in proptest::collection::vec(
                proptest::prop_oneof![20 => 0x20u8..=0x7e, 1 => proptest::prelude::any::<u8>()],
                0..200,
            ),
        ) {
            proptest::prop_assert_eq!(
                first_not_plain(&output),
                output.iter().position(|&byte| !is_plain(byte))
            );
        }
    }

    #[test]
    fn pieces_are_one_stream() {
        let output = b"ab\ncd\nef\ngh\nij\nkl\nmn\n";
        let (left, right) = output.split_at(4);
        assert_eq!(
            plan(start(3, 0), [left, right]),
            plan(start(3, 0), [&output[..]])
        );
    }
}
