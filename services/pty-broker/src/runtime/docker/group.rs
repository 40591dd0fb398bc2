//! Finding and signalling every process of one session, on the host or from inside the
//! container: Docker has no call to kill an exec.
//!
//! A session's processes are the Unix session its exec leads (a TTY exec is a session leader) plus
//! every process whose environment carries the session's marker (`PTYHUB_SESSION_ID=<uuid>`),
//! which catches children that started a session of their own. Both are looked up fresh before
//! each signal, in one of two views:
//!
//! - **host**: the broker shares the PID namespace with the engine's processes and reads `/proc`
//!   itself, limited to the container's PID namespace;
//! - **container**: a short helper exec (`/bin/sh` as root) scans the container's `/proc` and
//!   signals from inside; it needs `sh` and `cat` in the container.

use std::time::Duration;

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use futures::StreamExt as _;
use nix::sys::signal::Signal;

use super::DockerError;
pub(crate) use crate::runtime::procfs::Leader;
use crate::runtime::{GroupSignal, procfs};

/// The environment variable every Docker session carries, naming its session id.
pub const SESSION_MARKER_VARIABLE: &str = "PTYHUB_SESSION_ID";

/// How long a helper exec may take before the scan counts as failed.
const HELPER_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the broker looks for a session's processes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "view", rename_all = "snake_case")]
pub(crate) enum GroupView {
    /// The broker's own `/proc`, restricted to the container's PID namespace.
    Host { pid_namespace: String },
    /// A helper exec inside the container.
    Container,
}

/// One session's processes in one container.
#[derive(Debug, Clone)]
pub(crate) struct SessionGroup {
    pub container_id: String,
    pub marker: String,
    pub view: GroupView,
    /// The exec's session leader, in the view's PID namespace, when it was found.
    pub leader: Option<Leader>,
}

impl SessionGroup {
    /// The pids (in the view's namespace) of the session's live processes.
    pub async fn members(&self, docker: &Docker) -> Result<Vec<u32>, DockerError> {
        match &self.view {
            GroupView::Host { pid_namespace } => {
                let members = self.host_members(pid_namespace).await?;
                Ok(members.iter().map(|member| member.pid).collect())
            }
            GroupView::Container => self.run_helper(docker, "list").await,
        }
    }

    /// Sends `signal` to each of the session's live processes; an interrupt only to those in
    /// their terminal's foreground job, as the terminal's own Ctrl-C.
    pub async fn signal(&self, docker: &Docker, signal: GroupSignal) -> Result<(), DockerError> {
        match &self.view {
            GroupView::Host { pid_namespace } => {
                let members = self.host_members(pid_namespace).await?;
                let only_foreground = signal == GroupSignal::Interrupt;
                let signal = nix_signal(signal);
                tokio::task::spawn_blocking(move || {
                    let members = if only_foreground {
                        procfs::foreground_members(members)
                    } else {
                        members
                    };
                    procfs::signal_members(&members, signal)
                })
                .await
                .map_err(|error| DockerError::Internal(error.to_string()))?
                .map_err(|source| DockerError::Host {
                    context: "signal session processes",
                    source,
                })
            }
            GroupView::Container => self.run_helper(docker, signal_name(signal)).await.map(drop),
        }
    }

    async fn host_members(&self, pid_namespace: &str) -> Result<Vec<procfs::Member>, DockerError> {
        let namespace = pid_namespace.to_owned();
        let marker = self.marker.clone();
        let leader = self.leader;
        tokio::task::spawn_blocking(move || {
            procfs::session_members(Some(&namespace), Some(&marker), leader)
        })
        .await
        .map_err(|error| DockerError::Internal(error.to_string()))?
        .map_err(|source| DockerError::Host {
            context: "list session processes",
            source,
        })
    }

    async fn run_helper(&self, docker: &Docker, action: &str) -> Result<Vec<u32>, DockerError> {
        let (leader_pid, leader_start) = match self.leader {
            Some(leader) => (leader.pid.to_string(), leader.start_time.to_string()),
            None => (String::new(), String::new()),
        };
        let output = run_scan_script(
            docker,
            &self.container_id,
            Some("0"),
            &[action, &self.marker, &leader_pid, &leader_start],
        )
        .await;
        match output {
            Ok(output) => Ok(parse_pids(&output)),
            // A container that stopped or went away has no processes left.
            Err(DockerError::Engine { status, .. }) if status == 404 || status == 409 => {
                Ok(Vec::new())
            }
            Err(error) => Err(error),
        }
    }
}

/// Finds a session's leader from inside the container, running as `user` (the session's own
/// user, `None` for the container's default, whose processes' environments it may read): the process with the marker whose parent is
/// outside the container (pid 0) and that leads its Unix session.
pub(crate) async fn find_leader_in_container(
    docker: &Docker,
    container_id: &str,
    user: Option<&str>,
    marker: &str,
) -> Result<Option<Leader>, DockerError> {
    let output = run_scan_script(docker, container_id, user, &["leader", marker, "", ""]).await?;
    let mut fields = output.split_ascii_whitespace();
    let leader = match (fields.next(), fields.next()) {
        (Some(pid), Some(start_time)) => match (pid.parse(), start_time.parse()) {
            (Ok(pid), Ok(start_time)) => Some(Leader { pid, start_time }),
            _ => None,
        },
        _ => None,
    };
    Ok(leader)
}

/// The scan, in POSIX sh with `cat` as its only outside tool. Arguments: the action (`leader`,
/// `list`, or a signal name for `kill -s`), the marker, and the leader's pid and start time (both
/// empty when unknown). Prints one pid per line (for `leader`: `pid start_time`). `INT` reaches
/// only the processes in their terminal's foreground job (process group = the terminal's
/// foreground group, `stat` fields 5 and 8), as the terminal's own Ctrl-C.
///
/// Command substitution drops the NUL separators of `environ`; the marker is a unique UUID, so a
/// substring match still identifies it.
const SCAN_SCRIPT: &str = r#"
action=$1 marker=$2 leader=$3 leader_start=$4 self=$$
follow=$leader
if [ -n "$leader" ] && read -r stat 2>/dev/null < "/proc/$leader/stat"; then
  set -- ${stat##*) }
  [ "${20}" = "$leader_start" ] || follow=
fi
for dir in /proc/[0-9]*; do
  pid=${dir#/proc/}
  [ "$pid" = "$self" ] && continue
  read -r stat 2>/dev/null < "$dir/stat" || continue
  set -- ${stat##*) }
  [ "$1" = Z ] && continue
  marked=
  case "$(cat "$dir/environ" 2>/dev/null)" in *"$marker"*) marked=1 ;; esac
  if [ "$action" = leader ]; then
    [ -n "$marked" ] && [ "$2" = 0 ] && [ "$4" = "$pid" ] && echo "$pid ${20}"
    continue
  fi
  if [ -n "$marked" ] || { [ -n "$follow" ] && [ "$4" = "$follow" ]; }; then
    [ "$action" = INT ] && [ "$3" != "$6" ] && continue
    [ "$action" = list ] || kill -s "$action" "$pid" 2>/dev/null
    echo "$pid"
  fi
done
"#;

/// Runs [`SCAN_SCRIPT`] in the container as `user` and returns what it printed.
async fn run_scan_script(
    docker: &Docker,
    container_id: &str,
    user: Option<&str>,
    arguments: &[&str],
) -> Result<String, DockerError> {
    let mut command = vec!["/bin/sh", "-c", SCAN_SCRIPT, "ptyhub-scan"];
    command.extend_from_slice(arguments);
    let exec = docker
        .create_exec(
            container_id,
            CreateExecOptions {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                tty: Some(false),
                user,
                // Out of everyone's way; `/` exists in every container.
                working_dir: Some("/"),
                cmd: Some(command),
                ..Default::default()
            },
        )
        .await?;
    let run = async {
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        if let StartExecResults::Attached { mut output, .. } = docker
            .start_exec(&exec.id, None::<StartExecOptions>)
            .await?
        {
            while let Some(frame) = output.next().await {
                match frame? {
                    bollard::container::LogOutput::StdErr { message } => {
                        stderr.extend_from_slice(&message)
                    }
                    other => stdout.extend_from_slice(other.as_ref()),
                }
            }
        }
        Ok::<_, DockerError>((stdout, stderr))
    };
    let (stdout, stderr) = tokio::time::timeout(HELPER_TIMEOUT, run)
        .await
        .map_err(|_| DockerError::Helper {
            container: container_id.to_owned(),
            message: "the process scan timed out".to_owned(),
        })??;
    let inspected = docker.inspect_exec(&exec.id).await?;
    match inspected.exit_code {
        Some(0) => Ok(String::from_utf8_lossy(&stdout).into_owned()),
        code => Err(DockerError::Helper {
            container: container_id.to_owned(),
            message: format!(
                "the process scan exited with {} (the container needs /bin/sh and cat): {}",
                code.map_or_else(|| "no status".to_owned(), |code| code.to_string()),
                String::from_utf8_lossy(&[stdout, stderr].concat()).trim()
            ),
        }),
    }
}

fn parse_pids(output: &str) -> Vec<u32> {
    output
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

fn nix_signal(signal: GroupSignal) -> Signal {
    match signal {
        GroupSignal::Hangup => Signal::SIGHUP,
        GroupSignal::Terminate => Signal::SIGTERM,
        GroupSignal::Kill => Signal::SIGKILL,
        GroupSignal::Interrupt => Signal::SIGINT,
    }
}

fn signal_name(signal: GroupSignal) -> &'static str {
    match signal {
        GroupSignal::Hangup => "HUP",
        GroupSignal::Terminate => "TERM",
        GroupSignal::Kill => "KILL",
        GroupSignal::Interrupt => "INT",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helper_output_is_one_pid_per_line() {
        assert_eq!(parse_pids("12\n 40\nnoise\n\n7"), vec![12, 40, 7]);
        assert!(parse_pids("").is_empty());
    }
}
