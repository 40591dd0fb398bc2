//! The terminal WebSocket against a real stack: frames, close codes, heartbeats, resume.

use std::time::Duration;

use crate::common::{PATIENCE, Terminal, create_session, get, post, wait_for_open_websockets};
use ptyhub_test_support::stack::TestStack;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

fn default_path(stack: &TestStack) -> String {
    format!("/ws/tool-instances/{}/terminal", stack.instance_id)
}

#[tokio::test]
async fn connected_status_comes_first_then_input_is_echoed() {
    let stack = TestStack::builder().start().await;
    let mut terminal =
        Terminal::open(&stack, &format!("{}?cols=90&rows=30", default_path(&stack))).await;
    let connected = terminal.connected().await;
    assert_eq!(connected["role"], "controller");
    assert!(connected["offset"].is_u64());
    assert_eq!(
        (connected["cols"].as_u64(), connected["rows"].as_u64()),
        (Some(90), Some(30))
    );
    assert!(connected["session"]["id"].is_string());
    assert!(connected["session"]["name"].is_string());

    // Arithmetic, so the typed command's own echo does not count as the answer.
    terminal.send_input("echo binary-$((40+2))\n").await;
    terminal.read_until_output("binary-42").await;
    terminal
        .send_json(json!({"type": "input", "data": "echo text-$((50+5))\n"}))
        .await;
    terminal.read_until_output("text-55").await;

    // The default session is the instance's `default` alias, and it reports the attached
    // client once the broker's counts have reached session-api (batched, about once a second).
    let sessions = format!("/api/v1/instances/{}/terminal/sessions", stack.instance_id);
    let attached =
        ptyhub_test_support::poll_until(PATIENCE, Duration::from_millis(100), || async {
            let (_, listed) = get(&stack, &sessions).await;
            let session = listed["sessions"][0].clone();
            assert_eq!(session["id"], connected["session"]["id"]);
            (session["has_websockets"] == true).then_some(session)
        })
        .await;
    assert!(attached.is_some(), "never reported attached");
    stack.shutdown().await;
}

#[tokio::test]
async fn resize_reaches_the_pty() {
    let stack = TestStack::builder().start().await;
    let mut terminal = Terminal::open(&stack, &default_path(&stack)).await;
    terminal.connected().await;
    terminal
        .send_json(json!({"type": "resize", "cols": 132, "rows": 43}))
        .await;
    let resized = terminal.read_until_text("resize").await;
    assert_eq!(resized, json!({"type": "resize", "cols": 132, "rows": 43}));
    terminal.send_input("stty size\n").await;
    terminal.read_until_output("43 132").await;

    terminal
        .send_json(json!({"type": "resize", "cols": 0, "rows": 43}))
        .await;
    let error = terminal.read_until_text("error").await;
    assert!(
        error["message"].as_str().unwrap().contains("out of bounds"),
        "{error}"
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn client_ids_get_their_own_sessions_and_reattach() {
    let stack = TestStack::builder().start().await;
    let path = default_path(&stack);
    let mut tab_a = Terminal::open(&stack, &format!("{path}?client_id=tab-a")).await;
    let a = tab_a.connected().await["session"]["id"].clone();
    let mut tab_b = Terminal::open(&stack, &format!("{path}?client_id=tab-b")).await;
    let b = tab_b.connected().await["session"]["id"].clone();
    assert_ne!(a, b, "two tabs, two PTYs");

    tab_a
        .send_input("echo $$ > /dev/null; export MARK=tab-a-$((1+1))\n")
        .await;
    tab_a.send_input("echo $MARK\n").await;
    tab_a.read_until_output("tab-a-2").await;
    drop(tab_a);

    let mut again = Terminal::open(&stack, &format!("{path}?client_id=tab-a")).await;
    assert_eq!(
        again.connected().await["session"]["id"],
        a,
        "same tab, same PTY"
    );
    again.send_input("echo again-$MARK\n").await;
    again.read_until_output("again-tab-a-2").await;
    stack.shutdown().await;
}

#[tokio::test]
async fn takeover_detaches_the_previous_controller() {
    let stack = TestStack::builder().start().await;
    let path = format!("{}?client_id=shared", default_path(&stack));
    let mut first = Terminal::open(&stack, &path).await;
    first.connected().await;
    let mut second = Terminal::open(&stack, &path).await;
    second.connected().await;

    let detached = first.read_until_text("session_detached").await;
    assert_eq!(
        detached,
        json!({"type": "session_detached", "reason": "taken_over"})
    );
    // Input the old controller sends now must never reach the PTY.
    first.send_input("echo stale-$((6*7))\n").await;
    let closed = first.read_until_closed().await;
    assert_eq!(closed.code, 4009);
    // Once its bridge has ended, the gateway has read (and refused) the stale input: had it
    // been written, its output would come before the fresh command's.
    wait_for_open_websockets(&stack, 1).await;

    second.send_input("echo fresh-$((7*7))\n").await;
    second.read_until_output("fresh-49").await;
    assert!(
        !second.output_text().contains("stale-42"),
        "{}",
        second.output_text()
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn viewer_input_is_refused() {
    let stack = TestStack::builder().start().await;
    let id = create_session(&stack, &stack.instance_id, json!({})).await;
    let session_path = format!("/ws/tool-instances/{}/terminal/{id}", stack.instance_id);
    let mut controller = Terminal::open(&stack, &session_path).await;
    controller.connected().await;
    let mut viewer = Terminal::open(&stack, &format!("{session_path}?mode=view")).await;
    assert_eq!(viewer.connected().await["role"], "viewer");

    viewer.send_input("echo viewer-$((3*3))\n").await;
    let error = viewer.read_until_text("error").await;
    assert!(
        error["message"].as_str().unwrap().contains("viewer"),
        "{error}"
    );
    viewer
        .send_json(json!({"type": "resize", "cols": 10, "rows": 10}))
        .await;
    viewer.read_until_text("error").await;

    controller.send_input("echo controller-$((4*4))\n").await;
    controller.read_until_output("controller-16").await;
    viewer.read_until_output("controller-16").await;
    assert!(!controller.output_text().contains("viewer-9"));
    stack.shutdown().await;
}

#[tokio::test]
async fn resume_with_since_replays_exactly_the_missed_bytes() {
    let stack = TestStack::builder().start().await;
    // Wide enough that the typed command's echo is never wrapped.
    let path = format!(
        "{}?client_id=resumer&cols=300&rows=40",
        default_path(&stack)
    );
    let mut first = Terminal::open(&stack, &path).await;
    let start = first.connected().await["offset"].as_u64().unwrap();
    first.send_input("echo before-$((1+1))\n").await;
    first.read_until_output("before-2").await;
    // Output that appears only once the socket is gone: the command waits for a file the test
    // creates after dropping the socket.
    let trigger = tempfile::tempdir().unwrap();
    let go = trigger.path().join("go");
    first
        .send_input(&format!(
            "until [ -e {} ]; do sleep 0.05; done; echo missed-$((2+2)); echo end-$((3+3))\n",
            go.display()
        ))
        .await;
    first.read_until_output("end-$((3+3))").await;
    let resume_at = start + first.output.len() as u64;
    drop(first);
    std::fs::write(&go, "").unwrap();

    // A viewer replaying from the start waits for that output, with the same bytes to compare.
    let mut full = Terminal::open(&stack, &format!("{path}&since={start}&mode=view")).await;
    assert_eq!(full.connected().await["offset"].as_u64(), Some(start));
    full.read_until_output("end-6").await;
    assert!(
        full.texts.iter().all(|text| text["type"] != "gap"),
        "{:?}",
        full.texts
    );

    let mut resumed = Terminal::open(&stack, &format!("{path}&since={resume_at}")).await;
    assert_eq!(
        resumed.connected().await["offset"].as_u64(),
        Some(resume_at)
    );
    resumed.read_until_output("end-6").await;
    assert!(resumed.output_text().contains("missed-4"));

    // The replay is exactly the bytes from that offset, none twice, none missing: on the span
    // both read, it equals the full replay shifted by what the first socket had seen.
    let skip = usize::try_from(resume_at - start).unwrap();
    let full_after = &full.output[skip..];
    let common = full_after.len().min(resumed.output.len());
    assert_eq!(&resumed.output[..common], &full_after[..common]);
    assert!(
        String::from_utf8_lossy(&resumed.output[..common]).contains("end-6"),
        "the compared span holds the missed output"
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn a_resume_beyond_the_ring_reports_the_gap_then_redraws_the_screen() {
    let stack = TestStack::builder().ring_bytes(4096).start().await;
    let path = format!("{}?client_id=gappy", default_path(&stack));
    let mut terminal = Terminal::open(&stack, &path).await;
    let start = terminal.connected().await["offset"].as_u64().unwrap();
    terminal.send_input("i=0; while [ $i -lt 400 ]; do echo line-$i-padding-padding; i=$((i+1)); done; echo done-$((9*9))\n").await;
    terminal.read_until_output("done-81").await;
    let seen = terminal.output.len() as u64;
    drop(terminal);

    let mut resumed = Terminal::open(&stack, &format!("{path}&since={start}")).await;
    let resumed_at = resumed.connected().await["offset"].as_u64().unwrap();
    assert!(
        resumed_at >= start + seen,
        "{resumed_at} < {start} + {seen}"
    );
    // The ring no longer holds `start`: a snapshot as of where the output now ends stands in
    // for the replay, and the gap counts every raw byte it replaces.
    let gap = resumed.read_until_text("gap").await;
    assert!(
        resumed.output.is_empty(),
        "the gap comes before anything else"
    );
    assert_eq!(gap["lost"].as_u64(), Some(resumed_at - start), "{gap}");
    let snapshot = resumed.read_until_text("snapshot").await;
    assert_eq!(snapshot["offset"].as_u64(), Some(resumed_at), "{snapshot}");
    assert!(
        resumed.output.is_empty(),
        "output before the snapshot's bytes"
    );
    match resumed.next_message().await {
        Some(Message::Binary(redraw)) => {
            assert!(redraw.starts_with(b"\x1bc"), "{redraw:?}");
            assert!(String::from_utf8_lossy(&redraw).contains("done-81"));
        }
        other => panic!("the snapshot frame is not followed by its bytes: {other:?}"),
    }
    // Then the stream goes on live.
    resumed.send_input("echo again-$((2+3))\n").await;
    resumed.read_until_output("again-5").await;
    assert!(
        !resumed.output_text().contains("done-81"),
        "replayed output"
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn exit_sends_the_code_then_closes_1000() {
    let stack = TestStack::builder().start().await;
    let id = create_session(&stack, &stack.instance_id, json!({})).await;
    let mut terminal = Terminal::open(
        &stack,
        &format!("/ws/tool-instances/{}/terminal/{id}", stack.instance_id),
    )
    .await;
    terminal.connected().await;
    terminal.send_input("exit 3\n").await;
    let closed = terminal.read_until_closed().await;
    assert_eq!(closed.code, 1000);
    let exit = terminal
        .texts
        .iter()
        .find(|text| text["type"] == "exit")
        .expect("exit frame");
    assert_eq!(exit, &json!({"type": "exit", "code": 3, "signal": null}));
    stack.shutdown().await;
}

#[tokio::test]
async fn unknown_sessions_close_4004() {
    let stack = TestStack::builder().start().await;
    for path in [
        format!(
            "/ws/tool-instances/{}/terminal/00000000-0000-4000-8000-000000000000",
            stack.instance_id
        ),
        format!(
            "/ws/tool-instances/{}/terminal/not-a-uuid",
            stack.instance_id
        ),
        format!("{}?alias=nobody-has-this", default_path(&stack)),
        "/ws/tool-instances/no-such-instance/terminal".to_owned(),
    ] {
        let mut terminal = Terminal::open(&stack, &path).await;
        assert_eq!(terminal.read_until_closed().await.code, 4004, "{path}");
    }
    // Another instance's session is unknown through this instance, and out of scope through
    // its own for a token that does not cover it.
    let other = stack.register_instance("other", 5, &[]).await;
    let foreign = create_session(&stack, &other, json!({})).await;
    let mut terminal = Terminal::open(
        &stack,
        &format!(
            "/ws/tool-instances/{}/terminal/{foreign}",
            stack.instance_id
        ),
    )
    .await;
    assert_eq!(terminal.read_until_closed().await.code, 4004);
    let scoped = stack.jwt("erin", &["local"], false);
    let url = format!(
        "{}/ws/tool-instances/{other}/terminal/{foreign}?token={scoped}",
        stack.websocket_url()
    );
    let mut terminal = Terminal::open_url(&url, &[]).await.unwrap();
    assert_eq!(terminal.read_until_closed().await.code, 4003);

    // A closed session is gone too.
    let id = create_session(&stack, &stack.instance_id, json!({})).await;
    crate::common::delete(
        &stack,
        &format!(
            "/api/v1/instances/{}/terminal/sessions/{id}",
            stack.instance_id
        ),
    )
    .await;
    let mut terminal = Terminal::open(
        &stack,
        &format!("/ws/tool-instances/{}/terminal/{id}", stack.instance_id),
    )
    .await;
    assert_eq!(terminal.read_until_closed().await.code, 4004);
    stack.shutdown().await;
}

#[tokio::test]
async fn an_open_beyond_the_cap_closes_4029() {
    let stack = TestStack::builder().start().await;
    let instance = stack.register_instance("tiny", 1, &[]).await;
    let mut first = Terminal::open(
        &stack,
        &format!("/ws/tool-instances/{instance}/terminal?client_id=one"),
    )
    .await;
    first.connected().await;
    let mut second = Terminal::open(
        &stack,
        &format!("/ws/tool-instances/{instance}/terminal?client_id=two"),
    )
    .await;
    let closed = second.read_until_closed().await;
    assert_eq!(closed.code, 4029);
    assert_eq!(
        closed.reason,
        "Maximum of 1 terminal sessions reached for this instance"
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn bad_json_gets_an_error_frame_and_the_socket_stays_open() {
    let stack = TestStack::builder().start().await;
    let mut terminal = Terminal::open(&stack, &default_path(&stack)).await;
    terminal.connected().await;
    // Each answer names what was wrong with that frame, and nothing else is in it.
    for (bad, named) in [
        (
            "not json",
            "invalid message: expected ident at line 1 column 2",
        ),
        (r#"{"type":"dance"}"#, "unknown variant `dance`"),
        (r#"{"type":"resize","cols":"wide"}"#, "\"wide\""),
    ] {
        terminal.send(Message::Text(bad.into())).await.unwrap();
        let error = terminal.read_until_text("error").await;
        let message = error["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("invalid message: ") && message.contains(named),
            "the answer to {bad:?} does not name {named:?}: {error}"
        );
        assert_eq!(error, json!({"type": "error", "message": message}));
    }
    terminal.send_json(json!({"type": "pong"})).await;
    terminal.send_input("echo still-$((8*8))\n").await;
    terminal.read_until_output("still-64").await;
    stack.shutdown().await;
}

#[tokio::test]
async fn a_frame_over_one_mebibyte_closes_1009() {
    let stack = TestStack::builder().start().await;
    let mut terminal = Terminal::open(&stack, &default_path(&stack)).await;
    terminal.connected().await;
    let oversized = vec![b'a'; 1024 * 1024 + 1];
    terminal
        .send(Message::Binary(oversized.into()))
        .await
        .unwrap();
    assert_eq!(terminal.read_until_closed().await.code, 1009);
    stack.shutdown().await;
}

#[tokio::test]
async fn a_foreign_origin_is_refused_with_403() {
    let stack = TestStack::builder().start().await;
    let url = format!(
        "{}{}?token={}",
        stack.websocket_url(),
        default_path(&stack),
        stack.admin_token
    );
    let refused = Terminal::open_url(&url, &[("origin", "http://evil.example")]).await;
    match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status().as_u16(), 403)
        }
        other => panic!("expected a 403, got {:?}", other.map(|_| "a websocket")),
    }
    let own_origin = stack.gateway_url.clone();
    let mut allowed = Terminal::open_url(&url, &[("origin", &own_origin)])
        .await
        .unwrap();
    allowed.connected().await;
    stack.shutdown().await;
}

#[tokio::test]
async fn credentials_missing_or_out_of_scope_close_4001_and_4003() {
    let stack = TestStack::builder().start().await;
    let url = format!("{}{}", stack.websocket_url(), default_path(&stack));
    let mut anonymous = Terminal::open_url(&url, &[]).await.unwrap();
    assert_eq!(anonymous.read_until_closed().await.code, 4001);
    let (status, body) = crate::common::send(
        &stack,
        reqwest::Method::GET,
        &default_path(&stack),
        None,
        None,
    )
    .await;
    assert_eq!(
        (status, &body),
        (401, &json!({"detail": "missing credential"}))
    );

    let other = stack.register_instance("other", 5, &[]).await;
    let token = stack.jwt("bob", &[&other], false);
    let mut forbidden = Terminal::open_url(&format!("{url}?token={token}"), &[])
        .await
        .unwrap();
    assert_eq!(forbidden.read_until_closed().await.code, 4003);

    // Browsers may carry the token as a subprotocol instead of in the address.
    let protocols = format!("ptyhub, bearer.{}", stack.admin_token);
    let mut by_protocol = Terminal::open_url(&url, &[("sec-websocket-protocol", &protocols)])
        .await
        .unwrap();
    by_protocol.connected().await;
    stack.shutdown().await;
}

/// A live and a silent client open together, so the same deadlines apply to both: the silent
/// one is dropped while the live one, answering on a worker thread of its own, is still served
/// after that. Only the order of those events is asserted; the interval is no speed bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_a_live_client_and_drop_a_silent_one() {
    let interval = Duration::from_secs(1);
    let stack = TestStack::builder()
        .heartbeat_interval(interval)
        .start()
        .await;
    let path = default_path(&stack);

    let mut live = Terminal::open(&stack, &format!("{path}?client_id=live")).await;
    live.connected().await;
    // A viewer, so that it takes nothing over from the live client.
    let silent_path = format!("{path}?client_id=silent&mode=view");
    let mut silent = Terminal::open(&stack, &silent_path).await;
    let session = silent.connected().await["session"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The live client reads (which answers WebSocket pings) and answers every JSON ping.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let answering = tokio::spawn(async move {
        let mut stopped = stopped;
        let mut pings = 0;
        loop {
            tokio::select! {
                _ = &mut stopped => return (live, pings),
                ping = live.read_until_text("ping") => {
                    assert_eq!(ping, json!({"type": "ping"}));
                    live.send_json(json!({"type": "pong"})).await;
                    pings += 1;
                }
            }
        }
    });

    // The silent client neither reads nor writes: the gateway ends its bridge, then its close
    // is read (reading earlier would answer the WebSocket pings).
    wait_for_open_websockets(&stack, 1).await;
    let closed = tokio::time::timeout(PATIENCE, silent.read_until_closed())
        .await
        .expect("the silent client was the one dropped");
    assert_eq!(closed.code, 1011, "{closed:?}");
    stop.send(()).expect("the live client is still answering");
    let (mut live, pings) = answering.await.expect("the live client's task");
    assert!(pings >= 1, "the live client was never pinged");
    // The live client outlived the silent one's deadline: it is still served.
    assert_eq!(live.read_until_text("ping").await, json!({"type": "ping"}));
    live.send_json(json!({"type": "pong"})).await;
    live.send_input("echo still-here-$((6*7))\n").await;
    live.read_until_output("still-here-42").await;

    let (status, after) = get(
        &stack,
        &format!(
            "/api/v1/instances/{}/terminal/sessions/{session}",
            stack.instance_id
        ),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(after["status"], "active");
    stack.shutdown().await;
}

#[tokio::test]
async fn reset_sends_resetting_then_connected() {
    let stack = TestStack::builder().start().await;
    let mut terminal = Terminal::open(&stack, &default_path(&stack)).await;
    let session = terminal.connected().await["session"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    terminal.send_json(json!({"type": "reset"})).await;
    terminal.read_until_text("status").await;
    assert!(
        terminal
            .texts
            .iter()
            .any(|text| text["status"] == "resetting"),
        "{:?}",
        terminal.texts
    );
    let reconnected = loop {
        let status = terminal.read_until_text("status").await;
        if status["status"] == "connected" {
            break status;
        }
    };
    assert_eq!(reconnected["session"]["id"], session.as_str());
    terminal.send_input("echo after-reset-$((2*5))\n").await;
    terminal.read_until_output("after-reset-10").await;

    let (status, _) = post(
        &stack,
        &format!(
            "/api/v1/instances/{}/terminal/sessions/{session}/reset",
            stack.instance_id
        ),
        None,
    )
    .await;
    assert_eq!(status, 200);
    stack.shutdown().await;
}

#[tokio::test]
async fn gateway_shutdown_closes_websockets_so_clients_reconnect() {
    let mut stack = TestStack::builder().start().await;
    let mut terminal = Terminal::open(&stack, &default_path(&stack)).await;
    let session = terminal.connected().await["session"]["id"].clone();
    let (closed, ()) = tokio::join!(terminal.read_until_closed(), stack.stop_gateway());
    assert_eq!(closed.code, 1012, "service restart: reconnect at once");
    assert_eq!(closed.reason, "gateway shutting down");

    // The session outlives the gateway.
    let live = stack
        .session_api
        .list_sessions(ptyhub_proto::session::v1::ListSessionsRequest {
            instance: stack.instance_id.clone(),
            include_closed: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        live.sessions
            .iter()
            .any(|live| live.id == session.as_str().unwrap())
    );
    stack.shutdown().await;
}

/// A socket ends with 4001 when the gateway's clock reaches its JWT's `exp`, not a second
/// before; a new socket with the token is refused with 4001 too once the minute of clock skew
/// a request's JWT is allowed has passed. The gateway reads a clock the test moves, so the
/// hour-long token expires when the test says, however slow the machine.
#[tokio::test]
async fn a_socket_ends_with_4001_when_its_jwt_expires() {
    let clock = gateway::ManualClock::starting_now();
    let stack = TestStack::builder()
        .configure(|stack| stack.gateway.clock = clock.clock())
        .start()
        .await;
    let expires_at = clock.now() + 3600;
    let token = stack.jwt_expiring_at("expiring", &["*"], expires_at);
    let url = format!(
        "{}{}?token={token}",
        stack.websocket_url(),
        default_path(&stack)
    );
    let mut terminal = Terminal::open_url(&url, &[]).await.expect("a socket");
    terminal.connected().await;

    // A second before its expiry the socket still carries a command and its echo.
    clock.advance(Duration::from_secs(expires_at - 1 - clock.now()));
    terminal.send_input("echo before-$((2*3))\n").await;
    terminal.read_until_output("before-6").await;

    clock.advance(Duration::from_secs(1));
    let closed = terminal.read_until_closed().await;
    assert_eq!(closed.code, 4001, "{closed:?}");
    assert_eq!(closed.reason, "credential expired");

    clock.advance(gateway::auth::JWT_CLOCK_SKEW + Duration::from_secs(1));
    let mut refused = Terminal::open_url(&url, &[]).await.expect("a socket");
    let closed = refused.read_until_closed().await;
    assert_eq!(closed.code, 4001, "{closed:?}");
    assert_eq!(closed.reason, "expired credential");
    stack.shutdown().await;
}

#[tokio::test]
async fn input_goes_through_while_the_client_is_not_reading_its_output() {
    let stack = TestStack::builder().start().await;
    input_goes_through_while_output_waits(&stack).await;
    stack.shutdown().await;
}

#[tokio::test]
async fn over_tcp_input_goes_through_while_the_client_is_not_reading_its_output() {
    let stack = TestStack::builder().broker_over_tcp().start().await;
    input_goes_through_while_output_waits(&stack).await;
    stack.shutdown().await;
}

/// A client that has stopped reading a flood (its receive buffer full, the gateway's sends
/// waiting on it) still has its keystrokes applied: a Ctrl-C and a command reach the shell
/// before the client reads another byte. Then it reads on, and the stream is whole.
async fn input_goes_through_while_output_waits(stack: &TestStack) {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("typed-while-not-reading");
    let id = create_session(stack, &stack.instance_id, json!({})).await;
    let path = format!(
        "/ws/tool-instances/{}/terminal/{id}?cols=80&rows=24",
        stack.instance_id
    );
    let mut terminal = Terminal::open_with_receive_buffer(stack, &path, 4096).await;
    terminal.connected().await;
    terminal.send_input("yes flooding-the-socket\n").await;
    // The keystrokes below go once the flood has filled the client's small receive buffer and
    // the gateway's send buffer: the gateway holds output the client has not taken.
    let client = terminal.local_address();
    let backed_up = ptyhub_test_support::poll_until(PATIENCE, Duration::from_millis(20), || {
        gateway_cannot_send_to(stack.gateway_address(), client)
    })
    .await;
    assert!(
        backed_up.is_some(),
        "the gateway's socket to the client that reads nothing never filled"
    );
    terminal.send_input("\u{3}").await;
    terminal
        .send_input(&format!("touch {}\n", marker.display()))
        .await;
    let typed = ptyhub_test_support::poll_until(PATIENCE, Duration::from_millis(50), || async {
        marker.exists().then_some(())
    })
    .await;
    assert!(
        typed.is_some(),
        "the keystrokes sent while the client read nothing were not applied"
    );
    terminal.send_input("echo reading-again-$((6*7))\n").await;
    terminal.read_until_output("reading-again-42").await;
}

/// `Some` once the gateway's socket to `client` takes no more bytes: its queued bytes are past
/// two thirds of its send buffer, where Linux stops reporting a TCP socket writable
/// (`sk_stream_is_writeable`), so what the gateway sends next waits in the gateway. Read with
/// `ss` (iproute2), which reports each socket's memory as the kernel keeps it.
async fn gateway_cannot_send_to(
    gateway: std::net::SocketAddr,
    client: std::net::SocketAddr,
) -> Option<()> {
    let filter = format!(
        "( sport = :{} and dport = :{} )",
        gateway.port(),
        client.port()
    );
    let output = tokio::process::Command::new("ss")
        .args(["-tmnH", "state", "established", &filter])
        .output()
        .await
        .expect("`ss` (iproute2), to read the gateway socket's send queue");
    assert!(output.status.success(), "ss failed: {output:?}");
    let report = String::from_utf8_lossy(&output.stdout);
    let memory = report.split("skmem:(").nth(1)?;
    let field = |name: &str| {
        memory
            .split([',', ')'])
            .find_map(|field| field.strip_prefix(name)?.parse::<u64>().ok())
    };
    let (queued, buffer) = (field("w")?, field("tb")?);
    (queued * 3 > buffer * 2).then_some(())
}

/// Every other test here runs with the gateway calling the broker in process (`ptyhub up`'s
/// way); these run the stream's semantics with the gateway reaching the broker as a gateway in
/// a process of its own does: over its TCP port.
#[tokio::test]
async fn over_tcp_to_the_broker_the_stream_behaves_the_same() {
    the_stream_behaves_the_same(TestStack::builder().broker_over_tcp().start().await).await;
}

async fn the_stream_behaves_the_same(stack: TestStack) {
    let id = create_session(&stack, &stack.instance_id, json!({})).await;
    let session_path = format!(
        "/ws/tool-instances/{}/terminal/{id}?cols=300&rows=40",
        stack.instance_id
    );
    let mut controller = Terminal::open(&stack, &session_path).await;
    let start = controller.connected().await["offset"].as_u64().unwrap();
    controller.send_input("echo tcp-$((6*7))\n").await;
    controller.read_until_output("tcp-42").await;

    let mut viewer =
        Terminal::open(&stack, &format!("{session_path}&mode=view&since={start}")).await;
    assert_eq!(viewer.connected().await["role"], "viewer");
    viewer.read_until_output("tcp-42").await;
    // The same bytes from the same offset, on the span both have read.
    let common = viewer.output.len().min(controller.output.len());
    assert_eq!(viewer.output[..common], controller.output[..common]);
    assert!(String::from_utf8_lossy(&viewer.output[..common]).contains("tcp-42"));
    viewer.send_input("echo viewer\n").await;
    let error = viewer.read_until_text("error").await;
    assert!(
        error["message"].as_str().unwrap().contains("viewer"),
        "{error}"
    );

    controller.send_input("exit 5\n").await;
    assert_eq!(controller.read_until_closed().await.code, 1000);
    let exit = controller.texts.iter().find(|text| text["type"] == "exit");
    assert_eq!(
        exit,
        Some(&json!({"type": "exit", "code": 5, "signal": null}))
    );
    stack.shutdown().await;
}
