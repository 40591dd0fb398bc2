//! The builder on real sockets: ephemeral ports reported, the credential required, the broker
//! called in process by the gateway (with the same checks) unless asked not to, the gateway
//! stopped alone, a service that cannot start failing the start, the idle-reaping knob
//! reaching the broker, and the same stack with TLS on every hop (certificates made by the test:
//! `ptyhub_test_support::tls`).

use std::time::Duration;

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_test_support::tls::TestCertificates;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_stream::StreamExt as _;

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
    let stack = Stack::builder()
        .expect("the embedded configs")
        .start()
        .await
        .expect("the stack starts");
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
async fn the_gateway_calls_the_stacks_broker_in_process_with_the_same_checks() {
    let stack = Stack::builder()
        .expect("the embedded configs")
        .start()
        .await
        .expect("the stack starts");
    let endpoint = stack.broker_endpoint();
    assert!(stack.in_process_brokers().contains(&endpoint));
    local_instance(&stack, "in-process").await;

    let broker = stack
        .in_process_brokers()
        .remove(&endpoint)
        .expect("the broker in process");
    // Its `Attach`, which takes the frames as values, checks them as the port does: the first
    // frame must be a hello, and the hello's ticket must be one session-api signed.
    let attach = |frames: Vec<broker_pb::ClientFrame>| {
        broker
            .attach()
            .attach(Box::pin(tokio_stream::iter(frames.into_iter().map(Ok))))
    };
    let refused = attach(vec![broker_pb::ClientFrame {
        frame: Some(broker_pb::client_frame::Frame::Reset(
            broker_pb::ResetTerminal {},
        )),
    }])
    .await
    .err()
    .expect("no hello, no stream");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    let refused = attach(vec![broker_pb::ClientFrame {
        frame: Some(broker_pb::client_frame::Frame::Hello(broker_pb::Hello {
            ticket: "not-a-ticket".to_owned(),
            session_id: "6f1d2c3b-0000-4000-8000-000000000001".to_owned(),
            role: broker_pb::Role::Controller as i32,
            ..Default::default()
        })),
    }])
    .await
    .err()
    .expect("no ticket of session-api's, no stream");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    let refused = attach(Vec::new())
        .await
        .err()
        .expect("an empty stream has no hello");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");

    let transport = gateway::brokers::BrokerTransport::InProcess(broker.service().clone());
    let refused = broker_pb::pty_broker_client::PtyBrokerClient::new(transport.clone())
        .list(broker_pb::ListRequest {})
        .await
        .expect_err("no credential, no answer, in process too");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    // The broker has a credential of its own: session-api's own one, which would open every
    // broker that held it, opens this one no more.
    let refused = broker_pb::pty_broker_client::PtyBrokerClient::with_interceptor(
        transport.clone(),
        stack.credentials().session_api.bearer_auth(),
    )
    .list(broker_pb::ListRequest {})
    .await
    .expect_err("session-api's own credential is not this broker's");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    let listed = broker_pb::pty_broker_client::PtyBrokerClient::with_interceptor(
        transport,
        stack
            .credentials()
            .broker
            .broker_control_credential()
            .bearer_auth(),
    )
    .list(broker_pb::ListRequest {})
    .await
    .expect("the credential session-api derives from the broker's own is admitted");
    assert!(listed.into_inner().sessions.is_empty());
    // With session-api's ticket it attaches; once the session's process ended, the stream ends,
    // and a caller that polls again hears the end again, as from tonic's `Streaming`.
    let target = stack
        .session_api_client()
        .create_session(session_pb::CreateSessionRequest {
            instance: local_instance(&stack, "in-process-ends").await,
            command: vec!["/bin/sh".to_owned(), "-c".to_owned(), "exit 3".to_owned()],
            ..Default::default()
        })
        .await
        .expect("a session starts")
        .into_inner()
        .attach
        .expect("an attach target");
    let mut frames = attach(vec![broker_pb::ClientFrame {
        frame: Some(broker_pb::client_frame::Frame::Hello(broker_pb::Hello {
            ticket: target.ticket,
            session_id: target.session_id,
            role: broker_pb::Role::Controller as i32,
            ..Default::default()
        })),
    }])
    .await
    .expect("session-api's ticket attaches");
    let exited = tokio::time::timeout(PATIENCE, async {
        let mut exited = None;
        while let Some(frame) = frames.next().await {
            if let Some(broker_pb::server_frame::Frame::Exit(exit)) = frame.expect("frames").frame {
                exited = Some(exit);
            }
        }
        exited
    })
    .await
    .expect("the stream ends once the process did");
    assert_eq!(exited.map(|exit| exit.code), Some(3));
    assert!(frames.next().await.is_none(), "the end, once more");
    stack.shutdown().await.expect("a clean shutdown");

    let over_tcp = Stack::builder()
        .expect("the embedded configs")
        .broker_in_process(false)
        .start()
        .await
        .expect("the stack starts");
    assert!(
        !over_tcp
            .in_process_brokers()
            .contains(&over_tcp.broker_endpoint())
    );
    over_tcp.shutdown().await.expect("a clean shutdown");
}

#[tokio::test]
async fn stopping_the_gateway_leaves_session_api_and_the_broker_running() {
    let mut stack = Stack::builder()
        .expect("the embedded configs")
        .start()
        .await
        .expect("the stack starts");
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
    let mut builder = Stack::builder().expect("the embedded configs");
    builder.session_api.database_url = url.into();
    let error = builder
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
    let mut builder = Stack::builder().expect("the embedded configs");
    builder.broker.detached_timeout = Duration::from_millis(300);
    builder.broker.kill_grace = Duration::from_millis(100);
    let stack = builder.start().await.expect("the stack starts");
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

/// A CA and one certificate it signed for 127.0.0.1 and localhost, made for one test and
/// written to its temporary directory; every service uses the certificate both ways.
/// The status line of an HTTPS GET that trusts `ca_pem` alone.
async fn https_status(
    address: std::net::SocketAddr,
    path: &str,
    ca_pem: &str,
) -> std::io::Result<String> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    let ca = rustls::pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes())
        .map_err(std::io::Error::other)?;
    roots.add(ca).map_err(std::io::Error::other)?;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(address).await?;
    let name =
        rustls::pki_types::ServerName::try_from("localhost").map_err(std::io::Error::other)?;
    let mut stream = connector.connect(name, tcp).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    // A peer that closes without close_notify ends the read with an error after the data.
    let _ = stream.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer);
    Ok(answer.lines().next().unwrap_or_default().to_owned())
}

/// A call refused by the server's TLS handshake, not by a service. Under TLS 1.3 the client
/// finishes its side of the handshake before the server checks the client's certificate, so the
/// refusal (a `certificate required` alert) reaches the client either while the connection is
/// made (`Unavailable`) or on the call's stream (`Unknown`), whichever comes first.
fn assert_refused_by_the_handshake(refused: &tonic::Status) {
    assert!(
        matches!(
            refused.code(),
            tonic::Code::Unavailable | tonic::Code::Unknown
        ),
        "{refused:?}"
    );
}

/// A stack with TLS on every hop (mutual between the services) and on the gateway's port: the
/// broker comes up through session-api over TLS, a terminal streams through the gateway's TLS
/// port to the broker and back, HTTPS answers, and a plain or certificate-less client is
/// refused.
#[tokio::test]
async fn every_hop_speaks_tls_and_mutual_tls_refuses_clients_without_a_certificate() {
    const TOKEN: &str = "tls-test-admin-token-0123456789abcdef";
    let certificates = TestCertificates::new();
    let mut builder = Stack::builder()
        .expect("the embedded configs")
        .internal_tls(ptyhub_wire::TlsFiles {
            cert: Some(certificates.cert.clone()),
            key: Some(certificates.key.clone()),
            ca: Some(certificates.ca.clone()),
            require_client_cert: true,
            ..ptyhub_wire::TlsFiles::default()
        });
    builder.gateway.tls.0.cert = Some(certificates.cert.clone());
    builder.gateway.tls.0.key = Some(certificates.key.clone());
    builder.gateway.auth.api_tokens.push(TOKEN.into());
    let stack = builder
        .start()
        .await
        .expect("the stack starts with TLS everywhere");
    assert!(
        stack.gateway_url().starts_with("https://"),
        "{}",
        stack.gateway_url()
    );
    assert!(stack.broker_endpoint().starts_with("https://"));
    local_instance(&stack, "tls").await;

    // The gateway's own port: gRPC over TLS, trusting the test CA.
    let trusting = ptyhub_wire::TlsConfig::from_pem(None, Some(&certificates.ca_pem), false);
    let gateway = trusting
        .endpoint(&stack.gateway_url())
        .expect("an https endpoint")
        .connect_lazy();
    fn authorized<T>(message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {TOKEN}").parse().expect("an ascii token"),
        );
        request
            .metadata_mut()
            .insert("ptyhub-instance", "tls".parse().expect("ascii"));
        request
    }
    let created = session_pb::session_api_client::SessionApiClient::new(gateway.clone())
        .create_session(authorized(session_pb::CreateSessionRequest {
            instance: "tls".to_owned(),
            ..Default::default()
        }))
        .await
        .expect("a session created over TLS")
        .into_inner();
    let session = created.session.expect("the session");
    assert!(
        created
            .attach
            .expect("a target")
            .broker_endpoint
            .starts_with("https://"),
        "attach targets name the gateway's https URL"
    );
    let (frames, receiver) = tokio::sync::mpsc::channel(8);
    frames
        .send(broker_pb::ClientFrame {
            frame: Some(broker_pb::client_frame::Frame::Hello(broker_pb::Hello {
                ticket: String::new(),
                session_id: session.id.clone(),
                role: broker_pb::Role::Controller as i32,
                size: None,
                since: None,
                snapshot: false,
                present_only: false,
            })),
        })
        .await
        .expect("an open queue");
    frames
        .send(broker_pb::ClientFrame {
            frame: Some(broker_pb::client_frame::Frame::Input(broker_pb::Input {
                data: "echo tls-$((6*7))\n".into(),
                input_id: None,
            })),
        })
        .await
        .expect("an open queue");
    let mut output = broker_pb::pty_broker_client::PtyBrokerClient::new(gateway)
        .attach(authorized(tokio_stream::wrappers::ReceiverStream::new(
            receiver,
        )))
        .await
        .expect("an attach relayed over TLS to the broker")
        .into_inner();
    let mut seen = Vec::new();
    let echoed = tokio::time::timeout(PATIENCE, async {
        while let Some(frame) = output.message().await.expect("a frame") {
            if let Some(broker_pb::server_frame::Frame::Output(chunk)) = frame.frame {
                seen.extend_from_slice(&chunk.data);
                if String::from_utf8_lossy(&seen).contains("tls-42") {
                    return true;
                }
            }
        }
        false
    })
    .await;
    assert_eq!(echoed, Ok(true), "{}", String::from_utf8_lossy(&seen));
    drop(frames);

    let health = https_status(stack.gateway_address(), "/healthz", &certificates.ca_pem)
        .await
        .expect("the gateway answers HTTPS");
    assert!(health.contains(" 200 "), "{health}");
    let plain = http_status(stack.gateway_address(), "/healthz").await;
    assert!(
        !plain.as_deref().unwrap_or_default().contains(" 200 "),
        "plain HTTP is not served on a TLS port: {plain:?}"
    );

    // session-api and the broker want a client certificate the CA signed.
    let anonymous = trusting
        .endpoint(&stack.session_api_endpoint())
        .expect("an https endpoint")
        .connect_lazy();
    let refused = session_pb::session_api_client::SessionApiClient::with_interceptor(
        anonymous,
        stack.credentials().gateway.bearer_auth(),
    )
    .list_instances(session_pb::ListInstancesRequest::default())
    .await
    .expect_err("no client certificate, no session-api");
    assert_refused_by_the_handshake(&refused);
    let anonymous = trusting
        .endpoint(&stack.broker_endpoint())
        .expect("an https endpoint")
        .connect_lazy();
    let refused = broker_pb::pty_broker_client::PtyBrokerClient::with_interceptor(
        anonymous,
        stack
            .credentials()
            .broker
            .broker_control_credential()
            .bearer_auth(),
    )
    .list(broker_pb::ListRequest {})
    .await
    .expect_err("no client certificate, no broker");
    assert_refused_by_the_handshake(&refused);

    // A client that trusts another CA does not take the gateway's certificate.
    let stranger = TestCertificates::new();
    let distrusted = https_status(stack.gateway_address(), "/healthz", &stranger.ca_pem).await;
    assert!(
        distrusted.is_err(),
        "a certificate of an unknown CA: {distrusted:?}"
    );
    stack.shutdown().await.expect("a clean shutdown");
}

/// TLS between the services without client certificates, and a plain gateway port: the stack
/// works through it, a client that trusts the CA needs no certificate, and a client that trusts
/// another CA, or speaks plain HTTP/2, is refused.
#[tokio::test]
async fn internal_tls_without_client_auth_checks_the_servers_certificates_only() {
    let certificates = TestCertificates::new();
    let stack = Stack::builder()
        .expect("the embedded configs")
        .internal_tls(ptyhub_wire::TlsFiles {
            cert: Some(certificates.cert.clone()),
            key: Some(certificates.key.clone()),
            ca: Some(certificates.ca.clone()),
            ..ptyhub_wire::TlsFiles::default()
        })
        .start()
        .await
        .expect("the stack starts with TLS between the services");
    assert!(
        stack.gateway_url().starts_with("http://"),
        "{}",
        stack.gateway_url()
    );
    assert!(stack.session_api_endpoint().starts_with("https://"));
    local_instance(&stack, "internal-tls").await;
    let health = http_status(stack.gateway_address(), "/healthz")
        .await
        .expect("the gateway answers");
    assert!(
        health.contains(" 200 "),
        "the gateway reaches session-api over TLS: {health}"
    );

    let list_instances = |channel| {
        let mut client = session_pb::session_api_client::SessionApiClient::with_interceptor(
            channel,
            stack.credentials().gateway.bearer_auth(),
        );
        async move {
            client
                .list_instances(session_pb::ListInstancesRequest::default())
                .await
        }
    };
    let trusting = ptyhub_wire::TlsConfig::from_pem(None, Some(&certificates.ca_pem), false);
    let listed = list_instances(
        trusting
            .endpoint(&stack.session_api_endpoint())
            .expect("an https endpoint")
            .connect_lazy(),
    )
    .await
    .expect("no client certificate is needed without --tls-client-auth");
    assert_eq!(listed.into_inner().instances.len(), 1);

    let stranger = TestCertificates::new();
    let distrusting = ptyhub_wire::TlsConfig::from_pem(None, Some(&stranger.ca_pem), false);
    let refused = list_instances(
        distrusting
            .endpoint(&stack.session_api_endpoint())
            .expect("an https endpoint")
            .connect_lazy(),
    )
    .await
    .expect_err("session-api's certificate is not signed by this CA");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");

    let plain = format!("http://{}", stack.session_api_address());
    let refused = list_instances(
        tonic::transport::Endpoint::from_shared(plain)
            .expect("a valid endpoint")
            .connect_lazy(),
    )
    .await
    .expect_err("plain HTTP/2 on a TLS port");
    assert_ne!(refused.code(), tonic::Code::Ok, "{refused:?}");
    stack.shutdown().await.expect("a clean shutdown");
}

/// A TLS file that is missing or holds no key stops each service before it serves, with an
/// error that names the setting and the file.
#[tokio::test]
async fn a_bad_tls_file_stops_each_service_at_start_naming_the_setting() {
    let certificates = TestCertificates::new();
    let missing = certificates.cert.with_file_name("missing.pem");
    let not_a_key = certificates.cert.clone();
    let credential = |token: &str| ptyhub_wire::ServiceCredential::new(token).expect("a token");
    let listener = || async {
        tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port")
    };

    let mut config = gateway::Config::new(
        "http://127.0.0.1:1",
        credential("gateway-token-for-this-test-0123456789"),
    );
    config.auth.api_tokens = vec!["tls-test-admin-token-0123456789abcdef".into()];
    config.tls = ptyhub_wire::TlsFiles {
        cert: Some(missing.clone()),
        key: Some(certificates.key.clone()),
        ..ptyhub_wire::TlsFiles::default()
    }
    .into();
    let error = tokio::time::timeout(
        PATIENCE,
        gateway::run(config, listener().await, std::future::pending()),
    )
    .await
    .expect("the gateway returns at once")
    .expect_err("no certificate file, no gateway");
    let text = ptyhub_test_support::error_chain(&error);
    assert!(
        text.contains("tls_cert") && text.contains("missing.pem"),
        "{text}"
    );

    let data = tempfile::tempdir().expect("a temporary directory");
    let mut config = session_api::Config::new(
        format!(
            "sqlite://{}?mode=rwc",
            data.path().join("sessions.db").display()
        ),
        credential("session-api-token-for-this-test-0123"),
        credential("gateway-token-for-this-test-0123456789"),
        ptyhub_attach_ticket::TicketSigningKey::generate(),
    );
    config.tls.cert = Some(certificates.cert.clone());
    config.tls.key = Some(not_a_key.clone());
    let error = tokio::time::timeout(
        PATIENCE,
        session_api::run(config, listener().await, std::future::pending()),
    )
    .await
    .expect("session-api returns at once")
    .expect_err("no key, no session-api");
    let text = ptyhub_test_support::error_chain(&error);
    assert!(
        text.contains("tls_key") && text.contains("cert.pem"),
        "{text}"
    );

    let mut config = pty_broker::Config::new(
        credential("session-api-token-for-this-test-0123"),
        ptyhub_attach_ticket::TicketSigningKey::generate().verifying_key(),
    );
    config.data_dir = Some(data.path().join("broker"));
    config.tls.cert = Some(certificates.cert.clone());
    config.tls.key = Some(certificates.key.clone());
    config.tls.ca = Some(missing);
    let error = tokio::time::timeout(
        PATIENCE,
        pty_broker::run(config, listener().await, std::future::pending()),
    )
    .await
    .expect("the broker returns at once")
    .expect_err("no CA file, no broker");
    let text = ptyhub_test_support::error_chain(&error);
    assert!(
        text.contains("tls_ca") && text.contains("missing.pem"),
        "{text}"
    );
}
