//! session-api over gRPC with a real pty-broker (local backend) in-process, on both databases:
//! the cap under concurrency (one replica and two), aliases, names, the lifecycle.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as pb;
use tonic::Code;

use crate::support::*;

const CAP_MESSAGE: &str = "Maximum of 5 terminal sessions reached for this instance";

fn create(instance: &pb::Instance) -> pb::CreateSessionRequest {
    pb::CreateSessionRequest {
        instance: instance.id.clone(),
        ..Default::default()
    }
}

fn resolve_alias(instance: &pb::Instance, alias: &str) -> pb::ResolveSessionRequest {
    pb::ResolveSessionRequest {
        instance: instance.id.clone(),
        selector: Some(pb::resolve_session_request::Selector::Alias(alias.into())),
        create_if_absent: true,
        ..Default::default()
    }
}

async fn live_sessions(client: &mut SessionClient, instance: &pb::Instance) -> Vec<pb::Session> {
    client
        .list_sessions(pb::ListSessionsRequest {
            instance: instance.id.clone(),
            include_closed: false,
        })
        .await
        .unwrap()
        .into_inner()
        .sessions
}

async fn all_sessions(client: &mut SessionClient, instance: &pb::Instance) -> Vec<pb::Session> {
    client
        .list_sessions(pb::ListSessionsRequest {
            instance: instance.id.clone(),
            include_closed: true,
        })
        .await
        .unwrap()
        .into_inner()
        .sessions
}

/// Sends `count` creates at once, spread over `clients`; returns (successes, cap refusals).
async fn concurrent_creates(
    clients: &[SessionClient],
    instance: &pb::Instance,
    count: usize,
) -> (usize, usize) {
    let mut tasks = Vec::new();
    for index in 0..count {
        let mut client = clients[index % clients.len()].clone();
        let request = create(instance);
        tasks.push(tokio::spawn(
            async move { client.create_session(request).await },
        ));
    }
    let (mut created, mut refused) = (0, 0);
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => created += 1,
            Err(status) if status.code() == Code::ResourceExhausted => {
                assert_eq!(status.message(), CAP_MESSAGE);
                refused += 1;
            }
            Err(status) => panic!("unexpected {status:?}"),
        }
    }
    (created, refused)
}

both_databases!(
    fifty_concurrent_creates_give_exactly_the_cap,
    |backend| async move {
        let Some(database) = FreshDatabase::create(backend).await else {
            return;
        };
        let broker = start_broker();
        let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
        let mut client = session_client(&api).await;
        let instance = register_instance(&mut client, "cap", "b1", 5).await;

        let (created, refused) = concurrent_creates(&[client.clone()], &instance, 50).await;

        assert_eq!((created, refused), (5, 45));
        assert_eq!(
            all_sessions(&mut client, &instance).await.len(),
            5,
            "no row left by a refusal"
        );
        let mut broker_client = broker_client(&broker).await;
        assert_eq!(broker_processes(&mut broker_client).await.len(), 5);
    }
);

/// A close frees its slot under the cap only once the process has ended: a create it lets in
/// never runs beside the process it replaces. The process ignores SIGHUP and SIGTERM, so it
/// lives through the broker's kill grace while the close is under way.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_close_frees_its_slot_only_once_the_process_ended() {
    let Some(database) = FreshDatabase::create(Backend::Sqlite).await else {
        return;
    };
    let broker = start_broker();
    let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
    let mut client = session_client(&api).await;
    let instance = register_instance(&mut client, "one-slot", "b1", 1).await;
    let mut request = create(&instance);
    request.command = vec![
        "sh".into(),
        "-c".into(),
        "trap '' HUP TERM; exec sleep 600".into(),
    ];
    let first = client
        .create_session(request)
        .await
        .expect("first create")
        .into_inner()
        .session
        .expect("a session");
    let mut broker_client = broker_client(&broker).await;
    assert_eq!(
        broker_processes(&mut broker_client).await,
        vec![first.id.clone()]
    );

    let mut closer = client.clone();
    let close = pb::CloseSessionRequest {
        instance: instance.id.clone(),
        session_id: first.id.clone(),
    };
    let closing = tokio::spawn(async move { closer.close_session(close).await });
    let refused_while_running = AtomicUsize::new(0);
    let second = eventually("a create gets the slot the close frees", || {
        let mut client = client.clone();
        let request = create(&instance);
        let refused_while_running = &refused_while_running;
        async move {
            match client.create_session(request).await {
                Ok(created) => Some(created.into_inner().session.expect("a session")),
                Err(status) => {
                    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                    refused_while_running.fetch_add(1, Ordering::Relaxed);
                    None
                }
            }
        }
    })
    .await;
    let running = broker_processes(&mut broker_client).await;
    assert!(
        !running.contains(&first.id),
        "a create got the slot while the closed session's process still ran: {running:?}"
    );
    assert_eq!(running, vec![second.id.clone()]);
    assert!(
        refused_while_running.into_inner() > 0,
        "no create was tried while the close was under way"
    );
    let closed = closing.await.unwrap().expect("close").into_inner();
    assert_eq!(closed.status, pb::SessionStatus::Closed as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_on_one_postgres_database_share_the_cap() {
    let Some(database) = FreshDatabase::create(Backend::Postgres).await else {
        return;
    };
    let broker = start_broker();
    let first = start_session_api(database.url(), &[("b1", broker.endpoint())]);
    let mut first_client = session_client(&first).await;
    let second = start_session_api(database.url(), &[("b1", broker.endpoint())]);
    let second_client = session_client(&second).await;
    let instance = register_instance(&mut first_client, "replicas", "b1", 5).await;

    let (created, refused) =
        concurrent_creates(&[first_client.clone(), second_client], &instance, 50).await;

    assert_eq!((created, refused), (5, 45));
    assert_eq!(all_sessions(&mut first_client, &instance).await.len(), 5);
    let mut broker_client = broker_client(&broker).await;
    assert_eq!(broker_processes(&mut broker_client).await.len(), 5);
}

/// Resolves `selector` twenty times at once, creating when absent: one session, one process,
/// holding `alias`.
async fn twenty_concurrent_resolves_give_one_session(
    backend: Backend,
    selector: pb::resolve_session_request::Selector,
    alias: &str,
) {
    let Some(database) = FreshDatabase::create(backend).await else {
        return;
    };
    let broker = start_broker();
    let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
    let mut client = session_client(&api).await;
    let instance = register_instance(&mut client, "alias", "b1", 5).await;

    let mut tasks = Vec::new();
    for _ in 0..20 {
        let mut client = client.clone();
        let request = pb::ResolveSessionRequest {
            instance: instance.id.clone(),
            selector: Some(selector.clone()),
            create_if_absent: true,
            ..Default::default()
        };
        tasks.push(tokio::spawn(async move {
            client.resolve_session(request).await
        }));
    }
    let mut ids = HashSet::new();
    let mut created = 0;
    for task in tasks {
        let attachment = task.await.unwrap().expect("resolve").into_inner();
        assert!(!attachment.attach.unwrap().ticket.is_empty());
        created += usize::from(attachment.created);
        let session = attachment.session.unwrap();
        assert_eq!(session.aliases, [alias]);
        ids.insert(session.id);
    }
    assert_eq!((ids.len(), created), (1, 1));
    assert_eq!(all_sessions(&mut client, &instance).await.len(), 1);
    let mut broker_client = broker_client(&broker).await;
    assert_eq!(
        broker_processes(&mut broker_client).await,
        ids.into_iter().collect::<Vec<_>>()
    );
}

both_databases!(
    twenty_concurrent_alias_resolves_give_one_session,
    |backend| twenty_concurrent_resolves_give_one_session(
        backend,
        pb::resolve_session_request::Selector::Alias("conversation-42".into()),
        "conversation-42",
    )
);

both_databases!(
    twenty_concurrent_opens_with_one_client_id_give_one_session,
    |backend| twenty_concurrent_resolves_give_one_session(
        backend,
        pb::resolve_session_request::Selector::ClientId("tab-7f3a".into()),
        "client:tab-7f3a",
    )
);

both_databases!(
    an_alias_held_by_a_live_session_is_refused_as_already_existing,
    |backend| async move {
        let Some(database) = FreshDatabase::create(backend).await else {
            return;
        };
        let broker = start_broker();
        let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
        let mut client = session_client(&api).await;
        let instance = register_instance(&mut client, "alias-conflict", "b1", 5).await;
        let with_aliases = |aliases: &[&str]| pb::CreateSessionRequest {
            aliases: aliases.iter().map(|alias| (*alias).to_owned()).collect(),
            ..create(&instance)
        };
        let holder = client
            .create_session(with_aliases(&["conversation-7"]))
            .await
            .expect("the first session takes the alias")
            .into_inner()
            .session
            .expect("a session");

        let refused = client
            .create_session(with_aliases(&["conversation-8", "conversation-7"]))
            .await
            .expect_err("a live session holds the alias");
        assert_eq!(refused.code(), Code::AlreadyExists);
        assert_eq!(
            refused.message(),
            format!("alias conversation-7 is held by live session {}", holder.id)
        );
        assert_eq!(
            all_sessions(&mut client, &instance).await.len(),
            1,
            "no row left by the refusal"
        );
        let mut broker_client = broker_client(&broker).await;
        assert_eq!(
            broker_processes(&mut broker_client).await,
            vec![holder.id.clone()]
        );

        // Closing the holder frees the alias for a new session.
        client
            .close_session(pb::CloseSessionRequest {
                instance: instance.id.clone(),
                session_id: holder.id.clone(),
            })
            .await
            .expect("close");
        let successor = client
            .create_session(with_aliases(&["conversation-7"]))
            .await
            .expect("the alias is free again")
            .into_inner()
            .session
            .expect("a session");
        assert_ne!(successor.id, holder.id);
        assert_eq!(successor.aliases, ["conversation-7"]);
    }
);

both_databases!(
    renaming_or_resetting_a_closed_session_is_refused_and_changes_nothing,
    |backend| async move {
        let Some(database) = FreshDatabase::create(backend).await else {
            return;
        };
        let broker = start_broker();
        let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
        let mut client = session_client(&api).await;
        let instance = register_instance(&mut client, "closed", "b1", 5).await;
        let session = client
            .create_session(create(&instance))
            .await
            .expect("create")
            .into_inner()
            .session
            .expect("a session");
        client
            .close_session(pb::CloseSessionRequest {
                instance: instance.id.clone(),
                session_id: session.id.clone(),
            })
            .await
            .expect("close");
        let closed_message = format!("session {} is closed", session.id);

        let renamed = client
            .rename_session(pb::RenameSessionRequest {
                instance: instance.id.clone(),
                session_id: session.id.clone(),
                name: "after the close".into(),
            })
            .await
            .expect_err("a closed session cannot be renamed");
        assert_eq!(
            (renamed.code(), renamed.message()),
            (Code::FailedPrecondition, closed_message.as_str())
        );
        let reset = client
            .reset_session(pb::ResetSessionRequest {
                instance: instance.id.clone(),
                session_id: session.id.clone(),
            })
            .await
            .expect_err("a closed session cannot be reset");
        assert_eq!(
            (reset.code(), reset.message()),
            (Code::FailedPrecondition, closed_message.as_str())
        );

        let record = client
            .get_session(pb::GetSessionRequest {
                instance: instance.id.clone(),
                session_id: session.id.clone(),
            })
            .await
            .expect("get")
            .into_inner();
        assert_eq!(record.status(), pb::SessionStatus::Closed);
        assert_eq!(record.close_reason(), pb::CloseReason::ClosedByUser);
        assert_eq!(record.name, session.name);
        let mut broker_client = broker_client(&broker).await;
        assert!(
            broker_processes(&mut broker_client).await.is_empty(),
            "a refused reset starts nothing"
        );
    }
);

both_databases!(
    default_counts_and_closing_frees_the_slot_and_the_alias,
    |backend| async move {
        let Some(database) = FreshDatabase::create(backend).await else {
            return;
        };
        let broker = start_broker();
        let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
        let mut client = session_client(&api).await;
        let instance = register_instance(&mut client, "default", "b1", 2).await;

        let default = client
            .resolve_session(pb::ResolveSessionRequest {
                instance: instance.id.clone(),
                selector: Some(pb::resolve_session_request::Selector::Default(true)),
                create_if_absent: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .session
            .unwrap();
        assert_eq!(default.aliases, vec!["default".to_owned()]);
        client
            .create_session(create(&instance))
            .await
            .expect("second slot");
        let refused = client.create_session(create(&instance)).await.unwrap_err();
        assert_eq!(refused.code(), Code::ResourceExhausted);
        assert_eq!(
            refused.message(),
            "Maximum of 2 terminal sessions reached for this instance"
        );

        let closed = client
            .close_session(pb::CloseSessionRequest {
                instance: instance.id.clone(),
                session_id: default.id.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(closed.status, pb::SessionStatus::Closed as i32);
        assert_eq!(closed.close_reason, pb::CloseReason::ClosedByUser as i32);

        let reopened = client
            .resolve_session(resolve_alias(&instance, "default"))
            .await
            .expect("the slot and the alias are free again")
            .into_inner();
        assert!(reopened.created);
        assert_ne!(reopened.session.unwrap().id, default.id);
        let mut broker_client = broker_client(&broker).await;
        let processes = broker_processes(&mut broker_client).await;
        assert_eq!(processes.len(), 2);
        assert!(
            !processes.contains(&default.id),
            "the closed session's process is gone"
        );
    }
);

both_databases!(
    default_names_reuse_the_smallest_free_number,
    |backend| async move {
        let Some(database) = FreshDatabase::create(backend).await else {
            return;
        };
        let broker = start_broker();
        let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
        let mut client = session_client(&api).await;
        let instance = register_instance(&mut client, "names", "b1", 5).await;
        let mut sessions = Vec::new();
        for _ in 0..3 {
            let attachment = client
                .create_session(create(&instance))
                .await
                .unwrap()
                .into_inner();
            sessions.push(attachment.session.unwrap());
        }
        let names: Vec<&str> = sessions.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["Session 1", "Session 2", "Session 3"]);
        client
            .close_session(pb::CloseSessionRequest {
                instance: instance.id.clone(),
                session_id: sessions[0].id.clone(),
            })
            .await
            .unwrap();
        let next = client
            .create_session(create(&instance))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(next.session.unwrap().name, "Session 1");
    }
);

both_databases!(
    bad_names_are_invalid_and_change_nothing,
    |backend| async move {
        let Some(database) = FreshDatabase::create(backend).await else {
            return;
        };
        let broker = start_broker();
        let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
        let mut client = session_client(&api).await;
        let instance = register_instance(&mut client, "bad-names", "b1", 5).await;
        let session = client
            .create_session(pb::CreateSessionRequest {
                name: "  build  ".into(),
                ..create(&instance)
            })
            .await
            .unwrap()
            .into_inner()
            .session
            .unwrap();
        assert_eq!(session.name, "build");

        let bad_names = [
            "   ".to_owned(),
            "x".repeat(256),
            "a\u{1}b".to_owned(),
            "tab\there".to_owned(),
        ];
        for name in &bad_names {
            let refused = client
                .create_session(pb::CreateSessionRequest {
                    name: name.clone(),
                    ..create(&instance)
                })
                .await
                .unwrap_err();
            assert_eq!(refused.code(), Code::InvalidArgument, "create {name:?}");
            assert_eq!(refused.message(), refused.message().to_lowercase());
        }
        for name in bad_names.iter().chain([&String::new()]) {
            let refused = client
                .rename_session(pb::RenameSessionRequest {
                    instance: instance.id.clone(),
                    session_id: session.id.clone(),
                    name: name.clone(),
                })
                .await
                .unwrap_err();
            assert_eq!(refused.code(), Code::InvalidArgument, "rename {name:?}");
        }
        let after = all_sessions(&mut client, &instance).await;
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].name, "build");
        let mut broker_client = broker_client(&broker).await;
        assert_eq!(broker_processes(&mut broker_client).await.len(), 1);

        let renamed = client
            .rename_session(pb::RenameSessionRequest {
                instance: instance.id.clone(),
                session_id: session.id.clone(),
                name: "x".repeat(255),
            })
            .await
            .expect("255 characters is allowed")
            .into_inner();
        assert_eq!(renamed.name.len(), 255);
    }
);

both_databases!(
    an_exit_reaches_the_record_and_the_change_stream,
    |backend| async move {
        let Some(database) = FreshDatabase::create(backend).await else {
            return;
        };
        let broker = start_broker();
        let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
        let mut client = session_client(&api).await;
        let instance = register_instance(&mut client, "exits", "b1", 5).await;
        let mut changes = client
            .watch_sessions(pb::WatchSessionsRequest {
                instance: instance.id.clone(),
            })
            .await
            .unwrap()
            .into_inner();

        let mut expected = Vec::new();
        for (command, code, signal) in [("exit 7", 7, None), ("kill -TERM $$", 143, Some(15))] {
            let session = client
                .create_session(pb::CreateSessionRequest {
                    command: vec!["sh".into(), "-c".into(), command.to_owned()],
                    ..create(&instance)
                })
                .await
                .unwrap()
                .into_inner()
                .session
                .unwrap();
            expected.push((session.id, code, signal));
        }

        let mut seen_exits = HashSet::new();
        while seen_exits.len() < expected.len() {
            let change = tokio::time::timeout(PATIENCE, changes.next())
                .await
                .expect("a change within the patience")
                .expect("stream open")
                .expect("change");
            let session = change.session.unwrap();
            if session.status == pb::SessionStatus::Exited as i32 {
                let exit = session.exit.expect("an exited session has its exit status");
                let (_, code, signal) = expected.iter().find(|(id, ..)| *id == session.id).unwrap();
                assert_eq!((exit.code, exit.signal), (*code, *signal));
                assert_eq!(change.kind, pb::session_change::Kind::Status as i32);
                seen_exits.insert(session.id);
            }
        }
        for (id, code, signal) in &expected {
            let session = client
                .get_session(pb::GetSessionRequest {
                    instance: instance.id.clone(),
                    session_id: id.clone(),
                })
                .await
                .unwrap()
                .into_inner();
            // The tombstone (5 minutes) outlives the test: the record stays exited.
            assert_eq!(session.status(), pb::SessionStatus::Exited, "{session:?}");
            let exit = session.exit.unwrap();
            assert_eq!((exit.code, exit.signal), (*code, *signal));
        }
        // An exited session keeps its slot until it is closed: it can still be restarted.
        let live = live_sessions(&mut client, &instance).await;
        assert!(
            live.iter()
                .all(|s| s.status == pb::SessionStatus::Exited as i32)
        );
        assert_eq!(live.len(), expected.len());
    }
);

both_databases!(
    a_broker_killed_and_restarted_loses_its_old_sessions,
    |backend| async move {
        let Some(database) = FreshDatabase::create(backend).await else {
            return;
        };
        // A broker of its own credential, which session-api knows from its configuration and
        // which registers its new endpoint when it comes back.
        let broker = start_broker_of_its_own("b1");
        let api = start_session_api_with(database.url(), &[("b1", broker.endpoint())], |config| {
            bind_broker(config, "b1");
        });
        let mut client = session_client(&api).await;
        let instance = register_instance(&mut client, "broker-dies", "b1", 5).await;
        let mut old = Vec::new();
        for _ in 0..2 {
            let attachment = client
                .create_session(create(&instance))
                .await
                .unwrap()
                .into_inner();
            old.push(attachment.session.unwrap().id);
        }

        broker.kill();
        let restarted = start_broker_of_its_own("b1");
        let mut registry = registry_client(&api, "b1").await;
        registry
            .register_broker(pb::RegisterBrokerRequest {
                id: "b1".into(),
                endpoint: restarted.endpoint(),
                docker: false,
            })
            .await
            .unwrap();

        for id in &old {
            let session = eventually("old session closed as broker_lost", || {
                let mut client = client.clone();
                let request = pb::GetSessionRequest {
                    instance: instance.id.clone(),
                    session_id: id.clone(),
                };
                async move {
                    let session = client.get_session(request).await.unwrap().into_inner();
                    (session.status == pb::SessionStatus::Closed as i32).then_some(session)
                }
            })
            .await;
            assert_eq!(session.close_reason, pb::CloseReason::BrokerLost as i32);
        }
        let fresh = client
            .create_session(create(&instance))
            .await
            .expect("the restarted broker serves")
            .into_inner();
        let mut broker_client =
            broker_client_as(&restarted, &broker_control_credential("b1")).await;
        assert_eq!(
            broker_processes(&mut broker_client).await,
            vec![fresh.session.unwrap().id]
        );
    }
);

both_databases!(
    session_api_restarted_keeps_records_and_leaves_live_ptys_alone,
    |backend| async move {
        let Some(database) = FreshDatabase::create(backend).await else {
            return;
        };
        let broker = start_broker();
        let mut broker_client = broker_client(&broker).await;
        let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
        let mut client = session_client(&api).await;
        let instance = register_instance(&mut client, "restart", "b1", 5).await;
        let mut sessions = Vec::new();
        for _ in 0..3 {
            let attachment = client
                .create_session(create(&instance))
                .await
                .unwrap()
                .into_inner();
            sessions.push(attachment.session.unwrap().id);
        }
        let pids_before: Vec<(String, u32)> = broker_pids(&mut broker_client).await;

        api.kill();
        // While session-api is away: one process is killed behind its back, and one appears
        // that no record knows.
        broker_client
            .kill(broker_pb::KillRequest {
                session_id: sessions[2].clone(),
            })
            .await
            .unwrap();
        let stranger = uuid::Uuid::new_v4().to_string();
        broker_client
            .spawn(broker_pb::SpawnRequest {
                session_id: stranger.clone(),
                target: Some(broker_pb::Target {
                    kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
                }),
                command: vec!["sh".into()],
                ..Default::default()
            })
            .await
            .unwrap();

        let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
        let mut client = session_client(&api).await;
        eventually("the unknown process is ended", || {
            let mut broker_client = broker_client.clone();
            let stranger = stranger.clone();
            async move {
                (!broker_processes(&mut broker_client)
                    .await
                    .contains(&stranger))
                .then_some(())
            }
        })
        .await;
        let killed = eventually("the killed session is closed", || {
            let mut client = client.clone();
            let request = pb::GetSessionRequest {
                instance: instance.id.clone(),
                session_id: sessions[2].clone(),
            };
            async move {
                let session = client.get_session(request).await.unwrap().into_inner();
                (session.status == pb::SessionStatus::Closed as i32).then_some(session)
            }
        })
        .await;
        // Either the broker still lists the killed session (its reason, killed, reads as
        // closed_by_user) or it has forgotten it, and then the process is lost with no word.
        assert!(
            [
                pb::CloseReason::ClosedByUser as i32,
                pb::CloseReason::BrokerLost as i32
            ]
            .contains(&killed.close_reason),
            "{killed:?}"
        );

        let records = all_sessions(&mut client, &instance).await;
        assert_eq!(records.len(), 3, "every record kept");
        for id in &sessions[..2] {
            let record = records.iter().find(|s| s.id == *id).unwrap();
            assert_eq!(record.status, pb::SessionStatus::Active as i32);
        }
        let pids_after = broker_pids(&mut broker_client).await;
        for id in &sessions[..2] {
            let before = pids_before.iter().find(|(s, _)| s == id).unwrap();
            assert!(pids_after.contains(before), "live PTY {id} untouched");
        }
        drop(api);
    }
);

async fn broker_pids(broker: &mut BrokerClient) -> Vec<(String, u32)> {
    broker
        .list(broker_pb::ListRequest {})
        .await
        .unwrap()
        .into_inner()
        .sessions
        .into_iter()
        .filter(|s| s.state == broker_pb::SessionState::Running as i32)
        .map(|s| (s.session_id, s.pid))
        .collect()
}

#[tokio::test]
async fn calls_without_the_service_token_are_unauthenticated() {
    let Some(database) = FreshDatabase::create(Backend::Sqlite).await else {
        return;
    };
    let api = start_session_api(database.url(), &[]);
    let mut anonymous =
        pb::session_api_client::SessionApiClient::new(channel(&api.endpoint()).await);
    let refused = anonymous
        .list_instances(pb::ListInstancesRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);
    let mut wrong = tonic::Request::new(pb::ListInstancesRequest::default());
    wrong.metadata_mut().insert(
        "authorization",
        "Bearer not-the-token-at-all".parse().unwrap(),
    );
    assert_eq!(
        anonymous.list_instances(wrong).await.unwrap_err().code(),
        Code::Unauthenticated
    );
}

/// Health and reflection answer without a credential, and v1alpha reflection (all that Python's
/// `grpcio-reflection` speaks) lists exactly the services session-api serves.
#[tokio::test]
async fn health_and_v1alpha_reflection_answer_without_a_credential() {
    use tonic_health::pb::health_check_response::ServingStatus;

    let Some(database) = FreshDatabase::create(Backend::Sqlite).await else {
        return;
    };
    let api = start_session_api(database.url(), &[]);
    let channel = channel(&api.endpoint()).await;
    for service in [
        "",
        "ptyhub.session.v1.SessionApi",
        "ptyhub.session.v1.BrokerRegistry",
    ] {
        let status = tonic_health::pb::health_client::HealthClient::new(channel.clone())
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .expect("health needs no credential")
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "{service:?}");
    }

    let names = ptyhub_test_support::reflection::services_listed_by_v1alpha(channel)
        .await
        .expect("v1alpha reflection needs no credential");
    assert_eq!(
        names,
        [
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection",
            "ptyhub.session.v1.BrokerRegistry",
            "ptyhub.session.v1.SessionApi",
            "ptyhub.session.v1.ShareRegistry",
        ]
    );
}

both_databases!(
    graceful_shutdown_ends_change_streams_and_leaves_ptys_running,
    |backend| async move {
        let Some(database) = FreshDatabase::create(backend).await else {
            return;
        };
        let broker = start_broker();
        let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
        let mut client = session_client(&api).await;
        let instance = register_instance(&mut client, "shutdown", "b1", 5).await;
        let session = client
            .create_session(create(&instance))
            .await
            .unwrap()
            .into_inner();
        let mut changes = client
            .watch_sessions(pb::WatchSessionsRequest {
                instance: String::new(),
            })
            .await
            .unwrap()
            .into_inner();

        let mut health = tonic_health::pb::health_client::HealthClient::new(
            tonic::transport::Channel::from_shared(api.endpoint())
                .unwrap()
                .connect()
                .await
                .unwrap(),
        )
        .watch(tonic_health::pb::HealthCheckRequest {
            service: "ptyhub.session.v1.SessionApi".into(),
        })
        .await
        .unwrap()
        .into_inner();
        let serving = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
        assert_eq!(health.message().await.unwrap().unwrap().status, serving);

        // A health Watch is a stream the server does not end itself: the grace period bounds it.
        assert_eq!(api.stop().await, "stopped");

        let not_serving = tonic_health::pb::health_check_response::ServingStatus::NotServing as i32;
        assert_eq!(
            health.message().await.unwrap().unwrap().status,
            not_serving,
            "probes see the replica leave before it stops"
        );
        let ended = tokio::time::timeout(PATIENCE, async {
            loop {
                match changes.next().await {
                    Some(Ok(_)) => continue,
                    Some(Err(status)) => return Some(status),
                    None => return None,
                }
            }
        })
        .await
        .expect("the change stream ends at shutdown");
        let status = ended.expect("the stream ends with a status that says reconnect");
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        let mut broker_client = broker_client(&broker).await;
        assert_eq!(
            broker_processes(&mut broker_client).await,
            vec![session.session.unwrap().id]
        );
    }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn brokers_that_miss_heartbeats_go_down_and_placement_skips_them() {
    let Some(database) = FreshDatabase::create(Backend::Sqlite).await else {
        return;
    };
    let broker = start_broker();
    let api = start_session_api(database.url(), &[("real", broker.endpoint())]);
    let mut client = session_client(&api).await;
    let mut registry = registry_client(&api, "silent").await;

    // A broker that registers and then falls silent (nothing listens at its endpoint).
    let silent = registry
        .register_broker(pb::RegisterBrokerRequest {
            id: "silent".into(),
            endpoint: "http://127.0.0.1:9".into(),
            docker: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(silent.up);
    // A broker whose id session-api binds but that has not registered yet is told to.
    let unknown = registry_client(&api, "never-registered")
        .await
        .heartbeat(pb::HeartbeatRequest {
            id: "never-registered".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);

    eventually("the silent broker is down and the real one up", || {
        let mut registry = registry.clone();
        async move {
            let brokers = registry
                .list_brokers(pb::ListBrokersRequest {})
                .await
                .unwrap()
                .into_inner()
                .brokers;
            let up = |id: &str| brokers.iter().find(|b| b.id == id).map(|b| b.up);
            (up("silent") == Some(false) && up("real") == Some(true)).then_some(())
        }
    })
    .await;

    let placed = client
        .register_instance(pb::RegisterInstanceRequest {
            name: "placed".into(),
            target: Some(broker_pb::Target {
                kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(placed.broker_id, "real");
    assert_eq!(placed.max_sessions, 5);

    let bad = client
        .register_instance(pb::RegisterInstanceRequest {
            name: "too-many".into(),
            target: Some(broker_pb::Target {
                kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
            }),
            max_sessions: 51,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    let missing = client
        .get_instance(pb::GetInstanceRequest {
            instance: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
}

both_databases!(
    deleting_an_instance_closes_its_sessions_and_ends_their_processes,
    |backend| async move {
        let Some(database) = FreshDatabase::create(backend).await else {
            return;
        };
        let broker = start_broker();
        let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
        let mut client = session_client(&api).await;
        let instance = register_instance(&mut client, "doomed", "b1", 5).await;
        for _ in 0..2 {
            client.create_session(create(&instance)).await.unwrap();
        }
        let deleted = client
            .delete_instance(pb::DeleteInstanceRequest {
                instance: "doomed".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(deleted.closed_sessions, 2);
        let mut broker_client = broker_client(&broker).await;
        assert!(broker_processes(&mut broker_client).await.is_empty());
        let gone = client
            .list_sessions(pb::ListSessionsRequest {
                instance: instance.id.clone(),
                include_closed: true,
            })
            .await
            .unwrap_err();
        assert_eq!(gone.code(), Code::NotFound);
    }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_tier_is_admitted_only_where_it_belongs() {
    let Some(database) = FreshDatabase::create(Backend::Sqlite).await else {
        return;
    };
    let broker = start_broker();
    let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
    let mut gateway_at_registry = registry_client_as(&api, GATEWAY_TOKEN).await;
    let register = |id: &str, endpoint: &str| pb::RegisterBrokerRequest {
        id: id.into(),
        endpoint: endpoint.into(),
        docker: false,
    };

    // The gateway's credential reads the registry but cannot register a broker.
    gateway_at_registry
        .list_brokers(pb::ListBrokersRequest {})
        .await
        .expect("the gateway reads the registry");
    let refused = gateway_at_registry
        .register_broker(register("rogue", "http://127.0.0.1:9"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);

    // Nor does a broker's or session-api's own credential reach the session calls.
    let broker_token = broker_credential("broker-a");
    for token in [broker_token.as_str(), SERVICE_TOKEN] {
        let mut client =
            ptyhub_proto::session::v1::session_api_client::SessionApiClient::with_interceptor(
                channel(&api.endpoint()).await,
                auth(token),
            );
        let refused = client
            .list_instances(pb::ListInstancesRequest::default())
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::Unauthenticated, "{token}");
    }

    // Only session-api's credential reaches the broker's control calls.
    for token in [GATEWAY_TOKEN, broker_token.as_str()] {
        let mut client = broker_client_as(&broker, token).await;
        let refused = client.list(broker_pb::ListRequest {}).await.unwrap_err();
        assert_eq!(refused.code(), Code::Unauthenticated, "{token}");
        let refused = client
            .spawn(broker_pb::SpawnRequest::default())
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::Unauthenticated, "{token}");
    }
    broker_client(&broker)
        .await
        .list(broker_pb::ListRequest {})
        .await
        .expect("session-api's credential is admitted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn database_errors_reach_callers_without_their_text() {
    let Some(database) = FreshDatabase::create(Backend::Sqlite).await else {
        return;
    };
    let api = start_session_api(database.url(), &[]);
    let mut client = session_client(&api).await;
    client
        .list_instances(pb::ListInstancesRequest::default())
        .await
        .expect("the database answers");

    // The table goes away under session-api: the next read fails in the database.
    let store = session_api::store::Store::connect(database.url())
        .await
        .expect("connect");
    sea_orm::ConnectionTrait::execute_unprepared(store.connection(), "DROP TABLE session_aliases")
        .await
        .expect("drop a table");
    sea_orm::ConnectionTrait::execute_unprepared(
        store.connection(),
        "DROP TABLE terminal_sessions",
    )
    .await
    .expect("drop a table");
    sea_orm::ConnectionTrait::execute_unprepared(store.connection(), "DROP TABLE instances")
        .await
        .expect("drop a table");
    let failed = client
        .list_instances(pb::ListInstancesRequest::default())
        .await
        .unwrap_err();
    assert_eq!(failed.code(), Code::Internal);
    let message = failed.message().to_lowercase();
    for leaked in ["instances", "table", "sqlite", "sql"] {
        assert!(
            !message.contains(leaked),
            "the database's text leaked: {message}"
        );
    }
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sqlite_files_are_private_to_session_apis_user() {
    use std::os::unix::fs::PermissionsExt as _;

    let directory = tempfile::tempdir().expect("a temporary directory");
    let path = directory.path().join("sessions.db");
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let api = start_session_api(&url, &[]);
    let mut client = session_client(&api).await;
    client
        .list_instances(pb::ListInstancesRequest::default())
        .await
        .expect("the database answers");
    let mode = |path: &std::path::Path| {
        std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
    };
    assert_eq!(mode(&path), 0o600, "the database file");
    let wal = directory.path().join("sessions.db-wal");
    if wal.exists() {
        assert_eq!(mode(&wal), 0o600, "the WAL file");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn too_many_aliases_and_bidirectional_names_are_refused() {
    let Some(database) = FreshDatabase::create(Backend::Sqlite).await else {
        return;
    };
    let broker = start_broker();
    let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
    let mut client = session_client(&api).await;
    let instance = register_instance(&mut client, "limits", "b1", 5).await;

    let many = pb::CreateSessionRequest {
        instance: instance.id.clone(),
        aliases: (0..20_000).map(|index| format!("alias-{index}")).collect(),
        ..Default::default()
    };
    let refused = client.create_session(many).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(
        refused.message().contains("at most 16 aliases"),
        "{refused:?}"
    );
    let long = pb::CreateSessionRequest {
        instance: instance.id.clone(),
        aliases: vec!["a".repeat(129)],
        ..Default::default()
    };
    assert_eq!(
        client.create_session(long).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    for name in ["evil\u{202e}gnp.exe", "zero\u{200b}width", "bom\u{feff}"] {
        let refused = client
            .create_session(pb::CreateSessionRequest {
                instance: instance.id.clone(),
                name: name.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument, "{name:?}");
        let refused = client
            .register_instance(pb::RegisterInstanceRequest {
                name: name.into(),
                target: Some(broker_pb::Target {
                    kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
                }),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument, "{name:?}");
    }
    let sixteen = pb::CreateSessionRequest {
        instance: instance.id.clone(),
        aliases: (0..16).map(|index| format!("alias-{index}")).collect(),
        ..Default::default()
    };
    let created = client
        .create_session(sixteen)
        .await
        .expect("sixteen aliases are allowed")
        .into_inner();
    assert_eq!(created.session.unwrap().aliases.len(), 16);
    let mut broker_client = broker_client(&broker).await;
    assert_eq!(broker_processes(&mut broker_client).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn closed_sessions_are_pruned_after_the_retention() {
    let Some(database) = FreshDatabase::create(Backend::Sqlite).await else {
        return;
    };
    let broker = start_broker();
    let api = start_session_api_with(database.url(), &[("b1", broker.endpoint())], |config| {
        config.closed_session_retention = std::time::Duration::from_secs(1);
    });
    let mut client = session_client(&api).await;
    let instance = register_instance(&mut client, "pruned", "b1", 5).await;
    let closed = client
        .create_session(create(&instance))
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    let live = client
        .create_session(create(&instance))
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    client
        .close_session(pb::CloseSessionRequest {
            instance: instance.id.clone(),
            session_id: closed.id.clone(),
        })
        .await
        .unwrap();
    let list = || {
        let mut client = client.clone();
        let instance = instance.id.clone();
        async move {
            client
                .list_sessions(pb::ListSessionsRequest {
                    instance,
                    include_closed: true,
                })
                .await
                .unwrap()
                .into_inner()
                .sessions
        }
    };
    eventually("the closed session is pruned", || async {
        let sessions = list().await;
        (!sessions.iter().any(|session| session.id == closed.id)).then_some(())
    })
    .await;
    let sessions = list().await;
    assert!(
        sessions.iter().any(|session| session.id == live.id),
        "a live session is never pruned"
    );
    let gone = client
        .get_session(pb::GetSessionRequest {
            instance: instance.id.clone(),
            session_id: closed.id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
}

fn add_aliases(
    instance: &pb::Instance,
    session: &pb::Session,
    aliases: &[&str],
) -> pb::AddSessionAliasesRequest {
    pb::AddSessionAliasesRequest {
        instance: instance.id.clone(),
        session_id: session.id.clone(),
        aliases: aliases.iter().map(|alias| (*alias).to_owned()).collect(),
    }
}

async fn created_with_alias(
    client: &mut SessionClient,
    instance: &pb::Instance,
    alias: &str,
) -> pb::Session {
    client
        .create_session(pb::CreateSessionRequest {
            aliases: vec![alias.to_owned()],
            ..create(instance)
        })
        .await
        .expect("create")
        .into_inner()
        .session
        .expect("a session")
}

both_databases!(
    aliases_are_added_to_a_live_session_with_the_rules_of_creation,
    |backend| async move {
        let Some(database) = FreshDatabase::create(backend).await else {
            return;
        };
        let broker = start_broker();
        let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
        let mut client = session_client(&api).await;
        let instance = register_instance(&mut client, "later", "b1", 5).await;
        let first = created_with_alias(&mut client, &instance, "a1").await;
        let second = created_with_alias(&mut client, &instance, "b1").await;

        for _ in 0..2 {
            // Idempotent: the second call changes nothing and answers the same.
            let added = client
                .add_session_aliases(add_aliases(&instance, &first, &["a2", "a1", "a2"]))
                .await
                .expect("add")
                .into_inner();
            assert_eq!(added.aliases, ["a1", "a2"]);
        }
        let found = client
            .resolve_session(pb::ResolveSessionRequest {
                create_if_absent: false,
                ..resolve_alias(&instance, "a2")
            })
            .await
            .expect("the added alias opens the session")
            .into_inner();
        assert_eq!(found.session.expect("a session").id, first.id);

        let taken = client
            .add_session_aliases(add_aliases(&instance, &second, &["b2", "a2"]))
            .await
            .expect_err("another live session holds a2");
        assert_eq!(taken.code(), Code::AlreadyExists);
        assert_eq!(
            taken.message(),
            format!("alias a2 is held by live session {}", first.id)
        );
        // Two held and fifteen new make seventeen: one over the cap.
        let fifteen: Vec<String> = (0..15).map(|n| format!("x{n}")).collect();
        let fifteen: Vec<&str> = fifteen.iter().map(String::as_str).collect();
        for (aliases, why) in [
            (vec!["bad name"], "a bad alias"),
            (vec![], "no alias"),
            (fifteen, "17 in all"),
        ] {
            let refused = client
                .add_session_aliases(add_aliases(&instance, &first, &aliases))
                .await
                .expect_err(why);
            assert_eq!(refused.code(), Code::InvalidArgument, "{why}: {refused:?}");
        }
        let listed = live_sessions(&mut client, &instance).await;
        let aliases_of = |id: &str| {
            listed
                .iter()
                .find(|session| session.id == id)
                .map(|session| session.aliases.clone())
        };
        assert_eq!(
            aliases_of(&first.id),
            Some(vec!["a1".to_owned(), "a2".to_owned()])
        );
        assert_eq!(
            aliases_of(&second.id),
            Some(vec!["b1".to_owned()]),
            "nothing written"
        );

        let other = register_instance(&mut client, "other", "b1", 5).await;
        let elsewhere = client
            .add_session_aliases(add_aliases(&other, &first, &["z"]))
            .await
            .expect_err("a session of another instance");
        assert_eq!(elsewhere.code(), Code::NotFound);

        client
            .close_session(pb::CloseSessionRequest {
                instance: instance.id.clone(),
                session_id: first.id.clone(),
            })
            .await
            .expect("close");
        let closed = client
            .add_session_aliases(add_aliases(&instance, &first, &["z"]))
            .await
            .expect_err("a closed session");
        assert_eq!(closed.code(), Code::FailedPrecondition);
        let freed = client
            .add_session_aliases(add_aliases(&instance, &second, &["a2"]))
            .await
            .expect("a closed session's aliases are free")
            .into_inner();
        assert_eq!(freed.aliases, ["a2", "b1"]);
    }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_give_one_alias_to_one_live_session() {
    let Some(database) = FreshDatabase::create(Backend::Postgres).await else {
        return;
    };
    let broker = start_broker();
    let first = start_session_api(database.url(), &[("b1", broker.endpoint())]);
    let mut first_client = session_client(&first).await;
    let second = start_session_api(database.url(), &[("b1", broker.endpoint())]);
    let second_client = session_client(&second).await;
    let instance = register_instance(&mut first_client, "contested", "b1", 5).await;
    let sessions = [
        created_with_alias(&mut first_client, &instance, "one").await,
        created_with_alias(&mut first_client, &instance, "two").await,
    ];

    let mut tasks = Vec::new();
    for attempt in 0..20 {
        let mut client = [first_client.clone(), second_client.clone()][attempt % 2].clone();
        let request = add_aliases(&instance, &sessions[attempt / 2 % 2], &["shared"]);
        tasks.push(tokio::spawn(async move {
            client.add_session_aliases(request).await
        }));
    }
    let mut holders = HashSet::new();
    for task in tasks {
        match task.await.expect("the task") {
            Ok(session) => {
                holders.insert(session.into_inner().id);
            }
            Err(status) => assert_eq!(status.code(), Code::AlreadyExists, "{status:?}"),
        }
    }
    assert_eq!(holders.len(), 1, "one session holds the alias: {holders:?}");
    let holding: Vec<String> = live_sessions(&mut first_client, &instance)
        .await
        .into_iter()
        .filter(|session| session.aliases.iter().any(|alias| alias == "shared"))
        .map(|session| session.id)
        .collect();
    assert_eq!(holding.len(), 1, "{holding:?}");
    assert!(holders.contains(&holding[0]));
}

both_databases!(
    a_sessions_control_mode_is_stored_changed_and_refused_when_unknown,
    |backend| async move {
        let Some(database) = FreshDatabase::create(backend).await else {
            return;
        };
        let broker = start_broker();
        let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
        let mut client = session_client(&api).await;
        let instance = register_instance(&mut client, "control-mode", "b1", 5).await;
        let shared = broker_pb::ControlMode::Shared as i32;
        let exclusive = broker_pb::ControlMode::Exclusive as i32;

        let unspecified = client
            .create_session(create(&instance))
            .await
            .expect("create")
            .into_inner()
            .session
            .expect("a session");
        assert_eq!(unspecified.control_mode, exclusive, "the default");
        let created = client
            .create_session(pb::CreateSessionRequest {
                control_mode: shared,
                ..create(&instance)
            })
            .await
            .expect("create shared")
            .into_inner()
            .session
            .expect("a session");
        assert_eq!(created.control_mode, shared);
        let get = |session_id: String| pb::GetSessionRequest {
            instance: instance.id.clone(),
            session_id,
        };
        let stored = client.get_session(get(created.id.clone())).await.unwrap();
        assert_eq!(stored.into_inner().control_mode, shared, "read back");

        let update = |session_id: &str, control_mode| pb::UpdateSessionRequest {
            instance: instance.id.clone(),
            session_id: session_id.to_owned(),
            control_mode,
        };
        let changed = client
            .update_session(update(&created.id, exclusive))
            .await
            .expect("update")
            .into_inner();
        assert_eq!(changed.control_mode, exclusive);
        let unchanged = client
            .update_session(update(&created.id, 0))
            .await
            .expect("an update that changes nothing")
            .into_inner();
        assert_eq!(unchanged.control_mode, exclusive);
        let stored = client.get_session(get(created.id.clone())).await.unwrap();
        assert_eq!(stored.into_inner().control_mode, exclusive, "read back");

        // An unknown mode is refused, on a create (nothing spawned) and on an update.
        let refused = client
            .create_session(pb::CreateSessionRequest {
                control_mode: 99,
                ..create(&instance)
            })
            .await
            .expect_err("an unknown mode");
        assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
        assert!(refused.message().contains("control mode 99"), "{refused:?}");
        assert_eq!(live_sessions(&mut client, &instance).await.len(), 2);
        let refused = client
            .update_session(update(&created.id, 99))
            .await
            .expect_err("an unknown mode");
        assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
        let stored = client.get_session(get(created.id.clone())).await.unwrap();
        assert_eq!(stored.into_inner().control_mode, exclusive, "unchanged");

        // A closed session's mode is not changed.
        client
            .close_session(pb::CloseSessionRequest {
                instance: instance.id.clone(),
                session_id: created.id.clone(),
            })
            .await
            .expect("close");
        let refused = client
            .update_session(update(&created.id, shared))
            .await
            .expect_err("closed");
        assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_control_mode_the_broker_was_not_told_is_not_recorded() {
    let Some(database) = FreshDatabase::create(Backend::Sqlite).await else {
        return;
    };
    let broker = start_broker();
    let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
    let mut client = session_client(&api).await;
    let instance = register_instance(&mut client, "untold", "b1", 5).await;
    let session = client
        .create_session(create(&instance))
        .await
        .expect("create")
        .into_inner()
        .session
        .expect("a session");
    let exclusive = broker_pb::ControlMode::Exclusive as i32;
    assert_eq!(session.control_mode, exclusive);

    broker.kill();
    let refused = client
        .update_session(pb::UpdateSessionRequest {
            instance: instance.id.clone(),
            session_id: session.id.clone(),
            control_mode: broker_pb::ControlMode::Shared as i32,
        })
        .await
        .expect_err("the broker is gone");
    // UNAVAILABLE while the broker is only unreachable; FAILED_PRECONDITION once its sessions
    // are closed for it. Either way the terminal kept its mode, and so does the record.
    assert!(
        matches!(refused.code(), Code::Unavailable | Code::FailedPrecondition),
        "{refused:?}"
    );
    let stored = client
        .get_session(pb::GetSessionRequest {
            instance: instance.id.clone(),
            session_id: session.id.clone(),
        })
        .await
        .expect("get")
        .into_inner();
    assert_eq!(
        stored.control_mode, exclusive,
        "the record kept the old mode"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_instances_control_grant_timeout_is_bounded_stored_and_applied_by_its_broker() {
    let Some(database) = FreshDatabase::create(Backend::Sqlite).await else {
        return;
    };
    let broker = start_broker();
    let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
    let mut client = session_client(&api).await;
    let registration = |name: &str, seconds: Option<u32>| pb::RegisterInstanceRequest {
        name: name.into(),
        target: Some(broker_pb::Target {
            kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
        }),
        command: vec!["sh".into()],
        broker_id: "b1".into(),
        control_grant_timeout_secs: seconds,
        ..Default::default()
    };
    for seconds in [0, 3601] {
        let refused = client
            .register_instance(registration("out-of-bounds", Some(seconds)))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument, "{seconds}");
        assert!(
            refused.message().contains("control_grant_timeout"),
            "{refused:?}"
        );
    }
    let never = client
        .register_instance(registration("never", None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(never.control_grant_timeout_secs, None);
    let prompt = client
        .register_instance(registration("prompt", Some(1)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(prompt.control_grant_timeout_secs, Some(1));
    let stored = client
        .get_instance(pb::GetInstanceRequest {
            instance: "prompt".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stored.control_grant_timeout_secs, Some(1));

    // Its session's broker was told: a request nobody answers is granted when a second passed.
    let session = client
        .create_session(pb::CreateSessionRequest {
            instance: prompt.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .expect("a session");
    let mut broker_client = broker_client(&broker).await;
    broker_client
        .request_control_for(broker_pb::StandingControlRequest {
            session_id: session.id.clone(),
            requester: Some(broker_pb::TicketHolder {
                principal: "agent".into(),
                surface: "mcp".into(),
            }),
        })
        .await
        .expect("a standing request");
    let granted = ptyhub_test_support::poll_until(PATIENCE, POLL_INTERVAL, || {
        let mut broker_client = broker_client.clone();
        let session_id = session.id.clone();
        async move {
            let state = broker_client
                .get_control(broker_pb::GetControlRequest { session_id })
                .await
                .expect("the control state")
                .into_inner();
            state
                .reserved_for
                .filter(|reserved| reserved.principal == "agent")
        }
    })
    .await;
    assert!(
        granted.is_some(),
        "the request was never granted by timeout"
    );
}
