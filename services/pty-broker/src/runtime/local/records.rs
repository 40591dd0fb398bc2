//! Crash recovery for local sessions: one small JSON file per live session in
//! `<data_dir>/local-sessions/`, naming its leader by pid and start time, written right after the
//! spawn and removed when the session's process handle is dropped. A broker that dies without
//! dropping its handles (SIGKILL, OOM) leaves the files, and [`reap_local_orphans`] ends the
//! Unix sessions they name at the next start, so no process of the old sessions keeps running.
//!
//! Identity: a pid alone could have been reused. A record is followed only when the leader is
//! either gone (its pid cannot be reused while any process still carries it as its session id,
//! so the members found are ours) or still the same process (same start time). Records from
//! another boot are dropped unread.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::runtime::procfs::{self, Leader};

/// The directory under the broker's data directory that holds the records.
pub const RECORD_DIRECTORY: &str = "local-sessions";

/// How long reaping waits after SIGHUP and after SIGTERM before the next signal.
const REAP_GRACE: Duration = Duration::from_secs(2);

/// What a restarted broker needs to find one local session's processes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct LocalRecord {
    session_id: Uuid,
    leader: Leader,
    /// The boot the pid and start time belong to.
    boot_id: Option<String>,
}

/// The records of one broker's local sessions.
#[derive(Debug, Clone)]
pub(super) struct RecordDirectory {
    path: PathBuf,
}

impl RecordDirectory {
    pub fn under(data_dir: &Path) -> Self {
        Self {
            path: data_dir.join(RECORD_DIRECTORY),
        }
    }

    /// Writes the record of a session that just started (atomically: temporary file, then
    /// rename) and returns the guard that removes it.
    pub fn record(&self, session_id: Uuid, leader: Leader) -> io::Result<RecordGuard> {
        std::fs::create_dir_all(&self.path)?;
        let record = LocalRecord {
            session_id,
            leader,
            boot_id: procfs::boot_id(),
        };
        let json = serde_json::to_vec(&record).map_err(io::Error::other)?;
        let final_path = self.record_path(session_id);
        let temporary_path = final_path.with_extension("json.tmp");
        std::fs::write(&temporary_path, json)?;
        std::fs::rename(&temporary_path, &final_path)?;
        Ok(RecordGuard {
            path: final_path,
            kept: false,
        })
    }

    fn record_path(&self, session_id: Uuid) -> PathBuf {
        self.path.join(format!("{session_id}.json"))
    }
}

/// Removes a session's record when the session is done with its process.
#[derive(Debug)]
pub(super) struct RecordGuard {
    path: PathBuf,
    /// Set once the session went to the next broker process, which keeps the record.
    kept: bool,
}

impl RecordGuard {
    /// Leaves the record in place when the guard goes: the broker process the session was handed
    /// to owns it now (it still names the same leader).
    pub fn keep(&mut self) {
        self.kept = true;
    }
}

impl Drop for RecordGuard {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        if let Err(error) = std::fs::remove_file(&self.path)
            && error.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.path.display(), %error, "cannot remove local session record");
        }
    }
}

/// What [`reap_local_orphans`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalReapReport {
    /// Records found: sessions a previous run did not close.
    pub sessions: usize,
    /// Processes that were still running and were ended.
    pub processes_ended: usize,
}

/// Ends every process of the local sessions a previous broker run left recorded under
/// `data_dir` (SIGHUP, SIGTERM, then SIGKILL), then forgets them. Blocking: call it once at
/// start, before serving, from a blocking context.
pub fn reap_local_orphans(data_dir: &Path) -> io::Result<LocalReapReport> {
    let directory = RecordDirectory::under(data_dir);
    let entries = match std::fs::read_dir(&directory.path) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Ok(LocalReapReport::default());
        }
        Err(error) => return Err(error),
    };
    let boot_id = procfs::boot_id();
    let mut report = LocalReapReport::default();
    for entry in entries.flatten() {
        let path = entry.path();
        let record = std::fs::read(&path)
            .ok()
            .and_then(|json| serde_json::from_slice::<LocalRecord>(&json).ok());
        if let Some(record) = record {
            report.sessions += 1;
            if record.boot_id.is_some() && record.boot_id == boot_id {
                report.processes_ended += end_session(record.leader)?;
            }
        }
        // Read or not (a half-written temporary file, another boot), the record is done with.
        let _ = std::fs::remove_file(&path);
    }
    Ok(report)
}

/// Ends the Unix session `leader` led; returns how many processes it had.
fn end_session(leader: Leader) -> io::Result<usize> {
    let found = procfs::session_members(None, None, Some(leader))?;
    if found.is_empty() {
        return Ok(0);
    }
    for signal in [Signal::SIGHUP, Signal::SIGTERM] {
        let members = procfs::session_members(None, None, Some(leader))?;
        procfs::signal_members(&members, signal)?;
        let deadline = Instant::now() + REAP_GRACE;
        while Instant::now() < deadline {
            if procfs::session_members(None, None, Some(leader))?.is_empty() {
                return Ok(found.len());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let members = procfs::session_members(None, None, Some(leader))?;
    procfs::signal_members(&members, Signal::SIGKILL)?;
    Ok(found.len())
}
