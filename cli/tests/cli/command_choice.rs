//! Who may choose a command through the CLI: `ptyhub exec` and `ptyhub new -- PROGRAM` with a
//! token scoped to an instance are refused with one clear line (the gateway's
//! `PERMISSION_DENIED`), and nothing is spawned; an admin's token runs the program. Against an
//! in-process stack, whose gateway takes JWTs (`ptyhub up` has only admin tokens).

use std::process::Output;

use ptyhub_test_support::stack::TestStack;
use serde_json::{Value, json};

use crate::support::{one_error_line, ptyhub_command, run_bounded};

/// Runs the `ptyhub` binary against the stack's gateway with `token`, off the runtime's
/// threads (the stack serves on them meanwhile).
async fn ptyhub(stack: &TestStack, token: &str, args: &[&str]) -> Output {
    let mut command = ptyhub_command();
    command
        .args(["--server", &stack.gateway_url, "--token", token])
        .args(args);
    tokio::task::spawn_blocking(move || run_bounded(&mut command, None))
        .await
        .expect("the ptyhub run")
}

async fn live_sessions(stack: &TestStack) -> Vec<Value> {
    let url = format!(
        "{}/api/v1/instances/{}/terminal/sessions",
        stack.gateway_url, stack.instance_id
    );
    let listed: Value = stack
        .http
        .get(url)
        .bearer_auth(&stack.admin_token)
        .send()
        .await
        .expect("list sessions")
        .json()
        .await
        .expect("a JSON list");
    listed["sessions"].as_array().expect("a list").clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scoped_token_cannot_choose_a_command_and_an_admin_token_can() {
    let stack = TestStack::builder().start().await;
    let user = stack.jwt("alice", &["local"], false);

    for args in [
        &["exec", "local", "--", "echo", "chosen"][..],
        &["new", "local", "--", "/bin/sh", "-c", "echo chosen"],
    ] {
        let line = one_error_line(&ptyhub(&stack, &user, args).await);
        assert!(
            line.contains("command") && line.contains("the token does not allow this"),
            "{args:?}: {line}"
        );
    }
    assert!(live_sessions(&stack).await.is_empty(), "nothing spawned");
    // Without a program the same token opens a session running the instance's command.
    let output = ptyhub(&stack, &user, &["new", "local"]).await;
    assert!(output.status.success(), "{output:?}");

    let admin = stack.admin_token.clone();
    let output = ptyhub(
        &stack,
        &admin,
        &["exec", "local", "--", "printf", "chosen-%s", "42"],
    )
    .await;
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "chosen-42");

    let output = ptyhub(
        &stack,
        &admin,
        &[
            "--json",
            "new",
            "local",
            "--",
            "/bin/sh",
            "-c",
            "echo chosen-$((6*7)); exec sleep 600",
        ],
    )
    .await;
    assert!(output.status.success(), "{output:?}");
    let created: Value = serde_json::from_slice(&output.stdout).expect("the session as JSON");
    let session_id = created["id"].as_str().expect("the session id").to_owned();
    let url = format!(
        "{}/api/v1/instances/{}/terminal/sessions/{session_id}/wait",
        stack.gateway_url, stack.instance_id
    );
    let waited: Value = stack
        .http
        .post(url)
        .bearer_auth(&stack.admin_token)
        .json(&json!({"pattern": "chosen-42", "timeout_ms": 30000}))
        .send()
        .await
        .expect("wait")
        .json()
        .await
        .expect("a JSON answer");
    assert_eq!(waited["outcome"], "matched", "{waited}");
    stack.shutdown().await;
}
