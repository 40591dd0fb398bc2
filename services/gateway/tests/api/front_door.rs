//! The front door across surfaces: a principal's screen waits (REST and gRPC) hold its stream
//! slots like its sockets and event streams, and a sign-in link (`?token=`) never replaces the
//! browser's sign-in as someone else without asking, as a share link does not.

use std::time::Duration;

use ptyhub_proto::session::v1 as session_pb;
use ptyhub_proto::session::v1::session_api_client::SessionApiClient;
use ptyhub_test_support::stack::TestStack;
use reqwest::redirect::Policy;
use serde_json::{Value, json};
use tonic::Code;

use crate::common::{PATIENCE, Terminal};

/// What no screen of the test shows.
const NEVER_SHOWN: &str = "a line no shell prints";

/// A session's REST route: `{method} {session}/{action}` with `token` and `body`, answered with
/// its status and JSON body.
async fn session_call(
    method: reqwest::Method,
    url: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = ptyhub_test_support::http::client()
        .build()
        .unwrap()
        .request(method, url)
        .bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// `POST {session}/wait` for `pattern`, for at most `timeout_ms`.
async fn wait(session: &str, token: &str, pattern: &str, timeout_ms: u32) -> (u16, Value) {
    let body = json!({"pattern": pattern, "timeout_ms": timeout_ms});
    session_call(
        reqwest::Method::POST,
        &format!("{session}/wait"),
        token,
        Some(body),
    )
    .await
}

/// A new session of the stack's instance, once its screen is up; its REST URL.
async fn live_session(stack: &TestStack) -> (String, String) {
    let sessions = format!(
        "{}/api/v1/instances/{}/terminal/sessions",
        stack.gateway_url, stack.instance_id
    );
    let (status, created) = session_call(
        reqwest::Method::POST,
        &sessions,
        &stack.admin_token,
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().expect("a session id").to_owned();
    let session = format!("{sessions}/{id}");
    // An empty pattern matches any screen: this answers once the session has one.
    let (status, body) = wait(&session, &stack.admin_token, "", 60_000).await;
    assert_eq!(status, 200, "{body}");
    (id, session)
}

#[tokio::test]
async fn screen_waits_hold_the_principals_stream_slots_on_every_surface() {
    let stack = TestStack::builder()
        .max_streams_per_principal(2)
        .start()
        .await;
    let instance = stack.instance_id.clone();
    let admin = stack.admin_token.clone();
    let (session_id, session) = live_session(&stack).await;
    let (_, other_session) = live_session(&stack).await;

    // Two long waits of the admin's fill its two slots.
    let long_wait = || {
        let (session, admin) = (session.clone(), admin.clone());
        tokio::spawn(async move { wait(&session, &admin, NEVER_SHOWN, 300_000).await })
    };
    let mut waits = vec![long_wait(), long_wait()];

    // Once both are waiting, a third wait is refused rather than run (a wait that runs ends
    // with 408 after its millisecond), on any of the principal's sessions. A probe holds a
    // slot while it runs, so a long wait that came in meanwhile may have been refused (429):
    // it is started again. Any other end of a long wait is a failure.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let refused = loop {
        for slot in &mut waits {
            if slot.is_finished() {
                let (status, answer) = std::mem::replace(slot, long_wait()).await.expect("a wait");
                assert_eq!(
                    status, 429,
                    "a long wait ended before the test ended it: {answer}"
                );
            }
        }
        let (status, body) = wait(&other_session, &admin, NEVER_SHOWN, 1).await;
        if status != 408 {
            break (status, body);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no third wait refused while two waited"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(refused.0, 429, "{}", refused.1);
    let detail = refused.1["detail"].as_str().expect("a detail");
    assert!(detail.contains("streams already"), "{detail}");

    // The same slots on the gateway's gRPC and on its WebSockets.
    let channel = tonic::transport::Channel::from_shared(stack.gateway_url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut request = tonic::Request::new(session_pb::WaitForScreenRequest {
        instance: instance.clone(),
        session_id: session_id.clone(),
        pattern: NEVER_SHOWN.to_owned(),
        timeout_ms: 1,
        ..Default::default()
    });
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {admin}").parse().unwrap());
    let refused = SessionApiClient::new(channel)
        .wait_for_screen(request)
        .await
        .expect_err("no gRPC wait beyond the principal's streams");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let mut socket = Terminal::open(
        &stack,
        &format!("/ws/tool-instances/{instance}/terminal/{session_id}?mode=view"),
    )
    .await;
    let closed = tokio::time::timeout(PATIENCE, socket.read_until_closed())
        .await
        .expect("the socket refused, not opened");
    assert_eq!(closed.code, 4029);

    // Another principal has slots of its own: its wait runs, and times out.
    let alice = stack.jwt("alice", &["*"], false);
    let (status, body) = wait(&other_session, &alice, NEVER_SHOWN, 1).await;
    assert_eq!(status, 408, "{body}");

    // Closing the session ends its waits, and they give their slots back.
    let (status, body) = session_call(reqwest::Method::DELETE, &session, &admin, None).await;
    assert_eq!(status, 200, "{body}");
    for wait in waits {
        let (status, answer) = tokio::time::timeout(PATIENCE, wait)
            .await
            .expect("a wait ends with its session")
            .expect("a wait");
        assert_ne!(status, 408, "a wait ran to its timeout: {answer}");
    }
    let (status, body) = wait(&other_session, &admin, NEVER_SHOWN, 1).await;
    assert_eq!(status, 408, "a slot given back, so the wait runs: {body}");
    stack.shutdown().await;
}

/// A client that shows redirects instead of following them.
fn browser() -> reqwest::Client {
    ptyhub_test_support::http::client()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

/// The page's sign-in with `token`, as a browser holding `cookie` makes it.
async fn sign_in(
    stack: &TestStack,
    token: &str,
    cookie: Option<&str>,
    replace: bool,
) -> reqwest::Response {
    let mut request = browser()
        .post(format!("{}/api/v1/auth/session", stack.gateway_url))
        .bearer_auth(token)
        .json(&json!({"replace": replace}));
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    request.send().await.unwrap()
}

/// The `name=value` of an answer's `Set-Cookie`, if it has one.
fn cookie_of(response: &reqwest::Response) -> Option<String> {
    let whole = response.headers().get("set-cookie")?.to_str().ok()?;
    Some(whole.split(';').next()?.to_owned())
}

#[tokio::test]
async fn a_sign_in_link_never_replaces_another_sign_in_without_asking() {
    let stack = TestStack::builder().start().await;
    // The browser is signed in as alice.
    let alice = stack.jwt("alice", &["*"], false);
    let signed_in = sign_in(&stack, &alice, None, false).await;
    assert_eq!(signed_in.status(), 200);
    let alice_cookie = cookie_of(&signed_in).expect("alice's cookie");

    // The admin's sign-in link, followed with alice's cookie or (from a page of another site)
    // without it: nothing is exchanged on the link's own request, the token goes into the
    // fragment for the page.
    let link = format!(
        "{}/instances/{}?mode=view&token={}",
        stack.gateway_url, stack.instance_id, stack.admin_token
    );
    for cookie in [Some(alice_cookie.as_str()), None] {
        let mut request = browser().get(&link);
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 303, "{cookie:?}");
        assert_eq!(cookie_of(&response), None, "the link replaced the sign-in");
        assert_eq!(
            response.headers()["location"],
            format!(
                "/instances/{}?mode=view#token={}",
                stack.instance_id, stack.admin_token
            )
        );
    }

    // The page's sign-in with it asks first (409, naming both), and replaces only when told.
    let asked = sign_in(&stack, &stack.admin_token, Some(&alice_cookie), false).await;
    assert_eq!(asked.status(), 409);
    assert_eq!(cookie_of(&asked), None);
    let conflict: Value = asked.json().await.unwrap();
    assert_eq!(conflict["signed_in"]["subject"], "alice", "{conflict}");
    assert_eq!(conflict["offered"]["subject"], "api-token-0", "{conflict}");
    let replaced = sign_in(&stack, &stack.admin_token, Some(&alice_cookie), true).await;
    assert_eq!(replaced.status(), 200);
    let admin_cookie = cookie_of(&replaced).expect("the admin's cookie");
    let who: Value = browser()
        .get(format!("{}/api/v1/auth/session", stack.gateway_url))
        .header("cookie", admin_cookie)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(who["subject"], "api-token-0", "{who}");
    stack.shutdown().await;
}
