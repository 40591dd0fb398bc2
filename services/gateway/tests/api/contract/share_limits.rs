//! An instance holds at most 100 live share links: the 101st is 409 `{"detail"}` and makes no
//! link; revoking one makes room for one more. A share's token is refused once it has expired:
//! 401 on REST, 4001 on the WebSocket.

use ptyhub_test_support::stack::TestStack;
use reqwest::Method;
use serde_json::json;

use super::support::{Reply, rest};

/// The contract's bound of live shares per instance.
const MAX_LIVE_SHARES: usize = 100;

async fn create_share(stack: &TestStack, instance: &str) -> Reply {
    rest(
        stack,
        Method::POST,
        &format!("/api/v1/instances/{instance}/shares"),
        Some(json!({})),
    )
    .await
}

async fn live_shares(stack: &TestStack, instance: &str) -> Vec<serde_json::Value> {
    rest(
        stack,
        Method::GET,
        &format!("/api/v1/instances/{instance}/shares"),
        None,
    )
    .await
    .expect(200, "list the shares")["shares"]
        .as_array()
        .expect("a shares array")
        .clone()
}

#[tokio::test]
async fn the_101st_live_share_of_an_instance_is_409_until_one_is_revoked() {
    let stack = TestStack::builder().start().await;
    let instance = stack.register_instance("shared-a-lot", 5, &[]).await;
    let mut ids = Vec::with_capacity(MAX_LIVE_SHARES);
    for _ in 0..MAX_LIVE_SHARES {
        let created = create_share(&stack, &instance)
            .await
            .expect(201, "a share within the bound");
        ids.push(created["id"].as_str().expect("a share id").to_owned());
    }
    let detail = create_share(&stack, &instance)
        .await
        .expect_error(409, "the 101st share");
    assert!(detail.contains("100"), "{detail}");
    assert_eq!(live_shares(&stack, &instance).await.len(), MAX_LIVE_SHARES);

    // The bound is per instance: another instance shares freely.
    create_share(&stack, &stack.instance_id)
        .await
        .expect(201, "a share of another instance");

    rest(
        &stack,
        Method::DELETE,
        &format!("/api/v1/instances/{instance}/shares/{}", ids[0]),
        None,
    )
    .await
    .expect(200, "revoke a share");
    create_share(&stack, &instance)
        .await
        .expect(201, "a share in the revoked one's place");
    create_share(&stack, &instance)
        .await
        .expect_error(409, "the bound again");
    stack.shutdown().await;
}

/// A share's shortest life (`expires_in`'s lower bound).
const SHORTEST_SHARE_SECONDS: i64 = 60;

/// A share's token works while the share lives and is refused once its expiry has come. The
/// test does not wait out the shortest life on the real clock: the share is made for it (its
/// `expires_at` checked to be that life away), then its expiry is moved to now in session-api's
/// database, as the end of its life would.
#[tokio::test]
async fn an_expired_shares_token_is_401_on_rest_and_4001_on_the_websocket() {
    let stack = TestStack::builder().start().await;
    let asked_at = chrono::Utc::now();
    let share = rest(
        &stack,
        Method::POST,
        &format!("/api/v1/instances/{}/shares", stack.instance_id),
        Some(json!({"expires_in": SHORTEST_SHARE_SECONDS})),
    )
    .await
    .expect(201, "a share of the shortest life");
    let answered_at = chrono::Utc::now();
    let expires_at =
        chrono::DateTime::parse_from_rfc3339(share["expires_at"].as_str().expect("an expiry"))
            .expect("an RFC 3339 expiry")
            .with_timezone(&chrono::Utc);
    let life = chrono::Duration::seconds(SHORTEST_SHARE_SECONDS);
    // Stored to the microsecond, so it may be up to one before the exact sum.
    let precision = chrono::Duration::microseconds(1);
    assert!(
        asked_at + life - precision <= expires_at && expires_at <= answered_at + life,
        "a share for {SHORTEST_SHARE_SECONDS} s asked at {asked_at} expires at {expires_at}"
    );
    let token = share["token"].as_str().expect("a share token").to_owned();
    let instance_path = format!("/api/v1/instances/{}", stack.instance_id);
    super::support::rest_as(&stack, Some(&token), Method::GET, &instance_path, None)
        .await
        .expect(200, "the share reads its instance while it lives");

    stack
        .expire_share_now(share["id"].as_str().expect("a share id"))
        .await;
    let refused =
        super::support::rest_as(&stack, Some(&token), Method::GET, &instance_path, None).await;
    let detail = refused.expect_error(401, "an expired share's token");
    assert_eq!(detail, "share link not found, expired or revoked");

    let mut socket = super::support::Terminal::open_as(
        &stack,
        &format!(
            "/ws/tool-instances/{}/terminal?mode=view",
            stack.instance_id
        ),
        &token,
    )
    .await;
    assert_eq!(socket.read_until_closed().await.code, 4001);
    stack.shutdown().await;
}
