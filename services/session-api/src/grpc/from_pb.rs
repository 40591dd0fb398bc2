//! Requests to domain types: every field a request carries is checked here, before the service
//! sees it, and refused with [`Error::InvalidRequest`] (or wire's size error) when it breaks a
//! rule of the contract.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use ptyhub_model::proto::{self, ProtoEnum as _};
use ptyhub_model::{ControlMode, Role, TerminalSize};
use ptyhub_model::{Name, NameKind};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as pb;
use ptyhub_wire::{Actor, limits};
use uuid::Uuid;

use crate::audit::{AuditFilter, AuditKind, NewAuditEvent, parse_page_token};
use crate::domain::{
    Alias, DEFAULT_MAX_SESSIONS, MAX_SESSIONS_LIMIT, NewInstance, RecordMode, Target,
};
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

/// A request's aliases (at creation or added to a live session), parsed. They are counted
/// before any is parsed, so an oversized list costs nothing to refuse; the store still holds a
/// session's total to the same cap, since added aliases join those it has.
pub(super) fn parsed_aliases(aliases: &[String]) -> Result<Vec<Alias>, Error> {
    if aliases.len() > limits::MAX_ALIASES_PER_SESSION {
        return Err(Error::InvalidRequest(format!(
            "a session may have at most {} aliases",
            limits::MAX_ALIASES_PER_SESSION
        )));
    }
    aliases
        .iter()
        .map(|alias| Alias::parse(alias).map_err(Error::from))
        .collect()
}

/// A role, the controller's when none is named.
pub(super) fn role_from_pb(role: i32) -> Result<Role, Error> {
    Ok(proto::optional_role(role)?.unwrap_or(Role::Controller))
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
    let name = Name::parse(NameKind::Instance, name)?.into_string();
    if Uuid::parse_str(&name).is_ok() {
        // Instances are addressed by id or name: a name that is a uuid would be ambiguous.
        return Err(Error::InvalidRequest(
            "instance name must not be a uuid".into(),
        ));
    }
    Ok(name)
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
    let target = Target::try_from(request.target.unwrap_or_default())?;
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
        shell_integration: request.shell_integration.unwrap_or(true),
        control_grant_timeout: control_grant_timeout_from_pb(request.control_grant_timeout_secs)?,
    })
}

/// An instance's grant timeout: 1 second up to [`limits::MAX_CONTROL_GRANT_TIMEOUT`].
fn control_grant_timeout_from_pb(seconds: Option<u32>) -> Result<Option<Duration>, Error> {
    let Some(seconds) = seconds else {
        return Ok(None);
    };
    let timeout = Duration::from_secs(seconds.into());
    if seconds == 0 || timeout > limits::MAX_CONTROL_GRANT_TIMEOUT {
        return Err(Error::InvalidRequest(format!(
            "control_grant_timeout {seconds} is out of bounds (1..={} seconds, or null for never)",
            limits::MAX_CONTROL_GRANT_TIMEOUT.as_secs()
        )));
    }
    Ok(Some(timeout))
}

/// A record mode; `None` for unspecified (the server's default).
pub(super) fn record_mode_from_pb(value: i32) -> Result<Option<RecordMode>, Error> {
    Ok(proto::optional_record_mode(value)?)
}

/// A control mode; `None` for unspecified (the default on a create, no change on an update).
pub(super) fn control_mode_from_pb(value: i32) -> Result<Option<ControlMode>, Error> {
    Ok(proto::optional_control_mode(value)?)
}

/// The kinds of the audit trail, one to one.
pub(super) fn audit_kind_from_pb(kind: i32) -> Result<AuditKind, Error> {
    if kind == 0 {
        return Err(Error::InvalidRequest("kind is required".into()));
    }
    Ok(AuditKind::from_proto(kind)?)
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
    let role = proto::optional_role(request.role)?;
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
