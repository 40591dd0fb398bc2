//! The `gateway` command line: every flag and its `PTYHUB_GATEWAY_*` variable, defined here in
//! the library rather than in `main.rs`, so that what reads them (the binary) and what checks
//! the deployment files against them (the `tests` package) see one definition.

use std::net::SocketAddr;

use crate::Config;

/// ptyhub's browser edge: REST, terminal WebSockets and gRPC-web on one port. Every setting can
/// also come from its PTYHUB_GATEWAY_* environment variable; secrets come only from variables or
/// files.
#[derive(Debug, clap::Parser)]
#[command(name = "gateway", version)]
pub struct Cli {
    /// Address to listen on.
    #[arg(long, env = "PTYHUB_GATEWAY_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Log JSON lines instead of text.
    #[arg(long, env = "PTYHUB_GATEWAY_LOG_JSON")]
    pub log_json: bool,

    #[command(flatten)]
    pub config: Config,
}
