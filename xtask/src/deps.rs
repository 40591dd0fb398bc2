//! The real dependencies of the test suite: installed from Debian's packages when missing and
//! started when not running. Nothing here is pulled from an image registry: the test container
//! image is built locally from Debian's static busybox.
//!
//! - Docker engine: `dockerd --bridge=none --iptables=false --ip6tables=false` (no bridge, so test
//!   containers have no network beyond their own loopback), started in the background when no
//!   engine answers, and the `ptyhub-test-busybox` image built from `deploy/test-image/`. Test
//!   containers (label `ptyhub.test`) run `sleep` for an hour at most, so those of a test killed
//!   before its cleanup stop by themselves; the stopped ones are removed here. Running ones are
//!   left alone: they may belong to a test run going on beside this one.
//! - PostgreSQL: a throwaway cluster under `/var/cache/ptyhub-pg`, listening on 127.0.0.1 only;
//!   tests create one database each from `PTYHUB_TEST_POSTGRES_URL`.
//! - Python: a virtual environment under `/var/cache/ptyhub-py` with the packages of
//!   `interop/requirements.txt`, `examples/python/requirements.txt` and
//!   `bench/python/requirements.txt` from PyPI
//!   (`PTYHUB_TEST_PYTHON`), moto's S3 server (`moto_server`) among them for the recordings
//!   tests; `iproute2` for the tests' own network namespaces and for `ss`, which a gateway test
//!   reads a socket's send queue with.
//! - Node, npm and the web page's npm packages (`npm ci` in `web/`): the screen oracle
//!   (`web/test/screen-oracle.mjs`, xterm.js in node) that the broker's screen tests run.
//! - The MCP inspector's CLI and the Node 22 it needs, pinned by `interop/mcp-inspector/` and
//!   installed from the npm registry under `/var/cache/ptyhub-mcp-inspector`
//!   (`PTYHUB_TEST_MCP_INSPECTOR`, `PTYHUB_TEST_NODE22`).
//!
//! Outside CI a dependency that cannot be had is reported and its tests skip; under `CI=true` the
//! failure is fatal, because the tests would fail anyway.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::run;

pub const TEST_IMAGE: &str = "ptyhub-test-busybox:latest";
const POSTGRES_PORT: u16 = 55432;
const POSTGRES_ROOT: &str = "/var/cache/ptyhub-pg";
const DOCKER_SOCKET: &str = "/var/run/docker.sock";

/// What the tests are told about the dependencies that were started.
#[derive(Debug, Default)]
pub struct TestEnvironment {
    postgres_url: Option<String>,
    python: Option<PathBuf>,
    mcp_inspector: Option<crate::interop::McpInspector>,
}

impl TestEnvironment {
    pub fn variables(&self) -> Vec<(String, String)> {
        let mut variables = Vec::new();
        if let Some(url) = &self.postgres_url {
            variables.push(("PTYHUB_TEST_POSTGRES_URL".to_owned(), url.clone()));
        }
        if let Some(python) = &self.python {
            variables.push((
                "PTYHUB_TEST_PYTHON".to_owned(),
                python.display().to_string(),
            ));
        }
        if let Some(inspector) = &self.mcp_inspector {
            variables.push((
                "PTYHUB_TEST_MCP_INSPECTOR".to_owned(),
                inspector.launcher.display().to_string(),
            ));
            variables.push((
                "PTYHUB_TEST_NODE22".to_owned(),
                inspector.node.display().to_string(),
            ));
        }
        variables
    }
}

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| value == "true" || value == "1")
}

/// Installs and starts everything the tests need.
pub fn prepare() -> Result<TestEnvironment> {
    install_missing_packages()?;
    let mut environment = TestEnvironment::default();
    tolerate(
        "Docker engine",
        ensure_docker_engine()
            .and_then(|()| remove_stopped_test_containers())
            .and_then(|()| build_test_image()),
    )?;
    environment.postgres_url = tolerate("PostgreSQL", ensure_postgres())?;
    // The Python clients the tests run (the reflection client, the example, the MCP SDK's
    // client), and moto's S3 server for the recordings tests.
    environment.python = tolerate(
        "Python gRPC and MCP clients and moto's S3 server",
        crate::interop::ensure_python_clients(&run::workspace_root()),
    )?;
    // The screen oracle the broker's screen is held to: xterm.js in node, from the page's
    // packages.
    tolerate(
        "node and the page's npm packages for the screen oracle",
        crate::web::install_packages(&run::workspace_root()),
    )?;
    environment.mcp_inspector = tolerate(
        "the MCP inspector's CLI and Node 22",
        crate::interop::ensure_mcp_inspector(&run::workspace_root()),
    )?;
    Ok(environment)
}

/// Under CI a missing dependency is an error; elsewhere its tests will skip with a reason.
fn tolerate<T>(what: &str, result: Result<T>) -> Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(error) if !in_ci() => {
            eprintln!("warning: {what} unavailable, its tests will be skipped: {error:#}");
            Ok(None)
        }
        Err(error) => Err(error.context(format!("{what} is required under CI=true"))),
    }
}

/// The Debian packages the tests need. The static busybox is what the test image is made of;
/// zsh and fish are shells whose integration the broker's tests exercise beside bash and sh.
const PACKAGES: &[&str] = &[
    "docker.io",
    "busybox-static",
    "postgresql",
    "iproute2",
    "zsh",
    "fish",
];

fn install_missing_packages() -> Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .copied()
        .filter(|package| !package_installed(package))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing packages {} and not root: install them with apt-get",
            missing.join(" ")
        );
    }
    run::install_debian_packages(&missing)
}

fn package_installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["--show", "--showformat=${Status}", package])
        .output()
        .is_ok_and(|output| output.stdout.ends_with(b" installed"))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| output.stdout.trim_ascii() == b"0")
}

fn docker_answers() -> bool {
    run::succeeds(Command::new("docker").args(["info", "--format", "{{.ServerVersion}}"]))
}

fn ensure_docker_engine() -> Result<()> {
    if docker_answers() {
        return Ok(());
    }
    if std::env::var_os("DOCKER_HOST").is_some() {
        bail!("DOCKER_HOST is set but no engine answers there");
    }
    eprintln!("starting dockerd (no bridge, no iptables)");
    let log = std::fs::File::create("/var/log/ptyhub-dockerd.log")
        .context("cannot create /var/log/ptyhub-dockerd.log")?;
    Command::new("setsid")
        .args([
            "dockerd",
            "--bridge=none",
            "--iptables=false",
            "--ip6tables=false",
        ])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("cannot start dockerd")?;
    wait_until(
        Duration::from_secs(90),
        "the Docker engine to answer",
        || Path::new(DOCKER_SOCKET).exists() && docker_answers(),
    )
}

/// Removes the stopped containers the tests left behind (see the module docs).
fn remove_stopped_test_containers() -> Result<()> {
    run::status(
        Command::new("docker")
            .args([
                "container",
                "prune",
                "--force",
                "--filter",
                "label=ptyhub.test",
            ])
            .stdout(Stdio::null()),
    )
}

fn build_test_image() -> Result<()> {
    let context = tempfile_dir("ptyhub-test-image")?;
    std::fs::copy("/bin/busybox", context.join("busybox"))
        .context("cannot copy /bin/busybox into the image build context")?;
    std::fs::copy(
        run::workspace_root().join("deploy/test-image/Dockerfile"),
        context.join("Dockerfile"),
    )
    .context("cannot copy deploy/test-image/Dockerfile")?;
    // The classic builder: BuildKit needs the buildx plugin, which Debian's docker.io lacks.
    let result = run::status(
        Command::new("docker")
            .args(["build", "--quiet", "--tag", TEST_IMAGE])
            .arg(&context)
            .env("DOCKER_BUILDKIT", "0")
            .stdout(Stdio::null()),
    );
    let _ = std::fs::remove_dir_all(&context);
    result
}

fn tempfile_dir(prefix: &str) -> Result<PathBuf> {
    let directory = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
    std::fs::create_dir_all(&directory)
        .with_context(|| format!("cannot create {}", directory.display()))?;
    Ok(directory)
}

fn postgres_url() -> String {
    format!("postgres://postgres@127.0.0.1:{POSTGRES_PORT}/postgres")
}

fn postgres_answers() -> bool {
    let pg_isready = postgres_bin("pg_isready").unwrap_or_else(|_| "pg_isready".into());
    run::succeeds(Command::new(pg_isready).args([
        "--host",
        "127.0.0.1",
        "--port",
        &POSTGRES_PORT.to_string(),
    ]))
}

fn postgres_bin(program: &str) -> Result<PathBuf> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .context("PostgreSQL is not installed (/usr/lib/postgresql)")?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .collect();
    versions.sort();
    let binary = versions
        .last()
        .map(|version| version.join("bin").join(program))
        .context("no PostgreSQL version under /usr/lib/postgresql")?;
    Ok(binary)
}

fn ensure_postgres() -> Result<String> {
    let url = postgres_url();
    if postgres_answers() {
        return Ok(url);
    }
    let root = Path::new(POSTGRES_ROOT);
    let data = root.join("data");
    std::fs::create_dir_all(root).with_context(|| format!("cannot create {POSTGRES_ROOT}"))?;
    run::status(Command::new("chown").args(["postgres:postgres", POSTGRES_ROOT]))?;
    if !data.join("PG_VERSION").exists() {
        run::status(
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(postgres_bin("initdb")?)
                .args(["--auth=trust", "--username=postgres", "--pgdata"])
                .arg(&data)
                .stdout(Stdio::null()),
        )?;
    }
    // Throwaway test cluster: no fsync, room for the concurrency tests' connections, and a
    // socket directory that exists on every machine.
    let options = format!(
        "-p {POSTGRES_PORT} -c listen_addresses=127.0.0.1 -k /tmp -c fsync=off \
         -c synchronous_commit=off -c full_page_writes=off -c max_connections=400"
    );
    run::status(
        Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(postgres_bin("pg_ctl")?)
            .arg("--pgdata")
            .arg(&data)
            .arg("--log")
            .arg(root.join("server.log"))
            .args(["--options", &options, "--wait", "start"])
            .stdout(Stdio::null()),
    )?;
    wait_until(
        Duration::from_secs(30),
        "PostgreSQL to answer",
        postgres_answers,
    )?;
    Ok(url)
}

fn wait_until(limit: Duration, what: &str, mut ready: impl FnMut() -> bool) -> Result<()> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if ready() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    bail!("gave up after {limit:?} waiting for {what}")
}
