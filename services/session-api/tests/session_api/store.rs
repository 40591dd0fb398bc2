//! The store on both databases, without brokers: migrations, the cap and aliases under
//! concurrency, names, the batched title and bell.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use ptyhub_model::{
    Attendee, ControlMode, Notification, Progress, Role, TerminalActivity, TerminalSize,
    TerminalState,
};
use session_api::Error;
use session_api::domain::{
    Alias, ChangeKind, CloseReason, NewInstance, ScreenFacts, Session, SessionName, Target,
};
use session_api::store::{
    ACTIVITY_ROWS_PER_UPDATE, ActivityUpdate, Reservation, SessionReservation, Store,
    TerminalReport,
};

use crate::support::{Backend, FreshDatabase};

pub(crate) async fn migrated_store(backend: Backend) -> Option<(FreshDatabase, Store)> {
    let database = FreshDatabase::create(backend).await?;
    let store = Store::connect(database.url()).await.expect("connect");
    store.migrate().await.expect("migrate");
    Some((database, store))
}

pub(crate) fn new_instance(name: &str, max_sessions: u32) -> NewInstance {
    NewInstance {
        name: name.to_owned(),
        target: Target::Local,
        command: vec!["sh".into()],
        env: BTreeMap::new(),
        cwd: String::new(),
        user: String::new(),
        max_sessions,
        labels: BTreeMap::new(),
        broker_id: None,
        record: None,
        shell_integration: true,
        control_grant_timeout: None,
    }
}

/// Reserves a session without an alias on `instance_id`; panics unless a new one was created.
pub(crate) async fn new_session(store: &Store, instance_id: uuid::Uuid) -> Session {
    let Reservation::Created { session, .. } = store
        .reserve_session(&reservation(instance_id, vec![], false))
        .await
        .expect("reserve")
    else {
        panic!("expected a new session")
    };
    session
}

pub(crate) fn reservation(
    instance_id: uuid::Uuid,
    aliases: Vec<Alias>,
    reuse: bool,
) -> SessionReservation {
    SessionReservation {
        instance_id,
        name: None,
        aliases,
        size: TerminalSize::DEFAULT,
        control_mode: ControlMode::default(),
        reuse_alias_holder: reuse,
    }
}

both_databases!(
    migrations_apply_to_an_empty_database_and_are_idempotent,
    |backend| async move {
        let Some((database, store)) = migrated_store(backend).await else {
            return;
        };
        store
            .migrate()
            .await
            .expect("second migration run is a no-op");
        let again = Store::connect(database.url()).await.unwrap();
        again
            .migrate()
            .await
            .expect("a fresh connection migrates nothing");
        assert!(again.list_instances().await.unwrap().is_empty());
    }
);

both_databases!(
    concurrent_reservations_never_exceed_the_cap,
    |backend| async move {
        let Some((_database, store)) = migrated_store(backend).await else {
            return;
        };
        let instance = store
            .insert_instance(&new_instance("cap", 5), "b1")
            .await
            .unwrap();
        let store = Arc::new(store);
        let mut tasks = Vec::new();
        for _ in 0..50 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .reserve_session(&reservation(instance.id, vec![], false))
                    .await
            }));
        }
        let (mut created, mut refused) = (0, 0);
        for task in tasks {
            match task.await.unwrap() {
                Ok(Reservation::Created { .. }) => created += 1,
                Err(Error::CapReached(5)) => refused += 1,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!((created, refused), (5, 45));
        assert_eq!(
            store.list_sessions(instance.id, true).await.unwrap().len(),
            5
        );
    }
);

both_databases!(
    concurrent_alias_reservations_give_one_session,
    |backend| async move {
        let Some((_database, store)) = migrated_store(backend).await else {
            return;
        };
        let instance = store
            .insert_instance(&new_instance("alias", 5), "b1")
            .await
            .unwrap();
        let store = Arc::new(store);
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .reserve_session(&reservation(instance.id, vec![Alias::Default], true))
                    .await
            }));
        }
        let mut ids = std::collections::HashSet::new();
        let mut created = 0;
        for task in tasks {
            match task.await.unwrap().unwrap() {
                Reservation::Created { session, .. } => {
                    created += 1;
                    ids.insert(session.id);
                }
                Reservation::Existing { session, .. } => {
                    ids.insert(session.id);
                }
            }
        }
        assert_eq!(created, 1);
        assert_eq!(ids.len(), 1);
        let taken = store
            .reserve_session(&reservation(instance.id, vec![Alias::Default], false))
            .await;
        assert!(matches!(taken, Err(Error::AliasTaken { .. })), "{taken:?}");
    }
);

both_databases!(
    default_names_reuse_the_smallest_free_number,
    |backend| async move {
        let Some((_database, store)) = migrated_store(backend).await else {
            return;
        };
        let instance = store
            .insert_instance(&new_instance("names", 5), "b1")
            .await
            .unwrap();
        let mut ids = Vec::new();
        for expected in ["Session 1", "Session 2", "Session 3"] {
            let session = new_session(&store, instance.id).await;
            assert_eq!(session.name, expected);
            ids.push(session.id);
        }
        store
            .close_session(
                ids[1],
                session_api::domain::CloseReason::ClosedByUser,
                Some(&ptyhub_wire::Actor::system()),
            )
            .await
            .unwrap()
            .expect("was live");
        let session = new_session(&store, instance.id).await;
        assert_eq!(session.name, "Session 2");
        let renamed = store
            .rename_session(instance.id, ids[0], &SessionName::parse("build").unwrap())
            .await
            .unwrap();
        assert_eq!(renamed.name, "build");
        let session = new_session(&store, instance.id).await;
        assert_eq!(session.name, "Session 1");
    }
);

/// Records one batch that reports `screen` (and, when given, an attachment count) for
/// `session_id`; returns the changes it made, as (kind, title, last bell).
async fn record_screen(
    store: &Store,
    session_id: uuid::Uuid,
    screen: ScreenFacts,
    attached_clients: Option<u32>,
) -> Vec<(ChangeKind, Option<String>, Option<DateTime<Utc>>)> {
    let update = ActivityUpdate {
        screen: Some(screen),
        attached_clients,
        ..ActivityUpdate::default()
    };
    store
        .record_activity(&HashMap::from([(session_id, update)]))
        .await
        .expect("record activity")
        .into_iter()
        .map(|(kind, session): (ChangeKind, Session)| {
            assert_eq!(session.id, session_id);
            (kind, session.title, session.last_bell_at)
        })
        .collect()
}

both_databases!(
    a_title_and_bell_are_written_when_they_change_and_only_then,
    |backend| async move {
        let Some((_database, store)) = migrated_store(backend).await else {
            return;
        };
        let instance = store
            .insert_instance(&new_instance("screens", 5), "b1")
            .await
            .unwrap();
        let session = new_session(&store, instance.id).await;
        assert_eq!(
            (session.title.as_deref(), session.last_bell_at),
            (None, None)
        );
        // Nanoseconds, which neither database keeps: the same report again is no change.
        let bell = DateTime::from_timestamp(1_800_000_000, 123_456_789).unwrap();
        let stored_bell = DateTime::from_timestamp(1_800_000_000, 123_456_000).unwrap();

        assert_eq!(
            record_screen(&store, session.id, ScreenFacts::reported("", None), None).await,
            [],
            "no title and no bell is what the record says already"
        );
        assert_eq!(
            record_screen(
                &store,
                session.id,
                ScreenFacts::reported("vim", Some(bell)),
                None
            )
            .await,
            [(
                ChangeKind::Screen,
                Some("vim".to_owned()),
                Some(stored_bell)
            )]
        );
        assert_eq!(
            record_screen(
                &store,
                session.id,
                ScreenFacts::reported("vim", Some(bell)),
                None
            )
            .await,
            [],
            "the same title and bell again are not written"
        );
        // The attachment change and the screen change are two changes, each with the session
        // as it was right after it.
        assert_eq!(
            record_screen(
                &store,
                session.id,
                ScreenFacts::reported("", Some(bell)),
                Some(2)
            )
            .await,
            [
                (
                    ChangeKind::Attachments,
                    Some("vim".to_owned()),
                    Some(stored_bell)
                ),
                (ChangeKind::Screen, None, Some(stored_bell)),
            ]
        );
        let long = "標".repeat(5000);
        assert_eq!(
            record_screen(
                &store,
                session.id,
                ScreenFacts::reported(&long, Some(bell)),
                None
            )
            .await,
            [(
                ChangeKind::Screen,
                Some("標".repeat(1024)),
                Some(stored_bell)
            )],
            "a title is stored as at most 1024 characters"
        );
        let read = store.get_session(instance.id, session.id).await.unwrap();
        assert_eq!(read.title, Some("標".repeat(1024)));
        assert_eq!(read.last_bell_at, Some(stored_bell));

        store
            .close_session(
                session.id,
                CloseReason::ClosedByUser,
                Some(&ptyhub_wire::Actor::system()),
            )
            .await
            .unwrap()
            .expect("was live");
        assert_eq!(
            record_screen(
                &store,
                session.id,
                ScreenFacts::reported("late", None),
                None
            )
            .await,
            [],
            "a closed record is final"
        );
    }
);

both_databases!(
    what_a_terminal_does_is_written_when_it_changes_and_reads_back,
    |backend| async move {
        let Some((_database, store)) = migrated_store(backend).await else {
            return;
        };
        let instance = store
            .insert_instance(&new_instance("terminals", 5), "b1")
            .await
            .unwrap();
        assert!(instance.shell_integration, "on unless turned off");
        let off = store
            .insert_instance(
                &NewInstance {
                    shell_integration: false,
                    ..new_instance("plain", 5)
                },
                "b1",
            )
            .await
            .unwrap();
        assert!(
            !store
                .find_instance("plain")
                .await
                .unwrap()
                .shell_integration
        );
        assert_eq!(off.name, "plain");
        let session = new_session(&store, instance.id).await;
        assert_eq!(session.terminal, None, "nothing reported yet");
        let terminal = TerminalActivity {
            state: TerminalState::WaitingForInput,
            progress: Some(Progress::Percent(30)),
            notification: Some(Notification {
                text: "needs your permission".to_owned(),
                at: std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_800_000_000_123),
            }),
            cwd: Some("/srv/app".to_owned()),
            integrated: true,
            running_command: Some(4),
        };
        let written = store
            .record_terminal(session.id, &terminal, &[])
            .await
            .unwrap()
            .changed
            .expect("a change");
        assert_eq!(written.terminal.as_ref(), Some(&terminal));
        assert_eq!(
            store
                .record_terminal(session.id, &terminal, &[])
                .await
                .unwrap()
                .changed,
            None,
            "the same report again is no change"
        );
        let read = store.get_session(instance.id, session.id).await.unwrap();
        assert_eq!(read.terminal, Some(terminal.clone()));

        // A row written before the column took the contract's keys reads as it was meant.
        let older = r#"{"cwd":"/srv/app","integrated":true,"notification":{"at":"2027-01-15T08:00:00.123+00:00","text":"needs your permission"},"progress":{"kind":"normal","percent":30},"running_command":4,"state":"waiting_for_input"}"#;
        let backend = sea_orm::ConnectionTrait::get_database_backend(store.connection());
        let sql = match backend {
            sea_orm::DbBackend::Postgres => {
                "UPDATE terminal_sessions SET terminal = $1 WHERE id = $2"
            }
            _ => "UPDATE terminal_sessions SET terminal = ? WHERE id = ?",
        };
        let updated = sea_orm::ConnectionTrait::execute_raw(
            store.connection(),
            sea_orm::Statement::from_sql_and_values(
                backend,
                sql,
                [older.into(), session.id.into()],
            ),
        )
        .await
        .unwrap();
        assert_eq!(updated.rows_affected(), 1);
        let read = store.get_session(instance.id, session.id).await.unwrap();
        assert_eq!(read.terminal, Some(terminal));
    }
);

both_databases!(
    a_burst_of_terminal_reports_is_written_in_one_transaction_in_its_order,
    |backend| async move {
        let Some((database, store)) = migrated_store(backend).await else {
            return;
        };
        let instance = store
            .insert_instance(&new_instance("burst", 5), "b1")
            .await
            .unwrap();
        let mut sessions = Vec::new();
        for _ in 0..3 {
            sessions.push(new_session(&store, instance.id).await.id);
        }
        let doing = |state| TerminalActivity {
            state,
            progress: None,
            notification: None,
            cwd: None,
            integrated: false,
            running_command: None,
        };
        let running = doing(TerminalState::Running);
        let waiting = doing(TerminalState::WaitingForInput);
        let report = |session_id, terminal| TerminalReport {
            session_id,
            terminal,
            commands: &[],
        };
        let reports = [
            report(sessions[0], &running),
            report(sessions[1], &running),
            report(sessions[0], &waiting),
            report(sessions[2], &running),
            report(sessions[1], &running),
        ];
        let before = store.write_transactions_begun();
        let recorded = store.record_terminals(&reports).await.unwrap();
        assert_eq!(store.write_transactions_begun() - before, 1);
        let states: Vec<Option<TerminalState>> = recorded
            .iter()
            .map(|recorded| {
                let session = recorded.changed.as_ref()?;
                Some(session.terminal.as_ref().expect("recorded").state)
            })
            .collect();
        assert_eq!(
            states,
            [
                Some(TerminalState::Running),
                Some(TerminalState::Running),
                Some(TerminalState::WaitingForInput),
                Some(TerminalState::Running),
                None,
            ],
            "each report in its order; the same report again is no change"
        );
        let read = store.get_session(instance.id, sessions[0]).await.unwrap();
        assert_eq!(read.terminal, Some(waiting.clone()));

        // Two replicas recording the same sessions' bursts at once, in opposite orders:
        // neither waits on the other forever, and each burst is written whole.
        let other = Store::connect(database.url()).await.expect("connect");
        for round in 0..10 {
            let (first, second) = if round % 2 == 0 {
                (&running, &waiting)
            } else {
                (&waiting, &running)
            };
            let forward: Vec<TerminalReport<'_>> =
                sessions.iter().map(|id| report(*id, first)).collect();
            let backward: Vec<TerminalReport<'_>> = sessions
                .iter()
                .rev()
                .map(|id| report(*id, second))
                .collect();
            let (one, two) = tokio::join!(
                store.record_terminals(&forward),
                other.record_terminals(&backward)
            );
            one.expect("the first replica's burst");
            two.expect("the second replica's burst");
            let states: std::collections::HashSet<TerminalState> = {
                let mut states = std::collections::HashSet::new();
                for session_id in &sessions {
                    let session = store.get_session(instance.id, *session_id).await.unwrap();
                    states.insert(session.terminal.expect("recorded").state);
                }
                states
            };
            assert_eq!(
                states.len(),
                1,
                "one burst was written after the other: {states:?}"
            );
        }
    }
);

both_databases!(
    a_batch_moves_each_sessions_activity_time_forward_and_never_back,
    |backend| async move {
        let Some((database, store)) = migrated_store(backend).await else {
            return;
        };
        let other = Store::connect(database.url()).await.expect("connect");
        // More sessions than one statement writes, so that the batch takes several; and one
        // that no batch names.
        let count = ACTIVITY_ROWS_PER_UPDATE + 7;
        let instance = store
            .insert_instance(&new_instance("busy", count as u32 + 1), "b1")
            .await
            .unwrap();
        let mut sessions = Vec::new();
        for _ in 0..=count {
            let session = new_session(&store, instance.id).await;
            sessions.push(session);
        }
        let untouched = sessions.pop().unwrap();
        let activity = |at: DateTime<Utc>, attached: Option<u32>| ActivityUpdate {
            last_activity_at: Some(at),
            attached_clients: attached,
            ..ActivityUpdate::default()
        };
        // Nanoseconds: both databases keep microseconds.
        let newer = DateTime::from_timestamp(1_900_000_000, 123_456_789).unwrap();
        let older = newer - chrono::Duration::seconds(1);
        let batch = |at, attached| {
            sessions
                .iter()
                .map(|session| (session.id, activity(at, attached)))
                .collect::<HashMap<_, _>>()
        };
        // Two replicas write the same sessions at once, the one with the older reports second
        // or first: neither waits on the other for ever, and the newer time stands.
        let (newer_batch, older_batch) = (batch(newer, Some(1)), batch(older, None));
        let (first, second) = tokio::join!(
            store.record_activity(&newer_batch),
            other.record_activity(&older_batch)
        );
        let changed = first.expect("first replica");
        second.expect("second replica");
        assert_eq!(changed.len(), count, "every attachment count changed");
        let kept = DateTime::from_timestamp(1_900_000_000, 123_456_000).unwrap();
        for session in &sessions {
            let read = store.get_session(instance.id, session.id).await.unwrap();
            assert_eq!(read.last_activity_at, kept, "{}", session.id);
            assert_eq!(read.attached_clients, 1);
        }
        let read = store.get_session(instance.id, untouched.id).await.unwrap();
        assert_eq!(
            read.last_activity_at, untouched.last_activity_at,
            "a session no batch names keeps its time"
        );
        // An older report alone changes nothing; a newer one for a few moves just those.
        store.record_activity(&batch(older, None)).await.unwrap();
        let later = newer + chrono::Duration::seconds(5);
        let few: HashMap<_, _> = sessions[..3]
            .iter()
            .map(|session| (session.id, activity(later, None)))
            .collect();
        assert_eq!(store.record_activity(&few).await.unwrap(), []);
        for (index, session) in sessions.iter().enumerate() {
            let read = store.get_session(instance.id, session.id).await.unwrap();
            let expected = if index < 3 {
                kept + chrono::Duration::seconds(5)
            } else {
                kept
            };
            assert_eq!(read.last_activity_at, expected, "{index}");
        }
    }
);

both_databases!(
    presence_is_written_when_it_changes_and_read_back,
    |backend| async move {
        let Some((_database, store)) = migrated_store(backend).await else {
            return;
        };
        let instance = store
            .insert_instance(&new_instance("presence", 5), "b1")
            .await
            .unwrap();
        let session = new_session(&store, instance.id).await;
        assert_eq!(session.presence, [], "nobody is attached to a new session");
        let since = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let alice = |typing| Attendee {
            principal: "alice".to_owned(),
            role: Role::Controller,
            surface: "web".to_owned(),
            since,
            typing,
        };
        let report = |presence: Vec<Attendee>| {
            let update = ActivityUpdate {
                attached_clients: Some(presence.len() as u32),
                presence: Some(presence),
                ..ActivityUpdate::default()
            };
            let store = &store;
            async move {
                store
                    .record_activity(&HashMap::from([(session.id, update)]))
                    .await
                    .expect("record activity")
                    .into_iter()
                    .map(|(kind, session): (ChangeKind, Session)| (kind, session.presence))
                    .collect::<Vec<_>>()
            }
        };

        assert_eq!(
            report(vec![alice(false)]).await,
            [(ChangeKind::Attachments, vec![alice(false)])]
        );
        assert_eq!(
            report(vec![alice(false)]).await,
            [],
            "the same again is no change"
        );
        // Alice starts typing: the count is the same, the presence is not.
        assert_eq!(
            report(vec![alice(true)]).await,
            [(ChangeKind::Attachments, vec![alice(true)])]
        );
        let read = store.get_session(instance.id, session.id).await.unwrap();
        assert_eq!(read.presence, [alice(true)]);
        assert_eq!(
            report(Vec::new()).await,
            [(ChangeKind::Attachments, vec![])]
        );
    }
);

/// A database that cannot be reached is named in the start error by its URL, with the password
/// hidden: the error is printed and logged.
#[tokio::test]
async fn an_unreachable_database_is_named_by_its_host_without_the_password() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("its address");
    // A host that is there but is no database: each connection is hung up on at once.
    tokio::spawn(async move {
        while let Ok((connection, _)) = listener.accept().await {
            drop(connection);
        }
    });
    let url = format!("postgres://ptyhub:hunter2-secret@{address}/ptyhub");
    let error = Store::connect(&url)
        .await
        .expect_err("nothing there speaks PostgreSQL")
        .to_string();
    assert!(
        error.contains(&format!("postgres://ptyhub:***@{address}/ptyhub")),
        "{error}"
    );
    assert!(!error.contains("hunter2"), "{error}");
}
