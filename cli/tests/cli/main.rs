//! The `ptyhub` binary as its users meet it: `ptyhub up` on port 0, the client commands against
//! it, and `ptyhub attach` on a real pseudo-terminal. One test binary, so the graph links once.

mod attach;
mod command_choice;
mod commands;
mod control;
mod docker;
mod errors;
mod exec;
mod json;
mod mcp;
mod mcp_inspector;
mod readiness;
mod recording;
mod screen;
mod support;
mod tls;
mod up;
mod webhook;
