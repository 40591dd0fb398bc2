//! What REST handlers take from a request besides the state: path and query parameters, the
//! authenticated [`Caller`], a [`JsonBody`] that tells malformed JSON (400) from the wrong shape
//! (422), and the [`InstanceScope`] that lets one handler serve a session route under both path
//! layouts.

use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use utoipa::IntoParams;

use ptyhub_wire::Surface;

use crate::auth::Principal;
use crate::domain::Instance;
use crate::error::ApiError;
use crate::front_door::Authentication;
use crate::state::AppState;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct InstancePath {
    /// Instance id or name.
    pub iid: String,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SessionPath {
    /// Instance id or name.
    pub iid: String,
    /// Session id (a UUID), or `default` for the session with the default alias.
    pub sid: String,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct CommandPath {
    /// Instance id or name.
    pub iid: String,
    /// Session id (a UUID), or `default` for the session with the default alias.
    pub sid: String,
    /// The command's id in its session (counting from 1).
    pub cid: String,
}

/// The two labels of the older single-app layout,
/// `/projects/{project_id}/repositories/{repository_id}/instances/{iid}/terminal/...`: the
/// instance must carry both, with these values.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ProjectRepositoryLabels {
    /// Must equal the instance's `project_id` label.
    pub project_id: String,
    /// Must equal the instance's `repository_id` label.
    pub repository_id: String,
}

impl ProjectRepositoryLabels {
    /// Whether `instance` carries both labels with these values.
    pub fn carried_by(&self, instance: &Instance) -> bool {
        let label = |name: &str| instance.labels.get(name).map(String::as_str);
        label("project_id") == Some(self.project_id.as_str())
            && label("repository_id") == Some(self.repository_id.as_str())
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListSessionsQuery {
    /// `closed` adds closed sessions (history).
    pub include: Option<String>,
}

/// The authenticated caller of a REST route, as the front door found it
/// ([`crate::front_door`]: `Authorization: Bearer <token>`, else the page's session cookie).
#[derive(Debug, Clone)]
pub struct Caller(pub Principal);

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        // A write's `Origin` was checked before any handler (`browser::check_writes`), whatever
        // its credential: a cookie goes with every request the browser makes to this site, and
        // an anonymous gateway needs none.
        let authentication = Authentication::from_request_parts(parts, state).await?;
        authentication.principal().await.map(Caller)
    }
}

/// The instance a session route names: `{iid}`, and under the project/repository layout the
/// labels the instance must carry. The same handlers serve both layouts with it; only
/// [`InstanceScope::authorize`] tells them apart.
#[derive(Debug, Clone)]
pub struct InstanceScope {
    /// The instance's id or name, as the path gives it.
    pub instance_reference: String,
    /// `Some` under the project/repository layout.
    pub labels: Option<ProjectRepositoryLabels>,
}

/// Every path parameter an [`InstanceScope`] may find.
#[derive(Debug, Deserialize)]
struct ScopePath {
    iid: String,
    project_id: Option<String>,
    repository_id: Option<String>,
}

impl FromRequestParts<AppState> for InstanceScope {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Path(path) = Path::<ScopePath>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::bad_request(rejection.body_text().to_lowercase()))?;
        let labels = match (path.project_id, path.repository_id) {
            (Some(project_id), Some(repository_id)) => Some(ProjectRepositoryLabels {
                project_id,
                repository_id,
            }),
            _ => None,
        };
        Ok(InstanceScope {
            instance_reference: path.iid,
            labels,
        })
    }
}

impl InstanceScope {
    /// The instance, once the principal may use it and, under the project/repository layout,
    /// it carries the path's labels (else 404, as if it did not exist there).
    pub async fn authorize(
        &self,
        state: &AppState,
        principal: &Principal,
    ) -> Result<Instance, ApiError> {
        let instance = state
            .authorize_instance_through(principal, &self.instance_reference, Surface::Rest)
            .await?;
        match &self.labels {
            Some(labels) if !labels.carried_by(&instance) => {
                Err(ApiError::not_found("instance not found"))
            }
            _ => Ok(instance),
        }
    }
}

/// A JSON body: malformed JSON is 400, JSON of the wrong shape 422. An empty body reads as `{}`,
/// so a body whose fields are all optional may be left out.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned + 'static> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let bytes = axum::body::Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                let message = rejection.body_text().to_lowercase();
                // A body over the request limit is a limit, not a malformed body.
                if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(ptyhub_wire::ErrorCode::LimitExceeded, message)
                } else {
                    ApiError::bad_request(message)
                }
            })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            // An optional body may be absent: `{}` stands in for it, and a required one then
            // reports its missing fields like any other incomplete body.
            return parse_json(b"{}");
        }
        parse_json(&bytes)
    }
}

/// Parses a body, naming the field a value of the wrong shape was found in (`invalid body:
/// control_grant_timeout: invalid value: integer `-1`, expected u32 ...`): serde's own message
/// names only the expected type and a column, which leaves a client to guess which field.
fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<JsonBody<T>, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer)
        .map_err(|error| body_error(error.inner(), &error))?;
    // Trailing characters after the value are malformed JSON too.
    deserializer
        .end()
        .map_err(|error| body_error(&error, &error))?;
    Ok(JsonBody(value))
}

/// 422 for JSON of the wrong shape, said as `shown` (with the field's path when it has one);
/// 400 for JSON that does not parse, said as serde does.
fn body_error(error: &serde_json::Error, shown: &dyn std::fmt::Display) -> ApiError {
    use serde_json::error::Category;
    match error.classify() {
        Category::Data => ApiError::invalid(format!("invalid body: {shown}")),
        Category::Syntax | Category::Eof | Category::Io => {
            ApiError::bad_request(format!("malformed json: {error}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use ptyhub_wire::ErrorCode;

    use super::*;
    use crate::rest::bodies::RenameSessionBody;

    #[test]
    fn bodies_distinguish_malformed_from_invalid() {
        let malformed = parse_json::<RenameSessionBody>(b"{\"name\":").unwrap_err();
        assert_eq!(malformed.code, ErrorCode::Malformed);
        let wrong_shape = parse_json::<RenameSessionBody>(b"{\"name\": 5}").unwrap_err();
        assert_eq!(wrong_shape.code, ErrorCode::Invalid);
        let trailing = parse_json::<RenameSessionBody>(b"{\"name\": \"x\"} {}").unwrap_err();
        assert_eq!(trailing.code, ErrorCode::Malformed);
    }

    #[test]
    fn a_value_of_the_wrong_shape_is_refused_with_the_field_it_is_in() {
        let error = parse_json::<RenameSessionBody>(b"{\"name\": 5}").unwrap_err();
        assert!(
            error
                .message
                .starts_with("invalid body: name: invalid type: integer `5`"),
            "{}",
            error.message
        );
        // A body missing a field names it in serde's own words, with no path before them.
        let error = parse_json::<RenameSessionBody>(b"{}").unwrap_err();
        assert!(
            error
                .message
                .starts_with("invalid body: missing field `name`"),
            "{}",
            error.message
        );
    }

    fn instance_with(labels: &[(&str, &str)]) -> Instance {
        Instance {
            id: "0b0e5b8e-1a52-4c5f-9b36-2a4f0f2c7d10".into(),
            name: "web-1".into(),
            target: None,
            command: Vec::new(),
            env: BTreeMap::new(),
            cwd: String::new(),
            user: String::new(),
            max_sessions: 5,
            labels: labels
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect(),
            broker_id: "local".into(),
            created_at: None,
            live_sessions: 0,
            record: crate::domain::RecordMode::Off,
            record_is_default: true,
            shell_integration: true,
            control_grant_timeout_secs: None,
        }
    }

    #[test]
    fn both_labels_must_match() {
        let labels = ProjectRepositoryLabels {
            project_id: "p1".into(),
            repository_id: "r1".into(),
        };
        let both = [("project_id", "p1"), ("repository_id", "r1")];
        assert!(labels.carried_by(&instance_with(&both)));
        for other in [
            &[("project_id", "p2"), ("repository_id", "r1")][..],
            &[("project_id", "p1"), ("repository_id", "r2")],
            &[("project_id", "p1")],
            &[],
        ] {
            assert!(!labels.carried_by(&instance_with(other)), "{other:?}");
        }
    }
}
