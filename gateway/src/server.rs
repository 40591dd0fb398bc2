//! Puts the gateway on one port: axum routes for REST, WebSocket and the web page, gRPC-web and
//! gRPC (chosen by content type) for the session-api surface with `grpc.health.v1` and server
//! reflection, JSON 404s for everything else.

use std::convert::Infallible;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use ptyhub_proto::session::v1::session_api_server::SessionApiServer;
use ptyhub_wire::{Introspection, IntrospectionError};
use tower::ServiceExt;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::error::{ApiError, ErrorBody};
use crate::session_proxy::SessionApiProxy;
use crate::state::AppState;
use crate::ws::origin_allowed;
use crate::{openapi, rest, web, ws};

/// The one gRPC service the gateway offers (besides health and reflection).
const SESSION_API_SERVICE: &str = "ptyhub.session.v1.SessionApi";

/// The path prefix of every session-api gRPC method.
const GRPC_PATH_PREFIX: &str = "/ptyhub.session.v1.SessionApi/";

type GrpcService = tower_http::cors::Cors<tonic_web::GrpcWebService<tonic::service::Routes>>;

/// Why the router could not be built.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct RouterError(#[from] IntrospectionError);

/// The whole gateway as one axum router.
pub async fn router(state: AppState) -> Result<Router, RouterError> {
    let grpc = grpc_service(state.clone()).await?;
    let api = Router::new()
        .route(
            "/api/v1/instances",
            post(rest::register_instance).get(rest::list_instances),
        )
        .route(
            "/api/v1/instances/{iid}",
            get(rest::get_instance).delete(rest::delete_instance),
        )
        .route(
            "/api/v1/instances/{iid}/terminal/sessions",
            get(rest::list_sessions).post(rest::create_session),
        )
        .route(
            "/api/v1/instances/{iid}/terminal/sessions/{sid}",
            get(rest::get_session).delete(rest::close_session),
        )
        .route(
            "/api/v1/instances/{iid}/terminal/sessions/{sid}/reset",
            post(rest::reset_session),
        )
        .route(
            "/api/v1/instances/{iid}/terminal/sessions/{sid}/rename",
            post(rest::rename_session),
        )
        .route(
            "/api/v1/instances/{iid}/terminal/reset",
            post(rest::reset_default_session),
        )
        .route(
            "/projects/{project_id}/repositories/{repository_id}/instances/{iid}/terminal/sessions",
            get(rest::seed_list_sessions).post(rest::seed_create_session),
        )
        .route(
            "/projects/{project_id}/repositories/{repository_id}/instances/{iid}/terminal/sessions/{sid}",
            get(rest::seed_get_session).delete(rest::seed_close_session),
        )
        .route(
            "/projects/{project_id}/repositories/{repository_id}/instances/{iid}/terminal/sessions/{sid}/reset",
            post(rest::seed_reset_session),
        )
        .route(
            "/projects/{project_id}/repositories/{repository_id}/instances/{iid}/terminal/sessions/{sid}/rename",
            post(rest::seed_rename_session),
        )
        .route(
            "/projects/{project_id}/repositories/{repository_id}/instances/{iid}/terminal/reset",
            post(rest::seed_reset_default_session),
        )
        .route("/api/v1/openapi.json", get(openapi::openapi_json))
        .route("/healthz", get(rest::healthz))
        .route("/livez", get(rest::livez))
        .route("/readyz", get(rest::readyz))
        .route("/metrics", get(rest::metrics))
        .route(
            "/ws/tool-instances/{iid}/terminal",
            get(ws::open_instance_terminal),
        )
        .route(
            "/ws/tool-instances/{iid}/terminal/{sid}",
            get(ws::open_session_terminal),
        )
        .route("/", get(web::index_page))
        .route("/instances/{iid}", get(web::instance_page))
        .route("/assets/{*path}", get(web::asset))
        .fallback(|| async { ApiError::not_found("not found") })
        .method_not_allowed_fallback(|| async {
            (
                StatusCode::METHOD_NOT_ALLOWED,
                Json(ErrorBody {
                    detail: "method not allowed".into(),
                }),
            )
        });
    let router = api
        .layer(middleware::from_fn_with_state(grpc, route_grpc))
        .layer(middleware::from_fn_with_state(state.clone(), count_status))
        .layer(
            TraceLayer::new_for_http()
                // The path only: the query may hold a WebSocket's token.
                .make_span_with(|request: &Request| {
                    tracing::info_span!("http", method = %request.method(), path = %request.uri().path())
                })
                .on_response(DefaultOnResponse::new().level(Level::INFO)),
        )
        .with_state(state);
    Ok(router)
}

async fn grpc_service(state: AppState) -> Result<GrpcService, RouterError> {
    let allowed_origins = state.allowed_origins.clone();
    let cors = CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |origin, parts| {
            origin_allowed(&allowed_origins, origin, parts.headers.get(header::HOST))
        }))
        .allow_methods([Method::POST])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::HeaderName::from_static("x-grpc-web"),
            header::HeaderName::from_static("x-user-agent"),
            header::HeaderName::from_static("grpc-timeout"),
        ])
        .expose_headers([
            header::HeaderName::from_static("grpc-status"),
            header::HeaderName::from_static("grpc-message"),
        ]);
    // Health, and reflection in both versions (Python's grpcio-reflection speaks v1alpha only).
    let routes = Introspection::new(&[SESSION_API_SERVICE])
        .await?
        .into_routes()
        .add_service(SessionApiServer::new(SessionApiProxy::new(state)));
    Ok(tower::Layer::layer(
        &cors,
        tower::Layer::layer(&tonic_web::GrpcWebLayer::new(), routes),
    ))
}

/// gRPC-web, gRPC and their CORS preflights go to the session-api surface; the rest to axum.
async fn route_grpc(State(grpc): State<GrpcService>, request: Request, next: Next) -> Response {
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    let grpc_preflight = request.method() == Method::OPTIONS
        && request.uri().path().starts_with(GRPC_PATH_PREFIX)
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if content_type.starts_with("application/grpc") || grpc_preflight {
        let response: Result<_, Infallible> = grpc.oneshot(request).await;
        let Ok(response) = response;
        return response.map(Body::new);
    }
    next.run(request).await
}

async fn count_status(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    state.metrics.http_response(response.status().as_u16());
    response
}
