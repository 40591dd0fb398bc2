//! A strict asciicast v2 reader for tests: the header's fields and types, every event a
//! three-element array of a non-negative finite time, a known code and a string, times that
//! never go backwards, resize data as `COLSxROWS`, and nothing but JSON lines (a trailing line
//! cut in half is an error, as it is for the asciinema player).
//!
//! asciicast keeps terminal data as JSON strings: ptyhub writes a UTF-8 sequence split across
//! reads whole in the later event, and bytes that are not UTF-8 as U+FFFD. So for output that is
//! valid UTF-8, the concatenated `o` events are the output byte for byte.

use anyhow::{Context as _, bail, ensure};
use serde_json::Value;

/// A parsed recording.
#[derive(Debug, Clone, PartialEq)]
pub struct Cast {
    pub width: u64,
    pub height: u64,
    pub timestamp: Option<u64>,
    pub command: Option<String>,
    pub title: Option<String>,
    pub events: Vec<CastEvent>,
}

/// One event line.
#[derive(Debug, Clone, PartialEq)]
pub struct CastEvent {
    pub time: f64,
    /// `o`, `i`, `r` or `m`.
    pub code: String,
    pub data: String,
}

impl Cast {
    /// Parses `bytes` as asciicast v2, strictly.
    pub fn parse(bytes: &[u8]) -> anyhow::Result<Self> {
        let text = std::str::from_utf8(bytes).context("a recording is UTF-8")?;
        ensure!(
            text.ends_with('\n'),
            "the recording does not end with a newline"
        );
        let mut lines = text.lines();
        let header: Value =
            serde_json::from_str(lines.next().context("no header line")?).context("header")?;
        let header = header.as_object().context("the header is an object")?;
        ensure!(
            header.get("version") == Some(&Value::from(2)),
            "version is not 2"
        );
        let dimension = |name: &str| {
            header
                .get(name)
                .and_then(Value::as_u64)
                .filter(|value| (1..=10_000).contains(value))
                .with_context(|| format!("header {name} is not a positive integer"))
        };
        let optional_string = |name: &str| -> anyhow::Result<Option<String>> {
            match header.get(name) {
                None => Ok(None),
                Some(Value::String(text)) => Ok(Some(text.clone())),
                Some(other) => bail!("header {name} is not a string: {other}"),
            }
        };
        let timestamp = match header.get("timestamp") {
            None => None,
            Some(value) => Some(
                value
                    .as_u64()
                    .context("header timestamp is not an integer")?,
            ),
        };
        if let Some(env) = header.get("env") {
            let env = env.as_object().context("header env is not an object")?;
            ensure!(
                env.values().all(Value::is_string),
                "header env values are strings"
            );
        }
        let mut cast = Cast {
            width: dimension("width")?,
            height: dimension("height")?,
            timestamp,
            command: optional_string("command")?,
            title: optional_string("title")?,
            events: Vec::new(),
        };
        let mut last_time = 0.0;
        for (number, line) in lines.enumerate() {
            let context = || format!("event line {}: {line}", number + 2);
            let event: Value = serde_json::from_str(line).with_context(context)?;
            let event = event.as_array().with_context(context)?;
            ensure!(event.len() == 3, "{}: not three elements", context());
            let time = event[0].as_f64().with_context(context)?;
            ensure!(time.is_finite() && time >= 0.0, "{}: bad time", context());
            ensure!(time >= last_time, "{}: time goes backwards", context());
            last_time = time;
            let code = event[1].as_str().with_context(context)?.to_owned();
            let data = event[2].as_str().with_context(context)?.to_owned();
            match code.as_str() {
                "o" | "i" | "m" => {}
                "r" => {
                    let (cols, rows) = data.split_once('x').with_context(context)?;
                    cols.parse::<u16>().with_context(context)?;
                    rows.parse::<u16>().with_context(context)?;
                }
                other => bail!("{}: unknown event code {other:?}", context()),
            }
            cast.events.push(CastEvent { time, code, data });
        }
        Ok(cast)
    }

    /// The output events joined, as bytes.
    pub fn output(&self) -> Vec<u8> {
        self.joined("o").into_bytes()
    }

    /// The input events joined.
    pub fn input(&self) -> String {
        self.joined("i")
    }

    /// The events with `code`, in order.
    pub fn events_of<'a>(&'a self, code: &'a str) -> impl Iterator<Item = &'a CastEvent> + 'a {
        self.events.iter().filter(move |event| event.code == code)
    }

    fn joined(&self, code: &str) -> String {
        self.events_of(code)
            .map(|event| event.data.as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_well_formed_recording_parses() {
        let cast = Cast::parse(
            b"{\"version\": 2, \"width\": 80, \"height\": 24, \"timestamp\": 1}\n\
              [0.5, \"o\", \"a\"]\n[0.5, \"r\", \"100x30\"]\n[1.0, \"o\", \"b\"]\n",
        )
        .unwrap();
        assert_eq!(cast.output(), b"ab");
        assert_eq!((cast.width, cast.height), (80, 24));
    }

    #[test]
    fn what_the_player_would_refuse_is_an_error() {
        let header = "{\"version\": 2, \"width\": 80, \"height\": 24}\n";
        for bad in [
            "{\"version\": 1, \"width\": 80, \"height\": 24}\n".to_owned(),
            "{\"version\": 2, \"width\": 0, \"height\": 24}\n".to_owned(),
            format!("{header}[1.0, \"o\", \"a\"]\n[0.5, \"o\", \"b\"]\n"),
            format!("{header}[1.0, \"x\", \"a\"]\n"),
            format!("{header}[1.0, \"o\"]\n"),
            format!("{header}[1.0, \"r\", \"wide\"]\n"),
            format!("{header}[1.0, \"o\", \"a\"]\n[1.1, \"o\", \"b"),
        ] {
            assert!(Cast::parse(bad.as_bytes()).is_err(), "accepted {bad:?}");
        }
    }
}
