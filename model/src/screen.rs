//! A session's screen as the screen API answers it (docs/CONTRACT.md, "Screens"): its
//! [`ScreenFormat`], the [`Cursor`], and, for `format=json`, rows of [`Cell`]s with their
//! [`Color`]s. The broker builds these from its emulator, the gateway answers them on REST and
//! MCP, and the CLI prints them; each has its one JSON form here (serde, in the contract's keys,
//! with its OpenAPI schema behind the `openapi` feature) and its one protobuf form in
//! [`crate::proto`].

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{ExitStatus, SessionStatus, TerminalActivity, TerminalSize};

/// How a screen's rows are given. Its JSON (and query) spelling is [`ScreenFormat::as_str`]:
/// `text`, `ansi`, and `json` for cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ScreenFormat {
    /// `lines` and `text`: the rows as plain text, trailing spaces trimmed.
    #[default]
    Text,
    /// `ansi`: the rows drawn with their attributes (SGR), joined by CR LF.
    Ansi,
    /// `grid`: every cell with its attributes.
    #[serde(rename = "json")]
    Cells,
}

impl ScreenFormat {
    pub const ALL: [ScreenFormat; 3] =
        [ScreenFormat::Text, ScreenFormat::Ansi, ScreenFormat::Cells];

    /// The contract's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ScreenFormat::Text => "text",
            ScreenFormat::Ansi => "ansi",
            ScreenFormat::Cells => "json",
        }
    }

    /// The format the contract's spelling names.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|format| format.as_str() == name)
    }
}

impl fmt::Display for ScreenFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the cursor is, 0-based from the top of the visible rows, and whether it is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Cursor {
    /// 0-based, from the top of the visible rows.
    pub row: u32,
    pub col: u32,
    pub visible: bool,
}

/// One row of a screen as cells.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScreenRow {
    /// One cell a column.
    pub cells: Vec<Cell>,
    /// The row's text continues on the next row.
    pub wrapped: bool,
}

/// One column. Attributes that are off, and default colours, are left out of its JSON.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Cell {
    /// The character and its combining marks; `""` for a blank cell and for the second column
    /// of a wide character.
    pub text: String,
    /// A wide character: the next cell is its continuation.
    #[serde(default, skip_serializing_if = "is_false")]
    pub wide: bool,
    /// Absent for the terminal's default colour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fg: Option<Color>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bg: Option<Color>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub bold: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub dim: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub italic: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub underline: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub inverse: bool,
}

/// For `skip_serializing_if`, which passes a reference.
fn is_false(value: &bool) -> bool {
    !*value
}

/// A cell's colour other than the terminal's default. Its JSON form is a palette index
/// (0..=255) or `"#rrggbb"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "ColorJson", try_from = "ColorJson")]
pub enum Color {
    /// One of the 256 palette colours.
    Indexed(u8),
    Rgb {
        red: u8,
        green: u8,
        blue: u8,
    },
}

/// A palette index (0..=255) or `"#rrggbb"`.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
enum ColorJson {
    Indexed(u8),
    Rgb(String),
}

impl From<Color> for ColorJson {
    fn from(color: Color) -> Self {
        match color {
            Color::Indexed(index) => ColorJson::Indexed(index),
            Color::Rgb { red, green, blue } => {
                ColorJson::Rgb(format!("#{red:02x}{green:02x}{blue:02x}"))
            }
        }
    }
}

impl TryFrom<ColorJson> for Color {
    type Error = String;

    fn try_from(json: ColorJson) -> Result<Self, String> {
        match json {
            ColorJson::Indexed(index) => Ok(Color::Indexed(index)),
            ColorJson::Rgb(text) => {
                let refused = || format!("colour {text:?} is not a palette index nor \"#rrggbb\"");
                let hex = text.strip_prefix('#').ok_or_else(refused)?;
                if hex.len() != 6 || !hex.bytes().all(|byte| byte.is_ascii_hexdigit()) {
                    return Err(refused());
                }
                let number = u32::from_str_radix(hex, 16).map_err(|_| refused())?;
                let [_, red, green, blue] = number.to_be_bytes();
                Ok(Color::Rgb { red, green, blue })
            }
        }
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Color {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        <ColorJson as utoipa::PartialSchema>::schema()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Color {}

/// A session's screen as its broker's terminal emulator holds it, after every output byte
/// before `offset`, with the session's status beside it. Its JSON form is the contract's
/// (`cols` and `rows` rather than a size; `exit_code`; the rows under `lines` and `text`,
/// `ansi` or `grid` by format); it is written, never read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Screen {
    pub session_id: String,
    pub offset: u64,
    /// `None` from a broker that did not say, or said a size out of the contract's bounds.
    pub size: Option<TerminalSize>,
    pub cursor: Cursor,
    /// The window title the program set last; `""` when none.
    pub title: String,
    pub alternate_screen: bool,
    pub status: SessionStatus,
    /// Set once the process has exited.
    pub exit: Option<ExitStatus>,
    /// How many of the rows come from the scrollback (they come first).
    pub scrollback_rows: u32,
    pub content: ScreenContent,
    /// What the terminal was doing as of `offset`, read with the screen; `None` from a broker
    /// that did not say.
    pub terminal: Option<TerminalActivity>,
    /// How long no output had come when the screen was read, in milliseconds; `None` before
    /// any output (or from a broker that did not say).
    pub quiet_ms: Option<u64>,
}

/// The rows of a [`Screen`], in the format that was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScreenContent {
    /// One string a row, trailing spaces trimmed.
    Text(Vec<String>),
    /// The rows drawn with their attributes, joined by CR LF; shown in JSON as UTF-8 (an
    /// invalid sequence as U+FFFD).
    Ansi(Vec<u8>),
    Cells(Vec<ScreenRow>),
}

impl ScreenContent {
    pub fn format(&self) -> ScreenFormat {
        match self {
            ScreenContent::Text(_) => ScreenFormat::Text,
            ScreenContent::Ansi(_) => ScreenFormat::Ansi,
            ScreenContent::Cells(_) => ScreenFormat::Cells,
        }
    }
}

// The JSON form of a `Screen`. (A `//` comment: doc comments are the OpenAPI descriptions.)
/// A session's screen (docs/CONTRACT.md, "Screens"): the state after every output byte before
/// `offset`. Which of `lines` and `text`, `ansi`, or `grid` it carries depends on `format`.
#[derive(Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Screen))]
struct ScreenJson<'a> {
    session_id: &'a str,
    /// The screen reflects every output byte before this offset.
    offset: u64,
    cols: Option<u32>,
    rows: Option<u32>,
    cursor: Cursor,
    /// The window title the program set last; `""` when none.
    title: &'a str,
    alternate_screen: bool,
    /// The session's status: `starting`, `active`, `resetting`, `exited` or `closed`.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    status: &'static str,
    /// Set once the process has exited.
    exit_code: Option<i32>,
    format: ScreenFormat,
    /// How many of the rows or lines come from the scrollback (they come first).
    scrollback_rows: u32,
    /// `text`: one string a row, trailing spaces trimmed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<String>>))]
    lines: Option<&'a [String]>,
    /// `text`: the lines joined by `\n`.
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    /// `ansi`: the rows drawn with their attributes (SGR), joined by CR LF.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    ansi: Option<Cow<'a, str>>,
    /// `json`: the rows as cells, scrollback rows first.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<ScreenRow>>))]
    grid: Option<&'a [ScreenRow]>,
    /// What the terminal was doing as of `offset`, read with the screen (the keys of a
    /// session's terminal state); `null` from a broker that did not say.
    terminal: Option<&'a TerminalActivity>,
    /// How long no output had come when the screen was read, in milliseconds; `null` before
    /// any output.
    quiet_ms: Option<u64>,
}

impl<'a> From<&'a Screen> for ScreenJson<'a> {
    fn from(screen: &'a Screen) -> Self {
        let (mut lines, mut text, mut ansi, mut grid) = (None, None, None, None);
        match &screen.content {
            ScreenContent::Text(rows) => {
                lines = Some(rows.as_slice());
                text = Some(rows.join("\n"));
            }
            ScreenContent::Ansi(bytes) => ansi = Some(String::from_utf8_lossy(bytes)),
            ScreenContent::Cells(rows) => grid = Some(rows.as_slice()),
        }
        Self {
            session_id: &screen.session_id,
            offset: screen.offset,
            cols: screen.size.map(|size| size.cols().into()),
            rows: screen.size.map(|size| size.rows().into()),
            cursor: screen.cursor,
            title: &screen.title,
            alternate_screen: screen.alternate_screen,
            status: screen.status.as_str(),
            exit_code: screen.exit.map(|exit| exit.code),
            format: screen.content.format(),
            scrollback_rows: screen.scrollback_rows,
            lines,
            text,
            ansi,
            grid,
            terminal: screen.terminal.as_ref(),
            quiet_ms: screen.quiet_ms,
        }
    }
}

impl Serialize for Screen {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        ScreenJson::from(self).serialize(serializer)
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Screen {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        <ScreenJson<'static> as utoipa::PartialSchema>::schema()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Screen {
    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        <ScreenJson<'static> as utoipa::ToSchema>::schemas(schemas);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn screen(content: ScreenContent) -> Screen {
        Screen {
            session_id: "sid".to_owned(),
            offset: 42,
            size: Some(TerminalSize::new(80, 2).unwrap()),
            cursor: Cursor {
                row: 1,
                col: 2,
                visible: true,
            },
            title: "vim".to_owned(),
            alternate_screen: false,
            status: SessionStatus::Active,
            exit: None,
            scrollback_rows: 0,
            content,
            terminal: Some(TerminalActivity {
                state: crate::TerminalState::AtPrompt,
                cwd: Some("/src".to_owned()),
                integrated: true,
                ..TerminalActivity::default()
            }),
            quiet_ms: Some(1500),
        }
    }

    #[test]
    fn a_text_screen_is_the_contracts_json() {
        let text = screen(ScreenContent::Text(vec!["$ ls".into(), "$".into()]));
        assert_eq!(
            serde_json::to_value(&text).unwrap(),
            json!({
                "session_id": "sid", "offset": 42, "cols": 80, "rows": 2,
                "cursor": {"row": 1, "col": 2, "visible": true}, "title": "vim",
                "alternate_screen": false, "status": "active", "exit_code": null,
                "format": "text", "scrollback_rows": 0,
                "lines": ["$ ls", "$"], "text": "$ ls\n$",
                "terminal": {
                    "state": "at_prompt", "last_notification": null, "progress": null,
                    "cwd": "/src", "shell_integration": true, "running_command_id": null,
                },
                "quiet_ms": 1500,
            })
        );
    }

    #[test]
    fn an_ansi_screen_carries_its_bytes_as_text_and_an_unknown_size_as_null() {
        let mut ansi = screen(ScreenContent::Ansi(b"\x1b[1mhi\x1b[m\xff".to_vec()));
        ansi.size = None;
        ansi.status = SessionStatus::Exited;
        ansi.exit = Some(ExitStatus {
            code: 3,
            signal: None,
        });
        let json = serde_json::to_value(&ansi).unwrap();
        assert_eq!(json["ansi"], "\u{1b}[1mhi\u{1b}[m\u{fffd}");
        assert_eq!(json["format"], "ansi");
        assert_eq!((&json["cols"], &json["rows"]), (&json!(null), &json!(null)));
        assert_eq!(
            (&json["status"], &json["exit_code"]),
            (&json!("exited"), &json!(3))
        );
        assert!(json.get("lines").is_none() && json.get("grid").is_none());
    }

    #[test]
    fn cells_carry_only_the_attributes_they_have() {
        let cells = screen(ScreenContent::Cells(vec![ScreenRow {
            cells: vec![
                Cell {
                    text: "界".into(),
                    wide: true,
                    fg: Some(Color::Indexed(1)),
                    bg: Some(Color::Rgb {
                        red: 0xff,
                        green: 0x80,
                        blue: 0,
                    }),
                    bold: true,
                    ..Cell::default()
                },
                Cell::default(),
                Cell {
                    text: "x".into(),
                    bg: Some(Color::Rgb {
                        red: 0x0a,
                        green: 0xff,
                        blue: 0x00,
                    }),
                    dim: true,
                    italic: true,
                    underline: true,
                    inverse: true,
                    ..Cell::default()
                },
            ],
            wrapped: true,
        }]));
        let json = serde_json::to_value(&cells).unwrap();
        assert_eq!(json["format"], "json");
        assert_eq!(
            json["grid"],
            json!([{"wrapped": true, "cells": [
                {"text": "界", "wide": true, "fg": 1, "bg": "#ff8000", "bold": true},
                {"text": ""},
                {"text": "x", "bg": "#0aff00", "dim": true, "italic": true,
                 "underline": true, "inverse": true},
            ]}])
        );
        assert!(
            json.get("lines").is_none() && json.get("ansi").is_none(),
            "{json}"
        );
        let ScreenContent::Cells(rows) = &cells.content else {
            unreachable!("made with cells")
        };
        let back: Vec<ScreenRow> = serde_json::from_value(json["grid"].clone()).unwrap();
        assert_eq!(&back, rows);
    }

    #[test]
    fn a_colour_that_is_neither_an_index_nor_rrggbb_is_refused() {
        for refused in [
            json!(256),
            json!(-1),
            json!("ff8000"),
            json!("#ff80"),
            json!("#ff800g"),
        ] {
            assert!(
                serde_json::from_value::<Color>(refused.clone()).is_err(),
                "{refused}"
            );
        }
        assert_eq!(
            serde_json::from_value::<Color>(json!("#0A0b0C")).unwrap(),
            Color::Rgb {
                red: 10,
                green: 11,
                blue: 12
            }
        );
    }

    #[test]
    fn formats_round_trip_through_their_names() {
        for format in ScreenFormat::ALL {
            assert_eq!(ScreenFormat::parse(format.as_str()), Some(format));
            assert_eq!(
                serde_json::to_value(format).unwrap(),
                json!(format.as_str())
            );
        }
        assert_eq!(ScreenFormat::parse("cells"), None);
    }
}
