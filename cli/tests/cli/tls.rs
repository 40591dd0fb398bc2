//! `ptyhub up --tls-cert/--tls-key` serves HTTPS, and the client commands reach it with the CA
//! of `--ca-cert` (gRPC for the session commands, HTTPS for a recording's download); without
//! that CA, with another CA, or with a file that holds no certificate, each says why in one line.

use ptyhub_test_support::tls::TestCertificates;

use crate::support::{Up, one_error_line};

#[test]
fn up_serves_https_and_the_client_commands_trust_the_ca_they_are_given() {
    let certificates = TestCertificates::new();
    let up = Up::start_with_tls(&certificates);
    assert!(
        up.stdout()
            .contains(&format!("https://{}/?token=", up.address)),
        "{}",
        up.stdout()
    );
    let server = std::fs::read_to_string(up.data_dir().join("server")).expect("the server file");
    assert_eq!(server.trim(), format!("https://{}", up.address));

    let ca = certificates.ca.to_str().expect("a UTF-8 path");
    let created = up.run_ok(&["--ca-cert", ca, "new", "local", "--name", "over-tls"]);
    let listed = up.run_ok(&["--ca-cert", ca, "ls", "local"]);
    assert!(
        listed.contains("over-tls"),
        "{listed}\n(new printed {created})"
    );
    // The same CA from the environment, as scripts set it.
    let mut command = up.ptyhub();
    command.env("PTYHUB_CA_CERT", ca).args(["ls", "local"]);
    let from_env = crate::support::run_bounded(&mut command, None);
    assert!(from_env.status.success(), "{from_env:?}");

    // The download goes over HTTPS with the same CA: the gateway answers, here with a 404.
    let missing = up.run(&[
        "--ca-cert",
        ca,
        "recording",
        "local",
        "00000000-0000-4000-8000-000000000000",
    ]);
    let line = one_error_line(&missing);
    assert!(
        line.contains("cannot download the recording") && line.contains("404"),
        "{line}"
    );
}

#[test]
fn an_https_server_the_client_cannot_trust_is_refused_with_the_reason() {
    let certificates = TestCertificates::new();
    let up = Up::start_with_tls(&certificates);

    // The system's roots do not hold the test CA.
    let untrusted = one_error_line(&up.run(&["ls", "local"]));
    // The hint, and the handshake's own reason after it.
    assert!(
        untrusted.contains("cannot reach ptyhub")
            && untrusted.contains("pass --ca-cert")
            && untrusted.contains("invalid peer certificate"),
        "{untrusted}"
    );
    let download =
        one_error_line(&up.run(&["recording", "local", "00000000-0000-4000-8000-000000000000"]));
    assert!(download.contains("cannot reach ptyhub"), "{download}");

    // Another CA is not this server's.
    let other = TestCertificates::new();
    let other_ca = other.ca.to_str().expect("a UTF-8 path");
    let wrong = one_error_line(&up.run(&["--ca-cert", other_ca, "ls", "local"]));
    assert!(wrong.contains("invalid peer certificate"), "{wrong}");

    // A file that holds no certificate (here the server's private key) is named before any
    // connection is tried, and so is one that is not there.
    let key = certificates.key.to_str().expect("a UTF-8 path");
    let not_a_certificate = one_error_line(&up.run(&["--ca-cert", key, "ls", "local"]));
    assert!(
        not_a_certificate.contains("--ca-cert") && not_a_certificate.contains("no PEM certificate"),
        "{not_a_certificate}"
    );
    let absent = one_error_line(&up.run(&["--ca-cert", "/nonexistent/ca.pem", "ls", "local"]));
    assert!(
        absent.contains("cannot read --ca-cert /nonexistent/ca.pem"),
        "{absent}"
    );
}

#[test]
fn up_refuses_a_certificate_without_its_key_and_a_file_that_is_no_certificate() {
    let certificates = TestCertificates::new();
    let data_dir = tempfile::tempdir().expect("data dir");
    let up_with = |extra: &[&str]| {
        let mut command = crate::support::ptyhub_command();
        command
            .arg("--data-dir")
            .arg(data_dir.path())
            .args(["up", "--listen", "127.0.0.1:0", "--backend", "local"])
            .args(extra);
        crate::support::run_bounded(&mut command, None)
    };
    let cert = certificates.cert.to_str().expect("a UTF-8 path");
    let key = certificates.key.to_str().expect("a UTF-8 path");

    let alone = up_with(&["--tls-cert", cert]);
    assert_eq!(alone.status.code(), Some(2), "{alone:?}");
    let stderr = String::from_utf8_lossy(&alone.stderr);
    assert!(stderr.contains("--tls-key"), "{stderr}");

    // The key where the certificate belongs.
    let swapped = up_with(&["--tls-cert", key, "--tls-key", key]);
    assert!(!swapped.status.success(), "{swapped:?}");
    let stderr = String::from_utf8_lossy(&swapped.stderr);
    assert!(stderr.contains("tls_cert"), "{stderr}");
}
