//! What a fast-forward must know about the emulator that vt100 does not tell: whether the byte
//! parser inside it (vte's) is in its ground state, so that the next printable byte is drawn, and
//! whether the active screen scrolls as a whole, so that every row a flood pushes off the top goes
//! to the scrollback. Both follow from the output fed so far.
//!
//! This follows vte's state machine only as far as those two questions need: which state a byte
//! leads to, the CSI sequences that set a scroll region (`CSI t;b r`) or switch screens (`CSI ?
//! 47/1047/1049 h/l`), and `ESC c`. It draws nothing and interprets nothing else; where it cannot tell,
//! it says "unknown", and a fast-forward is then not tried. vte leaves its ground state only on
//! `ESC`, and `ESC` leads to its escape state from every state, so an unknown state ends at the
//! next `ESC`.

/// Where vte's parser is, as far as this module follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parse {
    Ground,
    /// In ground, inside a UTF-8 sequence that needs `needed` more continuation bytes.
    GroundUtf8 {
        needed: u8,
    },
    Escape,
    EscapeIntermediate,
    /// A `CSI` sequence: its final byte dispatches it.
    Csi(CsiStage),
    /// A malformed `CSI`: its final byte ends it without a dispatch.
    CsiIgnore,
    /// A DCS, before or in its data: it ends with `ST`, `CAN` or `SUB`.
    Dcs,
    /// An OSC string: it ends with `BEL`, `ST`, `CAN` or `SUB`.
    Osc,
    /// A SOS, PM or APC string: it ends with `ST`, `CAN` or `SUB`.
    IgnoredString,
    /// Something this module does not follow; it ends at the next `ESC`.
    Unknown,
}

/// Where in a CSI sequence vte is: what may come next depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CsiStage {
    Entry,
    Param,
    Intermediate,
}

/// vte keeps at most this many CSI parameters.
const MAX_PARAMS: usize = 32;

/// The CSI being read: its first intermediate (a private marker such as `?` counts) and its
/// parameters, each with whether it had sub-parameters.
#[derive(Debug, Default)]
struct CsiSequence {
    first_intermediate: Option<u8>,
    params: Vec<(u16, bool)>,
    param: u16,
    has_subparams: bool,
    /// Parameters and sub-parameters so far, as vte counts them against its limit.
    values: usize,
    too_many: bool,
}

impl CsiSequence {
    fn start(&mut self) {
        self.first_intermediate = None;
        self.params.clear();
        self.param = 0;
        self.has_subparams = false;
        self.values = 0;
        self.too_many = false;
    }

    fn collect(&mut self, byte: u8) {
        self.first_intermediate.get_or_insert(byte);
    }

    fn digit(&mut self, byte: u8) {
        self.param = self
            .param
            .saturating_mul(10)
            .saturating_add(u16::from(byte - b'0'));
    }

    fn next_param(&mut self) {
        self.values += 1;
        if self.values > MAX_PARAMS {
            self.too_many = true;
        } else {
            self.params.push((self.param, self.has_subparams));
        }
        self.param = 0;
        self.has_subparams = false;
    }

    /// A `:` sub-parameter: vt100 reads a parameter's first value, so the ones after it are not
    /// kept.
    fn subparam(&mut self) {
        self.has_subparams = true;
        self.values += 1;
        if self.values > MAX_PARAMS {
            self.too_many = true;
        }
    }
}

/// The parser's state and the scroll regions, after the output fed so far.
#[derive(Debug)]
pub(super) struct ParseState {
    parse: Parse,
    csi: CsiSequence,
    /// Bytes of the current sub-parameter are not part of the parameter's first value.
    in_subparam: bool,
    /// Whether the alternate screen is active.
    alternate: bool,
    /// Whether the normal (0) and alternate (1) screens may scroll less than the whole screen.
    partial_region: [bool; 2],
    /// Something was seen whose effect on the above is not followed exactly.
    lost_track: bool,
    rows: u16,
}

impl ParseState {
    /// The state of a fresh emulator `rows` tall.
    pub fn new(rows: u16) -> Self {
        Self {
            parse: Parse::Ground,
            csi: CsiSequence::default(),
            in_subparam: false,
            alternate: false,
            partial_region: [false; 2],
            lost_track: false,
            rows,
        }
    }

    /// A resize: vt100 resets both screens' scroll regions when the size changes.
    pub fn resized(&mut self, rows: u16) {
        self.rows = rows;
        self.partial_region = [false; 2];
    }

    /// Whether the next printable byte is drawn at the cursor and a line feed at the bottom of the
    /// active screen scrolls the whole screen, given that vt100 says `alternate` is active.
    pub fn plain_scrolling(&self, alternate: bool) -> bool {
        self.parse == Parse::Ground
            && !self.lost_track
            && self.alternate == alternate
            && !self.partial_region[usize::from(alternate)]
    }

    /// Whether vte is in its ground state, out of every sequence and string and not inside a
    /// UTF-8 character, after the output followed so far.
    pub fn in_ground(&self) -> bool {
        self.parse == Parse::Ground
    }

    /// Follows `data`, the next output the emulator was fed.
    pub fn advance(&mut self, data: &[u8]) {
        let mut i = 0;
        while i < data.len() {
            match self.parse {
                Parse::Ground => {
                    // Ground is left only by ESC; what matters before it is whether the text
                    // ends inside a UTF-8 sequence.
                    let text_end = memchr::memchr(0x1b, &data[i..]).map_or(data.len(), |at| i + at);
                    if text_end == data.len() {
                        self.parse = match unfinished_utf8(&data[i..]) {
                            Some(needed) => Parse::GroundUtf8 { needed },
                            None => Parse::Ground,
                        };
                        return;
                    }
                    self.enter_escape();
                    i = text_end + 1;
                }
                _ => {
                    self.step(data[i]);
                    i += 1;
                }
            }
        }
    }

    fn enter_escape(&mut self) {
        self.parse = Parse::Escape;
        self.csi.start();
        self.in_subparam = false;
    }

    /// One byte outside ground text, as vte's state machine takes it.
    fn step(&mut self, byte: u8) {
        // The transitions every state shares: CAN and SUB abort to ground, ESC starts over.
        match byte {
            0x18 | 0x1a if self.parse != Parse::Unknown => {
                self.parse = Parse::Ground;
                return;
            }
            0x1b => {
                if matches!(self.parse, Parse::GroundUtf8 { .. }) {
                    // vte prints a replacement for the cut sequence first; nothing this module
                    // follows changes, but keep to what is certain.
                    self.parse = Parse::Unknown;
                    return;
                }
                self.enter_escape();
                return;
            }
            _ => {}
        }
        self.parse = match self.parse {
            Parse::Ground => Parse::Ground,
            Parse::GroundUtf8 { needed } => {
                if byte & 0xc0 != 0x80 {
                    Parse::Unknown
                } else if needed > 1 {
                    Parse::GroundUtf8 { needed: needed - 1 }
                } else {
                    Parse::Ground
                }
            }
            Parse::Escape => match byte {
                0x20..=0x2f => Parse::EscapeIntermediate,
                b'P' => Parse::Dcs,
                b'X' | b'^' | b'_' => Parse::IgnoredString,
                b'[' => Parse::Csi(CsiStage::Entry),
                b']' => Parse::Osc,
                0x30..=0x7e => {
                    if byte == b'c' {
                        self.full_reset();
                    }
                    Parse::Ground
                }
                _ => Parse::Escape,
            },
            Parse::EscapeIntermediate => match byte {
                0x30..=0x7e => Parse::Ground,
                _ => Parse::EscapeIntermediate,
            },
            Parse::Csi(stage) => self.csi_byte(stage, byte),
            Parse::CsiIgnore => match byte {
                0x40..=0x7e => Parse::Ground,
                _ => Parse::CsiIgnore,
            },
            Parse::Dcs => {
                if byte == 0x9c {
                    // ST ends the data but not the header; the two are not told apart here.
                    Parse::Unknown
                } else {
                    Parse::Dcs
                }
            }
            Parse::Osc => match byte {
                0x07 => Parse::Ground,
                _ => Parse::Osc,
            },
            Parse::IgnoredString => Parse::IgnoredString,
            Parse::Unknown => Parse::Unknown,
        };
    }

    /// A byte of a CSI sequence, as vte's entry, parameter and intermediate states take it.
    fn csi_byte(&mut self, stage: CsiStage, byte: u8) -> Parse {
        match (stage, byte) {
            (CsiStage::Entry, 0x3c..=0x3f) => {
                // A private marker, collected as an intermediate.
                self.csi.collect(byte);
                Parse::Csi(CsiStage::Param)
            }
            (CsiStage::Entry | CsiStage::Param, 0x30..=0x39) => {
                if !self.in_subparam {
                    self.csi.digit(byte);
                }
                Parse::Csi(CsiStage::Param)
            }
            (CsiStage::Entry | CsiStage::Param, b':') => {
                self.csi.subparam();
                self.in_subparam = true;
                Parse::Csi(CsiStage::Param)
            }
            (CsiStage::Entry | CsiStage::Param, b';') => {
                self.csi.next_param();
                self.in_subparam = false;
                Parse::Csi(CsiStage::Param)
            }
            (CsiStage::Param, 0x3c..=0x3f) | (CsiStage::Intermediate, 0x30..=0x3f) => {
                Parse::CsiIgnore
            }
            (_, 0x20..=0x2f) => {
                self.csi.collect(byte);
                Parse::Csi(CsiStage::Intermediate)
            }
            (_, 0x40..=0x7e) => {
                self.csi.next_param();
                self.in_subparam = false;
                self.dispatch_csi(byte);
                Parse::Ground
            }
            // C0 controls are executed and the rest ignored, in the same state.
            _ => Parse::Csi(stage),
        }
    }

    fn dispatch_csi(&mut self, action: u8) {
        let csi = &self.csi;
        match (csi.first_intermediate, action) {
            (None, b'r') => {
                // vt100's DECSTBM: 0 or missing means the edge; a region that is not at least two
                // rows is the whole screen.
                let value = |index: usize| csi.params.get(index).map_or(0, |(value, _)| *value);
                let top = value(0).max(1) - 1;
                let bottom = if value(1) == 0 { self.rows } else { value(1) };
                let bottom = (bottom - 1).min(self.rows.saturating_sub(1));
                let partial = top < bottom && (top != 0 || bottom != self.rows.saturating_sub(1));
                self.partial_region[usize::from(self.alternate)] = partial;
            }
            (Some(b'?'), b'h' | b'l') => {
                if csi.too_many {
                    // vt100 sees only the first parameters; which ones is vte's business.
                    self.lost_track = true;
                    return;
                }
                let set = action == b'h';
                for (value, has_subparams) in &csi.params {
                    if *has_subparams {
                        continue;
                    }
                    match (value, set) {
                        // The screen makes every switch as xterm does (`sequences.rs`): a
                        // switch into the alternate screen from the normal one gives it the whole
                        // screen as its region; one while it is shown changes nothing.
                        (47 | 1047 | 1049, true) => {
                            if !self.alternate {
                                self.partial_region[1] = false;
                            }
                            self.alternate = true;
                        }
                        (47 | 1047 | 1049, false) => self.alternate = false,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }

    /// `ESC c`: vt100 makes a new screen.
    fn full_reset(&mut self) {
        self.alternate = false;
        self.partial_region = [false; 2];
        self.lost_track = false;
    }
}

/// How many continuation bytes the UTF-8 sequence at the end of `text` still needs, if it is cut
/// off there.
fn unfinished_utf8(text: &[u8]) -> Option<u8> {
    let tail = &text[text.len().saturating_sub(3)..];
    let (lead_at, lead) = tail
        .iter()
        .enumerate()
        .rev()
        .find(|(_, byte)| **byte & 0xc0 != 0x80)?;
    let length = match lead {
        0xc2..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf4 => 4,
        _ => return None,
    };
    let have = tail.len() - lead_at;
    (have < length).then(|| (length - have) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(rows: u16, output: &[u8]) -> ParseState {
        let mut state = ParseState::new(rows);
        state.advance(output);
        state
    }

    #[test]
    fn text_and_finished_sequences_leave_the_parser_in_ground() {
        for output in [
            &b"plain text\r\n"[..],
            b"\x1b[1;31mred\x1b[m",
            b"\x1b]2;a title\x07after",
            b"\x1b]2;a title\x1b\\after",
            b"\x1b7\x1b8",
            b"\x1b(B",
            b"\x1bP1$r\x1b\\",
            "caf\u{e9} \u{4e2d}".as_bytes(),
        ] {
            assert!(
                after(24, output).plain_scrolling(false),
                "{:?}",
                String::from_utf8_lossy(output)
            );
        }
    }

    #[test]
    fn a_cut_sequence_is_not_ground() {
        for output in [
            &b"\x1b"[..],
            b"\x1b[1;3",
            b"\x1b]2;title without an end",
            b"\x1bPdata",
            b"\x1b_apc",
            "\u{4e2d}".as_bytes().split_at(2).0,
        ] {
            assert!(
                !after(24, output).plain_scrolling(false),
                "{:?}",
                String::from_utf8_lossy(output)
            );
        }
    }

    #[test]
    fn a_sequence_cut_between_feeds_is_followed_across_them() {
        let mut state = ParseState::new(24);
        state.advance(b"\x1b[3");
        assert!(!state.plain_scrolling(false));
        state.advance(b"1m text");
        assert!(state.plain_scrolling(false));
        let wide = "\u{4e2d}".as_bytes();
        state.advance(&wide[..1]);
        assert!(!state.plain_scrolling(false));
        state.advance(&wide[1..]);
        assert!(state.plain_scrolling(false));
    }

    #[test]
    fn a_scroll_region_is_followed_per_screen() {
        let mut state = after(24, b"\x1b[2;20r");
        assert!(!state.plain_scrolling(false));
        state.advance(b"\x1b[r");
        assert!(state.plain_scrolling(false));
        state.advance(b"\x1b[1;24r");
        assert!(state.plain_scrolling(false), "1;24 is the whole screen");
        // A region on the alternate screen does not touch the normal one, and a switch into
        // the alternate screen ends it, by any of the three modes.
        for mode in ["47", "1047", "1049"] {
            let switch = |action: &str| format!("\x1b[?{mode}{action}");
            state.advance(format!("{}\x1b[5;10r", switch("h")).as_bytes());
            assert!(!state.plain_scrolling(true));
            state.advance(switch("l").as_bytes());
            assert!(state.plain_scrolling(false));
            state.advance(switch("h").as_bytes());
            assert!(state.plain_scrolling(true), "{mode}");
            state.advance(switch("l").as_bytes());
        }
        // A switch while the alternate screen is shown keeps its region.
        let mut state = after(24, b"\x1b[?1049h\x1b[3;9r\x1b[?1049h\x1b[?47h");
        assert!(!state.plain_scrolling(true));
        state.advance(b"\x1bc");
        assert!(state.plain_scrolling(false));
    }

    #[test]
    fn a_resize_ends_every_scroll_region() {
        let mut state = after(24, b"\x1b[2;20r\x1b[?47h\x1b[2;20r");
        state.resized(30);
        assert!(state.plain_scrolling(true));
    }

    #[test]
    fn disagreeing_with_vt100_on_the_screen_forbids_plain_scrolling() {
        assert!(!after(24, b"").plain_scrolling(true));
    }
}
