//! `ptyhub up`: the whole system in one process on the embedded defaults: a pty-broker (local
//! PTYs, and Docker when an engine is there), session-api on SQLite in the data directory, and
//! the gateway with the web page on `--listen`.
//!
//! The broker and session-api listen on ephemeral loopback ports; only the gateway's address is
//! for users. The user's token is generated once and kept in the data directory, so the printed
//! URL stays valid across restarts; the internal service token and the ticket secret are new at
//! every start, since nothing outside this process uses them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use attach_ticket::TicketKey;
use ptyhub_proto::broker::v1 as broker;
use ptyhub_proto::session::v1 as session;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::connection::{BearerToken, SERVER_FILE, TOKEN_FILE};

/// The instance registered on first start: the user's shell on this host.
const LOCAL_INSTANCE: &str = "local";
/// The id of the in-process broker in session-api's registry.
const LOCAL_BROKER: &str = "local";
/// How long the services get to come up before `up` gives up.
const STARTUP_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Address of the gateway (web page, REST, WebSocket, gRPC). Port 0 picks a free port.
    #[arg(long, env = "PTYHUB_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Which terminal backends to offer (comma separated: local, docker). Default: local, and
    /// docker when a Docker engine socket is there.
    #[arg(long = "backend", env = "PTYHUB_BACKENDS", value_delimiter = ',')]
    pub backends: Vec<pty_broker::BackendKind>,
    /// The built web page (`cargo xtask up` builds it into web/dist).
    #[arg(long, env = "PTYHUB_WEB_DIR", default_value = "web/dist")]
    pub web_dir: PathBuf,
    /// Log filter (tracing's env-filter syntax).
    #[arg(
        long,
        env = "PTYHUB_LOG",
        default_value = "info,sqlx=warn,sea_orm=warn"
    )]
    pub log: String,
}

/// Runs everything until SIGINT or SIGTERM.
pub async fn run_up(args: UpArgs, data_dir: &Path, token: Option<String>) -> Result<()> {
    init_logging(&args.log)?;
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create --data-dir {}", data_dir.display()))?;
    let data_dir = data_dir
        .canonicalize()
        .with_context(|| format!("cannot resolve --data-dir {}", data_dir.display()))?;
    let user_token = match token {
        Some(token) => token,
        None => load_or_create_token(&data_dir)?,
    };
    let service_token = random_hex(32);
    let ticket_key = TicketKey::generate();
    let backends = if args.backends.is_empty() {
        default_backends()
    } else {
        args.backends.clone()
    };

    let shutdown = CancellationToken::new();
    let mut services = tokio::task::JoinSet::new();

    let broker_listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot bind the broker's loopback port")?;
    let broker_endpoint = format!("http://{}", broker_listener.local_addr()?);
    let mut broker_config = pty_broker::Config::new(
        pty_broker::ServiceToken::new(service_token.clone()).map_err(anyhow::Error::msg)?,
        ticket_key.clone(),
    );
    broker_config.data_dir = Some(data_dir.join("broker"));
    broker_config.backends = backends.clone();
    std::fs::create_dir_all(data_dir.join("broker"))?;
    let broker_shutdown = shutdown.clone().cancelled_owned();
    services.spawn(async move {
        pty_broker::run(broker_config, broker_listener, broker_shutdown)
            .await
            .context("pty-broker failed")
    });

    let session_api_listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot bind session-api's loopback port")?;
    let session_api_endpoint = format!("http://{}", session_api_listener.local_addr()?);
    let database_url = format!("sqlite://{}?mode=rwc", data_dir.join("ptyhub.db").display());
    let mut session_config = session_api::Config::new(
        database_url,
        session_api::config::ServiceToken::new(service_token.clone())
            .map_err(anyhow::Error::msg)?,
        ticket_key,
    );
    session_config.brokers = vec![session_api::config::StaticBroker {
        id: LOCAL_BROKER.to_owned(),
        endpoint: broker_endpoint,
    }];
    let session_shutdown = shutdown.clone().cancelled_owned();
    services.spawn(async move {
        session_api::run(session_config, session_api_listener, session_shutdown)
            .await
            .context("session-api failed")
    });

    let gateway_listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot bind --listen {}", args.listen))?;
    let gateway_address = gateway_listener.local_addr()?;
    let mut gateway_config = gateway::Config::new(
        session_api_endpoint.clone(),
        gateway::ServiceCredential::new(service_token.clone())?,
    );
    gateway_config.auth.api_tokens = vec![gateway::SecretString::from(user_token.clone())];
    if args.web_dir.join("index.html").is_file() {
        gateway_config.static_dir = Some(args.web_dir.clone());
    } else {
        tracing::warn!(
            web_dir = %args.web_dir.display(),
            "no built web page there (run `cargo xtask up`, or pass --web-dir): serving the API only"
        );
    }
    let gateway_shutdown = shutdown.clone().cancelled_owned();
    services.spawn(async move {
        gateway::run(gateway_config, gateway_listener, gateway_shutdown)
            .await
            .context("gateway failed")
    });

    let channel = connect_with_retry(&session_api_endpoint).await?;
    let token = BearerToken::new(&service_token)?;
    register_local_instance(channel.clone(), token.clone()).await?;
    // The URL is printed once it works: on a restart the instance is already there, but
    // session-api counts the broker as down until its event stream reconnects.
    wait_for_broker(channel, token).await?;

    let server_url = format!("http://{gateway_address}");
    std::fs::write(data_dir.join(SERVER_FILE), format!("{server_url}\n"))
        .context("cannot write the server URL into the data dir")?;
    let backend_names: Vec<String> = backends.iter().map(ToString::to_string).collect();
    println!(
        "ptyhub is up ({} backends: {})",
        backends.len(),
        backend_names.join(", ")
    );
    println!();
    println!("  web page:  {server_url}/?token={user_token}");
    println!("  token:     {user_token}");
    println!(
        "  shell:     ptyhub --data-dir {} attach local",
        data_dir.display()
    );
    println!("  data dir:  {}", data_dir.display());
    println!();
    println!("Press Ctrl-C to stop. Instances and session history are kept in the data dir.");

    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let failure = tokio::select! {
        _ = interrupt.recv() => None,
        _ = terminate.recv() => None,
        // A service that stops on its own takes the others down with it.
        Some(ended) = services.join_next() => Some(ended),
    };
    eprintln!("stopping: closing sessions and shutting the services down");
    shutdown.cancel();
    let mut result = match failure {
        Some(Ok(Ok(()))) => Err(anyhow::anyhow!("a service stopped unexpectedly")),
        Some(Ok(Err(error))) => Err(error),
        Some(Err(join_error)) => Err(anyhow::anyhow!("a service panicked: {join_error}")),
        None => Ok(()),
    };
    while let Some(ended) = services.join_next().await {
        if let (Ok(()), Ok(Err(error))) = (&result, ended) {
            result = Err(error);
        }
    }
    result
}

fn default_backends() -> Vec<pty_broker::BackendKind> {
    let docker_socket = std::env::var("DOCKER_HOST")
        .ok()
        .map(|host| host.strip_prefix("unix://").map(PathBuf::from))
        .unwrap_or_else(|| Some(PathBuf::from("/var/run/docker.sock")));
    // A TCP DOCKER_HOST cannot be checked by a file; offer Docker and let a spawn say if it is
    // unreachable.
    let docker_present = docker_socket.is_none_or(|socket| socket.exists());
    if docker_present {
        vec![
            pty_broker::BackendKind::Local,
            pty_broker::BackendKind::Docker,
        ]
    } else {
        vec![pty_broker::BackendKind::Local]
    }
}

/// Registers the `local` instance unless it exists (first start only).
async fn register_local_instance(
    channel: tonic::transport::Channel,
    token: BearerToken,
) -> Result<()> {
    let mut client =
        session::session_api_client::SessionApiClient::with_interceptor(channel, token);
    match client
        .get_instance(session::GetInstanceRequest {
            instance: LOCAL_INSTANCE.to_owned(),
        })
        .await
    {
        Ok(_) => return Ok(()),
        Err(status) if status.code() == tonic::Code::NotFound => {}
        Err(status) => return Err(status).context("cannot look up the local instance"),
    }
    let request = session::RegisterInstanceRequest {
        name: LOCAL_INSTANCE.to_owned(),
        target: Some(broker::Target {
            kind: Some(broker::target::Kind::Local(broker::LocalTarget {})),
        }),
        labels: [("description".to_owned(), "this host's shell".to_owned())].into(),
        ..Default::default()
    };
    // session-api counts the broker as up once its event stream is connected, a moment after
    // both have started.
    let deadline = tokio::time::Instant::now() + STARTUP_DEADLINE;
    loop {
        match client.register_instance(request.clone()).await {
            Ok(_) => return Ok(()),
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::FailedPrecondition | tonic::Code::Unavailable
                ) && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(status) => return Err(status).context("cannot register the local instance"),
        }
    }
}

/// Waits until session-api's registry shows the in-process broker up.
async fn wait_for_broker(channel: tonic::transport::Channel, token: BearerToken) -> Result<()> {
    let mut registry =
        session::broker_registry_client::BrokerRegistryClient::with_interceptor(channel, token);
    let deadline = tokio::time::Instant::now() + STARTUP_DEADLINE;
    loop {
        let brokers = registry
            .list_brokers(session::ListBrokersRequest {})
            .await
            .context("cannot read session-api's broker registry")?
            .into_inner()
            .brokers;
        if brokers
            .iter()
            .any(|broker| broker.id == LOCAL_BROKER && broker.up)
        {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "session-api did not see the local broker come up within {STARTUP_DEADLINE:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// session-api may still be migrating its database when we first call it.
async fn connect_with_retry(endpoint: &str) -> Result<tonic::transport::Channel> {
    let endpoint = tonic::transport::Endpoint::from_shared(endpoint.to_owned())?;
    let mut last_error = None;
    for _ in 0..50 {
        match endpoint.connect().await {
            Ok(channel) => return Ok(channel),
            Err(error) => last_error = Some(error),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Err(last_error.map_or_else(|| anyhow::anyhow!("no attempt made"), anyhow::Error::from))
        .context("session-api did not start")
}

fn load_or_create_token(data_dir: &Path) -> Result<String> {
    let path = data_dir.join(TOKEN_FILE);
    if let Ok(existing) = std::fs::read_to_string(&path) {
        let existing = existing.trim();
        if !existing.is_empty() {
            return Ok(existing.to_owned());
        }
    }
    let token = random_hex(24);
    write_private(&path, &format!("{token}\n"))?;
    Ok(token)
}

/// Writes a file only its owner can read.
fn write_private(path: &Path, contents: &str) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    file.write_all(contents.as_bytes())?;
    Ok(())
}

fn random_hex(bytes: usize) -> String {
    (0..bytes)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect()
}

fn init_logging(filter: &str) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .with_context(|| format!("invalid --log filter {filter:?}"))?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    Ok(())
}
