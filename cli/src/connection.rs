//! How the client commands reach ptyhub: the gateway URL and the token, from flags, environment
//! or the data directory that `ptyhub up` writes, and the `ptyhub-client` built from them.
//!
//! Everything goes through the gateway, terminal streams included (its `PtyBroker/Attach`
//! relay): the CLI never needs a broker's or session-api's address.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use ptyhub_client::{Client, ConnectOptions};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use rustls_platform_verifier::BuilderVerifierExt as _;

/// The file in the data directory that holds the token `ptyhub up` generated.
pub const TOKEN_FILE: &str = "token";
/// The file in the data directory that holds the URL `ptyhub up` serves on.
pub const SERVER_FILE: &str = "server";

/// Where the server is and how to authenticate, as the user gave them.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectionArgs {
    /// The ptyhub gateway URL. Default: the URL `ptyhub up` wrote to the data dir, else
    /// http://127.0.0.1:8080.
    #[arg(long, env = "PTYHUB_SERVER", global = true)]
    pub server: Option<String>,
    /// The API token. Default: the token `ptyhub up` wrote to the data dir.
    #[arg(long, env = "PTYHUB_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// A file holding the API token, so that it need not be on the command line (where any user
    /// of the machine reads it in /proc).
    #[arg(long, env = "PTYHUB_TOKEN_FILE", global = true)]
    pub token_file: Option<PathBuf>,
    /// The CA certificate (PEM) an `https://` server's certificate must chain to, instead of
    /// the system's roots: a private CA, or the server's own self-signed certificate.
    #[arg(long, env = "PTYHUB_CA_CERT", global = true)]
    pub ca_cert: Option<PathBuf>,
    /// Where `ptyhub up` keeps its database, token and server URL.
    #[arg(
        long,
        env = "PTYHUB_DATA_DIR",
        global = true,
        default_value = ".ptyhub"
    )]
    pub data_dir: PathBuf,
}

impl ConnectionArgs {
    pub fn server_url(&self) -> String {
        self.server
            .clone()
            .or_else(|| read_trimmed(&self.data_dir.join(SERVER_FILE)))
            .unwrap_or_else(|| "http://127.0.0.1:8080".to_owned())
    }

    /// The token the user gave (`--token`, `PTYHUB_TOKEN`, or the file of `--token-file`,
    /// `PTYHUB_TOKEN_FILE`), if any.
    pub fn given_token(&self) -> Result<Option<String>> {
        Ok(
            ptyhub_wire::secret_from("token", self.token.clone(), self.token_file.as_deref())?
                .map(|token| token.trim().to_owned()),
        )
    }

    pub fn token(&self) -> Result<String> {
        if let Some(token) = self.given_token()? {
            return Ok(token);
        }
        read_trimmed(&self.data_dir.join(TOKEN_FILE)).with_context(|| {
            format!(
                "no token: set PTYHUB_TOKEN or PTYHUB_TOKEN_FILE, or run `ptyhub up` with --data-dir {}",
                self.data_dir.display()
            )
        })
    }

    /// The certificates of `--ca-cert`, checked: a file that holds none is an error here, not
    /// a failed handshake later.
    pub fn ca_certificate(&self) -> Result<Option<Vec<u8>>> {
        let Some(path) = &self.ca_cert else {
            return Ok(None);
        };
        let pem = std::fs::read(path)
            .with_context(|| format!("cannot read --ca-cert {}", path.display()))?;
        ptyhub_wire::pem_certificate_count(&pem)
            .with_context(|| format!("--ca-cert {} cannot be used", path.display()))?;
        Ok(Some(pem))
    }

    /// An HTTP client for the gateway's REST API (a recording's download), which trusts what
    /// [`ConnectionArgs::client`] trusts: the CA of `--ca-cert` alone, else the system's roots.
    pub fn http_client(&self) -> Result<reqwest::Client> {
        let https = self.server_url().starts_with("https://");
        let tls = tls_config(self.ca_certificate()?.as_deref(), https)?;
        reqwest::Client::builder()
            .user_agent(user_agent())
            .tls_backend_preconfigured(tls)
            .build()
            .context("cannot set up the HTTP client")
    }

    /// A client of the gateway: every command needs its URL and the token alone (and the CA
    /// of an `https://` gateway whose certificate the system does not trust).
    pub async fn client(&self) -> Result<Client> {
        // The token first: without one there is no point in reaching the server.
        let token = self.token()?;
        let server = self.server_url();
        let options = ConnectOptions {
            user_agent: Some(user_agent()),
            ca_certificate: self.ca_certificate()?,
        };
        Client::connect_with(&server, &token, options)
            .await
            .map_err(|error| match error {
                ptyhub_client::Error::InvalidToken => anyhow::Error::new(error),
                other => anyhow::Error::new(other).context(unreachable(&server)),
            })
    }
}

/// The TLS of [`ConnectionArgs::http_client`]: rustls on ring, given to reqwest whole so that no
/// process-wide crypto provider is needed. With `ca_certificate` its certificates are the only
/// roots (as `curl --cacert`); without, the system's roots through the platform verifier, read
/// only for an `https://` server (a plain-HTTP one needs none, also where the system has none).
fn tls_config(ca_certificate: Option<&[u8]>, https: bool) -> Result<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("cannot set up TLS")?;
    let builder = match ca_certificate {
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for certificate in CertificateDer::pem_slice_iter(pem) {
                roots
                    .add(certificate.context("--ca-cert cannot be used")?)
                    .context("--ca-cert cannot be used")?;
            }
            builder.with_root_certificates(roots)
        }
        None if https => builder.with_platform_verifier().context(
            "cannot use the system's root certificates (a CA may be given with --ca-cert)",
        )?,
        None => builder.with_root_certificates(rustls::RootCertStore::empty()),
    };
    let mut config = builder.with_no_client_auth();
    // What reqwest offers when it builds the config itself: HTTP/2, else HTTP/1.1.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The first words of every "cannot reach" error, with what the user can check.
pub fn unreachable(server: &str) -> String {
    let hint = if server.starts_with("https://") {
        "is `ptyhub up` running? else pass --server; for a certificate the system does not trust, pass --ca-cert"
    } else {
        "is `ptyhub up` running? else pass --server"
    };
    format!("cannot reach ptyhub at {server} ({hint})")
}

/// What the CLI calls itself in the gateway's audit trail.
pub fn user_agent() -> String {
    format!(
        "{}{}",
        ptyhub_wire::CLI_USER_AGENT_PREFIX,
        env!("CARGO_PKG_VERSION")
    )
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|text| text.trim().to_owned())
        .filter(|text| !text.is_empty())
}
