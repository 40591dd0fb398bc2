//! What the gateway tells the audit trail about terminal streams: every WebSocket bridge and
//! every relayed gRPC `Attach` holds a [`StreamAudit`] from the broker's first frame on, which
//! reports the attach and, when it is dropped, the detach with the reason the stream ended.
//! A stream's reports go out in order, one at a time, from a task that runs only while some
//! are waiting (an idle stream holds no task and no channel), and none of them waits on the
//! terminal's path.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use ptyhub_model::AuditKind;
use ptyhub_model::Role;
use ptyhub_wire::Actor;
use uuid::Uuid;

use crate::grpc::{AuditReport, Upstreams};

/// One attached stream in the audit trail.
#[derive(Debug)]
pub struct StreamAudit {
    reports: AuditQueue,
    instance_id: String,
    session_id: String,
    role: Role,
    attachment_id: Uuid,
    /// Why the stream ended, as the detach reports it; `closed` unless told otherwise.
    reason: &'static str,
}

impl StreamAudit {
    /// Reports the attach of a stream to `session_id`, through `upstreams` acting for the
    /// stream's principal.
    pub fn attached(upstreams: Upstreams, instance_id: &str, session_id: &str, role: Role) -> Self {
        let audit = Self {
            reports: AuditQueue::new(upstreams),
            instance_id: instance_id.to_owned(),
            session_id: session_id.to_owned(),
            role,
            attachment_id: Uuid::new_v4(),
            reason: "closed",
        };
        audit.report(AuditKind::Attached, None);
        audit
    }

    /// Records why the stream is ending: `taken_over` (another controller took control),
    /// `exited`, `session_closed`, `shutdown`, ...
    pub fn ending(&mut self, reason: &'static str) {
        self.reason = reason;
    }

    /// Records the role the stream has now, after the broker moved it on the same stream (a
    /// grant to it, control given away, a change of the control mode): the detach reports the
    /// role the stream ends with, so that a viewer granted control and then taken over from is
    /// a controller's `taken_over` detach, which session-api pairs into a takeover.
    pub fn role_changed(&mut self, role: Role) {
        self.role = role;
    }

    /// Reports a reset the stream's controller sent: it goes to the broker directly, so only
    /// the gateway knows who asked for it.
    pub fn reset(&self) {
        self.report(AuditKind::SessionReset, None);
    }

    /// What the stream's reader reports a reset with, for a reader that does not hold the
    /// [`StreamAudit`] (see [`StreamAudit::reset`]).
    pub fn resets(&self) -> StreamResets {
        StreamResets {
            reports: self.reports.clone(),
            report: AuditReport::stream(
                AuditKind::SessionReset,
                &self.instance_id,
                &self.session_id,
                self.role,
                self.attachment_id,
            ),
        }
    }

    fn report(&self, kind: AuditKind, detail: Option<(&str, &str)>) {
        let mut report = AuditReport::stream(
            kind,
            &self.instance_id,
            &self.session_id,
            self.role,
            self.attachment_id,
        );
        if let Some((key, value)) = detail {
            report = report.detail(key, value);
        }
        self.reports.push(report);
    }
}

impl Drop for StreamAudit {
    fn drop(&mut self) {
        self.report(AuditKind::Detached, Some(("reason", self.reason)));
    }
}

/// Reports the resets a stream's controller sends (see [`StreamAudit::resets`]).
#[derive(Debug, Clone)]
pub struct StreamResets {
    reports: AuditQueue,
    report: AuditReport,
}

impl StreamResets {
    /// Reports a reset sent by the stream while it has `role` (a controller's, as only a
    /// controller's reset is let through; the stream may have become one after it attached).
    pub fn reset(&self, role: Role) {
        let mut report = self.report.clone();
        report.role = Some(role);
        self.reports.push(report);
    }
}

/// One stream's reports on their way to session-api, in the order they were made.
#[derive(Debug, Clone)]
struct AuditQueue(Arc<QueueShared>);

#[derive(Debug)]
struct QueueShared {
    /// The upstreams acting for no one, and the stream's principal: its reports are sent acting
    /// for them, by upstreams made when there is something to send (a stream that holds upstreams
    /// acting for someone holds a copy of every client for as long as it lives).
    upstreams: Upstreams,
    actor: Option<Arc<Actor>>,
    pending: Mutex<Pending>,
}

#[derive(Debug, Default)]
struct Pending {
    reports: VecDeque<AuditReport>,
    /// A task is sending: it takes what is pushed meanwhile, and ends once nothing is left.
    sending: bool,
}

impl AuditQueue {
    fn new(upstreams: Upstreams) -> Self {
        let (actor, upstreams) = upstreams.actor_and_base();
        Self(Arc::new(QueueShared {
            upstreams,
            actor,
            pending: Mutex::default(),
        }))
    }

    /// Queues `report` behind the stream's earlier ones, and starts the sending task unless it
    /// runs. Outside a runtime (a process tearing down) the report is dropped, with a log line.
    fn push(&self, report: AuditReport) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(?report, "audit report dropped: no runtime to send it");
            return;
        };
        let mut pending = self
            .0
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        pending.reports.push_back(report);
        if !pending.sending {
            pending.sending = true;
            runtime.spawn(self.clone().send_all());
        }
    }

    async fn send_all(self) {
        let upstreams = match &self.0.actor {
            Some(actor) => self.0.upstreams.acting_for_shared(actor.clone()),
            None => self.0.upstreams.clone(),
        };
        loop {
            let report = self
                .0
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .next_to_send();
            let Some(report) = report else {
                return;
            };
            upstreams.report_audit_event(report).await;
        }
    }
}

impl Pending {
    /// The oldest report; when none is left, the sending task ends and the queue gives its
    /// buffer back: a stream reports now and then (attach, resets, detach), and an idle stream's
    /// queue would otherwise keep the room its busiest moment took for as long as it lives.
    fn next_to_send(&mut self) -> Option<AuditReport> {
        let next = self.reports.pop_front();
        if next.is_none() {
            self.sending = false;
            self.reports = VecDeque::new();
        }
        next
    }
}

/// The detach reason of a WebSocket bridge's ending (the words its log line uses).
pub fn detach_reason(ending: &str) -> &'static str {
    match ending {
        "taken over" => "taken_over",
        "session exited" => "exited",
        "session closed" => "session_closed",
        "gateway shutdown" => "shutdown",
        "client left" => "closed",
        "client silent for two heartbeat intervals" => "client_silent",
        "client stopped reading" => "client_stopped_reading",
        "client frame refused" => "client_frame_refused",
        _ => "stream_ended",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drained_queue_stops_sending_and_gives_its_buffer_back() {
        let mut pending = Pending {
            sending: true,
            ..Pending::default()
        };
        for kind in [AuditKind::Attached, AuditKind::SessionReset] {
            pending.reports.push_back(AuditReport::new(kind));
        }
        let sent: Vec<AuditKind> = std::iter::from_fn(|| pending.next_to_send())
            .map(|report| report.kind)
            .collect();
        assert_eq!(sent, [AuditKind::Attached, AuditKind::SessionReset]);
        assert!(!pending.sending, "the next push starts a task again");
        assert_eq!(pending.reports.capacity(), 0);
    }

    #[test]
    fn a_takeover_is_reported_in_the_words_session_api_pairs() {
        // session-api's takeover pairing looks for exactly this reason.
        assert_eq!(detach_reason("taken over"), "taken_over");
        assert_eq!(detach_reason("client left"), "closed");
        assert_eq!(detach_reason("something new"), "stream_ended");
    }
}
