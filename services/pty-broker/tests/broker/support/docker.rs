//! A throwaway container from the test image for Docker-backed tests, removed on drop even when
//! the test fails, and a look at which processes run in it.

use std::collections::{BTreeSet, HashMap};

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, RemoveContainerOptions, StopContainerOptions,
};
use futures::StreamExt as _;

/// The image `cargo xtask test` builds: static busybox, users `root` and `tester`.
pub const TEST_IMAGE: &str = "ptyhub-test-busybox:latest";
/// The label every test container carries, so leftovers can be found and removed.
pub const TEST_LABEL: &str = "ptyhub.test";
/// How long a test container runs at most: its command is `sleep` for this long, so one whose
/// test was killed before its drop (a timeout) stops by itself, and `cargo xtask test` removes
/// it at its next start.
const LIFETIME_SECONDS: &str = "3600";

/// Whether a test container runs an init process as PID 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerInit {
    /// Docker's init: it reaps orphans, so finished processes do not linger as zombies.
    Init,
    /// None: PID 1 is the container's command (`sleep`), as in many images.
    None,
}

/// A running container, removed (forcibly) when dropped.
#[derive(Debug)]
pub struct DockerFixture {
    docker: Docker,
    name: String,
    id: String,
    /// The pids running right after start (the init and its idle child): never a session's.
    baseline: BTreeSet<u32>,
}

/// One process in the container, as `ps` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerProcess {
    pub pid: u32,
    pub state: String,
    pub command: String,
}

impl DockerFixture {
    /// Starts a container, or returns `None` when Docker is unavailable and the test should be
    /// skipped (under `CI=true` a missing engine fails the test instead).
    pub async fn start() -> Option<Self> {
        Self::start_with(ContainerInit::Init).await
    }

    /// [`DockerFixture::start`] with or without an init process.
    pub async fn start_with(init: ContainerInit) -> Option<Self> {
        if !ptyhub_test_support::require(ptyhub_test_support::Requirement::Docker) {
            return None;
        }
        ptyhub_test_support::init_test_logging();
        let docker = Docker::connect_with_defaults()
            .expect("docker client")
            .negotiate_version()
            .await
            .expect("docker engine answers");
        let name = format!("ptyhub-test-{}", uuid::Uuid::new_v4().simple());
        let body = ContainerCreateBody {
            image: Some(TEST_IMAGE.to_owned()),
            cmd: Some(vec!["sleep".to_owned(), LIFETIME_SECONDS.to_owned()]),
            labels: Some(HashMap::from([(TEST_LABEL.to_owned(), "1".to_owned())])),
            host_config: Some(HostConfig {
                network_mode: Some("none".to_owned()),
                init: Some(init == ContainerInit::Init),
                ..Default::default()
            }),
            ..Default::default()
        };
        let created = docker
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(name.clone()),
                    ..Default::default()
                }),
                body,
            )
            .await
            .expect("create test container (is the test image built? cargo xtask test builds it)");
        let mut fixture = Self {
            docker,
            name,
            id: created.id,
            baseline: BTreeSet::new(),
        };
        fixture
            .docker
            .start_container(&fixture.id, None)
            .await
            .expect("start test container");
        fixture.baseline = fixture
            .all_processes()
            .await
            .into_iter()
            .map(|process| process.pid)
            .collect();
        Some(fixture)
    }

    /// The container's name, as a session target would give it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every live (not zombie) process in the container but the listing's own.
    pub async fn all_processes(&self) -> Vec<ContainerProcess> {
        let output = self.exec_output(&["ps", "-o", "pid,stat,args"]).await;
        output
            .lines()
            .skip(1)
            .filter_map(|line| {
                let mut fields = line.split_whitespace();
                let pid = fields.next()?.parse().ok()?;
                let state = fields.next()?.to_owned();
                let command = fields.collect::<Vec<_>>().join(" ");
                Some(ContainerProcess {
                    pid,
                    state,
                    command,
                })
            })
            .filter(|process| !process.state.starts_with('Z'))
            .filter(|process| process.command != "ps -o pid,stat,args")
            .collect()
    }

    /// The live processes that were not there when the container started: what sessions left.
    pub async fn session_processes(&self) -> Vec<ContainerProcess> {
        self.all_processes()
            .await
            .into_iter()
            .filter(|process| !self.baseline.contains(&process.pid))
            .collect()
    }

    /// Waits (within [`super::PATIENCE`]) until no session process is left, and returns what
    /// is left then.
    pub async fn wait_for_no_session_processes(&self) -> Vec<ContainerProcess> {
        let gone =
            ptyhub_test_support::poll_until(super::PATIENCE, super::POLL_INTERVAL, || async {
                self.session_processes().await.is_empty().then_some(())
            })
            .await;
        match gone {
            Some(()) => Vec::new(),
            None => self.session_processes().await,
        }
    }

    /// Runs `command` in the container (no TTY) and returns its stdout and stderr.
    pub async fn exec_output(&self, command: &[&str]) -> String {
        let exec = self
            .docker
            .create_exec(
                &self.id,
                CreateExecOptions {
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    cmd: Some(command.to_vec()),
                    ..Default::default()
                },
            )
            .await
            .expect("create exec");
        let mut text = Vec::new();
        if let StartExecResults::Attached { mut output, .. } = self
            .docker
            .start_exec(&exec.id, None::<StartExecOptions>)
            .await
            .expect("start exec")
        {
            while let Some(frame) = output.next().await {
                text.extend_from_slice(frame.expect("exec output").as_ref());
            }
        }
        String::from_utf8_lossy(&text).into_owned()
    }

    /// Stops the container (SIGKILL to everything in it), as an operator's `docker kill` would.
    pub async fn stop(&self) {
        self.docker
            .stop_container(
                &self.id,
                Some(StopContainerOptions {
                    t: Some(0),
                    ..Default::default()
                }),
            )
            .await
            .expect("stop test container");
    }
}

impl Drop for DockerFixture {
    fn drop(&mut self) {
        // Drop may run inside the test's runtime (which cannot block on itself) or while
        // unwinding from a failed assertion: remove the container from a thread of its own.
        let docker = self.docker.clone();
        let id = self.id.clone();
        let removal = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime for container removal");
            runtime.block_on(async {
                docker
                    .remove_container(
                        &id,
                        Some(RemoveContainerOptions {
                            force: true,
                            v: true,
                            ..Default::default()
                        }),
                    )
                    .await
            })
        });
        match removal.join() {
            Ok(Ok(())) => {}
            Ok(Err(error)) => eprintln!("cannot remove test container {}: {error}", self.name),
            Err(_) => eprintln!("removing test container {} panicked", self.name),
        }
    }
}
