//! The record commands: instances and sessions listed, created, renamed, reset and removed, in
//! plain columns for people or JSON for scripts.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use ptyhub_client::{NewSession, TerminalActivity, TerminalState};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use serde::Serialize;

use crate::connection::ConnectionArgs;

/// How a command prints what it got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Plain,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct InstanceAddArgs {
    /// A unique name; instances are addressable by id or name.
    pub name: String,
    /// Run terminals in this Docker container (id or name) on the broker's Docker engine.
    #[arg(long, value_name = "CONTAINER", conflicts_with = "local")]
    pub docker: Option<String>,
    /// Run terminals on the broker's own host.
    #[arg(long)]
    pub local: bool,
    /// The default command of new sessions, as argv (repeat for each argument, or give it after
    /// `--`). May contain `{session_id}`.
    #[arg(last = true)]
    pub command: Vec<String>,
    /// Environment for new sessions, NAME=VALUE (repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_pair)]
    pub env: Vec<(String, String)>,
    /// Working directory of new sessions.
    #[arg(long)]
    pub cwd: Option<String>,
    /// User that new sessions run as.
    #[arg(long)]
    pub user: Option<String>,
    /// Live sessions allowed at once (1..=50, default 5).
    #[arg(long)]
    pub max_sessions: Option<u32>,
    /// A label, KEY=VALUE (repeatable), for example project_id=42.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_pair)]
    pub labels: Vec<(String, String)>,
    /// Start new sessions' shells without the shell integration that marks their commands
    /// (then `ptyhub commands` lists none).
    #[arg(long)]
    pub no_shell_integration: bool,
}

fn parse_pair(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("expected NAME=VALUE, got {text:?}")),
    }
}

pub async fn instance_add(
    connection: &ConnectionArgs,
    args: InstanceAddArgs,
    output: Output,
) -> Result<()> {
    let target = match (&args.docker, args.local) {
        (Some(container), _) => broker_pb::target::Kind::Docker(broker_pb::DockerTarget {
            container: container.clone(),
        }),
        (None, true) => broker_pb::target::Kind::Local(broker_pb::LocalTarget {}),
        (None, false) => bail!("say where terminals run: --local or --docker CONTAINER"),
    };
    let name = args.name;
    let instance = connection
        .client()
        .await?
        .register_instance(session_pb::RegisterInstanceRequest {
            name: name.clone(),
            target: Some(broker_pb::Target { kind: Some(target) }),
            command: args.command,
            env: args.env.into_iter().collect(),
            cwd: args.cwd.unwrap_or_default(),
            user: args.user.unwrap_or_default(),
            max_sessions: args.max_sessions.unwrap_or(0),
            labels: args.labels.into_iter().collect(),
            broker_id: String::new(),
            // Absent is on: the server's default.
            shell_integration: args.no_shell_integration.then_some(false),
            ..Default::default()
        })
        .await
        .with_context(|| format!("cannot register instance {name:?}"))?;
    print_instances(&[instance], output)
}

pub async fn instance_ls(connection: &ConnectionArgs, output: Output) -> Result<()> {
    let instances = connection
        .client()
        .await?
        .instances()
        .await
        .context("cannot list the instances")?;
    print_instances(&instances, output)
}

pub async fn instance_rm(
    connection: &ConnectionArgs,
    instance: String,
    output: Output,
) -> Result<()> {
    let deleted = connection
        .client()
        .await?
        .delete_instance(&instance)
        .await
        .with_context(|| format!("cannot remove instance {instance:?}"))?;
    match output {
        Output::Json => print_json(&serde_json::json!({
            "instance_id": deleted.instance_id,
            "closed_sessions": deleted.closed_sessions,
        })),
        Output::Plain => {
            println!(
                "removed {} ({} sessions closed)",
                deleted.instance_id, deleted.closed_sessions
            );
            Ok(())
        }
    }
}

pub async fn session_ls(
    connection: &ConnectionArgs,
    instance: String,
    include_closed: bool,
    output: Output,
) -> Result<()> {
    let sessions = connection
        .client()
        .await?
        .sessions(&instance, include_closed)
        .await
        .with_context(|| format!("cannot list the sessions of instance {instance:?}"))?;
    print_sessions(&sessions, output)
}

pub async fn session_new(
    connection: &ConnectionArgs,
    instance: String,
    name: Option<String>,
    aliases: Vec<String>,
    command: Vec<String>,
    output: Output,
) -> Result<()> {
    let created = connection
        .client()
        .await?
        .create_session(
            &instance,
            NewSession {
                name: name.unwrap_or_default(),
                aliases,
                size: crate::terminal::local_terminal_size(),
                command,
            },
        )
        .await
        .with_context(|| format!("cannot start a session on instance {instance:?}"))?;
    print_sessions(&[created], output)
}

pub async fn session_rename(
    connection: &ConnectionArgs,
    instance: String,
    session_id: String,
    name: String,
    output: Output,
) -> Result<()> {
    let renamed = connection
        .client()
        .await?
        .rename_session(&instance, &session_id, &name)
        .await
        .with_context(|| format!("cannot rename session {session_id} of instance {instance:?}"))?;
    print_sessions(&[renamed], output)
}

pub async fn session_reset(
    connection: &ConnectionArgs,
    instance: String,
    session_id: String,
    output: Output,
) -> Result<()> {
    let reset = connection
        .client()
        .await?
        .reset_session(&instance, &session_id)
        .await
        .with_context(|| format!("cannot reset session {session_id} of instance {instance:?}"))?;
    print_sessions(&[reset], output)
}

pub async fn session_rm(
    connection: &ConnectionArgs,
    instance: String,
    session_id: String,
    output: Output,
) -> Result<()> {
    let closed = connection
        .client()
        .await?
        .close_session(&instance, &session_id)
        .await
        .with_context(|| format!("cannot close session {session_id} of instance {instance:?}"))?;
    print_sessions(&[closed], output)
}

/// An instance as scripts see it.
#[derive(Debug, Serialize)]
struct InstanceView {
    id: String,
    name: String,
    target: String,
    command: Vec<String>,
    max_sessions: u32,
    live_sessions: u32,
    labels: BTreeMap<String, String>,
    broker_id: String,
    shell_integration: bool,
}

impl From<&session_pb::Instance> for InstanceView {
    fn from(instance: &session_pb::Instance) -> Self {
        Self {
            id: instance.id.clone(),
            name: instance.name.clone(),
            target: describe_target(instance.target.as_ref()),
            command: instance.command.clone(),
            max_sessions: instance.max_sessions,
            live_sessions: instance.live_sessions,
            labels: instance
                .labels
                .iter()
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
            broker_id: instance.broker_id.clone(),
            shell_integration: instance.shell_integration,
        }
    }
}

fn describe_target(target: Option<&broker_pb::Target>) -> String {
    match target.and_then(|target| target.kind.as_ref()) {
        Some(broker_pb::target::Kind::Local(_)) => "local".to_owned(),
        Some(broker_pb::target::Kind::Docker(docker)) => format!("docker:{}", docker.container),
        None => "unknown".to_owned(),
    }
}

/// A session as scripts see it.
#[derive(Debug, Serialize)]
struct SessionView {
    id: String,
    name: String,
    status: String,
    close_reason: Option<String>,
    exit_code: Option<i32>,
    exit_signal: Option<i32>,
    aliases: Vec<String>,
    attached_clients: u32,
    created_at: Option<String>,
    last_activity_at: Option<String>,
    /// What the terminal is doing, as the REST session body says it.
    state: &'static str,
    last_notification: Option<NotificationView>,
    progress: Option<ProgressView>,
    cwd: Option<String>,
    shell_integration: bool,
}

impl From<&session_pb::Session> for SessionView {
    fn from(record: &session_pb::Session) -> Self {
        let status = session_pb::SessionStatus::try_from(record.status)
            .map(|status| status_name(status).to_owned())
            .unwrap_or_else(|_| "unknown".to_owned());
        let close_reason = session_pb::CloseReason::try_from(record.close_reason)
            .ok()
            .and_then(close_reason_name)
            .map(str::to_owned);
        // A report this build cannot read (a newer server's progress kind) reads as none.
        let mut terminal = record
            .terminal
            .clone()
            .and_then(|terminal| TerminalActivity::try_from(terminal).ok())
            .unwrap_or_default();
        // As the gateway renders a session: a process that ended is `exited`, whatever its
        // broker reported last.
        if matches!(
            session_pb::SessionStatus::try_from(record.status),
            Ok(session_pb::SessionStatus::Exited | session_pb::SessionStatus::Closed)
        ) {
            terminal.state = TerminalState::Exited;
        }
        let terminal = TerminalView::from(&terminal);
        Self {
            id: record.id.clone(),
            name: record.name.clone(),
            status,
            close_reason,
            exit_code: record.exit.as_ref().map(|exit| exit.code),
            exit_signal: record.exit.as_ref().and_then(|exit| exit.signal),
            aliases: record.aliases.clone(),
            attached_clients: record.attached_clients,
            created_at: record.created_at.as_ref().map(ToString::to_string),
            last_activity_at: record.last_activity_at.as_ref().map(ToString::to_string),
            state: terminal.state,
            last_notification: terminal.last_notification,
            progress: terminal.progress,
            cwd: terminal.cwd,
            shell_integration: terminal.shell_integration,
        }
    }
}

fn status_name(status: session_pb::SessionStatus) -> &'static str {
    match status {
        session_pb::SessionStatus::Unspecified => "unknown",
        session_pb::SessionStatus::Starting => "starting",
        session_pb::SessionStatus::Active => "active",
        session_pb::SessionStatus::Resetting => "resetting",
        session_pb::SessionStatus::Exited => "exited",
        session_pb::SessionStatus::Closed => "closed",
    }
}

fn close_reason_name(reason: session_pb::CloseReason) -> Option<&'static str> {
    Some(match reason {
        session_pb::CloseReason::Unspecified => return None,
        session_pb::CloseReason::ClosedByUser => "closed_by_user",
        session_pb::CloseReason::Exited => "exited",
        session_pb::CloseReason::IdleReaped => "idle_reaped",
        session_pb::CloseReason::BrokerLost => "broker_lost",
        session_pb::CloseReason::InstanceDeleted => "instance_deleted",
        session_pb::CloseReason::SpawnFailed => "spawn_failed",
    })
}

fn print_instances(instances: &[session_pb::Instance], output: Output) -> Result<()> {
    let views: Vec<InstanceView> = instances.iter().map(InstanceView::from).collect();
    match output {
        Output::Json => print_json(&views),
        Output::Plain => {
            print_table(
                &["ID", "NAME", "TARGET", "SESSIONS"],
                views.iter().map(|view| {
                    vec![
                        view.id.clone(),
                        view.name.clone(),
                        view.target.clone(),
                        format!("{}/{}", view.live_sessions, view.max_sessions),
                    ]
                }),
            );
            Ok(())
        }
    }
}

fn print_sessions(sessions: &[session_pb::Session], output: Output) -> Result<()> {
    let views: Vec<SessionView> = sessions.iter().map(SessionView::from).collect();
    match output {
        Output::Json => print_json(&views),
        Output::Plain => {
            print_table(
                &["ID", "NAME", "STATUS", "CLIENTS", "ALIASES"],
                views.iter().map(|view| {
                    let status = match (&view.close_reason, view.exit_code) {
                        (Some(reason), _) => format!("{} ({reason})", view.status),
                        (None, Some(code)) => format!("{} ({code})", view.status),
                        (None, None) => view.status.clone(),
                    };
                    vec![
                        view.id.clone(),
                        view.name.clone(),
                        status,
                        view.attached_clients.to_string(),
                        view.aliases.join(","),
                    ]
                }),
            );
            Ok(())
        }
    }
}

/// What a terminal is doing, as the REST API gives it.
#[derive(Debug, Serialize)]
pub struct TerminalView {
    pub state: &'static str,
    pub last_notification: Option<NotificationView>,
    pub progress: Option<ProgressView>,
    pub cwd: Option<String>,
    pub shell_integration: bool,
    pub running_command_id: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct NotificationView {
    pub text: String,
    pub at: String,
}

#[derive(Debug, Serialize)]
pub struct ProgressView {
    pub kind: &'static str,
    pub percent: Option<u8>,
}

/// A time as the REST API gives it (RFC 3339, to the millisecond).
pub fn rfc3339(at: std::time::SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

impl From<&TerminalActivity> for TerminalView {
    fn from(terminal: &TerminalActivity) -> Self {
        Self {
            state: terminal.state.as_str(),
            last_notification: terminal.notification.as_ref().map(|notification| {
                NotificationView {
                    text: notification.text.clone(),
                    at: rfc3339(notification.at),
                }
            }),
            progress: terminal.progress.map(|progress| ProgressView {
                kind: progress.kind(),
                percent: progress.percent(),
            }),
            cwd: terminal.cwd.clone(),
            shell_integration: terminal.integrated,
            running_command_id: terminal.running_command,
        }
    }
}

pub fn print_json(value: &impl Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Prints left-aligned columns, as `docker ps` does.
pub fn print_table(headers: &[&str], rows: impl Iterator<Item = Vec<String>>) {
    let rows: Vec<Vec<String>> = rows.collect();
    let mut widths: Vec<usize> = headers.iter().map(|header| header.len()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        println!("{}", padded.join("   ").trim_end());
    };
    line(headers.iter().map(|header| (*header).to_owned()).collect());
    for row in rows {
        line(row);
    }
}
