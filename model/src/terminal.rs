//! The terminal vocabulary every surface shares: a size within the contract's bounds and the
//! role of an attached client.

use std::fmt;
use std::str::FromStr;

use ptyhub_wire::limits::{DEFAULT_COLS, DEFAULT_ROWS, MAX_COLS, MAX_ROWS};

/// A terminal size within the contract's bounds (1..=1000 columns, 1..=500 rows). The only way
/// to make one is [`TerminalSize::new`], so holding one means it was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TerminalSize {
    cols: u16,
    rows: u16,
}

impl TerminalSize {
    /// 80x24, the size of a terminal whose creator named none.
    pub const DEFAULT: TerminalSize = TerminalSize {
        cols: DEFAULT_COLS,
        rows: DEFAULT_ROWS,
    };

    /// A size within 1..=[`MAX_COLS`] columns and 1..=[`MAX_ROWS`] rows. Takes `u32` because
    /// that is what every wire carries; anything larger is refused, never truncated.
    pub fn new(cols: u32, rows: u32) -> Result<Self, InvalidSize> {
        match (u16::try_from(cols), u16::try_from(rows)) {
            (Ok(c), Ok(r)) if (1..=MAX_COLS).contains(&c) && (1..=MAX_ROWS).contains(&r) => {
                Ok(Self { cols: c, rows: r })
            }
            _ => Err(InvalidSize { cols, rows }),
        }
    }

    /// Both or neither of `cols` and `rows`, as a query string or a JSON body gives them.
    pub fn from_optional(
        cols: Option<u32>,
        rows: Option<u32>,
    ) -> Result<Option<Self>, InvalidSize> {
        match (cols, rows) {
            (None, None) => Ok(None),
            (Some(cols), Some(rows)) => Self::new(cols, rows).map(Some),
            (cols, rows) => Err(InvalidSize {
                cols: cols.unwrap_or(0),
                rows: rows.unwrap_or(0),
            }),
        }
    }

    pub fn cols(self) -> u16 {
        self.cols
    }

    pub fn rows(self) -> u16 {
        self.rows
    }
}

impl Default for TerminalSize {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Display for TerminalSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.cols, self.rows)
    }
}

/// A size outside the contract's bounds, or only one of columns and rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "terminal size {cols}x{rows} is out of bounds (columns 1..={MAX_COLS} and rows 1..={MAX_ROWS}, given together)"
)]
pub struct InvalidSize {
    pub cols: u32,
    pub rows: u32,
}

/// What an attached client may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// May write input, resize and reset. At most one per session; a new one takes over.
    Controller,
    /// Read-only; any number.
    Viewer,
}

impl Role {
    /// The name every text surface uses: `controller` or `viewer`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Controller => "controller",
            Role::Viewer => "viewer",
        }
    }

    /// Whether a grant of `self` covers a request for `requested`: a controller grant admits a
    /// viewer, never the reverse.
    pub fn admits(self, requested: Role) -> bool {
        self == Role::Controller || requested == Role::Viewer
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = InvalidRole;

    fn from_str(text: &str) -> Result<Self, InvalidRole> {
        match text {
            "controller" => Ok(Role::Controller),
            "viewer" => Ok(Role::Viewer),
            _ => Err(InvalidRole),
        }
    }
}

/// A role name other than `controller` or `viewer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("role must be controller or viewer")]
pub struct InvalidRole;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_inside_the_bounds_are_kept_and_outside_refused() {
        let size = TerminalSize::new(1000, 500).expect("the largest size is allowed");
        assert_eq!((size.cols(), size.rows()), (1000, 500));
        assert!(TerminalSize::new(1, 1).is_ok());
        for (cols, rows) in [(0, 24), (80, 0), (1001, 24), (80, 501), (65_616, 24)] {
            assert_eq!(
                TerminalSize::new(cols, rows),
                Err(InvalidSize { cols, rows }),
                "{cols}x{rows}"
            );
        }
    }

    #[test]
    fn a_size_needs_both_columns_and_rows() {
        assert_eq!(TerminalSize::from_optional(None, None), Ok(None));
        assert!(TerminalSize::from_optional(Some(80), None).is_err());
        assert!(TerminalSize::from_optional(None, Some(24)).is_err());
        assert_eq!(
            TerminalSize::from_optional(Some(100), Some(30)),
            Ok(Some(TerminalSize::new(100, 30).expect("in bounds")))
        );
    }

    #[test]
    fn roles_round_trip_through_their_names_and_a_controller_admits_a_viewer() {
        for role in [Role::Controller, Role::Viewer] {
            assert_eq!(role.as_str().parse::<Role>(), Ok(role));
        }
        assert_eq!("admin".parse::<Role>(), Err(InvalidRole));
        assert!(Role::Controller.admits(Role::Viewer));
        assert!(!Role::Viewer.admits(Role::Controller));
    }
}
