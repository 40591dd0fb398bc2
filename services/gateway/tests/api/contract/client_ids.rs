//! A browser tab's `client_id` names one session: any number of concurrent opens with it give
//! one session and one process, which REST lists once.

use ptyhub_test_support::stack::TestStack;

use super::support::{Terminal, list_sessions};

#[tokio::test]
async fn concurrent_opens_with_one_client_id_give_one_session() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let path = format!("/ws/tool-instances/{instance}/terminal?client_id=tab-7");
    // As many opens as the cap allows sessions, so separate sessions would all fit. Each is a
    // controller, as a reloading tab is; later ones take over, but each is connected first.
    let opens = (0..5).map(|_| async {
        let mut terminal = Terminal::open(&stack, &path).await;
        let connected = terminal.connected().await;
        (terminal, connected)
    });
    let opened = futures::future::join_all(opens).await;

    let session_ids: Vec<&str> = opened
        .iter()
        .map(|(_, connected)| connected["session"]["id"].as_str().expect("a session id"))
        .collect();
    assert!(
        session_ids.iter().all(|id| *id == session_ids[0]),
        "{session_ids:?}"
    );
    let sessions = list_sessions(&stack, &instance, true).await;
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(sessions[0]["id"], session_ids[0]);
    assert_eq!(sessions[0]["aliases"], serde_json::json!(["client:tab-7"]));
    stack.shutdown().await;
}
