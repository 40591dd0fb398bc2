//! `--json` prints what REST answers: the same object (never an array of one), the same wrapper
//! around a list, and the same keys, command by command, against the gateway's own answers.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::support::{Up, one_error_line};

/// The keys of a JSON object, to compare shapes whose values differ by the moment.
fn keys(value: &Value) -> BTreeSet<String> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("a JSON object, not {value}"))
        .keys()
        .cloned()
        .collect()
}

fn json_of(up: &Up, args: &[&str]) -> Value {
    let mut with_json = vec!["--json"];
    with_json.extend_from_slice(args);
    let printed = up.run_ok(&with_json);
    serde_json::from_str(&printed).unwrap_or_else(|error| panic!("{args:?}: {error}: {printed}"))
}

fn rest_get(up: &Up, path: &str) -> Value {
    let answer = up.get(path, Some(&up.token));
    assert_eq!(answer.status, 200, "GET {path}: {}", answer.body);
    serde_json::from_str(&answer.body).expect("REST answers JSON")
}

fn rest_post(up: &Up, path: &str, body: Value) -> Value {
    let answer = up.post(path, &body.to_string());
    assert_eq!(answer.status, 200, "POST {path}: {}", answer.body);
    serde_json::from_str(&answer.body).expect("REST answers JSON")
}

#[test]
fn instance_commands_print_the_rest_bodies() {
    let up = Up::start();
    let added = json_of(&up, &["instance", "add", "second", "--local"]);
    let id = added["id"].as_str().expect("an instance object").to_owned();
    assert_eq!(added, rest_get(&up, &format!("/api/v1/instances/{id}")));

    let listed = json_of(&up, &["instance", "ls"]);
    assert_eq!(listed, rest_get(&up, "/api/v1/instances"));
    assert_eq!(keys(&listed), BTreeSet::from(["instances".to_owned()]));

    let removed = json_of(&up, &["instance", "rm", "second"]);
    assert_eq!(
        removed,
        json!({"status": "deleted", "instance_id": id, "closed_sessions": 0})
    );
}

#[test]
fn session_commands_print_one_object_with_the_rest_keys() {
    let up = Up::start();
    let created = json_of(&up, &["new", "local", "--name", "shaped"]);
    let id = created["id"]
        .as_str()
        .unwrap_or_else(|| panic!("new --json prints one session object: {created}"))
        .to_owned();
    let path = format!("/api/v1/instances/local/terminal/sessions/{id}");
    let session_keys = keys(&rest_get(&up, &path));
    assert_eq!(keys(&created), session_keys, "new");
    // REST's 201 keys are among them, with the same values.
    assert_eq!(created["name"], "shaped");
    assert_eq!(created["status"], "active");

    let listed = json_of(&up, &["ls", "local"]);
    let rest_listed = rest_get(&up, "/api/v1/instances/local/terminal/sessions");
    assert_eq!(keys(&listed), keys(&rest_listed), "ls");
    assert_eq!(
        keys(&listed["sessions"][0]),
        keys(&rest_listed["sessions"][0])
    );
    assert_eq!(listed["sessions"][0]["id"], id.as_str());

    let renamed = json_of(&up, &["rename", "local", &id, "reshaped"]);
    assert_eq!(keys(&renamed), session_keys, "rename");
    assert_eq!(renamed["name"], "reshaped");
    let reset = json_of(&up, &["reset", "local", &id]);
    assert_eq!(keys(&reset), session_keys, "reset");
    let aliased = json_of(&up, &["alias", "add", "local", &id, "later", "build"]);
    assert_eq!(keys(&aliased), session_keys, "alias add");
    assert_eq!(aliased["aliases"], json!(["build", "later"]));
    let shared = json_of(&up, &["control", "local", &id, "shared"]);
    assert_eq!(keys(&shared), session_keys, "control");
    assert_eq!(shared["control_mode"], "shared");
    assert_eq!(rest_get(&up, &path)["control_mode"], "shared");
    // An unknown mode is refused by the argument parser, naming the two it takes.
    let refused = up.run(&["control", "local", &id, "both"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(r#"control mode "both" is not one of exclusive, shared"#),
        "{stderr}"
    );
    assert_eq!(rest_get(&up, &path)["control_mode"], "shared", "unchanged");

    let screen = json_of(&up, &["screen", "local", &id]);
    assert_eq!(
        keys(&screen),
        keys(&rest_get(&up, &format!("{path}/screen?format=text"))),
        "screen"
    );
    let sent = json_of(&up, &["send", "local", &id, "--text", "echo a"]);
    let rest_sent = rest_post(&up, &format!("{path}/input"), json!({"keys": ["Enter"]}));
    assert_eq!(keys(&sent), keys(&rest_sent), "send");
    let waited = json_of(&up, &["wait", "local", &id, "a", "--timeout", "30s"]);
    let rest_waited = rest_post(
        &up,
        &format!("{path}/wait"),
        json!({"pattern": "a", "timeout_ms": 30000}),
    );
    assert_eq!(keys(&waited), keys(&rest_waited), "wait");

    let other = json_of(&up, &["new", "local"]);
    let other = other["id"].as_str().expect("an id");
    let line = one_error_line(&up.run(&["alias", "add", "local", other, "build"]));
    assert!(
        line.contains(&format!("alias build is held by live session {id}")),
        "{line}"
    );

    let closed = json_of(&up, &["rm", "local", &id]);
    assert_eq!(closed, json!({"status": "closed", "session_id": id}));
}

#[test]
fn control_commands_print_the_rest_bodies() {
    let up = Up::start();
    let created = json_of(&up, &["new", "local"]);
    let id = created["id"].as_str().expect("a session id").to_owned();
    let path = format!("/api/v1/instances/local/terminal/sessions/{id}/control");

    // The state, as `GET .../control` answers it: nobody attached, nothing asked.
    let state = json_of(&up, &["control", "local", &id]);
    assert_eq!(state, rest_get(&up, &path));
    assert_eq!(
        keys(&state),
        BTreeSet::from(["controller", "requests", "reserved_for"].map(str::to_owned))
    );

    // A standing request, as `POST .../control/requests` answers it: the object the state lists.
    let request = json_of(&up, &["control", "local", &id, "request"]);
    assert_eq!(
        keys(&request),
        BTreeSet::from(["id", "principal", "since", "stream", "surface"].map(str::to_owned))
    );
    assert_eq!(request["surface"], "cli");
    assert_eq!(rest_get(&up, &path)["requests"], json!([request.clone()]));

    // An answer, as `POST .../control/requests/{id}/grant` answers it: the state after it (with
    // nobody controlling, any credential that may control answers; control is reserved).
    let request_id = request["id"].as_u64().expect("an id").to_string();
    let granted = json_of(&up, &["control", "local", &id, "grant", &request_id]);
    assert_eq!(granted, rest_get(&up, &path));
    assert_eq!(granted["reserved_for"]["principal"], request["principal"]);
    assert_eq!(granted["requests"], json!([]));
}
