//! The screen routes (docs/CONTRACT.md, "Screens"): read a session's screen, type into it and
//! wait for it to show something, without a WebSocket. Like the other session routes, each is
//! served under both path layouts through [`InstanceScope`]. Every bound is checked here before
//! any call; the broker checks them again.

use axum::Json;
use axum::extract::{Path, Query, State};
use ptyhub_wire::Surface;

use super::bodies::{InputBody, InputWrittenBody, ScreenQuery, WaitAnswerBody, WaitBody};
use super::extract::{Caller, InstanceScope, JsonBody, SessionPath};
use crate::auth::Principal;
use crate::domain::{Instance, Screen};
use crate::error::{ApiError, ErrorBody};
use crate::scope::SeenBy as _;
use crate::state::AppState;

/// The session's screen: `format=text` (default) gives `lines` and `text`, `ansi` the rows with
/// their attributes, `json` every cell; `scrollback=N` puts up to N scrollback lines first.
#[utoipa::path(
    get, path = "/api/v1/instances/{iid}/terminal/sessions/{sid}/screen", tag = "screens",
    params(SessionPath, ScreenQuery),
    responses(
        (status = 200, body = Screen), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "unknown or closed session"),
        (status = 422, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn get_screen(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
    Path(SessionPath { sid, .. }): Path<SessionPath>,
    Query(query): Query<ScreenQuery>,
) -> Result<Json<Screen>, ApiError> {
    let request = query.parse()?;
    principal.access.check_scrollback(request.scrollback)?;
    let instance = scope.authorize(&state, &principal).await?;
    let session = state
        .authorize_live_session(&principal, &instance, &sid)
        .await?;
    let screen = state
        .upstreams
        .get_screen(&instance.id, &session.id, request)
        .await?;
    Ok(Json(screen.seen_by(&principal.access)))
}

/// Types `text`, then each of `keys`, as a brief controller that never takes control from an
/// attached one: 409 while a client holds control, unless `"force": true`.
#[utoipa::path(
    post, path = "/api/v1/instances/{iid}/terminal/sessions/{sid}/input", tag = "screens",
    params(SessionPath), request_body = InputBody,
    responses(
        (status = 200, body = InputWrittenBody), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "unknown or closed session"),
        (status = 409, body = ErrorBody, description = "a client holds control"),
        (status = 413, body = ErrorBody, description = "more than 1 MiB"),
        (status = 422, body = ErrorBody, description = "nothing to type, or an unknown key name; nothing was written"),
    ),
    security(("bearer" = [])),
)]
pub async fn send_input(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
    Path(SessionPath { sid, .. }): Path<SessionPath>,
    JsonBody(body): JsonBody<InputBody>,
) -> Result<Json<InputWrittenBody>, ApiError> {
    principal.access.require_control("typing")?;
    let force = body.force;
    let items = body.items()?;
    let instance = scope.authorize(&state, &principal).await?;
    let session = state
        .authorize_live_session(&principal, &instance, &sid)
        .await?;
    let written = state
        .upstreams
        .acting_for(&principal.actor(Surface::Rest))
        .send_input(&instance.id, &session.id, items, force)
        .await?;
    tracing::info!(instance_id = %instance.id, session_id = %session.id, subject = %principal.subject, bytes = written.bytes_written, force, "input typed over rest");
    Ok(Json(InputWrittenBody {
        bytes_written: written.bytes_written,
        offset: written.offset,
    }))
}

/// Waits until `pattern` matches the screen text (and, with `quiet_ms`, no output came for that
/// long), or the process ends; 408 when `timeout_ms` passes first.
#[utoipa::path(
    post, path = "/api/v1/instances/{iid}/terminal/sessions/{sid}/wait", tag = "screens",
    params(SessionPath), request_body(content = Option<WaitBody>),
    responses(
        (status = 200, body = WaitAnswerBody), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "unknown or closed session"),
        (status = 408, body = ErrorBody, description = "timeout_ms passed without a match"),
        (status = 422, body = ErrorBody, description = "a pattern that does not compile, or a bound exceeded"),
        (status = 429, body = ErrorBody, description = "the credential holds the most streams and waits it may"),
    ),
    security(("bearer" = [])),
)]
pub async fn wait_for_screen(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
    Path(SessionPath { sid, .. }): Path<SessionPath>,
    JsonBody(body): JsonBody<WaitBody>,
) -> Result<Json<WaitAnswerBody>, ApiError> {
    let instance = scope.authorize(&state, &principal);
    answer_wait(&state, &principal, instance, &sid, body)
        .await
        .map(Json)
}

/// A screen wait as every surface that offers one answers it (this route and MCP's
/// `wait_for`): the body checked against the contract's bounds and the principal's scrollback
/// before any call, then the instance (`instance`, which is not polled until then, so that a bad
/// body is refused first) and the live session authorized, and the wait held open like a
/// stream: it counts among the principal's on every surface and ends with its credential.
pub async fn answer_wait(
    state: &AppState,
    principal: &Principal,
    instance: impl Future<Output = Result<Instance, ApiError>>,
    session_id: &str,
    body: WaitBody,
) -> Result<WaitAnswerBody, ApiError> {
    let wait = body.wait()?;
    principal.access.check_scrollback(wait.screen.scrollback)?;
    let instance = instance.await?;
    let session = state
        .authorize_live_session(principal, &instance, session_id)
        .await?;
    let open = state.streams.open(principal)?;
    let result = open
        .unless_credential_ends(
            state
                .upstreams
                .wait_for_screen(&instance.id, &session.id, wait),
        )
        .await??;
    Ok(result.seen_by(&principal.access).into())
}
