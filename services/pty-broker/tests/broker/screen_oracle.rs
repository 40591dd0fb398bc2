//! The broker's screen held to xterm's: the byte streams of real programs recorded in
//! `tests/fixtures/screens/` (by `cargo xtask screen-fixtures`) are fed to a [`Screen`] and to
//! xterm.js (`web/test/screen-oracle.mjs`, xterm as the page sets it up), and at every checkpoint
//! of a fixture the two must show the same cells, cursor, title and modes. Then the broker's
//! snapshot at that checkpoint, drawn by a fresh xterm, must show what the first xterm showed:
//! what a page that attaches with `snapshot=1` draws is what one attached from the start shows.
//!
//! Users see xterm.js, so where the two disagree the broker is wrong. One thing is not compared:
//! which rows continue the row above (xterm's `isWrapped`, vt100's `row_wrapped`), which draws
//! nothing; it only lets xterm rejoin a line when it reflows or copies. vt100 does not mark a
//! row that a wide character wrapped onto early (as tmux does not) and unmarks a row whose end
//! is erased, so the broker's screen and its snapshots lose the mark where xterm keeps it
//! (ARCHITECTURE.md, "Screens").

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail, ensure};
use pty_broker::domain::TerminalSize;
use pty_broker::screen::{Screen, ScreenFormat, ScreenView, TerminalModes};
use ptyhub_model::{Cell, Color};
use ptyhub_test_support::{Requirement, require};
use serde::Deserialize;

/// The scrollback a broker keeps by default; the fixtures compare the visible rows.
const SCROLLBACK: usize = 1000;

/// Feeding in pieces this small cuts escape sequences and UTF-8 characters at every place a
/// read from the PTY could.
const SMALL_PIECE: usize = 5;

/// Every fixture the tests below compare; a fixture in the directory and not here fails
/// [`every_fixture_is_compared`].
const FIXTURES: &[&str] = &[
    "agent-ui",
    "alternate-screens",
    "erase-attributes",
    "less",
    "shell",
    "tmux",
    "top",
    "vim",
];

macro_rules! oracle_tests {
    ($($test:ident => $fixture:literal,)*) => {
        $(
            #[test]
            fn $test() {
                if !require(Requirement::XtermOracle) {
                    return;
                }
                let fixture = Fixture::load($fixture).unwrap();
                fixture.assert_screens_match_xterm().unwrap();
            }
        )*
    };
}

oracle_tests! {
    vim_shows_what_xterm_shows => "vim",
    less_shows_what_xterm_shows => "less",
    top_shows_what_xterm_shows => "top",
    a_shell_with_colours_and_wide_characters_shows_what_xterm_shows => "shell",
    tmux_shows_what_xterm_shows => "tmux",
    a_coding_agent_s_full_screen_ui_shows_what_xterm_shows => "agent-ui",
    every_way_in_and_out_of_the_alternate_screen_shows_what_xterm_shows => "alternate-screens",
    erasing_with_attributes_set_shows_what_xterm_shows => "erase-attributes",
}

#[test]
fn every_fixture_is_compared() {
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir(fixtures_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path
            .extension()
            .is_some_and(|extension| extension == "bytes")
        {
            found.insert(path.file_stem().unwrap().to_string_lossy().into_owned());
        }
    }
    let listed: BTreeSet<String> = FIXTURES.iter().map(|name| (*name).to_owned()).collect();
    assert_eq!(found, listed, "fixtures on disk and fixtures compared");
}

#[test]
fn the_oracle_refuses_bad_arguments_with_a_message() {
    if !require(Requirement::XtermOracle) {
        return;
    }
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), b"hello").unwrap();
    let path = file.path().to_str().unwrap();
    for (args, message) in [
        (vec!["--cols", "0", "--rows", "24", path], "--cols must be"),
        (vec!["--cols", "80", "--rows", "x", path], "--rows must be"),
        (vec!["--cols", "80", path], "--rows is required"),
        (
            vec!["--cols", "80", "--rows", "24"],
            "expected one fixture file",
        ),
        (
            vec!["--cols", "80", "--rows", "24", "--at", "6", path],
            "beyond the file's 5 bytes",
        ),
        (
            vec!["--cols", "80", "--rows", "24", "/nonexistent/fixture.bytes"],
            "cannot read /nonexistent/fixture.bytes",
        ),
    ] {
        let output = oracle_command().args(&args).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

/// A recorded program: its output and the size and checkpoints it was recorded with.
struct Fixture {
    name: &'static str,
    output: Vec<u8>,
    meta: FixtureMeta,
}

#[derive(Debug, Deserialize)]
struct FixtureMeta {
    cols: u16,
    rows: u16,
    /// Offsets where the program waited for a key: screens a person looked at.
    checkpoints: Vec<usize>,
}

impl Fixture {
    fn load(name: &'static str) -> anyhow::Result<Self> {
        let dir = fixtures_dir();
        let output = std::fs::read(dir.join(format!("{name}.bytes")))
            .with_context(|| format!("cannot read fixture {name}"))?;
        let meta_path = dir.join(format!("{name}.json"));
        let meta: FixtureMeta = serde_json::from_slice(
            &std::fs::read(&meta_path)
                .with_context(|| format!("cannot read {}", meta_path.display()))?,
        )
        .with_context(|| format!("{} is not a fixture's description", meta_path.display()))?;
        ensure!(
            meta.checkpoints.iter().all(|at| *at <= output.len()),
            "{name}: a checkpoint lies beyond the output"
        );
        Ok(Self { name, output, meta })
    }

    fn size(&self) -> TerminalSize {
        TerminalSize::new(u32::from(self.meta.cols), u32::from(self.meta.rows))
            .expect("a fixture's size is a terminal size")
    }

    /// The offsets compared: every checkpoint and the end.
    fn offsets(&self) -> Vec<usize> {
        let mut offsets: BTreeSet<usize> = self.meta.checkpoints.iter().copied().collect();
        offsets.insert(self.output.len());
        offsets.into_iter().collect()
    }

    /// At every offset: the broker's screen (fed the output whole between offsets, and again in
    /// small pieces) against xterm, and xterm drawing the broker's snapshot against xterm fed
    /// the output.
    fn assert_screens_match_xterm(&self) -> anyhow::Result<()> {
        let offsets = self.offsets();
        let expected = run_oracle(&self.output, self.meta.cols, self.meta.rows, &offsets)?;
        ensure!(
            expected.len() == offsets.len(),
            "the oracle answered another number of states"
        );
        let mut failures = Vec::new();
        for piece in [usize::MAX, SMALL_PIECE] {
            let mut screen = Screen::new(self.size(), SCROLLBACK, 0);
            for (offset, xterm) in offsets.iter().zip(&expected) {
                let from = screen.offset() as usize;
                for chunk in self.output[from..*offset].chunks(piece.min(*offset - from).max(1)) {
                    screen.feed_at(screen.offset(), chunk);
                }
                let how = if piece == usize::MAX {
                    "fed whole"
                } else {
                    "fed in small pieces"
                };
                let differences = compare_broker(&mut screen, xterm);
                if !differences.is_empty() {
                    failures.push(format!(
                        "{} at offset {offset} ({how}), broker against xterm:\n  {}",
                        self.name,
                        differences.join("\n  ")
                    ));
                }
                if piece == usize::MAX {
                    let snapshot = screen.snapshot();
                    let restored = run_oracle(&snapshot.data, self.meta.cols, self.meta.rows, &[])?;
                    let restored = restored.last().context("the oracle answered no state")?;
                    let differences = compare_xterm(restored, xterm);
                    if !differences.is_empty() {
                        failures.push(format!(
                            "{} at offset {offset}, xterm drawing the broker's snapshot against xterm fed the output:\n  {}",
                            self.name,
                            differences.join("\n  ")
                        ));
                    }
                }
            }
        }
        if !failures.is_empty() {
            bail!("{}", failures.join("\n"));
        }
        Ok(())
    }
}

/// What xterm showed at one offset, as the oracle prints it.
#[derive(Debug, Deserialize, PartialEq)]
struct XtermState {
    offset: usize,
    rows: Vec<XtermRow>,
    cursor: XtermCursor,
    title: String,
    modes: XtermModes,
}

#[derive(Debug, Deserialize, PartialEq)]
struct XtermRow {
    /// The oracle's `wrapped` is left unread (see the module's docs).
    cells: Vec<XtermCell>,
}

#[derive(Debug, Deserialize, PartialEq)]
struct XtermCell {
    text: String,
    /// 2 for a wide character, 0 for the column after it.
    width: u8,
    fg: Option<XtermColour>,
    bg: Option<XtermColour>,
    bold: bool,
    dim: bool,
    italic: bool,
    underline: bool,
    inverse: bool,
    blink: bool,
    invisible: bool,
    strikethrough: bool,
}

#[derive(Debug, Deserialize, PartialEq, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum XtermColour {
    Indexed(u8),
    Rgb([u8; 3]),
}

#[derive(Debug, Deserialize, PartialEq)]
struct XtermCursor {
    row: u32,
    col: u32,
    visible: bool,
}

#[derive(Debug, Deserialize, PartialEq)]
struct XtermModes {
    alternate_screen: bool,
    application_cursor: bool,
    application_keypad: bool,
    bracketed_paste: bool,
    mouse_tracking: String,
    mouse_encoding: String,
    auto_wrap: bool,
    origin: bool,
    insert: bool,
}

#[derive(Debug, Deserialize)]
struct OracleAnswer {
    states: Vec<XtermState>,
}

/// How many differences of one screen a failure lists.
const MAX_LISTED: usize = 12;

/// The differences between the broker's screen and xterm's, in words.
fn compare_broker(screen: &mut Screen, xterm: &XtermState) -> Vec<String> {
    let view = screen.view(ScreenFormat::Cells, 0);
    let mut differences = Vec::new();
    compare_cells(&view, xterm, &mut differences);
    let cursor = (view.cursor.row, view.cursor.col, view.cursor.visible);
    let expected = (xterm.cursor.row, xterm.cursor.col, xterm.cursor.visible);
    if cursor != expected {
        differences.push(format!(
            "cursor (row, col, visible) {cursor:?}, xterm {expected:?}"
        ));
    }
    if view.title != xterm.title {
        differences.push(format!("title {:?}, xterm {:?}", view.title, xterm.title));
    }
    let modes = screen.modes();
    let broker_modes = broker_modes(&modes);
    let xterm_modes = [
        ("alternate screen", xterm.modes.alternate_screen.to_string()),
        (
            "application cursor",
            xterm.modes.application_cursor.to_string(),
        ),
        (
            "application keypad",
            xterm.modes.application_keypad.to_string(),
        ),
        ("bracketed paste", xterm.modes.bracketed_paste.to_string()),
        ("mouse tracking", xterm.modes.mouse_tracking.clone()),
        ("mouse encoding", xterm.modes.mouse_encoding.clone()),
        ("auto-wrap", xterm.modes.auto_wrap.to_string()),
        ("cursor visible", xterm.cursor.visible.to_string()),
    ];
    for ((name, broker), (_, xterm)) in broker_modes.iter().zip(&xterm_modes) {
        if broker != xterm {
            differences.push(format!("{name} {broker}, xterm {xterm}"));
        }
    }
    differences
}

/// The broker's modes in xterm's words, in the order `compare_broker` lists xterm's.
fn broker_modes(modes: &TerminalModes) -> [(&'static str, String); 8] {
    // vt100 names the mouse mode and encoding `Mode/Encoding` in its own words.
    let (mode, encoding) = modes
        .mouse_reporting
        .split_once('/')
        .unwrap_or((&modes.mouse_reporting, ""));
    let mode = match mode {
        "None" => "none",
        "Press" => "x10",
        "PressRelease" => "vt200",
        "ButtonMotion" => "drag",
        "AnyMotion" => "any",
        other => other,
    };
    let encoding = match encoding {
        "Default" => "DEFAULT",
        "Sgr" => "SGR",
        other => other,
    };
    [
        ("alternate screen", modes.alternate_screen.to_string()),
        ("application cursor", modes.application_cursor.to_string()),
        ("application keypad", modes.application_keypad.to_string()),
        ("bracketed paste", modes.bracketed_paste.to_string()),
        ("mouse tracking", mode.to_owned()),
        ("mouse encoding", encoding.to_owned()),
        ("auto-wrap", modes.auto_wrap.to_string()),
        ("cursor visible", modes.cursor_visible.to_string()),
    ]
}

/// The cells the broker's view holds (its text, width, colours and attributes), against
/// xterm's; and where rows wrap.
fn compare_cells(view: &ScreenView, xterm: &XtermState, differences: &mut Vec<String>) {
    if view.rows.len() != xterm.rows.len() {
        differences.push(format!(
            "{} rows, xterm {}",
            view.rows.len(),
            xterm.rows.len()
        ));
        return;
    }
    for (row_index, (row, xterm_row)) in view.rows.iter().zip(&xterm.rows).enumerate() {
        let broker_looks = Look::of_broker_row(&row.cells);
        let xterm_looks = xterm_row.cells.iter().map(Look::of_xterm);
        for (col, (broker, expected)) in broker_looks.iter().zip(xterm_looks).enumerate() {
            if *broker != expected && differences.len() < MAX_LISTED {
                differences.push(format!(
                    "row {row_index} col {col}: {broker:?}, xterm {expected:?}"
                ));
            }
        }
    }
    let shown = |rows: &mut dyn Iterator<Item = String>| rows.collect::<Vec<_>>().join("\n");
    if !differences.is_empty() {
        differences.push(format!(
            "broker's rows:\n{}\nxterm's rows:\n{}",
            shown(&mut view.rows.iter().map(|row| {
                row.cells
                    .iter()
                    .map(|cell| visible_text(&cell.text))
                    .collect()
            })),
            shown(&mut xterm.rows.iter().map(|row| {
                row.cells
                    .iter()
                    .map(|cell| visible_text(&cell.text))
                    .collect()
            })),
        ));
    }
}

fn visible_text(text: &str) -> &str {
    if text.is_empty() { " " } else { text }
}

/// What a person sees of a cell. Attributes that draw nothing are left out: those of the second
/// column of a wide character (the first draws it), and the foreground colour, weight and slant
/// of a blank cell, which shows only a colour (its background, or its foreground when inverse)
/// and the lines drawn through it.
#[derive(Debug, PartialEq)]
enum Look {
    Continuation,
    Blank {
        /// The colour the cell shows; `None` for the terminal's default (its background, or its
        /// foreground for an inverse cell, told apart by `inverse`).
        shown: Option<XtermColour>,
        inverse: bool,
        underline: bool,
        strikethrough: bool,
    },
    Text {
        text: String,
        wide: bool,
        fg: Option<XtermColour>,
        bg: Option<XtermColour>,
        /// Bold, dim, italic, underline, inverse, blink, invisible, strikethrough.
        attributes: [bool; 8],
    },
}

impl Look {
    /// A row of the broker's cells: a cell after a wide one is its continuation.
    fn of_broker_row(cells: &[Cell]) -> Vec<Look> {
        let mut looks = Vec::with_capacity(cells.len());
        let mut after_wide = false;
        for cell in cells {
            looks.push(if after_wide {
                Look::Continuation
            } else {
                Look::of(
                    &cell.text,
                    cell.wide,
                    cell.fg.map(colour),
                    cell.bg.map(colour),
                    // The broker's cells carry no blink, invisible or strikethrough.
                    [
                        cell.bold,
                        cell.dim,
                        cell.italic,
                        cell.underline,
                        cell.inverse,
                        false,
                        false,
                        false,
                    ],
                )
            });
            after_wide = cell.wide;
        }
        looks
    }

    fn of_xterm(cell: &XtermCell) -> Look {
        if cell.width == 0 {
            return Look::Continuation;
        }
        Look::of(
            &cell.text,
            cell.width == 2,
            cell.fg,
            cell.bg,
            [
                cell.bold,
                cell.dim,
                cell.italic,
                cell.underline,
                cell.inverse,
                cell.blink,
                cell.invisible,
                cell.strikethrough,
            ],
        )
    }

    fn of(
        text: &str,
        wide: bool,
        fg: Option<XtermColour>,
        bg: Option<XtermColour>,
        attributes: [bool; 8],
    ) -> Look {
        let [_, _, _, underline, inverse, _, _, strikethrough] = attributes;
        // A space written and a cell never written look the same.
        if text.is_empty() || text == " " {
            return Look::Blank {
                shown: if inverse { fg } else { bg },
                inverse,
                underline,
                strikethrough,
            };
        }
        Look::Text {
            text: text.to_owned(),
            wide,
            fg,
            bg,
            attributes,
        }
    }
}

fn colour(colour: Color) -> XtermColour {
    match colour {
        Color::Indexed(index) => XtermColour::Indexed(index),
        Color::Rgb { red, green, blue } => XtermColour::Rgb([red, green, blue]),
    }
}

/// Two xterm screens, everything the oracle prints but the offset.
fn compare_xterm(actual: &XtermState, expected: &XtermState) -> Vec<String> {
    let mut differences = Vec::new();
    for (row_index, (row, expected_row)) in actual.rows.iter().zip(&expected.rows).enumerate() {
        for (col, (cell, expected_cell)) in row.cells.iter().zip(&expected_row.cells).enumerate() {
            let (look, expected_look) = (Look::of_xterm(cell), Look::of_xterm(expected_cell));
            if look != expected_look && differences.len() < MAX_LISTED {
                differences.push(format!(
                    "row {row_index} col {col}: {look:?}, expected {expected_look:?}"
                ));
            }
        }
    }
    if actual.cursor != expected.cursor {
        differences.push(format!(
            "cursor {:?}, expected {:?}",
            actual.cursor, expected.cursor
        ));
    }
    if actual.title != expected.title {
        differences.push(format!(
            "title {:?}, expected {:?}",
            actual.title, expected.title
        ));
    }
    if actual.modes != expected.modes {
        differences.push(format!(
            "modes {:?}, expected {:?}",
            actual.modes, expected.modes
        ));
    }
    differences
}

/// xterm's screens after `data` up to each of `offsets` and after all of it.
fn run_oracle(
    data: &[u8],
    cols: u16,
    rows: u16,
    offsets: &[usize],
) -> anyhow::Result<Vec<XtermState>> {
    let file = tempfile::NamedTempFile::new()?;
    std::fs::write(file.path(), data)?;
    let mut command = oracle_command();
    command
        .args(["--cols", &cols.to_string(), "--rows", &rows.to_string()])
        .arg(file.path());
    for offset in offsets {
        command.args(["--at", &offset.to_string()]);
    }
    let output = command.output().context("cannot run the screen oracle")?;
    ensure!(
        output.status.success(),
        "the screen oracle failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: OracleAnswer =
        serde_json::from_slice(&output.stdout).context("the screen oracle's answer")?;
    Ok(answer.states)
}

fn oracle_command() -> Command {
    let web = ptyhub_test_support::environment::web_dir();
    let mut command = Command::new("node");
    command
        .arg(web.join("test/screen-oracle.mjs"))
        .current_dir(web);
    command
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/screens")
}
