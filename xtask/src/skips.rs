//! The run's list of what it skipped, printed at the end as one `SKIP: <what>: <why>` line each,
//! in and out of CI, so that a skip never reads as a pass.
//!
//! One file under the target directory holds the list for one run. xtask appends its own skips
//! (a stage a filter dropped, the advisory check without a database); the tests, the bench and
//! the browser tests append theirs through the file's name in `PTYHUB_TEST_SKIP_LOG`, each line
//! in one write so that lines of tests running at once do not interleave.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

use crate::run;

/// The name of the variable through which the tests, the bench and the browser tests report a
/// skip; the same as `ptyhub_test_support::SKIP_LOG_VARIABLE` (xtask does not depend on the
/// workspace's crates).
const SKIP_LOG_VARIABLE: &str = "PTYHUB_TEST_SKIP_LOG";

/// The skips of one run, kept in a file that the run's child processes append to.
#[derive(Debug)]
pub struct SkipList {
    path: PathBuf,
}

impl SkipList {
    /// An empty list for a new run (the previous run's lines are removed).
    pub fn fresh() -> Result<Self> {
        let path = run::target_dir().join("ptyhub-skipped-tests.log");
        if let Err(error) = std::fs::remove_file(&path)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            return Err(error).with_context(|| format!("cannot reset {}", path.display()));
        }
        Ok(Self { path })
    }

    /// The variable that lets a child process append to the list.
    pub fn variable(&self) -> (String, String) {
        (
            SKIP_LOG_VARIABLE.to_owned(),
            self.path.to_string_lossy().into_owned(),
        )
    }

    /// Records that `what` did not run because of `why`, and says so now as well as at the end.
    pub fn record(&self, what: &str, why: &str) {
        let line = skip_line(what, why);
        eprintln!("{line}");
        if let Err(error) = append_line(&self.path, &line) {
            eprintln!("cannot record the skip in {}: {error}", self.path.display());
        }
    }

    /// Prints every skip of the run: the final list.
    pub fn print(&self) {
        let recorded = std::fs::read_to_string(&self.path).unwrap_or_default();
        eprintln!("{}", summary(&recorded));
    }
}

fn skip_line(what: &str, why: &str) -> String {
    format!("SKIP: {what}: {why}")
}

fn append_line(path: &Path, line: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    file.write_all(format!("{line}\n").as_bytes())
}

/// The end-of-run text for the lines recorded: `skipped: none`, or a count and each line.
fn summary(recorded: &str) -> String {
    let lines: Vec<&str> = recorded.lines().filter(|line| !line.is_empty()).collect();
    if lines.is_empty() {
        return "skipped: none".to_owned();
    }
    let mut text = format!(
        "skipped: {} (a skipped test counts as passed above; install what is missing, or run \
         `cargo xtask deps`):",
        lines.len()
    );
    for line in lines {
        text.push_str("\n  ");
        text.push_str(line);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_skips_are_listed_one_line_each_with_what_and_why() {
        let path = std::env::temp_dir().join(format!(
            "ptyhub-xtask-skips-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let list = SkipList { path: path.clone() };
        list.record("browser tests", "a nextest filter was given");
        append_line(
            &path,
            "SKIP: cli docker::boxed: Docker unavailable: no socket",
        )
        .unwrap();
        let recorded = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            summary(&recorded),
            "skipped: 2 (a skipped test counts as passed above; install what is missing, or run \
             `cargo xtask deps`):\n  SKIP: browser tests: a nextest filter was given\n  SKIP: cli \
             docker::boxed: Docker unavailable: no socket"
        );
    }

    #[test]
    fn a_run_without_skips_says_none() {
        assert_eq!(summary(""), "skipped: none");
        assert_eq!(summary("\n"), "skipped: none");
    }
}
