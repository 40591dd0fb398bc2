//! Session recordings: what a session records (`RecordMode`), the asciicast v2 encoding
//! (`asciicast.rs`), where each stretch of output is in a recording being written (`index.rs`),
//! and the broker's side of the recordings store (`store.rs`: the local spool
//! a recorder writes, publishing a finished recording to the object store, recovering what a
//! killed broker left in the spool, and retention by age and total size).
//!
//! The recorder of one session is a task beside its screen feeder
//! (`session/recording.rs`): it reads the ring at its own offset, off the output path, and
//! never holds the PTY back; when it falls behind the ring it writes a marker saying how many
//! bytes it lost.

mod asciicast;
mod index;
mod store;

pub use asciicast::{CastEncoder, CastHeader, OutputEvent};
pub use index::{
    Checkpoint, IndexSlice, IndexWriter, MAX_COMMAND_OUTPUT, OutputIndex, RecordedRange,
    read_recorded_range,
};
pub use ptyhub_model::RecordMode;
#[cfg(test)]
pub(crate) use store::SpoolDisk;
pub(crate) use store::SpoolFile;
pub use store::{Recordings, RecordingsConfig, RetentionReport};

/// What to record of one session, as its Spawn call asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordingRequest {
    pub mode: RecordMode,
    /// The recording's title, for its header.
    pub title: Option<String>,
}
