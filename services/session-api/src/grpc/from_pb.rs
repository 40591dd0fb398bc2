//! Requests to domain types: every field a request carries is checked here, before the service
//! sees it, and refused with [`Error::InvalidRequest`] (or wire's size error) when it breaks a
//! rule of the contract.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as pb;
use ptyhub_wire::{Actor, Role, TerminalSize, limits};
use uuid::Uuid;

use crate::audit::{AuditFilter, AuditKind, NewAuditEvent, parse_page_token};
use crate::domain::{DEFAULT_MAX_SESSIONS, MAX_SESSIONS_LIMIT, NewInstance, RecordMode, Target};
use crate::error::Error;

pub(super) fn required<'a>(field: &'static str, value: &'a str) -> Result<&'a str, Error> {
    if value.is_empty() {
        return Err(Error::InvalidRequest(format!("{field} is required")));
    }
    Ok(value)
}

pub(super) fn session_id_from_pb(text: &str) -> Result<Uuid, Error> {
    required("session_id", text)?;
    Uuid::parse_str(text)
        .map_err(|_| Error::InvalidRequest(format!("session_id {text:?} is not a uuid")))
}

pub(super) fn size_from_pb(size: Option<broker_pb::TerminalSize>) -> Result<TerminalSize, Error> {
    match size {
        None => Ok(TerminalSize::DEFAULT),
        Some(size) => Ok(TerminalSize::new(size.cols, size.rows)?),
    }
}

pub(super) fn role_from_pb(role: i32) -> Result<Role, Error> {
    match broker_pb::Role::try_from(role) {
        Ok(broker_pb::Role::Unspecified | broker_pb::Role::Controller) => Ok(Role::Controller),
        Ok(broker_pb::Role::Viewer) => Ok(Role::Viewer),
        Err(_) => Err(Error::InvalidRequest(format!("role {role} is unknown"))),
    }
}

pub(super) fn validated_command(command: Vec<String>) -> Result<Vec<String>, Error> {
    if command.iter().any(|argument| argument.contains('\0')) {
        return Err(Error::InvalidRequest(
            "command arguments must not contain NUL bytes".into(),
        ));
    }
    Ok(command)
}

pub(super) fn validated_broker_id(id: &str) -> Result<&str, Error> {
    let valid = (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if !valid {
        return Err(Error::InvalidRequest(format!(
            "broker id {id:?} must match ^[A-Za-z0-9_.-]{{1,128}}$"
        )));
    }
    Ok(id)
}

pub(super) fn validated_endpoint(endpoint: &str) -> Result<&str, Error> {
    let valid = (endpoint.starts_with("http://") || endpoint.starts_with("https://"))
        && endpoint.parse::<tonic::transport::Uri>().is_ok();
    if !valid {
        return Err(Error::InvalidRequest(format!(
            "broker endpoint {endpoint:?} must be an http:// or https:// url"
        )));
    }
    Ok(endpoint)
}

fn validated_instance_name(name: &str) -> Result<String, Error> {
    let name = name.trim();
    if name.is_empty()
        || name.chars().count() > 255
        || name.chars().any(limits::is_forbidden_in_names)
    {
        return Err(Error::InvalidRequest(
            "instance name must be 1..=255 characters after trimming, without control, \
             format or bidirectional characters"
                .into(),
        ));
    }
    if Uuid::parse_str(name).is_ok() {
        // Instances are addressed by id or name: a name that is a uuid would be ambiguous.
        return Err(Error::InvalidRequest(
            "instance name must not be a uuid".into(),
        ));
    }
    Ok(name.to_owned())
}

fn validated_env(
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<BTreeMap<String, String>, Error> {
    let env: BTreeMap<String, String> = env.into_iter().collect();
    for (key, value) in &env {
        if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
            return Err(Error::InvalidRequest(format!(
                "environment variable {key:?} is invalid: names are non-empty without = or NUL, values without NUL"
            )));
        }
    }
    Ok(env)
}

pub(super) fn new_instance_from_pb(
    request: pb::RegisterInstanceRequest,
) -> Result<NewInstance, Error> {
    let target = match request.target.and_then(|target| target.kind) {
        None => return Err(Error::InvalidRequest("target is required".into())),
        Some(broker_pb::target::Kind::Local(_)) => Target::Local,
        Some(broker_pb::target::Kind::Docker(docker)) => {
            if docker.container.trim().is_empty() {
                return Err(Error::InvalidRequest(
                    "target.docker.container is required".into(),
                ));
            }
            Target::Docker {
                container: docker.container,
            }
        }
    };
    let max_sessions = match request.max_sessions {
        0 => DEFAULT_MAX_SESSIONS,
        n if n <= MAX_SESSIONS_LIMIT => n,
        n => {
            return Err(Error::InvalidRequest(format!(
                "max_sessions {n} is out of bounds (1..={MAX_SESSIONS_LIMIT})"
            )));
        }
    };
    Ok(NewInstance {
        name: validated_instance_name(&request.name)?,
        target,
        command: validated_command(request.command)?,
        env: validated_env(request.env)?,
        cwd: request.cwd,
        user: request.user,
        max_sessions,
        labels: request.labels.into_iter().collect(),
        broker_id: if request.broker_id.is_empty() {
            None
        } else {
            Some(validated_broker_id(&request.broker_id)?.to_owned())
        },
        record: record_mode_from_pb(request.record)?,
    })
}

/// A record mode; `None` for unspecified (the server's default).
pub(super) fn record_mode_from_pb(value: i32) -> Result<Option<RecordMode>, Error> {
    match broker_pb::RecordMode::try_from(value) {
        Ok(broker_pb::RecordMode::Unspecified) => Ok(None),
        Ok(broker_pb::RecordMode::Off) => Ok(Some(RecordMode::Off)),
        Ok(broker_pb::RecordMode::Output) => Ok(Some(RecordMode::Output)),
        Ok(broker_pb::RecordMode::OutputAndInput) => Ok(Some(RecordMode::OutputAndInput)),
        Err(_) => Err(Error::InvalidRequest(format!(
            "record mode {value} is unknown"
        ))),
    }
}

/// The kinds of the audit trail, one to one.
pub(super) fn audit_kind_from_pb(kind: i32) -> Result<AuditKind, Error> {
    use pb::AuditKind as Kind;
    let kind = match Kind::try_from(kind) {
        Ok(Kind::InstanceCreated) => AuditKind::InstanceCreated,
        Ok(Kind::InstanceDeleted) => AuditKind::InstanceDeleted,
        Ok(Kind::SessionCreated) => AuditKind::SessionCreated,
        Ok(Kind::SessionRenamed) => AuditKind::SessionRenamed,
        Ok(Kind::SessionReset) => AuditKind::SessionReset,
        Ok(Kind::SessionClosed) => AuditKind::SessionClosed,
        Ok(Kind::Attached) => AuditKind::Attached,
        Ok(Kind::Detached) => AuditKind::Detached,
        Ok(Kind::Takeover) => AuditKind::Takeover,
        Ok(Kind::Input) => AuditKind::Input,
        Ok(Kind::Refused) => AuditKind::Refused,
        Ok(Kind::ShareCreated) => AuditKind::ShareCreated,
        Ok(Kind::ShareRevoked) => AuditKind::ShareRevoked,
        Ok(Kind::Unspecified) => return Err(Error::InvalidRequest("kind is required".into())),
        Err(_) => {
            return Err(Error::InvalidRequest(format!(
                "audit kind {kind} is unknown"
            )));
        }
    };
    Ok(kind)
}

/// A UUID field that may be empty.
fn optional_uuid(field: &str, text: &str) -> Result<Option<Uuid>, Error> {
    if text.is_empty() {
        return Ok(None);
    }
    Uuid::parse_str(text)
        .map(Some)
        .map_err(|_| Error::InvalidRequest(format!("{field} {text:?} is not a uuid")))
}

fn time_from_pb(
    field: &str,
    at: Option<prost_types::Timestamp>,
) -> Result<Option<DateTime<Utc>>, Error> {
    at.map(|at| {
        u32::try_from(at.nanos)
            .ok()
            .and_then(|nanos| DateTime::from_timestamp(at.seconds, nanos))
            .ok_or_else(|| Error::InvalidRequest(format!("{field} is not a valid time")))
    })
    .transpose()
}

/// What a gateway reports, done by `actor`.
pub(super) fn reported_event_from_pb(
    request: pb::RecordAuditEventRequest,
    actor: &Actor,
) -> Result<NewAuditEvent, Error> {
    let kind = audit_kind_from_pb(request.kind)?;
    let role = match broker_pb::Role::try_from(request.role) {
        Ok(broker_pb::Role::Unspecified) => None,
        Ok(broker_pb::Role::Controller) => Some(Role::Controller),
        Ok(broker_pb::Role::Viewer) => Some(Role::Viewer),
        Err(_) => {
            return Err(Error::InvalidRequest(format!(
                "role {} is unknown",
                request.role
            )));
        }
    };
    Ok(NewAuditEvent {
        kind,
        actor: actor.clone(),
        instance_id: optional_uuid("instance_id", &request.instance_id)?,
        session_id: optional_uuid("session_id", &request.session_id)?,
        role,
        attachment_id: optional_uuid("attachment_id", &request.attachment_id)?,
        detail: request.detail.into_iter().collect(),
    })
}

/// A listing's filters; the instance (an id or a name) is resolved by the service.
pub(super) fn audit_filter_from_pb(
    request: &pb::ListAuditEventsRequest,
) -> Result<AuditFilter, Error> {
    let only_instances = if request.only_listed_instances {
        Some(
            request
                .only_instances
                .iter()
                .map(|id| {
                    Uuid::parse_str(id).map_err(|_| {
                        Error::InvalidRequest(format!("only_instances {id:?} is not a uuid"))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
        )
    } else {
        None
    };
    let principal = match request.principal.as_str() {
        "" => None,
        principal if principal.len() > ptyhub_wire::MAX_PRINCIPAL_BYTES => {
            return Err(Error::InvalidRequest(format!(
                "principal must be at most {} bytes",
                ptyhub_wire::MAX_PRINCIPAL_BYTES
            )));
        }
        principal => Some(principal.to_owned()),
    };
    Ok(AuditFilter {
        instance_id: None,
        session_id: optional_uuid("session_id", &request.session_id)?,
        principal,
        since: time_from_pb("since", request.since)?,
        until: time_from_pb("until", request.until)?,
        only_instances,
        after_id: parse_page_token(&request.page_token)?,
        page_size: request.page_size,
    })
}
