//! Self-registration: with `--session-api` set, the broker registers itself in session-api's
//! broker registry under its id and advertised endpoint, then heartbeats at the interval
//! session-api asks for, registering again whenever session-api no longer knows it. Failures
//! are retried with backoff for as long as the broker runs; they never stop it serving.

use std::time::Duration;

use ptyhub_wire::ServiceCredential;
use tokio_util::sync::CancellationToken;
use tonic::Code;

use crate::error::StartError;
use crate::grpc::RegistryClient;

const FIRST_RETRY_DELAY: Duration = Duration::from_millis(200);
const MAX_RETRY_DELAY: Duration = Duration::from_secs(10);
/// Deadline of one registry call.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// What the broker registers as.
#[derive(Debug, Clone)]
pub(crate) struct Registration {
    pub broker_id: String,
    /// Where session-api and gateways reach this broker.
    pub endpoint: String,
    /// Whether this broker offers the Docker runtime.
    pub docker: bool,
}

/// Keeps a broker registered with session-api: built before the broker serves (so a bad URL
/// fails the start), started once it does.
#[derive(Debug)]
pub(crate) struct Registrar {
    client: RegistryClient,
    registration: Registration,
}

impl Registrar {
    pub(crate) fn new(
        session_api: &str,
        credential: &ServiceCredential,
        registration: Registration,
        tls: &ptyhub_wire::TlsConfig,
    ) -> Result<Self, StartError> {
        Ok(Self {
            client: RegistryClient::new(session_api, credential, CALL_TIMEOUT, tls)?,
            registration,
        })
    }

    /// Registers and heartbeats in a task of its own until `cancel`.
    pub(crate) fn start(self, cancel: CancellationToken) {
        tracing::info!(broker_id = %self.registration.broker_id,
            endpoint = %self.registration.endpoint, "registering with session-api");
        tokio::spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => {}
                () = keep_registered(self.client, self.registration) => {}
            }
        });
    }
}

async fn keep_registered(mut client: RegistryClient, registration: Registration) {
    let mut registered = false;
    let mut retry_delay = FIRST_RETRY_DELAY;
    loop {
        let outcome = if registered {
            client.heartbeat(&registration.broker_id).await
        } else {
            match client
                .register(
                    &registration.broker_id,
                    &registration.endpoint,
                    registration.docker,
                )
                .await
            {
                Ok(()) => {
                    tracing::info!(broker_id = %registration.broker_id, "registered with session-api");
                    registered = true;
                    // The first heartbeat says how often to send them.
                    client.heartbeat(&registration.broker_id).await
                }
                Err(status) => Err(status),
            }
        };
        let wait = match outcome {
            Ok(interval) => {
                tracing::debug!(?interval, "heartbeat answered");
                retry_delay = FIRST_RETRY_DELAY;
                interval
            }
            Err(status) if status.code() == Code::NotFound => {
                tracing::warn!(broker_id = %registration.broker_id,
                    "session-api does not know this broker: registering again");
                registered = false;
                Duration::ZERO
            }
            Err(status) => {
                let wait = retry_delay;
                retry_delay = (retry_delay * 2).min(MAX_RETRY_DELAY);
                match status.code() {
                    // A configuration mistake: loud, but the broker keeps serving.
                    Code::Unauthenticated | Code::PermissionDenied | Code::InvalidArgument => {
                        tracing::error!(code = ?status.code(), message = status.message(),
                            "session-api refused this broker's registration");
                    }
                    _ => tracing::warn!(code = ?status.code(), message = status.message(),
                        retry_in = ?wait, "cannot reach session-api's broker registry"),
                }
                wait
            }
        };
        tokio::time::sleep(wait).await;
    }
}
