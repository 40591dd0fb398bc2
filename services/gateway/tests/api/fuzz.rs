//! The fuzz-style property suite: random and mutated input at the parsers of the outside edge
//! (WebSocket control frames, attach tickets, JWTs, session cookies) and at a running gateway
//! (REST paths and bodies, WebSocket frames). Whatever comes in: no panic, no 5xx, and a refused
//! input changes nothing. Every test run does a short pass and replays the seeds that failed
//! before (`fuzz-regressions/` in this package); `cargo xtask fuzz --minutes N` runs each property
//! for its share of N minutes (`ptyhub_test_support::fuzz`).

use std::time::{Duration, SystemTime};

use gateway::auth::Authenticator;
use gateway::cookie::{CookieSite, Grant, SessionCookies};
use gateway::ws::frames::parse_client_frame;
use gateway::{AuthConfig, SecretString};
use proptest::prelude::*;
use ptyhub_attach_ticket::{TicketRole, TicketSigningKey};
use ptyhub_test_support::fuzz;
use ptyhub_test_support::stack::TestStack;
use reqwest::Method;
use serde_json::{Value, json};

use crate::common::Terminal;

/// Random text, biased to what parsers trip on: JSON punctuation, quotes, escapes, digits, NUL,
/// non-ASCII and the characters of tickets and tokens.
fn nasty_text() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,64}",
        "[{}\\[\\]\":,.0-9a-z\\\\ \u{0}\u{202e}é🙂-]{0,64}",
        Just(String::new()),
    ]
}

/// Any JSON value, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|number| json!(number)),
        any::<f64>().prop_map(|number| json!(number)),
        Just(json!(u64::MAX)),
        nasty_text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("type".to_owned()),
                    Just("data".to_owned()),
                    Just("cols".to_owned()),
                    Just("rows".to_owned()),
                    Just("name".to_owned()),
                    Just("aliases".to_owned()),
                    "[a-z_]{1,8}"
                ],
                inner,
                0..6
            )
            .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// `text` with a random edit: a byte flipped, cut short, a character inserted or dropped.
fn mutated(text: String) -> impl Strategy<Value = String> {
    let length = text.len().max(1);
    (0..length, any::<u8>(), 0..4u8).prop_map(move |(at, byte, kind)| {
        let mut bytes = text.clone().into_bytes();
        let at = at.min(bytes.len().saturating_sub(1));
        match kind {
            0 if !bytes.is_empty() => bytes[at] ^= byte.max(1),
            1 => bytes.truncate(at),
            2 => bytes.insert(at, byte),
            _ if !bytes.is_empty() => {
                bytes.remove(at);
            }
            _ => bytes.push(byte),
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// A control frame: random text, random JSON, or a valid frame mutated.
fn control_frame() -> impl Strategy<Value = String> {
    let valid = prop_oneof![
        Just(r#"{"type":"input","data":"ls\n"}"#.to_owned()),
        Just(r#"{"type":"resize","cols":80,"rows":24}"#.to_owned()),
        Just(r#"{"type":"reset"}"#.to_owned()),
        Just(r#"{"type":"pong"}"#.to_owned()),
    ];
    prop_oneof![
        nasty_text(),
        json_value().prop_map(|value| value.to_string()),
        valid.prop_flat_map(mutated),
    ]
}

#[test]
fn fuzz_websocket_control_frames_parse_or_are_refused_with_a_reason() {
    fuzz::check(512, control_frame(), |text| {
        match parse_client_frame(&text) {
            Ok(_) => {}
            Err(message) => prop_assert!(!message.is_empty(), "an empty refusal for {text:?}"),
        }
        Ok(())
    });
}

#[test]
fn fuzz_tampered_attach_tickets_never_verify() {
    let signing_key = TicketSigningKey::generate();
    let key = signing_key.verifying_key();
    let session = uuid::Uuid::new_v4();
    let now = SystemTime::now();
    let ticket = signing_key.sign(session, TicketRole::Viewer, now + Duration::from_secs(60));
    let strategy = prop_oneof![mutated(ticket.clone()), nasty_text()];
    fuzz::check(512, strategy, |candidate| {
        // An edit that changed nothing the signature covers (none should) is the ticket.
        if let Ok(claims) = key.decode(&candidate, now) {
            prop_assert_eq!(claims.session_id, session);
            prop_assert!(
                key.verify(&candidate, session, TicketRole::Controller, now)
                    .is_err(),
                "a viewer ticket became a controller's: {candidate:?}"
            );
        }
        Ok(())
    });
}

const JWT_SECRET: &str = "a-jwt-secret-for-the-fuzz-tests";

fn authenticator() -> Authenticator {
    Authenticator::new(
        &AuthConfig {
            jwt_hs256_secret: Some(SecretString::from(JWT_SECRET)),
            ..AuthConfig::default()
        },
        gateway::Clock::system(),
    )
    .unwrap()
}

fn viewer_jwt() -> String {
    let claims = json!({
        "sub": "fuzzed",
        "exp": fuzz_now() + 3600,
        "ptyhub": {"instances": ["one"], "admin": false},
    });
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()).unwrap(),
    )
    .unwrap()
}

fn fuzz_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A JWT-shaped string: three random (or random base64url) parts.
fn jwt_shaped() -> impl Strategy<Value = String> {
    let part = prop_oneof!["[A-Za-z0-9_-]{0,40}", nasty_text()];
    (part.clone(), part.clone(), part).prop_map(|(a, b, c)| format!("{a}.{b}.{c}"))
}

#[test]
fn fuzz_tampered_and_random_jwts_never_authenticate_as_more() {
    let authenticator = authenticator();
    let token = viewer_jwt();
    let strategy = prop_oneof![mutated(token), jwt_shaped(), nasty_text()];
    fuzz::check(512, strategy, |candidate| {
        if let Ok(principal) = authenticator.authenticate(Some(&candidate)) {
            // Only the token itself (an edit that decodes the same) may pass, as itself.
            prop_assert_eq!(principal.subject, "fuzzed");
            prop_assert!(!principal.access.is_admin());
            prop_assert!(!principal.access.covers_all_instances());
        }
        Ok(())
    });
}

#[test]
fn fuzz_tampered_session_cookies_never_open() {
    let cookies = SessionCookies::new(
        Some(&SecretString::from(
            "a-cookie-secret-for-the-fuzz-tests-0123",
        )),
        Duration::from_secs(3600),
    );
    let now = fuzz_now();
    let site = CookieSite::from_authority("127.0.0.1:8080", false).expect("a site");
    let claims = cookies.claims(
        "fuzzed",
        Grant::Jwt {
            instances: vec!["one".into()],
            admin: false,
            choose_command: false,
        },
        &site,
        now,
        None,
    );
    let value = cookies.seal(&claims);
    let strategy = prop_oneof![mutated(value), nasty_text()];
    fuzz::check(512, strategy, |candidate| {
        if let Ok(opened) = cookies.open(&candidate, &site, now) {
            prop_assert_eq!(&opened, &claims);
        }
        Ok(())
    });
}

/// What a REST request can be: a method, a path from the contract's shapes with random
/// segments, a content type and a body.
#[derive(Debug, Clone)]
struct RestRequest {
    method: Method,
    path: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
}

fn path_segment(instance: String) -> impl Strategy<Value = String> {
    prop_oneof![
        Just(instance),
        Just("default".to_owned()),
        Just("..".to_owned()),
        Just("%2e%2e".to_owned()),
        Just("%00".to_owned()),
        Just("0b0e5b8e-1a52-4c5f-9b36-2a4f0f2c7d10".to_owned()),
        "[a-zA-Z0-9%._~-]{0,300}",
    ]
}

fn rest_request(instance: String) -> impl Strategy<Value = RestRequest> {
    let method = prop_oneof![
        Just(Method::GET),
        Just(Method::POST),
        Just(Method::DELETE),
        Just(Method::PUT),
        Just(Method::PATCH),
    ];
    let shape = prop_oneof![
        Just("/api/v1/instances"),
        Just("/api/v1/instances/{a}"),
        Just("/api/v1/instances/{a}/terminal/sessions"),
        Just("/api/v1/instances/{a}/terminal/sessions/{b}"),
        Just("/api/v1/instances/{a}/terminal/sessions/{b}/rename"),
        Just("/api/v1/instances/{a}/terminal/sessions/{b}/input"),
        Just("/api/v1/instances/{a}/terminal/sessions/{b}/wait"),
        Just("/api/v1/instances/{a}/terminal/sessions/{b}/screen?format={b}&scrollback={b}"),
        Just("/api/v1/instances/{a}/shares"),
        Just("/api/v1/instances/{a}/shares/{b}"),
        Just("/api/v1/auth/session"),
        Just("/projects/{a}/repositories/{b}/instances/{a}/terminal/sessions"),
        Just("/{a}/{b}"),
    ];
    let body = prop_oneof![
        Just(Vec::new()),
        json_value().prop_map(|value| value.to_string().into_bytes()),
        prop::collection::vec(any::<u8>(), 0..200),
        Just(br#"{"name":"fuzzed","aliases":["a"],"cols":80,"rows":24}"#.to_vec())
            .prop_flat_map(|body| mutated(String::from_utf8(body).unwrap()))
            .prop_map(String::into_bytes),
    ];
    let content_type = prop_oneof![
        Just(Some("application/json")),
        Just(Some("text/plain")),
        Just(Some("application/x-www-form-urlencoded")),
        Just(None),
    ];
    (
        method,
        shape,
        path_segment(instance.clone()),
        path_segment(instance),
        content_type,
        body,
    )
        .prop_map(|(method, shape, a, b, content_type, body)| RestRequest {
            method,
            path: shape.replace("{a}", &a).replace("{b}", &b),
            content_type,
            body,
        })
}

/// What a refused request must not have changed: the instances and the sessions of the test's
/// instance, as listed.
async fn state_of(stack: &TestStack, instance: &str) -> Value {
    let (_, instances) = crate::common::get(stack, "/api/v1/instances").await;
    let (_, sessions) = crate::common::get(
        stack,
        &format!("/api/v1/instances/{instance}/terminal/sessions?include=closed"),
    )
    .await;
    let listed = |value: &Value, key: &str, pick: &dyn Fn(&Value) -> Value| -> Value {
        value[key]
            .as_array()
            .map_or(Value::Null, |items| items.iter().map(pick).collect())
    };
    // A session's status moves from starting to active by itself; whether it is closed does not.
    json!({
        "instances": listed(&instances, "instances", &|item| json!([item["id"], item["name"]])),
        "sessions": listed(&sessions, "sessions", &|item| {
            json!([item["id"], item["name"], item["aliases"], item["status"] == "closed"])
        }),
    })
}

#[tokio::test]
async fn fuzz_rest_paths_and_bodies_never_5xx_and_refusals_change_nothing() {
    let stack = TestStack::builder().start().await;
    let instance = stack.register_instance("fuzzed", 3, &[]).await;
    let strategy = rest_request(instance.clone());
    let client = ptyhub_test_support::http::client()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut state = state_of(&stack, &instance).await;
    for batch in fuzz::Batches::new(48, &strategy) {
        for request in &batch.inputs {
            let mut call = client
                .request(
                    request.method.clone(),
                    format!("{}{}", stack.gateway_url, request.path),
                )
                .bearer_auth(&stack.admin_token)
                .body(request.body.clone());
            if let Some(content_type) = request.content_type {
                call = call.header("content-type", content_type);
            }
            // A URL that reqwest itself refuses never reaches the gateway; once built, a request
            // must be answered: a transport error is a handler that panicked or hung up.
            let Ok(call) = call.build() else {
                continue;
            };
            let response = client
                .execute(call)
                .await
                .unwrap_or_else(|error| panic!("no answer to {request:?}: {error:#}"));
            let status = response.status();
            let text = response.text().await.unwrap_or_default();
            assert!(
                !status.is_server_error(),
                "{status} for {request:?}: {text}"
            );
            let now = state_of(&stack, &instance).await;
            if status.is_client_error() {
                assert_eq!(
                    now, state,
                    "{status} changed the state: {request:?}: {text}"
                );
            }
            state = now;
        }
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn fuzz_refused_websocket_frames_neither_end_the_socket_nor_reach_the_terminal() {
    let stack = TestStack::builder().start().await;
    let path = format!("/ws/tool-instances/{}/terminal", stack.instance_id);
    let mut terminal = Terminal::open(&stack, &path).await;
    terminal.connected().await;
    // Frames the parser accepts act (input types, reset restarts): only the refused ones are
    // thrown at the socket, which must answer each with an error frame and go on.
    let refused =
        control_frame().prop_filter("refused frames", |text| parse_client_frame(text).is_err());
    let mut round = 0;
    for batch in fuzz::Batches::new(64, &refused) {
        for text in &batch.inputs {
            terminal
                .send(tokio_tungstenite::tungstenite::Message::Text(
                    text.clone().into(),
                ))
                .await
                .expect("the socket takes the frame");
            let answer = terminal.read_until_text("error").await;
            let reason = parse_client_frame(text).expect_err("a refused frame");
            assert_eq!(
                answer,
                json!({"type": "error", "message": reason}),
                "the answer to {text:?}"
            );
        }
        round += 1;
        terminal
            .send_input(&format!("echo alive-{round}-$((6*7))\n"))
            .await;
        terminal
            .read_until_output(&format!("alive-{round}-42"))
            .await;
    }
    let typed: Vec<Value> = terminal
        .texts
        .iter()
        .filter(|frame| frame["type"] != "error" && frame["type"] != "ping")
        .cloned()
        .collect();
    assert_eq!(typed, Vec::<Value>::new(), "refused frames changed nothing");
    stack.shutdown().await;
}
