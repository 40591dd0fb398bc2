//! The JSON bodies of deliveries, in the contract's spellings (the REST API's session and
//! command objects), written once when the event is queued: every attempt sends, and signs,
//! the same bytes.

use std::time::SystemTime;

use chrono::{DateTime, SecondsFormat, Utc};
use ptyhub_model::TerminalState;
use serde_json::{Value, json};

use super::WebhookEvent;
use crate::domain::{Command, Session, TerminalActivity};

/// The body of a `state_changed`: the session's terminal as it is now, in the model's one JSON
/// form of it (the REST session object's fields), and the state before.
pub fn state_changed(
    session: &Session,
    previous: Option<TerminalState>,
    terminal: &TerminalActivity,
    at: DateTime<Utc>,
) -> String {
    let mut body = envelope(WebhookEvent::StateChanged, session, at);
    if let (Value::Object(body), Ok(Value::Object(terminal))) =
        (&mut body, serde_json::to_value(terminal))
    {
        body.extend(terminal);
    }
    body["previous_state"] = json!(previous.map(TerminalState::as_str));
    body.to_string()
}

/// The body of a `command_finished`: the command object, as `GET .../commands` lists it.
pub fn command_finished(session: &Session, command: &Command, at: DateTime<Utc>) -> String {
    let mut body = envelope(WebhookEvent::CommandFinished, session, at);
    let duration_ms = command.ended_at.map(|ended_at| {
        ended_at
            .duration_since(command.started_at)
            .map_or(0, |duration| {
                u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
            })
    });
    body["command"] = json!({
        "id": command.id,
        "command": command.command,
        "cwd": command.cwd,
        "started_at": system_timestamp(command.started_at),
        "ended_at": command.ended_at.map(system_timestamp),
        "exit_code": command.exit_code,
        "duration_ms": duration_ms,
        "output_start": command.output_start,
        "output_end": command.output_end,
    });
    body.to_string()
}

/// What every body starts with: which event, about which session, when.
fn envelope(event: WebhookEvent, session: &Session, at: DateTime<Utc>) -> Value {
    json!({
        "event": event.as_str(),
        "instance_id": session.instance_id.to_string(),
        "session_id": session.id.to_string(),
        "session_name": session.name,
        "at": timestamp(at),
    })
}

/// RFC 3339 in UTC, as the REST API writes times.
fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

fn system_timestamp(at: SystemTime) -> String {
    timestamp(at.into())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use ptyhub_model::{Notification, Progress, TerminalSize};
    use uuid::Uuid;

    use super::*;
    use crate::domain::SessionStatus;

    fn session() -> Session {
        Session {
            id: Uuid::from_u128(2),
            instance_id: Uuid::from_u128(1),
            name: "Session 1".into(),
            status: SessionStatus::Active,
            close_reason: None,
            exit: None,
            aliases: Vec::new(),
            size: TerminalSize::default(),
            broker_id: "local".into(),
            created_at: DateTime::UNIX_EPOCH,
            last_activity_at: DateTime::UNIX_EPOCH,
            closed_at: None,
            attached_clients: 0,
            title: None,
            last_bell_at: None,
            terminal: None,
            presence: Vec::new(),
            control_mode: Default::default(),
        }
    }

    fn at(millis: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(millis)
    }

    #[test]
    fn a_finished_command_is_sent_as_the_listing_shows_it() {
        let command = Command {
            id: 7,
            command: "false".into(),
            cwd: Some("/tmp".into()),
            started_at: at(1_000),
            ended_at: Some(at(1_250)),
            exit_code: Some(1),
            output_start: 10,
            output_end: Some(12),
        };
        let body: Value =
            serde_json::from_str(&command_finished(&session(), &command, at(2_000).into()))
                .expect("JSON");
        assert_eq!(
            body,
            json!({
                "event": "command_finished",
                "instance_id": Uuid::from_u128(1).to_string(),
                "session_id": Uuid::from_u128(2).to_string(),
                "session_name": "Session 1",
                "at": "1970-01-01T00:00:02Z",
                "command": {
                    "id": 7, "command": "false", "cwd": "/tmp",
                    "started_at": "1970-01-01T00:00:01Z",
                    "ended_at": "1970-01-01T00:00:01.250Z",
                    "exit_code": 1, "duration_ms": 250,
                    "output_start": 10, "output_end": 12,
                },
            })
        );
    }

    #[test]
    fn a_state_change_carries_the_state_before_and_the_terminal_now() {
        let terminal = TerminalActivity {
            state: TerminalState::WaitingForInput,
            progress: Some(Progress::Percent(40)),
            notification: Some(Notification {
                text: "done?".into(),
                at: at(1_500),
            }),
            cwd: None,
            integrated: true,
            running_command: Some(3),
        };
        let body: Value = serde_json::from_str(&state_changed(
            &session(),
            Some(TerminalState::Running),
            &terminal,
            at(2_000).into(),
        ))
        .expect("JSON");
        assert_eq!(body["event"], "state_changed");
        assert_eq!(body["state"], "waiting_for_input");
        assert_eq!(body["previous_state"], "running");
        assert_eq!(
            body["last_notification"],
            json!({"text": "done?", "at": "1970-01-01T00:00:01.500Z"})
        );
        assert_eq!(body["progress"], json!({"kind": "normal", "percent": 40}));
        assert_eq!(body["cwd"], Value::Null);
        assert_eq!(body["shell_integration"], true);
        assert_eq!(body["running_command_id"], 3);
        let first = state_changed(&session(), None, &TerminalActivity::default(), at(0).into());
        let first: Value = serde_json::from_str(&first).expect("JSON");
        assert_eq!(first["previous_state"], Value::Null);
    }
}
