//! Webhooks (`/api/v1/instances/{iid}/webhooks`): a user who may control an instance registers
//! an HTTP callback for its terminals' state changes and finished commands, lists the
//! instance's (each with its last delivery), deletes one. session-api checks the registration
//! and delivers; a webhook's secret goes in once and is never shown again.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use ptyhub_wire::Surface;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::extract::{Caller, InstancePath, JsonBody};
use crate::domain::{NewWebhook, Webhook, WebhookDelivery};
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhookBody {
    /// Where deliveries are POSTed: `http://` or `https://`, with a host and no user or
    /// password.
    pub url: String,
    /// At least one of `state_changed` and `command_finished`.
    pub events: Vec<String>,
    /// The key of each delivery's `X-Ptyhub-Signature-256` (HMAC-SHA256), 16..=256 bytes.
    /// Never shown again.
    pub secret: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookBody {
    pub id: String,
    pub instance_id: String,
    pub url: String,
    pub events: Vec<String>,
    /// Who registered it.
    pub created_by: String,
    pub created_at: Option<DateTime<Utc>>,
    /// Events not delivered because 1000 deliveries of this webhook were waiting already.
    pub dropped_events: u64,
    /// The last delivery tried, after its last attempt; `null` before the first.
    pub last_delivery: Option<WebhookDeliveryBody>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookDeliveryBody {
    /// The `X-Ptyhub-Delivery` header of its attempts.
    pub id: String,
    pub event: String,
    /// When its last attempt ended.
    pub at: Option<DateTime<Utc>>,
    pub attempts: u32,
    /// The receiver's HTTP status; `null` when it did not answer.
    pub status_code: Option<u16>,
    /// Why no answer came; `null` when one did.
    pub error: Option<String>,
    /// `pending` (it will be tried again), `delivered` or `failed` (no attempt left).
    pub outcome: String,
}

impl From<Webhook> for WebhookBody {
    fn from(webhook: Webhook) -> Self {
        Self {
            id: webhook.id,
            instance_id: webhook.instance_id,
            url: webhook.url,
            events: webhook.events,
            created_by: webhook.created_by,
            created_at: webhook.created_at,
            dropped_events: webhook.dropped_events,
            last_delivery: webhook.last_delivery.map(WebhookDeliveryBody::from),
        }
    }
}

impl From<WebhookDelivery> for WebhookDeliveryBody {
    fn from(delivery: WebhookDelivery) -> Self {
        Self {
            id: delivery.id,
            event: delivery.event,
            at: delivery.at,
            attempts: delivery.attempts,
            status_code: delivery.status_code,
            error: delivery.error,
            outcome: delivery.outcome,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookList {
    pub webhooks: Vec<WebhookBody>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct WebhookPath {
    /// Instance id or name.
    pub iid: String,
    /// The webhook's id.
    pub webhook_id: String,
}

/// Register a webhook of the instance.
#[utoipa::path(
    post, path = "/api/v1/instances/{iid}/webhooks", tag = "webhooks",
    params(InstancePath), request_body(content = CreateWebhookBody),
    responses(
        (status = 201, body = WebhookBody), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn create_webhook(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(path): Path<InstancePath>,
    JsonBody(body): JsonBody<CreateWebhookBody>,
) -> Result<(StatusCode, Json<WebhookBody>), ApiError> {
    principal.access.require_control("registering webhooks")?;
    let instance = state
        .authorize_instance_through(&principal, &path.iid, Surface::Rest)
        .await?;
    let webhook = state
        .upstreams
        .acting_for(&principal.actor(Surface::Rest))
        .create_webhook(
            &instance.id,
            NewWebhook {
                url: body.url,
                events: body.events,
                secret: body.secret,
            },
        )
        .await?;
    Ok((StatusCode::CREATED, Json(webhook.into())))
}

/// The instance's webhooks, oldest first, each with its last delivery.
#[utoipa::path(
    get, path = "/api/v1/instances/{iid}/webhooks", tag = "webhooks",
    params(InstancePath),
    responses(
        (status = 200, body = WebhookList), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn list_webhooks(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(path): Path<InstancePath>,
) -> Result<Json<WebhookList>, ApiError> {
    principal.access.require_control("listing webhooks")?;
    let instance = state
        .authorize_instance_through(&principal, &path.iid, Surface::Rest)
        .await?;
    let webhooks = state.upstreams.list_webhooks(&instance.id).await?;
    Ok(Json(WebhookList {
        webhooks: webhooks.into_iter().map(WebhookBody::from).collect(),
    }))
}

/// Delete a webhook: nothing more is delivered to it, not even what was waiting.
#[utoipa::path(
    delete, path = "/api/v1/instances/{iid}/webhooks/{webhook_id}", tag = "webhooks",
    params(WebhookPath),
    responses(
        (status = 200, body = WebhookBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn delete_webhook(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(path): Path<WebhookPath>,
) -> Result<Json<WebhookBody>, ApiError> {
    principal.access.require_control("deleting webhooks")?;
    let instance = state
        .authorize_instance_through(&principal, &path.iid, Surface::Rest)
        .await?;
    if uuid::Uuid::parse_str(&path.webhook_id).is_err() {
        return Err(ApiError::not_found("webhook not found"));
    }
    let webhook = state
        .upstreams
        .acting_for(&principal.actor(Surface::Rest))
        .delete_webhook(&instance.id, &path.webhook_id)
        .await?;
    tracing::info!(instance_id = %instance.id, webhook_id = %webhook.id,
        subject = %principal.subject, "webhook deleted");
    Ok(Json(webhook.into()))
}
