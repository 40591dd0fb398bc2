//! Contract behaviours that need the services as processes: an alias opened through two
//! session-api replicas at once is one session and one process; the gateway's session event
//! stream and `WatchSessions` end when the gateway loses session-api (a client then reconnects
//! and lists again); a broker's hand-off closes an attached WebSocket with 1012.

use std::collections::BTreeSet;

use ptyhub_proto::session::v1 as session_pb;
use ptyhub_proto::session::v1::session_api_client::SessionApiClient;
use tests::cluster::{API_TOKEN, Cluster, PATIENCE};
use tests::terminal::{Event, Terminal};
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::start;

/// Opens of one alias made at once, half through each replica.
const CONCURRENT_OPENS: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_alias_opened_through_two_replicas_at_once_is_one_session() {
    let Some(cluster) = start(Cluster::builder().session_apis(2).brokers(1).gateways(1)).await
    else {
        return;
    };
    let instance = cluster
        .register_instance("aliased", 0, &["sh"], 5)
        .await
        .expect("register an instance");
    let mut opens = tokio::task::JoinSet::new();
    for index in 0..CONCURRENT_OPENS {
        let mut client = cluster
            .session_client(index % 2)
            .await
            .expect("a client of the replica");
        let instance = instance.id.clone();
        opens.spawn(async move {
            client
                .resolve_session(session_pb::ResolveSessionRequest {
                    instance,
                    selector: Some(session_pb::resolve_session_request::Selector::Alias(
                        "conversation-42".to_owned(),
                    )),
                    create_if_absent: true,
                    ..Default::default()
                })
                .await
                .map(|answer| answer.into_inner())
        });
    }
    let mut sessions = BTreeSet::new();
    let mut created = 0;
    while let Some(opened) = opens.join_next().await {
        let opened = opened
            .expect("the open ran")
            .expect("every open of the alias answers");
        created += usize::from(opened.created);
        sessions.insert(opened.session.expect("a session").id);
    }
    assert_eq!(sessions.len(), 1, "one alias, one session: {sessions:?}");
    assert_eq!(created, 1, "exactly one open created it");

    // One record, one process.
    let (status, listed) = cluster
        .rest(
            0,
            reqwest::Method::GET,
            &format!("/api/v1/instances/{}/terminal/sessions", instance.id),
            None,
        )
        .await
        .expect("list the sessions");
    assert_eq!(status, 200, "{listed}");
    assert_eq!(
        listed["sessions"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    let on_broker = cluster
        .broker_processes(0)
        .await
        .expect("the broker's list");
    assert_eq!(on_broker.len(), 1, "{on_broker:?}");
}

/// Reads the event stream to its end; fails if it is still open after [`PATIENCE`].
async fn events_end(mut response: reqwest::Response) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match tokio::time::timeout_at(deadline, response.chunk()).await {
            Err(_) => panic!("the event stream outlived session-api by {PATIENCE:?}"),
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) | Ok(Err(_)) => return,
        }
    }
}

/// Reads `WatchSessions` to its end, cleanly or with a status; fails if it is still open after
/// [`PATIENCE`].
async fn changes_end(mut changes: tonic::Streaming<session_pb::SessionChange>) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match tokio::time::timeout_at(deadline, changes.message()).await {
            Err(_) => panic!("WatchSessions outlived session-api by {PATIENCE:?}"),
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) | Ok(Err(_)) => return,
        }
    }
}

/// The gateway's event stream and `WatchSessions` of `instance`.
async fn open_streams(
    cluster: &Cluster,
    instance: &str,
) -> (
    reqwest::Response,
    tonic::Streaming<session_pb::SessionChange>,
) {
    let gateway = cluster.gateways[0].endpoint();
    let response = cluster
        .http
        .get(format!(
            "{gateway}/api/v1/instances/{instance}/terminal/events"
        ))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(response.status().as_u16(), 200);
    let channel = Channel::from_shared(gateway)
        .expect("the gateway's url")
        .connect()
        .await
        .expect("an http/2 connection to the gateway");
    let mut request = tonic::Request::new(session_pb::WatchSessionsRequest {
        instance: instance.to_owned(),
    });
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {API_TOKEN}")
            .parse()
            .expect("an ascii token"),
    );
    let changes = SessionApiClient::new(channel)
        .watch_sessions(request)
        .await
        .expect("watch sessions through the gateway")
        .into_inner();
    (response, changes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn event_streams_and_session_watches_end_when_the_gateway_loses_session_api() {
    let Some(mut cluster) = start(Cluster::builder().session_apis(1).brokers(1).gateways(1)).await
    else {
        return;
    };
    let instance = cluster
        .register_instance("watched", 0, &["sh"], 5)
        .await
        .expect("register an instance");
    let (response, changes) = open_streams(&cluster, &instance.id).await;
    cluster.apis[0].kill().expect("kill session-api");
    tokio::join!(events_end(response), changes_end(changes));

    // Once session-api is back, a client that reconnects is served again.
    cluster
        .restart_session_api(0)
        .await
        .expect("session-api starts again");
    let (_response, mut changes) = open_streams(&cluster, &instance.id).await;
    let (status, created) = cluster
        .create_session(0, &instance.id)
        .await
        .expect("create a session");
    assert_eq!(status, 201, "{created}");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let change = tokio::time::timeout_at(deadline, changes.message())
            .await
            .expect("a change in time")
            .expect("the new watch works")
            .expect("the new watch stays open");
        if change
            .session
            .is_some_and(|session| session.id == created["id"])
        {
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hand_off_closes_the_websocket_1012_every_time() {
    let Some(mut cluster) = start(Cluster::builder().session_apis(1).brokers(1).gateways(1)).await
    else {
        return;
    };
    let instance = cluster
        .register_instance("handed-over", 0, &["sh"], 5)
        .await
        .expect("register an instance");
    let (status, created) = cluster
        .create_session(0, &instance.id)
        .await
        .expect("create a session");
    assert_eq!(status, 201, "{created}");
    let session_id = created["id"].as_str().expect("a session id").to_owned();
    let port = cluster.gateways[0].port();
    for round in 1..=3 {
        let (mut terminal, _) = Terminal::attach(port, &instance.id, &session_id, None)
            .await
            .expect("attach");
        terminal
            .input(format!("echo ready-$((0+{round}))\n").as_bytes())
            .await
            .expect("type");
        terminal
            .read_until(&format!("ready-{round}"))
            .await
            .expect("the shell answers");
        cluster
            .hand_off_broker(0)
            .await
            .expect("hand the broker over");
        let code = loop {
            match terminal.next().await {
                Ok(Event::Closed(code)) => break code,
                Ok(_) => {}
                Err(error) => panic!("round {round}: the WebSocket broke: {error:#}"),
            }
        };
        assert_eq!(
            code,
            Some(1012),
            "round {round}: a hand-off is a service restart, reconnect now"
        );
    }
}
