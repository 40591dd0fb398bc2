//! `ptyhub up` as a user starts it: the gateway answers on the printed address, serves the page,
//! takes the printed token and no other, and a restart on the same data directory keeps the
//! token, the instances and the session history.

use crate::support::{TEST_PAGE, Up, eventually};

#[test]
fn up_serves_health_page_and_api_to_the_printed_token_only() {
    let up = Up::start();

    let health = up.get("/healthz", None);
    assert_eq!(health.status, 200, "healthz: {}", health.body);
    assert!(health.body.contains("ok"), "healthz body: {}", health.body);

    let page = up.get("/", None);
    assert_eq!(page.status, 200, "the page: {}", page.body);
    assert!(
        page.body.contains("test-page-marker"),
        "the page served is not --web-dir's index.html: {}",
        page.body
    );

    let instances = up.get("/api/v1/instances", Some(&up.token));
    assert_eq!(
        instances.status, 200,
        "with the printed token: {}",
        instances.body
    );
    let instances: serde_json::Value =
        serde_json::from_str(&instances.body).expect("instances JSON");
    let names: Vec<&str> = instances["instances"]
        .as_array()
        .expect("an instances array")
        .iter()
        .filter_map(|instance| instance["name"].as_str())
        .collect();
    assert_eq!(names, ["local"], "the instance registered on first start");

    let wrong = format!("{}x", up.token);
    assert_eq!(up.get("/api/v1/instances", Some(&wrong)).status, 401);
    assert_eq!(up.get("/api/v1/instances", None).status, 401);

    // The printed URL is what the user clicks; the token file is what the client commands use.
    let stored = std::fs::read_to_string(up.data_dir().join("token")).expect("token file");
    assert_eq!(stored.trim(), up.token);
    assert!(
        up.stdout().contains("Ctrl-C"),
        "says how to stop: {}",
        up.stdout()
    );
    assert_ne!(TEST_PAGE, "", "the page is served from the test's web dir");
}

#[test]
fn restart_keeps_token_instances_and_session_history() {
    let up = Up::start();
    let first_token = up.token.clone();
    up.run_ok(&["instance", "add", "second", "--local"]);
    up.run_ok(&["new", "local", "--name", "kept-live", "--alias", "kept"]);
    let exec = up.run(&["exec", "local", "--", "sh", "-c", "echo history"]);
    assert!(exec.status.success(), "exec: {exec:?}");
    let before = up.sessions("local");
    assert_eq!(
        before.len(),
        2,
        "one live and one closed session: {before:?}"
    );
    let (data_dir, web_dir) = up.stop();

    let up = Up::start_on(data_dir, web_dir);
    assert_eq!(up.token, first_token, "the token is generated once");
    let health = up.get("/healthz", None);
    assert_eq!(health.status, 200, "healthz after restart: {}", health.body);
    assert_eq!(
        up.get("/api/v1/instances", Some(&first_token)).status,
        200,
        "the old token still works"
    );

    let instances: serde_json::Value =
        serde_json::from_str(&up.run_ok(&["--json", "instance", "ls"])).expect("JSON");
    let mut names: Vec<&str> = instances
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|instance| instance["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["local", "second"]);

    let after = up.sessions("local");
    let ids = |sessions: &[serde_json::Value]| {
        let mut ids: Vec<String> = sessions
            .iter()
            .map(|session| session["id"].as_str().expect("id").to_owned())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&after), ids(&before), "the session history survives");
    assert!(
        after.iter().any(|session| session["name"] == "kept-live"),
        "the named session is still listed: {after:?}"
    );
    // Its process did not survive the stop; its record says so (at once, or once session-api
    // has compared its records with the restarted broker).
    eventually("the stopped session is no longer live", || {
        up.sessions("local")
            .iter()
            .any(|session| session["name"] == "kept-live" && session["status"] == "closed")
    });

    // The restarted system is usable: a new session works on the old records.
    up.run_ok(&["new", "local", "--name", "after-restart"]);
    eventually("the new session is listed live", || {
        up.sessions("local")
            .iter()
            .any(|session| session["name"] == "after-restart" && session["status"] == "active")
    });
}
