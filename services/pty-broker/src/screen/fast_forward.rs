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
//! screen scrolls as a whole ([`super::parse_state::ParseState::plain_scrolling`]), and where the
//! plain text ends ([`first_not_plain`], once per byte however often the screen looks): [`plan`]
//! then follows the cursor from line feed to line feed and return to return, found by `memchr`'s
//! vector search, and counts the printable bytes between them without looking at each.

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

/// Bytes looked at together when scanning for the end of plain text: a loop with no early exit
/// inside, which the compiler turns into vector instructions. A flood is scanned at memory
/// speed rather than a byte at a time.
const SCAN_CHUNK: usize = 32;

/// Whether `byte` is plain text here: printable ASCII, a line feed or a return.
fn is_plain(byte: u8) -> bool {
    matches!(byte, 0x20..=0x7e | b'\n' | b'\r')
}

/// The index of the first byte of `bytes` that is not plain text.
pub(super) fn first_not_plain(bytes: &[u8]) -> Option<usize> {
    let mut chunks = bytes.chunks_exact(SCAN_CHUNK);
    let mut checked = 0;
    for chunk in &mut chunks {
        if chunk
            .iter()
            .fold(false, |seen, &byte| seen | !is_plain(byte))
        {
            break;
        }
        checked += SCAN_CHUNK;
    }
    bytes[checked..]
        .iter()
        .position(|&byte| !is_plain(byte))
        .map(|at| checked + at)
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

    /// Follows `piece` (plain text), whose first byte is at index `start` of the output: only
    /// its line feeds and returns are looked at one by one, the text between them a stretch at a
    /// time.
    fn follow(&mut self, piece: &[u8], start: usize) {
        debug_assert_eq!(first_not_plain(piece), None, "only plain text is followed");
        let mut at = 0;
        for control in memchr::memchr2_iter(b'\n', b'\r', piece) {
            if control > at {
                self.print(&piece[at..control], start + at);
            }
            if piece[control] == b'\n' {
                self.line_feed(start + control + 1);
            } else {
                self.col = 0;
            }
            at = control + 1;
        }
        if at < piece.len() {
            self.print(&piece[at..], start + at);
        }
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

/// A plan to skip most of `plain`, the output from the screen's offset in pieces, in order; `None`
/// when it does not scroll enough yet. Every byte of `plain` must be plain text (the caller cuts
/// the output where [`first_not_plain`] found a byte that is not): the text between line feeds
/// and returns is taken for printable without a look.
pub(super) fn plan<'a>(start: Start, plain: impl IntoIterator<Item = &'a [u8]>) -> Option<Plan> {
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
    for piece in plain {
        follow.follow(piece, piece_start);
        piece_start += piece.len();
    }
    // The point skipped to must come after a scroll (so the cursor is on the bottom row), with
    // `needed` scrolls after it.
    let scrolls = follow.scrolls;
    if scrolls.len() < needed + 1 {
        return None;
    }
    let point = scrolls[0];
    // Only line feeds before it: the column cannot be set without printing. Never worth it.
    let printed = point.last_printed?;
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
    Some(Plan {
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
        assert_eq!(plan(start(0, 0), [&output[..]]), None);
    }

    #[test]
    fn a_byte_that_is_not_plain_is_found_on_either_side_of_a_chunk_s_edge() {
        for at in [
            0,
            SCAN_CHUNK - 1,
            SCAN_CHUNK,
            SCAN_CHUNK + 1,
            3 * SCAN_CHUNK - 1,
        ] {
            for byte in [0x1b, 0x07, b'\t', 0x7f, 0xc3] {
                let mut output = b"line\r\n".repeat(20);
                output[at] = byte;
                assert_eq!(first_not_plain(&output), Some(at), "{byte:#04x} at {at}");
            }
        }
        assert_eq!(first_not_plain(&b"y\n".repeat(100)), None);
    }

    #[test]
    fn line_feeds_and_returns_at_a_piece_s_edges_are_followed() {
        // Each piece starts or ends with a control, and a line's text is cut between pieces.
        let output = b"ab\ncd\r\nef\ngh\r\nij\nkl\nmn\r\nop\nqr\n";
        let whole = plan(start(3, 0), [&output[..]]);
        assert!(whole.is_some());
        for cut in [2, 3, 5, 6, 7, 8] {
            let (left, right) = output.split_at(cut);
            assert_eq!(plan(start(3, 0), [left, right]), whole, "cut at {cut}");
        }
        let pieces: Vec<&[u8]> = output.chunks(1).collect();
        assert_eq!(plan(start(3, 0), pieces), whole);
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
    fn plan_bytewise(start: Start, output: &[u8]) -> Option<Plan> {
        let bottom = start.rows - 1;
        let needed = usize::from(start.rows) + start.kept_above;
        let (mut row, mut col) = (start.row.min(bottom), start.col.min(start.cols));
        let mut last_printed = None;
        let mut scrolls = VecDeque::new();
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
                _ => break,
            };
            if scrolled {
                scrolls.push_back((index + 1, col, last_printed));
                if scrolls.len() > needed + 1 {
                    scrolls.pop_front();
                }
            }
        }
        if scrolls.len() < needed + 1 {
            return None;
        }
        let (skip, col, Some(printed)) = scrolls[0] else {
            return None;
        };
        let mut replacement = vec![b'\n'; usize::from(bottom - row_at(start))];
        replacement.push(b'\r');
        if col == 0 {
            replacement.extend([printed, b'\r']);
        } else {
            replacement.extend(std::iter::repeat_n(printed, usize::from(col)));
        }
        Some(Plan { skip, replacement })
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
            // The plan follows the plain text the caller found, as `Screen::look_ahead` cuts it.
            let plain = &output[..first_not_plain(&output).unwrap_or(output.len())];
            let (left, right) = plain.split_at(split.min(plain.len()));
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
