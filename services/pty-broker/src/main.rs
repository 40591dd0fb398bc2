//! The `pty-broker` binary: reads the configuration, starts logging, binds (or takes the
//! sessions and the socket over from the running broker, `--take-over`), and serves until SIGINT
//! or SIGTERM. Started as a session keeper (`runtime/local/keeper.rs`), it is that instead.

use anyhow::Context as _;
use clap::Parser;
use pty_broker::Broker;
use pty_broker::cli::Cli;
use pty_broker::handoff::connect_to_predecessor;
use pty_broker::runtime::local::run_session_keeper_if_asked;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

fn main() -> anyhow::Result<()> {
    // Before anything else, and before any thread: a keeper forks.
    run_session_keeper_if_asked();
    serve()
}

#[tokio::main]
async fn serve() -> anyhow::Result<()> {
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

    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let (signalled, mut signal_heard) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        tokio::select! {
            _ = interrupt.recv() => tracing::info!("SIGINT received"),
            _ = terminate.recv() => tracing::info!("SIGTERM received"),
        }
        signalled.send_replace(true);
    });
    let shutdown = {
        let mut signal_heard = signal_heard.clone();
        async move {
            let _ = signal_heard.wait_for(|heard| *heard).await;
        }
    };

    let predecessor = match &cli.take_over {
        Some(socket) => connect_to_predecessor(socket)
            .await
            .with_context(|| format!("cannot reach --take-over {}", socket.display()))?,
        None => None,
    };
    // Sessions start through this binary as their keeper, so that they can be handed over.
    let mut builder = Broker::builder(cli.config).session_keeper("/proc/self/exe");
    if predecessor.is_some() {
        builder = builder.taking_over();
    }
    let broker = builder
        .configured_runtimes()
        .await
        .context("pty-broker failed")?
        .build();
    let listener = match predecessor {
        Some(predecessor) => {
            let listener = broker
                .take_over(predecessor)
                .await
                .context("cannot take over from the running broker")?;
            listener
                .set_nonblocking(true)
                .context("set the taken-over socket non-blocking")?;
            TcpListener::from_std(listener).context("register the taken-over socket")?
        }
        None => {
            if let Some(socket) = &cli.take_over {
                tracing::info!(socket = %socket.display(), "no broker to take over from: starting afresh");
            }
            TcpListener::bind(cli.listen).await.with_context(|| {
                format!("cannot bind --listen / PTYHUB_BROKER_LISTEN {}", cli.listen)
            })?
        }
    };
    broker
        .clone()
        .serve(listener, shutdown)
        .await
        .context("pty-broker failed")?;
    if broker.handed_over() && cli.wait_after_hand_off {
        tracing::info!("handed over: waiting for SIGTERM");
        let _ = signal_heard.wait_for(|heard| *heard).await;
    }
    Ok(())
}
