//! Where a recording in progress keeps each stretch of the session's output, by output offset,
//! so that output the ring let go of can be read back from the spool file: a command's output
//! that scrolled out of the ring is still served while the session is recorded.
//!
//! asciicast carries no offsets, so the recorder keeps them beside the file: a sparse list of
//! [`Checkpoint`]s, each an output event's byte position in the file and the output offset of
//! its first byte. Between two checkpoints the events' texts follow each other byte for byte
//! (valid UTF-8 is kept exactly), so a reader starts at the last checkpoint at or before the
//! offset it wants and counts forward. An event whose bytes were not all UTF-8 (its text has
//! U+FFFD where they were) and the first event after output the recorder lost start a new
//! checkpoint, so a replacement character or a gap never shifts the offsets after it; every
//! other checkpoint is at least [`CHECKPOINT_SPACING`] of file after the previous one.
//!
//! The list is bounded ([`MAX_CHECKPOINTS`]): past it, every other checkpoint that only spaces
//! the reads goes (a read then scans twice as far), and when those are gone too the oldest
//! ones go, and the output before the first one left is no longer served.

use std::io::{BufRead as _, BufReader, Seek as _, SeekFrom};
use std::path::Path;

use super::asciicast::OutputEvent;

/// A checkpoint is placed when at least this much of the file came since the previous one.
pub const CHECKPOINT_SPACING: u64 = 16 * 1024;
/// The most of a command's output one answer carries, from the recording and the ring
/// together: an answer stays under the 4 MiB a gRPC client (session-api's among them) takes by
/// default.
pub const MAX_COMMAND_OUTPUT: u64 = 3 << 20;
/// The most checkpoints kept for one recording (17 bytes each).
pub const MAX_CHECKPOINTS: usize = 2048;

/// An output event's place in the file and in the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    /// The output offset of the event's first byte.
    pub offset: u64,
    /// The byte position of the event's line in the file.
    pub position: u64,
    /// The offsets cannot be counted to it from the checkpoint before (a gap in the
    /// recording, or an event before it that was not exactly its bytes): it stays when the list
    /// is thinned.
    pub resync: bool,
}

/// The checkpoints of the part of a recording that is in its file, and how far that part goes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutputIndex {
    /// In the order of the file; offsets increase.
    checkpoints: Vec<Checkpoint>,
    /// The output offset the file holds output up to (exclusive): the end of its last output
    /// event.
    held_to: u64,
}

impl OutputIndex {
    /// An index as a hand-off carries it: its checkpoints, checked to be in order.
    pub fn from_parts(checkpoints: Vec<Checkpoint>, held_to: u64) -> Option<Self> {
        let ordered = checkpoints
            .windows(2)
            .all(|pair| pair[0].offset <= pair[1].offset && pair[0].position < pair[1].position);
        let below = checkpoints.last().is_none_or(|last| last.offset <= held_to);
        (ordered && below).then_some(Self {
            checkpoints,
            held_to,
        })
    }

    pub fn checkpoints(&self) -> &[Checkpoint] {
        &self.checkpoints
    }

    /// The output offset the file holds output up to (exclusive).
    pub fn held_to(&self) -> u64 {
        self.held_to
    }

    /// What a read of `from..to` needs: the checkpoints from the last one at or before `from`
    /// up to the first one at or after `to`; `None` when the file holds nothing from `from`
    /// on (older than every checkpoint, or not written yet).
    pub fn for_range(&self, from: u64, to: u64) -> Option<IndexSlice> {
        if to > self.held_to {
            return None;
        }
        let first = self
            .checkpoints
            .partition_point(|checkpoint| checkpoint.offset <= from)
            .checked_sub(1)?;
        let last = self
            .checkpoints
            .partition_point(|checkpoint| checkpoint.offset < to)
            .min(self.checkpoints.len() - 1);
        Some(IndexSlice {
            checkpoints: self.checkpoints[first..=last].to_vec(),
        })
    }

    /// Takes the checkpoints of events now in the file, which holds output up to `held_to`.
    fn extend(&mut self, checkpoints: impl IntoIterator<Item = Checkpoint>, held_to: u64) {
        self.checkpoints.extend(checkpoints);
        self.held_to = self.held_to.max(held_to);
        if self.checkpoints.len() > MAX_CHECKPOINTS {
            self.thin();
        }
    }

    /// Drops every other checkpoint that only spaces the reads, and then, if that was not
    /// enough, the oldest ones.
    fn thin(&mut self) {
        let mut spacing = 0usize;
        self.checkpoints.retain(|checkpoint| {
            if checkpoint.resync {
                return true;
            }
            spacing += 1;
            spacing % 2 == 1
        });
        if self.checkpoints.len() > MAX_CHECKPOINTS {
            // Down to half, so that this happens once per half a list, not at every event.
            let oldest = self.checkpoints.len() - MAX_CHECKPOINTS / 2;
            self.checkpoints.drain(..oldest);
        }
    }
}

/// The checkpoints one read needs, copied out of the index so that the file is read without it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexSlice {
    checkpoints: Vec<Checkpoint>,
}

/// The recorder's side: checkpoints of the events it encoded, placed when the event is encoded
/// (at the position it will have in the file) and given to the [`OutputIndex`] once the file
/// holds them.
#[derive(Debug, Default)]
pub struct IndexWriter {
    /// Checkpoints of events still in the recorder's buffer.
    pending: Vec<Checkpoint>,
    /// The end of the last event encoded, in output offsets.
    encoded_to: Option<u64>,
    /// The offset the next event starts at when nothing came between (no gap, and the last
    /// event was its bytes exactly).
    counted_to: Option<u64>,
    /// The position of the last checkpoint placed.
    last_position: Option<u64>,
    /// A write to the file failed: what it holds from there on is not known, and no more is
    /// indexed.
    stopped: bool,
}

impl IndexWriter {
    /// The writer of a recording going on from `index` (one handed over by the previous broker
    /// process): its first event is a checkpoint.
    pub fn resumed(index: &OutputIndex) -> Self {
        Self {
            last_position: index
                .checkpoints
                .last()
                .map(|checkpoint| checkpoint.position),
            ..Self::default()
        }
    }

    /// An output event whose line starts at `position` in the file was encoded, holding `event`
    /// from output offset `offset`.
    pub fn output_event(&mut self, position: u64, offset: u64, event: OutputEvent) {
        if self.stopped {
            return;
        }
        let resync = self.counted_to != Some(offset);
        let spaced = self
            .last_position
            .is_none_or(|last| position - last >= CHECKPOINT_SPACING);
        if resync || spaced {
            self.pending.push(Checkpoint {
                offset,
                position,
                resync,
            });
            self.last_position = Some(position);
        }
        let end = offset + event.bytes as u64;
        self.encoded_to = Some(end);
        self.counted_to = event.exact.then_some(end);
    }

    /// Output was lost before the next event (the recorder fell behind the ring).
    pub fn gap(&mut self) {
        self.counted_to = None;
    }

    /// Everything encoded so far is in the file now.
    pub fn flushed(&mut self, index: &mut OutputIndex) {
        if self.stopped {
            return;
        }
        let held_to = self.encoded_to.unwrap_or(index.held_to);
        index.extend(self.pending.drain(..), held_to);
    }

    /// A write to the file failed: stop indexing, so no read trusts positions after it.
    pub fn stop(&mut self) {
        self.stopped = true;
        self.pending.clear();
    }
}

/// What a recording holds of a range of output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordedRange {
    /// The range's bytes, as the recording keeps them (bytes that were not UTF-8 as U+FFFD).
    Data(Vec<u8>),
    /// This many bytes of the range are not in the recording (the recorder fell behind).
    Missing(u64),
}

/// Reads `from..to` of the output out of the recording at `path`, with the checkpoints
/// `slice` holds (from [`OutputIndex::for_range`]). Blocking: run it off the runtime's threads.
pub fn read_recorded_range(
    path: &Path,
    slice: &IndexSlice,
    from: u64,
    to: u64,
) -> std::io::Result<RecordedRange> {
    let Some(first) = slice.checkpoints.first() else {
        return Ok(RecordedRange::Missing(to - from));
    };
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(first.position))?;
    let mut reader = BufReader::new(file);
    let mut later = slice.checkpoints[1..].iter().peekable();
    let mut collected = RangeCollector::new(from, to);
    let mut position = first.position;
    let mut offset = first.offset;
    let mut line = String::new();
    while !collected.is_complete() {
        line.clear();
        let read = reader.read_line(&mut line)?;
        if read == 0 {
            break;
        }
        let line_position = position;
        position += read as u64;
        if let Some(checkpoint) = later.next_if(|checkpoint| checkpoint.position == line_position) {
            offset = checkpoint.offset;
        }
        // A line cut by a failed write, or one that is not output, counts nothing.
        let Some(text) = output_text(&line) else {
            continue;
        };
        collected.event(offset, text.as_bytes());
        offset += text.len() as u64;
    }
    Ok(collected.finish())
}

/// The text of an output event's line (`[time, "o", text]`).
fn output_text(line: &str) -> Option<String> {
    let (_, code, text): (f64, String, String) = serde_json::from_str(line).ok()?;
    (code == "o").then_some(text)
}

/// The bytes of `from..to` gathered from events in order, and how many of them no event held.
struct RangeCollector {
    from: u64,
    to: u64,
    data: Vec<u8>,
    /// The next offset wanted.
    next: u64,
    missing: u64,
}

impl RangeCollector {
    fn new(from: u64, to: u64) -> Self {
        Self {
            from,
            to,
            data: Vec::with_capacity((to - from) as usize),
            next: from,
            missing: 0,
        }
    }

    fn is_complete(&self) -> bool {
        self.next >= self.to
    }

    /// An event holding `bytes` from `offset` on.
    fn event(&mut self, offset: u64, bytes: &[u8]) {
        let end = offset + bytes.len() as u64;
        if end <= self.next || self.is_complete() {
            return;
        }
        if offset > self.next {
            self.missing += offset.min(self.to) - self.next;
            self.next = offset.min(self.to);
        }
        let take_to = end.min(self.to);
        if self.next < take_to {
            let start = (self.next - offset) as usize;
            self.data
                .extend_from_slice(&bytes[start..(take_to - offset) as usize]);
            self.next = take_to;
        }
    }

    fn finish(mut self) -> RecordedRange {
        self.missing += self.to.saturating_sub(self.next.max(self.from));
        if self.missing > 0 {
            RecordedRange::Missing(self.missing)
        } else {
            RecordedRange::Data(self.data)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::recording::CastEncoder;

    /// A recording being written: the encoder, the file's bytes and the index, flushed after
    /// every event as the recorder's flushes would.
    #[derive(Default)]
    struct Recording {
        encoder: CastEncoder,
        file: Vec<u8>,
        writer: IndexWriter,
        index: OutputIndex,
        offset: u64,
    }

    impl Recording {
        fn output(&mut self, bytes: &[u8]) {
            let start = self.offset - self.encoder.held_output() as u64;
            let position = self.file.len() as u64;
            if let Some(event) = self.encoder.output(Duration::ZERO, bytes, &mut self.file) {
                self.writer.output_event(position, start, event);
            }
            self.offset += bytes.len() as u64;
            self.writer.flushed(&mut self.index);
        }

        fn marker(&mut self, label: &str) {
            self.encoder.marker(Duration::ZERO, label, &mut self.file);
        }

        fn lose(&mut self, bytes: u64) {
            self.marker("ptyhub: lost output");
            self.writer.gap();
            self.offset += bytes;
        }

        fn read(&self, from: u64, to: u64) -> Option<RecordedRange> {
            let directory = tempfile::tempdir().unwrap();
            let path = directory.path().join("session.cast");
            std::fs::write(&path, &self.file).unwrap();
            let slice = self.index.for_range(from, to)?;
            Some(read_recorded_range(&path, &slice, from, to).unwrap())
        }
    }

    fn data(bytes: &[u8]) -> Option<RecordedRange> {
        Some(RecordedRange::Data(bytes.to_vec()))
    }

    #[test]
    fn any_range_of_utf8_output_reads_back_byte_for_byte() {
        let mut recording = Recording::default();
        recording.marker("header stand-in");
        let output = "one\r\ntwo €\r\n😀 three\r\n".repeat(2000);
        let bytes = output.as_bytes();
        // Reads cut characters in two; the encoder holds their starts back.
        for piece in bytes.chunks(7) {
            recording.output(piece);
        }
        assert!(
            recording.index.checkpoints().len() > 2,
            "spaced every {CHECKPOINT_SPACING} bytes of file"
        );
        for (from, to) in [(0, 5), (3, 4), (9, 40_000), (40_001, bytes.len())] {
            assert_eq!(
                recording.read(from as u64, to as u64),
                data(&bytes[from..to]),
                "{from}..{to}"
            );
        }
        assert_eq!(recording.index.held_to(), bytes.len() as u64);
        assert_eq!(
            recording.read(0, bytes.len() as u64 + 1),
            None,
            "past what the file holds"
        );
    }

    #[test]
    fn a_gap_and_bytes_that_are_not_utf8_shift_no_offset_after_them() {
        let mut recording = Recording::default();
        recording.output(b"before ");
        recording.lose(100);
        recording.output(b"after ");
        recording.output(b"\xff\xfe bad ");
        recording.output(b"good");
        let after = 7 + 100;
        assert_eq!(
            recording.read(after, after + 6),
            data(b"after "),
            "the gap is counted"
        );
        let good = after + 6 + 7;
        assert_eq!(
            recording.read(good, good + 4),
            data(b"good"),
            "two replacement characters (6 bytes) stood for 2 bytes"
        );
        assert_eq!(recording.read(0, 7), data(b"before "));
        assert_eq!(
            recording.read(5, after + 2),
            Some(RecordedRange::Missing(100)),
            "the lost bytes are missing, the rest was found"
        );
    }

    #[test]
    fn a_thinned_index_keeps_what_resynchronises_and_still_reads_right() {
        let mut index = OutputIndex::default();
        let checkpoint = |n: u64| Checkpoint {
            offset: n * 100,
            position: n * 200,
            resync: n.is_multiple_of(10),
        };
        index.extend((0..MAX_CHECKPOINTS as u64 + 1).map(checkpoint), 1 << 40);
        assert!(index.checkpoints().len() <= MAX_CHECKPOINTS);
        assert!(
            index
                .checkpoints()
                .iter()
                .filter(|checkpoint| checkpoint.resync)
                .count()
                >= (MAX_CHECKPOINTS / 10)
        );
        assert_eq!(index.checkpoints()[0], checkpoint(0));

        // Every checkpoint a resync: the oldest go.
        let mut index = OutputIndex::default();
        let resync = |n: u64| Checkpoint {
            resync: true,
            ..checkpoint(n)
        };
        index.extend((0..MAX_CHECKPOINTS as u64 + 1).map(resync), 1 << 40);
        assert!(index.checkpoints().len() <= MAX_CHECKPOINTS);
        assert_eq!(
            index.for_range(0, 10),
            None,
            "the oldest output is not served"
        );
    }

    #[test]
    fn an_index_from_a_hand_off_must_be_in_order() {
        let at = |offset, position| Checkpoint {
            offset,
            position,
            resync: false,
        };
        assert!(OutputIndex::from_parts(vec![at(0, 10), at(5, 20)], 9).is_some());
        assert!(OutputIndex::from_parts(vec![at(5, 10), at(0, 20)], 9).is_none());
        assert!(OutputIndex::from_parts(vec![at(0, 10), at(5, 10)], 9).is_none());
        assert!(
            OutputIndex::from_parts(vec![at(10, 10)], 9).is_none(),
            "past its end"
        );
    }
}
