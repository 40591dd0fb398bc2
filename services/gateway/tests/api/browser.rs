//! The browser's edge against a real stack: the sign-in link's token moved into the fragment for
//! the page, the page's sign-in exchanging it for an HttpOnly session cookie, the cookie on REST
//! and the WebSocket and on its own port alone, signing out;
//! JSON-only bodies, the `Host`
//! allow-list and the security headers on every answer.

use ptyhub_test_support::stack::TestStack;
use reqwest::header::{self, HeaderMap};
use reqwest::redirect::Policy;
use serde_json::{Value, json};

use crate::common::{Terminal, get};

/// A client that shows redirects instead of following them.
fn client() -> reqwest::Client {
    ptyhub_test_support::http::client()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

/// The `name=value` of a `Set-Cookie` answer, and the whole header.
fn set_cookie(headers: &HeaderMap) -> Option<(String, String)> {
    let whole = headers.get(header::SET_COOKIE)?.to_str().ok()?.to_owned();
    let pair = whole.split(';').next()?.trim().to_owned();
    Some((pair, whole))
}

/// Signs in with `token` on the gateway at `url` as the page does (`POST /api/v1/auth/session`);
/// returns the cookie's `name=value`, and the whole `Set-Cookie`.
async fn sign_in_on(url: &str, token: &str, extra: &[(&str, &str)]) -> (String, String) {
    let mut request = client()
        .post(format!("{url}/api/v1/auth/session"))
        .bearer_auth(token);
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    set_cookie(response.headers()).expect("a cookie")
}

/// Signs in with the admin token as the page does; returns the cookie's `name=value`.
async fn sign_in(stack: &TestStack) -> String {
    sign_in_on(&stack.gateway_url, &stack.admin_token, &[])
        .await
        .0
}

async fn with_cookie(
    stack: &TestStack,
    method: reqwest::Method,
    path: &str,
    cookie: &str,
    extra: &[(&str, &str)],
) -> (u16, Value, HeaderMap) {
    let mut request = client()
        .request(method, format!("{}{path}", stack.gateway_url))
        .header(header::COOKIE, cookie);
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
        headers,
    )
}

#[tokio::test]
async fn a_sign_in_link_leaves_the_address_and_the_pages_sign_in_gets_an_http_only_strict_cookie() {
    let stack = TestStack::builder().start().await;
    let response = client()
        .get(format!(
            "{}/instances/local?mode=view&token={}",
            stack.gateway_url, stack.admin_token
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(
        response.headers()[header::LOCATION],
        format!("/instances/local?mode=view#token={}", stack.admin_token),
        "the token goes from the address into the fragment, for the page"
    );
    assert!(
        set_cookie(response.headers()).is_none(),
        "the link's own request signs nobody in"
    );
    let (cookie, whole) = sign_in_on(&stack.gateway_url, &stack.admin_token, &[]).await;
    assert!(cookie.starts_with("ptyhub_session_"), "{whole}");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(whole.contains(attribute), "{attribute} in {whole}");
    }
    assert!(!whole.contains("Secure"), "no TLS here: {whole}");
    assert!(
        !whole.contains(&stack.admin_token),
        "the cookie holds no token"
    );

    // The cookie is the credential of REST, the sign-in check and the WebSocket.
    let (status, body, _) = with_cookie(
        &stack,
        reqwest::Method::GET,
        "/api/v1/instances",
        &cookie,
        &[],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body, _) = with_cookie(
        &stack,
        reqwest::Method::GET,
        "/api/v1/auth/session",
        &cookie,
        &[],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["subject"], "api-token-0");
    assert_eq!(body["admin"], true);
    assert!(body["expires_at"].is_string(), "{body}");
    let url = format!(
        "{}/ws/tool-instances/{}/terminal",
        stack.websocket_url(),
        stack.instance_id
    );
    let mut terminal = Terminal::open_url(&url, &[("cookie", &cookie)])
        .await
        .expect("a websocket opened with the cookie alone");
    terminal.connected().await;
    terminal.send_input("echo cookie-$((6*7))\n").await;
    terminal.read_until_output("cookie-42").await;
    stack.shutdown().await;
}

#[tokio::test]
async fn behind_a_tls_terminating_proxy_the_cookie_is_secure() {
    let stack = TestStack::builder().start().await;
    let (_, whole) = sign_in_on(
        &stack.gateway_url,
        &stack.admin_token,
        &[("X-Forwarded-Proto", "https")],
    )
    .await;
    assert!(whole.ends_with("; Secure"), "{whole}");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_refused_sign_in_links_token_sets_no_cookie() {
    let stack = TestStack::builder().start().await;
    let response = client()
        .get(format!("{}/?token=not-the-token&x=1", stack.gateway_url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(
        response.headers()[header::LOCATION],
        "/?x=1#token=not-the-token"
    );
    assert!(set_cookie(response.headers()).is_none());
    // The page signs in with it, and is refused.
    let response = client()
        .post(format!("{}/api/v1/auth/session", stack.gateway_url))
        .bearer_auth("not-the-token")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert!(set_cookie(response.headers()).is_none());
    // Without a cookie or token the API refuses.
    let (status, _, _) = with_cookie(
        &stack,
        reqwest::Method::GET,
        "/api/v1/auth/session",
        "ptyhub_session_00000000=v1.e30.AAAA",
        &[],
    )
    .await;
    assert_eq!(status, 401);
    stack.shutdown().await;
}

#[tokio::test]
async fn the_sign_in_form_exchanges_a_bearer_token_and_sign_out_ends_the_cookie() {
    let stack = TestStack::builder().start().await;
    let response = client()
        .post(format!("{}/api/v1/auth/session", stack.gateway_url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let response = client()
        .post(format!("{}/api/v1/auth/session", stack.gateway_url))
        .bearer_auth("not-the-token")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert!(set_cookie(response.headers()).is_none());
    let response = client()
        .post(format!("{}/api/v1/auth/session", stack.gateway_url))
        .bearer_auth(&stack.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let (cookie, _) = set_cookie(response.headers()).expect("a cookie");

    let (status, body, headers) = with_cookie(
        &stack,
        reqwest::Method::DELETE,
        "/api/v1/auth/session",
        &cookie,
        &[],
    )
    .await;
    assert_eq!((status, &body), (200, &json!({"status": "signed_out"})));
    let (_, cleared) = set_cookie(&headers).expect("the cookie is cleared");
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    // A copy of the signed-out cookie no longer works.
    let (status, body, _) = with_cookie(
        &stack,
        reqwest::Method::GET,
        "/api/v1/instances",
        &cookie,
        &[],
    )
    .await;
    assert_eq!((status, &body), (401, &json!({"detail": "signed out"})));
    stack.shutdown().await;
}

/// Browsers send a host's cookies to each of its ports: a cookie is bound to the port (and host)
/// it was issued on, by its name and by its signed claims, so that another gateway on the same
/// host neither finds it nor accepts it replayed under its own name, even when both sign with
/// the same cookie secret.
#[tokio::test]
async fn a_cookie_issued_on_one_port_is_refused_on_another_even_with_the_same_secret() {
    let stack = TestStack::builder().start().await;
    let start_gateway = || async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let mut config = gateway::Config::new(
            stack.session_api_endpoint.clone(),
            ptyhub_test_support::stack::tier_credentials().gateway,
        );
        config.auth.api_tokens = vec![gateway::SecretString::from(stack.admin_token.clone())];
        config.auth.cookie_secret = Some(gateway::SecretString::from(
            "one-cookie-secret-for-both-gateways-0123456789",
        ));
        let stop = tokio_util::sync::CancellationToken::new();
        let serving = tokio::spawn(gateway::run(
            config,
            listener,
            stop.clone().cancelled_owned(),
        ));
        (url, stop, serving)
    };
    let (first, stop_first, first_serving) = start_gateway().await;
    let (second, stop_second, second_serving) = start_gateway().await;
    let who = |url: &str, cookie: &str| {
        client()
            .get(format!("{url}/api/v1/auth/session"))
            .header(header::COOKIE, cookie.to_owned())
            .send()
    };

    let (cookie, whole) = sign_in_on(&first, &stack.admin_token, &[]).await;
    assert_eq!(who(&first, &cookie).await.unwrap().status(), 200);
    // The browser sends it to the other port too, where it signs nobody in.
    assert_eq!(
        who(&second, &cookie).await.unwrap().status(),
        401,
        "a cookie of another port signed in"
    );
    // The other gateway does not even look for it: the name carries the port.
    let port = first.rsplit(':').next().unwrap();
    assert!(
        cookie.starts_with(&format!("ptyhub_session_{port}_")),
        "{whole}"
    );
    // Replayed under the other gateway's own name, its claims name another port.
    let (second_cookie, _) = sign_in_on(&second, &stack.admin_token, &[]).await;
    let second_name = second_cookie.split('=').next().unwrap();
    let value = cookie.split_once('=').unwrap().1;
    let replayed = format!("{second_name}={value}");
    let response = who(&second, &replayed).await.unwrap();
    assert_eq!(response.status(), 401);
    // The first gateway refuses the second's cookie the same way.
    let (first_name, _) = cookie.split_once('=').unwrap();
    let second_value = second_cookie.split_once('=').unwrap().1;
    let response = who(&first, &format!("{first_name}={second_value}"))
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(who(&second, &second_cookie).await.unwrap().status(), 200);

    stop_first.cancel();
    stop_second.cancel();
    first_serving.await.unwrap().unwrap();
    second_serving.await.unwrap().unwrap();
    stack.shutdown().await;
}

#[tokio::test]
async fn a_cookie_changes_nothing_for_a_page_of_another_origin() {
    let stack = TestStack::builder().start().await;
    let cookie = sign_in(&stack).await;
    let sessions = format!("/api/v1/instances/{}/terminal/sessions", stack.instance_id);
    // Another port on the same host is the same site: the browser sends the cookie along.
    let (status, body, _) = with_cookie(
        &stack,
        reqwest::Method::POST,
        &sessions,
        &cookie,
        &[("origin", "http://127.0.0.1:1")],
    )
    .await;
    assert_eq!(status, 403, "{body}");
    let (_, listed) = get(&stack, &sessions).await;
    assert_eq!(listed["sessions"], json!([]), "nothing was created");
    // The gateway's own page may.
    let own_origin = stack.gateway_url.clone();
    let (status, body, _) = with_cookie(
        &stack,
        reqwest::Method::POST,
        &sessions,
        &cookie,
        &[("origin", &own_origin)],
    )
    .await;
    assert_eq!(status, 201, "{body}");
    stack.shutdown().await;
}

#[tokio::test]
async fn rest_bodies_are_json_only_and_a_text_plain_post_changes_nothing() {
    let stack = TestStack::builder().start().await;
    let sessions = format!(
        "{}/api/v1/instances/{}/terminal/sessions",
        stack.gateway_url, stack.instance_id
    );
    for content_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let response = client()
            .post(&sessions)
            .bearer_auth(&stack.admin_token)
            .header(header::CONTENT_TYPE, content_type)
            .body(r#"{"name":"from a form"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 415, "{content_type}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["detail"], "request bodies must be application/json");
    }
    // A body without a content type at all is refused the same way.
    let response = client()
        .post(&sessions)
        .bearer_auth(&stack.admin_token)
        .body(r#"{"name":"no type"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 415);
    let (_, listed) = get(
        &stack,
        &format!("/api/v1/instances/{}/terminal/sessions", stack.instance_id),
    )
    .await;
    assert_eq!(listed["sessions"], json!([]), "nothing was created");
    // JSON, and an empty body for a body that may be left out, still work.
    let response = client()
        .post(&sessions)
        .bearer_auth(&stack.admin_token)
        .header(header::CONTENT_TYPE, "application/json; charset=utf-8")
        .body(r#"{"name":"json"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let response = client()
        .post(&sessions)
        .bearer_auth(&stack.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    stack.shutdown().await;
}

/// Every write of both layouts, the legacy one too, is JSON only and refuses a page of another
/// origin whatever credential it carries (a bearer token here: a page that has one, or an
/// anonymous gateway that asks for none, must not be driven from another site).
#[tokio::test]
async fn writes_of_both_layouts_are_json_only_and_refuse_foreign_origins_whatever_the_credential() {
    let stack = TestStack::builder().start().await;
    let instance = stack
        .register_instance(
            "legacy",
            5,
            &[("project_id", "p1"), ("repository_id", "r1")],
        )
        .await;
    let layouts = [
        format!("/api/v1/instances/{instance}/terminal/sessions"),
        format!("/projects/p1/repositories/r1/instances/{instance}/terminal/sessions"),
    ];
    for sessions in &layouts {
        let url = format!("{}{sessions}", stack.gateway_url);
        let response = client()
            .post(&url)
            .bearer_auth(&stack.admin_token)
            .header(header::CONTENT_TYPE, "text/plain")
            .body(r#"{"name":"from a form"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 415, "{sessions}");
        let response = client()
            .post(&url)
            .bearer_auth(&stack.admin_token)
            .header(header::ORIGIN, "https://evil.example")
            .json(&json!({"name": "from another site"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 403, "{sessions}");
        let body: Value = response.json().await.unwrap();
        assert!(
            body["detail"].as_str().unwrap().contains("origin"),
            "{body}"
        );
    }
    let (_, listed) = get(
        &stack,
        &format!("/api/v1/instances/{instance}/terminal/sessions"),
    )
    .await;
    assert_eq!(listed["sessions"], json!([]), "nothing was created");
    // The gateway's own origin, and a program that sends none, may write.
    for origin in [Some(stack.gateway_url.clone()), None] {
        let mut request = client()
            .post(format!("{}{}", stack.gateway_url, layouts[1]))
            .bearer_auth(&stack.admin_token)
            .json(&json!({}));
        if let Some(origin) = &origin {
            request = request.header(header::ORIGIN, origin);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 201, "{origin:?}");
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn a_host_name_that_is_not_the_gateways_is_refused_except_by_probes() {
    let stack = TestStack::builder().start().await;
    let port = stack.gateway_address().port();
    let request = |path: &str, host: String| {
        client()
            .get(format!("{}{path}", stack.gateway_url))
            .bearer_auth(&stack.admin_token)
            .header(header::HOST, host)
            .send()
    };
    // A rebinding page: evil.example resolves to 127.0.0.1, the browser names it in Host.
    for path in ["/api/v1/instances", "/", "/assets/app.js"] {
        let response = request(path, format!("evil.example:{port}")).await.unwrap();
        assert_eq!(response.status(), 403, "{path}");
    }
    let response = request("/?token=x", format!("evil.example:{port}"))
        .await
        .unwrap();
    assert_eq!(response.status(), 403, "no sign-in under a foreign name");
    assert!(set_cookie(response.headers()).is_none());
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let response = request("/api/v1/instances", host.clone()).await.unwrap();
        assert_eq!(response.status(), 200, "{host}");
    }
    let response = request("/livez", format!("evil.example:{port}"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "probes answer any name");
    stack.shutdown().await;
}

#[tokio::test]
async fn every_page_asset_and_answer_carries_the_security_headers() {
    let stack = TestStack::builder().start().await;
    for (path, token) in [
        ("/", None),
        ("/instances/local", None),
        ("/assets/app.js", None),
        ("/assets/no-such-file.js", None),
        ("/api/v1/instances", Some(stack.admin_token.as_str())),
        ("/api/v1/instances", None),
        ("/no-such-route", None),
    ] {
        let mut request = client().get(format!("{}{path}", stack.gateway_url));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        let headers = response.headers();
        let policy = headers
            .get(header::CONTENT_SECURITY_POLICY)
            .unwrap_or_else(|| panic!("no CSP on {path}"))
            .to_str()
            .unwrap();
        assert!(
            policy.contains("frame-ancestors 'none'"),
            "{path}: {policy}"
        );
        // Scripts from the gateway alone; WebAssembly may compile (the History view's player),
        // nothing may `eval` or run inline.
        let scripts = policy
            .split(';')
            .map(str::trim)
            .find(|directive| directive.starts_with("script-src "));
        assert_eq!(
            scripts,
            Some("script-src 'self' 'wasm-unsafe-eval'"),
            "{path}: {policy}"
        );
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{path}");
        assert_eq!(headers[header::REFERRER_POLICY], "no-referrer", "{path}");
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn refused_credentials_are_limited_per_client_address_and_never_lock_out_the_right_one() {
    let stack = TestStack::builder().start().await;
    let instances = format!("{}/api/v1/instances", stack.gateway_url);
    // A missing credential is no guess: a page without its cookie yet never counts.
    for _ in 0..20 {
        let response = client().get(&instances).send().await.unwrap();
        assert_eq!(response.status(), 401);
    }
    for attempt in 0..10 {
        let response = client()
            .get(&instances)
            .bearer_auth(format!("guess-{attempt}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "attempt {attempt}");
    }
    // The address is out of tries: a wrong credential is 429 on every surface.
    let response = client()
        .get(&instances)
        .bearer_auth("guess-10")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .starts_with("too many refused credentials from this address"),
        "{body}"
    );
    let bad_socket = format!(
        "{}/ws/tool-instances/{}/terminal?token=guess-11",
        stack.websocket_url(),
        stack.instance_id,
    );
    let mut socket = Terminal::open_url(&bad_socket, &[])
        .await
        .expect("a socket");
    assert_eq!(socket.read_until_closed().await.code, 4029);
    let list_instances = |token: &str| {
        let mut request =
            tonic::Request::new(ptyhub_proto::session::v1::ListInstancesRequest::default());
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        request
    };
    let mut grpc = ptyhub_proto::session::v1::session_api_client::SessionApiClient::new(
        tonic::transport::Channel::from_shared(stack.gateway_url.clone())
            .unwrap()
            .connect()
            .await
            .unwrap(),
    );
    let refused = grpc
        .list_instances(list_instances("guess-12"))
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );

    // The right credential still passes, on every surface: bad guesses from an address (a web
    // page firing them, a stranger behind the same proxy) lock nobody out.
    let response = client()
        .get(&instances)
        .bearer_auth(&stack.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let response = client()
        .post(format!("{}/api/v1/auth/session", stack.gateway_url))
        .bearer_auth(&stack.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        set_cookie(response.headers()).is_some(),
        "the right token signs in"
    );
    let url = format!(
        "{}/ws/tool-instances/{}/terminal?token={}",
        stack.websocket_url(),
        stack.instance_id,
        stack.admin_token
    );
    let mut socket = Terminal::open_url(&url, &[]).await.expect("a socket");
    socket.connected().await;
    grpc.list_instances(list_instances(&stack.admin_token))
        .await
        .expect("the right token over gRPC");
    stack.shutdown().await;
}
