//! pty-broker: owns PTY processes on one host and streams them to clients over gRPC without
//! losing or duplicating a byte.
//!
//! [`run`] serves a [`Config`] on a bound listener until a shutdown future completes. Tests and
//! `ptyhub up` that need their own runtimes build a [`Broker`] with [`Broker::builder`] and call
//! [`Broker::serve`].

#![deny(unsafe_code)]

pub mod activity;
mod broker;
pub mod cli;
pub mod config;
pub mod domain;
mod error;
mod events;
pub mod grpc;
pub mod handoff;
mod memory;
pub mod policy;
pub mod recording;
mod registration;
mod registry;
pub mod ring;
pub mod runtime;
pub mod screen;
mod server;
pub mod session;
pub(crate) mod shell_integration;

pub use broker::{Broker, BrokerBuilder, Hello};
pub use config::{BackendKind, Config, DockerConfig, RecordingConfig};
pub use error::{ClientAction, Error, StartError};
pub use policy::{ContainerRule, SpawnPolicy};
pub use ptyhub_wire::ServiceCredential;

use std::future::Future;

use tokio::net::TcpListener;

/// Serves the broker described by `config` on `listener` (gRPC `PtyBroker`, `grpc.health.v1` and
/// server reflection) until `shutdown` completes, then closes every session and returns within
/// the configured grace period.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let broker = Broker::builder(config).configured_runtimes().await?.build();
    broker.serve(listener, shutdown).await
}
