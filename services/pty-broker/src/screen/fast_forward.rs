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

/// Whether `byte` is plain text here: printable ASCII, a line feed or a return.
pub(super) fn is_plain(byte: u8) -> bool {
    matches!(byte, 0x20..=0x7e | b'\n' | b'\r')
}

/// The cursor after a scroll, and the last character printed by then.
#[derive(Debug, Clone, Copy)]
struct Scroll {
    /// The index of the byte after the one that scrolled.
    after: usize,
    col: u16,
    last_printed: Option<u8>,
}

/// A plan to skip most of `output` (the pieces in order, from the screen's offset), or why there
/// is none.
pub(super) fn plan<'a>(
    start: Start,
    output: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Plan, Stop> {
    let bottom = start.rows - 1;
    // Every row on the screen and above it must be written after the point skipped to.
    let needed = usize::from(start.rows) + start.kept_above;
    let (mut row, mut col) = (start.row.min(bottom), start.col.min(start.cols));
    let mut last_printed = None;
    let mut scrolls: VecDeque<Scroll> = VecDeque::with_capacity(needed + 1);
    let mut index = 0;
    let mut not_plain = None;
    'pieces: for piece in output {
        for &byte in piece {
            let scrolled = match byte {
                b'\n' => line_feed(&mut row, bottom),
                b'\r' => {
                    col = 0;
                    false
                }
                0x20..=0x7e => {
                    let mut scrolled = false;
                    if col == start.cols {
                        col = 0;
                        scrolled = line_feed(&mut row, bottom);
                    }
                    col += 1;
                    last_printed = Some(byte);
                    scrolled
                }
                _ => {
                    not_plain = Some(index);
                    break 'pieces;
                }
            };
            index += 1;
            if scrolled {
                if scrolls.len() == needed + 1 {
                    scrolls.pop_front();
                }
                scrolls.push_back(Scroll {
                    after: index,
                    col,
                    last_printed,
                });
            }
        }
    }
    // The point skipped to must come after a scroll (so the cursor is on the bottom row), with
    // `needed` scrolls after it.
    let stop = not_plain.map_or(Stop::TooShort, |at| Stop::NotPlain { at });
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

/// A line feed: down a row, or a scroll at the bottom. Whether it scrolled.
fn line_feed(row: &mut u16, bottom: u16) -> bool {
    if *row == bottom {
        true
    } else {
        *row += 1;
        false
    }
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
