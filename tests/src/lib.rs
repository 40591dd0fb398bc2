//! Real ptyhub processes for end-to-end tests: the service binaries (built when missing), a
//! cluster of them on loopback ports, and a terminal WebSocket client.

#![forbid(unsafe_code)]

pub mod binaries;
pub mod churn;
pub mod cluster;
pub mod process;
pub mod terminal;
