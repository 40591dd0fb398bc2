//! What session-api's integration tests share: a fresh database of either kind per test, and
//! in-process session-api and pty-broker servers on 127.0.0.1:0.

#![allow(dead_code)]

use tempfile::TempDir;
use test_support::postgres::TestDatabase;

/// Which database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A fresh, empty database, removed when dropped.
#[derive(Debug)]
pub enum FreshDatabase {
    Sqlite { directory: TempDir, url: String },
    Postgres(TestDatabase),
}

impl FreshDatabase {
    /// A fresh database of `backend`, or `None` when PostgreSQL is unavailable outside CI
    /// (the test is then skipped with a printed reason).
    pub async fn create(backend: Backend) -> Option<Self> {
        test_support::init_test_logging();
        match backend {
            Backend::Sqlite => {
                let directory = tempfile::tempdir().expect("temporary directory");
                let url = format!(
                    "sqlite://{}?mode=rwc",
                    directory.path().join("session-api.db").display()
                );
                Some(FreshDatabase::Sqlite { directory, url })
            }
            Backend::Postgres => {
                if !test_support::require(test_support::Requirement::Postgres) {
                    return None;
                }
                Some(FreshDatabase::Postgres(
                    TestDatabase::create()
                        .await
                        .expect("fresh PostgreSQL database"),
                ))
            }
        }
    }

    pub fn url(&self) -> &str {
        match self {
            FreshDatabase::Sqlite { url, .. } => url,
            FreshDatabase::Postgres(database) => database.url(),
        }
    }
}

/// Runs one async test body on both databases: `both_databases!(name, |backend| async {...})`
/// defines `mod name { sqlite, postgres }`.
#[macro_export]
macro_rules! both_databases {
    ($name:ident, $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                ($body)($crate::common::Backend::Sqlite).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                ($body)($crate::common::Backend::Postgres).await;
            }
        }
    };
}
