//! The `session-api` binary: reads the configuration, starts logging, binds, and serves until
//! SIGINT or SIGTERM.

use std::net::SocketAddr;

use anyhow::Context as _;
use clap::Parser;
use session_api::Config;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

/// The records of ptyhub: instances, sessions, aliases and the per-instance cap, on SQLite or
/// PostgreSQL. Every setting can also come from its PTYHUB_SESSION_API_* environment variable.
#[derive(Debug, Parser)]
#[command(name = "session-api", version)]
struct Cli {
    /// Address to serve gRPC on.
    #[arg(
        long,
        env = "PTYHUB_SESSION_API_LISTEN",
        default_value = "127.0.0.1:50051"
    )]
    listen: SocketAddr,

    /// Log as JSON lines instead of text.
    #[arg(long, env = "PTYHUB_SESSION_API_LOG_JSON")]
    log_json: bool,

    /// Log filter (tracing `EnvFilter` syntax).
    #[arg(long, env = "PTYHUB_SESSION_API_LOG", default_value = "info")]
    log: String,

    #[command(flatten)]
    config: Config,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log).with_context(|| {
        format!(
            "invalid --log / PTYHUB_SESSION_API_LOG filter {:?}",
            cli.log
        )
    })?;
    if cli.log_json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }

    let listener = TcpListener::bind(cli.listen).await.with_context(|| {
        format!(
            "cannot bind --listen / PTYHUB_SESSION_API_LISTEN {}",
            cli.listen
        )
    })?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let shutdown = async move {
        tokio::select! {
            _ = interrupt.recv() => tracing::info!("SIGINT received"),
            _ = terminate.recv() => tracing::info!("SIGTERM received"),
        }
    };
    session_api::run(cli.config, listener, shutdown)
        .await
        .context("session-api failed")
}
