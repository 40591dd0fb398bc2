//! session-api: the authority over instances, sessions, aliases and the per-instance cap.

#![forbid(unsafe_code)]
