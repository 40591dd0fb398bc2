//! The session routes, each one handler served under both path layouts:
//! `/api/v1/instances/{iid}/terminal/...` and the older single-app layout's
//! `/projects/{project_id}/repositories/{repository_id}/instances/{iid}/terminal/...`, where the
//! [`InstanceScope`] also checks the instance's labels. The OpenAPI annotations name the first
//! layout; `openapi.rs` documents the second from them.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use ptyhub_model::{Role, TerminalSize};
use ptyhub_wire::Surface;

use super::bodies::{
    AddAliasesBody, ClosedSession, CreateSessionBody, CreatedSession, RenameSessionBody,
    RenamedSession, ResetSessionBody, SessionBody, SessionList, UpdateSessionBody,
    parse_control_mode, validate_name,
};
use super::extract::{
    Caller, InstancePath, InstanceScope, JsonBody, ListSessionsQuery, SessionPath,
};
use crate::authorize::DEFAULT_SESSION;
use crate::domain::{SessionSelector, SessionStatus};
use crate::error::{ApiError, ErrorBody};
use crate::scope::SeenBy as _;
use crate::state::AppState;

/// Live sessions of an instance, oldest first; `?include=closed` adds history.
#[utoipa::path(
    get, path = "/api/v1/instances/{iid}/terminal/sessions", tag = "sessions",
    params(InstancePath, ListSessionsQuery),
    responses(
        (status = 200, body = SessionList), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn list_sessions(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
    Query(query): Query<ListSessionsQuery>,
) -> Result<Json<SessionList>, ApiError> {
    let include_closed = match query.include.as_deref() {
        None | Some("") => false,
        Some("closed") => true,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "unknown include value {other:?}, expected \"closed\""
            )));
        }
    };
    let instance = scope.authorize(&state, &principal).await?;
    let sessions = state
        .upstreams
        .list_sessions(&instance.id, include_closed)
        .await?
        .into_iter()
        .filter(|session| principal.access.allows_session_record(session))
        .map(|session| SessionBody::from(session.seen_by(&principal.access)))
        .collect();
    Ok(Json(SessionList { sessions }))
}

/// Create a session; 409 at the instance's cap; 403 for a `command` the credential may not
/// choose.
#[utoipa::path(
    post, path = "/api/v1/instances/{iid}/terminal/sessions", tag = "sessions",
    params(InstancePath), request_body(content = Option<CreateSessionBody>),
    responses(
        (status = 201, body = CreatedSession), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn create_session(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
    JsonBody(body): JsonBody<CreateSessionBody>,
) -> Result<(StatusCode, Json<CreatedSession>), ApiError> {
    principal.access.require_control("creating a session")?;
    let instance = scope.authorize(&state, &principal).await?;
    let name = body.name.as_deref().map(validate_name).transpose()?;
    // Their count and rules are session-api's to judge: its 422 carries the detail.
    let aliases = body.aliases.unwrap_or_default();
    let size = TerminalSize::from_optional(body.cols, body.rows)
        .map_err(|error| ApiError::invalid(error.to_string()))?;
    let command = match body.command {
        Some(command) if command.is_empty() => {
            return Err(ApiError::invalid(
                "command must name a program; leave it out for the instance's command",
            ));
        }
        Some(command) => command,
        None => Vec::new(),
    };
    principal.access.check_command_override(&command)?;
    let control_mode = parse_control_mode(body.control_mode.as_deref())?.unwrap_or_default();
    let created = state
        .upstreams
        .acting_for(&principal.actor(Surface::Rest))
        .create_session(&instance.id, name, aliases, size, command, control_mode)
        .await?;
    let session = created.session;
    tracing::info!(instance_id = %instance.id, session_id = %session.id, subject = %principal.subject, "session created");
    Ok((
        StatusCode::CREATED,
        Json(CreatedSession {
            id: session.id.to_string(),
            name: session.name,
            status: session.status.as_str().to_owned(),
            created_at: Some(session.created_at),
        }),
    ))
}

/// One session.
#[utoipa::path(
    get, path = "/api/v1/instances/{iid}/terminal/sessions/{sid}", tag = "sessions",
    params(SessionPath),
    responses(
        (status = 200, body = SessionBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn get_session(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
    Path(SessionPath { sid, .. }): Path<SessionPath>,
) -> Result<Json<SessionBody>, ApiError> {
    let instance = scope.authorize(&state, &principal).await?;
    let session = state.authorize_session(&principal, &instance, &sid).await?;
    Ok(Json(session.seen_by(&principal.access).into()))
}

/// Close a session, ending its processes.
#[utoipa::path(
    delete, path = "/api/v1/instances/{iid}/terminal/sessions/{sid}", tag = "sessions",
    params(SessionPath),
    responses(
        (status = 200, body = ClosedSession), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn close_session(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
    Path(SessionPath { sid, .. }): Path<SessionPath>,
) -> Result<Json<ClosedSession>, ApiError> {
    principal.access.require_control("closing a session")?;
    let instance = scope.authorize(&state, &principal).await?;
    let session = state.authorize_session(&principal, &instance, &sid).await?;
    if session.status != SessionStatus::Closed {
        state
            .upstreams
            .acting_for(&principal.actor(Surface::Rest))
            .close_session(&instance.id, &session.id)
            .await?;
    }
    tracing::info!(instance_id = %instance.id, session_id = %session.id, subject = %principal.subject, "session closed");
    Ok(Json(ClosedSession {
        status: "closed".into(),
        session_id: session.id.to_string(),
    }))
}

/// Restart a session's command; the session id and offsets go on.
#[utoipa::path(
    post, path = "/api/v1/instances/{iid}/terminal/sessions/{sid}/reset", tag = "sessions",
    params(SessionPath),
    responses(
        (status = 200, body = ResetSessionBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn reset_session(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
    Path(SessionPath { sid, .. }): Path<SessionPath>,
) -> Result<Json<ResetSessionBody>, ApiError> {
    principal.access.require_control("resetting a session")?;
    if sid == DEFAULT_SESSION {
        // The same as the legacy `/terminal/reset`, which creates the session when absent.
        return reset_default_session(State(state), Caller(principal), scope).await;
    }
    let instance = scope.authorize(&state, &principal).await?;
    let session = state.authorize_session(&principal, &instance, &sid).await?;
    let session = state
        .upstreams
        .acting_for(&principal.actor(Surface::Rest))
        .reset_session(&instance.id, &session.id)
        .await?;
    tracing::info!(instance_id = %instance.id, session_id = %session.id, subject = %principal.subject, "session reset");
    Ok(Json(ResetSessionBody {
        id: session.id.to_string(),
        name: session.name,
        status: session.status.as_str().to_owned(),
    }))
}

/// Rename a session.
#[utoipa::path(
    post, path = "/api/v1/instances/{iid}/terminal/sessions/{sid}/rename", tag = "sessions",
    params(SessionPath), request_body = RenameSessionBody,
    responses(
        (status = 200, body = RenamedSession), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn rename_session(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
    Path(SessionPath { sid, .. }): Path<SessionPath>,
    JsonBody(body): JsonBody<RenameSessionBody>,
) -> Result<Json<RenamedSession>, ApiError> {
    principal.access.require_control("renaming a session")?;
    let instance = scope.authorize(&state, &principal).await?;
    let name = validate_name(&body.name)?;
    let session = state.authorize_session(&principal, &instance, &sid).await?;
    let session = state
        .upstreams
        .acting_for(&principal.actor(Surface::Rest))
        .rename_session(&instance.id, &session.id, name)
        .await?;
    Ok(Json(RenamedSession {
        id: session.id.to_string(),
        name: session.name,
    }))
}

/// Change a live session: its `control_mode`, which its broker applies to the attached streams
/// at once (their roles move without a reconnect). A field left out is not changed.
#[utoipa::path(
    patch, path = "/api/v1/instances/{iid}/terminal/sessions/{sid}", tag = "sessions",
    params(SessionPath), request_body = UpdateSessionBody,
    responses(
        (status = 200, body = SessionBody), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn update_session(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
    Path(SessionPath { sid, .. }): Path<SessionPath>,
    JsonBody(body): JsonBody<UpdateSessionBody>,
) -> Result<Json<SessionBody>, ApiError> {
    principal.access.require_control("changing a session")?;
    let instance = scope.authorize(&state, &principal).await?;
    let control_mode = parse_control_mode(body.control_mode.as_deref())?;
    let session = state.authorize_session(&principal, &instance, &sid).await?;
    let session = match control_mode {
        Some(control_mode) => {
            state
                .upstreams
                .acting_for(&principal.actor(Surface::Rest))
                .set_control_mode(&instance.id, &session.id, control_mode)
                .await?
        }
        None => session,
    };
    Ok(Json(session.seen_by(&principal.access).into()))
}

/// Give a live session more aliases: idempotent (an alias it holds is no change), with the
/// rules and the cap of creation's `aliases`; 409 for an alias another live session holds.
#[utoipa::path(
    post, path = "/api/v1/instances/{iid}/terminal/sessions/{sid}/aliases", tag = "sessions",
    params(SessionPath), request_body = AddAliasesBody,
    responses(
        (status = 200, body = SessionBody), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn add_session_aliases(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
    Path(SessionPath { sid, .. }): Path<SessionPath>,
    JsonBody(body): JsonBody<AddAliasesBody>,
) -> Result<Json<SessionBody>, ApiError> {
    principal
        .access
        .require_control("adding aliases to a session")?;
    let instance = scope.authorize(&state, &principal).await?;
    if body.aliases.is_empty() {
        return Err(ApiError::invalid("aliases: name at least one alias"));
    }
    let session = state.authorize_session(&principal, &instance, &sid).await?;
    let session = state
        .upstreams
        .acting_for(&principal.actor(Surface::Rest))
        .add_session_aliases(&instance.id, &session.id, body.aliases)
        .await?;
    Ok(Json(session.seen_by(&principal.access).into()))
}

/// Reset the `default` session (legacy single-terminal API), creating it when absent (a fresh
/// one needs no reset).
#[utoipa::path(
    post, path = "/api/v1/instances/{iid}/terminal/reset", tag = "sessions",
    params(InstancePath),
    responses(
        (status = 200, body = ResetSessionBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn reset_default_session(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
) -> Result<Json<ResetSessionBody>, ApiError> {
    principal.access.require_control("resetting a session")?;
    let instance = scope.authorize(&state, &principal).await?;
    let resolved = state
        .upstreams
        .acting_for(&principal.actor(Surface::Rest))
        .resolve_session(
            &instance.id,
            SessionSelector::Default,
            true,
            None,
            Role::Controller,
        )
        .await?;
    let session = if resolved.created {
        resolved.session
    } else {
        state
            .upstreams
            .acting_for(&principal.actor(Surface::Rest))
            .reset_session(&instance.id, &resolved.session.id)
            .await?
    };
    tracing::info!(instance_id = %instance.id, session_id = %session.id, subject = %principal.subject, "default session reset");
    Ok(Json(ResetSessionBody {
        id: session.id.to_string(),
        name: session.name,
        status: session.status.as_str().to_owned(),
    }))
}
