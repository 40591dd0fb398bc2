//! What session-api's integration tests share: a fresh database of either kind per test,
//! in-process session-api and pty-broker servers on 127.0.0.1:0, and clients that present the
//! service credential.

use std::net::SocketAddr;
use std::time::Duration;

use ptyhub_attach_ticket::TicketSigningKey;
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::broker::v1::pty_broker_client::PtyBrokerClient;
use ptyhub_proto::session::v1 as pb;
use ptyhub_proto::session::v1::broker_registry_client::BrokerRegistryClient;
use ptyhub_proto::session::v1::session_api_client::SessionApiClient;
use ptyhub_test_support::postgres::TestDatabase;
use ptyhub_wire::{BearerAuth, ServiceCredential};
use tempfile::TempDir;
use tokio::sync::oneshot;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// session-api's own credential: what brokers without a credential of their own (configured,
/// never registering: [`start_broker`]) accept on their control calls.
pub const SERVICE_TOKEN: &str = "test-service-token-0123456789";
/// The gateways' credential: what `SessionApi` accepts.
pub const GATEWAY_TOKEN: &str = "test-gateway-token-0123456789";
/// The brokers with a credential of their own ([`broker_credential`]) that every session-api of
/// these tests binds to their ids: the only ids that may register and heartbeat.
pub const REGISTERING_BROKERS: &[&str] = &[
    "self-registered",
    "silent",
    "never-registered",
    "broker-a",
    "broker-b",
];
/// session-api's ticket signing key in these tests (a key `openssl genpkey -algorithm ed25519`
/// made); the brokers get its public half.
pub const TICKET_SIGNING_KEY: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIHWNMxTbVRw/AVLdfmVYyH4XQ6hF/B3FI7dAl3HnzAoK
-----END PRIVATE KEY-----
";
/// Generous bound for things that happen asynchronously (events, reconnects): a liveness
/// bound, never a performance assertion.
pub const PATIENCE: Duration = Duration::from_secs(60);
/// How often a test that waits looks again.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Which database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A fresh, empty database, removed when dropped.
#[derive(Debug)]
pub enum FreshDatabase {
    /// The directory is removed, with the database file, when this is dropped.
    Sqlite {
        _directory: TempDir,
        url: String,
    },
    Postgres(TestDatabase),
}

impl FreshDatabase {
    /// A fresh database of `backend`, or `None` when PostgreSQL is unavailable outside CI
    /// (the test is then skipped with a printed reason).
    pub async fn create(backend: Backend) -> Option<Self> {
        ptyhub_test_support::init_test_logging();
        match backend {
            Backend::Sqlite => {
                let directory = tempfile::tempdir().expect("temporary directory");
                let url = format!(
                    "sqlite://{}?mode=rwc",
                    directory.path().join("session-api.db").display()
                );
                Some(FreshDatabase::Sqlite {
                    _directory: directory,
                    url,
                })
            }
            Backend::Postgres => {
                if !ptyhub_test_support::require(ptyhub_test_support::Requirement::Postgres) {
                    return None;
                }
                Some(FreshDatabase::Postgres(
                    TestDatabase::create()
                        .await
                        .expect("fresh PostgreSQL database"),
                ))
            }
        }
    }

    pub fn url(&self) -> &str {
        match self {
            FreshDatabase::Sqlite { url, .. } => url,
            FreshDatabase::Postgres(database) => database.url(),
        }
    }
}

/// Runs one async test body on both databases: `both_databases!(name, |backend| async {...})`
/// defines `mod name { sqlite, postgres }`.
macro_rules! both_databases {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                ($body)($crate::support::Backend::Sqlite).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                ($body)($crate::support::Backend::Postgres).await;
            }
        }
    };
}

/// A server running on a runtime of its own, so that a test can kill it as a crash would:
/// every task and connection dropped at once, nothing said to peers.
#[derive(Debug)]
pub struct Isolated {
    pub address: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
    shutdown: Option<oneshot::Sender<()>>,
    finished: Option<oneshot::Receiver<String>>,
}

impl Isolated {
    fn start<F>(serve: impl FnOnce(tokio::net::TcpListener, oneshot::Receiver<()>) -> F) -> Self
    where
        F: std::future::Future<Output = String> + Send + 'static,
    {
        Self::start_on(
            std::net::TcpListener::bind("127.0.0.1:0").expect("bind"),
            serve,
        )
    }

    fn start_on<F>(
        listener: std::net::TcpListener,
        serve: impl FnOnce(tokio::net::TcpListener, oneshot::Receiver<()>) -> F,
    ) -> Self
    where
        F: std::future::Future<Output = String> + Send + 'static,
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        listener.set_nonblocking(true).expect("nonblocking");
        let address = listener.local_addr().expect("address");
        let (shutdown, shutdown_requested) = oneshot::channel();
        let (done, finished) = oneshot::channel();
        let served = {
            let _entered = runtime.enter();
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            serve(listener, shutdown_requested)
        };
        runtime.spawn(async move {
            let outcome = served.await;
            let _ = done.send(outcome);
        });
        Self {
            address,
            runtime: Some(runtime),
            shutdown: Some(shutdown),
            finished: Some(finished),
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Asks for a graceful shutdown and waits for it; returns how the server ended.
    pub async fn stop(mut self) -> String {
        let _ = self.shutdown.take().expect("running").send(());
        tokio::time::timeout(PATIENCE, self.finished.take().expect("running"))
            .await
            .expect("server stops within the patience")
            .unwrap_or_else(|_| "server task vanished".into())
    }

    /// Ends the server as a crash would.
    pub fn kill(mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for Isolated {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

pub fn ticket_signing_key() -> TicketSigningKey {
    TicketSigningKey::from_pem(TICKET_SIGNING_KEY).expect("the test signing key")
}

/// The own credential of broker `broker_id`, which session-api binds to that id.
pub fn broker_credential(broker_id: &str) -> String {
    format!("test-broker-{broker_id}-token-0123456789")
}

/// What session-api presents on the control calls of broker `broker_id`, which has
/// [`broker_credential`] of its own: the credential derived from it.
pub fn broker_control_credential(broker_id: &str) -> String {
    ServiceCredential::new(broker_credential(broker_id))
        .expect("a valid broker credential")
        .broker_control_credential()
        .expose()
        .to_owned()
}

/// Binds `broker_id` to its [`broker_credential`] in a session-api's configuration.
pub fn bind_broker(config: &mut session_api::Config, broker_id: &str) {
    config
        .secrets
        .broker_tokens
        .push(session_api::config::BrokerCredential {
            broker_id: broker_id.to_owned(),
            credential: ServiceCredential::new(broker_credential(broker_id))
                .expect("a valid broker credential"),
        });
}

/// A real pty-broker with the local backend, configured in session-api and never registering,
/// without a credential of its own: its control calls take session-api's own.
pub fn start_broker() -> Isolated {
    start_broker_with(pty_broker::Config::new(
        SERVICE_TOKEN.parse().expect("a valid service token"),
        ticket_signing_key().verifying_key(),
    ))
}

/// A real pty-broker with the local backend and [`broker_credential`]`(broker_id)` of its own:
/// its control calls take only [`broker_control_credential`]`(broker_id)`.
pub fn start_broker_of_its_own(broker_id: &str) -> Isolated {
    start_broker_with(own_broker_config(broker_id))
}

/// A real pty-broker with the local backend that registers itself as `broker_id` with the
/// session-api at `session_api` and heartbeats, with a credential of its own.
pub fn start_registering_broker(broker_id: &str, session_api: &str) -> Isolated {
    let mut config = own_broker_config(broker_id);
    config.session_api = Some(session_api.to_owned());
    start_broker_with(config)
}

fn own_broker_config(broker_id: &str) -> pty_broker::Config {
    let mut config = pty_broker::Config::with_own_credential(
        broker_credential(broker_id)
            .parse()
            .expect("a valid broker credential"),
        ticket_signing_key().verifying_key(),
    );
    config.broker_id = broker_id.to_owned();
    config
}

fn start_broker_with(config: pty_broker::Config) -> Isolated {
    Isolated::start(move |listener, shutdown| async move {
        match pty_broker::run(config, listener, async {
            let _ = shutdown.await;
        })
        .await
        {
            Ok(()) => "stopped".to_owned(),
            Err(error) => format!("failed: {error}"),
        }
    })
}

/// session-api on `database_url` with the static brokers `id=endpoint`.
pub fn start_session_api(database_url: &str, brokers: &[(&str, String)]) -> Isolated {
    start_session_api_on(
        std::net::TcpListener::bind("127.0.0.1:0").expect("bind"),
        database_url,
        brokers,
    )
}

/// [`start_session_api`] on a listener the test bound.
pub fn start_session_api_on(
    listener: std::net::TcpListener,
    database_url: &str,
    brokers: &[(&str, String)],
) -> Isolated {
    start_session_api_configured(listener, database_url, brokers, |_| {})
}

/// [`start_session_api`] with settings of the test's own, applied last.
pub fn start_session_api_with(
    database_url: &str,
    brokers: &[(&str, String)],
    configure: impl FnOnce(&mut session_api::Config),
) -> Isolated {
    start_session_api_configured(
        std::net::TcpListener::bind("127.0.0.1:0").expect("bind"),
        database_url,
        brokers,
        configure,
    )
}

fn start_session_api_configured(
    listener: std::net::TcpListener,
    database_url: &str,
    brokers: &[(&str, String)],
    configure: impl FnOnce(&mut session_api::Config),
) -> Isolated {
    let mut config = session_api::Config::new(
        database_url,
        ServiceCredential::new(SERVICE_TOKEN).expect("a valid service credential"),
        ServiceCredential::new(GATEWAY_TOKEN).expect("a valid gateway credential"),
        ticket_signing_key(),
    );
    for broker_id in REGISTERING_BROKERS {
        bind_broker(&mut config, broker_id);
    }
    config.brokers = brokers
        .iter()
        .map(|(id, endpoint)| session_api::StaticBroker {
            id: (*id).to_owned(),
            endpoint: endpoint.clone(),
        })
        .collect();
    config.activity_flush_interval = Duration::from_millis(100);
    config.heartbeat_timeout = Duration::from_secs(3);
    configure(&mut config);
    Isolated::start_on(listener, move |listener, shutdown| async move {
        match session_api::run(config, listener, async {
            let _ = shutdown.await;
        })
        .await
        {
            Ok(()) => "stopped".to_owned(),
            Err(error) => format!("failed: {error}"),
        }
    })
}

pub type SessionClient = SessionApiClient<InterceptedService<Channel, BearerAuth>>;
pub type RegistryClient = BrokerRegistryClient<InterceptedService<Channel, BearerAuth>>;
pub type BrokerClient = PtyBrokerClient<InterceptedService<Channel, BearerAuth>>;

/// Presents `token` on every call.
pub fn auth(token: &str) -> BearerAuth {
    BearerAuth::new(token).expect("the test token is printable ascii")
}

/// A channel to `endpoint`, once the server there accepts connections.
pub async fn channel(endpoint: &str) -> Channel {
    let endpoint = Channel::from_shared(endpoint.to_owned()).expect("a valid endpoint url");
    ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || {
        let endpoint = endpoint.clone();
        async move { endpoint.connect().await.ok() }
    })
    .await
    .unwrap_or_else(|| panic!("cannot connect to {}", endpoint.uri()))
}

pub async fn session_client(server: &Isolated) -> SessionClient {
    SessionApiClient::with_interceptor(channel(&server.endpoint()).await, auth(GATEWAY_TOKEN))
}

/// A registry client that presents broker `broker_id`'s own credential.
pub async fn registry_client(server: &Isolated, broker_id: &str) -> RegistryClient {
    registry_client_as(server, &broker_credential(broker_id)).await
}

/// A registry client that presents `token`.
pub async fn registry_client_as(server: &Isolated, token: &str) -> RegistryClient {
    BrokerRegistryClient::with_interceptor(channel(&server.endpoint()).await, auth(token))
}

pub async fn broker_client(broker: &Isolated) -> BrokerClient {
    broker_client_as(broker, SERVICE_TOKEN).await
}

/// A broker client that presents `token`.
pub async fn broker_client_as(broker: &Isolated, token: &str) -> BrokerClient {
    PtyBrokerClient::with_interceptor(channel(&broker.endpoint()).await, auth(token))
}

/// Ids of the sessions the broker has a process for.
pub async fn broker_processes(broker: &mut BrokerClient) -> Vec<String> {
    broker
        .list(broker_pb::ListRequest {})
        .await
        .expect("broker list")
        .into_inner()
        .sessions
        .into_iter()
        .filter(|session| {
            matches!(
                broker_pb::SessionState::try_from(session.state),
                Ok(broker_pb::SessionState::Starting
                    | broker_pb::SessionState::Running
                    | broker_pb::SessionState::Resetting)
            )
        })
        .map(|session| session.session_id)
        .collect()
}

/// Registers an instance that runs an interactive `sh` on the local backend of `broker_id`.
pub async fn register_instance(
    client: &mut SessionClient,
    name: &str,
    broker_id: &str,
    max_sessions: u32,
) -> pb::Instance {
    client
        .register_instance(pb::RegisterInstanceRequest {
            name: name.to_owned(),
            target: Some(broker_pb::Target {
                kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
            }),
            command: vec!["sh".into()],
            max_sessions,
            broker_id: broker_id.to_owned(),
            ..Default::default()
        })
        .await
        .expect("register instance")
        .into_inner()
}

/// Polls `check` until it returns `Some`, within [`PATIENCE`].
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, check)
        .await
        .unwrap_or_else(|| panic!("gave up waiting: {what}"))
}
