//! The client library against a real in-process stack (broker with local PTYs, session-api on
//! SQLite, the gateway), reached through the gateway's URL alone: session calls, attach with
//! input, viewers and takeover, exec with its exit code and exact output, the screen calls, the
//! command calls, and an attach that resumes by offset across cut connections with every byte
//! once.

mod relay;
mod tls;

use std::time::Duration;

use ptyhub_client::proto::session as session_pb;
use ptyhub_client::{
    AttachOptions, Client, Command, ErrorCode, Event, ExitStatus, NewSession, Role, Selector,
    TerminalActivity, TerminalSize, TerminalState,
};
use ptyhub_test_support::stack::TestStack;

use relay::Relay;

/// A liveness bound, never a performance assertion.
const PATIENCE: Duration = Duration::from_secs(30);

async fn client(stack: &TestStack) -> Client {
    Client::connect(&stack.gateway_url, &stack.admin_token)
        .await
        .expect("the gateway answers")
}

/// Reads events until the output holds `text`; returns the other events seen.
async fn read_until(
    attachment: &mut ptyhub_client::Attachment,
    output: &mut Vec<u8>,
    text: &str,
) -> Vec<Event> {
    let mut others = Vec::new();
    while !String::from_utf8_lossy(output).contains(text) {
        let event = tokio::time::timeout(PATIENCE, attachment.next())
            .await
            .unwrap_or_else(|_| panic!("no event within {PATIENCE:?} while waiting for {text:?}"))
            .expect("the stream goes on")
            .unwrap_or_else(|| panic!("the stream ended before {text:?}"));
        match event {
            Event::Output { data, .. } => output.extend_from_slice(&data),
            other => others.push(other),
        }
    }
    others
}

#[tokio::test]
async fn session_calls_reach_the_gateway_with_the_url_and_a_token() {
    let stack = TestStack::builder().start().await;
    let client = client(&stack).await;
    let names: Vec<String> = client
        .instances()
        .await
        .expect("instances")
        .into_iter()
        .map(|instance| instance.name)
        .collect();
    assert_eq!(names, ["local"]);
    assert_eq!(
        client.instance("local").await.unwrap().id,
        stack.instance_id
    );

    let created = client
        .create_session(
            "local",
            NewSession {
                name: "build".into(),
                aliases: vec!["job-7".into()],
                size: Some(TerminalSize::new(100, 30).unwrap()),
                ..NewSession::default()
            },
        )
        .await
        .expect("create a session");
    assert_eq!(created.name, "build");
    let by_alias = client
        .resolve_session("local", Selector::Alias("job-7".into()), false, None)
        .await
        .expect("resolve by alias");
    assert_eq!(by_alias.session.id, created.id);
    assert!(!by_alias.created);
    let tab = client
        .resolve_session("local", Selector::ClientId("tab-1".into()), true, None)
        .await
        .expect("a tab's session is created");
    assert!(tab.created);
    let again = client
        .resolve_session("local", Selector::ClientId("tab-1".into()), true, None)
        .await
        .expect("the same tab again");
    assert_eq!(again.session.id, tab.session.id);
    assert!(!again.created);

    let renamed = client
        .rename_session("local", &created.id, "deploy")
        .await
        .expect("rename");
    assert_eq!(renamed.name, "deploy");
    client
        .reset_session("local", &created.id)
        .await
        .expect("reset");
    let listed = client.sessions("local", false).await.expect("list");
    assert_eq!(listed.len(), 2);
    let closed = client
        .close_session("local", &created.id)
        .await
        .expect("close");
    assert_eq!(closed.status, session_pb::SessionStatus::Closed as i32);

    let missing = client
        .resolve_session("local", Selector::Alias("nobody".into()), false, None)
        .await
        .expect_err("no session has that alias");
    assert_eq!(missing.code(), Some(ErrorCode::NotFound), "{missing}");
    let wrong = Client::connect(&stack.gateway_url, "wrong-token")
        .await
        .expect("connecting asks nothing yet")
        .instances()
        .await
        .expect_err("a wrong token is refused");
    assert_eq!(wrong.code(), Some(ErrorCode::Unauthenticated), "{wrong}");
    stack.shutdown().await;
}

#[tokio::test]
async fn attach_carries_input_and_tells_viewers_and_the_previous_controller() {
    let stack = TestStack::builder().start().await;
    let client = client(&stack).await;
    let session = client
        .create_session("local", NewSession::default())
        .await
        .expect("a session");
    let mut controller = client
        .attach("local", &session.id, AttachOptions::default())
        .await
        .expect("attach");
    let mut output = Vec::new();
    controller
        .send_input("echo typed-$((6*7))\n")
        .await
        .unwrap();
    let seen = read_until(&mut controller, &mut output, "typed-42").await;
    assert!(
        matches!(
            seen.first(),
            Some(Event::Connected {
                role: Role::Controller,
                resumed: false,
                ..
            })
        ),
        "{seen:?}"
    );

    let mut viewer = client
        .attach(
            "local",
            &session.id,
            AttachOptions {
                role: Role::Viewer,
                ..AttachOptions::default()
            },
        )
        .await
        .expect("a viewer attaches");
    viewer.send_input("echo from-the-viewer\n").await.unwrap();
    let refused = loop {
        match viewer.next().await.expect("the viewer's stream goes on") {
            Some(Event::Refused { code, message }) => break (code, message),
            Some(_) => {}
            None => panic!("the viewer's stream ended"),
        }
    };
    assert_eq!(refused.0, ErrorCode::Forbidden);
    assert_eq!(refused.1, "a viewer may not write input");

    let mut second = client
        .attach("local", &session.id, AttachOptions::default())
        .await
        .expect("a second controller takes over");
    let mut second_output = Vec::new();
    second.send_input("echo second-$((2*4))\n").await.unwrap();
    read_until(&mut second, &mut second_output, "second-8").await;
    let taken = loop {
        match controller
            .next()
            .await
            .expect("the first stream ends cleanly")
        {
            Some(Event::TakenOver) => break true,
            Some(_) => {}
            None => break false,
        }
    };
    assert!(taken, "the previous controller is told it was taken over");
    assert_eq!(
        controller.next().await.expect("no error"),
        None,
        "and nothing after"
    );
    assert!(
        !String::from_utf8_lossy(&second_output).contains("from-the-viewer"),
        "the viewer's input reached the session"
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn an_input_with_a_receipt_is_written_before_its_answer_and_a_viewers_is_refused() {
    let stack = TestStack::builder().start().await;
    let client = client(&stack).await;
    let session = client
        .create_session("local", NewSession::default())
        .await
        .expect("a session");
    let mut controller = client
        .attach("local", &session.id, AttachOptions::default())
        .await
        .expect("attach");
    let line = "echo receipt-$((2*21))\n";
    let receipt = controller.send_input_with_receipt(line).await.unwrap();
    assert_eq!(receipt.bytes, line.len() as u64);
    // The output as one run of bytes from the first offset read.
    let mut start = None;
    let mut output = Vec::new();
    while !String::from_utf8_lossy(&output).contains("receipt-42") {
        let event = tokio::time::timeout(PATIENCE, controller.next())
            .await
            .expect("an event in time")
            .expect("the stream goes on")
            .expect("the stream goes on");
        if let Event::Output { offset, data } = event {
            start.get_or_insert(offset);
            output.extend_from_slice(&data);
        }
    }
    let answered_at = start.unwrap()
        + output
            .windows("receipt-42".len())
            .position(|window| window == b"receipt-42")
            .unwrap() as u64;
    assert!(answered_at >= receipt.offset, "{answered_at} < {receipt:?}");
    let flushed = controller.flush_input().await.unwrap();
    assert_eq!(flushed.bytes, 0);
    assert!(flushed.offset >= receipt.offset);

    let viewer = client
        .attach(
            "local",
            &session.id,
            AttachOptions {
                role: Role::Viewer,
                ..AttachOptions::default()
            },
        )
        .await
        .expect("attach as a viewer");
    let refused = viewer
        .send_input_with_receipt("echo no\n")
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::Forbidden), "{refused:?}");
    stack.shutdown().await;
}

#[tokio::test]
async fn exec_gives_the_exit_code_and_the_output_byte_for_byte() {
    let stack = TestStack::builder().start().await;
    let client = client(&stack).await;
    let ran = client
        .exec_output(
            "local",
            vec![
                "sh".into(),
                "-c".into(),
                "printf 'line one\\nno newline'; exit 3".into(),
            ],
        )
        .await
        .expect("exec");
    assert_eq!(
        ran.status,
        ExitStatus {
            code: 3,
            signal: None
        }
    );
    // No `\r` added: the terminal's newline translation is off for exec.
    assert_eq!(ran.output, b"line one\nno newline");

    let mut piped = client
        .exec("local", vec!["cat".into()])
        .await
        .expect("exec cat");
    let input = b"a\x03b\rc\x04 and\n a long tail".to_vec();
    piped.write_input(&input).await.unwrap();
    piped.close_input().await.unwrap();
    let mut echoed = Vec::new();
    while let Some(chunk) = tokio::time::timeout(PATIENCE, piped.next_output())
        .await
        .expect("output in time")
        .expect("cat's output")
    {
        echoed.extend_from_slice(&chunk);
    }
    let session_id = piped.session_id().to_owned();
    assert_eq!(piped.wait().await.unwrap().code, 0);
    assert_eq!(echoed, input, "piped input arrives exactly");
    let record = client.session("local", &session_id).await.unwrap();
    assert_eq!(
        record.status,
        session_pb::SessionStatus::Closed as i32,
        "exec closes its session"
    );

    let missing = client
        .exec_output("local", vec!["no-such-command-here".into()])
        .await
        .expect("exec of a missing command runs the wrapper");
    assert_eq!(missing.status.code, 127);
    stack.shutdown().await;
}

#[tokio::test]
async fn the_screen_calls_read_type_and_wait() {
    let stack = TestStack::builder().start().await;
    let client = client(&stack).await;
    let session = client
        .create_session("local", NewSession::default())
        .await
        .unwrap();
    // Type once the shell has drawn its prompt and gone quiet: a shell that sets up its line
    // editor may drop what arrived before it.
    client
        .wait_for_screen(session_pb::WaitForScreenRequest {
            instance: "local".into(),
            session_id: session.id.clone(),
            pattern: r"\S".into(),
            timeout_ms: 20_000,
            quiet_ms: 300,
            ..Default::default()
        })
        .await
        .expect("the shell draws its prompt");
    let typed = client
        .send_input(session_pb::SendInputRequest {
            instance: "local".into(),
            session_id: session.id.clone(),
            items: vec![
                ptyhub_client::proto::broker::InputItem {
                    item: Some(ptyhub_client::proto::broker::input_item::Item::Text(
                        "echo screen-$((5*5))".into(),
                    )),
                },
                ptyhub_client::proto::broker::InputItem {
                    item: Some(ptyhub_client::proto::broker::input_item::Item::Key(
                        "Enter".into(),
                    )),
                },
            ],
            force: false,
        })
        .await
        .expect("type");
    let waited = client
        .wait_for_screen(session_pb::WaitForScreenRequest {
            instance: "local".into(),
            session_id: session.id.clone(),
            pattern: "(?m)^screen-25$".into(),
            timeout_ms: 20_000,
            after_offset: Some(typed.output_offset),
            ..Default::default()
        })
        .await
        .expect("the screen shows the answer");
    assert_eq!(waited.matched, "screen-25");
    let screen = client
        .screen(session_pb::GetScreenRequest {
            instance: "local".into(),
            session_id: session.id.clone(),
            ..Default::default()
        })
        .await
        .expect("read the screen");
    assert!(screen.lines.iter().any(|line| line == "screen-25"));
    let timed_out = client
        .wait_for_screen(session_pb::WaitForScreenRequest {
            instance: "local".into(),
            session_id: session.id.clone(),
            pattern: "never-shown".into(),
            timeout_ms: 200,
            ..Default::default()
        })
        .await
        .expect_err("nothing shows that");
    assert_eq!(timed_out.code(), Some(ErrorCode::TimedOut));
    stack.shutdown().await;
}

#[tokio::test]
async fn the_command_calls_list_what_bash_ran_and_its_output() {
    let stack = TestStack::builder().start().await;
    let client = client(&stack).await;
    client
        .register_instance(session_pb::RegisterInstanceRequest {
            name: "bash".into(),
            target: Some(ptyhub_client::proto::broker::Target {
                kind: Some(ptyhub_client::proto::broker::target::Kind::Local(
                    ptyhub_client::proto::broker::LocalTarget {},
                )),
            }),
            command: vec!["bash".into()],
            ..Default::default()
        })
        .await
        .expect("register a bash instance");
    let session = client
        .create_session("bash", NewSession::default())
        .await
        .unwrap();
    let prompt = client
        .wait_for_screen(session_pb::WaitForScreenRequest {
            instance: "bash".into(),
            session_id: session.id.clone(),
            wait_for: ptyhub_client::proto::broker::TerminalState::AtPrompt.into(),
            ..Default::default()
        })
        .await
        .expect("bash shows its prompt");
    let reached = prompt
        .terminal
        .and_then(|terminal| TerminalActivity::try_from(terminal).ok())
        .map(|terminal| terminal.state);
    assert_eq!(reached, Some(TerminalState::AtPrompt));
    let mut commands = Box::pin(
        client
            .watch_commands("bash", &session.id, 0)
            .await
            .expect("watch the commands"),
    );
    client
        .send_input(session_pb::SendInputRequest {
            instance: "bash".into(),
            session_id: session.id.clone(),
            items: vec![ptyhub_client::proto::broker::InputItem {
                item: Some(ptyhub_client::proto::broker::input_item::Item::Text(
                    "echo out-$((6*7)); (exit 3)\r".into(),
                )),
            }],
            force: false,
        })
        .await
        .expect("type");
    let command = ptyhub_test_support::poll_until(PATIENCE, Duration::from_millis(25), || async {
        let page = client.list_commands("bash", &session.id, 0, 0).await.ok()?;
        let command = page.commands.into_iter().next().map(Command::from)?;
        (!command.is_running()).then_some(command)
    })
    .await
    .expect("the command ends");
    assert_eq!((command.id, command.exit_code), (1, Some(3)), "{command:?}");
    assert_eq!(command.command, "echo out-$((6*7)); (exit 3)");
    let mut watched = Vec::new();
    for _ in 0..2 {
        let record = tokio::time::timeout(PATIENCE, tokio_stream::StreamExt::next(&mut commands))
            .await
            .expect("a record in time")
            .expect("the watch goes on")
            .expect("a record");
        watched.push(Command::from(record));
    }
    assert!(
        watched[0].is_running() && !watched[1].is_running(),
        "{watched:?}"
    );
    assert_eq!(
        watched[1], command,
        "the watch ends with the listed command"
    );
    let output = client
        .command_output("bash", &session.id, command.id, false)
        .await
        .expect("the command's output");
    assert_eq!(String::from_utf8_lossy(&output.data).trim_end(), "out-42");
    let unknown = client
        .command_output("bash", &session.id, 99, true)
        .await
        .expect_err("no such command");
    assert_eq!(unknown.code(), Some(ErrorCode::NotFound));
    let too_many = client
        .list_commands("bash", &session.id, 0, 5000)
        .await
        .expect_err("over the maximum");
    assert_eq!(too_many.code(), Some(ErrorCode::Invalid));
    stack.shutdown().await;
}

/// The client reaches the gateway through a relay that the test cuts mid-stream, again and
/// again: the attachment reconnects by itself and the output is exactly the command's, every
/// line once and in order.
#[tokio::test]
async fn an_attach_resumes_by_offset_across_cut_connections_with_every_byte_once() {
    let stack = TestStack::builder().start().await;
    let relay = Relay::start(stack.gateway_address()).await;
    let client = Client::connect(&relay.url(), &stack.admin_token)
        .await
        .expect("the gateway answers through the relay");
    let lines = 3000;
    let session = client
        .create_session(
            "local",
            NewSession {
                command: vec![
                    "sh".into(),
                    "-c".into(),
                    // Slow enough that the cuts fall in the middle of the stream.
                    format!(
                        "stty -echo -onlcr; i=1; while [ $i -le {lines} ]; do echo \"line $i\"; i=$((i+1)); [ $((i % 100)) -eq 0 ] && sleep 0.05; done; exit 0"
                    ),
                ],
                ..NewSession::default()
            },
        )
        .await
        .expect("a session");
    let mut attachment = client
        .attach(
            "local",
            &session.id,
            AttachOptions {
                since: Some(0),
                ..AttachOptions::default()
            },
        )
        .await
        .expect("attach");
    let mut output = Vec::new();
    let mut next_offset = 0u64;
    let mut reconnections = 0;
    let mut cuts = 0;
    let exit = loop {
        let event = tokio::time::timeout(PATIENCE, attachment.next())
            .await
            .expect("an event in time")
            .expect("the stream resumes")
            .expect("the stream ends with the exit");
        match event {
            Event::Output { offset, data } => {
                assert_eq!(
                    offset, next_offset,
                    "output resumes exactly where it stopped"
                );
                next_offset += data.len() as u64;
                output.extend_from_slice(&data);
                // Cut every connection a few times along the way.
                let seen_lines = output.iter().filter(|&&byte| byte == b'\n').count();
                if cuts < 3 && seen_lines > (cuts + 1) * lines / 4 {
                    cuts += 1;
                    relay.cut();
                }
            }
            Event::Reconnecting { .. } => reconnections += 1,
            Event::Connected {
                resumed, offset, ..
            } => {
                assert_eq!(offset, next_offset, "a resumed stream starts at the offset");
                assert_eq!(resumed, reconnections > 0);
            }
            Event::Exited(status) => break status,
            Event::Gap { lost, .. } => panic!("{lost} bytes lost"),
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(exit.code, 0);
    assert_eq!(cuts, 3, "the stream was cut three times");
    assert!(reconnections >= 3, "reconnected {reconnections} times");
    let expected: String = (1..=lines).map(|line| format!("line {line}\n")).collect();
    assert_eq!(String::from_utf8_lossy(&output), expected);
    stack.shutdown().await;
}

/// Reads events until one matches `wanted`; returns it.
async fn next_matching(
    attachment: &mut ptyhub_client::Attachment,
    what: &str,
    wanted: impl Fn(&Event) -> bool,
) -> Event {
    loop {
        let event = tokio::time::timeout(PATIENCE, attachment.next())
            .await
            .unwrap_or_else(|_| panic!("no event within {PATIENCE:?} while waiting for {what}"))
            .expect("the stream goes on")
            .unwrap_or_else(|| panic!("the stream ended before {what}"));
        if wanted(&event) {
            return event;
        }
    }
}

/// A viewer granted control on its stream, whose connection then drops, resumes as the
/// controller: it types on the new stream, and the one that granted control stays a viewer and
/// is not taken over (a resumed stream attaching with the role it first asked for would watch
/// instead).
#[tokio::test]
async fn a_viewer_granted_control_resumes_as_the_controller_after_its_connection_drops() {
    let stack = TestStack::builder().start().await;
    let client = client(&stack).await;
    let session = client
        .create_session("local", NewSession::default())
        .await
        .expect("a session");
    let mut granter = client
        .attach("local", &session.id, AttachOptions::default())
        .await
        .expect("the controller attaches");
    next_matching(&mut granter, "the controller's stream", |event| {
        matches!(
            event,
            Event::Connected {
                role: Role::Controller,
                ..
            }
        )
    })
    .await;

    let relay = Relay::start(stack.gateway_address()).await;
    let through_relay = Client::connect(&relay.url(), &stack.admin_token)
        .await
        .expect("the gateway answers through the relay");
    let mut asker = through_relay
        .attach(
            "local",
            &session.id,
            AttachOptions {
                role: Role::Viewer,
                ..AttachOptions::default()
            },
        )
        .await
        .expect("a viewer attaches");
    next_matching(&mut asker, "the viewer's stream", |event| {
        matches!(
            event,
            Event::Connected {
                role: Role::Viewer,
                ..
            }
        )
    })
    .await;
    asker.request_control().await.expect("a request is sent");
    let Event::ControlRequested { request_id, .. } =
        next_matching(&mut granter, "the request", |event| {
            matches!(event, Event::ControlRequested { .. })
        })
        .await
    else {
        unreachable!()
    };
    granter
        .answer_control(request_id, true)
        .await
        .expect("the grant is sent");
    next_matching(&mut asker, "control granted", |event| {
        *event == Event::RoleChanged(Role::Controller)
    })
    .await;
    next_matching(&mut granter, "control given away", |event| {
        *event == Event::RoleChanged(Role::Viewer)
    })
    .await;

    relay.cut();
    next_matching(&mut asker, "the resumed stream", |event| {
        matches!(event, Event::Reconnecting { .. })
    })
    .await;
    let resumed = next_matching(&mut asker, "the resumed stream", |event| {
        matches!(event, Event::Connected { .. })
    })
    .await;
    assert!(
        matches!(
            resumed,
            Event::Connected {
                role: Role::Controller,
                resumed: true,
                ..
            }
        ),
        "the resumed stream attaches as the controller: {resumed:?}"
    );
    asker
        .send_input("echo resumed-$((5*5))\n")
        .await
        .expect("input is sent");
    let mut output = Vec::new();
    let seen = read_until(&mut asker, &mut output, "resumed-25").await;
    assert!(
        !seen
            .iter()
            .any(|event| matches!(event, Event::Refused { .. } | Event::TakenOver)),
        "the resumed controller's input is taken: {seen:?}"
    );
    let state = client
        .control_state("local", &session.id)
        .await
        .expect("the control state");
    assert!(
        state.controller.is_some() && state.requests.is_empty(),
        "a controller and no request left: {state:?}"
    );
    // The stream that granted control still watches: it was not taken over.
    let mut granter_output = Vec::new();
    let after_grant = read_until(&mut granter, &mut granter_output, "resumed-25").await;
    assert!(!after_grant.contains(&Event::TakenOver), "{after_grant:?}");
    stack.shutdown().await;
}
