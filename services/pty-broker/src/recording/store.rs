//! The broker's side of the recordings store: a recorder writes its session to a spool file on
//! local disk (buffered, whole lines, at least once a second, so a broker killed with SIGKILL
//! loses at most the last second); when the session closes the file is published to the object
//! store as `<session id>.cast` and removed from the spool. What a killed broker left in the
//! spool is published at the next start, its last line cut if the kill cut it. Retention deletes
//! recordings older than the maximum age, then the oldest until the total fits the maximum size.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::TryStreamExt as _;
use futures::future::BoxFuture;
use object_store::{ObjectStoreExt as _, PutPayload, WriteMultipart};
use ptyhub_wire::RecordingStore;
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _, AsyncWrite};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

/// Files up to this size are published in one put; larger ones in parts of this size (S3's
/// parts must be at least 5 MiB).
const PART_BYTES: usize = 8 * 1024 * 1024;
/// How often retention runs.
const RETENTION_INTERVAL: Duration = Duration::from_secs(10 * 60);

/// How the broker keeps recordings.
#[derive(Debug, Clone)]
pub struct RecordingsConfig {
    pub store: RecordingStore,
    /// Local directory of recordings being written.
    pub spool: PathBuf,
    /// Recordings older than this are deleted; `None` keeps them whatever their age.
    pub max_age: Option<Duration>,
    /// The oldest recordings are deleted while all of them take more; `None` for no bound.
    pub max_bytes: Option<u64>,
}

/// The recordings of one broker.
#[derive(Debug)]
pub struct Recordings {
    config: RecordingsConfig,
    /// What a test puts in front of the spool files recorders write; `None`, the disk itself.
    #[cfg(test)]
    spool_disk: Option<SpoolDisk>,
}

/// A spool file as a recorder writes it: the file itself in a broker. A trait so that a test can
/// put a disk that fills up or stalls in front of the file, to reach what a recorder does then.
pub(crate) trait SpoolFile: AsyncWrite + Send + Unpin {
    /// As [`tokio::fs::File::sync_data`].
    fn sync_data(&mut self) -> BoxFuture<'_, std::io::Result<()>>;
    /// As [`tokio::fs::File::sync_all`].
    fn sync_all(&mut self) -> BoxFuture<'_, std::io::Result<()>>;
    /// Cuts the file back to its first `len` bytes and writes on from there: what a failed write
    /// left of its buffer goes, so that the file ends with a whole event again.
    fn truncate(&mut self, len: u64) -> BoxFuture<'_, std::io::Result<()>>;
}

impl SpoolFile for tokio::fs::File {
    fn sync_data(&mut self) -> BoxFuture<'_, std::io::Result<()>> {
        Box::pin(tokio::fs::File::sync_data(self))
    }

    fn sync_all(&mut self) -> BoxFuture<'_, std::io::Result<()>> {
        Box::pin(tokio::fs::File::sync_all(self))
    }

    fn truncate(&mut self, len: u64) -> BoxFuture<'_, std::io::Result<()>> {
        Box::pin(async move {
            self.set_len(len).await?;
            // A file opened to append writes at its end whatever the position; one created for
            // this recording writes at the position, which the failed write had moved on.
            self.seek(std::io::SeekFrom::Start(len)).await.map(drop)
        })
    }
}

/// Wraps each spool file a recorder opens (see [`SpoolFile`]); only tests have one.
#[cfg(test)]
#[derive(Clone)]
pub(crate) struct SpoolDisk(Arc<dyn Fn(tokio::fs::File) -> Box<dyn SpoolFile> + Send + Sync>);

#[cfg(test)]
impl SpoolDisk {
    pub(crate) fn new(
        wrap: impl Fn(tokio::fs::File) -> Box<dyn SpoolFile> + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(wrap))
    }
}

#[cfg(test)]
impl std::fmt::Debug for SpoolDisk {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("SpoolDisk")
    }
}

/// What one retention pass deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionReport {
    pub deleted: usize,
    pub deleted_bytes: u64,
    pub kept: usize,
    pub kept_bytes: u64,
}

/// Why a recording could not be kept.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    #[error("recording spool {path}: {source}")]
    Spool {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("recordings store: {0}")]
    Store(#[from] object_store::Error),
}

impl Recordings {
    pub fn new(config: RecordingsConfig) -> Self {
        Self {
            config,
            #[cfg(test)]
            spool_disk: None,
        }
    }

    /// Recordings whose recorders write their spool files through `disk`.
    #[cfg(test)]
    pub(crate) fn with_spool_disk(config: RecordingsConfig, disk: SpoolDisk) -> Self {
        Self {
            config,
            spool_disk: Some(disk),
        }
    }

    /// The spool file `file` as its recorder writes it: the file itself, unless a test put a
    /// troubled disk in front of it.
    pub(crate) fn spool_file(&self, file: tokio::fs::File) -> Box<dyn SpoolFile> {
        #[cfg(test)]
        if let Some(disk) = &self.spool_disk {
            return (disk.0)(file);
        }
        Box::new(file)
    }

    /// The spool file a session's recorder writes.
    pub fn spool_path(&self, session_id: Uuid) -> PathBuf {
        self.config.spool.join(format!("{session_id}.cast"))
    }

    /// Creates the spool directory (the recorder's first write needs it).
    pub async fn prepare_spool(&self) -> Result<(), RecordingError> {
        tokio::fs::create_dir_all(&self.config.spool)
            .await
            .map_err(|source| RecordingError::Spool {
                path: self.config.spool.clone(),
                source,
            })
    }

    /// Copies a finished spool file to the store and removes it from the spool.
    pub async fn publish(&self, session_id: Uuid, spooled: &Path) -> Result<u64, RecordingError> {
        let spool_error = |source| RecordingError::Spool {
            path: spooled.to_owned(),
            source,
        };
        let mut file = tokio::fs::File::open(spooled).await.map_err(spool_error)?;
        let length = file.metadata().await.map_err(spool_error)?.len();
        let location = RecordingStore::recording_path(&session_id.to_string());
        let store = self.config.store.store();
        if length <= PART_BYTES as u64 {
            let mut contents = Vec::with_capacity(length as usize);
            file.read_to_end(&mut contents).await.map_err(spool_error)?;
            store
                .put(&location, PutPayload::from(Bytes::from(contents)))
                .await?;
        } else {
            let upload = store.put_multipart(&location).await?;
            let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
            let mut part = vec![0; PART_BYTES];
            loop {
                let read = file.read(&mut part).await.map_err(spool_error)?;
                if read == 0 {
                    break;
                }
                writer.wait_for_capacity(2).await?;
                writer.write(&part[..read]);
            }
            writer.finish().await?;
        }
        tokio::fs::remove_file(spooled).await.map_err(spool_error)?;
        Ok(length)
    }

    /// Publishes what a previous run left in the spool (it was killed before its sessions
    /// closed), each file cut after its last whole line. The recordings of `live` sessions (taken
    /// over from the previous process, whose recorders go on with them) stay.
    pub async fn recover_spool(&self, live: &HashSet<Uuid>) -> usize {
        let Ok(mut entries) = tokio::fs::read_dir(&self.config.spool).await else {
            return 0;
        };
        let mut recovered = 0;
        while let Ok(Some(entry)) = entries.next_entry().await {
            let path = entry.path();
            let Some(session_id) = path
                .file_name()
                .and_then(|name| name.to_str())
                .and_then(|name| name.strip_suffix(".cast"))
                .and_then(|id| Uuid::parse_str(id).ok())
            else {
                continue;
            };
            if live.contains(&session_id) {
                continue;
            }
            let result = async {
                cut_after_last_line(&path).await?;
                self.publish(session_id, &path).await
            }
            .await;
            match result {
                Ok(bytes) => {
                    recovered += 1;
                    tracing::info!(%session_id, bytes, "published a recording a previous run left");
                }
                Err(error) => {
                    tracing::warn!(%session_id, %error, "cannot publish a recording a previous run left");
                }
            }
        }
        recovered
    }

    /// Deletes recordings past the maximum age, then the oldest while the rest exceed the
    /// maximum size.
    pub async fn enforce_retention(&self) -> Result<RetentionReport, RecordingError> {
        let store = self.config.store.store();
        let mut recordings: Vec<_> = store
            .list(None)
            .try_filter(|meta| {
                std::future::ready(RecordingStore::session_of(&meta.location).is_some())
            })
            .try_collect()
            .await?;
        // Oldest first.
        recordings.sort_by_key(|meta| meta.last_modified);
        let oldest_kept = self
            .config
            .max_age
            .and_then(|age| SystemTime::now().checked_sub(age))
            .map(chrono::DateTime::<chrono::Utc>::from);
        let mut total: u64 = recordings.iter().map(|meta| meta.size).sum();
        let mut report = RetentionReport::default();
        for meta in recordings {
            let too_old = oldest_kept.is_some_and(|oldest| meta.last_modified < oldest);
            let too_much = self.config.max_bytes.is_some_and(|max| total > max);
            if too_old || too_much {
                match store.delete(&meta.location).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(error) => return Err(error.into()),
                }
                total -= meta.size;
                report.deleted += 1;
                report.deleted_bytes += meta.size;
            } else {
                report.kept += 1;
                report.kept_bytes += meta.size;
            }
        }
        Ok(report)
    }

    /// Recovers the spool but for the `live` sessions' recordings, then runs retention now and
    /// every few minutes until `shutdown`.
    pub fn keep_up(
        self: &Arc<Self>,
        live: HashSet<Uuid>,
        shutdown: CancellationToken,
        tracker: &TaskTracker,
    ) {
        let recordings = Arc::clone(self);
        tracker.spawn(async move {
            recordings.recover_spool(&live).await;
            loop {
                match recordings.enforce_retention().await {
                    Ok(report) if report.deleted > 0 => tracing::info!(
                        deleted = report.deleted,
                        deleted_bytes = report.deleted_bytes,
                        kept = report.kept,
                        "deleted recordings past their retention"
                    ),
                    Ok(_) => {}
                    Err(error) => tracing::warn!(%error, "recording retention failed"),
                }
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(RETENTION_INTERVAL) => {}
                }
            }
        });
    }
}

/// Cuts `path` after its last newline: a line a kill cut in half is not JSON.
async fn cut_after_last_line(path: &Path) -> Result<(), RecordingError> {
    let spool_error = |source| RecordingError::Spool {
        path: path.to_owned(),
        source,
    };
    let contents = tokio::fs::read(path).await.map_err(spool_error)?;
    let whole = contents
        .iter()
        .rposition(|&byte| byte == b'\n')
        .map_or(0, |at| at + 1);
    if whole < contents.len() {
        let file = tokio::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .await
            .map_err(spool_error)?;
        file.set_len(whole as u64).await.map_err(spool_error)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recordings(root: &Path, max_age: Option<Duration>, max_bytes: Option<u64>) -> Recordings {
        Recordings::new(RecordingsConfig {
            store: RecordingStore::open(root.join("store").to_str().unwrap()).unwrap(),
            spool: root.join("spool"),
            max_age,
            max_bytes,
        })
    }

    #[tokio::test]
    async fn a_spooled_recording_cut_by_a_kill_is_published_up_to_its_last_line() {
        let root = tempfile::tempdir().unwrap();
        let recordings = recordings(root.path(), None, None);
        recordings.prepare_spool().await.unwrap();
        let session_id = Uuid::new_v4();
        let spooled = recordings.spool_path(session_id);
        tokio::fs::write(
            &spooled,
            b"{\"version\": 2}\n[0.1, \"o\", \"a\"]\n[0.2, \"o\", \"b",
        )
        .await
        .unwrap();
        // A live session's recording (taken over from the previous process) stays.
        let live_id = Uuid::new_v4();
        let live = recordings.spool_path(live_id);
        tokio::fs::write(&live, b"{\"version\": 2}\n[0.1, \"o\", \"c")
            .await
            .unwrap();
        assert_eq!(recordings.recover_spool(&HashSet::from([live_id])).await, 1);
        let published =
            std::fs::read(root.path().join(format!("store/{session_id}.cast"))).unwrap();
        assert_eq!(published, b"{\"version\": 2}\n[0.1, \"o\", \"a\"]\n");
        assert!(!spooled.exists());
        assert_eq!(
            std::fs::read(&live).unwrap(),
            b"{\"version\": 2}\n[0.1, \"o\", \"c"
        );
        assert!(!root.path().join(format!("store/{live_id}.cast")).exists());
    }

    #[tokio::test]
    async fn a_large_recording_is_published_in_parts_byte_for_byte() {
        let root = tempfile::tempdir().unwrap();
        let recordings = recordings(root.path(), None, None);
        recordings.prepare_spool().await.unwrap();
        let session_id = Uuid::new_v4();
        let spooled = recordings.spool_path(session_id);
        let contents: Vec<u8> = (0..PART_BYTES * 2 + 12345)
            .map(|i| (i % 251) as u8)
            .collect();
        tokio::fs::write(&spooled, &contents).await.unwrap();
        recordings.publish(session_id, &spooled).await.unwrap();
        let published =
            std::fs::read(root.path().join(format!("store/{session_id}.cast"))).unwrap();
        assert!(published == contents, "the published recording differs");
    }

    #[tokio::test]
    async fn retention_deletes_the_oldest_until_the_rest_fit() {
        let root = tempfile::tempdir().unwrap();
        let store_dir = root.path().join("store");
        let recordings = recordings(root.path(), None, Some(250));
        let mut ids = Vec::new();
        for age_secs in [300, 200, 100] {
            let id = Uuid::new_v4();
            let path = store_dir.join(format!("{id}.cast"));
            std::fs::write(&path, vec![b'x'; 100]).unwrap();
            let file = std::fs::File::options().write(true).open(&path).unwrap();
            file.set_modified(SystemTime::now() - Duration::from_secs(age_secs))
                .unwrap();
            ids.push(id);
        }
        // Not a recording: never counted or deleted.
        std::fs::write(store_dir.join("notes.txt"), vec![b'x'; 1000]).unwrap();
        let report = recordings.enforce_retention().await.unwrap();
        assert_eq!(
            (report.deleted, report.kept, report.kept_bytes),
            (1, 2, 200)
        );
        assert!(!store_dir.join(format!("{}.cast", ids[0])).exists());
        assert!(store_dir.join(format!("{}.cast", ids[2])).exists());
        assert!(store_dir.join("notes.txt").exists());
    }

    #[tokio::test]
    async fn retention_deletes_recordings_past_the_maximum_age() {
        let root = tempfile::tempdir().unwrap();
        let store_dir = root.path().join("store");
        let recordings = recordings(root.path(), Some(Duration::from_secs(3600)), None);
        let old = store_dir.join(format!("{}.cast", Uuid::new_v4()));
        let new = store_dir.join(format!("{}.cast", Uuid::new_v4()));
        for path in [&old, &new] {
            std::fs::write(path, b"x").unwrap();
        }
        std::fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(SystemTime::now() - Duration::from_secs(7200))
            .unwrap();
        let report = recordings.enforce_retention().await.unwrap();
        assert_eq!((report.deleted, report.kept), (1, 1));
        assert!(!old.exists() && new.exists());
    }
}
