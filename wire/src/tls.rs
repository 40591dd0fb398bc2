//! TLS on every ptyhub hop, set up once: PEM files read at start into a [`TlsConfig`], which
//! makes tonic's server side (a broker's and session-api's gRPC), a rustls server config (the
//! gateway's one public port, HTTPS, WSS and gRPC together), and the client side of every call a
//! service makes ([`TlsConfig::endpoint`]: `https://` URLs are dialled with TLS, trusting the
//! configured CA; `http://` stays plain). Mutual TLS is an option: a server can require a client
//! certificate the CA signed, and a client presents its identity when it has one.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use secrecy::{ExposeSecret, SecretSlice};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig};

/// The files a service's TLS comes from, as its flags name them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain this service serves with (PEM).
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub key: Option<PathBuf>,
    /// The CA certificates this service trusts: for the `https://` services it calls and, with
    /// `require_client_cert`, for its own clients.
    pub ca: Option<PathBuf>,
    /// Serve only clients that present a certificate the CA signed (mutual TLS).
    pub require_client_cert: bool,
    /// The certificate this service presents when it calls another (mutual TLS); default
    /// `cert`.
    pub client_cert: Option<PathBuf>,
    /// Its key; default `key`.
    pub client_key: Option<PathBuf>,
}

/// Why TLS could not be set up. Each names the setting to fix.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {setting} {path}: {source}")]
    Read {
        setting: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{setting} {path} holds no {what}")]
    NotPem {
        setting: &'static str,
        path: PathBuf,
        what: &'static str,
    },
    #[error("{given} needs {missing} too")]
    Incomplete {
        given: &'static str,
        missing: &'static str,
    },
    #[error("tls_cert and tls_key do not make a usable identity: {0}")]
    Identity(String),
    #[error("{url} is https:// but no tls_ca is configured to trust its certificate")]
    NoCaForHttps { url: String },
    #[error("{url:?} is not a valid URL: {source}")]
    Url {
        url: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("tls settings for {url}: {source}")]
    Client {
        url: String,
        #[source]
        source: tonic::transport::Error,
    },
}

/// A certificate chain and its key, in PEM.
#[derive(Clone)]
struct PemIdentity {
    cert: Vec<u8>,
    key: SecretSlice<u8>,
}

impl PemIdentity {
    fn tonic(&self) -> Identity {
        Identity::from_pem(&self.cert, self.key.expose_secret())
    }
}

/// A service's TLS, read and checked. [`TlsConfig::plain`] is none at all.
#[derive(Clone, Default)]
pub struct TlsConfig {
    identity: Option<PemIdentity>,
    client_identity: Option<PemIdentity>,
    ca: Option<Vec<u8>>,
    require_client_cert: bool,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("serves_tls", &self.identity.is_some())
            .field("client_identity", &self.client_identity.is_some())
            .field("ca", &self.ca.is_some())
            .field("require_client_cert", &self.require_client_cert)
            .finish()
    }
}

impl TlsConfig {
    /// No TLS: plain HTTP/2 on loopback or inside a trusted network.
    pub fn plain() -> Self {
        Self::default()
    }

    /// Reads and checks the files; a certificate without its key (or the other way round), or
    /// client certificates required without a CA to check them, is refused.
    pub fn from_files(files: &TlsFiles) -> Result<Self, TlsError> {
        let identity = read_identity(
            ("tls_cert", files.cert.as_deref()),
            ("tls_key", files.key.as_deref()),
        )?;
        let client_identity = match read_identity(
            ("tls_client_cert", files.client_cert.as_deref()),
            ("tls_client_key", files.client_key.as_deref()),
        )? {
            Some(identity) => Some(identity),
            None => identity.clone(),
        };
        let ca = match files.ca.as_deref() {
            Some(path) => {
                let pem = read("tls_ca", path)?;
                check_certificates("tls_ca", path, &pem)?;
                Some(pem)
            }
            None => None,
        };
        if files.require_client_cert && ca.is_none() {
            return Err(TlsError::Incomplete {
                given: "tls_client_auth",
                missing: "tls_ca",
            });
        }
        if files.require_client_cert && identity.is_none() {
            return Err(TlsError::Incomplete {
                given: "tls_client_auth",
                missing: "tls_cert and tls_key",
            });
        }
        Ok(Self {
            identity,
            client_identity,
            ca,
            require_client_cert: files.require_client_cert,
        })
    }

    /// The same settings from PEM text (tests, and programs that hold the PEM themselves).
    pub fn from_pem(
        identity: Option<(&str, &str)>,
        ca: Option<&str>,
        require_client_cert: bool,
    ) -> Self {
        let identity = identity.map(|(cert, key)| PemIdentity {
            cert: cert.as_bytes().to_vec(),
            key: key.as_bytes().to_vec().into(),
        });
        Self {
            client_identity: identity.clone(),
            identity,
            ca: ca.map(|ca| ca.as_bytes().to_vec()),
            require_client_cert,
        }
    }

    /// Whether this service's server side is TLS.
    pub fn serves_tls(&self) -> bool {
        self.identity.is_some()
    }

    /// tonic's server side; `None` serves plain.
    pub fn tonic_server(&self) -> Option<ServerTlsConfig> {
        let identity = self.identity.as_ref()?;
        let mut config = ServerTlsConfig::new().identity(identity.tonic());
        if self.require_client_cert
            && let Some(ca) = &self.ca
        {
            config = config
                .client_ca_root(Certificate::from_pem(ca))
                .client_auth_optional(false);
        }
        Some(config)
    }

    /// A rustls server config for a port that serves HTTP/1.1 and HTTP/2 (ALPN both), as the
    /// gateway's does; `None` serves plain.
    pub fn rustls_server(&self) -> Result<Option<Arc<rustls::ServerConfig>>, TlsError> {
        let Some(identity) = &self.identity else {
            return Ok(None);
        };
        let chain = CertificateDer::pem_slice_iter(&identity.cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| TlsError::Identity(error.to_string()))?;
        let key = PrivateKeyDer::from_pem_slice(identity.key.expose_secret())
            .map_err(|error| TlsError::Identity(error.to_string()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| TlsError::Identity(error.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|error| TlsError::Identity(error.to_string()))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Some(Arc::new(config)))
    }

    /// An endpoint for `url`: with TLS trusting the configured CA (and this service's client
    /// identity, for servers that require one) when it is `https://`, plain when `http://`.
    pub fn endpoint(&self, url: &str) -> Result<Endpoint, TlsError> {
        let endpoint = Endpoint::from_shared(url.to_owned()).map_err(|source| TlsError::Url {
            url: url.to_owned(),
            source,
        })?;
        if !url.starts_with("https://") {
            return Ok(endpoint);
        }
        let ca = self.ca.as_ref().ok_or_else(|| TlsError::NoCaForHttps {
            url: url.to_owned(),
        })?;
        let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
        if let Some(identity) = &self.client_identity {
            config = config.identity(identity.tonic());
        }
        endpoint
            .tls_config(config)
            .map_err(|source| TlsError::Client {
                url: url.to_owned(),
                source,
            })
    }
}

fn read(setting: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        setting,
        path: path.to_owned(),
        source,
    })
}

/// Checks that a file a setting names holds certificates, every one of them readable.
fn check_certificates(setting: &'static str, path: &Path, pem: &[u8]) -> Result<(), TlsError> {
    pem_certificate_count(pem)
        .map(|_| ())
        .map_err(|_| TlsError::NotPem {
            setting,
            path: path.to_owned(),
            what: "PEM certificate",
        })
}

/// Why a PEM bundle that should hold certificates cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PemCertificatesError {
    #[error("it holds no PEM certificate (a \"-----BEGIN CERTIFICATE-----\" block)")]
    None,
    #[error("a PEM certificate in it cannot be read: {0}")]
    Unreadable(String),
}

/// How many certificates a PEM bundle holds; an error when none, or when one is damaged.
/// Other PEM blocks (a key next to the certificate) are skipped, as TLS libraries skip them.
pub fn pem_certificate_count(pem: &[u8]) -> Result<usize, PemCertificatesError> {
    let mut count = 0;
    for certificate in CertificateDer::pem_slice_iter(pem) {
        certificate.map_err(|error| PemCertificatesError::Unreadable(error.to_string()))?;
        count += 1;
    }
    if count == 0 {
        return Err(PemCertificatesError::None);
    }
    Ok(count)
}

fn read_identity(
    (cert_setting, cert): (&'static str, Option<&Path>),
    (key_setting, key): (&'static str, Option<&Path>),
) -> Result<Option<PemIdentity>, TlsError> {
    let (cert_path, key_path) = match (cert, key) {
        (None, None) => return Ok(None),
        (Some(_), None) => {
            return Err(TlsError::Incomplete {
                given: cert_setting,
                missing: key_setting,
            });
        }
        (None, Some(_)) => {
            return Err(TlsError::Incomplete {
                given: key_setting,
                missing: cert_setting,
            });
        }
        (Some(cert), Some(key)) => (cert, key),
    };
    let cert = read(cert_setting, cert_path)?;
    check_certificates(cert_setting, cert_path, &cert)?;
    let key = read(key_setting, key_path)?;
    if PrivateKeyDer::from_pem_slice(&key).is_err() {
        return Err(TlsError::NotPem {
            setting: key_setting,
            path: key_path.to_owned(),
            what: "PEM private key",
        });
    }
    Ok(Some(PemIdentity {
        cert,
        key: key.into(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write a test file");
        path
    }

    fn self_signed() -> (String, String) {
        let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])
            .expect("a test certificate");
        (certified.cert.pem(), certified.signing_key.serialize_pem())
    }

    #[test]
    fn halves_of_an_identity_and_mtls_without_a_ca_are_refused() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (cert, key) = self_signed();
        let cert = write(dir.path(), "cert.pem", &cert);
        let key = write(dir.path(), "key.pem", &key);
        let only_cert = TlsConfig::from_files(&TlsFiles {
            cert: Some(cert.clone()),
            ..TlsFiles::default()
        })
        .unwrap_err();
        assert!(only_cert.to_string().contains("tls_key"), "{only_cert}");
        let no_ca = TlsConfig::from_files(&TlsFiles {
            cert: Some(cert.clone()),
            key: Some(key.clone()),
            require_client_cert: true,
            ..TlsFiles::default()
        })
        .unwrap_err();
        assert!(no_ca.to_string().contains("tls_ca"), "{no_ca}");
        let not_pem = write(dir.path(), "garbage.pem", "not a certificate");
        let garbage = TlsConfig::from_files(&TlsFiles {
            cert: Some(not_pem),
            key: Some(key.clone()),
            ..TlsFiles::default()
        })
        .unwrap_err();
        assert!(garbage.to_string().contains("tls_cert"), "{garbage}");

        let served = TlsConfig::from_files(&TlsFiles {
            cert: Some(cert.clone()),
            key: Some(key),
            ca: Some(cert),
            ..TlsFiles::default()
        })
        .expect("a usable identity");
        assert!(served.serves_tls());
        assert!(served.tonic_server().is_some());
        assert!(served.rustls_server().expect("a rustls config").is_some());
        assert!(!format!("{served:?}").contains("PRIVATE"));
    }

    #[test]
    fn https_needs_a_ca_and_http_stays_plain() {
        let plain = TlsConfig::plain();
        assert!(!plain.serves_tls());
        assert!(plain.tonic_server().is_none());
        assert!(plain.endpoint("http://127.0.0.1:1").is_ok());
        let refused = plain.endpoint("https://127.0.0.1:1").unwrap_err();
        assert!(
            matches!(refused, TlsError::NoCaForHttps { .. }),
            "{refused}"
        );
        let (cert, _key) = self_signed();
        let trusting = TlsConfig::from_pem(None, Some(&cert), false);
        assert!(trusting.endpoint("https://localhost:1").is_ok());
    }
}
