//! The command routes (docs/CONTRACT.md, "Commands"): the commands a session's shell ran, as its
//! shell integration marked them, with what the terminal is doing, and one command's output.
//! Served under both path layouts through [`InstanceScope`], to any credential that may read the
//! session's screen except a share link's: a share shows the terminal as it is from when it is
//! opened, and a command's output is the session's past. `run` types a command at the shell's
//! prompt and answers with how it ended: whoever may type may run.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, header};
use axum::response::Response;

use ptyhub_wire::Surface;

use super::bodies::{CommandList, CommandOutputQuery, CommandsQuery, RunAnswerBody, RunBody};
use super::extract::{Caller, CommandPath, InstanceScope, JsonBody, SessionPath};
use crate::domain::CommandOutputFormat;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// The commands the session's shell ran, oldest first (`after` an id, at most `limit`), with
/// what its terminal is doing. A session whose program has no shell integration lists none.
#[utoipa::path(
    get, path = "/api/v1/instances/{iid}/terminal/sessions/{sid}/commands", tag = "commands",
    params(SessionPath, CommandsQuery),
    responses(
        (status = 200, body = CommandList),
        (status = 400, body = ErrorBody, description = "after or limit is not a number"),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "not this instance, or a share link's credential"),
        (status = 404, body = ErrorBody, description = "unknown or closed session"),
        (status = 422, body = ErrorBody, description = "limit is 0 or over 1000"),
    ),
    security(("bearer" = [])),
)]
pub async fn list_commands(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
    Path(SessionPath { sid, .. }): Path<SessionPath>,
    Query(query): Query<CommandsQuery>,
) -> Result<Json<CommandList>, ApiError> {
    principal
        .access
        .require_control("reading a session's commands")?;
    let listing = query.parse()?;
    let instance = scope.authorize(&state, &principal).await?;
    let session = state
        .authorize_live_session(&principal, &instance, &sid)
        .await?;
    let page = state
        .upstreams
        .list_commands(&instance.id, &session.id, listing)
        .await?;
    Ok(Json(page.into()))
}

/// One command's output, up to now while it runs: `format=text` (default) as plain UTF-8 text,
/// `ansi` the bytes as the program wrote them. 410 when the session's output ring no longer
/// holds all of it.
#[utoipa::path(
    get, path = "/api/v1/instances/{iid}/terminal/sessions/{sid}/commands/{cid}/output",
    tag = "commands",
    params(CommandPath, CommandOutputQuery),
    responses(
        (status = 200, description = "the output: text/plain; charset=utf-8 for text, application/octet-stream for ansi", content_type = "text/plain"),
        (status = 400, body = ErrorBody, description = "an unknown format"),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "not this instance, or a share link's credential"),
        (status = 404, body = ErrorBody, description = "unknown or closed session, or a command the session does not keep"),
        (status = 410, body = ErrorBody, description = "the ring no longer holds all of the output; detail says how much is lost"),
    ),
    security(("bearer" = [])),
)]
pub async fn get_command_output(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
    Path(CommandPath { sid, cid, .. }): Path<CommandPath>,
    Query(query): Query<CommandOutputQuery>,
) -> Result<Response, ApiError> {
    principal
        .access
        .require_control("reading a command's output")?;
    let format = query.parse()?;
    let instance = scope.authorize(&state, &principal).await?;
    let session = state
        .authorize_live_session(&principal, &instance, &sid)
        .await?;
    // Ids count from 1: anything else names no command, as a session id that is not a UUID
    // names no session.
    let command_id = cid
        .parse::<u64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| ApiError::not_found("command not found"))?;
    let output = state
        .upstreams
        .command_output(&instance.id, &session.id, command_id, format)
        .await?;
    let content_type = match format {
        CommandOutputFormat::Text => "text/plain; charset=utf-8",
        CommandOutputFormat::Ansi => "application/octet-stream",
    };
    let mut response = Response::new(Body::from(output.data));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(response)
}

/// Types `command` at the shell's prompt, as a colleague would (everyone attached sees it), and
/// answers once it ended and the prompt is back: its exit code and output. 408 when it did not
/// end within `timeout_ms`; it goes on running.
#[utoipa::path(
    post, path = "/api/v1/instances/{iid}/terminal/sessions/{sid}/run", tag = "commands",
    params(SessionPath), request_body = RunBody,
    responses(
        (status = 200, body = RunAnswerBody),
        (status = 400, body = ErrorBody, description = "malformed JSON"),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "not this instance, or a viewer-only credential"),
        (status = 404, body = ErrorBody, description = "unknown or closed session"),
        (status = 408, body = ErrorBody, description = "the command did not end within timeout_ms; it goes on running"),
        (status = 409, body = ErrorBody, description = "the shell is not at its prompt (a program is running), or a client holds control and force is not set"),
        (status = 415, body = ErrorBody, description = "a body that is not JSON"),
        (status = 422, body = ErrorBody, description = "an empty or NUL-bearing command, timeout_ms out of bounds, or a program without shell integration; nothing was typed"),
    ),
    security(("bearer" = [])),
)]
pub async fn run_command(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
    Path(SessionPath { sid, .. }): Path<SessionPath>,
    JsonBody(body): JsonBody<RunBody>,
) -> Result<Json<RunAnswerBody>, ApiError> {
    principal.access.require_control("running a command")?;
    let run = body.run()?;
    let format = run.format;
    let force = run.force;
    let instance = scope.authorize(&state, &principal).await?;
    let session = state
        .authorize_live_session(&principal, &instance, &sid)
        .await?;
    // Acting for the caller: session-api records what it typed as their input.
    let result = state
        .upstreams
        .acting_for(&principal.actor(Surface::Rest))
        .run(&instance.id, &session.id, run)
        .await?;
    tracing::info!(instance_id = %instance.id, session_id = %session.id, subject = %principal.subject, command_id = result.command.id, exit_code = ?result.command.exit_code, force, "command run over rest");
    Ok(Json(RunAnswerBody::new(result, format)))
}
