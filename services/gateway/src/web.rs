//! The web page: `/` and `/instances/{iid}` serve `index.html` (the page reads its instance from
//! the address; a sign-in or share link's token there is moved into the fragment first, for the
//! page to sign in with), `/assets/...` the files below `assets/`. The page comes from the
//! binary itself (`web/dist` as it was when the binary was built, embedded by `build.rs` and
//! rust-embed), or, when a directory is configured (`--web-dir`, `--static-dir`), from that
//! directory through tower-http's file services, which refuse any path that leaves it. What is
//! missing is a JSON 404 like every other unknown path.

use std::convert::Infallible;
use std::path::{Path, PathBuf};

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rust_embed::RustEmbed;
use tower::ServiceExt;
use tower::service_fn;
use tower_http::services::{ServeDir, ServeFile};

use crate::error::ApiError;
use crate::rest::signin::move_token_into_fragment;
use crate::state::AppState;

/// The page built into this binary: `$OUT_DIR/page`, which `build.rs` fills from `web/dist`
/// (empty when the page was not built before the binary).
#[derive(RustEmbed)]
#[folder = "$OUT_DIR/page"]
struct EmbeddedPage;

/// Whether this binary carries a built page (`index.html`).
pub fn page_embedded() -> bool {
    EmbeddedPage::get("index.html").is_some()
}

/// The page's routes: from `static_dir` when one is given, else the page built into the binary.
/// The page itself (not its assets) first moves a `?token=` or `?share=` into the fragment
/// ([`crate::rest::signin::move_token_into_fragment`]).
pub fn routes(state: &AppState) -> Router<AppState> {
    let (pages, assets) = match state.static_dir.as_deref() {
        Some(static_dir) => directory_routes(static_dir),
        None => embedded_routes(),
    };
    pages
        .route_layer(middleware::from_fn(move_token_into_fragment))
        .merge(assets)
}

fn embedded_routes() -> (Router<AppState>, Router<AppState>) {
    (
        Router::new()
            .route("/", get(embedded_index))
            .route("/instances/{iid}", get(embedded_index)),
        Router::new().route("/assets/{*path}", get(embedded_asset)),
    )
}

async fn embedded_index(headers: HeaderMap) -> Response {
    if !page_embedded() {
        return ApiError::not_found(
            "web page not built into this binary: build web/ (cargo xtask web) before the binary, or pass --web-dir",
        )
        .into_response();
    }
    embedded_file("index.html", &headers)
}

async fn embedded_asset(
    axum::extract::Path(path): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    embedded_file(&format!("assets/{path}"), &headers)
}

/// One embedded file, with its content type and an `ETag` from its hash: the names are not
/// content-hashed, so browsers revalidate (`no-cache`) and get a 304 while the file is the same.
fn embedded_file(path: &str, request: &HeaderMap) -> Response {
    let Some(file) = EmbeddedPage::get(path) else {
        return ApiError::not_found("not found").into_response();
    };
    let hash = file.metadata.sha256_hash();
    let etag = format!(
        "\"{}\"",
        hash.iter()
            .take(16)
            .map(|byte| format!("{byte:02x}"))
            .collect::<String>()
    );
    let content_type = if path.ends_with(".html") {
        "text/html; charset=utf-8".to_owned()
    } else {
        file.metadata.mimetype().to_owned()
    };
    let unchanged = request
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|tag| tag.trim() == etag));
    let mut response = if unchanged {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        file.data.into_owned().into_response()
    };
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&content_type) {
        headers.insert(header::CONTENT_TYPE, value);
    }
    if let Ok(value) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn directory_routes(static_dir: &Path) -> (Router<AppState>, Router<AppState>) {
    let index = static_dir.join("index.html");
    let instance_index = index.clone();
    let assets = ServeDir::new(static_dir.join("assets"))
        // A directory is not a page: 404 rather than a redirect to its `index.html`.
        .append_index_html_on_directories(false)
        .not_found_service(service_fn(|_: Request| async {
            Ok::<_, Infallible>(ApiError::not_found("not found").into_response())
        }));
    (
        Router::new()
            .route("/", get(move |request| serve_index(index, request)))
            .route(
                "/instances/{iid}",
                get(move |request| serve_index(instance_index, request)),
            ),
        Router::new().nest_service("/assets", assets),
    )
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
