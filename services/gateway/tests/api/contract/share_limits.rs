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
const SHORTEST_SHARE_SECONDS: u64 = 60;

#[tokio::test]
async fn an_expired_shares_token_is_401_on_rest_and_4001_on_the_websocket() {
    let stack = TestStack::builder().start().await;
    let share = rest(
        &stack,
        Method::POST,
        &format!("/api/v1/instances/{}/shares", stack.instance_id),
        Some(json!({"expires_in": SHORTEST_SHARE_SECONDS})),
    )
    .await
    .expect(201, "a share of the shortest life");
    let token = share["token"].as_str().expect("a share token").to_owned();
    let instance_path = format!("/api/v1/instances/{}", stack.instance_id);
    super::support::rest_as(&stack, Some(&token), Method::GET, &instance_path, None)
        .await
        .expect(200, "the share reads its instance while it lives");

    // The share's own clock: it is refused once its expiry has passed, and never before.
    let patience = std::time::Duration::from_secs(SHORTEST_SHARE_SECONDS * 2);
    let refused = ptyhub_test_support::poll_until(
        patience,
        std::time::Duration::from_millis(250),
        || async {
            let reply =
                super::support::rest_as(&stack, Some(&token), Method::GET, &instance_path, None)
                    .await;
            (reply.status != 200).then_some(reply)
        },
    )
    .await
    .unwrap_or_else(|| panic!("the share still worked {patience:?} after it was made"));
    let detail = refused.expect_error(401, "an expired share's token");
    assert_eq!(detail, "share link not found, expired or revoked");
    let expires_at =
        chrono::DateTime::parse_from_rfc3339(share["expires_at"].as_str().expect("an expiry"))
            .expect("an RFC 3339 expiry");
    assert!(
        chrono::Utc::now() >= expires_at,
        "refused before its expiry ({expires_at})"
    );

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
