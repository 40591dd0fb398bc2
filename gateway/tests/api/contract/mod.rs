//! End-to-end tests of docs/CONTRACT.md through the gateway's public REST, WebSocket and gRPC
//! surface, against the in-process stack (broker with local PTYs, session-api on SQLite, gateway).

mod attach_tickets;
mod bad_input;
mod broker_down;
mod client_ids;
mod closed_sessions;
mod exits;
mod flow_control;
mod project_routes;
mod reset;
mod support;
