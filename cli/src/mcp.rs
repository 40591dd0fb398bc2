//! `ptyhub mcp`: a Model Context Protocol server on stdin and stdout for an agent on this machine
//! (`claude mcp add ptyhub -- ptyhub mcp`), speaking to the gateway the CLI is configured for
//! (the data dir `ptyhub up` wrote, `--server`, the token) with the CLI's credentials.
//!
//! The gateway serves the tools and the screen resources at `/mcp` (docs/CONTRACT.md, "MCP");
//! this process relays each request of the agent to it as it is, and each change notification
//! back, so the tools, their schemas, their checks and the audit trail are the gateway's,
//! written once. It speaks the revisions with a session to both sides (initialize, then
//! `resources/subscribe`), which every MCP client speaks, and ends when the agent closes stdin.
//!
//! `--print-config` prints the JSON that MCP clients other than Claude Code take to start it,
//! with this binary's path and the absolute data dir (the client starts it elsewhere); never a
//! token.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use anyhow::{Context, Result};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientConfig, Implementation,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ResourceUpdatedNotificationParam, ServerCapabilities, ServerConfig, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, stdio};
use rmcp::{
    ClientHandler, ErrorData, Peer, RoleClient, RoleServer, ServerHandler, ServiceError,
    ServiceExt as _,
};
use serde_json::json;

use crate::connection::{ConnectionArgs, unreachable};

/// Where the gateway serves MCP.
const MCP_PATH: &str = "/mcp";

#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// Print the JSON configuration MCP clients take to start this server (`mcpServers`), and
    /// exit.
    #[arg(long)]
    pub print_config: bool,
}

pub async fn mcp(connection: &ConnectionArgs, args: McpArgs) -> Result<()> {
    if args.print_config {
        let config = client_config(connection)?;
        println!("{}", serde_json::to_string_pretty(&config)?);
        return Ok(());
    }
    serve(connection).await
}

/// Relays stdin and stdout to the gateway's `/mcp` until the agent goes.
async fn serve(connection: &ConnectionArgs) -> Result<()> {
    let token = connection.token()?;
    let server = connection.server_url();
    let endpoint = format!("{}{MCP_PATH}", server.trim_end_matches('/'));
    let transport = StreamableHttpClientTransport::with_client(
        connection.http_client()?,
        StreamableHttpClientTransportConfig::with_uri(endpoint).auth_header(token),
    );
    let agent = Arc::new(OnceLock::new());
    let gateway = NotificationsToAgent {
        agent: Arc::clone(&agent),
    }
    .serve(transport)
    .await
    .with_context(|| unreachable(&server))?;
    let relay = Relay {
        gateway: gateway.peer().clone(),
        server: server.clone(),
    };
    let running = relay
        .serve(stdio())
        .await
        .context("the MCP client on stdin did not start a session")?;
    // The agent subscribes only once its session started, so no notification comes earlier.
    let _ = agent.set(running.peer().clone());
    let ended = running.waiting().await;
    close(gateway).await;
    ended.context("the MCP session on stdin failed")?;
    Ok(())
}

/// Ends the session with the gateway (its subscriptions end with it). The agent has gone, so
/// there is nobody left to tell should the gateway not answer.
async fn close(gateway: RunningService<RoleClient, NotificationsToAgent>) {
    let _ = gateway.cancel().await;
}

/// The agent's side: every request goes to the gateway as it is.
#[derive(Debug, Clone)]
struct Relay {
    gateway: Peer<RoleClient>,
    /// The gateway's URL, for errors.
    server: String,
}

impl Relay {
    /// An error of the gateway as it is; a failure to reach it, in the CLI's words.
    fn relayed(&self, error: ServiceError) -> ErrorData {
        match error {
            ServiceError::McpError(error) => error,
            other => {
                ErrorData::internal_error(format!("{}: {other}", unreachable(&self.server)), None)
            }
        }
    }
}

impl ServerHandler for Relay {
    /// What the gateway said of itself when the relay connected: its capabilities, name and
    /// instructions.
    fn get_info(&self) -> ServerConfig {
        let Some(gateway) = self.gateway.peer_info() else {
            return ServerConfig::new(ServerCapabilities::default());
        };
        let mut info = ServerConfig::new(gateway.capabilities.clone())
            .with_protocol_version(ProtocolVersion::V_2025_11_25);
        if let Some(server) = &gateway.server_info {
            info = info.with_server_info(server.clone());
        }
        if let Some(instructions) = &gateway.instructions {
            info = info.with_instructions(instructions.clone());
        }
        info
    }

    /// The revisions with an `initialize` handshake and a session, in which the agent's
    /// subscriptions live as long as its session does.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.gateway
            .list_tools(request)
            .await
            .map_err(|error| self.relayed(error))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.gateway
            .call_tool_once(request)
            .await
            .map_err(|error| self.relayed(error))
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.gateway
            .list_resources(request)
            .await
            .map_err(|error| self.relayed(error))
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.gateway
            .list_resource_templates(request)
            .await
            .map_err(|error| self.relayed(error))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.gateway
            .read_resource_once(request)
            .await
            .map_err(|error| self.relayed(error))
    }

    #[allow(
        deprecated,
        reason = "the session revisions' subscription, which the relay speaks"
    )]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.gateway
            .subscribe(request)
            .await
            .map(drop)
            .map_err(|error| self.relayed(error))
    }

    #[allow(
        deprecated,
        reason = "the session revisions' subscription, which the relay speaks"
    )]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.gateway
            .unsubscribe(request)
            .await
            .map(drop)
            .map_err(|error| self.relayed(error))
    }
}

/// The gateway's side: its change notifications go to the agent.
#[derive(Debug, Clone)]
struct NotificationsToAgent {
    /// The agent's session, once it started.
    agent: Arc<OnceLock<Peer<RoleServer>>>,
}

impl ClientHandler for NotificationsToAgent {
    fn get_info(&self) -> ClientConfig {
        let mut config = ClientConfig::default();
        config.client_info = Implementation::new("ptyhub-mcp", env!("CARGO_PKG_VERSION"));
        config.protocol_version = ProtocolVersion::V_2025_11_25;
        config
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        // A notification the agent does not take means it is going: stdin's end ends the relay.
        if let Some(agent) = self.agent.get() {
            let _ = agent.notify_resource_updated(params).await;
        }
    }
}

/// `{"mcpServers": {"ptyhub": {"command", "args"}}}` for this binary, reaching the same gateway
/// with the same credentials from whatever directory the client starts it in.
fn client_config(connection: &ConnectionArgs) -> Result<serde_json::Value> {
    let program = std::env::current_exe().context("cannot tell where this ptyhub binary is")?;
    let mut args = vec![
        "mcp".to_owned(),
        "--data-dir".to_owned(),
        absolute(&connection.data_dir)?.display().to_string(),
    ];
    if let Some(server) = &connection.server {
        args.extend(["--server".to_owned(), server.clone()]);
    }
    for (flag, path) in [
        ("--token-file", &connection.token_file),
        ("--ca-cert", &connection.ca_cert),
    ] {
        if let Some(path) = path {
            args.extend([flag.to_owned(), absolute(path)?.display().to_string()]);
        }
    }
    Ok(json!({
        "mcpServers": {
            "ptyhub": {
                "command": program.display().to_string(),
                "args": args,
            }
        }
    }))
}

fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("cannot make {} absolute", path.display()))
}
