//! The instance routes: register, list, get and delete (`/api/v1/instances[/{iid}]`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use ptyhub_model::{Name, NameKind};
use ptyhub_wire::Surface;

use super::bodies::{
    DeletedInstance, InstanceBody, InstanceList, RegisterInstanceBody, TargetBody,
};
use super::extract::{Caller, InstancePath, JsonBody};
use crate::auth::Principal;
use crate::domain::{NewInstance, RecordMode, Target};
use crate::error::{ApiError, ErrorBody};
use crate::scope::SeenBy as _;
use crate::state::AppState;

/// Register an instance (admin).
#[utoipa::path(
    post, path = "/api/v1/instances", tag = "instances",
    request_body = RegisterInstanceBody,
    responses(
        (status = 201, body = InstanceBody),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 503, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn register_instance(
    State(state): State<AppState>,
    Caller(principal): Caller,
    JsonBody(body): JsonBody<RegisterInstanceBody>,
) -> Result<(StatusCode, Json<InstanceBody>), ApiError> {
    require_admin(&principal, "registering instances")?;
    let name = Name::parse(NameKind::Instance, &body.name)?.into_string();
    if let Some(max_sessions) = body.max_sessions
        && !(1..=50).contains(&max_sessions)
    {
        return Err(ApiError::invalid("max_sessions must be 1..=50"));
    }
    let new_instance = NewInstance {
        name,
        target: match body.target {
            TargetBody::Local {} => Target::Local,
            TargetBody::Docker { container } => {
                if container.trim().is_empty() {
                    return Err(ApiError::invalid(
                        "target.docker.container must not be empty",
                    ));
                }
                Target::Docker { container }
            }
        },
        command: body.command.unwrap_or_default(),
        env: body.env.unwrap_or_default(),
        cwd: body.cwd.unwrap_or_default(),
        user: body.user.unwrap_or_default(),
        max_sessions: body.max_sessions.unwrap_or(0),
        labels: body.labels.unwrap_or_default(),
        record: match body.record.as_deref() {
            None => None,
            Some(text) => Some(text.parse::<RecordMode>().map_err(|_| {
                ApiError::invalid("record must be one of off, output, output+input")
            })?),
        },
        shell_integration: body.shell_integration,
        control_grant_timeout_secs: body.control_grant_timeout,
    };
    let instance = state
        .upstreams
        .acting_for(&principal.actor(Surface::Rest))
        .register_instance(new_instance)
        .await?;
    tracing::info!(instance_id = %instance.id, subject = %principal.subject, "instance registered");
    Ok((StatusCode::CREATED, Json(instance.into())))
}

/// The instances the credential may use.
#[utoipa::path(
    get, path = "/api/v1/instances", tag = "instances",
    responses((status = 200, body = InstanceList), (status = 401, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = [])),
)]
pub async fn list_instances(
    State(state): State<AppState>,
    Caller(principal): Caller,
) -> Result<Json<InstanceList>, ApiError> {
    let instances = state
        .upstreams
        .list_instances()
        .await?
        .into_iter()
        .filter(|instance| principal.access.allows(instance))
        .map(|instance| InstanceBody::from(instance.seen_by(&principal.access)))
        .collect();
    Ok(Json(InstanceList { instances }))
}

/// One instance.
#[utoipa::path(
    get, path = "/api/v1/instances/{iid}", tag = "instances", params(InstancePath),
    responses(
        (status = 200, body = InstanceBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn get_instance(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(path): Path<InstancePath>,
) -> Result<Json<InstanceBody>, ApiError> {
    let instance = state
        .authorize_instance_through(&principal, &path.iid, Surface::Rest)
        .await?;
    Ok(Json(instance.seen_by(&principal.access).into()))
}

/// Delete an instance, closing its sessions (admin).
#[utoipa::path(
    delete, path = "/api/v1/instances/{iid}", tag = "instances", params(InstancePath),
    responses(
        (status = 200, body = DeletedInstance), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn delete_instance(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(path): Path<InstancePath>,
) -> Result<Json<DeletedInstance>, ApiError> {
    require_admin(&principal, "deleting instances")?;
    let instance = state
        .authorize_instance_through(&principal, &path.iid, Surface::Rest)
        .await?;
    let closed_sessions = state
        .upstreams
        .acting_for(&principal.actor(Surface::Rest))
        .delete_instance(&instance.id)
        .await?;
    tracing::info!(instance_id = %instance.id, closed_sessions, subject = %principal.subject, "instance deleted");
    Ok(Json(DeletedInstance {
        status: "deleted".into(),
        instance_id: instance.id,
        closed_sessions,
    }))
}

fn require_admin(principal: &Principal, action: &str) -> Result<(), ApiError> {
    if principal.access.is_admin() {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!(
            "{action} needs an admin credential"
        )))
    }
}
