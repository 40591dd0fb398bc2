//! `ptyhub exec` as scripts use it: the command's output on stdout byte for byte, its exit code
//! as ours, stdin piped through, and clear failures.

use crate::support::{Up, one_error_line, run_bounded};

fn exec_with_input(up: &Up, input: &[u8], command: &[&str]) -> std::process::Output {
    let mut ptyhub = up.ptyhub();
    ptyhub.args(["exec", "local", "--"]).args(command);
    run_bounded(&mut ptyhub, Some(input.to_vec()))
}

#[test]
fn exec_prints_the_output_and_exits_with_the_exit_code() {
    let up = Up::start();
    let output = up.run(&["exec", "local", "--", "sh", "-c", "echo hi; exit 7"]);
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "hi\n",
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(7));

    let output = up.run(&["exec", "local", "--", "true"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(output.stdout.is_empty(), "{output:?}");
}

#[test]
fn exec_closes_its_session() {
    let up = Up::start();
    let output = up.run(&["exec", "local", "--", "sh", "-c", "exit 3"]);
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    let sessions = up.sessions("local");
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(sessions[0]["status"], "closed", "{sessions:?}");
    assert_eq!(sessions[0]["exit_code"], 3, "{sessions:?}");
}

#[test]
fn exec_passes_piped_stdin_through() {
    let up = Up::start();

    let output = exec_with_input(&up, b"abc\ndef\n", &["cat"]);
    assert_eq!(String::from_utf8_lossy(&output.stdout), "abc\ndef\n");
    assert!(output.status.success(), "{output:?}");

    // The last line has no newline: it still reaches the command, and the input still ends.
    let output = exec_with_input(&up, b"first\nsecond\nno newline", &["cat"]);
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "first\nsecond\nno newline"
    );
    assert!(output.status.success(), "{output:?}");

    // Nothing piped in: the command sees end of input at once.
    let output = exec_with_input(&up, b"", &["wc", "-c"]);
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "0");
}

#[test]
fn exec_passes_a_large_input_through_unchanged() {
    let up = Up::start();
    // About 100 KiB in lines of varied content and length (a terminal's line discipline limits
    // one line to 4 KiB; scripts pipe lines).
    let mut input = String::new();
    let mut line = 0;
    while input.len() < 100 * 1024 {
        input.push_str(&format!("line {line:05} {}\n", "x".repeat(line % 97)));
        line += 1;
    }
    let output = exec_with_input(&up, input.as_bytes(), &["cat"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.stdout.len(), input.len());
    assert!(
        output.stdout == input.as_bytes(),
        "the output differs from the input"
    );

    // And through a command that counts it, so nothing is echoed back along the way.
    let output = exec_with_input(&up, input.as_bytes(), &["wc", "-c"]);
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        input.len().to_string()
    );
}

#[test]
fn exec_passes_every_byte_and_long_lines_through() {
    let up = Up::start();
    // Every byte value, control characters included (Ctrl-C, Ctrl-D, Ctrl-U, CR, DEL would each
    // mean something to a terminal), then one line longer than a terminal's 4 KiB line buffer,
    // and no final newline.
    let mut input: Vec<u8> = (0..=255u8).cycle().take(256 * 8).collect();
    input.push(b'\n');
    input.extend(std::iter::repeat_n(b'y', 10_000));
    input.extend_from_slice(b"\x04\x03end");
    let output = exec_with_input(&up, &input, &["cat"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.stdout.len(), input.len());
    let first_difference = output
        .stdout
        .iter()
        .zip(&input)
        .position(|(got, sent)| got != sent);
    assert_eq!(first_difference, None, "the output differs from the input");
}

#[test]
fn exec_of_a_missing_command_fails_clearly() {
    let up = Up::start();
    let output = up.run(&["exec", "local", "--", "ptyhub-no-such-command", "arg"]);
    assert_eq!(output.status.code(), Some(127), "{output:?}");
    // The message comes through the session's terminal, which has one output stream.
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(shown, "ptyhub: ptyhub-no-such-command: command not found\n");
}

#[test]
fn exec_on_an_unknown_instance_is_one_clear_error() {
    let up = Up::start();
    let output = up.run(&["exec", "no-such-instance", "--", "true"]);
    let line = one_error_line(&output);
    assert!(line.contains("no-such-instance"), "{line}");
    assert!(output.stdout.is_empty(), "{output:?}");
}

#[test]
fn exec_requires_a_command() {
    let up = Up::start();
    let output = up.run(&["exec", "local"]);
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("<COMMAND>"),
        "{output:?}"
    );
}

#[test]
fn a_signal_ends_exec_and_closes_its_session() {
    use std::io::BufRead as _;
    let up = Up::start();
    let mut ptyhub = up.ptyhub();
    ptyhub
        .args([
            "exec",
            "local",
            "--",
            "sh",
            "-c",
            "echo started; exec sleep 600",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = ptyhub.spawn().expect("spawn exec");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("read the first line");
    assert_eq!(line, "started\n");
    assert_eq!(up.sessions("local")[0]["status"], "active");

    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let status =
        crate::support::wait_bounded(&mut child, crate::support::PATIENCE).expect("exec ends");
    assert_eq!(status.code(), Some(143));
    let sessions = up.sessions("local");
    assert_eq!(sessions[0]["status"], "closed", "{sessions:?}");
}
