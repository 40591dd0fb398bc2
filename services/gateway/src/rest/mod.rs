//! The REST API of docs/CONTRACT.md: instances, sessions, their screens and commands (also under the older single-app
//! layout's `/projects/{project_id}/repositories/{repository_id}/...` paths), `/healthz`,
//! `/livez`, `/readyz` and `/metrics`. Each handler authenticates, validates, calls session-api
//! and renders JSON.
//!
//! - `bodies.rs`: the JSON bodies and the name rule;
//! - `extract.rs`: path and query parameters, the caller, JSON bodies, the instance scope;
//! - `instances.rs`, `sessions.rs`, `screens.rs`, `operations.rs`: the handlers;
//! - `commands.rs`: the commands a session's shell ran, and one command's output;
//! - `control.rs`: who controls a session, and requests for control made and answered without
//!   a stream;
//! - `events.rs`: an instance's session changes as Server-Sent Events;
//! - `shares.rs`: share links, viewer-only grants of an instance or a session;
//! - `signin.rs`: the page's session cookie: signing in from `?token=` or the form, and out;
//! - `recordings.rs`: a closed session's asciicast recording, with ranges;
//! - `audit.rs`: the audit trail, filtered, paged and scoped to the caller's instances.
//! - `webhooks.rs`: an instance's webhooks: register, list, delete.

pub mod audit;
pub mod bodies;
pub mod commands;
pub mod control;
pub mod events;
pub mod extract;
pub mod instances;
pub mod operations;
pub mod recordings;
pub mod screens;
pub mod sessions;
pub mod shares;
pub mod signin;
pub mod webhooks;

pub use extract::{
    Caller, CommandPath, InstancePath, InstanceScope, JsonBody, ListSessionsQuery,
    ProjectRepositoryLabels, SessionPath,
};

/// The prefix of the session routes under the instance layout of the contract.
pub const INSTANCE_PREFIX: &str = "/api/v1/instances/{iid}";

/// The prefix of the same session routes under the older single-app layout, where the
/// instance's `project_id` and `repository_id` labels must match the path.
pub const PROJECT_REPOSITORY_PREFIX: &str =
    "/projects/{project_id}/repositories/{repository_id}/instances/{iid}";
