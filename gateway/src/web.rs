//! The web page: `/` and `/instances/{iid}` serve the configured static directory's
//! `index.html` (the page reads its token and instance from the address), `/assets/...` the
//! files below its `assets/`, through tower-http's file services, which refuse any path that
//! leaves the directory. What is missing is a JSON 404 like every other unknown path.

use std::convert::Infallible;
use std::path::{Path, PathBuf};

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tower::ServiceExt;
use tower::service_fn;
use tower_http::services::{ServeDir, ServeFile};

use crate::error::ApiError;
use crate::state::AppState;

/// The page's routes, for the static directory `static_dir` (`None`: no page, only 404s that
/// say so).
pub fn routes(static_dir: Option<&Path>) -> Router<AppState> {
    let Some(static_dir) = static_dir else {
        let not_configured = || async { not_configured().into_response() };
        return Router::new()
            .route("/", get(not_configured))
            .route("/instances/{iid}", get(not_configured))
            .route("/assets/{*path}", get(not_configured));
    };
    let index = static_dir.join("index.html");
    let instance_index = index.clone();
    let assets = ServeDir::new(static_dir.join("assets"))
        // A directory is not a page: 404 rather than a redirect to its `index.html`.
        .append_index_html_on_directories(false)
        .not_found_service(service_fn(|_: Request| async {
            Ok::<_, Infallible>(ApiError::not_found("not found").into_response())
        }));
    Router::new()
        .route("/", get(move |request| serve_index(index, request)))
        .route(
            "/instances/{iid}",
            get(move |request| serve_index(instance_index, request)),
        )
        .nest_service("/assets", assets)
}

/// `index.html`, which browsers must revalidate so that a new page reaches them at once.
async fn serve_index(index: PathBuf, request: Request) -> Response {
    let Ok(mut response) = ServeFile::new(&index).oneshot(request).await;
    if response.status() == StatusCode::NOT_FOUND {
        let directory = index.parent().unwrap_or(&index);
        return ApiError::not_found(format!(
            "web page not installed: no index.html in {}",
            directory.display()
        ))
        .into_response();
    }
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response.into_response()
}

fn not_configured() -> ApiError {
    ApiError::not_found("web page not configured: set PTYHUB_GATEWAY_STATIC_DIR")
}
