//! Webhooks on both databases: registration within the instance's bound and its checks, the
//! queue (one delivery per webhook and event however often it is reported, a state change
//! queued only by the write that made it, claims that hold a delivery for one attempt), and
//! deliveries from a running session-api to a receiver on 127.0.0.1: a real bash's first prompt
//! and a command that failed in it, signed; retries until a 2xx; a delivery that outlives a
//! restart of session-api; two replicas following one broker deliver each event once.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use hmac::{Hmac, Mac};
use ptyhub_model::{Command, Progress, TerminalActivity, TerminalState};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as pb;
use ptyhub_test_support::webhooks::{Answer, ReceivedRequest, WebhookReceiver};
use ptyhub_wire::{Actor, ErrorCode, Surface};
use session_api::Error;
use session_api::domain::Session;
use session_api::store::{AttemptResult, Store};
use session_api::webhooks::{
    DeliveryOutcome, MAX_WEBHOOKS_PER_INSTANCE, NewWebhook, WebhookEvent, WebhookService,
};
use sha2::Sha256;
use tonic::Code;

use crate::store::{migrated_store, new_instance, new_session};
use crate::support::*;

const SECRET: &str = "webhook-secret-for-tests-0123456789";

/// Someone acting over REST, as the gateway names them.
fn person(principal: &str) -> Actor {
    Actor::new(principal, None, Surface::Rest)
}

fn both_events(url: &str) -> NewWebhook {
    NewWebhook::new(
        url,
        &["state_changed".to_owned(), "command_finished".to_owned()],
        SECRET.to_owned(),
    )
    .expect("a valid webhook")
}

/// A store with one instance and one live session of it.
async fn store_with_session(backend: Backend) -> Option<(FreshDatabase, Store, Session)> {
    let (database, store) = migrated_store(backend).await?;
    let instance = store
        .insert_instance(&new_instance("hooked", 5), "b1")
        .await
        .unwrap();
    let session = new_session(&store, instance.id).await;
    Some((database, store, session))
}

fn terminal(state: TerminalState) -> TerminalActivity {
    TerminalActivity {
        state,
        integrated: true,
        ..TerminalActivity::default()
    }
}

fn finished_command(id: u64, exit_code: i32) -> Command {
    let started_at = SystemTime::now() - Duration::from_millis(40);
    Command {
        id,
        command: "false".into(),
        cwd: Some("/tmp".into()),
        started_at,
        ended_at: Some(started_at + Duration::from_millis(20)),
        exit_code: Some(exit_code),
        output_start: 100,
        output_end: Some(100),
    }
}

both_databases!(
    webhooks_are_registered_within_the_bound_listed_and_deleted,
    |backend| async move {
        let Some((_database, store)) = migrated_store(backend).await else {
            return;
        };
        let one = store
            .insert_instance(&new_instance("one", 5), "b1")
            .await
            .unwrap();
        let other = store
            .insert_instance(&new_instance("other", 5), "b1")
            .await
            .unwrap();
        let webhooks = WebhookService::new(store.clone());
        let mut ids = Vec::new();
        for n in 0..MAX_WEBHOOKS_PER_INSTANCE {
            let url = format!("https://hooks.example.com/{n}");
            let made = webhooks
                .create("one", both_events(&url), &person("alice"))
                .await
                .expect("within the bound");
            assert_eq!(made.url, url);
            assert_eq!(made.created_by, "alice");
            assert_eq!(made.last_delivery, None);
            ids.push(made.id);
        }
        let refused = webhooks
            .create(
                &one.id.to_string(),
                both_events("https://x.example.com/"),
                &person("alice"),
            )
            .await
            .expect_err("past the bound");
        assert!(matches!(refused, Error::TooManyWebhooks(20)), "{refused}");
        assert_eq!(refused.code(), ErrorCode::CapReached);
        // Another instance has a bound of its own.
        let theirs = webhooks
            .create(
                "other",
                both_events("https://x.example.com/"),
                &person("bob"),
            )
            .await
            .expect("another instance's first");

        let listed = webhooks.list("one").await.unwrap();
        assert_eq!(
            listed.iter().map(|webhook| webhook.id).collect::<Vec<_>>(),
            ids
        );
        assert_eq!(
            listed[0].events,
            [WebhookEvent::StateChanged, WebhookEvent::CommandFinished]
        );

        let not_ours = webhooks
            .delete("one", theirs.id, &person("alice"))
            .await
            .expect_err("another instance's webhook");
        assert_eq!(not_ours.code(), ErrorCode::NotFound);
        let deleted = webhooks
            .delete("one", ids[0], &person("alice"))
            .await
            .unwrap();
        assert_eq!(deleted.id, ids[0]);
        assert_eq!(
            webhooks.list("one").await.unwrap().len(),
            MAX_WEBHOOKS_PER_INSTANCE - 1
        );
        assert_eq!(webhooks.list(&other.name).await.unwrap(), [theirs]);
        webhooks
            .create(
                "one",
                both_events("https://again.example.com/"),
                &person("alice"),
            )
            .await
            .expect("room again after a delete");
        // Deleting the instance deletes its webhooks.
        store.delete_instance(one.id).await.unwrap();
        assert_eq!(
            webhooks.list("one").await.unwrap_err().code(),
            ErrorCode::NotFound
        );
    }
);

both_databases!(
    a_terminal_report_queues_each_event_once_and_a_claim_holds_it,
    |backend| async move {
        let Some((_database, store, session)) = store_with_session(backend).await else {
            return;
        };
        let webhooks = WebhookService::new(store.clone());
        let hook = webhooks
            .create(
                &session.instance_id.to_string(),
                both_events("http://127.0.0.1:9/hook"),
                &person("alice"),
            )
            .await
            .unwrap();
        let state_only = webhooks
            .create(
                &session.instance_id.to_string(),
                NewWebhook::new(
                    "http://127.0.0.1:9/state",
                    &["state_changed".to_owned()],
                    SECRET.to_owned(),
                )
                .unwrap(),
                &person("alice"),
            )
            .await
            .unwrap();
        let failed = finished_command(1, 1);
        let running = terminal(TerminalState::Running);

        // A state change and a finished command: two deliveries to the first webhook, one to
        // the second.
        let recorded = store
            .record_terminal(session.id, &running, std::slice::from_ref(&failed))
            .await
            .unwrap();
        assert!(recorded.changed.is_some());
        assert_eq!(recorded.webhook_deliveries, 3);
        // The same report again (another replica's, or a replay): nothing more.
        let again = store
            .record_terminal(session.id, &running, std::slice::from_ref(&failed))
            .await
            .unwrap();
        assert!(again.changed.is_none());
        assert_eq!(again.webhook_deliveries, 0);
        // A change that keeps the state (progress alone) is no state change.
        let with_progress = TerminalActivity {
            progress: Some(Progress::Percent(50)),
            ..running.clone()
        };
        let progress = store
            .record_terminal(session.id, &with_progress, &[])
            .await
            .unwrap();
        assert!(progress.changed.is_some());
        assert_eq!(progress.webhook_deliveries, 0);
        // A command still running is not finished.
        let started = Command {
            ended_at: None,
            exit_code: None,
            output_end: None,
            ..finished_command(2, 0)
        };
        let at_prompt = store
            .record_terminal(
                session.id,
                &terminal(TerminalState::AtPrompt),
                &[started, failed.clone()],
            )
            .await
            .unwrap();
        assert_eq!(
            at_prompt.webhook_deliveries, 2,
            "one state change per webhook"
        );

        let lease = Duration::from_secs(60);
        // One in flight per webhook: one of each; with the first webhook's one in flight, the
        // second's alone.
        let one_each = store
            .claim_due_deliveries(10, lease, &HashMap::new(), 1)
            .await
            .unwrap();
        assert_eq!(one_each.len(), 2);
        assert_ne!(one_each[0].webhook_id, one_each[1].webhook_id);
        for delivery in &one_each {
            store.release_claim(delivery).await.unwrap();
        }
        let busy = HashMap::from([(hook.id, 1)]);
        let others = store
            .claim_due_deliveries(10, lease, &busy, 1)
            .await
            .unwrap();
        assert_eq!(others.len(), 1);
        assert_eq!(others[0].webhook_id, state_only.id);
        store.release_claim(&others[0]).await.unwrap();
        let claimed = store
            .claim_due_deliveries(10, lease, &HashMap::new(), 10)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 5);
        assert!(
            store
                .claim_due_deliveries(10, lease, &HashMap::new(), 10)
                .await
                .unwrap()
                .is_empty(),
            "a claimed delivery is not due again while its lease lasts"
        );
        let to_state_only: Vec<_> = claimed
            .iter()
            .filter(|delivery| delivery.webhook_id == state_only.id)
            .collect();
        assert_eq!(to_state_only.len(), 2);
        assert!(
            to_state_only
                .iter()
                .all(|delivery| delivery.event == "state_changed")
        );
        let command = claimed
            .iter()
            .find(|delivery| delivery.event == "command_finished")
            .expect("the finished command");
        assert_eq!(command.attempts, 0);
        assert_eq!(command.url, "http://127.0.0.1:9/hook");
        assert_eq!(command.secret, SECRET);
        let body: serde_json::Value = serde_json::from_str(&command.body).unwrap();
        assert_eq!(body["command"]["exit_code"], 1);
        assert_eq!(body["session_id"], session.id.to_string());

        // A failed attempt, due again at once: the next claim takes it, with its count.
        store
            .record_attempt(
                command,
                &AttemptResult {
                    status_code: Some(500),
                    error: None,
                    outcome: DeliveryOutcome::Pending,
                    next_attempt_at: chrono::Utc::now() - chrono::Duration::seconds(1),
                },
            )
            .await
            .unwrap();
        let listed = webhooks
            .list(&session.instance_id.to_string())
            .await
            .unwrap();
        let last = listed[0].last_delivery.clone().expect("a last delivery");
        assert_eq!(
            (
                last.delivery_id,
                last.attempts,
                last.status_code,
                last.outcome
            ),
            (command.id, 1, Some(500), DeliveryOutcome::Pending)
        );
        let retried = store
            .claim_due_deliveries(10, lease, &HashMap::new(), 10)
            .await
            .unwrap();
        assert_eq!(retried.len(), 1);
        assert_eq!((retried[0].id, retried[0].attempts), (command.id, 1));
        // The first claim's result is no longer recorded: the delivery is another claim's now.
        store
            .record_attempt(
                command,
                &AttemptResult {
                    status_code: None,
                    error: Some("late".into()),
                    outcome: DeliveryOutcome::Failed,
                    next_attempt_at: chrono::Utc::now(),
                },
            )
            .await
            .unwrap();
        store
            .record_attempt(
                &retried[0],
                &AttemptResult {
                    status_code: Some(204),
                    error: None,
                    outcome: DeliveryOutcome::Delivered,
                    next_attempt_at: chrono::Utc::now(),
                },
            )
            .await
            .unwrap();
        let last = webhooks
            .list(&session.instance_id.to_string())
            .await
            .unwrap()[0]
            .last_delivery
            .clone()
            .unwrap();
        assert_eq!(
            (last.attempts, last.status_code, last.error, last.outcome),
            (2, Some(204), None, DeliveryOutcome::Delivered)
        );
        // A given-back claim is due at once; a deleted webhook's deliveries are gone.
        store.release_claim(&claimed[0]).await.unwrap();
        assert_eq!(
            store
                .claim_due_deliveries(10, lease, &HashMap::new(), 10)
                .await
                .unwrap()
                .len(),
            1
        );
        webhooks
            .delete(&session.instance_id.to_string(), hook.id, &person("alice"))
            .await
            .unwrap();
        webhooks
            .delete(
                &session.instance_id.to_string(),
                state_only.id,
                &person("alice"),
            )
            .await
            .unwrap();
        assert_eq!(
            store
                .prune_finished_deliveries(chrono::Utc::now() + chrono::Duration::hours(1))
                .await
                .unwrap(),
            0,
            "nothing is left to prune"
        );
    }
);

/// The HMAC-SHA256 of `body` with [`SECRET`], as `sha256=<hex>`: computed here with the `hmac`
/// crate, apart from session-api's own code.
fn expected_signature(body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("sha256={hex}")
}

fn assert_signed(request: &ReceivedRequest) {
    assert_eq!(
        request.header("x-ptyhub-signature-256"),
        expected_signature(&request.body)
    );
    assert_eq!(request.header("content-type"), "application/json");
    uuid::Uuid::parse_str(request.header("x-ptyhub-delivery")).expect("a uuid delivery id");
}

async fn create_webhook(
    client: &mut SessionClient,
    instance: &str,
    url: &str,
    events: &[&str],
) -> pb::Webhook {
    client
        .create_webhook(pb::CreateWebhookRequest {
            instance: instance.to_owned(),
            url: url.to_owned(),
            events: events.iter().map(|event| (*event).to_owned()).collect(),
            secret: SECRET.to_owned(),
        })
        .await
        .expect("register the webhook")
        .into_inner()
}

/// Registers an instance whose sessions run an interactive bash (with its shell integration)
/// on broker `local`.
async fn bash_instance(client: &mut SessionClient, name: &str) -> pb::Instance {
    client
        .register_instance(pb::RegisterInstanceRequest {
            name: name.into(),
            target: Some(broker_pb::Target {
                kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
            }),
            command: vec!["bash".into()],
            env: [("PS1".to_owned(), "$ ".to_owned())].into(),
            max_sessions: 2,
            broker_id: "local".into(),
            ..Default::default()
        })
        .await
        .expect("register instance")
        .into_inner()
}

/// Types `line` and Enter into the session.
async fn type_line(client: &mut SessionClient, session: &pb::Session, line: &str) {
    client
        .send_input(pb::SendInputRequest {
            instance: session.instance_id.clone(),
            session_id: session.id.clone(),
            items: vec![
                broker_pb::InputItem {
                    item: Some(broker_pb::input_item::Item::Text(line.into())),
                },
                broker_pb::InputItem {
                    item: Some(broker_pb::input_item::Item::Key("Enter".into())),
                },
            ],
            force: false,
        })
        .await
        .expect("type a line");
}

both_databases!(
    a_failed_command_and_its_state_changes_are_delivered_signed,
    |backend| async move {
        let Some(database) = FreshDatabase::create(backend).await else {
            return;
        };
        let broker = start_broker();
        let server = start_session_api(database.url(), &[("local", broker.endpoint())]);
        let mut client = session_client(&server).await;
        let instance = bash_instance(&mut client, "bash").await;
        let mut receiver = WebhookReceiver::start().await;
        let webhook = create_webhook(
            &mut client,
            &instance.name,
            &receiver.url,
            &["state_changed", "command_finished"],
        )
        .await;
        assert_eq!(webhook.instance_id, instance.id);
        assert_eq!(webhook.created_by, "gateway", "no actor named: the gateway");

        let session = client
            .create_session(pb::CreateSessionRequest {
                instance: instance.id.clone(),
                ..Default::default()
            })
            .await
            .expect("create session")
            .into_inner()
            .session
            .expect("a session");
        // The shell's first prompt is a state change.
        let prompt = loop {
            let change = receiver.next_event("state_changed", PATIENCE).await;
            assert_signed(&change);
            if change.json()["state"] == "at_prompt" {
                break change.json();
            }
        };
        assert_eq!(prompt["session_id"], session.id);
        assert_eq!(prompt["instance_id"], instance.id);
        assert_eq!(prompt["shell_integration"], true);
        type_line(&mut client, &session, "false").await;
        let finished = receiver.next_event("command_finished", PATIENCE).await;
        assert_signed(&finished);
        assert_eq!(finished.header("x-ptyhub-event"), "command_finished");
        let body = finished.json();
        assert_eq!(body["event"], "command_finished");
        assert_eq!(body["instance_id"], instance.id);
        assert_eq!(body["session_id"], session.id);
        assert_eq!(body["command"]["command"], "false");
        assert_eq!(body["command"]["exit_code"], 1);
        assert!(body["command"]["duration_ms"].is_u64());

        let listed = client
            .list_webhooks(pb::ListWebhooksRequest {
                instance: instance.id.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .webhooks;
        assert_eq!(listed.len(), 1);
        let last = eventually("the last delivery is recorded", || {
            let mut client = client.clone();
            let instance = instance.id.clone();
            async move {
                let listed = client
                    .list_webhooks(pb::ListWebhooksRequest { instance })
                    .await
                    .ok()?
                    .into_inner();
                listed.webhooks[0]
                    .last_delivery
                    .clone()
                    .filter(|last| last.outcome == "delivered")
            }
        })
        .await;
        assert_eq!((last.status_code, last.attempts), (200, 1));
        drop(server);
        drop(broker);
    }
);

/// session-api with deliveries retried after `retry_base` (three times longer each time).
fn start_delivering(database_url: &str, retry_base: Duration) -> Isolated {
    start_session_api_with(database_url, &[], |config| {
        config.webhooks.retry_base = retry_base;
        config.webhooks.attempts = 20;
        config.webhooks.poll_interval = Duration::from_millis(50);
    })
}

/// Queues a `command_finished` of a session through the store, as a broker's report would.
async fn queue_finished_command(store: &Store, session: &Session, id: u64) {
    let recorded = store
        .record_terminal(
            session.id,
            &terminal(TerminalState::AtPrompt),
            &[finished_command(id, 3)],
        )
        .await
        .unwrap();
    assert!(recorded.webhook_deliveries > 0);
}

both_databases!(
    a_delivery_is_retried_until_the_receiver_answers_2xx,
    |backend| async move {
        let Some((database, store, session)) = store_with_session(backend).await else {
            return;
        };
        let server = start_delivering(database.url(), Duration::from_millis(50));
        let mut client = session_client(&server).await;
        let instance = session.instance_id.to_string();
        let mut receiver =
            WebhookReceiver::answering(vec![Answer::Status(500), Answer::Status(500)]).await;
        create_webhook(&mut client, &instance, &receiver.url, &["command_finished"]).await;
        queue_finished_command(&store, &session, 1).await;

        let attempts = [
            receiver.next_request(PATIENCE).await,
            receiver.next_request(PATIENCE).await,
            receiver.next_request(PATIENCE).await,
        ];
        let delivery_id = attempts[0].header("x-ptyhub-delivery").to_owned();
        for attempt in &attempts {
            assert_signed(attempt);
            assert_eq!(attempt.header("x-ptyhub-delivery"), delivery_id);
            assert_eq!(
                attempt.body, attempts[0].body,
                "every attempt sends the same bytes"
            );
        }
        let last = eventually("the third attempt is recorded", || {
            let mut client = client.clone();
            let instance = instance.clone();
            async move {
                let listed = client
                    .list_webhooks(pb::ListWebhooksRequest { instance })
                    .await
                    .ok()?
                    .into_inner();
                listed.webhooks[0]
                    .last_delivery
                    .clone()
                    .filter(|last| last.attempts == 3)
            }
        })
        .await;
        assert_eq!(last.id, delivery_id);
        assert_eq!(last.status_code, 200);
        assert_eq!(last.outcome, "delivered");
        assert_eq!(last.error, "");
        assert!(receiver.drain().is_empty(), "nothing after the 2xx");
        drop(server);
    }
);

both_databases!(
    a_receiver_that_never_answers_holds_up_only_its_own_deliveries,
    |backend| async move {
        let Some((database, store, session)) = store_with_session(backend).await else {
            return;
        };
        // Two in flight at most, one per webhook; an attempt that waits longer than the test.
        let server = start_session_api_with(database.url(), &[], |config| {
            config.webhooks.concurrency = 2;
            config.webhooks.request_timeout = PATIENCE * 10;
            config.webhooks.poll_interval = Duration::from_millis(50);
        });
        let mut client = session_client(&server).await;
        let instance = session.instance_id.to_string();
        let mut hanging = WebhookReceiver::answering(vec![Answer::Never; 100]).await;
        let mut answering = WebhookReceiver::start().await;
        create_webhook(&mut client, &instance, &hanging.url, &["command_finished"]).await;
        create_webhook(
            &mut client,
            &instance,
            &answering.url,
            &["command_finished"],
        )
        .await;
        for id in 1..=3 {
            queue_finished_command(&store, &session, id).await;
        }
        hanging.next_request(PATIENCE).await;
        let mut delivered = Vec::new();
        for _ in 1..=3 {
            delivered.push(answering.next_request(PATIENCE).await.json()["command"]["id"].clone());
        }
        delivered.sort_by_key(|id| id.as_u64());
        assert_eq!(delivered, [1, 2, 3]);
        assert!(
            hanging.drain().is_empty(),
            "one attempt hangs; no other was started"
        );
        drop(server);
    }
);

both_databases!(
    a_queued_delivery_outlives_a_restart_of_session_api,
    |backend| async move {
        let Some((database, store, session)) = store_with_session(backend).await else {
            return;
        };
        let instance = session.instance_id.to_string();
        let mut receiver = WebhookReceiver::answering(vec![Answer::Status(503); 20]).await;
        let first = start_delivering(database.url(), Duration::from_millis(200));
        let mut client = session_client(&first).await;
        create_webhook(&mut client, &instance, &receiver.url, &["command_finished"]).await;
        queue_finished_command(&store, &session, 7).await;
        let refused = receiver.next_request(PATIENCE).await;
        assert!(first.stop().await.contains("stopped"));

        // The receiver is well again, and a new session-api on the same database delivers.
        receiver.drain();
        receiver.answer_next(Vec::new());
        let second = start_delivering(database.url(), Duration::from_millis(200));
        let delivered = receiver.next_request(PATIENCE).await;
        assert_eq!(
            delivered.header("x-ptyhub-delivery"),
            refused.header("x-ptyhub-delivery")
        );
        assert_eq!(delivered.json()["command"]["id"], 7);
        let mut client = session_client(&second).await;
        eventually("the delivery is recorded as delivered", || {
            let mut client = client.clone();
            let instance = instance.clone();
            async move {
                let listed = client
                    .list_webhooks(pb::ListWebhooksRequest { instance })
                    .await
                    .ok()?
                    .into_inner();
                listed.webhooks[0]
                    .last_delivery
                    .clone()
                    .filter(|last| last.outcome == "delivered")
            }
        })
        .await;
        // The bad requests are refused on the gRPC surface too.
        for (url, events, secret, wanted) in [
            (
                "ftp://example.com/",
                vec!["state_changed"],
                SECRET,
                "http://",
            ),
            ("https://example.com/", vec![], SECRET, "at least one"),
            (
                "https://example.com/",
                vec!["exited"],
                SECRET,
                "unknown webhook event",
            ),
            (
                "https://example.com/",
                vec!["state_changed"],
                "short",
                "16 to 256",
            ),
        ] {
            let refused = client
                .create_webhook(pb::CreateWebhookRequest {
                    instance: instance.clone(),
                    url: url.to_owned(),
                    events: events.into_iter().map(str::to_owned).collect(),
                    secret: secret.to_owned(),
                })
                .await
                .expect_err("a bad webhook");
            assert_eq!(refused.code(), Code::InvalidArgument);
            assert!(refused.message().contains(wanted), "{}", refused.message());
        }
        drop(second);
    }
);

/// Replicas share PostgreSQL (an SQLite file has one session-api).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_on_postgres_following_one_broker_deliver_each_event_once() {
    use sea_orm::{EntityTrait, QueryOrder};
    use session_api::store::entities::webhook_delivery;

    let Some(database) = FreshDatabase::create(Backend::Postgres).await else {
        return;
    };
    let broker = start_broker();
    let first = start_session_api(database.url(), &[("local", broker.endpoint())]);
    let mut client = session_client(&first).await;
    let second = start_session_api(database.url(), &[("local", broker.endpoint())]);
    let mut other = session_client(&second).await;
    let instance = bash_instance(&mut client, "replicated").await;
    let mut receiver = WebhookReceiver::start().await;
    create_webhook(
        &mut client,
        &instance.id,
        &receiver.url,
        &["state_changed", "command_finished"],
    )
    .await;
    let mut seen_by_second = other
        .watch_sessions(pb::WatchSessionsRequest {
            instance: instance.id.clone(),
        })
        .await
        .expect("watch the second replica")
        .into_inner();
    let session = client
        .create_session(pb::CreateSessionRequest {
            instance: instance.id.clone(),
            ..Default::default()
        })
        .await
        .expect("create session")
        .into_inner()
        .session
        .expect("a session");
    let mut received = Vec::new();
    for (command_id, line) in [(1, "false"), (2, "true")] {
        if command_id == 1 {
            loop {
                let request = receiver.next_request(PATIENCE).await;
                let prompt = request.json()["state"] == "at_prompt";
                received.push(request);
                if prompt {
                    break;
                }
            }
        }
        type_line(&mut client, &session, line).await;
        loop {
            let request = receiver.next_request(PATIENCE).await;
            let done = request.json()["command"]["id"] == command_id;
            received.push(request);
            if done {
                break;
            }
        }
    }
    // The second replica has followed the broker past the second command's end too.
    loop {
        let change = tokio::time::timeout(PATIENCE, seen_by_second.next())
            .await
            .expect("a change within the patience")
            .expect("stream open")
            .expect("a change");
        if change
            .commands
            .iter()
            .any(|command| command.id == 2 && command.ended_at.is_some())
        {
            break;
        }
    }

    let store = Store::connect(database.url()).await.expect("connect");
    let deliveries = webhook_delivery::Entity::find()
        .order_by_asc(webhook_delivery::Column::CreatedAt)
        .all(store.connection())
        .await
        .unwrap();
    let commands: Vec<_> = deliveries
        .iter()
        .filter(|delivery| delivery.event == "command_finished")
        .map(|delivery| delivery.event_key.clone())
        .collect();
    assert_eq!(
        commands.len(),
        2,
        "one delivery per finished command: {commands:?}"
    );
    let transitions: Vec<(serde_json::Value, serde_json::Value)> = deliveries
        .iter()
        .filter(|delivery| delivery.event == "state_changed")
        .map(|delivery| {
            let body: serde_json::Value = serde_json::from_str(&delivery.body).unwrap();
            (body["previous_state"].clone(), body["state"].clone())
        })
        .collect();
    assert!(
        transitions.windows(2).all(|pair| pair[0] != pair[1]),
        "a state change queued twice: {transitions:?}"
    );

    // Every delivery is sent once, by one replica or the other.
    let queued = deliveries.len();
    eventually("every delivery is sent", || {
        let store = store.clone();
        async move {
            let rows = webhook_delivery::Entity::find()
                .all(store.connection())
                .await
                .ok()?;
            rows.iter()
                .all(|row| row.outcome == "delivered")
                .then_some(())
        }
    })
    .await;
    received.extend(receiver.drain());
    let mut ids: Vec<&str> = received
        .iter()
        .map(|request| request.header("x-ptyhub-delivery"))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), received.len(), "a delivery was sent twice");
    assert!(received.len() >= queued);
    drop((first, second, broker));
}
