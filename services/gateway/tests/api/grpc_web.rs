//! The session-api surface through the gateway as gRPC-web, with tonic-web's client layer over
//! a plain HTTP/1.1 hyper client, as a browser program would reach it.

use crate::common::{PATIENCE, create_session};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_proto::session::v1::session_api_client::SessionApiClient;
use ptyhub_test_support::stack::TestStack;
use serde_json::json;
use tonic_web::{GrpcWebClientLayer, GrpcWebClientService};

type GrpcWebClient = SessionApiClient<
    GrpcWebClientService<
        Client<
            hyper_util::client::legacy::connect::HttpConnector,
            tonic_web::GrpcWebCall<tonic::body::Body>,
        >,
    >,
>;

fn grpc_web_client(stack: &TestStack) -> GrpcWebClient {
    let http = Client::builder(TokioExecutor::new()).build_http();
    let service = tower::ServiceBuilder::new()
        .layer(GrpcWebClientLayer::new())
        .service(http);
    SessionApiClient::with_origin(service, stack.gateway_url.parse().unwrap())
}

fn with_token<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    request
}

#[tokio::test]
async fn unary_calls_are_checked_and_forwarded() {
    let stack = TestStack::builder().start().await;
    let mut client = grpc_web_client(&stack);

    let listed = client
        .list_instances(with_token(
            session_pb::ListInstancesRequest::default(),
            &stack.admin_token,
        ))
        .await
        .expect("list instances")
        .into_inner();
    assert!(
        listed
            .instances
            .iter()
            .any(|instance| instance.id == stack.instance_id)
    );

    let created = client
        .create_session(with_token(
            session_pb::CreateSessionRequest {
                instance: stack.instance_id.clone(),
                name: "over grpc-web".into(),
                ..Default::default()
            },
            &stack.admin_token,
        ))
        .await
        .expect("create session")
        .into_inner();
    assert_eq!(created.session.unwrap().name, "over grpc-web");

    let refused = client
        .list_instances(tonic::Request::new(
            session_pb::ListInstancesRequest::default(),
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);

    let other = stack.register_instance("other", 5, &[]).await;
    let scoped = stack.jwt("carol", &["local"], false);
    let forbidden = client
        .list_sessions(with_token(
            session_pb::ListSessionsRequest {
                instance: other,
                include_closed: false,
            },
            &scoped,
        ))
        .await
        .unwrap_err();
    assert_eq!(forbidden.code(), tonic::Code::PermissionDenied);
    let not_admin = client
        .delete_instance(with_token(
            session_pb::DeleteInstanceRequest {
                instance: stack.instance_id.clone(),
            },
            &scoped,
        ))
        .await
        .unwrap_err();
    assert_eq!(not_admin.code(), tonic::Code::PermissionDenied);
    stack.shutdown().await;
}

#[tokio::test]
async fn screen_calls_are_checked_and_forwarded_over_grpc_web() {
    use ptyhub_proto::broker::v1 as broker_pb;

    let stack = TestStack::builder().start().await;
    let mut client = grpc_web_client(&stack);
    let id = create_session(&stack, &stack.instance_id, json!({"name": "screened"})).await;
    let marker = client
        .send_input(with_token(
            session_pb::SendInputRequest {
                instance: "local".into(),
                session_id: id.clone(),
                items: vec![
                    broker_pb::InputItem {
                        item: Some(broker_pb::input_item::Item::Text(
                            "echo web-$((6*7))".into(),
                        )),
                    },
                    broker_pb::InputItem {
                        item: Some(broker_pb::input_item::Item::Key("Enter".into())),
                    },
                ],
                force: false,
            },
            &stack.admin_token,
        ))
        .await
        .expect("send input over grpc-web")
        .into_inner();
    let waited = client
        .wait_for_screen(with_token(
            session_pb::WaitForScreenRequest {
                instance: "local".into(),
                session_id: id.clone(),
                pattern: "web-42\n".into(),
                timeout_ms: 0,
                quiet_ms: 0,
                after_offset: Some(marker.output_offset),
                format: broker_pb::ScreenFormat::Cells as i32,
                scrollback: 0,
                wait_for: 0,
            },
            &stack.admin_token,
        ))
        .await
        .expect("wait over grpc-web")
        .into_inner();
    let screen = waited.screen.expect("the matching screen");
    assert_eq!(screen.format, broker_pb::ScreenFormat::Cells as i32);
    assert_eq!(screen.rows.len(), 24);

    let scoped = stack.jwt("erin", &["elsewhere"], false);
    let refused = client
        .get_screen(with_token(
            session_pb::GetScreenRequest {
                instance: "local".into(),
                session_id: id,
                format: 0,
                scrollback: 0,
            },
            &scoped,
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    stack.shutdown().await;
}

#[tokio::test]
async fn session_changes_stream_through_the_gateway() {
    let stack = TestStack::builder().start().await;
    let mut client = grpc_web_client(&stack);
    let mut changes = client
        .watch_sessions(with_token(
            session_pb::WatchSessionsRequest {
                instance: stack.instance_id.clone(),
            },
            &stack.admin_token,
        ))
        .await
        .expect("watch sessions")
        .into_inner();

    let id = create_session(&stack, &stack.instance_id, json!({"name": "watched"})).await;
    let seen = tokio::time::timeout(PATIENCE, async {
        loop {
            let change = changes
                .message()
                .await
                .expect("stream error")
                .expect("stream ended");
            if change
                .session
                .as_ref()
                .is_some_and(|session| session.id == id)
            {
                return change;
            }
        }
    })
    .await
    .expect("a change for the new session");
    assert_eq!(seen.session.unwrap().name, "watched");

    // A scoped credential cannot watch every instance.
    let scoped = stack.jwt("dave", &["local"], false);
    let refused = client
        .watch_sessions(with_token(
            session_pb::WatchSessionsRequest::default(),
            &scoped,
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    stack.shutdown().await;
}

#[tokio::test]
async fn plain_grpc_with_health_is_served_on_the_same_port() {
    let stack = TestStack::builder().start().await;
    let channel = tonic::transport::Channel::from_shared(stack.gateway_url.clone())
        .unwrap()
        .connect()
        .await
        .expect("http/2 connection to the gateway");
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let answer = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "ptyhub.session.v1.SessionApi".into(),
        })
        .await
        .expect("health check")
        .into_inner();
    assert_eq!(
        answer.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    let mut client = SessionApiClient::new(channel);
    let instance = client
        .get_instance(with_token(
            session_pb::GetInstanceRequest {
                instance: "local".into(),
            },
            &stack.admin_token,
        ))
        .await
        .expect("get instance over grpc")
        .into_inner();
    assert_eq!(instance.id, stack.instance_id);
    stack.shutdown().await;
}

/// What Python's `grpcio-reflection` and older `grpcurl` builds speak: reflection v1alpha on the
/// gateway's own port lists the services, describes them, and a listed method answers.
#[tokio::test]
async fn v1alpha_reflection_lists_and_describes_the_services_and_a_listed_call_answers() {
    use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1alpha::{ServerReflectionRequest, ServerReflectionResponse};

    let stack = TestStack::builder().start().await;
    let channel = tonic::transport::Channel::from_shared(stack.gateway_url.clone())
        .unwrap()
        .connect()
        .await
        .expect("http/2 connection to the gateway");
    let mut reflection = ServerReflectionClient::new(channel.clone());
    let mut ask = async |request: MessageRequest| -> ServerReflectionResponse {
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(request),
        };
        reflection
            .server_reflection_info(tokio_stream::iter([request]))
            .await
            .expect("v1alpha reflection is served")
            .into_inner()
            .message()
            .await
            .expect("a reflection answer")
            .expect("one answer per request")
    };

    let listed = ask(MessageRequest::ListServices(String::new())).await;
    let Some(MessageResponse::ListServicesResponse(list)) = listed.message_response else {
        panic!("expected a list of services, got {listed:?}");
    };
    let mut names: Vec<String> = list
        .service
        .into_iter()
        .map(|service| service.name)
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection",
            "ptyhub.broker.v1.PtyBroker",
            "ptyhub.session.v1.SessionApi",
        ]
    );

    let described = ask(MessageRequest::FileContainingSymbol(
        "ptyhub.session.v1.SessionApi".into(),
    ))
    .await;
    let Some(MessageResponse::FileDescriptorResponse(files)) = described.message_response else {
        panic!("expected file descriptors, got {described:?}");
    };
    assert!(
        files
            .file_descriptor_proto
            .iter()
            .any(|file| file.windows(10).any(|bytes| bytes == b"SessionApi")),
        "no descriptor names the service"
    );
    // The descriptors come from the proto files, so every call of the service is described,
    // the screen calls among them.
    for method in ["GetScreen", "SendInput", "WaitForScreen"] {
        assert!(
            files.file_descriptor_proto.iter().any(|file| file
                .windows(method.len())
                .any(|bytes| bytes == method.as_bytes())),
            "no descriptor names {method}"
        );
    }

    let mut client = SessionApiClient::new(channel);
    let instance = client
        .get_instance(with_token(
            session_pb::GetInstanceRequest {
                instance: "local".into(),
            },
            &stack.admin_token,
        ))
        .await
        .expect("a listed service answers")
        .into_inner();
    assert_eq!(instance.id, stack.instance_id);
    stack.shutdown().await;
}
