//! Finding a new exec's session leader, and with it the view (host or container) through which
//! the session's processes are found and signalled for the rest of its life.

use std::time::Duration;

use super::ProcessView;
use super::engine::{ContainerInfo, Engine};
use super::group::{self, GroupView, Leader, SessionGroup};
use crate::runtime::procfs;

/// How long spawn waits for the engine to report the exec's pid, and for the leader to show.
const IDENTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// Finds where the session's processes can be seen, and its leader there.
pub(super) async fn identify_group(
    engine: &Engine,
    process_view: ProcessView,
    container: &ContainerInfo,
    exec_id: &str,
    marker: &str,
    user: Option<&str>,
) -> (Option<u32>, SessionGroup) {
    let host_pid = exec_host_pid(engine, exec_id).await;
    let mut group = SessionGroup {
        container_id: container.id.clone(),
        marker: marker.to_owned(),
        view: GroupView::Container,
        leader: None,
    };
    if process_view == ProcessView::Auto
        && let Some(pid) = host_pid
        && let Some(pid_namespace) = container.init_pid.and_then(procfs::pid_namespace)
        && let Some(leader) =
            identify_host_leader(engine, exec_id, pid, &pid_namespace, marker).await
    {
        group.view = GroupView::Host { pid_namespace };
        group.leader = Some(leader);
        return (host_pid, group);
    }
    group.leader = identify_container_leader(engine, &container.id, exec_id, user, marker).await;
    (host_pid, group)
}

/// The exec's pid as the engine reports it, once it started; `None` if it ended first.
async fn exec_host_pid(engine: &Engine, exec_id: &str) -> Option<u32> {
    let deadline = tokio::time::Instant::now() + IDENTIFY_TIMEOUT;
    loop {
        let inspected = engine.docker.inspect_exec(exec_id).await.ok()?;
        if let Some(pid) = inspected
            .pid
            .and_then(|pid| u32::try_from(pid).ok())
            .filter(|pid| *pid > 0)
        {
            return Some(pid);
        }
        if inspected.running == Some(false) && inspected.exit_code.is_some() {
            return None;
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Proves that host pid `pid` is this session's leader: in the container's PID namespace, leading
/// its Unix session, with the marker in its environment (once the runtime's own setup has
/// exec'd the command). `None` when the broker cannot see it so.
async fn identify_host_leader(
    engine: &Engine,
    exec_id: &str,
    pid: u32,
    pid_namespace: &str,
    marker: &str,
) -> Option<Leader> {
    let deadline = tokio::time::Instant::now() + IDENTIFY_TIMEOUT;
    loop {
        let stat = procfs::ProcStat::read(pid)?;
        if procfs::pid_namespace(pid).as_deref() != Some(pid_namespace) {
            return None;
        }
        if stat.session == pid && procfs::environment_has(pid, marker) {
            return Some(Leader {
                pid,
                start_time: stat.start_time,
            });
        }
        let running = engine
            .docker
            .inspect_exec(exec_id)
            .await
            .ok()
            .and_then(|inspected| inspected.running);
        if running == Some(false) || tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Finds the session's leader with a helper exec inside the container.
async fn identify_container_leader(
    engine: &Engine,
    container_id: &str,
    exec_id: &str,
    user: Option<&str>,
    marker: &str,
) -> Option<Leader> {
    let deadline = tokio::time::Instant::now() + IDENTIFY_TIMEOUT;
    loop {
        match group::find_leader_in_container(&engine.docker, container_id, user, marker).await {
            Ok(Some(leader)) => return Some(leader),
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(container = %container_id, %error, "cannot identify the session leader in the container");
                return None;
            }
        }
        let running = engine
            .docker
            .inspect_exec(exec_id)
            .await
            .ok()
            .and_then(|inspected| inspected.running);
        if running == Some(false) || tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
