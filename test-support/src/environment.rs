//! Which real dependencies this test run has, and what a test does when one is missing.

/// A real dependency a test may need. `cargo xtask test` starts each one and exports where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// A PostgreSQL server; `PTYHUB_TEST_POSTGRES_URL` is a superuser URL to it.
    Postgres,
    /// A Docker engine (`DOCKER_HOST` or `/var/run/docker.sock`) with the test image built.
    Docker,
    /// Chromium at `PTYHUB_TEST_CHROMIUM` (default `/usr/bin/chromium`).
    Chromium,
}

impl Requirement {
    /// Returns why the dependency is unavailable, or `None` when it is there.
    fn missing_because(self) -> Option<String> {
        match self {
            Requirement::Postgres => match std::env::var("PTYHUB_TEST_POSTGRES_URL") {
                Ok(url) if !url.is_empty() => None,
                _ => Some("PTYHUB_TEST_POSTGRES_URL is not set (cargo xtask test sets it)".into()),
            },
            Requirement::Docker => {
                let socket = std::env::var("DOCKER_HOST")
                    .ok()
                    .and_then(|host| host.strip_prefix("unix://").map(str::to_owned))
                    .unwrap_or_else(|| "/var/run/docker.sock".to_owned());
                if std::path::Path::new(&socket).exists() {
                    None
                } else {
                    Some(format!(
                        "no Docker engine socket at {socket} (cargo xtask test starts one)"
                    ))
                }
            }
            Requirement::Chromium => {
                let chromium = chromium_path();
                if std::path::Path::new(&chromium).exists() {
                    None
                } else {
                    Some(format!(
                        "no Chromium at {chromium} (cargo xtask test installs it)"
                    ))
                }
            }
        }
    }
}

/// Where the browser tests find Chromium.
pub fn chromium_path() -> String {
    std::env::var("PTYHUB_TEST_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned())
}

/// True when running under CI, where nothing may be skipped.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| value == "true" || value == "1")
}

/// Checks that `requirement` is available. Returns `true` when the test should go on.
///
/// Under `CI=true` a missing dependency panics, failing the test. Elsewhere it prints why the
/// test is skipped and returns `false`; the caller then returns early:
///
/// ```ignore
/// if !test_support::require(Requirement::Docker) { return; }
/// ```
pub fn require(requirement: Requirement) -> bool {
    let Some(reason) = requirement.missing_because() else {
        return true;
    };
    if in_ci() {
        panic!("{requirement:?} is required under CI=true: {reason}");
    }
    eprintln!("skipped: {requirement:?} unavailable: {reason}");
    false
}
