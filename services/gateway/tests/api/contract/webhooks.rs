//! Webhooks (docs/CONTRACT.md, "Webhooks") through the gateway: registered, listed and deleted
//! over REST and the gRPC surface by a credential that may control the instance (a share
//! link's is refused), bad registrations refused with 422 and nothing stored, the bound per
//! instance; a command that failed in a real bash reaches a receiver on 127.0.0.1 as a signed
//! `command_finished`; and a receiver that never answers holds up no terminal. Registering
//! and deleting a webhook, and a delivery given up, are audit events without the secret.

use std::time::Duration;

use hmac::{Hmac, Mac};
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_test_support::stack::TestStack;
use ptyhub_test_support::webhooks::{Answer, ReceivedRequest, WebhookReceiver};
use reqwest::Method;
use serde_json::{Value, json};
use sha2::Sha256;

use super::commands::{at_prompt, bash_instance, share_token, with_bearer};
use super::support::{
    PATIENCE, Terminal, as_admin, create_session, eventually, gateway_grpc, rest, rest_as,
    type_input,
};

const SECRET: &str = "a-webhook-secret-0123456789abcdef";

fn webhooks_path(instance: &str) -> String {
    format!("/api/v1/instances/{instance}/webhooks")
}

async fn register(stack: &TestStack, instance: &str, url: &str, events: &[&str]) -> Value {
    rest(
        stack,
        Method::POST,
        &webhooks_path(instance),
        Some(json!({"url": url, "events": events, "secret": SECRET})),
    )
    .await
    .expect(201, "register a webhook")
}

async fn listed(stack: &TestStack, instance: &str) -> Vec<Value> {
    rest(stack, Method::GET, &webhooks_path(instance), None)
        .await
        .expect(200, "list the webhooks")["webhooks"]
        .as_array()
        .expect("a webhooks array")
        .clone()
}

/// Asserts the delivery is signed with [`SECRET`]: the HMAC-SHA256 of its raw body, computed
/// here with the `hmac` crate.
fn assert_signed(request: &ReceivedRequest) {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(&request.body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    assert_eq!(
        request.header("x-ptyhub-signature-256"),
        format!("sha256={hex}")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_registered_listed_and_deleted_by_who_controls_the_instance() {
    let stack = TestStack::builder().start().await;
    let instance = bash_instance(&stack, "hooks", None).await;
    let iid = instance["id"].as_str().unwrap();
    let path = webhooks_path(iid);

    for (body, wanted) in [
        (
            json!({"url": "ftp://example.com/", "events": ["state_changed"], "secret": SECRET}),
            "http://",
        ),
        (
            json!({"url": "https://example.com/", "events": [], "secret": SECRET}),
            "at least one",
        ),
        (
            json!({"url": "https://example.com/", "events": ["exited"], "secret": SECRET}),
            "unknown webhook event",
        ),
        (
            json!({"url": "https://example.com/", "events": ["command_finished"], "secret": "short"}),
            "16 to 256",
        ),
        (
            json!({"url": "https://example.com/", "events": ["command_finished"]}),
            "secret",
        ),
        (
            json!({"url": "https://example.com/", "events": ["command_finished"], "secret": SECRET, "extra": 1}),
            "extra",
        ),
    ] {
        let detail = rest(&stack, Method::POST, &path, Some(body.clone()))
            .await
            .expect_error(422, &format!("register {body}"));
        assert!(detail.contains(wanted), "{body}: {detail}");
    }
    assert!(
        listed(&stack, iid).await.is_empty(),
        "nothing refused is kept"
    );

    let made = register(
        &stack,
        iid,
        "https://hooks.example.com/ptyhub",
        &["command_finished", "state_changed"],
    )
    .await;
    assert_eq!(made["instance_id"], iid);
    assert_eq!(made["url"], "https://hooks.example.com/ptyhub");
    assert_eq!(made["events"], json!(["state_changed", "command_finished"]));
    assert_eq!(made["last_delivery"], Value::Null);
    assert_eq!(made["dropped_events"], 0);
    assert!(made["created_by"].as_str().is_some_and(|by| !by.is_empty()));
    assert!(made.get("secret").is_none(), "the secret is never answered");
    let webhooks = listed(&stack, iid).await;
    assert_eq!(webhooks, std::slice::from_ref(&made));

    // A share link's credential may watch the instance, never touch its webhooks.
    let session_id = create_session(&stack, iid, json!({})).await;
    let share = share_token(&stack, iid, &session_id).await;
    let id = made["id"].as_str().unwrap();
    for (method, path, body) in [
        (Method::GET, path.clone(), None),
        (
            Method::POST,
            path.clone(),
            Some(
                json!({"url": "https://x.example.com/", "events": ["state_changed"], "secret": SECRET}),
            ),
        ),
        (Method::DELETE, format!("{path}/{id}"), None),
    ] {
        rest_as(&stack, Some(&share), method.clone(), &path, body)
            .await
            .expect_error(403, &format!("{method} as a share"));
    }
    let mut grpc = gateway_grpc(&stack).await;
    let refused = grpc
        .list_webhooks(with_bearer(
            &share,
            session_pb::ListWebhooksRequest {
                instance: iid.to_owned(),
            },
        ))
        .await
        .expect_err("a share's credential");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    let over_grpc = grpc
        .list_webhooks(as_admin(
            &stack,
            session_pb::ListWebhooksRequest {
                instance: "hooks".to_owned(),
            },
        ))
        .await
        .expect("the admin lists over gRPC")
        .into_inner();
    assert_eq!(over_grpc.webhooks.len(), 1);
    assert_eq!(over_grpc.webhooks[0].id, id);
    let bad = grpc
        .create_webhook(as_admin(
            &stack,
            session_pb::CreateWebhookRequest {
                instance: iid.to_owned(),
                url: "ftp://example.com/".into(),
                events: vec!["state_changed".into()],
                secret: SECRET.into(),
            },
        ))
        .await
        .expect_err("an ftp url");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);

    rest(&stack, Method::DELETE, &format!("{path}/not-a-uuid"), None)
        .await
        .expect_error(404, "delete a webhook that is no uuid");
    rest(
        &stack,
        Method::DELETE,
        &format!("{path}/{}", uuid::Uuid::new_v4()),
        None,
    )
    .await
    .expect_error(404, "delete an unknown webhook");
    let deleted = rest(&stack, Method::DELETE, &format!("{path}/{id}"), None)
        .await
        .expect(200, "delete the webhook");
    assert_eq!(deleted["id"], id);
    assert!(listed(&stack, iid).await.is_empty());

    // At most 20 per instance.
    for n in 0..20 {
        register(
            &stack,
            iid,
            &format!("https://hooks.example.com/{n}"),
            &["state_changed"],
        )
        .await;
    }
    let detail = rest(
        &stack,
        Method::POST,
        &path,
        Some(json!({"url": "https://hooks.example.com/21", "events": ["state_changed"], "secret": SECRET})),
    )
    .await
    .expect_error(409, "a 21st webhook");
    assert!(detail.contains("20 webhooks"), "{detail}");
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_failed_in_bash_reaches_the_receiver_signed() {
    let stack = TestStack::builder().start().await;
    let instance = bash_instance(&stack, "hooked-bash", None).await;
    let iid = instance["id"].as_str().unwrap();
    let mut receiver = WebhookReceiver::start().await;
    let webhook = register(
        &stack,
        iid,
        &receiver.url,
        &["state_changed", "command_finished"],
    )
    .await;
    let session_id = create_session(&stack, iid, json!({})).await;
    at_prompt(&stack, iid, &session_id).await;

    type_input(
        &stack,
        iid,
        &session_id,
        json!({"text": "false", "keys": ["Enter"]}),
    )
    .await
    .expect(200, "type false");
    // Every request until the command's, the state changes before it kept.
    let mut changes = Vec::new();
    let finished = loop {
        let request = receiver.next_request(PATIENCE).await;
        assert_signed(&request);
        match request.header("x-ptyhub-event") {
            "command_finished" => break request,
            "state_changed" => changes.push(request.json()),
            other => panic!("unknown event {other}"),
        }
    };
    assert_eq!(finished.header("content-type"), "application/json");
    let body = finished.json();
    assert_eq!(body["event"], "command_finished");
    assert_eq!(body["instance_id"], iid);
    assert_eq!(body["session_id"], session_id);
    assert_eq!(body["command"]["command"], "false");
    assert_eq!(body["command"]["exit_code"], 1);
    // The same command, as the commands listing shows it.
    let listing = rest(
        &stack,
        Method::GET,
        &format!("/api/v1/instances/{iid}/terminal/sessions/{session_id}/commands"),
        None,
    )
    .await
    .expect(200, "list the commands");
    let listed_command = listing["commands"]
        .as_array()
        .unwrap()
        .iter()
        .find(|command| command["id"] == body["command"]["id"])
        .expect("the command is listed")
        .clone();
    assert_eq!(body["command"], listed_command);

    // The shell's first prompt came before it, as a state change.
    assert!(
        changes
            .iter()
            .any(|change| change["state"] == "at_prompt" && change["session_id"] == session_id),
        "{changes:?}"
    );

    let last = eventually("the listing shows a delivered delivery", || async {
        let webhooks = listed(&stack, iid).await;
        let last = webhooks[0]["last_delivery"].clone();
        (last["outcome"] == "delivered").then_some(webhooks)
    })
    .await;
    assert_eq!(last[0]["id"], webhook["id"]);
    let last = &last[0]["last_delivery"];
    assert_eq!(last["status_code"], 200);
    assert_eq!(last["attempts"], 1);
    assert_eq!(last["error"], Value::Null);
    assert!(last["id"].is_string());
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_never_answers_holds_up_no_terminal() {
    let stack = TestStack::builder().start().await;
    let instance = bash_instance(&stack, "slow-receiver", None).await;
    let iid = instance["id"].as_str().unwrap();
    let mut receiver = WebhookReceiver::answering(vec![Answer::Never; 1000]).await;
    register(
        &stack,
        iid,
        &receiver.url,
        &["state_changed", "command_finished"],
    )
    .await;
    let session_id = create_session(&stack, iid, json!({})).await;
    at_prompt(&stack, iid, &session_id).await;
    // A delivery is in flight, and its receiver will never answer it.
    receiver.next_request(PATIENCE).await;

    let mut terminal = Terminal::open(
        &stack,
        &format!("/ws/tool-instances/{iid}/terminal/{session_id}"),
    )
    .await;
    terminal.connected().await;
    for round in 0..5 {
        let from = terminal.output.len();
        terminal
            .send_input(&format!("echo slow-receiver-$(({round} * 7))\r"))
            .await;
        terminal
            .read_until_output_from(from, &format!("slow-receiver-{}", round * 7))
            .await;
    }
    // Each command was delivered to the receiver too (and hangs there).
    receiver.next_event("command_finished", PATIENCE).await;
    stack.shutdown().await;
}

/// The audit events of an instance whose kind starts with `webhook_`, oldest first.
async fn webhook_audit_events(stack: &TestStack, instance: &str) -> Vec<Value> {
    let trail = rest(
        stack,
        Method::GET,
        &format!("/api/v1/audit?instance={instance}"),
        None,
    )
    .await
    .expect(200, "list the audit trail");
    trail["events"]
        .as_array()
        .expect("an events array")
        .iter()
        .filter(|event| event["kind"].as_str().unwrap().starts_with("webhook_"))
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registering_and_deleting_a_webhook_are_audited_without_its_secret() {
    let stack = TestStack::builder().start().await;
    let instance = bash_instance(&stack, "audited-hooks", None).await;
    let iid = instance["id"].as_str().unwrap();
    let path = webhooks_path(iid);
    let over_rest = register(
        &stack,
        iid,
        "https://hooks.example.com/rest",
        &["state_changed"],
    )
    .await;
    let over_rest = over_rest["id"].as_str().unwrap().to_owned();
    let mut grpc = gateway_grpc(&stack).await;
    let over_grpc = grpc
        .create_webhook(as_admin(
            &stack,
            session_pb::CreateWebhookRequest {
                instance: iid.to_owned(),
                url: "https://hooks.example.com/grpc".into(),
                events: vec!["command_finished".into(), "state_changed".into()],
                secret: SECRET.into(),
            },
        ))
        .await
        .expect("the admin registers over gRPC")
        .into_inner()
        .id;
    // A refused registration and an unknown webhook's delete change nothing: no event.
    rest(
        &stack,
        Method::POST,
        &path,
        Some(json!({"url": "ftp://example.com/", "events": ["state_changed"], "secret": SECRET})),
    )
    .await
    .expect_error(422, "an ftp url");
    rest(
        &stack,
        Method::DELETE,
        &format!("{path}/{}", uuid::Uuid::new_v4()),
        None,
    )
    .await
    .expect_error(404, "an unknown webhook");
    rest(&stack, Method::DELETE, &format!("{path}/{over_rest}"), None)
        .await
        .expect(200, "delete over REST");
    grpc.delete_webhook(as_admin(
        &stack,
        session_pb::DeleteWebhookRequest {
            instance: iid.to_owned(),
            webhook_id: over_grpc.clone(),
        },
    ))
    .await
    .expect("the admin deletes over gRPC");

    let events = webhook_audit_events(&stack, iid).await;
    let seen: Vec<(&str, &str, &str, &str)> = events
        .iter()
        .map(|event| {
            (
                event["kind"].as_str().unwrap(),
                event["surface"].as_str().unwrap(),
                event["detail"]["webhook_id"].as_str().unwrap(),
                event["detail"]["url"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                "webhook_created",
                "rest",
                over_rest.as_str(),
                "https://hooks.example.com/rest"
            ),
            (
                "webhook_created",
                "grpc",
                over_grpc.as_str(),
                "https://hooks.example.com/grpc"
            ),
            (
                "webhook_deleted",
                "rest",
                over_rest.as_str(),
                "https://hooks.example.com/rest"
            ),
            (
                "webhook_deleted",
                "grpc",
                over_grpc.as_str(),
                "https://hooks.example.com/grpc"
            ),
        ],
        "{events:?}"
    );
    for event in &events {
        assert_eq!(event["principal"], "api-token-0", "{event}");
        assert_eq!(event["instance_id"], iid, "{event}");
        assert!(
            !event.to_string().contains(SECRET),
            "an event never carries the secret: {event}"
        );
    }
    assert_eq!(
        events[1]["detail"]["events"],
        "state_changed,command_finished"
    );
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_given_up_is_audited_by_the_system() {
    let stack = TestStack::builder()
        .configure(|builder| {
            let webhooks = &mut builder.session_api.webhooks;
            webhooks.attempts = 2;
            webhooks.retry_base = Duration::from_millis(20);
            webhooks.poll_interval = Duration::from_millis(50);
        })
        .start()
        .await;
    let instance = bash_instance(&stack, "failing-hooks", None).await;
    let iid = instance["id"].as_str().unwrap();
    let receiver = WebhookReceiver::answering(vec![Answer::Status(500); 1000]).await;
    let webhook = register(&stack, iid, &receiver.url, &["state_changed"]).await;
    let session_id = create_session(&stack, iid, json!({})).await;
    at_prompt(&stack, iid, &session_id).await;

    let failed = eventually("a delivery given up is audited", || async {
        webhook_audit_events(&stack, iid)
            .await
            .into_iter()
            .find(|event| event["kind"] == "webhook_delivery_failed")
    })
    .await;
    assert_eq!(failed["principal"], "system", "{failed}");
    assert_eq!(failed["surface"], "system", "{failed}");
    assert_eq!(failed["instance_id"], iid, "{failed}");
    assert_eq!(failed["session_id"], session_id.as_str(), "{failed}");
    let detail = &failed["detail"];
    assert_eq!(detail["webhook_id"], webhook["id"], "{failed}");
    assert_eq!(detail["event"], "state_changed", "{failed}");
    assert_eq!(detail["attempts"], "2", "{failed}");
    assert_eq!(detail["status_code"], "500", "{failed}");
    assert!(detail["delivery_id"].is_string(), "{failed}");
    assert!(!failed.to_string().contains(SECRET), "{failed}");
    stack.shutdown().await;
}
