//! The Model Context Protocol surface (docs/CONTRACT.md, "MCP"): ptyhub's terminals as tools and
//! resources for agents, over Streamable HTTP at `/mcp`, on rmcp's tower service.
//!
//! 1. [`routes`] mounts rmcp's service in the gateway's one router, so every layer REST has
//!    (the front door, the `Host` and `Origin` checks, JSON-only bodies, the security headers,
//!    metrics, tracing) is in front of it, and asks for the principal of every HTTP request
//!    before rmcp reads it (`caller.rs`): without a valid credential the answer is 401
//!    `{"detail"}`, as on REST.
//! 2. rmcp hands each request's HTTP parts to the handler; `caller::principal` takes the
//!    [`crate::auth::Principal`] from them, the one place this module reads a credential.
//! 3. `tools.rs` lists the tools a principal may use (a share link's credential sees the read
//!    tools alone) and runs them on the domain calls REST makes, acting for the principal with
//!    the audit surface `mcp`; a refusal is a tool error carrying the contract's detail.
//! 4. `resources.rs` serves each live session's screen as
//!    `ptyhub://instances/{iid}/sessions/{sid}/screen`; `watch.rs` tells subscribers when it
//!    changed, both to 2025 clients (`resources/subscribe` in their session) and to 2026-07-28
//!    ones (`subscriptions/listen`).
//! 5. `schema.rs` makes each tool's output schema from the OpenAPI schema of the REST body it
//!    answers with: one description of each JSON shape for both surfaces.

mod caller;
mod resources;
mod schema;
mod tools;
mod watch;

use std::sync::Arc;

use axum::Router;
use axum::middleware;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig, SubscribeRequestParams,
    SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};

use crate::front_door::MCP_PATH;
use crate::state::AppState;

pub use resources::ScreenUri;

/// What agents are told about the server when they connect.
const INSTRUCTIONS: &str = "ptyhub's terminals: persistent sessions in containers that people \
watch and share. List instances and sessions, read a session's screen, type into it, wait for \
text or for the shell's prompt, and run a command at the prompt for its exit code and output. \
Each session's screen is also a resource you can subscribe to.";

/// The `/mcp` route, with the credential check in front of rmcp; merged into the gateway's
/// router, inside the same layers as REST.
pub fn routes(state: &AppState) -> Router<AppState> {
    let handler_state = state.clone();
    let config = StreamableHttpServerConfig::default()
        // The gateway's own `Host` policy (`browser::check_host`) has already judged the
        // request, with the operator's `--allowed-host` list; rmcp's default list would refuse
        // every name but loopback.
        .disable_allowed_hosts()
        // Streams end when the gateway stops serving, as WebSockets and event streams do.
        .with_cancellation_token(state.shutdown.child_token());
    let service = StreamableHttpService::new(
        move || Ok(PtyhubMcp::new(handler_state.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    Router::new()
        .route_service(MCP_PATH, service)
        .layer(middleware::from_fn(caller::authenticate))
}

/// One MCP session's handler (a 2026-07-28 client's single request's, when it has no session):
/// the gateway's state, and the screen subscriptions the session holds, which end with it.
#[derive(Debug, Clone)]
pub struct PtyhubMcp {
    state: AppState,
    subscriptions: watch::Subscriptions,
}

impl PtyhubMcp {
    pub fn new(state: AppState) -> Self {
        Self {
            state,
            subscriptions: watch::Subscriptions::default(),
        }
    }
}

impl ServerHandler for PtyhubMcp {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_resources_subscribe()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("ptyhub", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let principal = caller::principal(&context)?;
        Ok(ListToolsResult::with_all_items(tools::visible_to(
            &principal.access,
        )))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let principal = caller::principal(&context)?;
        let arguments = request.arguments.unwrap_or_default();
        let result = tools::call(&self.state, &principal, &request.name, arguments).await?;
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let principal = caller::principal(&context)?;
        let resources = resources::list_screens(&self.state, &principal).await?;
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            resources::screen_template(),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let principal = caller::principal(&context)?;
        let result = resources::read_screen(&self.state, &principal, &request.uri).await?;
        Ok(result.into())
    }

    #[allow(
        deprecated,
        reason = "what clients of the 2025 revisions subscribe with"
    )]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let principal = caller::principal(&context)?;
        self.subscriptions
            .subscribe(&self.state, &principal, &request.uri, context.peer)
            .await
    }

    #[allow(
        deprecated,
        reason = "what clients of the 2025 revisions unsubscribe with"
    )]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscriptions.unsubscribe(&request.uri);
        Ok(())
    }

    /// Screens alone can be subscribed to; which of them the caller may watch is checked when
    /// the subscription starts ([`watch::listen`]), where its credential is known.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let screens: Vec<String> = requested
            .resource_subscriptions
            .iter()
            .flatten()
            .filter(|uri| ScreenUri::parse(uri).is_ok())
            .cloned()
            .collect();
        let mut accepted = SubscriptionFilter::new();
        accepted.resource_subscriptions = (!screens.is_empty()).then_some(screens);
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let principal = caller::principal(context.request_context())?;
        watch::listen(&self.state, &principal, context).await
    }
}
