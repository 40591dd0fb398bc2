//! The output ring: the last `capacity` bytes a session's PTY produced, addressed by absolute
//! offsets that count from 0 at spawn and never restart.
//!
//! The ring holds the chunks exactly as they were read (`Bytes`, shared with every client that
//! sends them), so keeping and replaying output copies nothing. It grows as output arrives and
//! never allocates its capacity up front: an idle session costs a few dozen bytes.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

/// Chunks shorter than this are gathered by [`OutputRing::read_gathered`]; longer ones are sent
/// as they are, without a copy.
const GATHER_BELOW: usize = 16 * 1024;

/// The last `capacity` bytes of a session's output.
#[derive(Debug)]
pub struct OutputRing {
    capacity: usize,
    /// Chunks in offset order, contiguous; `chunks[0]` starts at `start`.
    chunks: VecDeque<Chunk>,
    /// Offset of the oldest byte held.
    start: u64,
    /// Offset of the next byte the PTY will produce.
    end: u64,
}

/// One read of the PTY, with the offset of its first byte: a reader anywhere in the ring is
/// found by binary search, however many chunks it holds (an echoing shell's are single bytes).
#[derive(Debug)]
struct Chunk {
    start: u64,
    bytes: Bytes,
}

impl Chunk {
    fn end(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }
}

/// Where a reader at some offset goes next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingRead {
    /// Output that starts exactly at the requested offset.
    Data(Bytes),
    /// The ring no longer holds the requested offset: `lost` bytes are gone and the reader goes on
    /// at `resume_at` (the oldest byte held).
    Gap { lost: u64, resume_at: u64 },
    /// Nothing new yet: the requested offset is the end.
    UpToDate,
}

impl OutputRing {
    /// An empty ring that will hold at most `capacity` bytes (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            chunks: VecDeque::new(),
            start: 0,
            end: 0,
        }
    }

    /// A ring that goes on from `chunks`, the output a previous broker process held from
    /// offset `start` on (a hand-off): offsets continue where they were.
    pub fn resume(capacity: usize, start: u64, chunks: impl IntoIterator<Item = Bytes>) -> Self {
        let mut ring = Self {
            capacity: capacity.max(1),
            chunks: VecDeque::new(),
            start,
            end: start,
        };
        for chunk in chunks {
            ring.push(chunk);
        }
        ring
    }

    /// The chunks held, oldest first (from [`OutputRing::start`] on), as shared handles.
    pub fn chunks(&self) -> impl Iterator<Item = &Bytes> {
        self.chunks.iter().map(|chunk| &chunk.bytes)
    }

    /// The output from `offset` to the end as the chunks hold it, the first cut to start at
    /// `offset`; nothing when the ring does not hold `offset` (see [`OutputRing::read_at`]).
    pub fn pieces_from(&self, offset: u64) -> impl Iterator<Item = Bytes> + '_ {
        let held = offset >= self.start && offset < self.end;
        let first = if held {
            self.locate(offset)
        } else {
            self.chunks.len()
        };
        self.chunks.range(first..).map(move |chunk| {
            let skip = offset.saturating_sub(chunk.start) as usize;
            chunk.bytes.slice(skip..)
        })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Offset of the oldest byte still held.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Offset of the next byte the PTY will produce.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Bytes currently held.
    pub fn len(&self) -> usize {
        // Never more than `capacity`, which is a usize.
        (self.end - self.start) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Appends a chunk of output and returns the offset of its first byte. The oldest bytes are
    /// dropped so that at most `capacity` bytes stay.
    pub fn push(&mut self, chunk: Bytes) -> u64 {
        let offset = self.end;
        if chunk.is_empty() {
            return offset;
        }
        self.end += chunk.len() as u64;
        self.chunks.push_back(Chunk {
            start: offset,
            bytes: chunk,
        });
        self.evict_beyond_capacity();
        offset
    }

    /// Drops every byte held; offsets go on from the same end.
    pub fn clear(&mut self) {
        self.chunks = VecDeque::new();
        self.start = self.end;
    }

    fn evict_beyond_capacity(&mut self) {
        while self.len() > self.capacity {
            let excess = self.len() - self.capacity;
            let Some(front) = self.chunks.front_mut() else {
                break;
            };
            if front.bytes.len() <= excess {
                self.start += front.bytes.len() as u64;
                self.chunks.pop_front();
            } else {
                // Keep the tail of the oldest chunk: the ring holds exactly `capacity` bytes, so a
                // controller allowed to lag by `capacity` never loses a byte.
                let _ = front.bytes.split_to(excess);
                front.start += excess as u64;
                self.start += excess as u64;
            }
        }
    }

    /// The output at `offset`, at most `max_len` bytes of it, or how far the reader must skip.
    /// An `offset` beyond the end is treated as the end.
    pub fn read_at(&self, offset: u64, max_len: usize) -> RingRead {
        if offset < self.start {
            return RingRead::Gap {
                lost: self.start - offset,
                resume_at: self.start,
            };
        }
        if offset >= self.end {
            return RingRead::UpToDate;
        }
        let chunk = &self.chunks[self.locate(offset)];
        let skip = (offset - chunk.start) as usize;
        let len = (chunk.bytes.len() - skip).min(max_len.max(1));
        RingRead::Data(chunk.bytes.slice(skip..skip + len))
    }

    /// As [`OutputRing::read_at`], but when the chunk at `offset` is small and small chunks
    /// follow it, their bytes are gathered into one piece (a copy) of at most `max_len`, up to the
    /// first large chunk. What a client is sent then follows how far behind it is, not how the
    /// PTY was read: a process that writes a little at a time (a container's output arrives
    /// through the engine 64-256 bytes a read) reaches a client that lags by a few reads in one
    /// frame instead of one frame per read. A client that keeps up is sent each read as it
    /// comes, without waiting for more.
    pub fn read_gathered(&self, offset: u64, max_len: usize) -> RingRead {
        let first = match self.read_at(offset, max_len) {
            RingRead::Data(first) => first,
            other => return other,
        };
        let max_len = max_len.max(1);
        let next = offset + first.len() as u64;
        if first.len() >= GATHER_BELOW || first.len() >= max_len || next >= self.end {
            return RingRead::Data(first);
        }
        let small_after = || {
            self.chunks
                .range(self.locate(next)..)
                .map(|chunk| &chunk.bytes)
                .take_while(|bytes| bytes.len() < GATHER_BELOW)
        };
        let after: usize = small_after().map(|bytes| bytes.len()).sum();
        if after == 0 {
            return RingRead::Data(first);
        }
        // Two passes over the chunks rather than a list of them: no allocation but the frame's.
        let mut gathered = BytesMut::with_capacity((first.len() + after).min(max_len));
        gathered.extend_from_slice(&first);
        for bytes in small_after() {
            let room = max_len - gathered.len();
            if room == 0 {
                break;
            }
            gathered.extend_from_slice(&bytes[..bytes.len().min(room)]);
        }
        RingRead::Data(gathered.freeze())
    }

    /// The index of the chunk holding `offset`, which must be in `start..end`. A reader that
    /// keeps up reads the newest chunk, so that one is looked at before the search.
    fn locate(&self, offset: u64) -> usize {
        let newest = self.chunks.len().saturating_sub(1);
        let index = match self.chunks.back() {
            Some(chunk) if chunk.start <= offset => newest,
            _ => self.chunks.partition_point(|chunk| chunk.end() <= offset),
        };
        debug_assert!(
            self.chunks
                .get(index)
                .is_some_and(|chunk| chunk.start <= offset && offset < chunk.end()),
            "offset {offset} is inside the ring but in no chunk"
        );
        index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(ring: &OutputRing, mut offset: u64) -> Vec<u8> {
        let mut out = Vec::new();
        while let RingRead::Data(data) = ring.read_at(offset, usize::MAX) {
            offset += data.len() as u64;
            out.extend_from_slice(&data);
        }
        out
    }

    #[test]
    fn offsets_count_every_byte_from_zero() {
        let mut ring = OutputRing::new(100);
        assert_eq!(ring.push(Bytes::from_static(b"hello")), 0);
        assert_eq!(ring.push(Bytes::from_static(b"")), 5);
        assert_eq!(ring.push(Bytes::from_static(b" world")), 5);
        assert_eq!((ring.start(), ring.end()), (0, 11));
        assert_eq!(collect(&ring, 0), b"hello world");
        assert_eq!(collect(&ring, 3), b"lo world");
        assert_eq!(collect(&ring, 5), b" world");
        assert_eq!(ring.read_at(11, 10), RingRead::UpToDate);
        assert_eq!(ring.read_at(500, 10), RingRead::UpToDate);
    }

    #[test]
    fn wrap_around_keeps_exactly_the_last_capacity_bytes() {
        let mut ring = OutputRing::new(10);
        ring.push(Bytes::from_static(b"0123456"));
        ring.push(Bytes::from_static(b"789abc"));
        assert_eq!((ring.start(), ring.end(), ring.len()), (3, 13, 10));
        assert_eq!(collect(&ring, 3), b"3456789abc");
        // A chunk larger than the ring keeps only its tail.
        ring.push(Bytes::from(vec![b'x'; 25]));
        assert_eq!((ring.start(), ring.end(), ring.len()), (28, 38, 10));
        assert_eq!(collect(&ring, 28), vec![b'x'; 10]);
    }

    #[test]
    fn gap_says_how_many_bytes_were_lost_and_where_to_resume() {
        let mut ring = OutputRing::new(4);
        ring.push(Bytes::from_static(b"abcdefgh"));
        assert_eq!(
            ring.read_at(1, 10),
            RingRead::Gap {
                lost: 3,
                resume_at: 4
            }
        );
        assert_eq!(
            ring.read_at(4, 10),
            RingRead::Data(Bytes::from_static(b"efgh"))
        );
        assert_eq!(ring.read_at(6, 1), RingRead::Data(Bytes::from_static(b"g")));
    }

    #[test]
    fn reads_are_bounded_and_continue_across_chunks() {
        let mut ring = OutputRing::new(1 << 20);
        for index in 0..100u8 {
            ring.push(Bytes::from(vec![index; 3]));
        }
        let expected: Vec<u8> = (0..100u8).flat_map(|index| [index; 3]).collect();
        assert_eq!(collect(&ring, 0), expected);
        // A reader in the middle of an old chunk.
        assert_eq!(
            ring.read_at(4, 10),
            RingRead::Data(Bytes::from(vec![1u8; 2]))
        );
        assert_eq!(
            ring.read_at(4, 1),
            RingRead::Data(Bytes::from(vec![1u8; 1]))
        );
        assert_eq!(collect(&ring, 298), vec![99u8; 2]);
    }

    #[test]
    fn pieces_from_an_offset_are_the_rest_of_the_output() {
        let mut ring = OutputRing::new(10);
        for piece in [&b"abc"[..], b"de", b"fghij", b"kl"] {
            ring.push(Bytes::copy_from_slice(piece));
        }
        // Held: c..l (the oldest two bytes were dropped).
        let pieces = |offset| ring.pieces_from(offset).collect::<Vec<_>>();
        assert_eq!(pieces(2), [&b"c"[..], b"de", b"fghij", b"kl"]);
        assert_eq!(pieces(6), [&b"ghij"[..], b"kl"]);
        assert_eq!(pieces(10), [&b"kl"[..]]);
        assert!(pieces(1).is_empty(), "dropped");
        assert!(pieces(12).is_empty(), "the end");
        assert!(pieces(40).is_empty(), "beyond the end");
    }

    #[test]
    fn a_ring_of_single_bytes_is_read_anywhere_in_order() {
        let mut ring = OutputRing::new(5000);
        for index in 0..6000u32 {
            ring.push(Bytes::from(vec![(index % 251) as u8]));
        }
        assert_eq!((ring.start(), ring.end()), (1000, 6000));
        for offset in [1000u64, 1001, 2500, 5990, 5999] {
            assert_eq!(
                ring.read_at(offset, 10),
                RingRead::Data(Bytes::from(vec![(offset % 251) as u8]))
            );
            let rest: Vec<u8> = ring.pieces_from(offset).flatten().collect();
            let expected: Vec<u8> = (offset..6000).map(|at| (at % 251) as u8).collect();
            assert_eq!(rest, expected);
        }
    }

    #[test]
    fn clear_drops_the_bytes_and_keeps_the_offsets() {
        let mut ring = OutputRing::new(100);
        ring.push(Bytes::from_static(b"hello"));
        ring.clear();
        assert_eq!((ring.start(), ring.end(), ring.len()), (5, 5, 0));
        assert_eq!(
            ring.read_at(2, 10),
            RingRead::Gap {
                lost: 3,
                resume_at: 5
            }
        );
        assert_eq!(ring.push(Bytes::from_static(b"!")), 5);
        assert_eq!(collect(&ring, 5), b"!");
    }

    #[test]
    fn offsets_never_restart_after_many_wraps() {
        let mut ring = OutputRing::new(7);
        let mut expected_end = 0u64;
        for round in 0..1000u64 {
            let chunk = Bytes::from(vec![(round % 251) as u8; (round % 13) as usize]);
            assert_eq!(ring.push(chunk.clone()), expected_end);
            expected_end += chunk.len() as u64;
            assert_eq!(ring.end(), expected_end);
            assert!(ring.len() <= 7);
            assert_eq!(ring.start(), expected_end.saturating_sub(7));
        }
    }

    #[test]
    fn a_gathered_read_joins_the_small_chunks_that_piled_up() {
        let mut ring = OutputRing::new(1 << 20);
        for line in [&b"abc"[..], b"def", b"gh", b"ij"] {
            ring.push(Bytes::copy_from_slice(line));
        }
        assert_eq!(
            ring.read_gathered(0, 100),
            RingRead::Data(Bytes::from_static(b"abcdefghij"))
        );
        // From inside a chunk, and cut at `max_len` inside a later one.
        assert_eq!(
            ring.read_gathered(1, 6),
            RingRead::Data(Bytes::from_static(b"bcdefg"))
        );
        // The last chunk alone is sent as it is.
        assert_eq!(
            ring.read_gathered(8, 100),
            RingRead::Data(Bytes::from_static(b"ij"))
        );
        assert_eq!(ring.read_gathered(10, 100), RingRead::UpToDate);
    }

    #[test]
    fn a_large_chunk_is_never_copied_and_ends_a_gathering() {
        let mut ring = OutputRing::new(1 << 20);
        let large = Bytes::from(vec![b'x'; GATHER_BELOW]);
        ring.push(Bytes::from_static(b"ab"));
        ring.push(Bytes::from_static(b"cd"));
        ring.push(large.clone());
        ring.push(Bytes::from_static(b"ef"));
        assert_eq!(
            ring.read_gathered(0, 1 << 20),
            RingRead::Data(Bytes::from_static(b"abcd"))
        );
        let RingRead::Data(sent) = ring.read_gathered(4, 1 << 20) else {
            panic!("the large chunk is there");
        };
        // The same bytes in memory: a slice of the chunk, not a copy.
        assert_eq!(sent.as_ptr(), large.as_ptr());
        assert_eq!(sent.len(), GATHER_BELOW);
    }

    #[test]
    fn a_gathered_read_reports_gaps_as_a_plain_read_does() {
        let mut ring = OutputRing::new(4);
        for chunk in [&b"ab"[..], b"cd", b"ef"] {
            ring.push(Bytes::copy_from_slice(chunk));
        }
        assert_eq!(
            ring.read_gathered(0, 10),
            RingRead::Gap {
                lost: 2,
                resume_at: 2
            }
        );
        assert_eq!(
            ring.read_gathered(2, 10),
            RingRead::Data(Bytes::from_static(b"cdef"))
        );
    }

    proptest::proptest! {
        /// Whatever the chunks, the offset and the bound, gathered reads return the same bytes
        /// as plain reads, each within its bound, and never less than the chunk at the offset.
        #[test]
        fn gathered_reads_carry_the_same_bytes_as_plain_reads(
            chunks in proptest::collection::vec(
                proptest::collection::vec(proptest::num::u8::ANY, 0..40),
                0..30,
            ),
            start in 0u64..400,
            max_len in 1usize..64,
        ) {
            let mut ring = OutputRing::new(300);
            for chunk in chunks {
                ring.push(Bytes::from(chunk));
            }
            let mut offset = start.min(ring.end());
            if offset < ring.start() {
                offset = ring.start();
            }
            let mut gathered = Vec::new();
            let mut at = offset;
            while let RingRead::Data(data) = ring.read_gathered(at, max_len) {
                proptest::prop_assert!(!data.is_empty() && data.len() <= max_len);
                if let RingRead::Data(plain) = ring.read_at(at, max_len) {
                    proptest::prop_assert!(data.len() >= plain.len());
                }
                at += data.len() as u64;
                gathered.extend_from_slice(&data);
            }
            proptest::prop_assert_eq!(at, ring.end());
            proptest::prop_assert_eq!(gathered, collect(&ring, offset));
        }
    }
}
