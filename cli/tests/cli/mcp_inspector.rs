//! Another client that is not ours: the official MCP inspector's CLI (npm
//! `@modelcontextprotocol/inspector`, pinned with the Node 22 it needs in `interop/mcp-inspector/`)
//! against a real `ptyhub up`'s `/mcp`, as a CI job smoke-tests an MCP server with it. It lists the
//! nine tools, each with an input schema and none with a schema problem the inspector counts as an
//! error, runs `echo hi` through `run_command`, and is turned away with a wrong token.

use std::process::{Command, Output};

use ptyhub_test_support::Requirement;
use ptyhub_test_support::environment::{mcp_inspector_path, node22_path};
use serde_json::Value;
use tempfile::TempDir;

use crate::mcp::bash_session;
use crate::support::{Up, run_bounded};

/// The tools the contract lists (docs/CONTRACT.md, "MCP"), in its order.
const TOOLS: [&str; 12] = [
    "list_instances",
    "list_sessions",
    "create_session",
    "read_screen",
    "send_input",
    "wait_for",
    "run_command",
    "list_commands",
    "close_session",
    "control_state",
    "request_control",
    "grant_control",
];

/// The inspector's CLI pointed at one `ptyhub up`'s `/mcp` with one bearer token.
struct InspectorCli {
    url: String,
    token: String,
    /// The inspector keeps a catalog, client settings and secrets under `~/.mcp-inspector`: a
    /// home of the test's own keeps them from the user's and from other tests'.
    home: TempDir,
}

impl InspectorCli {
    fn new(up: &Up, token: &str) -> Self {
        Self {
            url: format!("http://{}/mcp", up.address),
            token: token.to_owned(),
            home: tempfile::tempdir().expect("a home for the inspector"),
        }
    }

    /// Runs one method with JSON output (the result on stdout, an error envelope on stderr),
    /// within the support's patience. `--stored-auth-only`: a refused token must end the run
    /// with `auth_required`, never start the interactive OAuth flow (a browser, a callback port).
    fn run(&self, method_args: &[&str]) -> Output {
        let mut command = Command::new(node22_path());
        command
            .arg(mcp_inspector_path())
            .args(["--cli", &self.url, "--transport", "http", "--header"])
            .arg(format!("Authorization: Bearer {}", self.token))
            .args(["--format", "json", "--stored-auth-only"])
            .args(method_args)
            .env("HOME", self.home.path());
        // Settings of the caller's that would point the inspector outside its home.
        for variable in [
            "MCP_CATALOG_PATH",
            "MCP_CLIENT_CONFIG_PATH",
            "MCP_OAUTH_CALLBACK_URL",
        ] {
            command.env_remove(variable);
        }
        run_bounded(&mut command, None)
    }

    /// The `result` of a method that must succeed.
    fn result(&self, method_args: &[&str]) -> Value {
        let output = self.run(method_args);
        let printed: Option<Value> = serde_json::from_slice(&output.stdout).ok();
        match printed {
            Some(mut printed) if output.status.success() => printed["result"].take(),
            _ => panic!(
                "the MCP inspector failed {method_args:?} ({}):\n{}",
                output.status,
                shown(&output)
            ),
        }
    }
}

fn shown(output: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The error envelope (`{"error": {"code", "message"}}`) the CLI prints on stderr when it fails.
fn error_envelope(output: &Output) -> Option<Value> {
    String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|line| line["error"].is_object())
}

#[test]
fn the_mcp_inspector_cli_lists_the_tools_and_runs_a_command() {
    if !ptyhub_test_support::require(Requirement::McpInspector) {
        return;
    }
    let up = Up::start();
    let session = bash_session(&up, "agent");
    let inspector = InspectorCli::new(&up, &up.token);

    // `--strict` exits 6 when a tool's schema has a problem the inspector counts as an error.
    let listed = inspector.result(&["--method", "tools/list", "--strict"]);
    let tools = listed["tools"].as_array().expect("tools");
    let names: Vec<&str> = tools
        .iter()
        .map(|tool| tool["name"].as_str().expect("a name"))
        .collect();
    assert_eq!(names, TOOLS, "{listed}");
    for tool in tools {
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
    }

    let session_arg = format!("session={session}");
    let ran = inspector.result(&[
        "--method",
        "tools/call",
        "--tool-name",
        "run_command",
        "--tool-arg",
        "instance=agent",
        &session_arg,
        "command=echo hi",
    ]);
    assert_eq!(ran["isError"], false, "{ran}");
    let answer = &ran["structuredContent"];
    assert_eq!(answer["exit_code"], 0, "{ran}");
    assert_eq!(
        answer["output"].as_str().map(str::trim_end),
        Some("hi"),
        "{ran}"
    );

    // A refusal is a tool error the inspector shows as the tool's result, with the contract's
    // detail: not a complaint that the result does not fit the tool's output schema.
    let refused = inspector.run(&[
        "--method",
        "tools/call",
        "--tool-name",
        "read_screen",
        "--tool-arg",
        "instance=agent",
        "session=no-such-session",
    ]);
    let printed = shown(&refused);
    assert!(printed.contains("not found"), "{printed}");
    assert!(!printed.contains("outputSchema"), "{printed}");
    assert!(
        !printed.contains("must have required property"),
        "{printed}"
    );
}

#[test]
fn the_mcp_inspector_cli_is_turned_away_with_a_wrong_token() {
    if !ptyhub_test_support::require(Requirement::McpInspector) {
        return;
    }
    let up = Up::start();
    let inspector = InspectorCli::new(&up, &format!("{}-wrong", up.token));
    let output = inspector.run(&["--method", "tools/list"]);
    assert!(!output.status.success(), "{}", shown(&output));
    assert!(
        !String::from_utf8_lossy(&output.stdout).contains("list_instances"),
        "{}",
        shown(&output)
    );
    // Turned away by the gateway's 401, not by anything on the way there.
    let envelope = error_envelope(&output).unwrap_or_else(|| panic!("{}", shown(&output)));
    assert_eq!(envelope["error"]["code"], "auth_required", "{envelope}");
    let message = envelope["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("invalid credential"), "{envelope}");
}
