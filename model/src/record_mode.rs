//! `RecordMode`: what a session's recording keeps, spelt as the contract spells it (`off`,
//! `output`, `output+input`) on every surface: REST, gRPC and the services' flags.

use std::fmt;
use std::str::FromStr;

/// What a session's recording keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum RecordMode {
    /// Nothing is recorded.
    #[default]
    Off,
    /// Output, resizes and resets.
    Output,
    /// Output, resizes, resets and the input written to the process.
    OutputAndInput,
}

impl RecordMode {
    /// The contract's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordMode::Off => "off",
            RecordMode::Output => "output",
            RecordMode::OutputAndInput => "output+input",
        }
    }

    pub fn records_input(self) -> bool {
        self == RecordMode::OutputAndInput
    }
}

impl fmt::Display for RecordMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A record mode that is not one of the contract's three.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("record mode {0:?} is not one of off, output, output+input")]
pub struct InvalidRecordMode(pub String);

impl FromStr for RecordMode {
    type Err = InvalidRecordMode;

    fn from_str(text: &str) -> Result<Self, InvalidRecordMode> {
        match text {
            "off" => Ok(RecordMode::Off),
            "output" => Ok(RecordMode::Output),
            "output+input" => Ok(RecordMode::OutputAndInput),
            other => Err(InvalidRecordMode(other.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_reads_back_from_its_spelling() {
        for mode in [
            RecordMode::Off,
            RecordMode::Output,
            RecordMode::OutputAndInput,
        ] {
            assert_eq!(mode.as_str().parse::<RecordMode>(), Ok(mode));
            assert_eq!(mode.to_string(), mode.as_str());
        }
    }

    #[test]
    fn other_spellings_are_refused_with_the_three_named() {
        for text in ["", "on", "Output", "output+Input", "input", " off"] {
            let error = text.parse::<RecordMode>().expect_err(text);
            assert!(error.to_string().contains("off, output, output+input"));
        }
    }
}
