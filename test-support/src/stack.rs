//! An in-process ptyhub on port 0 for tests: `ptyhub-stack`'s pty-broker with local PTYs,
//! session-api on a fresh SQLite file and the gateway in front, with fixed test secrets, an admin
//! token, JWTs, and a registered `local` instance.
//!
//! ```ignore
//! let stack = TestStack::builder()
//!     .configure(|stack| stack.broker.ring_bytes = 4096)
//!     .start()
//!     .await;
//! let response = stack.http.get(format!("{}/api/v1/instances", stack.gateway_url))
//!     .bearer_auth(&stack.admin_token).send().await?;
//! stack.shutdown().await;
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ptyhub_attach_ticket::TicketSigningKey;
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_stack::session_api::config::{BrokerCredential, DatabaseUrl};
use ptyhub_stack::session_api::store::entities::share;
use ptyhub_stack::{Stack, StackBuilder};
use ptyhub_wire::{BearerAuth, ServiceCredential, TierCredentials};

pub use ptyhub_stack::{BrokerClient, SessionApiClient};

/// The seed of every tier's credential in a test stack, as `ptyhub-stack` derives them: a test
/// that plays another service (a second gateway) presents its tier's credential.
pub const SERVICE_TOKEN: &str = "test-service-token-0123456789";
/// The private key the stack's session-api signs attach tickets with (PKCS#8 PEM), for tests
/// that make tickets of their own (expired, for another session) the way session-api would. The
/// stack's broker holds its public half only.
pub const TICKET_SIGNING_KEY: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIHWNMxTbVRw/AVLdfmVYyH4XQ6hF/B3FI7dAl3HnzAoK
-----END PRIVATE KEY-----
";
const JWT_SECRET: &str = "test-jwt-secret-0123456789abcdef";
const ADMIN_TOKEN: &str = "test-admin-token-0123456789abcdef0123";

/// How long the stack may take to come up: a liveness bound, not a performance assertion.
const START_PATIENCE: Duration = Duration::from_secs(60);
/// Each service's graceful shutdown in a test stack.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// How long the services may take to stop after shutdown: their grace is 2 s each.
const STOP_PATIENCE: Duration = Duration::from_secs(15);

/// Each tier's credential in the stack, derived from its fixed seed as `ptyhub-stack` does.
pub fn tier_credentials() -> TierCredentials {
    TierCredentials::derived_from(&ServiceCredential::new(SERVICE_TOKEN).expect("service token"))
}

/// [`TICKET_SIGNING_KEY`], read.
pub fn ticket_signing_key() -> TicketSigningKey {
    TicketSigningKey::from_pem(TICKET_SIGNING_KEY).expect("the test signing key")
}

/// Presents what session-api presents to the stack's broker (the credential derived from the
/// broker's own), for calls straight to the broker.
pub fn service_auth() -> BearerAuth {
    tier_credentials()
        .broker
        .broker_control_credential()
        .bearer_auth()
}

/// Presents the stack's broker's own credential, for calls to session-api's registry as that
/// broker (id `local`) makes them.
pub fn broker_auth() -> BearerAuth {
    tier_credentials().broker.bearer_auth()
}

/// The own credential of another broker, `broker_id`, which a stack built with
/// [`TestStackBuilder::other_broker`] binds to that id: a test that plays a broker of its own
/// registers with it.
pub fn other_broker_credential(broker_id: &str) -> ServiceCredential {
    ServiceCredential::new(format!("test-broker-{broker_id}-token-0123456789"))
        .expect("a valid broker credential")
}

/// Presents the gateway's credential, for calls straight to session-api.
pub fn gateway_auth() -> BearerAuth {
    tier_credentials().gateway.bearer_auth()
}

/// Configures a [`TestStack`]: the services' own configs, as `ptyhub-stack` holds them, at the
/// test defaults (fixed secrets, an admin token, the HS256 JWT secret, 2 s of shutdown grace, a
/// 500 ms kill grace), and the `local` instance to register. A setting is changed on the config
/// of the service it belongs to: [`TestStackBuilder::configure`], or one of the shorthands below.
#[derive(Debug)]
pub struct TestStackBuilder {
    stack: StackBuilder,
    local_max_sessions: u32,
    local_command: Vec<String>,
    /// The CA the stack's own HTTP client trusts the gateway's certificate by.
    gateway_ca_pem: Option<String>,
}

impl Default for TestStackBuilder {
    fn default() -> Self {
        let mut stack = Stack::builder()
            .expect("a temporary directory for the stack")
            .with_credentials(&ServiceCredential::new(SERVICE_TOKEN).expect("service token"))
            .start_patience(START_PATIENCE);
        stack.session_api.secrets.ticket_signing_key = ticket_signing_key();
        stack.broker.broker_id = "local".to_owned();
        stack.broker.kill_grace = Duration::from_millis(500);
        stack.broker.shutdown_grace = SHUTDOWN_GRACE;
        stack.session_api.shutdown_grace = SHUTDOWN_GRACE;
        stack.gateway.shutdown_grace = SHUTDOWN_GRACE;
        stack.gateway.auth.api_tokens.push(ADMIN_TOKEN.into());
        stack.gateway.auth.jwt_hs256_secret = Some(JWT_SECRET.into());
        Self {
            stack,
            local_max_sessions: 5,
            local_command: vec!["/bin/sh".to_owned()],
            gateway_ca_pem: None,
        }
    }
}

impl TestStackBuilder {
    /// Changes the services' configs (`broker`, `session_api`, `gateway`) or the stack's own
    /// settings before the start.
    pub fn configure(mut self, change: impl FnOnce(&mut StackBuilder)) -> Self {
        change(&mut self.stack);
        self
    }

    /// The broker's per-session replay ring (at least 1024 bytes).
    pub fn ring_bytes(self, bytes: u64) -> Self {
        self.configure(|stack| stack.broker.ring_bytes = bytes)
    }

    /// The gateway's WebSocket heartbeat interval (default 25 s).
    pub fn heartbeat_interval(self, interval: Duration) -> Self {
        self.configure(|stack| stack.gateway.heartbeat_interval = interval)
    }

    /// The gateway's web page directory.
    pub fn static_dir(self, directory: PathBuf) -> Self {
        self.configure(|stack| stack.gateway.static_dir = Some(directory))
    }

    /// Origins the gateway allows besides its own.
    pub fn allowed_origins(self, origins: Vec<String>) -> Self {
        self.configure(|stack| stack.gateway.allowed_origins = origins)
    }

    /// `max_sessions` of the `local` instance (default 5).
    pub fn local_max_sessions(mut self, max_sessions: u32) -> Self {
        self.local_max_sessions = max_sessions;
        self
    }

    /// The command of the `local` instance's sessions (default `/bin/sh`).
    pub fn local_command(mut self, command: Vec<String>) -> Self {
        self.local_command = command;
        self
    }

    /// How long a session with no attached client lives before the broker reaps it
    /// (`idle_reaped`); the broker's default is 30 minutes.
    pub fn detached_timeout(self, timeout: Duration) -> Self {
        self.configure(|stack| stack.broker.detached_timeout = timeout)
    }

    /// Lets a broker the test plays register as `broker_id`, with
    /// [`other_broker_credential`]`(broker_id)`.
    pub fn other_broker(self, broker_id: &str) -> Self {
        self.configure(|stack| {
            stack
                .session_api
                .secrets
                .broker_tokens
                .push(BrokerCredential {
                    broker_id: broker_id.to_owned(),
                    credential: other_broker_credential(broker_id),
                });
        })
    }

    /// The broker's wait between SIGHUP/SIGTERM and SIGKILL when it ends a session (default
    /// 500 ms).
    pub fn kill_grace(self, grace: Duration) -> Self {
        self.configure(|stack| stack.broker.kill_grace = grace)
    }

    /// The terminal streams one principal may hold open at the gateway (default 64).
    pub fn max_streams_per_principal(self, streams: usize) -> Self {
        self.configure(|stack| stack.gateway.max_streams_per_principal = streams)
    }

    /// The gateway reaches the broker over its TCP port, as a gateway in a process of its own
    /// does, instead of in process (`ptyhub up`'s default).
    pub fn broker_over_tcp(mut self) -> Self {
        self.stack = self.stack.broker_in_process(false);
        self
    }

    /// The gateway serves HTTPS, WSS and gRPC over TLS with these certificates' server
    /// certificate: [`TestStack::gateway_url`] is `https://`, and [`TestStack::http`] trusts
    /// their CA.
    pub fn gateway_tls(mut self, certificates: &crate::tls::TestCertificates) -> Self {
        self.stack.gateway.tls.0.cert = Some(certificates.cert.clone());
        self.stack.gateway.tls.0.key = Some(certificates.key.clone());
        self.gateway_ca_pem = Some(certificates.ca_pem.clone());
        self
    }

    /// Starts broker, session-api and gateway, registers the `local` instance, and waits until
    /// the gateway's `/healthz` says everything answers.
    pub async fn start(self) -> TestStack {
        crate::init_test_logging();
        let http = match &self.gateway_ca_pem {
            Some(ca_pem) => crate::http::client_trusting(ca_pem),
            None => crate::http::client(),
        };
        let http = http.build().expect("an HTTP client");
        let session_api_database = self.stack.session_api.database_url.clone();
        let stack = self.stack.start().await.unwrap_or_else(|error| {
            panic!("the stack did not start: {}", crate::error_chain(&error))
        });

        let mut test_stack = TestStack {
            gateway_url: stack.gateway_url(),
            admin_token: ADMIN_TOKEN.to_owned(),
            instance_id: String::new(),
            http,
            session_api: stack.session_api_client(),
            broker: stack.broker_client(),
            session_api_endpoint: stack.session_api_endpoint(),
            broker_endpoint: stack.broker_endpoint(),
            session_api_database,
            stack: Some(stack),
        };
        test_stack.wait_until_healthy().await;
        test_stack.instance_id = test_stack
            .register_instance_with(
                "local",
                self.local_max_sessions,
                &[],
                self.local_command.clone(),
            )
            .await;
        test_stack
    }
}

/// A running stack. Dropping it stops the services; [`TestStack::shutdown`] also waits.
#[derive(Debug)]
pub struct TestStack {
    /// `http://127.0.0.1:<port>` of the gateway (`https://` with TLS).
    pub gateway_url: String,
    /// A static API token of the gateway: admin over every instance.
    pub admin_token: String,
    /// The id of the registered `local` instance (the broker's own host).
    pub instance_id: String,
    /// An HTTP client for the gateway.
    pub http: reqwest::Client,
    /// session-api directly, with the service token.
    pub session_api: SessionApiClient,
    /// The broker directly, with the service token.
    pub broker: BrokerClient,
    pub session_api_endpoint: String,
    pub broker_endpoint: String,
    /// session-api's database, for what a test cannot do through the services.
    session_api_database: DatabaseUrl,
    /// The services; `None` once shut down.
    stack: Option<Stack>,
}

impl TestStack {
    pub fn builder() -> TestStackBuilder {
        TestStackBuilder::default()
    }

    /// `ws://127.0.0.1:<port>` of the gateway (`wss://` with TLS).
    pub fn websocket_url(&self) -> String {
        match self.gateway_url.strip_prefix("https://") {
            Some(address) => format!("wss://{address}"),
            None => self.gateway_url.replacen("http://", "ws://", 1),
        }
    }

    /// The gateway's bound address.
    pub fn gateway_address(&self) -> std::net::SocketAddr {
        self.running().gateway_address()
    }

    /// An HS256 JWT the gateway accepts, valid for an hour, scoped to `instances` (ids or
    /// names, `*` for all).
    pub fn jwt(&self, subject: &str, instances: &[&str], admin: bool) -> String {
        sign_jwt(subject, instances, admin, unix_now() + 3600)
    }

    /// An HS256 JWT valid for an hour with `extra` ptyhub claims (under `ptyhub`, besides
    /// `instances` and `admin`, false).
    pub fn jwt_with_claims(
        &self,
        subject: &str,
        instances: &[&str],
        extra: serde_json::Value,
    ) -> String {
        let mut claims = serde_json::json!({
            "sub": subject,
            "exp": unix_now() + 3600,
            "ptyhub": {"instances": instances, "admin": false},
        });
        // The extra claims are ptyhub's own, so under its namespace.
        if let (Some(ptyhub), Some(extra)) = (claims["ptyhub"].as_object_mut(), extra.as_object()) {
            ptyhub.extend(extra.clone());
        }
        encode_jwt(&claims)
    }

    /// An HS256 JWT that expires at `expires_at` (Unix seconds).
    pub fn jwt_expiring_at(&self, subject: &str, instances: &[&str], expires_at: u64) -> String {
        sign_jwt(subject, instances, false, expires_at)
    }

    /// An HS256 JWT that expired an hour ago.
    pub fn jwt_expired(&self, subject: &str, instances: &[&str]) -> String {
        sign_jwt(subject, instances, false, unix_now() - 3600)
    }

    /// Registers a local instance running `/bin/sh` and returns its id.
    pub async fn register_instance(
        &self,
        name: &str,
        max_sessions: u32,
        labels: &[(&str, &str)],
    ) -> String {
        self.register_instance_with(name, max_sessions, labels, vec!["/bin/sh".to_owned()])
            .await
    }

    /// Registers a local instance with its command and returns its id.
    pub async fn register_instance_with(
        &self,
        name: &str,
        max_sessions: u32,
        labels: &[(&str, &str)],
        command: Vec<String>,
    ) -> String {
        let env: HashMap<String, String> = [("PS1", "$ "), ("TERM", "xterm-256color")]
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect();
        let request = session_pb::RegisterInstanceRequest {
            name: name.to_owned(),
            target: Some(broker_pb::Target {
                kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
            }),
            command,
            env,
            cwd: String::new(),
            user: String::new(),
            max_sessions,
            labels: labels
                .iter()
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
                .collect(),
            broker_id: String::new(),
            ..Default::default()
        };
        self.session_api
            .clone()
            .register_instance(request)
            .await
            .unwrap_or_else(|status| panic!("register instance {name}: {status}"))
            .into_inner()
            .id
    }

    /// Ends the life of the share `share_id` now, as if its expiry had come: session-api reads
    /// a share's expiry on the system clock, which a test cannot move, and a share lives at
    /// least a minute.
    pub async fn expire_share_now(&self, share_id: &str) {
        use sea_orm::{ColumnTrait as _, EntityTrait as _, QueryFilter as _};
        use share::{Column, Entity};

        let id = share_id.parse::<uuid::Uuid>().expect("a share id");
        let database = sea_orm::Database::connect(self.session_api_database.connection_string())
            .await
            .expect("connect to session-api's database");
        let updated = Entity::update_many()
            .col_expr(
                Column::ExpiresAt,
                sea_orm::sea_query::Expr::value(ptyhub_stack::session_api::store::now()),
            )
            .filter(Column::Id.eq(id))
            .exec(&database)
            .await
            .expect("end the share's life");
        assert_eq!(updated.rows_affected, 1, "no share {share_id}");
        database
            .close()
            .await
            .expect("close session-api's database");
    }

    /// Stops the gateway only (its shutdown future completes) and waits for it; session-api
    /// and the broker go on.
    pub async fn stop_gateway(&mut self) {
        let Some(stack) = self.stack.as_mut() else {
            return;
        };
        match tokio::time::timeout(STOP_PATIENCE, stack.stop_gateway()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => panic!("{}", crate::error_chain(&error)),
            Err(_) => panic!("the gateway did not stop within {STOP_PATIENCE:?} of shutdown"),
        }
    }

    /// Stops every service and waits for them to finish.
    pub async fn shutdown(mut self) {
        self.stop_gateway().await;
        let Some(stack) = self.stack.take() else {
            return;
        };
        match tokio::time::timeout(STOP_PATIENCE, stack.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => panic!("{}", crate::error_chain(&error)),
            Err(_) => panic!("a service did not stop within {STOP_PATIENCE:?} of shutdown"),
        }
    }

    fn running(&self) -> &Stack {
        self.stack.as_ref().expect("the stack is running")
    }

    async fn wait_until_healthy(&self) {
        let url = format!("{}/healthz", self.gateway_url);
        let deadline = tokio::time::Instant::now() + START_PATIENCE;
        loop {
            assert!(
                self.running().is_running(),
                "a service stopped while the gateway was becoming healthy"
            );
            // With the admin's credential: only then does `/healthz` list the brokers.
            let last = match self.http.get(&url).bearer_auth(ADMIN_TOKEN).send().await {
                Ok(response) => {
                    let success = response.status().is_success();
                    let body = response.text().await.unwrap_or_default();
                    // All brokers must be listed and up, not merely none of them down.
                    if success && body.contains("\"brokers\":[{") {
                        return;
                    }
                    body
                }
                Err(error) => error.to_string(),
            };
            assert!(
                tokio::time::Instant::now() < deadline,
                "the stack was not healthy within {START_PATIENCE:?}: {last}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

fn sign_jwt(subject: &str, instances: &[&str], admin: bool, expires_at: u64) -> String {
    let claims = serde_json::json!({
        "sub": subject,
        "exp": expires_at,
        "ptyhub": {"instances": instances, "admin": admin},
    });
    encode_jwt(&claims)
}

fn encode_jwt(claims: &serde_json::Value) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        claims,
        &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()).expect("jwt secret"),
    )
    .expect("sign jwt")
}
