//! gateway: the browser edge of ptyhub.

#![forbid(unsafe_code)]
