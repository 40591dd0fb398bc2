//! Presence: the broker names every attached stream (the holder its ticket named, its role now,
//! since when, whether it is typing) in its `AttachmentsChanged` events. Control requests: a
//! viewer asks, the controller grants (the lease moves on the same streams) or declines.

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
    let ticket_role = match role {
        pb::Role::Controller => TicketRole::Controller,
        _ => TicketRole::Viewer,
    };
    attach_with_ticket_role(broker, session_id, role, ticket_role, holder).await
}

/// Attaches as `role` with a ticket for `ticket_role`: a viewer with a controller's ticket may
/// ask for control, one with a viewer's may not.
async fn attach_with_ticket_role(
    broker: &TestBroker,
    session_id: &str,
    role: pb::Role,
    ticket_role: TicketRole,
    holder: Option<TicketHolder>,
) -> anyhow::Result<AttachedClient> {
    let uuid = Uuid::parse_str(session_id)?;
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

/// Reads frames until one that `wanted` picks, skipping output and the rest.
async fn frame_where<T>(
    client: &mut AttachedClient,
    wanted: impl Fn(pb::server_frame::Frame) -> Option<T>,
) -> anyhow::Result<T> {
    loop {
        if let Some(found) = wanted(client.next_frame().await?) {
            return Ok(found);
        }
    }
}

async fn answer(client: &AttachedClient, request_id: u64, grant: bool) -> anyhow::Result<()> {
    client
        .send(pb::client_frame::Frame::AnswerControl(pb::AnswerControl {
            request_id,
            grant,
        }))
        .await
}

async fn request_control(client: &AttachedClient) -> anyhow::Result<()> {
    client
        .send(pb::client_frame::Frame::RequestControl(
            pb::RequestControl {},
        ))
        .await
}

fn error_frame(frame: pb::server_frame::Frame) -> Option<pb::Error> {
    match frame {
        pb::server_frame::Frame::Error(error) => Some(error),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_asks_for_control_and_a_grant_moves_the_lease_on_the_same_streams()
-> anyhow::Result<()> {
    use pb::Role::{Controller, Viewer};
    use pb::server_frame::Frame;
    support::init_logging();
    let broker = TestBroker::start(Backend::Local).await?;
    let session = broker.spawn_sh("cat").await?;
    let id = session.session_id.clone();
    let mut alice = attach_as(&broker, &id, Controller, holder("alice", "web")).await?;
    let mut bob = attach_with_ticket_role(
        &broker,
        &id,
        Viewer,
        TicketRole::Controller,
        holder("bob", "cli"),
    )
    .await?;
    let mut share = attach_as(&broker, &id, Viewer, holder("share:1", "web")).await?;

    // A viewer whose ticket only views may not ask; nor may anyone but the controller answer.
    request_control(&share).await?;
    let refused = frame_where(&mut share, error_frame).await?;
    assert_eq!(
        refused.code,
        tonic::Code::PermissionDenied as i32,
        "{refused:?}"
    );

    // Bob asks; Alice declines: Bob is told, nothing else changes.
    request_control(&bob).await?;
    let requested = frame_where(&mut alice, |frame| match frame {
        Frame::ControlRequested(requested) => Some(requested),
        _ => None,
    })
    .await?;
    let requester = requested
        .requester
        .context("the request names its requester")?;
    assert_eq!(
        (requester.principal.as_str(), requester.surface.as_str()),
        ("bob", "cli")
    );
    answer(&share, requested.request_id, true).await?;
    let refused = frame_where(&mut share, error_frame).await?;
    assert_eq!(
        refused.code,
        tonic::Code::PermissionDenied as i32,
        "{refused:?}"
    );
    answer(&alice, requested.request_id, false).await?;
    let declined = frame_where(&mut bob, |frame| match frame {
        Frame::ControlDeclined(declined) => Some(declined.request_id),
        _ => None,
    })
    .await?;
    assert_eq!(declined, requested.request_id);
    bob.send_input(&b"bob while declined\n"[..]).await?;
    let refused = frame_where(&mut bob, error_frame).await?;
    assert_eq!(
        refused.code,
        tonic::Code::PermissionDenied as i32,
        "{refused:?}"
    );

    // Bob asks again; Alice grants: the lease moves, both streams stay open.
    request_control(&bob).await?;
    let requested = frame_where(&mut alice, |frame| match frame {
        Frame::ControlRequested(requested) => Some(requested),
        _ => None,
    })
    .await?;
    answer(&alice, requested.request_id, true).await?;
    let role_of = |frame| match frame {
        Frame::RoleChanged(changed) => pb::Role::try_from(changed.role).ok(),
        _ => None,
    };
    assert_eq!(frame_where(&mut bob, role_of).await?, Controller);
    assert_eq!(frame_where(&mut alice, role_of).await?, Viewer);
    bob.send_input(&b"typed by bob\n"[..]).await?;
    bob.read_until(b"typed by bob").await?;
    alice.send_input(&b"alice after the grant\n"[..]).await?;
    let refused = frame_where(&mut alice, error_frame).await?;
    assert_eq!(
        refused.code,
        tonic::Code::PermissionDenied as i32,
        "{refused:?}"
    );
    broker.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_asking_a_thousand_times_is_refused_and_the_controller_stays() -> anyhow::Result<()>
{
    use pb::Role::{Controller, Viewer};
    use pb::server_frame::Frame;
    support::init_logging();
    let broker = TestBroker::start(Backend::Local).await?;
    let session = broker.spawn_sh("cat").await?;
    let id = session.session_id.clone();
    let mut alice = attach_as(&broker, &id, Controller, holder("alice", "web")).await?;
    let mut bob = attach_with_ticket_role(
        &broker,
        &id,
        Viewer,
        TicketRole::Controller,
        holder("bob", "cli"),
    )
    .await?;

    // The first request is taken; each repeat while it waits is refused on Bob's own stream
    // (read as it comes, so that neither side's buffer fills).
    request_control(&bob).await?;
    for _ in 1..1000 {
        request_control(&bob).await?;
        let refused = frame_where(&mut bob, error_frame).await?;
        assert_eq!(
            refused.code,
            tonic::Code::FailedPrecondition as i32,
            "{refused:?}"
        );
    }

    // Alice is still attached and in control, and was told of one request.
    alice.send_input(&b"alice still types\n"[..]).await?;
    let mut output = Vec::new();
    let mut requests = Vec::new();
    while !output
        .windows(b"alice still types".len())
        .any(|window| window == b"alice still types")
    {
        match alice.next_frame().await? {
            Frame::Output(chunk) => output.extend_from_slice(&chunk.data),
            Frame::ControlRequested(requested) => requests.push(requested.request_id),
            Frame::Error(error) => anyhow::bail!("alice's input was refused: {error:?}"),
            _ => {}
        }
    }
    assert_eq!(requests.len(), 1, "one request per stream: {requests:?}");
    answer(&alice, requests[0], true).await?;
    let role_of = |frame| match frame {
        Frame::RoleChanged(changed) => pb::Role::try_from(changed.role).ok(),
        _ => None,
    };
    assert_eq!(frame_where(&mut bob, role_of).await?, Controller);
    broker.stop().await
}

fn role_changed(frame: pb::server_frame::Frame) -> Option<pb::Role> {
    match frame {
        pb::server_frame::Frame::RoleChanged(changed) => pb::Role::try_from(changed.role).ok(),
        _ => None,
    }
}

async fn set_control_mode(
    broker: &TestBroker,
    session_id: &str,
    control_mode: i32,
) -> Result<pb::SessionInfo, tonic::Status> {
    let request = pb::SetControlModeRequest {
        session_id: session_id.to_owned(),
        control_mode,
    };
    let response = broker
        .client
        .clone()
        .set_control_mode(authorized(request))
        .await?;
    Ok(response.into_inner().session.unwrap_or_default())
}

/// Sums the `InputTyped` reports of `session_id` per principal until every principal of
/// `wanted` reached its count; says what it counted when that never happens.
async fn typed_becomes(
    events: &mut Streaming<pb::BrokerEvent>,
    session_id: &str,
    wanted: &[(&str, u64)],
) -> anyhow::Result<()> {
    let mut counted: std::collections::BTreeMap<String, u64> = Default::default();
    let reached = |counted: &std::collections::BTreeMap<String, u64>| {
        wanted
            .iter()
            .all(|(principal, bytes)| counted.get(*principal) == Some(bytes))
            && counted.len() == wanted.len()
    };
    let found = tokio::time::timeout(PATIENCE, async {
        while !reached(&counted) {
            let event = events.message().await?.context("event stream ended")?;
            if let Some(Event::Typed(typed)) = event.event
                && typed.session_id == session_id
            {
                *counted.entry(typed.principal).or_default() += typed.bytes;
            }
        }
        anyhow::Ok(())
    })
    .await;
    match found {
        Ok(done) => done,
        Err(_) => anyhow::bail!("typed never became {wanted:?}; counted {counted:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_controllers_type_alternately_in_order_each_attributed() -> anyhow::Result<()> {
    use pb::Role::{Controller, Viewer};
    support::init_logging();
    let broker = TestBroker::start(Backend::Local).await?;
    let mut request = broker.spawn_request(&["cat"], "");
    request.control_mode = pb::ControlMode::Shared as i32;
    let session = broker.spawn_as(request).await?;
    let id = session.session_id.clone();
    let mut events = broker
        .client
        .clone()
        .watch_events(authorized(pb::WatchEventsRequest {}))
        .await?
        .into_inner();

    let mut alice = attach_as(&broker, &id, Controller, holder("alice", "web")).await?;
    let mut bob = attach_as(&broker, &id, Controller, holder("bob", "cli")).await?;
    let mut share = attach_as(&broker, &id, Viewer, holder("share:1", "web")).await?;
    presence_becomes(
        &mut events,
        &id,
        &[
            attendee("alice", Controller, "web", false),
            attendee("bob", Controller, "cli", false),
            attendee("share:1", Viewer, "web", false),
        ],
    )
    .await?;

    // They take turns, each waiting for its own echo: every input goes in whole and in order,
    // and nobody was taken over (a takeover would have refused Alice's second line).
    let turns: [(&str, &str); 4] = [
        ("alice", "alice one"),
        ("bob", "bob one"),
        ("alice", "alice two"),
        ("bob", "bob two"),
    ];
    for (typist, line) in turns {
        let client = if typist == "alice" {
            &mut alice
        } else {
            &mut bob
        };
        client.send_input(format!("{line}\n")).await?;
        // The terminal's echo, then `cat`'s copy: the line is through before the next one.
        client
            .read_until(format!("{line}\r\n{line}").as_bytes())
            .await?;
    }
    let seen = String::from_utf8(share.read_until(b"bob two\r\nbob two").await?)?;
    // Each line twice (the echo, `cat`'s copy), one typist after the other.
    let mut lines: Vec<&str> = seen
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    lines.dedup();
    assert_eq!(lines, ["alice one", "bob one", "alice two", "bob two"]);
    // The audit's tally counts each principal's bytes apart.
    typed_becomes(&mut events, &id, &[("alice", 20), ("bob", 16)]).await?;
    broker.stop().await
}

/// In the shared mode nobody needs control: a stream's request (here a viewer whose ticket may
/// control, a controller already) and a standing one are refused alike, FAILED_PRECONDITION
/// with the one reason, and nothing waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_shared_mode_a_watchers_request_is_granted_at_once_and_a_standing_one_refused()
-> anyhow::Result<()> {
    use pb::Role::{Controller, Viewer};
    support::init_logging();
    let broker = TestBroker::start(Backend::Local).await?;
    let mut request = broker.spawn_request(&["cat"], "");
    request.control_mode = pb::ControlMode::Shared as i32;
    let session = broker.spawn_as(request).await?;
    let id = session.session_id.clone();
    let mut bob = attach_with_ticket_role(
        &broker,
        &id,
        Viewer,
        TicketRole::Controller,
        holder("bob", "cli"),
    )
    .await?;
    // Attached to watch, Bob watches; asked, he types, with nobody to answer.
    bob.send_input(&b"not yet\n"[..]).await?;
    let refused = frame_where(&mut bob, error_frame).await?;
    assert_eq!(
        tonic::Code::from(refused.code),
        tonic::Code::PermissionDenied,
        "{refused:?}"
    );
    request_control(&bob).await?;
    assert_eq!(frame_where(&mut bob, role_changed).await?, Controller);
    bob.send_input(&b"bob asked and types\n"[..]).await?;
    bob.read_until(b"bob asked and types\r\n").await?;
    request_control(&bob).await?;
    let again = frame_where(&mut bob, error_frame).await?;
    assert_eq!(
        tonic::Code::from(again.code),
        tonic::Code::FailedPrecondition,
        "{again:?}"
    );

    let standing = broker
        .client
        .clone()
        .request_control_for(authorized(pb::StandingControlRequest {
            session_id: id.clone(),
            requester: Some(pb::TicketHolder {
                principal: "carol".to_owned(),
                surface: "rest".to_owned(),
            }),
        }))
        .await
        .expect_err("a standing request to a shared session");
    assert_eq!(
        (standing.code(), standing.message()),
        (
            tonic::Code::FailedPrecondition,
            "the session is shared: nobody answers requests; attach to control, or ask on an \
             attached stream, to type"
        )
    );
    let state = broker
        .client
        .clone()
        .get_control(authorized(pb::GetControlRequest { session_id: id }))
        .await?
        .into_inner();
    assert!(state.requests.is_empty(), "{state:?}");
    broker.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_control_mode_moves_roles_without_closing_a_stream() -> anyhow::Result<()> {
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
    let mut alice = attach_as(&broker, &id, Controller, holder("alice", "web")).await?;
    let mut bob = attach_with_ticket_role(
        &broker,
        &id,
        Viewer,
        TicketRole::Controller,
        holder("bob", "cli"),
    )
    .await?;
    let mut share = attach_as(&broker, &id, Viewer, holder("share:1", "web")).await?;

    // To shared: Bob attached to watch, and watches on until he asks; then, with nobody to
    // answer, he controls at once. The share never does.
    let info = set_control_mode(&broker, &id, pb::ControlMode::Shared as i32).await?;
    assert_eq!((info.controllers, info.viewers), (1, 2));
    presence_becomes(
        &mut events,
        &id,
        &[
            attendee("alice", Controller, "web", false),
            attendee("bob", Viewer, "cli", false),
            attendee("share:1", Viewer, "web", false),
        ],
    )
    .await?;
    request_control(&bob).await?;
    assert_eq!(frame_where(&mut bob, role_changed).await?, Controller);
    presence_becomes(
        &mut events,
        &id,
        &[
            attendee("alice", Controller, "web", false),
            attendee("bob", Controller, "cli", false),
            attendee("share:1", Viewer, "web", false),
        ],
    )
    .await?;
    bob.send_input(&b"bob shares\n"[..]).await?;
    alice.read_until(b"bob shares").await?;
    share.send_input(&b"the share may not\n"[..]).await?;
    let refused = frame_where(&mut share, error_frame).await?;
    assert_eq!(
        refused.code,
        tonic::Code::PermissionDenied as i32,
        "{refused:?}"
    );

    // Back to exclusive: Alice, attached first, keeps control; Bob reads on as a viewer.
    set_control_mode(&broker, &id, pb::ControlMode::Exclusive as i32).await?;
    assert_eq!(frame_where(&mut bob, role_changed).await?, Viewer);
    presence_becomes(
        &mut events,
        &id,
        &[
            attendee("alice", Controller, "web", false),
            attendee("bob", Viewer, "cli", false),
            attendee("share:1", Viewer, "web", false),
        ],
    )
    .await?;
    bob.send_input(&b"bob no longer\n"[..]).await?;
    let refused = frame_where(&mut bob, error_frame).await?;
    assert_eq!(
        refused.code,
        tonic::Code::PermissionDenied as i32,
        "{refused:?}"
    );
    alice.send_input(&b"alice still types\n"[..]).await?;
    bob.read_until(b"alice still types").await?;

    // An unknown or missing mode is refused and changes nothing; so is a spawn with one.
    for bad in [0, 99] {
        let refused = set_control_mode(&broker, &id, bad)
            .await
            .expect_err("a bad mode is refused");
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    }
    let mut request = broker.spawn_request(&["cat"], "");
    request.control_mode = 99;
    let refused = broker.spawn_as(request).await.expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("control mode"), "{refused:?}");
    alice.send_input(&b"alice after the refusals\n"[..]).await?;
    alice.read_until(b"alice after the refusals").await?;
    broker.stop().await
}
