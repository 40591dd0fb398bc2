//! Share links (`/api/v1/instances/{iid}/shares`): a user who may control an instance creates a
//! link that lets whoever opens it watch the instance, or one session of it, as a viewer only,
//! until it expires or is revoked; lists them; revokes one. A share sees the present screen and
//! what follows, and the session's past (a replay, a screen's scrollback) only when its creator
//! says `history`. The link's token is in the answer to the create alone (session-api keeps
//! only its hash).

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use chrono::{DateTime, Utc};
use ptyhub_wire::Surface;
use ptyhub_wire::limits::{DEFAULT_SHARE_TTL, MIN_SHARE_TTL};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::extract::{Caller, InstancePath, JsonBody};
use crate::domain::Share;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// The query parameter of a share link (`/instances/{iid}?share=<token>`).
pub const SHARE_PARAMETER: &str = "share";

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateShareBody {
    /// One session of the instance (its id, or `default`); absent: every session.
    pub session_id: Option<String>,
    /// Seconds the link works, 60..=2592000 (default 86400, a day).
    pub expires_in: Option<u64>,
    /// Let the share see the session's past: a replay of the output from before it was opened
    /// and a screen's scrollback. Default `false`: only the present screen and what follows.
    pub history: Option<bool>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ShareBody {
    pub id: String,
    pub instance_id: String,
    /// `null`: every session of the instance.
    pub session_id: Option<String>,
    /// Always `viewer`.
    pub role: String,
    pub created_by: String,
    pub created_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// Whether it sees the session's past (its creator's choice); else only the present.
    pub history: bool,
}

impl From<Share> for ShareBody {
    fn from(share: Share) -> Self {
        Self {
            id: share.id,
            instance_id: share.instance_id,
            session_id: share.session_id,
            role: "viewer".into(),
            created_by: share.created_by,
            created_at: share.created_at,
            expires_at: share.expires_at,
            revoked_at: share.revoked_at,
            history: share.history,
        }
    }
}

/// A new share, with the link that opens it: shown this once.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedShareBody {
    #[serde(flatten)]
    pub share: ShareBody,
    /// The page's address with the token, to hand to the viewer.
    pub url: String,
    /// The token alone, a bearer credential for programs (viewer only).
    pub token: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ShareList {
    pub shares: Vec<ShareBody>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListSharesQuery {
    /// `ended` adds expired and revoked shares.
    pub include: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SharePath {
    /// Instance id or name.
    pub iid: String,
    /// The share's id.
    pub share_id: String,
}

/// Create a viewer-only share link of the instance or one of its sessions.
#[utoipa::path(
    post, path = "/api/v1/instances/{iid}/shares", tag = "shares",
    params(InstancePath), request_body(content = Option<CreateShareBody>),
    responses(
        (status = 201, body = CreatedShareBody), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn create_share(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(path): Path<InstancePath>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<CreateShareBody>,
) -> Result<(StatusCode, Json<CreatedShareBody>), ApiError> {
    principal.access.require_control("sharing")?;
    let instance = state
        .authorize_instance_through(&principal, &path.iid, Surface::Rest)
        .await?;
    let session_id = match &body.session_id {
        Some(session_id) => Some(
            state
                .authorize_live_session(&principal, &instance, session_id)
                .await?
                .id
                .to_string(),
        ),
        None => None,
    };
    let mut ttl = Duration::from_secs(body.expires_in.unwrap_or(DEFAULT_SHARE_TTL.as_secs()));
    // A share grants what its creator may see, so it ends no later than the creator's own
    // credential (a JWT's `exp`, a cookie's end).
    if let Some(expires_at) = principal.expires_at {
        let left = Duration::from_secs(expires_at.saturating_sub(state.clock.now()));
        if left < MIN_SHARE_TTL && ttl >= MIN_SHARE_TTL {
            return Err(ApiError::invalid(format!(
                "this credential ends in {} s: a share link lasts at least {} s and never \
                 outlives its creator's credential",
                left.as_secs(),
                MIN_SHARE_TTL.as_secs()
            )));
        }
        ttl = ttl.min(left);
    }
    let (share, token) = state
        .upstreams
        .acting_for(&principal.actor(Surface::Rest))
        .create_share(
            &instance.id,
            session_id.as_deref(),
            ttl,
            &principal.subject,
            body.history.unwrap_or(false),
        )
        .await?;
    tracing::info!(instance_id = %instance.id, share_id = %share.id, subject = %principal.subject, history = share.history, "share link created");
    let url = format!(
        "{}/instances/{}?{SHARE_PARAMETER}={token}",
        page_base(&state, &headers),
        instance.id
    );
    Ok((
        StatusCode::CREATED,
        Json(CreatedShareBody {
            share: share.into(),
            url,
            token,
        }),
    ))
}

/// The instance's share links, newest first: live ones, with `?include=ended` all.
#[utoipa::path(
    get, path = "/api/v1/instances/{iid}/shares", tag = "shares",
    params(InstancePath, ListSharesQuery),
    responses(
        (status = 200, body = ShareList), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn list_shares(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(path): Path<InstancePath>,
    Query(query): Query<ListSharesQuery>,
) -> Result<Json<ShareList>, ApiError> {
    principal.access.require_control("listing share links")?;
    let include_ended = match query.include.as_deref() {
        None | Some("") => false,
        Some("ended") => true,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "unknown include value {other:?}, expected \"ended\""
            )));
        }
    };
    let instance = state
        .authorize_instance_through(&principal, &path.iid, Surface::Rest)
        .await?;
    let shares = state
        .upstreams
        .list_shares(&instance.id, include_ended)
        .await?;
    Ok(Json(ShareList {
        shares: shares.into_iter().map(ShareBody::from).collect(),
    }))
}

/// Revoke a share link: it, and every page signed in with it, stop working at once.
#[utoipa::path(
    delete, path = "/api/v1/instances/{iid}/shares/{share_id}", tag = "shares",
    params(SharePath),
    responses(
        (status = 200, body = ShareBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn revoke_share(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(path): Path<SharePath>,
) -> Result<Json<ShareBody>, ApiError> {
    principal.access.require_control("revoking share links")?;
    let instance = state
        .authorize_instance_through(&principal, &path.iid, Surface::Rest)
        .await?;
    if uuid::Uuid::parse_str(&path.share_id).is_err() {
        return Err(ApiError::not_found("share not found"));
    }
    let existing = state
        .upstreams
        .list_shares(&instance.id, true)
        .await?
        .into_iter()
        .find(|share| share.id == path.share_id)
        .ok_or_else(|| ApiError::not_found("share not found"))?;
    if !(principal.access.is_admin() || existing.created_by == principal.subject) {
        return Err(ApiError::forbidden(
            "only the share link's creator or an admin may revoke it",
        ));
    }
    let share = state
        .upstreams
        .acting_for(&principal.actor(Surface::Rest))
        .revoke_share(&instance.id, &path.share_id)
        .await?;
    // Its open streams here end at once; other gateways find it gone within a second.
    state.streams.revoke_share(&share.id);
    tracing::info!(instance_id = %instance.id, share_id = %share.id, subject = %principal.subject, "share link revoked");
    Ok(Json(share.into()))
}

/// Where the page is: the public URL, else the scheme and host the request came with.
fn page_base(state: &AppState, headers: &HeaderMap) -> String {
    if let Some(url) = &state.public_url {
        return url.trim_end_matches('/').to_owned();
    }
    let host = headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .unwrap_or("localhost");
    let https = state.is_https(headers);
    format!("{}://{host}", if https { "https" } else { "http" })
}
