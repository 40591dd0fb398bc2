//! The sessions a broker holds, keyed by session id: the one owner of session membership.
//!
//! Only the broker inserts (at spawn) and removes (when a session's task has ended); session
//! tasks never touch this map. A session that has closed but whose task is still telling its
//! clients so is already gone as far as lookups go: [`Registry::get`] and [`Registry::list`]
//! skip it, and a new session may take its id.
//!
//! The registry reaps nothing: each session's task keeps its own idle deadline and closes the
//! session itself (see `session/task.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use uuid::Uuid;

use crate::domain::{SessionInfo, SessionPhase};
use crate::error::Error;
use crate::session::Session;

/// Every live and tombstoned session of this broker.
#[derive(Debug)]
pub(crate) struct Registry {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    sessions: HashMap<Uuid, Arc<Session>>,
    accepting: bool,
    /// Set while the sessions are being handed to the next broker process.
    handing_over: bool,
}

impl Registry {
    pub fn new() -> Self {
        Self {
            inner: Mutex::new(Inner {
                sessions: HashMap::new(),
                accepting: true,
                handing_over: false,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds a new session; refuses an id in use and anything after shutdown began.
    pub fn insert(&self, session: Arc<Session>) -> Result<(), Error> {
        let mut inner = self.lock();
        if !inner.accepting {
            return Err(Error::ShuttingDown);
        }
        if inner.handing_over {
            return Err(Error::HandingOver);
        }
        if inner
            .sessions
            .get(&session.id)
            .is_some_and(|existing| !existing.is_closed())
        {
            return Err(Error::SessionExists(session.id));
        }
        inner.sessions.insert(session.id, session);
        Ok(())
    }

    /// Removes `session` if it is still the one registered under its id (a closed session's id
    /// may have been taken by a new one meanwhile).
    pub fn remove(&self, session: &Arc<Session>) {
        let mut inner = self.lock();
        if inner
            .sessions
            .get(&session.id)
            .is_some_and(|registered| Arc::ptr_eq(registered, session))
        {
            inner.sessions.remove(&session.id);
        }
    }

    /// The session `session_id` unless it is unknown or closed.
    pub fn get(&self, session_id: Uuid) -> Result<Arc<Session>, Error> {
        let session = self.lock().sessions.get(&session_id).cloned();
        session
            .filter(|session| !session.is_closed())
            .ok_or(Error::SessionNotFound(session_id))
    }

    /// Every session that is not closed, oldest first.
    pub fn list(&self) -> Vec<SessionInfo> {
        let sessions: Vec<Arc<Session>> = self.lock().sessions.values().cloned().collect();
        let mut infos: Vec<SessionInfo> = sessions
            .iter()
            .map(|session| session.info())
            .filter(|info| !matches!(info.phase, SessionPhase::Closed(_)))
            .collect();
        infos.sort_by_key(|info| (info.created_at, info.session_id));
        infos
    }

    /// Stops taking new sessions for a hand-off and returns every session that is not closed:
    /// no session joins between this list and the end of the hand-off.
    pub fn begin_hand_off(&self) -> Vec<Arc<Session>> {
        let mut inner = self.lock();
        inner.handing_over = true;
        inner
            .sessions
            .values()
            .filter(|session| !session.is_closed())
            .cloned()
            .collect()
    }

    /// Takes new sessions again after a hand-off that did not happen.
    pub fn end_hand_off(&self) {
        self.lock().handing_over = false;
    }

    /// Stops accepting new sessions and returns how many are held.
    pub fn stop_accepting(&self) -> usize {
        let mut inner = self.lock();
        inner.accepting = false;
        inner.sessions.len()
    }
}
