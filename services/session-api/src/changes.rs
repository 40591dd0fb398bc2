//! The stream of session changes this replica observes, for WatchSessions.
//!
//! Each replica publishes the changes it writes itself and those it learns from the brokers'
//! event streams. Every replica watches every broker, so lifecycle changes (exits, closes,
//! attachments) reach the watchers of every replica; a change made through another replica's
//! API (a rename, a create) reaches only that replica's watchers. The same change observed
//! twice (written here, then reported by the broker) is published once. Window titles and bells
//! ([`ChangeKind::Screen`]) come batched with activity, so at most once per flush per session.

use std::collections::HashMap;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use tokio::sync::broadcast;
use uuid::Uuid;

use crate::domain::{
    Attendee, ChangeKind, Command, ExitStatus, Session, SessionChange, SessionStatus,
};
use crate::store::now;

/// How many changes a slow watcher may fall behind before it misses some.
const CHANGE_BUFFER: usize = 1024;
/// Past this many remembered sessions, those already closed are forgotten.
const REMEMBERED_SESSIONS: usize = 10_000;

/// What a watcher can see of a session; a change that alters none of it is not published.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Visible {
    status: SessionStatus,
    name: String,
    attached_clients: u32,
    presence: Vec<Attendee>,
    exit: Option<ExitStatus>,
    title: Option<String>,
    last_bell_at: Option<DateTime<Utc>>,
}

impl Visible {
    fn of(session: &Session) -> Self {
        Self {
            status: session.status,
            name: session.name.clone(),
            attached_clients: session.attached_clients,
            presence: session.presence.clone(),
            exit: session.exit,
            title: session.title.clone(),
            last_bell_at: session.last_bell_at,
        }
    }
}

/// The broadcast of session changes.
#[derive(Debug)]
pub struct ChangeFeed {
    sender: broadcast::Sender<SessionChange>,
    last_published: Mutex<HashMap<Uuid, Visible>>,
}

impl Default for ChangeFeed {
    fn default() -> Self {
        Self::new()
    }
}

impl ChangeFeed {
    pub fn new() -> Self {
        let (sender, _) = broadcast::channel(CHANGE_BUFFER);
        Self {
            sender,
            last_published: Mutex::default(),
        }
    }

    /// A new receiver of every change published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<SessionChange> {
        self.sender.subscribe()
    }

    /// Publishes `session` as it is after a change of `kind`, unless watchers already saw it
    /// in this state.
    pub fn publish(&self, kind: ChangeKind, session: &Session) {
        let visible = Visible::of(session);
        {
            let mut last = self
                .last_published
                .lock()
                .expect("change feed lock is never poisoned");
            if last.get(&session.id) == Some(&visible) {
                return;
            }
            if last.len() >= REMEMBERED_SESSIONS {
                last.retain(|_, seen| seen.status != SessionStatus::Closed);
            }
            last.insert(session.id, visible);
        }
        // No receiver is not an error: nobody is watching right now.
        let _ = self.sender.send(SessionChange {
            kind,
            session: session.clone(),
            at: now(),
            commands: Vec::new(),
        });
    }

    /// Publishes what `session`'s terminal is doing now, and the `commands` that started or
    /// ended. Every such report is published: the broker sends one only for a change.
    pub fn publish_terminal(&self, session: &Session, commands: Vec<Command>) {
        let _ = self.sender.send(SessionChange {
            kind: ChangeKind::Terminal,
            session: session.clone(),
            at: now(),
            commands,
        });
    }
}
