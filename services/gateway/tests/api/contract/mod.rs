//! End-to-end tests of docs/CONTRACT.md through the gateway's public REST, WebSocket and gRPC
//! surface, against the in-process stack (broker with local PTYs, session-api on SQLite, gateway).
//! One module per behaviour group; `support` holds the clients they share.
//!
//! What the in-process stack cannot reach is left to the process-level tests: the end of a
//! tombstone (the `exited` close reason and the slot it frees) and idle reaping need a broker
//! with a short tombstone and detached timeout, which the stack does not configure.

mod activity;
mod attach_tickets;
mod audit;
mod audit_principals;
mod bad_input;
mod broker_down;
mod browser_rules;
mod change_events;
mod client_ids;
mod close_codes;
mod closed_sessions;
mod commands;
mod exits;
mod flow_control;
mod input;
mod legacy_routes;
mod live_sessions;
mod project_routes;
mod recordings;
mod relay_frames;
mod reset;
mod rest_bounds;
mod run;
mod screens;
mod share_limits;
mod snapshots;
mod state_waits;
mod support;
mod webhooks;
