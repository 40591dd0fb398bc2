//! The `pty-broker` binary: reads the configuration, starts logging, binds, and serves until
//! SIGINT or SIGTERM.

use std::net::SocketAddr;

use anyhow::Context as _;
use clap::Parser;
use pty_broker::Config;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

/// Owns PTY processes (on this host or in Docker containers) and streams them to clients over
/// gRPC, losslessly and resumably. Every setting can also come from its PTYHUB_BROKER_*
/// environment variable.
#[derive(Debug, Parser)]
#[command(name = "pty-broker", version)]
struct Cli {
    /// Address to serve gRPC on.
    #[arg(long, env = "PTYHUB_BROKER_LISTEN", default_value = "127.0.0.1:50061")]
    listen: SocketAddr,

    /// Log as JSON lines instead of text.
    #[arg(long, env = "PTYHUB_BROKER_LOG_JSON")]
    log_json: bool,

    /// Log filter (tracing `EnvFilter` syntax).
    #[arg(long, env = "PTYHUB_BROKER_LOG", default_value = "info")]
    log: String,

    #[command(flatten)]
    config: Config,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log)
        .with_context(|| format!("invalid --log / PTYHUB_BROKER_LOG filter {:?}", cli.log))?;
    if cli.log_json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }

    let listener = TcpListener::bind(cli.listen)
        .await
        .with_context(|| format!("cannot bind --listen / PTYHUB_BROKER_LISTEN {}", cli.listen))?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let shutdown = async move {
        tokio::select! {
            _ = interrupt.recv() => tracing::info!("SIGINT received"),
            _ = terminate.recv() => tracing::info!("SIGTERM received"),
        }
    };
    pty_broker::run(cli.config, listener, shutdown)
        .await
        .context("pty-broker failed")
}
