//! Commands (docs/CONTRACT.md, "Commands"): a session running bash with the shell integration
//! its instance has by default lists the commands typed into it, with their exit codes and
//! their output as text or as the bytes written, over REST (both path layouts) and the
//! gateway's gRPC surface; the session body says what the terminal is doing; the events stream
//! reports each command; bad queries, unknown commands, output the ring lost and a share link's
//! credential are refused, and a share sees neither command events nor the shell's working
//! directory nor which command runs, on REST, the events stream and gRPC; an instance without shell integration lists
//! none. `Run` on the gateway's gRPC surface types a command and answers with how it ended.

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_test_support::stack::TestStack;
use reqwest::Method;
use serde_json::{Value, json};

use super::support::{
    Events, as_admin, create_session, eventually, gateway_grpc, get_session, rest, rest_as,
    sessions_path, type_input, watch_sessions,
};

/// Registers a local instance running `bash` (with `shell_integration` when given: absent is
/// the default), labelled for the older layout's `/projects/p/repositories/r/...` routes, and
/// returns its body.
pub(super) async fn bash_instance(
    stack: &TestStack,
    name: &str,
    shell_integration: Option<bool>,
) -> Value {
    let mut body = json!({
        "name": name,
        "target": {"local": {}},
        "command": ["bash"],
        "env": {"PS1": "$ ", "TERM": "xterm-256color"},
        "labels": {"project_id": "p", "repository_id": "r"},
    });
    if let Some(shell_integration) = shell_integration {
        body["shell_integration"] = json!(shell_integration);
    }
    rest(stack, Method::POST, "/api/v1/instances", Some(body))
        .await
        .expect(201, "register a bash instance")
}

fn commands_path(instance: &str, session_id: &str) -> String {
    format!("{}/{session_id}/commands", sessions_path(instance))
}

/// `GET .../commands` with `query` (`""` or `"?after=1"` and the like), as the admin.
async fn list_commands(stack: &TestStack, instance: &str, session_id: &str, query: &str) -> Value {
    rest(
        stack,
        Method::GET,
        &format!("{}{query}", commands_path(instance, session_id)),
        None,
    )
    .await
    .expect(200, &format!("list the commands{query}"))
}

/// `GET .../commands/{command_id}/output` with `query`, as `token`.
async fn command_output(
    stack: &TestStack,
    instance: &str,
    session_id: &str,
    command_id: &str,
    query: &str,
    token: &str,
) -> reqwest::Response {
    stack
        .http
        .get(format!(
            "{}{}/{command_id}/output{query}",
            stack.gateway_url,
            commands_path(instance, session_id)
        ))
        .bearer_auth(token)
        .send()
        .await
        .expect("the gateway answers")
}

/// Waits until the session body says the shell shows its prompt, and returns the body.
pub(super) async fn at_prompt(stack: &TestStack, instance: &str, session_id: &str) -> Value {
    eventually("the shell shows its prompt", || async {
        let session = get_session(stack, instance, session_id).await;
        (session["state"] == "at_prompt").then_some(session)
    })
    .await
}

/// Types `line` and Enter through the input call, then waits until the listing holds one more
/// finished command and the shell is back at its prompt; returns that command.
async fn run_line(stack: &TestStack, instance: &str, session_id: &str, line: &str) -> Value {
    let finished = |listing: &Value| {
        listing["commands"]
            .as_array()
            .expect("a commands array")
            .iter()
            .filter(|command| !command["ended_at"].is_null())
            .count()
    };
    let before = finished(&list_commands(stack, instance, session_id, "").await);
    type_input(
        stack,
        instance,
        session_id,
        json!({"text": line, "keys": ["Enter"]}),
    )
    .await
    .expect(200, &format!("type {line:?}"));
    let listing = eventually(&format!("{line:?} finishes"), || async {
        let listing = list_commands(stack, instance, session_id, "").await;
        (finished(&listing) > before && listing["terminal"]["state"] == "at_prompt")
            .then_some(listing)
    })
    .await;
    listing["commands"]
        .as_array()
        .expect("a commands array")
        .last()
        .expect("the command typed")
        .clone()
}

/// A share link's token for the session.
pub(super) async fn share_token(stack: &TestStack, instance: &str, session_id: &str) -> String {
    let created = rest(
        stack,
        Method::POST,
        &format!("/api/v1/instances/{instance}/shares"),
        Some(json!({"session_id": session_id})),
    )
    .await
    .expect(201, "share the session");
    created["token"].as_str().expect("a token").to_owned()
}

/// `message` with `token` as its bearer credential.
pub(super) fn with_bearer<T>(token: &str, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("an ascii token"),
    );
    request
}

#[tokio::test]
async fn commands_typed_into_bash_are_listed_with_their_exit_codes_and_their_output() {
    let stack = TestStack::builder().start().await;
    let instance = bash_instance(&stack, "bash", None).await;
    assert_eq!(
        instance["shell_integration"], true,
        "on by default: {instance}"
    );
    let instance = instance["id"].as_str().expect("an id").to_owned();
    let session_id = create_session(&stack, &instance, json!({"name": "typed"})).await;
    let mut events = Events::open(&stack, &instance).await;

    let session = at_prompt(&stack, &instance, &session_id).await;
    assert_eq!(session["shell_integration"], true, "{session}");
    assert!(
        session["cwd"].is_string(),
        "bash reports its directory: {session}"
    );
    assert_eq!(session["last_notification"], Value::Null, "{session}");
    assert_eq!(session["progress"], Value::Null, "{session}");

    for line in ["true", "false", "(exit 7)"] {
        run_line(&stack, &instance, &session_id, line).await;
    }
    let listing = list_commands(&stack, &instance, &session_id, "").await;
    let commands = listing["commands"].as_array().expect("a commands array");
    let summary: Vec<(u64, &str, i64)> = commands
        .iter()
        .map(|command| {
            (
                command["id"].as_u64().expect("an id"),
                command["command"].as_str().expect("a command line"),
                command["exit_code"].as_i64().expect("an exit code"),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [(1, "true", 0), (2, "false", 1), (3, "(exit 7)", 7)],
        "{listing}"
    );
    for command in commands {
        assert!(command["started_at"].is_string(), "{command}");
        assert!(command["ended_at"].is_string(), "{command}");
        assert!(command["duration_ms"].is_u64(), "{command}");
        assert!(command["cwd"].is_string(), "{command}");
        assert!(
            command["output_end"].as_u64() >= command["output_start"].as_u64(),
            "{command}"
        );
    }
    assert_eq!(listing["first_kept_id"], 1, "{listing}");
    assert_eq!(listing["last_id"], 3, "{listing}");
    assert_eq!(listing["terminal"]["state"], "at_prompt", "{listing}");
    assert_eq!(listing["terminal"]["shell_integration"], true, "{listing}");
    assert_eq!(listing["terminal"]["running_command_id"], Value::Null);
    assert_eq!(
        get_session(&stack, &instance, &session_id).await["state"],
        "at_prompt"
    );

    // A page: after an id, at most a limit; the older layout serves the same.
    let page = list_commands(&stack, &instance, &session_id, "?after=1&limit=1").await;
    let ids: Vec<&Value> = page["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|command| &command["id"])
        .collect();
    assert_eq!(ids, [&json!(2)], "{page}");

    // Each typed command was reported on the events stream as it finished.
    let finished = events
        .until_named("command_finished", |data| {
            data["session_id"] == session_id.as_str() && data["command"]["command"] == "true"
        })
        .await;
    assert_eq!(finished["command"]["exit_code"], 0, "{finished}");
    assert_eq!(finished["command"]["id"], 1, "{finished}");
    let changed = events
        .until("state_changed", &session_id, |session| {
            session["state"] == "at_prompt"
        })
        .await;
    assert_eq!(changed["shell_integration"], true, "{changed}");

    // Output: as text without the colour, and as the bytes the program wrote.
    let printed = run_line(
        &stack,
        &instance,
        &session_id,
        r"printf 'plain \033[31mred\033[0m\n'",
    )
    .await;
    let printed_id = printed["id"].to_string();
    let text = command_output(
        &stack,
        &instance,
        &session_id,
        &printed_id,
        "",
        &stack.admin_token,
    )
    .await;
    assert_eq!(text.status(), 200);
    assert_eq!(
        text.headers()[reqwest::header::CONTENT_TYPE],
        "text/plain; charset=utf-8"
    );
    let text = text.text().await.unwrap();
    assert_eq!(text.trim_end(), "plain red", "{text:?}");
    let ansi = command_output(
        &stack,
        &instance,
        &session_id,
        &printed_id,
        "?format=ansi",
        &stack.admin_token,
    )
    .await;
    assert_eq!(ansi.status(), 200);
    assert_eq!(
        ansi.headers()[reqwest::header::CONTENT_TYPE],
        "application/octet-stream"
    );
    let ansi = ansi.bytes().await.unwrap();
    assert!(
        ansi.windows(b"\x1b[31mred".len())
            .any(|window| window == b"\x1b[31mred"),
        "{:?}",
        String::from_utf8_lossy(&ansi)
    );
    let older_layout =
        format!("/projects/p/repositories/r/instances/{instance}/terminal/sessions/{session_id}");
    let listed = rest(
        &stack,
        Method::GET,
        &format!("{older_layout}/commands"),
        None,
    )
    .await
    .expect(200, "the commands under the older layout");
    assert_eq!(listed["commands"].as_array().unwrap().len(), 4, "{listed}");
    let output = rest(
        &stack,
        Method::GET,
        &format!("{older_layout}/commands/{printed_id}/output"),
        None,
    )
    .await
    .expect(200, "a command's output under the older layout");
    assert_eq!(output.as_str().map(str::trim_end), Some("plain red"));
    rest(
        &stack,
        Method::GET,
        &format!("/projects/p/repositories/other/instances/{instance}/terminal/sessions/{session_id}/commands"),
        None,
    )
    .await
    .expect_error(404, "labels that do not match");

    // The gateway's gRPC surface forwards both calls.
    let mut client = gateway_grpc(&stack).await;
    let listed = client
        .list_commands(as_admin(
            &stack,
            session_pb::ListCommandsRequest {
                instance: "bash".to_owned(),
                session_id: session_id.clone(),
                after: 0,
                limit: 0,
            },
        ))
        .await
        .expect("list the commands over grpc")
        .into_inner();
    let exit_codes: Vec<Option<i32>> = listed
        .commands
        .iter()
        .map(|command| command.exit_code)
        .collect();
    assert_eq!(exit_codes, [Some(0), Some(1), Some(7), Some(0)]);
    let output = client
        .get_command_output(as_admin(
            &stack,
            session_pb::GetCommandOutputRequest {
                instance: instance.clone(),
                session_id: session_id.clone(),
                command_id: printed["id"].as_u64().unwrap(),
                format: broker_pb::ScreenFormat::Text as i32,
            },
        ))
        .await
        .expect("a command's output over grpc")
        .into_inner();
    assert_eq!(
        String::from_utf8_lossy(&output.data).trim_end(),
        "plain red"
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn bad_queries_unknown_commands_and_share_links_are_refused() {
    let stack = TestStack::builder().start().await;
    let instance = bash_instance(&stack, "bash", None).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let session_id = create_session(&stack, &instance, json!({})).await;
    at_prompt(&stack, &instance, &session_id).await;
    run_line(&stack, &instance, &session_id, "true").await;
    let path = commands_path(&instance, &session_id);

    for (query, status) in [
        ("?limit=5000", 422),
        ("?limit=0", 422),
        ("?limit=-1", 400),
        ("?after=abc", 400),
        ("?limit=ten", 400),
    ] {
        rest(&stack, Method::GET, &format!("{path}{query}"), None)
            .await
            .expect_error(status, query);
    }
    let limit = rest(&stack, Method::GET, &format!("{path}?limit=1000"), None).await;
    assert_eq!(limit.status, 200, "{}", limit.body);

    for (command, query, status) in [
        ("99", "", 404),
        ("0", "", 404),
        ("abc", "", 404),
        ("1", "?format=cells", 400),
    ] {
        let refused = command_output(
            &stack,
            &instance,
            &session_id,
            command,
            query,
            &stack.admin_token,
        )
        .await;
        assert_eq!(refused.status().as_u16(), status, "{command}{query}");
        let body: Value = refused.json().await.expect("a json error");
        assert!(body["detail"].is_string(), "{body}");
    }
    let unknown_session = format!(
        "{}/0b0e5b8e-1a52-4c5f-9b36-2a4f0f2c7d10/commands",
        sessions_path(&instance)
    );
    rest(&stack, Method::GET, &unknown_session, None)
        .await
        .expect_error(404, "an unknown session");

    // A share shows the terminal as it is now; what ran before is not its to read.
    let token = share_token(&stack, &instance, &session_id).await;
    rest_as(&stack, Some(&token), Method::GET, &path, None)
        .await
        .expect_error(403, "a share lists commands");
    let refused = command_output(&stack, &instance, &session_id, "1", "", &token).await;
    assert_eq!(refused.status().as_u16(), 403);
    let mut client = gateway_grpc(&stack).await;
    let status = client
        .list_commands(with_bearer(
            &token,
            session_pb::ListCommandsRequest {
                instance: instance.clone(),
                session_id: session_id.clone(),
                after: 0,
                limit: 0,
            },
        ))
        .await
        .expect_err("a share lists no commands over grpc");
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    let status = client
        .get_command_output(with_bearer(
            &token,
            session_pb::GetCommandOutputRequest {
                instance: instance.clone(),
                session_id: session_id.clone(),
                command_id: 1,
                format: 0,
            },
        ))
        .await
        .expect_err("a share reads no output over grpc");
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    // The same credential still reads the screen.
    let screen = rest_as(
        &stack,
        Some(&token),
        Method::GET,
        &format!("{}/{session_id}/screen", sessions_path(&instance)),
        None,
    )
    .await;
    assert_eq!(screen.status, 200, "{}", screen.body);
    stack.shutdown().await;
}

/// The ring of [`output_out_of_the_ring`]'s stacks.
const SMALL_RING: u64 = 64 * 1024;

/// Prints `seq 1 500` forty times (95,680 bytes, one and a half rings), pausing 20 ms between
/// them: a recorder, which never holds the terminal back, loses output that runs more than a
/// ring ahead of it, and the pauses let it keep up however busy the machine is.
const PACED_OUTPUT: &str = "for i in $(seq 1 40); do seq 1 500; sleep 0.02; done";

/// What [`PACED_OUTPUT`] prints, as a terminal shows it: each line ended by CR LF.
fn paced_output() -> String {
    (1..=500)
        .map(|n| format!("{n}\r\n"))
        .collect::<String>()
        .repeat(40)
}

/// A bash session of an instance that records `record`, in which [`PACED_OUTPUT`] ran and
/// went out of the [`SMALL_RING`]; returns the instance id, the session id and the command id.
async fn output_out_of_the_ring(stack: &TestStack, record: &str) -> (String, String, u64) {
    let instance = rest(
        stack,
        Method::POST,
        "/api/v1/instances",
        Some(json!({
            "name": "bash",
            "target": {"local": {}},
            "command": ["bash"],
            "env": {"PS1": "$ ", "TERM": "xterm-256color"},
            "record": record,
        })),
    )
    .await
    .expect(201, "register a bash instance")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let session_id = create_session(stack, &instance, json!({})).await;
    at_prompt(stack, &instance, &session_id).await;
    let paced = run_line(stack, &instance, &session_id, PACED_OUTPUT).await;
    assert_eq!(paced["exit_code"], 0, "{paced}");
    (instance, session_id, paced["id"].as_u64().unwrap())
}

#[tokio::test]
async fn output_the_ring_no_longer_holds_is_gone_and_says_how_much() {
    let stack = TestStack::builder().ring_bytes(SMALL_RING).start().await;
    let (instance, session_id, command_id) = output_out_of_the_ring(&stack, "off").await;
    let gone = command_output(
        &stack,
        &instance,
        &session_id,
        &command_id.to_string(),
        "",
        &stack.admin_token,
    )
    .await;
    assert_eq!(gone.status().as_u16(), 410);
    let body: Value = gone.json().await.unwrap();
    let detail = body["detail"].as_str().expect("a detail");
    assert!(
        detail.contains("bytes")
            && detail.chars().any(|c| c.is_ascii_digit())
            && detail.contains("not recorded"),
        "says how much was lost, and that no recording has it: {detail}"
    );

    let status = gateway_grpc(&stack)
        .await
        .get_command_output(as_admin(
            &stack,
            session_pb::GetCommandOutputRequest {
                instance: instance.clone(),
                session_id: session_id.clone(),
                command_id,
                format: broker_pb::ScreenFormat::Ansi as i32,
            },
        ))
        .await
        .expect_err("gone over grpc too");
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    assert!(status.message().contains("not recorded"), "{status:?}");
    stack.shutdown().await;
}

#[tokio::test]
async fn output_the_ring_no_longer_holds_is_read_from_a_recorded_sessions_recording() {
    let stack = TestStack::builder().ring_bytes(SMALL_RING).start().await;
    let (instance, session_id, command_id) = output_out_of_the_ring(&stack, "output").await;
    let expected = paced_output();
    for (query, format) in [("", "text"), ("?format=ansi", "ansi")] {
        let read = command_output(
            &stack,
            &instance,
            &session_id,
            &command_id.to_string(),
            query,
            &stack.admin_token,
        )
        .await;
        let status = read.status().as_u16();
        let body = read.text().await.unwrap();
        assert_eq!(status, 200, "{format}: {body}");
        let body = match format {
            // Plain text keeps the line feeds, not the carriage returns.
            "text" => body.replace('\n', "\r\n"),
            _ => body,
        };
        assert!(body == expected, "{format}: the output read back is seq's");
    }

    let output = gateway_grpc(&stack)
        .await
        .get_command_output(as_admin(
            &stack,
            session_pb::GetCommandOutputRequest {
                instance: instance.clone(),
                session_id: session_id.clone(),
                command_id,
                format: broker_pb::ScreenFormat::Ansi as i32,
            },
        ))
        .await
        .expect("read back over grpc")
        .into_inner();
    assert!(output.data == expected.as_bytes(), "over grpc too");
    stack.shutdown().await;
}

#[tokio::test]
async fn sessions_of_an_instance_without_shell_integration_list_no_commands() {
    let stack = TestStack::builder().start().await;
    let instance = bash_instance(&stack, "plain", Some(false)).await;
    assert_eq!(instance["shell_integration"], false, "{instance}");
    let instance = instance["id"].as_str().unwrap().to_owned();
    let shown = rest(
        &stack,
        Method::GET,
        &format!("/api/v1/instances/{instance}"),
        None,
    )
    .await
    .expect(200, "the instance");
    assert_eq!(shown["shell_integration"], false, "{shown}");
    let session_id = create_session(&stack, &instance, json!({})).await;
    // Typed at once: the terminal keeps it until bash reads it. The echoed line does not hold
    // the answer, only the output does.
    type_input(
        &stack,
        &instance,
        &session_id,
        json!({"text": "echo done-$((6*7))", "keys": ["Enter"]}),
    )
    .await
    .expect(200, "type a command");
    super::support::screen_matching(&stack, &instance, &session_id, "done-42").await;

    let listing = list_commands(&stack, &instance, &session_id, "").await;
    assert_eq!(listing["commands"], json!([]), "{listing}");
    assert_eq!(listing["terminal"]["shell_integration"], false, "{listing}");
    let session = get_session(&stack, &instance, &session_id).await;
    assert_eq!(session["shell_integration"], false, "{session}");
    assert_eq!(session["cwd"], Value::Null, "{session}");
    stack.shutdown().await;
}

#[tokio::test]
async fn run_through_the_gateway_types_a_command_and_answers_how_it_ended() {
    let stack = TestStack::builder().start().await;
    let instance = bash_instance(&stack, "bash", None).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let session_id = create_session(&stack, &instance, json!({})).await;
    at_prompt(&stack, &instance, &session_id).await;
    let run = |command: &str| session_pb::RunRequest {
        instance: "bash".to_owned(),
        session_id: session_id.clone(),
        command: command.to_owned(),
        timeout_ms: 20_000,
        force: false,
        format: broker_pb::ScreenFormat::Text as i32,
    };
    let mut client = gateway_grpc(&stack).await;
    let ran = client
        .run(as_admin(&stack, run("echo ran-$((6*7)); (exit 5)")))
        .await
        .expect("run a command through the gateway")
        .into_inner();
    let command = ran.command.expect("the command");
    assert_eq!(command.exit_code, Some(5), "{command:?}");
    assert_eq!(String::from_utf8_lossy(&ran.output).trim_end(), "ran-42");
    let listing = list_commands(&stack, &instance, &session_id, "").await;
    assert_eq!(listing["commands"][0]["exit_code"], 5, "{listing}");

    let token = share_token(&stack, &instance, &session_id).await;
    let refused = client
        .run(with_bearer(&token, run("true")))
        .await
        .expect_err("a share runs nothing");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_share_sees_no_command_events_and_no_working_directory() {
    let stack = TestStack::builder().start().await;
    let instance = bash_instance(&stack, "bash", None).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let session_id = create_session(&stack, &instance, json!({})).await;
    let seen_by_admin = at_prompt(&stack, &instance, &session_id).await;
    assert!(seen_by_admin["cwd"].is_string(), "{seen_by_admin}");
    let token = share_token(&stack, &instance, &session_id).await;

    // The session bodies a share reads: what the terminal is doing, not where.
    let shared = rest_as(
        &stack,
        Some(&token),
        Method::GET,
        &format!("{}/{session_id}", sessions_path(&instance)),
        None,
    )
    .await
    .expect(200, "a share reads the session");
    assert_eq!(shared["cwd"], Value::Null, "{shared}");
    assert_eq!(shared["state"], "at_prompt", "{shared}");
    let listed = rest_as(
        &stack,
        Some(&token),
        Method::GET,
        &sessions_path(&instance),
        None,
    )
    .await
    .expect(200, "a share lists the sessions");
    assert_eq!(listed["sessions"][0]["cwd"], Value::Null, "{listed}");
    let mut client = gateway_grpc(&stack).await;
    let over_grpc = client
        .get_session(with_bearer(
            &token,
            session_pb::GetSessionRequest {
                instance: instance.clone(),
                session_id: session_id.clone(),
            },
        ))
        .await
        .expect("a share reads the session over grpc")
        .into_inner();
    let terminal = over_grpc.terminal.expect("what the terminal is doing");
    assert_eq!(terminal.cwd, "", "{terminal:?}");
    assert!(terminal.shell_integration, "{terminal:?}");

    // The events streams: the admin's reports the command, the share's does not.
    let mut shared_events = Events::open_as(&stack, &instance, &token).await;
    let (name, opening) = shared_events.next().await;
    assert_eq!(name, "sessions");
    assert_eq!(opening["sessions"][0]["cwd"], Value::Null, "{opening}");
    let mut events = Events::open(&stack, &instance).await;
    let mut shared_changes = client
        .watch_sessions(with_bearer(
            &token,
            session_pb::WatchSessionsRequest {
                instance: instance.clone(),
            },
        ))
        .await
        .expect("a share watches over grpc")
        .into_inner();
    let mut admin_changes = watch_sessions(&stack, &instance).await;
    run_line(&stack, &instance, &session_id, "true").await;
    let finished = events
        .until_named("command_finished", |data| {
            data["command"]["command"] == "true"
        })
        .await;
    assert!(finished["command"]["cwd"].is_string(), "{finished}");
    super::support::next_change_of(
        &mut admin_changes,
        &session_id,
        "the command",
        |change, _| !change.commands.is_empty(),
    )
    .await;
    // A rename after it marks where the share's streams have shown everything of the command.
    rest(
        &stack,
        Method::POST,
        &format!("{}/{session_id}/rename", sessions_path(&instance)),
        Some(json!({"name": "marker"})),
    )
    .await
    .expect(200, "rename the session");
    let mut state_changes = 0;
    loop {
        let (name, data) = shared_events.next().await;
        assert!(
            !name.starts_with("command_"),
            "a share got a command event: {name} {data}"
        );
        assert_eq!(data["cwd"], Value::Null, "{name}: {data}");
        if name == "state_changed" {
            state_changes += 1;
        }
        if name == "renamed" {
            break;
        }
    }
    assert!(state_changes > 0, "the share saw the terminal change");
    loop {
        let change =
            tokio::time::timeout(std::time::Duration::from_secs(10), shared_changes.message())
                .await
                .expect("a change in time")
                .expect("the stream reads")
                .expect("the stream stays open");
        assert!(change.commands.is_empty(), "{change:?}");
        let session = change.session.expect("a session");
        assert_eq!(
            session
                .terminal
                .as_ref()
                .map_or("", |terminal| terminal.cwd.as_str()),
            "",
            "{session:?}"
        );
        if session.name == "marker" {
            break;
        }
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn a_share_does_not_see_which_command_runs() {
    let stack = TestStack::builder().start().await;
    let instance = bash_instance(&stack, "bash", None).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let session_id = create_session(&stack, &instance, json!({})).await;
    at_prompt(&stack, &instance, &session_id).await;
    type_input(
        &stack,
        &instance,
        &session_id,
        json!({"text": "sleep 60", "keys": ["Enter"]}),
    )
    .await
    .expect(200, "type a command that runs a while");
    // The session object says which command runs, as a command listing's terminal does.
    let running = eventually("the command runs", || async {
        let session = get_session(&stack, &instance, &session_id).await;
        (session["state"] == "running" && session["running_command_id"].is_u64()).then_some(session)
    })
    .await;
    let listing = list_commands(&stack, &instance, &session_id, "").await;
    assert_eq!(
        running["running_command_id"], listing["terminal"]["running_command_id"],
        "{running} {listing}"
    );
    let token = share_token(&stack, &instance, &session_id).await;

    let shared = rest_as(
        &stack,
        Some(&token),
        Method::GET,
        &format!("{}/{session_id}", sessions_path(&instance)),
        None,
    )
    .await
    .expect(200, "a share reads the session");
    assert_eq!(shared["state"], "running", "{shared}");
    assert_eq!(shared["running_command_id"], Value::Null, "{shared}");
    let listed = rest_as(
        &stack,
        Some(&token),
        Method::GET,
        &sessions_path(&instance),
        None,
    )
    .await
    .expect(200, "a share lists the sessions");
    assert_eq!(
        listed["sessions"][0]["running_command_id"],
        Value::Null,
        "{listed}"
    );

    let mut client = gateway_grpc(&stack).await;
    let get = |bearer: Option<&str>| {
        let message = session_pb::GetSessionRequest {
            instance: instance.clone(),
            session_id: session_id.clone(),
        };
        match bearer {
            Some(token) => with_bearer(token, message),
            None => as_admin(&stack, message),
        }
    };
    let seen_by_admin = client
        .get_session(get(None))
        .await
        .expect("the admin reads the session over grpc")
        .into_inner()
        .terminal
        .expect("what the terminal is doing");
    assert_ne!(seen_by_admin.running_command_id, 0, "{seen_by_admin:?}");
    let seen_by_share = client
        .get_session(get(Some(&token)))
        .await
        .expect("a share reads the session over grpc")
        .into_inner()
        .terminal
        .expect("what the terminal is doing");
    assert_eq!(seen_by_share.running_command_id, 0, "{seen_by_share:?}");
    assert_eq!(
        seen_by_share.state, seen_by_admin.state,
        "a share sees what the terminal is doing"
    );
    let listed = client
        .list_sessions(with_bearer(
            &token,
            session_pb::ListSessionsRequest {
                instance: instance.clone(),
                include_closed: false,
            },
        ))
        .await
        .expect("a share lists the sessions over grpc")
        .into_inner();
    for session in &listed.sessions {
        let terminal = session
            .terminal
            .as_ref()
            .expect("what the terminal is doing");
        assert_eq!(terminal.running_command_id, 0, "{session:?}");
    }
    // Nor in a screen, read or waited for: each carries what the terminal was doing.
    let screen = |bearer: Option<&str>| {
        let message = session_pb::GetScreenRequest {
            instance: instance.clone(),
            session_id: session_id.clone(),
            ..session_pb::GetScreenRequest::default()
        };
        match bearer {
            Some(token) => with_bearer(token, message),
            None => as_admin(&stack, message),
        }
    };
    let read_by_admin = client
        .get_screen(screen(None))
        .await
        .expect("the admin reads the screen over grpc")
        .into_inner();
    let terminal = read_by_admin.terminal.expect("what the terminal is doing");
    assert_ne!(terminal.running_command_id, 0, "{terminal:?}");
    let read_by_share = client
        .get_screen(screen(Some(&token)))
        .await
        .expect("a share reads the screen over grpc")
        .into_inner();
    let waited = client
        .wait_for_screen(with_bearer(
            &token,
            session_pb::WaitForScreenRequest {
                instance: instance.clone(),
                session_id: session_id.clone(),
                pattern: "sleep 60".to_owned(),
                timeout_ms: 5000,
                ..session_pb::WaitForScreenRequest::default()
            },
        ))
        .await
        .expect("a share waits for the screen over grpc")
        .into_inner();
    for terminal in [
        read_by_share.terminal,
        waited.terminal,
        waited.screen.and_then(|screen| screen.terminal),
    ] {
        let terminal = terminal.expect("what the terminal is doing");
        assert_eq!(terminal.running_command_id, 0, "{terminal:?}");
        let running = broker_pb::TerminalState::Running as i32;
        assert_eq!(terminal.state, running, "{terminal:?}");
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn a_shares_wait_sees_no_command_and_ends_when_the_share_is_revoked() {
    let stack = TestStack::builder().start().await;
    let instance = bash_instance(&stack, "bash", None).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let session_id = create_session(&stack, &instance, json!({})).await;
    at_prompt(&stack, &instance, &session_id).await;
    // The shell reports its directory at its prompt.
    type_input(
        &stack,
        &instance,
        &session_id,
        json!({"text": "cd /tmp", "keys": ["Enter"]}),
    )
    .await
    .expect(200, "change directory");
    eventually("the shell is at its prompt in /tmp", || async {
        let session = get_session(&stack, &instance, &session_id).await;
        (session["state"] == "at_prompt" && session["cwd"] == "/tmp").then_some(())
    })
    .await;
    type_input(
        &stack,
        &instance,
        &session_id,
        json!({"text": "sleep 60", "keys": ["Enter"]}),
    )
    .await
    .expect(200, "type a command that runs a while");
    eventually("the command runs", || async {
        let session = get_session(&stack, &instance, &session_id).await;
        (session["state"] == "running").then_some(())
    })
    .await;
    let shared = rest(
        &stack,
        Method::POST,
        &format!("/api/v1/instances/{instance}/shares"),
        Some(json!({"session_id": session_id})),
    )
    .await
    .expect(201, "share the session");
    let token = shared["token"].as_str().expect("a token").to_owned();
    let wait_path = format!("{}/{session_id}/wait", sessions_path(&instance));
    let on_screen = json!({"pattern": "sleep 60", "timeout_ms": 5000});

    // The admin's wait says where the shell is and which command runs; the share's does not.
    let admin = rest(&stack, Method::POST, &wait_path, Some(on_screen.clone()))
        .await
        .expect(200, "the admin waits for what the screen shows");
    assert!(admin["terminal"]["running_command_id"].is_u64(), "{admin}");
    assert_eq!(admin["terminal"]["cwd"], "/tmp", "{admin}");
    assert_eq!(admin["screen"]["terminal"]["cwd"], "/tmp", "{admin}");
    let seen = rest_as(
        &stack,
        Some(&token),
        Method::POST,
        &wait_path,
        Some(on_screen),
    )
    .await
    .expect(200, "a share waits for what the screen shows");
    assert_eq!(seen["terminal"]["state"], "running", "{seen}");
    assert_eq!(
        seen["terminal"]["running_command_id"],
        Value::Null,
        "{seen}"
    );
    assert_eq!(seen["terminal"]["cwd"], Value::Null, "{seen}");
    // Nor does the screen a wait answers with, or one read.
    let screen_path = format!("{}/{session_id}/screen", sessions_path(&instance));
    let read = rest_as(&stack, Some(&token), Method::GET, &screen_path, None)
        .await
        .expect(200, "a share reads the screen");
    for screen in [&seen["screen"], &read] {
        let terminal = &screen["terminal"];
        assert_eq!(terminal["state"], "running", "{screen}");
        assert_eq!(terminal["running_command_id"], Value::Null, "{screen}");
        assert_eq!(terminal["cwd"], Value::Null, "{screen}");
    }

    // A share's wait for what never comes ends when the share is revoked, not at its timeout:
    // with the words of a wait cut short ("share link revoked"), not those of a credential
    // refused at the door, which a wait sent after the revocation would get. The revocation
    // is sent once the gateway counts the wait among its open streams.
    let streams_before = crate::common::open_streams(&stack).await;
    let wait = rest_as(
        &stack,
        Some(&token),
        Method::POST,
        &wait_path,
        Some(json!({"pattern": "never-shown", "timeout_ms": 300000})),
    );
    let revoke = async {
        eventually("the gateway holds the share's wait open", || async {
            (crate::common::open_streams(&stack).await > streams_before).then_some(())
        })
        .await;
        rest(
            &stack,
            Method::DELETE,
            &format!(
                "/api/v1/instances/{instance}/shares/{}",
                shared["id"].as_str().expect("an id")
            ),
            None,
        )
        .await
        .expect(200, "revoke the share");
    };
    // Both patiences (the wait's being counted, then its end) are far below its 300 s timeout.
    let (ended, ()) = tokio::time::timeout(2 * super::support::PATIENCE, async {
        tokio::join!(wait, revoke)
    })
    .await
    .expect("the wait ends with its share, long before its timeout");
    assert_eq!(
        ended.expect_error(401, "a revoked share's wait is refused"),
        "share link revoked"
    );
    stack.shutdown().await;
}
