//! Agents as ptyhub meets them, through a client that is not ours: the official MCP Python SDK
//! (`interop/mcp_client.py`) against a real `ptyhub up`, over the gateway's Streamable HTTP
//! `/mcp` (in the revision the SDK picks, and in the 2025 one with a session) and through
//! `ptyhub mcp` on stdio. It lists the tools, runs `sh -c 'echo out; exit 3'` for its exit code
//! and output, reads the screen (as a tool and as a resource), waits for the prompt, hears of a
//! screen's change, is refused unknown sessions, patterns that do not compile and timeouts over
//! the maximum with the contract's detail, and with a share link's token sees the read tools
//! alone. `ptyhub mcp --print-config` prints what other clients need to start it.

use std::path::PathBuf;
use std::process::{Command, Output};

use ptyhub_test_support::Requirement;
use serde_json::Value;

use crate::support::{Up, eventually, run_bounded};

/// A local instance `name` running bash (with ptyhub's shell integration), and a session of it
/// whose shell is at its prompt.
pub(crate) fn bash_session(up: &Up, name: &str) -> String {
    up.run_ok(&["instance", "add", name, "--local", "--", "bash"]);
    let created: Value =
        serde_json::from_str(&up.run_ok(&["--json", "new", name])).expect("new --json");
    let session = created["id"].as_str().expect("an id").to_owned();
    eventually("the shell shows its prompt", || {
        up.sessions(name)
            .iter()
            .any(|listed| listed["id"] == session.as_str() && listed["state"] == "at_prompt")
    });
    session
}

fn python_client(args: &[&str]) -> Output {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../interop/mcp_client.py");
    let mut command = Command::new(ptyhub_test_support::environment::python_path());
    command.arg(script).args(args);
    run_bounded(&mut command, None)
}

fn assert_passed(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "the Python MCP client failed {what} ({}):\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("ok a timeout over the maximum is refused"),
        "the client stopped before its last checks:\n{stdout}"
    );
}

#[test]
fn the_python_sdk_drives_terminals_through_the_gateways_endpoint() {
    if !ptyhub_test_support::require(Requirement::Python) {
        return;
    }
    let up = Up::start();
    let session = bash_session(&up, "agent");
    let url = format!("http://{}", up.address);
    for mode in ["auto", "legacy", "2026-07-28"] {
        let output = python_client(&["http", &url, &up.token, "agent", &session, mode]);
        assert_passed(&output, &format!("over Streamable HTTP ({mode})"));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            stdout.contains("ok a share link's credential cannot type"),
            "{stdout}"
        );
    }
}

#[test]
fn the_python_sdk_drives_terminals_through_ptyhub_mcp_on_stdio() {
    if !ptyhub_test_support::require(Requirement::Python) {
        return;
    }
    let up = Up::start();
    let session = bash_session(&up, "agent");
    let data_dir = up.data_dir().to_str().expect("a UTF-8 path").to_owned();
    let output = python_client(&[
        "stdio",
        crate::support::ptyhub_binary(),
        &data_dir,
        "agent",
        &session,
        "auto",
    ]);
    assert_passed(&output, "through ptyhub mcp");
}

#[test]
fn print_config_starts_this_binary_on_the_same_data_dir_from_anywhere() {
    let up = Up::start();
    // Named relative to where it runs, as a user in the data dir's parent would name it.
    let data_dir = std::fs::canonicalize(up.data_dir()).expect("the data dir");
    let mut command = crate::support::ptyhub_command();
    command
        .current_dir(data_dir.parent().expect("a parent"))
        .arg("--data-dir")
        .arg(data_dir.file_name().expect("a name"))
        .args(["mcp", "--print-config"]);
    let printed = run_bounded(&mut command, None);
    assert!(printed.status.success(), "{printed:?}");
    let output = String::from_utf8(printed.stdout).expect("UTF-8");
    let config: Value = serde_json::from_str(&output).expect("JSON");
    let server = &config["mcpServers"]["ptyhub"];
    assert_eq!(
        server["command"],
        crate::support::ptyhub_binary(),
        "{config}"
    );
    let args: Vec<&str> = server["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|arg| arg.as_str().expect("a string"))
        .collect();
    assert_eq!(&args[..2], ["mcp", "--data-dir"], "{config}");
    assert!(PathBuf::from(args[2]).is_absolute(), "{config}");
    assert_eq!(PathBuf::from(args[2]), data_dir, "{config}");
    assert!(
        !output.contains(&up.token),
        "the token is never printed: {output}"
    );
}
