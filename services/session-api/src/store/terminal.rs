//! A session's terminal activity as its record keeps it: a JSON object in
//! `terminal_sessions.terminal`, written when its broker reports a change and only then, with
//! the webhook deliveries the report makes queued in the same transaction.

use sea_orm::sea_query::{Condition, Expr};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseTransaction, DbBackend, EntityTrait, QueryFilter,
    QuerySelect,
};
use uuid::Uuid;

use super::entities::terminal_session;
use super::session_writes::{lock_sessions_in_order, retrying_deadlocks};
use super::webhooks::{TerminalEvents, queue_terminal_events};
use super::{Store, load_session};
use crate::domain::{Command, Session, SessionStatus, TerminalActivity};
use crate::error::Error;
use ptyhub_model::TerminalState;

/// The stored form: the contract's JSON of what a terminal is doing (the model's serde), so
/// that the column reads as the API answers.
pub(super) fn to_json(terminal: &TerminalActivity) -> String {
    serde_json::to_string(terminal).expect("a terminal activity always serializes")
}

/// The stored form read back; the keys stored before the column took the contract's
/// (`notification`, `integrated`, `running_command`) read too.
pub(super) fn from_json(text: &str) -> Result<TerminalActivity, Error> {
    serde_json::from_str(text).map_err(|error| Error::CorruptRecord(format!("terminal: {error}")))
}

/// What recording a terminal report did.
#[derive(Debug)]
pub struct RecordedTerminal {
    /// The session as it is now, when the report changed its record.
    pub changed: Option<Session>,
    /// How many webhook deliveries the report queued.
    pub webhook_deliveries: usize,
}

/// One report of what a session's terminal is doing, for [`Store::record_terminals`].
#[derive(Debug, Clone, Copy)]
pub struct TerminalReport<'a> {
    pub session_id: Uuid,
    pub terminal: &'a TerminalActivity,
    /// The commands that started or ended since the session's last report.
    pub commands: &'a [Command],
}

impl Store {
    /// Records what the terminal of a session that is not closed is doing, unless the record
    /// says so already, and queues in the same transaction the webhook deliveries the report
    /// makes: a `state_changed` when this write changed the state (so one replica alone
    /// queues it), a `command_finished` for each of `commands` that ended.
    pub async fn record_terminal(
        &self,
        session_id: Uuid,
        terminal: &TerminalActivity,
        commands: &[Command],
    ) -> Result<RecordedTerminal, Error> {
        let report = TerminalReport {
            session_id,
            terminal,
            commands,
        };
        let mut recorded = self.record_terminals(&[report]).await?;
        Ok(recorded.remove(0))
    }

    /// Records `reports` as [`Store::record_terminal`] records each, in their order, in one
    /// transaction: a broker's burst of reports (a thousand terminals that start working at
    /// once) costs one write rather than one each. Answers one [`RecordedTerminal`] per report,
    /// in the same order.
    ///
    /// On PostgreSQL the sessions' rows are locked in id order first, so that two replicas
    /// recording overlapping bursts never deadlock each other; a deadlock with some other
    /// transaction is retried.
    pub async fn record_terminals(
        &self,
        reports: &[TerminalReport<'_>],
    ) -> Result<Vec<RecordedTerminal>, Error> {
        retrying_deadlocks("terminal reports", || self.record_terminals_once(reports)).await
    }

    async fn record_terminals_once(
        &self,
        reports: &[TerminalReport<'_>],
    ) -> Result<Vec<RecordedTerminal>, Error> {
        if reports.is_empty() {
            return Ok(Vec::new());
        }
        let transaction = self.begin_write().await?;
        let mut sessions: Vec<Uuid> = reports.iter().map(|report| report.session_id).collect();
        sessions.sort_unstable();
        sessions.dedup();
        lock_sessions_in_order(&transaction, sessions.into_iter()).await?;
        let mut recorded = Vec::with_capacity(reports.len());
        for report in reports {
            recorded.push(record_one(&transaction, report).await?);
        }
        // Nothing written and nothing queued: the transaction ends without a commit.
        if recorded
            .iter()
            .any(|recorded| recorded.changed.is_some() || recorded.webhook_deliveries > 0)
        {
            transaction.commit().await?;
        }
        Ok(recorded)
    }
}

/// One report of [`Store::record_terminals`], within its transaction.
async fn record_one(
    transaction: &DatabaseTransaction,
    report: &TerminalReport<'_>,
) -> Result<RecordedTerminal, Error> {
    let TerminalReport {
        session_id,
        terminal,
        commands,
    } = *report;
    let stored = to_json(terminal);
    let previous_state = stored_state(transaction, session_id).await?;
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
        .exec(transaction)
        .await?;
    let changed = if changed.rows_affected == 0 {
        None
    } else {
        Some(load_session(transaction, session_id).await?)
    };
    let finished: Vec<&Command> = commands
        .iter()
        .filter(|command| command.ended_at.is_some())
        .collect();
    let session = match &changed {
        Some(session) => Some(session.clone()),
        None if !finished.is_empty() => Some(load_session(transaction, session_id).await?),
        None => None,
    };
    let webhook_deliveries = match &session {
        Some(session) => {
            let state_changed = changed
                .as_ref()
                .filter(|_| previous_state != Some(terminal.state))
                .map(|_| (previous_state, terminal));
            queue_terminal_events(
                transaction,
                TerminalEvents {
                    session,
                    state_changed,
                    finished,
                },
            )
            .await?
        }
        None => 0,
    };
    Ok(RecordedTerminal {
        changed,
        webhook_deliveries,
    })
}

/// The state the record holds for a session, read under the row's lock on PostgreSQL, so that
/// of two replicas recording the same report the second sees the first one's write.
async fn stored_state(
    transaction: &DatabaseTransaction,
    session_id: Uuid,
) -> Result<Option<TerminalState>, Error> {
    let mut query = terminal_session::Entity::find_by_id(session_id)
        .select_only()
        .column(terminal_session::Column::Terminal);
    if transaction.get_database_backend() == DbBackend::Postgres {
        query = query.lock_exclusive();
    }
    let stored: Option<Option<String>> = query.into_tuple().one(transaction).await?;
    Ok(stored
        .flatten()
        .and_then(|text| from_json(&text).ok())
        .map(|terminal| terminal.state))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptyhub_model::{Notification, Progress};
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

    /// A row written before the column took the contract's keys, as `to_json` wrote it then.
    const OLDER_ROW: &str = r#"{"cwd":"/tmp/a b","integrated":true,"notification":{"at":"2025-12-05T01:20:00.123+00:00","text":"needs you"},"progress":{"kind":"paused","percent":40},"running_command":12,"state":"waiting_for_input"}"#;

    #[test]
    fn a_row_stored_in_the_older_keys_reads_as_it_was_meant() {
        let terminal = from_json(OLDER_ROW).expect("an older row reads");
        assert_eq!(
            terminal,
            TerminalActivity {
                state: TerminalState::WaitingForInput,
                progress: Some(Progress::Paused(40)),
                notification: Some(Notification {
                    text: "needs you".to_owned(),
                    at: UNIX_EPOCH + Duration::from_millis(1_764_897_600_123),
                }),
                cwd: Some("/tmp/a b".to_owned()),
                integrated: true,
                running_command: Some(12),
            }
        );
        // Rewritten, it takes the contract's keys.
        let rewritten: serde_json::Value = serde_json::from_str(&to_json(&terminal)).unwrap();
        assert_eq!(rewritten["running_command_id"], 12);
        assert_eq!(rewritten["shell_integration"], true);
        assert_eq!(rewritten["last_notification"]["text"], "needs you");
    }
}
