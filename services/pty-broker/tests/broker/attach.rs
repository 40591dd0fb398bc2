//! Attach scenarios over real gRPC and real PTYs, run against every backend: echo, resume, gap,
//! takeover, viewers, resize, exit, byte transparency, flow control, Ctrl-C, no leftover
//! processes, no leaked descriptors, and bad input.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use pb::server_frame::Frame;
use ptyhub_attach_ticket::TicketRole;
use ptyhub_proto::broker::v1 as pb;
use tonic::Code;

use crate::support::{self, Backend, PATIENCE, TestBroker};
backend_scenarios! {
    echo_round_trip,
    resume_replays_exactly_the_missed_bytes,
    gap_reports_bytes_lost_beyond_the_ring,
    takeover_notifies_previous_controller_and_refuses_its_input,
    viewer_input_resize_and_reset_are_refused,
    resize_reaches_the_pty_and_every_client,
    exit_code_reaches_attached_and_late_clients,
    signal_exit_is_reported,
    every_byte_value_arrives_unchanged,
    stalled_controller_does_not_stop_another_session,
    ctrl_c_interrupts_a_flood,
    kill_leaves_no_process_of_the_session,
    unread_input_never_delays_a_kill,
    idle_reaping_leaves_no_process_of_the_session,
    reset_keeps_id_and_offsets_and_ends_old_processes,
    reset_after_exit_restarts_the_command_in_place,
    spawn_and_close_many_sessions_without_leaking_descriptors,
    bad_input_gets_clear_codes_and_the_broker_keeps_serving,
    shutdown_tells_clients_and_ends_processes,
}

async fn echo_round_trip(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let session = broker.spawn_sh("stty -echo; cat").await?;
    let mut client = broker
        .attach(&session.session_id, pb::Role::Controller, None)
        .await?;
    assert_eq!(client.connected().role, pb::Role::Controller as i32);
    assert_eq!(client.connected().session_id, session.session_id);
    client.send_input(&b"hello broker\n"[..]).await?;
    client.read_until(b"hello broker").await?;
    broker.kill(&session.session_id).await?;
    broker.stop().await
}

/// The script prints a marker, waits, then prints numbered lines: a client that left after the
/// marker and came back with `since` gets exactly what it missed.
async fn resume_replays_exactly_the_missed_bytes(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let session = broker
        .spawn_sh(
            "printf 'start\\n'; sleep 1; i=0; while [ $i -lt 300 ]; do echo line$i; i=$((i+1)); done; echo END; sleep 600",
        )
        .await?;
    let mut first = broker
        .attach(&session.session_id, pb::Role::Controller, Some(0))
        .await?;
    let seen = first.read_until(b"start").await?;
    let resume_at = first.connected().offset + seen.len() as u64;
    drop(first);

    // Everything the script printed, as a viewer that replays from 0 sees it.
    let mut viewer = broker
        .attach(&session.session_id, pb::Role::Viewer, Some(0))
        .await?;
    let everything = viewer.read_until(b"END").await?;
    drop(viewer);

    let mut resumed = broker
        .attach(&session.session_id, pb::Role::Controller, Some(resume_at))
        .await?;
    assert_eq!(resumed.connected().offset, resume_at);
    let missed = resumed.read_until(b"END").await?;
    let mut joined = seen.clone();
    joined.extend_from_slice(&missed);
    ensure!(
        joined == everything[..joined.len()],
        "resumed bytes differ from the session's output:\n{:?}\nvs\n{:?}",
        String::from_utf8_lossy(&joined),
        String::from_utf8_lossy(&everything)
    );
    let text = String::from_utf8_lossy(&missed);
    ensure!(text.contains("line0") && text.contains("line299"), "{text}");
    ensure!(!text.contains("start"), "replayed a byte twice: {text}");
    broker.kill(&session.session_id).await?;
    broker.stop().await
}

/// The raw byte path: without screens (`--screens=false`) a resume the ring no longer holds gets
/// a gap and the ring's bytes (with screens it gets a snapshot: `screens.rs`).
async fn gap_reports_bytes_lost_beyond_the_ring(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start_with(
        backend,
        Box::new(|config| {
            config.ring_bytes = 1024;
            config.screens = false;
        }),
    )
    .await?;
    let session = broker
        .spawn_sh(
            "i=0; while [ $i -lt 400 ]; do echo 0123456789abcdefghij; i=$((i+1)); done; echo END; sleep 600",
        )
        .await?;
    // Everything the script prints, as the terminal turns each \n into \r\n.
    let mut expected = b"0123456789abcdefghij\r\n".repeat(400);
    expected.extend_from_slice(b"END\r\n");
    let produced = ptyhub_test_support::poll_until(PATIENCE, support::POLL_INTERVAL, || async {
        let info = broker.get(&session.session_id).await.ok()?;
        (info.output_offset >= expected.len() as u64).then_some(info.output_offset)
    })
    .await
    .context("the script's output never reached its end")?;
    assert_eq!(produced, expected.len() as u64, "the script printed more");
    let mut client = broker
        .attach(&session.session_id, pb::Role::Viewer, Some(0))
        .await?;
    assert_eq!(client.connected().offset, produced - 1024);
    let Frame::Gap(gap) = client.next_frame().await? else {
        anyhow::bail!("expected a gap first");
    };
    assert_eq!(gap.lost, produced - 1024);
    assert_eq!(gap.offset, produced - 1024);
    // Then exactly the ring's bytes, each once and in order (the client checks every offset).
    let mut tail = Vec::new();
    while tail.len() < 1024 {
        match client.next_frame().await? {
            Frame::Output(chunk) => tail.extend_from_slice(&chunk.data),
            other => anyhow::bail!("expected output after the gap, got {other:?}"),
        }
    }
    ensure!(
        tail == expected[expected.len() - 1024..],
        "the replay is not the last 1024 bytes of the output: {:?}",
        String::from_utf8_lossy(&tail)
    );
    broker.kill(&session.session_id).await?;
    broker.stop().await
}

async fn takeover_notifies_previous_controller_and_refuses_its_input(
    backend: Backend,
) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let session = broker
        .spawn_sh("stty -echo; printf 'ready\\n'; cat")
        .await?;
    let mut first = broker
        .attach(&session.session_id, pb::Role::Controller, None)
        .await?;
    first.read_until(b"ready").await?;
    let mut second = broker
        .attach(&session.session_id, pb::Role::Controller, None)
        .await?;
    let (_, detached) = first
        .read_until_frame(|frame| matches!(frame, Frame::Detached(_)))
        .await?;
    assert_eq!(
        detached,
        Frame::Detached(pb::Detached {
            reason: pb::DetachReason::TakenOver as i32
        })
    );

    first.send_input(&b"from-old\n"[..]).await?;
    let (_, refused) = first
        .read_until_frame(|frame| matches!(frame, Frame::Error(_)))
        .await?;
    let Frame::Error(refused) = refused else {
        unreachable!()
    };
    assert_eq!(refused.code, Code::PermissionDenied as i32);
    first.send_resize(100, 40).await?;
    let (_, refused) = first
        .read_until_frame(|frame| matches!(frame, Frame::Error(_)))
        .await?;
    let Frame::Error(refused) = refused else {
        unreachable!()
    };
    assert_eq!(refused.code, Code::PermissionDenied as i32);

    // The old stream ends late: the new controller keeps control.
    drop(first);
    second.send_input(&b"from-new\n"[..]).await?;
    let output = second.read_until(b"from-new").await?;
    ensure!(
        !String::from_utf8_lossy(&output).contains("from-old"),
        "the superseded controller's input was applied"
    );
    let info = broker.get(&session.session_id).await?;
    assert_eq!(info.size.map(|size| (size.cols, size.rows)), Some((80, 24)));
    broker.kill(&session.session_id).await?;
    broker.stop().await
}

async fn viewer_input_resize_and_reset_are_refused(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let session = broker
        .spawn_sh("stty -echo; printf 'ready\\n'; cat")
        .await?;
    let mut controller = broker
        .attach(&session.session_id, pb::Role::Controller, None)
        .await?;
    let mut viewer = broker
        .attach(&session.session_id, pb::Role::Viewer, None)
        .await?;
    assert_eq!(viewer.connected().role, pb::Role::Viewer as i32);
    viewer.send_input(&b"from-viewer\n"[..]).await?;
    viewer.send_resize(100, 40).await?;
    viewer
        .send(pb::client_frame::Frame::Reset(pb::ResetTerminal {}))
        .await?;
    for _ in 0..3 {
        let (_, refused) = viewer
            .read_until_frame(|frame| matches!(frame, Frame::Error(_)))
            .await?;
        let Frame::Error(refused) = refused else {
            unreachable!()
        };
        assert_eq!(
            refused.code,
            Code::PermissionDenied as i32,
            "{}",
            refused.message
        );
    }
    controller.send_input(&b"from-controller\n"[..]).await?;
    let output = controller.read_until(b"from-controller").await?;
    ensure!(!String::from_utf8_lossy(&output).contains("from-viewer"));
    // The viewer sees the controller's output.
    viewer.read_until(b"from-controller").await?;
    let info = broker.get(&session.session_id).await?;
    assert_eq!(info.controllers, 1);
    assert_eq!(info.viewers, 1);
    assert_eq!(info.size.map(|size| (size.cols, size.rows)), Some((80, 24)));
    assert_eq!(info.state, pb::SessionState::Running as i32);
    broker.kill(&session.session_id).await?;
    broker.stop().await
}

async fn resize_reaches_the_pty_and_every_client(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let session = broker
        .spawn(
            &["sh", "-c", "stty size; while read line; do stty size; done"],
            100,
            30,
        )
        .await?;
    let mut controller = broker
        .attach(&session.session_id, pb::Role::Controller, Some(0))
        .await?;
    controller.read_until(b"30 100").await?;
    let mut viewer = broker
        .attach(&session.session_id, pb::Role::Viewer, None)
        .await?;
    controller.send_resize(132, 43).await?;
    for client in [&mut controller, &mut viewer] {
        let (_, resize) = client
            .read_until_frame(|frame| matches!(frame, Frame::Resize(_)))
            .await?;
        assert_eq!(
            resize,
            Frame::Resize(pb::TerminalSize {
                cols: 132,
                rows: 43
            })
        );
    }
    controller.send_input(&b"\n"[..]).await?;
    controller.read_until(b"43 132").await?;
    broker.kill(&session.session_id).await?;
    broker.stop().await
}

async fn exit_code_reaches_attached_and_late_clients(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let session = broker
        .spawn_sh("printf 'ready\\n'; read line; printf 'bye\\n'; exit 3")
        .await?;
    let mut controller = broker
        .attach(&session.session_id, pb::Role::Controller, Some(0))
        .await?;
    let mut viewer = broker
        .attach(&session.session_id, pb::Role::Viewer, Some(0))
        .await?;
    controller.read_until(b"ready").await?;
    controller.send_input(&b"go\n"[..]).await?;
    for client in [&mut controller, &mut viewer] {
        let (output, exit) = client.read_to_exit().await?;
        ensure!(String::from_utf8_lossy(&output).contains("bye"));
        assert_eq!(
            exit,
            pb::ExitStatus {
                code: 3,
                signal: None
            }
        );
        ensure!(
            client.next_message().await?.is_none(),
            "the stream ends after exit"
        );
    }
    let info = broker.get(&session.session_id).await?;
    assert_eq!(info.state, pb::SessionState::Exited as i32);
    assert_eq!(
        info.exit,
        Some(pb::ExitStatus {
            code: 3,
            signal: None
        })
    );

    // A client attaching within the tombstone period gets the final output and the exit code.
    let mut late = broker
        .attach(&session.session_id, pb::Role::Controller, Some(0))
        .await?;
    assert_eq!(late.connected().state, pb::SessionState::Exited as i32);
    let (output, exit) = late.read_to_exit().await?;
    ensure!(String::from_utf8_lossy(&output).contains("bye"));
    assert_eq!(
        exit,
        pb::ExitStatus {
            code: 3,
            signal: None
        }
    );
    broker.kill(&session.session_id).await?;
    let status = broker.get(&session.session_id).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    broker.stop().await
}

async fn signal_exit_is_reported(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let session = broker
        .spawn_sh("printf 'ready\\n'; read line; kill -9 $$")
        .await?;
    let mut controller = broker
        .attach(&session.session_id, pb::Role::Controller, Some(0))
        .await?;
    controller.read_until(b"ready").await?;
    controller.send_input(&b"go\n"[..]).await?;
    let (_, exit) = controller.read_to_exit().await?;
    assert_eq!(
        exit,
        pb::ExitStatus {
            code: 137,
            signal: Some(9)
        }
    );
    let mut late = broker
        .attach(&session.session_id, pb::Role::Viewer, None)
        .await?;
    let (_, exit) = late.read_to_exit().await?;
    assert_eq!(
        exit,
        pb::ExitStatus {
            code: 137,
            signal: Some(9)
        }
    );
    broker.stop().await
}

async fn every_byte_value_arrives_unchanged(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    // Octal escapes for every byte; `%` is doubled so printf prints it.
    let format: String = (0u32..=255)
        .map(|byte| {
            if byte == u32::from(b'%') {
                "%%".to_owned()
            } else {
                format!("\\{byte:03o}")
            }
        })
        .collect();
    let session = broker
        .spawn(
            &[
                "sh",
                "-c",
                "stty raw -echo; printf 'ready'; read line; printf \"$1\"; printf 'DONE'; read line",
                "sh",
                &format,
            ],
            80,
            24,
        )
        .await?;
    let mut controller = broker
        .attach(&session.session_id, pb::Role::Controller, Some(0))
        .await?;
    controller.read_until(b"ready").await?;
    controller.send_input(&b"\n"[..]).await?;
    let output = controller.read_until(b"DONE").await?;
    let expected: Vec<u8> = (0u8..=255).chain(*b"DONE").collect();
    ensure!(
        output.ends_with(&expected),
        "bytes changed on the way: {:?}",
        output
    );
    broker.kill(&session.session_id).await?;
    broker.stop().await
}

async fn stalled_controller_does_not_stop_another_session(backend: Backend) -> anyhow::Result<()> {
    let ring = 64 * 1024;
    // Without screens, so that only the controller holds the flood back (the screen's own bound
    // would hide a controller that does not).
    let broker = TestBroker::start_with(
        backend,
        Box::new(move |config| {
            config.ring_bytes = ring;
            config.screens = false;
        }),
    )
    .await?;
    let flood = broker.spawn(&["yes"], 80, 24).await?;
    // Attached and never reading: it holds the flood back, and nothing else. Until it attaches
    // the flood runs freely (nobody is owed a byte), so it starts from the oldest byte the ring
    // still holds rather than from 0, which may be gone already on a busy machine.
    let mut stalled = broker
        .attach(&flood.session_id, pb::Role::Controller, None)
        .await?;
    let echo = broker.spawn_sh("stty -echo; cat").await?;
    let mut controller = broker
        .attach(&echo.session_id, pb::Role::Controller, None)
        .await?;
    for round in 0..20 {
        let line = format!("round-{round}\n");
        controller.send_input(line.clone().into_bytes()).await?;
        controller.read_until(line.trim_end().as_bytes()).await?;
    }
    // A viewer of the flood is never held back by the stalled controller, and never holds
    // anything back itself.
    let mut viewer = broker
        .attach(&flood.session_id, pb::Role::Viewer, None)
        .await?;
    viewer.read_until(b"y\r\ny\r\n").await?;

    // Flow control: the PTY is read no further than a ring ahead of what the stalled controller
    // was sent, and it was sent no more than HTTP/2 lets be in flight to a client that does not
    // read: the client's stream window (hyper's default, 2 MiB) and the server's send buffer
    // (400 KiB), rounded up.
    const IN_FLIGHT: u64 = 3 << 20;
    let attached_at = stalled.connected().offset;
    let bound = attached_at + ring + IN_FLIGHT;
    // Checked until the flood stands still, held: a broker that does not hold it reads on past
    // the bound however slowly its runtime delivers it (a `docker exec` stream is much slower
    // than a local PTY), so one look would pass it before it got there. Standing still is what
    // the test reads: the offset unchanged over a few reads a tenth of a second apart (a machine
    // that stalls the flood that long only makes the check end earlier, never fail).
    let mut unchanged = 0;
    let mut last = None;
    let started = tokio::time::Instant::now();
    while unchanged < 5 {
        let offset = broker.get(&flood.session_id).await?.output_offset;
        ensure!(
            offset <= bound,
            "the flood was read without waiting for the controller: {} bytes past its start at \
             {attached_at}, over the ring ({ring}) and what can be in flight ({IN_FLIGHT})",
            offset - attached_at,
        );
        unchanged = if last == Some(offset) {
            unchanged + 1
        } else {
            0
        };
        last = Some(offset);
        ensure!(
            started.elapsed() < PATIENCE,
            "the flood never stood still within {PATIENCE:?}: at {offset}, under the bound {bound}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The stalled controller, once it reads, gets every byte in order: no gap, also past what
    // was in flight to it (which it would get even if the ring had let its bytes go).
    let mut taken = 0u64;
    while taken < IN_FLIGHT + 4 * ring {
        match stalled.next_frame().await? {
            Frame::Output(chunk) => taken += chunk.data.len() as u64,
            Frame::Gap(gap) => anyhow::bail!("the controller lost {} bytes", gap.lost),
            _ => {}
        }
    }
    broker.kill(&flood.session_id).await?;
    broker.kill(&echo.session_id).await?;
    broker.stop().await
}

async fn ctrl_c_interrupts_a_flood(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let session = broker
        .spawn_sh("trap 'echo INTERRUPTED' INT; yes; echo AFTER; sleep 600")
        .await?;
    let mut controller = broker
        .attach(&session.session_id, pb::Role::Controller, Some(0))
        .await?;
    controller.read_until(b"y\r\ny\r\ny\r\n").await?;
    controller.send_input(vec![0x03]).await?;
    controller.read_until(b"AFTER").await?;
    broker.kill(&session.session_id).await?;
    broker.stop().await
}

async fn kill_leaves_no_process_of_the_session(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    // Background children that ignore SIGHUP and SIGTERM: only SIGKILL ends them.
    let session = broker
        .spawn_sh("trap '' HUP TERM; sleep 600 & sleep 600 & printf 'ready\\n'; wait")
        .await?;
    let mut controller = broker
        .attach(&session.session_id, pb::Role::Controller, Some(0))
        .await?;
    controller.read_until(b"ready").await?;
    let processes = broker.wait_for_processes(session.pid, 3).await?;
    let killed = broker.kill(&session.session_id).await?;
    assert_eq!(killed.state, pb::SessionState::Closed as i32);
    assert_eq!(killed.close_reason, pb::CloseReason::Killed as i32);
    let (_, closed) = controller
        .read_until_frame(|frame| matches!(frame, Frame::Closed(_)))
        .await?;
    let Frame::Closed(closed) = closed else {
        unreachable!()
    };
    assert_eq!(closed.reason, pb::CloseReason::Killed as i32);
    broker.assert_all_ended(&processes).await?;
    let status = broker.get(&session.session_id).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    broker.stop().await
}

/// Input goes straight from the controller's stream to the PTY and waits there while the process
/// does not read it; a kill must not wait behind it.
async fn unread_input_never_delays_a_kill(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    // Raw mode: a canonical terminal would drop input beyond a line instead of holding it.
    let session = broker
        .spawn_sh("stty raw -echo; printf 'ready\\n'; exec sleep 600")
        .await?;
    let mut controller = broker
        .attach(&session.session_id, pb::Role::Controller, Some(0))
        .await?;
    controller.read_until(b"ready").await?;
    // Far more than a terminal's input buffer and every transport buffer on the way hold: the
    // writes block in the broker, and the transport stops taking frames from this stream.
    let sender = controller.sender.clone();
    let typing = tokio::spawn(async move {
        for _ in 0..256 {
            let frame = pb::ClientFrame {
                frame: Some(pb::client_frame::Frame::Input(pb::Input {
                    data: vec![b'x'; 64 * 1024].into(),
                    input_id: None,
                })),
            };
            if sender.send(frame).await.is_err() {
                return;
            }
        }
    });
    // The outgoing queue fills once the broker stopped reading: its write waits on the PTY.
    ptyhub_test_support::poll_until(PATIENCE, support::POLL_INTERVAL, || async {
        (controller.sender.capacity() == 0).then_some(())
    })
    .await
    .context("the input never backed up: the broker kept reading it")?;
    let killed = tokio::time::timeout(PATIENCE, broker.kill(&session.session_id))
        .await
        .context("kill waited behind unread input")??;
    assert_eq!(killed.close_reason, pb::CloseReason::Killed as i32);
    controller
        .read_until_frame(|frame| matches!(frame, Frame::Closed(_)))
        .await?;
    typing.abort();
    broker.stop().await
}

/// A session nobody is attached to is closed after the detached timeout (`IDLE_REAPED`) and
/// its whole process group ends with it, also processes that ignore SIGHUP and SIGTERM.
async fn idle_reaping_leaves_no_process_of_the_session(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start_with(
        backend,
        // Long enough that the viewer below attaches before the timer armed at spawn runs out.
        Box::new(|config| config.detached_timeout = Duration::from_secs(5)),
    )
    .await?;
    let mut events = broker
        .client
        .clone()
        .watch_events(support::authorized(pb::WatchEventsRequest {}))
        .await?
        .into_inner();
    let session = broker
        .spawn_sh("trap '' HUP TERM; sleep 600 & sleep 600 & printf 'ready\\n'; wait")
        .await?;
    // Attached while the processes are counted: no reaping while a client is there.
    let mut viewer = broker
        .attach(&session.session_id, pb::Role::Viewer, Some(0))
        .await?;
    viewer.read_until(b"ready").await?;
    let processes = broker.wait_for_processes(session.pid, 3).await?;
    // The timer starts when the last client leaves.
    drop(viewer);
    let closed = tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some(pb::broker_event::Event::Closed(closed)) =
                events.message().await?.and_then(|event| event.event)
                && closed.session_id == session.session_id
            {
                return anyhow::Ok(closed);
            }
        }
    })
    .await
    .context("the idle session was not reaped in time")??;
    assert_eq!(closed.reason, pb::CloseReason::IdleReaped as i32);
    broker.assert_all_ended(&processes).await?;
    broker.stop().await
}

async fn reset_keeps_id_and_offsets_and_ends_old_processes(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let session = broker
        .spawn(
            &["sh", "-c", "sleep 600 & printf 'generation\\n'; wait"],
            90,
            20,
        )
        .await?;
    let mut controller = broker
        .attach(&session.session_id, pb::Role::Controller, Some(0))
        .await?;
    let first = controller.read_until(b"generation").await?;
    let old_processes = broker.wait_for_processes(session.pid, 2).await?;

    let reset = broker.reset(&session.session_id).await?;
    assert_eq!(reset.session_id, session.session_id);
    assert_eq!(reset.state, pb::SessionState::Running as i32);
    assert_eq!(reset.size, Some(pb::TerminalSize { cols: 90, rows: 20 }));
    ensure!(reset.output_offset >= first.len() as u64);

    let (_, resetting) = controller
        .read_until_frame(|frame| matches!(frame, Frame::Resetting(_)))
        .await?;
    assert_eq!(resetting, Frame::Resetting(pb::Resetting {}));
    let (_, connected) = controller
        .read_until_frame(|frame| matches!(frame, Frame::Connected(_)))
        .await?;
    let Frame::Connected(connected) = connected else {
        unreachable!()
    };
    assert_eq!(connected.role, pb::Role::Controller as i32);
    ensure!(connected.offset >= first.len() as u64, "offsets restarted");
    let (_, output) = controller
        .read_until_frame(|frame| matches!(frame, Frame::Output(_)))
        .await?;
    let Frame::Output(output) = output else {
        unreachable!()
    };
    ensure!(output.offset >= connected.offset);
    broker.assert_all_ended(&old_processes).await?;

    let new_processes = broker.wait_for_processes(reset.pid, 2).await?;
    broker.kill(&session.session_id).await?;
    broker.assert_all_ended(&new_processes).await?;
    broker.stop().await
}

/// A reset of an exited session (within its tombstone) starts the command again with the same
/// id, offsets going on from where the first run stopped.
async fn reset_after_exit_restarts_the_command_in_place(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let session = broker
        .spawn_sh("printf 'run\\n'; read line; exit 5")
        .await?;
    let mut controller = broker
        .attach(&session.session_id, pb::Role::Controller, Some(0))
        .await?;
    controller.read_until(b"run").await?;
    controller.send_input(&b"done\n"[..]).await?;
    let (_, exit) = controller.read_to_exit().await?;
    assert_eq!(exit.code, 5);
    let exited = broker.get(&session.session_id).await?;
    assert_eq!(exited.state, pb::SessionState::Exited as i32);

    let restarted = broker.reset(&session.session_id).await?;
    assert_eq!(restarted.session_id, session.session_id);
    assert_eq!(restarted.state, pb::SessionState::Running as i32);
    assert_eq!(restarted.exit, None, "the old exit status is gone");
    ensure!(
        restarted.output_offset >= exited.output_offset,
        "offsets restarted"
    );

    let mut again = broker
        .attach(
            &session.session_id,
            pb::Role::Controller,
            Some(exited.output_offset),
        )
        .await?;
    assert_eq!(again.connected().state, pb::SessionState::Running as i32);
    again.read_until(b"run").await?;
    again.send_input(&b"done\n"[..]).await?;
    let (_, exit) = again.read_to_exit().await?;
    assert_eq!(exit.code, 5);
    broker.kill(&session.session_id).await?;
    broker.stop().await
}

async fn spawn_and_close_many_sessions_without_leaking_descriptors(
    backend: Backend,
) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    // Warm up: the first session sets up what every later one shares.
    let warm_up = broker.spawn_sh("sleep 600").await?;
    broker.kill(&warm_up.session_id).await?;
    let before = open_descriptors()?;
    let mut sessions = Vec::new();
    for _ in 0..50 {
        sessions.push(broker.spawn_sh("sleep 600").await?);
    }
    ensure!(open_descriptors()? > before, "sessions hold PTYs open");
    for session in &sessions {
        let closed = broker.kill(&session.session_id).await?;
        assert_eq!(closed.state, pb::SessionState::Closed as i32);
    }
    let released = ptyhub_test_support::poll_until(PATIENCE, support::POLL_INTERVAL, || async {
        open_descriptors()
            .is_ok_and(|after| after <= before)
            .then_some(())
    })
    .await;
    ensure!(
        released.is_some(),
        "descriptors leaked: {before} before, {} after closing 50 sessions",
        open_descriptors()?
    );
    broker.stop().await
}

fn open_descriptors() -> anyhow::Result<usize> {
    Ok(std::fs::read_dir("/proc/self/fd")
        .context("list /proc/self/fd")?
        .count())
}

async fn bad_input_gets_clear_codes_and_the_broker_keeps_serving(
    backend: Backend,
) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let session = broker.spawn_sh("stty -echo; cat").await?;
    let id = session.session_id.clone();
    let hello =
        |ticket: String, session_id: &str, role: pb::Role, size: Option<(u32, u32)>| pb::Hello {
            ticket,
            session_id: session_id.to_owned(),
            role: role as i32,
            size: size.map(|(cols, rows)| pb::TerminalSize { cols, rows }),
            since: None,
            snapshot: false,
            present_only: false,
        };
    let code = |result: Result<support::AttachedClient, tonic::Status>| match result {
        Ok(_) => None,
        Err(status) => Some(status.code()),
    };
    let controller_ticket = broker.ticket(&id, TicketRole::Controller);

    // Unknown session, with a valid ticket for it.
    let unknown = uuid::Uuid::new_v4().to_string();
    let ticket = broker.ticket(&unknown, TicketRole::Controller);
    assert_eq!(
        code(
            broker
                .attach_with(hello(ticket, &unknown, pb::Role::Controller, None))
                .await
        ),
        Some(Code::NotFound)
    );
    // First frame not a hello.
    let first = pb::ClientFrame {
        frame: Some(pb::client_frame::Frame::Input(pb::Input {
            data: b"ls\n"[..].into(),
            input_id: None,
        })),
    };
    assert_eq!(
        code(broker.attach_with_first_frame(first).await),
        Some(Code::InvalidArgument)
    );
    // Sizes out of bounds.
    for size in [
        (0, 24),
        (80, 0),
        (1001, 24),
        (80, 501),
        (u32::MAX, u32::MAX),
    ] {
        assert_eq!(
            code(
                broker
                    .attach_with(hello(
                        controller_ticket.clone(),
                        &id,
                        pb::Role::Controller,
                        Some(size)
                    ))
                    .await
            ),
            Some(Code::InvalidArgument),
            "size {size:?}"
        );
    }
    // Garbage, empty and forged tickets; a ticket for another session or a weaker role.
    for ticket in [
        "",
        "garbage",
        "v1.AAAA.BBBB",
        "v1..",
        &format!("{controller_ticket}x"),
    ] {
        assert_eq!(
            code(
                broker
                    .attach_with(hello(ticket.to_owned(), &id, pb::Role::Controller, None))
                    .await
            ),
            Some(Code::Unauthenticated),
            "ticket {ticket:?}"
        );
    }
    let other_ticket = broker.ticket(&unknown, TicketRole::Controller);
    assert_eq!(
        code(
            broker
                .attach_with(hello(other_ticket, &id, pb::Role::Controller, None))
                .await
        ),
        Some(Code::PermissionDenied)
    );
    let viewer_ticket = broker.ticket(&id, TicketRole::Viewer);
    assert_eq!(
        code(
            broker
                .attach_with(hello(viewer_ticket, &id, pb::Role::Controller, None))
                .await
        ),
        Some(Code::PermissionDenied)
    );
    assert_eq!(
        code(
            broker
                .attach_with(hello(
                    controller_ticket.clone(),
                    "not-a-uuid",
                    pb::Role::Controller,
                    None
                ))
                .await
        ),
        Some(Code::InvalidArgument)
    );
    assert_eq!(
        code(
            broker
                .attach_with(hello(
                    controller_ticket.clone(),
                    &id,
                    pb::Role::Unspecified,
                    None
                ))
                .await
        ),
        Some(Code::InvalidArgument)
    );

    // Oversized input ends that stream with RESOURCE_EXHAUSTED.
    for size in [1024 * 1024 + 1, 3 * 1024 * 1024] {
        let mut client = broker.attach(&id, pb::Role::Controller, None).await?;
        client.send_input(vec![b'x'; size]).await?;
        let status = loop {
            match client.inbound.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => anyhow::bail!("stream ended without a status"),
                Err(status) => break status,
            }
        };
        assert_eq!(status.code(), Code::ResourceExhausted, "{size}: {status:?}");
    }
    // A bad resize from a controller is refused with an error frame; the stream goes on.
    let mut controller = broker.attach(&id, pb::Role::Controller, None).await?;
    controller.send_resize(0, 0).await?;
    let (_, refused) = controller
        .read_until_frame(|frame| matches!(frame, Frame::Error(_)))
        .await?;
    let Frame::Error(refused) = refused else {
        unreachable!()
    };
    assert_eq!(refused.code, Code::InvalidArgument as i32);

    // Internal calls need the service token.
    let mut client = broker.client.clone();
    let status = client.list(pb::ListRequest {}).await.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    let mut request = tonic::Request::new(pb::ListRequest {});
    request
        .metadata_mut()
        .insert("authorization", "Bearer wrong-token-0123456789".parse()?);
    assert_eq!(
        client.list(request).await.unwrap_err().code(),
        Code::Unauthenticated
    );
    // Bad spawns.
    let mut spawn = pb::SpawnRequest {
        session_id: id.clone(),
        target: Some(broker.target()),
        command: vec!["sh".to_owned()],
        ..Default::default()
    };
    let status = client
        .spawn(support::authorized(spawn.clone()))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::AlreadyExists);
    spawn.session_id = uuid::Uuid::new_v4().to_string();
    spawn.size = Some(pb::TerminalSize { cols: 0, rows: 24 });
    let status = client
        .spawn(support::authorized(spawn.clone()))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    spawn.size = None;
    spawn.session_id = "nope".to_owned();
    let status = client
        .spawn(support::authorized(spawn.clone()))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    let status = client
        .kill(support::authorized(pb::KillRequest {
            session_id: uuid::Uuid::new_v4().to_string(),
        }))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);

    // The broker still serves the session.
    controller.send_input(&b"still-here\n"[..]).await?;
    controller.read_until(b"still-here").await?;
    broker.kill(&id).await?;
    broker.stop().await
}

async fn shutdown_tells_clients_and_ends_processes(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let session = broker
        .spawn_sh("sleep 600 & printf 'ready\\n'; wait")
        .await?;
    let mut controller = broker
        .attach(&session.session_id, pb::Role::Controller, Some(0))
        .await?;
    controller.read_until(b"ready").await?;
    let processes = broker.wait_for_processes(session.pid, 2).await?;
    let stopping = tokio::spawn(broker.stop_and_keep());
    let (_, closed) = controller
        .read_until_frame(|frame| matches!(frame, Frame::Closed(_)))
        .await?;
    let Frame::Closed(closed) = closed else {
        unreachable!()
    };
    assert_eq!(closed.reason, pb::CloseReason::Shutdown as i32);
    let broker = tokio::time::timeout(PATIENCE, stopping).await???;
    broker.assert_all_ended(&processes).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_takes_a_bounded_number_of_viewers() -> anyhow::Result<()> {
    support::init_logging();
    let broker = TestBroker::start(Backend::Local).await?;
    let session = broker.spawn_sh("cat").await?;
    let mut viewers = Vec::new();
    for _ in 0..ptyhub_wire::limits::MAX_VIEWERS_PER_SESSION {
        viewers.push(
            broker
                .attach(&session.session_id, pb::Role::Viewer, None)
                .await?,
        );
    }
    let status = broker
        .attach(&session.session_id, pb::Role::Viewer, None)
        .await
        .expect_err("one viewer too many")
        .downcast::<tonic::Status>()?;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    // A controller is no viewer: it still gets in, and a viewer that leaves frees its place.
    broker
        .attach(&session.session_id, pb::Role::Controller, None)
        .await?;
    drop(viewers.pop());
    ptyhub_test_support::poll_until(PATIENCE, support::POLL_INTERVAL, || async {
        broker
            .attach(&session.session_id, pb::Role::Viewer, None)
            .await
            .ok()
    })
    .await
    .context("the freed place was never given to a new viewer")?;
    broker.kill(&session.session_id).await?;
    broker.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attach_without_a_hello_is_ended() -> anyhow::Result<()> {
    support::init_logging();
    let broker = TestBroker::start(Backend::Local).await?;
    let (_sender, receiver) = tokio::sync::mpsc::channel::<pb::ClientFrame>(1);
    let mut client = broker.new_client().await?;
    // The stream stays open and silent; the broker gives up after its Hello timeout.
    let ended = tokio::time::timeout(
        ptyhub_wire::limits::HELLO_TIMEOUT + PATIENCE,
        client.attach(tokio_stream::wrappers::ReceiverStream::new(receiver)),
    )
    .await
    .context("the broker never ended the silent stream")?
    .expect_err("no hello, no stream");
    assert_eq!(ended.code(), Code::InvalidArgument, "{ended:?}");
    assert!(ended.message().contains("hello"), "{ended:?}");
    broker.stop().await
}

/// The broker holds session-api's public key alone: a ticket signed with any other key, or made
/// with a secret the broker holds (as tickets once were: HMAC keyed by a secret every broker
/// shared with session-api), is refused as the contract says, UNAUTHENTICATED, and the same
/// claims signed by session-api's key are admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_signed_with_any_key_but_session_apis_is_refused() -> anyhow::Result<()> {
    use base64::Engine as _;
    use hmac::Mac as _;

    support::init_logging();
    let broker = TestBroker::start(Backend::Local).await?;
    let session = broker.spawn_sh("cat").await?;
    let session_id = uuid::Uuid::parse_str(&session.session_id)?;
    let expires_at = std::time::SystemTime::now() + Duration::from_secs(300);
    let hello = |ticket: String| pb::Hello {
        ticket,
        session_id: session.session_id.clone(),
        role: pb::Role::Controller as i32,
        size: None,
        since: None,
        snapshot: false,
        present_only: false,
    };

    let another_key = ptyhub_attach_ticket::TicketSigningKey::generate();
    let signed_by_another_key = another_key.sign(session_id, TicketRole::Controller, expires_at);
    let expiry = expires_at.duration_since(std::time::UNIX_EPOCH)?.as_secs();
    let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(format!("{session_id}.controller.{expiry}"));
    let shared_secret_ticket = |version: &str| -> anyhow::Result<String> {
        // The secret this broker holds: the credential its control calls admit.
        let mut mac =
            hmac::Hmac::<sha2::Sha256>::new_from_slice(support::SERVICE_TOKEN.as_bytes())?;
        mac.update(format!("{version}.{payload}").as_bytes());
        let mac =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        Ok(format!("{version}.{payload}.{mac}"))
    };
    for (forged, what) in [
        (signed_by_another_key, "signed with another Ed25519 key"),
        (
            shared_secret_ticket("v1")?,
            "an HMAC ticket keyed by the broker's secret",
        ),
        (
            shared_secret_ticket("v2")?,
            "an HMAC in the place of a signature",
        ),
    ] {
        let refused = broker.attach_with(hello(forged)).await.expect_err(what);
        assert_eq!(refused.code(), Code::Unauthenticated, "{what}: {refused:?}");
    }
    let genuine = broker.ticket(&session.session_id, TicketRole::Controller);
    broker
        .attach_with(hello(genuine))
        .await
        .context("session-api's ticket is admitted")?;
    broker.kill(&session.session_id).await?;
    broker.stop().await
}
