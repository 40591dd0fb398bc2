//! `ptyhub webhook add|ls|rm` as a person or a script uses them: a webhook registered with its
//! secret from a file or the variable (never an argument), listed as a table or the REST JSON,
//! deleted; a registration the server refuses, or one without a secret, is one error line.

use serde_json::Value;

use crate::support::{Up, one_error_line, run_bounded};

const SECRET: &str = "a-webhook-secret-0123456789abcdef";

fn listed(up: &Up) -> Vec<Value> {
    let listed: Value =
        serde_json::from_str(&up.run_ok(&["--json", "webhook", "ls", "local"])).expect("JSON");
    listed["webhooks"]
        .as_array()
        .expect("a webhooks array")
        .clone()
}

#[test]
fn webhooks_are_added_listed_and_removed() {
    let up = Up::start();
    let directory = tempfile::tempdir().expect("a temporary directory");
    let secret_file = directory.path().join("hook.secret");
    std::fs::write(&secret_file, format!("{SECRET}\n")).expect("write the secret");
    let secret_file = secret_file.to_str().expect("a utf-8 path");

    let id = up.run_ok(&[
        "webhook",
        "add",
        "local",
        "https://hooks.example.com/ptyhub",
        "--secret-file",
        secret_file,
        "--event",
        "command_finished",
    ]);
    let id = id.trim();
    uuid_like(id);
    let webhooks = listed(&up);
    assert_eq!(webhooks.len(), 1);
    assert_eq!(webhooks[0]["id"], id);
    assert_eq!(
        webhooks[0]["events"],
        serde_json::json!(["command_finished"])
    );
    assert_eq!(webhooks[0]["last_delivery"], Value::Null);

    // From the variable, both events by default; the table shows both webhooks.
    let mut add = up.ptyhub();
    add.env("PTYHUB_WEBHOOK_SECRET", SECRET).args([
        "--json",
        "webhook",
        "add",
        "local",
        "http://127.0.0.1:9/hook",
    ]);
    let added = run_bounded(&mut add, None);
    assert!(added.status.success(), "{added:?}");
    let second: Value = serde_json::from_slice(&added.stdout).expect("JSON");
    assert_eq!(
        second["events"],
        serde_json::json!(["state_changed", "command_finished"])
    );
    let table = up.run_ok(&["webhook", "ls", "local"]);
    let mut lines = table.lines();
    assert!(lines.next().expect("a header").starts_with("ID"));
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert!(rows[0].starts_with(id) && rows[0].ends_with("https://hooks.example.com/ptyhub"));

    // Refusals: the server's (an ftp URL, an unknown event) and a missing secret.
    let refused = one_error_line(&up.run(&[
        "webhook",
        "add",
        "local",
        "ftp://example.com/",
        "--secret-file",
        secret_file,
    ]));
    assert!(
        refused.contains("http://") && refused.contains("422"),
        "{refused}"
    );
    let refused = one_error_line(&up.run(&[
        "webhook",
        "add",
        "local",
        "https://example.com/",
        "--secret-file",
        secret_file,
        "--event",
        "exited",
    ]));
    assert!(refused.contains("unknown webhook event"), "{refused}");
    let mut no_secret = up.ptyhub();
    no_secret.env_remove("PTYHUB_WEBHOOK_SECRET").args([
        "webhook",
        "add",
        "local",
        "https://example.com/",
    ]);
    let refused = one_error_line(&run_bounded(&mut no_secret, None));
    assert!(refused.contains("PTYHUB_WEBHOOK_SECRET"), "{refused}");
    assert_eq!(listed(&up).len(), 2, "nothing refused was added");

    up.run_ok(&["webhook", "rm", "local", id]);
    let left = listed(&up);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["id"], second["id"]);
    let refused = one_error_line(&up.run(&["webhook", "rm", "local", id]));
    assert!(refused.contains("404"), "{refused}");
}

fn uuid_like(text: &str) {
    assert_eq!(text.len(), 36, "{text:?}");
    assert_eq!(text.matches('-').count(), 4, "{text:?}");
}
