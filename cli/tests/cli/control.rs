//! The CLI as a participant of a shared session (docs/CONTRACT.md, "Presence" and "Control
//! requests"), with two people, alice and bob, each with a token of their own (against an
//! in-process stack, whose gateway takes JWTs; `ptyhub up` has only admin tokens): `ptyhub ls`
//! lists who is attached with role, surface and typing; `ptyhub control` shows the control
//! state, asks for control and answers requests; `ptyhub attach` says when someone asks it for
//! control, when control is granted to it or taken from it, and when its own request is
//! declined. Bad input (a grant by someone who does not control, an unknown request, a share
//! link's request) is one clear line and a non-zero exit, with control as it was.

use std::net::SocketAddr;
use std::process::{Command, Output};

use ptyhub_test_support::stack::TestStack;
use serde_json::{Value, json};

use crate::support::pty::Terminal;
use crate::support::{eventually, http_request, one_error_line, ptyhub_command, run_bounded};

/// Someone with a token of their own, running `ptyhub` against the stack's gateway.
struct Person {
    token: String,
    server: String,
    address: SocketAddr,
}

impl Person {
    fn new(stack: &TestStack, name: &str) -> Self {
        Self {
            token: stack.jwt(name, &["local"], false),
            server: stack.gateway_url.clone(),
            address: stack.gateway_address(),
        }
    }

    /// `ptyhub --server URL --token TOKEN`, for more arguments.
    fn ptyhub(&self) -> Command {
        let mut command = ptyhub_command();
        command.args(["--server", &self.server, "--token", &self.token]);
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut command = self.ptyhub();
        command.args(args);
        run_bounded(&mut command, None)
    }

    fn run_ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "ptyhub {args:?} failed with {}:\nstdout: {}\nstderr: {}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).expect("utf-8 output")
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut with_json = vec!["--json"];
        with_json.extend_from_slice(args);
        let printed = self.run_ok(&with_json);
        serde_json::from_str(&printed)
            .unwrap_or_else(|error| panic!("{args:?}: {error}: {printed}"))
    }

    /// `ptyhub attach ARGS...` on a terminal of its own.
    fn attach(&self, args: &[&str]) -> Terminal {
        let mut attach = vec!["attach"];
        attach.extend_from_slice(args);
        Terminal::spawn_command(&self.ptyhub(), &attach, 24, 200)
    }

    /// The session's control state as REST answers it to this person.
    fn rest_control(&self, session_id: &str) -> Value {
        let path = format!("/api/v1/instances/local/terminal/sessions/{session_id}/control");
        let answer = http_request(self.address, "GET", &path, Some(&self.token), None);
        assert_eq!(answer.status, 200, "GET {path}: {}", answer.body);
        serde_json::from_str(&answer.body).expect("REST answers JSON")
    }
}

/// A session made by `person` through the CLI; its id.
fn new_session(person: &Person) -> String {
    let created = person.json(&["new", "local"]);
    created["id"].as_str().expect("a session id").to_owned()
}

fn keys(value: &Value) -> Vec<String> {
    let mut keys: Vec<String> = value
        .as_object()
        .unwrap_or_else(|| panic!("a JSON object, not {value}"))
        .keys()
        .cloned()
        .collect();
    keys.sort();
    keys
}

/// The one `ls` row of `session_id`.
fn ls_row(person: &Person, session_id: &str) -> String {
    person
        .run_ok(&["ls", "local"])
        .lines()
        .find(|line| line.starts_with(session_id))
        .unwrap_or_else(|| panic!("ls lists no row for {session_id}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_moves_from_one_cli_to_another_by_request_and_grant() {
    let stack = TestStack::builder().start().await;
    // The stack serves on the runtime's other worker meanwhile.
    tokio::task::block_in_place(|| hand_control_over(&stack));
    stack.shutdown().await;
}

fn hand_control_over(stack: &TestStack) {
    let alice = Person::new(stack, "alice");
    let bob = Person::new(stack, "bob");
    let session_id = new_session(&alice);
    let mut alice_terminal = alice.attach(&["local", &session_id]);
    alice_terminal.type_keys("echo alice-$((6*7))\r");
    alice_terminal.expect("alice-42");

    // Bob sees alice attached, controlling, through the CLI; typing while she types (a space
    // at the prompt, taken back by the terminal's line kill), and not once she stopped.
    eventually("ls says alice is typing", || {
        alice_terminal.type_keys(" \x15");
        ls_row(&bob, &session_id).contains("alice (controller, cli, typing)")
    });
    eventually("alice's typing is over in ls", || {
        ls_row(&bob, &session_id).contains("alice (controller, cli)")
    });

    // Bob asks without a stream: REST's request object, and alice's terminal says it.
    let request = bob.json(&["control", "local", &session_id, "request"]);
    let state = alice.rest_control(&session_id);
    assert_eq!(request, state["requests"][0], "{state}");
    assert_eq!(request["principal"], "bob");
    assert_eq!(request["stream"], false);
    let request_id = request["id"].as_u64().expect("a request id").to_string();
    alice_terminal.expect(&format!(
        "bob (cli) asks for control (request {request_id}): `ptyhub control local {session_id} grant {request_id}`"
    ));

    // Bob may not grant himself control, and an unknown request is no request: one line each,
    // a failure, and control as it was.
    let line = one_error_line(&bob.run(&["control", "local", &session_id, "grant", &request_id]));
    assert!(
        line.contains("only the controller (alice) may answer a request for control"),
        "{line}"
    );
    let line = one_error_line(&alice.run(&["control", "local", &session_id, "grant", "999"]));
    assert!(line.contains("cannot grant request 999"), "{line}");
    assert!(line.contains("999"), "{line}");
    let unchanged = alice.rest_control(&session_id);
    assert_eq!(unchanged["controller"]["principal"], "alice", "{unchanged}");
    assert_eq!(unchanged["requests"][0]["id"], request["id"], "{unchanged}");
    let shown = alice.run_ok(&["control", "local", &session_id]);
    assert!(
        shown.contains("controller: alice (controller, cli"),
        "{shown}"
    );
    assert!(
        shown
            .lines()
            .any(|line| line.starts_with(&request_id) && line.contains("bob")),
        "{shown}"
    );

    // Alice grants it: bob has no stream, so control waits for his next attach, and alice
    // watches from now on.
    let granted = alice.run_ok(&["control", "local", &session_id, "grant", &request_id]);
    assert!(
        granted.contains(&format!("granted request {request_id}")),
        "{granted}"
    );
    assert!(granted.contains("reserved for: bob"), "{granted}");
    assert!(granted.contains("controller: nobody"), "{granted}");
    alice_terminal.expect("control was taken from you");
    alice_terminal.type_keys("echo still-alice-$((2*2))\r");
    alice_terminal.expect("read-only");

    // Bob attaches to watch and is the controller at once.
    let mut bob_terminal = bob.attach(&["local", &session_id, "--view"]);
    bob_terminal.expect("control was granted to you");
    bob_terminal.type_keys("echo bob-$((7*7))\r");
    bob_terminal.expect("bob-49");
    alice_terminal.expect("bob-49");
    assert!(!alice_terminal.shown().contains("still-alice-4"));
    let row = ls_row(&alice, &session_id);
    assert!(row.contains("alice (viewer, cli)"), "{row}");
    assert!(row.contains("bob (controller, cli"), "{row}");

    for terminal in [&mut alice_terminal, &mut bob_terminal] {
        terminal.type_keys("\x10\x11");
        assert_eq!(terminal.wait().code(), Some(0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_on_an_attach_is_answered_on_the_attach() {
    let stack = TestStack::builder().start().await;
    tokio::task::block_in_place(|| ask_on_the_stream(&stack));
    stack.shutdown().await;
}

fn ask_on_the_stream(stack: &TestStack) {
    let alice = Person::new(stack, "alice");
    let bob = Person::new(stack, "bob");
    let session_id = new_session(&alice);
    let mut alice_terminal = alice.attach(&["local", &session_id]);
    alice_terminal.type_keys("echo alice-$((6*7))\r");
    alice_terminal.expect("alice-42");

    // Bob attaches asking for control; alice's terminal names the request.
    let mut bob_terminal = bob.attach(&["local", &session_id, "--request-control"]);
    bob_terminal.expect("alice-42");
    bob_terminal.expect("asked the controller for control");
    alice_terminal.expect("bob (cli) asks for control (request ");
    let state = alice.rest_control(&session_id);
    let request = &state["requests"][0];
    assert_eq!(request["principal"], "bob", "{state}");
    assert_eq!(request["stream"], true, "{state}");
    let request_id = request["id"].as_u64().expect("a request id").to_string();

    // Alice declines; `--json` prints the control state as REST's, and bob is told.
    let declined = alice.json(&["control", "local", &session_id, "decline", &request_id]);
    let after = alice.rest_control(&session_id);
    assert_eq!(keys(&declined), keys(&after));
    assert_eq!(declined["controller"]["principal"], "alice", "{declined}");
    assert_eq!(declined["requests"], json!([]), "{declined}");
    bob_terminal.expect(&format!(
        "your request for control (request {request_id}) was declined"
    ));
    bob_terminal.type_keys("echo bob-$((7*7))\r");
    bob_terminal.expect("read-only");
    alice_terminal.type_keys("echo alice-again-$((3*3))\r");
    alice_terminal.expect("alice-again-9");
    assert!(!alice_terminal.shown().contains("bob-49"));

    // A request answered is no longer there to answer.
    let line =
        one_error_line(&alice.run(&["control", "local", &session_id, "decline", &request_id]));
    assert!(
        line.contains(&format!("cannot decline request {request_id}")),
        "{line}"
    );

    // Bob asks again on his stream by detaching and attaching with the flag; alice grants by id.
    bob_terminal.type_keys("\x10\x11");
    assert_eq!(bob_terminal.wait().code(), Some(0));
    let mut bob_terminal = bob.attach(&["local", &session_id, "--request-control"]);
    bob_terminal.expect("asked the controller for control");
    alice_terminal.expect("bob (cli) asks for control (request ");
    let state = alice.rest_control(&session_id);
    let request_id = state["requests"][0]["id"]
        .as_u64()
        .expect("a request")
        .to_string();
    alice.run_ok(&["control", "local", &session_id, "grant", &request_id]);
    bob_terminal.expect("control was granted to you");
    alice_terminal.expect("control was taken from you");
    bob_terminal.type_keys("echo bob-granted-$((8*8))\r");
    alice_terminal.expect("bob-granted-64");

    for terminal in [&mut alice_terminal, &mut bob_terminal] {
        terminal.type_keys("\x10\x11");
        assert_eq!(terminal.wait().code(), Some(0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_control_commands_are_one_clear_line_and_change_nothing() {
    let stack = TestStack::builder().start().await;
    tokio::task::block_in_place(|| refuse_bad_control_commands(&stack));
    stack.shutdown().await;
}

fn refuse_bad_control_commands(stack: &TestStack) {
    let alice = Person::new(stack, "alice");
    let session_id = new_session(&alice);
    let before = alice.rest_control(&session_id);

    // What the argument parser turns away: exit code 2, saying what is missing or extra.
    for (args, said) in [
        (
            &["grant"][..],
            "grant and decline need the id of the request they answer",
        ),
        (
            &["decline"],
            "grant and decline need the id of the request they answer",
        ),
        (
            &["request", "3"],
            "only grant and decline take a request id",
        ),
        (&["shared", "3"], "only grant and decline take a request id"),
        (
            &["give"],
            r#"control mode "give" is not one of exclusive, shared; nor request, grant ID or decline ID"#,
        ),
        (&["grant", "first"], "invalid value 'first'"),
    ] {
        let mut command = vec!["control", "local", &session_id];
        command.extend_from_slice(args);
        let output = alice.run(&command);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }

    // A share link's credential may watch, never ask for control or answer.
    let path = "/api/v1/instances/local/shares";
    let body = json!({"session_id": session_id}).to_string();
    let answer = http_request(alice.address, "POST", path, Some(&alice.token), Some(&body));
    assert_eq!(answer.status, 201, "{}", answer.body);
    let share: Value = serde_json::from_str(&answer.body).expect("a share");
    let viewer = Person {
        token: share["token"].as_str().expect("a share token").to_owned(),
        server: alice.server.clone(),
        address: alice.address,
    };
    for args in [&["request"][..], &["grant", "1"]] {
        let mut command = vec!["control", "local", &session_id];
        command.extend_from_slice(args);
        let line = one_error_line(&viewer.run(&command));
        assert!(
            line.contains("the token does not allow this"),
            "{args:?}: {line}"
        );
    }
    // A request on an attach is refused on the attach, which watches on.
    let mut watching = viewer.attach(&["local", &session_id, "--request-control"]);
    watching.expect("this stream may only view: its credential does not allow control");
    watching.type_keys("\x10\x11");
    assert_eq!(watching.wait().code(), Some(0));

    assert_eq!(alice.rest_control(&session_id), before, "nothing changed");
}
