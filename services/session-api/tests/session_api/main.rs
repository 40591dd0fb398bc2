//! session-api's integration tests, in one binary so that the crate graph links once: the store
//! on both databases (the audit trail's included), the gRPC API with a real pty-broker in-process, the screen calls, and the
//! lifecycle across broker faults.

#[macro_use]
mod support;

mod audit;
mod lifecycle;
mod screens;
mod sessions;
mod shares;
mod store;
