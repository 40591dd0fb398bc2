//! The scrollback: rows that scrolled off the top of the normal screen, oldest first, at most
//! `capacity` of them. Each row is kept as the text vt100 formats for it (its characters, with
//! SGR changes from the default attributes), which costs about what the row's text does, rather
//! than as a row of cells, which costs 32 bytes a column whatever is in it.
//!
//! The rows' text lies back to back in blocks of [`BLOCK_BYTES`], not in an allocation a row: a
//! block goes once the last of its rows is dropped, and a screen that falls asleep frees its
//! scrollback as whole blocks. Rows allocated one by one, between the output ring's buffers
//! that stay, would leave holes too small for the allocator to give back (the bench measured
//! 92 KiB a session beyond the ring with every screen asleep that way, against 40 with screens
//! off).

use std::collections::VecDeque;

use unicode_width::UnicodeWidthStr as _;
use vt100::capture::{BasicFormattedCaptureState, RowContents, basic_formatted_to_plain};

/// The size of a block of rows' text: a few pages, so that a block freed is pages the allocator
/// can give back, and small beside a full scrollback (1,000 rows of 80 columns are 80 KiB and
/// more), so that the block being filled and the one being emptied cost little.
const BLOCK_BYTES: usize = 16 * 1024;

/// The rows that left the screen.
#[derive(Debug)]
pub(super) struct Scrollback {
    capacity: usize,
    /// The rows' text, oldest first; a row never spans two blocks (a row longer than a block has
    /// one of its own).
    blocks: VecDeque<String>,
    /// Blocks dropped from the front since the start: a row's `block` counts from the first.
    blocks_dropped: u64,
    rows: VecDeque<RowSpan>,
    /// Where a row is formatted before it is copied into a block.
    scratch: String,
}

/// Where one row's text lies, and what the text does not say.
#[derive(Debug, Clone, Copy)]
struct RowSpan {
    block: u64,
    start: u32,
    len: u32,
    wrapped: bool,
    cols: u16,
}

/// One row that left the screen.
#[derive(Debug, Clone, Copy)]
pub(super) struct ScrollbackRow<'a> {
    /// The row's text with SGR changes from the default attributes; no line end.
    pub formatted: &'a str,
    /// The text went on in the next row (it reached the right margin and wrapped).
    pub wrapped: bool,
    /// The screen's width when the row left it.
    pub cols: u16,
}

impl ScrollbackRow<'_> {
    /// The row's text without attributes, trailing spaces trimmed.
    pub fn plain(self) -> String {
        let mut plain: String = basic_formatted_to_plain(self.formatted).collect();
        plain.truncate(plain.trim_end().len());
        plain
    }
}

impl Scrollback {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            blocks: VecDeque::new(),
            blocks_dropped: 0,
            rows: VecDeque::new(),
            scratch: String::new(),
        }
    }

    /// About how many bytes the rows take on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.blocks.iter().map(String::capacity).sum::<usize>()
            + self.rows.capacity() * std::mem::size_of::<RowSpan>()
            + self.scratch.capacity()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Keeps a row that scrolled off a screen `cols` wide, dropping the oldest beyond capacity.
    pub fn push(&mut self, row: &RowContents<'_>, cols: u16) {
        if self.capacity == 0 {
            return;
        }
        let mut state = BasicFormattedCaptureState::new();
        let formatted = &mut self.scratch;
        formatted.clear();
        // Writing to a String cannot fail.
        let _ = row.write_formatted_basic(formatted, &mut state);
        let wrapped = !NewlineProbe::follows(row, &mut state);
        if wrapped {
            // The formatted text leaves out trailing blank cells; a wrapped row must fill its
            // width again when it is drawn, or the next row would not start on a line of its own.
            let width = basic_formatted_to_plain(formatted)
                .map(|part| part.width())
                .sum::<usize>();
            if width < usize::from(cols) {
                formatted.push_str("\x1b[m");
                formatted.extend(std::iter::repeat_n(' ', usize::from(cols) - width));
            }
        }
        self.keep(wrapped, cols);
    }

    /// Copies the row in `scratch` into the newest block (a new one when it does not fit) and
    /// drops the oldest row beyond capacity, and its block once no row is left in it.
    fn keep(&mut self, wrapped: bool, cols: u16) {
        let text = self.scratch.as_str();
        let fits = self
            .blocks
            .back()
            .is_some_and(|block| block.len() + text.len() <= block.capacity());
        if !fits {
            self.blocks
                .push_back(String::with_capacity(BLOCK_BYTES.max(text.len())));
        }
        let block = self.blocks.back_mut().expect("a block was just made");
        let start = block.len();
        block.push_str(text);
        self.rows.push_back(RowSpan {
            block: self.blocks_dropped + self.blocks.len() as u64 - 1,
            // A block holds at most a row's length or BLOCK_BYTES, and a row is a screen row.
            start: u32::try_from(start).unwrap_or(u32::MAX),
            len: u32::try_from(text.len()).unwrap_or(u32::MAX),
            wrapped,
            cols,
        });
        if self.rows.len() > self.capacity {
            self.rows.pop_front();
            let oldest_needed = self.rows.front().map_or(u64::MAX, |row| row.block);
            while self.blocks_dropped < oldest_needed && !self.blocks.is_empty() {
                self.blocks.pop_front();
                self.blocks_dropped += 1;
            }
        }
    }

    fn row(&self, span: &RowSpan) -> ScrollbackRow<'_> {
        let block = &self.blocks[(span.block - self.blocks_dropped) as usize];
        let start = span.start as usize;
        ScrollbackRow {
            formatted: &block[start..start + span.len as usize],
            wrapped: span.wrapped,
            cols: span.cols,
        }
    }

    /// The newest `count` rows (fewer when fewer are kept), oldest first.
    pub fn newest(&self, count: usize) -> impl ExactSizeIterator<Item = ScrollbackRow<'_>> {
        let skip = self.rows.len().saturating_sub(count);
        self.rows.range(skip..).map(|span| self.row(span))
    }

    /// Writes every row so that a fresh terminal `screen_rows` tall holds them in its scrollback
    /// and shows a blank screen after them: each row and its line end (a wrapped row wraps
    /// instead), then enough line feeds to push the last row off the screen.
    pub fn write_snapshot(&self, out: &mut String, screen_rows: u16) {
        let Some(last) = self.rows.back() else {
            return;
        };
        for row in self.rows.iter().map(|span| self.row(span)) {
            out.push_str(row.formatted);
            out.push_str("\x1b[m");
            if !row.wrapped {
                out.push_str("\r\n");
            }
        }
        if last.wrapped {
            // The row that wrapped onto the screen is kept whole; the screen row after it is
            // drawn on its own.
            out.push_str("\r\n");
        }
        for _ in 1..screen_rows {
            out.push('\n');
        }
    }
}

/// Tells whether vt100 would start the next row on a new line, that is whether the row just
/// written did not wrap: it writes a `\n` first exactly then. The probe stops vt100 at the first
/// character it writes, so asking costs nothing.
#[derive(Default)]
struct NewlineProbe {
    newline: bool,
}

impl NewlineProbe {
    fn follows(row: &RowContents<'_>, state: &mut BasicFormattedCaptureState) -> bool {
        let mut probe = Self::default();
        let _ = row.write_formatted_basic(&mut probe, state);
        probe.newline
    }
}

impl std::fmt::Write for NewlineProbe {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        self.newline = text.starts_with('\n');
        Err(std::fmt::Error)
    }

    fn write_char(&mut self, c: char) -> std::fmt::Result {
        self.newline = c == '\n';
        Err(std::fmt::Error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scrollback of `capacity` rows fed through vt100 on a screen `cols` wide and one row
    /// tall, so every line printed after the first scrolls a row into it.
    struct Feeder {
        parser: vt100::Parser<Keeper>,
    }

    struct Keeper(Scrollback, u16);

    impl vt100::Callbacks for Keeper {
        fn on_scroll(&mut self, row: RowContents<'_>, _alternate_screen: bool) {
            self.0.push(&row, self.1);
        }
    }

    impl Feeder {
        fn new(capacity: usize, cols: u16) -> Self {
            Self {
                parser: vt100::Parser::new_with_callbacks(
                    std::num::NonZeroU16::MIN,
                    std::num::NonZeroU16::new(cols).expect("a test's width is not 0"),
                    0,
                    Keeper(Scrollback::new(capacity), cols),
                ),
            }
        }

        fn scrollback(&self) -> &Scrollback {
            &self.parser.callbacks().0
        }
    }

    #[test]
    fn rows_keep_their_text_as_blocks_come_and_go() {
        let mut feeder = Feeder::new(100, 80);
        for line in 0..5_000 {
            feeder
                .parser
                .process(format!("\r\nline {line:05} {}", "x".repeat(60)).as_bytes());
        }
        let scrollback = feeder.scrollback();
        assert_eq!(scrollback.len(), 100);
        let rows: Vec<String> = scrollback.newest(100).map(ScrollbackRow::plain).collect();
        for (index, row) in rows.iter().enumerate() {
            // The last line printed is still on the screen, so the newest row is the one before.
            assert_eq!(
                *row,
                format!("line {:05} {}", 4_899 + index, "x".repeat(60))
            );
        }
        // 100 rows of about 70 bytes need one block or two, never the 5,000 rows' worth.
        assert!(
            scrollback.blocks.len() <= 2,
            "{} blocks",
            scrollback.blocks.len()
        );
    }

    #[test]
    fn a_row_longer_than_a_block_has_one_of_its_own() {
        let mut feeder = Feeder::new(3, 1000);
        // Every cell in another colour: the formatted row is far longer than its 1,000 columns.
        let long: String = (0..1000)
            .map(|col| format!("\x1b[38;2;{};{};{}m#", col % 256, 255 - col % 256, col / 4))
            .collect();
        assert!(long.len() > BLOCK_BYTES);
        feeder.parser.process(b"first");
        feeder
            .parser
            .process(format!("\r\n\x1b[m{long}\x1b[m\r\nlast").as_bytes());
        let rows: Vec<ScrollbackRow<'_>> = feeder.scrollback().newest(3).collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].plain(), "first");
        assert_eq!(rows[1].plain(), "#".repeat(1000));
        assert!(rows[1].formatted.len() > BLOCK_BYTES);
    }

    #[test]
    fn no_capacity_keeps_nothing() {
        let mut feeder = Feeder::new(0, 80);
        feeder.parser.process(b"a\r\nb\r\nc");
        assert_eq!(feeder.scrollback().len(), 0);
        assert!(feeder.scrollback().blocks.is_empty());
    }
}
