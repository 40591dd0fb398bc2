//! `ControlMode`: who may type into a session, spelt as the contract spells it (`exclusive`,
//! `shared`) on every surface: REST, gRPC, MCP, the CLI and the database.

use std::fmt;
use std::str::FromStr;

/// Who may type into a session (docs/CONTRACT.md, "Control modes").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ControlMode {
    /// One controller at a time, holding the lease; control moves by takeover or by request
    /// and grant.
    #[default]
    Exclusive,
    /// Every attached stream whose credential may control is a controller; each input is
    /// attributed to its principal.
    Shared,
}

impl ControlMode {
    pub const ALL: [ControlMode; 2] = [ControlMode::Exclusive, ControlMode::Shared];

    /// The contract's spelling, also the stored one.
    pub fn as_str(self) -> &'static str {
        match self {
            ControlMode::Exclusive => "exclusive",
            ControlMode::Shared => "shared",
        }
    }
}

impl fmt::Display for ControlMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A control mode that is not one of the contract's two.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("control mode {0:?} is not one of exclusive, shared")]
pub struct InvalidControlMode(pub String);

impl FromStr for ControlMode {
    type Err = InvalidControlMode;

    fn from_str(text: &str) -> Result<Self, InvalidControlMode> {
        Self::ALL
            .into_iter()
            .find(|mode| mode.as_str() == text)
            .ok_or_else(|| InvalidControlMode(text.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_reads_back_from_its_spelling() {
        for mode in ControlMode::ALL {
            assert_eq!(mode.as_str().parse::<ControlMode>(), Ok(mode));
            assert_eq!(mode.to_string(), mode.as_str());
        }
        assert_eq!(ControlMode::default(), ControlMode::Exclusive);
    }

    #[test]
    fn other_spellings_are_refused_with_the_two_named() {
        for text in ["", "Shared", "both", "exclusive ", "viewer"] {
            let error = text.parse::<ControlMode>().expect_err(text);
            assert!(error.to_string().contains("exclusive, shared"), "{error}");
        }
    }
}
