//! The operations routes: `/healthz` for people and dashboards, `/livez` and `/readyz` for
//! orchestrators, and `/metrics` for Prometheus.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::bodies::{BrokerHealthBody, HealthBody, ProbeBody};
use crate::error::{ApiError, ErrorBody};
use crate::front_door::Authentication;
use crate::state::AppState;

/// Marks a probe's answer (`/healthz`, `/readyz`): a 503 there is what the probe is for (not
/// ready yet, a backend down, a shutdown), said to whoever asked, not a failure of the request;
/// the request log writes it as an answer, never as an ERROR.
#[derive(Debug, Clone, Copy)]
pub struct ProbeAnswer;

/// Whether the gateway is ready (nothing it was told to wait for is missing: in `ptyhub up`, the
/// broker's registration and the `local` instance), and session-api and every broker answer.
/// Needs no credential, but without an admin's it says only `ok` or `unavailable`: which brokers
/// exist, where, and what failed is for operators, not for anyone who can reach the port.
#[utoipa::path(
    get, path = "/healthz", tag = "operations",
    responses((status = 200, body = HealthBody), (status = 503, body = HealthBody)),
)]
pub async fn healthz(State(state): State<AppState>, authentication: Authentication) -> Response {
    let detailed = authentication.presents_bearer()
        && authentication
            .principal()
            .await
            .is_ok_and(|principal| principal.access.is_admin());
    let (status, mut body) = match starting(&state) {
        Some(waiting) => (
            StatusCode::SERVICE_UNAVAILABLE,
            HealthBody {
                status: "unavailable".into(),
                detail: Some(waiting),
                brokers: Vec::new(),
            },
        ),
        None => broker_health(&state).await,
    };
    if !detailed {
        body.detail = None;
        body.brokers.clear();
    }
    probe_answer(status, body)
}

/// What the gateway still waits for before it takes work, if anything.
fn starting(state: &AppState) -> Option<String> {
    state.readiness.waiting_for()
}

/// A probe's answer, marked as such for the request log.
fn probe_answer(status: StatusCode, body: impl serde::Serialize) -> Response {
    let mut response = (status, Json(body)).into_response();
    response.extensions_mut().insert(ProbeAnswer);
    response
}

/// `/healthz`'s answer from session-api's list of brokers and each broker's own health.
async fn broker_health(state: &AppState) -> (StatusCode, HealthBody) {
    match state.upstreams.check_brokers().await {
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            HealthBody {
                status: "unavailable".into(),
                detail: Some(error.message),
                brokers: Vec::new(),
            },
        ),
        Ok(brokers) => {
            let down: Vec<String> = brokers
                .iter()
                .filter(|broker| broker.problem.is_some())
                .map(|broker| broker.id.clone())
                .collect();
            let brokers = brokers
                .into_iter()
                .map(|broker| BrokerHealthBody {
                    id: broker.id,
                    endpoint: broker.endpoint,
                    status: broker.problem.unwrap_or_else(|| "ok".into()),
                })
                .collect();
            if down.is_empty() {
                (
                    StatusCode::OK,
                    HealthBody {
                        status: "ok".into(),
                        detail: None,
                        brokers,
                    },
                )
            } else {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    HealthBody {
                        status: "unavailable".into(),
                        detail: Some(format!("brokers not answering: {}", down.join(", "))),
                        brokers,
                    },
                )
            }
        }
    }
}

/// Liveness: the process serves HTTP. Needs no credential and asks no backend, so a slow
/// session-api or broker never gets a healthy gateway restarted.
#[utoipa::path(
    get, path = "/livez", tag = "operations",
    responses((status = 200, body = ProbeBody)),
)]
pub async fn livez() -> Json<ProbeBody> {
    Json(ProbeBody {
        status: "ok".into(),
        detail: None,
    })
}

/// Readiness: this replica should get new work. 503 while it is starting (what it was told to
/// wait for is missing), once it is shutting down (a rolling restart) or while session-api does
/// not answer; brokers are not asked, since one lost node must not take every gateway out of
/// service. Needs no credential.
#[utoipa::path(
    get, path = "/readyz", tag = "operations",
    responses((status = 200, body = ProbeBody), (status = 503, body = ProbeBody)),
)]
pub async fn readyz(State(state): State<AppState>) -> Response {
    let problem = if state.draining.is_cancelled() {
        Some("gateway shutting down".to_owned())
    } else if let Some(waiting) = starting(&state) {
        Some(waiting)
    } else {
        state
            .upstreams
            .check_session_api()
            .await
            .err()
            .map(|error| error.message)
    };
    let (status, body) = match problem {
        None => (
            StatusCode::OK,
            ProbeBody {
                status: "ok".into(),
                detail: None,
            },
        ),
        Some(detail) => (
            StatusCode::SERVICE_UNAVAILABLE,
            ProbeBody {
                status: "unavailable".into(),
                detail: Some(detail),
            },
        ),
    };
    probe_answer(status, body)
}

/// Prometheus metrics; needs a credential unless configured otherwise.
#[utoipa::path(
    get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain"), (status = 401, body = ErrorBody)),
    security(("bearer" = [])),
)]
pub async fn metrics(
    State(state): State<AppState>,
    authentication: Authentication,
) -> Result<Response, ApiError> {
    if state.metrics_require_auth {
        authentication.principal().await?;
    }
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response())
}
