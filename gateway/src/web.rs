//! The web page: `/` and `/instances/{iid}` serve the configured static directory's
//! `index.html` (the page reads its token and instance from the address), `/assets/...` the
//! files next to it.

use std::path::{Component, Path as FsPath, PathBuf};

use axum::extract::{Path, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;

/// The instances page.
pub async fn index_page(State(state): State<AppState>) -> Response {
    serve_index(state.static_dir.as_deref()).await
}

/// The terminal page of one instance; the page itself reads the instance from its address.
pub async fn instance_page(State(state): State<AppState>, Path(_iid): Path<String>) -> Response {
    serve_index(state.static_dir.as_deref()).await
}

/// A file of the page (scripts, styles) below the static directory.
pub async fn asset(State(state): State<AppState>, Path(path): Path<String>) -> Response {
    let Some(static_dir) = state.static_dir.as_deref() else {
        return not_configured().into_response();
    };
    let relative = PathBuf::from(&path);
    // Only plain names below the directory: no `..`, no absolute paths.
    if relative
        .components()
        .any(|component| !matches!(component, Component::Normal(_)))
    {
        return ApiError::not_found("not found").into_response();
    }
    let file = static_dir.join("assets").join(relative);
    match tokio::fs::read(&file).await {
        Ok(bytes) => ([(header::CONTENT_TYPE, content_type(&file))], bytes).into_response(),
        Err(_) => ApiError::not_found("not found").into_response(),
    }
}

async fn serve_index(static_dir: Option<&FsPath>) -> Response {
    let Some(static_dir) = static_dir else {
        return not_configured().into_response();
    };
    let index = static_dir.join("index.html");
    match tokio::fs::read(&index).await {
        Ok(bytes) => (
            [
                (
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/html; charset=utf-8"),
                ),
                (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            ],
            bytes,
        )
            .into_response(),
        Err(_) => ApiError::not_found(format!(
            "web page not installed: no index.html in {}",
            static_dir.display()
        ))
        .into_response(),
    }
}

fn not_configured() -> ApiError {
    ApiError::not_found("web page not configured: set PTYHUB_GATEWAY_STATIC_DIR")
}

fn content_type(file: &FsPath) -> HeaderValue {
    let extension = file.extension().and_then(|extension| extension.to_str());
    HeaderValue::from_static(match extension {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("json" | "map") => "application/json",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("woff2") => "font/woff2",
        _ => "application/octet-stream",
    })
}
