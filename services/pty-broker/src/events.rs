//! The lifecycle event bus: session tasks publish what happens to their sessions (started,
//! exited, activity, attachments, reset, closed) and every `WatchEvents` subscriber hears it.
//!
//! A subscriber that falls more than [`EVENT_BACKLOG`] events behind misses events; the gRPC
//! adapter then sends it a fresh snapshot instead.

use std::time::SystemTime;

use tokio::sync::broadcast;

use crate::domain::{BrokerEvent, BrokerEventKind};

/// Events a `WatchEvents` subscriber may lag behind before it is sent a fresh snapshot.
pub(crate) const EVENT_BACKLOG: usize = 4096;

/// Where session tasks publish lifecycle events. Cheap to clone; every clone is the same bus.
#[derive(Debug, Clone)]
pub(crate) struct EventBus {
    sender: broadcast::Sender<BrokerEvent>,
}

impl EventBus {
    pub fn new() -> Self {
        Self {
            sender: broadcast::Sender::new(EVENT_BACKLOG),
        }
    }

    /// Sends `kind`, stamped with the time now, to everyone subscribed now.
    pub fn publish(&self, kind: BrokerEventKind) {
        // No subscriber is fine: events are for whoever listens now.
        let _ = self.sender.send(BrokerEvent {
            at: SystemTime::now(),
            kind,
        });
    }

    /// Every event published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<BrokerEvent> {
        self.sender.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;

    #[test]
    fn subscribers_hear_what_is_published_after_they_subscribed() {
        let bus = EventBus::new();
        let session_id = Uuid::new_v4();
        bus.publish(BrokerEventKind::Exited {
            session_id,
            exit: crate::domain::ExitStatus::exited(0),
        });
        let mut events = bus.subscribe();
        assert!(
            events.try_recv().is_err(),
            "nothing from before subscribing"
        );
        bus.publish(BrokerEventKind::AttachmentsChanged {
            session_id,
            controllers: 1,
            viewers: 2,
            presence: Vec::new(),
        });
        let event = events
            .try_recv()
            .expect("the event published after subscribing");
        assert_eq!(
            event.kind,
            BrokerEventKind::AttachmentsChanged {
                session_id,
                controllers: 1,
                viewers: 2,
                presence: Vec::new(),
            }
        );
    }
}
