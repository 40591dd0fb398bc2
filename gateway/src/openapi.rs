//! The OpenAPI 3 document of the REST and WebSocket routes, generated from the handlers'
//! annotations and served at `/api/v1/openapi.json`.

use axum::Json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::{rest, ws};

#[derive(Debug, OpenApi)]
#[openapi(
    info(title = "ptyhub gateway", description = "Terminal sessions in containers: REST and WebSocket. See CONTRACT.md."),
    paths(
        rest::healthz,
        rest::livez,
        rest::readyz,
        rest::metrics,
        rest::register_instance,
        rest::list_instances,
        rest::get_instance,
        rest::delete_instance,
        rest::list_sessions,
        rest::create_session,
        rest::get_session,
        rest::close_session,
        rest::reset_session,
        rest::rename_session,
        rest::reset_default_session,
        rest::seed_list_sessions,
        rest::seed_create_session,
        rest::seed_get_session,
        rest::seed_close_session,
        rest::seed_reset_session,
        rest::seed_rename_session,
        rest::seed_reset_default_session,
        ws::open_instance_terminal,
        ws::open_session_terminal,
    ),
    modifiers(&BearerSecurity),
)]
pub struct ApiDoc;

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
