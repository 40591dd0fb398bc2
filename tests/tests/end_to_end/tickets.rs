//! Attach tickets against a running broker: a ticket signed with session-api's key for a live
//! session, but expired, is refused with `UNAUTHENTICATED`, and so is one signed with another
//! key; the same ticket with an expiry ahead is accepted, so the expiry, or the key, alone makes
//! the difference.

use std::time::{Duration, SystemTime};

use ptyhub_attach_ticket::{TicketRole, TicketSigningKey};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use tests::cluster::{Cluster, ticket_signing_key};

use crate::start;

/// Opens an `Attach` to broker 0 as a controller of `session_id` with `ticket`, and returns
/// the first server frame or the refusal.
async fn attach(
    cluster: &Cluster,
    session_id: &str,
    ticket: String,
) -> Result<broker_pb::ServerFrame, tonic::Status> {
    let hello = broker_pb::ClientFrame {
        frame: Some(broker_pb::client_frame::Frame::Hello(broker_pb::Hello {
            ticket,
            session_id: session_id.to_owned(),
            role: broker_pb::Role::Controller.into(),
            size: None,
            since: None,
            snapshot: false,
            present_only: false,
        })),
    };
    // The client's side stays open after the hello, as a real client's does.
    let frames =
        futures::StreamExt::chain(futures::stream::iter([hello]), futures::stream::pending());
    let mut client = cluster.broker_client(0).await.expect("a broker client");
    let mut stream = client.attach(frames).await?.into_inner();
    stream
        .message()
        .await?
        .ok_or_else(|| tonic::Status::unknown("the stream ended without a frame"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_ticket_is_refused_by_a_running_broker() {
    let Some(cluster) = start(Cluster::builder().session_apis(1).brokers(1).gateways(0)).await
    else {
        return;
    };
    let instance = cluster
        .register_instance("ticketed", 0, &["sh"], 5)
        .await
        .expect("register an instance");
    let created = cluster
        .session_client(0)
        .await
        .expect("a session-api client")
        .create_session(session_pb::CreateSessionRequest {
            instance: instance.id.clone(),
            ..Default::default()
        })
        .await
        .expect("create a session")
        .into_inner();
    let target = created.attach.expect("where to attach");
    assert_eq!(target.broker_endpoint, cluster.brokers[0].endpoint());
    let session_id = target.session_id.clone();
    let session_uuid: uuid::Uuid = session_id.parse().expect("a UUID session id");
    let key = ticket_signing_key();
    let now = SystemTime::now();

    let forged = TicketSigningKey::generate().sign(
        session_uuid,
        TicketRole::Controller,
        now + Duration::from_secs(120),
    );
    let refusal = attach(&cluster, &session_id, forged)
        .await
        .expect_err("a ticket signed with another key is refused");
    assert_eq!(refusal.code(), tonic::Code::Unauthenticated, "{refusal:?}");
    assert!(refusal.message().contains("signature"), "{refusal:?}");

    let expired = key.sign(
        session_uuid,
        TicketRole::Controller,
        now - Duration::from_secs(120),
    );
    let refusal = attach(&cluster, &session_id, expired)
        .await
        .expect_err("an expired ticket is refused");
    assert_eq!(refusal.code(), tonic::Code::Unauthenticated, "{refusal:?}");
    assert!(refusal.message().contains("expired"), "{refusal:?}");

    let current = key.sign(
        session_uuid,
        TicketRole::Controller,
        now + Duration::from_secs(120),
    );
    let first = attach(&cluster, &session_id, current)
        .await
        .expect("the same ticket, not expired, is accepted");
    match first.frame {
        Some(broker_pb::server_frame::Frame::Connected(connected)) => {
            assert_eq!(connected.session_id, session_id);
        }
        other => panic!("expected Connected first, got {other:?}"),
    }
}
