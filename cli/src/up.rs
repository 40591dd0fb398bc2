//! `ptyhub up`: the whole system in one process on the embedded defaults, started by
//! `ptyhub-stack`: a pty-broker (local PTYs, and Docker when an engine is there), session-api on
//! SQLite in the data directory, and the gateway with the web page on `--listen`.
//!
//! The broker and session-api listen on ephemeral loopback ports; only the gateway's address is
//! for users. The page is the one built into the binary unless `--web-dir` names another. The
//! terminal shows the banner (URL, token, shell command) on a clean screen; the services' logs go
//! to `ptyhub.log` in the data directory, and only warnings and errors also to stderr, unless
//! `--log` asks for a filter on stderr. The user's token is generated once and kept in the data directory, so the printed
//! URL stays valid across restarts, and so is the key that signs attach tickets
//! (`ticket-signing-key.pem`, 0600), so that tickets stay valid across an `--upgrade`; the
//! internal service token is new at every start, since nothing outside this process uses it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_stack::{BackendKind, Stack};
use tokio::net::TcpListener;

use crate::connection::{SERVER_FILE, TOKEN_FILE};

/// The instance registered on first start: the user's shell on this host.
const LOCAL_INSTANCE: &str = "local";
/// The id of the in-process broker in session-api's registry.
const LOCAL_BROKER: &str = "local";
/// The private key that signs attach tickets, in the data dir.
const TICKET_SIGNING_KEY_FILE: &str = "ticket-signing-key.pem";
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
    pub backends: Vec<BackendKind>,
    /// Serve HTTPS, WSS and gRPC over TLS on --listen with this certificate chain (PEM), for a
    /// gateway others reach over a network. The printed URL is then `https://`; clients whose
    /// system does not trust the certificate pass its CA with `--ca-cert`.
    #[arg(long, env = "PTYHUB_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "PTYHUB_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve the web page from this directory (a built `web/dist`) instead of the page built
    /// into the binary.
    #[arg(long, env = "PTYHUB_WEB_DIR")]
    pub web_dir: Option<PathBuf>,
    /// Log filter for stderr (tracing's env-filter syntax, e.g. `info` or `debug,sqlx=warn`).
    /// Without it stderr gets warnings and errors only; the data dir's `ptyhub.log` always gets
    /// everything at `info`.
    #[arg(long, env = "PTYHUB_LOG")]
    pub log: Option<String>,
    /// The broker's limits on containers and users, as `pty-broker` takes them: by default
    /// every container, and no root in containers (`--allow-root` allows it).
    #[command(flatten)]
    pub policy: ptyhub_stack::SpawnPolicy,
    /// Replace the `ptyhub up` that runs on this data dir with this binary, ending no terminal:
    /// its sessions (the same processes, ids and output offsets) move to this process, and so
    /// does its listening socket, so that the address refuses no connection meanwhile. Attached
    /// clients reconnect.
    #[arg(long)]
    pub upgrade: bool,
}

/// What goes to the log file in the data dir.
const FILE_LOG_FILTER: &str = "info,sqlx=warn,sea_orm=warn";
/// What goes to stderr unless `--log` says otherwise.
const STDERR_LOG_FILTER: &str = "warn,sqlx=error,sea_orm=error";
/// The log file in the data dir.
const LOG_FILE: &str = "ptyhub.log";

/// Runs everything until SIGINT or SIGTERM.
pub async fn run_up(args: UpArgs, data_dir: &Path, token: Option<String>) -> Result<()> {
    ptyhub_wire::create_private_directory(data_dir)
        .with_context(|| format!("cannot create --data-dir {}", data_dir.display()))?;
    let data_dir = data_dir
        .canonicalize()
        .with_context(|| format!("cannot resolve --data-dir {}", data_dir.display()))?;
    let log_file = data_dir.join(LOG_FILE);
    init_logging(args.log.as_deref(), &log_file)?;
    let user_token = match token {
        Some(token) => token,
        None => load_or_create_token(&data_dir)?,
    };
    let backends = if args.backends.is_empty() {
        default_backends()
    } else {
        args.backends.clone()
    };

    let broker_data_dir = data_dir.join("broker");
    std::fs::create_dir_all(&broker_data_dir)?;
    // The services' own configs, at the defaults of one process, with what `up` keeps in the
    // data dir. The internal service credentials are the stack's: new at every start, since
    // nothing outside this process uses them.
    let mut builder = Stack::builder()?
        // Local sessions start through this binary as their keeper, so that a `ptyhub up
        // --upgrade` can take them over.
        .session_keeper("/proc/self/exe")
        .start_patience(STARTUP_DEADLINE);
    builder.broker.broker_id = LOCAL_BROKER.to_owned();
    builder.broker.backends = backends.clone();
    builder.broker.policy = args.policy.clone();
    builder.broker.data_dir = Some(broker_data_dir.clone());
    let recordings = broker_data_dir.join("recordings");
    builder.broker.recordings.store = Some(
        ptyhub_wire::RecordingStore::open(&recordings.to_string_lossy())
            .with_context(|| format!("cannot open the recordings in {}", recordings.display()))?,
    );
    // In the broker's data dir (its default there), so that a kill loses no recording.
    builder.broker.recordings.spool = None;
    builder.session_api.database_url =
        format!("sqlite://{}?mode=rwc", data_dir.join("ptyhub.db").display()).into();
    builder.session_api.secrets.ticket_signing_key =
        ptyhub_stack::load_or_create_signing_key(&data_dir.join(TICKET_SIGNING_KEY_FILE))?;
    builder
        .gateway
        .auth
        .api_tokens
        .push(user_token.clone().into());
    if args.upgrade {
        let socket = broker_data_dir.join(ptyhub_stack::HANDOFF_SOCKET);
        if !socket.exists() {
            anyhow::bail!(
                "--upgrade: no ptyhub up runs on --data-dir {} (there is no {}); start it without --upgrade",
                data_dir.display(),
                socket.display()
            );
        }
        // The old process's listening socket comes over once its sessions have (the stack asks
        // for it); from an older `ptyhub up` that offers none, this one binds the address once
        // the old one is gone.
        let address = served_address(&data_dir).unwrap_or(args.listen);
        builder = builder.take_over(socket).gateway_address(address);
        eprintln!("upgrading the ptyhub up on {}", data_dir.display());
    } else {
        // The user's address is bound first, so that a port in use fails before anything starts.
        let gateway_listener = TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot bind --listen {}", args.listen))?;
        builder = builder.gateway_listener(gateway_listener);
    }
    builder.gateway.tls.0.cert = args.tls_cert.clone();
    builder.gateway.tls.0.key = args.tls_key.clone();
    if let Some(web_dir) = &args.web_dir {
        if !web_dir.join("index.html").is_file() {
            anyhow::bail!(
                "--web-dir {} holds no index.html (build the page with `cargo xtask web`, or leave --web-dir out to serve the page built into ptyhub)",
                web_dir.display()
            );
        }
        builder.gateway.static_dir = Some(web_dir.clone());
    }
    // The URL is printed once it works: `start` returns when session-api sees the broker up,
    // and the `local` instance is there (registered now on a first start). Until then the
    // gateway's probes answer 503, so that a script that waits for `/healthz` and then opens
    // `local` never finds it missing.
    let local_instance = builder.gateway.readiness.hold("the local instance");
    let mut stack = builder.start().await?;
    register_local_instance(&stack).await?;
    local_instance.release();
    let server_url = stack.gateway_url();
    std::fs::write(data_dir.join(SERVER_FILE), format!("{server_url}\n"))
        .context("cannot write the server URL into the data dir")?;
    let backend_names: Vec<String> = backends.iter().map(ToString::to_string).collect();
    clear_terminal();
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
    if backends.contains(&BackendKind::Docker) {
        println!(
            "  docker:    {}",
            root_in_containers(args.policy.allow_root)
        );
    }
    println!("  data dir:  {}", data_dir.display());
    println!("  logs:      {}", log_file.display());
    println!();
    println!("Press Ctrl-C to stop. Instances and session history are kept in the data dir.");

    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let failure = tokio::select! {
        _ = interrupt.recv() => None,
        _ = terminate.recv() => None,
        // A service that stops on its own takes the others down with it.
        failure = stack.failure() => Some(failure),
    };
    if failure.is_some() && stack.broker_handed_over() {
        // A `ptyhub up --upgrade` owns every session now: stop the rest, touching none.
        eprintln!("handed every session to the upgraded ptyhub: stopping this one");
        return stack.shutdown().await.map_err(Into::into);
    }
    eprintln!("stopping: closing sessions and shutting the services down");
    let stopped = stack.shutdown().await;
    match failure {
        Some(failure) => Err(failure.into()),
        None => stopped.map_err(Into::into),
    }
}

/// What the banner says about root in containers: most images run as root, and without
/// `--allow-root` an instance of one is refused when it is added unless it names a user.
fn root_in_containers(allow_root: bool) -> &'static str {
    if allow_root {
        "sessions may run as root in containers (--allow-root)"
    } else {
        "sessions never run as root in containers: add an image that runs as root with --user NAME, or start ptyhub up with --allow-root"
    }
}

/// The address the running `ptyhub up` serves on, from the URL it wrote into the data dir.
fn served_address(data_dir: &Path) -> Option<SocketAddr> {
    let url = std::fs::read_to_string(data_dir.join(SERVER_FILE)).ok()?;
    let url = url.trim();
    let address = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?;
    address.parse().ok()
}

fn default_backends() -> Vec<BackendKind> {
    let docker_socket = std::env::var("DOCKER_HOST")
        .ok()
        .map(|host| host.strip_prefix("unix://").map(PathBuf::from))
        .unwrap_or_else(|| Some(PathBuf::from("/var/run/docker.sock")));
    // A TCP DOCKER_HOST cannot be checked by a file; offer Docker and let a spawn say if it is
    // unreachable.
    let docker_present = docker_socket.is_none_or(|socket| socket.exists());
    if docker_present {
        vec![BackendKind::Local, BackendKind::Docker]
    } else {
        vec![BackendKind::Local]
    }
}

/// Registers the `local` instance unless it exists (first start only).
async fn register_local_instance(stack: &Stack) -> Result<()> {
    let mut client = stack.session_api_client();
    match client
        .get_instance(session_pb::GetInstanceRequest {
            instance: LOCAL_INSTANCE.to_owned(),
        })
        .await
    {
        Ok(_) => return Ok(()),
        Err(status) if status.code() == tonic::Code::NotFound => {}
        Err(status) => return Err(status).context("cannot look up the local instance"),
    }
    let request = session_pb::RegisterInstanceRequest {
        name: LOCAL_INSTANCE.to_owned(),
        target: Some(broker_pb::Target {
            kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
        }),
        labels: [("description".to_owned(), "this host's shell".to_owned())].into(),
        ..Default::default()
    };
    client
        .register_instance(request)
        .await
        .context("cannot register the local instance")?;
    Ok(())
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

/// Clears the terminal before the banner, so it is the first thing the user reads; output that
/// is not a terminal (a pipe, a log) is left as it is.
fn clear_terminal() {
    use std::io::{IsTerminal as _, Write as _};
    let mut stdout = std::io::stdout();
    if stdout.is_terminal() {
        // Erase the screen and the scrollback, cursor home.
        let _ = stdout.write_all(b"\x1b[H\x1b[2J\x1b[3J");
        let _ = stdout.flush();
    }
}

/// Everything at `info` into `log_file` (appended, so restarts keep their history), and to
/// stderr what `stderr_filter` lets through: warnings and errors unless `--log` says otherwise.
fn init_logging(stderr_filter: Option<&str>, log_file: &Path) -> Result<()> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let stderr_filter = stderr_filter.unwrap_or(STDERR_LOG_FILTER);
    let stderr_filter = tracing_subscriber::EnvFilter::try_new(stderr_filter)
        .with_context(|| format!("invalid --log filter {stderr_filter:?}"))?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_file)
        .with_context(|| format!("cannot open the log file {}", log_file.display()))?;
    let file_filter = tracing_subscriber::EnvFilter::new(FILE_LOG_FILTER);
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(stderr_filter),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(std::sync::Arc::new(file))
                .with_filter(file_filter),
        )
        .init();
    Ok(())
}
