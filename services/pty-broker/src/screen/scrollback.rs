//! The scrollback: rows that scrolled off the top of the normal screen, oldest first, at most
//! `capacity` of them. Each row is kept as the text vt100 formats for it (its characters, with
//! SGR changes from the default attributes), which costs about what the row's text does, rather
//! than as a row of cells, which costs 32 bytes a column whatever is in it.

use std::collections::VecDeque;

use unicode_width::UnicodeWidthStr as _;
use vt100::capture::{BasicFormattedCaptureState, RowContents, basic_formatted_to_plain};

/// The rows that left the screen.
#[derive(Debug)]
pub(super) struct Scrollback {
    capacity: usize,
    rows: VecDeque<ScrollbackRow>,
}

/// One row that left the screen.
#[derive(Debug)]
pub(super) struct ScrollbackRow {
    /// The row's text with SGR changes from the default attributes; no line end.
    pub formatted: Box<str>,
    /// The text went on in the next row (it reached the right margin and wrapped).
    pub wrapped: bool,
    /// The screen's width when the row left it.
    pub cols: u16,
}

impl ScrollbackRow {
    /// The row's text without attributes, trailing spaces trimmed.
    pub fn plain(&self) -> String {
        let mut plain: String = basic_formatted_to_plain(&self.formatted).collect();
        plain.truncate(plain.trim_end().len());
        plain
    }
}

impl Scrollback {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            rows: VecDeque::new(),
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Keeps a row that scrolled off a screen `cols` wide, dropping the oldest beyond capacity.
    pub fn push(&mut self, row: &RowContents<'_>, cols: u16) {
        if self.capacity == 0 {
            return;
        }
        let mut state = BasicFormattedCaptureState::new();
        let mut formatted = String::new();
        // Writing to a String cannot fail.
        let _ = row.write_formatted_basic(&mut formatted, &mut state);
        let wrapped = !NewlineProbe::follows(row, &mut state);
        if wrapped {
            // The formatted text leaves out trailing blank cells; a wrapped row must fill its
            // width again when it is drawn, or the next row would not start on a line of its own.
            let width = basic_formatted_to_plain(&formatted)
                .map(|part| part.width())
                .sum::<usize>();
            if width < usize::from(cols) {
                formatted.push_str("\x1b[m");
                formatted.extend(std::iter::repeat_n(' ', usize::from(cols) - width));
            }
        }
        if self.rows.len() == self.capacity {
            self.rows.pop_front();
        }
        self.rows.push_back(ScrollbackRow {
            formatted: formatted.into_boxed_str(),
            wrapped,
            cols,
        });
    }

    /// The newest `count` rows (fewer when fewer are kept), oldest first.
    pub fn newest(&self, count: usize) -> impl ExactSizeIterator<Item = &ScrollbackRow> {
        let skip = self.rows.len().saturating_sub(count);
        self.rows.range(skip..)
    }

    /// Writes every row so that a fresh terminal `screen_rows` tall holds them in its scrollback
    /// and shows a blank screen after them: each row and its line end (a wrapped row wraps
    /// instead), then enough line feeds to push the last row off the screen.
    pub fn write_snapshot(&self, out: &mut String, screen_rows: u16) {
        let Some(last) = self.rows.back() else {
            return;
        };
        for row in &self.rows {
            out.push_str(&row.formatted);
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
