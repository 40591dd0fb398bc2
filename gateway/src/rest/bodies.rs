//! The JSON bodies of the REST API (docs/CONTRACT.md, "REST"), what they are made from, and the
//! name rule every session and instance name follows.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::{Instance, Session, Target};
use crate::error::ApiError;

/// Where an instance's terminals run: `{"docker": {"container": "..."}}` or `{"local": {}}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TargetBody {
    /// `docker exec` in a running container, by id or name.
    Docker { container: String },
    /// The broker's own host (development).
    Local {},
}

#[derive(Debug, Serialize, ToSchema)]
pub struct InstanceBody {
    pub id: String,
    pub name: String,
    pub target: Option<TargetBody>,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: String,
    pub user: String,
    pub max_sessions: u32,
    pub labels: BTreeMap<String, String>,
    pub broker_id: String,
    pub created_at: Option<DateTime<Utc>>,
    /// Live sessions now.
    pub live_sessions: u32,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct RegisterInstanceBody {
    pub name: String,
    pub target: TargetBody,
    /// argv of new sessions; may contain `{session_id}`.
    pub command: Option<Vec<String>>,
    pub env: Option<BTreeMap<String, String>>,
    pub cwd: Option<String>,
    pub user: Option<String>,
    /// 1..=50, default 5.
    pub max_sessions: Option<u32>,
    /// Include `project_id` and `repository_id` for the project/repository routes.
    pub labels: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct InstanceList {
    pub instances: Vec<InstanceBody>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeletedInstance {
    /// Always `deleted`.
    pub status: String,
    pub instance_id: String,
    pub closed_sessions: u32,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SessionBody {
    pub id: String,
    pub instance_id: String,
    pub name: String,
    /// `starting`, `active`, `resetting`, `exited` or `closed`.
    pub status: String,
    /// Set when closed: `closed_by_user`, `exited`, `idle_reaped`, `broker_lost`,
    /// `instance_deleted` or `spawn_failed`.
    pub close_reason: Option<String>,
    /// Whether any client is attached now.
    pub has_websockets: bool,
    pub attached_clients: u32,
    pub created_at: Option<DateTime<Utc>>,
    pub last_activity_at: Option<DateTime<Utc>>,
    pub closed_at: Option<DateTime<Utc>>,
    pub aliases: Vec<String>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub cols: Option<u32>,
    pub rows: Option<u32>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SessionList {
    pub sessions: Vec<SessionBody>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct CreateSessionBody {
    /// 1..=255 characters after trimming; absent gives `Session N`.
    pub name: Option<String>,
    /// Pre-assigned external ids, each `^[A-Za-z0-9_.:-]{1,128}$`.
    pub aliases: Option<Vec<String>>,
    /// 1..=1000, with `rows`; default 80.
    pub cols: Option<u32>,
    /// 1..=500, with `cols`; default 24.
    pub rows: Option<u32>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedSession {
    pub id: String,
    pub name: String,
    pub status: String,
    pub created_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ClosedSession {
    /// Always `closed`.
    pub status: String,
    pub session_id: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ResetSessionBody {
    pub id: String,
    pub name: String,
    pub status: String,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct RenameSessionBody {
    /// 1..=255 characters after trimming, no control characters.
    pub name: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RenamedSession {
    pub id: String,
    pub name: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HealthBody {
    /// `ok` or `unavailable`.
    pub status: String,
    /// Why the gateway is not healthy, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    pub brokers: Vec<BrokerHealthBody>,
}

/// The answer of `/livez` and `/readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProbeBody {
    /// `ok` or `unavailable`.
    pub status: String,
    /// Why the gateway is not ready, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BrokerHealthBody {
    pub id: String,
    pub endpoint: String,
    /// `ok` or why the broker is considered down.
    pub status: String,
}

impl From<Instance> for InstanceBody {
    fn from(instance: Instance) -> Self {
        Self {
            id: instance.id,
            name: instance.name,
            target: instance.target.map(|target| match target {
                Target::Local => TargetBody::Local {},
                Target::Docker { container } => TargetBody::Docker { container },
            }),
            command: instance.command,
            env: instance.env,
            cwd: instance.cwd,
            user: instance.user,
            max_sessions: instance.max_sessions,
            labels: instance.labels,
            broker_id: instance.broker_id,
            created_at: instance.created_at,
            live_sessions: instance.live_sessions,
        }
    }
}

impl From<Session> for SessionBody {
    fn from(session: Session) -> Self {
        Self {
            has_websockets: session.attached_clients > 0,
            attached_clients: session.attached_clients,
            id: session.id,
            instance_id: session.instance_id,
            name: session.name,
            status: session.status.as_str().to_owned(),
            close_reason: session
                .close_reason
                .map(|reason| reason.as_str().to_owned()),
            created_at: session.created_at,
            last_activity_at: session.last_activity_at,
            closed_at: session.closed_at,
            aliases: session.aliases,
            exit_code: session.exit.map(|exit| exit.code),
            exit_signal: session.exit.and_then(|exit| exit.signal),
            cols: session.size.map(|size| size.cols().into()),
            rows: session.size.map(|size| size.rows().into()),
        }
    }
}

/// A session or instance name: 1..=255 characters after trimming, no control characters.
pub fn validate_name(name: &str) -> Result<String, ApiError> {
    let trimmed = name.trim();
    let length = trimmed.chars().count();
    if !(1..=255).contains(&length) {
        return Err(ApiError::invalid(
            "name must be 1 to 255 characters after trimming",
        ));
    }
    if trimmed.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "name must not contain control characters",
        ));
    }
    Ok(trimmed.to_owned())
}

#[cfg(test)]
mod tests {
    use ptyhub_wire::ErrorCode;

    use super::*;

    #[test]
    fn names_are_trimmed_and_checked() {
        assert_eq!(validate_name("  build  ").unwrap(), "build");
        assert_eq!(validate_name("   ").unwrap_err().code, ErrorCode::Invalid);
        assert_eq!(
            validate_name(&"x".repeat(256)).unwrap_err().code,
            ErrorCode::Invalid
        );
        assert!(validate_name(&"é".repeat(255)).is_ok());
        assert_eq!(
            validate_name("a\u{7}b").unwrap_err().code,
            ErrorCode::Invalid
        );
    }

    #[test]
    fn targets_use_the_contract_shape() {
        let docker: TargetBody =
            serde_json::from_str(r#"{"docker": {"container": "web"}}"#).unwrap();
        assert!(matches!(docker, TargetBody::Docker { container } if container == "web"));
        let local: TargetBody = serde_json::from_str(r#"{"local": {}}"#).unwrap();
        assert!(matches!(local, TargetBody::Local {}));
        assert_eq!(
            serde_json::to_string(&TargetBody::Local {}).unwrap(),
            r#"{"local":{}}"#
        );
    }
}
