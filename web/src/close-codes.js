// The WebSocket close codes the page tells apart, by name. This table mirrors the `close_code`
// table in `wire/src/code.rs` (the contract's codes) with the same names, so that a code changed
// there is found here by its name. POLICY (1008) is left out: the page does nothing of its own on
// it, and reconnects with backoff as it does after BACKEND_FAILURE, TOO_BIG or a dropped
// connection.

export const CLOSE = Object.freeze({
  /** The session exited or was closed (the page closes its own socket with it too). */
  NORMAL: 1000,
  /** A frame of more than `MAX_FRAME_BYTES` (`wire/src/limits.rs`). */
  TOO_BIG: 1009,
  /** A backend failed; reconnect with backoff. */
  BACKEND_FAILURE: 1011,
  /**
   * This gateway is shutting down (a rolling restart), or the session's broker hands it to its
   * next process; reconnect now.
   */
  SERVICE_RESTART: 1012,
  /** No credential, or one that does not verify. */
  UNAUTHENTICATED: 4001,
  /** The credential does not cover this instance. */
  FORBIDDEN: 4003,
  /** The session is unknown or closed. */
  NOT_FOUND: 4004,
  /** Another controller took over; do not reconnect automatically. */
  TAKEN_OVER: 4009,
  /** Opening would create a session beyond the instance's cap. */
  CAP_REACHED: 4029,
});
