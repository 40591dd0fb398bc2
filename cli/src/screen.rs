//! The screen commands, for scripts and agents that drive a session without attaching: `screen`
//! reads what the session's terminal shows, `send` types into it, `wait` waits until its screen
//! matches a pattern or its terminal reaches a state (at a prompt, idle, waiting for input,
//! exited). Also the screen as the REST JSON of the contract, so `--json` prints what
//! `GET .../screen` answers.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use clap::ArgMatches;
use ptyhub_client::{ErrorCode, TerminalActivity, TerminalState};
use ptyhub_model::proto::{ProtoEnum as _, optional_to_proto};
use ptyhub_model::{ExitStatus, Screen, ScreenContent, ScreenFormat};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use serde::Serialize;

use crate::connection::ConnectionArgs;
use crate::manage::{Output, TerminalView, print_json};

/// The exit status of `wait` when the timeout passed, as `timeout(1)` has it.
const TIMED_OUT_EXIT: u8 = 124;

/// `--format`'s values, the contract's names: the rows as plain lines, trailing spaces trimmed
/// (as `tmux capture-pane -p`); drawn with their colours and attributes as terminal escape
/// sequences; or the REST JSON with every cell and its attributes.
fn format_parser() -> impl clap::builder::TypedValueParser<Value = ScreenFormat> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(ScreenFormat::ALL.map(ScreenFormat::as_str))
        .map(|name| ScreenFormat::parse(&name).expect("one of the possible values"))
}

#[derive(Debug, clap::Args)]
pub struct ScreenArgs {
    pub instance: String,
    /// The session id.
    pub session: String,
    /// How to print the screen: text (plain lines), ansi (with colours and attributes) or json
    /// (the REST JSON, every cell).
    #[arg(long, value_parser = format_parser(), default_value = "text")]
    pub format: ScreenFormat,
    /// Lines of scrollback to print above the visible rows (0..=10000).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub scrollback: u32,
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("input").required(true).multiple(true).args(["text", "key"])))]
pub struct SendArgs {
    pub instance: String,
    /// The session id.
    pub session: String,
    /// Text to type, as UTF-8 exactly as given (repeatable; mixed with --key in the order given).
    #[arg(long = "text", value_name = "TEXT")]
    pub text: Vec<String>,
    /// A key to press: Enter, Tab, Escape, Backspace, Space, Up, Down, Left, Right, Home, End,
    /// PageUp, PageDown, Insert, Delete, F1..F12, C-<key> (Ctrl), M-<key> (Alt) (repeatable).
    #[arg(long = "key", value_name = "KEY")]
    pub key: Vec<String>,
    /// Type even while a client holds control of the session (it keeps control).
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, clap::Args)]
pub struct WaitArgs {
    pub instance: String,
    /// The session id.
    pub session: String,
    /// A regular expression (Rust regex syntax, multi-line: `^` and `$` match at each row)
    /// searched in the screen's text. Without it (and without --for) any screen matches: wait
    /// for --quiet, or for the process to end.
    pub pattern: Option<String>,
    /// Instead of a pattern, wait until the terminal is at a shell `prompt`, `idle` (a
    /// full-screen program quiet for the broker's idle time), waiting for `input` (a program
    /// asked with a notification or a bell) or has `exit`ed. At once when it already is; with
    /// --after, only once it got there by output from that offset on.
    #[arg(long = "for", value_name = "STATE", value_parser = parse_state, conflicts_with_all = ["pattern", "quiet"])]
    pub wait_for: Option<TerminalState>,
    /// Give up after this long (at most 5m) and exit with 124.
    #[arg(long, default_value = "30s", value_parser = parse_timeout)]
    pub timeout: Duration,
    /// Match only once no output came for this long (at most 1m).
    #[arg(long, value_parser = parse_duration)]
    pub quiet: Option<Duration>,
    /// Match only a screen that reflects output from this offset on (the offset `send` printed).
    #[arg(long, value_name = "OFFSET")]
    pub after: Option<u64>,
    /// Lines of scrollback above the visible rows to search and print (0..=10000).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub scrollback: u32,
}

fn parse_state(text: &str) -> Result<TerminalState, String> {
    TerminalState::from_wait_name(text)
        .ok_or_else(|| format!("{text:?} is no state to wait for: use prompt, idle, input or exit"))
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|error| format!("{error} (use for example 30s, 500ms)"))
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    let timeout = parse_duration(text)?;
    // The server reads 0 as "the default": refuse it rather than wait 30 s.
    if timeout < Duration::from_millis(1) {
        return Err("the timeout must be at least 1ms".to_owned());
    }
    Ok(timeout)
}

/// A failure that ends the command with its own exit status instead of 1.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ExitWith {
    pub status: u8,
    message: String,
}

impl ExitWith {
    pub fn new(status: u8, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

/// The `--text` and `--key` values of a `send` in the order they were given on the command line.
pub fn input_items_in_order(matches: &ArgMatches) -> Vec<broker_pb::InputItem> {
    use broker_pb::input_item::Item;
    let mut items: Vec<(usize, Item)> = Vec::new();
    let mut collect = |id: &str, item: fn(String) -> Item| {
        if let (Some(values), Some(indices)) =
            (matches.get_many::<String>(id), matches.indices_of(id))
        {
            items.extend(
                indices
                    .zip(values)
                    .map(|(at, value)| (at, item(value.clone()))),
            );
        }
    };
    collect("text", Item::Text);
    collect("key", Item::Key);
    items.sort_by_key(|(at, _)| *at);
    items
        .into_iter()
        .map(|(_, item)| broker_pb::InputItem { item: Some(item) })
        .collect()
}

pub async fn screen(connection: &ConnectionArgs, args: ScreenArgs, output: Output) -> Result<()> {
    let screen = connection
        .client()
        .await?
        .screen(session_pb::GetScreenRequest {
            instance: args.instance.clone(),
            session_id: args.session.clone(),
            format: args.format.to_proto(),
            scrollback: args.scrollback,
        })
        .await
        .with_context(|| {
            format!(
                "cannot read the screen of session {} of instance {:?}",
                args.session, args.instance
            )
        })?;
    let screen = checked_screen(screen)?;
    match (output, &screen.content) {
        (Output::Json, _) | (_, ScreenContent::Cells(_)) => print_json(&screen),
        (Output::Plain, ScreenContent::Text(lines)) => print_lines(lines),
        (Output::Plain, ScreenContent::Ansi(ansi)) => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(ansi)?;
            // Each row ends as the rows are joined, so the shell's prompt comes below the last.
            stdout.write_all(b"\r\n")?;
            stdout.flush()?;
            Ok(())
        }
    }
}

pub async fn send(
    connection: &ConnectionArgs,
    args: SendArgs,
    items: Vec<broker_pb::InputItem>,
    output: Output,
) -> Result<()> {
    let what = || {
        format!(
            "cannot send input to session {} of instance {:?}",
            args.session, args.instance
        )
    };
    let answer = connection
        .client()
        .await?
        .send_input(session_pb::SendInputRequest {
            instance: args.instance.clone(),
            session_id: args.session.clone(),
            items,
            force: args.force,
        })
        .await;
    let sent = match answer {
        Ok(sent) => sent,
        Err(error) if error.code() == Some(ErrorCode::WrongState) && !args.force => {
            return Err(anyhow!(
                "{error} (someone is attached and holds control: pass --force to type anyway; they keep control)",
            ))
            .with_context(what);
        }
        Err(error) => return Err(error).with_context(what),
    };
    match output {
        Output::Json => print_json(&SentView {
            bytes_written: sent.bytes_written,
            offset: sent.output_offset,
        }),
        // The offset alone, so that a script can hand it to `wait --after`.
        Output::Plain => {
            println!("{}", sent.output_offset);
            Ok(())
        }
    }
}

/// Waits for the screen; `Ok` is a match (exit 0), [`ExitWith`] a timeout (124), and any other
/// error, including the process ending first, exits 1.
pub async fn wait(connection: &ConnectionArgs, args: WaitArgs, output: Output) -> Result<ExitCode> {
    let pattern = args.pattern.clone().unwrap_or_default();
    let answer = connection
        .client()
        .await?
        .wait_for_screen(session_pb::WaitForScreenRequest {
            instance: args.instance.clone(),
            session_id: args.session.clone(),
            pattern: pattern.clone(),
            timeout_ms: whole_millis(args.timeout),
            quiet_ms: args.quiet.map_or(0, whole_millis),
            after_offset: args.after,
            format: broker_pb::ScreenFormat::Text.into(),
            scrollback: args.scrollback,
            wait_for: optional_to_proto(args.wait_for),
        })
        .await;
    let waited = match answer {
        Ok(waited) => waited,
        Err(error) if error.code() == Some(ErrorCode::TimedOut) => {
            let what = match args.wait_for {
                Some(state) => format!("the terminal was not {state}"),
                None if pattern.is_empty() => "the screen did not settle".to_owned(),
                None => format!("the screen did not match {pattern:?}"),
            };
            return Err(ExitWith {
                status: TIMED_OUT_EXIT,
                message: format!("{what} within {}", humantime::format_duration(args.timeout)),
            }
            .into());
        }
        Err(error) => {
            return Err(error).with_context(|| {
                format!(
                    "cannot wait for the screen of session {} of instance {:?}",
                    args.session, args.instance
                )
            });
        }
    };
    let screen = checked_screen(
        waited
            .screen
            .context("the server answered without a screen")?,
    )?;
    let outcome = broker_pb::wait_for_screen_response::Outcome::try_from(waited.outcome)
        .unwrap_or(broker_pb::wait_for_screen_response::Outcome::Unspecified);
    let reached = TerminalState::from_proto(waited.state).ok();
    match output {
        Output::Json => print_json(&WaitedView {
            outcome: match outcome {
                broker_pb::wait_for_screen_response::Outcome::Exited => "exited",
                broker_pb::wait_for_screen_response::Outcome::State => "state",
                _ => "matched",
            },
            matched: (outcome == broker_pb::wait_for_screen_response::Outcome::Matched)
                .then_some(waited.matched.as_str()),
            state: reached.map(TerminalState::as_str),
            screen: &screen,
            // A report this build cannot read (a newer server's progress kind) reads as none.
            terminal: TerminalView::from(
                &waited
                    .terminal
                    .and_then(|terminal| TerminalActivity::try_from(terminal).ok())
                    .unwrap_or_default(),
            ),
        })?,
        Output::Plain => match &screen.content {
            ScreenContent::Text(lines) => print_lines(lines)?,
            _ => {
                return Err(anyhow!(
                    "the server answered a wait for text with another format"
                ));
            }
        },
    }
    match outcome {
        broker_pb::wait_for_screen_response::Outcome::Matched
        | broker_pb::wait_for_screen_response::Outcome::State => Ok(ExitCode::SUCCESS),
        broker_pb::wait_for_screen_response::Outcome::Exited => {
            let ended = match screen.exit {
                Some(ExitStatus {
                    signal: Some(signal),
                    ..
                }) => format!("was ended by signal {signal}"),
                Some(exit) => format!("exited with code {}", exit.code),
                None => "ended".to_owned(),
            };
            let awaited = match args.wait_for {
                Some(state) => format!("the terminal was {state}"),
                None => "the screen matched".to_owned(),
            };
            Err(anyhow!("the process {ended} before {awaited}"))
        }
        broker_pb::wait_for_screen_response::Outcome::Unspecified => {
            Err(anyhow!("the server answered the wait without an outcome"))
        }
    }
}

/// Milliseconds for a bound the server checks: beyond `u32` it is over every maximum anyway.
fn whole_millis(duration: Duration) -> u32 {
    u32::try_from(duration.as_millis()).unwrap_or(u32::MAX)
}

fn print_lines(lines: &[String]) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    for line in lines {
        writeln!(stdout, "{line}")?;
    }
    stdout.flush()?;
    Ok(())
}

/// What `send --json` prints: the REST answer of `POST .../input`.
#[derive(Debug, Serialize)]
struct SentView {
    bytes_written: u64,
    offset: u64,
}

/// What `wait --json` prints: the REST answer of `POST .../wait`.
#[derive(Debug, Serialize)]
struct WaitedView<'a> {
    outcome: &'static str,
    /// `null` unless the pattern matched.
    matched: Option<&'a str>,
    /// The state reached, for `outcome` `state`.
    state: Option<&'static str>,
    screen: &'a Screen,
    /// What the terminal is doing, as in the session object.
    terminal: TerminalView,
}

/// A screen as the server answered it, in the model's form, whose JSON is what the REST API
/// answers (docs/CONTRACT.md, "Screens").
fn checked_screen(screen: broker_pb::Screen) -> Result<Screen> {
    Screen::try_from(screen).context("the server answered with a screen that is not valid")
}

#[cfg(test)]
mod tests {
    use clap::{Args as _, Command};

    use super::*;

    fn send_matches(args: &[&str]) -> ArgMatches {
        SendArgs::augment_args(Command::new("send"))
            .try_get_matches_from(args)
            .expect("valid arguments")
    }

    fn item(items: &[broker_pb::InputItem], at: usize) -> broker_pb::input_item::Item {
        items[at].item.clone().expect("an item")
    }

    #[test]
    fn texts_and_keys_keep_the_command_line_order() {
        use broker_pb::input_item::Item;
        let matches = send_matches(&[
            "send", "local", "sid", "--key", "C-c", "--text", "ls", "--key", "Enter", "--text",
            "exit",
        ]);
        let items = input_items_in_order(&matches);
        assert_eq!(items.len(), 4);
        assert_eq!(item(&items, 0), Item::Key("C-c".into()));
        assert_eq!(item(&items, 1), Item::Text("ls".into()));
        assert_eq!(item(&items, 2), Item::Key("Enter".into()));
        assert_eq!(item(&items, 3), Item::Text("exit".into()));
    }

    #[test]
    fn send_without_text_or_key_is_refused() {
        let refused = SendArgs::augment_args(Command::new("send"))
            .try_get_matches_from(["send", "local", "sid", "--force"]);
        assert!(refused.is_err());
    }

    #[test]
    fn a_zero_timeout_is_refused() {
        assert!(parse_timeout("0s").is_err());
        assert_eq!(parse_timeout("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_timeout("soon").is_err());
    }

    #[test]
    fn a_text_screen_is_the_rest_json() {
        let screen = broker_pb::Screen {
            session_id: "sid".into(),
            offset: 42,
            size: Some(broker_pb::TerminalSize { cols: 80, rows: 2 }),
            cursor: Some(broker_pb::Cursor {
                row: 1,
                col: 2,
                visible: true,
            }),
            title: "vim".into(),
            format: broker_pb::ScreenFormat::Text.into(),
            lines: vec!["$ ls".into(), "$".into()],
            state: broker_pb::SessionState::Running.into(),
            terminal: Some(broker_pb::TerminalActivity {
                state: broker_pb::TerminalState::AtPrompt.into(),
                shell_integration: true,
                ..Default::default()
            }),
            ..Default::default()
        };
        let json =
            serde_json::to_value(checked_screen(screen).expect("a valid screen")).expect("json");
        assert_eq!(
            json,
            serde_json::json!({
                "session_id": "sid", "offset": 42, "cols": 80, "rows": 2,
                "cursor": {"row": 1, "col": 2, "visible": true}, "title": "vim",
                "alternate_screen": false, "status": "active", "exit_code": null,
                "format": "text", "scrollback_rows": 0,
                "lines": ["$ ls", "$"], "text": "$ ls\n$",
                "terminal": {
                    "state": "at_prompt", "last_notification": null, "progress": null,
                    "cwd": null, "shell_integration": true, "running_command_id": null,
                },
                "quiet_ms": null,
            })
        );
    }

    #[test]
    fn cells_carry_only_the_attributes_they_have() {
        let screen = broker_pb::Screen {
            format: broker_pb::ScreenFormat::Cells.into(),
            size: Some(broker_pb::TerminalSize { cols: 2, rows: 1 }),
            rows: vec![broker_pb::ScreenRow {
                cells: vec![
                    broker_pb::Cell {
                        text: "界".into(),
                        wide: true,
                        fg: Some(broker_pb::Color {
                            kind: Some(broker_pb::color::Kind::Indexed(1)),
                        }),
                        bg: Some(broker_pb::Color {
                            kind: Some(broker_pb::color::Kind::Rgb(0x00ff_8000)),
                        }),
                        bold: true,
                        ..Default::default()
                    },
                    broker_pb::Cell::default(),
                ],
                wrapped: false,
            }],
            state: broker_pb::SessionState::Exited.into(),
            exit: Some(broker_pb::ExitStatus {
                code: 3,
                signal: None,
            }),
            ..Default::default()
        };
        let json =
            serde_json::to_value(checked_screen(screen).expect("a valid screen")).expect("json");
        assert_eq!(json["format"], "json");
        assert_eq!(json["status"], "exited");
        assert_eq!(json["exit_code"], 3);
        assert_eq!(json["rows"], 1);
        assert_eq!(
            json["grid"],
            serde_json::json!([{"cells": [
                {"text": "界", "wide": true, "fg": 1, "bg": "#ff8000", "bold": true},
                {"text": ""},
            ], "wrapped": false}])
        );
    }
}
