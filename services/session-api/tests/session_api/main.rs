//! session-api's integration tests, in one binary so that the crate graph links once: the store
//! on both databases (the audit trail's included), the gRPC API with a real pty-broker in-process, the screen calls, the
//! lifecycle across broker faults, the broker registry's rules, and webhooks.

#[macro_use]
mod support;

mod audit;
mod lifecycle;
mod registry;
mod screens;
mod sessions;
mod shares;
mod store;
mod webhooks;
