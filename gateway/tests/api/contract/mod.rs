//! End-to-end checks of docs/CONTRACT.md behaviours through the in-process stack.
