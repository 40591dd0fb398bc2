//! The `pty-broker` binary.

fn main() {}
