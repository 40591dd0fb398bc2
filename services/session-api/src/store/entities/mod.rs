//! The sea-orm entities: one module per table, the rows exactly as stored.

pub mod audit_event;
pub mod broker;
pub mod instance;
pub mod session_alias;
pub mod share;
pub mod terminal_session;
pub mod webhook;
pub mod webhook_delivery;
