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
//! The recorder batches, because nobody waits for it: woken by output or a mark after it had
//! caught up, it lets more come for [`RECORD_BATCH_INTERVAL`] before it reads, and while output
//! keeps coming it reads a batch an interval, woken by the timer and neither by the chunks nor by
//! the keystrokes' marks. A hand-off's freeze and the session's end are answered at once, and
//! output piling up (a quarter of the ring unread) wakes it so that a flood never runs a ring
//! ahead between two intervals. Its times do not come from its reads: the session task notes
//! when it read each chunk from the PTY ([`OutputTimeline`], kept only for a recorded session)
//! and the recorder gives each piece of output that time, so output stays in time and in order
//! with the marks around it however late it is read. A recorder so far behind that the timeline
//! dropped the oldest times gives older output the oldest time kept; the encoder never lets a
//! time go backwards.
//!
//! A hand-off to the next broker process takes the recording along: the frozen session's task
//! asks its recorder to write everything up to the end of the ring and to wait for the verdict
//! ([`Shared::freeze_recording`]). On a commit the recorder ends without publishing, and the next
//! process's recorder appends to the same spool file from the offset and time it reached
//! ([`resumed_recorder`]); on a resume it goes on here.
//!
//! The recorder also keeps where each stretch of output is in its file (`recording/index.rs`),
//! so that output the ring let go of (a command's, say) is read back from the spool file while
//! the session lives ([`Shared::recorded_output`]); the index travels with a hand-off.
//!
//! Input is attributed in a form every asciicast v2 player plays: a marker `input: <principal>`
//! before the first input of each new typist (asciicast events are three-element arrays, so a
//! fourth field would break strict readers; players show markers as points to jump to, or
//! ignore them). Input before the first marker came from a stream whose ticket named nobody.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::handoff::Verdict;
use super::{ClientId, Shared};
use crate::domain::TerminalSize;
use crate::recording::{
    CastEncoder, CastHeader, IndexWriter, OutputIndex, RecordMode, RecordedRange, Recordings,
    SpoolFile, read_recorded_range,
};
use crate::ring::RingRead;

/// Buffered recording is written to the file at least this often ...
const FLUSH_INTERVAL: Duration = Duration::from_millis(500);
/// ... and as soon as this much is buffered.
const FLUSH_BYTES: usize = 64 * 1024;
/// The most output read from the ring at a time.
const READ_SLICE: usize = 64 * 1024;
/// Marks (input, resizes, resets) waiting for the recorder.
const MARK_QUEUE: usize = 4096;
/// Woken by output or a mark after it had caught up, the recorder lets more come this long
/// before it reads, and reads at most this often while output keeps coming, so that typing
/// wakes it once per interval rather than for every keystroke and again for its echo (each such
/// wake costs the echo latency on a machine of few cores). Nothing waits for the recorder: its
/// times come from the PTY's reads ([`OutputTimeline`]) and the marks, and the file is written
/// at least every [`FLUSH_INTERVAL`] as before, so 50 ms only delays when the spool sees output
/// by as much, and bounds its wakes to 20 a second while output goes on.
const RECORD_BATCH_INTERVAL: Duration = Duration::from_millis(50);
/// A batching recorder is woken at once when this part of the ring is output it has not read,
/// so that a flood never runs a ring ahead of it between two intervals (which would lose
/// output): at a local PTY's 46 MiB/s a 1 MiB ring fills in about 22 ms.
const CATCH_UP_RING_PART: u64 = 4;
/// Readers of recorded output waiting for the recorder to write what it buffered.
const FLUSH_QUEUE: usize = 64;
/// The most chunks whose read times the session keeps for its recorder. Half of it unread
/// wakes the recorder too; only a recorder that cannot keep up (no CPU for it) loses the
/// oldest times, and the output they timed takes the next time kept.
const TIMELINE_CHUNKS: usize = 1024;

/// The session's side of its recorder: where marks go.
#[derive(Debug)]
pub(super) struct RecorderTap {
    marks: mpsc::Sender<Mark>,
    /// Where a hand-off asks the recorder to stop at the end of the ring.
    freezes: mpsc::Sender<RecorderFreeze>,
    /// Wakes the recorder during a batching interval when output piles up (see
    /// [`OutputTimeline::pushed`]).
    catch_up: Notify,
    records_input: bool,
    /// Marks dropped because the queue was full, not yet reported in the recording.
    dropped_marks: AtomicU64,
    /// Where the spool file holds each stretch of output, as far as it holds it.
    index: Arc<Mutex<OutputIndex>>,
    /// Where a reader of recorded output asks the recorder to catch up with the ring and write
    /// what it buffered; answered once the file holds it.
    flushes: mpsc::Sender<oneshot::Sender<()>>,
    /// Where the spool file is.
    recordings: Arc<Recordings>,
}

/// When the session task read each chunk of output from the PTY, kept (in the session's state,
/// only when it is recorded) until the recorder has read the chunk: a recording's output events
/// carry the time the output was produced, not the time the batching recorder read it, and so
/// stay in order with the input marks between them.
#[derive(Debug, Default)]
pub(super) struct OutputTimeline {
    /// The offset of a chunk's first byte and when it was read, oldest first; at most
    /// [`TIMELINE_CHUNKS`].
    chunks: VecDeque<(u64, Instant)>,
    /// How far the recorder has read.
    recorded: u64,
    /// The recorder was woken to catch up and has not caught up since.
    woken: bool,
}

impl OutputTimeline {
    /// The timeline of a recorder that goes on from `offset` (a session taken over from the
    /// previous broker process, whose recording reached the end of its ring).
    pub(super) fn starting_at(offset: u64) -> Self {
        Self {
            recorded: offset,
            ..Self::default()
        }
    }

    /// Notes a chunk pushed at `offset` at `at`, the ring now ending at `end`; true when the
    /// recorder must be woken to catch up (once until it has: a quarter of a ring or half the
    /// timeline unread), which a keystroke's echo never is.
    pub(super) fn pushed(&mut self, offset: u64, at: Instant, end: u64, capacity: usize) -> bool {
        if self.chunks.len() >= TIMELINE_CHUNKS {
            self.chunks.pop_front();
        }
        self.chunks.push_back((offset, at));
        let behind = end.saturating_sub(self.recorded) >= capacity as u64 / CATCH_UP_RING_PART
            || self.chunks.len() >= TIMELINE_CHUNKS / 2;
        let wake = behind && !self.woken;
        self.woken |= wake;
        wake
    }

    /// When the output at `offset` was read: the time of the chunk that holds it, or of the
    /// oldest chunk kept when its own time was dropped; `None` for output older than every time
    /// kept (what a previous broker process read). Forgets the times of the chunks before it.
    fn time_of(&mut self, offset: u64) -> Option<Instant> {
        while self.chunks.get(1).is_some_and(|&(next, _)| next <= offset) {
            self.chunks.pop_front();
        }
        self.chunks.front().map(|&(_, at)| at)
    }

    /// The recorder has read up to `offset`; `caught_up` when that is the end of the ring.
    fn recorded_to(&mut self, offset: u64, caught_up: bool) {
        self.recorded = offset;
        if caught_up {
            self.woken = false;
        }
    }
}

/// Something other than output, at the output offset it happened at.
#[derive(Debug)]
pub(super) enum Mark {
    Input {
        offset: u64,
        at: Instant,
        data: Bytes,
        /// Who typed it ([`typist_marker`]).
        typist: String,
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
    /// Where the file holds each stretch of output.
    pub index: OutputIndex,
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
    flushes: mpsc::Receiver<oneshot::Sender<()>>,
    index: Arc<Mutex<OutputIndex>>,
    /// Where the previous broker process left the recording, for a session it handed over.
    resume: Option<FrozenRecording>,
}

/// Makes the tap the session's shared state keeps and the recorder that reads it.
pub(super) fn recorder(recording: SessionRecording) -> (RecorderTap, Recorder) {
    let (marks_tx, marks) = mpsc::channel(MARK_QUEUE);
    let (freezes_tx, freezes) = mpsc::channel(1);
    let (flushes_tx, flushes) = mpsc::channel(FLUSH_QUEUE);
    let index = Arc::new(Mutex::new(OutputIndex::default()));
    let tap = RecorderTap {
        marks: marks_tx,
        freezes: freezes_tx,
        catch_up: Notify::new(),
        records_input: recording.mode.records_input(),
        dropped_marks: AtomicU64::new(0),
        index: Arc::clone(&index),
        flushes: flushes_tx,
        recordings: Arc::clone(&recording.recordings),
    };
    (
        tap,
        Recorder {
            recording,
            marks,
            freezes,
            flushes,
            index,
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
    *lock_index(&recorder.index) = frozen.index.clone();
    recorder.resume = Some(frozen);
    (tap, recorder)
}

fn lock_index(index: &Mutex<OutputIndex>) -> std::sync::MutexGuard<'_, OutputIndex> {
    // The index is whole after every call that holds it: a panic elsewhere leaves it usable.
    index.lock().unwrap_or_else(PoisonError::into_inner)
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

    /// The output `from..to` as the session's recording holds it, once the recorder has caught
    /// up with the ring and written what it buffered; `None` when the session is not recorded
    /// (or its recorder ended). Output the recorder lost, or older than what its index still
    /// places, is missing.
    pub(super) async fn recorded_output(
        &self,
        session_id: Uuid,
        from: u64,
        to: u64,
    ) -> Option<RecordedRange> {
        let tap = self.recorder.as_ref()?;
        let (reply, written) = oneshot::channel();
        tap.flushes.send(reply).await.ok()?;
        written.await.ok()?;
        let Some(slice) = lock_index(&tap.index).for_range(from, to) else {
            return Some(RecordedRange::Missing(to - from));
        };
        let path = tap.recordings.spool_path(session_id);
        let read =
            tokio::task::spawn_blocking(move || read_recorded_range(&path, &slice, from, to)).await;
        match read {
            Ok(Ok(range)) => Some(range),
            Ok(Err(error)) => {
                tracing::warn!(%session_id, %error, "cannot read output back from the recording");
                Some(RecordedRange::Missing(to - from))
            }
            Err(error) => {
                tracing::warn!(%session_id, %error, "reading the recording failed");
                Some(RecordedRange::Missing(to - from))
            }
        }
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

    /// Wakes the recorder that output piled up for (see [`OutputTimeline::pushed`]).
    pub(super) fn wake_recorder(&self) {
        if let Some(tap) = &self.recorder {
            tap.catch_up.notify_one();
        }
    }

    /// Completes when the session task wakes the recorder to catch up; never without one.
    async fn recorder_behind(&self) {
        match &self.recorder {
            Some(tap) => tap.catch_up.notified().await,
            None => std::future::pending().await,
        }
    }

    /// Records input the process took, when the session records input, with who typed it:
    /// the principal of `client`'s ticket, or a call's when no attached client wrote it.
    pub(super) fn record_input(&self, client: Option<ClientId>, data: &[u8]) {
        if self.recorder.as_ref().is_some_and(|tap| tap.records_input) {
            let state = self.lock();
            let offset = state.ring.end();
            let principal = client.map(|client| {
                state
                    .attachments
                    .get(client)
                    .map(|attached| attached.holder.principal.clone())
                    .unwrap_or_default()
            });
            drop(state);
            self.record_mark(Mark::Input {
                offset,
                at: Instant::now(),
                data: Bytes::copy_from_slice(data),
                typist: typist_marker(principal.as_deref()),
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
    file: Option<Box<dyn SpoolFile>>,
    /// How long the file is: where the buffer's first byte will be.
    file_len: u64,
    /// When the oldest byte in `buffer` was buffered.
    dirty_since: Option<Instant>,
    index_writer: IndexWriter,
    index: Arc<Mutex<OutputIndex>>,
    /// The marker of whoever typed the last input written ([`typist_marker`]).
    last_typist: String,
}

/// The marker that names who typed: `input: <principal>` for an attached stream, `input:
/// (unnamed)` for one whose ticket named nobody, `input: (call)` for input a call sent (REST or
/// MCP `input`, `run`), which has no stream.
fn typist_marker(principal: Option<&str>) -> String {
    match principal {
        Some("") => UNNAMED_TYPIST.to_owned(),
        Some(principal) => format!("input: {principal}"),
        None => "input: (call)".to_owned(),
    }
}

/// Whom input is attributed to before any marker says otherwise.
const UNNAMED_TYPIST: &str = "input: (unnamed)";

impl CastWriter {
    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The recording's time of `instant`, or of now when it is not known.
    fn time_of(&self, instant: Option<Instant>) -> Duration {
        instant.map_or_else(
            || self.elapsed(),
            |instant| instant.saturating_duration_since(self.started),
        )
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
            self.index_writer.stop();
            return;
        };
        let written = async {
            file.write_all(&self.buffer).await?;
            file.flush().await
        }
        .await;
        if written.is_ok() {
            self.file_len += self.buffer.len() as u64;
            self.index_writer.flushed(&mut lock_index(&self.index));
        } else {
            // The output the buffer held is not in the file, so the index ends here.
            self.index_writer.stop();
        }
        if let Err(error) = written {
            tracing::warn!(session_id = %self.session_id, %error, lost = self.buffer.len(), "recording write failed");
            let lost = self.buffer.len();
            self.buffer.clear();
            // A write that met a full disk may have written part of the buffer, which would end
            // the file in the middle of an event, so the file goes back to where the buffer
            // began. When even that fails, what the file holds is kept and nothing more is
            // written: a recording cut short plays, one with a torn line does not.
            if let Err(error) = file.truncate(self.file_len).await {
                tracing::warn!(session_id = %self.session_id, %error, "cannot cut the recording back after a failed write; it ends here");
                self.file = None;
                return;
            }
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

    /// Output read from the ring at `offset`, at `at`, noting where its event goes in the file.
    fn output(&mut self, at: Duration, offset: u64, data: &[u8]) {
        // A character's start held back from the last read belongs to this event.
        let event_offset = offset - self.encoder.held_output() as u64;
        let position = self.file_len + self.buffer.len() as u64;
        if let Some(event) = self.encoder.output(at, data, &mut self.buffer) {
            self.index_writer
                .output_event(position, event_offset, event);
        }
        self.buffered();
    }

    fn mark(&mut self, mark: Mark) {
        let at = |instant: Instant| instant.saturating_duration_since(self.started);
        match mark {
            Mark::Input {
                at: instant,
                data,
                typist,
                ..
            } => {
                if typist != self.last_typist {
                    self.encoder.marker(at(instant), &typist, &mut self.buffer);
                    self.last_typist = typist;
                }
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
        mut flushes,
        index,
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
    // A file handed over goes on at its end.
    let file_len = match &resume {
        None => 0,
        Some(_) => file.metadata().await.map_or(0, |metadata| metadata.len()),
    };
    let mut header = recording.header.clone();
    let index_writer = match &resume {
        None => IndexWriter::default(),
        Some(resume) => IndexWriter::resumed(&resume.index),
    };
    let mut writer = CastWriter {
        session_id,
        started: Instant::now(),
        started_at: SystemTime::now(),
        encoder: CastEncoder::default(),
        buffer: Vec::with_capacity(FLUSH_BYTES * 2),
        file: Some(recording.recordings.spool_file(file)),
        file_len,
        dirty_since: None,
        index_writer,
        index,
        last_typist: UNNAMED_TYPIST.to_owned(),
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
    // Readers of recorded output, answered once the recorder caught up and flushed.
    let mut flush_waiters: Vec<oneshot::Sender<()>> = Vec::new();
    // Output or a mark came during the last batching interval: the next interval follows at
    // once, without waiting to be woken.
    let mut busy = false;
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
        let (read, read_at) = read_output(&shared, offset, limit);
        let up_to_date = match read {
            RingRead::Data(data) => {
                let at = writer.time_of(read_at);
                writer.output(at, offset, &data);
                offset += data.len() as u64;
                false
            }
            RingRead::Gap { lost, resume_at } => {
                tracing::debug!(%session_id, lost, "the recorder fell behind the ring");
                let at = writer.time_of(read_at);
                writer.encoder.marker(
                    at,
                    &format!("ptyhub: lost {lost} bytes of output (the recorder fell behind)"),
                    &mut writer.buffer,
                );
                writer.buffered();
                writer.index_writer.gap();
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
        if !flush_waiters.is_empty() {
            writer.flush().await;
            for waiter in flush_waiters.drain(..) {
                let _ = waiter.send(());
            }
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
        if !busy {
            tokio::select! {
                changed = changed.changed() => if changed.is_err() { finishing = true },
                mark = marks.recv() => match mark {
                    Some(mark) => pending = Some(mark),
                    None => finishing = true,
                },
                () = done.cancelled() => finishing = true,
                freeze = freezes.recv() => freezing = freeze,
                Some(waiter) = flushes.recv() => {
                    flush_waiters.push(waiter);
                    continue;
                }
                () = tokio::time::sleep_until(flush_at.unwrap_or_else(Instant::now)), if flush_at.is_some() => {
                    writer.flush().await;
                    continue;
                }
            }
            if finishing || freezing.is_some() {
                continue;
            }
        }
        // Output or input is coming: let more of it come and read it in one go. Neither the
        // output nor the marks wake the recorder meanwhile, only a hand-off, the end, a flush
        // due, or output piling up (a flood must not run a ring ahead of it).
        let batch_end = Instant::now() + RECORD_BATCH_INTERVAL;
        tokio::select! {
            () = tokio::time::sleep_until(flush_at.map_or(batch_end, |at| at.min(batch_end))) => {}
            () = done.cancelled() => finishing = true,
            freeze = freezes.recv() => freezing = freeze,
            () = shared.recorder_behind() => {}
            Some(waiter) = flushes.recv() => flush_waiters.push(waiter),
        }
        // Marked seen at the top of the loop, before the ring is read: what comes from there on
        // counts for the next interval.
        busy = changed.has_changed().unwrap_or(false) || !marks.is_empty();
    }
    // Everything the session wrote is in the buffer: the ring may go.
    let _ = drained.send(());
    while let Ok(mark) = marks.try_recv() {
        writer.mark(mark);
    }
    let at = writer.elapsed();
    writer.encoder.finish(at, &mut writer.buffer);
    writer.flush().await;
    if let Some(mut file) = writer.file.take()
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

/// The output at `offset` (at most `limit` bytes) and when the PTY's reader read it, noting in
/// the timeline how far the recorder got.
fn read_output(shared: &Shared, offset: u64, limit: usize) -> (RingRead, Option<Instant>) {
    let mut state = shared.lock();
    let state = &mut *state;
    let read = state.ring.read_at(offset, limit);
    let Some(timeline) = state.output_timeline.as_mut() else {
        return (read, None);
    };
    let (at, recorded) = match &read {
        RingRead::Data(data) => (timeline.time_of(offset), offset + data.len() as u64),
        RingRead::Gap { resume_at, .. } => (timeline.time_of(*resume_at), *resume_at),
        RingRead::UpToDate => (None, offset),
    };
    timeline.recorded_to(recorded, recorded >= state.ring.end());
    (read, at)
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
    if let Some(file) = &mut writer.file
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
        index: lock_index(&writer.index).clone(),
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicBool, AtomicUsize};
    use std::task::{Context, Poll, ready};

    use futures::future::BoxFuture;
    use ptyhub_test_support::asciicast::Cast;
    use ptyhub_wire::RecordingStore;
    use tokio::io::{AsyncWrite, AsyncWriteExt as _};
    use tokio::time::advance;

    use super::*;
    use crate::error::Error;
    use crate::recording::{RecordingsConfig, SpoolDisk};
    use crate::runtime::fake::FakeSession;
    use crate::session::{InputItem, SessionSettings};

    /// Lets every task that output, a timer or a message woke run to its next wait.
    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    /// A recording of `mode` into `directory`'s `store`, spooled in its `spool`.
    fn recording(directory: &Path, mode: RecordMode) -> SessionRecording {
        recording_into(Recordings::new(recordings_config(directory)), mode)
    }

    /// The configuration of recordings kept in `directory`'s `store`, spooled in its `spool`.
    fn recordings_config(directory: &Path) -> RecordingsConfig {
        let store = directory.join("store");
        std::fs::create_dir(&store).unwrap();
        RecordingsConfig {
            store: RecordingStore::open(store.to_str().unwrap()).unwrap(),
            spool: directory.join("spool"),
            max_age: None,
            max_bytes: None,
        }
    }

    fn recording_into(recordings: Recordings, mode: RecordMode) -> SessionRecording {
        SessionRecording {
            recordings: Arc::new(recordings),
            mode,
            header: CastHeader {
                size: TerminalSize::DEFAULT,
                timestamp: 0,
                command: None,
                title: None,
                term: None,
            },
        }
    }

    /// Kills the session and parses the recording it published into `directory`'s store.
    async fn published(fake: FakeSession, directory: &Path) -> Cast {
        let session_id = fake.session.id;
        fake.kill().await;
        let cast = std::fs::read(directory.join("store").join(format!("{session_id}.cast")));
        let cast = cast.unwrap();
        Cast::parse(&cast).unwrap()
    }

    fn output_end(fake: &FakeSession) -> u64 {
        fake.session.shared.lock().ring.end()
    }

    /// Waits until the recorder of `fake` started (its recording's clock starts then) and waits
    /// for output. Its spool file is written on a blocking thread, in real time, which the
    /// paused clock does not see.
    async fn recorder_started(fake: &FakeSession, directory: &Path) {
        let spooled = directory
            .join("spool")
            .join(format!("{}.cast", fake.session.id));
        let mut header_written = false;
        for _ in 0..10_000 {
            if std::fs::metadata(&spooled).is_ok_and(|file| file.len() > 0) {
                header_written = true;
                break;
            }
            real_time_passes().await;
        }
        assert!(header_written, "the recorder never wrote its header");
        // The write is done; its completion reaches the recorder, which then waits.
        for _ in 0..10 {
            settle().await;
            real_time_passes().await;
        }
    }

    /// How far the recorder has read, as the session task knows.
    fn recorded(fake: &FakeSession) -> u64 {
        let state = fake.session.shared.lock();
        state.output_timeline.as_ref().unwrap().recorded
    }

    #[tokio::test(start_paused = true)]
    async fn output_is_timed_when_the_pty_produced_it_not_when_the_recorder_read_it() {
        let directory = tempfile::tempdir().unwrap();
        let recording = recording(directory.path(), RecordMode::OutputAndInput);
        let mut fake = FakeSession::start(FakeSession::settings(), Some(recording)).await;
        recorder_started(&fake, directory.path()).await;
        fake.terminal.terminal.write_all(b"first ").await.unwrap();
        settle().await;
        assert_eq!(recorded(&fake), 0, "the recorder read a chunk at once");
        advance(Duration::from_millis(20)).await;
        fake.session
            .send_input(vec![InputItem::Text("x".to_owned())], false)
            .await
            .unwrap();
        settle().await;
        advance(Duration::from_millis(10)).await;
        fake.terminal.terminal.write_all(b"second ").await.unwrap();
        settle().await;
        advance(Duration::from_millis(300)).await;
        fake.terminal.terminal.write_all(b"third").await.unwrap();
        settle().await;
        advance(Duration::from_secs(1)).await;
        settle().await;

        let cast = published(fake, directory.path()).await;
        let events: Vec<(&str, &str, f64)> = cast
            .events
            .iter()
            .map(|event| (event.code.as_str(), event.data.as_str(), event.time))
            .collect();
        let start = events[0].2;
        let since_first: Vec<(&str, &str, u128)> = events
            .iter()
            .map(|&(code, data, time)| (code, data, ((time - start) * 1e6).round() as u128))
            .collect();
        assert_eq!(
            since_first,
            [
                ("o", "first ", 0),
                ("m", "input: (call)", 20_000),
                ("i", "x", 20_000),
                ("o", "second ", 30_000),
                ("o", "third", 330_000),
            ],
            "{events:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_batching_recorder_keeps_up_with_a_flood_many_rings_long() {
        let directory = tempfile::tempdir().unwrap();
        let recording = recording(directory.path(), RecordMode::Output);
        let settings = SessionSettings {
            ring_bytes: 64 * 1024,
            scrollback_lines: None,
            ..FakeSession::settings()
        };
        let mut fake = FakeSession::start(settings, Some(recording)).await;
        recorder_started(&fake, directory.path()).await;
        let flood: String = (0..100_000).map(|line| format!("line {line}\n")).collect();
        assert!(flood.len() > 16 * settings.ring_bytes);
        let start = Instant::now();
        let catch_up_at = settings.ring_bytes as u64 / CATCH_UP_RING_PART;
        for piece in flood.as_bytes().chunks(8 * 1024) {
            fake.terminal.terminal.write_all(piece).await.unwrap();
            settle().await;
            // Output piling up wakes the recorder at once: it catches up (its spool writes take
            // real time) while the paused clock stands still.
            let mut turns = 0;
            while output_end(&fake) - recorded(&fake) >= catch_up_at {
                assert!(
                    turns < 1_000_000,
                    "output piled up and the recorder slept on"
                );
                turns += 1;
                tokio::task::yield_now().await;
            }
        }
        // The paused clock never moved: no batching interval ended during the flood, so the
        // recorder kept up only by being woken as output piled up.
        assert_eq!(start.elapsed(), Duration::ZERO);

        let cast = published(fake, directory.path()).await;
        let markers: Vec<_> = cast.events_of("m").map(|event| &event.data).collect();
        assert!(markers.is_empty(), "{markers:?}");
        assert!(
            cast.output() == flood.as_bytes(),
            "the recording lost output"
        );
    }

    /// A command as a shell with integration prints it: its prompt, the line entered (`C`),
    /// `output` (longer than the ring of [`small_ring`]) and its end with the next prompt;
    /// `fake`'s recorder (if any) is woken as output piles up and keeps up.
    async fn command_outside_the_ring(fake: &mut FakeSession, output: &[u8]) {
        let mut script = b"\x1b]133;A\x07$ \x1b]133;B\x07\x1b]133;C\x07".to_vec();
        script.extend_from_slice(output);
        script.extend_from_slice(b"\x1b]133;D;0\x07\x1b]133;A\x07$ ");
        let recorded_session = fake.session.shared.recorder.is_some();
        let catch_up_at = small_ring().ring_bytes as u64 / CATCH_UP_RING_PART;
        for piece in script.chunks(1000) {
            fake.terminal.terminal.write_all(piece).await.unwrap();
            settle().await;
            while recorded_session && output_end(fake) - recorded(fake) >= catch_up_at {
                tokio::task::yield_now().await;
            }
        }
    }

    fn small_ring() -> SessionSettings {
        SessionSettings {
            ring_bytes: 4096,
            ..FakeSession::settings()
        }
    }

    /// Lines of text with characters of two, three and four bytes, which reads cut in two.
    fn long_output() -> Vec<u8> {
        (0..1500)
            .map(|line| format!("line {line}: é € 😀\r\n"))
            .collect::<String>()
            .into_bytes()
    }

    #[tokio::test(start_paused = true)]
    async fn a_commands_output_the_ring_let_go_of_is_read_from_the_recording() {
        let directory = tempfile::tempdir().unwrap();
        let recording = recording(directory.path(), RecordMode::Output);
        let mut fake = FakeSession::start(small_ring(), Some(recording)).await;
        recorder_started(&fake, directory.path()).await;
        let output = long_output();
        command_outside_the_ring(&mut fake, &output).await;
        assert!(
            fake.session.shared.lock().ring.start() > output.len() as u64 / 2,
            "the ring let go of the command's output"
        );

        let (command, read) = fake.session.command_output(1).await.unwrap();
        assert_eq!(command.exit_code, Some(0));
        assert!(read == output, "the output read back is the output");
        fake.kill().await;
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_recording_output_the_ring_let_go_of_is_gone() {
        let mut fake = FakeSession::start(small_ring(), None).await;
        command_outside_the_ring(&mut fake, &long_output()).await;
        let gone = fake.session.command_output(1).await.unwrap_err();
        assert!(
            matches!(gone, Error::CommandOutputLost { command: 1, lost } if lost > 0),
            "{gone:?}"
        );
        assert!(gone.to_string().contains("not recorded"), "{gone}");
        fake.kill().await;
    }

    #[test]
    fn a_timeline_that_overflowed_times_older_output_by_the_oldest_time_kept() {
        let start = Instant::now();
        let mut timeline = OutputTimeline::default();
        let at = |chunk: u64| start + Duration::from_millis(chunk);
        for chunk in 0..TIMELINE_CHUNKS as u64 + 10 {
            timeline.pushed(chunk * 10, at(chunk), chunk * 10 + 10, 1 << 20);
        }
        // The first ten chunks' times are gone: their output takes the oldest time kept.
        assert_eq!(timeline.time_of(0), Some(at(10)));
        assert_eq!(timeline.time_of(95), Some(at(10)));
        assert_eq!(timeline.time_of(105), Some(at(10)));
        assert_eq!(timeline.time_of(110), Some(at(11)));
        // Times never go back for a reader moving forward.
        assert_eq!(timeline.time_of(115), Some(at(11)));
        assert_eq!(timeline.time_of(500), Some(at(50)));
    }

    #[test]
    fn the_recorder_is_woken_once_when_output_piles_up() {
        let start = Instant::now();
        let mut timeline = OutputTimeline::default();
        let capacity = 4096;
        let wakes: Vec<bool> = (0..8)
            .map(|chunk| timeline.pushed(chunk * 256, start, chunk * 256 + 256, capacity))
            .collect();
        // A quarter of the ring unread (1024 bytes) wakes it, once.
        assert_eq!(
            wakes,
            [false, false, false, true, false, false, false, false]
        );
        timeline.recorded_to(2048, true);
        assert!(!timeline.pushed(2048, start, 2304, capacity));
        assert!(timeline.pushed(2304, start, 3072, capacity));
    }

    /// What the test does to the disk under a spool file: refuse the next write as full, or
    /// hold the next write until the test lets it go.
    #[derive(Default)]
    struct DiskTrouble {
        fail_next: AtomicBool,
        /// The next write writes half of what it is given, and the one after it fails, as a disk
        /// that fills up in the middle of a buffer does.
        tear_next: AtomicBool,
        stall_next: AtomicBool,
        /// Set while a write is held.
        stalled: AtomicBool,
        release: Arc<Notify>,
        /// Flushes that reached the file: what the recorder wrote before each is in the file.
        flushed: AtomicUsize,
        /// What each refused write held.
        refused: Mutex<Vec<Vec<u8>>>,
    }

    /// A spool file behind a troubled disk.
    struct TroubledFile {
        file: tokio::fs::File,
        trouble: Arc<DiskTrouble>,
        held: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    }

    impl AsyncWrite for TroubledFile {
        fn poll_write(
            self: Pin<&mut Self>,
            context: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            let this = self.get_mut();
            if this.held.is_none() && this.trouble.stall_next.swap(false, Ordering::SeqCst) {
                let release = Arc::clone(&this.trouble.release);
                this.held = Some(Box::pin(async move { release.notified().await }));
                this.trouble.stalled.store(true, Ordering::SeqCst);
            }
            if let Some(held) = &mut this.held {
                ready!(held.as_mut().poll(context));
                this.held = None;
                this.trouble.stalled.store(false, Ordering::SeqCst);
            }
            if data.len() > 1 && this.trouble.tear_next.swap(false, Ordering::SeqCst) {
                let written = Pin::new(&mut this.file).poll_write(context, &data[..data.len() / 2]);
                this.trouble.fail_next.store(true, Ordering::SeqCst);
                return written;
            }
            if this.trouble.fail_next.swap(false, Ordering::SeqCst) {
                this.trouble.refused.lock().unwrap().push(data.to_vec());
                let full = std::io::Error::new(std::io::ErrorKind::StorageFull, "disk full");
                return Poll::Ready(Err(full));
            }
            Pin::new(&mut this.file).poll_write(context, data)
        }

        fn poll_flush(
            self: Pin<&mut Self>,
            context: &mut Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            let this = self.get_mut();
            let flushed = ready!(Pin::new(&mut this.file).poll_flush(context));
            if flushed.is_ok() {
                this.trouble.flushed.fetch_add(1, Ordering::SeqCst);
            }
            Poll::Ready(flushed)
        }

        fn poll_shutdown(
            self: Pin<&mut Self>,
            context: &mut Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.get_mut().file).poll_shutdown(context)
        }
    }

    impl SpoolFile for TroubledFile {
        fn sync_data(&mut self) -> BoxFuture<'_, std::io::Result<()>> {
            Box::pin(self.file.sync_data())
        }

        fn sync_all(&mut self) -> BoxFuture<'_, std::io::Result<()>> {
            Box::pin(self.file.sync_all())
        }

        fn truncate(&mut self, len: u64) -> BoxFuture<'_, std::io::Result<()>> {
            self.file.truncate(len)
        }
    }

    /// An output-only recording into `directory` whose spool file is behind `trouble`.
    fn troubled_recording(directory: &Path, trouble: &Arc<DiskTrouble>) -> SessionRecording {
        let trouble = Arc::clone(trouble);
        let disk = SpoolDisk::new(move |file| {
            Box::new(TroubledFile {
                file,
                trouble: Arc::clone(&trouble),
                held: None,
            })
        });
        let recordings = Recordings::with_spool_disk(recordings_config(directory), disk);
        recording_into(recordings, RecordMode::Output)
    }

    /// Waits until `done`, in real time: spool writes run on blocking threads, which the paused
    /// clock does not see. The bound only keeps a broken recorder from hanging the test.
    async fn until(what: &str, done: impl Fn() -> bool) {
        for _ in 0..10_000 {
            if done() {
                return;
            }
            real_time_passes().await;
        }
        panic!("{what} never happened");
    }

    /// Lets a millisecond of real time pass for the spool writes on the blocking threads,
    /// without holding up this test's runtime meanwhile and without moving its paused clock
    /// (the clock does not advance by itself while a blocking task runs).
    async fn real_time_passes() {
        tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(1)))
            .await
            .expect("a sleep does not panic");
    }

    /// Writes `output` to the fake PTY and lets the recorder read it and write it to its file.
    async fn recorded_and_flushed(fake: &mut FakeSession, output: &[u8]) {
        fake.terminal.terminal.write_all(output).await.unwrap();
        settle().await;
        advance(RECORD_BATCH_INTERVAL).await;
        settle().await;
        advance(FLUSH_INTERVAL).await;
        settle().await;
    }

    /// The markers of `cast`.
    fn markers(cast: &Cast) -> Vec<&str> {
        cast.events_of("m")
            .map(|event| event.data.as_str())
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_recorder_held_up_by_its_disk_marks_the_output_the_ring_let_go_of_and_goes_on() {
        let directory = tempfile::tempdir().unwrap();
        let trouble = Arc::new(DiskTrouble::default());
        let settings = SessionSettings {
            ring_bytes: 4096,
            scrollback_lines: None,
            ..FakeSession::settings()
        };
        let recording = troubled_recording(directory.path(), &trouble);
        let mut fake = FakeSession::start(settings, Some(recording)).await;
        recorder_started(&fake, directory.path()).await;
        until("the header is written", || {
            trouble.flushed.load(Ordering::SeqCst) == 1
        })
        .await;

        // The recorder reads the first output, and its write of it hangs on the disk.
        trouble.stall_next.store(true, Ordering::SeqCst);
        recorded_and_flushed(&mut fake, b"before ").await;
        assert_eq!(recorded(&fake), 7);
        until("the recorder's write is held", || {
            trouble.stalled.load(Ordering::SeqCst)
        })
        .await;

        // Meanwhile the session's output runs rings ahead of it: the PTY is never held back.
        let flood: String = (0..2000).map(|line| format!("line {line}\r\n")).collect();
        let flood = flood.as_bytes();
        for piece in flood.chunks(1000) {
            fake.terminal.terminal.write_all(piece).await.unwrap();
            settle().await;
        }
        assert_eq!(output_end(&fake), 7 + flood.len() as u64);
        assert!(trouble.stalled.load(Ordering::SeqCst));
        trouble.release.notify_one();
        advance(RECORD_BATCH_INTERVAL).await;
        settle().await;

        let cast = published(fake, directory.path()).await;
        let lost = flood.len() - settings.ring_bytes;
        assert_eq!(
            markers(&cast),
            [format!(
                "ptyhub: lost {lost} bytes of output (the recorder fell behind)"
            )]
        );
        // The marker sits where the output is missing, and the recording goes on after it with
        // all the ring still held.
        let codes: String = cast
            .events
            .iter()
            .map(|event| event.code.as_str())
            .collect();
        assert!(
            codes.starts_with("om") && codes[2..].chars().all(|code| code == 'o'),
            "{codes}"
        );
        let mut kept = b"before ".to_vec();
        kept.extend_from_slice(&flood[lost..]);
        assert!(cast.output() == kept, "the output around the gap");
    }

    /// A recording of `kept `, then of `troubled`, whose write meets the trouble `arm` sets up
    /// on the disk, then of `after`: the published recording, and what the disk refused.
    async fn recorded_through_trouble(
        arm: fn(&DiskTrouble),
        troubled: &[u8],
    ) -> (Cast, Vec<Vec<u8>>) {
        let directory = tempfile::tempdir().unwrap();
        let trouble = Arc::new(DiskTrouble::default());
        let recording = troubled_recording(directory.path(), &trouble);
        let mut fake = FakeSession::start(FakeSession::settings(), Some(recording)).await;
        recorder_started(&fake, directory.path()).await;
        until("the header is written", || {
            trouble.flushed.load(Ordering::SeqCst) == 1
        })
        .await;
        recorded_and_flushed(&mut fake, b"kept ").await;
        until("the first output is written", || {
            trouble.flushed.load(Ordering::SeqCst) == 2
        })
        .await;

        arm(&trouble);
        recorded_and_flushed(&mut fake, troubled).await;
        until("the disk refuses a write", || {
            !trouble.refused.lock().unwrap().is_empty()
        })
        .await;
        recorded_and_flushed(&mut fake, b"after").await;

        let cast = published(fake, directory.path()).await;
        let refused = trouble.refused.lock().unwrap().clone();
        (cast, refused)
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_the_disk_refuses_is_marked_with_what_it_lost_and_the_recording_goes_on() {
        let (cast, refused) = recorded_through_trouble(
            |trouble| trouble.fail_next.store(true, Ordering::SeqCst),
            b"lost ",
        )
        .await;
        let [refused] = refused.as_slice() else {
            panic!("{} writes refused", refused.len());
        };
        // What the refused write held was the lost output's event, whole.
        let refused = std::str::from_utf8(refused).unwrap();
        assert!(
            refused.ends_with("\"o\", \"lost \"]\n") && refused.lines().count() == 1,
            "{refused:?}"
        );
        assert_eq!(
            markers(&cast),
            [format!(
                "ptyhub: lost {} bytes of the recording (write failed: disk full)",
                refused.len()
            )]
        );
        assert_eq!(cast.output(), b"kept after");
        let codes: String = cast
            .events
            .iter()
            .map(|event| event.code.as_str())
            .collect();
        assert_eq!(codes, "omo");
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_cut_short_by_the_disk_leaves_no_torn_event_in_the_file() {
        let (cast, _) = recorded_through_trouble(
            |trouble| trouble.tear_next.store(true, Ordering::SeqCst),
            b"torn in the middle ",
        )
        .await;
        // Parsed strictly: the half event the disk took is gone, and the marker counts the
        // whole buffer it was part of.
        let [marker] = markers(&cast)[..] else {
            panic!("markers: {:?}", markers(&cast));
        };
        assert!(
            marker.starts_with("ptyhub: lost ")
                && marker.ends_with(" bytes of the recording (write failed: disk full)"),
            "{marker}"
        );
        assert_eq!(cast.output(), b"kept after");
    }
}
