//! Recordings on a real broker: a recorded session's `.cast` parses with a strict asciicast v2
//! reader and its output events are the bytes its Attach client saw, across resizes and a
//! reset; input is kept only when asked, each typist's named by a marker before it; and a broker
//! killed with SIGKILL keeps what it had flushed, published by its next start.

use std::path::Path;

use anyhow::{Context as _, ensure};
use ptyhub_proto::broker::v1 as pb;
use ptyhub_test_support::asciicast::{Cast, CastEvent};

use crate::restart::BrokerProcess;
use crate::support::{self, Backend, PATIENCE, POLL_INTERVAL, TestBroker, authorized};

backend_scenarios!(
    output_events_are_the_bytes_the_client_saw_across_a_reset,
    output_mode_keeps_no_input,
);

/// Characters of two, three and four bytes, written a byte at a time so that reads split them.
const SPLIT_UTF8: &str =
    r"printf '\303'; printf '\251 \342\202'; printf '\254 \360\237'; printf '\230\200\n'";

async fn recorded_broker(backend: Backend, store: &Path) -> anyhow::Result<TestBroker> {
    let store = store.to_str().context("a UTF-8 path")?.to_owned();
    let spool = store.clone() + "-spool";
    TestBroker::start_with(
        backend,
        Box::new(move |config| {
            config.recordings.store = Some(ptyhub_wire::RecordingStore::open(&store).unwrap());
            config.recordings.spool = Some(spool.into());
        }),
    )
    .await
}

fn recorded_spawn(broker: &TestBroker, script: &str, mode: pb::RecordMode) -> pb::SpawnRequest {
    pb::SpawnRequest {
        session_id: uuid::Uuid::new_v4().to_string(),
        target: Some(broker.target()),
        command: vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()],
        env: [("TERM".to_owned(), "xterm-256color".to_owned())].into(),
        size: Some(pb::TerminalSize { cols: 80, rows: 24 }),
        record: mode as i32,
        recording_title: "web / Session 1".to_owned(),
        ..Default::default()
    }
}

/// The published recording of `session_id`, once it is there.
async fn published(store: &Path, session_id: &str) -> anyhow::Result<Vec<u8>> {
    let path = store.join(format!("{session_id}.cast"));
    ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || {
        let path = path.clone();
        async move { std::fs::read(&path).ok() }
    })
    .await
    .with_context(|| format!("{} was never published", path.display()))
}

async fn output_events_are_the_bytes_the_client_saw_across_a_reset(
    backend: Backend,
) -> anyhow::Result<()> {
    let store = tempfile::tempdir()?;
    let broker = recorded_broker(backend, store.path()).await?;
    // Reads a line, echoes it, prints split characters, and waits; a reset starts it again.
    let script = format!("read line; echo \"got:$line\"; {SPLIT_UTF8}; echo ready; sleep 600");
    let request = recorded_spawn(&broker, &script, pb::RecordMode::OutputAndInput);
    let session_id = request.session_id.clone();
    broker.spawn_as(request).await?;
    let mut client = broker
        .attach(&session_id, pb::Role::Controller, Some(0))
        .await?;
    let mut seen = Vec::new();
    client.send_input("hello\n").await?;
    seen.extend(client.read_until(b"ready").await?);
    client.send_resize(100, 30).await?;
    broker.reset(&session_id).await?;
    client.send_input("again\n").await?;
    let mut after_reset = client.read_until(b"got:again").await?;
    // "ready" may have come in the same read.
    let echoed_at = find(&after_reset, b"got:again").unwrap_or(0);
    if find(&after_reset[echoed_at..], b"ready").is_none() {
        after_reset.extend(client.read_until(b"ready").await?);
    }
    seen.extend(after_reset);
    broker.kill(&session_id).await?;
    // Whatever came after the last read (nothing but the process's end) arrives before `Closed`.
    loop {
        match client.next_message().await? {
            Some(pb::server_frame::Frame::Output(chunk)) => seen.extend_from_slice(&chunk.data),
            Some(pb::server_frame::Frame::Closed(_)) | None => break,
            Some(_) => {}
        }
    }

    let cast = Cast::parse(&published(store.path(), &session_id).await?)?;
    ensure!(
        cast.output() == seen,
        "the recording's output differs from what the client saw:\n{:?}\n{:?}",
        String::from_utf8_lossy(&cast.output()),
        String::from_utf8_lossy(&seen)
    );
    ensure!(
        (cast.width, cast.height) == (80, 24),
        "header size {cast:?}"
    );
    ensure!(cast.title.as_deref() == Some("web / Session 1"), "title");
    ensure!(
        cast.command.as_deref() == Some(&*format!("sh -c {script}")),
        "command"
    );
    ensure!(
        cast.input() == "hello\nagain\n",
        "input events: {:?}",
        cast.input()
    );
    let resizes: Vec<_> = cast
        .events_of("r")
        .map(|event| event.data.clone())
        .collect();
    ensure!(resizes == ["100x30"], "resize events {resizes:?}");
    let markers: Vec<_> = cast
        .events_of("m")
        .map(|event| event.data.clone())
        .collect();
    ensure!(markers == ["reset"], "markers {markers:?}");
    // The reset marker lies between the two processes' output.
    let reset_at = cast
        .events
        .iter()
        .position(|event| event.code == "m")
        .unwrap();
    let before: String = cast.events[..reset_at]
        .iter()
        .filter(|event| event.code == "o")
        .map(|event| event.data.as_str())
        .collect();
    ensure!(
        before.contains("got:hello") && !before.contains("again"),
        "{before:?}"
    );
    broker.stop().await
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

async fn output_mode_keeps_no_input(backend: Backend) -> anyhow::Result<()> {
    let store = tempfile::tempdir()?;
    let broker = recorded_broker(backend, store.path()).await?;
    let request = recorded_spawn(
        &broker,
        "read line; echo \"got:$line\"",
        pb::RecordMode::Output,
    );
    let session_id = request.session_id.clone();
    broker.spawn_as(request).await?;
    let mut client = broker
        .attach(&session_id, pb::Role::Controller, Some(0))
        .await?;
    client.send_input("secret\n").await?;
    client.read_until(b"got:secret").await?;
    broker.kill(&session_id).await?;
    let cast = Cast::parse(&published(store.path(), &session_id).await?)?;
    ensure!(cast.events_of("i").next().is_none(), "input was recorded");
    // The terminal echoed the input: that is output, and kept.
    ensure!(String::from_utf8(cast.output())?.contains("got:secret"));
    broker.stop().await
}

/// Attaches as a controller whose ticket names `principal` (through the CLI).
async fn attach_named(
    broker: &TestBroker,
    session_id: &str,
    principal: &str,
) -> anyhow::Result<support::AttachedClient> {
    let holder = ptyhub_attach_ticket::TicketHolder {
        principal: principal.to_owned(),
        surface: "cli".to_owned(),
    };
    let ticket = broker.ticket_key.sign_for(
        uuid::Uuid::parse_str(session_id)?,
        ptyhub_attach_ticket::TicketRole::Controller,
        std::time::SystemTime::now() + std::time::Duration::from_secs(300),
        &holder,
    );
    Ok(broker
        .attach_with(pb::Hello {
            ticket,
            session_id: session_id.to_owned(),
            role: pb::Role::Controller as i32,
            since: Some(0),
            ..Default::default()
        })
        .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_typists_input_follows_a_marker_that_names_it() -> anyhow::Result<()> {
    support::init_logging();
    let store = tempfile::tempdir()?;
    let broker = recorded_broker(Backend::Local, store.path()).await?;
    let mut request = recorded_spawn(&broker, "cat", pb::RecordMode::OutputAndInput);
    request.control_mode = pb::ControlMode::Shared as i32;
    let session_id = request.session_id.clone();
    broker.spawn_as(request).await?;
    let mut alice = attach_named(&broker, &session_id, "alice").await?;
    let mut bob = attach_named(&broker, &session_id, "bob").await?;

    // Two controllers take turns; a call types last.
    for (typist, line) in [
        ("alice", "alice one"),
        ("bob", "bob one"),
        ("bob", "bob two"),
        ("alice", "alice two"),
    ] {
        let client = if typist == "alice" {
            &mut alice
        } else {
            &mut bob
        };
        client.send_input(format!("{line}\n")).await?;
        client.read_until(line.as_bytes()).await?;
    }
    broker
        .send_keys(
            &session_id,
            vec![pb::input_item::Item::Text("from a call\n".to_owned())],
            true,
        )
        .await?;
    alice.read_until(b"from a call").await?;
    broker.kill(&session_id).await?;

    let cast = Cast::parse(&published(store.path(), &session_id).await?)?;
    let attributed: Vec<(String, String)> = cast
        .events
        .iter()
        .filter(|event| event.code == "m" || event.code == "i")
        .fold(Vec::new(), |mut typed, event| {
            match event.code.as_str() {
                "m" => typed.push((event.data.clone(), String::new())),
                _ => match typed.last_mut() {
                    Some((_, input)) => input.push_str(&event.data),
                    None => typed.push((String::new(), event.data.clone())),
                },
            }
            typed
        });
    let expected = [
        ("input: alice", "alice one\n"),
        ("input: bob", "bob one\nbob two\n"),
        ("input: alice", "alice two\n"),
        ("input: (call)", "from a call\n"),
    ]
    .map(|(marker, input)| (marker.to_owned(), input.to_owned()));
    ensure!(attributed == expected, "markers and input: {attributed:?}");
    broker.stop().await
}

#[tokio::test]
async fn unrecorded_sessions_write_nothing() -> anyhow::Result<()> {
    support::init_logging();
    let store = tempfile::tempdir()?;
    let broker = recorded_broker(Backend::Local, store.path()).await?;
    let request = recorded_spawn(&broker, "echo hi", pb::RecordMode::Off);
    let session_id = request.session_id.clone();
    broker.spawn_as(request).await?;
    let mut client = broker
        .attach(&session_id, pb::Role::Controller, Some(0))
        .await?;
    client.read_until(b"hi").await?;
    broker.kill(&session_id).await?;
    ensure!(
        std::fs::read_dir(store.path())?.next().is_none(),
        "an unrecorded session left a file in the store"
    );
    broker.stop().await
}

/// A `pty-broker` process recording into `store`, with its spool in `data_dir`.
fn recording_broker(data_dir: &Path, store: &Path) -> anyhow::Result<BrokerProcess> {
    BrokerProcess::start_with(
        data_dir,
        "local",
        &["--recordings".as_ref(), store.as_os_str()],
    )
}

#[tokio::test]
async fn a_broker_killed_with_sigkill_keeps_what_it_flushed_and_the_file_still_plays()
-> anyhow::Result<()> {
    support::init_logging();
    let data_dir = tempfile::tempdir()?;
    let store = tempfile::tempdir()?;
    let first = recording_broker(data_dir.path(), store.path())?;
    let mut client =
        pb::pty_broker_client::PtyBrokerClient::connect(first.endpoint.clone()).await?;
    let session_id = uuid::Uuid::new_v4().to_string();
    // Output, then nothing more: everything it wrote is older than a flush interval once the
    // spool shows it, with the session still running.
    client
        .spawn(authorized(pb::SpawnRequest {
            session_id: session_id.clone(),
            target: Some(pb::Target {
                kind: Some(pb::target::Kind::Local(pb::LocalTarget {})),
            }),
            command: vec![
                "sh".into(),
                "-c".into(),
                "i=0; while [ $i -lt 200 ]; do echo line-$i; i=$((i+1)); done; printf 'fin%s\\n' ished; sleep 600"
                    .into(),
            ],
            record: pb::RecordMode::OutputAndInput as i32,
            ..Default::default()
        }))
        .await?;
    let spooled = data_dir
        .path()
        .join("recording-spool")
        .join(format!("{session_id}.cast"));
    let flushed = ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || {
        let spooled = spooled.clone();
        async move {
            let contents = std::fs::read(&spooled).ok()?;
            String::from_utf8_lossy(&contents)
                .contains("finished")
                .then_some(())
        }
    })
    .await;
    ensure!(
        flushed.is_some(),
        "the recording never reached the spool while the session ran"
    );

    let mut first = first;
    first.child.kill()?;
    first.child.wait()?;
    // The next start publishes what the killed one left.
    let second = recording_broker(data_dir.path(), store.path())?;
    let cast = Cast::parse(&published(store.path(), &session_id).await?)?;
    let output = String::from_utf8(cast.output())?;
    let expected: String = (0..200)
        .map(|i| format!("line-{i}\r\n"))
        .collect::<String>()
        + "finished\r\n";
    ensure!(
        output == expected,
        "the recovered recording's output: {output:?}"
    );
    // The store has the file before the spool's copy goes (the broker removes it after the
    // upload): wait for that rather than look once.
    let spool_gone = ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || {
        let gone = !spooled.exists();
        async move { gone.then_some(()) }
    })
    .await;
    ensure!(
        spool_gone.is_some(),
        "the spool file stayed after publishing"
    );
    drop(second);
    Ok(())
}

/// The last line the full-disk test's session prints for `lost`, after 2,000 numbers: more than
/// a page in all, so that the write that meets the full disk fills the spool file's last page
/// and then fails.
const LOST_OUTPUT_END: &str = "end-of-lost";

/// A spool on a disk that fills up, for real: the broker's own mount namespace with a small tmpfs
/// over its spool directory, which the test fills through `/proc/<pid>/root` and then frees.
/// The output the broker could not write is gone, a marker in the recording says how many bytes,
/// the recording goes on once there is room, and the published file still parses.
#[tokio::test]
async fn a_full_spool_disk_costs_a_marked_span_and_the_file_still_plays() -> anyhow::Result<()> {
    support::init_logging();
    if !ptyhub_test_support::require(ptyhub_test_support::Requirement::MountNamespaces) {
        return Ok(());
    }
    let (data_dir, store, spool) = (
        tempfile::tempdir()?,
        tempfile::tempdir()?,
        tempfile::tempdir()?,
    );
    let broker = BrokerProcess::start_under(
        &[
            "unshare".as_ref(),
            "--mount".as_ref(),
            "--propagation".as_ref(),
            "private".as_ref(),
            "--".as_ref(),
            "sh".as_ref(),
            "-c".as_ref(),
            r#"mount -t tmpfs -o size=64k ptyhub-spool "$0" && exec "$@""#.as_ref(),
            spool.path().as_os_str(),
        ],
        data_dir.path(),
        "local",
        &[
            "--recordings".as_ref(),
            store.path().as_os_str(),
            "--recording-spool".as_ref(),
            spool.path().as_os_str(),
        ],
    )?;
    // The spool as the broker sees it: its tmpfs, not the empty directory under it.
    let spool_disk = Path::new(&format!("/proc/{}/root", broker.child.id()))
        .join(spool.path().strip_prefix("/")?);
    let mut client =
        pb::pty_broker_client::PtyBrokerClient::connect(broker.endpoint.clone()).await?;
    let session_id = uuid::Uuid::new_v4().to_string();
    let script = format!(
        r#"while read line; do echo "out:$line"; if [ "$line" = lost ]; then seq 2000; echo {LOST_OUTPUT_END}; fi; done"#
    );
    client
        .spawn(authorized(pb::SpawnRequest {
            session_id: session_id.clone(),
            target: Some(pb::Target {
                kind: Some(pb::target::Kind::Local(pb::LocalTarget {})),
            }),
            command: vec!["sh".into(), "-c".into(), script],
            size: Some(pb::TerminalSize { cols: 80, rows: 24 }),
            record: pb::RecordMode::Output as i32,
            ..Default::default()
        }))
        .await?;
    let spooled = spool_disk.join(format!("{session_id}.cast"));
    let line = |text: &str| {
        authorized(pb::SendInputRequest {
            session_id: session_id.clone(),
            items: [
                pb::input_item::Item::Text(text.to_owned()),
                pb::input_item::Item::Key("Enter".to_owned()),
            ]
            .map(|item| pb::InputItem { item: Some(item) })
            .into(),
            force: false,
        })
    };
    let spool_holds = |text: &'static str| {
        let spooled = spooled.clone();
        ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, move || {
            let holds = std::fs::read(&spooled)
                .is_ok_and(|contents| String::from_utf8_lossy(&contents).contains(text));
            async move { holds.then_some(()) }
        })
    };

    client.send_input(line("before")).await?;
    ensure!(
        spool_holds("out:before").await.is_some(),
        "the first output never reached the spool"
    );
    // Nothing more fits: the filler takes every free page of the tmpfs.
    let filler = spool_disk.join("filler");
    let mut file = std::fs::File::create(&filler)?;
    let full = loop {
        if let Err(error) = std::io::Write::write_all(&mut file, &[b'f'; 4096]) {
            break error;
        }
    };
    ensure!(
        full.kind() == std::io::ErrorKind::StorageFull,
        "filling the spool's tmpfs: {full}"
    );
    drop(file);

    client.send_input(line("lost")).await?;
    let failed = broker.first_logged("recording write failed").await?;
    ensure!(
        failed["fields"]["error"]
            .as_str()
            .is_some_and(|error| error.contains("No space left on device")),
        "{failed}"
    );
    std::fs::remove_file(&filler)?;
    client.send_input(line("after")).await?;
    ensure!(
        spool_holds("out:after").await.is_some(),
        "the output after the disk had room again never reached the spool"
    );
    client
        .kill(authorized(pb::KillRequest {
            session_id: session_id.clone(),
        }))
        .await?;

    // Strictly parsed: no event was cut in half by the write that met the full disk.
    let cast = Cast::parse(&published(store.path(), &session_id).await?)?;
    let failures: Vec<u64> = broker
        .logged("recording write failed")
        .iter()
        .map(|line| line["fields"]["lost"].as_u64().unwrap_or_default())
        .collect();
    let codes: String = cast
        .events
        .iter()
        .map(|event| event.code.as_str())
        .collect();
    let marker_at = codes
        .find('m')
        .with_context(|| format!("no marker in the recording: {codes}"))?;
    ensure!(
        codes[..marker_at].chars().all(|code| code == 'o')
            && codes[marker_at + 1..].chars().all(|code| code == 'o'),
        "one marker between output events: {codes}"
    );
    // The marker is the last failed write's (a marker written by an earlier failure was in a
    // later failed write), and names its count and its cause.
    let marker = &cast.events[marker_at].data;
    let lost = failures.last().context("no failure logged")?;
    ensure!(
        *marker
            == format!(
                "ptyhub: lost {lost} bytes of the recording (write failed: No space left on device (os error 28))"
            ),
        "{marker:?}; failed writes lost {failures:?} bytes"
    );
    // Around the marker, what was written before the disk filled up and what was typed after it
    // had room again, and between them the output that met the full disk with a stretch of it
    // gone: the start that a write made before the first failure held (on a slow machine, the
    // line's echo alone), and the end that no failed write held.
    let text = |events: &[CastEvent]| -> String {
        events.iter().map(|event| event.data.as_str()).collect()
    };
    let (before, after) = (
        text(&cast.events[..marker_at]),
        text(&cast.events[marker_at + 1..]),
    );
    let lost_output = format!(
        "lost\r\nout:lost\r\n{}{LOST_OUTPUT_END}\r\n",
        (1..=2000).map(|n| format!("{n}\r\n")).collect::<String>()
    );
    let start_of_lost = before
        .strip_prefix("before\r\nout:before\r\n")
        .with_context(|| format!("the recording starts {before:?}"))?;
    let end_of_lost = after
        .strip_suffix("after\r\nout:after\r\n")
        .with_context(|| {
            format!(
                "the recording ends {:?}",
                &after[after.len().saturating_sub(80)..]
            )
        })?;
    ensure!(
        lost_output.starts_with(start_of_lost)
            && lost_output.ends_with(end_of_lost)
            && start_of_lost.len() + end_of_lost.len() < lost_output.len(),
        "around the marker, {} and {} bytes that are not the start and the end of the lost output",
        start_of_lost.len(),
        end_of_lost.len()
    );
    drop(broker);
    Ok(())
}
