//! session-api's lifecycle across broker faults: a broker that dies and stays away past the
//! heartbeat timeout has its sessions closed (`broker_lost`); another broker's sessions are not;
//! what a terminal did while session-api was away is read from the broker's snapshot.

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as pb;

use crate::support::*;

async fn session_state(
    client: &mut SessionClient,
    instance: &pb::Instance,
    session_id: &str,
) -> (pb::SessionStatus, pb::CloseReason) {
    let session = client
        .get_session(pb::GetSessionRequest {
            instance: instance.id.clone(),
            session_id: session_id.to_owned(),
        })
        .await
        .expect("get session")
        .into_inner();
    (session.status(), session.close_reason())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_that_stays_down_past_the_heartbeat_timeout_loses_its_sessions() {
    let Some(database) = FreshDatabase::create(Backend::Sqlite).await else {
        return;
    };
    let doomed = start_broker();
    let survivor = start_broker();
    let api = start_session_api(
        database.url(),
        &[
            ("doomed", doomed.endpoint()),
            ("survivor", survivor.endpoint()),
        ],
    );
    let mut client = session_client(&api).await;
    let on_doomed = register_instance(&mut client, "on-doomed", "doomed", 5).await;
    let on_survivor = register_instance(&mut client, "on-survivor", "survivor", 5).await;
    let mut created = Vec::new();
    for instance in [&on_doomed, &on_survivor] {
        let attachment = client
            .create_session(pb::CreateSessionRequest {
                instance: instance.id.clone(),
                ..Default::default()
            })
            .await
            .expect("create session")
            .into_inner();
        created.push(attachment.session.expect("session").id);
    }
    for (instance, id) in [(&on_doomed, &created[0]), (&on_survivor, &created[1])] {
        eventually("the session is active", || {
            let mut client = client.clone();
            async move {
                let (status, _) = session_state(&mut client, instance, id).await;
                (status == pb::SessionStatus::Active).then_some(())
            }
        })
        .await;
    }

    doomed.kill();

    eventually("the dead broker's session is closed as broker_lost", || {
        let mut client = client.clone();
        let id = created[0].clone();
        let instance = on_doomed.clone();
        async move {
            let state = session_state(&mut client, &instance, &id).await;
            (state == (pb::SessionStatus::Closed, pb::CloseReason::BrokerLost)).then_some(())
        }
    })
    .await;
    let (status, reason) = session_state(&mut client, &on_survivor, &created[1]).await;
    assert_eq!(status, pb::SessionStatus::Active);
    assert_eq!(reason, pb::CloseReason::Unspecified);

    // The dead broker's instance is at zero live sessions again: the lost one no longer counts.
    let live = client
        .list_sessions(pb::ListSessionsRequest {
            instance: on_doomed.id.clone(),
            include_closed: false,
        })
        .await
        .expect("list")
        .into_inner()
        .sessions;
    assert!(
        live.is_empty(),
        "no live session left on the dead broker: {live:?}"
    );
}

/// Waits until `api` lists `broker_id` as up at `endpoint`, without Docker.
async fn wait_registered(api: &Isolated, broker_id: &str, endpoint: &str) {
    let registry = registry_client(api, broker_id).await;
    eventually("the broker is registered and up", || {
        let mut registry = registry.clone();
        async move {
            registry
                .list_brokers(pb::ListBrokersRequest {})
                .await
                .is_ok_and(|response| {
                    response.into_inner().brokers.iter().any(|broker| {
                        broker.id == broker_id
                            && broker.up
                            && broker.endpoint == endpoint
                            && !broker.docker
                    })
                })
                .then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_registers_itself_and_again_when_session_api_forgets_it() {
    let Some(first_database) = FreshDatabase::create(Backend::Sqlite).await else {
        return;
    };
    // The broker starts first, pointed at an address where session-api is not serving yet.
    let reserved = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = reserved.local_addr().expect("address");
    // The test keeps the listening socket itself across the restart below, so the address is
    // never free for another process to take; connections made while nobody accepts wait in
    // its backlog for the next session-api.
    let kept = reserved
        .try_clone()
        .expect("a second handle on the listener");
    let broker = start_registering_broker("self-registered", &format!("http://{address}"));
    let api = start_session_api_on(reserved, first_database.url(), &[]);

    wait_registered(&api, "self-registered", &broker.endpoint()).await;
    // Sessions are placed on it and run there.
    let mut client = session_client(&api).await;
    let instance = register_instance(&mut client, "on-registered", "self-registered", 5).await;
    let attachment = client
        .create_session(pb::CreateSessionRequest {
            instance: instance.id.clone(),
            ..Default::default()
        })
        .await
        .expect("create session")
        .into_inner();
    assert_eq!(
        attachment.attach.expect("attach target").broker_endpoint,
        broker.endpoint()
    );
    let mut broker_client =
        broker_client_as(&broker, &broker_control_credential("self-registered")).await;
    assert_eq!(
        broker_processes(&mut broker_client).await,
        vec![attachment.session.expect("session").id]
    );

    // session-api comes back on an empty database at the same address: the broker's heartbeat
    // gets NOT_FOUND and it registers again, with nobody telling it to.
    api.kill();
    let Some(second_database) = FreshDatabase::create(Backend::Sqlite).await else {
        return;
    };
    let api = start_session_api_on(kept, second_database.url(), &[]);
    wait_registered(&api, "self-registered", &broker.endpoint()).await;
}

/// The state of the terminal of `session_id` as session-api's record has it.
async fn recorded_terminal(
    client: &mut SessionClient,
    instance: &pb::Instance,
    session_id: &str,
) -> Option<broker_pb::TerminalActivity> {
    client
        .get_session(pb::GetSessionRequest {
            instance: instance.id.clone(),
            session_id: session_id.to_owned(),
        })
        .await
        .expect("get session")
        .into_inner()
        .terminal
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn what_a_terminal_did_while_session_api_was_down_is_read_from_the_brokers_snapshot() {
    let Some(database) = FreshDatabase::create(Backend::Sqlite).await else {
        return;
    };
    let broker = start_broker();
    let api = start_session_api(database.url(), &[("b", broker.endpoint())]);
    let mut client = session_client(&api).await;
    let instance = client
        .register_instance(pb::RegisterInstanceRequest {
            name: "watched".to_owned(),
            target: Some(broker_pb::Target {
                kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
            }),
            // An interactive bash: its prompts and commands are marked.
            command: vec!["bash".into()],
            max_sessions: 5,
            broker_id: "b".to_owned(),
            ..Default::default()
        })
        .await
        .expect("register instance")
        .into_inner();
    let session_id = client
        .create_session(pb::CreateSessionRequest {
            instance: instance.id.clone(),
            ..Default::default()
        })
        .await
        .expect("create session")
        .into_inner()
        .session
        .expect("session")
        .id;
    eventually("the record shows the shell at its prompt", || {
        let mut client = client.clone();
        let (instance, session_id) = (instance.clone(), session_id.clone());
        async move {
            let terminal = recorded_terminal(&mut client, &instance, &session_id).await?;
            (terminal.state() == broker_pb::TerminalState::AtPrompt).then_some(())
        }
    })
    .await;

    // While session-api is down, a program asks for the user: the broker's event is missed.
    api.kill();
    let mut broker_client = broker_client(&broker).await;
    broker_client
        .send_input(broker_pb::SendInputRequest {
            session_id: session_id.clone(),
            items: vec![broker_pb::InputItem {
                item: Some(broker_pb::input_item::Item::Text(
                    "printf '\\033]9;needs you\\007'; read answer\r".to_owned(),
                )),
            }],
            ..Default::default()
        })
        .await
        .expect("input to the broker");
    eventually("the broker sees the terminal wait for input", || {
        let mut broker_client = broker_client.clone();
        let session_id = session_id.clone();
        async move {
            let info = broker_client
                .get(broker_pb::GetRequest { session_id })
                .await
                .ok()?
                .into_inner();
            (info.terminal?.state() == broker_pb::TerminalState::WaitingForInput).then_some(())
        }
    })
    .await;

    // A session-api back on the same records learns it from the broker's snapshot, with no
    // further change on the terminal to report it.
    let api = start_session_api(database.url(), &[("b", broker.endpoint())]);
    let client = session_client(&api).await;
    let terminal = eventually("the record catches up with the terminal", || {
        let mut client = client.clone();
        let (instance, session_id) = (instance.clone(), session_id.clone());
        async move {
            let terminal = recorded_terminal(&mut client, &instance, &session_id).await?;
            (terminal.state() == broker_pb::TerminalState::WaitingForInput).then_some(terminal)
        }
    })
    .await;
    assert_eq!(
        terminal.notification.map(|notification| notification.text),
        Some("needs you".to_owned())
    );
}
