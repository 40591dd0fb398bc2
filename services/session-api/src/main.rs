//! The `session-api` binary: reads the configuration, starts logging, binds, and serves until
//! SIGINT or SIGTERM.

use anyhow::Context as _;
use clap::Parser;
use session_api::cli::Cli;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

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
