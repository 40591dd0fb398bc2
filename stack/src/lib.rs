//! The three ptyhub services wired together in one process, written once: a pty-broker,
//! session-api on SQLite and the gateway, each started through its library's `run` on a bound
//! listener, with a credential per tier (the broker's its own) and session-api's ticket signing
//! key, whose public half the broker checks tickets with.
//!
//! `ptyhub up`, the tests' `TestStack` and the bench are thin users of [`StackBuilder`], which
//! holds the three services' own `Config`s (what their binaries parse their flags into), so a
//! setting is named once, by its service:
//!
//! ```ignore
//! let mut builder = Stack::builder()?;
//! builder.broker.ring_bytes = 4096;
//! let stack = builder.start().await?;
//! let mut sessions = stack.session_api_client();
//! // ... use stack.gateway_url() ...
//! stack.shutdown().await?;
//! ```
//!
//! The broker and session-api always listen on `127.0.0.1:0`; the gateway does too unless the
//! caller hands it a listener of its own. The stack reports the ports that were bound, so nothing
//! ever guesses a free port. [`StackBuilder::start`] returns once session-api sees the broker up,
//! so instances can be registered at once.

#![forbid(unsafe_code)]

mod builder;
mod error;
mod listener_handoff;
mod running;

pub use builder::{DEFAULT_BROKER_ID, StackBuilder, load_or_create_signing_key};
pub use error::{Service, StackError};
pub use gateway::InProcessBrokers;
pub use pty_broker::handoff::HANDOFF_SOCKET;
pub use pty_broker::runtime::local::run_session_keeper_if_asked;
pub use pty_broker::{BackendKind, ContainerRule, SpawnPolicy};
pub use running::{BrokerClient, BrokerRegistryClient, SessionApiClient, Stack};
/// The three services, whose configs a [`StackBuilder`] holds.
pub use {gateway, pty_broker, session_api};

#[cfg(test)]
mod tests;
