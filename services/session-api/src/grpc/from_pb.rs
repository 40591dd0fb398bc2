//! Requests to domain types: every field a request carries is checked here, before the service
//! sees it, and refused with [`Error::InvalidRequest`] (or wire's size error) when it breaks a
//! rule of the contract.

use std::collections::BTreeMap;

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as pb;
use ptyhub_wire::{Role, TerminalSize, limits};
use uuid::Uuid;

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
