//! Failures a user meets: each is one clear line on stderr and a non-zero exit, never a dump or
//! a hang; and `--help` works on every command.

use crate::support::{Up, one_error_line, ptyhub_command, run_bounded};

const UNKNOWN_SESSION: &str = "0b4a8a5e-1111-4222-8333-444455556666";

#[test]
fn no_token_is_one_clear_line() {
    let empty = tempfile::tempdir().expect("temp dir");
    let mut command = ptyhub_command();
    command
        .arg("--data-dir")
        .arg(empty.path())
        .args(["ls", "local"]);
    let line = one_error_line(&run_bounded(&mut command, None));
    assert!(line.starts_with("ptyhub: no token"), "{line}");
    assert!(
        line.contains("PTYHUB_TOKEN_FILE"),
        "says how to give one without argv: {line}"
    );
}

#[test]
fn wrong_token_is_refused_with_one_clear_line() {
    let up = Up::start();
    for args in [
        &["--token", "wrong", "ls", "local"][..],
        &["--token", "wrong", "instance", "ls"],
        &["--token", "wrong", "exec", "local", "--", "true"],
        &["--token", "wrong", "attach", "local"],
    ] {
        let line = one_error_line(&up.run(args));
        assert!(line.contains("token"), "{args:?}: {line}");
    }
    // The environment variable is a credential as good (and as bad) as the flag.
    let mut command = up.ptyhub();
    command.env("PTYHUB_TOKEN", "wrong").args(["ls", "local"]);
    let line = one_error_line(&run_bounded(&mut command, None));
    assert!(line.contains("token"), "{line}");
    let mut command = up.ptyhub();
    command.env("PTYHUB_TOKEN", &up.token).args(["ls", "local"]);
    let output = run_bounded(&mut command, None);
    assert!(output.status.success(), "{output:?}");
}

#[test]
fn token_and_server_from_the_environment_work_without_a_data_dir() {
    let up = Up::start();
    let elsewhere = tempfile::tempdir().expect("temp dir");
    let mut command = ptyhub_command();
    command
        .current_dir(elsewhere.path())
        .env("PTYHUB_TOKEN", &up.token)
        .env("PTYHUB_SERVER", format!("http://{}", up.address))
        .args(["--json", "instance", "ls"]);
    let output = run_bounded(&mut command, None);
    assert!(output.status.success(), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("\"local\""));
}

#[test]
fn unreachable_server_is_one_clear_line() {
    let up = Up::start();
    // A port this test holds bound but not listening: nothing can answer there, and no other
    // process can take it meanwhile.
    let held = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
    held.bind("127.0.0.1:0".parse().expect("an address"))
        .expect("bind 127.0.0.1:0");
    let address = held.local_addr().expect("the bound address");
    let line = one_error_line(&up.run(&["--server", &format!("http://{address}"), "ls", "local"]));
    assert!(line.contains("cannot reach ptyhub"), "{line}");
}

#[test]
fn unknown_instance_is_one_clear_line() {
    let up = Up::start();
    for args in [
        &["ls", "no-such-instance"][..],
        &["new", "no-such-instance"],
        &["attach", "no-such-instance"],
        &["exec", "no-such-instance", "--", "true"],
        &["instance", "rm", "no-such-instance"],
    ] {
        let line = one_error_line(&up.run(args));
        assert!(
            line.contains("no-such-instance") && line.contains("not found"),
            "{args:?}: {line}"
        );
    }
}

#[test]
fn unknown_session_is_one_clear_line() {
    let up = Up::start();
    for args in [
        &["attach", "local", UNKNOWN_SESSION][..],
        &["attach", "local", UNKNOWN_SESSION, "--view"],
        &["rm", "local", UNKNOWN_SESSION],
        &["reset", "local", UNKNOWN_SESSION],
        &["rename", "local", UNKNOWN_SESSION, "new name"],
    ] {
        let line = one_error_line(&up.run(args));
        assert!(
            line.contains(UNKNOWN_SESSION) && line.contains("not found"),
            "{args:?}: {line}"
        );
    }
    let line = one_error_line(&up.run(&["attach", "local", "not-a-session-id"]));
    assert!(line.contains("not-a-session-id"), "{line}");
    // Nothing was created along the way.
    assert!(up.sessions("local").is_empty());
}

#[test]
fn bad_arguments_are_refused_before_anything_runs() {
    let up = Up::start();
    let line = one_error_line(&up.run(&["attach", "local", "--detach-keys", "alt-x"]));
    assert!(line.contains("alt-x"), "{line}");
    let line = one_error_line(&up.run(&["instance", "add", "third"]));
    assert!(line.contains("--local or --docker"), "{line}");
    assert_eq!(up.sessions("local").len(), 0);
    let listed = up.run_ok(&["--json", "instance", "ls"]);
    assert!(!listed.contains("third"), "{listed}");
}

#[test]
fn help_works_on_every_command() {
    for args in [
        &["--help"][..],
        &["up", "--help"],
        &["instance", "--help"],
        &["instance", "add", "--help"],
        &["instance", "ls", "--help"],
        &["instance", "rm", "--help"],
        &["ls", "--help"],
        &["new", "--help"],
        &["rename", "--help"],
        &["reset", "--help"],
        &["rm", "--help"],
        &["attach", "--help"],
        &["exec", "--help"],
        &["screen", "--help"],
        &["send", "--help"],
        &["wait", "--help"],
    ] {
        let mut command = ptyhub_command();
        command.args(args);
        let output = run_bounded(&mut command, None);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{args:?}: {output:?}");
        assert!(stdout.contains("Usage: ptyhub"), "{args:?}: {stdout}");
    }
    let mut command = ptyhub_command();
    command.args(["attach", "--help"]);
    let help = String::from_utf8_lossy(&run_bounded(&mut command, None).stdout).into_owned();
    assert!(
        help.contains("--detach-keys") && help.contains("--view"),
        "{help}"
    );
}

#[test]
fn an_unknown_command_is_refused() {
    let mut command = ptyhub_command();
    command.arg("frobnicate");
    let output = run_bounded(&mut command, None);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("frobnicate"));
}
