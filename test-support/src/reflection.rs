//! What a server's reflection lists, asked the way outside clients ask: `grpc.reflection.v1`
//! (grpcurl) and `grpc.reflection.v1alpha` (Python's `grpcio-reflection`), for the tests that
//! check every service offers both.

use anyhow::Context as _;
use tonic::transport::Channel;

/// The services `grpc.reflection.v1` lists, sorted.
pub async fn services_listed_by_v1(channel: Channel) -> anyhow::Result<Vec<String>> {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let response = ServerReflectionClient::new(channel)
        .server_reflection_info(tokio_stream::iter([request]))
        .await?
        .into_inner()
        .message()
        .await?
        .context("v1 reflection answered nothing")?;
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        anyhow::bail!("unexpected v1 reflection answer: {response:?}");
    };
    Ok(sorted(list.service.into_iter().map(|service| service.name)))
}

/// The services `grpc.reflection.v1alpha` lists, sorted.
pub async fn services_listed_by_v1alpha(channel: Channel) -> anyhow::Result<Vec<String>> {
    use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;

    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let response = ServerReflectionClient::new(channel)
        .server_reflection_info(tokio_stream::iter([request]))
        .await?
        .into_inner()
        .message()
        .await?
        .context("v1alpha reflection answered nothing")?;
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        anyhow::bail!("unexpected v1alpha reflection answer: {response:?}");
    };
    Ok(sorted(list.service.into_iter().map(|service| service.name)))
}

fn sorted(names: impl Iterator<Item = String>) -> Vec<String> {
    let mut names: Vec<String> = names.collect();
    names.sort();
    names
}
