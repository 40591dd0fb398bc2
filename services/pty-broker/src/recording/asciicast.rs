//! The asciicast v2 encoder: a header line, then one JSON array per event (`o` output, `i`
//! input, `r` resize, `m` marker), times in seconds from the start.
//!
//! asciicast keeps terminal data as JSON strings, so bytes become text here. A UTF-8 sequence
//! that a read split in two is held back until its rest arrives, so split characters are never
//! lost; bytes that are not UTF-8 at all become U+FFFD, as `asciinema rec` does, one per invalid
//! sequence (`String::from_utf8_lossy`'s rule). Output that is valid UTF-8 (what terminals
//! speak) is therefore kept byte for byte.

use std::time::Duration;

use serde::Serialize;

use crate::domain::TerminalSize;

/// What the header says about a recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CastHeader {
    pub size: TerminalSize,
    /// Seconds since the Unix epoch when the recording started.
    pub timestamp: u64,
    /// The command line, its arguments joined by spaces; `None` for the target's default shell.
    pub command: Option<String>,
    pub title: Option<String>,
    /// `TERM` as the session's environment set it.
    pub term: Option<String>,
}

/// The kinds of asciicast v2 events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Output,
    Input,
    Resize,
    Marker,
}

impl EventKind {
    fn code(self) -> &'static str {
        match self {
            EventKind::Output => "o",
            EventKind::Input => "i",
            EventKind::Resize => "r",
            EventKind::Marker => "m",
        }
    }
}

#[derive(Serialize)]
struct HeaderLine<'a> {
    version: u8,
    width: u16,
    height: u16,
    timestamp: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    env: Option<HeaderEnv<'a>>,
}

#[derive(Serialize)]
struct HeaderEnv<'a> {
    #[serde(rename = "TERM")]
    term: &'a str,
}

/// What one output event holds of the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputEvent {
    /// How many bytes of output it holds (a character held back before it included, one held
    /// back after it not).
    pub bytes: usize,
    /// Whether its text is those bytes exactly: false when some were not UTF-8 and became
    /// U+FFFD.
    pub exact: bool,
}

/// Writes a recording's lines into a buffer the caller drains (to a file, in whole lines).
#[derive(Debug, Default)]
pub struct CastEncoder {
    /// Times never go backwards, whatever order the caller's clocks gave.
    last_time: Duration,
    output_carry: Utf8Carry,
    input_carry: Utf8Carry,
}

impl CastEncoder {
    /// The header line, with its newline.
    pub fn header(header: &CastHeader, out: &mut Vec<u8>) {
        let line = HeaderLine {
            version: 2,
            width: header.size.cols(),
            height: header.size.rows(),
            timestamp: header.timestamp,
            command: header.command.as_deref(),
            title: header.title.as_deref(),
            env: header.term.as_deref().map(|term| HeaderEnv { term }),
        };
        serde_json::to_writer(&mut *out, &line).expect("a header serialises");
        out.push(b'\n');
    }

    /// Output bytes at `at` (since the start). Returns what the event written holds, if one
    /// was (nothing is when all of `data` is held back as the start of a character).
    pub fn output(&mut self, at: Duration, data: &[u8], out: &mut Vec<u8>) -> Option<OutputEvent> {
        let held_before = self.output_carry.held.len();
        let text = self.output_carry.decode(data);
        if text.is_empty() {
            return None;
        }
        let at = self.advance(at);
        event_line(at, EventKind::Output, &text, out);
        let bytes = held_before + data.len() - self.output_carry.held.len();
        Some(OutputEvent {
            bytes,
            exact: text.len() == bytes,
        })
    }

    /// Input bytes at `at`.
    pub fn input(&mut self, at: Duration, data: &[u8], out: &mut Vec<u8>) {
        let text = self.input_carry.decode(data);
        if !text.is_empty() {
            let at = self.advance(at);
            event_line(at, EventKind::Input, &text, out);
        }
    }

    pub fn resize(&mut self, at: Duration, size: TerminalSize, out: &mut Vec<u8>) {
        let at = self.advance(at);
        let text = format!("{}x{}", size.cols(), size.rows());
        event_line(at, EventKind::Resize, &text, out);
    }

    pub fn marker(&mut self, at: Duration, label: &str, out: &mut Vec<u8>) {
        let at = self.advance(at);
        event_line(at, EventKind::Marker, label, out);
    }

    /// Writes what is still held back (a sequence that never completed, as U+FFFD).
    pub fn finish(&mut self, at: Duration, out: &mut Vec<u8>) {
        let output = self.output_carry.take_rest();
        if !output.is_empty() {
            let at = self.advance(at);
            event_line(at, EventKind::Output, &output, out);
        }
        let input = self.input_carry.take_rest();
        if !input.is_empty() {
            let at = self.advance(at);
            event_line(at, EventKind::Input, &input, out);
        }
    }

    /// Output bytes held back (the start of a UTF-8 sequence whose rest has not come yet):
    /// whoever goes on with the recording elsewhere feeds them again.
    pub fn held_output(&self) -> usize {
        self.output_carry.held.len()
    }

    /// The time of the last event and the input held back, for an encoder that goes on with
    /// this recording in another process ([`CastEncoder::resumed`]).
    pub fn resume_point(&self) -> (Duration, Vec<u8>) {
        (self.last_time, self.input_carry.held.clone())
    }

    /// An encoder that goes on with a recording another encoder wrote up to `last_time`, with
    /// `held_input` held back (its output carry is fed again by the caller).
    pub fn resumed(last_time: Duration, held_input: Vec<u8>) -> Self {
        Self {
            last_time,
            output_carry: Utf8Carry::default(),
            input_carry: Utf8Carry { held: held_input },
        }
    }

    fn advance(&mut self, at: Duration) -> Duration {
        self.last_time = self.last_time.max(at);
        self.last_time
    }
}

fn event_line(at: Duration, kind: EventKind, text: &str, out: &mut Vec<u8>) {
    // Microseconds, as asciinema writes them.
    let micros = at.as_micros();
    out.extend_from_slice(
        format!(
            "[{}.{:06}, \"{}\", ",
            micros / 1_000_000,
            micros % 1_000_000,
            kind.code()
        )
        .as_bytes(),
    );
    serde_json::to_writer(&mut *out, text).expect("a string serialises");
    out.extend_from_slice(b"]\n");
}

/// Holds back the start of a UTF-8 sequence that the end of a chunk cut.
#[derive(Debug, Default)]
struct Utf8Carry {
    held: Vec<u8>,
}

impl Utf8Carry {
    /// The text of `data` after what was held; an incomplete sequence at its end is held.
    fn decode(&mut self, data: &[u8]) -> String {
        let joined;
        let bytes: &[u8] = if self.held.is_empty() {
            data
        } else {
            self.held.extend_from_slice(data);
            joined = std::mem::take(&mut self.held);
            &joined
        };
        let keep = incomplete_tail(bytes);
        let (complete, tail) = bytes.split_at(bytes.len() - keep);
        self.held.extend_from_slice(tail);
        String::from_utf8_lossy(complete).into_owned()
    }

    fn take_rest(&mut self) -> String {
        let rest = std::mem::take(&mut self.held);
        String::from_utf8_lossy(&rest).into_owned()
    }
}

/// How many bytes at the end of `bytes` start a UTF-8 sequence that is not complete yet (0 to 3).
fn incomplete_tail(bytes: &[u8]) -> usize {
    // A sequence is at most 4 bytes: look at the last 3 for a lead byte whose sequence would
    // reach past the end.
    for back in 1..=bytes.len().min(3) {
        let byte = bytes[bytes.len() - back];
        if byte & 0b1100_0000 == 0b1000_0000 {
            continue; // a continuation byte: the lead is further back
        }
        let needed = match byte {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return 0,
        };
        let tail = &bytes[bytes.len() - back..];
        // Held only if what is there could still become valid.
        return if needed > back && std::str::from_utf8(tail).is_err_and(|e| e.error_len().is_none())
        {
            back
        } else {
            0
        };
    }
    0
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use ptyhub_test_support::asciicast::Cast;
    use ptyhub_test_support::fuzz;

    use super::*;

    fn lines(buffer: &[u8]) -> Vec<serde_json::Value> {
        std::str::from_utf8(buffer)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    #[test]
    fn a_character_split_across_reads_is_written_whole_in_the_later_event() {
        let mut encoder = CastEncoder::default();
        let mut out = Vec::new();
        let text = "a€b😀";
        let bytes = text.as_bytes();
        // Split inside the euro sign (3 bytes) and inside the emoji (4 bytes).
        encoder.output(Duration::from_millis(1), &bytes[..2], &mut out);
        encoder.output(Duration::from_millis(2), &bytes[2..6], &mut out);
        encoder.output(Duration::from_millis(3), &bytes[6..], &mut out);
        encoder.finish(Duration::from_millis(4), &mut out);
        let events = lines(&out);
        let joined: String = events
            .iter()
            .map(|event| event[2].as_str().unwrap())
            .collect();
        assert_eq!(joined, text);
        assert_eq!(events[0][2], "a");
    }

    #[test]
    fn a_resumed_encoder_goes_on_where_the_first_stopped_without_splitting_a_character() {
        let mut first = CastEncoder::default();
        let mut out = Vec::new();
        let output = "x€y".as_bytes();
        let input = "é".as_bytes();
        first.output(Duration::from_secs(2), &output[..2], &mut out);
        first.input(Duration::from_secs(3), &input[..1], &mut out);
        // The euro sign's first byte is held back: the next process feeds it again.
        assert_eq!(first.held_output(), 1);
        let (last_time, held_input) = first.resume_point();
        assert_eq!(last_time, Duration::from_secs(2));

        let mut next = CastEncoder::resumed(last_time, held_input);
        // The next process's clock says less: times still never go backwards.
        next.output(Duration::from_secs(1), &output[1..], &mut out);
        next.input(Duration::from_secs(4), &input[1..], &mut out);
        let events = lines(&out);
        assert_eq!(events[0][2], "x");
        assert_eq!(events[1][2], "€y");
        assert_eq!(events[1][0], 2.0);
        assert_eq!(events[2][1], "i");
        assert_eq!(events[2][2], "é");
    }

    #[test]
    fn bytes_that_are_not_utf8_become_replacement_characters() {
        let mut encoder = CastEncoder::default();
        let mut out = Vec::new();
        encoder.output(Duration::ZERO, b"ok\xff\xfe!", &mut out);
        // A lead byte with nothing after it at the end of the recording.
        encoder.output(Duration::ZERO, b"\xe2", &mut out);
        encoder.finish(Duration::ZERO, &mut out);
        let events = lines(&out);
        assert_eq!(events[0][2], "ok\u{fffd}\u{fffd}!");
        assert_eq!(events[1][2], "\u{fffd}");
    }

    #[test]
    fn times_never_go_backwards_and_are_written_in_microseconds() {
        let mut encoder = CastEncoder::default();
        let mut out = Vec::new();
        encoder.input(Duration::from_micros(2_500_001), b"x", &mut out);
        encoder.output(Duration::from_micros(2_400_000), b"x", &mut out);
        encoder.resize(
            Duration::from_secs(3),
            TerminalSize::new(100, 30).unwrap(),
            &mut out,
        );
        encoder.marker(Duration::from_secs(3), "reset", &mut out);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "[2.500001, \"i\", \"x\"]\n[2.500001, \"o\", \"x\"]\n[3.000000, \"r\", \"100x30\"]\n[3.000000, \"m\", \"reset\"]\n"
        );
    }

    #[test]
    fn the_header_names_size_command_title_and_term() {
        let mut out = Vec::new();
        CastEncoder::header(
            &CastHeader {
                size: TerminalSize::new(80, 24).unwrap(),
                timestamp: 1_700_000_000,
                command: Some("bash -l".to_owned()),
                title: Some("web / Session 1".to_owned()),
                term: Some("xterm-256color".to_owned()),
            },
            &mut out,
        );
        let header = &lines(&out)[0];
        assert_eq!(header["version"], 2);
        assert_eq!(header["width"], 80);
        assert_eq!(header["height"], 24);
        assert_eq!(header["timestamp"], 1_700_000_000);
        assert_eq!(header["command"], "bash -l");
        assert_eq!(header["title"], "web / Session 1");
        assert_eq!(header["env"]["TERM"], "xterm-256color");
    }

    /// What a recorder is given: output or input bytes, each at a time in microseconds from
    /// the start (in any order: clocks of two processes), or a resize.
    #[derive(Debug, Clone)]
    enum Fed {
        Output(u64, Vec<u8>),
        Input(u64, Vec<u8>),
        Resize(u64, u32, u32),
    }

    /// Bytes as terminals send them: mostly UTF-8 text (with multi-byte characters to split),
    /// escapes and controls, and now and then bytes that are not UTF-8 at all.
    fn terminal_bytes() -> impl Strategy<Value = Vec<u8>> {
        let text = "[a-z \\\\\"\\x00-\\x1f\\x7fé€😀日\u{202e}\u{fffd}]{0,24}";
        // Leads and continuations of the sequences above, and a byte that is never UTF-8.
        let pieces = prop::sample::select(vec![0xe2u8, 0x82, 0xac, 0xf0, 0x9f, 0xc3, 0xff]);
        prop_oneof![
            4 => text.prop_map(String::into_bytes),
            1 => prop::collection::vec(any::<u8>(), 0..24),
            1 => prop::collection::vec(pieces, 0..8),
        ]
    }

    fn fed() -> impl Strategy<Value = Fed> {
        let at = 0..10_000_000_000u64;
        prop_oneof![
            4 => (at.clone(), terminal_bytes()).prop_map(|(at, bytes)| Fed::Output(at, bytes)),
            1 => (at.clone(), terminal_bytes()).prop_map(|(at, bytes)| Fed::Input(at, bytes)),
            1 => (at, 1..=1000u32, 1..=500u32)
                .prop_map(|(at, cols, rows)| Fed::Resize(at, cols, rows)),
        ]
    }

    /// Feeds `fed` to `encoder`; returns the output and the input bytes fed.
    fn feed(encoder: &mut CastEncoder, fed: &[Fed], out: &mut Vec<u8>) -> (Vec<u8>, Vec<u8>) {
        let (mut output, mut input) = (Vec::new(), Vec::new());
        for item in fed {
            match item {
                Fed::Output(at, bytes) => {
                    encoder.output(Duration::from_micros(*at), bytes, out);
                    output.extend_from_slice(bytes);
                }
                Fed::Input(at, bytes) => {
                    encoder.input(Duration::from_micros(*at), bytes, out);
                    input.extend_from_slice(bytes);
                }
                Fed::Resize(at, cols, rows) => {
                    let size = TerminalSize::new(*cols, *rows).unwrap();
                    encoder.resize(Duration::from_micros(*at), size, out);
                }
            }
        }
        (output, input)
    }

    fn header(out: &mut Vec<u8>) {
        CastEncoder::header(
            &CastHeader {
                size: TerminalSize::new(80, 24).unwrap(),
                timestamp: 1_700_000_000,
                command: None,
                title: Some("fuzzed \"title\"\n".to_owned()),
                term: Some("xterm-256color".to_owned()),
            },
            out,
        );
    }

    /// Checks a recording with the strict reader and that its events say what was fed: the
    /// output and input as `from_utf8_lossy` reads all the bytes at once (so valid UTF-8 byte
    /// for byte, however the reads cut its characters), the resizes in order, and each time the
    /// latest one fed so far, in microseconds.
    fn check_recording(
        recording: &[u8],
        fed: &[Fed],
        output: &[u8],
        input: &[u8],
    ) -> Result<(), TestCaseError> {
        let cast =
            Cast::parse(recording).map_err(|error| TestCaseError::fail(format!("{error:#}")))?;
        prop_assert_eq!(
            cast.output(),
            String::from_utf8_lossy(output).into_owned().into_bytes()
        );
        prop_assert_eq!(cast.input(), String::from_utf8_lossy(input));
        let resizes: Vec<String> = fed
            .iter()
            .filter_map(|item| match item {
                Fed::Resize(_, cols, rows) => Some(format!("{cols}x{rows}")),
                _ => None,
            })
            .collect();
        let recorded: Vec<&str> = cast
            .events
            .iter()
            .filter(|event| event.code == "r")
            .map(|event| event.data.as_str())
            .collect();
        prop_assert_eq!(recorded, resizes);
        let latest = fed
            .iter()
            .map(|item| match item {
                Fed::Output(at, _) | Fed::Input(at, _) | Fed::Resize(at, ..) => *at,
            })
            .max()
            .unwrap_or(0);
        for event in &cast.events {
            prop_assert!(
                event.time <= latest as f64 / 1e6 + 1e-6,
                "{event:?} after {latest} µs"
            );
        }
        for line in std::str::from_utf8(recording).unwrap().lines().skip(1) {
            // `[S.UUUUUU, `: whole seconds and six digits of microseconds.
            let time = line.trim_start_matches('[').split(',').next().unwrap();
            let (seconds, micros) = time.split_once('.').unwrap();
            prop_assert!(seconds.bytes().all(|b| b.is_ascii_digit()), "{line}");
            prop_assert!(
                micros.len() == 6 && micros.bytes().all(|b| b.is_ascii_digit()),
                "{line}"
            );
        }
        Ok(())
    }

    /// Whatever a session prints and is typed, at whatever times and cut into whatever reads,
    /// the recording is asciicast v2 a strict reader takes, and its events decode back to the
    /// bytes fed.
    #[test]
    fn fuzz_any_output_and_times_make_a_recording_that_decodes_to_the_bytes() {
        fuzz::check(256, prop::collection::vec(fed(), 0..24), |fed| {
            let mut out = Vec::new();
            header(&mut out);
            let mut encoder = CastEncoder::default();
            let (output, input) = feed(&mut encoder, &fed, &mut out);
            encoder.finish(Duration::ZERO, &mut out);
            check_recording(&out, &fed, &output, &input)
        });
    }

    /// A recording handed to another process at any point (the output the first held back fed
    /// again, its input carry and last time passed on) reads as if one encoder wrote it all.
    #[test]
    fn fuzz_a_recording_handed_over_anywhere_decodes_to_the_bytes() {
        let strategy = prop::collection::vec(fed(), 0..24).prop_flat_map(|fed| {
            let length = fed.len();
            (Just(fed), 0..=length)
        });
        fuzz::check(256, strategy, |(fed, handed_over_at)| {
            let mut out = Vec::new();
            header(&mut out);
            let mut first = CastEncoder::default();
            let (mut output, mut input) = feed(&mut first, &fed[..handed_over_at], &mut out);
            let held = first.held_output();
            let (last_time, held_input) = first.resume_point();
            let mut next = CastEncoder::resumed(last_time, held_input);
            // The new process feeds the output the first held back again, from the ring.
            let again = output[output.len() - held..].to_vec();
            next.output(last_time, &again, &mut out);
            let (more_output, more_input) = feed(&mut next, &fed[handed_over_at..], &mut out);
            next.finish(Duration::ZERO, &mut out);
            output.extend(more_output);
            input.extend(more_input);
            check_recording(&out, &fed, &output, &input)
        });
    }
}
