//! What an audit event says happened.

/// What an audit event says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuditKind {
    InstanceCreated,
    InstanceDeleted,
    SessionCreated,
    SessionRenamed,
    SessionReset,
    SessionClosed,
    Attached,
    Detached,
    Takeover,
    Input,
    Refused,
    ShareCreated,
    ShareRevoked,
    WebhookCreated,
    WebhookDeleted,
    WebhookDeliveryFailed,
    /// A request for control was answered: granted (by the controller or the instance's
    /// timeout) or declined, with both principals.
    Control,
    /// A live session's control mode was changed, by whom and to what.
    ControlModeChanged,
}

impl AuditKind {
    pub const ALL: [AuditKind; 18] = [
        AuditKind::InstanceCreated,
        AuditKind::InstanceDeleted,
        AuditKind::SessionCreated,
        AuditKind::SessionRenamed,
        AuditKind::SessionReset,
        AuditKind::SessionClosed,
        AuditKind::Attached,
        AuditKind::Detached,
        AuditKind::Takeover,
        AuditKind::Input,
        AuditKind::Refused,
        AuditKind::ShareCreated,
        AuditKind::ShareRevoked,
        AuditKind::WebhookCreated,
        AuditKind::WebhookDeleted,
        AuditKind::WebhookDeliveryFailed,
        AuditKind::Control,
        AuditKind::ControlModeChanged,
    ];

    /// The contract's spelling, also the stored one.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditKind::InstanceCreated => "instance_created",
            AuditKind::InstanceDeleted => "instance_deleted",
            AuditKind::SessionCreated => "session_created",
            AuditKind::SessionRenamed => "session_renamed",
            AuditKind::SessionReset => "session_reset",
            AuditKind::SessionClosed => "session_closed",
            AuditKind::Attached => "attached",
            AuditKind::Detached => "detached",
            AuditKind::Takeover => "takeover",
            AuditKind::Input => "input",
            AuditKind::Refused => "refused",
            AuditKind::ShareCreated => "share_created",
            AuditKind::ShareRevoked => "share_revoked",
            AuditKind::WebhookCreated => "webhook_created",
            AuditKind::WebhookDeleted => "webhook_deleted",
            AuditKind::WebhookDeliveryFailed => "webhook_delivery_failed",
            AuditKind::Control => "control",
            AuditKind::ControlModeChanged => "control_mode_changed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == text)
    }

    /// Whether a gateway may report this kind: what session-api cannot see itself (a reset
    /// sent on a terminal stream goes to the broker directly).
    pub fn reported_by_gateways(self) -> bool {
        matches!(
            self,
            AuditKind::Attached
                | AuditKind::Detached
                | AuditKind::Refused
                | AuditKind::SessionReset
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_parses_from_its_name() {
        for kind in AuditKind::ALL {
            assert_eq!(AuditKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(AuditKind::parse("teleported"), None);
    }
}
