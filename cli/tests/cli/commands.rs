//! `ptyhub commands` and `command-output` as a person or a script uses them: the commands typed
//! into a bash session come back as rows of id, exit code, duration and command line (or as the
//! REST JSON), one command's output goes to stdout as text or as the bytes written, and an
//! instance added with `--no-shell-integration` lists none. `ptyhub run` types a command at the
//! prompt, prints its output as it comes and exits with its exit code (124 when it outlasts
//! `--timeout`, 125 when it could not run).

use std::io::{BufRead as _, BufReader, Read as _};
use std::process::Stdio;
use std::sync::mpsc;

use serde_json::Value;

use crate::support::{PATIENCE, Up, eventually, one_error_line, wait_bounded};

/// Registers a local instance whose sessions run `bash` (with `extra` flags), starts one, waits
/// until its shell shows its prompt, and returns the session's id.
fn bash_session(up: &Up, instance: &str, extra: &[&str]) -> String {
    let mut args = vec!["instance", "add", instance, "--local"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "bash"]);
    up.run_ok(&args);
    let created: Value =
        serde_json::from_str(&up.run_ok(&["--json", "new", instance])).expect("new --json");
    created["id"].as_str().expect("an id").to_owned()
}

/// The session as `ls --json` shows it.
fn session_of(up: &Up, instance: &str, session: &str) -> Value {
    up.sessions(instance)
        .into_iter()
        .find(|listed| listed["id"] == session)
        .expect("the session is listed")
}

/// `commands --json`, parsed.
fn listing(up: &Up, instance: &str, session: &str) -> Value {
    serde_json::from_str(&up.run_ok(&["--json", "commands", instance, session]))
        .expect("commands --json prints JSON")
}

/// Types `line` and Enter, and waits until the listing holds `count` finished commands and the
/// shell is back at its prompt.
fn run_line(up: &Up, instance: &str, session: &str, line: &str, count: usize) {
    up.run_ok(&["send", instance, session, "--text", line, "--key", "Enter"]);
    eventually(&format!("{line:?} finishes"), || {
        let listed = listing(up, instance, session);
        let finished = listed["commands"]
            .as_array()
            .expect("a commands array")
            .iter()
            .filter(|command| !command["ended_at"].is_null())
            .count();
        finished == count && listed["terminal"]["state"] == "at_prompt"
    });
}

#[test]
fn commands_prints_what_the_shell_ran_with_exit_codes_and_durations() {
    let up = Up::start();
    let session = bash_session(&up, "shell", &[]);
    eventually("the shell shows its prompt", || {
        session_of(&up, "shell", &session)["state"] == "at_prompt"
    });
    let shown = session_of(&up, "shell", &session);
    assert_eq!(shown["shell_integration"], true, "{shown}");
    let instances: Value =
        serde_json::from_str(&up.run_ok(&["--json", "instance", "ls"])).expect("json");
    let instance = instances["instances"]
        .as_array()
        .expect("the instances")
        .iter()
        .find(|instance| instance["name"] == "shell")
        .expect("the instance is listed");
    assert_eq!(instance["shell_integration"], true, "{instance}");

    for (count, line) in ["true", "false", "(exit 7)", "echo hello-$((6*7))"]
        .into_iter()
        .enumerate()
    {
        run_line(&up, "shell", &session, line, count + 1);
    }

    let table = up.run_ok(&["commands", "shell", &session]);
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|line| {
            line.split("   ")
                .map(str::trim)
                .filter(|cell| !cell.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(rows[0], ["ID", "EXIT", "DURATION", "COMMAND"], "{table}");
    let summary: Vec<(&str, &str, &str)> = rows[1..]
        .iter()
        .map(|row| (row[0], row[1], *row.last().expect("a command")))
        .collect();
    assert_eq!(
        summary,
        [
            ("1", "0", "true"),
            ("2", "1", "false"),
            ("3", "7", "(exit 7)"),
            ("4", "0", "echo hello-$((6*7))"),
        ],
        "{table}"
    );
    assert!(
        rows[1..]
            .iter()
            .all(|row| row.len() == 4 && row[2].ends_with('s')),
        "every finished command has a duration: {table}"
    );

    let page: Value = serde_json::from_str(&up.run_ok(&[
        "--json", "commands", "shell", &session, "--after", "2", "--limit", "1",
    ]))
    .expect("json");
    assert_eq!(page["commands"].as_array().map(Vec::len), Some(1), "{page}");
    assert_eq!(page["commands"][0]["id"], 3, "{page}");
    assert_eq!(page["commands"][0]["exit_code"], 7, "{page}");
    assert!(page["commands"][0]["duration_ms"].is_u64(), "{page}");
    assert_eq!(page["first_kept_id"], 1, "{page}");
    assert_eq!(page["terminal"]["state"], "at_prompt", "{page}");

    let output = up.run_ok(&["command-output", "shell", &session, "4"]);
    assert_eq!(output.trim_end(), "hello-42", "{output:?}");
    let ansi = up.run_ok(&["command-output", "shell", &session, "4", "--ansi"]);
    assert!(ansi.contains("hello-42"), "{ansi:?}");

    let unknown = one_error_line(&up.run(&["command-output", "shell", &session, "99"]));
    assert!(unknown.contains("command"), "{unknown}");
    let too_many = one_error_line(&up.run(&["commands", "shell", &session, "--limit", "5000"]));
    assert!(too_many.contains("1000"), "{too_many}");
}

#[test]
fn an_instance_added_without_shell_integration_lists_no_commands() {
    let up = Up::start();
    let session = bash_session(&up, "plain", &["--no-shell-integration"]);
    let instances: Value =
        serde_json::from_str(&up.run_ok(&["--json", "instance", "ls"])).expect("json");
    let instance = instances["instances"]
        .as_array()
        .expect("the instances")
        .iter()
        .find(|instance| instance["name"] == "plain")
        .expect("the instance is listed");
    assert_eq!(instance["shell_integration"], false, "{instance}");
    up.run_ok(&[
        "send",
        "plain",
        &session,
        "--text",
        "echo done-$((6*7))",
        "--key",
        "Enter",
    ]);
    up.run_ok(&["wait", "plain", &session, "done-42"]);
    assert_eq!(
        listing(&up, "plain", &session)["commands"],
        serde_json::json!([])
    );
    let table = up.run_ok(&["commands", "plain", &session]);
    assert_eq!(
        table.trim_end(),
        "ID   EXIT   DURATION   COMMAND",
        "{table:?}"
    );
    assert_eq!(
        session_of(&up, "plain", &session)["shell_integration"],
        false
    );
}

#[test]
fn run_prints_the_output_and_exits_with_the_commands_exit_code() {
    let up = Up::start();
    let session = bash_session(&up, "shell", &[]);
    eventually("the shell shows its prompt", || {
        session_of(&up, "shell", &session)["state"] == "at_prompt"
    });

    let said = up.run_ok(&["run", "shell", &session, "--", "echo", "hi"]);
    assert_eq!(said, "hi\n", "{said:?}");

    // Several words are the argv of a program, quoted for the shell.
    let failed = up.run(&[
        "run",
        "shell",
        &session,
        "--",
        "sh",
        "-c",
        "echo out; exit 5",
    ]);
    assert_eq!(failed.status.code(), Some(5), "{failed:?}");
    assert_eq!(String::from_utf8_lossy(&failed.stdout), "out\n");

    // One word is a shell line, as is.
    let line = up.run(&["run", "shell", &session, "--", "echo one && (exit 3)"]);
    assert_eq!(line.status.code(), Some(3), "{line:?}");
    assert_eq!(String::from_utf8_lossy(&line.stdout), "one\n");

    let json: Value = serde_json::from_str(
        &up.run_ok(&["--json", "run", "shell", &session, "--", "echo", "it's"]),
    )
    .expect("run --json prints JSON");
    assert_eq!(json["output"], "it's\n", "{json}");
    assert_eq!(json["exit_code"], 0, "{json}");
    assert_eq!(json["command"]["command"], "echo 'it'\\''s'", "{json}");
    assert_eq!(json["command_id"], json["command"]["id"], "{json}");

    let timed_out = up.run(&[
        "run",
        "shell",
        &session,
        "--timeout",
        "0.3",
        "--",
        "sleep 2",
    ]);
    assert_eq!(timed_out.status.code(), Some(124), "{timed_out:?}");
    let said = one_error_line(&timed_out);
    assert!(said.contains("goes on running"), "{said}");
    let busy = up.run(&["run", "shell", &session, "--", "true"]);
    assert_eq!(busy.status.code(), Some(125), "{busy:?}");
    let busy = one_error_line(&busy);
    assert!(busy.contains("a program is running"), "{busy}");
    eventually("sleep ends", || {
        session_of(&up, "shell", &session)["state"] == "at_prompt"
    });
    assert_eq!(
        listing(&up, "shell", &session)["commands"][4]["command"],
        "sleep 2"
    );
}

/// `ptyhub run` prints a command's output while it runs, not at its end: the first line arrives
/// while the command still waits for the test's go, then the rest, and `run` exits with the
/// command's code. The command line's echo and the next prompt are not printed. A program
/// without shell integration cannot be run in: 125.
#[test]
fn run_streams_the_output_as_the_command_produces_it() {
    let up = Up::start();
    let session = bash_session(&up, "shell", &[]);
    eventually("the shell shows its prompt", || {
        session_of(&up, "shell", &session)["state"] == "at_prompt"
    });
    let go = tempfile::tempdir().expect("a directory for the go file");
    let go_file = go.path().join("go");
    let line = format!(
        "echo first; until [ -e {} ]; do sleep 0.05; done; echo second; (exit 3)",
        go_file.display()
    );
    let mut running = up
        .ptyhub()
        .args(["run", "shell", &session, "--timeout", "60", "--", &line])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ptyhub run starts");
    let mut stdout = BufReader::new(running.stdout.take().expect("its stdout"));
    let (lines, printed) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut first = String::new();
        stdout.read_line(&mut first).expect("read the first line");
        lines.send(first).expect("the test listens");
        let mut rest = String::new();
        stdout.read_to_string(&mut rest).expect("read the rest");
        rest
    });
    let first = printed
        .recv_timeout(PATIENCE)
        .expect("the first line is printed while the command runs");
    assert_eq!(first, "first\n");
    assert!(
        running.try_wait().expect("ptyhub run is there").is_none(),
        "ptyhub run ended before the command did"
    );
    std::fs::write(&go_file, b"").expect("the go file");
    let status = wait_bounded(&mut running, PATIENCE).expect("ptyhub run ends");
    let rest = reader.join().expect("the reader");
    assert_eq!(rest, "second\n");
    assert_eq!(status.code(), Some(3));

    let plain = bash_session(&up, "plain", &["--no-shell-integration"]);
    let refused = up.run(&["run", "plain", &plain, "--", "true"]);
    assert_eq!(refused.status.code(), Some(125), "{refused:?}");
    let said = one_error_line(&refused);
    assert!(said.contains("cannot run"), "{said}");
}
