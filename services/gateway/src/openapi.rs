//! The OpenAPI 3 document of the REST and WebSocket routes, generated from the handlers'
//! annotations and served at `/api/v1/openapi.json`. The session routes are annotated once,
//! under `/api/v1/instances/{iid}`; [`ProjectRepositoryLayout`] documents their copies under the
//! older project/repository layout from those annotations.

use axum::Json;
use utoipa::openapi::Deprecated;
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoParams, Modify, OpenApi};

use crate::rest::webhooks;
use crate::rest::{INSTANCE_PREFIX, PROJECT_REPOSITORY_PREFIX};
use crate::rest::{
    ProjectRepositoryLabels, audit, commands, control, events, instances, operations, recordings,
    screens, sessions, shares, signin,
};
use crate::{rest, ws};

/// The tag of the session routes under the project/repository layout.
const PROJECT_REPOSITORY_TAG: &str = "project/repository layout (legacy)";

#[derive(Debug, OpenApi)]
#[openapi(
    info(title = "ptyhub gateway", description = "Terminal sessions in containers: REST and WebSocket. See CONTRACT.md."),
    paths(
        operations::healthz,
        operations::livez,
        operations::readyz,
        operations::metrics,
        instances::register_instance,
        instances::list_instances,
        instances::get_instance,
        instances::delete_instance,
        sessions::list_sessions,
        sessions::create_session,
        sessions::get_session,
        sessions::close_session,
        sessions::reset_session,
        sessions::rename_session,
        sessions::update_session,
        sessions::add_session_aliases,
        sessions::reset_default_session,
        events::session_events,
        screens::get_screen,
        screens::send_input,
        screens::wait_for_screen,
        control::get_control,
        control::request_control,
        control::grant_control,
        control::decline_control,
        commands::list_commands,
        commands::get_command_output,
        commands::run_command,
        shares::create_share,
        shares::list_shares,
        shares::revoke_share,
        webhooks::create_webhook,
        webhooks::list_webhooks,
        webhooks::delete_webhook,
        signin::sign_in,
        signin::current_session,
        signin::sign_out,
        recordings::get_recording,
        audit::list_audit_events,
        ws::open_instance_terminal,
        ws::open_session_terminal,
    ),
    components(schemas(rest::bodies::CommandEventBody)),
    modifiers(&ProjectRepositoryLayout, &LegacyDefaultReset, &BearerSecurity),
)]
pub struct ApiDoc;

/// Documents every session route a second time under [`PROJECT_REPOSITORY_PREFIX`], with its
/// two extra path parameters, its own tag and operation ids.
#[derive(Debug)]
struct ProjectRepositoryLayout;

impl Modify for ProjectRepositoryLayout {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let session_routes = format!("{INSTANCE_PREFIX}/terminal");
        let copies: Vec<_> = openapi
            .paths
            .paths
            .iter()
            .filter_map(|(path, item)| {
                let rest = path.strip_prefix(&session_routes)?;
                let mut item = item.clone();
                for operation in [&mut item.get, &mut item.post, &mut item.delete]
                    .into_iter()
                    .flatten()
                {
                    document_project_repository_layout(operation);
                }
                Some((format!("{PROJECT_REPOSITORY_PREFIX}/terminal{rest}"), item))
            })
            .collect();
        openapi.paths.paths.extend(copies);
    }
}

fn document_project_repository_layout(operation: &mut Operation) {
    operation.tags = Some(vec![PROJECT_REPOSITORY_TAG.to_owned()]);
    // Served for older clients and counted (docs/CONTRACT.md, "Legacy routes").
    operation.deprecated = Some(Deprecated::True);
    operation.operation_id = operation
        .operation_id
        .take()
        .map(|id| format!("project_repository_{id}"));
    let mut parameters = ProjectRepositoryLabels::into_params(|| Some(ParameterIn::Path));
    parameters.extend(operation.parameters.take().unwrap_or_default());
    operation.parameters = Some(parameters);
    if let Some(description) = operation.description.as_mut() {
        description.push_str(" The instance's `project_id` and `repository_id` labels must match the path, else 404.");
    }
}

/// Marks the single-terminal reset of the `default` session deprecated under the instance
/// layout too: `POST .../sessions/default/reset` does the same (docs/CONTRACT.md, "Legacy
/// routes").
#[derive(Debug)]
struct LegacyDefaultReset;

impl Modify for LegacyDefaultReset {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let path = format!("{INSTANCE_PREFIX}/terminal/reset");
        if let Some(operation) = openapi
            .paths
            .paths
            .get_mut(&path)
            .and_then(|item| item.post.as_mut())
        {
            operation.deprecated = Some(Deprecated::True);
        }
    }
}

#[derive(Debug)]
struct BearerSecurity;

impl Modify for BearerSecurity {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The document itself; like every REST route, it needs a credential.
pub async fn openapi_json(_caller: rest::Caller) -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn the_screen_routes_are_documented_under_both_layouts() {
        let document = ApiDoc::openapi();
        for prefix in [INSTANCE_PREFIX, PROJECT_REPOSITORY_PREFIX] {
            let route = |suffix: &str| {
                document
                    .paths
                    .paths
                    .get(&format!("{prefix}/terminal/sessions/{{sid}}/{suffix}"))
                    .unwrap_or_else(|| panic!("{prefix} {suffix} is not documented"))
            };
            assert!(route("screen").get.is_some(), "{prefix}");
            assert!(route("input").post.is_some(), "{prefix}");
            assert!(route("wait").post.is_some(), "{prefix}");
        }
        let schemas = &document.components.as_ref().expect("components").schemas;
        for schema in ["Screen", "Cell", "InputBody", "WaitBody", "WaitAnswerBody"] {
            assert!(schemas.contains_key(schema), "{schema} is not documented");
        }
    }

    #[test]
    fn the_command_routes_and_the_terminal_fields_are_documented() {
        let document = ApiDoc::openapi();
        for prefix in [INSTANCE_PREFIX, PROJECT_REPOSITORY_PREFIX] {
            for suffix in ["commands", "commands/{cid}/output"] {
                let path = format!("{prefix}/terminal/sessions/{{sid}}/{suffix}");
                let route = document
                    .paths
                    .paths
                    .get(&path)
                    .unwrap_or_else(|| panic!("{path} is not documented"));
                assert!(route.get.is_some(), "{path}");
            }
            let path = format!("{prefix}/terminal/sessions/{{sid}}/run");
            let route = document
                .paths
                .paths
                .get(&path)
                .unwrap_or_else(|| panic!("{path} is not documented"));
            assert!(route.post.is_some(), "{path}");
        }
        let run =
            &document.paths.paths[&format!("{INSTANCE_PREFIX}/terminal/sessions/{{sid}}/run")];
        let responses = &run.post.as_ref().expect("a post").responses.responses;
        for status in ["200", "403", "408", "409", "422"] {
            assert!(
                responses.contains_key(status),
                "run's {status} is documented"
            );
        }
        let output = &document.paths.paths
            [&format!("{INSTANCE_PREFIX}/terminal/sessions/{{sid}}/commands/{{cid}}/output")];
        let responses = &output.get.as_ref().expect("a get").responses.responses;
        assert!(responses.contains_key("410"), "410 is documented");
        let schemas = &document.components.as_ref().expect("components").schemas;
        for schema in [
            "CommandList",
            "CommandBody",
            "TerminalActivity",
            "Notification",
            "Progress",
            "CommandEventBody",
            "RunBody",
            "RunAnswerBody",
        ] {
            assert!(schemas.contains_key(schema), "{schema} is not documented");
        }
        let json = serde_json::to_value(&document).expect("the document as json");
        let properties = |schema: &str| json["components"]["schemas"][schema]["properties"].clone();
        let session_keys = documented_keys(&json, "SessionBody");
        for field in [
            "state",
            "last_notification",
            "progress",
            "cwd",
            "shell_integration",
            "running_command_id",
        ] {
            assert!(
                session_keys.contains(field),
                "the session body's {field} is not documented"
            );
        }
        assert!(
            properties("InstanceBody")
                .get("shell_integration")
                .is_some()
        );
        assert!(
            properties("RegisterInstanceBody")
                .get("shell_integration")
                .is_some()
        );
    }

    /// The keys an object schema of the document lists, through `allOf` and `$ref` (a flattened
    /// field is an `allOf` of its own schema).
    fn documented_keys(document: &serde_json::Value, schema: &str) -> BTreeSet<String> {
        fn collect(
            document: &serde_json::Value,
            schema: &serde_json::Value,
            keys: &mut BTreeSet<String>,
        ) {
            if let Some(reference) = schema["$ref"].as_str() {
                let name = reference.trim_start_matches("#/components/schemas/");
                collect(document, &document["components"]["schemas"][name], keys);
            }
            for part in schema["allOf"].as_array().into_iter().flatten() {
                collect(document, part, keys);
            }
            if let Some(properties) = schema["properties"].as_object() {
                keys.extend(properties.keys().cloned());
            }
        }
        let mut keys = BTreeSet::new();
        collect(
            document,
            &document["components"]["schemas"][schema],
            &mut keys,
        );
        keys
    }

    #[test]
    fn the_schema_of_a_session_lists_exactly_the_keys_a_session_has() {
        use ptyhub_model::{
            ExitStatus, Notification, Progress, Session, SessionStatus, TerminalActivity,
            TerminalSize, TerminalState,
        };
        let at = chrono::DateTime::from_timestamp(1_800_000_000, 0).expect("a time");
        let session = Session {
            id: uuid::Uuid::from_u128(1),
            instance_id: uuid::Uuid::from_u128(2),
            name: "Session 1".to_owned(),
            status: SessionStatus::Active,
            close_reason: None,
            exit: Some(ExitStatus::signalled(9)),
            aliases: vec!["build".to_owned()],
            size: TerminalSize::new(80, 24).expect("a size"),
            broker_id: "local".to_owned(),
            created_at: at,
            last_activity_at: at,
            closed_at: None,
            attached_clients: 1,
            title: Some("vim".to_owned()),
            last_bell_at: Some(at),
            terminal: Some(TerminalActivity {
                state: TerminalState::Running,
                progress: Some(Progress::Percent(5)),
                notification: Some(Notification {
                    text: String::new(),
                    at: at.into(),
                }),
                cwd: Some("/src".to_owned()),
                integrated: true,
                running_command: Some(2),
            }),
            presence: Vec::new(),
            control_mode: Default::default(),
        };
        let body = serde_json::to_value(rest::bodies::SessionBody::from(session))
            .expect("a session as json");
        let serialized: BTreeSet<String> = body
            .as_object()
            .expect("a session is an object")
            .keys()
            .cloned()
            .collect();
        let document = serde_json::to_value(ApiDoc::openapi()).expect("the document as json");
        assert_eq!(documented_keys(&document, "SessionBody"), serialized);
    }

    #[test]
    fn the_legacy_routes_and_no_others_are_deprecated() {
        let document = ApiDoc::openapi();
        let mut deprecated = Vec::new();
        let mut current = Vec::new();
        for (path, item) in &document.paths.paths {
            for operation in [&item.get, &item.post, &item.delete].into_iter().flatten() {
                if operation.deprecated == Some(Deprecated::True) {
                    deprecated.push(path.clone());
                } else {
                    current.push(path.clone());
                }
            }
        }
        let legacy = |path: &String| {
            path.starts_with(PROJECT_REPOSITORY_PREFIX)
                || *path == format!("{INSTANCE_PREFIX}/terminal/reset")
        };
        assert!(deprecated.iter().all(legacy), "{deprecated:?}");
        assert!(!current.iter().any(legacy), "{current:?}");
        assert!(
            deprecated.len() > 10,
            "every legacy route is marked: {deprecated:?}"
        );
    }

    #[test]
    fn project_repository_routes_are_documented_with_their_labels() {
        let document = ApiDoc::openapi();
        let path = format!("{PROJECT_REPOSITORY_PREFIX}/terminal/sessions/{{sid}}/rename");
        let operation = document.paths.paths[&path]
            .post
            .as_ref()
            .expect("rename is documented under the project/repository layout");
        assert_eq!(
            operation.tags.as_deref(),
            Some(&[PROJECT_REPOSITORY_TAG.to_owned()][..])
        );
        let names: Vec<&str> = operation
            .parameters
            .iter()
            .flatten()
            .map(|parameter| parameter.name.as_str())
            .collect();
        assert_eq!(names, ["project_id", "repository_id", "iid", "sid"]);
        assert_eq!(
            operation.operation_id.as_deref(),
            Some("project_repository_rename_session")
        );
        let original =
            &document.paths.paths[&format!("{INSTANCE_PREFIX}/terminal/sessions/{{sid}}/rename")];
        assert_eq!(
            original
                .post
                .as_ref()
                .and_then(|operation| operation.tags.as_deref()),
            Some(&["sessions".to_owned()][..])
        );
    }
}
