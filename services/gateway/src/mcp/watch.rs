//! Change notifications of screen resources (`notifications/resources/updated`), for both kinds
//! of subscriber: a client of the 2025 revisions subscribes within its MCP session
//! (`resources/subscribe`, [`Subscriptions`]), one of the 2026-07-28 revision holds a
//! `subscriptions/listen` request open ([`listen`]).
//!
//! A [`ScreenWatch`] asks the broker for the next screen with output past the one last seen (a
//! screen wait with an empty pattern and `after_offset`: the wait the screen route offers, so
//! a watch costs no more than any waiting client, and nothing on the terminal's path) and
//! notifies when one comes, at most every [`MIN_INTERVAL`]; it ends when the session's process
//! has exited (its screen changes no more), when the session is gone, when the subscription
//! ends, when the caller's credential expires or is revoked, and when the gateway stops. Each
//! watch holds one of the principal's stream slots, as an event stream does.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::service::SubscriptionContext;
use rmcp::{ErrorData, Peer, RoleServer};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use ptyhub_wire::ErrorCode;
use ptyhub_wire::limits::MAX_WAIT_MS;

use super::resources::{ScreenUri, protocol_error};
use crate::auth::Principal;
use crate::domain::{ScreenRequest, WaitOutcome};
use crate::rest::bodies::WaitBody;
use crate::state::AppState;
use crate::streams::OpenStream;

/// The least time between two notifications of one screen: a program that redraws all the
/// time costs its subscribers a notification every quarter second, not one a frame.
pub const MIN_INTERVAL: Duration = Duration::from_millis(250);

/// The screen subscriptions of one MCP session (2025 revisions), by URI. A subscription ends
/// when it is unsubscribed, replaced by a subscription to the same URI, or dropped with the
/// session's handler.
#[derive(Debug, Clone, Default)]
pub struct Subscriptions(Arc<Mutex<HashMap<String, DropGuard>>>);

impl Subscriptions {
    /// Starts watching the screen `uri` names for `principal`, who must be able to read it,
    /// notifying `peer`.
    pub async fn subscribe(
        &self,
        state: &AppState,
        principal: &Principal,
        uri: &str,
        peer: Peer<RoleServer>,
    ) -> Result<(), ErrorData> {
        // The client hears of the subscription when this returns: the screen it starts from is
        // the one before its answer, so nothing since is missed.
        let watch = ScreenWatch::start(state, principal, uri, None).await?;
        let cancel = CancellationToken::new();
        let ended = cancel.clone();
        state.bridges.spawn(async move {
            watch
                .run(ended, move |uri| {
                    let peer = peer.clone();
                    async move {
                        peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                            .await
                            .is_ok()
                    }
                })
                .await;
        });
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(uri.to_owned(), cancel.drop_guard());
        Ok(())
    }

    pub fn unsubscribe(&self, uri: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uri);
    }
}

/// Runs one `subscriptions/listen` request (2026-07-28): a watch of each screen it accepted,
/// until the client cancels it or none of them can change any more (then it ends gracefully,
/// and the client refetches). A screen the caller may not read ends it with that refusal.
pub async fn listen(
    state: &AppState,
    principal: &Principal,
    context: SubscriptionContext,
) -> Result<(), ErrorData> {
    // The SDK acknowledged the subscription just before this runs, and a client may type at
    // once: a screen that changed since then is notified at the start (`ScreenWatch::start`).
    let acknowledged = Instant::now();
    let uris = context
        .accepted()
        .resource_subscriptions
        .clone()
        .unwrap_or_default();
    let mut watches = Vec::with_capacity(uris.len());
    for uri in &uris {
        watches.push(ScreenWatch::start(state, principal, uri, Some(acknowledged)).await?);
    }
    let cancel = CancellationToken::new();
    let sink = context.sink();
    let running = futures::future::join_all(watches.into_iter().map(|watch| {
        watch.run(cancel.clone(), |uri| async move {
            sink.notify_resource_updated(uri).await.is_ok()
        })
    }));
    tokio::select! {
        _ = running => {}
        () = context.cancelled() => cancel.cancel(),
    }
    Ok(())
}

/// One subscriber's watch of one screen.
#[derive(Debug)]
struct ScreenWatch {
    state: AppState,
    uri: String,
    instance_id: String,
    session_id: String,
    /// The offset of the last screen seen: the next one with output past it is a change.
    seen: u64,
    /// The screen changed after the subscription was acknowledged and before `seen` was read:
    /// notified first.
    changed_at_start: bool,
    /// One of the principal's stream slots, and what ends its credential.
    open: OpenStream,
}

impl ScreenWatch {
    /// Checks that `principal` may read the screen, takes one of its stream slots, and notes
    /// the screen as it is now: only what changes from here on is notified. When the client was
    /// told of the subscription already, at `acknowledged`, output that came since then (the
    /// screen's quiet is shorter than the time this took) is a change to notify as well. Both
    /// are durations, each on one host's clock, so the broker's clock need not agree with ours;
    /// output just before the acknowledgement may be notified too, which costs a refetch.
    async fn start(
        state: &AppState,
        principal: &Principal,
        uri: &str,
        acknowledged: Option<Instant>,
    ) -> Result<Self, ErrorData> {
        let screen_uri =
            ScreenUri::parse(uri).map_err(|message| ErrorData::invalid_params(message, None))?;
        let (instance, session) = screen_uri
            .authorize(state, principal)
            .await
            .map_err(protocol_error)?;
        let open = state.streams.open(principal).map_err(protocol_error)?;
        let screen = state
            .upstreams
            .get_screen(&instance.id, &session.id, ScreenRequest::default())
            .await
            .map_err(protocol_error)?;
        let changed_at_start = acknowledged
            .is_some_and(|acknowledged| output_since(screen.quiet_ms, acknowledged.elapsed()));
        Ok(Self {
            state: state.clone(),
            uri: uri.to_owned(),
            instance_id: instance.id,
            session_id: session.id.to_string(),
            seen: screen.offset,
            changed_at_start,
            open,
        })
    }

    /// Notifies each change until one of the ends in the module's docs, or until `notify`
    /// says the subscriber is gone.
    async fn run<F, Delivered>(mut self, cancel: CancellationToken, mut notify: F)
    where
        F: FnMut(String) -> Delivered,
        Delivered: Future<Output = bool>,
    {
        let credential = self.open.credential().clone();
        let state = self.state.clone();
        let ended = async {
            tokio::select! {
                () = cancel.cancelled() => {}
                _ = credential.ended() => {}
                () = state.shutdown.cancelled() => {}
            }
        };
        tokio::pin!(ended);
        // A change already seen at the start is notified first, then paced as any other.
        let mut seen_at_start = self.changed_at_start.then_some(false);
        loop {
            let exited = match seen_at_start.take() {
                Some(exited) => exited,
                None => {
                    let next = tokio::select! {
                        next = self.next_change() => next,
                        () = &mut ended => return,
                    };
                    let Some(exited) = next else {
                        return;
                    };
                    exited
                }
            };
            if !notify(self.uri.clone()).await || exited {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(MIN_INTERVAL) => {}
                () = &mut ended => return,
            }
        }
    }

    /// Waits for a screen with output past the one last seen: `Some(exited)` when one came
    /// (`true` when the process has ended with it), `None` when the session cannot change any
    /// more (it is gone, or it had exited already) or its broker cannot be asked.
    async fn next_change(&mut self) -> Option<bool> {
        loop {
            // Any screen past `seen`, for as long as a wait may last; the REST body's checks
            // make the wait, so it is the one the screen route would make.
            let wait = WaitBody {
                timeout_ms: Some(MAX_WAIT_MS),
                after_offset: Some(self.seen),
                ..WaitBody::default()
            }
            .wait();
            let result = match wait {
                Ok(wait) => {
                    self.state
                        .upstreams
                        .wait_for_screen(&self.instance_id, &self.session_id, wait)
                        .await
                }
                Err(error) => Err(error),
            };
            match result {
                Ok(result) => {
                    let changed = result.screen.offset > self.seen;
                    self.seen = result.screen.offset;
                    let exited = result.outcome == WaitOutcome::Exited;
                    return match (changed, exited) {
                        (true, exited) => Some(exited),
                        (false, true) => None,
                        // A wait answers only a screen past `seen`; should one not be, ask again.
                        (false, false) => continue,
                    };
                }
                // Nothing changed for as long as a wait may last: wait again.
                Err(error) if error.code == ErrorCode::TimedOut => {}
                Err(error) => {
                    tracing::debug!(uri = %self.uri, %error, "screen watch ended");
                    return None;
                }
            }
        }
    }
}

/// Whether a screen read `ago` after a moment, with no output for `quiet_ms` before the reading
/// (`None`: never any output), may have had output since that moment. The broker truncates the
/// quiet to whole milliseconds, so a quiet shown as the whole milliseconds of `ago` (7 for
/// 7.4 ms) counts as output since; one equal to `ago` does not.
fn output_since(quiet_ms: Option<u64>, ago: Duration) -> bool {
    quiet_ms.is_some_and(|quiet| Duration::from_millis(quiet) < ago)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_after_the_acknowledgement_is_a_change_and_older_output_is_not() {
        let ago = Duration::from_micros(7_400);
        assert!(output_since(Some(3), ago), "output 3 ms ago came after it");
        assert!(
            output_since(Some(7), ago),
            "7.x ms truncated to 7 may be after it"
        );
        assert!(
            !output_since(Some(8), ago),
            "output 8 ms ago came before it"
        );
        assert!(!output_since(None, ago), "no output at all");
    }
}
