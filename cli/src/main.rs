//! `ptyhub`: the all-in-one server and the client for people and scripts.

fn main() {}
