//! pty-broker: owns PTY processes on one host and streams them to clients over gRPC without
//! losing or duplicating a byte.

#![deny(unsafe_code)]

pub mod domain;
pub mod runtime;
