//! gateway: the browser edge of ptyhub. It authenticates, validates and translates: REST calls
//! become session-api calls, a terminal WebSocket becomes one broker `Attach` stream, gRPC and
//! gRPC-web reach session-api's unary and streaming calls, and a gRPC `Attach` from outside the
//! cluster is relayed to the owning broker. It keeps no state a restart loses.
//!
//! [`run`] serves everything on one listener until the shutdown future completes; `main.rs`
//! only turns flags and environment into a [`Config`].

#![forbid(unsafe_code)]

pub mod attach_relay;
pub mod audit;
pub mod auth;
pub mod authorize;
pub mod brokers;
pub mod browser;
pub mod cli;
pub mod clock;
pub mod config;
mod connections;
pub mod cookie;
pub mod domain;
pub mod error;
pub mod front_door;
pub mod grpc;
pub mod mcp;
pub mod metrics;
pub mod openapi;
pub mod rate_limit;
pub mod readiness;
pub mod refusals;
pub mod rest;
pub mod scope;
pub mod server;
pub mod session_proxy;
pub mod state;
pub mod streams;
pub mod tls;
pub mod web;
pub mod ws;

use std::future::Future;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use axum::serve::ListenerExt as _;

pub use brokers::InProcessBrokers;
pub use clock::{Clock, ManualClock};
pub use config::{AuthConfig, Config, ConfigError};
pub use readiness::{Readiness, ReadinessHold};
// What a caller needs to fill in a [`Config`].
pub use ptyhub_wire::ServiceCredential;
pub use secrecy::SecretString;

/// Why the gateway could not start or stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Upstream(#[from] grpc::UpstreamError),
    #[error(transparent)]
    Router(#[from] server::RouterError),
    #[error("serving failed: {0}")]
    Serve(#[source] std::io::Error),
    #[error(transparent)]
    Tls(#[from] ptyhub_wire::TlsError),
}

/// Serves the gateway on `listener` until `shutdown` completes. Then it answers `/readyz` with
/// 503 and goes on serving for `drain_delay`; after that it stops accepting connections, closes
/// every WebSocket with 1012 (service restart: reconnect now, to another replica), ends gRPC-web
/// streams, and waits up to `shutdown_grace` for the sockets to finish closing.
pub async fn run(
    config: Config,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    config.validate()?;
    let authenticator = auth::Authenticator::new(&config.auth, config.clock.clone())?;
    if config.auth.allow_anonymous {
        tracing::warn!("anonymous access is on: requests without a credential act as admin");
    }
    if config.static_dir.is_none() && !web::page_embedded() {
        tracing::warn!(
            "this binary carries no web page (web/ was not built before it): serving the API only; build the page with `cargo xtask web` and rebuild, or pass a web directory"
        );
    }
    let tls = ptyhub_wire::TlsConfig::from_files(&config.tls)?;
    let public_tls = tls.rustls_server()?;
    let upstreams = grpc::Upstreams::new(
        &config.session_api_endpoint,
        &config.service_credential,
        config.backend_timeout,
        config.backend_keep_alive,
        &tls,
        config.in_process_brokers.clone(),
    )?;
    let bound = listener.local_addr().map_err(Error::Serve)?;
    let host_policy = browser::HostPolicy::new(&config, bound);
    if host_policy == browser::HostPolicy::Any && config.allowed_hosts.is_empty() {
        tracing::warn!(
            "no --public-url or --allowed-host: browsers may reach this gateway by any host name; name it to refuse pages of other names (DNS rebinding)"
        );
    }
    let refusals = refusals::RefusalAudit::new(upstreams.clone());
    let gateway_stopped = CancellationToken::new();
    let metrics = metrics::Metrics::default();
    let streams = streams::StreamRegistry::new(
        config.max_streams_per_principal,
        metrics.clone(),
        upstreams.clone(),
        config.clock.clone(),
        gateway_stopped.clone(),
    );
    let state = state::AppState::new(state::Shared {
        upstreams,
        authenticator,
        metrics,
        allowed_origins: browser::allowed_origins(
            &config.allowed_origins,
            config.public_url.as_deref(),
        ),
        static_dir: config.static_dir.clone(),
        recordings: config.recordings.clone(),
        metrics_require_auth: config.metrics_require_auth,
        heartbeat_interval: config.heartbeat_interval,
        events_keep_alive: config.events_keep_alive,
        draining: CancellationToken::new(),
        shutdown: gateway_stopped,
        bridges: TaskTracker::new(),
        streams,
        public_url: config.public_url.clone(),
        refusals,
        serves_tls: public_tls.is_some(),
        host_policy,
        failed_auth: rate_limit::FailedAuthLimiter::new(config.failed_auth_per_minute),
        trust_forwarded_for: config.trust_forwarded_for,
        readiness: config.readiness.clone(),
        clock: config.clock.clone(),
    });
    let app = server::router(state.clone()).await?;
    let address = listener.local_addr().map_err(Error::Serve)?;
    tracing::info!(%address, session_api = %config.session_api_endpoint, tls = public_tls.is_some(),
        "gateway listening");
    let root = state.shutdown.clone();
    let draining = state.draining.clone();
    let drain_delay = config.drain_delay;
    let graceful = async move {
        shutdown.await;
        draining.cancel();
        if !drain_delay.is_zero() {
            tracing::info!(?drain_delay, "shutdown: not ready, still serving");
            tokio::time::sleep(drain_delay).await;
        }
        tracing::info!("shutdown: closing websockets with 1012");
        root.cancel();
    };
    // The peer's address goes with every request, for the limit on refused credentials.
    let client_keep_alive = config.client_keep_alive;
    match public_tls {
        Some(tls) => {
            let listener = tls::TlsListener::new(listener, tls).map_err(Error::Serve)?;
            connections::serve_connections(listener, app, client_keep_alive, graceful).await;
        }
        None => {
            // Keystroke echoes are small writes: without TCP_NODELAY, Nagle's algorithm holds
            // each one back until the previous is acknowledged, which delayed acknowledgements
            // stretch to ~40 ms.
            let listener = listener.tap_io(|stream| {
                if let Err(error) = stream.set_nodelay(true) {
                    tracing::debug!(%error, "cannot set TCP_NODELAY");
                }
            });
            connections::serve_connections(listener, app, client_keep_alive, graceful).await;
        }
    }
    state.shutdown.cancel();
    state.bridges.close();
    // What the refusal windows counted goes to the audit trail now rather than at the end of
    // their minutes, within the same grace as the sockets.
    state.refusals.close();
    let stopped = async {
        state.bridges.wait().await;
        state.refusals.closed().await;
    };
    if tokio::time::timeout(config.shutdown_grace, stopped)
        .await
        .is_err()
    {
        tracing::warn!(
            open = state.bridges.len(),
            "gateway stopped with websockets still closing or refusals not yet in the audit trail"
        );
    } else {
        tracing::info!("gateway stopped cleanly");
    }
    Ok(())
}
