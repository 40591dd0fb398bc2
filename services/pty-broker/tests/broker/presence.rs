//! Presence: the broker names every attached stream (the holder its ticket named, its role now,
//! since when, whether it is typing) in its `AttachmentsChanged` events.

use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use pb::broker_event::Event;
use ptyhub_attach_ticket::{TicketHolder, TicketRole};
use ptyhub_proto::broker::v1 as pb;
use tonic::codec::Streaming;
use uuid::Uuid;

use crate::support::{self, AttachedClient, Backend, PATIENCE, TestBroker, authorized};

/// One attendee as the test compares it: principal, role, surface, typing.
type Seen = (String, pb::Role, String, bool);

fn seen(changed: &pb::AttachmentsChanged) -> Vec<Seen> {
    changed
        .presence
        .iter()
        .map(|attendee| {
            (
                attendee.principal.clone(),
                pb::Role::try_from(attendee.role).unwrap_or(pb::Role::Unspecified),
                attendee.surface.clone(),
                attendee.typing,
            )
        })
        .collect()
}

fn attendee(principal: &str, role: pb::Role, surface: &str, typing: bool) -> Seen {
    (principal.to_owned(), role, surface.to_owned(), typing)
}

/// Waits for the session's presence to be `wanted`; says what it saw last when it never is.
async fn presence_becomes(
    events: &mut Streaming<pb::BrokerEvent>,
    session_id: &str,
    wanted: &[Seen],
) -> anyhow::Result<pb::AttachmentsChanged> {
    let mut last = Vec::new();
    let found = tokio::time::timeout(PATIENCE, async {
        loop {
            let event = events.message().await?.context("event stream ended")?;
            if let Some(Event::AttachmentsChanged(changed)) = event.event
                && changed.session_id == session_id
            {
                last = seen(&changed);
                if last == wanted {
                    return anyhow::Ok(changed);
                }
            }
        }
    })
    .await;
    match found {
        Ok(changed) => changed,
        Err(_) => anyhow::bail!("presence never became {wanted:?}; last seen {last:?}"),
    }
}

async fn attach_as(
    broker: &TestBroker,
    session_id: &str,
    role: pb::Role,
    holder: Option<TicketHolder>,
) -> anyhow::Result<AttachedClient> {
    let uuid = Uuid::parse_str(session_id)?;
    let ticket_role = match role {
        pb::Role::Controller => TicketRole::Controller,
        _ => TicketRole::Viewer,
    };
    let expires_at = SystemTime::now() + Duration::from_secs(300);
    let ticket = match &holder {
        Some(holder) => broker
            .ticket_key
            .sign_for(uuid, ticket_role, expires_at, holder),
        None => broker.ticket_key.sign(uuid, ticket_role, expires_at),
    };
    Ok(broker
        .attach_with(pb::Hello {
            ticket,
            session_id: session_id.to_owned(),
            role: role as i32,
            size: None,
            since: None,
            snapshot: false,
            present_only: false,
        })
        .await?)
}

fn holder(principal: &str, surface: &str) -> Option<TicketHolder> {
    Some(TicketHolder {
        principal: principal.to_owned(),
        surface: surface.to_owned(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_names_each_stream_and_shows_typing_until_it_stops() -> anyhow::Result<()> {
    use pb::Role::{Controller, Viewer};
    support::init_logging();
    let broker = TestBroker::start(Backend::Local).await?;
    let session = broker.spawn_sh("cat").await?;
    let id = session.session_id.clone();
    let mut events = broker
        .client
        .clone()
        .watch_events(authorized(pb::WatchEventsRequest {}))
        .await?
        .into_inner();

    let alice = attach_as(&broker, &id, Controller, holder("alice", "web")).await?;
    let _bob = attach_as(&broker, &id, Viewer, holder("bob", "cli")).await?;
    let changed = presence_becomes(
        &mut events,
        &id,
        &[
            attendee("alice", Controller, "web", false),
            attendee("bob", Viewer, "cli", false),
        ],
    )
    .await?;
    assert_eq!((changed.controllers, changed.viewers), (1, 1));
    assert!(
        changed
            .presence
            .iter()
            .all(|attendee| attendee.since.is_some()),
        "every attendee says since when"
    );

    // Alice types: she shows typing, then, a few quiet seconds later, not.
    alice.send_input(&b"x"[..]).await?;
    presence_becomes(
        &mut events,
        &id,
        &[
            attendee("alice", Controller, "web", true),
            attendee("bob", Viewer, "cli", false),
        ],
    )
    .await?;
    presence_becomes(
        &mut events,
        &id,
        &[
            attendee("alice", Controller, "web", false),
            attendee("bob", Viewer, "cli", false),
        ],
    )
    .await?;

    // A second tab of Alice's takes over: the first reads on as a viewer. A ticket that names
    // nobody is listed with empty names.
    let _alice_again = attach_as(&broker, &id, Controller, holder("alice", "web")).await?;
    let _unnamed = attach_as(&broker, &id, Viewer, None).await?;
    presence_becomes(
        &mut events,
        &id,
        &[
            attendee("alice", Viewer, "web", false),
            attendee("bob", Viewer, "cli", false),
            attendee("alice", Controller, "web", false),
            attendee("", Viewer, "", false),
        ],
    )
    .await?;

    // Leaving takes the stream off the list.
    drop(alice);
    presence_becomes(
        &mut events,
        &id,
        &[
            attendee("bob", Viewer, "cli", false),
            attendee("alice", Controller, "web", false),
            attendee("", Viewer, "", false),
        ],
    )
    .await?;
    broker.stop().await
}
