//! An attach that may see only the present (`Hello.present_only`, what the gateway asks for a
//! share link without history): whatever `since` and `snapshot` it names, it gets the screen as
//! it is, without scrollback, then the output from there on; never a byte of the ring from
//! before, nor a gap counting them. On a broker without screens, the output from then on alone.

use anyhow::{Context as _, bail, ensure};
use pty_broker::domain::TerminalSize;
use pty_broker::screen::{Screen, ScreenFormat, Snapshot};
use ptyhub_attach_ticket::TicketRole;
use ptyhub_proto::broker::v1 as pb;
use ptyhub_proto::broker::v1::server_frame::Frame;

use crate::support::{AttachedClient, Backend, TestBroker};

backend_scenarios!(
    a_present_only_attach_gets_the_screen_without_scrollback_and_no_replay,
    without_screens_a_present_only_attach_starts_at_the_end,
);

/// Scrollback the drawn screens keep: far more than the lines printed.
const SCROLLBACK: usize = 1000;

/// Prints `past-1` .. `past-40` (more lines than the 24 rows, so the first ones scroll into
/// the scrollback), then echoes its input; returns once `past-40` is on the screen.
async fn session_with_a_past(broker: &TestBroker) -> anyhow::Result<String> {
    let id = broker
        .spawn_sh("for i in $(seq 1 40); do echo past-$i; done; exec cat")
        .await?
        .session_id;
    broker
        .wait_for_screen(pb::WaitForScreenRequest {
            session_id: id.clone(),
            pattern: "past-40".to_owned(),
            timeout_ms: 20_000,
            ..Default::default()
        })
        .await?;
    Ok(id)
}

async fn viewer(
    broker: &TestBroker,
    session_id: &str,
    since: Option<u64>,
    snapshot: bool,
    present_only: bool,
) -> anyhow::Result<AttachedClient> {
    Ok(broker
        .attach_with(pb::Hello {
            ticket: broker.ticket(session_id, TicketRole::Viewer),
            session_id: session_id.to_owned(),
            role: pb::Role::Viewer as i32,
            size: None,
            since,
            snapshot,
            present_only,
        })
        .await?)
}

/// The lines of the snapshot that follows `connected`, drawn on a fresh emulator, scrollback
/// first, and how many of them are scrollback.
async fn drawn_snapshot(client: &mut AttachedClient) -> anyhow::Result<(Vec<String>, usize)> {
    let offset = client.connected().offset;
    let Frame::Snapshot(snapshot) = client.next_frame().await? else {
        bail!("expected a snapshot right after connected");
    };
    ensure!(snapshot.offset == offset, "the snapshot is as of connected");
    let size = snapshot.size.context("a snapshot has a size")?;
    let snapshot = Snapshot {
        offset: snapshot.offset,
        size: TerminalSize::new(size.cols, size.rows)?,
        data: snapshot.data,
    };
    let view = Screen::from_snapshot(&snapshot, SCROLLBACK).view(ScreenFormat::Text, SCROLLBACK);
    Ok((view.lines.clone(), view.scrollback_rows))
}

/// Types `line` as `controller` and reads `client`'s frames until its echo arrives: only
/// output, never a gap, and nothing of the session's past.
async fn only_new_output_follows(
    controller: &AttachedClient,
    client: &mut AttachedClient,
    line: &str,
) -> anyhow::Result<()> {
    controller.send_input(format!("{line}\n")).await?;
    let mut output = Vec::new();
    while !String::from_utf8_lossy(&output).contains(line) {
        match client.next_frame().await? {
            Frame::Output(chunk) => output.extend_from_slice(&chunk.data),
            Frame::Gap(gap) => bail!("a gap of {} bytes reached a present-only client", gap.lost),
            _ => {}
        }
    }
    let output = String::from_utf8_lossy(&output);
    ensure!(
        !output.contains("past-"),
        "the ring's past reached a present-only client: {output:?}"
    );
    Ok(())
}

async fn a_present_only_attach_gets_the_screen_without_scrollback_and_no_replay(
    backend: Backend,
) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let id = session_with_a_past(&broker).await?;
    let controller = broker.attach(&id, pb::Role::Controller, None).await?;

    // What an ordinary snapshot holds, so that the checks below can tell: the scrolled lines.
    let mut ordinary = viewer(&broker, &id, None, true, false).await?;
    let (lines, scrollback_rows) = drawn_snapshot(&mut ordinary).await?;
    ensure!(
        scrollback_rows > 0 && lines.iter().any(|line| line == "past-1"),
        "an ordinary snapshot keeps the scrollback: {lines:?}"
    );

    for (round, (since, snapshot)) in [
        (Some(0), false),
        (None, false),
        (Some(0), true),
        (None, true),
    ]
    .into_iter()
    .enumerate()
    {
        let mut present = viewer(&broker, &id, since, snapshot, true).await?;
        let (lines, scrollback_rows) = drawn_snapshot(&mut present).await?;
        ensure!(
            scrollback_rows == 0 && !lines.iter().any(|line| line == "past-1"),
            "since {since:?}, snapshot {snapshot}: scrollback reached a present-only client: {lines:?}"
        );
        ensure!(
            lines.iter().any(|line| line == "past-40"),
            "since {since:?}, snapshot {snapshot}: the present screen is missing: {lines:?}"
        );
        only_new_output_follows(&controller, &mut present, &format!("present-{round}")).await?;
    }
    broker.kill(&id).await?;
    broker.stop().await
}

async fn without_screens_a_present_only_attach_starts_at_the_end(
    backend: Backend,
) -> anyhow::Result<()> {
    let broker = TestBroker::start_with(backend, Box::new(|config| config.screens = false)).await?;
    let id = broker
        .spawn_sh("for i in $(seq 1 40); do echo past-$i; done; exec cat")
        .await?
        .session_id;
    // Without screens there is no wait: a controller reads from the start until the last line.
    let mut controller = broker.attach(&id, pb::Role::Controller, Some(0)).await?;
    let past = controller.read_until(b"past-40").await?;

    let mut present = viewer(&broker, &id, Some(0), true, true).await?;
    let start = present.connected().offset;
    ensure!(
        start >= past.len() as u64,
        "a present-only client starts at the end of the ring (at least {}), not at {start}",
        past.len()
    );
    only_new_output_follows(&controller, &mut present, "present-line").await?;
    broker.kill(&id).await?;
    broker.stop().await
}
