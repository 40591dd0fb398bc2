//! `ptyhub`: the whole system in one process (`ptyhub up`), and the client for people and scripts (attach like `docker exec -it`, run like `kubectl
//! exec`, manage instances and sessions).
//!
//! Errors are one line on stderr and a non-zero exit code; `attach` and `exec` exit with the
//! remote process's exit code, `run` with its command's, `wait` and `run` with 124 when they
//! time out.

#![forbid(unsafe_code)]

mod attach;
mod commands;
mod connection;
mod manage;
mod mcp;
mod recording;
mod run;
mod screen;
mod terminal;
mod up;
mod webhook;

use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use ptyhub_client::{AttachOptions, ControlMode, NewSession, Role, Selector};
use ptyhub_proto::broker::v1 as broker_pb;

use crate::attach::AttachOutcome;
use crate::connection::ConnectionArgs;
use crate::manage::Output;

#[derive(Debug, Parser)]
#[command(
    name = "ptyhub",
    version,
    about = "Persistent terminals in containers: attach, run and manage sessions"
)]
struct Cli {
    #[command(flatten)]
    connection: ConnectionArgs,
    /// Print JSON instead of columns.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run pty-broker, session-api and the gateway in this process (SQLite in the data dir,
    /// local PTYs, Docker when an engine answers) and print the web page's URL.
    Up(up::UpArgs),
    /// Register, list and remove instances (the targets terminals run in).
    #[command(subcommand)]
    Instance(InstanceCommand),
    /// List the sessions of an instance.
    Ls {
        instance: String,
        /// Closed sessions too.
        #[arg(long)]
        all: bool,
    },
    /// Start a new session.
    New {
        instance: String,
        #[arg(long)]
        name: Option<String>,
        /// An alias to open it by later (repeatable).
        #[arg(long = "alias")]
        aliases: Vec<String>,
        /// Who may type: `exclusive` (one controller at a time) or `shared` (every attached
        /// client that may type does).
        #[arg(long = "control", default_value = "exclusive")]
        control_mode: ControlMode,
        /// A program to run instead of the instance's command (after `--`); needs an admin
        /// token or one allowed to choose commands.
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Rename a session.
    Rename {
        instance: String,
        session: String,
        name: String,
    },
    /// Who controls a live session and who asks to (no ACTION), or: `exclusive` / `shared` to
    /// set who may type (attached clients change role at once, without reconnecting);
    /// `request` to ask the controller for control (granted to your newest attach, or kept
    /// for your next one); `grant ID` / `decline ID` to answer a request, as the controller
    /// (declining your own request withdraws it).
    #[command(
        override_usage = "ptyhub control INSTANCE SESSION [exclusive|shared|request|grant ID|decline ID]"
    )]
    Control {
        instance: String,
        session: String,
        /// `exclusive`, `shared`, `request`, `grant` or `decline`; none prints the control
        /// state.
        #[arg(value_parser = parse_control_action)]
        action: Option<ControlAction>,
        /// The request `grant` and `decline` answer, as `ptyhub control INSTANCE SESSION` and
        /// an attached controller's notice number it.
        request_id: Option<u64>,
    },
    /// Restart a session's command (same id, same size).
    Reset { instance: String, session: String },
    /// Give a live session more aliases to open it by.
    #[command(subcommand)]
    Alias(AliasCommand),
    /// Close a session, ending its processes.
    Rm { instance: String, session: String },
    /// Attach this terminal to a session: it shows the session's screen, then its output
    /// (Ctrl-P Ctrl-Q detaches).
    Attach(AttachArgs),
    /// Serve the Model Context Protocol on stdin and stdout for a local agent (`claude mcp add
    /// ptyhub -- ptyhub mcp`), relayed to this gateway's `/mcp` with these credentials.
    Mcp(mcp::McpArgs),
    /// Print what a session's terminal shows now.
    Screen(screen::ScreenArgs),
    /// Type into a session without attaching, and print the output offset it was typed at.
    Send(screen::SendArgs),
    /// Wait until a session's screen matches a pattern, or its terminal reaches a state (--for
    /// prompt, idle, input or exit), and print the screen; exit 124 on timeout, 1 if the process
    /// ends first.
    Wait(screen::WaitArgs),
    /// Download a closed session's recording (asciicast v2, for `asciinema play`).
    Recording(recording::RecordingArgs),
    /// List the commands a session's shell ran: id, exit code (blank while it runs), duration
    /// and command line, oldest first.
    Commands(commands::CommandsArgs),
    /// Write one command's output to stdout (as `ptyhub commands` numbers them).
    #[command(name = "command-output")]
    Output(commands::CommandOutputArgs),
    /// Type a command at a session's shell prompt (everyone attached sees it), print its
    /// output as it comes and exit with its exit code (1 when the shell reported none, 124
    /// when it did not end within --timeout, 125 when it could not run).
    Run(run::RunArgs),
    /// Register, list and delete an instance's webhooks (HTTP callbacks for terminal state
    /// changes and finished commands).
    #[command(subcommand)]
    Webhook(webhook::WebhookCommand),
    /// Run a command in a new session, stream its output, exit with its exit code.
    Exec {
        instance: String,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum AliasCommand {
    /// Add aliases to a live session: one it has already is no change; one another live
    /// session holds is refused (at most 16 in all).
    Add {
        instance: String,
        session: String,
        #[arg(required = true)]
        aliases: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum InstanceCommand {
    /// Register an instance.
    Add(manage::InstanceAddArgs),
    /// List instances.
    Ls,
    /// Remove an instance, closing its sessions.
    Rm { instance: String },
}

#[derive(Debug, clap::Args)]
struct AttachArgs {
    instance: String,
    /// The session id. Without it (and without --alias), the `default` session.
    #[arg(conflicts_with_all = ["alias", "default"])]
    session: Option<String>,
    /// Open the session with this alias, creating it when absent.
    #[arg(long)]
    alias: Option<String>,
    /// Open the instance's `default` session, creating it when absent.
    #[arg(long)]
    default: bool,
    /// Watch without typing (read-only viewer).
    #[arg(long)]
    view: bool,
    /// Attach watching (as --view) and ask the controller for control on this stream: typing
    /// is sent once it is granted, and a decline is said.
    #[arg(long)]
    request_control: bool,
    /// The key sequence that detaches and leaves the session running; empty disables it.
    #[arg(long, default_value = "ctrl-p,ctrl-q", env = "PTYHUB_DETACH_KEYS")]
    detach_keys: String,
    /// Replay the raw output from this offset instead of starting with a snapshot of the screen.
    #[arg(long)]
    since: Option<u64>,
}

/// What `ptyhub control INSTANCE SESSION ACTION` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ControlAction {
    /// Set the session's control mode.
    Mode(ControlMode),
    /// Ask for control without a stream (a standing request).
    Request,
    /// Grant a pending request by its id.
    Grant,
    /// Decline a pending request by its id.
    Decline,
}

fn parse_control_action(text: &str) -> Result<ControlAction, String> {
    match text {
        "request" => Ok(ControlAction::Request),
        "grant" => Ok(ControlAction::Grant),
        "decline" => Ok(ControlAction::Decline),
        mode => mode
            .parse()
            .map(ControlAction::Mode)
            .map_err(|error| format!("{error}; nor request, grant ID or decline ID")),
    }
}

/// What the argument parser cannot say alone: `grant` and `decline` name a request, and
/// nothing else takes one.
fn check_control_usage(command: &Command) -> Result<(), clap::Error> {
    let Command::Control {
        action, request_id, ..
    } = command
    else {
        return Ok(());
    };
    let problem = match (action, request_id) {
        (Some(ControlAction::Grant | ControlAction::Decline), None) => {
            "grant and decline need the id of the request they answer (ptyhub control INSTANCE SESSION lists them)"
        }
        (Some(ControlAction::Mode(_) | ControlAction::Request) | None, Some(_)) => {
            "only grant and decline take a request id"
        }
        _ => return Ok(()),
    };
    let mut cli = Cli::command();
    Err(cli.error(clap::error::ErrorKind::ArgumentConflict, problem))
}

fn main() -> ExitCode {
    // Before anything else, and before any thread: `ptyhub up` starts local sessions through
    // this binary as their keeper, which forks.
    ptyhub_stack::run_session_keeper_if_asked();
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    if let Err(error) = check_control_usage(&cli.command) {
        error.exit();
    }
    // Derived fields lose the order of `send`'s mixed --text and --key; the matches keep it.
    let send_items = matches
        .subcommand_matches("send")
        .map(screen::input_items_in_order)
        .unwrap_or_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("ptyhub: cannot start: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(cli, send_items));
    // Tokio reads stdin on a blocking thread that cannot be cancelled: waiting for it would
    // hang until the user pressed a key after the session ended.
    runtime.shutdown_background();
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("ptyhub: {}", one_line(&error));
            match error.downcast_ref::<screen::ExitWith>() {
                Some(exit) => ExitCode::from(exit.status),
                None => ExitCode::FAILURE,
            }
        }
    }
}

/// The error as one line: each cause once, a gRPC status by its message (with a hint where the
/// user can act on it), never a multi-line dump.
fn one_line(error: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in error.chain() {
        let status = cause.downcast_ref::<tonic::Status>().or_else(|| {
            cause
                .downcast_ref::<ptyhub_client::Error>()
                .and_then(ptyhub_client::Error::status)
        });
        let part = match status {
            Some(status) => describe_status(status),
            None => cause.to_string(),
        };
        // Transport errors repeat their source in their own message.
        if parts.last().is_some_and(|last| last.ends_with(&part)) {
            continue;
        }
        parts.push(part);
    }
    parts.join(": ").replace(['\n', '\r'], " ")
}

fn describe_status(status: &tonic::Status) -> String {
    let message = if status.message().is_empty() {
        format!("{:?}", status.code()).to_lowercase()
    } else {
        status.message().to_owned()
    };
    match status.code() {
        tonic::Code::Unauthenticated => format!(
            "{message} (the server refused the token: check PTYHUB_TOKEN, PTYHUB_TOKEN_FILE or the data dir)"
        ),
        tonic::Code::PermissionDenied => format!("{message} (the token does not allow this)"),
        _ => message,
    }
}

async fn run(cli: Cli, send_items: Vec<broker_pb::InputItem>) -> Result<ExitCode> {
    let output = if cli.json {
        Output::Json
    } else {
        Output::Plain
    };
    let connection = &cli.connection;
    match cli.command {
        Command::Up(args) => {
            up::run_up(args, &connection.data_dir, connection.given_token()?).await?
        }
        Command::Instance(InstanceCommand::Add(args)) => {
            manage::instance_add(connection, args, output).await?
        }
        Command::Instance(InstanceCommand::Ls) => manage::instance_ls(connection, output).await?,
        Command::Instance(InstanceCommand::Rm { instance }) => {
            manage::instance_rm(connection, instance, output).await?
        }
        Command::Ls { instance, all } => {
            manage::session_ls(connection, instance, all, output).await?
        }
        Command::New {
            instance,
            name,
            aliases,
            control_mode,
            command,
        } => {
            let new = NewSession {
                name: name.unwrap_or_default(),
                aliases,
                size: terminal::local_terminal_size(),
                command,
                control_mode,
            };
            manage::session_new(connection, instance, new, output).await?
        }
        Command::Rename {
            instance,
            session,
            name,
        } => manage::session_rename(connection, instance, session, name, output).await?,
        Command::Control {
            instance,
            session,
            action,
            request_id,
        } => match (action, request_id) {
            (Some(ControlAction::Mode(control_mode)), _) => {
                manage::session_control_mode(connection, instance, session, control_mode, output)
                    .await?
            }
            (Some(ControlAction::Request), _) => {
                manage::control_request(connection, instance, session, output).await?
            }
            (Some(ControlAction::Grant), Some(request_id)) => {
                manage::control_answer(connection, instance, session, request_id, true, output)
                    .await?
            }
            (Some(ControlAction::Decline), Some(request_id)) => {
                manage::control_answer(connection, instance, session, request_id, false, output)
                    .await?
            }
            // `check_control_usage` turned the other pairs away before.
            _ => manage::control_state(connection, instance, session, output).await?,
        },
        Command::Reset { instance, session } => {
            manage::session_reset(connection, instance, session, output).await?
        }
        Command::Alias(AliasCommand::Add {
            instance,
            session,
            aliases,
        }) => manage::session_alias_add(connection, instance, session, aliases, output).await?,
        Command::Rm { instance, session } => {
            manage::session_rm(connection, instance, session, output).await?
        }
        Command::Mcp(args) => mcp::mcp(connection, args).await?,
        Command::Screen(args) => screen::screen(connection, args, output).await?,
        Command::Send(args) => screen::send(connection, args, send_items, output).await?,
        Command::Wait(args) => return screen::wait(connection, args, output).await,
        Command::Recording(args) => recording::download_recording(connection, args).await?,
        Command::Commands(args) => commands::commands(connection, args, output).await?,
        Command::Output(args) => commands::command_output(connection, args).await?,
        Command::Run(args) => return run::run(connection, args, output).await,
        Command::Attach(args) => return attach_terminal(connection, args).await,
        Command::Webhook(command) => webhook::webhook(connection, command, output).await?,
        Command::Exec { instance, command } => {
            return exec_command(connection, instance, command).await;
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn attach_terminal(connection: &ConnectionArgs, args: AttachArgs) -> Result<ExitCode> {
    let detach_keys = terminal::DetachKeys::parse(&args.detach_keys)?;
    let role = if args.view || args.request_control {
        Role::Viewer
    } else {
        Role::Controller
    };
    let (selector, what) = match (args.session, args.alias) {
        (Some(session_id), _) => {
            let what = format!("session {session_id}");
            (Selector::Id(session_id), what)
        }
        (None, Some(alias)) => {
            let what = format!("the session with alias {alias:?}");
            (Selector::Alias(alias), what)
        }
        (None, None) => (Selector::Default, "the default session".to_owned()),
    };
    let create_if_absent = !matches!(selector, Selector::Id(_)) && role == Role::Controller;
    let client = connection.client().await?;
    let size = terminal::local_terminal_size();
    let session = client
        .resolve_session_as(&args.instance, selector, create_if_absent, size, role)
        .await
        .with_context(|| format!("cannot open {what} on instance {:?}", args.instance))?
        .session;
    let options = AttachOptions {
        role,
        size,
        since: args.since,
        // An explicit --since asks for the raw bytes from there.
        snapshot: args.since.is_none(),
        ..AttachOptions::default()
    };
    let mut attachment = client
        .attach(&args.instance, &session.id, options)
        .await
        .with_context(|| format!("cannot attach to {what} on instance {:?}", args.instance))?;
    let place = attach::SessionPlace {
        instance: args.instance.clone(),
        session_id: session.id.clone(),
        ask_for_control: args.request_control,
    };

    let mut input = attach::spawn_stdin_reader(detach_keys, attach::InputMode::Keystrokes);
    let mut resizes = attach::spawn_resize_watcher()?;
    // Installed before raw mode: from then on no signal may end the process without the guard
    // restoring the terminal. In raw mode Ctrl-C is a byte for the remote side; a SIGINT from
    // elsewhere still ends the attach.
    let mut signals = EndingSignals::install()?;
    let outcome = {
        let _raw_mode = terminal::RawModeGuard::enable()?;
        // Dropped before raw mode is undone: a snapshot or the program may have switched the
        // terminal's modes, and they are put back on every way out.
        let _display_modes = terminal::DisplayModesGuard::new();
        let stream = attach::run_attach(&mut attachment, &place, role, &mut input, &mut resizes);
        tokio::select! {
            outcome = stream => outcome,
            signal = signals.recv() => Ok(AttachOutcome::Interrupted { signal }),
        }
    };
    match outcome? {
        AttachOutcome::Exited { code, signal } => {
            match signal {
                Some(signal) => eprintln!("\n[process ended by signal {signal}]"),
                None => eprintln!("\n[process exited with code {code}]"),
            }
            Ok(exit_code(code))
        }
        AttachOutcome::Detached => {
            eprintln!("\n[detached; the session keeps running]");
            Ok(ExitCode::SUCCESS)
        }
        AttachOutcome::TakenOver => {
            bail!("the session was taken over by another client (not reconnecting)")
        }
        AttachOutcome::Closed { reason } => bail!("the session was closed: {reason}"),
        AttachOutcome::Interrupted { signal } => {
            eprintln!(
                "\n[ptyhub ended by {}; the session keeps running]",
                signal_name(signal)
            );
            Ok(exit_code(128 + signal))
        }
    }
}

async fn exec_command(
    connection: &ConnectionArgs,
    instance: String,
    command: Vec<String>,
) -> Result<ExitCode> {
    let client = connection.client().await?;
    let started = match terminal::local_terminal_size() {
        Some(size) => client.exec_at_size(&instance, command, size).await,
        None => client.exec(&instance, command).await,
    };
    let mut exec =
        started.with_context(|| format!("cannot start the command on instance {instance:?}"))?;
    let mut input =
        attach::spawn_stdin_reader(terminal::DetachKeys::parse("")?, attach::InputMode::Piped);
    let mut signals = EndingSignals::install()?;
    let ended = tokio::select! {
        ended = attach::run_exec(&mut exec, &mut input) => ended.map(|_| None),
        // Ending ptyhub ends the command, as it would end a local one.
        signal = signals.recv() => Ok(Some(signal)),
    };
    match ended {
        Ok(None) => {
            let session_id = exec.session_id().to_owned();
            let status = exec.wait().await?;
            // The session was only for this command: it is closed, not left exited.
            client
                .close_session(&instance, &session_id)
                .await
                .with_context(|| format!("the command ended but its session {session_id}"))?;
            Ok(exit_code(status.code))
        }
        Ok(Some(signal)) => {
            exec.close()
                .await
                .with_context(|| format!("ended by {} but", signal_name(signal)))?;
            Ok(exit_code(128 + signal))
        }
        Err(error) => {
            // The session was only for this command: close it however the command ended.
            let _ = exec.close().await;
            Err(error)
        }
    }
}

/// The signals that end `attach` and `exec` cleanly instead of killing them outright: the
/// terminal is restored, and `exec` closes its session.
#[derive(Debug)]
struct EndingSignals {
    hangup: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl EndingSignals {
    fn install() -> Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        let install = |kind: SignalKind| signal(kind).context("cannot install a signal handler");
        Ok(Self {
            hangup: install(SignalKind::hangup())?,
            interrupt: install(SignalKind::interrupt())?,
            quit: install(SignalKind::quit())?,
            terminate: install(SignalKind::terminate())?,
        })
    }

    /// Waits for one of them and returns its number.
    async fn recv(&mut self) -> i32 {
        use nix::sys::signal::Signal;
        let signal = tokio::select! {
            _ = self.hangup.recv() => Signal::SIGHUP,
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.quit.recv() => Signal::SIGQUIT,
            _ = self.terminate.recv() => Signal::SIGTERM,
        };
        signal as i32
    }
}

fn signal_name(signal: i32) -> String {
    nix::sys::signal::Signal::try_from(signal)
        .map(|signal| signal.as_str().to_owned())
        .unwrap_or_else(|_| format!("signal {signal}"))
}

fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(1))
}
