//! Serving a broker over gRPC, and its graceful shutdown.

use std::future::Future;

use ptyhub_proto::broker::v1::pty_broker_server::PtyBrokerServer;
use tokio::net::TcpListener;
use tokio::time::{Instant, timeout_at};
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

use crate::broker::Broker;
use crate::error::Error;
use crate::grpc::PtyBrokerService;

impl Broker {
    /// Serves this broker on `listener` until `shutdown` completes or the server fails. Then it
    /// stops accepting, closes every session (clients hear `Closed` with reason shutdown, process
    /// groups end) and returns within `config.shutdown_grace`, cutting off what is left.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), Error> {
        let config = self.config();
        let local_addr = listener
            .local_addr()
            .map_err(|error| Error::io("read the listener's address", error))?;
        let grace = config.shutdown_grace;
        let keepalive = config.keepalive_interval;

        let (health_reporter, health_service) = tonic_health::server::health_reporter();
        health_reporter
            .set_serving::<PtyBrokerServer<PtyBrokerService>>()
            .await;
        let reflection = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(ptyhub_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            // The descriptor set holds every ptyhub proto; advertise only what this serves.
            .with_service_name("ptyhub.broker.v1.PtyBroker")
            .with_service_name("grpc.health.v1.Health")
            .with_service_name("grpc.reflection.v1.ServerReflection")
            .build_v1()
            .map_err(|error| Error::Config(format!("server reflection: {error}")))?;

        let stop_accepting = CancellationToken::new();
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        let server = Server::builder()
            .http2_keepalive_interval(Some(keepalive))
            .http2_keepalive_timeout(Some(keepalive))
            .tcp_nodelay(true)
            .add_service(health_service)
            .add_service(reflection)
            .add_service(PtyBrokerService::new(self.clone()).into_server())
            .serve_with_incoming_shutdown(incoming, stop_accepting.clone().cancelled_owned());
        let mut server = tokio::spawn(server);
        tracing::info!(
            address = %local_addr,
            broker_id = %config.broker_id,
            backends = ?config.backends,
            "pty-broker serving"
        );

        tokio::select! {
            result = &mut server => {
                // The server stopped by itself: end the sessions anyway, then report why.
                self.shutdown().await;
                return match result {
                    Ok(result) => result.map_err(Error::from),
                    Err(join_error) => Err(Error::Config(format!("grpc server task failed: {join_error}"))),
                };
            }
            () = shutdown => {}
        }

        let deadline = Instant::now() + grace;
        tracing::info!(grace = ?grace, "shutting down");
        health_reporter
            .set_not_serving::<PtyBrokerServer<PtyBrokerService>>()
            .await;
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
