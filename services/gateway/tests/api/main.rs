//! The gateway's integration tests, linked as one binary: each module drives a real in-process
//! stack (a broker with local PTYs, session-api on SQLite, the gateway, all on 127.0.0.1:0)
//! through the gateway's public surfaces.

mod browser;
mod command_choice;
mod common;
mod contract;
mod control;
mod flood;
mod front_door;
mod fuzz;
mod grpc_attach;
mod grpc_web;
mod mcp;
mod presence;
mod rest;
mod share_history;
mod shares;
mod websocket;
