//! gRPC calls over a Unix socket without HTTP/2: one call per connection, for a gateway and a
//! broker on the same host.
//!
//! Over HTTP/2 (hyper's), every message crosses two tasks besides the caller and the handler:
//! the connection task on each side, which alone may touch the socket, and on the client the
//! task that pumps the request body into the connection. On a keystroke's round trip that is
//! four task switches, about 30 µs here (BENCHMARKS.md, "Where a keystroke's time goes").
//! A call socket carries one call per connection, so no connection is shared and nobody has to
//! multiplex: each side reads and writes the socket from the task that produces or consumes
//! the messages.
//!
//! - The client ([`CallSocketClient`], a `tower::Service` a tonic client is built on) writes
//!   the request body and reads the response from whichever task polls the response body:
//!   the gateway's WebSocket task.
//! - The server ([`serve_calls`]) hands each call to the same tonic service that serves the
//!   port. The request body reads the socket from the task that reads the request (a broker's
//!   reader of client frames), and one task per connection writes the response.
//!
//! # The frames
//!
//! Both ways, a frame is a kind byte, a big-endian `u32` length and that many bytes:
//!
//! | kind | name | direction | payload |
//! |---:|---|---|---|
//! | 1 | head | both, first | request: version (1), path (u16 length + bytes), headers; response: version (1), HTTP status (u16), headers |
//! | 2 | data | both | bytes of the HTTP body, which holds gRPC's length-prefixed messages (at most 1 MiB a frame) |
//! | 3 | end | client | the request body is complete (empty) |
//! | 4 | trailers | server, last | headers; the server closes the connection after it |
//!
//! Headers are a `u16` count, then per header a `u16` name length, the name, a `u16` value
//! length and the value; a head or trailers frame holds at most 64 KiB. Anything else (another
//! kind, a longer frame, data before the head) ends the call: the server answers a call it
//! cannot read with `INVALID_ARGUMENT`, the client fails the call with `INTERNAL`.
//!
//! The socket carries no credential of its own: a call carries the same metadata (tickets,
//! service credentials) as on the port, and the socket file's permissions (0660) say who on
//! the host may connect.

mod client;
mod frame;
mod server;

pub use client::{CallConnection, CallSocketClient};
pub use server::{CallsInProgress, bind_call_socket, serve_calls};

#[cfg(test)]
mod tests;
