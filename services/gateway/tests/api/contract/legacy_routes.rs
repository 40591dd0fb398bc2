//! The legacy single-session reset (`POST .../terminal/reset`, and the same under the
//! project/repository layout) replaces the default session's process in place: a new pid, none
//! of the old shell's variables, the same session id, and the attached socket sees
//! `resetting` then `connected`.

use ptyhub_test_support::stack::TestStack;
use reqwest::Method;

use super::support::{Terminal, rest};

/// Sets a variable in the shell and returns its pid.
async fn shell_pid_with_a_variable(terminal: &mut Terminal) -> u64 {
    let from = terminal.output.len();
    terminal
        .send_input("LEGACY=$((40+2)); echo \"pid=$$;legacy=$LEGACY;\"\n")
        .await;
    let pid = terminal.read_number(from, "pid").await;
    assert_eq!(terminal.read_number(from, "legacy").await, 42);
    pid
}

/// Waits for the socket's `resetting` and the `connected` after it.
async fn resetting_then_connected(terminal: &mut Terminal, session_id: &str) {
    terminal
        .read_until_text("status resetting", |text| {
            text["type"] == "status" && text["status"] == "resetting"
        })
        .await;
    let connected = terminal
        .read_until_text("connected after the reset", |text| {
            text["type"] == "status" && text["status"] == "connected"
        })
        .await;
    assert_eq!(connected["session"]["id"], session_id, "{connected}");
}

/// Asserts the shell is another process than `old_pid`, without the old one's variable.
async fn assert_replaced(terminal: &mut Terminal, old_pid: u64) {
    let from = terminal.output.len();
    terminal
        .send_input("echo \"pid=$$;legacy=${LEGACY:-0};\"\n")
        .await;
    let new_pid = terminal.read_number(from, "pid").await;
    assert_ne!(new_pid, old_pid, "the legacy reset kept the same process");
    assert_eq!(
        terminal.read_number(from, "legacy").await,
        0,
        "the shell after the legacy reset has the old one's variable"
    );
}

#[tokio::test]
async fn the_legacy_reset_replaces_the_default_sessions_process_on_both_layouts() {
    let stack = TestStack::builder().start().await;
    let instance = stack
        .register_instance(
            "legacy",
            5,
            &[("project_id", "p1"), ("repository_id", "r1")],
        )
        .await;
    let mut terminal =
        Terminal::open(&stack, &format!("/ws/tool-instances/{instance}/terminal")).await;
    let session_id = terminal.connected().await["session"]["id"]
        .as_str()
        .expect("a session id")
        .to_owned();

    for reset_path in [
        format!("/api/v1/instances/{instance}/terminal/reset"),
        format!("/projects/p1/repositories/r1/instances/{instance}/terminal/reset"),
    ] {
        let old_pid = shell_pid_with_a_variable(&mut terminal).await;
        let reset = rest(&stack, Method::POST, &reset_path, None)
            .await
            .expect(200, &format!("POST {reset_path}"));
        assert_eq!(reset["id"], session_id.as_str(), "{reset_path}: {reset}");
        resetting_then_connected(&mut terminal, &session_id).await;
        assert_replaced(&mut terminal, old_pid).await;
    }
    stack.shutdown().await;
}
