//! session-api: the authority over instances, sessions, aliases and the per-instance cap.
//!
//! It never touches a PTY: it tells pty-brokers what to spawn, learns from their event streams
//! what happened, and hands clients an attach target (broker endpoint and a short-lived signed
//! ticket). Everything that matters is in the database (SQLite or PostgreSQL), so several
//! replicas can share one PostgreSQL database. [`run`] serves a [`Config`] on a bound listener
//! until a shutdown future completes.

#![forbid(unsafe_code)]

pub mod audit;
pub mod broker_client;
pub mod changes;
pub mod cli;
pub mod config;
pub mod domain;
pub mod error;
pub mod grpc;
pub mod lifecycle;
pub mod service;
pub mod shares;
pub mod store;
pub mod webhooks;

pub use config::{Config, StaticBroker};
pub use domain::RecordMode;
pub use error::{Error, StartError};
pub use ptyhub_wire::ServiceCredential;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ptyhub_wire::{Introspection, RequireCredential, ServingStatus};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::server::TcpIncoming;

use crate::broker_client::BrokerClients;
use crate::changes::ChangeFeed;
use crate::lifecycle::LifecycleSettings;
use crate::service::SessionService;
use crate::store::Store;

/// Serves session-api (gRPC `SessionApi`, `BrokerRegistry`, `grpc.health.v1` and server
/// reflection) on `listener` until `shutdown` completes. Connects to the database and applies
/// migrations first (unless `config.migrate` is off), records the configured brokers, and
/// follows every broker's events while it runs. Live PTYs are left alone at shutdown.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let tls = ptyhub_wire::TlsConfig::from_files(&config.tls.files())?;
    let plaintext_brokers_allowed = config.plaintext_brokers_allowed();
    if !plaintext_brokers_allowed
        && let Some(broker) = config
            .brokers
            .iter()
            .find(|broker| !broker.endpoint.starts_with("https://"))
    {
        return Err(StartError::PlaintextBroker {
            broker_id: broker.id.clone(),
            endpoint: broker.endpoint.clone(),
        });
    }
    let store = Store::connect(config.database_url.connection_string()).await?;
    if config.migrate {
        store.migrate().await?;
    }
    for broker in &config.brokers {
        store
            .upsert_configured_broker(&broker.id, &broker.endpoint)
            .await
            .map_err(StartError::ConfiguredBrokers)?;
    }
    let settings = LifecycleSettings {
        heartbeat_timeout: config.heartbeat_timeout,
        activity_flush_interval: config.activity_flush_interval,
        spawn_grace: config.broker_call_timeout * 2,
        closed_session_retention: config.closed_session_retention,
        audit_retention: config.audit_retention,
    };
    let service = Arc::new(
        SessionService::new(
            store.clone(),
            BrokerClients::new(
                &config.secrets.service_token,
                config
                    .secrets
                    .broker_tokens
                    .iter()
                    .map(|broker| (broker.broker_id.clone(), broker.credential.clone())),
                config.broker_call_timeout,
                tls.clone(),
                plaintext_brokers_allowed,
            )
            .with_keep_alive(config.keepalive_interval),
            Arc::new(ChangeFeed::new()),
            config.secrets.ticket_signing_key.clone(),
            config.ticket_ttl,
            config.broker_call_timeout + Duration::from_secs(5),
            settings.heartbeat_interval(),
        )
        .with_default_record(config.default_record)
        .with_plaintext_brokers(plaintext_brokers_allowed),
    );

    let root = CancellationToken::new();
    let tracker = TaskTracker::new();
    lifecycle::start(
        service.clone(),
        settings,
        root.child_token(),
        tracker.clone(),
    );
    webhooks::delivery::start(
        &service.webhooks,
        config.webhooks.clone(),
        root.child_token(),
        tracker.clone(),
    )?;

    let introspection = Introspection::new(&[
        "ptyhub.session.v1.SessionApi",
        "ptyhub.session.v1.BrokerRegistry",
        "ptyhub.session.v1.ShareRegistry",
    ])
    .await?;
    let health = introspection.health_handle();
    // Each tier is admitted where it belongs: the gateways to the session calls, each broker to
    // the registry under its own id alone (checked per call there).
    let gateways = RequireCredential::any_of(config.secrets.gateway_tokens.iter().cloned());
    let brokers = grpc::BrokerCredentials::new(
        config
            .secrets
            .broker_tokens
            .iter()
            .map(|broker| (broker.broker_id.clone(), broker.credential.clone())),
    );

    tracing::info!(address = ?listener.local_addr().ok(), brokers = config.brokers.len(),
        tls = tls.serves_tls(), "session-api serving");
    let stop = root.clone();
    let mut server = tonic::transport::Server::builder();
    if let Some(tls) = tls.tonic_server() {
        server = server.tls_config(tls)?;
    }
    let server = server
        .http2_keepalive_interval(Some(config.keepalive_interval))
        .http2_keepalive_timeout(Some(config.keepalive_interval))
        .add_routes(grpc::with_services(
            introspection.into_routes(),
            service.clone(),
            shares::ShareService::new(store.clone()),
            root.clone(),
            gateways,
            brokers,
        ))
        // Every answer is one small write: without TCP_NODELAY, Nagle's algorithm holds it
        // until the peer's delayed acknowledgement, ~40 ms per call (most of a session start).
        .serve_with_incoming_shutdown(
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            async move {
                shutdown.await;
                tracing::info!("shutting down: not serving, change streams end with UNAVAILABLE");
                health.set_status(ServingStatus::NotServing).await;
                // Ends the change streams (their clients reconnect to another replica), so that the
                // server can finish its connections; unary calls in flight complete.
                stop.cancel();
            },
        );
    tokio::pin!(server);
    // The grace period runs from the shutdown signal: streams the server does not own (a
    // health Watch, say) would otherwise hold the graceful stop open for ever.
    let (served, deadline) = tokio::select! {
        served = &mut server => (served, tokio::time::Instant::now() + config.shutdown_grace),
        () = root.cancelled() => {
            let deadline = tokio::time::Instant::now() + config.shutdown_grace;
            match tokio::time::timeout_at(deadline, &mut server).await {
                Ok(served) => (served, deadline),
                Err(_) => {
                    tracing::warn!(grace = ?config.shutdown_grace,
                        "connections outlived the grace period: closing them");
                    (Ok(()), deadline)
                }
            }
        }
    };

    root.cancel();
    tracker.close();
    let stopped_in_time = tokio::time::timeout_at(deadline, tracker.wait())
        .await
        .is_ok();
    store.close().await;
    if stopped_in_time {
        tracing::info!("session-api stopped gracefully");
    } else {
        tracing::warn!(grace = ?config.shutdown_grace,
            "session-api stopped; background tasks outlived the grace period");
    }
    served.map_err(StartError::from)
}
