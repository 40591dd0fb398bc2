//! A session's `last_activity_at` moves with its terminal: keystrokes the program never echoes
//! move it, and so does output the program prints with no keystroke before it. Each step is
//! timed by the test's clock taken before it, so neither can pass on the other's account.

use chrono::{DateTime, Utc};
use ptyhub_test_support::stack::TestStack;
use serde_json::json;

use super::support::{
    create_session, eventually, get_session, screen, screen_matching, type_input,
};

/// The session's `last_activity_at` as REST shows it.
async fn last_activity_at(stack: &TestStack, session_id: &str) -> DateTime<Utc> {
    let session = get_session(stack, &stack.instance_id, session_id).await;
    let text = session["last_activity_at"]
        .as_str()
        .unwrap_or_else(|| panic!("no last_activity_at: {session}"));
    DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|error| panic!("last_activity_at {text:?}: {error}"))
        .with_timezone(&Utc)
}

/// Waits until `last_activity_at` is at or after `since`.
async fn activity_since(stack: &TestStack, session_id: &str, since: DateTime<Utc>, what: &str) {
    eventually(what, || async {
        (last_activity_at(stack, session_id).await >= since).then_some(())
    })
    .await;
}

/// The output offset the session's screen reflects.
async fn output_offset(stack: &TestStack, session_id: &str) -> u64 {
    screen(stack, &stack.instance_id, session_id, "")
        .await
        .expect(200, "read the screen")["offset"]
        .as_u64()
        .expect("an offset")
}

#[tokio::test]
async fn last_activity_at_moves_with_unechoed_input_and_with_output_alone() {
    let stack = TestStack::builder().start().await;
    let flags = tempfile::tempdir().expect("a temporary directory");
    let release = flags.path().join("release");
    let id = create_session(&stack, &stack.instance_id, json!({})).await;
    type_input(
        &stack,
        &stack.instance_id,
        &id,
        json!({"text": "stty -echo; echo quiet-$((2+3))\n"}),
    )
    .await
    .expect(200, "turn the echo off");
    screen_matching(&stack, &stack.instance_id, &id, r"quiet-5\n\$").await;

    // Input the shell does not echo, and does not read until a line ends: no output at all.
    let before_input = output_offset(&stack, &id).await;
    let typed_at = Utc::now();
    type_input(&stack, &stack.instance_id, &id, json!({"text": "abc"}))
        .await
        .expect(200, "type without an echo");
    activity_since(
        &stack,
        &id,
        typed_at,
        "unechoed input moves last_activity_at",
    )
    .await;
    assert_eq!(
        output_offset(&stack, &id).await,
        before_input,
        "the input made output, so it did not move last_activity_at alone"
    );

    // A line (the partial one killed first) that prints only once the test releases it.
    let command = format!(
        "\u{15}until [ -e {} ]; do sleep 0.05; done; echo released-$((4*4))\n",
        release.display()
    );
    type_input(&stack, &stack.instance_id, &id, json!({"text": command}))
        .await
        .expect(200, "type the waiting command");
    let released_at = Utc::now();
    std::fs::write(&release, b"").expect("release the command");
    screen_matching(&stack, &stack.instance_id, &id, "released-16").await;
    activity_since(
        &stack,
        &id,
        released_at,
        "output alone moves last_activity_at",
    )
    .await;
    stack.shutdown().await;
}
