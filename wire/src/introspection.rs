//! `grpc.health.v1` and server reflection (`grpc.reflection.v1` and `v1alpha`), set up the same
//! way on every service: one call names the services a server offers, and both reflection
//! versions advertise exactly those (v1alpha because Python's `grpcio-reflection` and other
//! older clients speak only that).

use tonic::service::Routes;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};

const HEALTH_SERVICE: &str = "grpc.health.v1.Health";
const REFLECTION_V1_SERVICE: &str = "grpc.reflection.v1.ServerReflection";
const REFLECTION_V1ALPHA_SERVICE: &str = "grpc.reflection.v1alpha.ServerReflection";

/// The health and reflection services of one server, and the handle that changes its health.
#[derive(Debug)]
pub struct Introspection {
    health: HealthHandle,
    routes: Routes,
}

/// The descriptors of a named service could not be found or read.
#[derive(Debug, thiserror::Error)]
#[error("server reflection could not be built: {0}")]
pub struct IntrospectionError(#[from] tonic_reflection::server::Error);

impl Introspection {
    /// Health and reflection for a server that offers `services` (full names, for example
    /// `ptyhub.session.v1.SessionApi`), all reported `SERVING`, as is the whole server (`""`).
    pub async fn new(services: &[&'static str]) -> Result<Self, IntrospectionError> {
        let reporter = HealthReporter::new();
        let routes = Routes::new(HealthServer::new(HealthService::from_health_reporter(
            reporter.clone(),
        )))
        .add_service(reflection_builder(services).build_v1()?)
        .add_service(reflection_builder(services).build_v1alpha()?);
        let health = HealthHandle {
            reporter,
            services: services.to_vec(),
        };
        health.set_status(ServingStatus::Serving).await;
        Ok(Self { health, routes })
    }

    /// The handle that reports this server's health, for a server that changes it (at shutdown,
    /// for instance). It outlives [`Introspection::into_routes`].
    pub fn health_handle(&self) -> HealthHandle {
        self.health.clone()
    }

    /// Health and both reflection versions as tonic routes, to add the server's own services to
    /// (`Server::builder().add_routes(..)`, or `Routes::add_service`).
    pub fn into_routes(self) -> Routes {
        self.routes
    }
}

/// Changes the health a server reports, for the whole server and each of its services at once.
#[derive(Debug, Clone)]
pub struct HealthHandle {
    reporter: HealthReporter,
    services: Vec<&'static str>,
}

impl HealthHandle {
    /// Reports `status` for the whole server (`""`) and every service it offers.
    pub async fn set_status(&self, status: ServingStatus) {
        self.reporter.set_service_status("", status).await;
        for service in &self.services {
            self.reporter.set_service_status(*service, status).await;
        }
    }
}

fn reflection_builder(services: &[&'static str]) -> tonic_reflection::server::Builder<'static> {
    // The descriptor set holds every ptyhub proto; each server advertises only what it serves.
    services
        .iter()
        .chain([
            &HEALTH_SERVICE,
            &REFLECTION_V1_SERVICE,
            &REFLECTION_V1ALPHA_SERVICE,
        ])
        .fold(
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(ptyhub_proto::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET),
            |builder, service| builder.with_service_name(*service),
        )
}

#[cfg(test)]
mod tests {
    use tokio_stream::StreamExt;
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;

    use super::*;

    const SESSION_API: &str = "ptyhub.session.v1.SessionApi";

    fn proto_status(status: ServingStatus) -> i32 {
        tonic_health::pb::health_check_response::ServingStatus::from(status) as i32
    }

    #[tokio::test]
    async fn v1alpha_reflection_lists_only_the_named_services_and_health_follows_the_handle() {
        let introspection = Introspection::new(&[SESSION_API])
            .await
            .expect("the ptyhub descriptors are embedded");
        let health = introspection.health_handle();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind on loopback");
        let address = listener.local_addr().expect("a bound address");
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_routes(introspection.into_routes())
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
            .expect("a valid url")
            .connect()
            .await
            .expect("the server answers");

        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut answers = ServerReflectionClient::new(channel.clone())
            .server_reflection_info(tokio_stream::iter([request]))
            .await
            .expect("v1alpha reflection is served")
            .into_inner();
        let answer = answers
            .next()
            .await
            .expect("one answer")
            .expect("a successful answer");
        let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
            panic!("expected a list of services, got {answer:?}");
        };
        let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "grpc.health.v1.Health",
                "grpc.reflection.v1.ServerReflection",
                "grpc.reflection.v1alpha.ServerReflection",
                SESSION_API,
            ]
        );

        let mut health_client = HealthClient::new(channel);
        for service in ["", SESSION_API] {
            let status = health_client
                .check(HealthCheckRequest {
                    service: service.to_owned(),
                })
                .await
                .expect("health is served")
                .into_inner()
                .status;
            assert_eq!(status, proto_status(ServingStatus::Serving), "{service:?}");
        }
        health.set_status(ServingStatus::NotServing).await;
        let status = health_client
            .check(HealthCheckRequest {
                service: SESSION_API.to_owned(),
            })
            .await
            .expect("health is served")
            .into_inner()
            .status;
        assert_eq!(status, proto_status(ServingStatus::NotServing));
        server.abort();
    }
}
