//! Run over REST (docs/CONTRACT.md, "Run"): `POST .../run` types one command at a bash prompt
//! and answers with its exit code and output, as text or as base64 of the bytes written, under
//! both path layouts; it is refused, with nothing typed, for an empty or NUL-bearing command, a
//! timeout over the maximum, a program without shell integration (422), a shell that runs a
//! program or a session another client controls (409, unless `force`), a share link's
//! credential or another site's origin (403), and a body that is not JSON (400, 415); a command
//! that outlasts its timeout is 408 and goes on running.

use base64::Engine as _;
use reqwest::Method;
use serde_json::{Value, json};

use super::commands::{at_prompt, bash_instance, share_token};
use super::support::{
    Reply, Terminal, create_session, eventually, get_session, rest, rest_as, sessions_path,
    type_input,
};
use ptyhub_test_support::stack::TestStack;

fn run_path(instance: &str, session_id: &str) -> String {
    format!("{}/{session_id}/run", sessions_path(instance))
}

/// `POST .../run` with `body`, as the admin.
async fn run(stack: &TestStack, instance: &str, session_id: &str, body: Value) -> Reply {
    rest(
        stack,
        Method::POST,
        &run_path(instance, session_id),
        Some(body),
    )
    .await
}

/// A bash instance (with shell integration unless `Some(false)`) and a session of it at its
/// prompt: the instance id and the session id.
async fn bash_at_prompt(stack: &TestStack, name: &str) -> (String, String) {
    let instance = bash_instance(stack, name, None).await["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let session_id = create_session(stack, &instance, json!({})).await;
    at_prompt(stack, &instance, &session_id).await;
    (instance, session_id)
}

#[tokio::test]
async fn run_answers_a_commands_exit_code_and_output() {
    let stack = TestStack::builder().start().await;
    let (instance, session_id) = bash_at_prompt(&stack, "bash").await;

    let ran = run(
        &stack,
        &instance,
        &session_id,
        json!({"command": "echo \"it's\""}),
    )
    .await
    .expect(200, "run echo");
    assert_eq!(ran["exit_code"], 0, "{ran}");
    assert_eq!(ran["output"], "it's\n", "{ran}");
    assert!(ran.get("output_base64").is_none(), "text only: {ran}");
    assert_eq!(ran["truncated"], false, "{ran}");
    assert!(ran["duration_ms"].is_u64(), "{ran}");
    assert_eq!(ran["command_id"], ran["command"]["id"], "{ran}");
    assert_eq!(ran["command"]["command"], "echo \"it's\"", "{ran}");
    assert_eq!(ran["command"]["exit_code"], 0, "{ran}");
    assert!(ran["command"]["ended_at"].is_string(), "{ran}");

    let failed = run(
        &stack,
        &instance,
        &session_id,
        json!({"command": "(exit 3)"}),
    )
    .await
    .expect(200, "run (exit 3)");
    assert_eq!(failed["exit_code"], 3, "{failed}");
    assert_eq!(failed["output"], "", "{failed}");
    assert_eq!(
        failed["command_id"].as_u64(),
        ran["command_id"].as_u64().map(|id| id + 1),
        "{failed}"
    );

    // The bytes as written, base64-encoded.
    let ansi = run(
        &stack,
        &instance,
        &session_id,
        json!({"command": r"printf '\033[31mred\033[0m\n'", "format": "ansi", "timeout_ms": 20000}),
    )
    .await
    .expect(200, "run with ansi output");
    assert!(ansi.get("output").is_none(), "bytes only: {ansi}");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(ansi["output_base64"].as_str().expect("output_base64"))
        .expect("base64");
    assert!(
        bytes
            .windows(b"\x1b[31mred".len())
            .any(|window| window == b"\x1b[31mred"),
        "{:?}",
        String::from_utf8_lossy(&bytes)
    );

    // The older layout runs the same; the commands listing has every run.
    let older_layout = format!(
        "/projects/p/repositories/r/instances/{instance}/terminal/sessions/{session_id}/run"
    );
    let older = rest(
        &stack,
        Method::POST,
        &older_layout,
        Some(json!({"command": "echo older"})),
    )
    .await
    .expect(200, "run under the older layout");
    assert_eq!(older["output"], "older\n", "{older}");
    let listing = rest(
        &stack,
        Method::GET,
        &format!("{}/{session_id}/commands", sessions_path(&instance)),
        None,
    )
    .await
    .expect(200, "the commands");
    let exit_codes: Vec<&Value> = listing["commands"]
        .as_array()
        .expect("commands")
        .iter()
        .map(|command| &command["exit_code"])
        .collect();
    assert_eq!(exit_codes, [&json!(0), &json!(3), &json!(0), &json!(0)]);
    stack.shutdown().await;
}

#[tokio::test]
async fn run_is_refused_while_a_program_runs_or_another_client_controls() {
    let stack = TestStack::builder().start().await;
    let (instance, session_id) = bash_at_prompt(&stack, "bash").await;

    // A program started by typing: the shell is not at its prompt.
    type_input(
        &stack,
        &instance,
        &session_id,
        json!({"text": "sleep 5", "keys": ["Enter"]}),
    )
    .await
    .expect(200, "type sleep 5");
    eventually("sleep runs", || async {
        let session = get_session(&stack, &instance, &session_id).await;
        (session["state"] == "running").then_some(())
    })
    .await;
    let detail = run(&stack, &instance, &session_id, json!({"command": "true"}))
        .await
        .expect_error(409, "run while sleep runs");
    assert!(detail.contains("a program is running"), "{detail}");

    // A controller attached to another session: 409 unless forced.
    let controlled = create_session(&stack, &instance, json!({})).await;
    at_prompt(&stack, &instance, &controlled).await;
    let mut terminal = Terminal::open(
        &stack,
        &format!("/ws/tool-instances/{instance}/terminal/{controlled}"),
    )
    .await;
    terminal.connected().await;
    let detail = run(&stack, &instance, &controlled, json!({"command": "true"}))
        .await
        .expect_error(409, "run while a client holds control");
    assert!(detail.contains("control"), "{detail}");
    let forced = run(
        &stack,
        &instance,
        &controlled,
        json!({"command": "echo forced", "force": true}),
    )
    .await
    .expect(200, "a forced run");
    assert_eq!(forced["output"], "forced\n", "{forced}");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_run_that_outlasts_its_timeout_is_408_and_goes_on_running() {
    let stack = TestStack::builder().start().await;
    let (instance, session_id) = bash_at_prompt(&stack, "bash").await;
    let detail = run(
        &stack,
        &instance,
        &session_id,
        json!({"command": "sleep 2", "timeout_ms": 200}),
    )
    .await
    .expect_error(408, "a run past its timeout");
    assert!(detail.contains("goes on running"), "{detail}");
    let session = get_session(&stack, &instance, &session_id).await;
    assert_eq!(session["state"], "running", "still running: {session}");
    // It ends on its own, and the shell is back at its prompt.
    at_prompt(&stack, &instance, &session_id).await;
    stack.shutdown().await;
}

#[tokio::test]
async fn bad_runs_are_refused_before_anything_is_typed() {
    let stack = TestStack::builder().start().await;
    let (instance, session_id) = bash_at_prompt(&stack, "bash").await;
    let path = run_path(&instance, &session_id);

    for (body, status, what) in [
        (json!({"command": ""}), 422, "an empty command"),
        (json!({"command": "  \n"}), 422, "a blank command"),
        (json!({"command": "echo a\u{0}b"}), 422, "a NUL"),
        (
            json!({"command": "true", "timeout_ms": 300_001}),
            422,
            "a timeout over the maximum",
        ),
        (
            json!({"command": "true", "timeout_ms": 0}),
            422,
            "a zero timeout",
        ),
        (
            json!({"command": "true", "format": "cells"}),
            422,
            "an unknown format",
        ),
        (json!({}), 422, "no command"),
        (json!({"command": 7}), 422, "a command that is not a string"),
    ] {
        run(&stack, &instance, &session_id, body)
            .await
            .expect_error(status, what);
    }
    let malformed = stack
        .http
        .post(format!("{}{path}", stack.gateway_url))
        .bearer_auth(&stack.admin_token)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body("{\"command\": ")
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(malformed.status(), 400, "malformed json");
    let plain = stack
        .http
        .post(format!("{}{path}", stack.gateway_url))
        .bearer_auth(&stack.admin_token)
        .header(reqwest::header::CONTENT_TYPE, "text/plain")
        .body("{\"command\": \"true\"}")
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(plain.status(), 415, "a text/plain body");
    let other_site = stack
        .http
        .post(format!("{}{path}", stack.gateway_url))
        .bearer_auth(&stack.admin_token)
        .header(reqwest::header::ORIGIN, "https://evil.example")
        .json(&json!({"command": "true"}))
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(other_site.status(), 403, "another site's origin");

    // A share link's credential may not type, so it may not run.
    let token = share_token(&stack, &instance, &session_id).await;
    let detail = rest_as(
        &stack,
        Some(&token),
        Method::POST,
        &path,
        Some(json!({"command": "true"})),
    )
    .await
    .expect_error(403, "a share runs");
    assert!(detail.contains("only view"), "{detail}");

    // Nothing of the above was typed.
    let listing = rest(
        &stack,
        Method::GET,
        &format!("{}/{session_id}/commands", sessions_path(&instance)),
        None,
    )
    .await
    .expect(200, "the commands");
    assert_eq!(listing["commands"], json!([]), "{listing}");

    // A program without shell integration marks no prompt to run at.
    let plain_instance = bash_instance(&stack, "plain", Some(false)).await["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let plain_session = create_session(&stack, &plain_instance, json!({})).await;
    let detail = run(
        &stack,
        &plain_instance,
        &plain_session,
        json!({"command": "true"}),
    )
    .await
    .expect_error(422, "a session without shell integration");
    assert!(detail.contains("shell integration"), "{detail}");
    stack.shutdown().await;
}
