//! Calls to session-api about webhooks: register (for the caller, who is recorded as its
//! maker), list, delete; the answers converted to the gateway's [`Webhook`].

use ptyhub_proto::session::v1 as session_pb;

use crate::domain::{NewWebhook, Webhook, WebhookDelivery};
use crate::error::ApiError;

use super::convert::timestamp_from_proto;
use super::{Upstreams, session_api_error};

impl Upstreams {
    /// Registers a webhook of the instance; session-api checks the URL, the events and the
    /// secret, and records the actor these upstreams act for as its maker.
    pub async fn create_webhook(
        &self,
        instance_id: &str,
        new: NewWebhook,
    ) -> Result<Webhook, ApiError> {
        let request = session_pb::CreateWebhookRequest {
            instance: instance_id.to_owned(),
            url: new.url,
            events: new.events,
            secret: new.secret,
        };
        let created = self
            .session_api
            .clone()
            .create_webhook(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(webhook_from_proto(created))
    }

    /// The instance's webhooks, oldest first.
    pub async fn list_webhooks(&self, instance_id: &str) -> Result<Vec<Webhook>, ApiError> {
        let request = session_pb::ListWebhooksRequest {
            instance: instance_id.to_owned(),
        };
        let listed = self
            .session_api
            .clone()
            .list_webhooks(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(listed
            .webhooks
            .into_iter()
            .map(webhook_from_proto)
            .collect())
    }

    /// Deletes one of the instance's webhooks; answers it as it was.
    pub async fn delete_webhook(
        &self,
        instance_id: &str,
        webhook_id: &str,
    ) -> Result<Webhook, ApiError> {
        let request = session_pb::DeleteWebhookRequest {
            instance: instance_id.to_owned(),
            webhook_id: webhook_id.to_owned(),
        };
        let deleted = self
            .session_api
            .clone()
            .delete_webhook(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(webhook_from_proto(deleted))
    }
}

fn webhook_from_proto(webhook: session_pb::Webhook) -> Webhook {
    Webhook {
        id: webhook.id,
        instance_id: webhook.instance_id,
        url: webhook.url,
        events: webhook.events,
        created_by: webhook.created_by,
        created_at: timestamp_from_proto(webhook.created_at),
        dropped_events: webhook.dropped_events,
        last_delivery: webhook.last_delivery.map(|delivery| WebhookDelivery {
            id: delivery.id,
            event: delivery.event,
            at: timestamp_from_proto(delivery.at),
            attempts: delivery.attempts,
            status_code: u16::try_from(delivery.status_code)
                .ok()
                .filter(|status| *status != 0),
            error: Some(delivery.error).filter(|error| !error.is_empty()),
            outcome: delivery.outcome,
        }),
    }
}
