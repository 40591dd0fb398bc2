//! The older single-app layout, `/projects/{project_id}/repositories/{repository_id}/instances/
//! {iid}/terminal/...`: every method refuses an instance whose `project_id` or `repository_id`
//! label does not match with 404, and does nothing; with matching labels every method works.

use ptyhub_test_support::stack::TestStack;
use reqwest::Method;
use serde_json::{Value, json};

use super::support::{Reply, Terminal, get_session, list_sessions, rest};

/// Every session route of the layout, for the instance `instance` and session `session_id`
/// under `project`/`repository`: method, path and body.
fn routes(
    project: &str,
    repository: &str,
    instance: &str,
    session_id: &str,
) -> Vec<(Method, String, Option<Value>)> {
    let terminal =
        format!("/projects/{project}/repositories/{repository}/instances/{instance}/terminal");
    let session = format!("{terminal}/sessions/{session_id}");
    vec![
        (Method::GET, format!("{terminal}/sessions"), None),
        (
            Method::POST,
            format!("{terminal}/sessions"),
            Some(json!({"name": "intruder"})),
        ),
        (Method::GET, session.clone(), None),
        (
            Method::POST,
            format!("{session}/rename"),
            Some(json!({"name": "renamed"})),
        ),
        (Method::POST, format!("{session}/reset"), None),
        (Method::POST, format!("{terminal}/reset"), None),
        (Method::DELETE, session, None),
    ]
}

async fn call(stack: &TestStack, (method, path, body): &(Method, String, Option<Value>)) -> Reply {
    rest(stack, method.clone(), path, body.clone()).await
}

#[tokio::test]
async fn mismatched_project_or_repository_labels_are_404_on_every_method() {
    let stack = TestStack::builder().start().await;
    let instance = stack
        .register_instance("app", 5, &[("project_id", "p1"), ("repository_id", "r1")])
        .await;
    let unlabelled = stack.register_instance("bare", 5, &[]).await;
    let created = rest(
        &stack,
        Method::POST,
        &format!("/projects/p1/repositories/r1/instances/{instance}/terminal/sessions"),
        Some(json!({"name": "original"})),
    )
    .await
    .expect(201, "create through the layout");
    let session_id = created["id"].as_str().expect("a session id").to_owned();
    // A shell variable that only the original process has: a reset would lose it.
    let mut terminal = Terminal::open(
        &stack,
        &format!("/ws/tool-instances/{instance}/terminal/{session_id}"),
    )
    .await;
    terminal.connected().await;
    terminal.send_input("MARK=$((20+22))\n").await;

    for (project, repository, target) in [
        ("p2", "r1", &instance),
        ("p1", "r2", &instance),
        ("p2", "r2", &instance),
        ("p1", "r1", &unlabelled),
    ] {
        for route in routes(project, repository, target, &session_id) {
            let reply = call(&stack, &route).await;
            reply.expect_error(404, &format!("{} {}", route.0, route.1));
        }
    }

    // Nothing happened: no session created (not even the legacy default), none renamed,
    // reset or closed.
    let sessions = list_sessions(&stack, &instance, true).await;
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert!(list_sessions(&stack, &unlabelled, true).await.is_empty());
    let record = get_session(&stack, &instance, &session_id).await;
    assert_eq!(record["name"], "original");
    assert_eq!(record["status"], "active");
    assert_eq!(
        terminal
            .shell_number("mark", "echo \"mark=$MARK;\"\n")
            .await,
        42
    );
    assert!(
        terminal
            .texts
            .iter()
            .all(|text| text["status"] != "resetting"),
        "{:?}",
        terminal.texts
    );

    // The same routes with matching labels do what they say, so the 404s above were the labels.
    let expected = [200, 201, 200, 200, 200, 200, 200];
    for (route, status) in routes("p1", "r1", &instance, &session_id)
        .iter()
        .zip(expected)
    {
        let reply = call(&stack, route).await;
        assert_eq!(
            reply.status, status,
            "{} {}: {}",
            route.0, route.1, reply.body
        );
    }
    let record = get_session(&stack, &instance, &session_id).await;
    assert_eq!(record["name"], "renamed");
    assert_eq!(record["status"], "closed");
    stack.shutdown().await;
}
