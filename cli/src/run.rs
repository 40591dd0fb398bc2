//! `run`: a command typed at a live session's shell prompt, as a colleague would (everyone
//! attached sees it), its output printed as it is produced and its exit code returned as
//! `run`'s own, so a script can run a step in a terminal people watch as it would run it
//! locally. Several words after `--` are quoted for the shell, so the shell runs them as the
//! argv given (as `docker exec` does); one word is a shell line, run as is.
//!
//! The output streams through a viewer's attachment, not by asking for the command's output
//! over and over: the viewer attaches at the offset the session's output had before the run
//! typed anything, so it is sent every byte after it, in order, resumed by offset should the
//! connection drop. The session's command watch, from the newest command before the run, says
//! where the command's output starts (its record as it starts), and the run's answer where it
//! ended; the command line's echo before
//! the start and the next prompt after the end are not printed. Whatever the viewer did not
//! deliver of the command's output (a gap) is taken from the run's answer, which carries its
//! last MiB.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use base64::Engine as _;
use bytes::Bytes;
use ptyhub_client::{AttachOptions, Client, Command, ErrorCode, Event, Role};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use serde::Serialize;
use tokio_stream::StreamExt as _;

use crate::commands::CommandView;
use crate::connection::ConnectionArgs;
use crate::manage::{Output, print_json};
use crate::screen::ExitWith;

/// The exit status of `run` when the command did not end in time, as `timeout(1)` has it.
const TIMED_OUT_EXIT: u8 = 124;

/// The exit status of `run` when the shell reported no exit code for the command.
const NO_EXIT_CODE: u8 = 1;

/// The exit status of `run` when the command could not be run: refused with nothing typed (no
/// shell integration, a program running, a client holding control, a viewer-only credential),
/// an unknown session, or no server to ask, as `docker run` has it.
const NOT_RUN_EXIT: u8 = 125;

/// How long the output up to a command's end, already in the session's ring when the run
/// answers, may take to reach the viewer before the rest is taken from the answer instead.
const DRAIN_PATIENCE: Duration = Duration::from_secs(5);

/// The longest a run may wait, as the contract bounds it.
const MAX_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    pub instance: String,
    /// The session id.
    pub session: String,
    /// Give up waiting after this long (seconds, or a duration such as 500ms or 2m; at most
    /// 5m) and exit with 124; the command goes on running.
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = parse_timeout)]
    pub timeout: Duration,
    /// Type even while a client holds control of the session.
    #[arg(long)]
    pub force: bool,
    /// Print the bytes as the program wrote them (colours and all) instead of plain text.
    #[arg(long)]
    pub ansi: bool,
    /// The command (after `--`): one word is a shell line (`'make && make test'`), several are
    /// a program and its arguments, quoted for the shell.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Runs the command; `Ok` carries its exit code (1 when the shell reported none), a timeout
/// is [`ExitWith`] 124, a command that could not be run [`ExitWith`] 125.
pub async fn run(connection: &ConnectionArgs, args: RunArgs, output: Output) -> Result<ExitCode> {
    let line = command_line(&args.command);
    let client = connection
        .client()
        .await
        .map_err(|error| not_run(&args, &line, error))?;
    match output {
        Output::Json => run_to_json(&client, &args, &line).await,
        Output::Plain => run_streaming(&client, &args, &line).await,
    }
}

/// The run's request: `ansi` for the bytes as written, else plain text.
fn run_request(args: &RunArgs, line: &str, ansi: bool) -> session_pb::RunRequest {
    let format = if ansi {
        broker_pb::ScreenFormat::Ansi
    } else {
        broker_pb::ScreenFormat::Text
    };
    session_pb::RunRequest {
        instance: args.instance.clone(),
        session_id: args.session.clone(),
        command: line.to_owned(),
        timeout_ms: u32::try_from(args.timeout.as_millis()).unwrap_or(u32::MAX),
        force: args.force,
        format: format.into(),
    }
}

/// `--json`: the answer, as `POST .../run` gives it, once the command ended.
async fn run_to_json(client: &Client, args: &RunArgs, line: &str) -> Result<ExitCode> {
    let ran = client
        .run(run_request(args, line, args.ansi))
        .await
        .map_err(|error| run_failed(args, line, error))?;
    let command = ended_command(&ran)?;
    print_json(&RunView::new(
        &command,
        &ran.output,
        ran.truncated,
        args.ansi,
    ))?;
    Ok(exit_code(&command))
}

/// Types the command and prints its output as it comes (see the module's documentation).
async fn run_streaming(client: &Client, args: &RunArgs, line: &str) -> Result<ExitCode> {
    let not_run = |error: ptyhub_client::Error| not_run(args, line, error);
    // Every byte from here on reaches the viewer; the command's output comes after it.
    let from = client
        .screen(session_pb::GetScreenRequest {
            instance: args.instance.clone(),
            session_id: args.session.clone(),
            format: broker_pb::ScreenFormat::Text.into(),
            scrollback: 0,
        })
        .await
        .map_err(not_run)?
        .offset;
    // Watched from the newest command so far: the run's is after it, and the commands the
    // session keeps from before (up to a thousand) are not sent first.
    let last_id = client
        .list_commands(&args.instance, &args.session, u64::MAX, 1)
        .await
        .map_err(not_run)?
        .last_id;
    let mut commands = client
        .watch_commands(&args.instance, &args.session, last_id)
        .await
        .map_err(not_run)?;
    let options = AttachOptions {
        role: Role::Viewer,
        since: Some(from),
        ..AttachOptions::default()
    };
    let mut viewer = client
        .attach(&args.instance, &args.session, options)
        .await
        .map_err(not_run)?;
    // Asked as the bytes written, so that what the viewer missed can be cut from its end.
    let request = run_request(args, line, true);
    let mut answer = tokio::spawn({
        let client = client.clone();
        async move { client.run(request).await }
    });
    let mut printer = OutputPrinter::new(args.ansi);
    let (mut watching, mut viewing) = (true, true);
    let ran = loop {
        tokio::select! {
            ran = &mut answer => break ran.context("the run's task failed")?,
            record = commands.next(), if watching => match record {
                Some(Ok(record)) if record.ended_at.is_none() => {
                    printer.starts_at(record.output_start)?;
                    // Its end comes with the run's answer.
                    watching = false;
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => watching = false,
            },
            event = viewer.next(), if viewing => {
                viewing = printer.event(event)?;
            }
        }
    };
    let ran = ran.map_err(|error| run_failed(args, line, error))?;
    let command = ended_command(&ran)?;
    printer.starts_at(command.output_start)?;
    let end = command.output_end.unwrap_or(printer.next);
    while viewing && printer.waits_for_output(end) {
        match tokio::time::timeout(DRAIN_PATIENCE, viewer.next()).await {
            Ok(event) => viewing = printer.event(event)?,
            Err(_) => break,
        }
    }
    printer.finish(end, &ran.output)?;
    if printer.missed || (ran.truncated && printer.took_from_answer) {
        eprintln!(
            "ptyhub: some of the command's output is missing (gone from the session's output)"
        );
    }
    Ok(exit_code(&command))
}

/// The command of a run's answer, which has ended.
fn ended_command(ran: &broker_pb::RunResponse) -> Result<Command> {
    Ok(Command::from(ran.command.clone().context(
        "the server answered the run without its command",
    )?))
}

/// `run`'s exit status for the command: its exit code, or 1 when the shell gave none.
fn exit_code(command: &Command) -> ExitCode {
    let status = command.exit_code.map_or(NO_EXIT_CODE, |code| {
        u8::try_from(code.clamp(0, 255)).unwrap_or(NO_EXIT_CODE)
    });
    ExitCode::from(status)
}

/// A failed run: 124 when it did not end in time (it goes on running), else 125.
fn run_failed(args: &RunArgs, line: &str, error: ptyhub_client::Error) -> anyhow::Error {
    if error.code() == Some(ErrorCode::TimedOut) {
        return ExitWith::new(
            TIMED_OUT_EXIT,
            format!(
                "{line:?} did not end within {}; it goes on running",
                humantime::format_duration(args.timeout)
            ),
        )
        .into();
    }
    not_run(args, line, error)
}

/// The command was not run (125), with the reason.
fn not_run(args: &RunArgs, line: &str, error: impl std::fmt::Display) -> anyhow::Error {
    ExitWith::new(
        NOT_RUN_EXIT,
        format!(
            "cannot run {line:?} in session {} of instance {:?}: {error}",
            args.session, args.instance
        ),
    )
    .into()
}

/// The marks a shell's integration prints where a command's output ends and its prompt comes
/// back (docs/CONTRACT.md, "Commands and terminal state"): OSC 133 or 633, `D` or `A`.
const END_MARKS: [&[u8]; 4] = [b"\x1b]133;D", b"\x1b]133;A", b"\x1b]633;D", b"\x1b]633;A"];

/// Prints the part of the session's output that is the command's, as it arrives: the bytes from
/// its start (once known) on, each once, in order, up to the first mark of its end; the run's
/// answer then says where it really ended, and what is left up to there is printed from it (a
/// mark inside the output, printed by a shell the command started, only delays that part).
struct OutputPrinter {
    stdout: std::io::Stdout,
    text: Option<PlainText>,
    /// Where the command's output starts, once the watch or the answer said.
    start: Option<u64>,
    /// Output that came before the start was known.
    held: Vec<(u64, Bytes)>,
    /// The offset of the next byte not printed yet.
    next: u64,
    /// The bytes from `next` on that may be the start of an end mark, until more output tells.
    pending: Vec<u8>,
    /// An end mark was seen at `next`: the live output is printed no further.
    at_mark: bool,
    /// Output of the command never arrived (a gap, or more than the answer's last MiB).
    missed: bool,
    /// Some of the output was printed from the run's answer.
    took_from_answer: bool,
}

impl OutputPrinter {
    fn new(ansi: bool) -> Self {
        Self {
            stdout: std::io::stdout(),
            text: (!ansi).then(PlainText::default),
            start: None,
            held: Vec::new(),
            next: 0,
            pending: Vec::new(),
            at_mark: false,
            missed: false,
            took_from_answer: false,
        }
    }

    /// The command's output starts at `start`: what came from there on is printed.
    fn starts_at(&mut self, start: u64) -> Result<()> {
        if self.start.is_some() {
            return Ok(());
        }
        self.start = Some(start);
        self.next = start;
        for (offset, data) in std::mem::take(&mut self.held) {
            self.live(offset, &data)?;
        }
        Ok(())
    }

    /// Whether the live output may still bring bytes of the command before `end`.
    fn waits_for_output(&self, end: u64) -> bool {
        !self.at_mark && self.next + (self.pending.len() as u64) < end
    }

    /// One event of the viewer; `false` once the viewer has nothing more to give.
    fn event(&mut self, event: Result<Option<Event>, ptyhub_client::Error>) -> Result<bool> {
        match event {
            Ok(Some(Event::Output { offset, data })) => {
                if self.start.is_some() {
                    self.live(offset, &data)?;
                } else {
                    self.held.push((offset, data));
                }
                Ok(true)
            }
            Ok(Some(Event::Exited(_))) | Ok(None) | Err(_) => Ok(false),
            Ok(Some(_)) => Ok(true),
        }
    }

    /// Output at `offset` from the viewer, printed up to the first end mark.
    fn live(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let seen_to = self.next + self.pending.len() as u64;
        if self.at_mark || offset + data.len() as u64 <= seen_to {
            return Ok(());
        }
        if offset > seen_to {
            // A gap: what was held is output all the same, and what is lost is lost.
            self.missed = true;
            let pending = std::mem::take(&mut self.pending);
            self.write(&pending)?;
            self.next = offset;
        }
        let fresh = &data[(self.next + self.pending.len() as u64 - offset) as usize..];
        let mut bytes = std::mem::take(&mut self.pending);
        bytes.extend_from_slice(fresh);
        let (printable, at_mark) = match first_end_mark(&bytes) {
            Some(at) => (at, true),
            None => (bytes.len() - partial_end_mark(&bytes), false),
        };
        self.write(&bytes[..printable])?;
        self.next += printable as u64;
        self.at_mark = at_mark;
        if !at_mark {
            self.pending = bytes[printable..].to_vec();
        }
        Ok(())
    }

    /// Prints what is left up to `end`, where the command's output ended, from `answer`, its
    /// last bytes.
    fn finish(&mut self, end: u64, answer: &[u8]) -> Result<()> {
        if self.next >= end {
            return Ok(());
        }
        let answer_start = end.saturating_sub(answer.len() as u64);
        if self.next < answer_start {
            self.missed = true;
        }
        let from = self.next.max(answer_start);
        self.write(&answer[(from - answer_start) as usize..])?;
        self.took_from_answer = true;
        self.next = end;
        Ok(())
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let mut stdout = self.stdout.lock();
        match &mut self.text {
            Some(text) => stdout.write_all(text.of(bytes).as_bytes())?,
            None => stdout.write_all(bytes)?,
        }
        stdout.flush()?;
        Ok(())
    }
}

/// Where the first end mark in `bytes` starts.
fn first_end_mark(bytes: &[u8]) -> Option<usize> {
    END_MARKS
        .iter()
        .filter_map(|mark| bytes.windows(mark.len()).position(|window| window == *mark))
        .min()
}

/// How many bytes at the end of `bytes` may be the start of an end mark the next output ends.
fn partial_end_mark(bytes: &[u8]) -> usize {
    (1..END_MARKS[0].len())
        .rev()
        .find(|&length| {
            bytes.len() >= length
                && END_MARKS
                    .iter()
                    .any(|mark| mark.starts_with(&bytes[bytes.len() - length..]))
        })
        .unwrap_or(0)
}

/// Output as plain text while it streams, as the server's `text` format has it: escape
/// sequences and control characters taken out (vte parses them, across chunks), tabs and line
/// feeds kept.
#[derive(Default)]
struct PlainText {
    parser: vte::Parser,
    text: TextSink,
}

#[derive(Default)]
struct TextSink(String);

impl PlainText {
    fn of(&mut self, data: &[u8]) -> String {
        self.parser.advance(&mut self.text, data);
        std::mem::take(&mut self.text.0)
    }
}

impl vte::Perform for TextSink {
    fn print(&mut self, c: char) {
        self.0.push(c);
    }

    fn execute(&mut self, byte: u8) {
        if matches!(byte, b'\n' | b'\t') {
            self.0.push(char::from(byte));
        }
    }
}

/// One word as it is; several quoted for a POSIX shell where they need it and joined.
fn command_line(words: &[String]) -> String {
    match words {
        [line] => line.clone(),
        words => words
            .iter()
            .map(|word| shell_quoted(word))
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// `word` as a POSIX shell reads it back: bare when it holds only characters no shell treats
/// specially, else in single quotes (a quote inside as `'\''`).
fn shell_quoted(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    let timeout = match text.parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds >= 0.0 => Duration::from_secs_f64(seconds),
        Ok(_) => return Err("the timeout must be a positive number of seconds".to_owned()),
        Err(_) => humantime::parse_duration(text)
            .map_err(|error| format!("{error} (use for example 30, 30s or 500ms)"))?,
    };
    // The server reads 0 as "the default": refuse it rather than wait 30 s.
    if timeout < Duration::from_millis(1) {
        return Err("the timeout must be at least 1ms".to_owned());
    }
    if timeout > MAX_TIMEOUT {
        return Err("the timeout must be at most 5m".to_owned());
    }
    Ok(timeout)
}

/// What `run --json` prints: the REST answer of `POST .../run`.
#[derive(Debug, Serialize)]
struct RunView {
    command_id: u64,
    exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_base64: Option<String>,
    duration_ms: u64,
    truncated: bool,
    command: CommandView,
}

impl RunView {
    fn new(command: &Command, output: &[u8], truncated: bool, ansi: bool) -> Self {
        let view = CommandView::from(command);
        let (text, bytes) = if ansi {
            (
                None,
                Some(base64::engine::general_purpose::STANDARD.encode(output)),
            )
        } else {
            (Some(String::from_utf8_lossy(output).into_owned()), None)
        };
        Self {
            command_id: command.id,
            exit_code: command.exit_code,
            output: text,
            output_base64: bytes,
            duration_ms: view.duration_ms.unwrap_or(0),
            truncated,
            command: view,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_word_is_a_shell_line_and_several_are_an_argv() {
        let words = |words: &[&str]| {
            words
                .iter()
                .map(|word| (*word).to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            command_line(&words(&["make && make test"])),
            "make && make test"
        );
        assert_eq!(command_line(&words(&["echo", "hi"])), "echo hi");
        assert_eq!(
            command_line(&words(&["sh", "-c", "exit 5"])),
            "sh -c 'exit 5'"
        );
        assert_eq!(
            command_line(&words(&["echo", "it's", ""])),
            r"echo 'it'\''s' ''"
        );
    }

    #[test]
    fn streamed_text_loses_its_sequences_even_when_cut_between_chunks() {
        let mut text = PlainText::default();
        let chunks: [&[u8]; 4] = [b"\x1b[1;3", b"1mred\x1b[", b"0m\r\n\tdone", b"\x07\n"];
        let streamed: String = chunks.iter().map(|chunk| text.of(chunk)).collect();
        assert_eq!(streamed, "red\n\tdone\n");
    }

    #[test]
    fn live_output_stops_at_the_mark_of_the_commands_end_even_cut_between_chunks() {
        let mut printer = OutputPrinter::new(true);
        printer.starts_at(100).unwrap();
        printer.live(93, b"typed\r\nout").unwrap();
        assert_eq!((printer.next, printer.at_mark), (103, false));
        printer.live(103, b"put\r\n\x1b]13").unwrap();
        assert_eq!(printer.pending, b"\x1b]13", "a mark may be starting");
        printer.live(112, b"3;D;0\x07\x1b]133;A\x07$ ").unwrap();
        assert_eq!((printer.next, printer.at_mark), (108, true));
        printer.live(130, b"more prompt").unwrap();
        assert_eq!(printer.next, 108, "nothing after the end is printed");
        assert_eq!(first_end_mark(b"a\x1b]633;A"), Some(1));
        assert_eq!(partial_end_mark(b"out\x1b"), 1);
        assert_eq!(partial_end_mark(b"out\x1b]2;title"), 0);
    }

    #[test]
    fn a_timeout_is_seconds_or_a_duration_within_five_minutes() {
        assert_eq!(parse_timeout("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_timeout("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_timeout("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_timeout("0").is_err());
        assert!(parse_timeout("301").is_err());
        assert!(parse_timeout("soon").is_err());
    }
}
