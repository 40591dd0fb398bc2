//! Serving a broker over gRPC, and its graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::AsRawFd as _;

use ptyhub_wire::{Introspection, ServingStatus};
use tokio::net::TcpListener;
use tokio::time::{Instant, timeout_at};
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

use crate::broker::Broker;
use crate::config::{BackendKind, Config};
use crate::error::StartError;
use crate::grpc::PtyBrokerService;
use crate::handoff::{HandOffListener, handoff_socket};
use crate::registration::{Registrar, Registration};

/// How long a process that handed its sessions over waits for its servers to write the end of
/// every stream (the hand-off's status) before it returns.
const HAND_OFF_DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

impl Broker {
    /// Serves this broker on `listener` until `shutdown` completes or the server fails. Then it
    /// stops accepting, closes every session (clients hear `Closed` with reason shutdown, process
    /// groups end) and returns within `config.shutdown_grace`, cutting off what is left.
    ///
    /// With a data directory it also waits for a successor on the hand-off socket (`handoff/`):
    /// after a hand-off it returns once the streams it served have ended (2 s at most), and the
    /// caller must exit without touching a session (they belong to the successor); after one
    /// that failed it serves on.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), StartError> {
        let config = self.config();
        let local_addr = listener.local_addr().map_err(|source| StartError::Io {
            context: "read the listener's address",
            source,
        })?;
        // Kept as a plain descriptor: it is what a successor receives, and what serving starts
        // again from after a hand-off that failed.
        let listener = listener.into_std().map_err(|source| StartError::Io {
            context: "keep the listening socket",
            source,
        })?;
        let grace = config.shutdown_grace;

        let introspection = Introspection::new(&[PtyBrokerService::NAME]).await?;
        let health = introspection.health_handle();
        let routes = introspection.into_routes();

        let tls = ptyhub_wire::TlsConfig::from_files(&config.tls.files())?;
        let registration = match &config.session_api {
            Some(session_api) => Some((
                session_api.clone(),
                config
                    .secrets
                    .service_token
                    .clone()
                    .ok_or(StartError::NoRegistrationCredential)?,
                Registration {
                    broker_id: config.broker_id.clone(),
                    endpoint: advertised_endpoint(config, local_addr, tls.serves_tls())?,
                    docker: config.backends.contains(&BackendKind::Docker),
                },
            )),
            None => None,
        };

        self.keep_recordings();
        // A bad session-api URL fails the start.
        if let Some((session_api, credential, registration)) = &registration {
            Registrar::new(session_api, credential, registration.clone(), &tls)?;
        }
        let successors = match handoff_socket(config) {
            Some(path) => match HandOffListener::bind(&path) {
                Ok(successors) => Some(successors),
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error,
                        "cannot listen for a successor: upgrades will end the sessions");
                    None
                }
            },
            None => None,
        };
        let mut shutdown = std::pin::pin!(shutdown);

        loop {
            let incoming =
                tokio::net::TcpListener::from_std(listener.try_clone().map_err(|source| {
                    StartError::Io {
                        context: "share the listening socket",
                        source,
                    }
                })?)
                .map_err(|source| StartError::Io {
                    context: "register the listening socket",
                    source,
                })?;
            let stop_accepting = CancellationToken::new();
            let stop_signal = || {
                let stop_accepting = stop_accepting.clone();
                let broker = self.clone();
                // A hand-off stops accepting too (and sends GOAWAY on every connection), so that
                // reconnecting clients queue on the socket for the successor.
                async move {
                    tokio::select! {
                        () = stop_accepting.cancelled() => {}
                        () = broker.handing_over() => {}
                    }
                }
            };
            let mut server = Server::builder();
            if let Some(tls) = tls.tonic_server() {
                server = server.tls_config(tls)?;
            }
            let server = server
                .http2_keepalive_interval(Some(config.keepalive_interval))
                .http2_keepalive_timeout(Some(config.keepalive_interval))
                .tcp_nodelay(true)
                .add_routes(routes.clone())
                .add_service(PtyBrokerService::new(self.clone()).into_server())
                .serve_with_incoming_shutdown(
                    TcpIncoming::from(incoming).with_nodelay(Some(true)),
                    stop_signal(),
                );
            let mut server = tokio::spawn(server);
            health.set_status(ServingStatus::Serving).await;
            tracing::info!(
                address = %local_addr,
                broker_id = %config.broker_id,
                backends = ?config.backends,
                tls = tls.serves_tls(),
                successor_socket = ?successors.as_ref().map(|successors| successors.path()),
                "pty-broker serving"
            );

            // Heartbeats stop when serving does: on shutdown, a hand-off, or when the server fails.
            let stop_registering = CancellationToken::new();
            let _stop_registering = stop_registering.clone().drop_guard();
            if let Some((session_api, credential, registration)) = &registration {
                Registrar::new(session_api, credential, registration.clone(), &tls)?
                    .start(stop_registering.clone());
            }

            loop {
                let successor = async {
                    match &successors {
                        Some(successors) => successors.accept().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    result = &mut server => {
                        // The server stopped by itself: end the sessions anyway, then report why.
                        self.shutdown().await;
                        return Ok(result??);
                    }
                    () = &mut shutdown => {
                        stop_registering.cancel();
                        stop_accepting.cancel();
                        self.shut_down_within(grace, &health, server).await;
                        return Ok(());
                    }
                    successor = successor => {
                        let successor = match successor {
                            Ok(successor) => successor,
                            Err(error) => {
                                tracing::warn!(%error, "a successor's connection failed");
                                continue;
                            }
                        };
                        let begun = self.hand_offs_begun();
                        match self.give_sessions(successor, listener.as_raw_fd()).await {
                            Ok(()) => {
                                stop_registering.cancel();
                                // Each attached stream ends with the hand-off's status, the
                                // gateway's cue to reconnect at once (1012). They are written
                                // by the server's tasks: let those finish before this process
                                // exits, or a client sees its connection reset (1011).
                                let drained =
                                    tokio::time::timeout(HAND_OFF_DRAIN, &mut server).await;
                                if drained.is_err() {
                                    tracing::warn!(drain = ?HAND_OFF_DRAIN,
                                        "streams still open after the hand-off: ending them");
                                }
                                tracing::info!("handed over: this process ends, its sessions go on");
                                return Ok(());
                            }
                            Err(error) => {
                                tracing::warn!(%error, "the hand-off did not happen: serving on");
                                if self.hand_offs_begun() != begun {
                                    // Serving had stopped for it: start again on the same socket.
                                    break;
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// This broker as another part of the same process calls it without a socket: `ptyhub
    /// up`'s gateway does. Its gRPC service (`ptyhub.broker.v1.PtyBroker`) as a value, with the
    /// same handlers, checks and limits as on the port, and no HTTP/2, no connection, no task
    /// between caller and handler; and its `Attach` with the frames as values, not encoded
    /// (`ptyhub_wire::InProcessBroker`). It serves as long as the broker does, on the port or
    /// not (a hand-off ends its streams as it ends those on the port; health and reflection are
    /// on the port only).
    pub fn in_process(&self) -> ptyhub_wire::InProcessBroker {
        let service = PtyBrokerService::new(self.clone());
        ptyhub_wire::InProcessBroker::new(
            tonic::service::Routes::new(service.clone().into_server()).prepare(),
            std::sync::Arc::new(service),
        )
    }

    /// The graceful end: not serving, every session closed, every stream ended, within `grace`.
    async fn shut_down_within(
        &self,
        grace: std::time::Duration,
        health: &ptyhub_wire::HealthHandle,
        mut server: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
    ) {
        let deadline = Instant::now() + grace;
        tracing::info!(grace = ?grace, "shutting down");
        health.set_status(ServingStatus::NotServing).await;
        let sessions_closed = timeout_at(deadline, self.shutdown()).await.is_ok();
        let server_stopped = match timeout_at(deadline, &mut server).await {
            Ok(Ok(Ok(()))) => true,
            Ok(Ok(Err(error))) => {
                tracing::warn!(%error, "grpc server ended with an error during shutdown");
                true
            }
            Ok(Err(join_error)) => {
                tracing::warn!(%join_error, "grpc server task failed during shutdown");
                true
            }
            Err(_) => {
                server.abort();
                false
            }
        };
        if sessions_closed && server_stopped {
            tracing::info!("shutdown complete: every session closed, every stream ended");
        } else {
            tracing::warn!(
                sessions_closed,
                server_stopped,
                "shutdown forced after the grace period"
            );
        }
    }
}

/// The endpoint the broker registers: `--advertise`, else `http://` and the listen address when
/// that names a reachable interface.
fn advertised_endpoint(
    config: &Config,
    local_addr: SocketAddr,
    serves_tls: bool,
) -> Result<String, StartError> {
    if let Some(advertise) = &config.advertise {
        return Ok(advertise.clone());
    }
    if local_addr.ip().is_unspecified() {
        return Err(StartError::NoAdvertisedEndpoint(local_addr));
    }
    let scheme = if serves_tls { "https" } else { "http" };
    Ok(format!("{scheme}://{local_addr}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    fn config() -> Config {
        Config::new(
            ptyhub_wire::ServiceCredential::new("a-service-token-for-tests").unwrap(),
            ptyhub_attach_ticket::TicketSigningKey::generate().verifying_key(),
        )
    }

    #[test]
    fn the_advertised_endpoint_is_the_flag_or_the_listen_address() {
        let listen: SocketAddr = "127.0.0.1:50061".parse().unwrap();
        assert_eq!(
            advertised_endpoint(&config(), listen, false).unwrap(),
            "http://127.0.0.1:50061"
        );
        assert_eq!(
            advertised_endpoint(&config(), listen, true).unwrap(),
            "https://127.0.0.1:50061"
        );
        let mut advertised = config();
        advertised.advertise = Some("http://broker-1.internal:50061".into());
        let anywhere: SocketAddr = "0.0.0.0:50061".parse().unwrap();
        assert_eq!(
            advertised_endpoint(&advertised, anywhere, true).unwrap(),
            "http://broker-1.internal:50061"
        );
    }

    #[test]
    fn an_unspecified_listen_address_needs_advertise() {
        for listen in ["0.0.0.0:50061", "[::]:50061"] {
            let error = advertised_endpoint(&config(), listen.parse().unwrap(), false).unwrap_err();
            assert!(error.to_string().contains("--advertise"), "{error}");
        }
    }

    #[test]
    fn endpoints_must_be_http_urls() {
        assert_eq!(
            crate::config::parse_endpoint("http://session-api:50051/").unwrap(),
            "http://session-api:50051"
        );
        for bad in ["session-api:50051", "ftp://session-api", "http://", ""] {
            assert!(crate::config::parse_endpoint(bad).is_err(), "{bad:?}");
        }
    }
}
