//! The Docker runtime against a real engine: byte-exact output, size from the start, resize,
//! exit codes, ending every process of a session in both process views, crash recovery from the
//! state directory, and each error a client must see clearly.

use std::time::Duration;

use pty_broker::domain::{ExitStatus, TerminalSize};
use pty_broker::runtime::docker::{
    DockerRuntime, DockerRuntimeConfig, ProcessView, reap_orphans_from_state,
};
use pty_broker::runtime::{GroupSignal, PtyRuntime, RuntimeError, SpawnSpec, SpawnedPty, Target};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use uuid::Uuid;

use crate::support::docker::DockerFixture;
use crate::support::{PATIENCE, POLL_INTERVAL};

fn spec(container: &str, command: &[&str]) -> SpawnSpec {
    SpawnSpec {
        session_id: Uuid::new_v4(),
        target: Target::Docker {
            container: container.to_owned(),
        },
        command: command.iter().map(|part| (*part).to_owned()).collect(),
        env: Vec::new(),
        cwd: None,
        user: None,
        size: TerminalSize::DEFAULT,
        shell_integration: false,
    }
}

fn runtime() -> DockerRuntime {
    DockerRuntime::new(DockerRuntimeConfig::default()).expect("docker runtime")
}

fn container_view_runtime() -> DockerRuntime {
    DockerRuntime::new(DockerRuntimeConfig {
        process_view: ProcessView::Container,
        ..DockerRuntimeConfig::default()
    })
    .expect("docker runtime")
}

/// Reads `pty`'s output until `needle` has appeared after `from`; returns everything read.
async fn read_until(pty: &mut SpawnedPty, collected: &mut Vec<u8>, from: usize, needle: &[u8]) {
    let reading = async {
        let mut chunk = [0u8; 4096];
        while find(&collected[from.min(collected.len())..], needle).is_none() {
            let read = pty.output.read(&mut chunk).await.expect("read output");
            assert!(
                read > 0,
                "output ended before {:?} appeared; got {:?}",
                String::from_utf8_lossy(needle),
                String::from_utf8_lossy(collected)
            );
            collected.extend_from_slice(&chunk[..read]);
        }
    };
    if tokio::time::timeout(PATIENCE, reading).await.is_err() {
        panic!(
            "{:?} never appeared; got {:?}",
            String::from_utf8_lossy(needle),
            String::from_utf8_lossy(collected)
        );
    }
}

/// Reads `pty`'s output to its end.
async fn read_to_end(pty: &mut SpawnedPty) -> Vec<u8> {
    let mut collected = Vec::new();
    tokio::time::timeout(PATIENCE, pty.output.read_to_end(&mut collected))
        .await
        .expect("output ends")
        .expect("read output");
    collected
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

async fn wait(pty: &SpawnedPty) -> ExitStatus {
    tokio::time::timeout(PATIENCE, pty.process.wait())
        .await
        .expect("wait returns")
        .expect("exit status")
}

#[tokio::test]
async fn shell_echoes_input_and_reports_its_exit_code() {
    let Some(container) = DockerFixture::start().await else {
        return;
    };
    let mut pty = runtime()
        .spawn(&spec(container.name(), &[]))
        .await
        .expect("spawn");
    pty.input
        .write_all(b"echo hel''lo-from-docker; exit 3\n")
        .await
        .unwrap();
    let output = read_to_end(&mut pty).await;
    assert!(
        find(&output, b"hello-from-docker").is_some(),
        "{:?}",
        String::from_utf8_lossy(&output)
    );
    assert_eq!(wait(&pty).await, ExitStatus::exited(3));
    assert_eq!(pty.process.pid(), None);
}

#[tokio::test]
async fn a_session_outlives_the_exit_status_timeout_while_it_runs() {
    let Some(container) = DockerFixture::start().await else {
        return;
    };
    // The timeout bounds the wait for the status after the output ended, not the session's life:
    // the session task waits on the exit from the start, as here.
    let runtime = DockerRuntime::new(DockerRuntimeConfig {
        exit_status_timeout: Duration::from_millis(300),
        ..DockerRuntimeConfig::default()
    })
    .expect("docker runtime");
    let mut pty = runtime
        .spawn(&spec(
            container.name(),
            &["sh", "-c", "sleep 2; echo still-here; exit 4"],
        ))
        .await
        .expect("spawn");
    let process = &pty.process;
    let output = &mut pty.output;
    let (status, output) = tokio::join!(
        tokio::time::timeout(PATIENCE, process.wait()),
        tokio::time::timeout(PATIENCE, async {
            let mut collected = Vec::new();
            output.read_to_end(&mut collected).await.map(|_| collected)
        }),
    );
    let output = output.expect("output ends").expect("read output");
    assert!(
        find(&output, b"still-here").is_some(),
        "{:?}",
        String::from_utf8_lossy(&output)
    );
    assert_eq!(
        status.expect("wait returns").expect("exit status"),
        ExitStatus::exited(4)
    );
}

#[tokio::test]
async fn every_byte_value_passes_unchanged_in_both_directions() {
    let Some(container) = DockerFixture::start().await else {
        return;
    };
    // Output: every byte value, with chunks that start with 0, 1 and 2 (what a multiplexing
    // header would begin with), printed by the program under `stty raw -echo`.
    let all_bytes: String = (0u16..256).map(|byte| format!("\\{byte:03o}")).collect();
    let script = format!(
        "stty raw -echo; printf 'BEGIN'; sleep 0.2; printf '\\000\\001\\002'; sleep 0.2; \
         printf '\\001x'; sleep 0.2; printf '\\002y'; sleep 0.2; printf '{all_bytes}'; \
         printf 'END'"
    );
    let mut pty = runtime()
        .spawn(&spec(container.name(), &["sh", "-c", &script]))
        .await
        .expect("spawn");
    let output = read_to_end(&mut pty).await;
    let begin = find(&output, b"BEGIN").expect("BEGIN marker") + 5;
    let mut expected = b"\x00\x01\x02\x01x\x02y".to_vec();
    expected.extend((0u16..256).map(|byte| byte as u8));
    expected.extend_from_slice(b"END");
    assert_eq!(&output[begin..], &expected[..]);
    assert_eq!(wait(&pty).await, ExitStatus::exited(0));

    // Input: every byte value written to a raw TTY comes back from `cat` unchanged.
    let mut pty = runtime()
        .spawn(&spec(
            container.name(),
            &[
                "sh",
                "-c",
                "stty raw -echo -iexten; printf READY; head -c 256; printf DONE",
            ],
        ))
        .await
        .expect("spawn");
    let mut collected = Vec::new();
    read_until(&mut pty, &mut collected, 0, b"READY").await;
    let ready = find(&collected, b"READY").unwrap() + 5;
    let sent: Vec<u8> = (0u16..256).map(|byte| byte as u8).collect();
    pty.input.write_all(&sent).await.unwrap();
    pty.input.flush().await.unwrap();
    read_until(&mut pty, &mut collected, ready, b"DONE").await;
    let done = ready + find(&collected[ready..], b"DONE").unwrap();
    assert_eq!(&collected[ready..done], &sent[..]);
}

#[tokio::test]
async fn the_pty_has_the_requested_size_from_the_first_instruction() {
    let Some(container) = DockerFixture::start().await else {
        return;
    };
    let mut spec = spec(container.name(), &["stty", "size"]);
    spec.size = TerminalSize::new(132, 43).unwrap();
    let mut pty = runtime().spawn(&spec).await.expect("spawn");
    let output = read_to_end(&mut pty).await;
    assert_eq!(String::from_utf8_lossy(&output).trim(), "43 132");
    assert_eq!(wait(&pty).await, ExitStatus::exited(0));
}

#[tokio::test]
async fn resize_reaches_the_pty_and_is_harmless_after_exit() {
    let Some(container) = DockerFixture::start().await else {
        return;
    };
    let mut pty = runtime()
        .spawn(&spec(container.name(), &["sh"]))
        .await
        .expect("spawn");
    let mut collected = Vec::new();
    pty.input.write_all(b"echo rea''dy\n").await.unwrap();
    read_until(&mut pty, &mut collected, 0, b"ready").await;
    pty.process
        .resize(TerminalSize::new(100, 30).unwrap())
        .await
        .expect("resize");
    let mark = collected.len();
    pty.input.write_all(b"stty size\n").await.unwrap();
    read_until(&mut pty, &mut collected, mark, b"30 100").await;
    pty.input.write_all(b"exit 0\n").await.unwrap();
    read_to_end(&mut pty).await;
    assert_eq!(wait(&pty).await, ExitStatus::exited(0));
    pty.process
        .resize(TerminalSize::new(90, 20).unwrap())
        .await
        .expect("a resize after exit is not an error");
}

#[tokio::test]
async fn env_cwd_and_user_are_applied() {
    let Some(container) = DockerFixture::start().await else {
        return;
    };
    let mut spec = spec(
        container.name(),
        &[
            "sh",
            "-c",
            "echo \"$TERM|$GREETING|$(pwd)|$(id -un)|$PTYHUB_SESSION_ID\"",
        ],
    );
    spec.env = vec![("GREETING".to_owned(), "hi there".to_owned())];
    spec.cwd = Some("/tmp".to_owned());
    spec.user = Some("tester".to_owned());
    let session_id = spec.session_id;
    let mut pty = runtime().spawn(&spec).await.expect("spawn");
    let output = read_to_end(&mut pty).await;
    assert_eq!(
        String::from_utf8_lossy(&output).trim(),
        format!("xterm-256color|hi there|/tmp|tester|{session_id}")
    );
}

/// Starts a session that leaves processes behind in every way a shell can: a background job, a
/// job in a Unix session of its own, one that ignores SIGHUP and SIGTERM, and the foreground
/// command the shell exec'd into (four processes).
async fn spawn_busy_session(runtime: &DockerRuntime, container: &DockerFixture) -> SpawnedPty {
    let mut pty = runtime
        .spawn(&spec(
            container.name(),
            &[
                "sh",
                "-c",
                "sleep 1001 & setsid sleep 1002 & (trap '' HUP TERM; sleep 1003) & \
                 echo started; sleep 1004",
            ],
        ))
        .await
        .expect("spawn");
    let mut collected = Vec::new();
    read_until(&mut pty, &mut collected, 0, b"started").await;
    let started = ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || async {
        (container.session_processes().await.len() >= 4).then_some(())
    })
    .await;
    assert!(
        started.is_some(),
        "session processes never all started: {:?}",
        container.session_processes().await
    );
    pty
}

/// Sends the teardown signals in their order; the last one ends whatever ignored the others.
async fn end_group(pty: &SpawnedPty) {
    for signal in [
        GroupSignal::Hangup,
        GroupSignal::Terminate,
        GroupSignal::Kill,
    ] {
        pty.process
            .signal_group(signal)
            .await
            .expect("signal group");
    }
}

async fn assert_signal_group_leaves_no_process(runtime: DockerRuntime) {
    let Some(container) = DockerFixture::start().await else {
        return;
    };
    let mut pty = spawn_busy_session(&runtime, &container).await;
    assert!(pty.process.group_alive().await.unwrap());
    end_group(&pty).await;
    read_to_end(&mut pty).await;
    assert_ne!(wait(&pty).await.code, 0);
    let ended = ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || async {
        (!pty.process.group_alive().await.unwrap()).then_some(())
    })
    .await;
    assert!(ended.is_some(), "group stays alive");
    assert_eq!(container.wait_for_no_session_processes().await, vec![]);
    // Signalling a group that is gone is not an error.
    pty.process
        .signal_group(GroupSignal::Kill)
        .await
        .expect("signal an ended group");
}

#[tokio::test]
async fn signal_group_ends_every_process_of_the_session_through_the_host_view() {
    assert_signal_group_leaves_no_process(runtime()).await;
}

#[tokio::test]
async fn signal_group_ends_every_process_of_the_session_from_inside_the_container() {
    assert_signal_group_leaves_no_process(container_view_runtime()).await;
}

#[tokio::test]
async fn signal_group_spares_other_sessions_in_the_same_container() {
    let Some(container) = DockerFixture::start().await else {
        return;
    };
    let runtime = runtime();
    let mut doomed = spawn_busy_session(&runtime, &container).await;
    let mut other = runtime
        .spawn(&spec(
            container.name(),
            &["sh", "-c", "echo other; sleep 1005"],
        ))
        .await
        .expect("spawn");
    let mut collected = Vec::new();
    read_until(&mut other, &mut collected, 0, b"other").await;
    end_group(&doomed).await;
    read_to_end(&mut doomed).await;
    assert!(other.process.group_alive().await.unwrap());
    let left: Vec<String> = container
        .session_processes()
        .await
        .into_iter()
        .map(|process| process.command)
        .collect();
    assert!(
        left.iter().any(|command| command == "sleep 1005"),
        "{left:?}"
    );
    assert!(
        !left
            .iter()
            .any(|command| command.starts_with("sleep 100") && command != "sleep 1005"),
        "{left:?}"
    );
    end_group(&other).await;
}

async fn assert_reaping_after_crash_leaves_no_process(view: ProcessView) {
    let Some(container) = DockerFixture::start().await else {
        return;
    };
    let data_dir = tempfile::tempdir().unwrap();
    let config = DockerRuntimeConfig {
        process_view: view,
        ..DockerRuntimeConfig::default()
    };
    let runtime = DockerRuntime::new(config.clone())
        .unwrap()
        .with_data_dir(data_dir.path());
    let pty = spawn_busy_session(&runtime, &container).await;
    let records = data_dir.path().join("docker-sessions");
    assert_eq!(std::fs::read_dir(&records).unwrap().count(), 1);
    // A broker killed with SIGKILL drops its connections but runs no destructor.
    let SpawnedPty {
        output,
        input,
        process,
        output_buffered: _,
        shell_integration: _,
    } = pty;
    drop((output, input));
    std::mem::forget(process);
    assert!(!container.session_processes().await.is_empty());

    let report = reap_orphans_from_state(data_dir.path(), &config)
        .await
        .expect("reap");
    assert_eq!(report.sessions, 1);
    assert!(report.processes_ended >= 4, "{report:?}");
    assert_eq!(container.wait_for_no_session_processes().await, vec![]);
    assert_eq!(std::fs::read_dir(&records).unwrap().count(), 0);
    // Nothing left to do the second time.
    let report = reap_orphans_from_state(data_dir.path(), &config)
        .await
        .expect("reap again");
    assert_eq!(report.sessions, 0);
}

#[tokio::test]
async fn reaping_after_a_crash_ends_the_old_sessions_through_the_host_view() {
    assert_reaping_after_crash_leaves_no_process(ProcessView::Auto).await;
}

#[tokio::test]
async fn reaping_after_a_crash_ends_the_old_sessions_from_inside_the_container() {
    assert_reaping_after_crash_leaves_no_process(ProcessView::Container).await;
}

#[tokio::test]
async fn a_closed_session_leaves_no_record() {
    let Some(container) = DockerFixture::start().await else {
        return;
    };
    let data_dir = tempfile::tempdir().unwrap();
    let runtime = runtime().with_data_dir(data_dir.path());
    let mut pty = runtime
        .spawn(&spec(container.name(), &["true"]))
        .await
        .expect("spawn");
    read_to_end(&mut pty).await;
    assert_eq!(wait(&pty).await, ExitStatus::exited(0));
    drop(pty);
    let records = data_dir.path().join("docker-sessions");
    assert_eq!(std::fs::read_dir(&records).unwrap().count(), 0);
}

#[tokio::test]
async fn missing_socket_is_unavailable() {
    let data_dir = tempfile::tempdir().unwrap();
    let socket = data_dir.path().join("no-docker.sock");
    let runtime = DockerRuntime::new(DockerRuntimeConfig::with_endpoint(Some(format!(
        "unix://{}",
        socket.display()
    ))))
    .unwrap();
    let error = runtime
        .spawn(&spec("anything", &[]))
        .await
        .expect_err("no engine");
    assert!(matches!(error, RuntimeError::Unavailable(_)), "{error:?}");
    assert!(error.to_string().contains("no-docker.sock"), "{error}");
}

#[tokio::test]
async fn refused_tcp_endpoint_is_unavailable() {
    // Bound but never listening: the port stays this test's, and every connection is refused.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    let runtime = DockerRuntime::new(DockerRuntimeConfig::with_endpoint(Some(format!(
        "tcp://127.0.0.1:{port}"
    ))))
    .unwrap();
    let error = runtime
        .spawn(&spec("anything", &[]))
        .await
        .expect_err("no engine");
    assert!(matches!(error, RuntimeError::Unavailable(_)), "{error:?}");
}

#[test]
fn unsupported_endpoint_is_refused_at_construction() {
    let error = DockerRuntime::new(DockerRuntimeConfig::with_endpoint(Some(
        "ssh://user@host".to_owned(),
    )))
    .expect_err("ssh is not supported");
    assert!(error.to_string().contains("ssh://user@host"), "{error}");
}

#[tokio::test]
async fn unknown_container_is_not_found() {
    if !ptyhub_test_support::require(ptyhub_test_support::Requirement::Docker) {
        return;
    }
    let name = format!("ptyhub-test-absent-{}", Uuid::new_v4().simple());
    let error = runtime()
        .spawn(&spec(&name, &[]))
        .await
        .expect_err("no such container");
    assert!(
        matches!(error, RuntimeError::TargetNotFound(_)),
        "{error:?}"
    );
    assert!(error.to_string().contains(&name), "{error}");
}

#[tokio::test]
async fn stopped_container_is_not_running() {
    let Some(container) = DockerFixture::start().await else {
        return;
    };
    container.stop().await;
    let error = runtime()
        .spawn(&spec(container.name(), &[]))
        .await
        .expect_err("container is stopped");
    assert!(
        matches!(error, RuntimeError::TargetNotRunning(_)),
        "{error:?}"
    );
    assert!(error.to_string().contains("not running"), "{error}");
}

#[tokio::test]
async fn unknown_command_shows_the_error_and_exits_non_zero() {
    let Some(container) = DockerFixture::start().await else {
        return;
    };
    let mut pty = runtime()
        .spawn(&spec(container.name(), &["no-such-command-anywhere"]))
        .await
        .expect("docker starts the exec; the command fails inside it");
    let output = read_to_end(&mut pty).await;
    let text = String::from_utf8_lossy(&output);
    assert!(text.contains("no-such-command-anywhere"), "{text:?}");
    assert!(text.contains("not found"), "{text:?}");
    let status = wait(&pty).await;
    assert!(matches!(status.code, 126 | 127), "{status:?}");
}

#[tokio::test]
async fn stopping_the_container_ends_live_sessions_with_a_failure() {
    let Some(container) = DockerFixture::start().await else {
        return;
    };
    let mut pty = runtime()
        .spawn(&spec(
            container.name(),
            &["sh", "-c", "echo up; sleep 1000"],
        ))
        .await
        .expect("spawn");
    let mut collected = Vec::new();
    read_until(&mut pty, &mut collected, 0, b"up").await;
    container.stop().await;
    read_to_end(&mut pty).await;
    let status = wait(&pty).await;
    assert_ne!(status.code, 0, "{status:?}");
    assert!(!pty.process.group_alive().await.unwrap());
}
