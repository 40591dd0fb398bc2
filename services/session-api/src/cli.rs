//! The `session-api` command line: every flag and its `PTYHUB_SESSION_API_*` variable, defined
//! here in the library rather than in `main.rs`, so that what reads them (the binary) and what
//! checks the deployment files against them (the `tests` package) see one definition.

use std::net::SocketAddr;

use crate::Config;

/// The records of ptyhub: instances, sessions, aliases and the per-instance cap, on SQLite or
/// PostgreSQL. Every setting can also come from its PTYHUB_SESSION_API_* environment variable.
#[derive(Debug, clap::Parser)]
#[command(name = "session-api", version)]
pub struct Cli {
    /// Address to serve gRPC on.
    #[arg(
        long,
        env = "PTYHUB_SESSION_API_LISTEN",
        default_value = "127.0.0.1:50051"
    )]
    pub listen: SocketAddr,

    /// Log as JSON lines instead of text.
    #[arg(long, env = "PTYHUB_SESSION_API_LOG_JSON")]
    pub log_json: bool,

    /// Log filter (tracing `EnvFilter` syntax).
    #[arg(long, env = "PTYHUB_SESSION_API_LOG", default_value = "info")]
    pub log: String,

    #[command(flatten)]
    pub config: Config,
}
