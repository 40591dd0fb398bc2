//! The settings of a stack and how they become each service's `Config`: the one place that knows
//! the three services' configuration types. A setting left unset keeps the service's default.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use pty_broker::{BackendKind, SpawnPolicy};
use ptyhub_attach_ticket::TicketSigningKey;
use ptyhub_wire::{ServiceCredential, TierCredentials, TlsConfig, TlsFiles};
use secrecy::SecretString;
use tokio::net::TcpListener;

use crate::error::{Service, StackError};
use crate::listener_handoff::{self, ListenerOffer};
use crate::running::{self, Stack};

/// How long [`StackBuilder::start`] waits, by default, for session-api to see the broker up: a
/// liveness bound for a busy machine, not a performance figure.
const DEFAULT_START_PATIENCE: Duration = Duration::from_secs(60);

/// Configures a [`Stack`]; [`StackBuilder::start`] starts it.
#[derive(Debug)]
pub struct StackBuilder {
    service_credential: Option<ServiceCredential>,
    ticket_signing_key: Option<TicketSigningKey>,
    ticket_signing_key_file: Option<PathBuf>,
    other_brokers: Vec<(String, ServiceCredential)>,
    database_url: Option<String>,
    broker_id: String,
    backends: Option<Vec<BackendKind>>,
    broker_data_dir: Option<PathBuf>,
    ring_bytes: Option<u64>,
    detached_timeout: Option<Duration>,
    kill_grace: Option<Duration>,
    shutdown_grace: Option<Duration>,
    gateway_listener: Option<TcpListener>,
    gateway_address: Option<SocketAddr>,
    session_keeper: Option<PathBuf>,
    take_over: Option<PathBuf>,
    api_tokens: Vec<SecretString>,
    jwt_hs256_secret: Option<SecretString>,
    allowed_origins: Vec<String>,
    static_dir: Option<PathBuf>,
    heartbeat_interval: Option<Duration>,
    start_patience: Duration,
    recordings: Option<PathBuf>,
    default_record: session_api::RecordMode,
    spawn_policy: Option<SpawnPolicy>,
    max_streams_per_principal: Option<usize>,
    internal_tls: Option<TlsFiles>,
    gateway_tls: Option<(PathBuf, PathBuf)>,
    broker_in_process: bool,
}

impl Default for StackBuilder {
    fn default() -> Self {
        Self {
            service_credential: None,
            ticket_signing_key: None,
            ticket_signing_key_file: None,
            other_brokers: Vec::new(),
            database_url: None,
            broker_id: "local".to_owned(),
            backends: None,
            broker_data_dir: None,
            ring_bytes: None,
            detached_timeout: None,
            kill_grace: None,
            shutdown_grace: None,
            gateway_listener: None,
            gateway_address: None,
            session_keeper: None,
            take_over: None,
            api_tokens: Vec::new(),
            jwt_hs256_secret: None,
            allowed_origins: Vec::new(),
            static_dir: None,
            heartbeat_interval: None,
            start_patience: DEFAULT_START_PATIENCE,
            recordings: None,
            default_record: session_api::RecordMode::Off,
            spawn_policy: None,
            max_streams_per_principal: None,
            internal_tls: None,
            gateway_tls: None,
            broker_in_process: true,
        }
    }
}

impl StackBuilder {
    /// session-api's credential, the seed of the others: the gateway's and the broker's own are
    /// derived from it ([`TierCredentials::derived_from`]), so that each tier holds its own and a
    /// caller that knows this one can still reach every tier (the broker's control calls take
    /// the credential derived from the broker's own,
    /// [`ServiceCredential::broker_control_credential`]). Default: a new random one, since
    /// nothing outside the process needs it.
    pub fn service_credential(mut self, credential: ServiceCredential) -> Self {
        self.service_credential = Some(credential);
        self
    }

    /// The private key session-api signs attach tickets with; the broker gets its public key.
    /// Default: a new random one.
    pub fn ticket_signing_key(mut self, key: TicketSigningKey) -> Self {
        self.ticket_signing_key = Some(key);
        self
    }

    /// Keeps the ticket signing key in `path` (PKCS#8 PEM): read from there, or made at the
    /// first start and written there, readable by its owner alone (0600), as `ptyhub up` keeps
    /// its data directory's other secrets. Tickets a previous run issued stay valid across a
    /// restart or an upgrade.
    pub fn ticket_signing_key_file(mut self, path: PathBuf) -> Self {
        self.ticket_signing_key_file = Some(path);
        self
    }

    /// Another broker's own credential, bound to its id in session-api's configuration, so that
    /// a broker outside the stack (or a test playing one) may register as `broker_id` and no
    /// other. The stack's own broker has one already (the broker tier's credential).
    pub fn other_broker(
        mut self,
        broker_id: impl Into<String>,
        credential: ServiceCredential,
    ) -> Self {
        self.other_brokers.push((broker_id.into(), credential));
        self
    }

    /// session-api's database. Default: a fresh SQLite file in a temporary directory that is
    /// removed with the stack.
    pub fn database_url(mut self, url: impl Into<String>) -> Self {
        self.database_url = Some(url.into());
        self
    }

    /// The broker's name in session-api's registry (default `local`).
    pub fn broker_id(mut self, id: impl Into<String>) -> Self {
        self.broker_id = id.into();
        self
    }

    /// The runtimes the broker offers (the broker's default: local only).
    pub fn backends(mut self, backends: Vec<BackendKind>) -> Self {
        self.backends = Some(backends);
        self
    }

    /// The broker's limits on containers and users (the broker's default: every container,
    /// and no root in containers).
    pub fn spawn_policy(mut self, policy: SpawnPolicy) -> Self {
        self.spawn_policy = Some(policy);
        self
    }

    /// Where the broker records the sessions it started, so that a restart ends survivors.
    pub fn broker_data_dir(mut self, directory: PathBuf) -> Self {
        self.broker_data_dir = Some(directory);
        self
    }

    /// The broker's per-session replay ring (at least 1024 bytes).
    /// The directory recordings are kept in, written by the broker and served by the gateway.
    /// Default: `recordings` in the broker's data dir, else in the stack's own temporary data
    /// dir, else none (sessions are then not recorded).
    pub fn recordings(mut self, directory: PathBuf) -> Self {
        self.recordings = Some(directory);
        self
    }

    /// What instances without a `record` setting of their own record. Default: off.
    pub fn default_record(mut self, mode: session_api::RecordMode) -> Self {
        self.default_record = mode;
        self
    }

    pub fn ring_bytes(mut self, bytes: u64) -> Self {
        self.ring_bytes = Some(bytes);
        self
    }

    /// How long a session with no attached client lives before the broker reaps it
    /// (`idle_reaped`).
    pub fn detached_timeout(mut self, timeout: Duration) -> Self {
        self.detached_timeout = Some(timeout);
        self
    }

    /// The broker's wait between SIGHUP/SIGTERM and SIGKILL when it ends a session.
    pub fn kill_grace(mut self, grace: Duration) -> Self {
        self.kill_grace = Some(grace);
        self
    }

    /// How long each service's graceful shutdown may take.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = Some(grace);
        self
    }

    /// Whether the gateway calls the stack's broker in process (the default: no socket, no
    /// HTTP/2 between them, see `gateway::InProcessBrokers`) or over the broker's port, as a
    /// gateway in a process of its own does.
    pub fn broker_in_process(mut self, in_process: bool) -> Self {
        self.broker_in_process = in_process;
        self
    }

    /// The gateway's listener, for a caller that chose its address. Default: `127.0.0.1:0`.
    pub fn gateway_listener(mut self, listener: TcpListener) -> Self {
        self.gateway_listener = Some(listener);
        self
    }

    /// A static API token the gateway accepts (admin over every instance); may be repeated.
    pub fn api_token(mut self, token: impl Into<String>) -> Self {
        self.api_tokens.push(SecretString::from(token.into()));
        self
    }

    /// The secret of the HS256 JWTs the gateway accepts.
    pub fn jwt_hs256_secret(mut self, secret: impl Into<String>) -> Self {
        self.jwt_hs256_secret = Some(SecretString::from(secret.into()));
        self
    }

    /// Origins the gateway allows besides its own.
    pub fn allowed_origins(mut self, origins: Vec<String>) -> Self {
        self.allowed_origins = origins;
        self
    }

    /// The web page the gateway serves.
    pub fn static_dir(mut self, directory: PathBuf) -> Self {
        self.static_dir = Some(directory);
        self
    }

    /// The terminal streams (WebSockets and gRPC attaches) one principal may hold open at the
    /// gateway.
    pub fn max_streams_per_principal(mut self, streams: usize) -> Self {
        self.max_streams_per_principal = Some(streams);
        self
    }

    /// TLS between the services: the broker and session-api serve with `files.cert` and
    /// `files.key`, every service trusts `files.ca` and presents the certificate to the others,
    /// and with `files.require_client_cert` the broker and session-api accept only clients with
    /// a certificate the CA signed (mutual TLS). The certificate must name 127.0.0.1, where the
    /// stack binds. Default: plain, on loopback.
    pub fn internal_tls(mut self, files: TlsFiles) -> Self {
        self.internal_tls = Some(files);
        self
    }

    /// HTTPS, WSS and gRPC over TLS on the gateway's port, with this certificate chain and key
    /// (PEM files). Default: plain.
    pub fn gateway_tls(mut self, cert: PathBuf, key: PathBuf) -> Self {
        self.gateway_tls = Some((cert, key));
        self
    }

    /// The gateway's WebSocket heartbeat interval.
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = Some(interval);
        self
    }

    /// How long [`StackBuilder::start`] waits for session-api to see the broker up (default
    /// 60 s).
    pub fn start_patience(mut self, patience: Duration) -> Self {
        self.start_patience = patience;
        self
    }

    /// Binds the gateway on `address` once the broker runs, waiting (up to the start patience)
    /// while another process still holds it: the `ptyhub up` this stack takes over from, when
    /// that one does not hand its gateway's listener over ([`StackBuilder::take_over`]).
    pub fn gateway_address(mut self, address: SocketAddr) -> Self {
        self.gateway_address = Some(address);
        self
    }

    /// Starts local sessions through `keeper`, a binary that calls
    /// `pty_broker::runtime::local::run_session_keeper_if_asked` first thing in `main` (usually
    /// the running binary, `/proc/self/exe`), so that they can be handed to another process.
    pub fn session_keeper(mut self, keeper: impl Into<PathBuf>) -> Self {
        self.session_keeper = Some(keeper.into());
        self
    }

    /// Takes every session and the broker's listening socket over from the broker that
    /// listens on the hand-off socket `socket` (`<its data dir>/handoff.sock`), which lets go
    /// of them and stops; with no broker there, the broker starts afresh. Then the gateway's
    /// listening socket too, from a stack that offers it beside that socket: its address is
    /// never free, so no connection to it is refused.
    pub fn take_over(mut self, socket: PathBuf) -> Self {
        self.take_over = Some(socket);
        self
    }

    /// Binds the broker and session-api on `127.0.0.1:0` (and the gateway, unless it was given a
    /// listener), starts the three services, and waits until session-api sees the broker up.
    /// A service that fails meanwhile fails the start with its error; the others are stopped.
    pub async fn start(mut self) -> Result<Stack, StackError> {
        let credentials = TierCredentials::derived_from(
            &self
                .service_credential
                .clone()
                .unwrap_or_else(random_credential),
        );
        let ticket_signing_key = match (&self.ticket_signing_key, &self.ticket_signing_key_file) {
            (Some(key), _) => key.clone(),
            (None, Some(path)) => load_or_create_signing_key(path)?,
            (None, None) => TicketSigningKey::generate(),
        };
        let (database_url, data) = match &self.database_url {
            Some(url) => (url.clone(), None),
            None => {
                let data = tempfile::tempdir().map_err(StackError::DataDirectory)?;
                let url = format!(
                    "sqlite://{}?mode=rwc",
                    data.path().join("sessions.db").display()
                );
                (url, Some(data))
            }
        };

        let recordings_dir = self.recordings.clone().or_else(|| {
            let data_dir = match &self.broker_data_dir {
                Some(directory) => Some(directory.clone()),
                None => data.as_ref().map(|data| data.path().to_path_buf()),
            };
            data_dir.map(|directory| directory.join("recordings"))
        });
        let recordings = recordings_dir
            .map(|directory| {
                ptyhub_wire::RecordingStore::open(&directory.to_string_lossy())
                    .map_err(StackError::Recordings)
            })
            .transpose()?;
        let mut broker_config = broker_config(
            &self_settings(&self),
            &credentials,
            &ticket_signing_key,
            self.broker_data_dir.clone(),
        )?;
        broker_config.recordings.store = recordings.clone();
        if self.broker_data_dir.is_none()
            && let Some(data) = &data
        {
            broker_config.recordings.spool = Some(data.path().join("recording-spool"));
        }
        let (broker, broker_listener) = self.start_broker(broker_config).await?;
        let session_api_listener = bind_loopback(Service::SessionApi).await?;
        let gateway_listener = match self.gateway_listener.take() {
            Some(listener) => listener,
            None => match self.predecessors_gateway_listener(&broker_listener).await {
                Some(listener) => listener,
                None => match self.gateway_address {
                    Some(address) => bind_when_free(address, self.start_patience).await?,
                    None => bind_loopback(Service::Gateway).await?,
                },
            },
        };
        let listener_offer = self.offer_gateway_listener(&gateway_listener, &broker_listener);
        let addresses = running::Addresses {
            broker: local_address(&broker_listener, Service::Broker)?,
            session_api: local_address(&session_api_listener, Service::SessionApi)?,
            gateway: local_address(&gateway_listener, Service::Gateway)?,
            internal_tls: self.internal_tls.is_some(),
            gateway_tls: self.gateway_tls.is_some(),
        };
        let client_tls = match &self.internal_tls {
            Some(files) => TlsConfig::from_files(files).map_err(StackError::Tls)?,
            None => TlsConfig::plain(),
        };
        let session_api_config = session_api_config(
            &self_settings(&self),
            &credentials,
            ticket_signing_key,
            database_url,
            &addresses.broker_endpoint(),
        )?;
        let mut gateway_config = gateway_config(
            &self,
            &credentials.gateway,
            &addresses.session_api_endpoint(),
        );
        gateway_config.recordings = recordings;
        if self.broker_in_process {
            gateway_config
                .in_process_brokers
                .insert(addresses.broker_endpoint(), broker.in_process_service());
        }

        let stack = Stack::spawn(
            running::Services {
                broker: (broker, broker_listener),
                session_api: (session_api_config, session_api_listener),
                gateway: (gateway_config, gateway_listener),
                listener_offer,
            },
            addresses,
            credentials,
            self.broker_id.clone(),
            data,
            client_tls,
        );
        stack.wait_until_broker_is_up(self.start_patience).await
    }
}

impl StackBuilder {
    /// The broker and its listener: bound afresh on `127.0.0.1:0`, or taken over with every
    /// session from the broker on [`StackBuilder::take_over`]'s socket.
    async fn start_broker(
        &self,
        config: pty_broker::Config,
    ) -> Result<(pty_broker::Broker, TcpListener), StackError> {
        let predecessor = match &self.take_over {
            Some(socket) => pty_broker::handoff::connect_to_predecessor(socket)
                .await
                .map_err(failed_broker)?,
            None => None,
        };
        let mut builder = pty_broker::Broker::builder(config);
        if let Some(keeper) = &self.session_keeper {
            builder = builder.session_keeper(keeper);
        }
        if predecessor.is_some() {
            builder = builder.taking_over();
        }
        let broker = builder
            .configured_runtimes()
            .await
            .map_err(failed_broker)?
            .build();
        let listener = match predecessor {
            Some(predecessor) => {
                let listener = broker.take_over(predecessor).await.map_err(failed_broker)?;
                listener
                    .set_nonblocking(true)
                    .and_then(|()| TcpListener::from_std(listener))
                    .map_err(|source| StackError::Bind {
                        service: Service::Broker,
                        source,
                    })?
            }
            None => bind_loopback(Service::Broker).await?,
        };
        Ok((broker, listener))
    }

    /// The gateway's listener of the stack this one takes over from ([`StackBuilder::take_over`]),
    /// asked for with the broker's listener that came over with the sessions; `None` when that
    /// stack offers none (or refuses), and the address is bound once it is free instead.
    async fn predecessors_gateway_listener(
        &self,
        broker_listener: &TcpListener,
    ) -> Option<TcpListener> {
        let socket = self.take_over.as_deref()?;
        match listener_handoff::take_gateway_listener(socket, broker_listener).await {
            Ok(Some(listener)) => {
                tracing::info!("the gateway's listener came over from the running stack");
                Some(listener)
            }
            Ok(None) => None,
            Err(error) => {
                tracing::warn!(%error, "the gateway's listener did not come over: binding its address once it is free");
                None
            }
        }
    }

    /// The offer of the gateway's listener to the next stack that takes this one's broker
    /// over, beside the broker's hand-off socket; none without a broker data directory.
    fn offer_gateway_listener(
        &self,
        gateway_listener: &TcpListener,
        broker_listener: &TcpListener,
    ) -> Option<ListenerOffer> {
        let directory = self.broker_data_dir.as_deref()?;
        match ListenerOffer::bind(directory, gateway_listener, broker_listener) {
            Ok(offer) => Some(offer),
            Err(error) => {
                tracing::warn!(%error, directory = %directory.display(), "cannot offer the gateway's listener to an upgrade: its address will be free for a moment then");
                None
            }
        }
    }
}

fn failed_broker(error: impl std::error::Error + Send + Sync + 'static) -> StackError {
    StackError::Failed {
        service: Service::Broker,
        source: Box::new(error),
    }
}

/// Binds `address`, trying again while another process still holds it, for up to `patience`.
async fn bind_when_free(
    address: SocketAddr,
    patience: Duration,
) -> Result<TcpListener, StackError> {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        match TcpListener::bind(address).await {
            Ok(listener) => return Ok(listener),
            Err(error)
                if error.kind() == std::io::ErrorKind::AddrInUse
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(source) => {
                return Err(StackError::Bind {
                    service: Service::Gateway,
                    source,
                });
            }
        }
    }
}

/// The settings both back-end services read, apart from secrets and addresses.
#[derive(Debug)]
struct BackendSettings<'a> {
    broker_id: &'a str,
    backends: Option<&'a [BackendKind]>,
    ring_bytes: Option<u64>,
    detached_timeout: Option<Duration>,
    kill_grace: Option<Duration>,
    shutdown_grace: Option<Duration>,
    default_record: session_api::RecordMode,
    spawn_policy: Option<&'a SpawnPolicy>,
    internal_tls: Option<&'a TlsFiles>,
    other_brokers: &'a [(String, ServiceCredential)],
}

fn self_settings(builder: &StackBuilder) -> BackendSettings<'_> {
    BackendSettings {
        broker_id: &builder.broker_id,
        backends: builder.backends.as_deref(),
        ring_bytes: builder.ring_bytes,
        detached_timeout: builder.detached_timeout,
        kill_grace: builder.kill_grace,
        shutdown_grace: builder.shutdown_grace,
        default_record: builder.default_record,
        spawn_policy: builder.spawn_policy.as_ref(),
        internal_tls: builder.internal_tls.as_ref(),
        other_brokers: &builder.other_brokers,
    }
}

/// The broker holds its own credential (the broker tier's) and session-api's public key: nothing
/// that opens another broker or makes a ticket.
fn broker_config(
    settings: &BackendSettings<'_>,
    credentials: &TierCredentials,
    ticket_signing_key: &TicketSigningKey,
    data_dir: Option<PathBuf>,
) -> Result<pty_broker::Config, StackError> {
    let mut config = pty_broker::Config::with_own_credential(
        credentials.broker.clone(),
        ticket_signing_key.verifying_key(),
    );
    config.broker_id = settings.broker_id.to_owned();
    config.data_dir = data_dir;
    if let Some(backends) = settings.backends {
        config.backends = backends.to_vec();
    }
    if let Some(ring_bytes) = settings.ring_bytes {
        config.ring_bytes = ring_bytes;
    }
    if let Some(timeout) = settings.detached_timeout {
        config.detached_timeout = timeout;
    }
    if let Some(grace) = settings.kill_grace {
        config.kill_grace = grace;
    }
    if let Some(grace) = settings.shutdown_grace {
        config.shutdown_grace = grace;
    }
    if let Some(policy) = settings.spawn_policy {
        config.policy = policy.clone();
    }
    if let Some(files) = settings.internal_tls {
        config.tls = pty_broker::config::BrokerTls {
            cert: files.cert.clone(),
            key: files.key.clone(),
            ca: files.ca.clone(),
            client_auth: files.require_client_cert,
        };
    }
    Ok(config)
}

fn session_api_config(
    settings: &BackendSettings<'_>,
    credentials: &TierCredentials,
    ticket_signing_key: TicketSigningKey,
    database_url: String,
    broker_endpoint: &str,
) -> Result<session_api::Config, StackError> {
    let mut config = session_api::Config::new(
        database_url,
        credentials.session_api.clone(),
        credentials.gateway.clone(),
        ticket_signing_key,
    );
    config.secrets.broker_tokens =
        std::iter::once((settings.broker_id.to_owned(), credentials.broker.clone()))
            .chain(settings.other_brokers.iter().cloned())
            .map(
                |(broker_id, credential)| session_api::config::BrokerCredential {
                    broker_id,
                    credential,
                },
            )
            .collect();
    if let Some(files) = settings.internal_tls {
        config.tls = session_api::config::SessionApiTls {
            cert: files.cert.clone(),
            key: files.key.clone(),
            ca: files.ca.clone(),
            client_auth: files.require_client_cert,
        };
    }
    config.brokers = vec![session_api::StaticBroker {
        id: settings.broker_id.to_owned(),
        endpoint: broker_endpoint.to_owned(),
    }];
    if let Some(grace) = settings.shutdown_grace {
        config.shutdown_grace = grace;
    }
    config.default_record = settings.default_record;
    Ok(config)
}

fn gateway_config(
    builder: &StackBuilder,
    credential: &ServiceCredential,
    session_api_endpoint: &str,
) -> gateway::Config {
    let mut config = gateway::Config::new(session_api_endpoint, credential.clone());
    config.auth.api_tokens = builder.api_tokens.clone();
    config.auth.jwt_hs256_secret = builder.jwt_hs256_secret.clone();
    config.allowed_origins = builder.allowed_origins.clone();
    config.static_dir = builder.static_dir.clone();
    if let Some(interval) = builder.heartbeat_interval {
        config.heartbeat_interval = interval;
    }
    config.tls = TlsFiles {
        cert: builder.gateway_tls.as_ref().map(|(cert, _)| cert.clone()),
        key: builder.gateway_tls.as_ref().map(|(_, key)| key.clone()),
        ca: builder
            .internal_tls
            .as_ref()
            .and_then(|files| files.ca.clone()),
        require_client_cert: false,
        client_cert: builder
            .internal_tls
            .as_ref()
            .and_then(|files| files.cert.clone()),
        client_key: builder
            .internal_tls
            .as_ref()
            .and_then(|files| files.key.clone()),
    };
    if let Some(streams) = builder.max_streams_per_principal {
        config.max_streams_per_principal = streams;
    }
    if let Some(grace) = builder.shutdown_grace {
        config.shutdown_grace = grace;
    }
    config
}

/// The signing key in `path`, or a new one written there (0600) when there is none.
fn load_or_create_signing_key(path: &std::path::Path) -> Result<TicketSigningKey, StackError> {
    let failed = |message: String| StackError::TicketSigningKey {
        path: path.to_owned(),
        message,
    };
    match std::fs::read_to_string(path) {
        Ok(pem) => {
            // Tightened if it was loosened, as the data directory's other files are.
            ptyhub_wire::create_private_file(path).map_err(|error| failed(error.to_string()))?;
            TicketSigningKey::from_pem(&pem).map_err(|error| failed(error.to_string()))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let key = TicketSigningKey::generate();
            // Created empty and 0600 first, so the key is never readable by others.
            ptyhub_wire::create_private_file(path).map_err(|error| failed(error.to_string()))?;
            std::fs::write(path, key.to_pem()).map_err(|error| failed(error.to_string()))?;
            Ok(key)
        }
        Err(error) => Err(failed(error.to_string())),
    }
}

/// A credential for one process's services: 64 random hex digits.
fn random_credential() -> ServiceCredential {
    let token: String = rand::random::<[u8; 32]>()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    ServiceCredential::new(token).expect("64 hex digits make a valid credential")
}

async fn bind_loopback(service: Service) -> Result<TcpListener, StackError> {
    TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|source| StackError::Bind { service, source })
}

fn local_address(
    listener: &TcpListener,
    service: Service,
) -> Result<std::net::SocketAddr, StackError> {
    listener
        .local_addr()
        .map_err(|source| StackError::Bind { service, source })
}

#[cfg(test)]
mod tests {
    use secrecy::ExposeSecret;

    use super::*;

    #[test]
    fn unset_settings_keep_each_services_defaults_and_set_ones_reach_it() {
        let credential = random_credential();
        let credentials = TierCredentials::derived_from(&credential);
        let defaults = StackBuilder::default();
        let ticket_signing_key = TicketSigningKey::generate();
        let broker = broker_config(
            &self_settings(&defaults),
            &credentials,
            &ticket_signing_key,
            None,
        )
        .expect("a valid broker config");
        let untouched = pty_broker::Config::new(
            credential.clone(),
            TicketSigningKey::generate().verifying_key(),
        );
        assert_eq!(broker.detached_timeout, untouched.detached_timeout);
        assert_eq!(broker.kill_grace, untouched.kill_grace);
        assert_eq!(broker.ring_bytes, untouched.ring_bytes);
        assert_eq!(broker.backends, untouched.backends);

        let tuned = StackBuilder::default()
            .broker_id("bench")
            .detached_timeout(Duration::from_millis(300))
            .kill_grace(Duration::from_millis(100))
            .ring_bytes(4096)
            .shutdown_grace(Duration::from_secs(2))
            .backends(vec![BackendKind::Local, BackendKind::Docker]);
        let broker = broker_config(
            &self_settings(&tuned),
            &credentials,
            &ticket_signing_key,
            None,
        )
        .expect("a valid broker config");
        assert_eq!(broker.broker_id, "bench");
        assert_eq!(broker.detached_timeout, Duration::from_millis(300));
        assert_eq!(broker.kill_grace, Duration::from_millis(100));
        assert_eq!(broker.ring_bytes, 4096);
        assert_eq!(broker.shutdown_grace, Duration::from_secs(2));
        assert_eq!(broker.backends, [BackendKind::Local, BackendKind::Docker]);

        let session_api = session_api_config(
            &self_settings(&tuned),
            &credentials,
            ticket_signing_key.clone(),
            "sqlite::memory:".to_owned(),
            "http://127.0.0.1:1",
        )
        .expect("a valid session-api config");
        assert_eq!(session_api.brokers.len(), 1);
        assert_eq!(session_api.brokers[0].id, "bench");
        assert_eq!(session_api.brokers[0].endpoint, "http://127.0.0.1:1");
        assert_eq!(session_api.shutdown_grace, Duration::from_secs(2));

        // Each tier holds its own credential, and each accepts only the tier that calls it: the
        // broker the credential derived from its own, which session-api presents to it alone.
        assert_eq!(
            broker.secrets.session_api_token,
            credentials.broker.broker_control_credential()
        );
        assert_ne!(broker.secrets.session_api_token, credentials.session_api);
        assert_eq!(
            broker.secrets.service_token,
            Some(credentials.broker.clone())
        );
        assert_eq!(session_api.secrets.service_token, credentials.session_api);
        assert_eq!(
            session_api.secrets.gateway_tokens,
            std::slice::from_ref(&credentials.gateway)
        );
        assert_eq!(
            session_api.secrets.broker_tokens,
            [session_api::config::BrokerCredential {
                broker_id: "bench".to_owned(),
                credential: credentials.broker.clone(),
            }]
        );
        // The broker checks tickets with the public half of session-api's key.
        assert_eq!(
            broker.secrets.ticket_public_key,
            session_api.secrets.ticket_signing_key.verifying_key()
        );
        let gateway = gateway_config(&tuned, &credentials.gateway, "http://127.0.0.1:1");
        assert_eq!(gateway.service_credential, credentials.gateway);
    }

    #[test]
    fn gateway_secrets_are_passed_on_and_never_printed() {
        let builder = StackBuilder::default()
            .api_token("stack-test-api-token-0123")
            .jwt_hs256_secret("stack-test-jwt-secret-0123456789");
        assert!(!format!("{builder:?}").contains("stack-test-api-token-0123"));
        assert!(!format!("{builder:?}").contains("stack-test-jwt-secret"));
        let config = gateway_config(&builder, &random_credential(), "http://127.0.0.1:1");
        assert_eq!(config.auth.api_tokens.len(), 1);
        assert_eq!(
            config.auth.api_tokens[0].expose_secret(),
            "stack-test-api-token-0123"
        );
        assert_eq!(
            config
                .auth
                .jwt_hs256_secret
                .as_ref()
                .map(ExposeSecret::expose_secret),
            Some("stack-test-jwt-secret-0123456789")
        );
        assert_eq!(config.session_api_endpoint, "http://127.0.0.1:1");
    }

    #[test]
    fn the_signing_key_file_is_made_once_private_and_then_kept() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("ticket-signing-key.pem");
        let made = load_or_create_signing_key(&path).expect("made");
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let kept = load_or_create_signing_key(&path).expect("read back");
        assert_eq!(kept.verifying_key(), made.verifying_key());
        std::fs::write(&path, "not a key").expect("spoil it");
        let refused = load_or_create_signing_key(&path).expect_err("not a key");
        assert!(
            refused.to_string().contains("ticket-signing-key.pem"),
            "{refused}"
        );
    }

    #[test]
    fn random_credentials_differ() {
        assert_ne!(random_credential(), random_credential());
    }
}
