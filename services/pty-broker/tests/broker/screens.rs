//! Screens against real programs on both backends: a reattach beyond the ring gets a snapshot
//! that, drawn on a fresh emulator, equals an emulator fed the whole stream, cell for cell (a
//! scripted full-screen program, `vi` and `top`); and the screen calls (read, type, wait) with
//! their refusals.

use anyhow::{Context as _, bail, ensure};
use pty_broker::domain::TerminalSize;
use pty_broker::screen::{Screen, ScreenFormat, Snapshot};
use ptyhub_proto::broker::v1 as pb;
use ptyhub_proto::broker::v1::server_frame::Frame;
use tonic::Code;

use crate::support::{self, AttachedClient, Backend, PATIENCE, TestBroker};

backend_scenarios!(
    reattach_beyond_the_ring_gets_a_snapshot_equal_to_the_whole_stream,
    vi_survives_a_reattach_beyond_the_ring,
    top_survives_a_reattach_beyond_the_ring,
    input_and_wait_drive_a_prompt,
    input_is_refused_while_a_controller_holds_the_lease_unless_forced,
    bad_screen_requests_are_refused_and_write_nothing,
    wait_answers_the_exit_or_times_out,
    title_and_bell_reach_the_session_info,
    a_screen_that_slept_answers_and_follows_new_output,
    a_reset_leaves_none_of_the_old_process_s_output_on_the_screen,
);

/// Scrollback the tests' screens keep, as the broker's default.
const SCROLLBACK: usize = 1000;

/// A broker whose ring is the smallest allowed, so any real program outgrows it.
async fn small_ring_broker(backend: Backend) -> anyhow::Result<TestBroker> {
    TestBroker::start_with(backend, Box::new(|config| config.ring_bytes = 1024)).await
}

/// A controller that attached before the program started and so reads every byte: the
/// reference emulator is fed all of them.
struct Reference {
    client: AttachedClient,
    screen: Screen,
}

impl Reference {
    async fn attach(broker: &TestBroker, session_id: &str) -> anyhow::Result<Self> {
        let client = broker
            .attach(session_id, pb::Role::Controller, Some(0))
            .await?;
        ensure!(
            client.connected().offset == 0,
            "the reference missed output"
        );
        let screen = Screen::new(TerminalSize::DEFAULT, SCROLLBACK, 0);
        Ok(Self { client, screen })
    }

    /// Reads and feeds output until the screen shows `needle`.
    async fn read_until_screen_shows(&mut self, needle: &str) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !self.screen.text(SCROLLBACK).contains(needle) {
            ensure!(
                tokio::time::Instant::now() < deadline,
                "the screen never showed {needle:?}: {}",
                self.screen.text(0)
            );
            self.feed_next(u64::MAX).await?;
        }
        Ok(())
    }

    /// Reads and feeds output up to exactly `offset`.
    async fn read_to(&mut self, offset: u64) -> anyhow::Result<()> {
        while self.screen.offset() < offset {
            self.feed_next(offset).await?;
        }
        Ok(())
    }

    async fn feed_next(&mut self, limit: u64) -> anyhow::Result<()> {
        match self.client.next_frame().await? {
            Frame::Output(chunk) => {
                let take = (limit.saturating_sub(chunk.offset) as usize).min(chunk.data.len());
                self.screen.feed_at(chunk.offset, &chunk.data[..take]);
                Ok(())
            }
            Frame::Gap(gap) => bail!("the reference lost {} bytes", gap.lost),
            Frame::Exit(_) | Frame::Closed(_) => bail!("the program ended"),
            _ => Ok(()),
        }
    }
}

/// Attaches a late viewer with `since=0` (long gone from the ring) and checks the frames:
/// connected at N, a gap of N raw bytes, a snapshot as of N.
async fn late_viewer_snapshot(broker: &TestBroker, session_id: &str) -> anyhow::Result<Snapshot> {
    let mut late = broker.attach(session_id, pb::Role::Viewer, Some(0)).await?;
    let offset = late.connected().offset;
    let Frame::Gap(gap) = late.next_frame().await? else {
        bail!("expected the gap after connected");
    };
    ensure!(
        gap.lost == offset && gap.offset == offset,
        "gap {gap:?} at {offset}"
    );
    let Frame::Snapshot(snapshot) = late.next_frame().await? else {
        bail!("expected the snapshot after the gap");
    };
    ensure!(
        snapshot.offset == offset,
        "snapshot at {} after connected at {offset}",
        snapshot.offset
    );
    let size = snapshot.size.context("a snapshot has a size")?;
    Ok(Snapshot {
        offset: snapshot.offset,
        size: TerminalSize::new(size.cols, size.rows)?,
        data: snapshot.data,
    })
}

/// The snapshot drawn on a fresh emulator equals the reference at the same offset.
fn assert_same_screen(snapshot: &Snapshot, reference: &mut Screen) -> anyhow::Result<()> {
    let mut restored = Screen::from_snapshot(snapshot, SCROLLBACK);
    ensure!(restored.offset() == reference.offset());
    let (restored_cells, reference_cells) = (
        restored.view(ScreenFormat::Cells, SCROLLBACK),
        reference.view(ScreenFormat::Cells, SCROLLBACK),
    );
    for (index, (got, want)) in restored_cells
        .rows
        .iter()
        .zip(&reference_cells.rows)
        .enumerate()
    {
        ensure!(
            got.cells == want.cells,
            "row {index} differs:\n got {:?}\nwant {:?}\nscreen:\n{}",
            got.cells
                .iter()
                .map(|cell| cell.text.as_str())
                .collect::<String>(),
            want.cells
                .iter()
                .map(|cell| cell.text.as_str())
                .collect::<String>(),
            reference.text(0)
        );
    }
    ensure!(
        restored_cells.rows.len() == reference_cells.rows.len(),
        "row counts differ"
    );
    ensure!(
        restored_cells.cursor == reference_cells.cursor,
        "cursor differs"
    );
    ensure!(
        restored_cells.title == reference_cells.title,
        "title differs"
    );
    ensure!(
        restored.modes() == reference.modes(),
        "modes differ: {:?} vs {:?}",
        restored.modes(),
        reference.modes()
    );
    Ok(())
}

async fn reattach_beyond_the_ring_gets_a_snapshot_equal_to_the_whole_stream(
    backend: Backend,
) -> anyhow::Result<()> {
    let broker = small_ring_broker(backend).await?;
    // A full-screen program: a header drawn once, a counter repainted in place, far more
    // output than the ring holds.
    let session = broker
        .spawn_sh(concat!(
            "stty -echo; read go; printf 'before the program\\n'; ",
            "printf '\\033]2;counting\\007\\033[?1049h\\033[?1h\\033[?2004h\\033[H\\033[2J'; ",
            "printf '\\033[1;44;97m HEADER drawn once \\033[m\\033[?25l'; ",
            "i=0; while [ $i -lt 2000 ]; do printf '\\033[5;3H\\033[32mcount %6d\\033[m' $i; i=$((i+1)); done; ",
            "printf '\\033[10;1Hdone'; sleep 600"
        ))
        .await?;
    let id = session.session_id.clone();
    let mut reference = Reference::attach(&broker, &id).await?;
    reference.client.send_input(&b"\n"[..]).await?;
    reference.read_until_screen_shows("done").await?;
    let snapshot = late_viewer_snapshot(&broker, &id).await?;
    ensure!(
        snapshot.offset > 20_000,
        "the program wrote only {} bytes",
        snapshot.offset
    );
    reference.read_to(snapshot.offset).await?;
    assert_same_screen(&snapshot, &mut reference.screen)?;
    ensure!(reference.screen.modes().alternate_screen);
    ensure!(!reference.screen.modes().cursor_visible);

    // The screen call agrees, and says the offset it reflects.
    let screen = broker.screen(&id, pb::ScreenFormat::Text, 0).await?;
    ensure!(screen.offset == snapshot.offset && screen.alternate_screen);
    ensure!(
        screen.lines[0] == " HEADER drawn once",
        "{:?}",
        screen.lines
    );
    ensure!(screen.lines[4] == "  count   1999", "{:?}", screen.lines);
    ensure!(screen.title == "counting");
    broker.kill(&id).await?;
    broker.stop().await
}

/// `vi` (the host's locally, busybox's in the container) paging through a long file.
async fn vi_survives_a_reattach_beyond_the_ring(backend: Backend) -> anyhow::Result<()> {
    let broker = small_ring_broker(backend).await?;
    let file = format!("/tmp/ptyhub-vi-{}.txt", uuid::Uuid::new_v4());
    let session = broker
        .spawn_sh(&format!(
            "i=0; while [ $i -lt 400 ]; do echo \"line $i of a long file\"; i=$((i+1)); done > {file}; \
             TERM=xterm exec vi {file}"
        ))
        .await?;
    let id = session.session_id.clone();
    let mut reference = Reference::attach(&broker, &id).await?;
    reference
        .read_until_screen_shows("line 0 of a long file")
        .await?;
    // Page down and up (Ctrl-F, Ctrl-B) until vi has redrawn well past the ring.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut pages = 0;
    while reference.screen.offset() < 8192 {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "vi redrew too little"
        );
        let key: &[u8] = if pages % 2 == 0 { b"\x06" } else { b"\x02" };
        reference.client.send_input(key).await?;
        pages += 1;
        let before = reference.screen.offset();
        while reference.screen.offset() == before {
            reference.feed_next(u64::MAX).await?;
        }
    }
    let last_page = broker
        .screen(&id, pb::ScreenFormat::Text, 0)
        .await?
        .lines
        .join("\n");
    ensure!(last_page.contains("of a long file"), "{last_page}");
    let snapshot = late_viewer_snapshot(&broker, &id).await?;
    ensure!(
        snapshot.offset > 1024,
        "vi wrote only {} bytes",
        snapshot.offset
    );
    reference.read_to(snapshot.offset).await?;
    assert_same_screen(&snapshot, &mut reference.screen)?;
    // Leave vi; both screens go back to the same normal screen.
    reference.client.send_input(&b"\x1b:q!\r"[..]).await?;
    broker.kill(&id).await?;
    let _ = std::fs::remove_file(&file);
    broker.stop().await
}

/// `top` repainting in place, compared at the snapshot's offset while it goes on.
async fn top_survives_a_reattach_beyond_the_ring(backend: Backend) -> anyhow::Result<()> {
    let broker = small_ring_broker(backend).await?;
    let session = broker.spawn_sh("TERM=xterm exec top -d 1").await?;
    let id = session.session_id.clone();
    let mut reference = Reference::attach(&broker, &id).await?;
    reference.read_until_screen_shows("PID").await?;
    // Two refreshes: more than the ring. The snapshot may come in the middle of a repaint: the
    // reference is compared at exactly its offset.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while reference.screen.offset() < 4096 {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "top wrote too little"
        );
        reference.feed_next(u64::MAX).await?;
    }
    let snapshot = late_viewer_snapshot(&broker, &id).await?;
    reference.read_to(snapshot.offset).await?;
    assert_same_screen(&snapshot, &mut reference.screen)?;
    broker.kill(&id).await?;
    broker.stop().await
}

/// A prompt program, as the issue's `read -p` one (POSIX sh: dash has no `read -p`).
const PROMPT: &str = "printf 'name? '; read n; echo \"hi $n\"; sleep 600";

fn wait_request(session_id: &str, pattern: &str, timeout_ms: u32) -> pb::WaitForScreenRequest {
    pb::WaitForScreenRequest {
        session_id: session_id.to_owned(),
        pattern: pattern.to_owned(),
        timeout_ms,
        ..Default::default()
    }
}

fn text(text: &str) -> pb::input_item::Item {
    pb::input_item::Item::Text(text.to_owned())
}

fn key(name: &str) -> pb::input_item::Item {
    pb::input_item::Item::Key(name.to_owned())
}

/// The old process floods until the reset ends it: what it wrote after `resetting`, drained from
/// the PTY before the new process starts, is in the stream but not on the new process's screen.
async fn a_reset_leaves_none_of_the_old_process_s_output_on_the_screen(
    backend: Backend,
) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let marker = format!("/tmp/ptyhub-reset-{}", uuid::Uuid::new_v4());
    let script = format!(
        "if [ -e {marker} ]; then rm {marker}; echo fresh; exec cat; fi; touch {marker}; exec yes old-line"
    );
    let id = broker.spawn_sh(&script).await?.session_id;
    broker
        .wait_for_screen(wait_request(&id, "old-line", 20_000))
        .await?;
    broker.reset(&id).await?;
    let fresh = broker
        .wait_for_screen(wait_request(&id, "fresh", 20_000))
        .await?;
    ensure!(fresh.outcome() == pb::wait_for_screen_response::Outcome::Matched);
    let screen = broker.screen(&id, pb::ScreenFormat::Text, 1000).await?;
    let first_lines = &screen.lines[..screen.lines.len().min(3)];
    ensure!(
        screen.lines.iter().all(|line| !line.contains("old-line")),
        "the old process's output is on the screen, which starts {first_lines:?}"
    );
    ensure!(screen.lines[0] == "fresh", "{first_lines:?}");
    broker.kill(&id).await?;
    broker.stop().await
}

async fn input_and_wait_drive_a_prompt(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let id = broker.spawn_sh(PROMPT).await?.session_id;
    let prompt = broker
        .wait_for_screen(wait_request(&id, r"name\? $", 20_000))
        .await?;
    ensure!(prompt.outcome() == pb::wait_for_screen_response::Outcome::Matched);
    // The cursor's row keeps its space up to the cursor, so the prompt matches with it.
    ensure!(prompt.matched == "name? ", "{:?}", prompt.matched);
    let sent = broker
        .send_keys(&id, vec![text("ptyhub"), key("Enter")], false)
        .await?;
    ensure!(sent.bytes_written == 7, "{sent:?}");
    let mut answer = wait_request(&id, "hi ptyhub", 20_000);
    answer.after_offset = Some(sent.output_offset);
    answer.quiet_ms = 200;
    let answered = broker.wait_for_screen(answer).await?;
    ensure!(answered.outcome() == pb::wait_for_screen_response::Outcome::Matched);
    let screen = answered.screen.context("a match has a screen")?;
    ensure!(
        screen.lines[..2] == ["name? ptyhub", "hi ptyhub"],
        "{:?}",
        screen.lines
    );
    ensure!(screen.offset > sent.output_offset);
    broker.kill(&id).await?;
    broker.stop().await
}

async fn input_is_refused_while_a_controller_holds_the_lease_unless_forced(
    backend: Backend,
) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let id = broker.spawn_sh("stty -echo; cat").await?.session_id;
    let mut person = broker.attach(&id, pb::Role::Controller, None).await?;
    let refused = broker
        .send_keys(&id, vec![text("not typed")], false)
        .await
        .expect_err("a person holds control");
    ensure!(refused.code() == Code::FailedPrecondition, "{refused:?}");
    ensure!(refused.message().contains("force"), "{refused:?}");
    // Forced, it is typed, and the person keeps control.
    broker
        .send_keys(&id, vec![text("forced"), key("Enter")], true)
        .await?;
    person.read_until(b"forced").await?;
    person.send_input(&b"still mine\n"[..]).await?;
    person.read_until(b"still mine").await?;
    let screen = broker.screen(&id, pb::ScreenFormat::Text, 0).await?;
    ensure!(
        !screen.lines.join("\n").contains("not typed"),
        "{:?}",
        screen.lines
    );
    // A viewer is no controller: input goes through unforced.
    drop(person);
    let _viewer = broker.attach(&id, pb::Role::Viewer, None).await?;
    let wait = ptyhub_test_support::poll_until(PATIENCE, support::POLL_INTERVAL, || async {
        broker
            .send_keys(&id, vec![text("typed\n")], false)
            .await
            .ok()
    })
    .await;
    ensure!(
        wait.is_some(),
        "input stayed refused after the controller left"
    );
    broker.kill(&id).await?;
    broker.stop().await
}

async fn bad_screen_requests_are_refused_and_write_nothing(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let id = broker
        .spawn_sh("stty -echo; printf 'ready\\n'; cat")
        .await?
        .session_id;
    broker
        .wait_for_screen(wait_request(&id, "ready", 20_000))
        .await?;
    let before = broker.get(&id).await?.output_offset;

    let unknown_key = broker
        .send_keys(&id, vec![text("echo typed"), key("Entr")], false)
        .await;
    ensure!(code(unknown_key) == Some(Code::InvalidArgument));
    let empty = broker.send_keys(&id, vec![], false).await;
    ensure!(code(empty) == Some(Code::InvalidArgument));
    let bad_regex = broker
        .wait_for_screen(wait_request(&id, "(unclosed", 1000))
        .await;
    ensure!(code(bad_regex) == Some(Code::InvalidArgument));
    let too_long = broker
        .wait_for_screen(wait_request(&id, "x", 300_001))
        .await;
    ensure!(code(too_long) == Some(Code::InvalidArgument));
    let too_much_scrollback = broker.screen(&id, pb::ScreenFormat::Text, 10_001).await;
    ensure!(code(too_much_scrollback) == Some(Code::InvalidArgument));
    let unknown_format = broker
        .client
        .clone()
        .get_screen(support::authorized(pb::GetScreenRequest {
            session_id: id.clone(),
            format: 42,
            scrollback: 0,
        }))
        .await;
    ensure!(code(unknown_format) == Some(Code::InvalidArgument));
    let unknown_session = broker
        .screen(&uuid::Uuid::new_v4().to_string(), pb::ScreenFormat::Text, 0)
        .await;
    ensure!(code(unknown_session) == Some(Code::NotFound));

    // Nothing reached the terminal: `cat` would have echoed it.
    let screen = broker.screen(&id, pb::ScreenFormat::Text, 0).await?;
    ensure!(
        screen.offset == before,
        "{} bytes appeared",
        screen.offset - before
    );
    ensure!(
        screen.lines[0] == "ready" && screen.lines[1].is_empty(),
        "{:?}",
        screen.lines
    );
    broker.kill(&id).await?;
    broker.stop().await
}

/// The code a refused call answered with; `None` when it was not refused.
fn code<T>(result: Result<T, tonic::Status>) -> Option<Code> {
    result.err().map(|status| status.code())
}

async fn wait_answers_the_exit_or_times_out(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let id = broker.spawn_sh("stty -echo; cat").await?.session_id;
    let timed_out = broker
        .wait_for_screen(wait_request(&id, "never shown", 300))
        .await
        .expect_err("nothing prints it");
    ensure!(timed_out.code() == Code::DeadlineExceeded, "{timed_out:?}");
    broker.kill(&id).await?;

    let id = broker
        .spawn_sh("printf 'last words\\n'; exit 3")
        .await?
        .session_id;
    let ended = broker
        .wait_for_screen(wait_request(&id, "never shown", 20_000))
        .await?;
    ensure!(ended.outcome() == pb::wait_for_screen_response::Outcome::Exited);
    let screen = ended.screen.context("an exit has the final screen")?;
    ensure!(
        screen.exit.map(|exit| exit.code) == Some(3),
        "{:?}",
        screen.exit
    );
    ensure!(screen.lines[0] == "last words", "{:?}", screen.lines);
    broker.stop().await
}

async fn title_and_bell_reach_the_session_info(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let id = broker
        .spawn_sh("printf '\\033]2;deploying web-1\\007'; printf '\\007done\\n'; sleep 600")
        .await?
        .session_id;
    let info = ptyhub_test_support::poll_until(PATIENCE, support::POLL_INTERVAL, || async {
        let info = broker.get(&id).await.ok()?;
        (info.title == "deploying web-1" && info.last_bell_at.is_some()).then_some(info)
    })
    .await;
    ensure!(
        info.is_some(),
        "title and bell never reached the session info: {:?}",
        broker.get(&id).await?
    );
    broker.kill(&id).await?;
    broker.stop().await
}

/// With a short `--screen-sleep`, an idle session's screen sleeps between outputs: reads,
/// snapshots and new output find it as if it never slept.
async fn a_screen_that_slept_answers_and_follows_new_output(
    backend: Backend,
) -> anyhow::Result<()> {
    let broker = TestBroker::start_with(
        backend,
        Box::new(|config| config.screen_sleep = std::time::Duration::from_millis(50)),
    )
    .await?;
    let id = broker
        .spawn_sh("stty -echo; printf '\\033]2;napping\\007first\\n'; read line; echo \"got $line\"; sleep 600")
        .await?
        .session_id;
    broker
        .wait_for_screen(wait_request(&id, "first", 20_000))
        .await?;
    // Long enough for the screen to have slept many times over.
    let mut quiet = wait_request(&id, "first", 20_000);
    quiet.quiet_ms = 500;
    broker.wait_for_screen(quiet).await?;
    let screen = broker.screen(&id, pb::ScreenFormat::Text, 0).await?;
    ensure!(
        screen.lines[0] == "first" && screen.title == "napping",
        "{screen:?}"
    );
    let snapshot = late_viewer_snapshot_asked(&broker, &id).await?;
    let mut restored = Screen::from_snapshot(&snapshot, SCROLLBACK);
    ensure!(
        restored.text(0).starts_with("first"),
        "{}",
        restored.text(0)
    );
    broker
        .send_keys(&id, vec![text("again"), key("Enter")], false)
        .await?;
    let answered = broker
        .wait_for_screen(wait_request(&id, "got again", 20_000))
        .await?;
    let lines = answered.screen.context("a match has a screen")?.lines;
    ensure!(lines[..2] == ["first", "got again"], "{lines:?}");
    broker.kill(&id).await?;
    broker.stop().await
}

/// A viewer that asks for a snapshot (no `since`): connected, then the snapshot, no gap.
async fn late_viewer_snapshot_asked(
    broker: &TestBroker,
    session_id: &str,
) -> anyhow::Result<Snapshot> {
    let ticket = broker.ticket(session_id, ptyhub_attach_ticket::TicketRole::Viewer);
    let mut viewer = broker
        .attach_with(pb::Hello {
            ticket,
            session_id: session_id.to_owned(),
            role: pb::Role::Viewer as i32,
            size: None,
            since: None,
            snapshot: true,
            present_only: false,
        })
        .await?;
    let offset = viewer.connected().offset;
    let Frame::Snapshot(snapshot) = viewer.next_frame().await? else {
        bail!("expected the snapshot right after connected");
    };
    ensure!(snapshot.offset == offset);
    let size = snapshot.size.context("a snapshot has a size")?;
    Ok(Snapshot {
        offset: snapshot.offset,
        size: TerminalSize::new(size.cols, size.rows)?,
        data: snapshot.data,
    })
}
