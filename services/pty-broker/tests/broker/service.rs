//! The broker as a gRPC service beyond Attach: the lifecycle event stream, health, reflection
//! and the service token.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use pb::broker_event::Event;
use ptyhub_proto::broker::v1 as pb;
use tonic::Code;
use tonic::codec::Streaming;

use crate::support::{self, Backend, PATIENCE, TestBroker, authorized};

async fn next_event(events: &mut Streaming<pb::BrokerEvent>) -> anyhow::Result<Event> {
    let event = tokio::time::timeout(PATIENCE, events.message())
        .await
        .context("no event in time")??
        .context("event stream ended")?;
    ensure!(event.at.is_some(), "events carry their time");
    event.event.context("empty event")
}

/// Skips events until one matches.
async fn wait_for(
    events: &mut Streaming<pb::BrokerEvent>,
    wanted: impl Fn(&Event) -> bool,
) -> anyhow::Result<Event> {
    loop {
        let event = next_event(events).await?;
        if wanted(&event) {
            return Ok(event);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_events_starts_with_a_snapshot_then_follows_each_session() -> anyhow::Result<()> {
    support::init_logging();
    let broker = TestBroker::start(Backend::Local).await?;
    let existing = broker.spawn_sh("sleep 600").await?;

    let mut client = broker.client.clone();
    let status = client
        .watch_events(pb::WatchEventsRequest {})
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    let mut events = client
        .watch_events(authorized(pb::WatchEventsRequest {}))
        .await?
        .into_inner();
    let Event::Snapshot(snapshot) = next_event(&mut events).await? else {
        anyhow::bail!("the first event must be a snapshot");
    };
    ensure!(uuid::Uuid::parse_str(&snapshot.boot_id).is_ok());
    assert_eq!(snapshot.sessions.len(), 1);
    assert_eq!(snapshot.sessions[0].session_id, existing.session_id);

    let session = broker
        .spawn_sh("printf 'ready\\n'; read line; printf 'bye\\n'; exit 7")
        .await?;
    let id = session.session_id.clone();
    let Event::Started(started) =
        wait_for(&mut events, |event| matches!(event, Event::Started(_))).await?
    else {
        unreachable!()
    };
    assert_eq!(
        started
            .session
            .context("started carries the session")?
            .session_id,
        id
    );

    // The script's first output.
    let Event::Activity(activity) = wait_for(
        &mut events,
        |event| matches!(event, Event::Activity(a) if a.session_id == id),
    )
    .await?
    else {
        unreachable!()
    };
    ensure!(activity.output_offset > 0 && activity.last_activity_at.is_some());

    let mut controller = broker.attach(&id, pb::Role::Controller, Some(0)).await?;
    let Event::AttachmentsChanged(attached) = wait_for(&mut events, |event| {
        matches!(event, Event::AttachmentsChanged(_))
    })
    .await?
    else {
        unreachable!()
    };
    assert_eq!(
        (
            attached.session_id.as_str(),
            attached.controllers,
            attached.viewers
        ),
        (id.as_str(), 1, 0)
    );
    controller.read_until(b"ready").await?;
    controller.send_input(&b"go\n"[..]).await?;
    let Event::Exited(exited) =
        wait_for(&mut events, |event| matches!(event, Event::Exited(_))).await?
    else {
        unreachable!()
    };
    assert_eq!(exited.session_id, id);
    assert_eq!(
        exited.exit,
        Some(pb::ExitStatus {
            code: 7,
            signal: None
        })
    );
    drop(controller);

    let reset = broker.reset(&existing.session_id).await?;
    let Event::Reset(reset_done) =
        wait_for(&mut events, |event| matches!(event, Event::Reset(_))).await?
    else {
        unreachable!()
    };
    assert_eq!(
        reset_done.session.map(|session| session.pid),
        Some(reset.pid)
    );

    broker.kill(&id).await?;
    let Event::Closed(closed) =
        wait_for(&mut events, |event| matches!(event, Event::Closed(_))).await?
    else {
        unreachable!()
    };
    assert_eq!(closed.session_id, id);
    assert_eq!(closed.reason, pb::CloseReason::Killed as i32);

    // List shows what is left, with counts.
    let listed = client
        .list(authorized(pb::ListRequest {}))
        .await?
        .into_inner()
        .sessions;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].session_id, existing.session_id);
    assert_eq!(listed[0].state, pb::SessionState::Running as i32);
    broker.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_both_reflection_versions_are_served() -> anyhow::Result<()> {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;

    support::init_logging();
    let broker = TestBroker::start(Backend::Local).await?;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", broker.address))?
        .connect()
        .await?;
    for service in ["", BROKER_SERVICE] {
        let health = HealthClient::new(channel.clone())
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await?
            .into_inner();
        assert_eq!(health.status, ServingStatus::Serving as i32, "{service:?}");
    }

    let expected = [
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
        BROKER_SERVICE,
    ];
    assert_eq!(
        ptyhub_test_support::reflection::services_listed_by_v1(channel.clone()).await?,
        expected
    );
    // What Python's grpcio-reflection and other older clients speak.
    assert_eq!(
        ptyhub_test_support::reflection::services_listed_by_v1alpha(channel).await?,
        expected
    );
    broker.stop().await
}

const BROKER_SERVICE: &str = "ptyhub.broker.v1.PtyBroker";

/// The idle timer through the real API: armed at spawn, cancelled by an attach (a session stays
/// while a client is attached, well past the timeout), armed again by the last detach, and then
/// the session is reaped with reason `IDLE_REAPED`. One timer per session: the one armed at
/// spawn would have closed the session while the client was attached.
///
/// No test clock: "the timeout has passed while the viewer was attached" is shown by a witness
/// session, spawned after the attach and left alone, being reaped; the event stream is in
/// order, so a close of the attached session by its spawn's timer would come before it. The
/// pinned timer logic itself is `broker.rs`'s paused-clock test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_cancels_the_idle_timer_and_the_last_detach_rearms_it() -> anyhow::Result<()> {
    support::init_logging();
    let timeout = Duration::from_secs(6);
    let broker = TestBroker::start_with(
        Backend::Local,
        Box::new(move |config| config.detached_timeout = timeout),
    )
    .await?;
    let mut events = broker
        .client
        .clone()
        .watch_events(authorized(pb::WatchEventsRequest {}))
        .await?
        .into_inner();
    let session = broker.spawn_sh("printf 'ready\\n'; sleep 600").await?;
    let id = session.session_id.clone();
    let viewer = broker.attach(&id, pb::Role::Viewer, Some(0)).await?;

    // The deadline armed at spawn passes while the viewer is attached: the witness, spawned
    // after both, is the first session closed.
    let witness = broker.spawn_sh("sleep 600").await?.session_id;
    let Event::Closed(first_closed) =
        wait_for(&mut events, |event| matches!(event, Event::Closed(_))).await?
    else {
        unreachable!()
    };
    assert_eq!(
        (first_closed.session_id.as_str(), first_closed.reason()),
        (witness.as_str(), pb::CloseReason::IdleReaped),
        "the witness is reaped first, not the attached session"
    );
    let info = broker.get(&id).await?;
    assert_eq!(info.state, pb::SessionState::Running as i32);
    assert_eq!(info.viewers, 1);

    drop(viewer);
    let Event::Closed(closed) = wait_for(
        &mut events,
        |event| matches!(event, Event::Closed(closed) if closed.session_id == id),
    )
    .await?
    else {
        unreachable!()
    };
    assert_eq!(closed.reason, pb::CloseReason::IdleReaped as i32);
    let status = broker.get(&id).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    broker.stop().await
}

/// A report's last activity as (seconds, nanoseconds), ordered as time is.
fn last_activity(activity: &pb::Activity) -> anyhow::Result<(i64, i32)> {
    let at = activity
        .last_activity_at
        .as_ref()
        .context("activity carries its time")?;
    Ok((at.seconds, at.nanos))
}

/// The next activity report of session `id` whose last activity is later than `after`.
async fn activity_after(
    events: &mut Streaming<pb::BrokerEvent>,
    id: &str,
    after: (i64, i32),
) -> anyhow::Result<(i64, i32)> {
    loop {
        let Event::Activity(activity) = wait_for(
            events,
            |event| matches!(event, Event::Activity(report) if report.session_id == id),
        )
        .await?
        else {
            unreachable!()
        };
        let at = last_activity(&activity)?;
        if at > after {
            return Ok(at);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attaching_and_detaching_move_the_last_activity() -> anyhow::Result<()> {
    support::init_logging();
    let broker = TestBroker::start(Backend::Local).await?;
    let mut events = broker
        .client
        .clone()
        .watch_events(authorized(pb::WatchEventsRequest {}))
        .await?
        .into_inner();
    // Prints once, then neither prints nor reads: nothing but clients can make it active.
    let session = broker.spawn_sh("printf 'ready\\n'; exec sleep 600").await?;
    let id = session.session_id.clone();
    let Event::Activity(printed) = wait_for(
        &mut events,
        |event| matches!(event, Event::Activity(report) if report.session_id == id),
    )
    .await?
    else {
        unreachable!()
    };
    let printed = last_activity(&printed)?;

    let mut viewer = broker.attach(&id, pb::Role::Viewer, Some(0)).await?;
    viewer.read_until(b"ready").await?;
    let attached = activity_after(&mut events, &id, printed).await?;
    drop(viewer);
    activity_after(&mut events, &id, attached).await?;
    Ok(())
}
