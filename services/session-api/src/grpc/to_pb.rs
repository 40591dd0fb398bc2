//! Domain types to the generated messages of answers and change events; the contract's nouns
//! inside them by `ptyhub_model::proto`.

use std::time::SystemTime;

use chrono::{DateTime, Utc};
use ptyhub_model::proto::{self, ProtoEnum as _};
use ptyhub_proto::session::v1 as pb;

use crate::audit::AuditPage;
use crate::domain::{
    AttachTarget, Broker, Instance, RecordMode, Session, SessionAttachment, SessionChange, Share,
};

pub(super) fn timestamp(at: DateTime<Utc>) -> prost_types::Timestamp {
    proto::timestamp(at)
}

fn system_timestamp(at: SystemTime) -> prost_types::Timestamp {
    timestamp(DateTime::<Utc>::from(at))
}

/// An instance as clients see it, its recording setting resolved against the server's default.
pub(super) fn instance_to_pb(instance: &Instance, default_record: RecordMode) -> pb::Instance {
    pb::Instance {
        record: instance.record.unwrap_or(default_record).to_proto(),
        record_is_default: instance.record.is_none(),
        shell_integration: instance.shell_integration,
        control_grant_timeout_secs: instance
            .control_grant_timeout
            .map(|timeout| u32::try_from(timeout.as_secs()).unwrap_or(u32::MAX)),
        id: instance.id.to_string(),
        name: instance.name.clone(),
        target: Some(instance.target.clone().into()),
        command: instance.command.clone(),
        env: instance.env.clone().into_iter().collect(),
        cwd: instance.cwd.clone(),
        user: instance.user.clone(),
        max_sessions: instance.max_sessions,
        labels: instance.labels.clone().into_iter().collect(),
        broker_id: instance.broker_id.clone(),
        created_at: Some(timestamp(instance.created_at)),
        live_sessions: instance.live_sessions,
    }
}

pub(super) fn session_to_pb(session: &Session) -> pb::Session {
    session.into()
}

pub(super) fn attach_target_to_pb(target: &AttachTarget) -> pb::AttachTarget {
    pb::AttachTarget {
        session_id: target.session_id.to_string(),
        broker_endpoint: target.broker_endpoint.clone(),
        ticket: target.ticket.clone(),
        ticket_expires_at: Some(system_timestamp(target.ticket_expires_at)),
        role: target.role.to_proto(),
    }
}

pub(super) fn attachment_to_pb(attachment: &SessionAttachment) -> pb::SessionAttachment {
    pb::SessionAttachment {
        session: Some(session_to_pb(&attachment.session)),
        attach: Some(attach_target_to_pb(&attachment.attach)),
        created: attachment.created,
    }
}

pub(super) fn change_to_pb(change: &SessionChange) -> pb::SessionChange {
    pb::SessionChange {
        kind: change.kind.to_proto(),
        session: Some(session_to_pb(&change.session)),
        at: Some(timestamp(change.at)),
        commands: change.commands.iter().cloned().map(Into::into).collect(),
    }
}

pub(super) fn broker_to_pb(broker: &Broker) -> pb::Broker {
    pb::Broker {
        id: broker.id.clone(),
        endpoint: broker.endpoint.clone(),
        up: broker.up,
        last_heartbeat_at: broker.last_heartbeat_at.map(timestamp),
        docker: broker.docker,
    }
}

pub(super) fn share_to_pb(share: &Share) -> pb::Share {
    pb::Share {
        id: share.id.to_string(),
        instance_id: share.instance_id.to_string(),
        session_id: share
            .session_id
            .map(|id| id.to_string())
            .unwrap_or_default(),
        created_by: share.created_by.clone(),
        created_at: Some(timestamp(share.created_at)),
        expires_at: Some(timestamp(share.expires_at)),
        revoked_at: share.revoked_at.map(timestamp),
        history: share.history,
    }
}

pub(super) fn audit_page_to_pb(page: &AuditPage) -> pb::ListAuditEventsResponse {
    pb::ListAuditEventsResponse {
        events: page
            .events
            .iter()
            .map(|event| pb::AuditEvent {
                id: event.id,
                at: Some(timestamp(event.at)),
                kind: event.kind.to_proto(),
                principal: event.principal.clone(),
                instance_id: event
                    .instance_id
                    .map(|id| id.to_string())
                    .unwrap_or_default(),
                session_id: event
                    .session_id
                    .map(|id| id.to_string())
                    .unwrap_or_default(),
                client_address: event.client_address.clone().unwrap_or_default(),
                surface: event.surface.clone(),
                role: proto::optional_to_proto(event.role),
                attachment_id: event
                    .attachment_id
                    .map(|id| id.to_string())
                    .unwrap_or_default(),
                detail: event
                    .detail
                    .iter()
                    .map(|(key, value)| (key.clone(), value.clone()))
                    .collect(),
            })
            .collect(),
        next_page_token: page
            .next_after_id
            .map(|id| id.to_string())
            .unwrap_or_default(),
    }
}
