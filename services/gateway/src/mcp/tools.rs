//! The MCP tools: one table of their names, descriptions, input schemas (from the argument
//! types below) and output schemas (from the REST bodies they answer with), and the operations
//! behind them. Each operation makes the domain calls its REST route makes, with the same
//! checks in the same words, acting for the caller with the audit surface `mcp`; the REST
//! bodies' own validators check the arguments, so a bound has one message on both surfaces.
//!
//! An operation that fails answers a tool error (`isError`) whose text is the contract's
//! `detail`, with the HTTP status REST would answer in its `_meta` ([`STATUS_META`]), never a
//! protocol error: the agent reads why and can correct itself. An error carries no structured
//! content: clients check structured content against the tool's output schema (the TypeScript
//! SDK and the inspector do, even for an error), and a refusal is not the tool's answer.
//! Arguments that do not fit the tool's schema are a tool error too, as they are 422 on REST.

use std::future::Future;
use std::sync::LazyLock;

use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use ptyhub_model::TerminalSize;
use ptyhub_wire::Surface;

use super::schema::output_schema;
use crate::auth::Principal;
use crate::domain::{
    CommandOutputFormat, ControlRequest, ControlState, Instance, Screen, Session, SessionStatus,
};
use crate::error::ApiError;
use crate::rest::bodies::{
    ClosedSession, CommandList, CommandsQuery, InputBody, InputWrittenBody, InstanceBody,
    InstanceList, RunAnswerBody, RunBody, ScreenQuery, SessionBody, SessionList, WaitAnswerBody,
    WaitBody, parse_control_mode, validate_name,
};
use crate::rest::screens::answer_wait;
use crate::scope::Access;
use crate::scope::SeenBy as _;
use crate::state::AppState;

/// What a credential needs to see and use a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needs {
    /// Reading: every credential of the instance, a share link's included.
    View,
    /// A session's commands, which a share link's credential does not see (they are the
    /// session's past).
    Commands,
    /// Changing something: never a viewer-only credential.
    Control,
}

impl Needs {
    fn granted_to(self, access: &Access) -> bool {
        match self {
            Needs::View => true,
            Needs::Commands => access.sees_commands(),
            Needs::Control => !access.is_viewer_only(),
        }
    }
}

/// One tool as clients list it, and who may see it.
#[derive(Debug)]
struct Listed {
    tool: Tool,
    needs: Needs,
}

/// A tool whose input is `A` and whose structured output is `O`.
fn tool<A: JsonSchema + 'static, O: ToSchema>(
    name: &'static str,
    description: &'static str,
    needs: Needs,
) -> Listed {
    let annotations = ToolAnnotations::new()
        .read_only(needs != Needs::Control)
        .destructive(name == "close_session")
        .open_world(false);
    let tool = Tool::new(name, description, JsonObject::new())
        .with_input_schema::<A>()
        .with_raw_output_schema(output_schema::<O>())
        .with_annotations(annotations);
    Listed { tool, needs }
}

/// Every tool, in the order they are listed.
static TOOLS: LazyLock<Vec<Listed>> = LazyLock::new(|| {
    vec![
        tool::<NoArguments, InstanceList>(
            "list_instances",
            "The instances (containers, or the broker's own host) this credential may use, each \
             with its id, name, live session count and cap.",
            Needs::View,
        ),
        tool::<InstanceArguments, SessionList>(
            "list_sessions",
            "The sessions (terminals) of an instance, oldest first: id, name, status, aliases, \
             what the terminal is doing (`state`: starting, at_prompt, running, \
             waiting_for_input, idle, exited), its title and working directory.",
            Needs::View,
        ),
        tool::<CreateSessionArguments, OpenedSession>(
            "create_session",
            "Start a new terminal session in an instance, running the instance's command (a \
             shell, usually). With `alias` (an id of yours, such as a conversation id), the live \
             session holding it is returned instead when there is one (`created` false), so \
             calling again never starts a second one.",
            Needs::Control,
        ),
        tool::<ReadScreenArguments, ScreenReading>(
            "read_screen",
            "What a session's terminal shows now: its rows as text (and up to `scrollback` lines \
             above them), the cursor, the size, the window title, the session's status and what \
             the terminal is doing (`state`), and the output `offset` the screen reflects.",
            Needs::View,
        ),
        tool::<SendInputArguments, InputWrittenBody>(
            "send_input",
            "Type into a session: `text` as given, then each of `keys` (Enter, Tab, Escape, \
             Backspace, Up, Down, Left, Right, Home, End, PageUp, PageDown, Delete, F1..F12, \
             C-c and other Ctrl keys as C-<key>, Alt as M-<key>). Answers the output offset at \
             which it was written: pass it to wait_for as `after_offset`.",
            Needs::Control,
        ),
        tool::<WaitForArguments, WaitAnswerBody>(
            "wait_for",
            "Wait until a session's screen shows `pattern` (a regular expression, Rust regex \
             syntax, searched in the screen's text each time it changes; absent matches any \
             screen), or, with `for`, until its terminal is at the shell's prompt, idle, asking \
             for input or exited; or until its process exits; for at most `timeout_ms` (default \
             30000, at most 300000). Answers how it ended and the screen.",
            Needs::View,
        ),
        tool::<RunCommandArguments, RunAnswerBody>(
            "run_command",
            "Run a shell command at a session's prompt, as a colleague would type it (everyone \
             watching sees it), and answer once it ended: its exit code and output. The \
             session's shell must be at its prompt; the command goes on running when \
             `timeout_ms` (default 30000, at most 300000) passes first.",
            Needs::Control,
        ),
        tool::<ListCommandsArguments, CommandList>(
            "list_commands",
            "The commands a session's shell ran, oldest first, each with its command line, \
             working directory, exit code, times and output range, and what the terminal is \
             doing now.",
            Needs::Commands,
        ),
        tool::<SessionArguments, ClosedSession>(
            "close_session",
            "Close a session, ending its processes. Its record stays in the instance's history.",
            Needs::Control,
        ),
        tool::<SessionArguments, ControlState>(
            "control_state",
            "Who controls a session (the attached client that may type), for whom control is \
             reserved, and the requests for control that wait for an answer, oldest first.",
            Needs::View,
        ),
        tool::<SessionArguments, ControlRequest>(
            "request_control",
            "Ask the controller of a session for control, as you (your credential's \
             principal). The controller's page shows the request; watch control_state for the \
             answer. Once granted, control is yours: your send_input types without force, and \
             your next attach to the session controls it.",
            Needs::Control,
        ),
        tool::<GrantControlArguments, ControlState>(
            "grant_control",
            "Answer a request for control by its id (from control_state), as the session's \
             controller: `grant` true (default) gives the requester control, false declines. \
             Declining your own request withdraws it.",
            Needs::Control,
        ),
    ]
});

/// The tools `access` may use, as clients list them: a share link's credential sees the read
/// tools alone.
pub fn visible_to(access: &Access) -> Vec<Tool> {
    TOOLS
        .iter()
        .filter(|listed| listed.needs.granted_to(access))
        .map(|listed| listed.tool.clone())
        .collect()
}

/// Runs the tool `name` for `principal`. An unknown tool is a protocol error (the client asked
/// for something this server does not have); everything the tool itself refuses is a tool
/// error with the contract's detail.
pub async fn call(
    state: &AppState,
    principal: &Principal,
    name: &str,
    arguments: JsonObject,
) -> Result<CallToolResult, ErrorData> {
    match name {
        "list_instances" => {
            answer(arguments, |_: NoArguments| list_instances(state, principal)).await
        }
        "list_sessions" => {
            answer(arguments, |arguments| {
                list_sessions(state, principal, arguments)
            })
            .await
        }
        "create_session" => {
            answer(arguments, |arguments| {
                create_session(state, principal, arguments)
            })
            .await
        }
        "read_screen" => {
            answer(arguments, |arguments| {
                read_screen(state, principal, arguments)
            })
            .await
        }
        "send_input" => {
            answer(arguments, |arguments| {
                send_input(state, principal, arguments)
            })
            .await
        }
        "wait_for" => answer(arguments, |arguments| wait_for(state, principal, arguments)).await,
        "run_command" => {
            answer(arguments, |arguments| {
                run_command(state, principal, arguments)
            })
            .await
        }
        "list_commands" => {
            answer(arguments, |arguments| {
                list_commands(state, principal, arguments)
            })
            .await
        }
        "close_session" => {
            answer(arguments, |arguments| {
                close_session(state, principal, arguments)
            })
            .await
        }
        "control_state" => {
            answer(arguments, |arguments| {
                control_state(state, principal, arguments)
            })
            .await
        }
        "request_control" => {
            answer(arguments, |arguments| {
                request_control(state, principal, arguments)
            })
            .await
        }
        "grant_control" => {
            answer(arguments, |arguments| {
                grant_control(state, principal, arguments)
            })
            .await
        }
        unknown => Err(ErrorData::invalid_params(
            format!("unknown tool {unknown:?}"),
            None,
        )),
    }
}

/// Reads the arguments as `A`, runs `operation` and makes its answer the tool's result.
async fn answer<A, B, F>(
    arguments: JsonObject,
    operation: impl FnOnce(A) -> F,
) -> Result<CallToolResult, ErrorData>
where
    A: DeserializeOwned,
    B: Serialize,
    F: Future<Output = Result<B, ApiError>>,
{
    let arguments = match serde_json::from_value::<A>(Value::Object(arguments)) {
        Ok(arguments) => arguments,
        Err(error) => {
            return Ok(tool_error(&ApiError::invalid(format!(
                "invalid arguments: {error}"
            ))));
        }
    };
    match operation(arguments).await {
        Ok(body) => serde_json::to_value(body)
            .map(CallToolResult::structured)
            .map_err(|error| ErrorData::internal_error(error.to_string(), None)),
        Err(error) => Ok(tool_error(&error)),
    }
}

/// The `_meta` key of a tool error that holds the HTTP status REST would answer.
pub const STATUS_META: &str = "ptyhub/status";

/// A refusal as a tool error: the detail as text, and the HTTP status REST would answer in its
/// `_meta`.
pub fn tool_error(error: &ApiError) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(error.message.clone())]);
    let mut meta = JsonObject::new();
    meta.insert(
        STATUS_META.to_owned(),
        json!(error.code.http_status().as_u16()),
    );
    result.meta = Some(rmcp::model::MetaObject(meta));
    result
}

/// No arguments at all.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArguments {}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct InstanceArguments {
    /// The instance's id or name.
    instance: String,
    /// Also list closed sessions (the instance's history).
    #[serde(default)]
    include_closed: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CreateSessionArguments {
    /// The instance's id or name.
    instance: String,
    /// 1 to 255 characters; default `Session N`.
    name: Option<String>,
    /// An id of yours for the session (letters, digits and `_.:-`, at most 128): the live
    /// session holding it is returned instead of a new one.
    alias: Option<String>,
    /// The terminal's width, 1..=1000 (default 80), with `rows`.
    cols: Option<u32>,
    /// The terminal's height, 1..=500 (default 24), with `cols`.
    rows: Option<u32>,
    /// `exclusive` (default: one controller at a time) or `shared` (every attached client
    /// that may type does, each input attributed to its principal).
    control_mode: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SessionArguments {
    /// The instance's id or name.
    instance: String,
    /// The session's id, or `default` for the instance's default session.
    session: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GrantControlArguments {
    /// The instance's id or name.
    instance: String,
    /// The session's id, or `default` for the instance's default session.
    session: String,
    /// The request's id, as control_state lists it.
    request_id: u64,
    /// Grant (true, the default) or decline (false).
    #[serde(default = "granting")]
    grant: bool,
}

fn granting() -> bool {
    true
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadScreenArguments {
    /// The instance's id or name.
    instance: String,
    /// The session's id, or `default` for the instance's default session.
    session: String,
    /// Lines of scrollback to put before the visible rows, 0..=10000 (default 0).
    scrollback: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SendInputArguments {
    /// The instance's id or name.
    instance: String,
    /// The session's id, or `default` for the instance's default session.
    session: String,
    /// Text typed as given (UTF-8; a line feed is not Enter: add the key).
    text: Option<String>,
    /// Keys pressed after the text, in order: `Enter`, `C-c`, `Up`, ...
    keys: Option<Vec<String>>,
    /// Type even while a person holds control of the terminal (default false: refused).
    #[serde(default)]
    force: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WaitForArguments {
    /// The instance's id or name.
    instance: String,
    /// The session's id, or `default` for the instance's default session.
    session: String,
    /// A regular expression (Rust regex syntax, multi-line, at most 4096 bytes) searched in
    /// the screen's text; absent or empty matches any screen. `\$ $` matches a shell prompt
    /// waiting at its end.
    pattern: Option<String>,
    /// 1..=300000 milliseconds, default 30000.
    timeout_ms: Option<u32>,
    /// 0..=60000: the screen must also have had no output for this long.
    quiet_ms: Option<u32>,
    /// Only a screen with output from this offset on may match (the `offset` send_input
    /// answered).
    after_offset: Option<u64>,
    /// Lines of scrollback searched and returned, 0..=10000.
    scrollback: Option<u32>,
    /// Instead of `pattern`, what the terminal is to do: `prompt` (its shell is at its prompt),
    /// `idle` (a full-screen program went quiet), `input` (a program asks for input) or `exit`.
    /// A state that holds already answers at once; with `after_offset`, only one entered by
    /// output from there on.
    #[serde(rename = "for")]
    #[schemars(extend("enum" = ["prompt", "idle", "input", "exit"]))]
    wait_for: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RunCommandArguments {
    /// The instance's id or name.
    instance: String,
    /// The session's id, or `default` for the instance's default session.
    session: String,
    /// The command line, as typed at the prompt; several lines run as one command.
    command: String,
    /// 1..=300000 milliseconds, default 30000.
    timeout_ms: Option<u32>,
    /// Type even while a person holds control of the terminal (default false: refused).
    #[serde(default)]
    force: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListCommandsArguments {
    /// The instance's id or name.
    instance: String,
    /// The session's id, or `default` for the instance's default session.
    session: String,
    /// Only commands with a greater id (default 0: every command kept).
    after: Option<u64>,
    /// At most this many, 1..=1000 (default 100).
    limit: Option<u64>,
}

/// `create_session`'s answer: the session, and whether this call started it.
#[derive(Debug, Serialize, ToSchema)]
pub struct OpenedSession {
    pub session: SessionBody,
    /// False when `alias` named a live session, which is returned as it is.
    pub created: bool,
}

/// `read_screen`'s answer: the screen as REST's `GET .../screen` gives it in the `text`
/// format, with what the terminal is doing.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScreenReading {
    #[serde(flatten)]
    pub screen: Screen,
    /// What the terminal is doing: `starting`, `at_prompt`, `running`, `waiting_for_input`,
    /// `idle` or `exited`.
    pub state: String,
}

async fn instance_for(
    state: &AppState,
    principal: &Principal,
    instance: &str,
) -> Result<Instance, ApiError> {
    state
        .authorize_instance_through(principal, instance, Surface::Mcp)
        .await
}

/// The instance and the live session the arguments name, once the principal may use them.
async fn live_session_for(
    state: &AppState,
    principal: &Principal,
    instance: &str,
    session: &str,
) -> Result<(Instance, Session), ApiError> {
    let instance = instance_for(state, principal, instance).await?;
    let session = state
        .authorize_live_session(principal, &instance, session)
        .await?;
    Ok((instance, session))
}

async fn list_instances(state: &AppState, principal: &Principal) -> Result<InstanceList, ApiError> {
    let instances = state
        .upstreams
        .list_instances()
        .await?
        .into_iter()
        .filter(|instance| principal.access.allows(instance))
        .map(|instance| InstanceBody::from(instance.seen_by(&principal.access)))
        .collect();
    Ok(InstanceList { instances })
}

async fn list_sessions(
    state: &AppState,
    principal: &Principal,
    arguments: InstanceArguments,
) -> Result<SessionList, ApiError> {
    let instance = instance_for(state, principal, &arguments.instance).await?;
    let sessions = state
        .upstreams
        .list_sessions(&instance.id, arguments.include_closed)
        .await?
        .into_iter()
        .filter(|session| principal.access.allows_session_record(session))
        .map(|session| SessionBody::from(session.seen_by(&principal.access)))
        .collect();
    Ok(SessionList { sessions })
}

async fn create_session(
    state: &AppState,
    principal: &Principal,
    arguments: CreateSessionArguments,
) -> Result<OpenedSession, ApiError> {
    principal.access.require_control("creating a session")?;
    let instance = instance_for(state, principal, &arguments.instance).await?;
    let name = arguments.name.as_deref().map(validate_name).transpose()?;
    let size = TerminalSize::from_optional(arguments.cols, arguments.rows)
        .map_err(|error| ApiError::invalid(error.to_string()))?;
    let control_mode = parse_control_mode(arguments.control_mode.as_deref())?.unwrap_or_default();
    if let Some(alias) = &arguments.alias {
        let holder = state
            .upstreams
            .list_sessions(&instance.id, false)
            .await?
            .into_iter()
            .find(|session| session.aliases.contains(alias));
        if let Some(session) = holder {
            return Ok(OpenedSession {
                session: session.seen_by(&principal.access).into(),
                created: false,
            });
        }
    }
    let created = state
        .upstreams
        .acting_for(&principal.actor(Surface::Mcp))
        .create_session(
            &instance.id,
            name,
            arguments.alias.into_iter().collect(),
            size,
            Vec::new(),
            control_mode,
        )
        .await?;
    let session = created.session;
    tracing::info!(instance_id = %instance.id, session_id = %session.id, subject = %principal.subject, "session created over mcp");
    Ok(OpenedSession {
        session: session.seen_by(&principal.access).into(),
        created: true,
    })
}

async fn read_screen(
    state: &AppState,
    principal: &Principal,
    arguments: ReadScreenArguments,
) -> Result<ScreenReading, ApiError> {
    let request = ScreenQuery {
        format: None,
        scrollback: arguments.scrollback.map(|lines| lines.to_string()),
    }
    .parse()?;
    // A share made without its history sees no scrollback, as on REST.
    principal.access.check_scrollback(request.scrollback)?;
    let (instance, session) =
        live_session_for(state, principal, &arguments.instance, &arguments.session).await?;
    let screen = state
        .upstreams
        .get_screen(&instance.id, &session.id, request)
        .await?
        .seen_by(&principal.access);
    // The broker reads the state with the screen; the record's may lag it by an event.
    let terminal_state = screen.terminal.as_ref().map_or_else(
        || session.terminal_activity().state,
        |terminal| terminal.state,
    );
    Ok(ScreenReading {
        screen,
        state: terminal_state.as_str().to_owned(),
    })
}

async fn send_input(
    state: &AppState,
    principal: &Principal,
    arguments: SendInputArguments,
) -> Result<InputWrittenBody, ApiError> {
    principal.access.require_control("typing")?;
    let force = arguments.force;
    let items = InputBody {
        text: arguments.text,
        keys: arguments.keys,
        force,
    }
    .items()?;
    let (instance, session) =
        live_session_for(state, principal, &arguments.instance, &arguments.session).await?;
    let written = state
        .upstreams
        .acting_for(&principal.actor(Surface::Mcp))
        .send_input(&instance.id, &session.id, items, force)
        .await?;
    tracing::info!(instance_id = %instance.id, session_id = %session.id, subject = %principal.subject, bytes = written.bytes_written, force, "input typed over mcp");
    Ok(InputWrittenBody {
        bytes_written: written.bytes_written,
        offset: written.offset,
    })
}

async fn wait_for(
    state: &AppState,
    principal: &Principal,
    arguments: WaitForArguments,
) -> Result<WaitAnswerBody, ApiError> {
    let body = WaitBody {
        pattern: arguments.pattern,
        timeout_ms: arguments.timeout_ms,
        quiet_ms: arguments.quiet_ms,
        after_offset: arguments.after_offset,
        scrollback: arguments.scrollback,
        wait_for: arguments.wait_for,
        format: None,
    };
    let instance = instance_for(state, principal, &arguments.instance);
    answer_wait(state, principal, instance, &arguments.session, body).await
}

async fn run_command(
    state: &AppState,
    principal: &Principal,
    arguments: RunCommandArguments,
) -> Result<RunAnswerBody, ApiError> {
    principal.access.require_control("running a command")?;
    let run = RunBody {
        command: arguments.command,
        timeout_ms: arguments.timeout_ms,
        force: arguments.force,
        format: None,
    }
    .run()?;
    let (instance, session) =
        live_session_for(state, principal, &arguments.instance, &arguments.session).await?;
    // Acting for the caller: session-api records what it typed as their input.
    let result = state
        .upstreams
        .acting_for(&principal.actor(Surface::Mcp))
        .run(&instance.id, &session.id, run)
        .await?;
    tracing::info!(instance_id = %instance.id, session_id = %session.id, subject = %principal.subject, command_id = result.command.id, exit_code = ?result.command.exit_code, "command run over mcp");
    Ok(RunAnswerBody::new(result, CommandOutputFormat::Text))
}

async fn list_commands(
    state: &AppState,
    principal: &Principal,
    arguments: ListCommandsArguments,
) -> Result<CommandList, ApiError> {
    principal
        .access
        .require_control("reading a session's commands")?;
    let listing = CommandsQuery {
        after: arguments.after.map(|after| after.to_string()),
        limit: arguments.limit.map(|limit| limit.to_string()),
    }
    .parse()?;
    let (instance, session) =
        live_session_for(state, principal, &arguments.instance, &arguments.session).await?;
    let page = state
        .upstreams
        .list_commands(&instance.id, &session.id, listing)
        .await?;
    Ok(page.into())
}

async fn close_session(
    state: &AppState,
    principal: &Principal,
    arguments: SessionArguments,
) -> Result<ClosedSession, ApiError> {
    principal.access.require_control("closing a session")?;
    let instance = instance_for(state, principal, &arguments.instance).await?;
    let session = state
        .authorize_session(principal, &instance, &arguments.session)
        .await?;
    if session.status != SessionStatus::Closed {
        state
            .upstreams
            .acting_for(&principal.actor(Surface::Mcp))
            .close_session(&instance.id, &session.id)
            .await?;
    }
    tracing::info!(instance_id = %instance.id, session_id = %session.id, subject = %principal.subject, "session closed over mcp");
    Ok(ClosedSession {
        status: "closed".into(),
        session_id: session.id.to_string(),
    })
}

async fn control_state(
    state: &AppState,
    principal: &Principal,
    arguments: SessionArguments,
) -> Result<ControlState, ApiError> {
    let (instance, session) =
        live_session_for(state, principal, &arguments.instance, &arguments.session).await?;
    let control = state
        .upstreams
        .control_state(&instance.id, &session.id)
        .await?;
    Ok(control.seen_by(&principal.access))
}

async fn request_control(
    state: &AppState,
    principal: &Principal,
    arguments: SessionArguments,
) -> Result<ControlRequest, ApiError> {
    principal.access.require_control("asking for control")?;
    let (instance, session) =
        live_session_for(state, principal, &arguments.instance, &arguments.session).await?;
    let request = state
        .upstreams
        .acting_for(&principal.actor(Surface::Mcp))
        .request_control(&instance.id, &session.id)
        .await?;
    tracing::info!(instance_id = %instance.id, session_id = %session.id, subject = %principal.subject, request_id = request.id, "control requested over mcp");
    Ok(request)
}

async fn grant_control(
    state: &AppState,
    principal: &Principal,
    arguments: GrantControlArguments,
) -> Result<ControlState, ApiError> {
    principal
        .access
        .require_control("answering a request for control")?;
    let (instance, session) =
        live_session_for(state, principal, &arguments.instance, &arguments.session).await?;
    let control = state
        .upstreams
        .acting_for(&principal.actor(Surface::Mcp))
        .answer_control(
            &instance.id,
            &session.id,
            arguments.request_id,
            arguments.grant,
        )
        .await?;
    tracing::info!(instance_id = %instance.id, session_id = %session.id, subject = %principal.subject, request_id = arguments.request_id, grant = arguments.grant, "control request answered over mcp");
    Ok(control)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(tools: &[Tool]) -> Vec<&str> {
        tools.iter().map(|tool| tool.name.as_ref()).collect()
    }

    #[test]
    fn a_share_link_sees_the_read_tools_alone() {
        let shared = Access::shared("instance-1", None);
        assert_eq!(
            names(&visible_to(&shared)),
            [
                "list_instances",
                "list_sessions",
                "read_screen",
                "wait_for",
                "control_state"
            ]
        );
        assert_eq!(names(&visible_to(&Access::admin())).len(), 12);
    }

    #[test]
    fn every_tool_has_object_schemas_for_its_input_and_output() {
        for tool in visible_to(&Access::admin()) {
            assert_eq!(tool.input_schema["type"], "object", "{}", tool.name);
            let output = tool.output_schema.expect("an output schema");
            assert_eq!(output.get("type"), Some(&json!("object")), "{}", tool.name);
        }
    }

    #[test]
    fn a_wait_names_the_states_it_may_wait_for() {
        let wait_for = visible_to(&Access::admin())
            .into_iter()
            .find(|tool| tool.name == "wait_for")
            .expect("wait_for is listed");
        assert_eq!(
            wait_for.input_schema["properties"]["for"]["enum"],
            json!(["prompt", "idle", "input", "exit"])
        );
    }

    #[test]
    fn refusals_carry_the_contract_detail_and_status() {
        let result = tool_error(&ApiError::not_found("session not found"));
        assert_eq!(result.is_error, Some(true));
        assert_eq!(
            result.content[0].as_text().map(|text| text.text.as_str()),
            Some("session not found")
        );
        assert_eq!(result.structured_content, None, "no answer to check");
        let meta = result.meta.expect("the status in _meta");
        assert_eq!(meta.0[STATUS_META], json!(404));
    }
}
