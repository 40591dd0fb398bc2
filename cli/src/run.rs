//! `run`: a command typed at a live session's shell prompt, as a colleague would (everyone
//! attached sees it), its output printed and its exit code returned as `run`'s own, so a
//! script can run a step in a terminal people watch as it would run it locally. Several words
//! after `--` are quoted for the shell, so the shell runs them as the argv given (as `docker
//! exec` does); one word is a shell line, run as is.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use base64::Engine as _;
use ptyhub_client::{Command, ErrorCode};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use serde::Serialize;

use crate::commands::CommandView;
use crate::connection::ConnectionArgs;
use crate::manage::{Output, print_json};
use crate::screen::ExitWith;

/// The exit status of `run` when the command did not end in time, as `timeout(1)` has it.
const TIMED_OUT_EXIT: u8 = 124;

/// The exit status of `run` when the shell reported no exit code for the command.
const NO_EXIT_CODE: u8 = 1;

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
/// is [`ExitWith`] 124, and any other error exits 1.
pub async fn run(connection: &ConnectionArgs, args: RunArgs, output: Output) -> Result<ExitCode> {
    let line = command_line(&args.command);
    let format = if args.ansi {
        broker_pb::ScreenFormat::Ansi
    } else {
        broker_pb::ScreenFormat::Text
    };
    let answer = connection
        .client()
        .await?
        .run(session_pb::RunRequest {
            instance: args.instance.clone(),
            session_id: args.session.clone(),
            command: line.clone(),
            timeout_ms: u32::try_from(args.timeout.as_millis()).unwrap_or(u32::MAX),
            force: args.force,
            format: format.into(),
        })
        .await;
    let ran = match answer {
        Ok(ran) => ran,
        Err(error) if error.code() == Some(ErrorCode::TimedOut) => {
            return Err(ExitWith::new(
                TIMED_OUT_EXIT,
                format!(
                    "{line:?} did not end within {}; it goes on running",
                    humantime::format_duration(args.timeout)
                ),
            )
            .into());
        }
        Err(error) => {
            return Err(error).with_context(|| {
                format!(
                    "cannot run {line:?} in session {} of instance {:?}",
                    args.session, args.instance
                )
            });
        }
    };
    let command = Command::from(
        ran.command
            .context("the server answered the run without its command")?,
    );
    let status = command.exit_code.map_or(NO_EXIT_CODE, |code| {
        u8::try_from(code.clamp(0, 255)).unwrap_or(NO_EXIT_CODE)
    });
    match output {
        Output::Json => print_json(&RunView::new(
            &command,
            &ran.output,
            ran.truncated,
            args.ansi,
        ))?,
        Output::Plain => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&ran.output)?;
            stdout.flush()?;
            if ran.truncated {
                eprintln!(
                    "ptyhub: the output's start is missing (over 1 MiB, or gone from the session's output)"
                );
            }
        }
    }
    Ok(ExitCode::from(status))
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
    fn a_timeout_is_seconds_or_a_duration_within_five_minutes() {
        assert_eq!(parse_timeout("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_timeout("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_timeout("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_timeout("0").is_err());
        assert!(parse_timeout("301").is_err());
        assert!(parse_timeout("soon").is_err());
    }
}
