//! The webhook calls of `SessionApi` (`CreateWebhook`, `ListWebhooks`, `DeleteWebhook`) over
//! [`WebhookService`]: requests checked into domain values, webhooks back into messages, the
//! secret never among them. Creating and deleting are audit events of the actor the gateway
//! names.

use ptyhub_proto::session::v1 as pb;
use ptyhub_wire::Actor;
use uuid::Uuid;

use super::from_pb::required;
use super::to_pb::timestamp;
use crate::error::Error;
use crate::webhooks::{NewWebhook, Webhook, WebhookService};

/// Registers the webhook a request describes, made by `actor`.
pub(super) async fn create_webhook(
    webhooks: &WebhookService,
    request: pb::CreateWebhookRequest,
    actor: &Actor,
) -> Result<pb::Webhook, Error> {
    let instance = required("instance", &request.instance)?;
    let new = NewWebhook::new(&request.url, &request.events, request.secret)?;
    let webhook = webhooks.create(instance, new, actor).await?;
    tracing::info!(instance_id = %webhook.instance_id, webhook_id = %webhook.id,
        created_by = %webhook.created_by, "webhook registered");
    Ok(webhook_to_pb(&webhook))
}

pub(super) async fn list_webhooks(
    webhooks: &WebhookService,
    request: pb::ListWebhooksRequest,
) -> Result<pb::ListWebhooksResponse, Error> {
    let instance = required("instance", &request.instance)?;
    let listed = webhooks.list(instance).await?;
    Ok(pb::ListWebhooksResponse {
        webhooks: listed.iter().map(webhook_to_pb).collect(),
    })
}

/// Deletes the webhook a request names, by `actor`.
pub(super) async fn delete_webhook(
    webhooks: &WebhookService,
    request: pb::DeleteWebhookRequest,
    actor: &Actor,
) -> Result<pb::Webhook, Error> {
    let instance = required("instance", &request.instance)?;
    // An id that is no uuid names no webhook.
    let webhook_id =
        Uuid::parse_str(&request.webhook_id).map_err(|_| Error::WebhookNotFound(Uuid::nil()))?;
    let webhook = webhooks.delete(instance, webhook_id, actor).await?;
    tracing::info!(instance_id = %webhook.instance_id, webhook_id = %webhook.id, "webhook deleted");
    Ok(webhook_to_pb(&webhook))
}

fn webhook_to_pb(webhook: &Webhook) -> pb::Webhook {
    pb::Webhook {
        id: webhook.id.to_string(),
        instance_id: webhook.instance_id.to_string(),
        url: webhook.url.clone(),
        events: webhook
            .events
            .iter()
            .map(|event| event.as_str().to_owned())
            .collect(),
        created_by: webhook.created_by.clone(),
        created_at: Some(timestamp(webhook.created_at)),
        last_delivery: webhook
            .last_delivery
            .as_ref()
            .map(|delivery| pb::WebhookDelivery {
                id: delivery.delivery_id.to_string(),
                event: delivery.event.as_str().to_owned(),
                at: Some(timestamp(delivery.at)),
                attempts: delivery.attempts,
                status_code: delivery.status_code.map_or(0, u32::from),
                error: delivery.error.clone().unwrap_or_default(),
                outcome: delivery.outcome.as_str().to_owned(),
            }),
        dropped_events: webhook.dropped_events,
    }
}
