//! A ptyhub whose services are out of the client's reach, as in a cluster: broker, session-api
//! (SQLite) and gateway run in a network namespace of their own, and only the gateway's port is
//! reachable from the test's namespace, through an ingress relay the test holds (what a
//! Kubernetes Ingress or a published port is). The broker listens on the namespace's loopback,
//! which no process outside it can connect to, whatever address it is given.
//!
//! The namespace belongs to one thread ([`Namespace`]): it calls `unshare(CLONE_NEWNET)`, which
//! moves that thread alone, brings the namespace's loopback up, and runs a tokio runtime on
//! which every socket and child process the stack needs is made, so they all live there. The
//! ingress listener is bound in the test's namespace and handed to that runtime, so it accepts
//! there and connects in the namespace.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use tempfile::TempDir;

use crate::binaries::binary;
use crate::cluster::{
    API_TOKEN, GATEWAY_TOKEN, PATIENCE, SESSION_API_TOKEN, TICKET_SIGNING_KEY, broker_id,
    broker_token, ticket_public_key,
};
use crate::front::Front;
use crate::process::Service;

/// A thread in a network namespace of its own, with a runtime to run work there.
#[derive(Debug)]
pub struct Namespace {
    handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Namespace {
    /// Makes the namespace (root only) with its loopback up.
    pub fn create() -> anyhow::Result<Self> {
        let (ready, started) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("network-namespace".into())
            .spawn(move || {
                let runtime = (|| -> anyhow::Result<tokio::runtime::Runtime> {
                    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
                        .context("unshare(CLONE_NEWNET)")?;
                    // A child forked from this thread starts in its namespace.
                    let status = std::process::Command::new("ip")
                        .args(["link", "set", "lo", "up"])
                        .status()
                        .context("cannot run `ip link set lo up`")?;
                    if !status.success() {
                        bail!("`ip link set lo up` failed: {status}");
                    }
                    Ok(tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?)
                })();
                match runtime {
                    Ok(runtime) => {
                        let _ = ready.send(Ok(runtime.handle().clone()));
                        runtime.block_on(async {
                            let _ = stopped.await;
                        });
                    }
                    Err(error) => {
                        let _ = ready.send(Err(error));
                    }
                }
            })?;
        let handle = started
            .recv()
            .context("the namespace thread ended before it started")??;
        Ok(Self {
            handle,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Runs `work` in the namespace: every socket and child process it makes is there.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
    ) -> T {
        self.handle
            .spawn(work)
            .await
            .expect("work in the namespace panicked")
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// broker, session-api and gateway in a [`Namespace`], the gateway reachable through
/// [`IsolatedStack::gateway_url`] alone. Dropping it ends every process.
#[derive(Debug)]
pub struct IsolatedStack {
    pub broker: Service,
    pub session_api: Service,
    pub gateway: Service,
    ingress: Front,
    logs: TempDir,
    session_api_endpoint: String,
    // Last: the services and the ingress go before their namespace.
    namespace: Namespace,
}

impl IsolatedStack {
    /// Starts the three services in a new namespace and waits until the gateway, reached
    /// through the ingress, reports every broker up.
    pub async fn start() -> anyhow::Result<Self> {
        let namespace = Namespace::create()?;
        let logs = tempfile::tempdir()?;
        let log_dir = logs.path().to_owned();
        let database = format!("sqlite://{}?mode=rwc", log_dir.join("records.db").display());
        let api_binary = binary("session-api")?;
        let session_api = namespace
            .run({
                let log_dir = log_dir.clone();
                async move {
                    Service::start_with_env(
                        "session-api",
                        &api_binary,
                        &[format!("--database-url={database}")],
                        // Secrets come from variables, never from the command line.
                        &[
                            (
                                "PTYHUB_SESSION_API_SERVICE_TOKEN".to_owned(),
                                SESSION_API_TOKEN.to_owned(),
                            ),
                            (
                                "PTYHUB_SESSION_API_GATEWAY_TOKENS".to_owned(),
                                GATEWAY_TOKEN.to_owned(),
                            ),
                            (
                                "PTYHUB_SESSION_API_BROKER_TOKENS".to_owned(),
                                format!("{}={}", broker_id(0), broker_token(0)),
                            ),
                            (
                                "PTYHUB_SESSION_API_TICKET_SIGNING_KEY".to_owned(),
                                TICKET_SIGNING_KEY.to_owned(),
                            ),
                        ],
                        &log_dir,
                    )
                    .await
                }
            })
            .await?;
        let session_api_endpoint = session_api.endpoint();
        let broker = Self::start_broker(&namespace, &log_dir, &session_api_endpoint).await?;
        let gateway = Self::start_gateway_in(&namespace, &log_dir, &session_api_endpoint).await?;
        // Bound here, in the test's namespace; served from the stack's.
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let ingress = namespace.run(async move { Front::serve(listener) }).await?;
        ingress.route_to(gateway.address());
        let stack = Self {
            broker,
            session_api,
            gateway,
            ingress,
            logs,
            session_api_endpoint,
            namespace,
        };
        stack.wait_healthy().await?;
        Ok(stack)
    }

    async fn start_broker(
        namespace: &Namespace,
        log_dir: &std::path::Path,
        session_api: &str,
    ) -> anyhow::Result<Service> {
        let binary = binary("pty-broker")?;
        let data_dir = log_dir.join("broker-data");
        std::fs::create_dir_all(&data_dir)?;
        let args = vec![
            format!("--session-api={session_api}"),
            format!("--broker-id={}", broker_id(0)),
            "--backends=local".to_owned(),
            "--kill-grace=500ms".to_owned(),
            format!("--data-dir={}", data_dir.display()),
        ];
        let log_dir = log_dir.to_owned();
        namespace
            .run(async move {
                let secrets = [
                    ("PTYHUB_BROKER_SERVICE_TOKEN".to_owned(), broker_token(0)),
                    (
                        "PTYHUB_BROKER_TICKET_PUBLIC_KEY".to_owned(),
                        ticket_public_key(),
                    ),
                ];
                Service::start_with_env("broker", &binary, &args, &secrets, &log_dir).await
            })
            .await
    }

    async fn start_gateway_in(
        namespace: &Namespace,
        log_dir: &std::path::Path,
        session_api: &str,
    ) -> anyhow::Result<Service> {
        let binary = binary("gateway")?;
        let args = vec![
            format!("--session-api={session_api}"),
            "--shutdown-grace=5s".to_owned(),
        ];
        let log_dir = log_dir.to_owned();
        namespace
            .run(async move {
                let secrets = [
                    (
                        "PTYHUB_GATEWAY_SERVICE_TOKEN".to_owned(),
                        GATEWAY_TOKEN.to_owned(),
                    ),
                    ("PTYHUB_GATEWAY_API_TOKENS".to_owned(), API_TOKEN.to_owned()),
                ];
                Service::start_with_env("gateway", &binary, &args, &secrets, &log_dir).await
            })
            .await
    }

    /// The only address a client gets: the ingress in front of the gateway.
    pub fn gateway_url(&self) -> String {
        self.ingress.endpoint()
    }

    /// `127.0.0.1:<port>` of the ingress.
    pub fn gateway_address(&self) -> String {
        self.gateway_url().trim_start_matches("http://").to_owned()
    }

    /// The user token the gateway accepts (an admin over every instance).
    pub fn token(&self) -> &'static str {
        API_TOKEN
    }

    /// Where the logs are.
    pub fn log_dir(&self) -> PathBuf {
        self.logs.path().to_owned()
    }

    /// Kills the gateway (SIGKILL: its clients' connections break), starts a new one in the
    /// namespace, and points the ingress at it once it is healthy.
    pub async fn kill_and_restart_gateway(&mut self) -> anyhow::Result<()> {
        self.gateway.kill()?;
        self.gateway =
            Self::start_gateway_in(&self.namespace, &self.log_dir(), &self.session_api_endpoint)
                .await?;
        self.ingress.route_to(self.gateway.address());
        self.wait_healthy().await
    }

    /// Waits until `/healthz` through the ingress lists a broker and says all is well.
    pub async fn wait_healthy(&self) -> anyhow::Result<()> {
        let http = ptyhub_test_support::http::client()
            .timeout(Duration::from_secs(10))
            .build()?;
        let url = format!("{}/healthz", self.gateway_url());
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            // With the admin's credential: only then does `/healthz` list the brokers.
            if let Ok(response) = http.get(&url).bearer_auth(API_TOKEN).send().await
                && response.status() == reqwest::StatusCode::OK
                && response
                    .text()
                    .await
                    .unwrap_or_default()
                    .contains("\"brokers\":[{")
            {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("the isolated stack never became healthy:\n{}", self.logs());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every process's log, for failure messages.
    pub fn logs(&self) -> String {
        [&self.broker, &self.session_api, &self.gateway]
            .iter()
            .map(|service| format!("--- {}\n{}", service.name(), service.log()))
            .collect()
    }
}
