//! Docker instances through the CLI: `ptyhub up` with the Docker backend, a container registered
//! with `ptyhub instance add --docker`, then `exec` and `attach` running inside it. Needs a
//! Docker engine with the test image (`cargo xtask test` provides both).

use std::collections::HashMap;

use crate::support::Up;
use crate::support::pty::Terminal;
use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};
use ptyhub_test_support::Requirement;

/// The image `cargo xtask test` builds: static busybox.
const TEST_IMAGE: &str = "ptyhub-test-busybox:latest";
/// Every test container carries it, so leftovers can be found and removed.
const TEST_LABEL: &str = "ptyhub.test";
/// How long a test container runs at most: its command is `sleep` for this long, so one whose
/// test was killed before its drop (a timeout) stops by itself, and `cargo xtask test` removes
/// it at its next start.
const LIFETIME_SECONDS: &str = "3600";

/// A throwaway container from the test image, removed (forcibly) when dropped.
#[derive(Debug)]
struct Container {
    runtime: tokio::runtime::Runtime,
    docker: Docker,
    name: String,
    id: String,
}

impl Container {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let name = format!("ptyhub-cli-test-{}", uuid::Uuid::new_v4().simple());
        let (docker, id) = runtime.block_on(async {
            let docker = Docker::connect_with_defaults()
                .expect("docker client")
                .negotiate_version()
                .await
                .expect("the docker engine answers");
            let body = ContainerCreateBody {
                image: Some(TEST_IMAGE.to_owned()),
                cmd: Some(vec!["sleep".to_owned(), LIFETIME_SECONDS.to_owned()]),
                labels: Some(HashMap::from([(TEST_LABEL.to_owned(), "1".to_owned())])),
                host_config: Some(HostConfig {
                    network_mode: Some("none".to_owned()),
                    init: Some(true),
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
                .expect("create a test container (cargo xtask test builds the image)");
            docker
                .start_container(&created.id, None)
                .await
                .expect("start the test container");
            (docker, created.id)
        });
        Self {
            runtime,
            docker,
            name,
            id,
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = self.runtime.block_on(self.docker.remove_container(
            &self.id,
            Some(RemoveContainerOptions {
                force: true,
                ..Default::default()
            }),
        ));
    }
}

#[test]
fn docker_instances_run_exec_and_attach_inside_the_container() {
    if !ptyhub_test_support::require(Requirement::Docker) {
        return;
    }
    let container = Container::start();
    let up = Up::start_with_backends("local,docker");
    // As `tester`: the broker runs nothing as root in a container unless told to.
    let added = up.run_ok(&[
        "--json",
        "instance",
        "add",
        "box",
        "--docker",
        &container.name,
        "--user",
        "tester",
    ]);
    let added: serde_json::Value = serde_json::from_str(&added).expect("instance add --json");
    assert_eq!(
        added["target"]["docker"]["container"], container.name,
        "{added}"
    );

    // Docker sets the hostname to the short container id: proof the command ran inside.
    let output = up.run(&[
        "exec",
        "box",
        "--",
        "sh",
        "-c",
        "echo in-container; cat /etc/hostname; exit 4",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("in-container\n{}\n", &container.id[..12]),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(4));

    let input = crate::support::run_bounded(
        up.ptyhub().args(["exec", "box", "--", "cat"]),
        Some(b"piped\ninto the container".to_vec()),
    );
    assert_eq!(
        String::from_utf8_lossy(&input.stdout),
        "piped\ninto the container"
    );
    assert!(input.status.success(), "{input:?}");

    let mut terminal = Terminal::spawn(&up, &["attach", "box", "--alias", "boxed"], 24, 80);
    terminal.type_keys("cat /etc/hostname; echo boxed-$((6*7))\r");
    terminal.expect(&container.id[..12]);
    terminal.expect("boxed-42");
    terminal.type_keys("exit 5\r");
    assert_eq!(terminal.wait().code(), Some(5), "{:?}", terminal.shown());
}

#[test]
fn a_container_that_runs_as_root_is_refused_when_added_unless_up_allows_root() {
    if !ptyhub_test_support::require(Requirement::Docker) {
        return;
    }
    let container = Container::start();
    let up = Up::start_with_backends("local,docker");
    // The test image sets no user: its sessions would run as root.
    let line = crate::support::one_error_line(&up.run(&[
        "instance",
        "add",
        "rooted",
        "--docker",
        &container.name,
    ]));
    assert!(
        line.contains(&format!("container {} would run as root", container.name))
            && line.contains("--user NAME")
            && line.contains("--allow-root"),
        "{line}"
    );
    let listed = up.run_ok(&["--json", "instance", "ls"]);
    assert!(
        !listed.contains("rooted"),
        "nothing was registered: {listed}"
    );
    let line = crate::support::one_error_line(&up.run(&[
        "instance",
        "add",
        "rooted",
        "--docker",
        &container.name,
        "--user",
        "root",
    ]));
    assert!(line.contains("as root, which is root"), "{line}");
    drop(up);

    let up = Up::start_with_flags("local,docker", &["--allow-root"]);
    up.run_ok(&["instance", "add", "rooted", "--docker", &container.name]);
    let ran = up.run(&["exec", "rooted", "--", "id", "-u"]);
    assert!(ran.status.success(), "{ran:?}");
    assert_eq!(String::from_utf8_lossy(&ran.stdout).trim(), "0");
}

#[test]
fn an_unknown_container_is_one_clear_error() {
    if !ptyhub_test_support::require(Requirement::Docker) {
        return;
    }
    let up = Up::start_with_backends("local,docker");
    up.run_ok(&[
        "instance",
        "add",
        "ghost",
        "--docker",
        "ptyhub-no-such-container",
    ]);
    let output = up.run(&["exec", "ghost", "--", "true"]);
    let line = crate::support::one_error_line(&output);
    assert!(line.contains("ptyhub-no-such-container"), "{line}");
}
