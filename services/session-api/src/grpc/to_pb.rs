//! Domain types to the generated messages of answers and change events.

use std::time::SystemTime;

use chrono::{DateTime, Utc};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as pb;
use ptyhub_wire::Role;

use crate::audit::{AuditKind, AuditPage};
use crate::domain::{
    AttachTarget, Broker, ChangeKind, CloseReason, Instance, RecordMode, Session,
    SessionAttachment, SessionChange, SessionStatus, Share, Target,
};

fn timestamp(at: DateTime<Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: at.timestamp(),
        nanos: i32::try_from(at.timestamp_subsec_nanos()).unwrap_or(0),
    }
}

fn system_timestamp(at: SystemTime) -> prost_types::Timestamp {
    timestamp(DateTime::<Utc>::from(at))
}

fn target_to_pb(target: &Target) -> broker_pb::Target {
    let kind = match target {
        Target::Local => broker_pb::target::Kind::Local(broker_pb::LocalTarget {}),
        Target::Docker { container } => broker_pb::target::Kind::Docker(broker_pb::DockerTarget {
            container: container.clone(),
        }),
    };
    broker_pb::Target { kind: Some(kind) }
}

/// An instance as clients see it, its recording setting resolved against the server's default.
pub(super) fn instance_to_pb(instance: &Instance, default_record: RecordMode) -> pb::Instance {
    pb::Instance {
        record: record_mode_to_pb(instance.record.unwrap_or(default_record)) as i32,
        record_is_default: instance.record.is_none(),
        id: instance.id.to_string(),
        name: instance.name.clone(),
        target: Some(target_to_pb(&instance.target)),
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

fn record_mode_to_pb(mode: RecordMode) -> broker_pb::RecordMode {
    match mode {
        RecordMode::Off => broker_pb::RecordMode::Off,
        RecordMode::Output => broker_pb::RecordMode::Output,
        RecordMode::OutputAndInput => broker_pb::RecordMode::OutputAndInput,
    }
}

fn status_to_pb(status: SessionStatus) -> pb::SessionStatus {
    match status {
        SessionStatus::Starting => pb::SessionStatus::Starting,
        SessionStatus::Active => pb::SessionStatus::Active,
        SessionStatus::Resetting => pb::SessionStatus::Resetting,
        SessionStatus::Exited => pb::SessionStatus::Exited,
        SessionStatus::Closed => pb::SessionStatus::Closed,
    }
}

fn close_reason_to_pb(reason: Option<CloseReason>) -> pb::CloseReason {
    match reason {
        None => pb::CloseReason::Unspecified,
        Some(CloseReason::ClosedByUser) => pb::CloseReason::ClosedByUser,
        Some(CloseReason::Exited) => pb::CloseReason::Exited,
        Some(CloseReason::IdleReaped) => pb::CloseReason::IdleReaped,
        Some(CloseReason::BrokerLost) => pb::CloseReason::BrokerLost,
        Some(CloseReason::InstanceDeleted) => pb::CloseReason::InstanceDeleted,
        Some(CloseReason::SpawnFailed) => pb::CloseReason::SpawnFailed,
    }
}

pub(super) fn session_to_pb(session: &Session) -> pb::Session {
    pb::Session {
        id: session.id.to_string(),
        instance_id: session.instance_id.to_string(),
        name: session.name.clone(),
        status: status_to_pb(session.status).into(),
        close_reason: close_reason_to_pb(session.close_reason).into(),
        exit: session.exit.map(|exit| broker_pb::ExitStatus {
            code: exit.code,
            signal: exit.signal,
        }),
        aliases: session.aliases.clone(),
        size: Some(broker_pb::TerminalSize {
            cols: u32::from(session.size.cols()),
            rows: u32::from(session.size.rows()),
        }),
        broker_id: session.broker_id.clone(),
        created_at: Some(timestamp(session.created_at)),
        last_activity_at: Some(timestamp(session.last_activity_at)),
        closed_at: session.closed_at.map(timestamp),
        attached_clients: session.attached_clients,
        title: session.title.clone().unwrap_or_default(),
        last_bell_at: session.last_bell_at.map(timestamp),
    }
}

fn role_to_pb(role: Role) -> broker_pb::Role {
    match role {
        Role::Controller => broker_pb::Role::Controller,
        Role::Viewer => broker_pb::Role::Viewer,
    }
}

pub(super) fn attach_target_to_pb(target: &AttachTarget) -> pb::AttachTarget {
    pb::AttachTarget {
        session_id: target.session_id.to_string(),
        broker_endpoint: target.broker_endpoint.clone(),
        ticket: target.ticket.clone(),
        ticket_expires_at: Some(system_timestamp(target.ticket_expires_at)),
        role: role_to_pb(target.role).into(),
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
    use pb::session_change::Kind;
    let kind = match change.kind {
        ChangeKind::Created => Kind::Created,
        ChangeKind::Renamed => Kind::Renamed,
        ChangeKind::Status => Kind::Status,
        ChangeKind::Closed => Kind::Closed,
        ChangeKind::Attachments => Kind::Attachments,
        ChangeKind::Screen => Kind::Screen,
    };
    pb::SessionChange {
        kind: kind.into(),
        session: Some(session_to_pb(&change.session)),
        at: Some(timestamp(change.at)),
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
    }
}

pub(super) fn audit_kind_to_pb(kind: AuditKind) -> pb::AuditKind {
    match kind {
        AuditKind::InstanceCreated => pb::AuditKind::InstanceCreated,
        AuditKind::InstanceDeleted => pb::AuditKind::InstanceDeleted,
        AuditKind::SessionCreated => pb::AuditKind::SessionCreated,
        AuditKind::SessionRenamed => pb::AuditKind::SessionRenamed,
        AuditKind::SessionReset => pb::AuditKind::SessionReset,
        AuditKind::SessionClosed => pb::AuditKind::SessionClosed,
        AuditKind::Attached => pb::AuditKind::Attached,
        AuditKind::Detached => pb::AuditKind::Detached,
        AuditKind::Takeover => pb::AuditKind::Takeover,
        AuditKind::Input => pb::AuditKind::Input,
        AuditKind::Refused => pb::AuditKind::Refused,
        AuditKind::ShareCreated => pb::AuditKind::ShareCreated,
        AuditKind::ShareRevoked => pb::AuditKind::ShareRevoked,
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
                kind: audit_kind_to_pb(event.kind).into(),
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
                role: event
                    .role
                    .map_or(broker_pb::Role::Unspecified, role_to_pb)
                    .into(),
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
