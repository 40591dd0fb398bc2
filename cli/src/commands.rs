//! The command-history commands, for people and scripts that want to know what ran in a session
//! without reading its screen: `commands` lists what its shell ran (id, exit code, duration,
//! command line), as its shell integration marked it, and `command-output` writes one
//! command's output to stdout, as text or as the bytes the program wrote.

use std::io::Write as _;
use std::time::Duration;

use anyhow::{Context, Result};
use ptyhub_client::{Command, TerminalActivity};
use serde::Serialize;

use crate::connection::ConnectionArgs;
use crate::manage::{Output, TerminalView, print_json, print_table, rfc3339};

#[derive(Debug, clap::Args)]
pub struct CommandsArgs {
    pub instance: String,
    /// The session id.
    pub session: String,
    /// Only commands with a greater id (the last id a previous listing printed).
    #[arg(long, value_name = "ID", default_value_t = 0)]
    pub after: u64,
    /// At most this many commands (1..=1000, default 100).
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
}

#[derive(Debug, clap::Args)]
pub struct CommandOutputArgs {
    pub instance: String,
    /// The session id.
    pub session: String,
    /// The command's id, as `ptyhub commands` lists it.
    pub id: u64,
    /// The bytes as the program wrote them (colours and all) instead of plain text.
    #[arg(long)]
    pub ansi: bool,
}

pub async fn commands(
    connection: &ConnectionArgs,
    args: CommandsArgs,
    output: Output,
) -> Result<()> {
    let page = connection
        .client()
        .await?
        .list_commands(
            &args.instance,
            &args.session,
            args.after,
            args.limit.unwrap_or(0),
        )
        .await
        .with_context(|| {
            format!(
                "cannot list the commands of session {} of instance {:?}",
                args.session, args.instance
            )
        })?;
    let commands: Vec<Command> = page.commands.into_iter().map(Command::from).collect();
    match output {
        Output::Json => {
            // A report this build cannot read (a newer server's progress kind) reads as none.
            let terminal = page
                .terminal
                .and_then(|terminal| TerminalActivity::try_from(terminal).ok())
                .unwrap_or_default();
            print_json(&CommandListView {
                commands: commands.iter().map(CommandView::from).collect(),
                first_kept_id: page.first_kept_id,
                last_id: page.last_id,
                terminal: TerminalView::from(&terminal),
            })
        }
        Output::Plain => {
            print_table(
                &["ID", "EXIT", "DURATION", "COMMAND"],
                commands.iter().map(|command| {
                    vec![
                        command.id.to_string(),
                        command
                            .exit_code
                            .map(|code| code.to_string())
                            .unwrap_or_default(),
                        duration(command).map(format_duration).unwrap_or_default(),
                        one_line(&command.command),
                    ]
                }),
            );
            Ok(())
        }
    }
}

pub async fn command_output(connection: &ConnectionArgs, args: CommandOutputArgs) -> Result<()> {
    let output = connection
        .client()
        .await?
        .command_output(&args.instance, &args.session, args.id, args.ansi)
        .await
        .with_context(|| {
            format!(
                "cannot read the output of command {} of session {} of instance {:?}",
                args.id, args.session, args.instance
            )
        })?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&output.data)?;
    stdout.flush()?;
    Ok(())
}

/// How long the command ran; `None` while it runs.
fn duration(command: &Command) -> Option<Duration> {
    let ended_at = command.ended_at?;
    Some(
        ended_at
            .duration_since(command.started_at)
            .unwrap_or_default(),
    )
}

/// A duration as people read it, to the millisecond: `12ms`, `1s 500ms`, `2m 3s`.
fn format_duration(duration: Duration) -> String {
    let precision = if duration >= Duration::from_secs(60) {
        Duration::from_secs(1)
    } else {
        Duration::from_millis(1)
    };
    let rounded = Duration::from_nanos(
        u64::try_from(duration.as_nanos() / precision.as_nanos() * precision.as_nanos())
            .unwrap_or(u64::MAX),
    );
    if rounded.is_zero() {
        return "0ms".to_owned();
    }
    humantime::format_duration(rounded).to_string()
}

/// A command line on one row of the table: a multi-line command's newlines as `↵`.
fn one_line(command: &str) -> String {
    command.replace("\r\n", "\n").replace(['\n', '\r'], "↵")
}

/// What `commands --json` prints: the REST answer of `GET .../commands`.
#[derive(Debug, Serialize)]
struct CommandListView {
    commands: Vec<CommandView>,
    first_kept_id: u64,
    last_id: u64,
    terminal: TerminalView,
}

/// A command as the REST API gives it (docs/CONTRACT.md, "Commands").
#[derive(Debug, Serialize)]
pub struct CommandView {
    id: u64,
    command: String,
    cwd: Option<String>,
    started_at: String,
    ended_at: Option<String>,
    exit_code: Option<i32>,
    pub duration_ms: Option<u64>,
    output_start: u64,
    output_end: Option<u64>,
}

impl From<&Command> for CommandView {
    fn from(command: &Command) -> Self {
        Self {
            id: command.id,
            command: command.command.clone(),
            cwd: command.cwd.clone(),
            started_at: rfc3339(command.started_at),
            ended_at: command.ended_at.map(rfc3339),
            exit_code: command.exit_code,
            duration_ms: duration(command)
                .map(|duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)),
            output_start: command.output_start,
            output_end: command.output_end,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_to_the_millisecond_and_to_the_second_past_a_minute() {
        assert_eq!(format_duration(Duration::ZERO), "0ms");
        assert_eq!(format_duration(Duration::from_micros(300)), "0ms");
        assert_eq!(format_duration(Duration::from_micros(12_345)), "12ms");
        assert_eq!(format_duration(Duration::from_millis(1_500)), "1s 500ms");
        assert_eq!(format_duration(Duration::from_millis(123_456)), "2m 3s");
    }

    #[test]
    fn a_command_line_takes_one_row() {
        assert_eq!(
            one_line("for i in 1 2\ndo echo $i\r\ndone"),
            "for i in 1 2↵do echo $i↵done"
        );
    }
}
