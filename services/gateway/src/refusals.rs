//! Refused attempts in the audit trail, coalesced, so that a flood of bad credentials costs the
//! trail a row a minute rather than a row a request. A refusal is counted in a window of its
//! principal (none for a refused credential), client IP address and reason:
//!
//! 1. The first refusal of a window is reported at once, with `count` 1, and opens the window
//!    for [`REFUSAL_WINDOW`].
//! 2. Refusals while the window is open are only counted (a lock and an increment: a guesser's
//!    requests stay cheap).
//! 3. When the window closes, what it counted is reported as one row, with its `count` and the
//!    surface and action of the first refusal it counts, and the next window opens at once; a
//!    window that counted nothing closes for good, so the next refusal is reported at once again.
//!
//! So one gateway writes a key's rows at least a minute apart, and `count` adds up to every
//! refusal it saw. Each replica counts its own: behind N gateways, at most N rows a minute.
//! The count lives in the gateway's memory until its window closes: a stopping gateway reports
//! every open window first (`close`), a crash loses at most a minute of counts. Coalescing here
//! rather than in session-api (an upsert per refusal) is what keeps a flood off the database
//! and off the calls to session-api, not only out of the table.
//!
//! Reports in flight are bounded ([`MAX_REPORTS_IN_FLIGHT`]): a first refusal that finds no
//! room is counted into its window instead of dropped, and a window's report waits for room.
//! Windows are bounded too ([`MAX_OPEN_WINDOWS`]): past that, a refusal is counted in the
//! window of its principal and reason with no address, which the trail shows as such.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ptyhub_model::AuditKind;
use ptyhub_wire::{Actor, Surface};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::grpc::{AuditReport, Upstreams};

/// How long a window counts refusals before it reports them: a key's rows are this far apart.
pub const REFUSAL_WINDOW: Duration = Duration::from_secs(60);

/// The most windows open at once (principals, addresses and reasons refused within a minute).
pub const MAX_OPEN_WINDOWS: usize = 4096;

/// The most refusal reports on their way to session-api at once.
pub const MAX_REPORTS_IN_FLIGHT: usize = 64;

/// The longest `action` kept, cut at a character boundary: what was tried comes from the request
/// (a path), and a window holds it for a minute.
pub const MAX_ACTION_BYTES: usize = 256;

/// One refused attempt, as the surface that refused it saw it.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The credential's subject; `None` when the credential itself was refused.
    pub principal: Option<String>,
    /// The client's IP address (the TCP peer's).
    pub address: Option<IpAddr>,
    pub surface: Surface,
    /// `unauthenticated` or `forbidden`.
    pub reason: &'static str,
    /// What was tried: a method and path, a gRPC method.
    pub action: String,
}

/// Where the coalesced reports go: session-api's `RecordAuditEvent`, acting for the refused
/// caller (a recorder of its own in the unit tests).
pub trait RefusalSink: Send + Sync + 'static {
    fn report(&self, actor: Actor, report: AuditReport) -> impl Future<Output = ()> + Send;
}

impl RefusalSink for Upstreams {
    async fn report(&self, actor: Actor, report: AuditReport) {
        self.acting_for(&actor).report_audit_event(report).await;
    }
}

/// The gateway's refusal windows. Clones share them.
#[derive(Debug)]
pub struct RefusalAudit<S = Upstreams> {
    inner: Arc<Inner<S>>,
}

impl<S> Clone for RefusalAudit<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

#[derive(Debug)]
struct Inner<S> {
    sink: S,
    windows: Mutex<HashMap<WindowKey, Counted>>,
    in_flight: Arc<Semaphore>,
    tasks: TaskTracker,
    closing: CancellationToken,
}

/// Whose refusals a window counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct WindowKey {
    principal: Option<String>,
    address: Option<IpAddr>,
    reason: &'static str,
}

/// What an open window counted since its last report.
#[derive(Debug, Default)]
struct Counted {
    count: u64,
    /// The first refusal counted: its surface and action describe the row.
    first: Option<(Surface, String)>,
}

impl Counted {
    fn add(&mut self, surface: Surface, action: String) {
        self.count += 1;
        self.first.get_or_insert((surface, action));
    }
}

impl<S: RefusalSink> RefusalAudit<S> {
    pub fn new(sink: S) -> Self {
        Self {
            inner: Arc::new(Inner {
                sink,
                windows: Mutex::default(),
                in_flight: Arc::new(Semaphore::new(MAX_REPORTS_IN_FLIGHT)),
                tasks: TaskTracker::new(),
                closing: CancellationToken::new(),
            }),
        }
    }

    /// Counts `refusal`, reporting it at once when it opens a window. Never waits.
    pub fn record(&self, mut refusal: Refusal) {
        refusal
            .action
            .truncate(refusal.action.floor_char_boundary(MAX_ACTION_BYTES));
        let mut key = WindowKey {
            principal: refusal.principal,
            address: refusal.address,
            reason: refusal.reason,
        };
        {
            let mut windows = self.windows();
            if !windows.contains_key(&key) && windows.len() >= MAX_OPEN_WINDOWS {
                key.address = None;
            }
            if let Some(counted) = windows.get_mut(&key) {
                counted.add(refusal.surface, refusal.action);
                return;
            }
            windows.insert(key.clone(), Counted::default());
        }
        match self.inner.in_flight.clone().try_acquire_owned() {
            Ok(permit) => {
                let audit = self.clone();
                let actor = actor_of(&key, refusal.surface);
                let report = refused(&key, &refusal.action, 1);
                self.inner.tasks.spawn(async move {
                    audit.inner.sink.report(actor, report).await;
                    drop(permit);
                });
            }
            Err(_) => {
                tracing::debug!(
                    reason = key.reason,
                    "refusal reports all in flight: counted for later"
                );
                if let Some(counted) = self.windows().get_mut(&key) {
                    counted.add(refusal.surface, refusal.action);
                }
            }
        }
        self.inner.tasks.spawn(self.clone().close_windows(key));
    }

    /// Reports what every open window counted, at once, and what opens from now on as soon as
    /// it opens; [`RefusalAudit::closed`] then waits for the reports.
    pub fn close(&self) {
        self.inner.closing.cancel();
        self.inner.tasks.close();
    }

    /// Completes once every report is sent, after [`RefusalAudit::close`].
    pub async fn closed(&self) {
        self.inner.tasks.wait().await;
    }

    /// Closes `key`'s window every [`REFUSAL_WINDOW`], reporting what it counted, until one
    /// counted nothing (or the gateway stops).
    async fn close_windows(self, key: WindowKey) {
        loop {
            let stopping = tokio::select! {
                () = tokio::time::sleep(REFUSAL_WINDOW) => false,
                () = self.inner.closing.cancelled() => true,
            };
            let counted = {
                let mut windows = self.windows();
                let counted = if stopping {
                    windows.remove(&key)
                } else {
                    windows.get_mut(&key).map(std::mem::take)
                };
                match counted {
                    Some(counted) if counted.count > 0 => counted,
                    _ => {
                        windows.remove(&key);
                        return;
                    }
                }
            };
            let (surface, action) = counted.first.unwrap_or((Surface::Rest, String::new()));
            let Ok(_permit) = self.inner.in_flight.clone().acquire_owned().await else {
                return;
            };
            self.inner
                .sink
                .report(
                    actor_of(&key, surface),
                    refused(&key, &action, counted.count),
                )
                .await;
            if stopping {
                return;
            }
        }
    }

    fn windows(&self) -> std::sync::MutexGuard<'_, HashMap<WindowKey, Counted>> {
        self.inner
            .windows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Who a window's rows name: the principal and the address alone (its refusals came over any
/// number of connections, so no port).
fn actor_of(key: &WindowKey, surface: Surface) -> Actor {
    let address = key.address.map(|address| address.to_string());
    match &key.principal {
        Some(principal) => Actor::new(principal, address, surface),
        None => Actor::unknown(address, surface),
    }
}

fn refused(key: &WindowKey, action: &str, count: u64) -> AuditReport {
    AuditReport::new(AuditKind::Refused)
        .detail("reason", key.reason)
        .detail("action", action)
        .detail("count", count.to_string())
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    /// Keeps what would have gone to session-api.
    #[derive(Debug, Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<(Actor, AuditReport)>>>);

    impl RefusalSink for Recorder {
        async fn report(&self, actor: Actor, report: AuditReport) {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((actor, report));
        }
    }

    impl Recorder {
        fn take(&self) -> Vec<(Actor, AuditReport)> {
            std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
        }
    }

    fn count(report: &AuditReport) -> u64 {
        report.detail["count"].parse().expect("a count")
    }

    fn refusal(address: IpAddr, action: &str) -> Refusal {
        Refusal {
            principal: None,
            address: Some(address),
            surface: Surface::Rest,
            reason: "unauthenticated",
            action: action.to_owned(),
        }
    }

    const GUESSER: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));

    /// Lets the spawned reports run, without moving the paused clock.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_from_one_address_is_one_row_at_once_then_one_a_minute() {
        let recorder = Recorder::default();
        let audit = RefusalAudit::new(recorder.clone());
        for attempt in 0..1000 {
            audit.record(refusal(GUESSER, &format!("GET /attempt/{attempt}")));
        }
        settle().await;
        let first = recorder.take();
        assert_eq!(first.len(), 1, "{first:?}");
        let (actor, report) = &first[0];
        assert_eq!(count(report), 1);
        assert_eq!(actor.principal, "");
        assert_eq!(actor.client_address.as_deref(), Some("192.0.2.7"));
        assert_eq!(report.detail["action"], "GET /attempt/0");

        tokio::time::sleep(REFUSAL_WINDOW - Duration::from_secs(1)).await;
        assert!(
            recorder.take().is_empty(),
            "nothing before the minute is over"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        let rest = recorder.take();
        assert_eq!(rest.len(), 1, "{rest:?}");
        assert_eq!(count(&rest[0].1), 999, "the rest of the minute in one row");
        assert_eq!(rest[0].1.detail["action"], "GET /attempt/1");

        // The flood goes on in the next minute: counted, reported when that one is over.
        for _ in 0..5 {
            audit.record(refusal(GUESSER, "GET /again"));
        }
        settle().await;
        assert!(
            recorder.take().is_empty(),
            "a key's rows are a minute apart"
        );
        tokio::time::sleep(REFUSAL_WINDOW).await;
        let next = recorder.take();
        assert_eq!(next.iter().map(|(_, report)| count(report)).sum::<u64>(), 5);

        // A quiet minute closes the window: the next refusal is news again, reported at once.
        tokio::time::sleep(REFUSAL_WINDOW * 2).await;
        assert!(recorder.take().is_empty());
        assert!(
            audit.windows().is_empty(),
            "no window is held for a quiet key"
        );
        audit.record(refusal(GUESSER, "GET /later"));
        settle().await;
        assert_eq!(recorder.take().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn principals_addresses_and_reasons_are_counted_apart() {
        let recorder = Recorder::default();
        let audit = RefusalAudit::new(recorder.clone());
        let other = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1));
        for _ in 0..3 {
            audit.record(refusal(GUESSER, "GET /a"));
            audit.record(refusal(other, "GET /a"));
            audit.record(Refusal {
                principal: Some("carol".to_owned()),
                reason: "forbidden",
                ..refusal(GUESSER, "instance theirs")
            });
        }
        settle().await;
        assert_eq!(recorder.take().len(), 3, "one row at once for each");
        tokio::time::sleep(REFUSAL_WINDOW + Duration::from_secs(1)).await;
        let counted = recorder.take();
        assert_eq!(counted.len(), 3);
        assert!(counted.iter().all(|(_, report)| count(report) == 2));
        let carols = counted
            .iter()
            .find(|(actor, _)| actor.principal == "carol")
            .expect("carol's row");
        assert_eq!(carols.1.detail["reason"], "forbidden");
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_action_is_cut_to_its_bound() {
        let recorder = Recorder::default();
        let audit = RefusalAudit::new(recorder.clone());
        let long = format!("GET /{}", "é".repeat(MAX_ACTION_BYTES));
        audit.record(refusal(GUESSER, &long));
        settle().await;
        let reports = recorder.take();
        let action = &reports[0].1.detail["action"];
        assert!(action.len() <= MAX_ACTION_BYTES, "{}", action.len());
        assert!(long.starts_with(action.as_str()));
    }

    #[tokio::test(start_paused = true)]
    async fn closing_reports_every_open_window_at_once() {
        let recorder = Recorder::default();
        let audit = RefusalAudit::new(recorder.clone());
        for _ in 0..40 {
            audit.record(refusal(GUESSER, "GET /x"));
        }
        audit.close();
        tokio::time::timeout(Duration::from_secs(1), audit.closed())
            .await
            .expect("closed without waiting for the minute");
        let reports = recorder.take();
        assert_eq!(reports.len(), 2, "{reports:?}");
        assert_eq!(
            reports.iter().map(|(_, report)| count(report)).sum::<u64>(),
            40
        );
    }

    #[tokio::test(start_paused = true)]
    async fn counts_add_up_past_the_bounds_on_windows_and_reports() {
        let recorder = Recorder::default();
        let audit = RefusalAudit::new(recorder.clone());
        let addresses = MAX_OPEN_WINDOWS as u32 + 100;
        for index in 0..addresses {
            audit.record(refusal(
                IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + index)),
                "GET /",
            ));
        }
        tokio::time::sleep(REFUSAL_WINDOW + Duration::from_secs(1)).await;
        let reports = recorder.take();
        assert_eq!(
            reports.iter().map(|(_, report)| count(report)).sum::<u64>(),
            u64::from(addresses),
            "every refusal counted, none dropped"
        );
        let without_address: u64 = reports
            .iter()
            .filter(|(actor, _)| actor.client_address.is_none())
            .map(|(_, report)| count(report))
            .sum();
        assert_eq!(
            without_address, 100,
            "the ones past the bound, under no address"
        );
        assert!(reports.len() <= MAX_OPEN_WINDOWS * 2 + 2);
    }
}
