//! xterm's "background colour erase": the blanks that an erase (ED, EL, ECH and their selective
//! forms), an insertion or deletion of characters (ICH, DCH) or of lines (IL, DL) or a scroll
//! (SU, and a line feed, IND, NEL or RI at a margin) leaves take the current background colour
//! alone, not the bold, underline, inverse or foreground colour set with it. vt100 gives erased
//! blanks every current attribute and the others none, so `ESC [ 4 m ESC [ K` underlined the
//! blanks on the broker's screen where xterm.js, what users see, shows none, and a background
//! colour set before a scroll or an insertion was lost.
//!
//! The screen makes these sequences ([`super::sequences`] finds them; line feeds are found in
//! the text between them) of sequences vt100 follows as xterm does: around an erase, a pen with
//! the background alone; after the others, their blanks erased with that pen (rows with EL 2
//! after moving there by VPA, which keeps the column and ignores origin mode). The pen is set
//! back after, and nothing is added when the pen has nothing but a background, or, for what
//! vt100 leaves without attributes, no background. Which rows a scroll brings in depends on
//! the scroll margins, which vt100 does not tell: they are followed here ([`ScrollMargins`]).
//! xterm also puts the cursor in the first column after IL and DL inside the margins, and
//! follows IND and NEL, which vt100 ignores.
//!
//! Left as vt100 makes it: the line that auto-wrap brings in at the bottom margin (text written
//! past the last column there) has no background, where xterm gives it the current one.

use super::Emulator;
use super::sequences::Action;

/// The scroll margins of both screens, as vt100 keeps them: the first and last row of each
/// screen's region.
#[derive(Debug, Clone, Copy)]
pub(super) struct ScrollMargins {
    rows: u16,
    normal: (u16, u16),
    alternate: (u16, u16),
}

impl ScrollMargins {
    /// Both screens scrolling whole, as in a fresh emulator, after `ESC c` and after a resize.
    pub fn new(rows: u16) -> Self {
        let whole = (0, rows.saturating_sub(1));
        Self {
            rows,
            normal: whole,
            alternate: whole,
        }
    }

    /// The alternate screen's region made the whole screen (`CSI r` there).
    pub fn alternate_scrolls_whole(&mut self) {
        self.set(true, 0, 0);
    }

    fn of(&self, alternate: bool) -> (u16, u16) {
        if alternate {
            self.alternate
        } else {
            self.normal
        }
    }

    /// DECSTBM's parameters as vt100 takes them: 0 is the edge; a region of fewer than two
    /// rows is the whole screen.
    fn set(&mut self, alternate: bool, top: u16, bottom: u16) {
        let last = self.rows.saturating_sub(1);
        let top = top.max(1) - 1;
        let bottom = if bottom == 0 { self.rows } else { bottom };
        let bottom = (bottom - 1).min(last);
        let margins = if top < bottom {
            (top, bottom)
        } else {
            (0, last)
        };
        if alternate {
            self.alternate = margins;
        } else {
            self.normal = margins;
        }
    }
}

impl Emulator {
    /// Feeds `sequence`, which does what `action` says, as xterm makes it: switches of screens
    /// by [`Emulator::set_modes`], the rest so that their blanks are as xterm leaves them and
    /// the margins stay known.
    pub(super) fn make_as_xterm(&mut self, sequence: &[u8], action: &Action) {
        match *action {
            Action::SetModes { set, ref modes } => self.set_modes(set, modes),
            Action::Erase => self.with_background_only(sequence),
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
            Action::InsertLines(count) => self.insert_or_delete_lines(sequence, count, true),
            Action::DeleteLines(count) => self.insert_or_delete_lines(sequence, count, false),
            Action::ScrollUp(count) => {
                let (top, bottom) = self.margins();
                self.parser.process(sequence);
                let lines = count.min(bottom - top + 1);
                self.fill_rows(bottom + 1 - lines..=bottom);
            }
            Action::SetMargins { top, bottom } => {
                self.parser.process(sequence);
                let alternate = self.parser.screen().alternate_screen();
                self.margins.set(alternate, top, bottom);
            }
            Action::FullReset => {
                self.parser.process(sequence);
                self.margins = ScrollMargins::new(self.margins.rows);
            }
            // vt100 ignores IND and NEL: they are the line feed they make. The string
            // terminator first ends whatever vte was in the middle of, as their ESC would.
            Action::Index => {
                self.parser.process(b"\x1b\\");
                self.line_feed(b'\n');
            }
            Action::NextLine => {
                self.parser.process(b"\x1b\\\r");
                self.line_feed(b'\n');
            }
            Action::ReverseIndex => {
                let (row, _) = self.parser.screen().cursor_position();
                let (top, _) = self.margins();
                self.parser.process(sequence);
                if row == top {
                    self.fill_rows(top..=top);
                }
            }
        }
    }

    /// Feeds `text`, output in which [`super::sequences`] found nothing, so that a line feed
    /// (LF, VT or FF) that scrolls while a background colour is set brings in a line in it.
    /// `starts_in_ground` says whether vte is in its ground state before `text`: a line feed in
    /// the middle of a string or a sequence is left to vt100, since what would be fed after it
    /// would end them.
    pub(super) fn feed_text(&mut self, text: &[u8], starts_in_ground: bool) {
        if !self.background_is_set() && memchr::memchr(0x1b, text).is_none() {
            self.parser.process(text);
            return;
        }
        let mut from = 0;
        // Whether vte is in ground after `text[..checked]`.
        let (mut ground, mut checked) = (starts_in_ground, 0);
        for at in memchr::memchr3_iter(b'\n', 0x0b, 0x0c, text) {
            let before = &text[from..at];
            if !self.background_is_set() && memchr::memchr(0x1b, before).is_none() {
                // Nothing before this line feed can have set a background colour.
                continue;
            }
            self.parser.process(before);
            from = at;
            if !self.background_is_set() {
                continue;
            }
            ground = in_ground_after(&text[checked..at], ground);
            checked = at;
            if ground {
                self.line_feed(text[at]);
                from = at + 1;
                checked = from;
            }
        }
        self.parser.process(&text[from..]);
    }

    /// Feeds `erase` with a pen that has the current background colour alone, then sets the
    /// pen back: one SGR sequence turns off what else the pen has, another turns it on again,
    /// so that vt100 parses a few bytes more, not a whole pen twice.
    pub(super) fn with_background_only(&mut self, erase: &[u8]) {
        let pen = Pen::of(self.parser.screen());
        if pen.is_background_only() {
            self.parser.process(erase);
            return;
        }
        let mut bytes = Vec::with_capacity(erase.len() + 40);
        pen.write_off(&mut bytes);
        bytes.extend_from_slice(erase);
        pen.write_on(&mut bytes);
        self.parser.process(&bytes);
    }

    fn background_is_set(&self) -> bool {
        self.parser.screen().bgcolor() != vt100::Color::Default
    }

    /// The active screen's scroll margins.
    fn margins(&self) -> (u16, u16) {
        self.margins.of(self.parser.screen().alternate_screen())
    }

    /// A line feed (`byte`: LF, VT or FF, all one to vt100 and xterm) in vte's ground state: at
    /// the bottom margin it scrolls the region, and the line it brings in takes the background.
    fn line_feed(&mut self, byte: u8) {
        let (row, _) = self.parser.screen().cursor_position();
        let (_, bottom) = self.margins();
        self.parser.process(&[byte]);
        if row == bottom {
            self.fill_rows(bottom..=bottom);
        }
    }

    /// IL or DL (`insert`): inside the margins, blank lines at the cursor's row or at the bottom
    /// margin, and the cursor in the first column; outside them, nothing, in vt100 as in xterm.
    fn insert_or_delete_lines(&mut self, sequence: &[u8], count: u16, insert: bool) {
        let (row, _) = self.parser.screen().cursor_position();
        let (top, bottom) = self.margins();
        self.parser.process(sequence);
        if !(top..=bottom).contains(&row) {
            return;
        }
        let lines = count.min(bottom - row + 1);
        if insert {
            self.fill_rows(row..=row + lines - 1);
        } else {
            self.fill_rows(bottom + 1 - lines..=bottom);
        }
        self.parser.process(b"\r");
    }

    /// Erases `rows` (lines just brought in blank) in the background colour, when one is set,
    /// and puts the cursor back on its row; its column does not move.
    fn fill_rows(&mut self, rows: std::ops::RangeInclusive<u16>) {
        if !self.background_is_set() {
            return;
        }
        let (cursor_row, _) = self.parser.screen().cursor_position();
        let mut erase = String::new();
        for row in rows {
            erase.push_str(&format!("\x1b[{}d\x1b[2K", row + 1));
        }
        erase.push_str(&format!("\x1b[{}d", cursor_row + 1));
        self.with_background_only(erase.as_bytes());
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

/// Whether vte is in its ground state after `text`, given whether it was before: decided by the
/// last `ESC` in `text` alone (every state leads from `ESC` to the escape state), and where that
/// cannot tell (a string that ends only with a later `ESC`, a CAN or SUB, a sequence ended after
/// `text` began without an `ESC` in it), not in ground: a line feed then is left to vt100.
fn in_ground_after(text: &[u8], starts_in_ground: bool) -> bool {
    let Some(escape) = memchr::memrchr(0x1b, text) else {
        return starts_in_ground;
    };
    let rest = &text[escape + 1..];
    match rest.split_first() {
        None => false,
        // A CSI ends at its final byte.
        Some((b'[', sequence)) => sequence.iter().any(|byte| (0x40..=0x7e).contains(byte)),
        // An OSC ends at BEL (an ST would be a later ESC).
        Some((b']', string)) => string.contains(&0x07),
        // DCS, SOS, PM and APC end only with ST.
        Some((b'P' | b'X' | b'^' | b'_', _)) => false,
        // An escape with intermediates ends at its final byte.
        Some((0x20..=0x2f, sequence)) => sequence.iter().any(|byte| (0x30..=0x7e).contains(byte)),
        Some((0x30..=0x7e, _)) => true,
        Some(_) => false,
    }
}

/// What the pen has besides its background colour: what xterm leaves off the blanks. vt100
/// keeps no other attributes (blink, strikethrough).
struct Pen {
    foreground: vt100::Color,
    bold: bool,
    dim: bool,
    italic: bool,
    underline: bool,
    inverse: bool,
}

impl Pen {
    fn of(screen: &vt100::Screen) -> Self {
        Self {
            foreground: screen.fgcolor(),
            bold: screen.bold(),
            dim: screen.dim(),
            italic: screen.italic(),
            underline: screen.underline(),
            inverse: screen.inverse(),
        }
    }

    /// Whether erasing with the pen as it is leaves the blanks xterm leaves.
    fn is_background_only(&self) -> bool {
        self.foreground == vt100::Color::Default
            && !(self.bold || self.dim || self.italic || self.underline || self.inverse)
    }

    /// The SGR sequence that turns off all but the background.
    fn write_off(&self, out: &mut Vec<u8>) {
        let mut params = Params::new(out);
        if self.bold || self.dim {
            params.push(b"22");
        }
        for (set, off) in [
            (self.italic, &b"23"[..]),
            (self.underline, b"24"),
            (self.inverse, b"27"),
            (self.foreground != vt100::Color::Default, b"39"),
        ] {
            if set {
                params.push(off);
            }
        }
        params.end();
    }

    /// The SGR sequence that turns back on what [`Pen::write_off`] turned off.
    fn write_on(&self, out: &mut Vec<u8>) {
        let mut params = Params::new(out);
        for (set, on) in [
            (self.bold, &b"1"[..]),
            (self.dim, b"2"),
            (self.italic, b"3"),
            (self.underline, b"4"),
            (self.inverse, b"7"),
        ] {
            if set {
                params.push(on);
            }
        }
        match self.foreground {
            vt100::Color::Default => {}
            vt100::Color::Idx(index) => params.push(format!("38;5;{index}").as_bytes()),
            vt100::Color::Rgb(red, green, blue) => {
                params.push(format!("38;2;{red};{green};{blue}").as_bytes());
            }
        }
        params.end();
    }
}

/// An SGR sequence written parameter by parameter.
struct Params<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> Params<'a> {
    fn new(out: &'a mut Vec<u8>) -> Self {
        out.extend_from_slice(b"\x1b[");
        Self { out, first: true }
    }

    fn push(&mut self, param: &[u8]) {
        if !self.first {
            self.out.push(b';');
        }
        self.first = false;
        self.out.extend_from_slice(param);
    }

    fn end(self) {
        self.out.push(b'm');
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Screen, ScreenView};
    use crate::domain::TerminalSize;
    use ptyhub_model::{Cell, Color, ScreenFormat};

    /// Five rows of ten columns, each written full (`aaaaaaaaaa` to `eeeeeeeeee`) with no
    /// attributes, then `output`.
    fn after(output: &[u8]) -> ScreenView {
        let mut screen = Screen::new(TerminalSize::new(10, 5).unwrap(), 0, 0);
        let mut fed = b"\x1b[?7l".to_vec();
        for (row, letter) in (b'a'..=b'e').enumerate() {
            fed.extend(format!("\x1b[{};1H", row + 1).as_bytes());
            fed.extend([letter; 10]);
        }
        fed.extend(output);
        screen.feed_at(0, &fed);
        screen.view(ScreenFormat::Cells, 0)
    }

    fn text(view: &ScreenView, row: usize) -> String {
        view.rows[row]
            .cells
            .iter()
            .map(|cell| {
                if cell.text.is_empty() {
                    " "
                } else {
                    &cell.text
                }
            })
            .collect()
    }

    fn cursor(view: &ScreenView) -> (u32, u32) {
        (view.cursor.row, view.cursor.col)
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

    /// Whether every cell of `row` is blank in `background` alone.
    fn blank_row(view: &ScreenView, row: usize, background: Option<Color>) -> bool {
        view.rows[row]
            .cells
            .iter()
            .all(|cell| is_blank_with_background(cell, background))
    }

    const BLUE: Option<Color> = Some(Color::Indexed(4));

    #[test]
    fn an_erase_leaves_the_background_alone_and_keeps_the_pen() {
        let view = after(b"\x1b[1;1H\x1b[1;4;7;31;44m\x1b[3CK\x1b[K");
        let cells = &view.rows[0].cells;
        assert_eq!(cells[2].text, "a");
        // The text written after the pen was set keeps it all.
        assert_eq!(cells[3].text, "K");
        assert!(cells[3].bold && cells[3].underline && cells[3].inverse);
        for cell in &cells[4..] {
            assert!(is_blank_with_background(cell, BLUE), "{cell:?}");
        }
        // The pen is set back after the erase.
        let view = after(b"\x1b[2;1H\x1b[4;38;2;1;2;3m\x1b[2Kx");
        let cells = &view.rows[1].cells;
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
        // Every attribute comes back, the background never left.
        let view = after(b"\x1b[3;1H\x1b[2;3;7;38;5;9;48;2;4;5;6m\x1b[2Xx");
        let cells = &view.rows[2].cells;
        assert!(cells[0].dim && cells[0].italic && cells[0].inverse && !cells[0].bold);
        assert_eq!(cells[0].fg, Some(Color::Indexed(9)));
        let background = Some(Color::Rgb {
            red: 4,
            green: 5,
            blue: 6,
        });
        assert_eq!(cells[0].bg, background);
        assert!(is_blank_with_background(&cells[1], background));
    }

    #[test]
    fn inserted_and_deleted_characters_take_the_background() {
        let view = after(b"\x1b[1;3H\x1b[4;48;5;100m\x1b[2@");
        let cells = &view.rows[0].cells;
        for cell in &cells[2..4] {
            assert!(
                is_blank_with_background(cell, Some(Color::Indexed(100))),
                "{cell:?}"
            );
        }
        assert_eq!(text(&view, 0), "aa  aaaaaa");
        let view = after(b"\x1b[2;3H\x1b[7;44m\x1b[3PX");
        assert_eq!(text(&view, 1), "bbXbbbb   ");
        for cell in &view.rows[1].cells[7..] {
            assert!(is_blank_with_background(cell, BLUE), "{cell:?}");
        }
        // Without a background the blanks are plain, whatever else the pen has.
        let view = after(b"\x1b[3;1H\x1b[4m\x1b[5P");
        for cell in &view.rows[2].cells[5..] {
            assert!(is_blank_with_background(cell, None), "{cell:?}");
        }
    }

    #[test]
    fn lines_inserted_and_deleted_in_the_region_take_the_background_and_the_first_column() {
        // Region rows 2 to 4 (1-based).
        let view = after(b"\x1b[2;4r\x1b[3;5H\x1b[4;44m\x1b[2L");
        assert_eq!(text(&view, 1), "bbbbbbbbbb");
        assert!(blank_row(&view, 2, BLUE) && blank_row(&view, 3, BLUE));
        assert_eq!(text(&view, 4), "eeeeeeeeee", "below the region");
        assert_eq!(cursor(&view), (2, 0));
        let view = after(b"\x1b[2;4r\x1b[2;5H\x1b[44m\x1b[M");
        assert_eq!(text(&view, 1), "cccccccccc");
        assert!(blank_row(&view, 3, BLUE));
        assert_eq!(cursor(&view), (1, 0));
        // Outside the region nothing happens, and the cursor stays.
        let view = after(b"\x1b[2;4r\x1b[5;5H\x1b[44m\x1b[L");
        assert_eq!(text(&view, 4), "eeeeeeeeee");
        assert_eq!(cursor(&view), (4, 4));
        // Without a background the lines are plain, the cursor still in the first column.
        let view = after(b"\x1b[3;5H\x1b[1;4m\x1b[L");
        assert!(blank_row(&view, 2, None));
        assert_eq!(cursor(&view), (2, 0));
    }

    #[test]
    fn a_scroll_up_brings_lines_in_at_the_bottom_margin_in_the_background() {
        let view = after(b"\x1b[2;4r\x1b[5;3H\x1b[4;44m\x1b[2S");
        assert_eq!(text(&view, 1), "dddddddddd");
        assert!(blank_row(&view, 2, BLUE) && blank_row(&view, 3, BLUE));
        assert_eq!(text(&view, 4), "eeeeeeeeee");
        assert_eq!(cursor(&view), (4, 2), "SU does not move the cursor");
    }

    #[test]
    fn a_line_feed_at_the_bottom_margin_brings_in_a_line_in_the_background() {
        // LF, VT and FF alike, at the region's bottom.
        for feed in [&b"\n"[..], b"\x0b", b"\x0c"] {
            let mut output = b"\x1b[2;4r\x1b[4;3H\x1b[7;44m".to_vec();
            output.extend(feed);
            let view = after(&output);
            assert_eq!(text(&view, 3), "          ", "{feed:?}");
            assert!(blank_row(&view, 3, BLUE), "{feed:?}");
            assert_eq!(cursor(&view), (3, 2));
        }
        // At the bottom of the screen, the background set in the same read just before.
        let view = after(b"\x1b[5;1H\x1b[44mx\r\ny");
        assert_eq!(text(&view, 3), "xeeeeeeeee");
        assert_eq!(text(&view, 4), "y         ");
        assert!(
            view.rows[4].cells[1..]
                .iter()
                .all(|cell| is_blank_with_background(cell, BLUE))
        );
        // Below the region, a line feed on the last row scrolls nothing.
        let view = after(b"\x1b[2;4r\x1b[5;1H\x1b[44m\n");
        assert_eq!(text(&view, 4), "eeeeeeeeee");
    }

    #[test]
    fn a_line_feed_inside_a_string_is_left_alone() {
        let mut screen = Screen::new(TerminalSize::new(10, 5).unwrap(), 0, 0);
        screen.feed_at(0, b"\x1b[5;1Hlast\x1b[44m\x1b]2;a\nb\x07");
        let view = screen.view(ScreenFormat::Cells, 0);
        assert_eq!(view.title, "ab", "the title is not cut at the line feed");
        assert_eq!(text(&view, 4), "last      ");
        assert_eq!(view.rows[4].cells[5].bg, None);
    }

    #[test]
    fn index_next_line_and_reverse_index_scroll_as_xterm_does() {
        let view = after(b"\x1b[2;4r\x1b[4;3H\x1b[44m\x1bDx");
        assert!(text(&view, 2).starts_with("dddd"));
        assert_eq!(text(&view, 3), "  x       ");
        assert!(is_blank_with_background(&view.rows[3].cells[0], BLUE));
        let view = after(b"\x1b[2;3H\x1bEx");
        assert_eq!(cursor(&view), (2, 1));
        assert_eq!(text(&view, 2), "xccccccccc");
        let view = after(b"\x1b[2;4r\x1b[2;3H\x1b[4;44m\x1bM");
        assert!(blank_row(&view, 1, BLUE));
        assert_eq!(text(&view, 2), "bbbbbbbbbb");
        assert_eq!(text(&view, 4), "eeeeeeeeee");
        assert_eq!(cursor(&view), (1, 2));
    }

    #[test]
    fn margins_end_at_a_resize_and_a_reset() {
        let mut screen = Screen::new(TerminalSize::new(10, 5).unwrap(), 0, 0);
        screen.feed_at(0, b"\x1b[2;3r");
        screen.resize(TerminalSize::new(10, 4).unwrap());
        screen.feed_at(screen.offset(), b"\x1b[4;1Hx\x1b[44m\n");
        let view = screen.view(ScreenFormat::Cells, 0);
        assert_eq!(text(&view, 2), "x         ");
        assert!(blank_row(&view, 3, BLUE));
        screen.feed_at(screen.offset(), b"\x1b[2;3r\x1bc\x1b[4;1Hy\x1b[44m\n");
        let view = screen.view(ScreenFormat::Cells, 0);
        assert_eq!(text(&view, 2), "y         ");
        assert!(blank_row(&view, 3, BLUE));
    }
}
