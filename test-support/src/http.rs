//! HTTP clients for tests. The workspace's reqwest has rustls without a crypto provider of its
//! own, so a client it configured by itself would need one installed process-wide; these carry
//! a rustls config on ring instead, and work in any test, in any order.

use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

/// A client builder for plain-HTTP calls (`https://` fails: no root is trusted).
pub fn client() -> reqwest::ClientBuilder {
    with_roots(rustls::RootCertStore::empty())
}

/// A client builder that trusts the certificates of `ca_pem` alone, for a server the test
/// made a CA for (`crate::tls::TestCertificates`).
pub fn client_trusting(ca_pem: &str) -> reqwest::ClientBuilder {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(certificate.expect("a PEM certificate"))
            .expect("a CA certificate");
    }
    assert!(!roots.is_empty(), "no certificate in the CA's PEM");
    with_roots(roots)
}

fn with_roots(roots: rustls::RootCertStore) -> reqwest::ClientBuilder {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring's protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    reqwest::Client::builder().tls_backend_preconfigured(config)
}
