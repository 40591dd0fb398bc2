//! The `pty-broker` command line: every flag and its `PTYHUB_BROKER_*` variable, defined here
//! in the library rather than in `main.rs`, so that what reads them (the binary) and what checks
//! the deployment files against them (the `tests` package) see one definition.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::Config;

/// Owns PTY processes (on this host or in Docker containers) and streams them to clients over
/// gRPC, losslessly and resumably. Every setting can also come from its PTYHUB_BROKER_*
/// environment variable.
#[derive(Debug, clap::Parser)]
#[command(name = "pty-broker", version)]
pub struct Cli {
    /// Address to serve gRPC on.
    #[arg(long, env = "PTYHUB_BROKER_LISTEN", default_value = "127.0.0.1:50061")]
    pub listen: SocketAddr,

    /// Log as JSON lines instead of text.
    #[arg(long, env = "PTYHUB_BROKER_LOG_JSON")]
    pub log_json: bool,

    /// Log filter (tracing `EnvFilter` syntax).
    #[arg(long, env = "PTYHUB_BROKER_LOG", default_value = "info")]
    pub log: String,

    /// Take every live session and the listening socket over from the broker that listens on
    /// this hand-off socket (`<its data dir>/handoff.sock`), which exits once this one runs
    /// them; `--listen` is then not bound. When no broker listens there, start afresh.
    #[arg(long, env = "PTYHUB_BROKER_TAKE_OVER")]
    pub take_over: Option<PathBuf>,

    /// After handing the sessions to the next process, wait for SIGINT or SIGTERM instead of
    /// exiting: for supervisors that restart a process that exits (a Kubernetes pod), which
    /// would otherwise start it again and have it take the sessions back.
    #[arg(long, env = "PTYHUB_BROKER_WAIT_AFTER_HAND_OFF")]
    pub wait_after_hand_off: bool,

    #[command(flatten)]
    pub config: Config,
}
