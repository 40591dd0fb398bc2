//! A gateway serving TLS: the client reaches it with the CA it is given (session calls and a
//! terminal stream), and refuses it, saying why, when it is given no CA the system trusts, another
//! CA, or one that is no certificate.

use ptyhub_client::{Client, ConnectOptions, Error, ExitStatus};
use ptyhub_test_support::error_chain;
use ptyhub_test_support::stack::TestStack;
use ptyhub_test_support::tls::TestCertificates;

fn trusting(ca_pem: &str) -> ConnectOptions {
    ConnectOptions {
        ca_certificate: Some(ca_pem.as_bytes().to_vec()),
        ..ConnectOptions::default()
    }
}

#[tokio::test]
async fn an_https_gateway_is_reached_with_the_ca_the_client_is_given() {
    let certificates = TestCertificates::new();
    let stack = TestStack::builder()
        .gateway_tls(&certificates)
        .start()
        .await;
    assert!(
        stack.gateway_url.starts_with("https://"),
        "{}",
        stack.gateway_url
    );
    let client = Client::connect_with(
        &stack.gateway_url,
        &stack.admin_token,
        trusting(&certificates.ca_pem),
    )
    .await
    .expect("the gateway answers over TLS");
    let names: Vec<String> = client
        .instances()
        .await
        .expect("instances")
        .into_iter()
        .map(|instance| instance.name)
        .collect();
    assert_eq!(names, ["local"]);
    // A terminal stream (the gateway's Attach relay) over the same connection.
    let ran = client
        .exec_output(
            "local",
            vec!["sh".into(), "-c".into(), "echo over-tls; exit 4".into()],
        )
        .await
        .expect("exec over TLS");
    assert_eq!(ran.output, b"over-tls\n");
    assert_eq!(
        ran.status,
        ExitStatus {
            code: 4,
            signal: None
        }
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn a_gateway_certificate_the_client_cannot_trust_is_refused_with_the_reason() {
    let certificates = TestCertificates::new();
    let stack = TestStack::builder()
        .gateway_tls(&certificates)
        .start()
        .await;

    // The system's roots do not hold the test CA.
    let untrusted = Client::connect(&stack.gateway_url, &stack.admin_token)
        .await
        .expect_err("the system does not trust the test CA");
    assert!(
        matches!(untrusted, Error::Unreachable { .. }),
        "{untrusted:?}"
    );
    assert!(
        error_chain(&untrusted).contains("certificate"),
        "{}",
        error_chain(&untrusted)
    );

    let other = TestCertificates::new();
    let wrong = Client::connect_with(
        &stack.gateway_url,
        &stack.admin_token,
        trusting(&other.ca_pem),
    )
    .await
    .expect_err("another CA did not sign the gateway's certificate");
    assert!(matches!(wrong, Error::Unreachable { .. }), "{wrong:?}");
    assert!(
        error_chain(&wrong).contains("certificate"),
        "{}",
        error_chain(&wrong)
    );

    // A key is not a certificate: refused before any connection is tried.
    let key = std::fs::read_to_string(&certificates.key).expect("the key file");
    let not_a_certificate =
        Client::connect_with(&stack.gateway_url, &stack.admin_token, trusting(&key))
            .await
            .expect_err("a key is no CA");
    assert!(
        matches!(not_a_certificate, Error::InvalidCaCertificate(_)),
        "{not_a_certificate:?}"
    );
    assert!(
        error_chain(&not_a_certificate).contains("no PEM certificate"),
        "{}",
        error_chain(&not_a_certificate)
    );
    stack.shutdown().await;
}
