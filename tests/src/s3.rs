//! A local S3-compatible server for the recordings tests: moto's server (`moto_server`, from
//! PyPI into the project's Python environment, `interop/requirements.txt`, which `cargo xtask
//! deps` installs) on 127.0.0.1 and a port the kernel chose, read back from `/proc` as for the
//! services. moto takes any credentials ([`S3Server::credentials`]) and checks no signature,
//! but it refuses to read unsigned requests, as S3 does for private objects.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::sockets::listening_addresses;

/// How long moto may take to listen (Python imports are slow on a busy machine).
const START_PATIENCE: Duration = Duration::from_secs(60);

/// A running `moto_server`; dropping it kills it.
#[derive(Debug)]
pub struct S3Server {
    child: Child,
    address: SocketAddr,
}

impl S3Server {
    /// Starts `moto_server` (at `ptyhub_test_support::environment::moto_server_path()`), logging to
    /// `log_dir/moto.log`.
    pub async fn start(log_dir: &Path) -> anyhow::Result<Self> {
        let log = std::fs::File::create(log_dir.join("moto.log"))?;
        let child = Command::new(ptyhub_test_support::environment::moto_server_path())
            .args(["-H", "127.0.0.1", "-p", "0"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start moto_server")?;
        let mut server = Self {
            child,
            address: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        let deadline = tokio::time::Instant::now() + START_PATIENCE;
        loop {
            let listening = listening_addresses(server.child.id())?;
            if let Some(address) = listening.first() {
                server.address = *address;
                return Ok(server);
            }
            if server.child.try_wait()?.is_some() {
                bail!("moto_server exited before listening");
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("moto_server did not listen within {START_PATIENCE:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Creates `bucket`.
    pub async fn create_bucket(&self, http: &reqwest::Client, bucket: &str) -> anyhow::Result<()> {
        let response = http
            .put(format!("{}/{bucket}", self.endpoint()))
            .send()
            .await?;
        if !response.status().is_success() {
            bail!("creating bucket {bucket}: {}", response.status());
        }
        Ok(())
    }

    /// The `--recordings` URL of `bucket` on this server, under `prefix`.
    pub fn recordings_url(&self, bucket: &str, prefix: &str) -> String {
        format!(
            "s3://{bucket}/{prefix}?endpoint={}&allow_http=true&region=us-east-1",
            self.endpoint()
        )
    }

    /// The environment that gives a client credentials moto takes.
    pub fn credentials() -> [(&'static str, &'static str); 2] {
        [
            ("AWS_ACCESS_KEY_ID", "ptyhub-test"),
            ("AWS_SECRET_ACCESS_KEY", "ptyhub-test-secret"),
        ]
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
