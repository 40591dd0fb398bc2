//! This replica's delivery task: claims due deliveries from the shared queue, POSTs each on a
//! task of its own with at most `--webhook-concurrency` in flight, and records how each attempt
//! ended. It is woken when this replica queued deliveries and polls for the rest (retries that
//! came due, deliveries other replicas queued); a finished attempt wakes it too, so a backlog
//! drains as fast as the bound allows. One webhook has at most a quarter of the bound in flight,
//! so a receiver that hangs holds up its own deliveries, not the others'. Nothing on a terminal's or a change stream's path waits
//! for it.
//!
//! An attempt succeeds on any 2xx answer. Anything else (another status, a redirect, no
//! connection, no answer within `--webhook-timeout`) is tried again after
//! [`retry_delay`], until `--webhook-attempts` were made. An attempt cut short by a shutdown
//! gives its claim back, and any replica tries it again at once; one whose replica died is
//! tried again when its lease ends. So a receiver may, rarely, get a delivery twice, with the
//! same `X-Ptyhub-Delivery`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, HeaderValue};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::signature::{SIGNATURE_HEADER, signature};
use super::{DeliveryOutcome, WebhookService, WebhookSettings};
use crate::error::StartError;
use crate::store::{AttemptResult, ClaimedDelivery, Store, now};

/// The header naming the event.
pub const EVENT_HEADER: &str = "X-Ptyhub-Event";
/// The header with the delivery's id, the same on each of its attempts.
pub const DELIVERY_HEADER: &str = "X-Ptyhub-Delivery";
/// How long a finished delivery is kept: long enough that a command reported again (a
/// broker's replay after a reconnect) finds its key taken and is not delivered twice.
pub const FINISHED_DELIVERY_RETENTION: Duration = Duration::from_secs(24 * 3600);
/// How often finished deliveries past their retention are deleted.
const PRUNE_PERIOD: Duration = Duration::from_secs(3600);
/// The most deliveries claimed in one statement.
const CLAIM_BATCH: usize = 64;
/// The longest error kept for the listing.
const MAX_ERROR_CHARS: usize = 300;

/// Builds the HTTP client and starts the delivery task; it stops when `cancel` is cancelled,
/// giving back the claims of the attempts it cuts short.
pub(crate) fn start(
    webhooks: &WebhookService,
    settings: WebhookSettings,
    cancel: CancellationToken,
    tracker: TaskTracker,
) -> Result<(), StartError> {
    let deliverer = Arc::new(Deliverer {
        store: webhooks.store().clone(),
        queued: webhooks.queued_signal(),
        client: http_client(&settings)?,
        in_flight: Arc::new(Semaphore::new(settings.concurrency as usize)),
        in_flight_per_webhook: std::sync::Mutex::default(),
        settings,
        cancel,
        tracker: tracker.clone(),
    });
    tracker.spawn(deliverer.run());
    Ok(())
}

/// The wait before the attempt after `attempts_made` failed ones: `base` times 3 to the power
/// of one less, times `jitter` (0.8..1.2, drawn per delivery and attempt), so that receivers
/// that come back are not met by every delivery at once.
pub fn retry_delay(base: Duration, attempts_made: u32, jitter: f64) -> Duration {
    let exponent = attempts_made.saturating_sub(1).min(20);
    base.saturating_mul(3u32.saturating_pow(exponent))
        .mul_f64(jitter.clamp(0.8, 1.2))
}

/// Where a delivery stands after `attempts_made` attempts, the last answered with
/// `status_code` (`None`: no answer): delivered on a 2xx alone, given up once `max_attempts`
/// were made.
pub fn outcome_of(
    status_code: Option<u16>,
    attempts_made: u32,
    max_attempts: u32,
) -> DeliveryOutcome {
    if status_code.is_some_and(|status| (200..300).contains(&status)) {
        DeliveryOutcome::Delivered
    } else if attempts_made >= max_attempts {
        DeliveryOutcome::Failed
    } else {
        DeliveryOutcome::Pending
    }
}

struct Deliverer {
    store: Store,
    queued: Arc<Notify>,
    client: reqwest::Client,
    in_flight: Arc<Semaphore>,
    /// How many deliveries of each webhook are in flight from this replica.
    in_flight_per_webhook: std::sync::Mutex<HashMap<Uuid, usize>>,
    settings: WebhookSettings,
    cancel: CancellationToken,
    tracker: TaskTracker,
}

impl Deliverer {
    /// How many deliveries of one webhook may be in flight from this replica: a quarter of the
    /// bound (at least one), so that a receiver that never answers holds up its own deliveries
    /// and leaves the rest of the room to the others.
    fn per_webhook(&self) -> usize {
        (self.settings.concurrency as usize / 4).max(1)
    }

    async fn run(self: Arc<Self>) {
        let mut poll = tokio::time::interval(self.settings.poll_interval);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut prune = tokio::time::interval(PRUNE_PERIOD);
        prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = self.cancel.cancelled() => break,
                () = self.queued.notified() => {}
                _ = poll.tick() => {}
                _ = prune.tick() => {
                    self.prune_finished().await;
                    continue;
                }
            }
            self.claim_and_send().await;
        }
        tracing::debug!("webhook deliveries stopped");
    }

    /// Claims as many due deliveries as there is room in flight for, and sends each.
    async fn claim_and_send(self: &Arc<Self>) {
        loop {
            let room = self.in_flight.available_permits().min(CLAIM_BATCH);
            if room == 0 {
                return;
            }
            let in_flight = self
                .in_flight_per_webhook
                .lock()
                .expect("in-flight lock")
                .clone();
            let claimed = match self
                .store
                .claim_due_deliveries(room, self.settings.lease(), &in_flight, self.per_webhook())
                .await
            {
                Ok(claimed) => claimed,
                Err(error) => {
                    tracing::warn!(%error, "could not claim webhook deliveries");
                    return;
                }
            };
            let filled = claimed.len() == room;
            for delivery in claimed {
                // This task alone takes permits, and there was room for each.
                let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
                    return;
                };
                *self
                    .in_flight_per_webhook
                    .lock()
                    .expect("in-flight lock")
                    .entry(delivery.webhook_id)
                    .or_default() += 1;
                self.tracker
                    .spawn(self.clone().attempt_delivery(delivery, permit));
            }
            if !filled {
                return;
            }
        }
    }

    /// One attempt of one delivery, and its result recorded.
    async fn attempt_delivery(
        self: Arc<Self>,
        delivery: ClaimedDelivery,
        permit: OwnedSemaphorePermit,
    ) {
        let sent = tokio::select! {
            () = self.cancel.cancelled() => None,
            sent = self.send(&delivery) => Some(sent),
        };
        match sent {
            None => {
                if let Err(error) = self.store.release_claim(&delivery).await {
                    tracing::warn!(delivery_id = %delivery.id, %error,
                        "could not give back a webhook delivery at shutdown");
                }
            }
            Some(sent) => {
                let result = self.judge(&delivery, sent);
                log_attempt(&delivery, &result);
                if let Err(error) = self.store.record_attempt(&delivery, &result).await {
                    tracing::warn!(delivery_id = %delivery.id, %error,
                        "could not record a webhook delivery attempt");
                }
            }
        }
        {
            let mut in_flight = self.in_flight_per_webhook.lock().expect("in-flight lock");
            if let Some(count) = in_flight.get_mut(&delivery.webhook_id) {
                *count -= 1;
                if *count == 0 {
                    in_flight.remove(&delivery.webhook_id);
                }
            }
        }
        drop(permit);
        // Room in flight again: a backlog goes on at once.
        self.queued.notify_one();
    }

    /// POSTs the delivery's body, signed; the receiver's status, or why there was none.
    async fn send(&self, delivery: &ClaimedDelivery) -> Result<u16, String> {
        let response = self
            .client
            .post(&delivery.url)
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header(EVENT_HEADER, &delivery.event)
            .header(DELIVERY_HEADER, delivery.id.to_string())
            .header(
                SIGNATURE_HEADER,
                signature(delivery.secret.as_bytes(), delivery.body.as_bytes()),
            )
            .body(delivery.body.clone())
            .send()
            .await
            .map_err(|error| describe(&error, self.settings.request_timeout))?;
        Ok(response.status().as_u16())
    }

    /// What an attempt's answer means for the delivery.
    fn judge(&self, delivery: &ClaimedDelivery, sent: Result<u16, String>) -> AttemptResult {
        let attempts_made = delivery.attempts + 1;
        let (status_code, error) = match sent {
            Ok(status) => (Some(status), None),
            Err(error) => (None, Some(error)),
        };
        let outcome = outcome_of(status_code, attempts_made, self.settings.attempts);
        let delay = retry_delay(
            self.settings.retry_base,
            attempts_made,
            0.8 + rand::random::<f64>() * 0.4,
        );
        AttemptResult {
            status_code,
            error,
            outcome,
            next_attempt_at: now()
                + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::MAX),
        }
    }

    async fn prune_finished(&self) {
        let Some(cutoff) = chrono::Duration::from_std(FINISHED_DELIVERY_RETENTION)
            .ok()
            .and_then(|retention| now().checked_sub_signed(retention))
        else {
            return;
        };
        match self.store.prune_finished_deliveries(cutoff).await {
            Ok(0) => {}
            Ok(pruned) => tracing::info!(pruned, "pruned finished webhook deliveries"),
            Err(error) => tracing::warn!(%error, "could not prune webhook deliveries"),
        }
    }
}

fn log_attempt(delivery: &ClaimedDelivery, result: &AttemptResult) {
    let attempt = delivery.attempts + 1;
    match result.outcome {
        DeliveryOutcome::Delivered => tracing::debug!(delivery_id = %delivery.id,
            webhook_id = %delivery.webhook_id, attempt, "webhook delivered"),
        DeliveryOutcome::Pending => tracing::info!(delivery_id = %delivery.id,
            webhook_id = %delivery.webhook_id, attempt, status = ?result.status_code,
            error = ?result.error, "webhook delivery failed: it will be tried again"),
        DeliveryOutcome::Failed => tracing::warn!(delivery_id = %delivery.id,
            webhook_id = %delivery.webhook_id, attempt, status = ?result.status_code,
            error = ?result.error, "webhook delivery failed: no attempt left"),
    }
}

/// Why a request had no answer, in a line for the listing.
fn describe(error: &reqwest::Error, timeout: Duration) -> String {
    let described = if error.is_timeout() {
        format!("no answer within {}", humantime::format_duration(timeout))
    } else {
        let mut text = if error.is_connect() {
            "cannot connect".to_owned()
        } else {
            "request failed".to_owned()
        };
        // reqwest's own line repeats the URL; the causes say what happened.
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    };
    described.chars().take(MAX_ERROR_CHARS).collect()
}

/// The HTTP client of deliveries: rustls on ring with the system's roots for `https://`
/// receivers, redirects not followed (a 3xx is a failed attempt: the body is never sent where
/// the webhook's owner did not say), the per-attempt timeout.
fn http_client(settings: &WebhookSettings) -> Result<reqwest::Client, StartError> {
    use rustls_platform_verifier::BuilderVerifierExt as _;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|builder| builder.with_platform_verifier())
        .map_err(|error| StartError::WebhookClient(error.to_string()))?
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(settings.request_timeout)
        .user_agent(concat!("ptyhub-webhooks/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|error| StartError::WebhookClient(error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_2xx_delivers_and_the_last_attempt_gives_up() {
        assert_eq!(outcome_of(Some(200), 1, 6), DeliveryOutcome::Delivered);
        assert_eq!(outcome_of(Some(204), 6, 6), DeliveryOutcome::Delivered);
        // A redirect is not followed: the body goes nowhere its owner did not name.
        assert_eq!(outcome_of(Some(302), 1, 6), DeliveryOutcome::Pending);
        assert_eq!(outcome_of(Some(500), 5, 6), DeliveryOutcome::Pending);
        assert_eq!(outcome_of(None, 5, 6), DeliveryOutcome::Pending);
        assert_eq!(outcome_of(Some(500), 6, 6), DeliveryOutcome::Failed);
        assert_eq!(outcome_of(None, 1, 1), DeliveryOutcome::Failed);
    }

    #[test]
    fn retries_wait_three_times_longer_each_time_within_the_jitter() {
        let base = Duration::from_secs(5);
        let waits: Vec<u64> = (1..=5)
            .map(|attempts| retry_delay(base, attempts, 1.0).as_secs())
            .collect();
        assert_eq!(waits, [5, 15, 45, 135, 405]);
        // Six attempts span about ten minutes.
        assert_eq!(waits.iter().sum::<u64>(), 605);
        assert_eq!(retry_delay(base, 2, 0.8), Duration::from_secs(12));
        assert_eq!(retry_delay(base, 2, 1.2), Duration::from_secs(18));
        // Jitter out of its range is held to it; a huge count does not overflow.
        assert_eq!(retry_delay(base, 1, 9.0), Duration::from_secs(6));
        assert!(retry_delay(base, u32::MAX, 1.0) > Duration::from_secs(3600));
    }
}
