//! `ptyhub recording`: `ptyhub up` keeps recordings in its data dir, and the command downloads a
//! closed session's asciicast to a file (or stdout) that a strict reader accepts; an unknown
//! session is one clear line and leaves no file behind.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;

use ptyhub_test_support::asciicast::Cast;
use serde_json::Value;

use crate::support::{Up, eventually, one_error_line};

/// Registers a local instance that records output and input, through REST (the CLI's `instance
/// add` has no recording flag).
fn register_recorded_instance(up: &Up, name: &str) {
    register_recorded_instance_running(up, name, "echo recorded-$((40+2)); exec sleep 600");
}

/// Registers a local instance that records output and input and runs `script`.
fn register_recorded_instance_running(up: &Up, name: &str, script: &str) {
    let body = serde_json::json!({
        "name": name,
        "target": {"local": {}},
        "command": ["sh", "-c", script],
        "record": "output+input",
    })
    .to_string();
    let mut stream = TcpStream::connect(up.address).expect("connect to the gateway");
    write!(
        stream,
        "POST /api/v1/instances HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        up.address,
        up.token,
        body.len()
    )
    .expect("send the request");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read the answer");
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
}

#[test]
fn recording_downloads_a_closed_sessions_cast() {
    let up = Up::start();
    register_recorded_instance(&up, "taped");
    let created: Value =
        serde_json::from_str(&up.run_ok(&["--json", "new", "taped"])).expect("new --json");
    let session = created["id"].as_str().expect("an id").to_owned();
    eventually("the session printed", || {
        up.run_ok(&["screen", "taped", &session])
            .contains("recorded-42")
    });
    up.run_ok(&["rm", "taped", &session]);

    let file = up.scratch.path().join("session.cast");
    let file_arg = file.to_str().unwrap().to_owned();
    eventually("the recording is downloadable", || {
        up.run(&["recording", "taped", &session, "-o", &file_arg])
            .status
            .success()
    });
    let cast = Cast::parse(&std::fs::read(&file).unwrap()).expect("a strict asciicast v2 file");
    let output = String::from_utf8(cast.output()).unwrap();
    assert!(output.contains("recorded-42"), "{output:?}");
    let to_stdout = up.run(&["recording", "taped", &session]);
    assert!(to_stdout.status.success());
    assert_eq!(to_stdout.stdout, std::fs::read(&file).unwrap());

    let missing = up.scratch.path().join("missing.cast");
    let failed = up.run(&[
        "recording",
        "taped",
        "00000000-0000-4000-8000-000000000000",
        "-o",
        missing.to_str().unwrap(),
    ]);
    assert!(!failed.status.success());
    let line = one_error_line(&failed);
    assert!(line.contains("cannot download the recording"), "{line}");
    assert!(!missing.exists(), "a failed download left a file");
}

#[test]
fn recording_of_an_exited_session_says_to_close_it_first() {
    let up = Up::start();
    register_recorded_instance_running(&up, "ended", "echo recorded-$((40+3)); exit 3");
    let created: Value =
        serde_json::from_str(&up.run_ok(&["--json", "new", "ended"])).expect("new --json");
    let session = created["id"].as_str().expect("an id").to_owned();
    eventually("the program exited", || {
        up.sessions("ended")
            .iter()
            .any(|listed| listed["id"] == session.as_str() && listed["status"] == "exited")
    });

    let line = one_error_line(&up.run(&["recording", "ended", &session]));
    assert!(
        line.contains("program has exited")
            && line.contains("published when the session closes")
            && line.contains(&format!("`ptyhub rm ended {session}` closes it")),
        "{line}"
    );
    up.run_ok(&["rm", "ended", &session]);
    eventually("the recording is published at the close", || {
        let downloaded = up.run(&["recording", "ended", &session]);
        downloaded.status.success()
            && String::from_utf8_lossy(&downloaded.stdout).contains("recorded-43")
    });
}
