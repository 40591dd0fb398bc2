//! A session's control state (docs/CONTRACT.md, "Control requests"): who controls it, for whom
//! control is reserved, and the requests for control that wait for an answer. The session's
//! broker owns this truth; REST, gRPC and MCP answer it in this one form.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::Attendee;

/// Who controls a session and who asks to. Its JSON form is
/// `{"controller", "reserved_for", "requests"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ControlState {
    /// The stream that holds the lease, as presence lists it; `null` when none does.
    pub controller: Option<Attendee>,
    /// Control granted to a principal that had no stream to take it: its next attach that may
    /// control becomes the controller.
    pub reserved_for: Option<ReservedControl>,
    /// Requests waiting for an answer, oldest first.
    pub requests: Vec<ControlRequest>,
}

/// Control held for a principal until its next attach, or until `until`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReservedControl {
    pub principal: String,
    pub until: DateTime<Utc>,
}

/// One request for control that waits for its answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ControlRequest {
    /// What an answer names; never reused within the session.
    pub id: u64,
    /// Who asks: the subject of the requester's credential.
    pub principal: String,
    /// What it asked through (`web`, `cli`, `grpc`, `mcp`, `rest`).
    pub surface: String,
    /// When it asked.
    pub since: DateTime<Utc>,
    /// Whether a stream asked on itself; `false` for a standing request, made without one.
    pub stream: bool,
}

/// How a request for control was answered: what the audit trail records of it (a takeover,
/// which asks nobody, is recorded as one of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlChangeKind {
    /// The controller granted a request.
    Granted,
    /// Nobody answered within the instance's grant timeout: granted when it passed.
    GrantedByTimeout,
    /// The controller declined a request.
    Declined,
}

impl ControlChangeKind {
    pub const ALL: [ControlChangeKind; 3] = [
        ControlChangeKind::Granted,
        ControlChangeKind::GrantedByTimeout,
        ControlChangeKind::Declined,
    ];

    /// The word the audit trail records.
    pub fn as_str(self) -> &'static str {
        match self {
            ControlChangeKind::Granted => "granted",
            ControlChangeKind::GrantedByTimeout => "granted_by_timeout",
            ControlChangeKind::Declined => "declined",
        }
    }
}
