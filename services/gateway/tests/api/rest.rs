//! The REST API against a real stack (broker with local PTYs, session-api on SQLite, gateway).

use crate::common::{Terminal, create_session, delete, get, post, send};
use ptyhub_test_support::stack::TestStack;
use reqwest::Method;
use serde_json::{Value, json};

/// A static token of the length the gateway accepts, for gateways the tests configure alone.
const ADMIN: &str = "rest-test-admin-token-0123456789abcdef";

#[tokio::test]
async fn routes_need_a_credential_except_healthz() {
    let stack = TestStack::builder().start().await;
    let (status, body) = send(&stack, Method::GET, "/api/v1/instances", None, None).await;
    assert_eq!(
        (status, &body),
        (401, &json!({"detail": "missing credential"}))
    );
    let (status, body) = send(
        &stack,
        Method::GET,
        "/api/v1/instances",
        Some("not-a-token"),
        None,
    )
    .await;
    assert_eq!(
        (status, &body),
        (401, &json!({"detail": "invalid credential"}))
    );
    let path = format!("/api/v1/instances/{}/terminal/sessions", stack.instance_id);
    let (status, _) = send(&stack, Method::POST, &path, None, Some(json!({}))).await;
    assert_eq!(status, 401);
    let (status, _) = send(&stack, Method::GET, "/api/v1/openapi.json", None, None).await;
    assert_eq!(status, 401);
    let (status, _) = send(&stack, Method::GET, "/metrics", None, None).await;
    assert_eq!(status, 401);

    for probe in ["/healthz", "/livez", "/readyz"] {
        let (status, body) = send(&stack, Method::GET, probe, None, None).await;
        assert_eq!(status, 200, "{probe}: {body}");
        assert_eq!(body["status"], "ok", "{probe}");
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn healthz_names_brokers_only_to_an_admin() {
    let stack = TestStack::builder().start().await;
    for credential in [None, Some("not-a-token")] {
        let (status, body) = send(&stack, Method::GET, "/healthz", credential, None).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body, json!({"status": "ok"}), "{credential:?}");
    }
    let (status, body) = send(
        &stack,
        Method::GET,
        "/healthz",
        Some(&stack.admin_token),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let brokers = body["brokers"].as_array().expect("brokers for an admin");
    assert_eq!(brokers[0]["id"], "local", "{body}");
    assert!(brokers[0]["endpoint"].as_str().is_some(), "{body}");
    stack.shutdown().await;
}

#[tokio::test]
async fn instances_register_list_get_and_delete() {
    let stack = TestStack::builder().start().await;
    let (status, created) = post(
        &stack,
        "/api/v1/instances",
        Some(json!({
            "name": "builder",
            "target": {"local": {}},
            "command": ["/bin/sh"],
            "env": {"LANG": "C"},
            "max_sessions": 3,
            "labels": {"project_id": "p1", "repository_id": "r1"},
        })),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["name"], "builder");
    assert_eq!(created["target"], json!({"local": {}}));
    assert_eq!(created["max_sessions"], 3);
    assert_eq!(created["labels"]["project_id"], "p1");
    let id = created["id"].as_str().unwrap().to_owned();

    let (status, listed) = get(&stack, "/api/v1/instances").await;
    assert_eq!(status, 200);
    let names: Vec<&str> = listed["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|instance| instance["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"builder") && names.contains(&"local"),
        "{names:?}"
    );

    let (status, by_id) = get(&stack, &format!("/api/v1/instances/{id}")).await;
    assert_eq!((status, by_id["name"].as_str()), (200, Some("builder")));
    let (status, by_name) = get(&stack, "/api/v1/instances/builder").await;
    assert_eq!((status, by_name["id"].as_str()), (200, Some(id.as_str())));

    create_session(&stack, &id, json!({})).await;
    let (status, deleted) = delete(&stack, &format!("/api/v1/instances/{id}")).await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted["instance_id"], id.as_str());
    assert_eq!(deleted["closed_sessions"], 1);
    let (status, body) = get(&stack, &format!("/api/v1/instances/{id}")).await;
    assert_eq!(
        (status, &body),
        (404, &json!({"detail": "instance not found"}))
    );

    let (status, body) = post(
        &stack,
        "/api/v1/instances",
        Some(json!({"name": "x", "target": {"local": {}}, "max_sessions": 51})),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    let (status, body) = post(&stack, "/api/v1/instances", Some(json!({"name": "x"}))).await;
    assert_eq!(status, 422, "{body}");
    stack.shutdown().await;
}

#[tokio::test]
async fn sessions_create_list_get_rename_reset_and_close() {
    let stack = TestStack::builder().start().await;
    let base = format!("/api/v1/instances/{}/terminal/sessions", stack.instance_id);

    let (status, created) = post(
        &stack,
        &base,
        Some(json!({"name": "  build  ", "aliases": ["conv-1"], "cols": 120, "rows": 30})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["name"], "build");
    assert!(matches!(
        created["status"].as_str(),
        Some("starting" | "active")
    ));
    assert!(created["created_at"].is_string());
    let id = created["id"].as_str().unwrap().to_owned();

    // No body at all is fine: every field is optional, and the name defaults to `Session N`.
    let response = stack
        .http
        .post(format!("{}{base}", stack.gateway_url))
        .bearer_auth(&stack.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    let second: Value = response.json().await.unwrap();
    assert_eq!(second["name"], "Session 1");

    let (status, listed) = get(&stack, &base).await;
    assert_eq!(status, 200);
    let sessions = listed["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2);
    assert_eq!(sessions[0]["id"], id.as_str(), "oldest first");
    for field in [
        "id",
        "name",
        "status",
        "has_websockets",
        "created_at",
        "last_activity_at",
        "aliases",
        "exit_code",
    ] {
        assert!(
            sessions[0].get(field).is_some(),
            "missing {field}: {}",
            sessions[0]
        );
    }
    assert_eq!(sessions[0]["has_websockets"], false);
    assert_eq!(sessions[0]["aliases"], json!(["conv-1"]));

    let (status, one) = get(&stack, &format!("{base}/{id}")).await;
    assert_eq!((status, one["name"].as_str()), (200, Some("build")));
    assert_eq!(
        (one["cols"].as_u64(), one["rows"].as_u64()),
        (Some(120), Some(30))
    );

    let (status, renamed) = post(
        &stack,
        &format!("{base}/{id}/rename"),
        Some(json!({"name": "deploy"})),
    )
    .await;
    assert_eq!(
        (status, &renamed),
        (200, &json!({"id": id, "name": "deploy"}))
    );

    let (status, reset) = post(&stack, &format!("{base}/{id}/reset"), None).await;
    assert_eq!(status, 200, "{reset}");
    assert_eq!(
        (reset["id"].as_str(), reset["name"].as_str()),
        (Some(id.as_str()), Some("deploy"))
    );
    // The session's state after the reset began: never exited or closed.
    assert!(
        matches!(
            reset["status"].as_str(),
            Some("resetting" | "starting" | "active")
        ),
        "{reset}"
    );

    let (status, closed) = delete(&stack, &format!("{base}/{id}")).await;
    assert_eq!(
        (status, &closed),
        (200, &json!({"status": "closed", "session_id": id}))
    );
    let (_, live) = get(&stack, &base).await;
    assert!(
        live["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|session| session["id"] != id.as_str())
    );
    let (_, history) = get(&stack, &format!("{base}?include=closed")).await;
    let closed = history["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|session| session["id"] == id.as_str())
        .expect("closed session in history");
    assert_eq!(closed["status"], "closed");
    let (status, _) = get(&stack, &format!("{base}?include=everything")).await;
    assert_eq!(status, 422);
    stack.shutdown().await;
}

#[tokio::test]
async fn creating_beyond_the_cap_is_409_with_the_contract_message() {
    let stack = TestStack::builder().start().await;
    let instance = stack.register_instance("capped", 2, &[]).await;
    create_session(&stack, &instance, json!({})).await;
    create_session(&stack, &instance, json!({})).await;
    let (status, body) = post(
        &stack,
        &format!("/api/v1/instances/{instance}/terminal/sessions"),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 409);
    assert_eq!(
        body,
        json!({"detail": "Maximum of 2 terminal sessions reached for this instance"})
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn bad_names_are_422_and_malformed_json_400() {
    let stack = TestStack::builder().start().await;
    let base = format!("/api/v1/instances/{}/terminal/sessions", stack.instance_id);
    for name in [
        json!("   "),
        json!("x".repeat(256)),
        json!("tab\tname"),
        json!(5),
    ] {
        let (status, body) = post(&stack, &base, Some(json!({"name": name}))).await;
        assert_eq!(status, 422, "{name}: {body}");
        assert!(
            body["detail"]
                .as_str()
                .unwrap()
                .chars()
                .all(|c| !c.is_uppercase()),
            "{body}"
        );
    }
    let (status, body) = post(&stack, &base, Some(json!({"cols": 0, "rows": 24}))).await;
    assert_eq!(status, 422, "{body}");
    let (status, body) = post(
        &stack,
        &base,
        Some(json!({"aliases": ["no spaces allowed"]})),
    )
    .await;
    assert_eq!(status, 422, "{body}");

    let id = create_session(&stack, &stack.instance_id, json!({})).await;
    let (status, body) = post(
        &stack,
        &format!("{base}/{id}/rename"),
        Some(json!({"name": "\u{7}"})),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    let (status, body) = post(&stack, &format!("{base}/{id}/rename"), Some(json!({}))).await;
    assert_eq!(status, 422, "{body}");

    let response = stack
        .http
        .post(format!("{}{base}/{id}/rename", stack.gateway_url))
        .bearer_auth(&stack.admin_token)
        .header("content-type", "application/json")
        .body("{\"name\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .starts_with("malformed json"),
        "{body}"
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn unknown_and_foreign_ids_are_404() {
    let stack = TestStack::builder().start().await;
    let other = stack.register_instance("other", 5, &[]).await;
    let foreign = create_session(&stack, &other, json!({})).await;
    let base = format!("/api/v1/instances/{}/terminal/sessions", stack.instance_id);

    let (status, body) = get(&stack, "/api/v1/instances/no-such-instance").await;
    assert_eq!(
        (status, &body),
        (404, &json!({"detail": "instance not found"}))
    );
    let (status, _) = get(
        &stack,
        "/api/v1/instances/no-such-instance/terminal/sessions",
    )
    .await;
    assert_eq!(status, 404);
    let unknown = "00000000-0000-4000-8000-000000000000";
    let (status, _) = get(&stack, &format!("{base}/{unknown}")).await;
    assert_eq!(status, 404);
    let (status, _) = get(&stack, &format!("{base}/not-a-uuid")).await;
    assert_eq!(status, 404);

    // A session id of another instance is unknown here, and nothing happens to it.
    for (method, suffix) in [
        (Method::GET, ""),
        (Method::DELETE, ""),
        (Method::POST, "/reset"),
    ] {
        let (status, body) = send(
            &stack,
            method.clone(),
            &format!("{base}/{foreign}{suffix}"),
            Some(&stack.admin_token),
            None,
        )
        .await;
        assert_eq!(status, 404, "{method} {suffix}: {body}");
    }
    let (status, body) = post(
        &stack,
        &format!("{base}/{foreign}/rename"),
        Some(json!({"name": "stolen"})),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let (status, still) = get(
        &stack,
        &format!("/api/v1/instances/{other}/terminal/sessions/{foreign}"),
    )
    .await;
    assert_eq!(status, 200);
    assert_ne!(still["status"], "closed");
    assert_ne!(still["name"], "stolen");

    let (status, body) = get(&stack, "/no/such/route").await;
    assert_eq!((status, &body), (404, &json!({"detail": "not found"})));
    stack.shutdown().await;
}

#[tokio::test]
async fn scoped_jwt_is_forbidden_outside_its_instances() {
    let stack = TestStack::builder().start().await;
    let other = stack.register_instance("other", 5, &[]).await;
    let foreign = create_session(&stack, &other, json!({})).await;
    let token = stack.jwt("alice", &["local"], false);
    let mine = format!("/api/v1/instances/{}/terminal/sessions", stack.instance_id);

    let (status, body) = send(&stack, Method::POST, &mine, Some(&token), Some(json!({}))).await;
    assert_eq!(status, 201, "{body}");
    let (status, listed) = send(&stack, Method::GET, "/api/v1/instances", Some(&token), None).await;
    assert_eq!(status, 200);
    let names: Vec<&str> = listed["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["local"]);

    let theirs = format!("/api/v1/instances/{other}/terminal/sessions");
    for (method, path) in [
        (Method::GET, format!("/api/v1/instances/{other}")),
        (Method::GET, theirs.clone()),
        (Method::POST, theirs.clone()),
        (Method::GET, format!("{theirs}/{foreign}")),
        (Method::DELETE, format!("{theirs}/{foreign}")),
        (
            Method::POST,
            format!("/api/v1/instances/{other}/terminal/reset"),
        ),
        (Method::GET, "/api/v1/instances/no-such-instance".to_owned()),
    ] {
        let (status, body) =
            send(&stack, method.clone(), &path, Some(&token), Some(json!({}))).await;
        assert_eq!(
            (status, &body),
            (403, &json!({"detail": "not allowed for this instance"})),
            "{method} {path}"
        );
    }
    // Through its own instance, another instance's session is simply unknown.
    let (status, _) = send(
        &stack,
        Method::GET,
        &format!("{mine}/{foreign}"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, 404);
    // Not an admin: no registering or deleting.
    let (status, _) = send(
        &stack,
        Method::POST,
        "/api/v1/instances",
        Some(&token),
        Some(json!({"name": "mine", "target": {"local": {}}})),
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = send(
        &stack,
        Method::DELETE,
        &format!("/api/v1/instances/{}", stack.instance_id),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, 403);

    let expired = stack.jwt_expired("alice", &["*"]);
    let (status, body) = send(
        &stack,
        Method::GET,
        "/api/v1/instances",
        Some(&expired),
        None,
    )
    .await;
    assert_eq!(
        (status, &body),
        (401, &json!({"detail": "expired credential"}))
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn project_repository_routes_need_matching_labels() {
    let stack = TestStack::builder().start().await;
    let instance = stack
        .register_instance(
            "labelled",
            5,
            &[("project_id", "p1"), ("repository_id", "r1")],
        )
        .await;
    let layout = format!("/projects/p1/repositories/r1/instances/{instance}/terminal");

    let (status, created) = post(
        &stack,
        &format!("{layout}/sessions"),
        Some(json!({"name": "labelled one"})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let (status, listed) = get(&stack, &format!("{layout}/sessions")).await;
    assert_eq!(
        (status, listed["sessions"][0]["id"].as_str()),
        (200, Some(id.as_str()))
    );
    let (status, _) = get(&stack, &format!("{layout}/sessions/{id}")).await;
    assert_eq!(status, 200);
    let (status, _) = post(
        &stack,
        &format!("{layout}/sessions/{id}/rename"),
        Some(json!({"name": "renamed"})),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = post(&stack, &format!("{layout}/sessions/{id}/reset"), None).await;
    assert_eq!(status, 200);
    let (status, reset) = post(&stack, &format!("{layout}/reset"), None).await;
    assert_eq!(status, 200, "{reset}");
    let (status, _) = delete(&stack, &format!("{layout}/sessions/{id}")).await;
    assert_eq!(status, 200);

    // Every method refuses a path whose labels the instance does not carry, and touches
    // nothing: the session made through the right path keeps its name and stays live.
    let (_, kept) = post(&stack, &format!("{layout}/sessions"), Some(json!({}))).await;
    let kept = kept["id"].as_str().unwrap().to_owned();
    let (_, before) = get(&stack, &format!("{layout}/sessions")).await;
    for prefix in [
        format!("/projects/p2/repositories/r1/instances/{instance}/terminal"),
        format!("/projects/p1/repositories/r2/instances/{instance}/terminal"),
        format!(
            "/projects/p1/repositories/r1/instances/{}/terminal",
            stack.instance_id
        ),
    ] {
        for (method, path, body) in [
            (Method::GET, format!("{prefix}/sessions"), None),
            (Method::POST, format!("{prefix}/sessions"), Some(json!({}))),
            (Method::GET, format!("{prefix}/sessions/{kept}"), None),
            (
                Method::POST,
                format!("{prefix}/sessions/{kept}/rename"),
                Some(json!({"name": "stolen"})),
            ),
            (
                Method::POST,
                format!("{prefix}/sessions/{kept}/reset"),
                None,
            ),
            (Method::DELETE, format!("{prefix}/sessions/{kept}"), None),
            (Method::POST, format!("{prefix}/reset"), None),
        ] {
            let (status, answer) = send(
                &stack,
                method.clone(),
                &path,
                Some(&stack.admin_token),
                body,
            )
            .await;
            assert_eq!(
                (status, &answer),
                (404, &json!({"detail": "instance not found"})),
                "{method} {path}"
            );
        }
    }
    let (status, still) = get(&stack, &format!("{layout}/sessions/{kept}")).await;
    assert_eq!(status, 200);
    assert_ne!(still["status"], "closed", "{still}");
    assert_ne!(still["name"], "stolen");
    let (_, after) = get(&stack, &format!("{layout}/sessions")).await;
    assert_eq!(
        after["sessions"].as_array().unwrap().len(),
        before["sessions"].as_array().unwrap().len(),
        "a refused create created nothing: {after}"
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn legacy_reset_creates_then_restarts_the_default_session() {
    let stack = TestStack::builder().start().await;
    let path = format!("/api/v1/instances/{}/terminal/reset", stack.instance_id);
    let (status, first) = post(&stack, &path, None).await;
    assert_eq!(status, 200, "{first}");
    let (_, listed) = get(
        &stack,
        &format!("/api/v1/instances/{}/terminal/sessions", stack.instance_id),
    )
    .await;
    let default = &listed["sessions"][0];
    assert_eq!(default["id"], first["id"]);
    assert!(
        default["aliases"]
            .as_array()
            .unwrap()
            .contains(&json!("default")),
        "{default}"
    );

    // A variable of the first shell tells it from the process a reset starts.
    let socket = format!("/ws/tool-instances/{}/terminal", stack.instance_id);
    let mut terminal = Terminal::open(&stack, &socket).await;
    terminal.connected().await;
    terminal
        .send_input("MARK=first; echo marked-$((6*7))\n")
        .await;
    terminal.read_until_output("marked-42").await;

    let (status, second) = post(&stack, &path, None).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(first["id"], second["id"], "the same session, reset");
    let resetting = terminal.read_until_text("status").await;
    assert_eq!(resetting["status"], "resetting", "{resetting}");
    let reconnected = terminal.read_until_text("status").await;
    assert_eq!(reconnected["status"], "connected", "{reconnected}");
    terminal
        .send_input("echo mark-${MARK:-unset}-$((6*7))\n")
        .await;
    terminal.read_until_output("mark-unset-42").await;
    stack.shutdown().await;
}

#[tokio::test]
async fn openapi_lists_every_contract_route() {
    let stack = TestStack::builder().start().await;
    let (status, document) = get(&stack, "/api/v1/openapi.json").await;
    assert_eq!(status, 200);
    assert!(document["openapi"].as_str().unwrap().starts_with("3."));
    let session_routes = [
        ("get", "/terminal/sessions"),
        ("post", "/terminal/sessions"),
        ("get", "/terminal/sessions/{sid}"),
        ("delete", "/terminal/sessions/{sid}"),
        ("post", "/terminal/sessions/{sid}/reset"),
        ("post", "/terminal/sessions/{sid}/rename"),
        ("get", "/terminal/sessions/{sid}/screen"),
        ("post", "/terminal/sessions/{sid}/input"),
        ("post", "/terminal/sessions/{sid}/wait"),
        ("post", "/terminal/reset"),
    ];
    let mut expected = vec![
        ("get", "/healthz".to_owned()),
        ("get", "/livez".to_owned()),
        ("get", "/readyz".to_owned()),
        ("post", "/api/v1/instances".to_owned()),
        ("get", "/api/v1/instances".to_owned()),
        ("get", "/api/v1/instances/{iid}".to_owned()),
        ("delete", "/api/v1/instances/{iid}".to_owned()),
        ("get", "/ws/tool-instances/{iid}/terminal".to_owned()),
        ("get", "/ws/tool-instances/{iid}/terminal/{sid}".to_owned()),
    ];
    for (method, suffix) in session_routes {
        expected.push((method, format!("/api/v1/instances/{{iid}}{suffix}")));
        expected.push((
            method,
            format!(
                "/projects/{{project_id}}/repositories/{{repository_id}}/instances/{{iid}}{suffix}"
            ),
        ));
    }
    for (method, path) in expected {
        assert!(
            document["paths"][&path][method].is_object(),
            "{method} {path} missing from the OpenAPI document"
        );
    }
    // The session body's own fields; what the terminal is doing is flattened in through an
    // `allOf` with the model's `TerminalActivity`.
    let session = &document["components"]["schemas"]["SessionBody"]["allOf"];
    let own = session
        .as_array()
        .and_then(|parts| parts.iter().find(|part| part["properties"].is_object()))
        .map(|part| &part["properties"])
        .expect("the session schema's own properties");
    for field in ["title", "last_bell_at"] {
        assert!(
            own[field].is_object(),
            "{field} missing from the session schema"
        );
    }
    assert!(
        session.as_array().is_some_and(|parts| parts
            .iter()
            .any(|part| part["$ref"] == "#/components/schemas/TerminalActivity")),
        "the terminal's fields missing from the session schema: {session}"
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn metrics_count_http_responses() {
    let stack = TestStack::builder().start().await;
    let (status, _) = get(&stack, "/no/such/route").await;
    assert_eq!(status, 404);
    let response = stack
        .http
        .get(format!("{}/metrics", stack.gateway_url))
        .bearer_auth(&stack.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.unwrap();
    assert!(
        text.contains("ptyhub_gateway_http_responses_total{status=\"404\"}"),
        "{text}"
    );
    assert!(text.contains("ptyhub_gateway_websockets_open 0"), "{text}");
    stack.shutdown().await;
}

#[tokio::test]
async fn aliases_are_added_to_a_live_session_over_rest_and_grpc() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let first = create_session(&stack, &instance, json!({"aliases": ["a1"]})).await;
    let second = create_session(&stack, &instance, json!({"aliases": ["b1"]})).await;
    let path =
        |session: &str| format!("/api/v1/instances/{instance}/terminal/sessions/{session}/aliases");

    for _ in 0..2 {
        let (status, added) = post(
            &stack,
            &path(&first),
            Some(json!({"aliases": ["a2", "a1"]})),
        )
        .await;
        assert_eq!(
            (status, &added["aliases"]),
            (200, &json!(["a1", "a2"])),
            "{added}"
        );
        assert_eq!(added["id"], first.as_str(), "the session object: {added}");
    }
    let (status, taken) = post(&stack, &path(&second), Some(json!({"aliases": ["a2"]}))).await;
    assert_eq!(
        (status, &taken),
        (
            409,
            &json!({"detail": format!("alias a2 is held by live session {first}")})
        ),
    );
    let many: Vec<String> = (0..15).map(|n| format!("x{n}")).collect();
    for (body, why) in [
        (json!({"aliases": ["bad name"]}), "a bad alias"),
        (json!({"aliases": []}), "no alias"),
        (json!({"aliases": many}), "17 in all"),
    ] {
        let (status, refused) = post(&stack, &path(&first), Some(body)).await;
        assert_eq!(status, 422, "{why}: {refused}");
        assert!(refused["detail"].is_string(), "{why}: {refused}");
    }
    let (status, refused) = post(&stack, &path(&first), Some(json!({"alias": "x"}))).await;
    assert!(
        matches!(status, 400 | 422),
        "an unknown field: {status} {refused}"
    );
    let (status, _) = post(
        &stack,
        &path("00000000-0000-4000-8000-000000000000"),
        Some(json!({"aliases": ["x"]})),
    )
    .await;
    assert_eq!(status, 404);
    let (_, listed) = get(
        &stack,
        &format!("/api/v1/instances/{instance}/terminal/sessions/{first}"),
    )
    .await;
    assert_eq!(
        listed["aliases"],
        json!(["a1", "a2"]),
        "nothing refused was written"
    );

    let channel = tonic::transport::Channel::from_shared(stack.gateway_url.clone())
        .expect("gateway url")
        .connect()
        .await
        .expect("a connection to the gateway");
    let mut client = ptyhub_proto::session::v1::session_api_client::SessionApiClient::new(channel);
    let request = |session: &str, alias: &str| {
        let mut request =
            tonic::Request::new(ptyhub_proto::session::v1::AddSessionAliasesRequest {
                instance: instance.clone(),
                session_id: session.to_owned(),
                aliases: vec![alias.to_owned()],
            });
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {}", stack.admin_token)
                .parse()
                .expect("a header"),
        );
        request
    };
    let added = client
        .add_session_aliases(request(&second, "b2"))
        .await
        .expect("added over gRPC")
        .into_inner();
    assert_eq!(added.aliases, ["b1", "b2"]);
    let refused = client
        .add_session_aliases(request(&second, "a1"))
        .await
        .expect_err("a1 is the first session's");
    assert_eq!(refused.code(), tonic::Code::AlreadyExists, "{refused:?}");
    stack.shutdown().await;
}

/// The gateway's metrics as text.
async fn metrics_text(stack: &TestStack) -> String {
    let response = stack
        .http
        .get(format!("{}/metrics", stack.gateway_url))
        .bearer_auth(&stack.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    response.text().await.unwrap()
}

#[tokio::test]
async fn legacy_routes_are_counted_by_route_and_deprecated_in_the_document() {
    let stack = TestStack::builder().start().await;
    let instance = stack
        .register_instance(
            "old-app",
            5,
            &[("project_id", "p1"), ("repository_id", "r1")],
        )
        .await;
    let legacy = format!("/projects/p1/repositories/r1/instances/{instance}/terminal/sessions");
    for _ in 0..2 {
        let (status, listed) = get(&stack, &legacy).await;
        assert_eq!(status, 200, "{listed}");
    }
    let (status, reset) = post(
        &stack,
        &format!("/api/v1/instances/{instance}/terminal/reset"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{reset}");
    let (status, _) = get(
        &stack,
        &format!("/api/v1/instances/{instance}/terminal/sessions"),
    )
    .await;
    assert_eq!(status, 200);

    let text = metrics_text(&stack).await;
    let counted: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("ptyhub_gateway_legacy_requests_total{"))
        .collect();
    assert_eq!(
        counted,
        [
            "ptyhub_gateway_legacy_requests_total{method=\"GET\",route=\"/projects/{project_id}/repositories/{repository_id}/instances/{iid}/terminal/sessions\"} 2",
            "ptyhub_gateway_legacy_requests_total{method=\"POST\",route=\"/api/v1/instances/{iid}/terminal/reset\"} 1",
        ],
        "one series per legacy route used, none for the current routes:\n{text}"
    );

    let (status, document) = get(&stack, "/api/v1/openapi.json").await;
    assert_eq!(status, 200);
    let paths = &document["paths"];
    let legacy_route =
        "/projects/{project_id}/repositories/{repository_id}/instances/{iid}/terminal/sessions";
    assert_eq!(paths[legacy_route]["get"]["deprecated"], true);
    assert_eq!(paths[legacy_route]["post"]["deprecated"], true);
    assert_eq!(
        paths["/api/v1/instances/{iid}/terminal/reset"]["post"]["deprecated"],
        true
    );
    let current = &paths["/api/v1/instances/{iid}/terminal/sessions"]["get"];
    assert!(current.is_object(), "{current}");
    assert_ne!(current["deprecated"], true, "{current}");
    stack.shutdown().await;
}

#[tokio::test]
async fn web_page_routes_serve_the_static_index() {
    let static_dir = tempfile::tempdir().unwrap();
    std::fs::write(
        static_dir.path().join("index.html"),
        "<!doctype html><title>ptyhub</title>",
    )
    .unwrap();
    std::fs::create_dir(static_dir.path().join("assets")).unwrap();
    std::fs::write(static_dir.path().join("assets/app.js"), "console.log(1)").unwrap();
    let stack = TestStack::builder()
        .static_dir(static_dir.path().to_owned())
        .start()
        .await;
    for path in ["/", &format!("/instances/{}", stack.instance_id)] {
        let response = stack
            .http
            .get(format!("{}{path}", stack.gateway_url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{path}");
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/html")
        );
        assert!(
            response
                .text()
                .await
                .unwrap()
                .contains("<title>ptyhub</title>")
        );
    }
    let response = stack
        .http
        .get(format!("{}/assets/app.js", stack.gateway_url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let response = stack
        .http
        .get(format!("{}/assets/missing.js", stack.gateway_url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body, json!({"detail": "not found"}));

    // No path leaves assets/: sent raw, since an HTTP client library would resolve the dots.
    std::fs::write(static_dir.path().join("secret.txt"), "not an asset").unwrap();
    for path in [
        "/assets/../secret.txt",
        "/assets/%2e%2e/secret.txt",
        "/assets/..%2fsecret.txt",
        "/assets/%2e%2e%2fsecret.txt",
        "/assets/../../etc/passwd",
    ] {
        let (status, body) = raw_get(&stack.gateway_url, path).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert_eq!(body, r#"{"detail":"not found"}"#, "{path}");
    }
    stack.shutdown().await;

    // Without a directory, the page built into the binary (web/dist when it was compiled).
    let without = TestStack::builder().start().await;
    let (status, body) = send(&without, Method::GET, "/", None, None).await;
    if gateway::web::page_embedded() {
        assert_eq!(status, 200, "{body}");
        let asset = without
            .http
            .get(format!("{}/assets/app.js", without.gateway_url))
            .send()
            .await
            .unwrap();
        assert_eq!(asset.status().as_u16(), 200);
        assert!(
            asset.headers()["content-type"]
                .to_str()
                .unwrap()
                .contains("javascript")
        );
        let etag = asset.headers()["etag"].to_str().unwrap().to_owned();
        let again = without
            .http
            .get(format!("{}/assets/app.js", without.gateway_url))
            .header("if-none-match", &etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status().as_u16(), 304);
        let (status, body) = send(&without, Method::GET, "/assets/missing.js", None, None).await;
        assert_eq!(status, 404);
        assert_eq!(body, json!({"detail": "not found"}));
    } else {
        assert_eq!(status, 404);
        assert!(
            body["detail"]
                .as_str()
                .unwrap()
                .starts_with("web page not built into this binary"),
            "{body}"
        );
    }
    without.shutdown().await;

    let empty_dir = tempfile::tempdir().unwrap();
    let not_built = TestStack::builder()
        .static_dir(empty_dir.path().to_owned())
        .start()
        .await;
    let (status, body) = send(&not_built, Method::GET, "/", None, None).await;
    assert_eq!(status, 404);
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .starts_with("web page not installed: no index.html in"),
        "{body}"
    );
    not_built.shutdown().await;
}

/// A `GET` whose path reaches the server byte for byte, with the status and body it answered.
async fn raw_get(base_url: &str, path: &str) -> (u16, String) {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<bytes::Bytes>>();
    let uri: http::Uri = format!("{base_url}{path}").parse().expect("a valid uri");
    let response = client.get(uri).await.expect("the gateway answers");
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("a whole body")
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn an_unreachable_session_api_is_503() {
    // A listener that accepts connections but never speaks: session-api hung, not refused.
    let silent_backend = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let mut config = gateway::Config::new(
        format!("http://{}", silent_backend.local_addr().unwrap()),
        gateway::ServiceCredential::new("service-token-for-this-test").unwrap(),
    );
    config.auth.api_tokens = vec![gateway::SecretString::from(ADMIN)];
    config.backend_timeout = std::time::Duration::from_millis(300);
    let stop = tokio_util::sync::CancellationToken::new();
    let gateway = tokio::spawn(gateway::run(
        config,
        listener,
        stop.clone().cancelled_owned(),
    ));

    let http = ptyhub_test_support::http::client().build().unwrap();
    for probe in ["/healthz", "/readyz"] {
        let response = http
            .get(format!("{url}{probe}"))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 503, "{probe}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["status"], "unavailable", "{probe}");
        assert!(
            body["detail"].as_str().unwrap().contains("session-api"),
            "{probe}: {body}"
        );
    }
    // Liveness asks no backend: a hung session-api must not get the gateway restarted.
    let response = http.get(format!("{url}/livez")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let response = http
        .get(format!("{url}/api/v1/instances"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);

    stop.cancel();
    gateway.await.unwrap().unwrap();
}

#[tokio::test]
async fn too_many_aliases_and_bidirectional_names_are_422() {
    let stack = TestStack::builder().start().await;
    let path = format!("/api/v1/instances/{}/terminal/sessions", stack.instance_id);
    let aliases: Vec<String> = (0..20_000).map(|index| format!("alias-{index}")).collect();
    let (status, body) = post(&stack, &path, Some(json!({ "aliases": aliases }))).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("at most 16 aliases"),
        "{body}"
    );
    for name in ["evil\u{202e}gnp.exe", "zero\u{200b}width"] {
        let (status, body) = post(&stack, &path, Some(json!({ "name": name }))).await;
        assert_eq!(status, 422, "{name:?}: {body}");
        let (status, body) = post(
            &stack,
            "/api/v1/instances",
            Some(json!({"name": name, "target": {"local": {}}})),
        )
        .await;
        assert_eq!(status, 422, "{name:?}: {body}");
    }
    stack.shutdown().await;
}

/// What the services log while a test runs, as JSON lines: caught on the test's own thread,
/// where a current-thread runtime runs every task of the in-process stack.
#[derive(Clone, Default)]
struct CaughtLog(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for CaughtLog {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl CaughtLog {
    /// Catches every INFO-or-higher line logged on this thread until the guard is dropped.
    fn catch(&self) -> tracing::subscriber::DefaultGuard {
        let writer = self.clone();
        tracing::subscriber::set_default(
            tracing_subscriber::fmt()
                .json()
                .with_max_level(tracing::Level::INFO)
                .with_writer(move || writer.clone())
                .finish(),
        )
    }

    fn lines(&self) -> Vec<Value> {
        let bytes = self.0.lock().expect("lock").clone();
        String::from_utf8(bytes)
            .expect("UTF-8 log lines")
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON log line"))
            .collect()
    }
}

/// Whoever starts the gateway with others in one process holds its readiness until they can
/// take sessions (`ptyhub up` until `local` exists): until then `/healthz` and `/readyz` answer
/// 503 and say what they wait for, and the request log writes those answers as INFO, not as
/// the ERROR of a server error (they would land on the terminal of whoever ran `ptyhub up`);
/// `/livez` stays 200, and the release makes them ready.
#[tokio::test]
async fn probes_answer_503_while_a_part_of_the_system_is_held() {
    let log = CaughtLog::default();
    let _caught = log.catch();
    let readiness = std::sync::Arc::new(std::sync::Mutex::new(None));
    let slot = std::sync::Arc::clone(&readiness);
    let stack = TestStack::builder()
        .configure(move |stack| {
            *slot.lock().expect("lock") = Some(stack.gateway.readiness.clone());
        })
        .start()
        .await;
    let readiness: gateway::Readiness = readiness.lock().expect("lock").take().expect("set");
    let hold = readiness.hold("the test's part");
    // The stack's own start-up polls of `/healthz` may have been answered 503 before this.
    let logged_before = log.lines().len();

    let admin = Some(stack.admin_token.as_str());
    for (probe, credential) in [("/healthz", None), ("/healthz", admin), ("/readyz", None)] {
        let (status, body) = send(&stack, Method::GET, probe, credential, None).await;
        assert_eq!(status, 503, "{probe}: {body}");
        assert_eq!(body["status"], "unavailable", "{probe}: {body}");
        // What it waits for is for operators: an anonymous `/healthz` says only `unavailable`.
        let detail = if credential.is_some() || probe == "/readyz" {
            json!("starting: waiting for the test's part")
        } else {
            Value::Null
        };
        assert_eq!(body["detail"], detail, "{probe}: {body}");
    }
    let answers: Vec<Value> = log
        .lines()
        .into_iter()
        .skip(logged_before)
        .filter(|line| line["fields"]["status"] == 503)
        .collect();
    assert_eq!(answers.len(), 3, "one log line per probe: {answers:#?}");
    for answer in &answers {
        assert_eq!(answer["level"], "INFO", "a held probe's 503: {answer}");
    }
    let (status, _) = send(&stack, Method::GET, "/livez", None, None).await;
    assert_eq!(status, 200, "liveness asks nothing it waits for");

    hold.release();
    for probe in ["/healthz", "/readyz"] {
        let (status, body) = send(&stack, Method::GET, probe, None, None).await;
        assert_eq!((status, &body["status"]), (200, &json!("ok")), "{probe}");
    }
    stack.shutdown().await;
}
