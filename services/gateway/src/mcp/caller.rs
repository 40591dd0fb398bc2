//! Who calls `/mcp`. The front door ([`crate::front_door`]) put the request's
//! [`Authentication`] in its extensions; [`authenticate`] asks it for the principal before rmcp
//! reads the request, answering a refusal as REST does (401 or 429 with `{"detail"}`, counted
//! and reported to the audit trail by the front door), and passes the [`Principal`] on in the
//! request's extensions, which rmcp hands to the handler, where [`principal`] reads it.

use axum::extract::Request;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

use crate::auth::Principal;
use crate::front_door::Authentication;

/// Refuses a request without a valid credential; otherwise passes it on with its principal.
pub async fn authenticate(
    authentication: Authentication,
    mut request: Request,
    next: Next,
) -> Response {
    match authentication.principal().await {
        Ok(principal) => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Err(error) => error.into_response(),
    }
}

/// The principal of the HTTP request an MCP request came in.
pub fn principal(context: &RequestContext<RoleServer>) -> Result<Principal, ErrorData> {
    context
        .extensions
        .get::<Parts>()
        .and_then(|parts| parts.extensions.get::<Principal>())
        .cloned()
        // Only a request that did not come through `routes` (none in the gateway) lacks it.
        .ok_or_else(|| ErrorData::invalid_request("no credential came with the request", None))
}
