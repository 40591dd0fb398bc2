//! The `pty-broker` binary: reads the configuration, starts logging, binds (or takes the
//! sessions and the socket over from the running broker, `--take-over`), and serves until SIGINT
//! or SIGTERM. Started as a session keeper (`runtime/local/keeper.rs`), it is that instead.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use pty_broker::handoff::connect_to_predecessor;
use pty_broker::runtime::local::run_session_keeper_if_asked;
use pty_broker::{Broker, Config};
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

    /// Take every live session and the listening socket over from the broker that listens on
    /// this hand-off socket (`<its data dir>/handoff.sock`), which exits once this one runs
    /// them; `--listen` is then not bound. When no broker listens there, start afresh.
    #[arg(long, env = "PTYHUB_BROKER_TAKE_OVER")]
    take_over: Option<PathBuf>,

    /// After handing the sessions to the next process, wait for SIGINT or SIGTERM instead of
    /// exiting: for supervisors that restart a process that exits (a Kubernetes pod), which
    /// would otherwise start it again and have it take the sessions back.
    #[arg(long, env = "PTYHUB_BROKER_WAIT_AFTER_HAND_OFF")]
    wait_after_hand_off: bool,

    #[command(flatten)]
    config: Config,
}

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
