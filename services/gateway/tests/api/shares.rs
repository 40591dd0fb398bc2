//! Share links against a real stack: created, listed and revoked under
//! `/api/v1/instances/{iid}/shares`; a share's credential (its token, or the cookie its link
//! signs in) may watch and never take control, type, resize, reset, rename, close or create, on
//! REST, the WebSocket, the gRPC surface and the relayed `Attach`; a share of one session covers
//! that session alone; a revoked share ends its token and its cookies; a share link never
//! replaces another sign-in of the browser without being told to.

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::broker::v1::pty_broker_client::PtyBrokerClient;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_proto::session::v1::session_api_client::SessionApiClient;
use ptyhub_test_support::stack::TestStack;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_tungstenite::tungstenite::Message;
use tonic::Code;
use tonic::transport::Channel;

use crate::common::{PATIENCE, Terminal, create_session, delete, get, post, send};

async fn create_share(stack: &TestStack, body: Value) -> Value {
    let (status, created) = post(
        stack,
        &format!("/api/v1/instances/{}/shares", stack.instance_id),
        Some(body),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    created
}

fn grpc_request<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("an ascii token"),
    );
    request
}

async fn gateway_channel(stack: &TestStack) -> Channel {
    Channel::from_shared(stack.gateway_url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_share_link_is_made_listed_and_revoked_by_the_instances_user() {
    let stack = TestStack::builder().start().await;
    let created = create_share(&stack, json!({"expires_in": 3600})).await;
    let token = created["token"].as_str().unwrap();
    assert!(token.starts_with("ptyhub-share-"), "{created}");
    assert_eq!(created["role"], "viewer");
    assert_eq!(created["session_id"], Value::Null);
    assert_eq!(created["created_by"], "api-token-0");
    assert_eq!(
        created["url"],
        format!(
            "{}/instances/{}?share={token}",
            stack.gateway_url, stack.instance_id
        )
    );
    let shares = format!("/api/v1/instances/{}/shares", stack.instance_id);
    let (status, listed) = get(&stack, &shares).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["shares"].as_array().unwrap().len(), 1);
    assert!(
        listed["shares"][0].get("token").is_none(),
        "the token is shown once"
    );

    for (body, status) in [
        (json!({"expires_in": 59}), 422),
        (json!({"expires_in": 2_592_001}), 422),
        (
            json!({"session_id": "0b0e5b8e-1a52-4c5f-9b36-2a4f0f2c7d10"}),
            404,
        ),
        (json!({"role": "controller"}), 422),
    ] {
        let (answered, refused) = post(&stack, &shares, Some(body.clone())).await;
        assert_eq!(answered, status, "{body}: {refused}");
    }

    // A share shows a terminal, never who did what on the instance.
    let (status, body) = send(&stack, Method::GET, "/api/v1/audit", Some(token), None).await;
    assert_eq!(
        status, 403,
        "a share's credential reads no audit trail: {body}"
    );

    let id = created["id"].as_str().unwrap();
    let (status, revoked) = delete(&stack, &format!("{shares}/{id}")).await;
    assert_eq!(status, 200, "{revoked}");
    assert!(revoked["revoked_at"].is_string(), "{revoked}");
    let (status, again) = delete(&stack, &format!("{shares}/{id}")).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again, revoked, "revoking again answers the share unchanged");

    // Made and revoked once each, by the instance's user: two events, whatever was retried.
    let (status, trail) = get(
        &stack,
        &format!("/api/v1/audit?instance={}", stack.instance_id),
    )
    .await;
    assert_eq!(status, 200, "{trail}");
    let share_events: Vec<&Value> = trail["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["kind"].as_str().unwrap().starts_with("share_"))
        .collect();
    let kinds: Vec<&str> = share_events
        .iter()
        .map(|event| event["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["share_created", "share_revoked"], "{trail}");
    for event in share_events {
        assert_eq!(event["principal"], "api-token-0", "{event}");
        assert_eq!(event["surface"], "rest", "{event}");
        assert_eq!(event["instance_id"], stack.instance_id.as_str(), "{event}");
        assert_eq!(event["detail"]["share_id"], id, "{event}");
        assert!(
            event.to_string().find("ptyhub-share-").is_none(),
            "an event never carries the token: {event}"
        );
    }
    let (status, body) = send(&stack, Method::GET, "/api/v1/instances", Some(token), None).await;
    assert_eq!(status, 401, "a revoked share's token is refused: {body}");
    let (_, listed) = get(&stack, &shares).await;
    assert_eq!(listed["shares"], json!([]));
    let (_, listed) = get(&stack, &format!("{shares}?include=ended")).await;
    assert_eq!(listed["shares"].as_array().unwrap().len(), 1);
    let (status, _) = delete(&stack, &format!("{shares}/not-a-uuid")).await;
    assert_eq!(status, 404);
    stack.shutdown().await;
}

#[tokio::test]
async fn a_shares_credential_watches_and_never_controls_on_any_surface() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let session = create_session(&stack, &instance, json!({"name": "watched"})).await;
    let created = create_share(&stack, json!({})).await;
    let token = created["token"].as_str().unwrap().to_owned();
    let sessions = format!("/api/v1/instances/{instance}/terminal/sessions");
    let one = format!("{sessions}/{session}");

    // REST: reads work, every change is 403 and changes nothing.
    let (status, listed) = send(&stack, Method::GET, &sessions, Some(&token), None).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["sessions"][0]["id"], session.as_str());
    let (status, _) = send(
        &stack,
        Method::GET,
        &format!("{one}/screen"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, 200);
    for (method, path, body) in [
        (Method::POST, sessions.clone(), Some(json!({}))),
        (
            Method::POST,
            format!("{one}/rename"),
            Some(json!({"name": "mine"})),
        ),
        (Method::POST, format!("{one}/reset"), None),
        (Method::DELETE, one.clone(), None),
        (
            Method::POST,
            format!("{one}/input"),
            Some(json!({"text": "touch /tmp/x\n"})),
        ),
        (
            Method::POST,
            format!("/api/v1/instances/{instance}/terminal/reset"),
            None,
        ),
        (
            Method::POST,
            format!("/api/v1/instances/{instance}/shares"),
            Some(json!({})),
        ),
        (
            Method::GET,
            format!("/api/v1/instances/{instance}/shares"),
            None,
        ),
        (
            Method::DELETE,
            format!("/api/v1/instances/{instance}"),
            None,
        ),
    ] {
        let (status, body) = send(&stack, method.clone(), &path, Some(&token), body).await;
        assert_eq!(status, 403, "{method} {path}: {body}");
    }
    let (_, listed) = get(&stack, &sessions).await;
    assert_eq!(
        listed["sessions"].as_array().unwrap().len(),
        1,
        "nothing created"
    );
    assert_eq!(listed["sessions"][0]["name"], "watched", "nothing renamed");
    assert_eq!(listed["sessions"][0]["status"], "active", "nothing closed");

    // WebSocket: a viewer whatever it asks for; its input, resize and reset are refused.
    let url = format!(
        "{}/ws/tool-instances/{instance}/terminal/{session}?token={token}",
        stack.websocket_url()
    );
    let mut watcher = Terminal::open_url(&url, &[])
        .await
        .expect("a viewer socket");
    let connected = watcher.connected().await;
    assert_eq!(connected["role"], "viewer", "{connected}");
    watcher.send_input("echo typed-by-viewer\n").await;
    assert_eq!(
        watcher.read_until_text("error").await["message"],
        "viewers cannot send input"
    );
    watcher
        .send_json(json!({"type": "resize", "cols": 100, "rows": 30}))
        .await;
    assert_eq!(
        watcher.read_until_text("error").await["message"],
        "viewers cannot resize"
    );
    watcher.send_json(json!({"type": "reset"})).await;
    assert_eq!(
        watcher.read_until_text("error").await["message"],
        "viewers cannot reset"
    );
    // Opening the tab's own session would create one: a viewer creates nothing.
    let url = format!(
        "{}/ws/tool-instances/{instance}/terminal?client_id=tab-1&token={token}",
        stack.websocket_url()
    );
    let mut creator = Terminal::open_url(&url, &[]).await.expect("a socket");
    assert_eq!(creator.read_until_closed().await.code, 4004);

    // gRPC: every change PERMISSION_DENIED, a controller ticket too.
    let channel = gateway_channel(&stack).await;
    let mut sessions_client = SessionApiClient::new(channel.clone());
    let denied = sessions_client
        .create_session(grpc_request(
            session_pb::CreateSessionRequest {
                instance: instance.clone(),
                ..Default::default()
            },
            &token,
        ))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    let denied = sessions_client
        .send_input(grpc_request(
            session_pb::SendInputRequest {
                instance: instance.clone(),
                session_id: session.clone(),
                items: vec![broker_pb::InputItem {
                    item: Some(broker_pb::input_item::Item::Text("touch /tmp/x\n".into())),
                }],
                force: true,
            },
            &token,
        ))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    for role in [broker_pb::Role::Controller, broker_pb::Role::Unspecified] {
        let denied = sessions_client
            .resolve_session(grpc_request(
                session_pb::ResolveSessionRequest {
                    instance: instance.clone(),
                    selector: Some(session_pb::resolve_session_request::Selector::SessionId(
                        session.clone(),
                    )),
                    role: role as i32,
                    ..Default::default()
                },
                &token,
            ))
            .await
            .unwrap_err();
        assert_eq!(denied.code(), Code::PermissionDenied, "{role:?}");
        let denied = sessions_client
            .issue_attach_ticket(grpc_request(
                session_pb::IssueAttachTicketRequest {
                    instance: instance.clone(),
                    session_id: session.clone(),
                    role: role as i32,
                },
                &token,
            ))
            .await
            .unwrap_err();
        assert_eq!(denied.code(), Code::PermissionDenied, "{role:?}");
    }
    let viewer_ticket = sessions_client
        .issue_attach_ticket(grpc_request(
            session_pb::IssueAttachTicketRequest {
                instance: instance.clone(),
                session_id: session.clone(),
                role: broker_pb::Role::Viewer as i32,
            },
            &token,
        ))
        .await;
    assert!(viewer_ticket.is_ok(), "{viewer_ticket:?}");

    // The relayed Attach: a controller hello is refused before anything reaches a broker.
    let (frames, receiver) = mpsc::channel(4);
    frames
        .send(broker_pb::ClientFrame {
            frame: Some(broker_pb::client_frame::Frame::Hello(broker_pb::Hello {
                session_id: session.clone(),
                role: broker_pb::Role::Controller as i32,
                ..Default::default()
            })),
        })
        .await
        .unwrap();
    let mut attach = grpc_request(ReceiverStream::new(receiver), &token);
    attach
        .metadata_mut()
        .insert("ptyhub-instance", instance.parse().unwrap());
    let denied = PtyBrokerClient::new(channel)
        .attach(attach)
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");

    // The screen never saw a viewer's keystroke.
    let (_, screen) = get(&stack, &format!("{one}/screen")).await;
    assert!(
        !screen["text"].as_str().unwrap().contains("typed-by-viewer"),
        "{screen}"
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn a_share_of_one_session_covers_that_session_alone() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let shared = create_session(&stack, &instance, json!({"name": "shared"})).await;
    let private = create_session(&stack, &instance, json!({"name": "private"})).await;
    let created = create_share(&stack, json!({"session_id": shared})).await;
    assert_eq!(created["session_id"], shared.as_str());
    let token = created["token"].as_str().unwrap().to_owned();
    let sessions = format!("/api/v1/instances/{instance}/terminal/sessions");
    let (status, listed) = send(&stack, Method::GET, &sessions, Some(&token), None).await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|session| session["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [shared.as_str()]);
    for path in [
        format!("{sessions}/{private}"),
        format!("{sessions}/{private}/screen"),
    ] {
        let (status, body) = send(&stack, Method::GET, &path, Some(&token), None).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
    let url = format!(
        "{}/ws/tool-instances/{instance}/terminal/{private}?mode=view&token={token}",
        stack.websocket_url()
    );
    let mut socket = Terminal::open_url(&url, &[]).await.expect("a socket");
    assert_eq!(socket.read_until_closed().await.code, 4004);
    let url = format!(
        "{}/ws/tool-instances/{instance}/terminal/{shared}?mode=view&token={token}",
        stack.websocket_url()
    );
    let mut socket = Terminal::open_url(&url, &[]).await.expect("a socket");
    socket.connected().await;
    stack.shutdown().await;
}

#[tokio::test]
async fn a_share_link_signs_a_browser_in_as_a_viewer_until_it_is_revoked() {
    let stack = TestStack::builder().start().await;
    let created = create_share(&stack, json!({})).await;
    let url = created["url"].as_str().unwrap();
    let client = ptyhub_test_support::http::client()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let token = created["token"].as_str().unwrap();
    // The link's token leaves the query for the fragment, which the page signs in with.
    let response = client.get(url).send().await.unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(
        response.headers()["location"],
        format!("/instances/{}#share={token}", stack.instance_id)
    );
    assert!(response.headers().get("set-cookie").is_none());
    let response = sign_in(&client, &stack, token, None, None).await;
    assert_eq!(response.status(), 200);
    let cookie = cookie_of(&response);
    let who = |cookie: String| {
        client
            .get(format!("{}/api/v1/auth/session", stack.gateway_url))
            .header("cookie", cookie)
            .send()
    };
    let response = who(cookie.clone()).await.unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["viewer_only"], true, "{body}");
    assert_eq!(body["admin"], false, "{body}");
    // The cookie's socket is a viewer's too.
    let socket_url = format!(
        "{}/ws/tool-instances/{}/terminal/default",
        stack.websocket_url(),
        stack.instance_id
    );
    let (status, _) = post(
        &stack,
        &format!("/api/v1/instances/{}/terminal/reset", stack.instance_id),
        None,
    )
    .await;
    assert_eq!(status, 200, "the default session exists");
    let mut socket = Terminal::open_url(&socket_url, &[("cookie", &cookie)])
        .await
        .expect("a socket");
    assert_eq!(socket.connected().await["role"], "viewer");
    socket
        .send(Message::Close(None))
        .await
        .expect("a close frame");

    let (status, _) = delete(
        &stack,
        &format!(
            "/api/v1/instances/{}/shares/{}",
            stack.instance_id,
            created["id"].as_str().unwrap()
        ),
    )
    .await;
    assert_eq!(status, 200);
    let response = who(cookie).await.unwrap();
    assert_eq!(
        response.status(),
        401,
        "a revoked share's cookie ends with it"
    );
    stack.shutdown().await;
}

/// `POST /api/v1/auth/session` with `token`, the browser's `cookie` and the JSON `body`, as the
/// page posts it.
async fn sign_in(
    client: &reqwest::Client,
    stack: &TestStack,
    token: &str,
    cookie: Option<&str>,
    body: Option<Value>,
) -> reqwest::Response {
    let mut request = client
        .post(format!("{}/api/v1/auth/session", stack.gateway_url))
        .bearer_auth(token);
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.unwrap()
}

/// The `name=value` of an answer's `Set-Cookie`.
fn cookie_of(response: &reqwest::Response) -> String {
    response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_share_link_never_replaces_another_sign_in_without_asking() {
    let stack = TestStack::builder().start().await;
    let client = ptyhub_test_support::http::client()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let who = |cookie: String| {
        let request = client
            .get(format!("{}/api/v1/auth/session", stack.gateway_url))
            .header("cookie", cookie);
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    // The browser is signed in as the admin.
    let response = client
        .post(format!("{}/api/v1/auth/session", stack.gateway_url))
        .bearer_auth(&stack.admin_token)
        .send()
        .await
        .unwrap();
    let admin_cookie = cookie_of(&response);
    let created = create_share(&stack, json!({})).await;
    let token = created["token"].as_str().unwrap();

    // Following the link (as `?share=`, or its token as `?token=`) sets no cookie, whatever
    // the browser holds: the page signs in with the fragment.
    for link in [
        created["url"].as_str().unwrap().to_owned(),
        format!(
            "{}/instances/{}?token={token}",
            stack.gateway_url, stack.instance_id
        ),
    ] {
        let response = client
            .get(&link)
            .header("cookie", &admin_cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 303, "{link}");
        assert!(
            response.headers().get("set-cookie").is_none(),
            "{link} replaced the sign-in"
        );
        assert_eq!(
            response.headers()["location"],
            format!("/instances/{}#share={token}", stack.instance_id)
        );
    }

    // The page's sign-in with the share is refused while the admin's cookie is valid, and
    // says who the browser is and who it would be.
    let response = sign_in(&client, &stack, token, Some(&admin_cookie), None).await;
    assert_eq!(response.status(), 409);
    assert!(response.headers().get("set-cookie").is_none());
    let conflict: Value = response.json().await.unwrap();
    assert_eq!(
        conflict["signed_in"]["subject"], "api-token-0",
        "{conflict}"
    );
    assert_eq!(conflict["signed_in"]["admin"], true, "{conflict}");
    assert_eq!(conflict["offered"]["viewer_only"], true, "{conflict}");
    assert!(
        conflict["detail"].as_str().unwrap().contains("api-token-0"),
        "{conflict}"
    );
    let response = sign_in(
        &client,
        &stack,
        token,
        Some(&admin_cookie),
        Some(json!({"replace": false})),
    )
    .await;
    assert_eq!(response.status(), 409);
    assert_eq!(who(admin_cookie.clone()).await["admin"], true);

    // Told to, it replaces it.
    let response = sign_in(
        &client,
        &stack,
        token,
        Some(&admin_cookie),
        Some(json!({"replace": true})),
    )
    .await;
    assert_eq!(response.status(), 200);
    let viewer_cookie = cookie_of(&response);
    assert_eq!(who(viewer_cookie.clone()).await["viewer_only"], true);

    // The same principal again replaces nothing and needs no word; another one (the admin's
    // token, pasted into the form) asks as well.
    let response = sign_in(&client, &stack, token, Some(&viewer_cookie), None).await;
    assert_eq!(response.status(), 200);
    let response = sign_in(
        &client,
        &stack,
        &stack.admin_token,
        Some(&viewer_cookie),
        None,
    )
    .await;
    assert_eq!(response.status(), 409);
    let conflict: Value = response.json().await.unwrap();
    assert_eq!(conflict["signed_in"]["viewer_only"], true, "{conflict}");
    assert_eq!(conflict["offered"]["admin"], true, "{conflict}");

    // A cookie that no longer signs anyone in (its share revoked) is replaced without asking.
    let (status, _) = delete(
        &stack,
        &format!(
            "/api/v1/instances/{}/shares/{}",
            stack.instance_id,
            created["id"].as_str().unwrap()
        ),
    )
    .await;
    assert_eq!(status, 200);
    let response = sign_in(
        &client,
        &stack,
        &stack.admin_token,
        Some(&viewer_cookie),
        None,
    )
    .await;
    assert_eq!(response.status(), 200);
    stack.shutdown().await;
}

/// A share's credential watches a terminal and learns nothing else of its instance: no
/// environment (where API keys live), command, user, working directory or container, on REST
/// and on the gRPC surface; the instance's own users still read them.
#[tokio::test]
async fn a_shares_credential_reads_no_instance_settings_on_any_surface() {
    let stack = TestStack::builder().start().await;
    let (status, registered) = post(
        &stack,
        "/api/v1/instances",
        Some(json!({
            "name": "with-secrets",
            "target": {"local": {}},
            "command": ["/bin/sh", "-c", "exec sh"],
            "env": {"API_KEY": "sk-do-not-share"},
            "cwd": "/tmp",
        })),
    )
    .await;
    assert_eq!(status, 201, "{registered}");
    let instance = registered["id"].as_str().unwrap().to_owned();
    let (status, created) = post(
        &stack,
        &format!("/api/v1/instances/{instance}/shares"),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let token = created["token"].as_str().unwrap().to_owned();

    let (status, seen) = send(
        &stack,
        Method::GET,
        &format!("/api/v1/instances/{instance}"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, 200, "{seen}");
    let (status, listed) = send(&stack, Method::GET, "/api/v1/instances", Some(&token), None).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["instances"].as_array().unwrap().len(), 1, "{listed}");
    for body in [&seen, &listed["instances"][0]] {
        assert_eq!(body["name"], "with-secrets", "{body}");
        assert_eq!(body["env"], json!({}), "{body}");
        assert_eq!(body["command"], json!([]), "{body}");
        assert_eq!(body["cwd"], "", "{body}");
        assert_eq!(body["user"], "", "{body}");
        assert_eq!(body["target"], Value::Null, "{body}");
        assert!(!body.to_string().contains("sk-do-not-share"), "{body}");
    }

    let mut grpc = SessionApiClient::new(gateway_channel(&stack).await);
    let one = grpc
        .get_instance(grpc_request(
            session_pb::GetInstanceRequest {
                instance: instance.clone(),
            },
            &token,
        ))
        .await
        .expect("the shared instance")
        .into_inner();
    let all = grpc
        .list_instances(grpc_request(
            session_pb::ListInstancesRequest::default(),
            &token,
        ))
        .await
        .expect("the instances the share covers")
        .into_inner();
    assert_eq!(all.instances.len(), 1);
    for seen in [&one, &all.instances[0]] {
        assert!(seen.env.is_empty(), "{seen:?}");
        assert!(seen.command.is_empty(), "{seen:?}");
        assert!(seen.user.is_empty() && seen.cwd.is_empty(), "{seen:?}");
        assert!(seen.target.is_none(), "{seen:?}");
    }

    // The instance's users still see how it runs.
    let (_, full) = get(&stack, &format!("/api/v1/instances/{instance}")).await;
    assert_eq!(full["env"]["API_KEY"], "sk-do-not-share", "{full}");
    assert_eq!(full["cwd"], "/tmp", "{full}");
    stack.shutdown().await;
}

/// A share grants what its creator may see, so it never outlives the creator's credential, and
/// only its creator (or an admin) revokes it: another user of the instance may not.
#[tokio::test]
async fn a_share_ends_with_its_creators_credential_and_only_its_creator_or_an_admin_revokes_it() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let shares = format!("/api/v1/instances/{instance}/shares");
    let creator_expires_at = unix_now() + 600;
    let creator = stack.jwt_expiring_at("alice", &[&instance], creator_expires_at);
    let (status, created) = send(
        &stack,
        Method::POST,
        &shares,
        Some(&creator),
        Some(json!({"expires_in": 86400})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let expires_at = chrono::DateTime::parse_from_rfc3339(created["expires_at"].as_str().unwrap())
        .unwrap()
        .timestamp();
    assert!(
        expires_at <= i64::try_from(creator_expires_at).unwrap(),
        "the share ends at {expires_at}, after its creator's credential ({creator_expires_at})"
    );
    let share = format!("{shares}/{}", created["id"].as_str().unwrap());

    // A credential with less than the shortest share left cannot make one.
    let ending = stack.jwt_expiring_at("alice", &[&instance], unix_now() + 20);
    let (status, refused) = send(
        &stack,
        Method::POST,
        &shares,
        Some(&ending),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 422, "{refused}");

    // Another user of the instance may not revoke it; nothing changes.
    let other = stack.jwt("bob", &[&instance], false);
    let (status, refused) = send(&stack, Method::DELETE, &share, Some(&other), None).await;
    assert_eq!(status, 403, "{refused}");
    assert!(
        refused["detail"].as_str().unwrap().contains("creator"),
        "{refused}"
    );
    let (_, listed) = get(&stack, &shares).await;
    assert_eq!(listed["shares"].as_array().unwrap().len(), 1, "{listed}");

    // Its creator may; and an admin may revoke anyone's.
    let (status, revoked) = send(&stack, Method::DELETE, &share, Some(&creator), None).await;
    assert_eq!(status, 200, "{revoked}");
    assert!(revoked["revoked_at"].is_string(), "{revoked}");
    let (status, second) = send(&stack, Method::POST, &shares, Some(&other), Some(json!({}))).await;
    assert_eq!(status, 201, "{second}");
    let (status, revoked) = delete(
        &stack,
        &format!("{shares}/{}", second["id"].as_str().unwrap()),
    )
    .await;
    assert_eq!(status, 200, "{revoked}");
    stack.shutdown().await;
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

/// Revoking a share ends what its credential has open, not only what it opens next: a
/// WebSocket closes with 4001 (`share link revoked`) and an event stream ends, when the share is
/// revoked through this gateway (at once) and when another gateway revokes it through
/// session-api (this one finds it gone within a second).
#[tokio::test]
async fn revoking_a_share_ends_its_open_streams_on_every_gateway() {
    let stack = TestStack::builder().start().await;
    let instance = stack.instance_id.clone();
    let session = create_session(&stack, &instance, json!({"name": "watched"})).await;
    let open_viewer = |token: String| {
        let url = format!(
            "{}/ws/tool-instances/{instance}/terminal/{session}?token={token}",
            stack.websocket_url()
        );
        async move {
            let mut socket = Terminal::open_url(&url, &[])
                .await
                .expect("a viewer socket");
            socket.connected().await;
            socket
        }
    };

    // Revoked here.
    let created = create_share(&stack, json!({})).await;
    let token = created["token"].as_str().unwrap().to_owned();
    let mut socket = open_viewer(token.clone()).await;
    let mut events = stack
        .http
        .get(format!(
            "{}/api/v1/instances/{instance}/terminal/events",
            stack.gateway_url
        ))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    let first = events.chunk().await.unwrap().expect("the list of sessions");
    assert!(String::from_utf8_lossy(&first).contains("sessions"));
    let (status, _) = delete(
        &stack,
        &format!(
            "/api/v1/instances/{instance}/shares/{}",
            created["id"].as_str().unwrap()
        ),
    )
    .await;
    assert_eq!(status, 200);
    let closed = socket.read_until_closed().await;
    assert_eq!(closed.code, 4001, "{closed:?}");
    assert_eq!(closed.reason, "share link revoked");
    let ended = tokio::time::timeout(PATIENCE, async {
        while let Ok(Some(_)) = events.chunk().await {}
    })
    .await;
    assert!(ended.is_ok(), "the event stream outlived the share");

    // Revoked by another gateway, straight through session-api.
    let created = create_share(&stack, json!({})).await;
    let token = created["token"].as_str().unwrap().to_owned();
    let mut socket = open_viewer(token).await;
    let gateway_credential = ptyhub_wire::TierCredentials::derived_from(
        &ptyhub_wire::ServiceCredential::new(ptyhub_test_support::stack::SERVICE_TOKEN).unwrap(),
    )
    .gateway;
    let channel = Channel::from_shared(stack.session_api_endpoint.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut other_gateway =
        session_pb::share_registry_client::ShareRegistryClient::with_interceptor(
            channel,
            gateway_credential.bearer_auth(),
        );
    other_gateway
        .revoke_share(session_pb::RevokeShareRequest {
            instance: instance.clone(),
            share_id: created["id"].as_str().unwrap().to_owned(),
        })
        .await
        .expect("revoked through session-api");
    let closed = socket.read_until_closed().await;
    assert_eq!(closed.code, 4001, "{closed:?}");
    assert_eq!(closed.reason, "share link revoked");
    stack.shutdown().await;
}

/// A share link's streams end when the gateway's clock reaches the share's expiry, not a second
/// before: a socket with 4001 `credential expired`, an event stream by ending. The gateway reads
/// a clock the test moves, so the hour-long share expires when the test says.
#[tokio::test]
async fn a_share_links_streams_end_when_the_share_expires() {
    let clock = gateway::ManualClock::starting_now();
    let stack = TestStack::builder()
        .configure(|stack| stack.gateway.clock = clock.clock())
        .start()
        .await;
    let instance = stack.instance_id.clone();
    let session = create_session(&stack, &instance, json!({"name": "watched"})).await;
    let created = create_share(&stack, json!({"expires_in": 3600})).await;
    let token = created["token"].as_str().expect("a token").to_owned();
    let expires_at =
        chrono::DateTime::parse_from_rfc3339(created["expires_at"].as_str().expect("an expiry"))
            .expect("an RFC 3339 expiry")
            .timestamp();
    let expires_at = u64::try_from(expires_at).expect("an expiry after 1970");

    let session_path = format!("/ws/tool-instances/{instance}/terminal/{session}");
    let mut viewer = Terminal::open_url(
        &format!("{}{session_path}?token={token}", stack.websocket_url()),
        &[],
    )
    .await
    .expect("a viewer socket");
    viewer.connected().await;
    let mut events = stack
        .http
        .get(format!(
            "{}/api/v1/instances/{instance}/terminal/events",
            stack.gateway_url
        ))
        .bearer_auth(&token)
        .send()
        .await
        .expect("an event stream");
    assert_eq!(events.status(), 200);
    let first = events.chunk().await.unwrap().expect("the list of sessions");
    assert!(String::from_utf8_lossy(&first).contains("sessions"));

    // A second before the share's expiry its socket still shows what the controller types.
    clock.advance(std::time::Duration::from_secs(expires_at - 1 - clock.now()));
    let mut controller = Terminal::open(&stack, &session_path).await;
    controller.connected().await;
    controller.send_input("echo before-$((2*3))\n").await;
    viewer.read_until_output("before-6").await;

    clock.advance(std::time::Duration::from_secs(1));
    let closed = viewer.read_until_closed().await;
    assert_eq!(closed.code, 4001, "{closed:?}");
    assert_eq!(closed.reason, "credential expired");
    let ended = tokio::time::timeout(PATIENCE, async {
        while events
            .chunk()
            .await
            .expect("the stream ends cleanly")
            .is_some()
        {}
    })
    .await;
    assert!(ended.is_ok(), "the event stream outlived its share");
    stack.shutdown().await;
}
