//! The conversions between session-api's and brokers' protobuf messages and the gateway's
//! domain types.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use ptyhub_model::proto::{self, ProtoEnum as _};
use ptyhub_model::{Attendee, AuditKind, Role, TerminalSize, TerminalState};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;

use crate::domain::{
    AttachTarget, AuditEvent, AuditEventPage, AuditListing, ChangeKind, Command,
    CommandOutputFormat, ExitStatus, Instance, RecordMode, Screen, ScreenWaitResult, Session,
    SessionAttachment, SessionChange, Share, Target, TerminalActivity, TerminalEvent, WaitOutcome,
};
use crate::error::ApiError;

pub(super) fn share_from_proto(share: session_pb::Share) -> Share {
    Share {
        id: share.id,
        instance_id: share.instance_id,
        session_id: Some(share.session_id).filter(|id| !id.is_empty()),
        created_by: share.created_by,
        created_at: timestamp_from_proto(share.created_at),
        expires_at: timestamp_from_proto(share.expires_at),
        revoked_at: timestamp_from_proto(share.revoked_at),
        history: share.history,
    }
}

/// An outside client's audit listing (the gRPC surface), its times checked.
pub fn audit_listing_from_proto(
    request: session_pb::ListAuditEventsRequest,
) -> Result<AuditListing, ApiError> {
    let time = |name: &str, at: Option<prost_types::Timestamp>| match at {
        None => Ok(None),
        Some(at) => timestamp_from_proto(Some(at))
            .map(Some)
            .ok_or_else(|| ApiError::invalid(format!("{name} is not a valid time"))),
    };
    Ok(AuditListing {
        since: time("since", request.since)?,
        until: time("until", request.until)?,
        instance: request.instance,
        session_id: request.session_id,
        principal: request.principal,
        page_size: request.page_size,
        page_token: request.page_token,
        only_instances: request
            .only_listed_instances
            .then_some(request.only_instances),
    })
}

/// A listing as session-api's request.
pub fn audit_listing_to_proto(listing: AuditListing) -> session_pb::ListAuditEventsRequest {
    let only_listed_instances = listing.only_instances.is_some();
    session_pb::ListAuditEventsRequest {
        instance: listing.instance,
        session_id: listing.session_id,
        principal: listing.principal,
        since: listing.since.map(timestamp_to_proto),
        until: listing.until.map(timestamp_to_proto),
        page_size: listing.page_size,
        page_token: listing.page_token,
        only_instances: listing.only_instances.unwrap_or_default(),
        only_listed_instances,
    }
}

pub(super) fn audit_page_from_proto(page: session_pb::ListAuditEventsResponse) -> AuditEventPage {
    let present = |value: String| Some(value).filter(|value| !value.is_empty());
    AuditEventPage {
        events: page
            .events
            .into_iter()
            .map(|event| AuditEvent {
                id: event.id,
                at: timestamp_from_proto(event.at),
                kind: AuditKind::from_proto(event.kind).ok(),
                principal: event.principal,
                instance_id: present(event.instance_id),
                session_id: present(event.session_id),
                client_address: present(event.client_address),
                surface: event.surface,
                role: proto::optional_role(event.role).ok().flatten(),
                attachment_id: present(event.attachment_id),
                detail: event.detail.into_iter().collect(),
            })
            .collect(),
        next_page_token: present(page.next_page_token),
    }
}

pub(super) fn timestamp_to_proto(at: DateTime<Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: at.timestamp(),
        nanos: i32::try_from(at.timestamp_subsec_nanos()).unwrap_or(0),
    }
}

pub(super) fn timestamp_from_proto(
    timestamp: Option<prost_types::Timestamp>,
) -> Option<DateTime<Utc>> {
    let timestamp = timestamp?;
    DateTime::from_timestamp(timestamp.seconds, u32::try_from(timestamp.nanos).ok()?)
}

/// A role as session-api or a broker names it. One that is unspecified or unknown (a newer
/// peer's, or a bug) is a viewer's: least privilege, so a message that says nothing never lets
/// a stream type.
pub(super) fn role_from_proto(role: i32) -> Role {
    Role::from_proto(role).unwrap_or_else(|invalid| {
        tracing::warn!(role, %invalid, "a role the gateway does not know: taken as a viewer");
        Role::Viewer
    })
}

pub fn instance_from_proto(instance: session_pb::Instance) -> Instance {
    Instance {
        id: instance.id,
        name: instance.name,
        target: instance
            .target
            .and_then(|target| Target::try_from(target).ok()),
        command: instance.command,
        env: instance.env.into_iter().collect::<BTreeMap<_, _>>(),
        cwd: instance.cwd,
        user: instance.user,
        max_sessions: instance.max_sessions,
        labels: instance.labels.into_iter().collect::<BTreeMap<_, _>>(),
        broker_id: instance.broker_id,
        created_at: timestamp_from_proto(instance.created_at),
        live_sessions: instance.live_sessions,
        record: RecordMode::from_proto(instance.record).unwrap_or(RecordMode::Off),
        record_is_default: instance.record_is_default,
        shell_integration: instance.shell_integration,
        control_grant_timeout_secs: instance.control_grant_timeout_secs,
    }
}

/// A change of a session; one this build cannot read (a kind or a session of a newer
/// session-api) is left out of the stream, with a warning.
pub(super) fn change_from_proto(change: session_pb::SessionChange) -> Option<SessionChange> {
    let kind = ChangeKind::from_proto(change.kind)
        .inspect_err(|invalid| tracing::warn!(%invalid, "a session change left out"))
        .ok()?;
    let session = session_from_proto(change.session?)
        .inspect_err(|error| tracing::warn!(%error, "a session change left out"))
        .ok()?;
    Some(SessionChange {
        kind,
        session,
        commands: change.commands.into_iter().map(Command::from).collect(),
    })
}

/// A session record as session-api answered it, checked by the model's one conversion; one
/// it cannot read is session-api's fault (500).
pub fn session_from_proto(session: session_pb::Session) -> Result<Session, ApiError> {
    Session::try_from(session).map_err(|invalid| {
        ApiError::internal(format!(
            "session-api answered with a session that is not valid: {invalid}"
        ))
    })
}

/// An instance as its protobuf message again, for the gRPC proxy's answers after the view
/// rule: the inverse of [`instance_from_proto`] for every instance session-api answers.
pub fn instance_to_proto(instance: Instance) -> session_pb::Instance {
    session_pb::Instance {
        id: instance.id,
        name: instance.name,
        target: instance.target.map(Into::into),
        command: instance.command,
        env: instance.env.into_iter().collect(),
        cwd: instance.cwd,
        user: instance.user,
        max_sessions: instance.max_sessions,
        labels: instance.labels.into_iter().collect(),
        broker_id: instance.broker_id,
        created_at: instance.created_at.map(timestamp_to_proto),
        live_sessions: instance.live_sessions,
        record: instance.record.to_proto(),
        record_is_default: instance.record_is_default,
        shell_integration: instance.shell_integration,
        control_grant_timeout_secs: instance.control_grant_timeout_secs,
    }
}

/// What a terminal is doing; a report this build cannot read (a progress kind of a newer
/// broker) reads as none, as an unknown status does.
pub(super) fn terminal_from_proto(
    terminal: Option<broker_pb::TerminalActivity>,
) -> Option<TerminalActivity> {
    terminal.and_then(|terminal| TerminalActivity::try_from(terminal).ok())
}

pub(super) fn attachment_from_proto(
    attachment: session_pb::SessionAttachment,
) -> Result<SessionAttachment, ApiError> {
    let session = attachment
        .session
        .ok_or_else(|| ApiError::internal("session-api answered without a session"))?;
    let attach = attachment
        .attach
        .ok_or_else(|| ApiError::internal("session-api answered without an attach target"))?;
    Ok(SessionAttachment {
        session: session_from_proto(session)?,
        attach: attach_target_from_proto(attach),
        created: attachment.created,
    })
}

pub(super) fn attach_target_from_proto(attach: session_pb::AttachTarget) -> AttachTarget {
    AttachTarget {
        session_id: attach.session_id,
        broker_endpoint: attach.broker_endpoint,
        ticket: attach.ticket,
        role: role_from_proto(attach.role),
        // What the principal may see is the gateway's to decide, after the resolve.
        present_only: false,
    }
}

pub(super) fn event_from_proto(frame: broker_pb::ServerFrame) -> Option<TerminalEvent> {
    use broker_pb::server_frame::Frame;
    let event = match frame.frame? {
        Frame::Connected(connected) => TerminalEvent::Connected {
            offset: connected.offset,
            size: connected
                .size
                .and_then(|size| TerminalSize::try_from(size).ok()),
            role: role_from_proto(connected.role),
        },
        Frame::Output(output) => TerminalEvent::Output {
            offset: output.offset,
            data: output.data,
        },
        Frame::Gap(gap) => TerminalEvent::Gap {
            lost: gap.lost,
            offset: gap.offset,
        },
        Frame::Resize(size) => TerminalEvent::Resize(TerminalSize::try_from(size).ok()?),
        Frame::Resetting(_) => TerminalEvent::Resetting,
        Frame::Detached(_) => TerminalEvent::TakenOver,
        Frame::Exit(exit) => TerminalEvent::Exit(ExitStatus::from(exit)),
        Frame::Error(error) => TerminalEvent::Error {
            message: error.message,
            input_id: error.input_id,
        },
        Frame::InputAck(ack) => TerminalEvent::InputAck {
            id: ack.input_id,
            offset: ack.offset,
            bytes: ack.bytes,
        },
        Frame::Closed(_) => TerminalEvent::Closed,
        Frame::ControlRequested(requested) => TerminalEvent::ControlRequested {
            request_id: requested.request_id,
            requester: requested.requester.and_then(requester_from_proto),
        },
        Frame::ControlDeclined(declined) => TerminalEvent::ControlDeclined {
            request_id: declined.request_id,
        },
        Frame::RoleChanged(changed) => TerminalEvent::RoleChanged(role_from_proto(changed.role)),
        Frame::Snapshot(snapshot) => TerminalEvent::Snapshot {
            offset: snapshot.offset,
            size: snapshot
                .size
                .and_then(|size| TerminalSize::try_from(size).ok()),
            data: snapshot.data,
        },
    };
    Some(event)
}

/// The attendee a broker's `ControlRequested` names. One that does not convert is logged and
/// left out: the request itself still reaches the controller, who can answer it by its id.
fn requester_from_proto(requester: broker_pb::Attendee) -> Option<Attendee> {
    Attendee::try_from(requester)
        .inspect_err(|invalid| {
            tracing::warn!(%invalid, "a request for control named a malformed requester");
        })
        .ok()
}

pub(super) fn millis(duration: Duration) -> u32 {
    u32::try_from(duration.as_millis()).unwrap_or(u32::MAX)
}

pub(super) fn command_output_format_to_proto(
    format: CommandOutputFormat,
) -> broker_pb::ScreenFormat {
    match format {
        CommandOutputFormat::Text => broker_pb::ScreenFormat::Text,
        CommandOutputFormat::Ansi => broker_pb::ScreenFormat::Ansi,
    }
}

/// A screen as session-api answered it, checked by the model's one conversion; one it cannot
/// read is session-api's fault (500).
pub(super) fn screen_from_proto(screen: broker_pb::Screen) -> Result<Screen, ApiError> {
    Screen::try_from(screen).map_err(|invalid| {
        ApiError::internal(format!(
            "session-api answered with a screen that is not valid: {invalid}"
        ))
    })
}

pub(super) fn wait_result_from_proto(
    answer: broker_pb::WaitForScreenResponse,
) -> Result<ScreenWaitResult, ApiError> {
    use broker_pb::wait_for_screen_response::Outcome;
    let screen = answer
        .screen
        .ok_or_else(|| ApiError::internal("session-api answered a wait without a screen"))?;
    let (outcome, matched) = match Outcome::try_from(answer.outcome) {
        Ok(Outcome::Matched) => (WaitOutcome::Matched, Some(answer.matched)),
        Ok(Outcome::Exited) => (WaitOutcome::Exited, None),
        Ok(Outcome::State) => {
            let state = TerminalState::from_proto(answer.state).map_err(|invalid| {
                ApiError::internal(format!("session-api answered a wait: {invalid}"))
            })?;
            (WaitOutcome::State(state), None)
        }
        Ok(Outcome::Unspecified) | Err(_) => {
            return Err(ApiError::internal(format!(
                "session-api answered a wait with an unknown outcome {}",
                answer.outcome
            )));
        }
    };
    Ok(ScreenWaitResult {
        outcome,
        matched,
        screen: screen_from_proto(screen)?,
        terminal: terminal_from_proto(answer.terminal),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_that_is_unspecified_or_unknown_is_a_viewers() {
        assert_eq!(
            role_from_proto(broker_pb::Role::Controller as i32),
            Role::Controller
        );
        assert_eq!(
            role_from_proto(broker_pb::Role::Viewer as i32),
            Role::Viewer
        );
        for unknown in [broker_pb::Role::Unspecified as i32, 99, -1] {
            assert_eq!(role_from_proto(unknown), Role::Viewer, "{unknown}");
        }
    }
}
