//! The screen as the screen API answers it: plain text (as `tmux capture-pane -p` gives it), the
//! rows drawn with their attributes (ANSI), or rows of cells with attributes, each with up to N
//! rows of scrollback above the visible ones. The cursor, the format and the cells are the
//! model's (`ptyhub_model::Cell` and the like), read here from vt100's grid.

use ptyhub_model::{Cell, Color, Cursor, ScreenFormat, ScreenRow};
use unicode_width::UnicodeWidthStr as _;

use super::Emulator;
use super::scrollback::ScrollbackRow;
use crate::domain::TerminalSize;

/// The screen as of `offset`, in one format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScreenView {
    pub offset: u64,
    pub size: TerminalSize,
    pub cursor: Cursor,
    pub title: String,
    pub alternate_screen: bool,
    pub format: ScreenFormat,
    /// How many of the rows come from the scrollback (they come first).
    pub scrollback_rows: usize,
    /// [`ScreenFormat::Text`]: a string a row, trailing spaces trimmed.
    pub lines: Vec<String>,
    /// [`ScreenFormat::Ansi`]: the rows with their attributes, joined by CR LF.
    pub ansi: String,
    /// [`ScreenFormat::Cells`]: the rows as cells.
    pub rows: Vec<ScreenRow>,
}

pub(super) fn build(
    emulator: &Emulator,
    offset: u64,
    size: TerminalSize,
    format: ScreenFormat,
    scrollback: usize,
) -> ScreenView {
    let vt = emulator.parser.screen();
    let history = emulator.parser.callbacks().scrollback.newest(scrollback);
    let scrollback_rows = history.len();
    let (cursor_row, cursor_col) = vt.cursor_position();
    let mut view = ScreenView {
        offset,
        size,
        cursor: Cursor {
            row: cursor_row.into(),
            col: cursor_col.into(),
            visible: !vt.hide_cursor(),
        },
        title: emulator.parser.callbacks().title.clone(),
        alternate_screen: vt.alternate_screen(),
        format,
        scrollback_rows,
        lines: Vec::new(),
        ansi: String::new(),
        rows: Vec::new(),
    };
    match format {
        ScreenFormat::Text => view.lines = lines(emulator, size, scrollback),
        ScreenFormat::Ansi => {
            let mut rows: Vec<String> = history
                .map(|row| format!("{}\x1b[m", row.formatted))
                .collect();
            rows.extend(
                vt.rows_formatted(0, size.cols())
                    .map(|row| format!("{row}\x1b[m")),
            );
            view.ansi = rows.join("\r\n");
        }
        ScreenFormat::Cells => {
            view.rows = history.map(scrollback_cells).collect();
            view.rows.extend((0..size.rows()).map(|row| {
                let cells = (0..size.cols())
                    .map(|col| vt.cell(row, col).map(cell).unwrap_or_default())
                    .collect();
                ScreenRow {
                    cells,
                    wrapped: vt.row_wrapped(row),
                }
            }));
        }
    }
    view
}

/// The text a wait searches: as [`ScreenFormat::Text`], except that the cursor's row keeps its
/// spaces up to the cursor, so that a prompt waiting for input (`$ `) ends in its space.
pub(super) fn text(emulator: &Emulator, size: TerminalSize, scrollback: usize) -> String {
    let mut lines = lines(emulator, size, scrollback);
    let history = emulator
        .parser
        .callbacks()
        .scrollback
        .newest(scrollback)
        .len();
    let (cursor_row, cursor_col) = emulator.parser.screen().cursor_position();
    if let Some(line) = lines.get_mut(history + usize::from(cursor_row)) {
        let width = line.width();
        if width < usize::from(cursor_col) {
            line.extend(std::iter::repeat_n(' ', usize::from(cursor_col) - width));
        }
    }
    lines.join("\n")
}

fn lines(emulator: &Emulator, size: TerminalSize, scrollback: usize) -> Vec<String> {
    let history = emulator.parser.callbacks().scrollback.newest(scrollback);
    let mut lines: Vec<String> = history.map(ScrollbackRow::plain).collect();
    lines.extend(
        emulator
            .parser
            .screen()
            .rows(0, size.cols())
            .map(|mut row| {
                row.truncate(row.trim_end().len());
                row
            }),
    );
    lines
}

/// A scrollback row as cells: its formatted text drawn on a one-row emulator of its width.
fn scrollback_cells(row: ScrollbackRow<'_>) -> ScreenRow {
    let cols = std::num::NonZeroU16::new(row.cols).unwrap_or(std::num::NonZeroU16::MIN);
    let mut parser = vt100::Parser::new(std::num::NonZeroU16::MIN, cols, 0);
    parser.process(row.formatted.as_bytes());
    let vt = parser.screen();
    ScreenRow {
        cells: (0..row.cols)
            .map(|col| vt.cell(0, col).map(cell).unwrap_or_default())
            .collect(),
        wrapped: row.wrapped,
    }
}

fn cell(cell: &vt100::Cell) -> Cell {
    Cell {
        text: cell.contents().to_owned(),
        wide: cell.is_wide(),
        fg: color(cell.fgcolor()),
        bg: color(cell.bgcolor()),
        bold: cell.bold(),
        dim: cell.dim(),
        italic: cell.italic(),
        underline: cell.underline(),
        inverse: cell.inverse(),
    }
}

fn color(color: vt100::Color) -> Option<Color> {
    match color {
        vt100::Color::Default => None,
        vt100::Color::Idx(index) => Some(Color::Indexed(index)),
        vt100::Color::Rgb(red, green, blue) => Some(Color::Rgb { red, green, blue }),
    }
}
