//! pty-broker's integration tests, linked once as one binary: real brokers on 127.0.0.1:0, real
//! PTYs, and (where a test says so) a real Docker engine. Tests that need Docker skip with a
//! reason without one, and fail under `CI=true`.
//!
//! - `attach`: the Attach scenarios over gRPC, each run against the local and the Docker runtime;
//! - `commands`: shell integration in real shells, their commands and what the terminal is doing;
//! - `input`: receipts, bad input ids, and input held for a shell's first prompt;
//! - `screens`: the emulator behind snapshots and the screen calls, against real programs;
//! - `screen_oracle`: the emulator against xterm.js on recorded programs, and its snapshots drawn
//!   by xterm;
//! - `presence`: who is attached, as the broker's events name them, and who is typing;
//! - `present_only`: an attach that sees the present screen alone (a share without history);
//! - `service`: the event stream, health, reflection, the service credential, idle reaping;
//! - `teardown`: the order in which a session's processes are ended;
//! - `docker_runtime` and `local_runtime`: the runtimes on their own, without a broker;
//! - `recordings`: asciicast recordings against a strict reader, and a broker killed mid-recording;
//! - `policy`: the broker's own limits on containers and users, against real targets;
//! - `restart`: the real `pty-broker` binary killed and started again on the same data directory;
//! - `handoff`: real `pty-broker` processes handing their sessions to the next (`--take-over`).

#[macro_use]
mod support;

mod attach;
mod commands;
mod docker_runtime;
mod handoff;
mod input;
mod local_runtime;
mod policy;
mod presence;
mod present_only;
mod recordings;
mod restart;
mod screen_oracle;
mod screens;
mod service;
mod teardown;
