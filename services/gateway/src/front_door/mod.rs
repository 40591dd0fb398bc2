//! The front door: one tower layer ([`FrontDoorLayer`]) in front of every surface of the
//! gateway, REST, the terminal WebSockets, Server-Sent Events, gRPC, gRPC-web, the relayed
//! `Attach`, and any route mounted inside it later. For each request it
//!
//! 1. tells the surface apart (gRPC by content type, a WebSocket by its path, REST otherwise);
//! 2. reads the credentials the surface allows ([`presented`]): bearer header, `bearer.<token>`
//!    WebSocket subprotocol, a WebSocket's `?token=`, the page's session cookie;
//! 3. puts one [`Authentication`] in the request's extensions, which turns them into the
//!    request's [`Principal`] when a handler first asks ([`authenticate`]): an API token, a JWT,
//!    a session cookie, a share link's token (checked with session-api), or anonymous when the
//!    gateway has no credentials. A refused credential counts against its address's limit
//!    ([`crate::rate_limit`]: 429 once out of tries, never for a valid credential) and is
//!    reported to the audit trail ([`crate::refusals`]), once.
//!
//! Handlers never read a credential: REST and WebSocket handlers take the [`Authentication`] or
//! [`crate::rest::Caller`] extractor, gRPC methods call [`principal_of`] on the
//! `tonic::Request`. Each surface answers a refusal its own way (401, WebSocket close 4001 after
//! the upgrade, `UNAUTHENTICATED`), which is why the layer refuses nothing itself.
//!
//! The principal is worked out on demand, once, rather than for every request: the page, its
//! assets, the probes and the sign-in link need none, and must neither cost a session-api call
//! (a share's cookie) nor write a refusal to the audit trail for a browser that is not signed in.

mod authenticate;
pub mod presented;

use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, Request, header};
use ptyhub_wire::{CLI_USER_AGENT_PREFIX, Surface};
use tokio::sync::OnceCell;
use tower::{Layer, Service};

use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::AppState;

pub use authenticate::credential_refused;
pub use presented::Presented;

/// The path prefix of the terminal WebSockets.
const WEBSOCKET_PATH_PREFIX: &str = "/ws/";

/// The path of the MCP endpoint (`crate::mcp` serves it there).
pub const MCP_PATH: &str = "/mcp";

/// The layer that puts an [`Authentication`] in every request (see the module's doc).
#[derive(Debug, Clone)]
pub struct FrontDoorLayer {
    state: AppState,
}

impl FrontDoorLayer {
    pub fn new(state: AppState) -> Self {
        Self { state }
    }
}

impl<S> Layer<S> for FrontDoorLayer {
    type Service = FrontDoor<S>;

    fn layer(&self, inner: S) -> FrontDoor<S> {
        FrontDoor {
            inner,
            state: self.state.clone(),
        }
    }
}

/// [`FrontDoorLayer`]'s service around `S`.
#[derive(Debug, Clone)]
pub struct FrontDoor<S> {
    inner: S,
    state: AppState,
}

impl<S, B> Service<Request<B>> for FrontDoor<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let authentication = Authentication::of_request(&self.state, &request);
        request.extensions_mut().insert(authentication);
        self.inner.call(request)
    }
}

/// A request's credentials and, once a handler asked, its principal or why it has none. Clones
/// share one outcome: however many times and places ask, the credential is checked, counted
/// and reported once.
#[derive(Clone)]
pub struct Authentication(Arc<Pending>);

struct Pending {
    state: AppState,
    presented: Presented,
    surface: Surface,
    /// What the request tries, for the audit trail's refusals: `GET /path`, `websocket /path`,
    /// or the gRPC `service/method`.
    action: String,
    outcome: OnceCell<Result<Principal, ApiError>>,
}

impl std::fmt::Debug for Authentication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authentication")
            .field("surface", &self.0.surface)
            .field("action", &self.0.action)
            .field("presented", &self.0.presented)
            .finish_non_exhaustive()
    }
}

impl Authentication {
    /// What `request` presents, not yet checked.
    fn of_request<B>(state: &AppState, request: &Request<B>) -> Self {
        let surface = surface_of(request);
        let path = request.uri().path();
        let action = match surface {
            Surface::Rest | Surface::Mcp => format!("{} {path}", request.method()),
            Surface::WebSocket => format!("websocket {path}"),
            _ => path.trim_start_matches('/').to_owned(),
        };
        Self(Arc::new(Pending {
            state: state.clone(),
            presented: Presented::of_request(state, surface, request),
            surface,
            action,
            outcome: OnceCell::new(),
        }))
    }

    /// The request's principal: checked the first time it is asked for, the same answer after.
    /// A refusal is counted against the client's address and reported to the audit trail.
    pub async fn principal(&self) -> Result<Principal, ApiError> {
        let pending = &*self.0;
        pending
            .outcome
            .get_or_init(|| async {
                let outcome = authenticate::authenticate(&pending.state, &pending.presented).await;
                if let Err(error) = &outcome
                    && credential_refused(error)
                {
                    pending.state.report_refusal(
                        None,
                        pending.presented.peer,
                        pending.surface,
                        "unauthenticated",
                        pending.action.clone(),
                    );
                }
                outcome
            })
            .await
            .clone()
    }

    /// Who the request's session cookie alone signs in, when it is valid: what a sign-in would
    /// replace. Never reported: the sign-in's own credential is the one on trial.
    pub async fn principal_by_cookie(&self) -> Option<Principal> {
        let pending = &*self.0;
        pending.presented.cookie.as_ref()?;
        authenticate::authenticate(&pending.state, &pending.presented.cookie_only())
            .await
            .ok()
    }

    /// Whether the request presents a bearer credential (not only a cookie, or nothing).
    pub fn presents_bearer(&self) -> bool {
        self.0.presented.has_bearer()
    }

    /// The surface the request came through.
    pub fn surface(&self) -> Surface {
        self.0.surface
    }
}

/// The request's [`Authentication`], which the front door put there; an internal error for a
/// route mounted outside it, which is a bug of the router, never the client's fault.
fn authentication_of(extensions: &axum::http::Extensions) -> Result<Authentication, ApiError> {
    extensions.get::<Authentication>().cloned().ok_or_else(|| {
        tracing::error!("a request reached a handler without passing the front door");
        ApiError::internal("the request was not authenticated")
    })
}

impl<S: Send + Sync> FromRequestParts<S> for Authentication {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        authentication_of(&parts.extensions)
    }
}

/// The principal of a gRPC call (gRPC, gRPC-web, the CLI, the relayed `Attach`), as the front
/// door authenticated it; its refusal as the status of the surface.
pub async fn principal_of<T>(request: &tonic::Request<T>) -> Result<Principal, tonic::Status> {
    authentication_of(request.extensions())
        .map_err(|error| error.to_status())?
        .principal()
        .await
        .map_err(|error| error.to_status())
}

/// The surface of a gRPC call, as the front door told it apart.
pub fn grpc_surface_of<T>(request: &tonic::Request<T>) -> Surface {
    request
        .extensions()
        .get::<Authentication>()
        .map_or(Surface::Grpc, Authentication::surface)
}

/// Which surface a request comes through: gRPC-web and gRPC by their content type (the `ptyhub`
/// CLI by its user agent), a terminal WebSocket and the MCP endpoint by their paths, else REST.
fn surface_of<B>(request: &Request<B>) -> Surface {
    let headers = request.headers();
    let content_type = header_text(headers, header::CONTENT_TYPE);
    if content_type.starts_with("application/grpc-web") {
        Surface::GrpcWeb
    } else if content_type.starts_with("application/grpc") {
        if header_text(headers, header::USER_AGENT).starts_with(CLI_USER_AGENT_PREFIX) {
            Surface::Cli
        } else {
            Surface::Grpc
        }
    } else if request.uri().path().starts_with(WEBSOCKET_PATH_PREFIX) {
        Surface::WebSocket
    } else if request.uri().path() == MCP_PATH {
        Surface::Mcp
    } else {
        Surface::Rest
    }
}

fn header_text(headers: &HeaderMap, name: header::HeaderName) -> &str {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(path: &str, headers: &[(header::HeaderName, &str)]) -> Request<()> {
        let mut request = Request::builder().uri(path);
        for (name, value) in headers {
            request = request.header(name, *value);
        }
        request.body(()).unwrap()
    }

    #[test]
    fn surfaces_are_told_apart_by_content_type_user_agent_and_path() {
        let grpc = || (header::CONTENT_TYPE, "application/grpc");
        let cases = [
            (request("/api/v1/instances", &[]), Surface::Rest),
            (request("/mcp", &[]), Surface::Mcp),
            (
                request("/ws/tool-instances/x/terminal", &[]),
                Surface::WebSocket,
            ),
            (
                request("/ptyhub.session.v1.SessionApi/ListInstances", &[grpc()]),
                Surface::Grpc,
            ),
            (
                request(
                    "/ptyhub.session.v1.SessionApi/ListInstances",
                    &[(header::CONTENT_TYPE, "application/grpc-web+proto")],
                ),
                Surface::GrpcWeb,
            ),
            (
                request(
                    "/ptyhub.broker.v1.PtyBroker/Attach",
                    &[
                        grpc(),
                        (header::USER_AGENT, &format!("{CLI_USER_AGENT_PREFIX}/1.0")),
                    ],
                ),
                Surface::Cli,
            ),
        ];
        for (request, surface) in cases {
            assert_eq!(surface_of(&request), surface, "{}", request.uri());
        }
    }
}
