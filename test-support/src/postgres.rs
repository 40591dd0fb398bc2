//! A fresh PostgreSQL database per test, on the server `cargo xtask test` started.
