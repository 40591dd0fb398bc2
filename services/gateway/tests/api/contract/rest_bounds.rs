//! REST bounds at their edges: 1000 columns and 500 rows are a size, one more is 422; a
//! 128-character alias is an alias, 129 is 422; `max_sessions` 1..=50, with 0 and 51 refused; an
//! instance names one target, never both; `control_grant_timeout` 1..=3600 or `null`. Each
//! refusal is `{"detail"}` and creates nothing.

use ptyhub_test_support::stack::TestStack;
use reqwest::Method;
use serde_json::{Value, json};

use super::support::{Reply, create_session, list_sessions, rest, sessions_path};

async fn create(stack: &TestStack, body: Value) -> Reply {
    rest(
        stack,
        Method::POST,
        &sessions_path(&stack.instance_id),
        Some(body),
    )
    .await
}

async fn register(stack: &TestStack, body: Value) -> Reply {
    rest(stack, Method::POST, "/api/v1/instances", Some(body)).await
}

async fn instance_names(stack: &TestStack) -> Vec<String> {
    let listed = rest(stack, Method::GET, "/api/v1/instances", None)
        .await
        .expect(200, "list instances");
    listed["instances"]
        .as_array()
        .expect("an instances array")
        .iter()
        .map(|instance| instance["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn a_size_past_1000_columns_or_500_rows_is_422_and_the_largest_size_is_spawned() {
    let stack = TestStack::builder().start().await;
    for (cols, rows) in [(1001, 24), (80, 501)] {
        let detail = create(&stack, json!({"cols": cols, "rows": rows}))
            .await
            .expect_error(422, &format!("a {cols}x{rows} session"));
        assert!(
            detail.contains(&format!("{cols}x{rows}")) && detail.contains("1..=1000"),
            "the detail names the size and the bounds: {detail}"
        );
    }
    assert!(
        list_sessions(&stack, &stack.instance_id, true)
            .await
            .is_empty(),
        "a refused size created a session"
    );

    let largest = create_session(
        &stack,
        &stack.instance_id,
        json!({"cols": 1000, "rows": 500}),
    )
    .await;
    let session = super::support::get_session(&stack, &stack.instance_id, &largest).await;
    assert_eq!(
        (session["cols"].as_u64(), session["rows"].as_u64()),
        (Some(1000), Some(500))
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn an_alias_of_129_characters_is_422_and_one_of_128_is_kept() {
    let stack = TestStack::builder().start().await;
    let too_long = "a".repeat(129);
    let detail = create(&stack, json!({"aliases": ["fine", too_long]}))
        .await
        .expect_error(422, "a 129-character alias");
    assert!(detail.contains("128"), "{detail}");
    assert!(
        list_sessions(&stack, &stack.instance_id, true)
            .await
            .is_empty(),
        "a refused alias created a session"
    );

    let longest = "b".repeat(128);
    let id = create_session(&stack, &stack.instance_id, json!({"aliases": [longest]})).await;
    let session = super::support::get_session(&stack, &stack.instance_id, &id).await;
    assert_eq!(session["aliases"], json!([longest]));
    stack.shutdown().await;
}

#[tokio::test]
async fn max_sessions_outside_1_to_50_and_two_targets_are_422_and_register_nothing() {
    let stack = TestStack::builder().start().await;
    let before = instance_names(&stack).await;
    let refused = [
        (
            "max_sessions 0",
            json!({"name": "none", "target": {"local": {}}, "max_sessions": 0}),
        ),
        (
            "max_sessions 51",
            json!({"name": "many", "target": {"local": {}}, "max_sessions": 51}),
        ),
        (
            "both targets",
            json!({
                "name": "both",
                "target": {"local": {}, "docker": {"container": "web"}},
            }),
        ),
        ("no target", json!({"name": "nowhere", "target": {}})),
    ];
    for (what, body) in refused {
        let detail = register(&stack, body).await.expect_error(422, what);
        let named = if what.contains("target") {
            "exactly one of docker and local"
        } else {
            "max_sessions"
        };
        assert!(detail.contains(named), "{what}: {detail}");
    }
    assert_eq!(
        instance_names(&stack).await,
        before,
        "a refused instance was registered"
    );

    for max_sessions in [1, 50] {
        let name = format!("edge-{max_sessions}");
        let instance = register(
            &stack,
            json!({"name": name, "target": {"local": {}}, "max_sessions": max_sessions}),
        )
        .await
        .expect(201, &format!("max_sessions {max_sessions}"));
        assert_eq!(instance["max_sessions"], max_sessions, "{instance}");
    }
    stack.shutdown().await;
}

/// An instance's `control_grant_timeout` is 1..=3600 seconds or `null` (never): the edges and
/// `null` are registered and read back as given; 0, 3601, a negative number and a string are
/// 422 with a detail that names the field, and register nothing.
#[tokio::test]
async fn control_grant_timeout_outside_1_to_3600_or_not_a_number_is_422_and_registers_nothing() {
    let stack = TestStack::builder().start().await;
    let before = instance_names(&stack).await;
    let refused = [
        ("0 seconds", json!(0)),
        ("3601 seconds", json!(3601)),
        ("a negative number", json!(-1)),
        ("a string", json!("30")),
    ];
    for (what, timeout) in refused {
        let detail = register(
            &stack,
            json!({"name": "refused", "target": {"local": {}}, "control_grant_timeout": timeout}),
        )
        .await
        .expect_error(422, what);
        assert!(detail.contains("control_grant_timeout"), "{what}: {detail}");
    }
    assert_eq!(
        instance_names(&stack).await,
        before,
        "a refused instance was registered"
    );

    for timeout in [json!(1), json!(3600), Value::Null] {
        let name = format!(
            "grant-{}",
            timeout
                .as_u64()
                .map_or("never".into(), |secs| secs.to_string())
        );
        let instance = register(
            &stack,
            json!({"name": name, "target": {"local": {}}, "control_grant_timeout": timeout}),
        )
        .await
        .expect(201, &format!("control_grant_timeout {timeout}"));
        assert_eq!(instance["control_grant_timeout"], timeout, "{instance}");
        let read_back = rest(
            &stack,
            Method::GET,
            &format!("/api/v1/instances/{name}"),
            None,
        )
        .await
        .expect(200, "the instance just registered");
        assert_eq!(read_back["control_grant_timeout"], timeout, "{read_back}");
    }
    stack.shutdown().await;
}
