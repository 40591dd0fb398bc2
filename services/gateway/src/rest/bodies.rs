//! The JSON bodies of the REST API (docs/CONTRACT.md, "REST"), what they are made from, and the
//! name rule every session and instance name follows.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::{
    Command, CommandListing, CommandOutputFormat, CommandPage, CommandRun, CommandRunResult,
    InputItem, Instance, Screen, ScreenFormat, ScreenRequest, ScreenWait, ScreenWaitResult, Target,
    TerminalActivity, WaitOutcome,
};
use crate::error::ApiError;
use ptyhub_model::{ControlMode, InvalidControlMode, Name, NameKind, TerminalState};
use ptyhub_wire::ErrorCode;
use ptyhub_wire::limits::{
    DEFAULT_COMMANDS_PAGE, DEFAULT_WAIT_MS, MAX_COMMANDS_PAGE, MAX_FRAME_BYTES, MAX_PATTERN_BYTES,
    MAX_QUIET_MS, MAX_SCREEN_SCROLLBACK, MAX_WAIT_MS,
};

/// Where an instance's terminals run: `{"docker": {"container": "..."}}` or `{"local": {}}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TargetBody {
    /// `docker exec` in a running container, by id or name.
    Docker { container: String },
    /// The broker's own host (development).
    Local {},
}

/// Exactly one target. serde's own reading of an enum takes a second key for malformed JSON
/// (400), though such a body is well-formed and only names two targets (422).
impl<'de> Deserialize<'de> for TargetBody {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;

        #[derive(Deserialize)]
        #[serde(rename_all = "lowercase")]
        enum OneTarget {
            Docker { container: String },
            Local {},
        }

        let keys = serde_json::Map::<String, serde_json::Value>::deserialize(deserializer)?;
        if keys.len() != 1 {
            return Err(D::Error::custom(format!(
                "target must name exactly one of docker and local, not {}",
                keys.len()
            )));
        }
        let target =
            OneTarget::deserialize(serde_json::Value::Object(keys)).map_err(D::Error::custom)?;
        Ok(match target {
            OneTarget::Docker { container } => Self::Docker { container },
            OneTarget::Local {} => Self::Local {},
        })
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct InstanceBody {
    pub id: String,
    pub name: String,
    pub target: Option<TargetBody>,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: String,
    pub user: String,
    pub max_sessions: u32,
    pub labels: BTreeMap<String, String>,
    pub broker_id: String,
    pub created_at: Option<DateTime<Utc>>,
    /// Live sessions now.
    pub live_sessions: u32,
    /// What new sessions record: `off`, `output` or `output+input`.
    pub record: String,
    /// Whether `record` is the server's default (the instance has no setting of its own).
    pub record_is_default: bool,
    /// Whether new sessions whose program is an interactive bash, zsh, fish or sh start with
    /// the shell integration that marks their commands.
    pub shell_integration: bool,
    /// Seconds a request for control to one of its sessions waits unanswered before it is
    /// granted; `null`: until it is answered.
    pub control_grant_timeout: Option<u32>,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct RegisterInstanceBody {
    pub name: String,
    pub target: TargetBody,
    /// argv of new sessions; may contain `{session_id}`.
    pub command: Option<Vec<String>>,
    pub env: Option<BTreeMap<String, String>>,
    pub cwd: Option<String>,
    pub user: Option<String>,
    /// 1..=50, default 5.
    pub max_sessions: Option<u32>,
    /// Include `project_id` and `repository_id` for the project/repository routes.
    pub labels: Option<BTreeMap<String, String>>,
    /// `off`, `output` or `output+input`; absent follows the server's default.
    pub record: Option<String>,
    /// Whether new sessions whose program is an interactive shell start with the shell
    /// integration that marks their commands; default true.
    pub shell_integration: Option<bool>,
    /// 1..=3600 seconds a request for control to one of its sessions may wait unanswered
    /// before it is granted; absent or `null` (the default): until it is answered.
    pub control_grant_timeout: Option<u32>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct InstanceList {
    pub instances: Vec<InstanceBody>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeletedInstance {
    /// Always `deleted`.
    pub status: String,
    pub instance_id: String,
    pub closed_sessions: u32,
}

/// A session as REST, the page's events and MCP answer it: the model's one JSON form of the
/// session record, under the name the OpenAPI document gives it.
pub use ptyhub_model::SessionJson as SessionBody;

/// One command a session's shell ran, as its shell integration marked it.
#[derive(Debug, Serialize, ToSchema)]
pub struct CommandBody {
    /// Counts up from 1 in each session.
    pub id: u64,
    /// The command line.
    pub command: String,
    /// The working directory it started in; `null` when the shell reported none.
    pub cwd: Option<String>,
    pub started_at: DateTime<Utc>,
    /// `null` while it runs.
    pub ended_at: Option<DateTime<Utc>>,
    /// `null` while it runs, or when the shell reported none.
    pub exit_code: Option<i32>,
    /// From `started_at` to `ended_at`; `null` while it runs.
    pub duration_ms: Option<u64>,
    /// The output offset of its first output byte.
    pub output_start: u64,
    /// The output offset just past its last output byte; `null` while it runs.
    pub output_end: Option<u64>,
}

impl From<Command> for CommandBody {
    fn from(command: Command) -> Self {
        let duration_ms = command.ended_at.map(|ended_at| {
            ended_at
                .duration_since(command.started_at)
                .map_or(0, |duration| {
                    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
                })
        });
        Self {
            id: command.id,
            command: command.command,
            cwd: command.cwd,
            started_at: command.started_at.into(),
            ended_at: command.ended_at.map(Into::into),
            exit_code: command.exit_code,
            duration_ms,
            output_start: command.output_start,
            output_end: command.output_end,
        }
    }
}

/// `GET .../commands`: a page of the commands, oldest first, and what the terminal is doing.
#[derive(Debug, Serialize, ToSchema)]
pub struct CommandList {
    pub commands: Vec<CommandBody>,
    /// The id of the oldest command the session still keeps (0 when it keeps none).
    pub first_kept_id: u64,
    /// The id of the newest command the shell ran (0 before its first): `after` for commands
    /// from now on.
    pub last_id: u64,
    pub terminal: TerminalActivity,
}

impl From<CommandPage> for CommandList {
    fn from(page: CommandPage) -> Self {
        Self {
            commands: page.commands.into_iter().map(CommandBody::from).collect(),
            first_kept_id: page.first_kept_id,
            last_id: page.last_id,
            terminal: page.terminal,
        }
    }
}

/// The data of a `command_started` or `command_finished` session event.
#[derive(Debug, Serialize, ToSchema)]
pub struct CommandEventBody {
    pub session_id: String,
    pub command: CommandBody,
}

/// The query of `GET .../commands`, as given: each value is checked by
/// [`CommandsQuery::parse`].
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CommandsQuery {
    /// Only commands with a greater id (default 0: every command kept).
    pub after: Option<String>,
    /// At most this many commands, 1..=1000 (default 100).
    pub limit: Option<String>,
}

impl CommandsQuery {
    /// A value that is not a non-negative integer is 400; a limit of 0 or over the maximum 422.
    pub fn parse(&self) -> Result<CommandListing, ApiError> {
        let after = match self.after.as_deref() {
            None | Some("") => 0,
            Some(value) => value
                .parse::<u64>()
                .map_err(|_| ApiError::bad_request("after must be a non-negative integer"))?,
        };
        let limit = match self.limit.as_deref() {
            None | Some("") => DEFAULT_COMMANDS_PAGE as u64,
            Some(value) => value
                .parse::<u64>()
                .map_err(|_| ApiError::bad_request("limit must be a non-negative integer"))?,
        };
        if limit == 0 {
            return Err(ApiError::invalid("limit must be at least 1"));
        }
        // The broker's words, so every surface refuses a page too large alike.
        let limit = u32::try_from(limit)
            .ok()
            .filter(|limit| *limit as usize <= MAX_COMMANDS_PAGE)
            .ok_or_else(|| {
                ApiError::invalid(format!(
                    "limit {limit} is over the maximum of {MAX_COMMANDS_PAGE}"
                ))
            })?;
        Ok(CommandListing { after, limit })
    }
}

/// The query of `GET .../commands/{cid}/output`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CommandOutputQuery {
    /// `text` (default): the output as plain UTF-8 text, escape sequences and control
    /// characters taken out; `ansi`: the bytes as the program wrote them.
    pub format: Option<String>,
}

impl CommandOutputQuery {
    /// An unknown format is 400, like any malformed query.
    pub fn parse(&self) -> Result<CommandOutputFormat, ApiError> {
        match self.format.as_deref() {
            None | Some("") | Some("text") => Ok(CommandOutputFormat::Text),
            Some("ansi") => Ok(CommandOutputFormat::Ansi),
            Some(other) => Err(ApiError::bad_request(format!(
                "unknown format {other:?}, expected \"text\" or \"ansi\""
            ))),
        }
    }
}

/// `POST .../run`: a command to type at the session's shell prompt.
#[derive(Debug, Deserialize, ToSchema)]
pub struct RunBody {
    /// One or more lines (several go as one command); not empty, no NUL.
    pub command: String,
    /// 1..=300000, default 30000; then 408, and the command goes on running.
    pub timeout_ms: Option<u32>,
    /// Type even while a client holds control (default false: 409).
    #[serde(default)]
    pub force: bool,
    /// How the output is returned: `text` (default) as `output`, `ansi` the bytes as written,
    /// base64-encoded as `output_base64`.
    pub format: Option<CommandOutputFormatName>,
}

/// How a run's output is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum CommandOutputFormatName {
    /// Plain UTF-8 text, escape sequences and control characters taken out.
    #[default]
    Text,
    /// The bytes as the program wrote them.
    Ansi,
}

impl From<CommandOutputFormatName> for CommandOutputFormat {
    fn from(format: CommandOutputFormatName) -> Self {
        match format {
            CommandOutputFormatName::Text => Self::Text,
            CommandOutputFormatName::Ansi => Self::Ansi,
        }
    }
}

impl RunBody {
    /// The run, checked as the broker checks it and in its words (each 422), before any call.
    pub fn run(self) -> Result<CommandRun, ApiError> {
        if self.command.trim().is_empty() {
            return Err(ApiError::invalid("the command is empty"));
        }
        if self.command.contains('\0') {
            return Err(ApiError::invalid("the command must not contain NUL"));
        }
        let timeout_ms = self.timeout_ms.unwrap_or(DEFAULT_WAIT_MS);
        if !(1..=MAX_WAIT_MS).contains(&timeout_ms) {
            return Err(ApiError::invalid(format!(
                "timeout_ms must be 1 to {MAX_WAIT_MS}"
            )));
        }
        Ok(CommandRun {
            command: self.command,
            timeout_ms,
            force: self.force,
            format: self.format.unwrap_or_default().into(),
        })
    }
}

/// A command that ran to its end, with its output.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunAnswerBody {
    /// The command's id, as `GET .../commands` lists it.
    pub command_id: u64,
    /// `null` when the shell reported none.
    pub exit_code: Option<i32>,
    /// The output as text (`format` `text`); absent for `ansi`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The bytes as written, base64 (standard alphabet, padded) (`format` `ansi`); absent for
    /// `text`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_base64: Option<String>,
    /// From its start to its end.
    pub duration_ms: u64,
    /// Output is missing from its start: over 1 MiB, or gone from the session's ring.
    pub truncated: bool,
    /// The command, as `GET .../commands` lists it.
    pub command: CommandBody,
}

impl RunAnswerBody {
    pub fn new(result: CommandRunResult, format: CommandOutputFormat) -> Self {
        use base64::Engine as _;
        let command = CommandBody::from(result.command);
        let (output, output_base64) = match format {
            // The broker's text is UTF-8; should a byte not be, it shows as U+FFFD.
            CommandOutputFormat::Text => (
                Some(String::from_utf8_lossy(&result.output).into_owned()),
                None,
            ),
            CommandOutputFormat::Ansi => (
                None,
                Some(base64::engine::general_purpose::STANDARD.encode(&result.output)),
            ),
        };
        Self {
            command_id: command.id,
            exit_code: command.exit_code,
            output,
            output_base64,
            duration_ms: command.duration_ms.unwrap_or(0),
            truncated: result.truncated,
            command,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SessionList {
    pub sessions: Vec<SessionBody>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct CreateSessionBody {
    /// 1..=255 characters after trimming; absent gives `Session N`.
    pub name: Option<String>,
    /// Pre-assigned external ids, each `^[A-Za-z0-9_.:-]{1,128}$`.
    pub aliases: Option<Vec<String>>,
    /// 1..=1000, with `rows`; default 80.
    pub cols: Option<u32>,
    /// 1..=500, with `cols`; default 24.
    pub rows: Option<u32>,
    /// argv instead of the instance's command (may contain `{session_id}`); only for an admin
    /// or a credential with the `choose_command` claim, 403 otherwise.
    pub command: Option<Vec<String>>,
    /// `exclusive` (default: one controller at a time) or `shared` (every stream whose
    /// credential may control types); 422 for anything else.
    pub control_mode: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedSession {
    pub id: String,
    pub name: String,
    pub status: String,
    pub created_at: Option<DateTime<Utc>>,
}

/// `PATCH .../sessions/{sid}`: what to change of a live session; a field left out is not
/// changed.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateSessionBody {
    /// `exclusive` or `shared`; 422 for anything else.
    pub control_mode: Option<String>,
}

/// A body's optional `control_mode` as the contract spells it: absent is `None`, the two words
/// are the mode, and anything else is 422 with the words a caller may use.
pub fn parse_control_mode(text: Option<&str>) -> Result<Option<ControlMode>, ApiError> {
    text.map(|text| {
        text.parse()
            .map_err(|error: InvalidControlMode| ApiError::invalid(error.to_string()))
    })
    .transpose()
}

/// `POST .../sessions/{sid}/aliases`: the aliases to add to a live session.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddAliasesBody {
    /// One or more, with the rules of creation's `aliases`.
    pub aliases: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ClosedSession {
    /// Always `closed`.
    pub status: String,
    pub session_id: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ResetSessionBody {
    pub id: String,
    pub name: String,
    pub status: String,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct RenameSessionBody {
    /// 1..=255 characters after trimming, no control characters.
    pub name: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RenamedSession {
    pub id: String,
    pub name: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HealthBody {
    /// `ok` or `unavailable`.
    pub status: String,
    /// Why the gateway is not healthy, when it is not (an admin's credential only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Every broker and whether it answers (an admin's credential only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub brokers: Vec<BrokerHealthBody>,
}

/// The answer of `/livez` and `/readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProbeBody {
    /// `ok` or `unavailable`.
    pub status: String,
    /// Why the gateway is not ready, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BrokerHealthBody {
    pub id: String,
    pub endpoint: String,
    /// `ok` or why the broker is considered down.
    pub status: String,
}

impl From<Instance> for InstanceBody {
    fn from(instance: Instance) -> Self {
        Self {
            id: instance.id,
            name: instance.name,
            target: instance.target.map(|target| match target {
                Target::Local => TargetBody::Local {},
                Target::Docker { container } => TargetBody::Docker { container },
            }),
            command: instance.command,
            env: instance.env,
            cwd: instance.cwd,
            user: instance.user,
            max_sessions: instance.max_sessions,
            labels: instance.labels,
            broker_id: instance.broker_id,
            created_at: instance.created_at,
            live_sessions: instance.live_sessions,
            record: instance.record.as_str().to_owned(),
            record_is_default: instance.record_is_default,
            shell_integration: instance.shell_integration,
            control_grant_timeout: instance.control_grant_timeout_secs,
        }
    }
}

/// The `format` query parameter: `text` (the default when absent or empty), `ansi` or `json`;
/// an unknown one is 400, like any malformed query.
fn screen_format_query(value: Option<&str>) -> Result<ScreenFormat, ApiError> {
    match value {
        None | Some("") => Ok(ScreenFormat::Text),
        Some(name) => ScreenFormat::parse(name).ok_or_else(|| {
            ApiError::bad_request(format!(
                "unknown format {name:?}, expected \"text\", \"ansi\" or \"json\""
            ))
        }),
    }
}

/// Checks a `scrollback` bound: at most [`MAX_SCREEN_SCROLLBACK`] lines, else 422.
fn checked_scrollback(scrollback: u32) -> Result<u32, ApiError> {
    if scrollback > MAX_SCREEN_SCROLLBACK {
        return Err(ApiError::invalid(format!(
            "scrollback must be at most {MAX_SCREEN_SCROLLBACK} lines"
        )));
    }
    Ok(scrollback)
}

/// The query of `GET .../screen`, as given: each value is checked by [`ScreenQuery::parse`].
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ScreenQuery {
    /// `text` (default), `ansi` or `json`.
    pub format: Option<String>,
    /// Lines of scrollback before the visible rows, 0..=10000 (default 0).
    pub scrollback: Option<String>,
}

impl ScreenQuery {
    /// An unknown format or a scrollback that is not a non-negative integer is 400; a
    /// scrollback over the limit 422.
    pub fn parse(&self) -> Result<ScreenRequest, ApiError> {
        let format = screen_format_query(self.format.as_deref())?;
        let scrollback = match self.scrollback.as_deref() {
            None | Some("") => 0,
            Some(value) => value
                .parse::<u64>()
                .map_err(|_| ApiError::bad_request("scrollback must be a non-negative integer"))?,
        };
        let scrollback = u32::try_from(scrollback)
            .map_err(|_| {
                ApiError::invalid(format!(
                    "scrollback must be at most {MAX_SCREEN_SCROLLBACK} lines"
                ))
            })
            .and_then(checked_scrollback)?;
        Ok(ScreenRequest { format, scrollback })
    }
}

/// `POST .../input`: `text` first, then each of `keys` in order.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InputBody {
    /// Written as UTF-8 exactly as given (typed, not pasted); at most 1 MiB.
    pub text: Option<String>,
    /// Named keys: `Enter`, `Tab`, `Escape`, `Backspace`, `Space`, `Up`, `Down`, `Left`,
    /// `Right`, `Home`, `End`, `PageUp`, `PageDown`, `Insert`, `Delete`, `F1`..`F12`, `C-<key>`,
    /// `M-<key>`. An unknown name is 422 and nothing is written.
    pub keys: Option<Vec<String>>,
    /// Type even while a client holds control (the control stays with it).
    #[serde(default)]
    pub force: bool,
}

impl InputBody {
    /// The items to type, in order: 422 when there is nothing to type, 413 for more than
    /// 1 MiB of text.
    pub fn items(self) -> Result<Vec<InputItem>, ApiError> {
        let text = self.text.filter(|text| !text.is_empty());
        let keys = self.keys.unwrap_or_default();
        if text.is_none() && keys.is_empty() {
            return Err(ApiError::invalid("input needs text or keys"));
        }
        let bytes =
            text.as_ref().map_or(0, String::len) + keys.iter().map(String::len).sum::<usize>();
        if bytes > MAX_FRAME_BYTES {
            return Err(ApiError::new(
                ErrorCode::LimitExceeded,
                "input larger than 1 MiB",
            ));
        }
        Ok(text
            .map(InputItem::Text)
            .into_iter()
            .chain(keys.into_iter().map(InputItem::Key))
            .collect())
    }
}

/// What typing wrote.
#[derive(Debug, Serialize, ToSchema)]
pub struct InputWrittenBody {
    pub bytes_written: u64,
    /// The output offset when the input was written: pass it as a wait's `after_offset` so only
    /// output from then on answers.
    pub offset: u64,
}

/// `POST .../wait`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitBody {
    /// A regular expression (Rust `regex` syntax, at most 4096 bytes) searched in the screen
    /// text; absent or empty matches any screen.
    pub pattern: Option<String>,
    /// 1..=300000, default 30000; then 408.
    pub timeout_ms: Option<u32>,
    /// 0..=60000: the screen must also have had no output for this long.
    pub quiet_ms: Option<u32>,
    /// Only a screen that reflects output from this offset on may match (for example the
    /// `offset` an input answered).
    pub after_offset: Option<u64>,
    /// How the screen is returned: `text` (default), `ansi` or `json`.
    pub format: Option<ScreenFormat>,
    /// Lines of scrollback searched and returned, 0..=10000.
    pub scrollback: Option<u32>,
    /// Instead of `pattern`, the state to wait for: `prompt` (at_prompt), `idle`, `input`
    /// (waiting_for_input) or `exit` (exited). A state that holds when the wait starts answers
    /// at once; with `after_offset`, only one entered by output from there on counts.
    #[serde(rename = "for")]
    pub wait_for: Option<String>,
}

impl WaitBody {
    /// The wait, its bounds checked against the contract's limits (each 422), so that a bad
    /// one is refused before any call.
    pub fn wait(self) -> Result<ScreenWait, ApiError> {
        let has_pattern = self.pattern.is_some();
        let pattern = self.pattern.unwrap_or_default();
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(ApiError::invalid(format!(
                "pattern must be at most {MAX_PATTERN_BYTES} bytes"
            )));
        }
        let timeout_ms = self.timeout_ms.unwrap_or(DEFAULT_WAIT_MS);
        if !(1..=MAX_WAIT_MS).contains(&timeout_ms) {
            return Err(ApiError::invalid(format!(
                "timeout_ms must be 1 to {MAX_WAIT_MS}"
            )));
        }
        let quiet_ms = self.quiet_ms.unwrap_or(0);
        if quiet_ms > MAX_QUIET_MS {
            return Err(ApiError::invalid(format!(
                "quiet_ms must be at most {MAX_QUIET_MS}"
            )));
        }
        let state = match self.wait_for.as_deref() {
            None => None,
            Some(_) if has_pattern => {
                return Err(ApiError::invalid("a wait has a pattern or a for, not both"));
            }
            Some(_) if self.quiet_ms.is_some() => {
                return Err(ApiError::invalid(
                    "quiet_ms is for a pattern; a wait for a state has its own rules",
                ));
            }
            Some(name) => Some(TerminalState::from_wait_name(name).ok_or_else(|| {
                ApiError::invalid(format!(
                    "for must be prompt, idle, input or exit, not {name:?}"
                ))
            })?),
        };
        Ok(ScreenWait {
            pattern,
            state,
            timeout: std::time::Duration::from_millis(timeout_ms.into()),
            quiet: std::time::Duration::from_millis(quiet_ms.into()),
            after_offset: self.after_offset,
            screen: ScreenRequest {
                format: self.format.unwrap_or_default(),
                scrollback: checked_scrollback(self.scrollback.unwrap_or(0))?,
            },
        })
    }
}

/// How a wait ended.
#[derive(Debug, Serialize, ToSchema)]
pub struct WaitAnswerBody {
    pub outcome: WaitOutcomeName,
    /// The text the pattern matched; `null` when the process exited first or the wait was for a
    /// state.
    pub matched: Option<String>,
    /// For `outcome` `state`, the state reached (`at_prompt`, `idle`, `waiting_for_input` or
    /// `exited`); `null` otherwise.
    pub state: Option<String>,
    /// The matching screen, or the final one (with `exit_code`) when the process exited.
    pub screen: Screen,
    /// What the terminal was doing as the wait answered (the question asked, for `input`), as
    /// in the session object; the terminal may already have left the state reached.
    pub terminal: Option<TerminalActivity>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum WaitOutcomeName {
    /// The pattern matched (and the screen was quiet, when asked).
    Matched,
    /// The terminal reached the state the wait's `for` named.
    State,
    /// The process ended first.
    Exited,
}

impl From<ScreenWaitResult> for WaitAnswerBody {
    fn from(result: ScreenWaitResult) -> Self {
        let (outcome, state) = match result.outcome {
            WaitOutcome::Matched => (WaitOutcomeName::Matched, None),
            WaitOutcome::State(state) => (WaitOutcomeName::State, Some(state.as_str().to_owned())),
            WaitOutcome::Exited => (WaitOutcomeName::Exited, None),
        };
        Self {
            outcome,
            matched: result.matched,
            state,
            screen: result.screen,
            terminal: result.terminal,
        }
    }
}

/// A session's name, checked and trimmed by the contract's one rule.
pub fn validate_name(name: &str) -> Result<String, ApiError> {
    Ok(Name::parse(NameKind::Session, name)?.into_string())
}

#[cfg(test)]
mod tests {
    use ptyhub_wire::ErrorCode;

    use super::*;

    #[test]
    fn names_are_trimmed_and_checked() {
        assert_eq!(validate_name("  build  ").unwrap(), "build");
        assert_eq!(validate_name("   ").unwrap_err().code, ErrorCode::Invalid);
        assert_eq!(
            validate_name(&"x".repeat(256)).unwrap_err().code,
            ErrorCode::Invalid
        );
        assert!(validate_name(&"é".repeat(255)).is_ok());
        assert_eq!(
            validate_name("a\u{7}b").unwrap_err().code,
            ErrorCode::Invalid
        );
    }

    fn query(format: Option<&str>, scrollback: Option<&str>) -> ScreenQuery {
        ScreenQuery {
            format: format.map(str::to_owned),
            scrollback: scrollback.map(str::to_owned),
        }
    }

    #[test]
    fn a_screen_query_refuses_unknown_formats_as_400_and_too_much_scrollback_as_422() {
        assert_eq!(query(None, None).parse().unwrap(), ScreenRequest::default());
        let cells = query(Some("json"), Some("10000")).parse().unwrap();
        assert_eq!(
            (cells.format, cells.scrollback),
            (ScreenFormat::Cells, 10_000)
        );
        assert_eq!(
            query(Some("ansi"), None).parse().unwrap().format,
            ScreenFormat::Ansi
        );
        for (format, scrollback, code) in [
            (Some("xml"), None, ErrorCode::Malformed),
            (Some("JSON"), None, ErrorCode::Malformed),
            (None, Some("-1"), ErrorCode::Malformed),
            (None, Some("lots"), ErrorCode::Malformed),
            (None, Some("10001"), ErrorCode::Invalid),
            (None, Some("99999999999"), ErrorCode::Invalid),
        ] {
            let refused = query(format, scrollback).parse().unwrap_err();
            assert_eq!(refused.code, code, "{format:?} {scrollback:?}: {refused}");
        }
    }

    #[test]
    fn input_is_the_text_then_the_keys_and_needs_one_of_them() {
        let body: InputBody =
            serde_json::from_str(r#"{"text": "ls", "keys": ["Enter", "C-c"]}"#).unwrap();
        assert!(!body.force);
        assert_eq!(
            body.items().unwrap(),
            [
                InputItem::Text("ls".into()),
                InputItem::Key("Enter".into()),
                InputItem::Key("C-c".into()),
            ]
        );
        let keys_only: InputBody =
            serde_json::from_str(r#"{"text": "", "keys": ["Up"], "force": true}"#).unwrap();
        assert!(keys_only.force);
        assert_eq!(keys_only.items().unwrap(), [InputItem::Key("Up".into())]);
        for empty in [
            r#"{}"#,
            r#"{"text": ""}"#,
            r#"{"keys": []}"#,
            r#"{"force": true}"#,
        ] {
            let body: InputBody = serde_json::from_str(empty).unwrap();
            assert_eq!(
                body.items().unwrap_err().code,
                ErrorCode::Invalid,
                "{empty}"
            );
        }
        let too_much = InputBody {
            text: Some("x".repeat(MAX_FRAME_BYTES + 1)),
            ..InputBody::default()
        };
        let refused = too_much.items().unwrap_err();
        assert_eq!(refused.code, ErrorCode::LimitExceeded);
        assert_eq!(refused.code.http_status().as_u16(), 413);
        let at_the_limit = InputBody {
            text: Some("x".repeat(MAX_FRAME_BYTES)),
            ..InputBody::default()
        };
        assert!(at_the_limit.items().is_ok());
    }

    fn wait(json: &str) -> Result<ScreenWait, ApiError> {
        serde_json::from_str::<WaitBody>(json)
            .expect("a wait body")
            .wait()
    }

    #[test]
    fn a_wait_has_the_contract_defaults_and_refuses_bounds_over_the_limits() {
        let default = wait("{}").unwrap();
        assert_eq!(default.pattern, "");
        assert_eq!(default.timeout, std::time::Duration::from_secs(30));
        assert_eq!(default.quiet, std::time::Duration::ZERO);
        assert_eq!(default.after_offset, None);
        assert_eq!(default.screen, ScreenRequest::default());
        let full = wait(
            r#"{"pattern": "hi \\w+", "timeout_ms": 300000, "quiet_ms": 60000,
                "after_offset": 42, "format": "json", "scrollback": 10000}"#,
        )
        .unwrap();
        assert_eq!(full.pattern, r"hi \w+");
        assert_eq!(full.timeout, std::time::Duration::from_secs(300));
        assert_eq!(full.quiet, std::time::Duration::from_secs(60));
        assert_eq!(full.after_offset, Some(42));
        assert_eq!(full.screen.format, ScreenFormat::Cells);
        assert_eq!(full.screen.scrollback, 10_000);
        let long_pattern = format!(r#"{{"pattern": "{}"}}"#, "a".repeat(MAX_PATTERN_BYTES + 1));
        for refused in [
            r#"{"timeout_ms": 0}"#,
            r#"{"timeout_ms": 300001}"#,
            r#"{"quiet_ms": 60001}"#,
            r#"{"scrollback": 10001}"#,
            long_pattern.as_str(),
        ] {
            let error = wait(refused).unwrap_err();
            assert_eq!(error.code, ErrorCode::Invalid, "{refused}: {error}");
        }
        for wrong_shape in [
            r#"{"format": "xml"}"#,
            r#"{"timeout_ms": -1}"#,
            r#"{"timeout": 5}"#,
            r#"{"for": 3}"#,
        ] {
            assert!(
                serde_json::from_str::<WaitBody>(wrong_shape).is_err(),
                "{wrong_shape}"
            );
        }
    }

    #[test]
    fn a_wait_for_a_state_names_one_and_has_no_pattern_nor_quiet() {
        for (name, state) in [
            ("prompt", TerminalState::AtPrompt),
            ("idle", TerminalState::Idle),
            ("input", TerminalState::WaitingForInput),
            ("exit", TerminalState::Exited),
        ] {
            let parsed = wait(&format!(r#"{{"for": "{name}", "after_offset": 7}}"#)).unwrap();
            assert_eq!(parsed.state, Some(state));
            assert_eq!(
                (parsed.pattern.as_str(), parsed.after_offset),
                ("", Some(7))
            );
        }
        for refused in [
            r#"{"for": "busy"}"#,
            r#"{"for": "at_prompt"}"#,
            r#"{"for": "running"}"#,
            r#"{"for": ""}"#,
            r#"{"for": "prompt", "pattern": "[$] $"}"#,
            r#"{"for": "prompt", "pattern": ""}"#,
            r#"{"for": "idle", "quiet_ms": 100}"#,
        ] {
            let error = wait(refused).unwrap_err();
            assert_eq!(error.code, ErrorCode::Invalid, "{refused}: {error}");
        }
    }

    fn commands_query(
        after: Option<&str>,
        limit: Option<&str>,
    ) -> Result<CommandListing, ApiError> {
        CommandsQuery {
            after: after.map(str::to_owned),
            limit: limit.map(str::to_owned),
        }
        .parse()
    }

    #[test]
    fn a_commands_query_refuses_what_is_not_a_number_as_400_and_a_bad_limit_as_422() {
        assert_eq!(
            commands_query(None, None).unwrap(),
            CommandListing {
                after: 0,
                limit: 100
            }
        );
        assert_eq!(
            commands_query(Some("7"), Some("1000")).unwrap(),
            CommandListing {
                after: 7,
                limit: 1000
            }
        );
        for (after, limit, code) in [
            (Some("abc"), None, ErrorCode::Malformed),
            (Some("-1"), None, ErrorCode::Malformed),
            (None, Some("ten"), ErrorCode::Malformed),
            (None, Some("-5"), ErrorCode::Malformed),
            (None, Some("0"), ErrorCode::Invalid),
            (None, Some("1001"), ErrorCode::Invalid),
            (None, Some("5000"), ErrorCode::Invalid),
            (None, Some("99999999999"), ErrorCode::Invalid),
        ] {
            let refused = commands_query(after, limit).unwrap_err();
            assert_eq!(refused.code, code, "{after:?} {limit:?}: {refused}");
        }
        let refused = commands_query(None, Some("5000")).unwrap_err();
        assert_eq!(refused.code.http_status().as_u16(), 422);
        assert_eq!(refused.message, "limit 5000 is over the maximum of 1000");
        assert_eq!(
            CommandOutputQuery {
                format: Some("ansi".into())
            }
            .parse()
            .unwrap(),
            CommandOutputFormat::Ansi
        );
        assert_eq!(
            CommandOutputQuery::default().parse().unwrap(),
            CommandOutputFormat::Text
        );
        for format in ["json", "cells", "ANSI"] {
            let refused = CommandOutputQuery {
                format: Some(format.into()),
            }
            .parse()
            .unwrap_err();
            assert_eq!(refused.code, ErrorCode::Malformed, "{format}");
        }
    }

    #[test]
    fn a_command_has_a_duration_once_it_ended_and_nulls_while_it_runs() {
        let started_at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        let running = Command {
            id: 4,
            command: "make".into(),
            cwd: None,
            started_at,
            ended_at: None,
            exit_code: None,
            output_start: 100,
            output_end: None,
        };
        assert_eq!(
            serde_json::to_value(CommandBody::from(running.clone())).unwrap(),
            serde_json::json!({
                "id": 4, "command": "make", "cwd": null,
                "started_at": "2027-01-15T08:00:00Z", "ended_at": null, "exit_code": null,
                "duration_ms": null, "output_start": 100, "output_end": null,
            })
        );
        let finished = Command {
            cwd: Some("/src".into()),
            ended_at: Some(started_at + std::time::Duration::from_millis(1_234)),
            exit_code: Some(2),
            output_end: Some(150),
            ..running
        };
        let json = serde_json::to_value(CommandBody::from(finished)).unwrap();
        assert_eq!(json["duration_ms"], 1_234, "{json}");
        assert_eq!(json["ended_at"], "2027-01-15T08:00:01.234Z", "{json}");
        assert_eq!(
            (&json["exit_code"], &json["cwd"]),
            (&2.into(), &"/src".into())
        );
    }

    fn session(
        status: crate::domain::SessionStatus,
        terminal: Option<TerminalActivity>,
    ) -> crate::domain::Session {
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        crate::domain::Session {
            id: "0b0e5b8e-1a52-4c5f-9b36-2a4f0f2c7d10".parse().unwrap(),
            instance_id: "6b1c1a52-0000-4c5f-9b36-2a4f0f2c7d10".parse().unwrap(),
            name: "Session 1".into(),
            status,
            close_reason: None,
            exit: None,
            aliases: Vec::new(),
            size: ptyhub_model::TerminalSize::new(80, 24).unwrap(),
            broker_id: "local".into(),
            created_at: at,
            last_activity_at: at,
            closed_at: None,
            attached_clients: 0,
            title: None,
            last_bell_at: None,
            terminal,
            presence: Vec::new(),
            control_mode: Default::default(),
        }
    }

    #[test]
    fn a_session_says_what_its_terminal_is_doing() {
        use crate::domain::{Notification, Progress, SessionStatus, TerminalState};
        let unreported =
            serde_json::to_value(SessionBody::from(session(SessionStatus::Starting, None)))
                .unwrap();
        assert_eq!(unreported["state"], "starting");
        assert_eq!(unreported["shell_integration"], false);
        for field in ["last_notification", "progress", "cwd", "running_command_id"] {
            assert_eq!(unreported[field], serde_json::Value::Null, "{field}");
        }
        assert_eq!(
            (
                &unreported["title"],
                &unreported["cols"],
                &unreported["rows"]
            ),
            (&"".into(), &80.into(), &24.into())
        );
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        let busy = TerminalActivity {
            state: TerminalState::WaitingForInput,
            progress: Some(Progress::Indeterminate),
            notification: Some(Notification {
                text: "build done".into(),
                at,
            }),
            cwd: Some("/src".into()),
            integrated: true,
            running_command: Some(3),
        };
        let json = serde_json::to_value(SessionBody::from(session(
            SessionStatus::Active,
            Some(busy.clone()),
        )))
        .unwrap();
        assert_eq!(json["state"], "waiting_for_input");
        assert_eq!(
            json["last_notification"],
            serde_json::json!({"text": "build done", "at": "2027-01-15T08:00:00Z"})
        );
        assert_eq!(
            json["progress"],
            serde_json::json!({"kind": "indeterminate", "percent": null})
        );
        assert_eq!(
            (&json["cwd"], &json["shell_integration"]),
            (&"/src".into(), &true.into())
        );
        assert_eq!(json["running_command_id"], 3);
        // Whatever its broker said last, a session whose process ended has exited.
        for status in [SessionStatus::Exited, SessionStatus::Closed] {
            let ended =
                serde_json::to_value(SessionBody::from(session(status, Some(busy.clone()))))
                    .unwrap();
            assert_eq!(ended["state"], "exited", "{status:?}");
            assert_eq!(ended["running_command_id"], serde_json::Value::Null);
        }
    }

    #[test]
    fn targets_use_the_contract_shape() {
        let docker: TargetBody =
            serde_json::from_str(r#"{"docker": {"container": "web"}}"#).unwrap();
        assert!(matches!(docker, TargetBody::Docker { container } if container == "web"));
        let local: TargetBody = serde_json::from_str(r#"{"local": {}}"#).unwrap();
        assert!(matches!(local, TargetBody::Local {}));
        assert_eq!(
            serde_json::to_string(&TargetBody::Local {}).unwrap(),
            r#"{"local":{}}"#
        );
    }
}
