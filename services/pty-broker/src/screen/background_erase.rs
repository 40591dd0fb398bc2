//! xterm's "background colour erase": the blanks that an erase (ED, EL, ECH and their selective
//! forms), an insertion of characters (ICH) or a deletion of them (DCH) leaves take the current
//! background colour alone, not the bold, underline, inverse or foreground colour set with it.
//! vt100 gives erased blanks every current attribute and inserted or deleted ones none, so
//! `ESC [ 4 m ESC [ K` underlined the blanks on the broker's screen where xterm.js, what users
//! see, shows none, and a background colour set before an insertion was lost.
//!
//! The screen makes these sequences ([`super::sequences`] finds them) of sequences vt100 follows
//! as xterm does: around an erase, a pen with the background alone; after an insertion or a
//! deletion, its blanks erased with that pen. Either way the pen is set back after, and nothing
//! is fed when the pen already has nothing but a background.

use super::Emulator;
use super::sequences::Action;

impl Emulator {
    /// Feeds `sequence` (an erase, an insertion or a deletion of characters, as `action` says)
    /// so that its blanks are as xterm leaves them.
    pub(super) fn blank_as_xterm(&mut self, sequence: &[u8], action: &Action) {
        match *action {
            Action::InsertCharacters(count) => {
                self.parser.process(sequence);
                // The inserted blanks are at the cursor, which ICH does not move.
                if self.background_is_set() {
                    self.with_background_only(format!("\x1b[{count}X").as_bytes());
                }
            }
            Action::DeleteCharacters(count) => {
                self.parser.process(sequence);
                if self.background_is_set() {
                    self.fill_row_end(count);
                }
            }
            Action::Erase | Action::SetModes { .. } => self.with_background_only(sequence),
        }
    }

    /// Feeds `erase` with a pen that has the current background colour alone, then sets the
    /// pen back.
    pub(super) fn with_background_only(&mut self, erase: &[u8]) {
        let screen = self.parser.screen();
        if pen_is_background_only(screen) {
            self.parser.process(erase);
            return;
        }
        let pen = screen.attributes_formatted();
        let background = background_only_pen(screen.bgcolor());
        self.parser.process(background.as_bytes());
        self.parser.process(erase);
        self.parser.process(pen.as_bytes());
    }

    fn background_is_set(&self) -> bool {
        self.parser.screen().bgcolor() != vt100::Color::Default
    }

    /// After a deletion of `count` characters at the cursor: the blanks that came in at the end
    /// of the row (as many as were deleted, at most the rest of the row) erased in the
    /// background, and the cursor back where it was. A cursor past the last column (a wrap
    /// pending) deleted nothing.
    fn fill_row_end(&mut self, count: u16) {
        let (_, col) = self.parser.screen().cursor_position();
        let cols = self.parser.screen().size().1.get();
        if col >= cols {
            return;
        }
        let blanks = count.min(cols - col);
        let first_blank = cols - blanks + 1;
        let erase = format!("\x1b[{first_blank}G\x1b[{blanks}X\x1b[{}G", col + 1);
        self.with_background_only(erase.as_bytes());
    }
}

/// Whether erasing with the pen as it is leaves the blanks xterm leaves: no attribute but,
/// perhaps, a background colour. vt100 keeps no others (blink, strikethrough).
fn pen_is_background_only(screen: &vt100::Screen) -> bool {
    screen.fgcolor() == vt100::Color::Default
        && !screen.bold()
        && !screen.dim()
        && !screen.italic()
        && !screen.underline()
        && !screen.inverse()
}

/// The SGR sequence that leaves the pen with the background colour `background` alone.
fn background_only_pen(background: vt100::Color) -> String {
    match background {
        vt100::Color::Default => "\x1b[m".to_owned(),
        vt100::Color::Idx(index) => format!("\x1b[0;48;5;{index}m"),
        vt100::Color::Rgb(red, green, blue) => format!("\x1b[0;48;2;{red};{green};{blue}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::Screen;
    use crate::domain::TerminalSize;
    use ptyhub_model::{Cell, Color, ScreenFormat};

    /// The cells of row `row` after `output`, on a 10x3 screen.
    fn row_after(output: &[u8], row: usize) -> Vec<Cell> {
        let mut screen = Screen::new(TerminalSize::new(10, 3).unwrap(), 0, 0);
        screen.feed_at(0, output);
        let view = screen.view(ScreenFormat::Cells, 0);
        view.rows[row].cells.clone()
    }

    fn is_blank_with_background(cell: &Cell, background: Option<Color>) -> bool {
        (cell.text.is_empty() || cell.text == " ")
            && cell.bg == background
            && cell.fg.is_none()
            && !cell.bold
            && !cell.underline
            && !cell.inverse
            && !cell.italic
            && !cell.dim
    }

    #[test]
    fn an_erase_leaves_the_background_alone_and_keeps_the_pen() {
        let cells = row_after(b"abcdefghij\r\x1b[1;4;7;31;44m\x1b[3CK\x1b[K", 0);
        assert_eq!(cells[2].text, "c");
        // The text written after the pen was set keeps it all.
        assert_eq!(cells[3].text, "K");
        assert!(cells[3].bold && cells[3].underline && cells[3].inverse);
        for cell in &cells[4..] {
            assert!(
                is_blank_with_background(cell, Some(Color::Indexed(4))),
                "{cell:?}"
            );
        }
        // The pen is set back after the erase.
        let cells = row_after(b"\x1b[4;38;2;1;2;3m\x1b[2Kx", 0);
        assert_eq!(cells[0].text, "x");
        assert!(cells[0].underline);
        assert_eq!(
            cells[0].fg,
            Some(Color::Rgb {
                red: 1,
                green: 2,
                blue: 3
            })
        );
        assert!(is_blank_with_background(&cells[1], None));
    }

    #[test]
    fn inserted_and_deleted_blanks_take_the_background() {
        let cells = row_after(b"abcdefghij\r\x1b[2C\x1b[4;48;5;100m\x1b[2@", 0);
        assert_eq!(cells[1].text, "b");
        for cell in &cells[2..4] {
            assert!(
                is_blank_with_background(cell, Some(Color::Indexed(100))),
                "{cell:?}"
            );
        }
        assert_eq!(cells[4].text, "c");
        let cells = row_after(b"abcdefghij\r\x1b[2C\x1b[7;48;2;9;8;7m\x1b[3PX", 0);
        assert_eq!(
            cells
                .iter()
                .map(|cell| cell.text.as_str())
                .collect::<String>(),
            "abXghij"
        );
        for cell in &cells[7..] {
            assert!(
                is_blank_with_background(
                    cell,
                    Some(Color::Rgb {
                        red: 9,
                        green: 8,
                        blue: 7
                    })
                ),
                "{cell:?}"
            );
        }
    }

    #[test]
    fn a_deletion_without_a_background_leaves_plain_blanks() {
        let cells = row_after(b"abcdefghij\r\x1b[4m\x1b[5P", 0);
        for cell in &cells[5..] {
            assert!(is_blank_with_background(cell, None), "{cell:?}");
        }
    }
}
