//! `ptyhub screen`, `send` and `wait` as a script or an agent uses them: read what a session's
//! terminal shows, type into it without attaching, wait for text to appear or for the terminal
//! to wait for input; a timeout exits 124, the process ending first exits 1 with its exit code
//! said, and a refusal is one clear line.

use serde_json::Value;

use crate::support::pty::Terminal;
use crate::support::{Up, eventually, one_error_line};

const CTRL_P_CTRL_Q: &str = "\x10\x11";

/// Registers a local instance whose sessions run `command`, starts one, and returns its id.
fn session_running(up: &Up, instance: &str, command: &[&str]) -> String {
    let mut args = vec!["instance", "add", instance, "--local", "--"];
    args.extend_from_slice(command);
    up.run_ok(&args);
    let created: Value =
        serde_json::from_str(&up.run_ok(&["--json", "new", instance])).expect("new --json");
    created["id"].as_str().expect("an id").to_owned()
}

/// `ptyhub screen` once the session's screen shows `text`.
fn screen_once_it_shows(up: &Up, instance: &str, session: &str, text: &str) -> String {
    let mut shown = String::new();
    eventually(&format!("the screen shows {text:?}"), || {
        shown = up.run_ok(&["screen", instance, session]);
        shown.contains(text)
    });
    shown
}

#[test]
fn screen_prints_what_the_session_shows_as_text_ansi_and_json() {
    let up = Up::start();
    let session = session_running(
        &up,
        "printer",
        &[
            "sh",
            "-c",
            "printf 'alpha\\n\\033[31mred\\033[0m beta\\n'; exec sleep 600",
        ],
    );
    let text = screen_once_it_shows(&up, "printer", &session, "red beta");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[..2], ["alpha", "red beta"], "{text:?}");
    assert_eq!(lines.len(), 24, "one line a row: {text:?}");
    assert!(
        lines[2..].iter().all(|line| line.is_empty()),
        "trailing spaces trimmed: {text:?}"
    );

    let json: Value =
        serde_json::from_str(&up.run_ok(&["--json", "screen", "printer", &session])).expect("json");
    assert_eq!(json["session_id"], session.as_str());
    assert_eq!(
        (json["cols"].as_u64(), json["rows"].as_u64()),
        (Some(80), Some(24))
    );
    assert_eq!(json["format"], "text");
    assert_eq!(json["status"], "active");
    assert_eq!(json["alternate_screen"], false);
    assert_eq!(json["lines"][1], "red beta");
    assert!(
        json["text"]
            .as_str()
            .is_some_and(|text| text.starts_with("alpha\nred beta\n")),
        "{json}"
    );
    assert!(
        json["offset"].as_u64().is_some_and(|offset| offset > 0),
        "{json}"
    );

    let cells: Value =
        serde_json::from_str(&up.run_ok(&["screen", "printer", &session, "--format", "json"]))
            .expect("json");
    assert_eq!(cells["format"], "json");
    let rows = cells["grid"].as_array().expect("rows of cells");
    assert_eq!(rows.len(), 24);
    assert_eq!(rows[0]["cells"].as_array().map(Vec::len), Some(80));
    assert_eq!(
        rows[1]["cells"][0],
        serde_json::json!({"text": "r", "fg": 1})
    );
    assert_eq!(rows[1]["cells"][4], serde_json::json!({"text": "b"}));

    let ansi = up.run_ok(&["screen", "printer", &session, "--format", "ansi"]);
    let red = ansi.find("red").expect("the red word");
    assert!(
        ansi[..red].contains("\x1b["),
        "drawn with attributes: {ansi:?}"
    );
    assert!(ansi.contains("alpha"), "{ansi:?}");
}

#[test]
fn send_types_and_wait_waits_until_the_screen_answers() {
    let up = Up::start();
    let session = session_running(
        &up,
        "greeter",
        &["sh", "-c", "read -p 'name? ' n; echo \"hi $n\"; sleep 5"],
    );
    // The prompt waits with its space kept up to the cursor.
    let prompt = up.run(&["wait", "greeter", &session, "^name\\? $"]);
    assert_eq!(prompt.status.code(), Some(0), "{prompt:?}");
    assert!(String::from_utf8_lossy(&prompt.stdout).starts_with("name?"));

    // Text and keys go in the order given: keys first would answer an empty name.
    let sent = up.run_ok(&[
        "send",
        "greeter",
        &session,
        "--text",
        "ptyhubX",
        "--key",
        "Backspace",
        "--key",
        "Enter",
    ]);
    let offset: u64 = sent.trim().parse().expect("send prints the output offset");
    let greeted = up.run(&[
        "wait",
        "greeter",
        &session,
        "^hi ptyhub$",
        "--after",
        &offset.to_string(),
    ]);
    assert_eq!(greeted.status.code(), Some(0), "{greeted:?}");
    let shown = String::from_utf8_lossy(&greeted.stdout);
    assert!(shown.lines().any(|line| line == "hi ptyhub"), "{shown}");

    // Waiting for what never comes ends when the process does: its final screen, then exit 1.
    let ended = up.run(&["wait", "greeter", &session, "never-shown"]);
    assert_eq!(ended.status.code(), Some(1), "{ended:?}");
    assert!(String::from_utf8_lossy(&ended.stdout).contains("hi ptyhub"));
    let line = one_error_line(&ended);
    assert!(line.contains("exited with code 0"), "{line}");
}

#[test]
fn wait_times_out_with_124_and_bad_input_is_one_clear_line() {
    let up = Up::start();
    let session = session_running(&up, "idle", &["sh", "-c", "echo ready; exec sleep 600"]);
    screen_once_it_shows(&up, "idle", &session, "ready");

    let timed_out = up.run(&["wait", "idle", &session, "never-there", "--timeout", "1s"]);
    assert_eq!(timed_out.status.code(), Some(124), "{timed_out:?}");
    assert!(timed_out.stdout.is_empty(), "{timed_out:?}");
    let line = one_error_line(&timed_out);
    assert!(
        line.contains("did not match") && line.contains("1s"),
        "{line}"
    );

    let line = one_error_line(&up.run(&["send", "idle", &session, "--key", "Frobnicate"]));
    assert!(line.contains("Frobnicate"), "the server's message: {line}");
    let line = one_error_line(&up.run(&["wait", "idle", &session, "(unclosed"]));
    assert!(line.contains("cannot wait"), "{line}");
    // A zero timeout would be the server's default: clap refuses it, as bad arguments are.
    let zero = up.run(&["wait", "idle", &session, "x", "--timeout", "0s"]);
    assert_eq!(zero.status.code(), Some(2), "{zero:?}");
    assert!(
        String::from_utf8_lossy(&zero.stderr).contains("at least 1ms"),
        "{zero:?}"
    );

    let unknown = "0b4a8a5e-1111-4222-8333-444455556666";
    for args in [
        &["screen", "idle", unknown][..],
        &["send", "idle", unknown, "--text", "x"],
        &["wait", "idle", unknown, "x"],
    ] {
        let line = one_error_line(&up.run(args));
        assert!(
            line.contains(unknown) && line.contains("not found"),
            "{args:?}: {line}"
        );
    }
}

#[test]
fn send_while_someone_holds_control_says_to_use_force() {
    let up = Up::start();
    let mut terminal = Terminal::spawn(&up, &["attach", "local", "--alias", "held"], 24, 80);
    terminal.type_keys("echo attached-$((2*5))\r");
    terminal.expect("attached-10");
    let session = up.session_with_alias("local", "held").expect("the session")["id"]
        .as_str()
        .expect("an id")
        .to_owned();

    let refused = up.run(&[
        "send",
        "local",
        &session,
        "--text",
        "echo sent-$((6*7))",
        "--key",
        "Enter",
    ]);
    let line = one_error_line(&refused);
    assert!(line.contains("--force"), "{line}");

    up.run_ok(&[
        "send",
        "local",
        &session,
        "--text",
        "echo forced-$((6*7))",
        "--key",
        "Enter",
        "--force",
    ]);
    terminal.expect("forced-42");
    assert!(
        !terminal.shown().contains("sent-42"),
        "the refused input was not written"
    );
    // The person attached still has control.
    terminal.type_keys("echo still-$((3*3))\r");
    terminal.expect("still-9");
    terminal.type_keys(CTRL_P_CTRL_Q);
    assert_eq!(terminal.wait().code(), Some(0));
}

/// `wait --for input` on a program that repaints, then asks with a notification: it answers at
/// the question (the screen printed is the question's), `--json` says the state reached, and
/// `--for` with a pattern or an unknown state is refused by the command line.
#[test]
fn wait_for_input_answers_at_the_programs_question() {
    let up = Up::start();
    let session = session_running(
        &up,
        "agent",
        &[
            "sh",
            "-c",
            "printf '\\033[?1049h'; for n in 1 2 3; do printf '\\033[H\\033[2Jworking %s' $n; sleep 0.1; done; \
             printf '\\033[H\\033[2JAllow? [y/n]\\033]9;needs your permission\\007'; read answer; sleep 60",
        ],
    );
    let asked: Value =
        serde_json::from_str(&up.run_ok(&["--json", "wait", "agent", &session, "--for", "input"]))
            .expect("wait --json prints JSON");
    assert_eq!(asked["outcome"], "state", "{asked}");
    assert_eq!(asked["state"], "waiting_for_input", "{asked}");
    assert_eq!(asked["screen"]["lines"][0], "Allow? [y/n]", "{asked}");
    let plain = up.run_ok(&["wait", "agent", &session, "--for", "input"]);
    assert!(plain.starts_with("Allow? [y/n]\n"), "{plain:?}");

    for refused in [
        vec!["wait", "agent", &session, "Allow", "--for", "input"],
        vec!["wait", "agent", &session, "--for", "busy"],
        vec!["wait", "agent", &session, "--for", "idle", "--quiet", "1s"],
    ] {
        let output = up.run(&refused);
        assert_eq!(output.status.code(), Some(2), "{refused:?}: {output:?}");
    }
}
