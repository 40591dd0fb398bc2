//! Ending a session's processes, seen by the processes themselves: a shell that logs every
//! signal it receives and ignores SIGHUP and SIGTERM hears SIGHUP, then SIGTERM, and is then
//! ended by SIGKILL once the grace period is over, leaving no process behind. On this host, in a
//! container with an init process, and in one without.

use std::time::Duration;

use anyhow::ensure;
use ptyhub_proto::broker::v1 as pb;

use crate::support::{self, Backend, TestBroker};

/// Logs each catchable teardown signal to the file named by `$1`, ignores it otherwise, and
/// keeps a child in the foreground so that the session has more than one process to end.
const SIGNAL_LOGGING_SESSION: &str = r#"
log=$1
trap 'echo HUP >> "$log"' HUP
trap 'echo TERM >> "$log"' TERM
printf 'ready\n'
while :; do sleep 1; done
"#;

/// Between the signals the broker waits half of this; long enough for the shell to run its trap
/// however busy the machine is.
const KILL_GRACE: Duration = Duration::from_secs(6);

backend_scenarios! {
    kill_sends_hup_then_term_then_kill_and_leaves_no_process,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_in_a_container_without_init_sends_hup_then_term_then_kill_and_leaves_no_process()
-> anyhow::Result<()> {
    support::init_logging();
    if !ptyhub_test_support::require(ptyhub_test_support::Requirement::Docker) {
        return Ok(());
    }
    let broker = TestBroker::start_docker_without_init(Box::new(|config| {
        config.kill_grace = KILL_GRACE;
    }))
    .await?;
    assert_teardown_order(broker).await
}

async fn kill_sends_hup_then_term_then_kill_and_leaves_no_process(
    backend: Backend,
) -> anyhow::Result<()> {
    let broker =
        TestBroker::start_with(backend, Box::new(|config| config.kill_grace = KILL_GRACE)).await?;
    assert_teardown_order(broker).await
}

async fn assert_teardown_order(broker: TestBroker) -> anyhow::Result<()> {
    // Where the session's processes can write: a directory of this test's own on this host, or
    // the broker's own fresh container.
    let host_directory = tempfile::tempdir()?;
    let log = match broker.backend {
        Backend::Local => host_directory
            .path()
            .join("signals.log")
            .to_string_lossy()
            .into_owned(),
        Backend::Docker => "/tmp/signals.log".to_owned(),
    };
    let session = broker
        .spawn(&["sh", "-c", SIGNAL_LOGGING_SESSION, "sh", &log], 80, 24)
        .await?;
    let mut controller = broker
        .attach(&session.session_id, pb::Role::Controller, Some(0))
        .await?;
    controller.read_until(b"ready").await?;
    // The shell and its `sleep`.
    let processes = broker.wait_for_processes(session.pid, 2).await?;

    let killed = broker.kill(&session.session_id).await?;
    assert_eq!(killed.close_reason, pb::CloseReason::Killed as i32);
    // Kill answers once the group has ended, so the log is complete.
    let signals = broker.read_session_file(&log).await?;
    ensure!(
        signals.lines().collect::<Vec<_>>() == ["HUP", "TERM"],
        "the shell heard {signals:?}, not SIGHUP then SIGTERM once each"
    );
    // Only SIGKILL can have ended a shell that ignores the other two.
    broker.assert_all_ended(&processes).await?;
    broker.stop().await
}
