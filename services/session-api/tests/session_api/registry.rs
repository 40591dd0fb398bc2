//! The broker registry's rules against one broker that is broken into: each broker registers and
//! heartbeats under its own id with its own credential alone, no broker holds a credential that
//! opens another, and under TLS no broker endpoint is plain text.

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as pb;
use ptyhub_proto::session::v1::broker_registry_client::BrokerRegistryClient;
use ptyhub_test_support::tls::TestCertificates;
use tonic::Code;

use crate::support::*;

fn register(id: &str, endpoint: &str) -> pb::RegisterBrokerRequest {
    pb::RegisterBrokerRequest {
        id: id.into(),
        endpoint: endpoint.into(),
        docker: false,
    }
}

async fn endpoints(registry: &mut RegistryClient) -> Vec<(String, String)> {
    registry
        .list_brokers(pb::ListBrokersRequest {})
        .await
        .expect("list brokers")
        .into_inner()
        .brokers
        .into_iter()
        .map(|broker| (broker.id, broker.endpoint))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_registers_and_heartbeats_under_its_own_id_alone() {
    let Some(database) = FreshDatabase::create(Backend::Sqlite).await else {
        return;
    };
    let api = start_session_api(database.url(), &[]);
    let mut broker_a = registry_client(&api, "broker-a").await;
    let mut broker_b = registry_client(&api, "broker-b").await;

    // Broker B, broken into, tries to be broker A before A ever registered: there is nothing
    // to be first to, since the configuration binds A's id to A's credential.
    let refused = broker_b
        .register_broker(register("broker-a", "http://127.0.0.1:10"))
        .await
        .expect_err("B registers as A");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().contains("broker-a"), "{refused:?}");
    let refused = broker_b
        .heartbeat(pb::HeartbeatRequest {
            id: "broker-a".into(),
        })
        .await
        .expect_err("B heartbeats as A");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    // Nor can it add a broker of an id nobody was given, to draw sessions to a fake one.
    let refused = broker_b
        .register_broker(register("fake", "http://127.0.0.1:11"))
        .await
        .expect_err("B registers a fake broker");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(endpoints(&mut broker_a).await.is_empty());

    // A registers; B still cannot re-point it or keep it alive.
    broker_a
        .register_broker(register("broker-a", "http://127.0.0.1:9"))
        .await
        .expect("A registers as itself");
    let refused = broker_b
        .register_broker(register("broker-a", "http://127.0.0.1:10"))
        .await
        .expect_err("B re-points A");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert_eq!(
        endpoints(&mut broker_a).await,
        [("broker-a".to_owned(), "http://127.0.0.1:9".to_owned())]
    );

    // A, rescheduled, registers its new endpoint and heartbeats; B registers as itself.
    broker_a
        .register_broker(register("broker-a", "http://127.0.0.1:12"))
        .await
        .expect("A moves");
    broker_a
        .heartbeat(pb::HeartbeatRequest {
            id: "broker-a".into(),
        })
        .await
        .expect("A's heartbeat");
    broker_b
        .register_broker(register("broker-b", "http://127.0.0.1:13"))
        .await
        .expect("B registers as itself");
    assert_eq!(
        endpoints(&mut broker_a).await,
        [
            ("broker-a".to_owned(), "http://127.0.0.1:12".to_owned()),
            ("broker-b".to_owned(), "http://127.0.0.1:13".to_owned()),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_of_its_own_admits_neither_session_apis_credential_nor_anothers() {
    let Some(database) = FreshDatabase::create(Backend::Sqlite).await else {
        return;
    };
    let broker = start_broker_of_its_own("broker-a");
    let api = start_session_api(database.url(), &[("broker-a", broker.endpoint())]);

    // What broker B holds, its own credential and the one derived from it, and session-api's
    // own credential, which brokers once all held: none opens broker A.
    let broker_b = broker_credential("broker-b");
    let broker_b_control = broker_control_credential("broker-b");
    for token in [
        SERVICE_TOKEN,
        broker_b.as_str(),
        broker_b_control.as_str(),
        &broker_credential("broker-a"),
    ] {
        let refused = broker_client_as(&broker, token)
            .await
            .list(broker_pb::ListRequest {})
            .await
            .expect_err("not broker A's control credential");
        assert_eq!(refused.code(), Code::Unauthenticated, "{token}");
    }

    // session-api presents A the credential derived from A's own: sessions start there.
    let mut client = session_client(&api).await;
    let instance = register_instance(&mut client, "on-broker-a", "broker-a", 5).await;
    client
        .create_session(pb::CreateSessionRequest {
            instance: instance.id,
            ..Default::default()
        })
        .await
        .expect("session-api reaches broker A");
    let mut direct = broker_client_as(&broker, &broker_control_credential("broker-a")).await;
    assert_eq!(broker_processes(&mut direct).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_tls_a_plain_text_broker_endpoint_is_refused() {
    let Some(database) = FreshDatabase::create(Backend::Sqlite).await else {
        return;
    };
    let certificates = TestCertificates::new();
    let under_tls = |config: &mut session_api::Config| {
        config.tls.cert = Some(certificates.cert.clone());
        config.tls.key = Some(certificates.key.clone());
        config.tls.ca = Some(certificates.ca.clone());
    };
    let api = start_session_api_with(database.url(), &[], under_tls);
    let api_url = format!("https://{}", api.address);
    let client_tls = ptyhub_wire::TlsConfig::from_pem(None, Some(&certificates.ca_pem), false);
    let channel = ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || {
        let endpoint = client_tls.endpoint(&api_url).expect("an https endpoint");
        async move { endpoint.connect().await.ok() }
    })
    .await
    .expect("session-api serves TLS");
    let mut registry =
        BrokerRegistryClient::with_interceptor(channel, auth(&broker_credential("broker-a")));

    let refused = registry
        .register_broker(register("broker-a", "http://10.0.0.7:50061"))
        .await
        .expect_err("an http:// endpoint under TLS");
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert!(
        refused.message().contains("plain text") && refused.message().contains("https://"),
        "the refusal says why and what to do: {refused:?}"
    );
    assert!(endpoints(&mut registry).await.is_empty());
    registry
        .register_broker(register("broker-a", "https://10.0.0.7:50061"))
        .await
        .expect("an https:// endpoint");

    // A configured broker is held to the same rule: session-api does not start.
    let refused = start_session_api_with(
        database.url(),
        &[("static", "http://10.0.0.8:50061".to_owned())],
        under_tls,
    )
    .stop()
    .await;
    assert!(
        refused.starts_with("failed") && refused.contains("plain text"),
        "{refused}"
    );

    // Unless a developer asks for plain text explicitly.
    let relaxed = start_session_api_with(
        database.url(),
        &[("static", "http://10.0.0.8:50061".to_owned())],
        |config| {
            under_tls(config);
            config.allow_plaintext_brokers = true;
        },
    );
    let channel = ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || {
        let endpoint = client_tls
            .endpoint(&format!("https://{}", relaxed.address))
            .expect("an https endpoint");
        async move { endpoint.connect().await.ok() }
    })
    .await
    .expect("session-api serves TLS");
    BrokerRegistryClient::with_interceptor(channel, auth(&broker_credential("broker-b")))
        .register_broker(register("broker-b", "http://10.0.0.9:50061"))
        .await
        .expect("plain text, allowed explicitly");
}
