//! A session's recorder: a task beside the screen feeder that reads the ring at its own offset,
//! as a client does, and writes asciicast v2 to the session's spool file, off the output path.
//!
//! Unlike the screen, the recorder never holds the PTY back: a recorder that falls behind the
//! ring (a slow or full disk) writes a marker saying how many bytes it lost and goes on where
//! the ring starts. Input, resizes and resets reach it as marks on a bounded channel, each with
//! the output offset it happened at, so they land between the right bytes; a full channel drops
//! the mark and counts it. Writes are buffered and go to the file in whole lines at least every
//! [`FLUSH_INTERVAL`], so a broker killed with SIGKILL loses at most that much. When the session
//! closes, the recorder reads the ring to its end (the session task waits for that before it
//! clears the ring) and publishes the file to the recordings store.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::Shared;
use crate::domain::TerminalSize;
use crate::recording::{CastEncoder, CastHeader, RecordMode, Recordings};
use crate::ring::RingRead;

/// Buffered recording is written to the file at least this often ...
const FLUSH_INTERVAL: Duration = Duration::from_millis(500);
/// ... and as soon as this much is buffered.
const FLUSH_BYTES: usize = 64 * 1024;
/// The most output read from the ring at a time.
const READ_SLICE: usize = 64 * 1024;
/// Marks (input, resizes, resets) waiting for the recorder.
const MARK_QUEUE: usize = 4096;

/// The session's side of its recorder: where marks go.
#[derive(Debug)]
pub(super) struct RecorderTap {
    marks: mpsc::Sender<Mark>,
    records_input: bool,
    /// Marks dropped because the queue was full, not yet reported in the recording.
    dropped_marks: AtomicU64,
}

/// Something other than output, at the output offset it happened at.
#[derive(Debug)]
pub(super) enum Mark {
    Input {
        offset: u64,
        at: Instant,
        data: Bytes,
    },
    Resize {
        offset: u64,
        at: Instant,
        size: TerminalSize,
    },
    Reset {
        offset: u64,
        at: Instant,
    },
}

impl Mark {
    fn offset(&self) -> u64 {
        match self {
            Mark::Input { offset, .. }
            | Mark::Resize { offset, .. }
            | Mark::Reset { offset, .. } => *offset,
        }
    }
}

/// What a session records, and the recorder's half of the tap.
#[derive(Debug)]
pub(crate) struct SessionRecording {
    pub recordings: Arc<Recordings>,
    pub mode: RecordMode,
    pub header: CastHeader,
}

/// The recorder task's inputs, made with the session.
#[derive(Debug)]
pub(super) struct Recorder {
    recording: SessionRecording,
    marks: mpsc::Receiver<Mark>,
}

/// Makes the tap the session's shared state keeps and the recorder that reads it.
pub(super) fn recorder(recording: SessionRecording) -> (RecorderTap, Recorder) {
    let (marks_tx, marks) = mpsc::channel(MARK_QUEUE);
    let tap = RecorderTap {
        marks: marks_tx,
        records_input: recording.mode.records_input(),
        dropped_marks: AtomicU64::new(0),
    };
    (tap, Recorder { recording, marks })
}

impl Shared {
    /// Hands a mark to the recorder without waiting: a full queue drops it (and says so in the
    /// recording).
    pub(super) fn record_mark(&self, mark: Mark) {
        if let Some(tap) = &self.recorder
            && tap.marks.try_send(mark).is_err()
        {
            tap.dropped_marks.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records input the process took, when the session records input.
    pub(super) fn record_input(&self, data: &[u8]) {
        if self.recorder.as_ref().is_some_and(|tap| tap.records_input) {
            let offset = self.lock().ring.end();
            self.record_mark(Mark::Input {
                offset,
                at: Instant::now(),
                data: Bytes::copy_from_slice(data),
            });
        }
    }
}

/// The state of one recording in progress.
struct CastWriter {
    session_id: Uuid,
    started: Instant,
    encoder: CastEncoder,
    buffer: Vec<u8>,
    file: Option<tokio::fs::File>,
    /// When the oldest byte in `buffer` was buffered.
    dirty_since: Option<Instant>,
}

impl CastWriter {
    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    fn buffered(&mut self) {
        if self.dirty_since.is_none() && !self.buffer.is_empty() {
            self.dirty_since = Some(Instant::now());
        }
    }

    /// Writes the buffer to the file. A failed write drops what it held and the recording says
    /// how much was lost, so a full disk costs data, never the session.
    async fn flush(&mut self) {
        self.dirty_since = None;
        if self.buffer.is_empty() {
            return;
        }
        let Some(file) = self.file.as_mut() else {
            self.buffer.clear();
            return;
        };
        let written = async {
            file.write_all(&self.buffer).await?;
            file.flush().await
        }
        .await;
        if let Err(error) = written {
            tracing::warn!(session_id = %self.session_id, %error, lost = self.buffer.len(), "recording write failed");
            let lost = self.buffer.len();
            self.buffer.clear();
            let at = self.elapsed();
            self.encoder.marker(
                at,
                &format!("ptyhub: lost {lost} bytes of the recording (write failed: {error})"),
                &mut self.buffer,
            );
            self.buffered();
        } else {
            self.buffer.clear();
        }
    }

    fn mark(&mut self, mark: Mark) {
        let at = |instant: Instant| instant.saturating_duration_since(self.started);
        match mark {
            Mark::Input {
                at: instant, data, ..
            } => {
                self.encoder.input(at(instant), &data, &mut self.buffer);
            }
            Mark::Resize {
                at: instant, size, ..
            } => {
                self.encoder.resize(at(instant), size, &mut self.buffer);
            }
            Mark::Reset { at: instant, .. } => {
                self.encoder.marker(at(instant), "reset", &mut self.buffer);
            }
        }
        self.buffered();
    }
}

/// Records the session until `done`, then publishes the recording; `drained` hears once the
/// recorder has read the ring to its end after `done`.
pub(super) async fn record_until(
    shared: Arc<Shared>,
    session_id: Uuid,
    recorder: Recorder,
    done: CancellationToken,
    drained: oneshot::Sender<()>,
) {
    let Recorder {
        recording,
        mut marks,
    } = recorder;
    let spooled = recording.recordings.spool_path(session_id);
    let file = match recording.recordings.prepare_spool().await {
        Ok(()) => tokio::fs::File::create(&spooled)
            .await
            .map_err(|error| error.to_string()),
        Err(error) => Err(error.to_string()),
    };
    let file = file
        .inspect_err(|error| {
            tracing::warn!(%session_id, %error, "cannot start the recording; the session goes on unrecorded");
        })
        .ok();
    let Some(file) = file else {
        let _ = drained.send(());
        return;
    };
    let mut header = recording.header.clone();
    header.timestamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let mut writer = CastWriter {
        session_id,
        started: Instant::now(),
        encoder: CastEncoder::default(),
        buffer: Vec::with_capacity(FLUSH_BYTES * 2),
        file: Some(file),
        dirty_since: None,
    };
    CastEncoder::header(&header, &mut writer.buffer);
    writer.flush().await;

    let mut changed = shared.changed.subscribe();
    let mut pending: Option<Mark> = None;
    let mut offset = 0u64;
    let mut finishing = false;
    loop {
        changed.borrow_and_update();
        // Marks due at or before `offset` first, then output up to the next mark.
        if pending.is_none() {
            pending = marks.try_recv().ok();
        }
        if let Some(tap) = &shared.recorder {
            let dropped = tap.dropped_marks.swap(0, Ordering::Relaxed);
            if dropped > 0 {
                let at = writer.elapsed();
                writer.encoder.marker(
                    at,
                    &format!("ptyhub: lost {dropped} input, resize or reset events (queue full)"),
                    &mut writer.buffer,
                );
                writer.buffered();
            }
        }
        if let Some(mark) = pending.take_if(|mark| mark.offset() <= offset) {
            writer.mark(mark);
            continue;
        }
        let limit = pending
            .as_ref()
            .map_or(READ_SLICE as u64, |mark| mark.offset() - offset)
            .min(READ_SLICE as u64) as usize;
        let read = shared.lock().ring.read_at(offset, limit);
        let up_to_date = match read {
            RingRead::Data(data) => {
                let at = writer.elapsed();
                writer.encoder.output(at, &data, &mut writer.buffer);
                writer.buffered();
                offset += data.len() as u64;
                false
            }
            RingRead::Gap { lost, resume_at } => {
                tracing::debug!(%session_id, lost, "the recorder fell behind the ring");
                let at = writer.elapsed();
                writer.encoder.marker(
                    at,
                    &format!("ptyhub: lost {lost} bytes of output (the recorder fell behind)"),
                    &mut writer.buffer,
                );
                writer.buffered();
                offset = resume_at;
                false
            }
            RingRead::UpToDate => pending.is_none(),
        };
        let flush_due = writer
            .dirty_since
            .is_some_and(|since| since.elapsed() >= FLUSH_INTERVAL);
        if writer.buffer.len() >= FLUSH_BYTES || flush_due {
            writer.flush().await;
        }
        if !up_to_date {
            // A flood: let the PTY's reader and the clients run between slices.
            tokio::task::yield_now().await;
            continue;
        }
        if finishing {
            break;
        }
        let flush_at = writer.dirty_since.map(|since| since + FLUSH_INTERVAL);
        tokio::select! {
            changed = changed.changed() => if changed.is_err() { finishing = true },
            mark = marks.recv() => match mark {
                Some(mark) => pending = Some(mark),
                None => finishing = true,
            },
            () = done.cancelled(), if !finishing => finishing = true,
            () = tokio::time::sleep_until(flush_at.unwrap_or_else(Instant::now)), if flush_at.is_some() => {
                writer.flush().await;
            }
        }
    }
    // Everything the session wrote is in the buffer: the ring may go.
    let _ = drained.send(());
    while let Ok(mark) = marks.try_recv() {
        writer.mark(mark);
    }
    let at = writer.elapsed();
    writer.encoder.finish(at, &mut writer.buffer);
    writer.flush().await;
    if let Some(file) = writer.file.take()
        && let Err(error) = file.sync_all().await
    {
        tracing::warn!(%session_id, %error, "cannot sync the recording");
    }
    match recording.recordings.publish(session_id, &spooled).await {
        Ok(bytes) => tracing::info!(%session_id, bytes, "recording published"),
        Err(error) => {
            // It stays in the spool; the next start publishes it.
            tracing::warn!(%session_id, %error, "cannot publish the recording");
        }
    }
}
