//! The REST API of CONTRACT.md: instances, sessions (also under the seed layout's
//! `/projects/{project_id}/repositories/{repository_id}/...` paths), `/healthz` and `/metrics`.
//! Each handler authenticates, validates, calls session-api and renders JSON.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use ptyhub_wire::{InvalidSize, Role, TerminalSize};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::{Principal, bearer_token};
use crate::domain::{Instance, NewInstance, Session, SessionSelector, SessionStatus, Target};
use crate::error::{ApiError, ErrorBody};
use crate::state::{AppState, SeedLabels};

// ---------------------------------------------------------------------------------------------
// Bodies.

/// Where an instance's terminals run: `{"docker": {"container": "..."}}` or `{"local": {}}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TargetBody {
    /// `docker exec` in a running container, by id or name.
    Docker { container: String },
    /// The broker's own host (development).
    Local {},
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
    /// Include `project_id` and `repository_id` for the seed layout's routes.
    pub labels: Option<BTreeMap<String, String>>,
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

#[derive(Debug, Serialize, ToSchema)]
pub struct SessionBody {
    pub id: String,
    pub instance_id: String,
    pub name: String,
    /// `starting`, `active`, `resetting`, `exited` or `closed`.
    pub status: String,
    /// Set when closed: `closed_by_user`, `exited`, `idle_reaped`, `broker_lost`,
    /// `instance_deleted` or `spawn_failed`.
    pub close_reason: Option<String>,
    /// Whether any client is attached now.
    pub has_websockets: bool,
    pub attached_clients: u32,
    pub created_at: Option<DateTime<Utc>>,
    pub last_activity_at: Option<DateTime<Utc>>,
    pub closed_at: Option<DateTime<Utc>>,
    pub aliases: Vec<String>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub cols: Option<u32>,
    pub rows: Option<u32>,
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
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedSession {
    pub id: String,
    pub name: String,
    pub status: String,
    pub created_at: Option<DateTime<Utc>>,
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
    /// Why the gateway is not healthy, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
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

// ---------------------------------------------------------------------------------------------
// Path and query parameters.

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct InstancePath {
    /// Instance id or name.
    pub iid: String,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SessionPath {
    /// Instance id or name.
    pub iid: String,
    /// Session id (a UUID).
    pub sid: String,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SeedInstancePath {
    /// Must equal the instance's `project_id` label.
    pub project_id: String,
    /// Must equal the instance's `repository_id` label.
    pub repository_id: String,
    /// Instance id or name.
    pub iid: String,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SeedSessionPath {
    pub project_id: String,
    pub repository_id: String,
    pub iid: String,
    pub sid: String,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListSessionsQuery {
    /// `closed` adds closed sessions (history).
    pub include: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Extractors.

/// The authenticated caller of a REST route (`Authorization: Bearer <token>`).
#[derive(Debug, Clone)]
pub struct Caller(pub Principal);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let principal = state
            .authenticator
            .authenticate(bearer_token(&parts.headers))?;
        Ok(Caller(principal))
    }
}

/// A JSON body: malformed JSON is 400, JSON of the wrong shape 422. An empty body reads as `{}`,
/// so a body whose fields are all optional may be left out.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned + 'static> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let bytes = axum::body::Bytes::from_request(request, state)
            .await
            .map_err(|rejection| ApiError::bad_request(rejection.body_text().to_lowercase()))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            // An optional body may be absent: `{}` stands in for it, and a required one then
            // reports its missing fields like any other incomplete body.
            return parse_json(b"{}");
        }
        parse_json(&bytes)
    }
}

fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<JsonBody<T>, ApiError> {
    serde_json::from_slice(bytes)
        .map(JsonBody)
        .map_err(|error| {
            use serde_json::error::Category;
            match error.classify() {
                Category::Data => ApiError::invalid(format!("invalid body: {error}")),
                Category::Syntax | Category::Eof | Category::Io => {
                    ApiError::bad_request(format!("malformed json: {error}"))
                }
            }
        })
}

// ---------------------------------------------------------------------------------------------
// Conversions.

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
        }
    }
}

impl From<Session> for SessionBody {
    fn from(session: Session) -> Self {
        Self {
            has_websockets: session.attached_clients > 0,
            attached_clients: session.attached_clients,
            id: session.id,
            instance_id: session.instance_id,
            name: session.name,
            status: session.status.as_str().to_owned(),
            close_reason: session
                .close_reason
                .map(|reason| reason.as_str().to_owned()),
            created_at: session.created_at,
            last_activity_at: session.last_activity_at,
            closed_at: session.closed_at,
            aliases: session.aliases,
            exit_code: session.exit.map(|exit| exit.code),
            exit_signal: session.exit.and_then(|exit| exit.signal),
            cols: session.size.map(|size| size.cols().into()),
            rows: session.size.map(|size| size.rows().into()),
        }
    }
}

/// A session or instance name: 1..=255 characters after trimming, no control characters.
pub fn validate_name(name: &str) -> Result<String, ApiError> {
    let trimmed = name.trim();
    let length = trimmed.chars().count();
    if !(1..=255).contains(&length) {
        return Err(ApiError::invalid(
            "name must be 1 to 255 characters after trimming",
        ));
    }
    if trimmed.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "name must not contain control characters",
        ));
    }
    Ok(trimmed.to_owned())
}

fn invalid_size(error: InvalidSize) -> ApiError {
    ApiError::invalid(error.to_string())
}

// ---------------------------------------------------------------------------------------------
// Instances.

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
    if body.name.trim().is_empty() {
        return Err(ApiError::invalid("name must not be empty"));
    }
    if let Some(max_sessions) = body.max_sessions
        && !(1..=50).contains(&max_sessions)
    {
        return Err(ApiError::invalid("max_sessions must be 1..=50"));
    }
    let new_instance = NewInstance {
        name: body.name,
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
    };
    let instance = state.upstreams.register_instance(new_instance).await?;
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
        .map(InstanceBody::from)
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
        .authorize_instance(&principal, &path.iid, None)
        .await?;
    Ok(Json(instance.into()))
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
        .authorize_instance(&principal, &path.iid, None)
        .await?;
    let closed_sessions = state.upstreams.delete_instance(&instance.id).await?;
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

// ---------------------------------------------------------------------------------------------
// Sessions: one implementation, served under both path layouts.

async fn list_sessions_of(
    state: &AppState,
    principal: &Principal,
    instance_reference: &str,
    seed: Option<SeedLabels<'_>>,
    query: ListSessionsQuery,
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
    let instance = state
        .authorize_instance(principal, instance_reference, seed)
        .await?;
    let sessions = state
        .upstreams
        .list_sessions(&instance.id, include_closed)
        .await?
        .into_iter()
        .map(SessionBody::from)
        .collect();
    Ok(Json(SessionList { sessions }))
}

async fn create_session_in(
    state: &AppState,
    principal: &Principal,
    instance_reference: &str,
    seed: Option<SeedLabels<'_>>,
    body: CreateSessionBody,
) -> Result<(StatusCode, Json<CreatedSession>), ApiError> {
    let instance = state
        .authorize_instance(principal, instance_reference, seed)
        .await?;
    let name = body.name.as_deref().map(validate_name).transpose()?;
    let size = TerminalSize::from_optional(body.cols, body.rows).map_err(invalid_size)?;
    let created = state
        .upstreams
        .create_session(&instance.id, name, body.aliases.unwrap_or_default(), size)
        .await?;
    let session = created.session;
    tracing::info!(instance_id = %instance.id, session_id = %session.id, subject = %principal.subject, "session created");
    Ok((
        StatusCode::CREATED,
        Json(CreatedSession {
            id: session.id,
            name: session.name,
            status: session.status.as_str().to_owned(),
            created_at: session.created_at,
        }),
    ))
}

async fn get_session_of(
    state: &AppState,
    principal: &Principal,
    instance_reference: &str,
    seed: Option<SeedLabels<'_>>,
    session_id: &str,
) -> Result<Json<SessionBody>, ApiError> {
    let instance = state
        .authorize_instance(principal, instance_reference, seed)
        .await?;
    let session = state.authorize_session(&instance, session_id).await?;
    Ok(Json(session.into()))
}

async fn close_session_of(
    state: &AppState,
    principal: &Principal,
    instance_reference: &str,
    seed: Option<SeedLabels<'_>>,
    session_id: &str,
) -> Result<Json<ClosedSession>, ApiError> {
    let instance = state
        .authorize_instance(principal, instance_reference, seed)
        .await?;
    let session = state.authorize_session(&instance, session_id).await?;
    if session.status != SessionStatus::Closed {
        state
            .upstreams
            .close_session(&instance.id, &session.id)
            .await?;
    }
    tracing::info!(instance_id = %instance.id, session_id = %session.id, subject = %principal.subject, "session closed");
    Ok(Json(ClosedSession {
        status: "closed".into(),
        session_id: session.id,
    }))
}

async fn reset_session_of(
    state: &AppState,
    principal: &Principal,
    instance_reference: &str,
    seed: Option<SeedLabels<'_>>,
    session_id: &str,
) -> Result<Json<ResetSessionBody>, ApiError> {
    let instance = state
        .authorize_instance(principal, instance_reference, seed)
        .await?;
    let session = state.authorize_session(&instance, session_id).await?;
    let session = state
        .upstreams
        .reset_session(&instance.id, &session.id)
        .await?;
    tracing::info!(instance_id = %instance.id, session_id = %session.id, subject = %principal.subject, "session reset");
    Ok(Json(ResetSessionBody {
        id: session.id,
        name: session.name,
        status: session.status.as_str().to_owned(),
    }))
}

async fn rename_session_of(
    state: &AppState,
    principal: &Principal,
    instance_reference: &str,
    seed: Option<SeedLabels<'_>>,
    session_id: &str,
    body: RenameSessionBody,
) -> Result<Json<RenamedSession>, ApiError> {
    let instance = state
        .authorize_instance(principal, instance_reference, seed)
        .await?;
    let name = validate_name(&body.name)?;
    let session = state.authorize_session(&instance, session_id).await?;
    let session = state
        .upstreams
        .rename_session(&instance.id, &session.id, name)
        .await?;
    Ok(Json(RenamedSession {
        id: session.id,
        name: session.name,
    }))
}

/// The legacy single-terminal reset: resets the `default` session, creating it when absent (a
/// fresh one needs no reset).
async fn reset_default_session_of(
    state: &AppState,
    principal: &Principal,
    instance_reference: &str,
    seed: Option<SeedLabels<'_>>,
) -> Result<Json<ResetSessionBody>, ApiError> {
    let instance = state
        .authorize_instance(principal, instance_reference, seed)
        .await?;
    let resolved = state
        .upstreams
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
            .reset_session(&instance.id, &resolved.session.id)
            .await?
    };
    tracing::info!(instance_id = %instance.id, session_id = %session.id, subject = %principal.subject, "default session reset");
    Ok(Json(ResetSessionBody {
        id: session.id,
        name: session.name,
        status: session.status.as_str().to_owned(),
    }))
}

fn seed(path: &SeedInstancePath) -> Option<SeedLabels<'_>> {
    Some(SeedLabels {
        project_id: &path.project_id,
        repository_id: &path.repository_id,
    })
}

fn seed_of_session(path: &SeedSessionPath) -> Option<SeedLabels<'_>> {
    Some(SeedLabels {
        project_id: &path.project_id,
        repository_id: &path.repository_id,
    })
}

/// Live sessions of an instance, oldest first; `?include=closed` adds history.
#[utoipa::path(
    get, path = "/api/v1/instances/{iid}/terminal/sessions", tag = "sessions",
    params(InstancePath, ListSessionsQuery),
    responses(
        (status = 200, body = SessionList), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn list_sessions(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(path): Path<InstancePath>,
    Query(query): Query<ListSessionsQuery>,
) -> Result<Json<SessionList>, ApiError> {
    list_sessions_of(&state, &principal, &path.iid, None, query).await
}

/// Create a session; 409 at the instance's cap.
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
    Path(path): Path<InstancePath>,
    JsonBody(body): JsonBody<CreateSessionBody>,
) -> Result<(StatusCode, Json<CreatedSession>), ApiError> {
    create_session_in(&state, &principal, &path.iid, None, body).await
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
    Path(path): Path<SessionPath>,
) -> Result<Json<SessionBody>, ApiError> {
    get_session_of(&state, &principal, &path.iid, None, &path.sid).await
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
    Path(path): Path<SessionPath>,
) -> Result<Json<ClosedSession>, ApiError> {
    close_session_of(&state, &principal, &path.iid, None, &path.sid).await
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
    Path(path): Path<SessionPath>,
) -> Result<Json<ResetSessionBody>, ApiError> {
    reset_session_of(&state, &principal, &path.iid, None, &path.sid).await
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
    Path(path): Path<SessionPath>,
    JsonBody(body): JsonBody<RenameSessionBody>,
) -> Result<Json<RenamedSession>, ApiError> {
    rename_session_of(&state, &principal, &path.iid, None, &path.sid, body).await
}

/// Reset the `default` session (legacy single-terminal API), creating it when absent.
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
    Path(path): Path<InstancePath>,
) -> Result<Json<ResetSessionBody>, ApiError> {
    reset_default_session_of(&state, &principal, &path.iid, None).await
}

/// Live sessions (seed layout; the instance's labels must match).
#[utoipa::path(
    get, path = "/projects/{project_id}/repositories/{repository_id}/instances/{iid}/terminal/sessions",
    tag = "seed layout", params(SeedInstancePath, ListSessionsQuery),
    responses((status = 200, body = SessionList), (status = 404, body = ErrorBody)),
    security(("bearer" = [])),
)]
pub async fn seed_list_sessions(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(path): Path<SeedInstancePath>,
    Query(query): Query<ListSessionsQuery>,
) -> Result<Json<SessionList>, ApiError> {
    list_sessions_of(&state, &principal, &path.iid, seed(&path), query).await
}

/// Create a session (seed layout).
#[utoipa::path(
    post, path = "/projects/{project_id}/repositories/{repository_id}/instances/{iid}/terminal/sessions",
    tag = "seed layout", params(SeedInstancePath), request_body(content = Option<CreateSessionBody>),
    responses((status = 201, body = CreatedSession), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("bearer" = [])),
)]
pub async fn seed_create_session(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(path): Path<SeedInstancePath>,
    JsonBody(body): JsonBody<CreateSessionBody>,
) -> Result<(StatusCode, Json<CreatedSession>), ApiError> {
    create_session_in(&state, &principal, &path.iid, seed(&path), body).await
}

/// One session (seed layout).
#[utoipa::path(
    get, path = "/projects/{project_id}/repositories/{repository_id}/instances/{iid}/terminal/sessions/{sid}",
    tag = "seed layout", params(SeedSessionPath),
    responses((status = 200, body = SessionBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])),
)]
pub async fn seed_get_session(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(path): Path<SeedSessionPath>,
) -> Result<Json<SessionBody>, ApiError> {
    get_session_of(
        &state,
        &principal,
        &path.iid,
        seed_of_session(&path),
        &path.sid,
    )
    .await
}

/// Close a session (seed layout).
#[utoipa::path(
    delete, path = "/projects/{project_id}/repositories/{repository_id}/instances/{iid}/terminal/sessions/{sid}",
    tag = "seed layout", params(SeedSessionPath),
    responses((status = 200, body = ClosedSession), (status = 404, body = ErrorBody)),
    security(("bearer" = [])),
)]
pub async fn seed_close_session(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(path): Path<SeedSessionPath>,
) -> Result<Json<ClosedSession>, ApiError> {
    close_session_of(
        &state,
        &principal,
        &path.iid,
        seed_of_session(&path),
        &path.sid,
    )
    .await
}

/// Reset a session (seed layout).
#[utoipa::path(
    post, path = "/projects/{project_id}/repositories/{repository_id}/instances/{iid}/terminal/sessions/{sid}/reset",
    tag = "seed layout", params(SeedSessionPath),
    responses((status = 200, body = ResetSessionBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])),
)]
pub async fn seed_reset_session(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(path): Path<SeedSessionPath>,
) -> Result<Json<ResetSessionBody>, ApiError> {
    reset_session_of(
        &state,
        &principal,
        &path.iid,
        seed_of_session(&path),
        &path.sid,
    )
    .await
}

/// Rename a session (seed layout).
#[utoipa::path(
    post, path = "/projects/{project_id}/repositories/{repository_id}/instances/{iid}/terminal/sessions/{sid}/rename",
    tag = "seed layout", params(SeedSessionPath), request_body = RenameSessionBody,
    responses((status = 200, body = RenamedSession), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])),
)]
pub async fn seed_rename_session(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(path): Path<SeedSessionPath>,
    JsonBody(body): JsonBody<RenameSessionBody>,
) -> Result<Json<RenamedSession>, ApiError> {
    rename_session_of(
        &state,
        &principal,
        &path.iid,
        seed_of_session(&path),
        &path.sid,
        body,
    )
    .await
}

/// Reset the `default` session (seed layout, legacy).
#[utoipa::path(
    post, path = "/projects/{project_id}/repositories/{repository_id}/instances/{iid}/terminal/reset",
    tag = "seed layout", params(SeedInstancePath),
    responses((status = 200, body = ResetSessionBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])),
)]
pub async fn seed_reset_default_session(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(path): Path<SeedInstancePath>,
) -> Result<Json<ResetSessionBody>, ApiError> {
    reset_default_session_of(&state, &principal, &path.iid, seed(&path)).await
}

// ---------------------------------------------------------------------------------------------
// Operations.

/// Whether session-api and every broker answer. Needs no credential.
#[utoipa::path(
    get, path = "/healthz", tag = "operations",
    responses((status = 200, body = HealthBody), (status = 503, body = HealthBody)),
)]
pub async fn healthz(State(state): State<AppState>) -> Response {
    let (status, body) = match state.upstreams.check_brokers().await {
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            HealthBody {
                status: "unavailable".into(),
                detail: Some(error.message),
                brokers: Vec::new(),
            },
        ),
        Ok(brokers) => {
            let down: Vec<String> = brokers
                .iter()
                .filter(|broker| broker.problem.is_some())
                .map(|broker| broker.id.clone())
                .collect();
            let brokers = brokers
                .into_iter()
                .map(|broker| BrokerHealthBody {
                    id: broker.id,
                    endpoint: broker.endpoint,
                    status: broker.problem.unwrap_or_else(|| "ok".into()),
                })
                .collect();
            if down.is_empty() {
                (
                    StatusCode::OK,
                    HealthBody {
                        status: "ok".into(),
                        detail: None,
                        brokers,
                    },
                )
            } else {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    HealthBody {
                        status: "unavailable".into(),
                        detail: Some(format!("brokers not answering: {}", down.join(", "))),
                        brokers,
                    },
                )
            }
        }
    };
    (status, Json(body)).into_response()
}

/// Liveness: the process serves HTTP. Needs no credential and asks no backend, so a slow
/// session-api or broker never gets a healthy gateway restarted.
#[utoipa::path(
    get, path = "/livez", tag = "operations",
    responses((status = 200, body = ProbeBody)),
)]
pub async fn livez() -> Json<ProbeBody> {
    Json(ProbeBody {
        status: "ok".into(),
        detail: None,
    })
}

/// Readiness: this replica should get new work. 503 once it is shutting down (a rolling
/// restart) or while session-api does not answer; brokers are not asked, since one lost node
/// must not take every gateway out of service. Needs no credential.
#[utoipa::path(
    get, path = "/readyz", tag = "operations",
    responses((status = 200, body = ProbeBody), (status = 503, body = ProbeBody)),
)]
pub async fn readyz(State(state): State<AppState>) -> Response {
    let problem = if state.draining.is_cancelled() {
        Some("gateway shutting down".to_owned())
    } else {
        state
            .upstreams
            .check_session_api()
            .await
            .err()
            .map(|error| error.message)
    };
    let (status, body) = match problem {
        None => (
            StatusCode::OK,
            ProbeBody {
                status: "ok".into(),
                detail: None,
            },
        ),
        Some(detail) => (
            StatusCode::SERVICE_UNAVAILABLE,
            ProbeBody {
                status: "unavailable".into(),
                detail: Some(detail),
            },
        ),
    };
    (status, Json(body)).into_response()
}

/// Prometheus metrics; needs a credential unless configured otherwise.
#[utoipa::path(
    get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain"), (status = 401, body = ErrorBody)),
    security(("bearer" = [])),
)]
pub async fn metrics(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    if state.metrics_require_auth {
        state.authenticator.authenticate(bearer_token(&headers))?;
    }
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response())
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

    #[test]
    fn bodies_distinguish_malformed_from_invalid() {
        let malformed = parse_json::<RenameSessionBody>(b"{\"name\":").unwrap_err();
        assert_eq!(malformed.code, ErrorCode::Malformed);
        let wrong_shape = parse_json::<RenameSessionBody>(b"{\"name\": 5}").unwrap_err();
        assert_eq!(wrong_shape.code, ErrorCode::Invalid);
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
