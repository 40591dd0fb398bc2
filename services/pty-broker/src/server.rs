//! Serving a broker over gRPC, and its graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;

use ptyhub_proto::broker::v1::pty_broker_server::PtyBrokerServer;
use ptyhub_wire::{Introspection, ServingStatus};
use tokio::net::TcpListener;
use tokio::time::{Instant, timeout_at};
use tokio_util::sync::CancellationToken;
use tonic::server::NamedService;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

use crate::broker::Broker;
use crate::config::{BackendKind, Config};
use crate::error::StartError;
use crate::grpc::PtyBrokerService;
use crate::registration::{Registrar, Registration};

impl Broker {
    /// Serves this broker on `listener` until `shutdown` completes or the server fails. Then it
    /// stops accepting, closes every session (clients hear `Closed` with reason shutdown, process
    /// groups end) and returns within `config.shutdown_grace`, cutting off what is left.
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
        let grace = config.shutdown_grace;
        let keepalive = config.keepalive_interval;

        let introspection =
            Introspection::new(&[<PtyBrokerServer<PtyBrokerService> as NamedService>::NAME])
                .await?;
        let health = introspection.health_handle();

        let tls = ptyhub_wire::TlsConfig::from_files(&config.tls.files())?;
        let registrar = match &config.session_api {
            Some(session_api) => Some(Registrar::new(
                session_api,
                config
                    .secrets
                    .service_token
                    .as_ref()
                    .ok_or(StartError::NoRegistrationCredential)?,
                Registration {
                    broker_id: config.broker_id.clone(),
                    endpoint: advertised_endpoint(config, local_addr, tls.serves_tls())?,
                    docker: config.backends.contains(&BackendKind::Docker),
                },
                &tls,
            )?),
            None => None,
        };

        self.keep_recordings();
        let stop_accepting = CancellationToken::new();
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        let mut server = Server::builder();
        if let Some(tls) = tls.tonic_server() {
            server = server.tls_config(tls)?;
        }
        let server = server
            .http2_keepalive_interval(Some(keepalive))
            .http2_keepalive_timeout(Some(keepalive))
            .tcp_nodelay(true)
            .add_routes(introspection.into_routes())
            .add_service(PtyBrokerService::new(self.clone()).into_server())
            .serve_with_incoming_shutdown(incoming, stop_accepting.clone().cancelled_owned());
        let mut server = tokio::spawn(server);
        tracing::info!(
            address = %local_addr,
            broker_id = %config.broker_id,
            backends = ?config.backends,
            tls = tls.serves_tls(),
            "pty-broker serving"
        );

        // Heartbeats stop when serving does: on shutdown, or when the server fails.
        let stop_registering = CancellationToken::new();
        let _stop_registering = stop_registering.clone().drop_guard();
        if let Some(registrar) = registrar {
            registrar.start(stop_registering.clone());
        }

        tokio::select! {
            result = &mut server => {
                // The server stopped by itself: end the sessions anyway, then report why.
                self.shutdown().await;
                return Ok(result??);
            }
            () = shutdown => {}
        }

        let deadline = Instant::now() + grace;
        tracing::info!(grace = ?grace, "shutting down");
        stop_registering.cancel();
        health.set_status(ServingStatus::NotServing).await;
        stop_accepting.cancel();
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
        Ok(())
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
            attach_ticket::TicketKey::new(b"a ticket secret for tests 0123456789".to_vec())
                .unwrap(),
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
