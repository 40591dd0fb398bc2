//! A broker killed with SIGKILL and started again on the same data directory leaves no process of
//! its old sessions running, local or in a container: the real `pty-broker` binary, twice.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, bail, ensure};
use ptyhub_proto::broker::v1 as pb;

use crate::support::docker::DockerFixture;
use crate::support::{PATIENCE, POLL_INTERVAL, SERVICE_TOKEN, TICKET_PUBLIC_KEY, authorized};

/// A session whose processes ignore SIGHUP and SIGTERM, so only the SIGKILL step ends them.
const STUBBORN_SESSION: &str = "trap '' HUP TERM; sleep 600 & sleep 600";

/// A `pty-broker` process on an ephemeral port, configured from secret files as a deployment
/// is; the recording tests start theirs through it too.
pub(crate) struct BrokerProcess {
    pub(crate) child: Child,
    pub(crate) endpoint: String,
    /// Every line the broker logged, as JSON, in order.
    logs: Arc<Mutex<Vec<serde_json::Value>>>,
    /// The files the broker read its secrets from, as a deployment gives them.
    _secrets: tempfile::TempDir,
}

impl BrokerProcess {
    fn start(data_dir: &std::path::Path, backends: &str) -> anyhow::Result<Self> {
        Self::start_with(data_dir, backends, &[])
    }

    /// [`Self::start`] with `extra` flags after the usual ones.
    pub(crate) fn start_with(
        data_dir: &std::path::Path,
        backends: &str,
        extra: &[&std::ffi::OsStr],
    ) -> anyhow::Result<Self> {
        Self::start_under(&[], data_dir, backends, extra)
    }

    /// [`Self::start_with`], the broker's command line given to `wrapper`: a program and its
    /// first arguments, which ends by executing the rest of its command line in its own process
    /// (so that the broker's pid is the child's, as `unshare` without `--fork` does).
    pub(crate) fn start_under(
        wrapper: &[&std::ffi::OsStr],
        data_dir: &std::path::Path,
        backends: &str,
        extra: &[&std::ffi::OsStr],
    ) -> anyhow::Result<Self> {
        let secrets = tempfile::tempdir()?;
        let token_file = secrets.path().join("session-api-token");
        std::fs::write(&token_file, format!("{SERVICE_TOKEN}\n"))?;
        let ticket_file = secrets.path().join("ticket-public-key.pem");
        std::fs::write(&ticket_file, TICKET_PUBLIC_KEY)?;
        let broker = std::ffi::OsStr::new(env!("CARGO_BIN_EXE_pty-broker"));
        let (program, arguments) = match wrapper {
            [program, arguments @ ..] => (*program, [arguments, &[broker]].concat()),
            [] => (broker, Vec::new()),
        };
        let mut child = Command::new(program)
            .args(arguments)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--log-json",
                "--backends",
                backends,
            ])
            .arg("--data-dir")
            .arg(data_dir)
            .args(extra)
            // The test image runs as root, which a broker refuses in containers by default.
            .env("PTYHUB_BROKER_ALLOW_ROOT", "true")
            .env("PTYHUB_BROKER_SESSION_API_TOKEN_FILE", &token_file)
            .env("PTYHUB_BROKER_TICKET_PUBLIC_KEY_FILE", &ticket_file)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("start pty-broker")?;
        let stdout = child.stdout.take().context("broker stdout")?;
        let logs = Arc::new(Mutex::new(Vec::new()));
        // The serving line carries the bound address; the reaping of old sessions comes before it.
        let mut lines = BufReader::new(stdout).lines();
        let address = loop {
            let Some(line) = lines.next() else {
                bail!("pty-broker exited before serving");
            };
            let line: serde_json::Value = serde_json::from_str(&line?)?;
            let serving = (line["fields"]["message"] == "pty-broker serving")
                .then(|| line["fields"]["address"].as_str().map(str::to_owned));
            logs.lock().unwrap().push(line);
            if let Some(address) = serving {
                break address.context("serving line without address")?;
            }
        };
        // Keep reading the logs so the broker never blocks on a full pipe.
        let kept = Arc::clone(&logs);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if let Ok(line) = serde_json::from_str(&line) {
                    kept.lock().unwrap().push(line);
                }
            }
        });
        Ok(Self {
            child,
            endpoint: format!("http://{address}"),
            logs,
            _secrets: secrets,
        })
    }

    /// The lines the broker has logged with `message` so far.
    pub(crate) fn logged(&self, message: &str) -> Vec<serde_json::Value> {
        let logs = self.logs.lock().unwrap();
        logs.iter()
            .filter(|line| line["fields"]["message"] == message)
            .cloned()
            .collect()
    }

    /// The first line the broker logged with `message`, waiting for it within [`PATIENCE`].
    pub(crate) async fn first_logged(&self, message: &str) -> anyhow::Result<serde_json::Value> {
        ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || {
            let found = self.logged(message).into_iter().next();
            async move { found }
        })
        .await
        .with_context(|| format!("the broker never logged {message:?}"))
    }

    async fn spawn(&self, target: pb::target::Kind) -> anyhow::Result<pb::SessionInfo> {
        let mut client = pb::pty_broker_client::PtyBrokerClient::connect(self.endpoint.clone())
            .await
            .context("connect to the broker")?;
        let response = client
            .spawn(authorized(pb::SpawnRequest {
                session_id: uuid::Uuid::new_v4().to_string(),
                target: Some(pb::Target { kind: Some(target) }),
                command: vec!["sh".into(), "-c".into(), STUBBORN_SESSION.into()],
                ..Default::default()
            }))
            .await?
            .into_inner();
        response.session.context("spawn answered without a session")
    }

    fn kill_hard(mut self) -> anyhow::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `condition` for up to [`PATIENCE`].
async fn eventually(mut condition: impl FnMut() -> bool) -> bool {
    ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || {
        let holds = condition().then_some(());
        async move { holds }
    })
    .await
    .is_some()
}

#[tokio::test]
async fn local_sessions_of_a_killed_broker_are_ended_by_the_next_start() -> anyhow::Result<()> {
    ptyhub_test_support::init_test_logging();
    let data_dir = tempfile::tempdir()?;
    let first = BrokerProcess::start(data_dir.path(), "local")?;
    let session = first
        .spawn(pb::target::Kind::Local(pb::LocalTarget {}))
        .await?;
    let leader = session.pid;
    let members = || pty_broker::runtime::local::unix_session_members(leader).unwrap_or_default();
    ensure!(
        eventually(|| members().len() >= 3).await,
        "the session runs sh and two sleeps"
    );

    first.kill_hard()?;
    // The processes outlive their broker: that is what the next start must clean up.
    ensure!(
        members().len() >= 3,
        "session processes ended with the broker"
    );

    let second = BrokerProcess::start(data_dir.path(), "local")?;
    ensure!(
        eventually(|| members().is_empty()).await,
        "processes of the old session are still running: {:?}",
        members()
    );
    drop(second);
    Ok(())
}

#[tokio::test]
async fn docker_sessions_of_a_killed_broker_are_ended_by_the_next_start() -> anyhow::Result<()> {
    let Some(container) = DockerFixture::start().await else {
        return Ok(());
    };
    let data_dir = tempfile::tempdir()?;
    let first = BrokerProcess::start(data_dir.path(), "docker")?;
    first
        .spawn(pb::target::Kind::Docker(pb::DockerTarget {
            container: container.name().to_owned(),
        }))
        .await?;
    let sleeping = ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || async {
        let running = container.session_processes().await;
        let sleeps = running
            .iter()
            .filter(|process| process.command.contains("sleep"))
            .count();
        (sleeps >= 2).then_some(())
    })
    .await;
    ensure!(
        sleeping.is_some(),
        "the session runs two sleeps: {:?}",
        container.session_processes().await
    );

    first.kill_hard()?;
    ensure!(
        !container.session_processes().await.is_empty(),
        "session processes ended with the broker"
    );

    let second = BrokerProcess::start(data_dir.path(), "docker")?;
    let left = container.wait_for_no_session_processes().await;
    ensure!(
        left.is_empty(),
        "processes of the old session are still running: {left:?}"
    );
    drop(second);
    container.stop().await;
    Ok(())
}

#[tokio::test]
async fn the_data_directory_is_private_to_the_brokers_user() -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;

    let parent = tempfile::tempdir()?;
    let loose = parent.path().join("loose");
    std::fs::create_dir(&loose)?;
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o755))?;
    for data_dir in [parent.path().join("new/data"), loose] {
        let mut config = pty_broker::Config::new(
            pty_broker::ServiceCredential::new(SERVICE_TOKEN)?,
            crate::support::ticket_signing_key().verifying_key(),
        );
        config.data_dir = Some(data_dir.clone());
        pty_broker::Broker::builder(config)
            .configured_runtimes()
            .await?;
        let mode = std::fs::metadata(&data_dir)?.permissions().mode() & 0o777;
        ensure!(mode == 0o700, "{} is {mode:o}", data_dir.display());
    }
    Ok(())
}
