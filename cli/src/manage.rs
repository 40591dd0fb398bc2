//! The record commands: instances and sessions listed (with who is attached), created,
//! renamed, reset and removed, and a session's control (its mode, its state, requests and
//! their answers), in plain columns for people or JSON for scripts.

use anyhow::{Context, Result, bail};
use gateway::grpc::{instance_from_proto, session_from_proto};
use gateway::rest::bodies::{
    ClosedSession, DeletedInstance, InstanceBody, InstanceList, SessionBody, SessionList,
    TargetBody,
};
use ptyhub_client::{Attendee, ControlMode, NewSession, TerminalActivity};
use ptyhub_model::{ControlRequest, ControlState};
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
    print_instance(instance, output)
}

pub async fn instance_ls(connection: &ConnectionArgs, output: Output) -> Result<()> {
    let instances = connection
        .client()
        .await?
        .instances()
        .await
        .context("cannot list the instances")?;
    print_instances(instances, output)
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
        Output::Json => print_json(&DeletedInstance {
            status: "deleted".to_owned(),
            instance_id: deleted.instance_id,
            closed_sessions: deleted.closed_sessions,
        }),
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
    print_sessions(sessions, output)
}

pub async fn session_new(
    connection: &ConnectionArgs,
    instance: String,
    new: NewSession,
    output: Output,
) -> Result<()> {
    let created = connection
        .client()
        .await?
        .create_session(&instance, new)
        .await
        .with_context(|| format!("cannot start a session on instance {instance:?}"))?;
    print_session(created, output)
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
    print_session(renamed, output)
}

/// Sets a live session's control mode and prints the session as it is then.
pub async fn session_control_mode(
    connection: &ConnectionArgs,
    instance: String,
    session_id: String,
    control_mode: ControlMode,
    output: Output,
) -> Result<()> {
    let session = connection
        .client()
        .await?
        .set_control_mode(&instance, &session_id, control_mode)
        .await
        .with_context(|| {
            format!("cannot make session {session_id} of instance {instance:?} {control_mode}")
        })?;
    print_session(session, output)
}

/// `control INSTANCE SESSION`: who controls the session, for whom control is reserved, and the
/// requests that wait; with `--json`, as `GET .../control` answers.
pub async fn control_state(
    connection: &ConnectionArgs,
    instance: String,
    session_id: String,
    output: Output,
) -> Result<()> {
    let state = connection
        .client()
        .await?
        .control_state(&instance, &session_id)
        .await
        .with_context(|| {
            format!("cannot read who controls session {session_id} of instance {instance:?}")
        })?;
    print_control_state(state, output)
}

/// `control INSTANCE SESSION request`: a standing request for control by the caller's
/// principal; with `--json`, as `POST .../control/requests` answers.
pub async fn control_request(
    connection: &ConnectionArgs,
    instance: String,
    session_id: String,
    output: Output,
) -> Result<()> {
    let request = connection
        .client()
        .await?
        .request_control(&instance, &session_id)
        .await
        .with_context(|| {
            format!("cannot ask for control of session {session_id} of instance {instance:?}")
        })?;
    let request = ControlRequest::try_from(request).map_err(|error| {
        anyhow::anyhow!("the server's answer to a request for control is unreadable: {error}")
    })?;
    match output {
        Output::Json => print_json(&request),
        Output::Plain => {
            println!(
                "asked for control of session {session_id} as {} (request {}): it is yours once the controller grants it; `ptyhub control {instance} {session_id}` shows whether it still waits",
                request.principal, request.id
            );
            Ok(())
        }
    }
}

/// `control INSTANCE SESSION grant|decline ID`: answers a pending request as the controller's
/// principal (a decline of one's own request withdraws it); prints the control state after it,
/// with `--json` as `POST .../control/requests/{id}/grant` (or `/decline`) answers.
pub async fn control_answer(
    connection: &ConnectionArgs,
    instance: String,
    session_id: String,
    request_id: u64,
    grant: bool,
    output: Output,
) -> Result<()> {
    let client = connection.client().await?;
    let (answered, verb) = if grant {
        (
            client
                .grant_control(&instance, &session_id, request_id)
                .await,
            "grant",
        )
    } else {
        (
            client
                .decline_control(&instance, &session_id, request_id)
                .await,
            "decline",
        )
    };
    let state = answered.with_context(|| {
        format!(
            "cannot {verb} request {request_id} for control of session {session_id} of instance {instance:?}"
        )
    })?;
    if output == Output::Plain {
        let done = if grant { "granted" } else { "declined" };
        println!("{done} request {request_id}");
    }
    print_control_state(state, output)
}

pub async fn session_alias_add(
    connection: &ConnectionArgs,
    instance: String,
    session_id: String,
    aliases: Vec<String>,
    output: Output,
) -> Result<()> {
    let session = connection
        .client()
        .await?
        .add_session_aliases(&instance, &session_id, aliases)
        .await
        .with_context(|| {
            format!("cannot add aliases to session {session_id} of instance {instance:?}")
        })?;
    print_session(session, output)
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
    print_session(reset, output)
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
    match output {
        // As `DELETE .../sessions/{sid}` answers.
        Output::Json => print_json(&ClosedSession {
            status: "closed".to_owned(),
            session_id: closed.id,
        }),
        Output::Plain => print_session(closed, output),
    }
}

/// An instance in the REST API's JSON form (`GET /api/v1/instances/{iid}`), written once in the
/// gateway: a script reads the same keys whichever of the two it asks.
fn instance_body(instance: session_pb::Instance) -> InstanceBody {
    InstanceBody::from(instance_from_proto(instance))
}

/// A session in the REST API's JSON form (`GET .../sessions/{sid}`), written once in the
/// gateway. A record this build cannot read is the server's fault, said as such.
fn session_body(session: session_pb::Session) -> Result<SessionBody> {
    let session = session_from_proto(session).map_err(|error| anyhow::anyhow!(error.message))?;
    Ok(SessionBody::from(session))
}

fn describe_target(target: Option<&TargetBody>) -> String {
    match target {
        Some(TargetBody::Local {}) => "local".to_owned(),
        Some(TargetBody::Docker { container }) => format!("docker:{container}"),
        None => "unknown".to_owned(),
    }
}

/// `instance ls`: `{"instances": [...]}` with `--json`, as `GET /api/v1/instances` answers.
fn print_instances(instances: Vec<session_pb::Instance>, output: Output) -> Result<()> {
    let instances: Vec<InstanceBody> = instances.into_iter().map(instance_body).collect();
    match output {
        Output::Json => print_json(&InstanceList { instances }),
        Output::Plain => {
            print_instance_table(&instances);
            Ok(())
        }
    }
}

/// `instance add`: the instance object with `--json`, as `POST /api/v1/instances` answers.
fn print_instance(instance: session_pb::Instance, output: Output) -> Result<()> {
    let instance = instance_body(instance);
    match output {
        Output::Json => print_json(&instance),
        Output::Plain => {
            print_instance_table(std::slice::from_ref(&instance));
            Ok(())
        }
    }
}

fn print_instance_table(instances: &[InstanceBody]) {
    print_table(
        &["ID", "NAME", "TARGET", "SESSIONS"],
        instances.iter().map(|instance| {
            vec![
                instance.id.clone(),
                instance.name.clone(),
                describe_target(instance.target.as_ref()),
                format!("{}/{}", instance.live_sessions, instance.max_sessions),
            ]
        }),
    );
}

/// `ls`: `{"sessions": [...]}` with `--json`, as `GET .../terminal/sessions` answers.
fn print_sessions(sessions: Vec<session_pb::Session>, output: Output) -> Result<()> {
    let sessions = sessions
        .into_iter()
        .map(session_body)
        .collect::<Result<Vec<_>>>()?;
    match output {
        Output::Json => print_json(&SessionList { sessions }),
        Output::Plain => {
            print_session_table(&sessions);
            Ok(())
        }
    }
}

/// `new`, `rename`, `reset`, `alias add`: the session object with `--json`, as `GET
/// .../sessions/{sid}` answers (REST's shorter answers to these calls have the same keys), the
/// way `gh` and `kubectl create -o json` print what they made.
fn print_session(session: session_pb::Session, output: Output) -> Result<()> {
    let session = session_body(session)?;
    match output {
        Output::Json => print_json(&session),
        Output::Plain => {
            print_session_table(std::slice::from_ref(&session));
            Ok(())
        }
    }
}

/// A control state as the REST API gives it, or in lines: the controller, a reservation, and a
/// table of the requests that wait.
fn print_control_state(state: broker_pb::ControlState, output: Output) -> Result<()> {
    let state = ControlState::try_from(state)
        .map_err(|error| anyhow::anyhow!("the server's control state is unreadable: {error}"))?;
    if output == Output::Json {
        return print_json(&state);
    }
    match &state.controller {
        Some(controller) => println!(
            "controller: {} since {}",
            describe_attendee(controller),
            rfc3339(controller.since.into())
        ),
        None => println!("controller: nobody"),
    }
    if let Some(reserved) = &state.reserved_for {
        println!(
            "reserved for: {} until {} (their next attach controls)",
            or_someone(&reserved.principal),
            rfc3339(reserved.until.into())
        );
    }
    if state.requests.is_empty() {
        println!("requests: none");
        return Ok(());
    }
    print_table(
        &["REQUEST", "PRINCIPAL", "SURFACE", "SINCE", "ON A STREAM"],
        state.requests.iter().map(|request| {
            vec![
                request.id.to_string(),
                or_someone(&request.principal),
                shown(&request.surface),
                rfc3339(request.since.into()),
                if request.stream { "yes" } else { "no" }.to_owned(),
            ]
        }),
    );
    Ok(())
}

/// A principal as a person reads it: a share link's credential sees every principal as `""`.
pub(crate) fn or_someone(principal: &str) -> String {
    if principal.is_empty() {
        "someone".to_owned()
    } else {
        shown(principal)
    }
}

/// A name the server gave, as a person's terminal may show it: a token's subject can hold any
/// character, and a control character (an escape sequence's `ESC`, a C1 control) is written
/// escaped, so a name can neither set the title nor the clipboard, nor redraw the screen.
pub(crate) fn shown(name: &str) -> String {
    let mut shown = String::with_capacity(name.len());
    for character in name.chars() {
        if character.is_control() {
            shown.extend(character.escape_default());
        } else {
            shown.push(character);
        }
    }
    shown
}

/// One attached stream, as `ls` and `control` show it: `alice (controller, cli, typing)`.
fn describe_attendee(attendee: &Attendee) -> String {
    let mut traits = vec![attendee.role.as_str().to_owned()];
    if !attendee.surface.is_empty() {
        traits.push(shown(&attendee.surface));
    }
    if attendee.typing {
        traits.push("typing".to_owned());
    }
    format!(
        "{} ({})",
        or_someone(&attendee.principal),
        traits.join(", ")
    )
}

fn print_session_table(sessions: &[SessionBody]) {
    print_table(
        &["ID", "NAME", "STATUS", "CLIENTS", "ALIASES", "ATTACHED"],
        sessions.iter().map(|session| {
            let status = match (&session.close_reason, session.exit_code) {
                (Some(reason), _) => format!("{} ({reason})", session.status),
                (None, Some(code)) => format!("{} ({code})", session.status),
                (None, None) => session.status.clone(),
            };
            vec![
                session.id.clone(),
                session.name.clone(),
                status,
                session.attached_clients.to_string(),
                session.aliases.join(","),
                session
                    .presence
                    .iter()
                    .map(describe_attendee)
                    .collect::<Vec<_>>()
                    .join(", "),
            ]
        }),
    );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_shown_with_its_control_characters_escaped() {
        // A subject that would set the terminal's title and clipboard, and one that would not.
        let hostile = "eve\u{1b}]52;c;ZXZpbA==\u{7}\u{9b}2J";
        let shown = or_someone(hostile);
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert_eq!(shown, "eve\\u{1b}]52;c;ZXZpbA==\\u{7}\\u{9b}2J");
        assert_eq!(or_someone("ålice"), "ålice");
        assert_eq!(or_someone(""), "someone");
    }
}
