//! Certificates for tests of TLS: a CA of the test's own and a certificate it signed for
//! `127.0.0.1` and `localhost`, written as PEM files in a directory that lives as long as the
//! value.

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A test CA and a server certificate it signed; the files go away with the value.
#[derive(Debug)]
pub struct TestCertificates {
    /// The CA's certificate (PEM), the one clients are told to trust.
    pub ca: PathBuf,
    /// The server's certificate (PEM), for `127.0.0.1` and `localhost`.
    pub cert: PathBuf,
    /// The server certificate's private key (PEM).
    pub key: PathBuf,
    /// The CA's certificate as text.
    pub ca_pem: String,
    _dir: tempfile::TempDir,
}

impl TestCertificates {
    /// A new CA and a server certificate, made now.
    pub fn new() -> Self {
        let ca_key = KeyPair::generate().expect("a CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "ptyhub test CA");
        let ca = ca_params.self_signed(&ca_key).expect("the CA certificate");
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().expect("a server key");
        let params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("server certificate parameters");
        let cert = params
            .signed_by(&key, &issuer)
            .expect("a signed certificate");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let write = |name: &str, pem: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, pem).expect("write a PEM file");
            path
        };
        Self {
            ca: write("ca.pem", &ca.pem()),
            cert: write("cert.pem", &cert.pem()),
            key: write("key.pem", &key.serialize_pem()),
            ca_pem: ca.pem(),
            _dir: dir,
        }
    }
}

impl Default for TestCertificates {
    fn default() -> Self {
        Self::new()
    }
}
