//! A fresh PostgreSQL database per test, on the server `cargo xtask test` started.
//!
//! ```ignore
//! if !ptyhub_test_support::require(ptyhub_test_support::Requirement::Postgres) { return; }
//! let database = ptyhub_test_support::postgres::TestDatabase::create().await?;
//! let url = database.url(); // postgres://.../test_<uuid>
//! ```
//!
//! The database is dropped when the [`TestDatabase`] is dropped (best effort: a failure is
//! printed, never a panic), terminating any connection still open to it.

use std::fmt;

use anyhow::{Context, bail};
use sea_orm::{ConnectionTrait, Database};
use uuid::Uuid;

/// The variable that holds a superuser URL to the test server.
pub const POSTGRES_URL_VARIABLE: &str = "PTYHUB_TEST_POSTGRES_URL";

/// One freshly created, empty database, dropped on drop.
pub struct TestDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl fmt::Debug for TestDatabase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URLs may carry a password; the name is enough to find the database.
        f.debug_struct("TestDatabase")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl TestDatabase {
    /// Creates a database named by a fresh UUID on the server at `PTYHUB_TEST_POSTGRES_URL`.
    pub async fn create() -> anyhow::Result<Self> {
        let admin_url = std::env::var(POSTGRES_URL_VARIABLE)
            .with_context(|| format!("{POSTGRES_URL_VARIABLE} is not set"))?;
        Self::create_on(&admin_url).await
    }

    /// Creates a database named by a fresh UUID on the server that `admin_url` points at; the
    /// role in `admin_url` must be allowed to create databases.
    pub async fn create_on(admin_url: &str) -> anyhow::Result<Self> {
        let name = format!("test_{}", Uuid::new_v4().simple());
        let url = with_database(admin_url, &name)?;
        let admin = Database::connect(admin_url)
            .await
            .with_context(|| format!("connecting to the test PostgreSQL server for {name}"))?;
        admin
            .execute_unprepared(&format!("CREATE DATABASE \"{name}\""))
            .await
            .with_context(|| format!("creating database {name}"))?;
        admin.close().await.ok();
        Ok(Self {
            admin_url: admin_url.to_owned(),
            name,
            url,
        })
    }

    /// The URL of the new database, with the credentials of the server URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // Drop runs outside any async context we control (possibly inside a runtime that is
        // shutting down), so the drop gets a thread and a small runtime of its own.
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        let dropper = std::thread::spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(error) => {
                    eprintln!("test database {name} not dropped: {error}");
                    return;
                }
            };
            runtime.block_on(async {
                let result = async {
                    let admin = Database::connect(&admin_url).await?;
                    admin
                        .execute_unprepared(&format!(
                            "DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"
                        ))
                        .await?;
                    admin.close().await
                }
                .await;
                if let Err(error) = result {
                    eprintln!("test database {name} not dropped: {error}");
                }
            });
        });
        let _ = dropper.join();
    }
}

/// Replaces the database part of a `postgres://` URL, keeping credentials, host and parameters.
fn with_database(server_url: &str, database: &str) -> anyhow::Result<String> {
    let Some(scheme_end) = server_url.find("://") else {
        bail!("{POSTGRES_URL_VARIABLE} is not a URL: it has no scheme");
    };
    let authority_start = scheme_end + 3;
    let rest = &server_url[authority_start..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let after_authority = &rest[authority_end..];
    let query = after_authority
        .find('?')
        .map(|start| &after_authority[start..])
        .unwrap_or("");
    Ok(format!(
        "{}{authority}/{database}{query}",
        &server_url[..authority_start]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_database_replaces_only_the_database() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:55432/postgres", "x").unwrap(),
            "postgres://postgres@127.0.0.1:55432/x"
        );
        assert_eq!(
            with_database("postgres://u:p@h:1/db?sslmode=disable", "x").unwrap(),
            "postgres://u:p@h:1/x?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://h?sslmode=disable", "x").unwrap(),
            "postgres://h/x?sslmode=disable"
        );
        assert_eq!(
            with_database("postgresql://h", "x").unwrap(),
            "postgresql://h/x"
        );
        assert!(with_database("not a url", "x").is_err());
    }

    #[tokio::test]
    async fn create_makes_an_empty_database_and_drop_removes_it() {
        if !crate::require(crate::Requirement::Postgres) {
            return;
        }
        let admin_url = std::env::var(POSTGRES_URL_VARIABLE).unwrap();
        let database = TestDatabase::create().await.unwrap();
        let name = database.name().to_owned();
        let connection = Database::connect(database.url()).await.unwrap();
        connection
            .execute_unprepared("CREATE TABLE probe (id integer)")
            .await
            .unwrap();
        drop(database);

        let admin = Database::connect(&admin_url).await.unwrap();
        let rows = admin
            .query_all_raw(sea_orm::Statement::from_string(
                sea_orm::DatabaseBackend::Postgres,
                format!("SELECT 1 FROM pg_database WHERE datname = '{name}'"),
            ))
            .await
            .unwrap();
        assert!(rows.is_empty(), "database {name} still exists after drop");
    }
}
