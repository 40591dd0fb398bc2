//! Control without a stream through the gateway: a REST caller asks for control, the
//! controller's page is sent the request as a stream's and a grant over REST moves the lease on
//! the same sockets; a principal granted control without a stream has it reserved for its next
//! attach; bad requests and answers (a non-controller's grant, a share link's request, an
//! unknown request) are refused with a detail on REST and with their codes on gRPC, the lease
//! unchanged; the audit trail records each answer with both principals; and in the shared
//! mode a page's request and a REST one are refused with the same reason.

use std::time::Duration;

use ptyhub_proto::session::v1 as session_pb;
use ptyhub_proto::session::v1::session_api_client::SessionApiClient;
use ptyhub_test_support::stack::TestStack;
use reqwest::Method;
use serde_json::{Value, json};
use tonic::Code;
use tonic::transport::Channel;

use crate::common::{PATIENCE, Terminal, create_session, get, send};

/// The session's control state as `token` reads it over REST.
async fn control_state(stack: &TestStack, session_path: &str, token: &str) -> Value {
    let (status, state) = send(
        stack,
        Method::GET,
        &format!("{session_path}/control"),
        Some(token),
        None,
    )
    .await;
    assert_eq!(status, 200, "{state}");
    state
}

/// A page's socket on a session, opened with `token` (and `query`, such as `&mode=view`), its
/// `connected` frame read.
async fn open_tab(
    stack: &TestStack,
    instance: &str,
    session_id: &str,
    token: &str,
    query: &str,
) -> Terminal {
    let mut tab = Terminal::open_url(
        &format!(
            "{}/ws/tool-instances/{instance}/terminal/{session_id}?token={token}{query}",
            stack.websocket_url()
        ),
        &[],
    )
    .await
    .expect("the socket opens");
    tab.connected().await;
    tab
}

async fn post(stack: &TestStack, path: &str, token: &str) -> (u16, Value) {
    send(stack, Method::POST, path, Some(token), None).await
}

/// A share link of the session, as the admin makes it: its token.
async fn share_token(stack: &TestStack, session_id: &str) -> String {
    let (status, share) = send(
        stack,
        Method::POST,
        &format!("/api/v1/instances/{}/shares", stack.instance_id),
        Some(&stack.admin_token),
        Some(json!({"session_id": session_id})),
    )
    .await;
    assert_eq!(status, 201, "{share}");
    share["token"].as_str().expect("a share token").to_owned()
}

/// Polls the audit trail until a `control` event with `outcome` for `request_id` is there.
async fn control_event(
    stack: &TestStack,
    session_id: &str,
    outcome: &str,
    request_id: u64,
) -> Value {
    let found = ptyhub_test_support::poll_until(PATIENCE, Duration::from_millis(50), || async {
        let (status, audit) = get(stack, &format!("/api/v1/audit?session={session_id}")).await;
        assert_eq!(status, 200, "{audit}");
        audit["events"]
            .as_array()
            .expect("events")
            .iter()
            .find(|event| {
                event["kind"] == "control"
                    && event["detail"]["outcome"] == outcome
                    && event["detail"]["request"]
                        .as_str()
                        .and_then(|id| id.parse::<u64>().ok())
                        == Some(request_id)
            })
            .cloned()
    })
    .await;
    found.unwrap_or_else(|| panic!("no {outcome} control event for request {request_id}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_rest_reaches_the_controllers_page_and_a_grant_over_rest_moves_control() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let session_id = create_session(&stack, &instance, json!({})).await;
    let session_path = format!("/api/v1/instances/{instance}/terminal/sessions/{session_id}");
    let alice = stack.jwt("alice", &["*"], false);
    let bob = stack.jwt("bob", &["*"], false);
    let carol = stack.jwt("carol", &["*"], false);
    let mut alice_tab = open_tab(&stack, &instance, &session_id, &alice, "").await;
    let mut bob_tab = open_tab(&stack, &instance, &session_id, &bob, "&mode=view").await;

    // Bob asks over REST, without using his socket: Alice's page is sent it as a stream's.
    let requests_path = format!("{session_path}/control/requests");
    let (status, request) = post(&stack, &requests_path, &bob).await;
    assert_eq!(status, 202, "{request}");
    assert_eq!(
        (
            &request["principal"],
            &request["surface"],
            &request["stream"]
        ),
        (&json!("bob"), &json!("rest"), &json!(false)),
        "{request}"
    );
    let request_id = request["id"].as_u64().expect("a request id");
    let requested = alice_tab.read_until_text("control_requested").await;
    assert_eq!(requested["request_id"], request_id, "{requested}");
    assert_eq!(requested["requester"]["principal"], "bob", "{requested}");
    let state = control_state(&stack, &session_path, &carol).await;
    assert_eq!(state["controller"]["principal"], "alice", "{state}");
    assert_eq!(state["requests"][0]["id"], request_id, "{state}");
    assert_eq!(state["reserved_for"], Value::Null, "{state}");

    // Bad input, each refused with a detail and the lease unchanged.
    let (status, refused) = post(&stack, &requests_path, &bob).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(
        refused["detail"],
        format!("bob already asked for control (request {request_id}): wait for the answer")
    );
    let (status, refused) = post(&stack, &requests_path, &alice).await;
    assert_eq!(
        (status, &refused["detail"]),
        (409, &json!("alice controls the session already"))
    );
    let grant_path = |id: &str| format!("{requests_path}/{id}/grant");
    for not_controller in [&bob, &carol] {
        let (status, refused) =
            post(&stack, &grant_path(&request_id.to_string()), not_controller).await;
        assert_eq!(status, 403, "{refused}");
        assert_eq!(
            refused["detail"],
            "only the controller (alice) may answer a request for control"
        );
    }
    for unknown in ["99", "0", "first"] {
        let (status, refused) = post(&stack, &grant_path(unknown), &alice).await;
        assert_eq!(status, 404, "{unknown}: {refused}");
        assert!(refused["detail"].is_string(), "{refused}");
    }
    let share = share_token(&stack, &session_id).await;
    let (status, refused) = post(&stack, &requests_path, &share).await;
    assert_eq!(status, 403, "{refused}");
    assert_eq!(
        refused["detail"],
        "asking for control is not allowed: this credential may only view"
    );
    let (status, refused) = post(&stack, &grant_path(&request_id.to_string()), &share).await;
    assert_eq!(status, 403, "{refused}");
    // A share link sees that someone controls and someone asks, not who.
    let seen_by_share = control_state(&stack, &session_path, &share).await;
    assert_eq!(
        seen_by_share["controller"]["principal"], "",
        "{seen_by_share}"
    );
    assert_eq!(
        seen_by_share["requests"][0]["principal"], "",
        "{seen_by_share}"
    );
    let state = control_state(&stack, &session_path, &alice).await;
    assert_eq!(state["controller"]["principal"], "alice", "{state}");
    assert_eq!(
        state["requests"].as_array().map(Vec::len),
        Some(1),
        "{state}"
    );
    alice_tab.send_input("echo still-alice\n").await;
    alice_tab.read_until_output("still-alice\r\n").await;

    // Alice grants over REST: Bob's socket controls, hers watches; neither closes.
    let (status, after) = post(&stack, &grant_path(&request_id.to_string()), &alice).await;
    assert_eq!(status, 200, "{after}");
    assert_eq!(after["controller"]["principal"], "bob", "{after}");
    assert_eq!(after["requests"], json!([]), "{after}");
    assert_eq!(bob_tab.read_until_text("role").await["role"], "controller");
    assert_eq!(alice_tab.read_until_text("role").await["role"], "viewer");
    bob_tab.send_input("echo bob-has-$((6*7))\n").await;
    bob_tab.read_until_output("bob-has-42").await;

    // The audit trail says who gave control to whom.
    let granted = control_event(&stack, &session_id, "granted", request_id).await;
    assert_eq!(granted["principal"], "alice", "{granted}");
    assert_eq!(granted["detail"]["from"], "alice", "{granted}");
    assert_eq!(granted["detail"]["to"], "bob", "{granted}");

    // A decline over REST: the requester is told, and the audit says so.
    let (status, request) = post(&stack, &requests_path, &carol).await;
    assert_eq!(status, 202, "{request}");
    let carol_request = request["id"].as_u64().expect("a request id");
    let (status, after) = post(
        &stack,
        &format!("{requests_path}/{carol_request}/decline"),
        &bob,
    )
    .await;
    assert_eq!(status, 200, "{after}");
    assert_eq!(after["controller"]["principal"], "bob", "{after}");
    let declined = control_event(&stack, &session_id, "declined", carol_request).await;
    assert_eq!(
        (&declined["detail"]["from"], &declined["detail"]["to"]),
        (&json!("bob"), &json!("carol")),
        "{declined}"
    );
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_granted_to_a_principal_without_a_stream_is_reserved_for_its_next_attach() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let session_id = create_session(&stack, &instance, json!({})).await;
    let session_path = format!("/api/v1/instances/{instance}/terminal/sessions/{session_id}");
    let alice = stack.jwt("alice", &["*"], false);
    let agent = stack.jwt("agent", &["*"], false);
    let mut alice_tab = open_tab(&stack, &instance, &session_id, &alice, "").await;

    let (status, request) = post(&stack, &format!("{session_path}/control/requests"), &agent).await;
    assert_eq!(status, 202, "{request}");
    let request_id = request["id"].as_u64().expect("a request id");
    // While Alice controls, the agent's input waits for force.
    let input_path = format!("{session_path}/input");
    let typed = json!({"text": "echo agent-typed-$((6*7))\n"});
    let (status, refused) = send(
        &stack,
        Method::POST,
        &input_path,
        Some(&agent),
        Some(typed.clone()),
    )
    .await;
    assert_eq!(status, 409, "{refused}");

    let (status, after) = post(
        &stack,
        &format!("{session_path}/control/requests/{request_id}/grant"),
        &alice,
    )
    .await;
    assert_eq!(status, 200, "{after}");
    assert_eq!(after["controller"], Value::Null, "{after}");
    assert_eq!(after["reserved_for"]["principal"], "agent", "{after}");
    assert_eq!(alice_tab.read_until_text("role").await["role"], "viewer");

    // No stream holds control: the agent's input goes in without force.
    let (status, written) =
        send(&stack, Method::POST, &input_path, Some(&agent), Some(typed)).await;
    assert_eq!(status, 200, "{written}");
    alice_tab.read_until_output("agent-typed-42").await;

    // The agent's next attach, even one that asks only to view, is the controller.
    let mut agent_tab = open_tab(&stack, &instance, &session_id, &agent, "&mode=view").await;
    assert_eq!(
        agent_tab.read_until_text("role").await["role"],
        "controller"
    );
    let state = control_state(&stack, &session_path, &alice).await;
    assert_eq!(state["controller"]["principal"], "agent", "{state}");
    assert_eq!(state["reserved_for"], Value::Null, "{state}");
    stack.shutdown().await;
}

fn answer_request(
    stack: &TestStack,
    token: &str,
    session_id: &str,
    request_id: u64,
) -> tonic::Request<session_pb::AnswerControlRequest> {
    with_token(
        session_pb::AnswerControlRequest {
            instance: stack.instance_id.clone(),
            session_id: session_id.to_owned(),
            request_id,
        },
        token,
    )
}

fn with_token<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("an ascii token"),
    );
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_refuses_bad_requests_and_answers_with_their_codes_and_grants_the_controllers() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let session_id = create_session(&stack, &instance, json!({})).await;
    let alice = stack.jwt("alice", &["*"], false);
    let bob = stack.jwt("bob", &["*"], false);
    let mut alice_tab = open_tab(&stack, &instance, &session_id, &alice, "").await;
    let channel = Channel::from_shared(stack.gateway_url.clone())
        .expect("gateway url")
        .connect()
        .await
        .expect("a connection to the gateway");
    let mut client = SessionApiClient::new(channel);
    let session = || session_pb::RequestControlRequest {
        instance: instance.clone(),
        session_id: session_id.clone(),
    };

    let made = client
        .request_control(with_token(session(), &bob))
        .await
        .expect("bob asks")
        .into_inner();
    assert_eq!(
        (made.principal.as_str(), made.surface.as_str()),
        ("bob", "grpc")
    );
    let requested = alice_tab.read_until_text("control_requested").await;
    assert_eq!(requested["request_id"], made.id, "{requested}");

    let refused = client
        .grant_control(answer_request(&stack, &bob, &session_id, made.id))
        .await
        .expect_err("bob does not control");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert_eq!(
        refused.message(),
        "only the controller (alice) may answer a request for control"
    );
    let refused = client
        .grant_control(answer_request(&stack, &alice, &session_id, made.id + 1))
        .await
        .expect_err("no such request");
    assert_eq!(refused.code(), Code::NotFound, "{refused:?}");
    let share = share_token(&stack, &session_id).await;
    let refused = client
        .request_control(with_token(session(), &share))
        .await
        .expect_err("a share link may only view");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    let refused = client
        .request_control(with_token(session(), &bob))
        .await
        .expect_err("bob asked already");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");

    let read = |token: &str| {
        with_token(
            session_pb::GetControlRequest {
                instance: instance.clone(),
                session_id: session_id.clone(),
            },
            token,
        )
    };
    let state = client
        .get_control(read(&bob))
        .await
        .expect("the control state")
        .into_inner();
    assert_eq!(
        state
            .controller
            .map(|attendee| attendee.principal)
            .as_deref(),
        Some("alice"),
        "the lease is unchanged"
    );
    assert_eq!(state.requests.len(), 1);

    let state = client
        .grant_control(answer_request(&stack, &alice, &session_id, made.id))
        .await
        .expect("alice grants")
        .into_inner();
    assert_eq!(
        state
            .controller
            .map(|attendee| attendee.principal)
            .as_deref(),
        None
    );
    assert_eq!(
        state
            .reserved_for
            .map(|reserved| reserved.principal)
            .as_deref(),
        Some("bob"),
        "bob has no stream: control waits for his next attach"
    );
    assert_eq!(alice_tab.read_until_text("role").await["role"], "viewer");
    stack.shutdown().await;
}

/// In the shared mode nobody answers requests: a page that attached to watch and asks types at
/// once (a `role` frame on the same socket), while a standing request over REST, with no stream
/// to give control to, is refused (409 with the reason), and nothing waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_shared_mode_a_pages_request_is_granted_at_once_and_a_rest_one_refused() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let session_id = create_session(&stack, &instance, json!({"control_mode": "shared"})).await;
    let session_path = format!("/api/v1/instances/{instance}/terminal/sessions/{session_id}");
    let bob = stack.jwt("bob", &["*"], false);
    let carol = stack.jwt("carol", &["*"], false);
    let mut bob_tab = open_tab(&stack, &instance, &session_id, &bob, "&mode=view").await;

    let shared = "the session is shared: nobody answers requests; attach to control, or ask on an \
                  attached stream, to type";
    bob_tab.send_json(json!({"type": "request_control"})).await;
    let granted = bob_tab.read_until_text("role").await;
    assert_eq!(granted["role"], "controller", "{granted}");
    let (status, refused) = post(&stack, &format!("{session_path}/control/requests"), &carol).await;
    assert_eq!((status, &refused), (409, &json!({"detail": shared})));
    let state = control_state(&stack, &session_path, &carol).await;
    assert_eq!(state["requests"], json!([]), "{state}");
    stack.shutdown().await;
}

/// Grant by timeout, end to end: an instance registered over REST with `control_grant_timeout`
/// 2 grants a standing request to a session whose controller left when the 2 s passed; an
/// instance without one keeps a request made before it waiting, unanswered, with nothing
/// reserved and no audit event, though it waited longer (so no timeout of 2 s or less, and no
/// grant for want of a controller, applies to it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_to_a_session_whose_controller_left_is_granted_by_timeout_only_where_allowed() {
    let stack = TestStack::builder().start().await;
    let alice = stack.jwt("alice", &["*"], false);
    let bob = stack.jwt("bob", &["*"], false);
    let mut sessions = Vec::new();
    for (name, timeout) in [("waits", Value::Null), ("grants", json!(2))] {
        let (status, instance) = send(
            &stack,
            Method::POST,
            "/api/v1/instances",
            Some(&stack.admin_token),
            Some(json!({"name": name, "target": {"local": {}}, "control_grant_timeout": timeout})),
        )
        .await;
        assert_eq!(status, 201, "{instance}");
        assert_eq!(instance["control_grant_timeout"], timeout, "{instance}");
        let instance_id = instance["id"].as_str().expect("an instance id").to_owned();
        let session_id = create_session(&stack, &instance_id, json!({})).await;
        let session_path =
            format!("/api/v1/instances/{instance_id}/terminal/sessions/{session_id}");
        // Alice controls, then leaves.
        drop(open_tab(&stack, &instance_id, &session_id, &alice, "").await);
        let gone = ptyhub_test_support::poll_until(PATIENCE, Duration::from_millis(50), || async {
            let state = control_state(&stack, &session_path, &alice).await;
            state["controller"].is_null().then_some(())
        })
        .await;
        assert!(gone.is_some(), "{name}: alice's stream never left");
        sessions.push((name, session_id, session_path));
    }

    // Bob asks both, the session that waits first.
    let mut request_ids = Vec::new();
    for (name, _, session_path) in &sessions {
        let (status, request) =
            post(&stack, &format!("{session_path}/control/requests"), &bob).await;
        assert_eq!(status, 202, "{name}: {request}");
        request_ids.push(request["id"].as_u64().expect("a request id"));
    }
    let [(_, waits_id, waits_path), (_, grants_id, grants_path)] = &sessions[..] else {
        unreachable!()
    };

    // Bob's later request is granted by timeout ...
    let granted = ptyhub_test_support::poll_until(PATIENCE, Duration::from_millis(50), || async {
        let state = control_state(&stack, grants_path, &bob).await;
        (state["reserved_for"]["principal"] == "bob").then_some(state)
    })
    .await
    .expect("the request was never granted by timeout");
    assert_eq!(granted["requests"], json!([]), "{granted}");
    let event = control_event(&stack, grants_id, "granted_by_timeout", request_ids[1]).await;
    assert_eq!(event["detail"]["to"], "bob", "{event}");

    // ... while the earlier one, on the instance without a timeout, still waits.
    let waiting = control_state(&stack, waits_path, &bob).await;
    assert_eq!(waiting["controller"], Value::Null, "{waiting}");
    assert_eq!(waiting["reserved_for"], Value::Null, "{waiting}");
    let pending: Vec<(u64, &str)> = waiting["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .map(|request| {
            (
                request["id"].as_u64().expect("an id"),
                request["principal"].as_str().expect("a principal"),
            )
        })
        .collect();
    assert_eq!(pending, [(request_ids[0], "bob")], "{waiting}");
    let (status, audit) = get(&stack, &format!("/api/v1/audit?session={waits_id}")).await;
    assert_eq!(status, 200, "{audit}");
    assert!(
        !audit["events"]
            .as_array()
            .expect("events")
            .iter()
            .any(|event| event["kind"] == "control"),
        "{audit}"
    );
    stack.shutdown().await;
}

/// A credential whose subject is empty names nobody: its standing request is refused with 422
/// and the contract's detail, and the lease and the requests are as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_that_names_nobody_may_not_ask_for_control_and_the_lease_stays() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let session_id = create_session(&stack, &instance, json!({})).await;
    let session_path = format!("/api/v1/instances/{instance}/terminal/sessions/{session_id}");
    let alice = stack.jwt("alice", &["*"], false);
    let _alice_tab = open_tab(&stack, &instance, &session_id, &alice, "").await;
    let before = control_state(&stack, &session_path, &alice).await;
    assert_eq!(before["controller"]["principal"], "alice", "{before}");

    let nobody = stack.jwt("", &["*"], false);
    let (status, refused) =
        post(&stack, &format!("{session_path}/control/requests"), &nobody).await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(
        refused["detail"],
        "a request for control needs a principal: this credential names nobody"
    );
    assert_eq!(control_state(&stack, &session_path, &alice).await, before);
    stack.shutdown().await;
}
