//! Screens for automation (docs/CONTRACT.md, "Screens"): read a session's screen as text, ANSI
//! or cells, type into it and wait for it, over REST (both path layouts) and the gateway's gRPC
//! surface, with no WebSocket; input never takes control from an attached controller unless
//! forced; bad requests are refused and write nothing.

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_test_support::stack::TestStack;
use reqwest::Method;
use serde_json::{Value, json};

use super::support::{
    Terminal, as_admin, create_session, eventually, gateway_grpc, get_session, list_sessions, rest,
    screen, screen_matching, sessions_path, type_input, wait_for_screen,
};

/// A program that asks for a name, greets it, and lingers a little.
const PROMPT_PROGRAM: &str = r#"read -p "name? " n; echo "hi $n"; sleep 5"#;

fn sh(script: &str) -> Vec<String> {
    vec!["/bin/sh".to_owned(), "-c".to_owned(), script.to_owned()]
}

/// A session of a fresh instance named `name` running `script`; returns the instance and the
/// session id.
async fn session_running(stack: &TestStack, name: &str, script: &str) -> (String, String) {
    let instance = stack.register_instance_with(name, 5, &[], sh(script)).await;
    let session_id = create_session(stack, &instance, json!({"name": name})).await;
    (instance, session_id)
}

/// `message` with `token` as its bearer credential.
fn with_bearer<T>(token: &str, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("an ascii token"),
    );
    request
}

/// The visible text of a screen answer.
fn text_of(screen: &Value) -> &str {
    screen["text"].as_str().expect("a text screen has text")
}

#[tokio::test]
async fn input_and_wait_drive_a_prompt_to_its_answer_over_rest() {
    let stack = TestStack::builder().start().await;
    let (instance, session_id) = session_running(&stack, "prompt", PROMPT_PROGRAM).await;

    let prompt = screen_matching(&stack, &instance, &session_id, r"name\?").await;
    assert_eq!(prompt["matched"], "name?", "{prompt}");
    // Trailing spaces are trimmed, as `tmux capture-pane -p` does: the prompt's space is gone.
    assert_eq!(prompt["screen"]["lines"][0], "name?", "{prompt}");

    let written = type_input(
        &stack,
        &instance,
        &session_id,
        json!({"text": "ptyhub", "keys": ["Enter"]}),
    )
    .await
    .expect(200, "type a name");
    assert_eq!(written["bytes_written"], 7, "{written}");
    let typed_at = written["offset"].as_u64().expect("an offset");
    assert!(typed_at >= prompt["screen"]["offset"].as_u64().unwrap());

    let answer = wait_for_screen(
        &stack,
        &instance,
        &session_id,
        json!({"pattern": r"hi \w+", "after_offset": typed_at}),
    )
    .await
    .expect(200, "wait for the greeting");
    assert_eq!(answer["outcome"], "matched", "{answer}");
    assert_eq!(answer["matched"], "hi ptyhub", "{answer}");
    let screen = &answer["screen"];
    assert!(screen["offset"].as_u64().unwrap() > typed_at, "{screen}");
    assert_eq!(screen["session_id"], session_id.as_str());
    assert_eq!(screen["format"], "text");
    let lines: Vec<&str> = screen["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .map(|line| line.as_str().expect("a line"))
        .collect();
    assert_eq!(&lines[..2], ["name? ptyhub", "hi ptyhub"], "{screen}");
    assert_eq!(text_of(screen), lines.join("\n"));
    stack.shutdown().await;
}

#[tokio::test]
async fn input_and_wait_drive_a_prompt_to_its_answer_over_the_gateways_grpc() {
    let stack = TestStack::builder().start().await;
    let (instance, session_id) = session_running(&stack, "prompt", PROMPT_PROGRAM).await;
    let mut client = gateway_grpc(&stack).await;
    let wait = |pattern: &str, after_offset: Option<u64>| session_pb::WaitForScreenRequest {
        instance: "prompt".to_owned(),
        session_id: session_id.clone(),
        pattern: pattern.to_owned(),
        timeout_ms: 0,
        quiet_ms: 0,
        after_offset,
        format: broker_pb::ScreenFormat::Text as i32,
        scrollback: 0,
        wait_for: 0,
    };

    let prompt = client
        .wait_for_screen(as_admin(&stack, wait(r"name\?", None)))
        .await
        .expect("wait for the prompt")
        .into_inner();
    assert_eq!(
        prompt.outcome,
        broker_pb::wait_for_screen_response::Outcome::Matched as i32
    );
    let written = client
        .send_input(as_admin(
            &stack,
            session_pb::SendInputRequest {
                instance: instance.clone(),
                session_id: session_id.clone(),
                items: vec![
                    broker_pb::InputItem {
                        item: Some(broker_pb::input_item::Item::Text("ptyhub".into())),
                    },
                    broker_pb::InputItem {
                        item: Some(broker_pb::input_item::Item::Key("Enter".into())),
                    },
                ],
                force: false,
            },
        ))
        .await
        .expect("type a name")
        .into_inner();
    assert_eq!(written.bytes_written, 7);

    let answer = client
        .wait_for_screen(as_admin(
            &stack,
            wait(r"hi \w+", Some(written.output_offset)),
        ))
        .await
        .expect("wait for the greeting")
        .into_inner();
    assert_eq!(answer.matched, "hi ptyhub");
    let screen = answer.screen.expect("the matching screen");
    assert_eq!(&screen.lines[..2], ["name? ptyhub", "hi ptyhub"]);

    let read = client
        .get_screen(as_admin(
            &stack,
            session_pb::GetScreenRequest {
                instance: instance.clone(),
                session_id: session_id.clone(),
                format: broker_pb::ScreenFormat::Text as i32,
                scrollback: 0,
            },
        ))
        .await
        .expect("read the screen")
        .into_inner();
    assert_eq!(read.session_id, session_id);
    assert!(read.offset >= screen.offset);
    assert_eq!(read.lines[1], "hi ptyhub");
    stack.shutdown().await;
}

#[tokio::test]
async fn the_grpc_screen_calls_are_scoped_to_the_credentials_instances() {
    let stack = TestStack::builder().start().await;
    let (instance, session_id) = session_running(&stack, "prompt", PROMPT_PROGRAM).await;
    let (other_instance, _) = session_running(&stack, "other", "sleep 30").await;
    let mut client = gateway_grpc(&stack).await;
    let outsider = stack.jwt("outsider", &["other"], false);
    let get_screen = |instance: &str| session_pb::GetScreenRequest {
        instance: instance.to_owned(),
        session_id: session_id.clone(),
        format: 0,
        scrollback: 0,
    };
    let send_input = session_pb::SendInputRequest {
        instance: instance.clone(),
        session_id: session_id.clone(),
        items: vec![broker_pb::InputItem {
            item: Some(broker_pb::input_item::Item::Text("intruder".into())),
        }],
        force: true,
    };
    let wait = session_pb::WaitForScreenRequest {
        instance: instance.clone(),
        session_id: session_id.clone(),
        pattern: String::new(),
        timeout_ms: 1000,
        quiet_ms: 0,
        after_offset: None,
        format: 0,
        scrollback: 0,
        wait_for: 0,
    };

    let refusals = [
        client
            .get_screen(with_bearer(&outsider, get_screen(&instance)))
            .await
            .map(drop),
        client
            .send_input(with_bearer(&outsider, send_input))
            .await
            .map(drop),
        client
            .wait_for_screen(with_bearer(&outsider, wait))
            .await
            .map(drop),
    ];
    for refusal in refusals {
        let status = refusal.expect_err("a call outside the credential's instances");
        assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    }
    // A session id of another instance is not found there, even for an admin.
    let foreign = client
        .get_screen(as_admin(&stack, get_screen(&other_instance)))
        .await
        .expect_err("a session of another instance");
    assert_eq!(foreign.code(), tonic::Code::NotFound, "{foreign:?}");
    let no_credential = client
        .get_screen(tonic::Request::new(get_screen(&instance)))
        .await
        .expect_err("no credential");
    assert_eq!(no_credential.code(), tonic::Code::Unauthenticated);

    // Nothing was typed: the program still waits for its name.
    let written = type_input(
        &stack,
        &instance,
        &session_id,
        json!({"text": "ptyhub", "keys": ["Enter"]}),
    )
    .await
    .expect(200, "type a name");
    let answer = wait_for_screen(
        &stack,
        &instance,
        &session_id,
        json!({"pattern": r"hi \w+", "after_offset": written["offset"]}),
    )
    .await
    .expect(200, "wait for the greeting");
    assert_eq!(answer["matched"], "hi ptyhub", "{answer}");
    stack.shutdown().await;
}

/// Prints, on the first row: `red` bold in palette red, ` plain `, `rgb` in a 24-bit colour,
/// a space and a wide character; sets the window title.
const DRAWING_PROGRAM: &str = concat!(
    r"printf '\033]2;drawn\007\033[1;31mred\033[0m plain \033[38;2;1;2;3mrgb\033[0m ",
    "\u{5b57}",
    r"\n'; sleep 30"
);

#[tokio::test]
async fn a_screen_reads_as_text_ansi_and_cells() {
    let stack = TestStack::builder().start().await;
    let (instance, session_id) = session_running(&stack, "drawing", DRAWING_PROGRAM).await;
    let drawn = screen_matching(&stack, &instance, &session_id, "red plain rgb").await;

    let text = screen(&stack, &instance, &session_id, "")
        .await
        .expect(200, "the screen as text");
    for (field, expected) in [
        ("session_id", json!(session_id)),
        ("cols", json!(80)),
        ("rows", json!(24)),
        ("cursor", json!({"row": 1, "col": 0, "visible": true})),
        ("title", json!("drawn")),
        ("alternate_screen", json!(false)),
        ("status", json!("active")),
        ("exit_code", Value::Null),
        ("format", json!("text")),
        ("scrollback_rows", json!(0)),
    ] {
        assert_eq!(text[field], expected, "{field}: {text}");
    }
    assert_eq!(text["offset"], drawn["screen"]["offset"], "{text}");
    let lines = text["lines"].as_array().expect("lines");
    assert_eq!(lines.len(), 24, "{text}");
    assert_eq!(lines[0], "red plain rgb \u{5b57}");
    assert!(lines[1..].iter().all(|line| line == ""), "{text}");
    assert_eq!(
        text_of(&text),
        format!("red plain rgb \u{5b57}{}", "\n".repeat(23))
    );
    assert!(text.get("ansi").is_none(), "{text}");

    let ansi = screen(&stack, &instance, &session_id, "?format=ansi")
        .await
        .expect(200, "the screen as ansi");
    assert_eq!(ansi["format"], "ansi");
    assert_eq!(ansi["rows"], 24);
    let drawn_ansi = ansi["ansi"].as_str().expect("an ansi string");
    assert!(drawn_ansi.contains("\u{1b}["), "no SGR in {drawn_ansi:?}");
    assert!(drawn_ansi.contains("red"), "{drawn_ansi:?}");
    assert!(drawn_ansi.contains("plain"), "{drawn_ansi:?}");
    assert!(
        ansi.get("lines").is_none() && ansi.get("text").is_none(),
        "{ansi}"
    );

    let cells = screen(&stack, &instance, &session_id, "?format=json")
        .await
        .expect(200, "the screen as cells");
    assert_eq!(cells["format"], "json");
    let rows = cells["grid"].as_array().expect("rows of cells");
    assert_eq!(rows.len(), 24, "{cells}");
    let first = rows[0]["cells"].as_array().expect("cells");
    assert_eq!(first.len(), 80);
    assert_eq!(rows[0]["wrapped"], false);
    assert_eq!(first[0], json!({"text": "r", "fg": 1, "bold": true}));
    assert_eq!(first[2], json!({"text": "d", "fg": 1, "bold": true}));
    assert_eq!(first[4], json!({"text": "p"}));
    assert_eq!(first[10], json!({"text": "r", "fg": "#010203"}));
    assert_eq!(first[14], json!({"text": "\u{5b57}", "wide": true}));
    assert_eq!(first[15], json!({"text": ""}));
    assert_eq!(first[79], json!({"text": ""}));
    stack.shutdown().await;
}

#[tokio::test]
async fn scrollback_lines_come_first_and_are_counted() {
    let stack = TestStack::builder().start().await;
    let (instance, session_id) =
        session_running(&stack, "counting", "seq 1 40; echo counted; sleep 30").await;
    screen_matching(&stack, &instance, &session_id, "counted").await;

    let visible = screen(&stack, &instance, &session_id, "")
        .await
        .expect(200, "the visible rows");
    assert_eq!(visible["scrollback_rows"], 0);
    assert_eq!(visible["lines"].as_array().unwrap().len(), 24);

    let with_history = screen(&stack, &instance, &session_id, "?scrollback=100")
        .await
        .expect(200, "the rows with scrollback");
    let scrollback_rows = with_history["scrollback_rows"]
        .as_u64()
        .expect("scrollback_rows");
    assert!(scrollback_rows > 0, "{with_history}");
    let lines = with_history["lines"].as_array().unwrap();
    assert_eq!(lines.len() as u64, 24 + scrollback_rows, "{with_history}");
    assert_eq!(lines[0], "1", "{with_history}");
    assert_eq!(
        &lines[usize::try_from(scrollback_rows).unwrap()..],
        visible["lines"].as_array().unwrap().as_slice()
    );

    let fewer = screen(&stack, &instance, &session_id, "?scrollback=2&format=json")
        .await
        .expect(200, "two lines of scrollback as cells");
    assert_eq!(fewer["scrollback_rows"], 2);
    assert_eq!(fewer["grid"].as_array().unwrap().len(), 26);
    stack.shutdown().await;
}

#[tokio::test]
async fn the_screen_routes_work_under_the_project_repository_layout_with_matching_labels_only() {
    let stack = TestStack::builder().start().await;
    let instance = stack
        .register_instance_with(
            "labelled",
            5,
            &[("project_id", "p1"), ("repository_id", "r1")],
            sh(PROMPT_PROGRAM),
        )
        .await;
    let session_id = create_session(&stack, &instance, json!({"name": "labelled"})).await;
    let layout = |project: &str| {
        format!(
            "/projects/{project}/repositories/r1/instances/{instance}/terminal/sessions/{session_id}"
        )
    };
    screen_matching(&stack, &instance, &session_id, r"name\?").await;

    let mismatched = layout("p2");
    rest(&stack, Method::GET, &format!("{mismatched}/screen"), None)
        .await
        .expect_error(404, "screen with another project");
    rest(
        &stack,
        Method::POST,
        &format!("{mismatched}/input"),
        Some(json!({"text": "intruder"})),
    )
    .await
    .expect_error(404, "input with another project");
    rest(
        &stack,
        Method::POST,
        &format!("{mismatched}/wait"),
        Some(json!({"pattern": ""})),
    )
    .await
    .expect_error(404, "wait with another project");

    let matching = layout("p1");
    let read = rest(
        &stack,
        Method::GET,
        &format!("{matching}/screen?format=json"),
        None,
    )
    .await
    .expect(200, "screen under the layout");
    assert_eq!(read["session_id"], session_id.as_str());
    assert_eq!(read["format"], "json");
    let written = rest(
        &stack,
        Method::POST,
        &format!("{matching}/input"),
        Some(json!({"text": "ptyhub", "keys": ["Enter"]})),
    )
    .await
    .expect(200, "input under the layout");
    let answer = rest(
        &stack,
        Method::POST,
        &format!("{matching}/wait"),
        Some(json!({"pattern": r"hi \w+", "after_offset": written["offset"]})),
    )
    .await
    .expect(200, "wait under the layout");
    // The refused input wrote nothing: the name is exactly what the matching route typed.
    assert_eq!(answer["matched"], "hi ptyhub", "{answer}");
    stack.shutdown().await;
}

#[tokio::test]
async fn input_while_a_websocket_controls_is_409_and_changes_nothing_unless_forced() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let session_id = create_session(&stack, &instance, json!({"name": "controlled"})).await;
    let mut controller = Terminal::open(
        &stack,
        &format!("/ws/tool-instances/{instance}/terminal/{session_id}"),
    )
    .await;
    controller.connected().await;
    controller.read_until_output("$ ").await;
    let before = screen_matching(&stack, &instance, &session_id, r"\$").await["screen"].clone();

    let refused = type_input(
        &stack,
        &instance,
        &session_id,
        json!({"text": "echo refused-$((6*7))", "keys": ["Enter"]}),
    )
    .await;
    refused.expect_error(409, "input while a client holds control");
    let after = screen(&stack, &instance, &session_id, "")
        .await
        .expect(200, "the screen after the refusal");
    assert_eq!(after["offset"], before["offset"], "{after}");
    assert_eq!(after["text"], before["text"], "{after}");

    let forced = type_input(
        &stack,
        &instance,
        &session_id,
        json!({"text": "echo forced-$((6*7))", "keys": ["Enter"], "force": true}),
    )
    .await
    .expect(200, "forced input");
    let answer = wait_for_screen(
        &stack,
        &instance,
        &session_id,
        json!({"pattern": "forced-42\n", "after_offset": forced["offset"]}),
    )
    .await
    .expect(200, "the forced input's output");
    assert_eq!(answer["outcome"], "matched", "{answer}");
    // Input is written in order: had the refused command been typed, its echo would come first.
    assert!(
        !text_of(&answer["screen"]).contains("refused"),
        "{}",
        answer["screen"]
    );

    // The controller saw it and is still in control.
    controller.read_until_output("forced-42").await;
    let from = controller.output.len();
    controller.send_input("echo still-$((1+1))\n").await;
    controller.read_until_output_from(from, "still-2").await;
    assert!(
        controller
            .texts
            .iter()
            .all(|text| text["type"] != "session_detached"),
        "{:?}",
        controller.texts
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn an_unknown_key_is_422_with_the_brokers_message_and_writes_nothing() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let session_id = create_session(&stack, &instance, json!({"name": "keys"})).await;
    let before = screen_matching(&stack, &instance, &session_id, r"\$").await["screen"].clone();

    let refused = type_input(
        &stack,
        &instance,
        &session_id,
        json!({"text": "echo refused-$((6*7))", "keys": ["Enter", "NoSuchKey"]}),
    )
    .await;
    let detail = refused.expect_error(422, "an unknown key name");
    assert!(detail.contains("NoSuchKey"), "{detail}");
    let after = screen(&stack, &instance, &session_id, "")
        .await
        .expect(200, "the screen after the refusal");
    assert_eq!(after["offset"], before["offset"], "{after}");

    let marker = type_input(
        &stack,
        &instance,
        &session_id,
        json!({"text": "echo after-$((6*7))", "keys": ["Enter"]}),
    )
    .await
    .expect(200, "a marker typed after the refusal");
    let answer = wait_for_screen(
        &stack,
        &instance,
        &session_id,
        json!({"pattern": "after-42\n", "after_offset": marker["offset"]}),
    )
    .await
    .expect(200, "the marker's output");
    assert!(
        !text_of(&answer["screen"]).contains("refused"),
        "{}",
        answer["screen"]
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn bad_screen_requests_are_refused_and_write_nothing() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let session_id = create_session(&stack, &instance, json!({"name": "bad"})).await;
    let before = screen_matching(&stack, &instance, &session_id, r"\$").await["screen"].clone();

    for (query, status) in [
        ("?format=xml", 400),
        ("?format=", 200),
        ("?scrollback=lots", 400),
        ("?scrollback=-1", 400),
        ("?scrollback=10001", 422),
        ("?scrollback=10000", 200),
    ] {
        let reply = screen(&stack, &instance, &session_id, query).await;
        if status == 200 {
            reply.expect(200, query);
        } else {
            reply.expect_error(status, query);
        }
    }
    let too_much_text = "x".repeat(1024 * 1024 + 1);
    for (body, status, what) in [
        (json!({}), 422, "an empty input"),
        (
            json!({"text": "", "keys": []}),
            422,
            "empty text and no keys",
        ),
        (json!({"force": true}), 422, "only force"),
        (json!({"text": 5}), 422, "text that is not a string"),
        (
            json!({"text": too_much_text}),
            413,
            "more than 1 MiB of text",
        ),
    ] {
        type_input(&stack, &instance, &session_id, body)
            .await
            .expect_error(status, what);
    }
    for (body, what) in [
        (json!({"pattern": "("}), "a pattern that does not compile"),
        (
            json!({"pattern": "a".repeat(4097)}),
            "a pattern over 4096 bytes",
        ),
        (json!({"timeout_ms": 300_001}), "a timeout over the maximum"),
        (json!({"timeout_ms": 0}), "a timeout of zero"),
        (
            json!({"quiet_ms": 60_001}),
            "a quiet period over the maximum",
        ),
        (json!({"scrollback": 10_001}), "scrollback over the limit"),
        (json!({"format": "xml"}), "an unknown format"),
    ] {
        wait_for_screen(&stack, &instance, &session_id, body)
            .await
            .expect_error(422, what);
    }
    wait_for_screen(&stack, &instance, &session_id, json!({}))
        .await
        .expect(200, "a wait with every default");

    // Nothing reached the shell: the screen is as it was.
    let after = screen(&stack, &instance, &session_id, "")
        .await
        .expect(200, "the screen after the refusals");
    assert_eq!(after["offset"], before["offset"], "{after}");
    assert_eq!(after["text"], before["text"], "{after}");

    // Unknown and closed sessions have no screen.
    let unknown = "0b0e5b8e-1a52-4c5f-9b36-2a4f0f2c7d10";
    screen(&stack, &instance, unknown, "")
        .await
        .expect_error(404, "an unknown session");
    rest(
        &stack,
        Method::DELETE,
        &format!("{}/{session_id}", sessions_path(&instance)),
        None,
    )
    .await
    .expect(200, "close the session");
    screen(&stack, &instance, &session_id, "")
        .await
        .expect_error(404, "a closed session's screen");
    type_input(&stack, &instance, &session_id, json!({"text": "x"}))
        .await
        .expect_error(404, "input to a closed session");
    wait_for_screen(&stack, &instance, &session_id, json!({}))
        .await
        .expect_error(404, "a wait on a closed session");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_wait_that_times_out_is_408() {
    let stack = TestStack::builder().start().await;
    let (instance, session_id) = session_running(&stack, "quiet", "sleep 30").await;
    let reply = wait_for_screen(
        &stack,
        &instance,
        &session_id,
        json!({"pattern": "never-printed", "timeout_ms": 300}),
    )
    .await;
    reply.expect_error(408, "a wait that times out");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_wait_on_a_process_that_exits_answers_exited_with_its_code() {
    let stack = TestStack::builder().start().await;
    let (instance, session_id) = session_running(
        &stack,
        "leaving",
        r#"read -p "go? " g; echo "bye-$((6*7))"; exit 3"#,
    )
    .await;
    screen_matching(&stack, &instance, &session_id, r"go\?").await;
    type_input(&stack, &instance, &session_id, json!({"keys": ["Enter"]}))
        .await
        .expect(200, "let the program go");
    let answer = wait_for_screen(
        &stack,
        &instance,
        &session_id,
        json!({"pattern": "never-printed"}),
    )
    .await
    .expect(200, "a wait the exit ends");
    assert_eq!(answer["outcome"], "exited", "{answer}");
    assert_eq!(answer["matched"], Value::Null, "{answer}");
    let screen = &answer["screen"];
    assert_eq!(screen["exit_code"], 3, "{screen}");
    assert_eq!(screen["status"], "exited", "{screen}");
    assert!(text_of(screen).contains("bye-42"), "{screen}");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_session_shows_the_title_its_program_set_and_when_it_rang_the_bell() {
    let stack = TestStack::builder().start().await;
    let fresh = create_session(&stack, &stack.instance_id, json!({"name": "fresh"})).await;
    let record = get_session(&stack, &stack.instance_id, &fresh).await;
    assert_eq!(record["title"], "", "{record}");
    assert_eq!(record["last_bell_at"], Value::Null, "{record}");

    let (instance, session_id) = session_running(
        &stack,
        "titled",
        r"printf '\033]2;hello\007'; printf 'ding\007\n'; sleep 30",
    )
    .await;
    let record = eventually("the session shows its title and bell", || async {
        let record = get_session(&stack, &instance, &session_id).await;
        (record["title"] == "hello" && record["last_bell_at"].is_string()).then_some(record)
    })
    .await;
    let rang_at = record["last_bell_at"].as_str().unwrap();
    assert!(
        chrono::DateTime::parse_from_rfc3339(rang_at).is_ok(),
        "not RFC 3339: {rang_at}"
    );
    let listed = list_sessions(&stack, &instance, false).await;
    assert_eq!(listed[0]["title"], "hello", "{listed:?}");
    let read = screen(&stack, &instance, &session_id, "")
        .await
        .expect(200, "the titled screen");
    assert_eq!(read["title"], "hello", "{read}");
    stack.shutdown().await;
}

/// Longer than any ordinary call may take between the services (10 s by default).
const LONGER_THAN_A_CALL: &str = "sleep 12";

#[tokio::test]
async fn a_wait_may_last_longer_than_an_ordinary_call_over_rest_and_grpc() {
    let stack = TestStack::builder().start().await;
    let (instance, session_id) = session_running(
        &stack,
        "slow",
        &format!("{LONGER_THAN_A_CALL}; echo late-$((6*7)); sleep 30"),
    )
    .await;
    let mut client = gateway_grpc(&stack).await;
    let over_rest = wait_for_screen(
        &stack,
        &instance,
        &session_id,
        json!({"pattern": "late-42", "timeout_ms": 60_000}),
    );
    let over_grpc = client.wait_for_screen(as_admin(
        &stack,
        session_pb::WaitForScreenRequest {
            instance: instance.clone(),
            session_id: session_id.clone(),
            pattern: "late-42".into(),
            timeout_ms: 60_000,
            quiet_ms: 0,
            after_offset: None,
            format: 0,
            scrollback: 0,
            wait_for: 0,
        },
    ));
    let (over_rest, over_grpc) = tokio::join!(over_rest, over_grpc);
    let over_rest = over_rest.expect(200, "a wait over rest");
    assert_eq!(over_rest["matched"], "late-42", "{over_rest}");
    let over_grpc = over_grpc.expect("a wait over grpc").into_inner();
    assert_eq!(over_grpc.matched, "late-42");
    stack.shutdown().await;
}
