//! An instance holds at most 100 live share links: the 101st is 409 `{"detail"}` and makes no
//! link; revoking one makes room for one more.

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
