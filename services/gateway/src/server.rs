//! Puts the gateway on one port: axum routes for REST, WebSocket and the web page, gRPC-web and
//! gRPC (chosen by content type) for the session-api surface and the broker's `Attach` relayed
//! for outside clients, with `grpc.health.v1` and server reflection, JSON 404s for everything
//! else. All of it sits behind the front door ([`FrontDoorLayer`]): a route or service mounted
//! here finds its caller's principal in the request, whatever its surface.

use std::convert::Infallible;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{delete, get, post};
use ptyhub_wire::limits::MAX_FRAME_BYTES;
use ptyhub_wire::{Introspection, IntrospectionError};
use tower::ServiceExt;
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::trace::{OnFailure, OnResponse, TraceLayer};

use crate::attach_relay::AttachRelay;
use crate::browser::{BrowserPolicy, origin_allowed};
use crate::error::{ApiError, ErrorBody};
use crate::front_door::FrontDoorLayer;
use crate::rest::operations::ProbeAnswer;
use crate::rest::webhooks;
use crate::rest::{
    INSTANCE_PREFIX, PROJECT_REPOSITORY_PREFIX, audit, commands, control, events, instances,
    operations, recordings, screens, sessions, shares, signin,
};
use crate::session_proxy::{RequestOrigin, SessionApiProxy};
use crate::state::AppState;
use crate::{browser, mcp, openapi, web, ws};

/// The session-api surface the gateway offers.
const SESSION_API_SERVICE: &str = "ptyhub.session.v1.SessionApi";
/// The broker's service, of which the gateway offers `Attach` alone.
const PTY_BROKER_SERVICE: &str = "ptyhub.broker.v1.PtyBroker";

/// The decoder's limit for a relayed `Attach` client frame: the contract's largest input frame
/// plus protobuf framing, as on the broker. Larger frames end the stream with
/// RESOURCE_EXHAUSTED before anything is forwarded.
const MAX_ATTACH_FRAME_BYTES: usize = MAX_FRAME_BYTES + 1024;

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
            post(instances::register_instance).get(instances::list_instances),
        )
        .route(
            INSTANCE_PREFIX,
            get(instances::get_instance).delete(instances::delete_instance),
        )
        .route(
            &format!("{INSTANCE_PREFIX}/shares"),
            post(shares::create_share).get(shares::list_shares),
        )
        .route(
            &format!("{INSTANCE_PREFIX}/shares/{{share_id}}"),
            delete(shares::revoke_share),
        )
        .route(
            &format!("{INSTANCE_PREFIX}/webhooks"),
            post(webhooks::create_webhook).get(webhooks::list_webhooks),
        )
        .route(
            &format!("{INSTANCE_PREFIX}/webhooks/{{webhook_id}}"),
            delete(webhooks::delete_webhook),
        );
    let api = session_routes(api, INSTANCE_PREFIX)
        .merge(legacy_routes(&state))
        .route("/api/v1/audit", get(audit::list_audit_events))
        .route("/api/v1/openapi.json", get(openapi::openapi_json))
        .route(
            "/api/v1/auth/session",
            post(signin::sign_in)
                .get(signin::current_session)
                .delete(signin::sign_out),
        )
        .route("/healthz", get(operations::healthz))
        .route("/livez", get(operations::livez))
        .route("/readyz", get(operations::readyz))
        .route("/metrics", get(operations::metrics))
        .route(
            "/ws/tool-instances/{iid}/terminal",
            get(ws::open_instance_terminal),
        )
        .route(
            "/ws/tool-instances/{iid}/terminal/{sid}",
            get(ws::open_session_terminal),
        )
        .merge(mcp::routes(&state))
        .merge(web::routes(&state))
        .fallback(|| async { ApiError::not_found("not found") })
        .method_not_allowed_fallback(|| async {
            (
                StatusCode::METHOD_NOT_ALLOWED,
                Json(ErrorBody {
                    detail: "method not allowed".into(),
                    code: None,
                }),
            )
        });
    let browser_policy = BrowserPolicy {
        hosts: state.host_policy.clone(),
        allowed_origins: state.allowed_origins.clone(),
    };
    let router = api
        .layer(middleware::from_fn_with_state(
            browser_policy.clone(),
            browser::check_writes,
        ))
        .layer(middleware::from_fn_with_state(
            (grpc, state.serves_tls),
            route_grpc,
        ))
        // Inside the Host check, outside everything that serves: every surface's request
        // carries its Authentication from here on.
        .layer(FrontDoorLayer::new(state.clone()))
        .layer(middleware::from_fn(browser::security_headers))
        .layer(middleware::from_fn_with_state(
            browser_policy,
            browser::check_host,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), count_status))
        .layer(
            TraceLayer::new_for_http()
                // The path only: the query may hold a WebSocket's token.
                .make_span_with(|request: &Request| {
                    tracing::info_span!("http", method = %request.method(), path = %request.uri().path())
                })
                .on_response(LogAnswer)
                .on_failure(LogFailure),
        )
        .with_state(state);
    Ok(router)
}

/// The request log's line for each answer: INFO, and ERROR for a server error except a probe's
/// 503, which is what a probe is for (a `ptyhub up` asked before it is ready, a load balancer
/// during a shutdown) and would otherwise put an ERROR on the terminal of whoever started it.
#[derive(Debug, Clone, Copy)]
struct LogAnswer;

impl<B> OnResponse<B> for LogAnswer {
    fn on_response(
        self,
        response: &axum::http::Response<B>,
        latency: std::time::Duration,
        _span: &tracing::Span,
    ) {
        let status = response.status().as_u16();
        let latency_ms = latency.as_millis();
        let probe = response.extensions().get::<ProbeAnswer>().is_some();
        if response.status().is_server_error() && !probe {
            tracing::error!(status, latency_ms, "answered with a server error");
        } else {
            tracing::info!(status, latency_ms, "answered");
        }
    }
}

/// A request that failed without an answer; a server error status is an answer, written by
/// [`LogAnswer`].
#[derive(Debug, Clone, Copy)]
struct LogFailure;

impl OnFailure<ServerErrorsFailureClass> for LogFailure {
    fn on_failure(
        &mut self,
        class: ServerErrorsFailureClass,
        latency: std::time::Duration,
        _span: &tracing::Span,
    ) {
        if let ServerErrorsFailureClass::Error(error) = class {
            tracing::error!(%error, latency_ms = latency.as_millis(), "request failed");
        }
    }
}

/// The deprecated routes (docs/CONTRACT.md, "Legacy routes"): the session routes under the
/// project/repository layout, and the single-terminal reset of the `default` session under both
/// layouts. Each request to one is counted by its method and route before it is served, so that
/// an operator sees who still uses them before they go.
fn legacy_routes(state: &AppState) -> Router<AppState> {
    let default_reset = |router: Router<AppState>, prefix: &str| {
        router.route(
            &format!("{prefix}/terminal/reset"),
            post(sessions::reset_default_session),
        )
    };
    let legacy = session_routes(Router::new(), PROJECT_REPOSITORY_PREFIX);
    let legacy = default_reset(legacy, PROJECT_REPOSITORY_PREFIX);
    default_reset(legacy, INSTANCE_PREFIX).route_layer(middleware::from_fn_with_state(
        state.metrics.clone(),
        count_legacy_request,
    ))
}

/// Counts a request to a legacy route by the route's template (never its ids).
async fn count_legacy_request(
    State(metrics): State<crate::metrics::Metrics>,
    route: MatchedPath,
    request: Request,
    next: Next,
) -> Response {
    metrics.legacy_request(request.method().as_str(), route.as_str());
    next.run(request).await
}

/// The session routes below `prefix`: the same handlers for both layouts, whose
/// [`crate::rest::InstanceScope`] tells them apart. The `default` session's reset is among the
/// [`legacy_routes`].
fn session_routes(router: Router<AppState>, prefix: &str) -> Router<AppState> {
    router
        .route(
            &format!("{prefix}/terminal/sessions"),
            get(sessions::list_sessions).post(sessions::create_session),
        )
        .route(
            &format!("{prefix}/terminal/sessions/{{sid}}"),
            get(sessions::get_session)
                .patch(sessions::update_session)
                .delete(sessions::close_session),
        )
        .route(
            &format!("{prefix}/terminal/sessions/{{sid}}/reset"),
            post(sessions::reset_session),
        )
        .route(
            &format!("{prefix}/terminal/sessions/{{sid}}/rename"),
            post(sessions::rename_session),
        )
        .route(
            &format!("{prefix}/terminal/sessions/{{sid}}/aliases"),
            post(sessions::add_session_aliases),
        )
        .route(
            &format!("{prefix}/terminal/sessions/{{sid}}/screen"),
            get(screens::get_screen),
        )
        .route(
            &format!("{prefix}/terminal/sessions/{{sid}}/input"),
            post(screens::send_input),
        )
        .route(
            &format!("{prefix}/terminal/sessions/{{sid}}/wait"),
            post(screens::wait_for_screen),
        )
        .route(
            &format!("{prefix}/terminal/sessions/{{sid}}/control"),
            get(control::get_control),
        )
        .route(
            &format!("{prefix}/terminal/sessions/{{sid}}/control/requests"),
            post(control::request_control),
        )
        .route(
            &format!("{prefix}/terminal/sessions/{{sid}}/control/requests/{{rid}}/grant"),
            post(control::grant_control),
        )
        .route(
            &format!("{prefix}/terminal/sessions/{{sid}}/control/requests/{{rid}}/decline"),
            post(control::decline_control),
        )
        .route(
            &format!("{prefix}/terminal/sessions/{{sid}}/commands"),
            get(commands::list_commands),
        )
        .route(
            &format!("{prefix}/terminal/sessions/{{sid}}/commands/{{cid}}/output"),
            get(commands::get_command_output),
        )
        .route(
            &format!("{prefix}/terminal/sessions/{{sid}}/run"),
            post(commands::run_command),
        )
        .route(
            &format!("{prefix}/terminal/sessions/{{sid}}/recording"),
            get(recordings::get_recording),
        )
        .route(
            &format!("{prefix}/terminal/events"),
            get(events::session_events),
        )
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
    let routes = Introspection::new(&[SESSION_API_SERVICE, PTY_BROKER_SERVICE])
        .await?
        .into_routes()
        .add_service(SessionApiProxy::new(state.clone()).into_server())
        .add_service(AttachRelay::new(state).into_server(MAX_ATTACH_FRAME_BYTES));
    Ok(tower::Layer::layer(
        &cors,
        tower::Layer::layer(&tonic_web::GrpcWebLayer::new(), routes),
    ))
}

/// gRPC-web, gRPC and their CORS preflights go to the session-api surface; the rest to axum.
async fn route_grpc(
    State((grpc, serves_tls)): State<(GrpcService, bool)>,
    mut request: Request,
    next: Next,
) -> Response {
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
        if let Some(origin) = request_origin(&request, serves_tls) {
            request.extensions_mut().insert(origin);
        }
        let response: Result<_, Infallible> = grpc.oneshot(request).await;
        let Ok(response) = response;
        return response.map(Body::new);
    }
    next.run(request).await
}

/// `scheme://authority` as the client addressed the gateway: HTTP/2's `:authority` (gRPC) or
/// the `Host` header (gRPC-web over HTTP/1.1), with the scheme a TLS-terminating proxy in front
/// reports in `X-Forwarded-Proto`.
fn request_origin(request: &Request, serves_tls: bool) -> Option<RequestOrigin> {
    let headers = request.headers();
    let authority = request
        .uri()
        .authority()
        .map(|authority| authority.as_str().to_owned())
        .or_else(|| {
            headers
                .get(header::HOST)
                .and_then(|host| host.to_str().ok())
                .map(str::to_owned)
        })?;
    let forwarded = headers
        .get("x-forwarded-proto")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(',').next())
        .map(str::trim);
    let scheme = match forwarded {
        Some("https") => "https",
        Some("http") => "http",
        _ => request
            .uri()
            .scheme_str()
            .unwrap_or(if serves_tls { "https" } else { "http" }),
    };
    Some(RequestOrigin(format!("{scheme}://{authority}")))
}

async fn count_status(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    state.metrics.http_response(response.status().as_u16());
    response
}
