//! The builder on real sockets: ephemeral ports reported, the credential required, the gateway
//! stopped alone, a service that cannot start failing the start, and the idle-reaping knob
//! reaching the broker.

use std::time::Duration;

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::{Service, Stack, StackError};

/// A liveness bound for a busy machine, not a performance figure.
const PATIENCE: Duration = Duration::from_secs(60);

async fn local_instance(stack: &Stack, name: &str) -> String {
    stack
        .session_api_client()
        .register_instance(session_pb::RegisterInstanceRequest {
            name: name.to_owned(),
            target: Some(broker_pb::Target {
                kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
            }),
            command: vec!["/bin/sh".to_owned()],
            max_sessions: 2,
            ..Default::default()
        })
        .await
        .expect("the broker is up once the stack has started")
        .into_inner()
        .id
}

/// The status line of a plain HTTP/1.1 GET.
async fn http_status(address: std::net::SocketAddr, path: &str) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    Ok(answer.lines().next().unwrap_or_default().to_owned())
}

#[tokio::test]
async fn services_listen_on_reported_loopback_ports_and_require_the_credential() {
    let stack = Stack::builder().start().await.expect("the stack starts");
    let addresses = [
        stack.broker_address(),
        stack.session_api_address(),
        stack.gateway_address(),
    ];
    for address in addresses {
        assert!(address.ip().is_loopback(), "{address}");
        assert_ne!(address.port(), 0, "the bound port is reported");
    }
    assert_eq!(stack.gateway_url(), format!("http://{}", addresses[2]));

    local_instance(&stack, "credentialed").await;
    let listed = stack
        .broker_client()
        .list(broker_pb::ListRequest {})
        .await
        .expect("the broker admits the stack's credential");
    assert!(listed.into_inner().sessions.is_empty());

    let mut anonymous = session_pb::session_api_client::SessionApiClient::new(
        tonic::transport::Endpoint::from_shared(stack.session_api_endpoint())
            .expect("a valid endpoint")
            .connect_lazy(),
    );
    let refused = anonymous
        .list_instances(session_pb::ListInstancesRequest::default())
        .await
        .expect_err("no credential, no answer");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);

    let health = http_status(stack.gateway_address(), "/healthz")
        .await
        .expect("the gateway answers");
    assert!(health.contains(" 200 "), "{health}");

    stack.shutdown().await.expect("a clean shutdown");
    for address in addresses {
        assert!(
            tokio::net::TcpStream::connect(address).await.is_err(),
            "{address} still accepts connections after shutdown"
        );
    }
}

#[tokio::test]
async fn stopping_the_gateway_leaves_session_api_and_the_broker_running() {
    let mut stack = Stack::builder().start().await.expect("the stack starts");
    stack
        .stop_gateway()
        .await
        .expect("the gateway stops cleanly");
    assert!(
        tokio::net::TcpStream::connect(stack.gateway_address())
            .await
            .is_err(),
        "the gateway still listens"
    );
    assert!(stack.is_running(), "a service stopped with the gateway");
    local_instance(&stack, "after-gateway").await;
    stack.shutdown().await.expect("a clean shutdown");
}

#[tokio::test]
async fn a_service_that_cannot_start_fails_the_start_with_its_error() {
    let missing = tempfile::tempdir().expect("a temporary directory");
    let url = format!(
        "sqlite://{}?mode=rwc",
        missing.path().join("no/such/dir/sessions.db").display()
    );
    let error = Stack::builder()
        .database_url(url)
        .start()
        .await
        .expect_err("session-api cannot open its database");
    assert!(
        matches!(
            error,
            StackError::Failed {
                service: Service::SessionApi,
                ..
            }
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_short_detached_timeout_reaps_a_session_nobody_attached_to() {
    let stack = Stack::builder()
        .detached_timeout(Duration::from_millis(300))
        .kill_grace(Duration::from_millis(100))
        .start()
        .await
        .expect("the stack starts");
    let instance = local_instance(&stack, "reaped").await;
    let mut sessions = stack.session_api_client();
    let created = sessions
        .create_session(session_pb::CreateSessionRequest {
            instance: instance.clone(),
            ..Default::default()
        })
        .await
        .expect("a session starts")
        .into_inner()
        .session
        .expect("the new session");

    let deadline = tokio::time::Instant::now() + PATIENCE;
    let closed = loop {
        let session = sessions
            .get_session(session_pb::GetSessionRequest {
                instance: instance.clone(),
                session_id: created.id.clone(),
            })
            .await
            .expect("the session is known")
            .into_inner();
        if session.status() == session_pb::SessionStatus::Closed {
            break session;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not reaped within {PATIENCE:?}: {session:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        closed.close_reason(),
        session_pb::CloseReason::IdleReaped,
        "{closed:?}"
    );
    stack.shutdown().await.expect("a clean shutdown");
}
