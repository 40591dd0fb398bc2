//! Attach tickets against the running broker, with gRPC `Attach` straight to the broker: a ticket the gateway's gRPC surface issued is admitted; a forged
//! (signed with any key but session-api's, or with a secret shared with the brokers as tickets
//! once were), tampered, malformed, missing or expired one is UNAUTHENTICATED; a genuine ticket
//! for another session, or a viewer's ticket asking for control, is PERMISSION_DENIED.

use std::time::{SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::broker::v1::pty_broker_client::PtyBrokerClient;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_test_support::stack::TestStack;
use serde_json::json;

use super::support::{
    PATIENCE, STACK_TICKET_SIGNING_KEY, as_admin, create_session, gateway_grpc,
    shared_secret_ticket, sign_ticket, sign_ticket_for, ticket_signature,
};

/// Another Ed25519 key, as `openssl genpkey -algorithm ed25519` writes one: anyone can make
/// such a key, and tickets it signs must open nothing.
const ANOTHER_SIGNING_KEY: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIMN0Jpn1HHtTfqtJ/ZDeRAn+L9og+Sxlzm4m2hAcsyHG
-----END PRIVATE KEY-----
";

/// A ticket the gateway issued for `session_id` in `role`.
async fn issued_ticket(
    stack: &TestStack,
    session_id: &str,
    role: broker_pb::Role,
) -> session_pb::AttachTarget {
    gateway_grpc(stack)
        .await
        .issue_attach_ticket(as_admin(
            stack,
            session_pb::IssueAttachTicketRequest {
                instance: stack.instance_id.clone(),
                session_id: session_id.to_owned(),
                role: role as i32,
            },
        ))
        .await
        .expect("a ticket from the gateway")
        .into_inner()
}

/// Opens `Attach` on the broker at `endpoint` with one hello, and returns its first server
/// frame or the status that refused it.
async fn attach(
    endpoint: &str,
    session_id: &str,
    ticket: &str,
    role: broker_pb::Role,
) -> Result<broker_pb::server_frame::Frame, tonic::Status> {
    let mut client = PtyBrokerClient::connect(endpoint.to_owned())
        .await
        .expect("a connection to the broker");
    let hello = broker_pb::ClientFrame {
        frame: Some(broker_pb::client_frame::Frame::Hello(broker_pb::Hello {
            ticket: ticket.to_owned(),
            session_id: session_id.to_owned(),
            role: role as i32,
            size: None,
            since: None,
            snapshot: false,
            present_only: false,
        })),
    };
    // The client side stays open, as a real client's would, until the answer is read.
    let frames = futures::stream::iter([hello]).chain(futures::stream::pending());
    let mut server_frames = client.attach(frames).await?.into_inner();
    let first = tokio::time::timeout(PATIENCE, server_frames.message())
        .await
        .expect("the broker answers the hello in time")?
        .expect("a first server frame");
    Ok(first.frame.expect("a frame with content"))
}

fn refusal(
    result: Result<broker_pb::server_frame::Frame, tonic::Status>,
    what: &str,
) -> tonic::Status {
    match result {
        Ok(frame) => panic!("{what} was admitted: {frame:?}"),
        Err(status) => status,
    }
}

fn assert_refused(
    result: Result<broker_pb::server_frame::Frame, tonic::Status>,
    code: tonic::Code,
    words: &str,
    what: &str,
) {
    let status = refusal(result, what);
    assert_eq!(status.code(), code, "{what}: {status:?}");
    assert!(
        status.message().contains(words),
        "{what}: {:?} does not say {words:?}",
        status.message()
    );
}

fn unix_seconds_now() -> i64 {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs();
    i64::try_from(seconds).expect("seconds that fit")
}

#[tokio::test]
async fn forged_tampered_malformed_or_expired_tickets_are_unauthenticated() {
    let stack = TestStack::builder().start().await;
    let session_id = create_session(&stack, &stack.instance_id, json!({"name": "guarded"})).await;
    let other_session = create_session(&stack, &stack.instance_id, json!({})).await;
    let issued = issued_ticket(&stack, &session_id, broker_pb::Role::Controller).await;
    // Straight to the broker: the gateway hands out its own address, and this is about what the
    // broker admits.
    let endpoint = stack.broker_endpoint.clone();
    let controller = broker_pb::Role::Controller;

    // The genuine ticket is admitted, and signing as session-api does reproduces it exactly (it
    // names its holder: the stack's first API token, asking over gRPC), so the tickets made
    // below differ from a genuine one only where each test says.
    let expires_at = issued.ticket_expires_at.expect("an expiry").seconds;
    assert_eq!(
        sign_ticket_for(
            STACK_TICKET_SIGNING_KEY,
            &session_id,
            "controller",
            expires_at,
            ("grpc", "api-token-0"),
        ),
        issued.ticket
    );
    match attach(&endpoint, &session_id, &issued.ticket, controller).await {
        Ok(broker_pb::server_frame::Frame::Connected(connected)) => {
            assert_eq!(connected.session_id, session_id);
            assert_eq!(connected.role, controller as i32);
        }
        other => panic!("the genuine ticket was not admitted: {other:?}"),
    }

    let expired = sign_ticket(
        STACK_TICKET_SIGNING_KEY,
        &session_id,
        "controller",
        unix_seconds_now() - 60,
    );
    let unauthenticated = tonic::Code::Unauthenticated;
    assert_refused(
        attach(&endpoint, &session_id, &expired, controller).await,
        unauthenticated,
        "expired",
        "an expired ticket",
    );

    let forged = sign_ticket(ANOTHER_SIGNING_KEY, &session_id, "controller", expires_at);
    assert_refused(
        attach(&endpoint, &session_id, &forged, controller).await,
        unauthenticated,
        "signature",
        "a ticket signed with another key",
    );

    // What a broker used to hold, a secret it shared with session-api, makes no ticket either.
    let shared = shared_secret_ticket(
        "a-ticket-secret-every-broker-held-0123",
        &session_id,
        "controller",
        expires_at,
    );
    assert_refused(
        attach(&endpoint, &session_id, &shared, controller).await,
        unauthenticated,
        "malformed",
        "a ticket made with a secret shared with the brokers",
    );

    // The genuine signature on a payload rewritten for another session.
    let genuine_signature = issued.ticket.rsplit('.').next().expect("a signature part");
    let rewritten = sign_ticket(
        STACK_TICKET_SIGNING_KEY,
        &other_session,
        "controller",
        expires_at,
    );
    let rewritten_payload = rewritten.split('.').nth(1).expect("a payload part");
    assert_ne!(
        ticket_signature(STACK_TICKET_SIGNING_KEY, rewritten_payload),
        genuine_signature
    );
    let tampered = format!("v2.{rewritten_payload}.{genuine_signature}");
    assert_refused(
        attach(&endpoint, &other_session, &tampered, controller).await,
        unauthenticated,
        "signature",
        "a tampered ticket",
    );

    assert_refused(
        attach(&endpoint, &session_id, "not-a-ticket", controller).await,
        unauthenticated,
        "malformed",
        "a malformed ticket",
    );
    let missing = refusal(
        attach(&endpoint, &session_id, "", controller).await,
        "no ticket",
    );
    assert_eq!(missing.code(), unauthenticated, "{missing:?}");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_genuine_ticket_for_another_session_or_role_is_permission_denied() {
    let stack = TestStack::builder().start().await;
    let session_id = create_session(&stack, &stack.instance_id, json!({"name": "mine"})).await;
    let other_session = create_session(&stack, &stack.instance_id, json!({"name": "theirs"})).await;
    let controller_ticket = issued_ticket(&stack, &session_id, broker_pb::Role::Controller).await;
    let endpoint = stack.broker_endpoint.clone();

    assert_refused(
        attach(
            &endpoint,
            &other_session,
            &controller_ticket.ticket,
            broker_pb::Role::Controller,
        )
        .await,
        tonic::Code::PermissionDenied,
        "another session",
        "a ticket for another session",
    );

    let viewer_ticket = issued_ticket(&stack, &session_id, broker_pb::Role::Viewer).await;
    assert_refused(
        attach(
            &endpoint,
            &session_id,
            &viewer_ticket.ticket,
            broker_pb::Role::Controller,
        )
        .await,
        tonic::Code::PermissionDenied,
        "controller",
        "a viewer's ticket asking for control",
    );
    // The same viewer ticket is good for what it grants.
    match attach(
        &endpoint,
        &session_id,
        &viewer_ticket.ticket,
        broker_pb::Role::Viewer,
    )
    .await
    {
        Ok(broker_pb::server_frame::Frame::Connected(connected)) => {
            assert_eq!(connected.role, broker_pb::Role::Viewer as i32);
        }
        other => panic!("the viewer ticket was not admitted as a viewer: {other:?}"),
    }
    stack.shutdown().await;
}
