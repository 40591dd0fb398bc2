//! What a browser gets that no program needs: `X-Frame-Options: DENY` on every answer (page,
//! asset, API, error), and a configured Origin allow-list that admits exactly the origins on it
//! and the gateway's own, for the terminal WebSocket and for REST writes alike.

use ptyhub_test_support::stack::TestStack;
use reqwest::header;
use serde_json::json;

use crate::common::Terminal as HeaderTerminal;

/// The origin the gateway below is configured to allow.
const ALLOWED_ORIGIN: &str = "https://app.example.com";

#[tokio::test]
async fn every_answer_carries_x_frame_options_deny() {
    // A page of the test's own: the gateway's built-in one exists only once the page is built.
    let static_dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(
        static_dir.path().join("index.html"),
        "<!doctype html><title>ptyhub</title>",
    )
    .expect("index.html");
    std::fs::create_dir(static_dir.path().join("assets")).expect("assets/");
    std::fs::write(static_dir.path().join("assets/app.js"), "console.log(1)").expect("app.js");
    let stack = TestStack::builder()
        .static_dir(static_dir.path().to_owned())
        .start()
        .await;
    let admin = Some(stack.admin_token.as_str());
    for (path, token, status) in [
        ("/", None, 200),
        ("/instances/local", None, 200),
        ("/assets/app.js", None, 200),
        ("/api/v1/instances", admin, 200),
        ("/api/v1/instances", None, 401),
        ("/api/v1/instances/no-such-instance", admin, 404),
        ("/healthz", None, 200),
        ("/no-such-route", None, 404),
    ] {
        let mut request = stack.http.get(format!("{}{path}", stack.gateway_url));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("the gateway answers");
        assert_eq!(response.status().as_u16(), status, "{path}");
        let frame_options = response
            .headers()
            .get(header::X_FRAME_OPTIONS)
            .unwrap_or_else(|| panic!("no X-Frame-Options on {path} ({status})"));
        assert_eq!(frame_options, "DENY", "{path}");
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn a_configured_origin_allow_list_admits_its_origins_and_the_gateways_own_alone() {
    let stack = TestStack::builder()
        .allowed_origins(vec![ALLOWED_ORIGIN.to_owned()])
        .start()
        .await;
    let socket_url = format!(
        "{}/ws/tool-instances/{}/terminal?client_id=origin&token={}",
        stack.websocket_url(),
        stack.instance_id,
        stack.admin_token
    );
    let mut allowed = HeaderTerminal::open_url(&socket_url, &[("origin", ALLOWED_ORIGIN)])
        .await
        .expect("the listed origin opens a socket");
    let connected = allowed.read_until_text("status").await;
    assert_eq!(connected["status"], "connected", "{connected}");

    let sessions_url = format!(
        "{}/api/v1/instances/{}/terminal/sessions",
        stack.gateway_url, stack.instance_id
    );
    let created = stack
        .http
        .post(&sessions_url)
        .bearer_auth(&stack.admin_token)
        .header(header::ORIGIN, ALLOWED_ORIGIN)
        .json(&json!({"name": "from the allowed site"}))
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(created.status().as_u16(), 201);

    // The gateway's own page (its origin is the address it was reached on) is not on the list
    // and still opens its socket and writes.
    let own_origin = stack.gateway_url.trim_end_matches('/').to_owned();
    let mut own = HeaderTerminal::open_url(&socket_url, &[("origin", own_origin.as_str())])
        .await
        .expect("the gateway's own origin opens a socket");
    let connected = own.read_until_text("status").await;
    assert_eq!(connected["status"], "connected", "{connected}");
    let created = stack
        .http
        .post(&sessions_url)
        .bearer_auth(&stack.admin_token)
        .header(header::ORIGIN, &own_origin)
        .json(&json!({"name": "from the gateway's own page"}))
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(created.status().as_u16(), 201);

    for refused_origin in [
        "https://evil.example",
        "https://app.example.com.evil.example",
        "http://app.example.com",
    ] {
        match HeaderTerminal::open_url(&socket_url, &[("origin", refused_origin)]).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                assert_eq!(response.status().as_u16(), 403, "{refused_origin}")
            }
            Err(error) => panic!("{refused_origin}: not a 403 but {error}"),
            Ok(_) => panic!("{refused_origin}: a socket opened"),
        }
        let refused = stack
            .http
            .post(&sessions_url)
            .bearer_auth(&stack.admin_token)
            .header(header::ORIGIN, refused_origin)
            .json(&json!({"name": "from another site"}))
            .send()
            .await
            .expect("the gateway answers");
        assert_eq!(refused.status().as_u16(), 403, "{refused_origin}");
        let body: serde_json::Value = refused.json().await.expect("a JSON error");
        assert!(
            body["detail"]
                .as_str()
                .is_some_and(|detail| detail.contains("origin")),
            "{refused_origin}: {body}"
        );
    }
    let sessions = super::support::list_sessions(&stack, &stack.instance_id, true).await;
    let names: Vec<_> = sessions
        .iter()
        .map(|session| session["name"].clone())
        .collect();
    assert!(
        !names.contains(&json!("from another site")),
        "a refused origin created a session: {names:?}"
    );
    stack.shutdown().await;
}
