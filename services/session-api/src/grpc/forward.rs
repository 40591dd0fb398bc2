//! The screen calls (`GetScreen`, `SendInput`, `WaitForScreen`) and the command calls
//! (`ListCommands`, `GetCommandOutput`, `Run`, `WatchCommands`), which session-api checks and
//! forwards: the caller's request re-addressed to the session's broker, field for field.
//!
//! The fields are not checked here. Key names, patterns, formats and bounds are the broker's
//! rules, and the broker is where they are enforced; a second copy here could only disagree with
//! it. Nor do the fields or the answers become domain types: the service never looks at them,
//! so they go from this adapter to the broker adapter (`broker_client.rs`) and back unchanged.
//! Each request is taken apart whole, so that a field added to the proto fails to compile here
//! until it is forwarded.

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as pb;
use uuid::Uuid;

pub(super) fn get_screen_request(
    session_id: Uuid,
    request: pb::GetScreenRequest,
) -> broker_pb::GetScreenRequest {
    let pb::GetScreenRequest {
        instance: _,
        session_id: _,
        format,
        scrollback,
    } = request;
    broker_pb::GetScreenRequest {
        session_id: session_id.to_string(),
        format,
        scrollback,
    }
}

pub(super) fn list_commands_request(
    session_id: Uuid,
    request: pb::ListCommandsRequest,
) -> broker_pb::ListCommandsRequest {
    let pb::ListCommandsRequest {
        instance: _,
        session_id: _,
        after,
        limit,
    } = request;
    broker_pb::ListCommandsRequest {
        session_id: session_id.to_string(),
        after,
        limit,
    }
}

pub(super) fn get_command_output_request(
    session_id: Uuid,
    request: pb::GetCommandOutputRequest,
) -> broker_pb::GetCommandOutputRequest {
    let pb::GetCommandOutputRequest {
        instance: _,
        session_id: _,
        command_id,
        format,
    } = request;
    broker_pb::GetCommandOutputRequest {
        session_id: session_id.to_string(),
        command_id,
        format,
    }
}

pub(super) fn run_request(session_id: Uuid, request: pb::RunRequest) -> broker_pb::RunRequest {
    let pb::RunRequest {
        instance: _,
        session_id: _,
        command,
        timeout_ms,
        force,
        format,
    } = request;
    broker_pb::RunRequest {
        session_id: session_id.to_string(),
        command,
        timeout_ms,
        force,
        format,
    }
}

pub(super) fn send_input_request(
    session_id: Uuid,
    request: pb::SendInputRequest,
) -> broker_pb::SendInputRequest {
    let pb::SendInputRequest {
        instance: _,
        session_id: _,
        items,
        force,
    } = request;
    broker_pb::SendInputRequest {
        session_id: session_id.to_string(),
        items,
        force,
    }
}

pub(super) fn wait_for_screen_request(
    session_id: Uuid,
    request: pb::WaitForScreenRequest,
) -> broker_pb::WaitForScreenRequest {
    let pb::WaitForScreenRequest {
        instance: _,
        session_id: _,
        pattern,
        timeout_ms,
        quiet_ms,
        after_offset,
        format,
        scrollback,
        wait_for,
    } = request;
    broker_pb::WaitForScreenRequest {
        session_id: session_id.to_string(),
        pattern,
        timeout_ms,
        quiet_ms,
        after_offset,
        format,
        scrollback,
        wait_for,
    }
}

pub(super) fn watch_commands_request(
    session_id: Uuid,
    request: pb::WatchCommandsRequest,
) -> broker_pb::WatchCommandsRequest {
    let pb::WatchCommandsRequest {
        instance: _,
        session_id: _,
        after_id,
    } = request;
    broker_pb::WatchCommandsRequest {
        session_id: session_id.to_string(),
        after_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_of_a_screen_call_reaches_the_broker_addressed_to_the_session() {
        let session_id = Uuid::new_v4();
        let screen = get_screen_request(
            session_id,
            pb::GetScreenRequest {
                instance: "web".into(),
                session_id: "ignored: the parsed id is sent".into(),
                format: broker_pb::ScreenFormat::Cells.into(),
                scrollback: 42,
            },
        );
        assert_eq!(
            screen,
            broker_pb::GetScreenRequest {
                session_id: session_id.to_string(),
                format: broker_pb::ScreenFormat::Cells.into(),
                scrollback: 42,
            }
        );

        let items = vec![
            broker_pb::InputItem {
                item: Some(broker_pb::input_item::Item::Text("ptyhub".into())),
            },
            broker_pb::InputItem {
                item: Some(broker_pb::input_item::Item::Key("Enter".into())),
            },
        ];
        let input = send_input_request(
            session_id,
            pb::SendInputRequest {
                instance: "web".into(),
                session_id: session_id.to_string(),
                items: items.clone(),
                force: true,
            },
        );
        assert_eq!(
            input,
            broker_pb::SendInputRequest {
                session_id: session_id.to_string(),
                items,
                force: true,
            }
        );

        let wait = wait_for_screen_request(
            session_id,
            pb::WaitForScreenRequest {
                instance: "web".into(),
                session_id: session_id.to_string(),
                pattern: r"hi \w+".into(),
                timeout_ms: 1234,
                quiet_ms: 56,
                after_offset: Some(789),
                format: broker_pb::ScreenFormat::Ansi.into(),
                scrollback: 10,
                wait_for: broker_pb::TerminalState::Idle.into(),
            },
        );
        assert_eq!(
            wait,
            broker_pb::WaitForScreenRequest {
                session_id: session_id.to_string(),
                pattern: r"hi \w+".into(),
                timeout_ms: 1234,
                quiet_ms: 56,
                after_offset: Some(789),
                format: broker_pb::ScreenFormat::Ansi.into(),
                scrollback: 10,
                wait_for: broker_pb::TerminalState::Idle.into(),
            }
        );

        let watch = watch_commands_request(
            session_id,
            pb::WatchCommandsRequest {
                instance: "web".into(),
                session_id: "ignored".into(),
                after_id: 41,
            },
        );
        assert_eq!(
            watch,
            broker_pb::WatchCommandsRequest {
                session_id: session_id.to_string(),
                after_id: 41,
            }
        );
    }
}
