//! The audit trail in the store, on both databases: a close is recorded once with who closed
//! it, a takeover once whichever of its two facts arrives first, listings filter and page
//! without losing or repeating an event, for pages of any size through the tokens handed out,
//! the events past the retention are deleted (by the store in batches, and by session-api's own
//! sweep), and what brokers report is recorded once each, in batches, whichever replica hears
//! it.

use proptest::prelude::*;
use ptyhub_model::Role;
use ptyhub_test_support::fuzz;
use ptyhub_wire::{Actor, Surface};
use session_api::audit::{AuditFilter, AuditKind, NewAuditEvent, parse_page_token};
use session_api::domain::CloseReason;
use session_api::store::{
    AUDIT_PRUNE_BATCH, REPORTED_SESSIONS_PER_TRANSACTION, ReportedEvent, Store, TAKEN_OVER,
};
use uuid::Uuid;

use crate::store::{migrated_store, new_instance, new_session};
use crate::support::{Backend, FreshDatabase, eventually, session_client, start_session_api_with};
use ptyhub_proto::session::v1 as pb;

fn person(name: &str) -> Actor {
    Actor::new(name, Some("127.0.0.1:40000".into()), Surface::WebSocket)
}

fn stream_event(
    kind: AuditKind,
    who: &Actor,
    instance_id: Uuid,
    session_id: Uuid,
    attachment_id: Uuid,
) -> NewAuditEvent {
    NewAuditEvent {
        role: Some(Role::Controller),
        attachment_id: Some(attachment_id),
        ..NewAuditEvent::new(kind, who).session(instance_id, session_id)
    }
}

async fn everything(store: &Store, filter: AuditFilter) -> Vec<session_api::audit::AuditEvent> {
    store
        .list_audit_events(&filter.validated().expect("a valid filter"))
        .await
        .expect("list")
        .events
}

async fn live_session(store: &Store, name: &str) -> (Uuid, Uuid) {
    let instance = store
        .insert_instance(&new_instance(name, 5), "b1")
        .await
        .expect("instance");
    let session = new_session(store, instance.id).await;
    (instance.id, session.id)
}

both_databases!(
    a_close_is_recorded_once_with_who_closed_it,
    |backend| async move {
        let Some((_database, store)) = migrated_store(backend).await else {
            return;
        };
        let (instance_id, session_id) = live_session(&store, "closing").await;
        let alice = person("alice");
        store
            .close_session(session_id, CloseReason::ClosedByUser, Some(&alice))
            .await
            .expect("close")
            .expect("was live");
        // A second close changes nothing and records nothing.
        let again = store
            .close_session(session_id, CloseReason::IdleReaped, Some(&Actor::system()))
            .await
            .expect("close again");
        assert!(again.is_none());
        let events = everything(
            &store,
            AuditFilter {
                session_id: Some(session_id),
                ..AuditFilter::default()
            },
        )
        .await;
        assert_eq!(events.len(), 1, "{events:?}");
        let closed = &events[0];
        assert_eq!(closed.kind, AuditKind::SessionClosed);
        assert_eq!(closed.principal, "alice");
        assert_eq!(closed.instance_id, Some(instance_id));
        assert_eq!(closed.client_address.as_deref(), Some("127.0.0.1:40000"));
        assert_eq!(closed.surface, "websocket");
        assert_eq!(
            closed.detail.get("reason").map(String::as_str),
            Some("closed_by_user")
        );
    }
);

both_databases!(
    a_takeover_is_recorded_once_whichever_fact_arrives_first,
    |backend| async move {
        let Some((_database, store)) = migrated_store(backend).await else {
            return;
        };
        let (alice, bob) = (person("alice"), person("bob"));
        // Order 1: bob's attach before alice's detach; order 2: the other way round.
        for detach_first in [false, true] {
            let (instance_id, session_id) =
                live_session(&store, &format!("takeover-{detach_first}")).await;
            let (old, new) = (Uuid::new_v4(), Uuid::new_v4());
            let event = |kind, who: &Actor, attachment| {
                stream_event(kind, who, instance_id, session_id, attachment)
            };
            store
                .record_audit_event(event(AuditKind::Attached, &alice, old))
                .await
                .expect("alice attaches");
            let detach = event(AuditKind::Detached, &alice, old).detail("reason", TAKEN_OVER);
            let attach = event(AuditKind::Attached, &bob, new);
            let (first, second) = if detach_first {
                (detach, attach)
            } else {
                (attach, detach)
            };
            store.record_audit_event(first).await.expect("first fact");
            store.record_audit_event(second).await.expect("second fact");
            // bob's own detach later adds no takeover.
            store
                .record_audit_event(
                    event(AuditKind::Detached, &bob, new).detail("reason", "closed"),
                )
                .await
                .expect("bob leaves");

            let events = everything(
                &store,
                AuditFilter {
                    session_id: Some(session_id),
                    ..AuditFilter::default()
                },
            )
            .await;
            let takeovers: Vec<_> = events
                .iter()
                .filter(|event| event.kind == AuditKind::Takeover)
                .collect();
            assert_eq!(
                takeovers.len(),
                1,
                "detach first: {detach_first}: {events:?}"
            );
            let takeover = takeovers[0];
            assert_eq!(takeover.principal, "bob");
            assert_eq!(takeover.attachment_id, Some(new));
            assert_eq!(
                takeover.detail.get("from").map(String::as_str),
                Some("alice")
            );
            assert_eq!(
                takeover.detail.get("from_attachment"),
                Some(&old.to_string())
            );
        }
    }
);

both_databases!(
    a_stream_granted_control_is_taken_over_by_the_controller_after_its_grant,
    |backend| async move {
        let Some((_database, store)) = migrated_store(backend).await else {
            return;
        };
        let (instance_id, session_id) = live_session(&store, "granted").await;
        let (alice, bob, xavier, carol) = (
            person("alice"),
            person("bob"),
            person("xavier"),
            person("carol"),
        );
        let (a, b, x, c) = (
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
        );
        let event = |kind, who: &Actor, attachment| {
            stream_event(kind, who, instance_id, session_id, attachment)
        };
        // Bob attaches to watch; Xavier takes control from Alice; Bob is granted control (no
        // stream event), and Carol takes it from him: his detach is a controller's.
        for event in [
            event(AuditKind::Attached, &alice, a),
            NewAuditEvent {
                role: Some(Role::Viewer),
                ..event(AuditKind::Attached, &bob, b)
            },
            event(AuditKind::Attached, &xavier, x),
            event(AuditKind::Detached, &alice, a).detail("reason", TAKEN_OVER),
            event(AuditKind::Attached, &carol, c),
            event(AuditKind::Detached, &bob, b).detail("reason", TAKEN_OVER),
        ] {
            store.record_audit_event(event).await.expect("record");
        }
        let events = everything(
            &store,
            AuditFilter {
                session_id: Some(session_id),
                ..AuditFilter::default()
            },
        )
        .await;
        let takeovers: Vec<(String, Option<Uuid>, Option<&String>)> = events
            .iter()
            .filter(|event| event.kind == AuditKind::Takeover)
            .map(|event| {
                (
                    event.principal.clone(),
                    event.attachment_id,
                    event.detail.get("from_attachment"),
                )
            })
            .collect();
        assert_eq!(
            takeovers,
            [
                ("xavier".to_owned(), Some(x), Some(&a.to_string())),
                ("carol".to_owned(), Some(c), Some(&b.to_string())),
            ],
            "{events:?}"
        );
    }
);

both_databases!(
    a_controller_that_leaves_normally_is_not_taken_over,
    |backend| async move {
        let Some((_database, store)) = migrated_store(backend).await else {
            return;
        };
        let (instance_id, session_id) = live_session(&store, "reload").await;
        let (first, second) = (Uuid::new_v4(), Uuid::new_v4());
        let alice = person("alice");
        for event in [
            stream_event(AuditKind::Attached, &alice, instance_id, session_id, first),
            stream_event(AuditKind::Attached, &alice, instance_id, session_id, second),
            stream_event(AuditKind::Detached, &alice, instance_id, session_id, first)
                .detail("reason", "closed"),
        ] {
            store.record_audit_event(event).await.expect("record");
        }
        let events = everything(
            &store,
            AuditFilter {
                session_id: Some(session_id),
                ..AuditFilter::default()
            },
        )
        .await;
        assert!(
            events.iter().all(|event| event.kind != AuditKind::Takeover),
            "{events:?}"
        );
    }
);

both_databases!(
    listings_filter_and_page_without_losing_an_event,
    |backend| async move {
        let Some((_database, store)) = migrated_store(backend).await else {
            return;
        };
        let (mine, _) = live_session(&store, "mine").await;
        let (theirs, _) = live_session(&store, "theirs").await;
        let (alice, bob) = (person("alice"), person("bob"));
        for index in 0..7 {
            let who = if index % 2 == 0 { &alice } else { &bob };
            let instance = if index < 5 { mine } else { theirs };
            store
                .record_audit_event(
                    NewAuditEvent::new(AuditKind::SessionRenamed, who)
                        .instance(instance)
                        .detail("name", format!("name {index}")),
                )
                .await
                .expect("record");
        }
        store
            .record_audit_event(
                NewAuditEvent::new(AuditKind::Refused, &Actor::unknown(None, Surface::Rest))
                    .detail("reason", "unauthenticated"),
            )
            .await
            .expect("a refusal about no instance");

        let all = everything(&store, AuditFilter::default()).await;
        assert_eq!(all.len(), 8);
        assert!(
            all.windows(2).all(|pair| pair[0].id < pair[1].id),
            "oldest first"
        );

        // Pages of three: every event once, in order.
        let mut paged = Vec::new();
        let mut after_id = None;
        loop {
            let page = store
                .list_audit_events(
                    &AuditFilter {
                        page_size: 3,
                        after_id,
                        ..AuditFilter::default()
                    }
                    .validated()
                    .unwrap(),
                )
                .await
                .expect("page");
            assert!(page.events.len() <= 3);
            paged.extend(page.events);
            match page.next_after_id {
                Some(id) => after_id = Some(id),
                None => break,
            }
        }
        assert_eq!(
            paged.iter().map(|event| event.id).collect::<Vec<_>>(),
            all.iter().map(|event| event.id).collect::<Vec<_>>()
        );

        let by_instance = everything(
            &store,
            AuditFilter {
                instance_id: Some(mine),
                ..AuditFilter::default()
            },
        )
        .await;
        assert_eq!(by_instance.len(), 5);
        let by_principal = everything(
            &store,
            AuditFilter {
                principal: Some("bob".into()),
                ..AuditFilter::default()
            },
        )
        .await;
        assert_eq!(by_principal.len(), 3);
        assert!(by_principal.iter().all(|event| event.principal == "bob"));
        // A scoped caller's listing: its instances only, and not the refusal about none.
        let scoped = everything(
            &store,
            AuditFilter {
                only_instances: Some(vec![theirs]),
                ..AuditFilter::default()
            },
        )
        .await;
        assert_eq!(scoped.len(), 2);
        assert!(scoped.iter().all(|event| event.instance_id == Some(theirs)));
        // A time range: from the fourth event on, and before a moment after the last.
        let from_fourth = everything(
            &store,
            AuditFilter {
                since: Some(all[3].at),
                until: Some(all[7].at + chrono::Duration::seconds(1)),
                ..AuditFilter::default()
            },
        )
        .await;
        assert!(from_fourth.iter().all(|event| event.at >= all[3].at));
        assert!(from_fourth.iter().any(|event| event.id == all[7].id));
        let before_everything = everything(
            &store,
            AuditFilter {
                until: Some(all[0].at - chrono::Duration::seconds(1)),
                ..AuditFilter::default()
            },
        )
        .await;
        assert!(before_everything.is_empty());
    }
);

both_databases!(
    fuzz_pages_of_any_size_list_every_event_once_in_order_through_their_tokens,
    |backend| async move {
        let Some((_database, store)) = migrated_store(backend).await else {
            return;
        };
        // A case: events (whose, about which of three instances), the sizes of the pages read
        // one after another, and which filter lists them.
        let case = (
            prop::collection::vec((0..3usize, 0..3usize), 0..30),
            prop::collection::vec(1..=7u32, 1..6),
            0..3u8,
        );
        let people = [person("alice"), person("bob"), person("carol")];
        for batch in fuzz::Batches::new(8, &case) {
            for (events, page_sizes, filter_kind) in &batch.inputs {
                let instances = [Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4()];
                for (who, about) in events {
                    store
                        .record_audit_event(
                            NewAuditEvent::new(AuditKind::SessionRenamed, &people[*who])
                                .instance(instances[*about]),
                        )
                        .await
                        .expect("record");
                }
                // Each filter keeps to this case's instances, so the whole listing is one page.
                let filter = match filter_kind {
                    0 => AuditFilter {
                        instance_id: Some(instances[0]),
                        ..AuditFilter::default()
                    },
                    1 => AuditFilter {
                        only_instances: Some(vec![instances[1], instances[2]]),
                        ..AuditFilter::default()
                    },
                    _ => AuditFilter {
                        principal: Some("bob".into()),
                        only_instances: Some(instances.to_vec()),
                        ..AuditFilter::default()
                    },
                };
                let all: Vec<u64> = everything(&store, filter.clone())
                    .await
                    .iter()
                    .map(|event| event.id)
                    .collect();
                let case = format!("{events:?}, pages of {page_sizes:?}, filter {filter_kind}");

                // Paged as a client pages: the token handed out, parsed back for the next page.
                let mut paged = Vec::new();
                let mut token = String::new();
                for page_number in 0.. {
                    assert!(page_number <= all.len(), "paging never ends: {case}");
                    let page_size = page_sizes[page_number % page_sizes.len()];
                    let page = store
                        .list_audit_events(
                            &AuditFilter {
                                after_id: parse_page_token(&token).expect("a token handed out"),
                                page_size,
                                ..filter.clone()
                            }
                            .validated()
                            .unwrap(),
                        )
                        .await
                        .expect("page");
                    assert!(page.events.len() <= page_size as usize, "{case}");
                    paged.extend(page.events.iter().map(|event| event.id));
                    token = page
                        .next_after_id
                        .map(|id| id.to_string())
                        .unwrap_or_default();
                    if token.is_empty() {
                        break;
                    }
                    // A page that says more follows is full, and more does follow.
                    assert_eq!(page.events.len(), page_size as usize, "{case}");
                    assert!(paged.len() < all.len(), "a next page of nothing: {case}");
                }
                assert_eq!(paged, all, "{case}");
            }
        }
    }
);

both_databases!(
    events_older_than_the_cutoff_are_deleted_in_batches,
    |backend| async move {
        let Some((_database, store)) = migrated_store(backend).await else {
            return;
        };
        let refusal = |index: u64| {
            NewAuditEvent::new(AuditKind::Refused, &Actor::unknown(None, Surface::Rest))
                .detail("reason", "unauthenticated")
                .detail("action", format!("GET /{index}"))
        };
        // More old events than one batch deletes, so that the sweep takes several.
        let old = AUDIT_PRUNE_BATCH * 2 + 7;
        for index in 0..old {
            store.record_audit_event(refusal(index)).await.expect("old");
        }
        // Times are kept to the microsecond: the cutoff falls strictly between old and new.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let cutoff = chrono::Utc::now();
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let mut kept = Vec::new();
        for index in 0..3 {
            kept.push(
                store
                    .record_audit_event(refusal(old + index))
                    .await
                    .expect("new"),
            );
        }

        let pruned = store.prune_audit_events(cutoff).await.expect("prune");
        assert_eq!(pruned, old);
        let left = everything(&store, AuditFilter::default()).await;
        assert_eq!(
            left.iter().map(|event| event.id).collect::<Vec<_>>(),
            kept,
            "the newer events stay, every older one is gone"
        );
        assert!(left.iter().all(|event| event.at >= cutoff));
        assert_eq!(
            store.prune_audit_events(cutoff).await.expect("again"),
            0,
            "a second sweep finds nothing"
        );
    }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn session_api_sweeps_the_trail_past_its_retention() {
    let Some(database) = FreshDatabase::create(Backend::Sqlite).await else {
        return;
    };
    let api = start_session_api_with(database.url(), &[], |config| {
        config.audit_retention = std::time::Duration::from_secs(1);
    });
    let mut client = session_client(&api).await;
    let refused = |action: &str| pb::RecordAuditEventRequest {
        kind: pb::AuditKind::Refused as i32,
        detail: [("reason", "unauthenticated"), ("action", action)]
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect(),
        ..Default::default()
    };
    let listed = |client: &crate::support::SessionClient| {
        let mut client = client.clone();
        async move {
            client
                .list_audit_events(pb::ListAuditEventsRequest {
                    page_size: 1000,
                    ..Default::default()
                })
                .await
                .expect("list")
                .into_inner()
                .events
        }
    };
    let old = client
        .record_audit_event(refused("GET /old"))
        .await
        .expect("record")
        .into_inner()
        .id;
    assert!(listed(&client).await.iter().any(|event| event.id == old));
    eventually("the event past the retention is deleted", || async {
        let events = listed(&client).await;
        (!events.iter().any(|event| event.id == old)).then_some(())
    })
    .await;
    // A fresh one is well within the second and stays.
    let fresh = client
        .record_audit_event(refused("GET /fresh"))
        .await
        .expect("record")
        .into_inner()
        .id;
    let events = listed(&client).await;
    assert_eq!(
        events.iter().map(|event| event.id).collect::<Vec<_>>(),
        vec![fresh]
    );
}

both_databases!(
    a_typed_input_window_is_recorded_once_whichever_replica_reports_it,
    |backend| async move {
        let Some((_database, store)) = migrated_store(backend).await else {
            return;
        };
        let (instance_id, session_id) = live_session(&store, "typing").await;
        let since = chrono::Utc::now() - chrono::Duration::seconds(1);
        let window = |since: chrono::DateTime<chrono::Utc>, bytes: u64| {
            NewAuditEvent::new(AuditKind::Input, &person("alice"))
                .session(instance_id, session_id)
                .detail("bytes", bytes.to_string())
                .detail("window", since.to_rfc3339())
                .detail("typed", "true")
        };
        // Two replicas hear the broker's one report: the first records it.
        assert!(
            store
                .record_once(window(since, 8), "window", since)
                .await
                .unwrap()
        );
        assert!(
            !store
                .record_once(window(since, 8), "window", since)
                .await
                .unwrap()
        );
        // The next window is an event of its own.
        let next = since + chrono::Duration::milliseconds(1200);
        assert!(
            store
                .record_once(window(next, 3), "window", next)
                .await
                .unwrap()
        );
        let events = everything(
            &store,
            AuditFilter {
                session_id: Some(session_id),
                ..AuditFilter::default()
            },
        )
        .await;
        let bytes: Vec<&str> = events
            .iter()
            .filter(|event| event.kind == AuditKind::Input)
            .map(|event| event.detail["bytes"].as_str())
            .collect();
        assert_eq!(bytes, ["8", "3"]);
    }
);

/// Replicas: two stores on one database, each hearing the same reports.
async fn second_replica(database: &FreshDatabase) -> Store {
    Store::connect(database.url()).await.expect("connect")
}

both_databases!(
    a_batch_of_reports_heard_by_two_replicas_is_recorded_once_each,
    |backend| async move {
        let Some((database, store)) = migrated_store(backend).await else {
            return;
        };
        let other = second_replica(&database).await;
        // More sessions than one transaction records on PostgreSQL, so that the batch takes
        // several there.
        let count = REPORTED_SESSIONS_PER_TRANSACTION + 44;
        let instance = store
            .insert_instance(&new_instance("typists", count as u32), "b1")
            .await
            .expect("instance");
        let mut sessions = Vec::new();
        for _ in 0..count {
            let session = new_session(&store, instance.id).await;
            sessions.push(session.id);
        }
        let since = chrono::Utc::now() - chrono::Duration::seconds(2);
        let next = since + chrono::Duration::seconds(1);
        // Each session's typist in two windows, and a second typist in the first window of
        // every third session.
        let report = |session_id: Uuid, principal: &str, since: chrono::DateTime<chrono::Utc>| {
            ReportedEvent {
                event: NewAuditEvent::new(AuditKind::Input, &person(principal))
                    .session(instance.id, session_id)
                    .detail("bytes", "5")
                    .detail("window", since.to_rfc3339())
                    .detail("typed", "true"),
                key: "window",
                reported_at: since,
            }
        };
        let mut reports = Vec::new();
        for (index, session_id) in sessions.iter().enumerate() {
            reports.push(report(*session_id, "alice", since));
            if index % 3 == 0 {
                reports.push(report(*session_id, "bob", since));
            }
        }
        for session_id in &sessions {
            reports.push(report(*session_id, "alice", next));
        }
        // The replicas record at once, one of them with the sessions in the other order (each
        // session's reports in the order heard): the locks are taken in one order whatever the
        // batch's, so neither waits on the other for ever.
        let mut other_order = reports.clone();
        other_order.sort_by_key(|report| std::cmp::Reverse(report.event.session_id));
        let begun = store.write_transactions_begun();
        let (first, second) = tokio::join!(
            store.record_reported(&reports),
            other.record_reported(&other_order)
        );
        let (first, second) = (
            first.expect("first replica"),
            second.expect("second replica"),
        );
        assert_eq!(first + second, reports.len(), "{first} + {second}");
        // PostgreSQL holds a lock per session, so a transaction takes a bounded number of
        // sessions; SQLite's one writer takes none, and writes the batch in one.
        let transactions = match backend {
            Backend::Postgres => count.div_ceil(REPORTED_SESSIONS_PER_TRANSACTION) as u64,
            Backend::Sqlite => 1,
        };
        assert_eq!(store.write_transactions_begun() - begun, transactions);
        // A replica that hears the batch again records nothing.
        assert_eq!(other.record_reported(&reports).await.expect("again"), 0);

        let mut events = Vec::new();
        let mut page = AuditFilter {
            instance_id: Some(instance.id),
            page_size: 1000,
            ..AuditFilter::default()
        };
        loop {
            let listed = store
                .list_audit_events(&page.clone().validated().unwrap())
                .await
                .expect("list");
            events.extend(listed.events);
            match listed.next_after_id {
                Some(after_id) => page.after_id = Some(after_id),
                None => break,
            }
        }
        let mut recorded: Vec<(Uuid, String, String)> = events
            .iter()
            .filter(|event| event.kind == AuditKind::Input)
            .map(|event| {
                (
                    event.session_id.unwrap(),
                    event.principal.clone(),
                    event.detail["window"].clone(),
                )
            })
            .collect();
        assert_eq!(recorded.len(), reports.len(), "each report recorded once");
        // A session's windows are in the order they were typed.
        for session_id in &sessions {
            let alice: Vec<&str> = recorded
                .iter()
                .filter(|(id, principal, _)| id == session_id && principal == "alice")
                .map(|(_, _, window)| window.as_str())
                .collect();
            assert_eq!(alice, [since.to_rfc3339(), next.to_rfc3339()]);
        }
        recorded.sort();
        recorded.dedup();
        assert_eq!(recorded.len(), reports.len(), "no report recorded twice");
    }
);

both_databases!(
    a_principal_typing_on_two_surfaces_in_one_window_is_recorded_for_each,
    |backend| async move {
        let Some((_database, store)) = migrated_store(backend).await else {
            return;
        };
        let (instance_id, session_id) = live_session(&store, "two-surfaces").await;
        let since = chrono::Utc::now() - chrono::Duration::seconds(1);
        // The broker tallies per principal and surface; the window is the session's.
        let window = |surface: Surface, bytes: &str| ReportedEvent {
            event: NewAuditEvent::new(AuditKind::Input, &Actor::new("alice", None, surface))
                .session(instance_id, session_id)
                .detail("bytes", bytes)
                .detail("window", since.to_rfc3339())
                .detail("typed", "true"),
            key: "window",
            reported_at: since,
        };
        let reports = [window(Surface::WebSocket, "4"), window(Surface::Cli, "9")];
        assert_eq!(store.record_reported(&reports).await.unwrap(), 2);
        assert_eq!(store.record_reported(&reports).await.unwrap(), 0);
        let events = everything(
            &store,
            AuditFilter {
                session_id: Some(session_id),
                ..AuditFilter::default()
            },
        )
        .await;
        let recorded: Vec<(&str, &str)> = events
            .iter()
            .map(|event| (event.surface.as_str(), event.detail["bytes"].as_str()))
            .collect();
        assert_eq!(recorded, [("websocket", "4"), ("cli", "9")]);
    }
);

both_databases!(
    a_reported_event_without_its_session_or_key_is_refused,
    |backend| async move {
        let Some((_database, store)) = migrated_store(backend).await else {
            return;
        };
        let (instance_id, session_id) = live_session(&store, "refused").await;
        let since = chrono::Utc::now();
        let fine = ReportedEvent {
            event: NewAuditEvent::new(AuditKind::Input, &person("alice"))
                .session(instance_id, session_id)
                .detail("window", since.to_rfc3339()),
            key: "window",
            reported_at: since,
        };
        let without_key = ReportedEvent {
            key: "at",
            ..fine.clone()
        };
        let refused = store
            .record_reported(&[fine, without_key])
            .await
            .expect_err("a report without its key");
        assert!(
            refused.to_string().contains("names its session and its at"),
            "{refused}"
        );
        assert!(
            everything(&store, AuditFilter::default()).await.is_empty(),
            "nothing of a refused batch is recorded"
        );
    }
);
