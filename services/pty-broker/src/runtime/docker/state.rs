//! The broker's record of its live Docker sessions on disk, and the reaping of what a killed
//! broker left behind.
//!
//! One small JSON file per session in `<data_dir>/docker-sessions/`, written when the exec is
//! created (before it can start anything), completed once its leader is identified, and removed
//! when the session's process handle is dropped. A broker that dies without dropping its handles
//! (SIGKILL, OOM, power) leaves the files, and [`reap_orphans_from_state`] ends what they name at
//! the next start.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::engine::Engine;
use super::group::{GroupView, Leader, SESSION_MARKER_VARIABLE, SessionGroup};
use super::{DockerError, DockerRuntimeConfig};
use crate::runtime::{GroupSignal, procfs};

/// The directory under the broker's data directory that holds the session records.
pub const STATE_DIRECTORY: &str = "docker-sessions";

/// How long reaping waits after SIGTERM before SIGKILL.
const REAP_GRACE: Duration = Duration::from_secs(2);

/// What a broker needs after a crash to find one session's processes again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SessionRecord {
    pub session_id: Uuid,
    pub container_id: String,
    /// When the container last started: a restarted container holds none of these processes.
    pub container_started_at: Option<String>,
    pub exec_id: String,
    /// The boot the pids and start times belong to.
    pub boot_id: Option<String>,
    /// Where the leader was identified, once it was.
    pub leader: Option<RecordedLeader>,
}

/// A leader identity and the namespace its pid is counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RecordedLeader {
    pub view: RecordedView,
    pub pid: u32,
    pub start_time: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RecordedView {
    Host,
    Container,
}

/// The session records of one broker.
#[derive(Debug, Clone)]
pub(crate) struct StateDirectory {
    path: PathBuf,
}

impl StateDirectory {
    pub fn under(data_dir: &Path) -> Self {
        Self {
            path: data_dir.join(STATE_DIRECTORY),
        }
    }

    /// Writes `record` atomically (temporary file, then rename).
    pub fn write(&self, record: &SessionRecord) -> Result<(), DockerError> {
        let io_error = |source| DockerError::State {
            path: self.path.clone(),
            source,
        };
        std::fs::create_dir_all(&self.path).map_err(io_error)?;
        let json = serde_json::to_vec_pretty(record)
            .map_err(|error| DockerError::Internal(error.to_string()))?;
        let final_path = self.record_path(record.session_id);
        let temporary_path = final_path.with_extension("json.tmp");
        std::fs::write(&temporary_path, json).map_err(io_error)?;
        std::fs::rename(&temporary_path, &final_path).map_err(io_error)
    }

    pub fn remove(&self, session_id: Uuid) {
        let path = self.record_path(session_id);
        if let Err(error) = std::fs::remove_file(&path)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), %error, "cannot remove docker session record");
        }
    }

    /// Every readable record; unreadable files are logged and removed.
    fn records(&self) -> Result<Vec<SessionRecord>, DockerError> {
        let entries = match std::fs::read_dir(&self.path) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(DockerError::State {
                    path: self.path.clone(),
                    source,
                });
            }
        };
        let mut records = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|extension| extension != "json") {
                // A temporary file from a write that never finished.
                let _ = std::fs::remove_file(&path);
                continue;
            }
            match std::fs::read(&path)
                .ok()
                .and_then(|json| serde_json::from_slice::<SessionRecord>(&json).ok())
            {
                Some(record) => records.push(record),
                None => {
                    tracing::warn!(path = %path.display(), "removing unreadable docker session record");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        Ok(records)
    }

    fn record_path(&self, session_id: Uuid) -> PathBuf {
        self.path.join(format!("{session_id}.json"))
    }
}

/// Removes a session's record when the session's process handle goes away, unless the session
/// went to the next broker process, which goes on with the same record.
#[derive(Debug)]
pub(crate) struct RecordGuard {
    pub directory: StateDirectory,
    pub session_id: Uuid,
    pub keep: AtomicBool,
}

impl RecordGuard {
    pub fn new(directory: StateDirectory, session_id: Uuid) -> Self {
        Self {
            directory,
            session_id,
            keep: AtomicBool::new(false),
        }
    }

    /// Leaves the record in place when the guard goes.
    pub fn keep(&self) {
        self.keep.store(true, Ordering::SeqCst);
    }
}

impl Drop for RecordGuard {
    fn drop(&mut self) {
        if !self.keep.load(Ordering::SeqCst) {
            self.directory.remove(self.session_id);
        }
    }
}

/// What [`reap_orphans_from_state`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReapReport {
    /// Sessions whose records were read.
    pub sessions: usize,
    /// Processes that were still running and were signalled.
    pub processes_ended: usize,
}

/// Ends every process of the Docker sessions a previous broker run left in `data_dir`, then
/// forgets them. Call it once at start, before serving.
///
/// Each record is checked before anything is signalled: a record from another boot, or for a
/// container that was restarted or removed since, names no live process and is dropped. Processes
/// are found by the session's marker and the leader's Unix session, whose pid is checked against
/// its recorded start time, so a reused pid is never signalled. Survivors get SIGHUP and SIGTERM,
/// then SIGKILL after a short grace period. A record whose container could not be reached (engine
/// down) is kept for the next start and reported as an error.
pub async fn reap_orphans_from_state(
    data_dir: &Path,
    config: &DockerRuntimeConfig,
) -> Result<ReapReport, DockerError> {
    let directory = StateDirectory::under(data_dir);
    let records = directory.records()?;
    let mut report = ReapReport {
        sessions: records.len(),
        processes_ended: 0,
    };
    if records.is_empty() {
        return Ok(report);
    }
    let engine = Engine::connect(config).await?;
    let boot_id = procfs::boot_id();
    let mut first_error = None;
    for record in records {
        match reap_session(&engine, &record, boot_id.as_deref()).await {
            Ok(ended) => {
                if ended > 0 {
                    tracing::info!(
                        session_id = %record.session_id,
                        container = %record.container_id,
                        processes = ended,
                        "ended processes of a docker session left by a previous broker run"
                    );
                }
                report.processes_ended += ended;
                directory.remove(record.session_id);
            }
            // Kept for the next start: the processes may still be there.
            Err(error) => {
                tracing::warn!(
                    session_id = %record.session_id,
                    container = %record.container_id,
                    %error,
                    "cannot reap a docker session left by a previous broker run"
                );
                first_error.get_or_insert(error);
            }
        }
    }
    if let Some(error) = first_error {
        return Err(error);
    }
    Ok(report)
}

/// Ends one recorded session's survivors; returns how many processes were signalled.
async fn reap_session(
    engine: &Engine,
    record: &SessionRecord,
    boot_id: Option<&str>,
) -> Result<usize, DockerError> {
    if record.boot_id.is_some() && record.boot_id.as_deref() != boot_id {
        return Ok(0);
    }
    let container = match engine.inspect_container(&record.container_id).await {
        Ok(container) => container,
        Err(DockerError::Engine { status: 404, .. }) => return Ok(0),
        Err(error) => return Err(error),
    };
    if !container.running || container.started_at != record.container_started_at {
        return Ok(0);
    }
    let marker = format!("{SESSION_MARKER_VARIABLE}={}", record.session_id);
    let host_namespace = container.init_pid.and_then(procfs::pid_namespace);
    let (view, leader) = match (record.leader, host_namespace) {
        (Some(leader), Some(pid_namespace)) if leader.view == RecordedView::Host => {
            (GroupView::Host { pid_namespace }, Some(leader))
        }
        (Some(leader), _) if leader.view == RecordedView::Container => {
            (GroupView::Container, Some(leader))
        }
        // No usable leader: the marker alone finds the session's processes.
        (_, Some(pid_namespace)) => (GroupView::Host { pid_namespace }, None),
        (_, None) => (GroupView::Container, None),
    };
    let group = SessionGroup {
        container_id: record.container_id.clone(),
        marker,
        view,
        leader: leader.map(|leader| Leader {
            pid: leader.pid,
            start_time: leader.start_time,
        }),
    };
    let found = group.members(&engine.docker).await?.len();
    if found == 0 {
        return Ok(0);
    }
    group.signal(&engine.docker, GroupSignal::Hangup).await?;
    group.signal(&engine.docker, GroupSignal::Terminate).await?;
    let deadline = tokio::time::Instant::now() + REAP_GRACE;
    while tokio::time::Instant::now() < deadline {
        if group.members(&engine.docker).await?.is_empty() {
            return Ok(found);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    group.signal(&engine.docker, GroupSignal::Kill).await?;
    Ok(found)
}
