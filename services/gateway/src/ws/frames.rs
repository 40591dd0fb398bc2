//! The terminal WebSocket's JSON text frames (docs/CONTRACT.md, "WebSocket"): what a client may
//! send, parsed into a [`TerminalCommand`], and every frame the server sends, as one typed enum.
//! Binary frames carry terminal bytes both ways and are not described here.

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes};
use bytes::Bytes;
use ptyhub_model::{Attendee, Role, TerminalSize};
use ptyhub_wire::limits::MAX_INPUT_ID_CHARS;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use crate::domain::TerminalCommand;

/// A JSON frame from the client.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ClientFrame {
    Input {
        data: String,
        /// Asks for an `input_ack`; checked by [`input_id`].
        #[serde(default)]
        id: Option<Value>,
    },
    Resize {
        cols: u32,
        rows: u32,
    },
    Reset,
    Pong,
    /// A viewer asks the controller for control.
    RequestControl,
    /// The controller's answers to a `control_requested`.
    GrantControl {
        request_id: u64,
    },
    DeclineControl {
        request_id: u64,
    },
}

/// Parses a text frame; `Ok(None)` for frames that only prove the client is alive. The error is
/// the message of the `error` frame that answers a refused frame.
pub fn parse_client_frame(text: &str) -> Result<Option<TerminalCommand>, String> {
    let frame: ClientFrame =
        serde_json::from_str(text).map_err(|error| format!("invalid message: {error}"))?;
    Ok(match frame {
        ClientFrame::Input { data, id } => Some(TerminalCommand::Input {
            data: Bytes::from(data),
            id: id.map(input_id).transpose()?,
        }),
        ClientFrame::Resize { cols, rows } => Some(TerminalCommand::Resize(
            TerminalSize::new(cols, rows).map_err(|error| error.to_string())?,
        )),
        ClientFrame::Reset => Some(TerminalCommand::Reset),
        ClientFrame::Pong => None,
        ClientFrame::RequestControl => Some(TerminalCommand::RequestControl),
        ClientFrame::GrantControl { request_id } => Some(TerminalCommand::AnswerControl {
            request_id,
            grant: true,
        }),
        ClientFrame::DeclineControl { request_id } => Some(TerminalCommand::AnswerControl {
            request_id,
            grant: false,
        }),
    })
}

/// An input's `id` as the contract allows it: a string of 1 to 64 characters.
fn input_id(id: Value) -> Result<String, String> {
    let kind = match id {
        Value::String(id) => {
            let chars = id.chars().count();
            return match chars {
                0 => Err("input id is empty: send 1 to 64 characters, or no id".to_owned()),
                1..=MAX_INPUT_ID_CHARS => Ok(id),
                _ => Err(format!(
                    "input id is {chars} characters long: at most {MAX_INPUT_ID_CHARS}"
                )),
            };
        }
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    Err(format!(
        "input id must be a string of 1 to {MAX_INPUT_ID_CHARS} characters, not {kind}"
    ))
}

/// Every JSON frame the server sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame<'a> {
    /// `connected` first, before any output; `resetting` while the command restarts.
    Status(StreamStatus<'a>),
    /// Bytes the ring no longer held, before a replay that cannot start at the asked offset.
    Gap { lost: u64 },
    /// The next binary frame is a snapshot: bytes that redraw the screen as of `offset` on a
    /// terminal of this size (they start with `ESC c`); the output after it starts at
    /// `offset`.
    Snapshot { offset: u64, cols: u16, rows: u16 },
    /// The PTY's new size.
    Resize { cols: u16, rows: u16 },
    /// The heartbeat; answered by `pong` or a WebSocket pong.
    Ping,
    /// To a controller that lost control, just before close 4009.
    SessionDetached { reason: DetachReason },
    /// The process ended, just before close 1000. `signal` is `null` for a plain exit.
    Exit { code: i32, signal: Option<i32> },
    /// An input that carried an `id` was written: `offset` is the output offset just before its
    /// first byte went in (its answer comes at or after it), `bytes` how many were written.
    InputAck {
        id: &'a str,
        offset: u64,
        bytes: u64,
    },
    /// To the controller: a viewer asks for control; answer with `grant_control` or
    /// `decline_control` and this `request_id`.
    ControlRequested {
        request_id: u64,
        requester: Option<&'a Attendee>,
    },
    /// To a requester: the controller declined.
    ControlDeclined { request_id: u64 },
    /// This socket's role changed without a reconnect: control was granted to it
    /// (`controller`), or it granted control away (`viewer`).
    Role {
        #[serde(serialize_with = "role_name")]
        role: Role,
    },
    /// A refused client frame; the socket stays open. `id` is the refused input's, when it
    /// carried one.
    Error {
        message: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
    },
}

/// The `status` of a [`ServerFrame::Status`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum StreamStatus<'a> {
    /// Attached: `offset` is the position of the first byte that follows.
    Connected {
        session: SessionName<'a>,
        #[serde(serialize_with = "role_name")]
        role: Role,
        offset: u64,
        cols: u16,
        rows: u16,
    },
    /// A reset is under way; a new `connected` follows.
    Resetting,
}

/// The session a `connected` frame is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SessionName<'a> {
    pub id: &'a str,
    pub name: &'a str,
}

/// Why a controller was detached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DetachReason {
    /// Another controller attached.
    TakenOver,
}

impl ServerFrame<'_> {
    /// The `connected` status of a stream of `session` at `offset`.
    pub fn connected<'a>(
        session: SessionName<'a>,
        role: Role,
        offset: u64,
        size: TerminalSize,
    ) -> ServerFrame<'a> {
        ServerFrame::Status(StreamStatus::Connected {
            session,
            role,
            offset,
            cols: size.cols(),
            rows: size.rows(),
        })
    }

    pub fn resize(size: TerminalSize) -> Self {
        ServerFrame::Resize {
            cols: size.cols(),
            rows: size.rows(),
        }
    }

    /// The frame as a WebSocket text message.
    pub fn to_message(&self) -> Message {
        // Plain structs, strings and numbers: serializing them to JSON cannot fail.
        let text = serde_json::to_string(self).expect("a server frame serializes to json");
        Message::Text(text.into())
    }
}

fn role_name<S: Serializer>(role: &Role, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(role.as_str())
}

/// A close frame with `code` and `reason`, the reason cut to the 123 bytes a close frame holds.
pub fn close_message(code: u16, reason: &str) -> Message {
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    Message::Close(Some(CloseFrame {
        code,
        reason: Utf8Bytes::from(&reason[..end]),
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn json_of(frame: &ServerFrame<'_>) -> Value {
        let Message::Text(text) = frame.to_message() else {
            panic!("a server frame is a text message");
        };
        serde_json::from_str(text.as_str()).expect("valid json")
    }

    #[test]
    fn client_frames_parse_or_explain() {
        assert_eq!(
            parse_client_frame(r#"{"type":"input","data":"ls\n"}"#).unwrap(),
            Some(TerminalCommand::Input {
                data: Bytes::from_static(b"ls\n"),
                id: None
            })
        );
        assert_eq!(
            parse_client_frame(r#"{"type":"input","data":"ls\n","id":"ls-1"}"#).unwrap(),
            Some(TerminalCommand::Input {
                data: Bytes::from_static(b"ls\n"),
                id: Some("ls-1".to_owned())
            })
        );
        assert_eq!(
            parse_client_frame(r#"{"type":"resize","cols":100,"rows":40}"#).unwrap(),
            Some(TerminalCommand::Resize(TerminalSize::new(100, 40).unwrap()))
        );
        assert_eq!(
            parse_client_frame(r#"{"type":"reset"}"#).unwrap(),
            Some(TerminalCommand::Reset)
        );
        assert_eq!(parse_client_frame(r#"{"type":"pong"}"#).unwrap(), None);
        assert!(
            parse_client_frame(r#"{"type":"resize","cols":0,"rows":40}"#)
                .unwrap_err()
                .contains("out of bounds")
        );
        assert!(parse_client_frame(r#"{"type":"dance"}"#).is_err());
        assert!(parse_client_frame("not json").is_err());
    }

    #[test]
    fn an_input_id_is_a_string_of_1_to_64_characters() {
        let id_of = |id: &str| {
            parse_client_frame(&format!(r#"{{"type":"input","data":"x","id":{id}}}"#)).map(
                |command| match command {
                    Some(TerminalCommand::Input { id, .. }) => id,
                    other => panic!("not input: {other:?}"),
                },
            )
        };
        let longest = "é".repeat(64);
        assert_eq!(id_of(&format!("\"{longest}\"")), Ok(Some(longest)));
        assert_eq!(id_of("\"a\""), Ok(Some("a".to_owned())));
        let too_long = id_of(&format!("\"{}\"", "x".repeat(65))).unwrap_err();
        assert_eq!(too_long, "input id is 65 characters long: at most 64");
        assert!(id_of("\"\"").unwrap_err().contains("input id is empty"));
        for (id, kind) in [
            ("7", "a number"),
            ("true", "a boolean"),
            ("[\"a\"]", "an array"),
            ("{}", "an object"),
        ] {
            let refused = id_of(id).unwrap_err();
            assert!(
                refused.starts_with("input id must be a string"),
                "{refused}"
            );
            assert!(refused.ends_with(kind), "{refused}");
        }
    }

    #[test]
    fn server_frames_are_the_contract_json() {
        let size = TerminalSize::new(120, 40).unwrap();
        let session = SessionName {
            id: "0b0e5b8e-1a52-4c5f-9b36-2a4f0f2c7d10",
            name: "Session 1",
        };
        let cases = [
            (
                ServerFrame::connected(session, Role::Viewer, 4096, size),
                json!({
                    "type": "status", "status": "connected",
                    "session": {"id": "0b0e5b8e-1a52-4c5f-9b36-2a4f0f2c7d10", "name": "Session 1"},
                    "role": "viewer", "offset": 4096, "cols": 120, "rows": 40,
                }),
            ),
            (
                ServerFrame::Status(StreamStatus::Resetting),
                json!({"type": "status", "status": "resetting"}),
            ),
            (
                ServerFrame::Gap { lost: 17 },
                json!({"type": "gap", "lost": 17}),
            ),
            (
                ServerFrame::Snapshot {
                    offset: 4096,
                    cols: 120,
                    rows: 40,
                },
                json!({"type": "snapshot", "offset": 4096, "cols": 120, "rows": 40}),
            ),
            (
                ServerFrame::resize(size),
                json!({"type": "resize", "cols": 120, "rows": 40}),
            ),
            (ServerFrame::Ping, json!({"type": "ping"})),
            (
                ServerFrame::SessionDetached {
                    reason: DetachReason::TakenOver,
                },
                json!({"type": "session_detached", "reason": "taken_over"}),
            ),
            (
                ServerFrame::Exit {
                    code: 3,
                    signal: None,
                },
                json!({"type": "exit", "code": 3, "signal": null}),
            ),
            (
                ServerFrame::Exit {
                    code: 143,
                    signal: Some(15),
                },
                json!({"type": "exit", "code": 143, "signal": 15}),
            ),
            (
                ServerFrame::Error {
                    message: "viewers cannot send input",
                    id: None,
                },
                json!({"type": "error", "message": "viewers cannot send input"}),
            ),
            (
                ServerFrame::Error {
                    message: "viewers cannot send input",
                    id: Some("7"),
                },
                json!({"type": "error", "message": "viewers cannot send input", "id": "7"}),
            ),
            (
                ServerFrame::InputAck {
                    id: "7",
                    offset: 4096,
                    bytes: 3,
                },
                json!({"type": "input_ack", "id": "7", "offset": 4096, "bytes": 3}),
            ),
        ];
        for (frame, expected) in cases {
            assert_eq!(json_of(&frame), expected, "{frame:?}");
        }
        let controller = ServerFrame::connected(session, Role::Controller, 0, size);
        assert_eq!(json_of(&controller)["role"], "controller");
    }

    #[test]
    fn close_reasons_fit_the_limit() {
        let Message::Close(Some(frame)) = close_message(1011, &"é".repeat(100)) else {
            panic!("not a close frame");
        };
        assert!(frame.reason.as_str().len() <= 123);
        assert!(frame.reason.as_str().starts_with('é'));
    }
}
