//! What ptyhub's tests share: access to the real dependencies that `cargo xtask test` starts
//! (PostgreSQL, a Docker engine), in-process stacks of the services on port 0, certificates
//! for tests of TLS, and a webhook receiver.
//!
//! A test that needs a dependency asks for it through [`require`]: under `CI=true` a missing
//! dependency fails the test; elsewhere the test is skipped with a printed reason.

#![forbid(unsafe_code)]

pub mod asciicast;
pub mod child;
pub mod environment;
pub mod fuzz;
#[cfg(feature = "http")]
pub mod http;
pub mod poll;
pub mod postgres;
pub mod reflection;
#[cfg(feature = "stack")]
pub mod stack;
#[cfg(feature = "tls")]
pub mod tls;
#[cfg(feature = "webhooks")]
pub mod webhooks;

pub use environment::{Requirement, SKIP_LOG_VARIABLE, require};
pub use poll::{poll_until, poll_until_blocking};

/// An error with its causes, on one line (`error: cause: cause`), for assertions on what a
/// user would read.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Routes `tracing` output to the test's captured output when `TEST_LOG=1`; silent otherwise.
/// Safe to call from every test.
pub fn init_test_logging() {
    if std::env::var_os("TEST_LOG").is_some_and(|value| value == "1") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("debug")),
            )
            .with_test_writer()
            .try_init();
    }
}
