//! `Readiness`: what the gateway's probes wait for besides its backends. Whoever starts the
//! gateway with others in one process (`ptyhub-stack`, `ptyhub up`) holds it while the system
//! is not yet able to take sessions (the broker not registered, the default instance not
//! there), so that `/healthz` and `/readyz` answer 503 until every part is there: a script that
//! waits for `/healthz` and then creates a session never meets "instance not found".

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// The conditions the gateway's readiness waits for, each held by whoever will meet it. Ready
/// when none is held; a gateway configured alone holds none. Cheap to clone: clones share the
/// conditions.
#[derive(Debug, Clone, Default)]
pub struct Readiness {
    held: Arc<Mutex<Held>>,
}

#[derive(Debug, Default)]
struct Held {
    next_id: u64,
    waiting_for: BTreeMap<u64, String>,
}

/// One condition the gateway waits for, until [`ReadinessHold::release`]. A hold dropped
/// without a release keeps the gateway unready: the part it stood for never came.
#[derive(Debug)]
#[must_use = "the gateway stays unready until the hold is released"]
pub struct ReadinessHold {
    readiness: Readiness,
    id: u64,
}

impl Readiness {
    /// Holds readiness until the returned hold is released; `waiting_for` says what for, in the
    /// words of a detail (`"the local instance"`).
    pub fn hold(&self, waiting_for: impl Into<String>) -> ReadinessHold {
        let mut held = self.lock();
        let id = held.next_id;
        held.next_id += 1;
        held.waiting_for.insert(id, waiting_for.into());
        ReadinessHold {
            readiness: self.clone(),
            id,
        }
    }

    /// `None` when nothing is held, else what the gateway still waits for, oldest first.
    pub fn waiting_for(&self) -> Option<String> {
        let held = self.lock();
        (!held.waiting_for.is_empty()).then(|| {
            let parts: Vec<&str> = held.waiting_for.values().map(String::as_str).collect();
            format!("starting: waiting for {}", parts.join(", "))
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ReadinessHold {
    /// The condition is met: the gateway is ready once no other is held.
    pub fn release(self) {
        self.readiness.lock().waiting_for.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_every_hold_is_released() {
        let readiness = Readiness::default();
        assert_eq!(readiness.waiting_for(), None, "nothing held: ready");
        let broker = readiness.hold("the broker");
        let instance = readiness.clone().hold("the local instance");
        assert_eq!(
            readiness.waiting_for().as_deref(),
            Some("starting: waiting for the broker, the local instance")
        );
        broker.release();
        assert_eq!(
            readiness.waiting_for().as_deref(),
            Some("starting: waiting for the local instance")
        );
        instance.release();
        assert_eq!(readiness.waiting_for(), None);
    }

    #[test]
    fn a_hold_dropped_unreleased_keeps_the_gateway_unready() {
        let readiness = Readiness::default();
        drop(readiness.hold("the broker"));
        assert!(readiness.waiting_for().is_some());
    }
}
