//! A session's screen: a terminal emulator fed the session's output in order, so the broker knows
//! what a terminal attached from the start would show as of any offset it has reached.
//!
//! The emulator is the `vt100` crate (ARCHITECTURE.md, "Screens", says why it and not `avt`).
//! Around it this module keeps what the crate does not: the window title and the last bell
//! (through its callbacks), the auto-wrap mode (`?7`, which it leaves to a callback), a compact
//! scrollback of formatted rows instead of the crate's own (a full-width row of cells per line
//! would cost 2.5 KiB per 80-column line), and a copy of the normal screen taken when a program
//! switches to the alternate one (the crate draws only the active screen). From those,
//! [`Screen::snapshot`] writes the bytes that reproduce the screen in a fresh terminal, and
//! [`Screen::view`] answers the screen API in text, ANSI or cells.
//!
//! Offsets: [`Screen::offset`] is how many output bytes were fed; the screen is the state after
//! them. Feeding is idempotent by offset ([`Screen::feed_at`]), so whoever catches the screen up
//! (the session's feeder, an attach, a screen read) can feed what it read from the ring without
//! knowing what the others fed.

mod background_erase;
mod fast_forward;
mod keys;
mod parse_state;
mod scrollback;
mod sequences;
mod view;

use std::num::NonZeroU16;
use std::time::SystemTime;

use bytes::Bytes;

pub use keys::{KEY_NAMES, UnknownKey, key_bytes};
pub use ptyhub_model::ScreenFormat;
pub use view::ScreenView;

use crate::activity::{Activity, ActivityParts, Mark, MarkAt, ScreenPoint};
use crate::domain::TerminalSize;
use background_erase::ScrollMargins;
use parse_state::ParseState;
use scrollback::Scrollback;

/// The longest window title kept; a longer one is cut on a character boundary.
pub const MAX_TITLE_CHARS: usize = 1024;

/// One session's terminal emulator and what this module keeps beside it.
pub struct Screen {
    state: State,
    /// Output bytes fed so far: the screen is the state after them.
    offset: u64,
    size: TerminalSize,
    scrollback_lines: usize,
    /// What the screen knows of the output it has not parsed yet.
    ahead: Ahead,
    /// What the terminal is doing, from the marks in the output fed (`activity/`).
    activity: Activity,
    /// Rows that scrolled off the top of the normal screen since the screen was made, for
    /// [`ScreenPoint`]s that stay put while the screen scrolls, sleeps and wakes.
    lines_scrolled: u64,
    /// Output bytes the emulator parsed since the screen was made; the rest of what it went
    /// past, fast-forwards skipped.
    bytes_parsed: u64,
}

/// What a screen knows of the output beyond its offset, so that looking costs a scan of new
/// bytes only.
#[derive(Debug, Default, Clone, Copy)]
struct Ahead {
    /// The output up to here is plain text (from the offset on).
    plain_to: u64,
    /// The output has a byte that is not plain text here: no fast-forward crosses it.
    not_plain_at: Option<u64>,
    /// A fast-forward found too little to skip when the output ended here.
    too_short_at: Option<u64>,
}

/// What [`Screen::look_ahead`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookAhead {
    /// It skipped this many bytes of a plain-text flood.
    Skipped(u64),
    /// The output ahead is plain text on a screen that scrolls plainly: parsing it may wait until
    /// there is enough to skip.
    Plain,
    /// The output ahead must be parsed.
    Parse,
}

/// A screen is awake (an emulator with its grid) or asleep: an idle session's screen is kept as
/// its own snapshot, compressed, which costs a fraction of the grid (an 80x24 grid alone is
/// 60 KiB), and wakes by drawing that snapshot on a fresh emulator when it is next needed.
enum State {
    Awake(Box<Emulator>),
    Asleep(Asleep),
}

/// The emulator and the copy of the normal screen it cannot draw itself.
struct Emulator {
    parser: vt100::Parser<Tracker>,
    /// The normal screen as drawn when the program last switched to the alternate one, while it
    /// is there (the program draws nothing on the normal screen meanwhile).
    normal_screen: Option<String>,
    /// The end of the output fed so far when it may be an unfinished sequence that the screen
    /// makes itself: held back from vt100 until the rest tells (see `sequences.rs`).
    held: Vec<u8>,
    /// What vt100's parser is in the middle of, for fast-forwards.
    parse: ParseState,
    /// The scroll margins vt100 keeps and does not tell, for the lines a scroll brings in.
    margins: ScrollMargins,
}

/// A sleeping screen: its snapshot, LZ4-compressed, and what the snapshot does not carry.
struct Asleep {
    compressed_snapshot: Box<[u8]>,
    last_bell_at: Option<SystemTime>,
    title: String,
    changed: bool,
}

impl std::fmt::Debug for Screen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Awake(_) => "awake".to_owned(),
            State::Asleep(asleep) => {
                format!("asleep in {} bytes", asleep.compressed_snapshot.len())
            }
        };
        f.debug_struct("Screen")
            .field("offset", &self.offset)
            .field("size", &self.size)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

/// What the emulator's callbacks collect.
#[derive(Debug)]
struct Tracker {
    title: String,
    last_bell_at: Option<SystemTime>,
    /// DECAWM, which vt100 does not keep itself.
    auto_wrap: bool,
    /// The screen's width, for the rows that leave it.
    cols: u16,
    /// Rows that scrolled off the top of the normal screen, oldest first.
    scrollback: Scrollback,
    /// Set when the title or the bell changed since [`Screen::take_changes`].
    changed: bool,
    /// Marks read since the screen last looked, each with the length of its sequence up to its
    /// terminator.
    marks: Vec<(Mark, usize)>,
    /// Rows of the normal screen that scrolled off since the screen last looked.
    scrolled: u64,
}

impl vt100::Callbacks for Tracker {
    fn audible_bell(&mut self, _: &mut vt100::Screen) {
        self.last_bell_at = Some(SystemTime::now());
        self.changed = true;
        self.marks.push((Mark::Bell, 0));
    }

    fn set_window_title(&mut self, _: &mut vt100::Screen, title: &[u8]) {
        self.set_title(title);
    }

    fn unhandled_osc(&mut self, _: &mut vt100::Screen, params: &[&[u8]]) {
        // vt100 splits an OSC at every `;`, so a title with a `;` in it arrives here in parts.
        if let [kind, parts @ ..] = params
            && (*kind == b"0" || *kind == b"2")
            && parts.len() > 1
        {
            self.set_title(&parts.join(&b';'));
        }
        if let Some(mark) = Mark::from_osc(params) {
            // `ESC ]`, the parameters and the `;`s between them.
            let length = 2 + params.iter().map(|param| param.len() + 1).sum::<usize>() - 1;
            self.marks.push((mark, length));
        }
    }

    fn unhandled_csi(
        &mut self,
        _: &mut vt100::Screen,
        i1: Option<u8>,
        _i2: Option<u8>,
        params: &[&[u16]],
        c: char,
    ) {
        if i1 == Some(b'?') && (c == 'h' || c == 'l') && params.contains(&&[7][..]) {
            self.auto_wrap = c == 'h';
        }
    }

    fn on_scroll(&mut self, row: vt100::capture::RowContents<'_>, alternate_screen: bool) {
        // Terminals keep no scrollback of the alternate screen.
        if !alternate_screen {
            self.scrollback.push(&row, self.cols);
            self.scrolled += 1;
        }
    }
}

impl Tracker {
    fn new(scrollback_lines: usize, cols: u16) -> Self {
        Self {
            title: String::new(),
            last_bell_at: None,
            auto_wrap: true,
            cols,
            scrollback: Scrollback::new(scrollback_lines),
            changed: false,
            marks: Vec::new(),
            scrolled: 0,
        }
    }

    fn set_title(&mut self, title: &[u8]) {
        let title: String = String::from_utf8_lossy(title)
            .chars()
            .filter(|c| !c.is_control())
            .take(MAX_TITLE_CHARS)
            .collect();
        if title != self.title {
            self.title = title;
            self.changed = true;
        }
    }
}

/// The title and bell as of some offset, for the session's record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScreenMarks {
    pub title: String,
    pub last_bell_at: Option<SystemTime>,
}

/// The modes a program can set that a snapshot carries, for comparing two screens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminalModes {
    pub application_cursor: bool,
    pub application_keypad: bool,
    pub bracketed_paste: bool,
    /// The mouse protocol mode and encoding, as vt100 names them.
    pub mouse_reporting: String,
    pub auto_wrap: bool,
    pub cursor_visible: bool,
    pub alternate_screen: bool,
}

/// A snapshot: bytes that reproduce the screen as of `offset` in a fresh terminal of `size`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub offset: u64,
    pub size: TerminalSize,
    pub data: Bytes,
}

impl Screen {
    /// A blank screen of `size` that keeps up to `scrollback_lines` rows of scrollback, at
    /// offset `offset` (a screen starts where the session's output is when it is made).
    pub fn new(size: TerminalSize, scrollback_lines: usize, offset: u64) -> Self {
        Self {
            state: State::Awake(Box::new(Emulator::new(size, scrollback_lines))),
            offset,
            size,
            scrollback_lines,
            ahead: Ahead::default(),
            activity: Activity::new(None, crate::activity::DEFAULT_COMMANDS_KEPT),
            lines_scrolled: 0,
            bytes_parsed: 0,
        }
    }

    /// A fresh screen that has drawn `snapshot` (as a client does that attached with one),
    /// at the snapshot's offset.
    pub fn from_snapshot(snapshot: &Snapshot, scrollback_lines: usize) -> Self {
        let mut emulator = Emulator::new(snapshot.size, scrollback_lines);
        emulator.draw(&snapshot.data);
        emulator.parser.callbacks_mut().changed = false;
        Self {
            state: State::Awake(Box::new(emulator)),
            offset: snapshot.offset,
            size: snapshot.size,
            scrollback_lines,
            ahead: Ahead::default(),
            activity: Activity::new(None, crate::activity::DEFAULT_COMMANDS_KEPT),
            lines_scrolled: 0,
            bytes_parsed: 0,
        }
    }

    /// The screen [`Screen::from_snapshot`] makes, asleep: it draws the snapshot only when it is
    /// first needed (output, a resize, a read of its cells), and answers snapshots meanwhile
    /// without drawing. Taking over a thousand idle sessions so parses none of them.
    /// `marks` are the session's title and bell, which the screen answers until it wakes.
    pub fn asleep_from_snapshot(
        snapshot: &Snapshot,
        scrollback_lines: usize,
        marks: ScreenMarks,
    ) -> Self {
        Self {
            state: State::Asleep(Asleep {
                compressed_snapshot: lz4_flex::compress_prepend_size(&snapshot.data)
                    .into_boxed_slice(),
                last_bell_at: marks.last_bell_at,
                title: marks.title,
                changed: false,
            }),
            offset: snapshot.offset,
            size: snapshot.size,
            scrollback_lines,
            ahead: Ahead::default(),
            activity: Activity::new(None, crate::activity::DEFAULT_COMMANDS_KEPT),
            lines_scrolled: 0,
            bytes_parsed: 0,
        }
    }

    /// Output bytes fed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    pub fn size(&self) -> TerminalSize {
        self.size
    }

    /// Output bytes parsed so far: [`Screen::offset`] less what fast-forwards skipped (and the
    /// offset the screen started at). A plain-text flood should cost the rows that stay, not the
    /// flood.
    pub fn bytes_parsed(&self) -> u64 {
        self.bytes_parsed
    }

    /// Whether the screen sleeps (see [`Screen::sleep`]).
    pub fn is_asleep(&self) -> bool {
        matches!(self.state, State::Asleep(_))
    }

    /// Puts the screen to sleep: it keeps only its snapshot, compressed, until it is next used.
    /// What a snapshot does not carry (see ARCHITECTURE.md, "Screens") is lost with the grid.
    /// Returns about how many bytes the grids and the scrollback it let go of took (0 when it
    /// already slept).
    pub fn sleep(&mut self) -> usize {
        let State::Awake(emulator) = &self.state else {
            return 0;
        };
        // vt100's cells are 32 bytes; the alternate grid exists once a program used it.
        let grid = usize::from(self.size.cols()) * usize::from(self.size.rows()) * 32;
        let grids =
            if emulator.normal_screen.is_some() || emulator.parser.screen().alternate_screen() {
                2 * grid
            } else {
                grid
            };
        let freed = grids + emulator.parser.callbacks().scrollback.heap_bytes();
        let snapshot = emulator.snapshot(self.size, SnapshotScope::Whole);
        let tracker = emulator.parser.callbacks();
        let asleep = Asleep {
            compressed_snapshot: lz4_flex::compress_prepend_size(snapshot.as_bytes())
                .into_boxed_slice(),
            last_bell_at: tracker.last_bell_at,
            title: tracker.title.clone(),
            changed: tracker.changed,
        };
        self.state = State::Asleep(asleep);
        freed
    }

    /// The emulator, woken first if the screen sleeps.
    fn emulator(&mut self) -> &mut Emulator {
        if let State::Asleep(asleep) = &self.state {
            let mut emulator = Emulator::new(self.size, self.scrollback_lines);
            match lz4_flex::decompress_size_prepended(&asleep.compressed_snapshot) {
                Ok(snapshot) => emulator.draw(&snapshot),
                // Our own compression of our own bytes: a failure is a bug, and a blank screen
                // is the least surprising way on.
                Err(error) => tracing::error!(%error, "a sleeping screen could not be woken"),
            }
            let tracker = emulator.parser.callbacks_mut();
            tracker.last_bell_at = asleep.last_bell_at;
            tracker.changed = asleep.changed;
            self.state = State::Awake(Box::new(emulator));
        }
        match &mut self.state {
            State::Awake(emulator) => emulator,
            State::Asleep(_) => unreachable!("woken above"),
        }
    }

    /// The modes the program set, as far as a snapshot carries them.
    pub fn modes(&mut self) -> TerminalModes {
        self.emulator().modes()
    }

    /// Feeds `data`, the output that starts at offset `at`, skipping what was fed already. Output
    /// that starts beyond the screen's offset would leave a hole and is refused (the caller reads
    /// the ring from [`Screen::offset`], so it never has such output).
    pub fn feed_at(&mut self, at: u64, data: &[u8]) {
        debug_assert!(
            at <= self.offset,
            "output at {at} leaves a hole after {}",
            self.offset
        );
        let end = at + data.len() as u64;
        if at > self.offset || end <= self.offset {
            return;
        }
        let fresh = &data[(self.offset - at) as usize..];
        self.feed_live(fresh);
        self.offset = end;
        self.bytes_parsed += fresh.len() as u64;
    }

    /// Feeds `data`, the output from [`Screen::offset`] on, to the emulator and the marks in it
    /// to the activity, each at its exact offset: the data goes in pieces that end just after
    /// each BEL or ST (where an OSC sequence, and so a mark, can end), and, while the activity
    /// waits for a command line to be entered, just after the next line feed.
    fn feed_live(&mut self, data: &[u8]) {
        let now = SystemTime::now();
        let base = self.offset;
        self.emulator();
        let State::Awake(emulator) = &mut self.state else {
            unreachable!("woken above")
        };
        let activity = &mut self.activity;
        let mut done = 0;
        while done < data.len() {
            let rest = &data[done..];
            let mut length = piece_length(rest);
            let awaits_line = activity.awaits_line();
            let mut line_entered = false;
            if awaits_line && let Some(newline) = memchr::memchr(b'\n', &rest[..length]) {
                length = newline + 1;
                line_entered = true;
            }
            let piece = &rest[..length];
            emulator.process(piece);
            let end = base + (done + length) as u64;
            let terminator = match piece {
                [.., 0x1b, b'\\'] => 2,
                [.., 0x07] => 1,
                _ => 0,
            };
            let tracker = emulator.parser.callbacks_mut();
            self.lines_scrolled += std::mem::take(&mut tracker.scrolled);
            let marks = std::mem::take(&mut tracker.marks);
            let screen = emulator.parser.screen();
            let (row, col) = screen.cursor_position();
            let cursor = ScreenPoint {
                line: self.lines_scrolled + u64::from(row),
                col,
            };
            for (mark, length) in marks {
                let start = end
                    .saturating_sub((length + terminator) as u64)
                    .max(base + done as u64);
                activity.apply(
                    mark,
                    MarkAt {
                        start,
                        end,
                        cursor,
                        now,
                    },
                );
            }
            if line_entered && let Some(input_at) = activity.input_at() {
                let line = line_since(screen, input_at, self.lines_scrolled);
                activity.line_entered(line, now, end);
            }
            done += length;
        }
        let full_screen = emulator.parser.screen().alternate_screen();
        activity.output(now, full_screen);
    }

    /// What the terminal is doing, as of [`Screen::offset`].
    pub fn activity(&self) -> &Activity {
        &self.activity
    }

    /// The activity taken apart for a hand-off (see [`Activity::to_parts`]).
    pub fn activity_parts(&self) -> ActivityParts {
        self.activity.to_parts(self.lines_scrolled)
    }

    /// Goes on with the activity a previous broker process took apart, on this screen drawn
    /// from its snapshot.
    pub fn resume_activity(&mut self, parts: ActivityParts, now: SystemTime) {
        self.activity = Activity::from_parts(parts, now, self.lines_scrolled);
    }

    pub fn activity_mut(&mut self) -> &mut Activity {
        &mut self.activity
    }

    /// Looks at `output`, the output after the screen's offset in order, and skips most of it
    /// when `try_skip` and it is a flood of plain text that scrolls every row it would draw out
    /// of the screen and the scrollback before it ends: the screen is then exactly as if it had
    /// parsed all of it (see `fast_forward.rs`), and parses only the text that stays. Looking
    /// again at the same output costs a scan of the bytes not seen before.
    pub fn look_ahead(&mut self, output: &[Bytes], try_skip: bool) -> LookAhead {
        let offset = self.offset;
        let end = offset + output.iter().map(|piece| piece.len() as u64).sum::<u64>();
        let ahead = &mut self.ahead;
        if ahead.not_plain_at.is_some_and(|at| at < offset) {
            ahead.not_plain_at = None;
        }
        ahead.plain_to = ahead.plain_to.max(offset);
        if ahead.not_plain_at.is_none() {
            // Find the first byte that is not plain among those not yet looked at.
            let mut piece_start = offset;
            for piece in output {
                let piece_end = piece_start + piece.len() as u64;
                if piece_end > ahead.plain_to {
                    let from = (ahead.plain_to - piece_start) as usize;
                    let not_plain = fast_forward::first_not_plain(&piece[from..]);
                    if let Some(at) = not_plain {
                        ahead.plain_to += at as u64;
                        ahead.not_plain_at = Some(ahead.plain_to);
                        break;
                    }
                    ahead.plain_to = piece_end;
                }
                piece_start = piece_end;
            }
        }
        let plain_end = ahead.not_plain_at.unwrap_or(end);
        let parse = if ahead.not_plain_at.is_some() {
            LookAhead::Parse
        } else {
            LookAhead::Plain
        };
        let retry = try_skip && ahead.too_short_at.is_none_or(|at| at < plain_end);
        let (rows, cols) = (self.size.rows(), self.size.cols());
        let scrollback_lines = self.scrollback_lines;
        let emulator = self.emulator();
        let screen = emulator.parser.screen();
        let alternate = screen.alternate_screen();
        // With a background colour set, the lines a flood scrolls in are filled with it
        // (`background_erase.rs`), which the plan does not follow.
        if !emulator.parse.plain_scrolling(alternate) || screen.bgcolor() != vt100::Color::Default {
            return LookAhead::Parse;
        }
        if !retry {
            return parse;
        }
        let (row, col) = screen.cursor_position();
        let start = fast_forward::Start {
            row,
            col,
            rows,
            cols,
            kept_above: if alternate { 0 } else { scrollback_lines },
        };
        // The plan follows the plain text alone, which the scan above found.
        let mut plain_left = (plain_end - offset) as usize;
        let plain = output.iter().map_while(|piece| {
            let take = piece.len().min(plain_left);
            plain_left -= take;
            (take > 0).then(|| &piece[..take])
        });
        match fast_forward::plan(start, plain) {
            Some(plan) => {
                emulator.process(&plan.replacement);
                self.offset += plan.skip as u64;
                self.ahead.too_short_at = None;
                LookAhead::Skipped(plan.skip as u64)
            }
            None => {
                self.ahead.too_short_at = Some(plain_end);
                parse
            }
        }
    }

    /// Goes on at `offset` without the output before it: only for output the ring no longer has,
    /// which flow control keeps from happening while the session lives.
    pub fn skip_to(&mut self, offset: u64) {
        self.offset = self.offset.max(offset);
    }

    /// Applies a resize at the current offset.
    pub fn resize(&mut self, size: TerminalSize) {
        if size == self.size {
            return;
        }
        let (rows, cols) = dimensions(size);
        let emulator = self.emulator();
        // Rows the smaller screen pushes off go to the scrollback at the old width.
        emulator.parser.set_size(rows, cols);
        emulator.parser.callbacks_mut().cols = size.cols();
        emulator.parse.resized(size.rows());
        emulator.margins = ScrollMargins::new(size.rows());
        self.size = size;
    }

    /// Clears everything, as `ESC c` does in a terminal: a reset starts its new process on a
    /// clean screen with no scrollback, modes or title.
    pub fn reset(&mut self) {
        let had_title = !self.marks().title.is_empty();
        let mut emulator = Emulator::new(self.size, self.scrollback_lines);
        // The record should lose the title too.
        emulator.parser.callbacks_mut().changed = had_title;
        self.state = State::Awake(Box::new(emulator));
    }

    /// The title and bell, and whether they changed since the last call.
    pub fn take_changes(&mut self) -> (ScreenMarks, bool) {
        let changed = match &mut self.state {
            State::Awake(emulator) => std::mem::take(&mut emulator.parser.callbacks_mut().changed),
            State::Asleep(asleep) => std::mem::take(&mut asleep.changed),
        };
        (self.marks(), changed)
    }

    pub fn marks(&self) -> ScreenMarks {
        match &self.state {
            State::Awake(emulator) => {
                let tracker = emulator.parser.callbacks();
                ScreenMarks {
                    title: tracker.title.clone(),
                    last_bell_at: tracker.last_bell_at,
                }
            }
            State::Asleep(asleep) => ScreenMarks {
                title: asleep.title.clone(),
                last_bell_at: asleep.last_bell_at,
            },
        }
    }

    /// Whether the program asked for application cursor keys (DECCKM): the input API sends
    /// arrows as `ESC O x` then.
    pub fn application_cursor(&mut self) -> bool {
        self.emulator().parser.screen().application_cursor()
    }

    /// Bytes that, written to a fresh terminal of this screen's size (or one reset with `ESC c`,
    /// which they start with), reproduce the screen as of [`Screen::offset`]. A sleeping screen
    /// answers with the snapshot it sleeps as, without waking.
    pub fn snapshot(&self) -> Snapshot {
        let data = match &self.state {
            State::Awake(emulator) => {
                Bytes::from(emulator.snapshot(self.size, SnapshotScope::Whole))
            }
            State::Asleep(asleep) => {
                match lz4_flex::decompress_size_prepended(&asleep.compressed_snapshot) {
                    Ok(data) => Bytes::from(data),
                    Err(error) => {
                        tracing::error!(%error, "a sleeping screen's snapshot could not be read");
                        Bytes::from_static(b"\x1bc")
                    }
                }
            }
        };
        Snapshot {
            offset: self.offset,
            size: self.size,
            data,
        }
    }

    /// [`Screen::snapshot`] without the scrollback: the present screen alone (with the normal
    /// screen under an alternate one, the title and the modes), for a client that may not see
    /// the session's past. A sleeping screen wakes: its snapshot holds the scrollback.
    pub fn present_snapshot(&mut self) -> Snapshot {
        let (offset, size) = (self.offset, self.size);
        let data = Bytes::from(self.emulator().snapshot(size, SnapshotScope::PresentOnly));
        Snapshot { offset, size, data }
    }

    /// The screen for the screen API: the visible rows and up to `scrollback` rows above them.
    pub fn view(&mut self, format: ScreenFormat, scrollback: usize) -> ScreenView {
        let (offset, size) = (self.offset, self.size);
        view::build(self.emulator(), offset, size, format, scrollback)
    }

    /// The screen's text as the wait API searches it: the scrollback rows asked for and the
    /// visible rows, trailing spaces trimmed (but the cursor's row keeps them up to the cursor),
    /// joined by `\n`.
    pub fn text(&mut self, scrollback: usize) -> String {
        let size = self.size;
        view::text(self.emulator(), size, scrollback)
    }
}

impl Emulator {
    fn new(size: TerminalSize, scrollback_lines: usize) -> Self {
        let (rows, cols) = dimensions(size);
        // vt100 keeps no scrollback of its own: rows that leave the screen go to `on_scroll`.
        let parser = vt100::Parser::new_with_callbacks(
            rows,
            cols,
            0,
            Tracker::new(scrollback_lines, size.cols()),
        );
        Self {
            parser,
            normal_screen: None,
            held: Vec::new(),
            parse: ParseState::new(size.rows()),
            margins: ScrollMargins::new(size.rows()),
        }
    }

    /// Draws a snapshot: what it does is no output of the session's, so its marks and scrolled
    /// rows are let go.
    fn draw(&mut self, snapshot: &[u8]) {
        self.process(snapshot);
        let tracker = self.parser.callbacks_mut();
        tracker.marks.clear();
        tracker.scrolled = 0;
    }

    /// Feeds `data` to the emulator. Switches of screens ([`Emulator::switch_screen`]), erases
    /// and scrolls (`background_erase.rs`) are made here, as xterm makes them; an unfinished one
    /// at the end, or the start of a UTF-8
    /// character, is held back until the rest arrives (the bytes held change nothing on the
    /// screen, as a sequence vt100 were in the middle of would not).
    fn process(&mut self, data: &[u8]) {
        let mut in_ground = self.parse.in_ground();
        self.parse.advance(data);
        let joined;
        let mut data = data;
        if !self.held.is_empty() {
            let mut held = std::mem::take(&mut self.held);
            held.extend_from_slice(data);
            joined = held;
            data = &joined;
        }
        loop {
            match sequences::next_sequence(data) {
                None => {
                    // vt100 draws a combining mark cut between two reads in a cell of its own:
                    // a character is fed whole.
                    let whole = data.len() - incomplete_utf8_tail(data);
                    self.feed_text(&data[..whole], in_ground);
                    self.held = data[whole..].to_vec();
                    break;
                }
                Some(sequences::Found::Unfinished(start)) => {
                    self.feed_text(&data[..start], in_ground);
                    self.held = data[start..].to_vec();
                    break;
                }
                Some(sequences::Found::Sequence(sequence)) => {
                    self.feed_text(&data[..sequence.start], in_ground);
                    self.make_as_xterm(&data[sequence.start..sequence.end], &sequence.action);
                    // A sequence ends in vte's ground state.
                    in_ground = true;
                    data = &data[sequence.end..];
                }
            }
        }
        // Back on the normal screen (also by `ESC c`), the copy of it is stale.
        if !self.parser.screen().alternate_screen() {
            self.normal_screen = None;
        }
    }

    /// One mode-setting sequence that switches screens, mode by mode in order: the switches
    /// here, the other modes by vt100.
    fn set_modes(&mut self, set: bool, modes: &[u16]) {
        // The sequence's ESC ends whatever vte was in the middle of (an OSC or DCS string, a
        // sequence cut short), as it would have had vt100 seen it; a string terminator (`ESC \`,
        // nothing of its own to vt100) does the same before the sequences that replace it.
        self.parser.process(b"\x1b\\");
        let action = if set { 'h' } else { 'l' };
        for &mode in modes {
            if sequences::SCREEN_MODES.contains(&mode) {
                self.switch_screen(mode, set);
            } else {
                self.parser
                    .process(format!("\x1b[?{mode}{action}").as_bytes());
            }
        }
    }

    /// A switch of screens as xterm.js makes it (its `activateAltBuffer` and
    /// `activateNormalBuffer`), made of sequences vt100 follows as xterm does:
    ///
    /// - Into the alternate screen (47, 1047, 1049; 1049 saves the cursor first, as `ESC 7`): the
    ///   alternate screen starts blank (in the current background alone), with the whole screen as its
    ///   scroll region and the cursor where it was on the normal screen. Already there, nothing
    ///   happens but 1049's save. vt100 would put the cursor at the top left, clear the screen
    ///   again on a second 1049, and leave 1047 alone.
    /// - Out of it: the normal screen gets the cursor where it was on the alternate one; 1049
    ///   then restores the saved cursor (`ESC 8`), also when already on the normal screen.
    ///
    /// The normal screen is copied before the switch, for snapshots (vt100 draws only the active
    /// screen).
    fn switch_screen(&mut self, mode: u16, set: bool) {
        let alternate = self.parser.screen().alternate_screen();
        let (row, col) = self.parser.screen().cursor_position();
        let move_cursor = format!("\x1b[{};{}H", row + 1, col + 1);
        match (set, alternate) {
            (true, false) => {
                if mode == 1049 {
                    self.parser.process(b"\x1b7");
                }
                self.normal_screen = Some(self.parser.screen().contents_formatted());
                // 47 switches without clearing in vt100; the region and the erase make the
                // alternate screen fresh.
                self.parser.process(b"\x1b[?47h\x1b[r");
                self.margins.alternate_scrolls_whole();
                self.with_background_only(b"\x1b[2J");
                self.parser.process(move_cursor.as_bytes());
            }
            (true, true) => {
                if mode == 1049 {
                    self.parser.process(b"\x1b7");
                }
            }
            (false, true) => {
                self.parser.process(b"\x1b[?47l");
                if mode == 1049 {
                    self.parser.process(b"\x1b8");
                } else {
                    self.parser.process(move_cursor.as_bytes());
                }
            }
            (false, false) => {
                if mode == 1049 {
                    self.parser.process(b"\x1b8");
                }
            }
        }
    }

    fn modes(&self) -> TerminalModes {
        let screen = self.parser.screen();
        TerminalModes {
            application_cursor: screen.application_cursor(),
            application_keypad: screen.application_keypad(),
            bracketed_paste: screen.bracketed_paste(),
            mouse_reporting: format!(
                "{:?}/{:?}",
                screen.mouse_protocol_mode(),
                screen.mouse_protocol_encoding()
            ),
            auto_wrap: self.parser.callbacks().auto_wrap,
            cursor_visible: !screen.hide_cursor(),
            alternate_screen: screen.alternate_screen(),
        }
    }

    /// The snapshot's bytes (see [`Screen::snapshot`]), with or without the scrollback rows.
    fn snapshot(&self, size: TerminalSize, scope: SnapshotScope) -> String {
        let screen = self.parser.screen();
        let tracker = self.parser.callbacks();
        let mut out = String::with_capacity(4096);
        out.push_str("\x1bc");
        if !tracker.title.is_empty() {
            out.push_str("\x1b]2;");
            out.push_str(&tracker.title);
            out.push('\x07');
        }
        if scope == SnapshotScope::Whole {
            tracker.scrollback.write_snapshot(&mut out, size.rows());
        }
        if screen.alternate_screen() {
            // vt100 draws only the active screen; the normal one under it is the copy taken when
            // the program switched (a fresh terminal's blank screen when the switch was split
            // across two reads and no copy could be taken).
            if let Some(normal_screen) = &self.normal_screen {
                out.push_str(normal_screen);
            }
            out.push_str("\x1b[?1049h");
        }
        out.push_str(&screen.contents_formatted());
        out.push_str(&screen.input_mode_formatted());
        if !tracker.auto_wrap {
            out.push_str("\x1b[?7l");
        }
        out
    }
}

/// What a snapshot draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SnapshotScope {
    /// The screen and the scrollback rows above it.
    Whole,
    /// The present screen alone, without scrollback.
    PresentOnly,
}

/// How much of `data` to feed before looking for marks: up to and including the first BEL or
/// the first ST (`ESC \\`), where an OSC sequence can end; all of it when it has neither.
fn piece_length(data: &[u8]) -> usize {
    let mut from = 0;
    while let Some(found) = memchr::memchr2(0x07, 0x1b, &data[from..]) {
        let at = from + found;
        match (data[at], data.get(at + 1)) {
            (0x07, _) => return at + 1,
            (0x1b, Some(b'\\')) => return at + 2,
            _ => from = at + 1,
        }
    }
    data.len()
}

/// The text from `input_at` to the cursor: the command line as entered, on a screen that has
/// scrolled `lines_scrolled` rows since it was made. Empty when the line left the screen.
fn line_since(screen: &vt100::Screen, input_at: ScreenPoint, lines_scrolled: u64) -> String {
    let Some(row) = input_at.line.checked_sub(lines_scrolled) else {
        return String::new();
    };
    let (cursor_row, cursor_col) = screen.cursor_position();
    let Ok(row) = u16::try_from(row) else {
        return String::new();
    };
    if row > cursor_row {
        return String::new();
    }
    screen.contents_between(row, input_at.col, cursor_row, cursor_col)
}

/// How many bytes at the end of `data` start a UTF-8 character that the next read finishes.
fn incomplete_utf8_tail(data: &[u8]) -> usize {
    for back in 1..=3.min(data.len()) {
        let byte = data[data.len() - back];
        let length = match byte {
            0x80..=0xbf => continue,
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            _ => return 0,
        };
        return if length > back { back } else { 0 };
    }
    0
}

fn dimensions(size: TerminalSize) -> (NonZeroU16, NonZeroU16) {
    // A TerminalSize is validated to be at least 1x1.
    let rows = NonZeroU16::new(size.rows()).unwrap_or(NonZeroU16::MIN);
    let cols = NonZeroU16::new(size.cols()).unwrap_or(NonZeroU16::MIN);
    (rows, cols)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(cols: u16, rows: u16) -> TerminalSize {
        TerminalSize::new(u32::from(cols), u32::from(rows)).unwrap()
    }

    fn fed(size: TerminalSize, scrollback: usize, output: &[u8]) -> Screen {
        let mut screen = Screen::new(size, scrollback, 0);
        screen.feed_at(0, output);
        screen
    }

    /// A fresh screen fed `screen`'s snapshot, at the snapshot's offset.
    fn restored(screen: &Screen) -> Screen {
        Screen::from_snapshot(&screen.snapshot(), screen.scrollback_lines)
    }

    fn emulator(screen: &mut Screen) -> &vt100::Parser<Tracker> {
        &screen.emulator().parser
    }

    /// Everything a snapshot promises, compared: every cell with its attributes (scrollback
    /// included), the cursor, the modes, the title.
    fn assert_same_screen(actual: &mut Screen, expected: &mut Screen) {
        let all = usize::MAX;
        let (a, e) = (
            actual.view(ScreenFormat::Cells, all),
            expected.view(ScreenFormat::Cells, all),
        );
        assert_eq!(a.scrollback_rows, e.scrollback_rows, "scrollback rows");
        for (index, (a_row, e_row)) in a.rows.iter().zip(&e.rows).enumerate() {
            assert_eq!(a_row.cells, e_row.cells, "row {index}");
        }
        assert_eq!(a.rows.len(), e.rows.len());
        assert_eq!(a.cursor, e.cursor, "cursor");
        assert_eq!(a.title, e.title, "title");
        assert_eq!(a.alternate_screen, e.alternate_screen, "alternate screen");
        assert_eq!(actual.modes(), expected.modes(), "modes");
        assert_eq!(actual.text(all), expected.text(all), "text");
    }

    /// The screen of a full-screen program: a header drawn once, a counter repainted in place.
    fn full_screen_program(frames: usize) -> Vec<u8> {
        let mut out = b"$ top-like\r\n\x1b[?1049h\x1b[?1h\x1b=\x1b[?25l\x1b[H\x1b[2J".to_vec();
        out.extend_from_slice(b"\x1b[1;44;97m HEADER drawn once \x1b[m");
        for frame in 0..frames {
            out.extend_from_slice(format!("\x1b[5;3H\x1b[32mcount {frame:>8}\x1b[m").as_bytes());
        }
        out
    }

    #[test]
    fn a_snapshot_reproduces_the_alternate_screen_over_the_normal_one() {
        let mut output = b"line one\r\n\x1b[31mred\x1b[m line two\r\n".to_vec();
        output.extend(full_screen_program(1000));
        let mut screen = fed(size(80, 24), 1000, &output);
        assert!(emulator(&mut screen).screen().alternate_screen());
        let mut copy = restored(&screen);
        assert_same_screen(&mut copy, &mut screen);

        // The program ends: both go back to the same normal screen, where the cursor was.
        let mut original = screen;
        let exit = b"\x1b[?1049l\x1b[?1l\x1b>\x1b[?25h$ ";
        original.feed_at(original.offset, exit);
        copy.feed_at(copy.offset, exit);
        assert_same_screen(&mut copy, &mut original);
        let lines: Vec<String> = original.text(0).lines().map(str::to_owned).collect();
        assert_eq!(lines[..4], ["line one", "red line two", "$ top-like", "$ "]);
    }

    #[test]
    fn a_snapshot_keeps_the_scrollback_and_its_colours() {
        let mut output = Vec::new();
        for line in 0..200 {
            output
                .extend_from_slice(format!("\x1b[3{}mline {line}\x1b[m\r\n", line % 8).as_bytes());
        }
        // A line longer than the screen wraps.
        output.extend_from_slice(&[b'x'; 130]);
        output.extend_from_slice(b"\r\nend");
        let mut screen = fed(size(80, 24), 100, &output);
        assert_eq!(emulator(&mut screen).callbacks().scrollback.len(), 100);
        assert_same_screen(&mut restored(&screen), &mut screen);
    }

    #[test]
    fn every_mode_a_program_sets_survives_a_snapshot() {
        let modes: [(&str, &[u8]); 9] = [
            ("application cursor keys", b"\x1b[?1h"),
            ("application keypad", b"\x1b="),
            ("bracketed paste", b"\x1b[?2004h"),
            ("mouse press/release", b"\x1b[?1000h"),
            ("mouse button motion, SGR", b"\x1b[?1002h\x1b[?1006h"),
            ("mouse any motion, UTF-8", b"\x1b[?1003h\x1b[?1005h"),
            ("auto-wrap off", b"\x1b[?7l"),
            ("cursor hidden", b"\x1b[?25l"),
            ("title", b"\x1b]2;build: running\x07"),
        ];
        for (name, sequence) in modes {
            let mut output = b"some text\r\n".to_vec();
            output.extend_from_slice(sequence);
            let mut screen = fed(size(80, 24), 100, &output);
            let mut copy = restored(&screen);
            assert_same_screen(&mut copy, &mut screen);
            // And the mode is really on, not merely equal to a default.
            assert_ne!(
                screen.snapshot().data,
                fed(size(80, 24), 100, b"some text\r\n").snapshot().data,
                "{name} is not in the snapshot"
            );
        }
    }

    #[test]
    fn wide_characters_and_combining_marks_keep_their_columns() {
        let output = "漢字 and 😀 e\u{301}x\r\nかな|".as_bytes();
        let mut screen = fed(size(20, 5), 10, output);
        let view = screen.view(ScreenFormat::Cells, 0);
        let first = &view.rows[0].cells;
        assert_eq!(first[0].text, "漢");
        assert!(first[0].wide);
        assert_eq!(first[1].text, "");
        assert_eq!(first[2].text, "字");
        assert_eq!(first[9].text, "😀");
        assert_eq!(first[12].text, "e\u{301}");
        assert_eq!(first[13].text, "x");
        assert_eq!(screen.view(ScreenFormat::Text, 0).lines[1], "かな|");
        assert_same_screen(&mut restored(&screen), &mut screen);
    }

    #[test]
    fn output_cut_anywhere_between_reads_draws_what_it_draws_whole() {
        let output = "$ \u{6f22}\u{5b57} \u{1f600} e\u{301} \u{1f44d}\u{1f3fd} done\r\n".as_bytes();
        let mut whole = fed(size(20, 4), 10, output);
        for cut in 1..output.len() {
            let mut split = Screen::new(size(20, 4), 10, 0);
            split.feed_at(0, &output[..cut]);
            split.feed_at(cut as u64, &output[cut..]);
            let (a, e) = (
                split.view(ScreenFormat::Cells, 0),
                whole.view(ScreenFormat::Cells, 0),
            );
            assert_eq!(a.rows, e.rows, "cut at {cut}");
        }
    }

    #[test]
    fn titles_and_bells_are_kept_and_reported_once() {
        let mut screen = fed(size(80, 24), 10, b"\x1b]0;first\x07\x07");
        let (marks, changed) = screen.take_changes();
        assert!(changed);
        assert_eq!(marks.title, "first");
        assert!(marks.last_bell_at.is_some());
        assert!(!screen.take_changes().1, "reported once");
        // A title with a `;` in it, and one with control characters.
        screen.feed_at(screen.offset(), b"\x1b]2;a;b\x1b\\");
        assert_eq!(screen.marks().title, "a;b");
        screen.feed_at(screen.offset(), b"\x1b]2;x\x7fy\x07");
        assert_eq!(screen.marks().title, "xy");
    }

    #[test]
    fn feeding_is_idempotent_by_offset() {
        let mut screen = Screen::new(size(80, 24), 10, 0);
        screen.feed_at(0, b"hello ");
        screen.feed_at(0, b"hello world");
        screen.feed_at(3, b"lo world");
        assert_eq!(screen.offset(), 11);
        assert_eq!(screen.text(0).lines().next(), Some("hello world"));
    }

    #[test]
    fn a_reset_clears_screen_scrollback_modes_and_title() {
        let mut screen = fed(
            size(80, 24),
            10,
            b"\x1b]2;t\x07\x1b[?2004hx\r\n".repeat(30).as_slice(),
        );
        screen.take_changes();
        screen.reset();
        assert_eq!(screen.offset(), 30 * 17);
        assert_eq!(screen.text(usize::MAX).trim(), "");
        assert!(!emulator(&mut screen).screen().bracketed_paste());
        let (marks, changed) = screen.take_changes();
        assert!(changed, "the record hears the title went");
        assert_eq!(marks.title, "");
    }

    #[test]
    fn a_resize_keeps_rows_that_no_longer_fit_in_the_scrollback() {
        let mut screen = Screen::new(size(40, 10), 100, 0);
        for line in 0..10 {
            screen.feed_at(screen.offset(), format!("row {line}\r\n").as_bytes());
        }
        screen.resize(size(40, 5));
        let text = screen.text(usize::MAX);
        assert!(text.starts_with("row 0\nrow 1"), "{text}");
        assert_same_screen(&mut restored(&screen), &mut screen);
    }

    #[test]
    fn the_text_a_wait_searches_keeps_a_prompt_s_space_before_the_cursor() {
        let mut screen = fed(size(20, 3), 0, b"done   \r\n$ ");
        assert_eq!(screen.text(0), "done\n$ \n");
        assert_eq!(screen.view(ScreenFormat::Text, 0).lines, ["done", "$", ""]);
    }

    #[test]
    fn a_sleeping_screen_answers_the_same_and_wakes_to_go_on() {
        let mut output = Vec::new();
        for line in 0..300 {
            output.extend_from_slice(
                format!("\x1b[1;3{}mline {line}\x1b[m\r\n", line % 8).as_bytes(),
            );
        }
        output.extend(full_screen_program(50));
        output.extend_from_slice(b"\x1b]2;sleepy\x07\x07");
        let mut awake = fed(size(80, 24), 1000, &output);
        let mut sleepy = Screen::from_snapshot(&awake.snapshot(), 1000);
        awake.take_changes();
        let before = sleepy.snapshot();
        sleepy.sleep();
        assert!(sleepy.is_asleep());
        // Asleep, it answers its snapshot and marks without waking.
        assert_eq!(sleepy.snapshot(), before);
        assert_eq!(sleepy.marks().title, "sleepy");
        assert!(sleepy.is_asleep());
        // Fed again, it wakes and goes on as if it never slept.
        let more = b"\x1b[7;1Hmore\x1b[?1049l after";
        for screen in [&mut awake, &mut sleepy] {
            screen.feed_at(screen.offset(), more);
        }
        assert!(!sleepy.is_asleep());
        assert_same_screen(&mut sleepy, &mut awake);
    }

    #[test]
    fn a_screen_made_asleep_from_a_snapshot_is_the_screen_drawn_from_it() {
        let mut output = Vec::new();
        for line in 0..200 {
            output.extend_from_slice(
                format!("\x1b[1;3{}mline {line}\x1b[m\r\n", line % 8).as_bytes(),
            );
        }
        output.extend_from_slice(b"\x1b]2;taken over\x07$ ");
        let snapshot = fed(size(80, 24), 1000, &output).snapshot();
        let mut drawn = Screen::from_snapshot(&snapshot, 1000);
        let marks = ScreenMarks {
            title: "taken over".to_owned(),
            last_bell_at: None,
        };
        let mut asleep = Screen::asleep_from_snapshot(&snapshot, 1000, marks.clone());
        assert!(asleep.is_asleep());
        assert_eq!(asleep.offset(), snapshot.offset);
        assert_eq!(asleep.snapshot(), drawn.snapshot());
        assert_eq!(asleep.marks(), marks);
        assert!(asleep.is_asleep(), "answering a snapshot does not wake it");
        for screen in [&mut drawn, &mut asleep] {
            screen.feed_at(screen.offset(), b"echo more\r\nmore\r\n$ ");
        }
        assert!(!asleep.is_asleep());
        assert_same_screen(&mut asleep, &mut drawn);
    }

    /// `prefix`, then `flood` and `suffix` with a fast-forward tried first, against the same
    /// output parsed whole; how many bytes the fast-forward skipped.
    fn assert_fast_forward_is_exact(
        size: TerminalSize,
        scrollback: usize,
        prefix: &[u8],
        flood: &[u8],
        suffix: &[u8],
    ) -> u64 {
        let mut whole = fed(size, scrollback, prefix);
        let mut skipping = fed(size, scrollback, prefix);
        let rest = [
            Bytes::copy_from_slice(flood),
            Bytes::copy_from_slice(suffix),
        ];
        let at = prefix.len() as u64;
        let skipped = match skipping.look_ahead(&rest, true) {
            LookAhead::Skipped(skipped) => skipped,
            LookAhead::Plain | LookAhead::Parse => 0,
        };
        for (start, piece) in [(at, flood), (at + flood.len() as u64, suffix)] {
            whole.feed_at(start, piece);
            skipping.feed_at(start, piece);
        }
        assert_eq!(skipping.offset(), whole.offset());
        assert_same_screen(&mut skipping, &mut whole);
        // What comes after must find the same cursor, pending wrap and last character.
        let after = b"X\x1b[4bY\r\n\x1b[7mZ";
        whole.feed_at(whole.offset(), after);
        skipping.feed_at(skipping.offset(), after);
        assert_same_screen(&mut skipping, &mut whole);
        skipped
    }

    /// The throughput bench's flood: lines of 63 characters and a line feed, no return.
    fn raw_yes(bytes: usize) -> Vec<u8> {
        let line = b"y123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-\n";
        line.iter().copied().cycle().take(bytes).collect()
    }

    #[test]
    fn a_flood_of_plain_text_is_skipped_to_the_rows_that_stay() {
        let flood = raw_yes(512 << 10);
        let prefix = b"\x1b[1;32m$ \x1b[m\x1b[33myes\r\n";
        let skipped = assert_fast_forward_is_exact(size(80, 24), 1000, prefix, &flood, b"$ ");
        // Every scrolled row and every one on the screen is written again within the last
        // (24 + 1000) scrolls, about 33 KiB of this flood: the rest was skipped.
        assert!(skipped > 400 << 10, "skipped {skipped}");
    }

    #[test]
    fn looking_again_sees_what_arrived_since() {
        let size = size(80, 24);
        let prefix = b"$ yes\r\n";
        let flood = raw_yes(256 << 10);
        let mut screen = fed(size, 1000, prefix);
        let (first, second) = flood.split_at(100 << 10);
        let first = Bytes::copy_from_slice(first);
        // Not asked to skip: plain text ahead, parsing may wait.
        assert_eq!(
            screen.look_ahead(std::slice::from_ref(&first), false),
            LookAhead::Plain
        );
        // Asked again with a little more, it skips (only the ten new bytes are scanned for plain
        // text; the plan reads them all).
        let mut pieces = vec![first, Bytes::copy_from_slice(&second[..10])];
        assert!(matches!(
            screen.look_ahead(&pieces, true),
            LookAhead::Skipped(_)
        ));
        // The rest, and a byte that is not plain: it skips up to the rows that stay, or parses.
        pieces.push(Bytes::copy_from_slice(&second[10..]));
        pieces.push(Bytes::from_static(b"\x1b[m"));
        let skipped = screen.offset() - prefix.len() as u64;
        let rest: Vec<Bytes> = pieces
            .iter()
            .flat_map(|piece| piece.iter().copied())
            .skip(skipped as usize)
            .collect::<Vec<u8>>()
            .chunks(4096)
            .map(Bytes::copy_from_slice)
            .collect();
        assert!(matches!(
            screen.look_ahead(&rest, true),
            LookAhead::Skipped(_) | LookAhead::Parse
        ));
        let mut whole = fed(size, 1000, prefix);
        whole.feed_at(prefix.len() as u64, &flood);
        whole.feed_at(whole.offset(), b"\x1b[m");
        let at = screen.offset();
        let remaining: Vec<u8> = pieces
            .iter()
            .flat_map(|piece| piece.iter().copied())
            .skip((at - prefix.len() as u64) as usize)
            .collect();
        screen.feed_at(at, &remaining);
        assert_same_screen(&mut screen, &mut whole);
    }

    #[test]
    fn a_flood_on_the_alternate_screen_keeps_the_normal_one() {
        let prefix = b"before\r\n\x1b[?1049h\x1b[H\x1b[2J";
        let flood = raw_yes(64 << 10);
        let skipped =
            assert_fast_forward_is_exact(size(40, 10), 100, prefix, &flood, b"\x1b[?1049l");
        assert!(skipped > 0);
    }

    #[test]
    fn no_fast_forward_where_the_parser_or_the_screen_would_not_scroll_plainly() {
        let flood = raw_yes(64 << 10);
        for prefix in [
            // Inside an OSC title, the flood is the title.
            &b"\x1b]2;title"[..],
            // Inside a CSI sequence, the next byte finishes it.
            b"\x1b[1;3",
            // A scroll region keeps the rows above it.
            b"\x1b[1;1H top\x1b[3;10r\x1b[10;1H",
            // Half a wide character.
            "\u{4e2d}".as_bytes().split_at(1).0,
        ] {
            let skipped = assert_fast_forward_is_exact(size(20, 12), 30, prefix, &flood, b"");
            assert_eq!(skipped, 0, "{:?}", String::from_utf8_lossy(prefix));
        }
    }

    mod fast_forward_matches_parsing {
        use proptest::prelude::*;

        use super::*;

        /// Output that leaves the emulator in some state: colours, cursor moves, regions,
        /// screens, unfinished sequences, wide characters.
        fn prefix() -> impl Strategy<Value = Vec<u8>> {
            let piece = prop::sample::select(vec![
                &b"text "[..],
                b"\r\n",
                b"\n",
                b"\x1b[31;1m",
                b"\x1b[m",
                b"\x1b[2;3r",
                b"\x1b[r",
                b"\x1b[?1049h",
                b"\x1b[?1049l",
                b"\x1b[?47h",
                b"\x1b[?47l",
                b"\x1b[3;5H",
                b"\x1b[99C",
                b"\x1b]2;t\x07",
                b"\x1b]2;open",
                b"\x1b[4",
                b"\x1bc",
                "\u{4e2d}\u{1f600}e\u{301}".as_bytes(),
                b"\xe4",
                b"\t",
                b"\x1b[2J",
                b"\x1b7",
                b"\x1b8",
            ]);
            prop::collection::vec(piece, 0..12).prop_map(|pieces| pieces.concat())
        }

        /// Plain text with lines of any length, with and without returns.
        fn flood() -> impl Strategy<Value = Vec<u8>> {
            let byte = prop_oneof![
                8 => 0x20u8..0x7f,
                2 => Just(b'\n'),
                1 => Just(b'\r'),
            ];
            prop::collection::vec(byte, 0..3000)
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]
            #[test]
            fn cell_for_cell(
                cols in 1u16..14,
                rows in 1u16..7,
                scrollback in 0usize..10,
                prefix in prefix(),
                flood in flood(),
                suffix in prefix(),
            ) {
                assert_fast_forward_is_exact(size(cols, rows), scrollback, &prefix, &flood, &suffix);
            }
        }
    }

    #[test]
    fn text_is_trimmed_like_capture_pane() {
        let mut screen = fed(size(20, 3), 0, b"a   \x1b[41m  \x1b[m  \r\nb");
        let view = screen.view(ScreenFormat::Text, 0);
        assert_eq!(view.lines, ["a", "b", ""]);
    }
}
