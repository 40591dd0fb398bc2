//! What the gateway tells the audit trail about terminal streams: every WebSocket bridge and
//! every relayed gRPC `Attach` holds a [`StreamAudit`] from the broker's first frame on, which
//! reports the attach and, when it is dropped, the detach with the reason the stream ended.
//! Both reports go through one task per stream, so session-api hears them in order, and none
//! of them waits on the terminal's path.

use ptyhub_proto::session::v1::AuditKind;
use ptyhub_wire::Role;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::grpc::{AuditReport, Upstreams};

/// One attached stream in the audit trail.
#[derive(Debug)]
pub struct StreamAudit {
    reports: mpsc::UnboundedSender<AuditReport>,
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
        let (reports, mut queue) = mpsc::unbounded_channel::<AuditReport>();
        tokio::spawn(async move {
            while let Some(report) = queue.recv().await {
                upstreams.report_audit_event(report).await;
            }
        });
        let audit = Self {
            reports,
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

    /// What the stream's reader reports a reset with: a reset sent on the stream goes to the
    /// broker directly, so only the gateway knows who asked for it.
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
        // The task ends only once this sender is gone.
        let _ = self.reports.send(report);
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
    reports: mpsc::UnboundedSender<AuditReport>,
    report: AuditReport,
}

impl StreamResets {
    pub fn reset(&self) {
        let _ = self.reports.send(self.report.clone());
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
    fn a_takeover_is_reported_in_the_words_session_api_pairs() {
        // session-api's takeover pairing looks for exactly this reason.
        assert_eq!(detach_reason("taken over"), "taken_over");
        assert_eq!(detach_reason("client left"), "closed");
        assert_eq!(detach_reason("something new"), "stream_ended");
    }
}
