//! The end-to-end tests, one binary (linked once): the deployment files against the binaries,
//! and clusters of real service processes on loopback ports under faults and churn.

mod churn;
mod cluster;
mod deployment;
