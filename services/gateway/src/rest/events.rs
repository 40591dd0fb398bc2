//! `GET .../terminal/events`: an instance's session changes as Server-Sent Events, for pages
//! that follow renames, creates, closes, status changes and what each terminal is doing live.
//! It is session-api's `WatchSessions` for one instance, opened first and then preceded by the
//! list of live sessions, so a client that (re)connects sees the whole state once and every
//! change after it. A change of what a terminal is doing is a `state_changed` event, followed
//! by one `command_started` or `command_finished` event for each command that started or ended
//! with it. A share link's credential, which does not read a session's commands, gets no
//! command events and no working directory ([`crate::scope::SeenBy`]).

use std::convert::Infallible;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt, stream};

use super::bodies::{CommandBody, CommandEventBody, SessionBody, SessionList};
use super::extract::{Caller, InstancePath, InstanceScope};
use crate::domain::{ChangeKind, SessionChange};
use crate::error::{ApiError, ErrorBody};
use crate::scope::SeenBy as _;
use crate::state::AppState;

/// The event that opens every stream: `{"sessions": [...]}`, the live sessions as listed.
pub const SESSIONS_EVENT: &str = "sessions";

/// The event of a change of what a terminal is doing (`ChangeKind::Terminal`): the session.
pub const STATE_CHANGED_EVENT: &str = "state_changed";
/// A command that started and still runs: `{"session_id", "command"}`.
pub const COMMAND_STARTED_EVENT: &str = "command_started";
/// A command that ended: `{"session_id", "command"}`.
pub const COMMAND_FINISHED_EVENT: &str = "command_finished";

/// Session changes of one instance: first a `sessions` event with the live sessions, then one
/// event per change, named by its kind (`created`, `renamed`, `status`, `closed`,
/// `attachments`, `screen`, `state_changed`), whose data is the session after the change; a
/// `state_changed` is followed by a `command_started` or `command_finished` event
/// (`{"session_id", "command"}`) for each command that started or ended with it.
#[utoipa::path(
    get, path = "/api/v1/instances/{iid}/terminal/events", tag = "sessions",
    params(InstancePath),
    responses(
        (status = 200, description = "text/event-stream; see CONTRACT.md", content_type = "text/event-stream"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn session_events(
    State(state): State<AppState>,
    Caller(principal): Caller,
    scope: InstanceScope,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let instance = scope.authorize(&state, &principal).await?;
    // Held while the events flow: they count among the principal's streams.
    let (slot, credential) = state.streams.open(&principal)?.into_parts();
    // Watch before listing: a change between the two is then seen (twice at worst, which a
    // client applying "the session as it is now" does not notice), never missed.
    let changes = state.upstreams.watch_sessions(&instance.id).await?;
    let sessions = state
        .upstreams
        .list_sessions(&instance.id, false)
        .await?
        .into_iter()
        .filter(|session| principal.access.allows_session_record(session))
        .map(|session| SessionBody::from(session.seen_by(&principal.access)))
        .collect();
    let first = json_event(SESSIONS_EVENT, &SessionList { sessions });
    let instance_id = instance.id.clone();
    let access = principal.access.clone();
    let changes = changes
        .take_while(|change| {
            // A failed stream ends the events; the client reconnects and lists again.
            if let Err(error) = change {
                tracing::info!(error = %error, "session change stream ended");
            }
            std::future::ready(change.is_ok())
        })
        .flat_map(move |change| {
            stream::iter(match change {
                Ok(change)
                    if change.session.instance_id.to_string() == instance_id
                        && access.allows_session_record(&change.session) =>
                {
                    change_events(change.seen_by(&access))
                }
                _ => Vec::new(),
            })
        });
    let shutdown = state.shutdown.clone();
    let events = stream::once(std::future::ready(first))
        .chain(changes)
        .map(move |event| {
            let _held = &slot;
            Ok(event)
        })
        // The stream ends with the gateway, so a watching page never holds up a shutdown, and
        // with the credential it was opened with.
        .take_until(async move {
            tokio::select! {
                () = shutdown.cancelled() => {}
                _ = credential.ended() => {}
            }
        });
    // A comment line this often keeps proxies and the browser from closing an idle stream.
    let keep_alive = KeepAlive::new().interval(state.events_keep_alive);
    Ok(Sse::new(events).keep_alive(keep_alive))
}

/// The events of one change: one named by its kind, whose data is the session; after a change
/// of what the terminal is doing, one more for each command that started or ended.
fn change_events(change: SessionChange) -> Vec<Event> {
    let SessionChange {
        kind,
        session,
        commands,
    } = change;
    if kind != ChangeKind::Terminal {
        return vec![json_event(kind.as_str(), &SessionBody::from(session))];
    }
    let session_id = session.id.to_string();
    let mut events = Vec::with_capacity(1 + commands.len());
    events.push(json_event(STATE_CHANGED_EVENT, &SessionBody::from(session)));
    events.extend(commands.into_iter().map(|command| {
        let name = if command.is_running() {
            COMMAND_STARTED_EVENT
        } else {
            COMMAND_FINISHED_EVENT
        };
        json_event(
            name,
            &CommandEventBody {
                session_id: session_id.clone(),
                command: CommandBody::from(command),
            },
        )
    }));
    events
}

fn json_event(name: &str, body: &impl serde::Serialize) -> Event {
    match Event::default().event(name).json_data(body) {
        Ok(event) => event,
        // Our own bodies always serialise; should one not, say so rather than end the stream.
        Err(error) => Event::default().event("error").data(error.to_string()),
    }
}
