//! One test run again in a child process with an environment of its own: what a test of
//! configuration needs to read real variables (`clap` reads the process's environment, which a
//! test cannot change safely while other tests run beside it in the same process).
//!
//! The test to run is an ignored test of the same binary that starts with
//! `if !ptyhub_test_support::child::is_child() { return; }`; the parent calls
//! [`assert_passes_in_child`] with its name and the variables, and fails with the child's
//! output when the child fails.

use std::process::Command;

/// Set in the child's environment: the ignored test runs only when it is there.
pub const CHILD_VARIABLE: &str = "PTYHUB_TEST_CHILD";

/// Whether this process is a child started by [`assert_passes_in_child`].
pub fn is_child() -> bool {
    std::env::var_os(CHILD_VARIABLE).is_some()
}

/// Runs the ignored test `test_name` (its path in the binary, as `cargo nextest list` names it,
/// `config::tests::child_…`) of this test binary with exactly the variables `env` (no others:
/// the caller's `PTYHUB_*` variables stay out), and panics with its output unless it passes.
pub fn assert_passes_in_child(test_name: &str, env: &[(&str, String)]) {
    let binary = std::env::current_exe().expect("the test binary's path");
    let output = Command::new(&binary)
        .args([
            "--exact",
            test_name,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_clear()
        .envs(env.iter().map(|(name, value)| (name, value)))
        .env(CHILD_VARIABLE, "1")
        .output()
        .unwrap_or_else(|error| panic!("cannot run {}: {error}", binary.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{test_name} failed in a child process ({}):\n{stdout}\n{stderr}",
        output.status
    );
    // libtest succeeds when no test matched: a renamed child must not pass by running nothing.
    assert!(
        stdout.contains("1 passed"),
        "{test_name} did not run in the child:\n{stdout}\n{stderr}"
    );
}
