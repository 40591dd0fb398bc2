//! The sessions a broker holds, keyed by session id, and the lifecycle event bus.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use tokio::sync::broadcast;
use uuid::Uuid;

use crate::domain::{BrokerEvent, BrokerEventKind, SessionInfo};
use crate::error::Error;
use crate::session::Session;

/// Events a `WatchEvents` subscriber may lag behind before it is sent a fresh snapshot.
const EVENT_BACKLOG: usize = 4096;

/// Every live and tombstoned session of this broker.
#[derive(Debug)]
pub(crate) struct Registry {
    inner: Mutex<Inner>,
    events: broadcast::Sender<BrokerEvent>,
}

#[derive(Debug)]
struct Inner {
    sessions: HashMap<Uuid, Arc<Session>>,
    accepting: bool,
}

impl Registry {
    pub fn new() -> Self {
        Self {
            inner: Mutex::new(Inner {
                sessions: HashMap::new(),
                accepting: true,
            }),
            events: broadcast::Sender::new(EVENT_BACKLOG),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds a new session; refuses a duplicate id and anything after shutdown began.
    pub fn insert(&self, session: Arc<Session>) -> Result<(), Error> {
        let mut inner = self.lock();
        if !inner.accepting {
            return Err(Error::ShuttingDown);
        }
        if inner.sessions.contains_key(&session.id) {
            return Err(Error::SessionExists(session.id));
        }
        inner.sessions.insert(session.id, session);
        Ok(())
    }

    /// Removes `session` if it is still the one registered under its id.
    pub fn remove(&self, session_id: Uuid) {
        self.lock().sessions.remove(&session_id);
    }

    pub fn get(&self, session_id: Uuid) -> Result<Arc<Session>, Error> {
        self.lock()
            .sessions
            .get(&session_id)
            .cloned()
            .ok_or(Error::SessionNotFound(session_id))
    }

    /// Every session, oldest first.
    pub fn list(&self) -> Vec<SessionInfo> {
        let sessions: Vec<Arc<Session>> = self.lock().sessions.values().cloned().collect();
        let mut infos: Vec<SessionInfo> = sessions.iter().map(|session| session.info()).collect();
        infos.sort_by_key(|info| (info.created_at, info.session_id));
        infos
    }

    /// Stops accepting new sessions and returns the current ones.
    pub fn stop_accepting(&self) -> Vec<Arc<Session>> {
        let mut inner = self.lock();
        inner.accepting = false;
        inner.sessions.values().cloned().collect()
    }

    pub fn publish(&self, kind: BrokerEventKind) {
        // No subscriber is fine: events are for whoever listens now.
        let _ = self.events.send(BrokerEvent {
            at: SystemTime::now(),
            kind,
        });
    }

    /// Subscribes to events, then takes a snapshot, so that nothing between the two is missed
    /// (an event may repeat what the snapshot already shows, which a subscriber tolerates).
    pub fn subscribe(&self) -> (Vec<SessionInfo>, broadcast::Receiver<BrokerEvent>) {
        let receiver = self.events.subscribe();
        (self.list(), receiver)
    }
}
