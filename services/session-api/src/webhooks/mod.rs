//! Webhooks: an instance's HTTP callbacks for what its terminals do, delivered by session-api.
//!
//! 1. An instance registers a webhook (`url`, `events`, `secret`) through [`WebhookService`];
//!    the request is checked here ([`NewWebhook::new`]) and stored within the instance's bound.
//! 2. When a broker reports a terminal change, the store records it and, in the same
//!    transaction, queues one delivery per subscribed webhook (`store/webhooks.rs`): a
//!    `state_changed` only from the replica whose write changed the session's state (every
//!    replica watches every broker, and only one write changes the row), a `command_finished`
//!    under a key unique per webhook and command, so that the same command reported by several
//!    replicas, or again after a reconnect, is queued once.
//! 3. Each replica runs one [`delivery`] task, off the terminal's and the change stream's
//!    paths: it claims due deliveries with a lease (`FOR UPDATE SKIP LOCKED` on PostgreSQL,
//!    SQLite's write lock), POSTs each signed body ([`signature`]) with a bounded number in
//!    flight, and records the answer; a failure is tried again later with exponential backoff
//!    and jitter, until the attempts run out. The queue is the table, so deliveries outlive a
//!    restart, and each webhook's undelivered deliveries are bounded.
//!
//! Webhooks reach whatever address session-api can reach: there is no allow-list of targets.

pub mod delivery;
pub mod payload;
pub mod settings;
pub mod signature;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use ptyhub_wire::Actor;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::error::Error;
use crate::store::Store;

pub use settings::WebhookSettings;

/// The most webhooks one instance may have.
pub const MAX_WEBHOOKS_PER_INSTANCE: usize = 20;
/// The most deliveries of one webhook that may wait to be delivered; events past it are
/// dropped (and counted on the webhook) until the receiver catches up.
pub const MAX_PENDING_DELIVERIES: u64 = 1000;
/// The bounds of a webhook's secret, in bytes.
pub const SECRET_BYTES: std::ops::RangeInclusive<usize> = 16..=256;
/// The longest URL a webhook may have.
pub const MAX_URL_BYTES: usize = 2048;

/// What a webhook can be told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WebhookEvent {
    /// A session's terminal state changed (`at_prompt` to `running`, say).
    StateChanged,
    /// A command a session's shell ran has ended.
    CommandFinished,
}

impl WebhookEvent {
    pub const ALL: [WebhookEvent; 2] = [WebhookEvent::StateChanged, WebhookEvent::CommandFinished];

    /// The contract's spelling, also the `X-Ptyhub-Event` header.
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookEvent::StateChanged => "state_changed",
            WebhookEvent::CommandFinished => "command_finished",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|event| event.as_str() == text)
    }
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// Not delivered yet: it will be tried (again).
    Pending,
    /// The receiver answered 2xx.
    Delivered,
    /// Every attempt failed: it is not tried again.
    Failed,
}

impl DeliveryOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryOutcome::Pending => "pending",
            DeliveryOutcome::Delivered => "delivered",
            DeliveryOutcome::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [
            DeliveryOutcome::Pending,
            DeliveryOutcome::Delivered,
            DeliveryOutcome::Failed,
        ]
        .into_iter()
        .find(|outcome| outcome.as_str() == text)
    }
}

/// A webhook as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    pub id: Uuid,
    pub instance_id: Uuid,
    pub url: String,
    pub events: Vec<WebhookEvent>,
    /// The credential's subject that made it.
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    /// Events not queued because [`MAX_PENDING_DELIVERIES`] waited already.
    pub dropped_events: u64,
    /// The last delivery tried, after its last attempt; `None` before the first.
    pub last_delivery: Option<LastDelivery>,
}

/// The result of a webhook's last delivery attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastDelivery {
    pub delivery_id: Uuid,
    pub event: WebhookEvent,
    /// When the attempt ended.
    pub at: DateTime<Utc>,
    /// How many attempts that delivery has had.
    pub attempts: u32,
    /// The receiver's HTTP status, when it answered.
    pub status_code: Option<u16>,
    /// Why no answer came (no connection, the timeout), when none did.
    pub error: Option<String>,
    pub outcome: DeliveryOutcome,
}

/// A webhook to register, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWebhook {
    /// `http://` or `https://` with a host, as the URL parser writes it.
    pub url: String,
    /// At least one, each once, in [`WebhookEvent::ALL`]'s order.
    pub events: Vec<WebhookEvent>,
    pub secret: String,
}

impl NewWebhook {
    /// Checks a registration: each refusal names the rule, for the caller's 422.
    pub fn new(url: &str, events: &[String], secret: String) -> Result<Self, Error> {
        let invalid = |message: String| Error::InvalidRequest(message);
        if url.len() > MAX_URL_BYTES {
            return Err(invalid(format!(
                "webhook url must be at most {MAX_URL_BYTES} bytes"
            )));
        }
        let parsed = reqwest::Url::parse(url.trim())
            .map_err(|error| invalid(format!("webhook url {url:?} is not a url: {error}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(invalid(format!(
                "webhook url must be http:// or https://, not {}://",
                parsed.scheme()
            )));
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(invalid("webhook url must name a host".to_owned()));
        }
        // A listing shows the URL: a password in it would be shown to every reader.
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(invalid(
                "webhook url must not carry credentials: the receiver checks the signature instead"
                    .to_owned(),
            ));
        }
        if events.is_empty() {
            return Err(invalid(format!(
                "events must name at least one of {}",
                event_names()
            )));
        }
        let mut parsed_events = Vec::with_capacity(events.len());
        for event in events {
            let event = WebhookEvent::parse(event).ok_or_else(|| {
                invalid(format!(
                    "unknown webhook event {event:?}: expected one of {}",
                    event_names()
                ))
            })?;
            parsed_events.push(event);
        }
        parsed_events.sort();
        parsed_events.dedup();
        if !SECRET_BYTES.contains(&secret.len()) {
            return Err(invalid(format!(
                "webhook secret must be {} to {} bytes",
                SECRET_BYTES.start(),
                SECRET_BYTES.end()
            )));
        }
        Ok(Self {
            url: parsed.into(),
            events: parsed_events,
            secret,
        })
    }
}

fn event_names() -> String {
    WebhookEvent::ALL.map(WebhookEvent::as_str).join(", ")
}

/// Webhooks registered, listed and deleted over the store, and the wake-up of this replica's
/// delivery task when a change queued deliveries.
#[derive(Debug, Clone)]
pub struct WebhookService {
    store: Store,
    deliveries_queued: Arc<Notify>,
}

impl WebhookService {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            deliveries_queued: Arc::new(Notify::new()),
        }
    }

    /// Registers a webhook of `instance` (id or name) made by `actor` (its `created_by` is the
    /// actor's principal), with its audit event; refused once the instance has
    /// [`MAX_WEBHOOKS_PER_INSTANCE`].
    pub async fn create(
        &self,
        instance: &str,
        new: NewWebhook,
        actor: &Actor,
    ) -> Result<Webhook, Error> {
        let instance = self.store.find_instance(instance).await?;
        self.store
            .insert_webhook(instance.id, &new, actor, MAX_WEBHOOKS_PER_INSTANCE)
            .await
    }

    /// The webhooks of `instance` (id or name), oldest first.
    pub async fn list(&self, instance: &str) -> Result<Vec<Webhook>, Error> {
        let instance = self.store.find_instance(instance).await?;
        self.store.list_webhooks(instance.id).await
    }

    /// Deletes a webhook of `instance` with the deliveries it still had, with the audit event
    /// of `actor`; answers it as it was.
    pub async fn delete(
        &self,
        instance: &str,
        webhook_id: Uuid,
        actor: &Actor,
    ) -> Result<Webhook, Error> {
        let instance = self.store.find_instance(instance).await?;
        self.store
            .delete_webhook(instance.id, webhook_id, actor)
            .await
    }

    /// Tells this replica's delivery task that deliveries were queued: it claims them at once
    /// rather than at its next poll.
    pub fn deliveries_queued(&self) {
        self.deliveries_queued.notify_one();
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    pub(crate) fn queued_signal(&self) -> Arc<Notify> {
        self.deliveries_queued.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "a-secret-of-32-bytes-0123456789a";

    fn new(url: &str, events: &[&str], secret: &str) -> Result<NewWebhook, String> {
        let events: Vec<String> = events.iter().map(|event| (*event).to_owned()).collect();
        NewWebhook::new(url, &events, secret.to_owned()).map_err(|error| error.to_string())
    }

    #[test]
    fn a_registration_keeps_each_event_once_in_one_order() {
        let webhook = new(
            "https://hooks.example.com/ptyhub?x=1",
            &["command_finished", "state_changed", "command_finished"],
            SECRET,
        )
        .expect("valid");
        assert_eq!(webhook.url, "https://hooks.example.com/ptyhub?x=1");
        assert_eq!(
            webhook.events,
            [WebhookEvent::StateChanged, WebhookEvent::CommandFinished]
        );
        let local = new("http://127.0.0.1:9/hook", &["state_changed"], SECRET).expect("valid");
        assert_eq!(local.url, "http://127.0.0.1:9/hook");
    }

    #[test]
    fn a_bad_registration_is_refused_with_its_rule() {
        let refused = |url: &str, events: &[&str], secret: &str| {
            new(url, events, secret).expect_err("refused")
        };
        assert!(refused("ftp://example.com/", &["state_changed"], SECRET).contains("http://"));
        assert!(refused("not a url", &["state_changed"], SECRET).contains("not a url"));
        assert!(refused("https://", &["state_changed"], SECRET).contains("host"));
        assert!(
            refused("https://u:p@example.com/", &["state_changed"], SECRET).contains("credentials")
        );
        assert!(refused("https://example.com/", &[], SECRET).contains("at least one"));
        assert!(
            refused("https://example.com/", &["state_changed", "exited"], SECRET)
                .contains("unknown webhook event \"exited\"")
        );
        assert!(refused("https://example.com/", &["state_changed"], "short").contains("16 to 256"));
        assert!(
            refused("https://example.com/", &["state_changed"], &"s".repeat(257))
                .contains("16 to 256")
        );
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_BYTES));
        assert!(refused(&long, &["state_changed"], SECRET).contains("at most"));
        // The bounds themselves are allowed.
        new("https://example.com/", &["state_changed"], &"s".repeat(16)).expect("16 bytes");
        new("https://example.com/", &["state_changed"], &"s".repeat(256)).expect("256 bytes");
    }

    #[test]
    fn every_spelling_reads_back() {
        for event in WebhookEvent::ALL {
            assert_eq!(WebhookEvent::parse(event.as_str()), Some(event));
        }
        for outcome in [
            DeliveryOutcome::Pending,
            DeliveryOutcome::Delivered,
            DeliveryOutcome::Failed,
        ] {
            assert_eq!(DeliveryOutcome::parse(outcome.as_str()), Some(outcome));
        }
        assert_eq!(WebhookEvent::parse("command_started"), None);
    }
}
