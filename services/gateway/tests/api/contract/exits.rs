//! A process that ends: REST records `exited` with its code (and signal), every attached client
//! gets the `exit` frame then close 1000, and a client that attaches later, within the
//! tombstone period, gets the final output, the same `exit` frame and close 1000.

use ptyhub_test_support::stack::TestStack;
use serde_json::json;

use super::support::{Terminal, create_session, session_with_status};

/// Attaches to an exited session and returns its replayed output and its `exit` frame; asserts
/// that nothing but output comes between `connected` and `exit`, and that close 1000 follows.
async fn late_attach(
    stack: &TestStack,
    instance: &str,
    session_id: &str,
) -> (String, serde_json::Value) {
    let mut late = Terminal::open(
        stack,
        &format!("/ws/tool-instances/{instance}/terminal/{session_id}"),
    )
    .await;
    late.connected().await;
    let closed = late.read_until_closed().await;
    assert_eq!(closed.code, 1000, "{closed:?}");
    assert_eq!(
        late.texts.len(),
        2,
        "expected connected and exit only: {:?}",
        late.texts
    );
    (
        String::from_utf8_lossy(&late.output).into_owned(),
        late.texts[1].clone(),
    )
}

#[tokio::test]
async fn a_late_attach_to_an_exited_session_gets_the_final_output_then_exit_then_1000() {
    let stack = TestStack::builder().start().await;
    let instance = stack
        .register_instance_with(
            "one-shot",
            5,
            &[],
            vec![
                "/bin/sh".to_owned(),
                "-c".to_owned(),
                "echo \"last-words=$((6*7))\"; exit 7".to_owned(),
            ],
        )
        .await;
    let session_id = create_session(&stack, &instance, json!({"name": "one-shot"})).await;

    let record = session_with_status(&stack, &instance, &session_id, "exited").await;
    assert_eq!(record["exit_code"], 7, "{record}");
    assert_eq!(record["exit_signal"], serde_json::Value::Null, "{record}");

    let (output, exit) = late_attach(&stack, &instance, &session_id).await;
    assert!(output.contains("last-words=42"), "{output:?}");
    assert_eq!(exit, json!({"type": "exit", "code": 7, "signal": null}));
    // The tombstone serves any number of late clients the same ending.
    let (_, again) = late_attach(&stack, &instance, &session_id).await;
    assert_eq!(again, exit);
    stack.shutdown().await;
}

#[tokio::test]
async fn a_signal_exit_carries_the_signal_to_attached_and_late_clients() {
    let stack = TestStack::builder().start().await;
    // A program that, once told to, ends itself with SIGTERM. It is started directly with every
    // signal at its default, unlike a command typed into an interactive shell that ignores
    // SIGTERM and may hand that on.
    let instance = stack
        .register_instance_with(
            "terminates-itself",
            5,
            &[],
            vec![
                "/bin/sh".to_owned(),
                "-c".to_owned(),
                "echo ready; read go; echo \"going=$((5*5))\"; kill -TERM $$".to_owned(),
            ],
        )
        .await;
    let session_id = create_session(&stack, &instance, json!({"name": "terminated"})).await;
    let mut attached = Terminal::open(
        &stack,
        &format!("/ws/tool-instances/{instance}/terminal/{session_id}"),
    )
    .await;
    attached.connected().await;
    attached.read_until_output("ready").await;
    attached.send_input("go\n").await;
    let closed = attached.read_until_closed().await;
    assert_eq!(closed.code, 1000, "{closed:?}");
    assert!(attached.output_tail().contains("going=25"));
    let exit = attached
        .texts
        .iter()
        .find(|text| text["type"] == "exit")
        .expect("an exit frame before the close")
        .clone();
    assert_eq!(exit, json!({"type": "exit", "code": 143, "signal": 15}));

    let record = session_with_status(&stack, &instance, &session_id, "exited").await;
    assert_eq!(record["exit_code"], 143, "{record}");
    assert_eq!(record["exit_signal"], 15, "{record}");

    let (_, late_exit) = late_attach(&stack, &instance, &session_id).await;
    assert_eq!(late_exit, exit);
    stack.shutdown().await;
}
