//! The MCP endpoint (docs/CONTRACT.md, "MCP") through rmcp's own Streamable HTTP client: the
//! tools run a command in a bash session, read its screen and wait for its prompt, audited with
//! the surface `mcp`; refusals are tool errors with REST's detail; a share link's credential
//! lists the read tools alone and a JWT sees its own instances alone; a screen's subscriber
//! hears of its changes; a request without a credential is 401 before MCP is spoken; an agent
//! asks for control with a tool and the controller grants it with one.

use std::time::Duration;

use ptyhub_test_support::poll::poll_until;
use ptyhub_test_support::stack::TestStack;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientConfig, ReadResourceRequestParams,
    ResourceUpdatedNotificationParam, SubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt as _};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::common::{PATIENCE, create_session, get, post, send};

/// A client that passes on the screens it is told changed.
#[derive(Debug, Clone)]
struct Agent {
    updated: mpsc::UnboundedSender<String>,
}

impl ClientHandler for Agent {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default()
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.updated.send(params.uri);
    }
}

type Session = RunningService<RoleClient, Agent>;

/// An MCP session with the gateway as `token`, and the screens it is told changed.
async fn connect(stack: &TestStack, token: &str) -> (Session, mpsc::UnboundedReceiver<String>) {
    let transport = StreamableHttpClientTransport::with_client(
        stack.http.clone(),
        StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", stack.gateway_url))
            .auth_header(token),
    );
    let (updated, changes) = mpsc::unbounded_channel();
    let session = Agent { updated }
        .serve(transport)
        .await
        .expect("an MCP session with the gateway");
    (session, changes)
}

async fn call(session: &Session, tool: &str, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object");
    };
    session
        .peer()
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
        .unwrap_or_else(|error| panic!("{tool} answers: {error}"))
}

/// The structured answer of a tool that succeeded.
async fn answer(session: &Session, tool: &str, arguments: Value) -> Value {
    let result = call(session, tool, arguments).await;
    assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
    result.structured_content.expect("a structured answer")
}

/// The `{"detail", "status"}` of a tool that refused: its text, and the status in its `_meta`.
async fn refusal(session: &Session, tool: &str, arguments: Value) -> Value {
    let result = call(session, tool, arguments).await;
    assert_eq!(
        result.is_error,
        Some(true),
        "{tool} was refused: {result:?}"
    );
    assert_eq!(
        result.structured_content, None,
        "a refusal is no answer to check against the tool's output schema"
    );
    let detail = result.content[0].as_text().expect("a text").text.clone();
    let status = result.meta.expect("the status in _meta").0["ptyhub/status"].clone();
    json!({"detail": detail, "status": status})
}

/// A local instance running bash with ptyhub's shell integration, and a session of it at its
/// prompt.
async fn bash_session(stack: &TestStack, name: &str) -> (String, String) {
    let instance = stack
        .register_instance_with(name, 5, &[], vec!["bash".to_owned()])
        .await;
    let session = create_session(stack, &instance, json!({})).await;
    let path = format!("/api/v1/instances/{instance}/terminal/sessions/{session}");
    let at_prompt = poll_until(PATIENCE, Duration::from_millis(50), || async {
        let (_, shown) = get(stack, &path).await;
        (shown["state"] == "at_prompt").then_some(())
    })
    .await;
    assert!(at_prompt.is_some(), "the shell never showed its prompt");
    (instance, session)
}

async fn tool_names(session: &Session) -> Vec<String> {
    let listed = session.peer().list_tools(None).await.expect("tools/list");
    listed
        .tools
        .iter()
        .map(|tool| tool.name.to_string())
        .collect()
}

#[tokio::test]
async fn tools_run_a_command_read_the_screen_and_wait_for_the_prompt_as_mcp() {
    let stack = TestStack::builder().start().await;
    let (instance, session_id) = bash_session(&stack, "agent-shell").await;
    let (session, _) = connect(&stack, &stack.admin_token).await;
    let target = json!({"instance": instance, "session": session_id});

    assert_eq!(tool_names(&session).await.len(), 12);
    let ran = answer(
        &session,
        "run_command",
        json!({"instance": instance, "session": session_id, "command": "sh -c 'echo out; exit 3'"}),
    )
    .await;
    assert_eq!(ran["exit_code"], 3, "{ran}");
    assert_eq!(ran["output"].as_str().map(str::trim), Some("out"), "{ran}");
    assert_eq!(ran["command"]["command"], "sh -c 'echo out; exit 3'");
    // `run_command` answers at the next prompt, and a screen read at once says so: the broker
    // reads the state with the screen, where the session's record follows it by an event.
    let path = format!("/api/v1/instances/{instance}/terminal/sessions/{session_id}/screen");
    let (_, shown) = get(&stack, &path).await;
    assert_eq!(shown["terminal"]["state"], "at_prompt", "{shown}");
    assert_eq!(shown["terminal"]["shell_integration"], true, "{shown}");
    assert!(shown["quiet_ms"].is_u64(), "{shown}");
    let screen = answer(&session, "read_screen", target.clone()).await;
    assert_eq!(screen["state"], "at_prompt", "{screen}");

    let prompt = answer(
        &session,
        "wait_for",
        json!({"instance": instance, "session": session_id, "for": "prompt", "timeout_ms": 20000}),
    )
    .await;
    assert_eq!(prompt["outcome"], "state", "{prompt}");
    assert_eq!(prompt["state"], "at_prompt", "{prompt}");

    let screen = answer(&session, "read_screen", target.clone()).await;
    assert!(screen["text"].as_str().unwrap().contains("out"), "{screen}");
    assert_eq!(screen["state"], "at_prompt", "{screen}");
    assert_eq!(screen["cols"], 80);

    let typed = answer(
        &session,
        "send_input",
        json!({"instance": instance, "session": session_id, "text": "echo typed-$((6*7))", "keys": ["Enter"]}),
    )
    .await;
    let waited = answer(
        &session,
        "wait_for",
        json!({"instance": instance, "session": session_id, "pattern": "typed-42", "after_offset": typed["offset"], "timeout_ms": 20000}),
    )
    .await;
    assert_eq!(waited["outcome"], "matched", "{waited}");
    assert_eq!(waited["matched"], "typed-42");

    let commands = answer(&session, "list_commands", target.clone()).await;
    let lines: Vec<&str> = commands["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|command| command["command"].as_str().unwrap())
        .collect();
    assert!(lines.contains(&"sh -c 'echo out; exit 3'"), "{commands}");

    let sessions = answer(&session, "list_sessions", json!({"instance": instance})).await;
    assert_eq!(sessions["sessions"][0]["id"], session_id.as_str());

    // The run was typed for the token's principal, through the MCP surface.
    let (status, audit) = get(&stack, &format!("/api/v1/audit?session={session_id}")).await;
    assert_eq!(status, 200, "{audit}");
    let surfaces: Vec<&str> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["kind"] == "input")
        .map(|event| event["surface"].as_str().unwrap())
        .collect();
    assert!(
        !surfaces.is_empty() && surfaces.iter().all(|surface| *surface == "mcp"),
        "{audit}"
    );

    let closed = answer(&session, "close_session", target.clone()).await;
    assert_eq!(closed["status"], "closed");
    let refused = refusal(&session, "read_screen", target).await;
    assert_eq!(refused["status"], 404, "{refused}");
    session.cancel().await.expect("the session ends");
}

#[tokio::test]
async fn refusals_are_tool_errors_with_the_contract_detail() {
    let stack = TestStack::builder().start().await;
    let (instance, session_id) = bash_session(&stack, "refusals").await;
    let (session, _) = connect(&stack, &stack.admin_token).await;

    let stranger = "00000000-0000-4000-8000-000000000000";
    let unknown = refusal(
        &session,
        "read_screen",
        json!({"instance": instance, "session": stranger}),
    )
    .await;
    let (status, rest) = get(
        &stack,
        &format!("/api/v1/instances/{instance}/terminal/sessions/{stranger}/screen"),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(unknown, json!({"detail": rest["detail"], "status": 404}));

    let too_long = refusal(
        &session,
        "wait_for",
        json!({"instance": instance, "session": session_id, "timeout_ms": 300_001}),
    )
    .await;
    assert_eq!(
        too_long,
        json!({"detail": "timeout_ms must be 1 to 300000", "status": 422})
    );

    let bad_pattern = refusal(
        &session,
        "wait_for",
        json!({"instance": instance, "session": session_id, "pattern": "(", "timeout_ms": 1000}),
    )
    .await;
    assert_eq!(bad_pattern["status"], 422, "{bad_pattern}");
    // The same words REST answers the same wait with.
    let (status, rest) = post(
        &stack,
        &format!("/api/v1/instances/{instance}/terminal/sessions/{session_id}/wait"),
        Some(json!({"pattern": "(", "timeout_ms": 1000})),
    )
    .await;
    assert_eq!(status, 422);
    assert_eq!(bad_pattern["detail"], rest["detail"]);

    let no_such_state = refusal(
        &session,
        "wait_for",
        json!({"instance": instance, "session": session_id, "for": "lunch"}),
    )
    .await;
    assert_eq!(
        no_such_state,
        json!({"detail": "for must be prompt, idle, input or exit, not \"lunch\"", "status": 422})
    );

    let wrong_type = refusal(
        &session,
        "read_screen",
        json!({"instance": instance, "session": session_id, "scrollback": "lots"}),
    )
    .await;
    assert!(
        wrong_type["detail"]
            .as_str()
            .unwrap()
            .starts_with("invalid arguments: "),
        "{wrong_type}"
    );
    let nothing_to_type = refusal(
        &session,
        "send_input",
        json!({"instance": instance, "session": session_id}),
    )
    .await;
    assert_eq!(nothing_to_type["detail"], "input needs text or keys");

    let unknown_tool = session
        .peer()
        .call_tool(CallToolRequestParams::new("rm_rf"))
        .await
        .expect_err("an unknown tool is a protocol error");
    assert!(
        unknown_tool.to_string().contains("unknown tool"),
        "{unknown_tool}"
    );

    let not_a_screen = session
        .peer()
        .read_resource(ReadResourceRequestParams::new(
            "ptyhub://instances/x/screen",
        ))
        .await
        .expect_err("a URI that names no screen");
    assert!(
        not_a_screen.to_string().contains("is not a screen"),
        "{not_a_screen}"
    );
}

#[tokio::test]
async fn a_share_lists_the_read_tools_alone_and_a_jwt_sees_its_instances_alone() {
    let stack = TestStack::builder().start().await;
    let (instance, session_id) = bash_session(&stack, "shared").await;
    let (status, share) = post(
        &stack,
        &format!("/api/v1/instances/{instance}/shares"),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 201, "{share}");
    let (viewer, _) = connect(&stack, share["token"].as_str().unwrap()).await;

    let mut names = tool_names(&viewer).await;
    names.sort();
    assert_eq!(
        names,
        [
            "control_state",
            "list_instances",
            "list_sessions",
            "read_screen",
            "wait_for"
        ]
    );
    let target = json!({"instance": instance, "session": session_id});
    answer(&viewer, "read_screen", target.clone()).await;
    // Made without its history, the share sees the present screen alone, as on REST.
    let past = refusal(
        &viewer,
        "read_screen",
        json!({"instance": instance, "session": session_id, "scrollback": 5}),
    )
    .await;
    assert_eq!(past["status"], 403, "{past}");
    for (tool, arguments) in [
        (
            "send_input",
            json!({"instance": instance, "session": session_id, "text": "x"}),
        ),
        (
            "run_command",
            json!({"instance": instance, "session": session_id, "command": "true"}),
        ),
        ("close_session", target.clone()),
        ("list_commands", target.clone()),
    ] {
        let refused = refusal(&viewer, tool, arguments).await;
        assert_eq!(refused["status"], 403, "{tool}: {refused}");
    }
    let refused = refusal(
        &viewer,
        "send_input",
        json!({"instance": instance, "session": session_id, "text": "x"}),
    )
    .await;
    assert_eq!(
        refused["detail"],
        "typing is not allowed: this credential may only view"
    );

    let other = stack.register_instance("other", 5, &[]).await;
    let jwt = stack.jwt("agent-a", &[&instance], false);
    let (scoped, _) = connect(&stack, &jwt).await;
    let listed = answer(&scoped, "list_instances", json!({})).await;
    let ids: Vec<&str> = listed["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|listed| listed["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [instance.as_str()]);
    let refused = refusal(&scoped, "list_sessions", json!({"instance": other})).await;
    assert_eq!(
        refused,
        json!({"detail": "not allowed for this instance", "status": 403})
    );
}

#[tokio::test]
async fn a_screen_subscriber_hears_when_it_changes() {
    let stack = TestStack::builder().start().await;
    let (instance, session_id) = bash_session(&stack, "watched").await;
    let (session, mut changes) = connect(&stack, &stack.admin_token).await;
    let uri = format!("ptyhub://instances/{instance}/sessions/{session_id}/screen");

    let resources = session
        .peer()
        .list_resources(None)
        .await
        .expect("resources/list");
    assert!(
        resources
            .resources
            .iter()
            .any(|resource| resource.uri == uri),
        "{resources:?}"
    );
    #[allow(
        deprecated,
        reason = "the subscription of the session revisions rmcp's client speaks"
    )]
    session
        .peer()
        .subscribe(SubscribeRequestParams::new(uri.clone()))
        .await
        .expect("resources/subscribe");
    answer(
        &session,
        "send_input",
        json!({"instance": instance, "session": session_id, "text": "echo changed", "keys": ["Enter"]}),
    )
    .await;
    let changed = tokio::time::timeout(PATIENCE, changes.recv())
        .await
        .expect("a change notification in time")
        .expect("the session goes on");
    assert_eq!(changed, uri);
    let read = session
        .peer()
        .read_resource(ReadResourceRequestParams::new(uri.clone()))
        .await
        .expect("resources/read");
    let text = serde_json::to_value(&read.contents[0]).unwrap();
    assert!(
        text["text"].as_str().unwrap().contains("echo changed"),
        "{text}"
    );
}

#[tokio::test]
async fn a_request_without_a_credential_is_refused_before_mcp_is_spoken() {
    let stack = TestStack::builder().start().await;
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "stranger", "version": "0"}}});
    let (status, body) = send(
        &stack,
        reqwest::Method::POST,
        "/mcp",
        None,
        Some(initialize.clone()),
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert!(body["detail"].is_string(), "{body}");
    let (status, _) = send(
        &stack,
        reqwest::Method::POST,
        "/mcp",
        Some("not-a-token"),
        Some(initialize),
    )
    .await;
    assert_eq!(status, 401);

    // The refused token is in the audit trail, as having tried the MCP endpoint.
    let refused = poll_until(PATIENCE, Duration::from_millis(50), || async {
        let (_, audit) = get(&stack, "/api/v1/audit").await;
        audit["events"].as_array().and_then(|events| {
            events
                .iter()
                .find(|event| event["kind"] == "refused")
                .cloned()
        })
    })
    .await
    .expect("the refusal is audited");
    assert_eq!(refused["surface"], "mcp", "{refused}");
    assert_eq!(refused["detail"]["action"], "POST /mcp", "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_asks_for_control_with_a_tool_and_the_controller_grants_it_with_one() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let session_id = create_session(&stack, &instance, json!({})).await;
    let alice = stack.jwt("alice", &["*"], false);
    let mut alice_tab = crate::common::Terminal::open_url(
        &format!(
            "{}/ws/tool-instances/{instance}/terminal/{session_id}?token={alice}",
            stack.websocket_url()
        ),
        &[],
    )
    .await
    .expect("alice's socket");
    alice_tab.connected().await;
    let (agent, _) = connect(&stack, &stack.jwt("agent", &["*"], false)).await;
    let (controller, _) = connect(&stack, &alice).await;
    let target = json!({"instance": instance, "session": session_id});

    let state = answer(&agent, "control_state", target.clone()).await;
    assert_eq!(state["controller"]["principal"], "alice", "{state}");
    let request = answer(&agent, "request_control", target.clone()).await;
    assert_eq!(
        (&request["principal"], &request["surface"]),
        (&json!("agent"), &json!("mcp")),
        "{request}"
    );
    let request_id = request["id"].as_u64().expect("a request id");
    let requested = alice_tab.read_until_text("control_requested").await;
    assert_eq!(requested["requester"]["surface"], "mcp", "{requested}");

    // The agent cannot grant itself control, nor anyone answer a request that is not there.
    let answer_to =
        |id: u64| json!({"instance": instance, "session": session_id, "request_id": id});
    let refused = refusal(&agent, "grant_control", answer_to(request_id)).await;
    assert_eq!(refused["status"], 403, "{refused}");
    assert_eq!(
        refused["detail"],
        "only the controller (alice) may answer a request for control"
    );
    let refused = refusal(&controller, "grant_control", answer_to(request_id + 1)).await;
    assert_eq!(refused["status"], 404, "{refused}");

    // Alice grants with the tool: her socket watches, and the agent types without force.
    let granted = answer(&controller, "grant_control", answer_to(request_id)).await;
    assert_eq!(granted["reserved_for"]["principal"], "agent", "{granted}");
    assert_eq!(alice_tab.read_until_text("role").await["role"], "viewer");
    answer(
        &agent,
        "send_input",
        json!({"instance": instance, "session": session_id, "text": "echo agent-$((6*7))\n"}),
    )
    .await;
    alice_tab.read_until_output("agent-42").await;
    agent.cancel().await.expect("the agent's session ends");
    controller.cancel().await.expect("alice's session ends");
    stack.shutdown().await;
}
