//! The edge that every ptyhub service shares, written once: the contract's limits, service
//! credentials with one client interceptor and one server check, health and reflection set up
//! by one function, the closed table of error codes that every transport (gRPC, HTTP,
//! WebSocket) maps from, TLS for every hop, and the in-process road to a broker. The
//! contract's nouns (sizes, roles, statuses, names) are `ptyhub-model`'s.
//!
//! Nothing here knows a service's domain: a service turns its own errors into an [`ErrorCode`],
//! and this crate says what that code is on each wire.

#![forbid(unsafe_code)]

mod audit;
mod code;
mod credential;
mod in_process;
mod introspection;
pub mod limits;
#[cfg(feature = "recordings")]
mod recordings;
mod secret;
mod tls;

pub use audit::{
    ACTOR_ADDRESS_METADATA, ACTOR_PRINCIPAL_METADATA, ACTOR_SURFACE_METADATA, Actor,
    CLI_USER_AGENT_PREFIX, MAX_PRINCIPAL_BYTES, Surface,
};
pub use code::{
    ERROR_CODE_METADATA, ErrorCode, HANDING_OVER_METADATA, close_code, handing_over_status,
    is_connection_failure, is_handing_over,
};
pub use credential::{
    AUTHORIZATION_METADATA, BearerAuth, InvalidCredential, RequireCredential, ServiceCredential,
    TierCredentials, bearer_token,
};
pub use in_process::{AttachInProcess, ClientFrames, InProcessBroker, ServerFrames};
pub use introspection::{HealthHandle, Introspection, IntrospectionError};
#[cfg(feature = "recordings")]
pub use recordings::{RecordingStore, RecordingStoreError};
pub use secrecy::{ExposeSecret, SecretString};
pub use secret::{
    SecretError, SecretSource, create_private_directory, create_private_file, read_secret_file,
    read_secret_lines, secret_from,
};
pub use tls::{PemCertificatesError, TlsConfig, TlsError, TlsFiles, pem_certificate_count};
pub use tonic_health::ServingStatus;
