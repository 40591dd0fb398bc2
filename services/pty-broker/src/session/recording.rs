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
//!
//! A hand-off to the next broker process takes the recording along: the frozen session's task
//! asks its recorder to write everything up to the end of the ring and to wait for the verdict
//! ([`Shared::freeze_recording`]). On a commit the recorder ends without publishing, and the next
//! process's recorder appends to the same spool file from the offset and time it reached
//! ([`resumed_recorder`]); on a resume it goes on here.

use std::path::{Path, PathBuf};
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
use super::handoff::Verdict;
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
    /// Where a hand-off asks the recorder to stop at the end of the ring.
    freezes: mpsc::Sender<RecorderFreeze>,
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

/// A recording in progress as a hand-off carries it to the next broker process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrozenRecording {
    pub mode: RecordMode,
    /// The header the file starts with (the next process writes none).
    pub header: CastHeader,
    /// The spool file that holds the recording so far; the next process appends to it.
    pub spool: PathBuf,
    /// When the recording started: its events' times count from here, across processes.
    pub started_at: SystemTime,
    /// The time of its last event (the next ones are never earlier).
    pub last_time: Duration,
    /// The output offset the file holds output up to: the next process records from here, out
    /// of the ring it received.
    pub offset: u64,
    /// The start of a UTF-8 sequence of input whose rest has not come yet (at most 3 bytes).
    pub held_input: Vec<u8>,
}

/// A hand-off's request to the recorder: write everything up to the end of the ring, answer
/// how far the recording got, then wait for the verdict (a dropped sender resumes).
#[derive(Debug)]
pub(super) struct RecorderFreeze {
    reply: oneshot::Sender<FrozenRecording>,
    verdict: oneshot::Receiver<Verdict>,
}

/// The recorder task's inputs, made with the session.
#[derive(Debug)]
pub(super) struct Recorder {
    recording: SessionRecording,
    marks: mpsc::Receiver<Mark>,
    freezes: mpsc::Receiver<RecorderFreeze>,
    /// Where the previous broker process left the recording, for a session it handed over.
    resume: Option<FrozenRecording>,
}

/// Makes the tap the session's shared state keeps and the recorder that reads it.
pub(super) fn recorder(recording: SessionRecording) -> (RecorderTap, Recorder) {
    let (marks_tx, marks) = mpsc::channel(MARK_QUEUE);
    let (freezes_tx, freezes) = mpsc::channel(1);
    let tap = RecorderTap {
        marks: marks_tx,
        freezes: freezes_tx,
        records_input: recording.mode.records_input(),
        dropped_marks: AtomicU64::new(0),
    };
    (
        tap,
        Recorder {
            recording,
            marks,
            freezes,
            resume: None,
        },
    )
}

/// The tap and recorder of a session taken over from the previous broker process, going on
/// with the recording `frozen` describes into `recordings`' spool.
pub(super) fn resumed_recorder(
    recordings: Arc<Recordings>,
    frozen: FrozenRecording,
) -> (RecorderTap, Recorder) {
    let (tap, mut recorder) = recorder(SessionRecording {
        recordings,
        mode: frozen.mode,
        header: frozen.header.clone(),
    });
    recorder.resume = Some(frozen);
    (tap, recorder)
}

impl Shared {
    /// Asks the recorder (when there is one) to write everything up to the end of the ring,
    /// which nothing adds to while the session is frozen, and returns how far the recording got
    /// with the sender of the hand-off's verdict (dropping it resumes the recorder here).
    pub(super) async fn freeze_recording(
        &self,
    ) -> Option<(FrozenRecording, oneshot::Sender<Verdict>)> {
        let tap = self.recorder.as_ref()?;
        let (reply, answer) = oneshot::channel();
        let (verdict_tx, verdict) = oneshot::channel();
        // A recorder that could not start has ended: the session moves unrecorded.
        tap.freezes
            .send(RecorderFreeze { reply, verdict })
            .await
            .ok()?;
        let frozen = answer.await.ok()?;
        Some((frozen, verdict_tx))
    }

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
    /// `started` on the wall clock, which the next broker process goes on from.
    started_at: SystemTime,
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
        mut freezes,
        resume,
    } = recorder;
    let spooled = recording.recordings.spool_path(session_id);
    let file = match recording.recordings.prepare_spool().await {
        Ok(()) => match &resume {
            None => tokio::fs::File::create(&spooled).await,
            Some(resume) => append_to_spool(&resume.spool, &spooled).await,
        }
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
    let mut writer = CastWriter {
        session_id,
        started: Instant::now(),
        started_at: SystemTime::now(),
        encoder: CastEncoder::default(),
        buffer: Vec::with_capacity(FLUSH_BYTES * 2),
        file: Some(file),
        dirty_since: None,
    };
    let mut offset = 0u64;
    match resume {
        None => {
            header.timestamp = writer
                .started_at
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |since| since.as_secs());
            CastEncoder::header(&header, &mut writer.buffer);
        }
        Some(resume) => {
            // The clock goes on from the first process's start, hand-off pause included.
            let since_start = SystemTime::now()
                .duration_since(resume.started_at)
                .unwrap_or_default();
            writer.started = Instant::now()
                .checked_sub(since_start)
                .unwrap_or_else(Instant::now);
            writer.started_at = resume.started_at;
            writer.encoder = CastEncoder::resumed(resume.last_time, resume.held_input);
            offset = resume.offset;
            let at = writer.elapsed();
            writer.encoder.marker(
                at,
                "ptyhub: taken over by the next broker process",
                &mut writer.buffer,
            );
        }
    }
    writer.buffered();
    writer.flush().await;

    let mut changed = shared.changed.subscribe();
    let mut pending: Option<Mark> = None;
    let mut finishing = false;
    let mut freezing: Option<RecorderFreeze> = None;
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
        if let Some(freeze) = freezing.take() {
            match hold_for_hand_off(&mut writer, &recording, &header, &spooled, offset, freeze)
                .await
            {
                // The next process goes on with the file: nothing is finished or published.
                Verdict::Commit => return,
                Verdict::Resume => continue,
            }
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
            freeze = freezes.recv(), if freezing.is_none() => freezing = freeze,
            () = tokio::time::sleep_until(flush_at.unwrap_or_else(Instant::now)), if flush_at.is_some() => {
                writer.flush().await;
            }
        }
        // Woken by a keystroke or its echo, as the client's tasks are: they go first. A task
        // woken last runs next on its worker, ahead of the others woken with it, and the
        // recorder is the one reader that is never waited for (it timestamps on reading, so
        // its times move by the wait; the player cannot tell).
        tokio::task::yield_now().await;
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

/// Answers a hand-off's freeze once everything up to `offset` (the end of the frozen ring) is
/// in the file, then waits for its verdict.
async fn hold_for_hand_off(
    writer: &mut CastWriter,
    recording: &SessionRecording,
    header: &CastHeader,
    spooled: &Path,
    offset: u64,
    freeze: RecorderFreeze,
) -> Verdict {
    writer.flush().await;
    if let Some(file) = &writer.file
        && let Err(error) = file.sync_data().await
    {
        tracing::warn!(session_id = %writer.session_id, %error, "cannot sync the recording for the hand-off");
    }
    let (last_time, held_input) = writer.encoder.resume_point();
    let frozen = FrozenRecording {
        mode: recording.mode,
        header: header.clone(),
        spool: spooled.to_owned(),
        started_at: writer.started_at,
        last_time,
        // Output held back as the start of a character is the next process's to feed again.
        offset: offset - writer.encoder.held_output() as u64,
        held_input,
    };
    if freeze.reply.send(frozen).is_err() {
        return Verdict::Resume;
    }
    freeze.verdict.await.unwrap_or(Verdict::Resume)
}

/// Opens `spooled` to append to the recording the previous broker process left at `previous`,
/// moving it there first when the two processes spool to different directories.
async fn append_to_spool(previous: &Path, spooled: &Path) -> std::io::Result<tokio::fs::File> {
    // A rename fails across file systems: copy, then let go of the old one.
    if previous != spooled && tokio::fs::rename(previous, spooled).await.is_err() {
        tokio::fs::copy(previous, spooled).await?;
        tokio::fs::remove_file(previous).await?;
    }
    tokio::fs::OpenOptions::new()
        .append(true)
        .open(spooled)
        .await
}
