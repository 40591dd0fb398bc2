//! Control without a stream (docs/CONTRACT.md, "Control requests"): a session's control state,
//! a standing request for control by the caller's principal, and answers to a pending request
//! by its id. Served under both path layouts through [`InstanceScope`]. Reading the state is
//! any credential's (a share link's sees no principals, as in presence); asking and answering
//! are refused to a viewer-only credential. Who may answer is the broker's to decide: the
//! controller's principal.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use utoipa::IntoParams;

use ptyhub_wire::Surface;

use super::extract::{Caller, InstanceScope, SessionPath};
use crate::auth::Principal;
use crate::domain::{ControlRequest, ControlState};
use crate::error::{ApiError, ErrorBody};
use crate::scope::SeenBy as _;
use crate::state::AppState;

/// The path of one request for control.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ControlRequestPath {
    /// Instance id or name.
    pub iid: String,
    /// Session id (a UUID), or `default` for the session with the default alias.
    pub sid: String,
    /// The request's id in its session, as the control state lists it.
    pub rid: String,
}

/// Who controls the session, for whom control is reserved, and the requests that wait.
#[utoipa::path(
    get, path = "/api/v1/instances/{iid}/terminal/sessions/{sid}/control", tag = "control",
    params(SessionPath),
    responses(
        (status = 200, body = ControlState), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "not this instance"),
        (status = 404, body = ErrorBody, description = "unknown or closed session"),
    ),
    security(("bearer" = [])),
)]
pub async fn get_control(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
    Path(SessionPath { sid, .. }): Path<SessionPath>,
) -> Result<Json<ControlState>, ApiError> {
    let instance = scope.authorize(&state, &principal).await?;
    let session = state
        .authorize_live_session(&principal, &instance, &sid)
        .await?;
    let control = state
        .upstreams
        .control_state(&instance.id, &session.id)
        .await?;
    Ok(Json(control.seen_by(&principal.access)))
}

/// Asks for control for the caller's principal, without a stream: the controller's page is
/// shown the request as a stream's; it waits for an answer (or 10 minutes).
#[utoipa::path(
    post, path = "/api/v1/instances/{iid}/terminal/sessions/{sid}/control/requests", tag = "control",
    params(SessionPath),
    responses(
        (status = 202, body = ControlRequest), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "not this instance, or a viewer-only credential"),
        (status = 404, body = ErrorBody, description = "unknown or closed session"),
        (status = 409, body = ErrorBody, description = "the caller controls already, asked already, or the session is shared"),
        (status = 422, body = ErrorBody, description = "the credential names nobody"),
        (status = 429, body = ErrorBody, description = "32 requests wait already"),
    ),
    security(("bearer" = [])),
)]
pub async fn request_control(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
    Path(SessionPath { sid, .. }): Path<SessionPath>,
) -> Result<(StatusCode, Json<ControlRequest>), ApiError> {
    principal.access.require_control("asking for control")?;
    let instance = scope.authorize(&state, &principal).await?;
    let session = state
        .authorize_live_session(&principal, &instance, &sid)
        .await?;
    let request = state
        .upstreams
        .acting_for(&principal.actor(Surface::Rest))
        .request_control(&instance.id, &session.id)
        .await?;
    tracing::info!(instance_id = %instance.id, session_id = %session.id, subject = %principal.subject, request_id = request.id, "control requested over rest");
    Ok((StatusCode::ACCEPTED, Json(request)))
}

/// Grants a pending request, as the controller's principal: the lease moves to the
/// requester's stream, or is reserved for its principal's next attach.
#[utoipa::path(
    post, path = "/api/v1/instances/{iid}/terminal/sessions/{sid}/control/requests/{rid}/grant",
    tag = "control", params(ControlRequestPath),
    responses(
        (status = 200, body = ControlState), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "not the controller's principal, or a viewer-only credential"),
        (status = 404, body = ErrorBody, description = "unknown or closed session, or no such pending request"),
    ),
    security(("bearer" = [])),
)]
pub async fn grant_control(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
    Path(path): Path<ControlRequestPath>,
) -> Result<Json<ControlState>, ApiError> {
    answer(&state, &principal, scope, path, true)
        .await
        .map(Json)
}

/// Declines a pending request, as the controller's principal; the requester's own principal
/// withdraws its request this way.
#[utoipa::path(
    post, path = "/api/v1/instances/{iid}/terminal/sessions/{sid}/control/requests/{rid}/decline",
    tag = "control", params(ControlRequestPath),
    responses(
        (status = 200, body = ControlState), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "neither the controller's nor the requester's principal, or a viewer-only credential"),
        (status = 404, body = ErrorBody, description = "unknown or closed session, or no such pending request"),
    ),
    security(("bearer" = [])),
)]
pub async fn decline_control(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
    Path(path): Path<ControlRequestPath>,
) -> Result<Json<ControlState>, ApiError> {
    answer(&state, &principal, scope, path, false)
        .await
        .map(Json)
}

async fn answer(
    state: &AppState,
    principal: &Principal,
    scope: InstanceScope,
    ControlRequestPath { sid, rid, .. }: ControlRequestPath,
    grant: bool,
) -> Result<ControlState, ApiError> {
    principal
        .access
        .require_control("answering a request for control")?;
    // Ids count from 1: anything else names no request, as a session id that is not a UUID
    // names no session.
    let request_id = rid
        .parse::<u64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| ApiError::not_found(format!("no pending request for control {rid}")))?;
    let instance = scope.authorize(state, principal).await?;
    let session = state
        .authorize_live_session(principal, &instance, &sid)
        .await?;
    let control = state
        .upstreams
        .acting_for(&principal.actor(Surface::Rest))
        .answer_control(&instance.id, &session.id, request_id, grant)
        .await?;
    tracing::info!(instance_id = %instance.id, session_id = %session.id, subject = %principal.subject, request_id, grant, "control request answered over rest");
    Ok(control)
}
