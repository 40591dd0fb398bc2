//! Real ptyhub processes for end-to-end tests: the service binaries (built when missing), a
//! cluster of them on loopback ports the kernel chose, the sockets they hold, and a terminal
//! WebSocket client.

#![forbid(unsafe_code)]

pub mod binaries;
pub mod churn;
pub mod cluster;
pub mod container;
pub mod front;
pub mod isolated;
pub mod process;
pub mod s3;
pub mod socket_options;
pub mod sockets;
pub mod terminal;
