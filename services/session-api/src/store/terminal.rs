//! A session's terminal activity as its record keeps it: a JSON object in
//! `terminal_sessions.terminal`, written when its broker reports a change and only then.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Condition, Expr};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::{Value, json};
use uuid::Uuid;

use super::entities::terminal_session;
use super::{Store, load_session};
use crate::domain::{Session, SessionStatus, TerminalActivity};
use crate::error::Error;
use ptyhub_model::{Notification, Progress, TerminalState};

/// The stored form: the contract's spellings, so that the column reads as the API answers.
pub(super) fn to_json(terminal: &TerminalActivity) -> String {
    let at = |at: std::time::SystemTime| DateTime::<Utc>::from(at).to_rfc3339();
    json!({
        "state": terminal.state.as_str(),
        "progress": terminal.progress.map(|progress| json!({
            "kind": progress.kind(),
            "percent": progress.percent(),
        })),
        "notification": terminal.notification.as_ref().map(|notification| json!({
            "text": notification.text,
            "at": at(notification.at),
        })),
        "cwd": terminal.cwd,
        "integrated": terminal.integrated,
        "running_command": terminal.running_command,
    })
    .to_string()
}

pub(super) fn from_json(text: &str) -> Result<TerminalActivity, Error> {
    let corrupt = |what: &str| Error::CorruptRecord(format!("terminal: {what}"));
    let value: Value = serde_json::from_str(text).map_err(|error| corrupt(&error.to_string()))?;
    let state = value["state"]
        .as_str()
        .and_then(TerminalState::parse)
        .ok_or_else(|| corrupt("state"))?;
    let progress = match &value["progress"] {
        Value::Null => None,
        progress => Some(
            Progress::from_parts(
                progress["kind"].as_str().unwrap_or_default(),
                progress["percent"]
                    .as_u64()
                    .map(|percent| percent.min(100) as u8),
            )
            .ok_or_else(|| corrupt("progress"))?,
        ),
    };
    let notification = match &value["notification"] {
        Value::Null => None,
        notification => Some(Notification {
            text: notification["text"].as_str().unwrap_or_default().to_owned(),
            at: notification["at"]
                .as_str()
                .and_then(|at| DateTime::parse_from_rfc3339(at).ok())
                .map(|at| at.with_timezone(&Utc).into())
                .ok_or_else(|| corrupt("notification.at"))?,
        }),
    };
    Ok(TerminalActivity {
        state,
        progress,
        notification,
        cwd: value["cwd"].as_str().map(str::to_owned),
        integrated: value["integrated"].as_bool().unwrap_or(false),
        running_command: value["running_command"].as_u64(),
    })
}

impl Store {
    /// Records what the terminal of a session that is not closed is doing, unless the record
    /// says so already. The session as it is now when the row changed.
    pub async fn record_terminal(
        &self,
        session_id: Uuid,
        terminal: &TerminalActivity,
    ) -> Result<Option<Session>, Error> {
        let stored = to_json(terminal);
        let transaction = self.begin_write().await?;
        let changed = terminal_session::Entity::update_many()
            .col_expr(
                terminal_session::Column::Terminal,
                Expr::value(Some(stored.clone())),
            )
            .filter(terminal_session::Column::Id.eq(session_id))
            .filter(terminal_session::Column::Status.ne(SessionStatus::Closed.as_str()))
            .filter(
                Condition::any()
                    .add(terminal_session::Column::Terminal.is_null())
                    .add(terminal_session::Column::Terminal.ne(stored)),
            )
            .exec(&transaction)
            .await?;
        if changed.rows_affected == 0 {
            return Ok(None);
        }
        let session = load_session(&transaction, session_id).await?;
        transaction.commit().await?;
        Ok(Some(session))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn the_stored_form_reads_back_as_written() {
        let terminal = TerminalActivity {
            state: TerminalState::WaitingForInput,
            progress: Some(Progress::Paused(40)),
            notification: Some(Notification {
                text: "needs \"you\"".to_owned(),
                at: UNIX_EPOCH + Duration::from_millis(1_764_900_000_123),
            }),
            cwd: Some("/tmp/a b".to_owned()),
            integrated: true,
            running_command: Some(12),
        };
        assert_eq!(from_json(&to_json(&terminal)).unwrap(), terminal);
        let empty = TerminalActivity::default();
        assert_eq!(from_json(&to_json(&empty)).unwrap(), empty);
        assert!(from_json("{\"state\":\"busy\"}").is_err());
        assert!(from_json("not json").is_err());
    }
}
