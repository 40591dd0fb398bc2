//! A stack's configuration: the three services' own `Config`s (the types their binaries parse
//! their flags into), at the defaults of one process, and the few settings of the stack itself
//! (listeners, the hand-off, the broker in process). Callers change the configs' fields
//! directly; [`StackBuilder::start`] wires what ties the services together (endpoints, the
//! broker's credential and the ticket key's public half), and nothing else.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ptyhub_attach_ticket::TicketSigningKey;
use ptyhub_wire::{ServiceCredential, TierCredentials, TlsConfig, TlsFiles};
use tokio::net::TcpListener;

use crate::error::{Service, StackError};
use crate::listener_handoff::{self, ListenerOffer};
use crate::running::{self, Stack};

/// How long [`StackBuilder::start`] waits, by default, for session-api to see the broker up: a
/// liveness bound for a busy machine, not a performance figure.
const DEFAULT_START_PATIENCE: Duration = Duration::from_secs(60);

/// The stack's broker's id in session-api's registry, by default.
pub const DEFAULT_BROKER_ID: &str = "local";

/// Configures a [`Stack`]; [`StackBuilder::start`] starts it.
///
/// ```ignore
/// let mut builder = Stack::builder()?;
/// builder.broker.ring_bytes = 4096;
/// builder.gateway.auth.api_tokens.push(token.into());
/// let stack = builder.start().await?;
/// ```
#[derive(Debug)]
pub struct StackBuilder {
    /// The broker's configuration. Its own credential (`secrets.service_token`) is bound to its
    /// `broker_id` in session-api's at start, and its ticket public key is made session-api's.
    pub broker: pty_broker::Config,
    /// session-api's configuration. The stack's broker is added to its static brokers at start.
    pub session_api: session_api::Config,
    /// The gateway's configuration. Its session-api endpoint is set at start, and it reads
    /// recordings from the store the broker writes.
    pub gateway: gateway::Config,
    gateway_listener: Option<TcpListener>,
    gateway_address: Option<SocketAddr>,
    session_keeper: Option<PathBuf>,
    take_over: Option<PathBuf>,
    start_patience: Duration,
    broker_in_process: bool,
    /// Where the default SQLite database and recordings live; removed with the stack.
    data: tempfile::TempDir,
}

impl StackBuilder {
    /// The configs of one process: a credential per tier derived from a new random one
    /// ([`StackBuilder::with_credentials`]), a new ticket signing key, session-api on SQLite and
    /// the recordings in a temporary directory removed with the stack, the broker `local` with
    /// local PTYs, and every other setting at its service's default.
    pub fn embedded() -> Result<Self, StackError> {
        let data = tempfile::tempdir().map_err(StackError::DataDirectory)?;
        let credentials = TierCredentials::derived_from(&random_credential());
        let ticket_signing_key = TicketSigningKey::generate();
        let mut broker = pty_broker::Config::with_own_credential(
            credentials.broker.clone(),
            ticket_signing_key.verifying_key(),
        );
        broker.broker_id = DEFAULT_BROKER_ID.to_owned();
        broker.recordings.store = Some(
            ptyhub_wire::RecordingStore::open(&data.path().join("recordings").to_string_lossy())
                .map_err(StackError::Recordings)?,
        );
        broker.recordings.spool = Some(data.path().join("recording-spool"));
        let session_api = session_api::Config::new(
            format!(
                "sqlite://{}?mode=rwc",
                data.path().join("sessions.db").display()
            ),
            credentials.session_api.clone(),
            credentials.gateway.clone(),
            ticket_signing_key,
        );
        // The endpoint is the stack's session-api's, set once it is bound.
        let gateway = gateway::Config::new("http://127.0.0.1:0", credentials.gateway);
        Ok(Self {
            broker,
            session_api,
            gateway,
            gateway_listener: None,
            gateway_address: None,
            session_keeper: None,
            take_over: None,
            start_patience: DEFAULT_START_PATIENCE,
            broker_in_process: true,
            data,
        })
    }

    /// Gives each tier the credential derived from `seed` ([`TierCredentials::derived_from`]):
    /// session-api holds `seed`, the gateway and the broker their own, so that a caller that
    /// knows the seed can still reach every tier (the broker's control calls take the
    /// credential derived from the broker's own,
    /// [`ServiceCredential::broker_control_credential`]).
    pub fn with_credentials(mut self, seed: &ServiceCredential) -> Self {
        let credentials = TierCredentials::derived_from(seed);
        self.broker.secrets.session_api_token = credentials.broker.broker_control_credential();
        self.broker.secrets.service_token = Some(credentials.broker);
        self.session_api.secrets.service_token = credentials.session_api;
        self.session_api.secrets.gateway_tokens = vec![credentials.gateway.clone()];
        self.gateway.service_credential = credentials.gateway.into();
        self
    }

    /// TLS between the services: the broker and session-api serve with `files.cert` and
    /// `files.key`, every service trusts `files.ca` and presents the certificate to the others,
    /// and with `files.require_client_cert` the broker and session-api accept only clients with
    /// a certificate the CA signed (mutual TLS). The certificate must name 127.0.0.1, where the
    /// stack binds. Default: plain, on loopback. It sets the three configs' TLS fields.
    pub fn internal_tls(mut self, files: TlsFiles) -> Self {
        self.broker.tls = pty_broker::config::BrokerTls {
            cert: files.cert.clone(),
            key: files.key.clone(),
            ca: files.ca.clone(),
            client_auth: files.require_client_cert,
        };
        self.session_api.tls = session_api::config::SessionApiTls {
            cert: files.cert.clone(),
            key: files.key.clone(),
            ca: files.ca.clone(),
            client_auth: files.require_client_cert,
        };
        self.gateway.tls.0.ca = files.ca;
        self.gateway.tls.0.client_cert = files.cert;
        self.gateway.tls.0.client_key = files.key;
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

    /// What ties the services of one process together, whatever the caller changed: session-api
    /// binds the broker's own credential to its id and signs the tickets the broker checks, and
    /// the gateway serves the recordings the broker writes.
    fn tie_services_together(&mut self) {
        self.broker.secrets.ticket_public_key =
            self.session_api.secrets.ticket_signing_key.verifying_key();
        if let Some(own) = &self.broker.secrets.service_token {
            let broker_id = &self.broker.broker_id;
            self.session_api
                .secrets
                .broker_tokens
                .retain(|bound| bound.broker_id != *broker_id);
            self.session_api
                .secrets
                .broker_tokens
                .push(session_api::config::BrokerCredential {
                    broker_id: broker_id.clone(),
                    credential: own.clone(),
                });
        }
        self.gateway.recordings = self.broker.recordings.store.clone();
    }

    /// Each tier's credential, as the configs hold them.
    fn credentials(&self) -> TierCredentials {
        TierCredentials {
            session_api: self.session_api.secrets.service_token.clone(),
            gateway: (*self.gateway.service_credential).clone(),
            broker: self
                .broker
                .secrets
                .service_token
                .clone()
                .unwrap_or_else(|| self.broker.secrets.session_api_token.clone()),
        }
    }

    /// Binds the broker and session-api on `127.0.0.1:0` (and the gateway, unless it was given a
    /// listener), starts the three services, and waits until session-api sees the broker up.
    /// A service that fails meanwhile fails the start with its error; the others are stopped.
    /// Until the broker is up the gateway's probes answer 503 (its readiness is held): the
    /// gateway serves from the start, but takes no session before then.
    pub async fn start(mut self) -> Result<Stack, StackError> {
        self.tie_services_together();
        let (broker, broker_listener) = self.start_broker(self.broker.clone()).await?;
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
            broker_tls: self.broker.tls.cert.is_some(),
            session_api_tls: self.session_api.tls.cert.is_some(),
            gateway_tls: self.gateway.tls.cert.is_some(),
        };
        // The stack's own clients call as its services call each other.
        let client_tls =
            TlsConfig::from_files(&self.session_api.tls.files()).map_err(StackError::Tls)?;
        self.session_api.brokers.push(session_api::StaticBroker {
            id: self.broker.broker_id.clone(),
            endpoint: addresses.broker_endpoint(),
        });
        self.gateway.session_api_endpoint = addresses.session_api_endpoint();
        if self.broker_in_process {
            self.gateway
                .in_process_brokers
                .insert(addresses.broker_endpoint(), broker.in_process());
        }
        let credentials = self.credentials();
        let broker_id = self.broker.broker_id.clone();
        let start_patience = self.start_patience;
        let broker_up = self
            .gateway
            .readiness
            .hold(format!("broker {broker_id} to register"));
        let stack = Stack::spawn(
            running::Services {
                broker: (broker, broker_listener),
                session_api: (self.session_api, session_api_listener),
                gateway: (self.gateway, gateway_listener),
                listener_offer,
            },
            addresses,
            credentials,
            broker_id,
            Some(self.data),
            client_tls,
        );
        let stack = stack.wait_until_broker_is_up(start_patience).await?;
        broker_up.release();
        Ok(stack)
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
        let directory = self.broker.data_dir.as_deref()?;
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

/// The signing key in `path`, or a new one written there (0600) when there is none.
pub fn load_or_create_signing_key(path: &std::path::Path) -> Result<TicketSigningKey, StackError> {
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
    use ptyhub_wire::ExposeSecret as _;

    use super::*;

    #[test]
    fn the_embedded_configs_are_each_services_defaults() {
        let builder = StackBuilder::embedded().expect("the embedded configs");
        let key = TicketSigningKey::generate();
        let credential = random_credential();
        let broker = pty_broker::Config::new(credential.clone(), key.verifying_key());
        assert_eq!(builder.broker.detached_timeout, broker.detached_timeout);
        assert_eq!(builder.broker.kill_grace, broker.kill_grace);
        assert_eq!(builder.broker.ring_bytes, broker.ring_bytes);
        assert_eq!(builder.broker.backends, broker.backends);
        assert_eq!(builder.broker.broker_id, DEFAULT_BROKER_ID);
        let session_api = session_api::Config::new(
            "sqlite::memory:",
            credential.clone(),
            random_credential(),
            key,
        );
        assert_eq!(
            builder.session_api.shutdown_grace,
            session_api.shutdown_grace
        );
        assert_eq!(
            builder.session_api.default_record,
            session_api.default_record
        );
        assert!(
            builder
                .session_api
                .database_url
                .connection_string()
                .starts_with("sqlite://")
        );
        let gateway = gateway::Config::new("http://127.0.0.1:1", credential);
        assert_eq!(
            builder.gateway.heartbeat_interval,
            gateway.heartbeat_interval
        );
        assert_eq!(
            builder.gateway.max_streams_per_principal,
            gateway.max_streams_per_principal
        );
        assert!(builder.gateway.auth.api_tokens.is_empty());
    }

    #[test]
    fn each_tier_holds_its_own_credential_and_the_broker_is_bound_to_its_id() {
        let seed = random_credential();
        let credentials = TierCredentials::derived_from(&seed);
        let mut builder = StackBuilder::embedded()
            .expect("the embedded configs")
            .with_credentials(&seed);
        builder.broker.broker_id = "bench".to_owned();
        builder.tie_services_together();
        let (broker, session_api) = (&builder.broker, &builder.session_api);
        // Each tier accepts only the tier that calls it: the broker the credential derived
        // from its own, which session-api presents to it alone.
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
        assert_eq!(*builder.gateway.service_credential, credentials.gateway);
        assert_eq!(builder.credentials().broker, credentials.broker);
        // The gateway serves what the broker records.
        assert!(builder.gateway.recordings.is_some());
    }

    #[test]
    fn gateway_secrets_set_on_its_config_are_never_printed() {
        let mut builder = StackBuilder::embedded().expect("the embedded configs");
        builder
            .gateway
            .auth
            .api_tokens
            .push("stack-test-api-token-0123".into());
        builder.gateway.auth.jwt_hs256_secret = Some("stack-test-jwt-secret-0123456789".into());
        let printed = format!("{builder:?}");
        assert!(!printed.contains("stack-test-api-token-0123"));
        assert!(!printed.contains("stack-test-jwt-secret"));
        assert_eq!(
            builder.gateway.auth.api_tokens[0].expose_secret(),
            "stack-test-api-token-0123"
        );
    }

    #[test]
    fn a_database_password_set_on_the_stack_is_never_printed() {
        let mut builder = StackBuilder::embedded().expect("the embedded configs");
        builder.session_api.database_url =
            "postgres://ptyhub:stack-test-db-password@db:5432/ptyhub".into();
        let printed = format!("{builder:?}");
        assert!(!printed.contains("stack-test-db-password"), "{printed}");
        assert!(
            printed.contains("postgres://ptyhub:***@db:5432/ptyhub"),
            "{printed}"
        );
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
