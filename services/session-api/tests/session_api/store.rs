//! The store on both databases, without brokers: migrations, the cap and aliases under
//! concurrency, names.

use std::collections::BTreeMap;
use std::sync::Arc;

use ptyhub_wire::TerminalSize;
use session_api::Error;
use session_api::domain::{Alias, NewInstance, SessionName, Target};
use session_api::store::{Reservation, SessionReservation, Store};

use crate::support::{Backend, FreshDatabase};

async fn migrated_store(backend: Backend) -> Option<(FreshDatabase, Store)> {
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
    }
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
            let Reservation::Created { session, .. } = store
                .reserve_session(&reservation(instance.id, vec![], false))
                .await
                .unwrap()
            else {
                panic!("expected a new session")
            };
            assert_eq!(session.name, expected);
            ids.push(session.id);
        }
        store
            .close_session(ids[1], session_api::domain::CloseReason::ClosedByUser)
            .await
            .unwrap()
            .expect("was live");
        let Reservation::Created { session, .. } = store
            .reserve_session(&reservation(instance.id, vec![], false))
            .await
            .unwrap()
        else {
            panic!("expected a new session")
        };
        assert_eq!(session.name, "Session 2");
        let renamed = store
            .rename_session(instance.id, ids[0], &SessionName::parse("build").unwrap())
            .await
            .unwrap();
        assert_eq!(renamed.name, "build");
        let Reservation::Created { session, .. } = store
            .reserve_session(&reservation(instance.id, vec![], false))
            .await
            .unwrap()
        else {
            panic!("expected a new session")
        };
        assert_eq!(session.name, "Session 1");
    }
);
