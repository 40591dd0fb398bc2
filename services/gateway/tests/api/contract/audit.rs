//! The audit trail through the gateway: every action on an instance and its session (register,
//! create, rename, input, attach, takeover, detach, reset, close, delete) and every refused
//! attempt yields exactly one event naming the principal that did it, never its credential; a
//! flood of refusals yields a row a minute that counts them; a scoped principal lists its own
//! instances' events only; bad filters are 422.

use std::collections::BTreeMap;

use futures::StreamExt;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_test_support::stack::TestStack;
use reqwest::Method;
use serde_json::{Value, json};

use super::support::{Terminal, as_admin, eventually, gateway_grpc, rest, rest_as, sessions_path};

/// Every event of `query` (`instance=...`, `principal=...`), all pages, as `token` sees them.
async fn audit(stack: &TestStack, token: &str, query: &str) -> Vec<Value> {
    let mut events = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/api/v1/audit?{query}&limit=4");
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={cursor}"));
        }
        let page = rest_as(stack, Some(token), Method::GET, &path, None)
            .await
            .expect(200, "a page of the audit trail");
        events.extend(page["events"].as_array().expect("events").iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return events,
        }
    }
}

/// How many events of each `(kind, principal)` there are.
fn tally(events: &[Value]) -> BTreeMap<(String, String), usize> {
    let mut counts = BTreeMap::new();
    for event in events {
        let key = (
            event["kind"].as_str().unwrap_or_default().to_owned(),
            event["principal"].as_str().unwrap_or_default().to_owned(),
        );
        *counts.entry(key).or_default() += 1;
    }
    counts
}

fn key(kind: &str, principal: &str) -> (String, String) {
    (kind.to_owned(), principal.to_owned())
}

#[tokio::test]
async fn every_action_yields_exactly_one_event_with_its_principal() {
    let stack = TestStack::builder().start().await;
    let alice = stack.jwt("alice", &["*"], true);
    let bob = stack.jwt("bob", &["*"], false);

    let instance = rest_as(
        &stack,
        Some(&alice),
        Method::POST,
        "/api/v1/instances",
        Some(json!({
            "name": "audited",
            "target": {"local": {}},
            "command": ["/bin/sh"],
            "env": {"PS1": "$ "},
        })),
    )
    .await
    .expect(201, "alice registers an instance")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let sessions = sessions_path(&instance);
    let session = rest_as(
        &stack,
        Some(&alice),
        Method::POST,
        &sessions,
        Some(json!({"name": "work"})),
    )
    .await
    .expect(201, "alice creates a session")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let session_path = format!("{sessions}/{session}");
    rest_as(
        &stack,
        Some(&bob),
        Method::POST,
        &format!("{session_path}/rename"),
        Some(json!({"name": "bobs"})),
    )
    .await
    .expect(200, "bob renames it");
    // bob lets everyone type, alice makes it hers alone again: each change names who made it.
    for (who, token, mode) in [("bob", &bob, "shared"), ("alice", &alice, "exclusive")] {
        rest_as(
            &stack,
            Some(token),
            Method::PATCH,
            &session_path,
            Some(json!({"control_mode": mode})),
        )
        .await
        .expect(200, &format!("{who} sets the control mode"));
    }
    rest_as(
        &stack,
        Some(&bob),
        Method::POST,
        &format!("{session_path}/input"),
        Some(json!({"text": "echo typed-by-bob\n"})),
    )
    .await
    .expect(200, "bob types through the input call");

    // alice attaches as controller, bob takes over.
    let socket_path = format!("/ws/tool-instances/{instance}/terminal/{session}");
    let mut alices = Terminal::open_as(&stack, &socket_path, &alice).await;
    alices.connected().await;
    let mut bobs = Terminal::open_as(&stack, &socket_path, &bob).await;
    bobs.connected().await;
    let closed = alices.read_until_closed().await;
    assert_eq!(closed.code, 4009, "alice is taken over");
    drop(bobs);

    rest_as(
        &stack,
        Some(&alice),
        Method::POST,
        &format!("{session_path}/reset"),
        None,
    )
    .await
    .expect(200, "alice resets it");
    rest_as(&stack, Some(&alice), Method::DELETE, &session_path, None)
        .await
        .expect(200, "alice closes it");

    // Refused: no credential at all, and a credential scoped to another instance.
    let carol = stack.jwt("carol", &["elsewhere"], false);
    rest_as(&stack, None, Method::GET, &sessions, None)
        .await
        .expect_error(401, "no credential");
    rest_as(&stack, Some(&carol), Method::GET, &sessions, None)
        .await
        .expect_error(403, "carol may not use the instance");

    rest_as(
        &stack,
        Some(&alice),
        Method::DELETE,
        &format!("/api/v1/instances/{instance}"),
        None,
    )
    .await
    .expect(200, "alice deletes the instance");

    let expected: BTreeMap<(String, String), usize> = [
        (key("instance_created", "alice"), 1),
        (key("session_created", "alice"), 1),
        (key("session_renamed", "bob"), 1),
        (key("control_mode_changed", "bob"), 1),
        (key("control_mode_changed", "alice"), 1),
        (key("input", "bob"), 1),
        (key("attached", "alice"), 1),
        (key("attached", "bob"), 1),
        (key("takeover", "bob"), 1),
        (key("detached", "alice"), 1),
        (key("detached", "bob"), 1),
        (key("session_reset", "alice"), 1),
        (key("session_closed", "alice"), 1),
        (key("instance_deleted", "alice"), 1),
    ]
    .into_iter()
    .collect();
    // The stream events reach the trail in the background: wait until the last of them is
    // there, then every count must be exactly one.
    let events = eventually("every action in the audit trail", || async {
        let events = audit(&stack, &stack.admin_token, &format!("instance={instance}")).await;
        let counts = tally(&events);
        expected
            .keys()
            .all(|key| counts.contains_key(key))
            .then_some(events)
    })
    .await;
    assert_eq!(tally(&events), expected, "{events:#?}");

    let find = |kind: &str, principal: &str| {
        events
            .iter()
            .find(|event| event["kind"] == kind && event["principal"] == principal)
            .unwrap_or_else(|| panic!("no {kind} by {principal}"))
    };
    let takeover = find("takeover", "bob");
    assert_eq!(takeover["detail"]["from"], "alice", "{takeover}");
    assert_eq!(takeover["role"], "controller");
    assert_eq!(find("detached", "alice")["detail"]["reason"], "taken_over");
    assert_eq!(
        find("attached", "alice")["attachment_id"],
        find("detached", "alice")["attachment_id"]
    );
    assert_eq!(find("attached", "bob")["surface"], "websocket");
    assert_eq!(find("session_renamed", "bob")["detail"]["name"], "bobs");
    for (principal, mode) in [("bob", "shared"), ("alice", "exclusive")] {
        let changed = find("control_mode_changed", principal);
        assert_eq!(changed["detail"]["control_mode"], mode, "{changed}");
        assert_eq!(changed["session_id"], session.as_str(), "{changed}");
    }
    assert_eq!(
        find("session_closed", "alice")["detail"]["reason"],
        "closed_by_user"
    );
    let created = find("session_created", "alice");
    assert_eq!(created["surface"], "rest");
    assert_eq!(created["session_id"], session.as_str());
    assert!(
        created["client_address"]
            .as_str()
            .is_some_and(|address| address.starts_with("127.0.0.1:")),
        "{created}"
    );

    // The refusals: carol's names her and what she tried; the anonymous one names nobody.
    let carols = eventually("carol's refusal in the trail", || async {
        let events = audit(&stack, &stack.admin_token, "principal=carol").await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert_eq!(carols.len(), 1, "{carols:#?}");
    assert_eq!(carols[0]["kind"], "refused");
    assert_eq!(carols[0]["detail"]["reason"], "forbidden");
    let refusal_of_nobody = eventually("the refusal without a credential", || async {
        audit(&stack, &stack.admin_token, "principal=")
            .await
            .into_iter()
            .find(|event| {
                event["kind"] == "refused"
                    && event["detail"]["reason"] == "unauthenticated"
                    && event["detail"]["action"]
                        .as_str()
                        .is_some_and(|action| action.ends_with(&sessions))
            })
    })
    .await;
    assert_eq!(refusal_of_nobody["principal"], "");

    // Principals are subjects: no credential appears anywhere in the trail.
    let everything = audit(&stack, &stack.admin_token, "").await;
    let text = serde_json::to_string(&everything).unwrap();
    for secret in [&alice, &bob, &carol, &stack.admin_token] {
        assert!(!text.contains(secret.as_str()), "a credential in the trail");
    }

    // The gateway's gRPC surface lists the same events, and refuses reports from outside.
    let mut grpc = gateway_grpc(&stack).await;
    let listed = grpc
        .list_audit_events(as_admin(
            &stack,
            session_pb::ListAuditEventsRequest {
                instance: instance.clone(),
                page_size: 1000,
                ..Default::default()
            },
        ))
        .await
        .expect("ListAuditEvents through the gateway")
        .into_inner();
    assert_eq!(listed.events.len(), events.len());
    let forged = grpc
        .record_audit_event(as_admin(
            &stack,
            session_pb::RecordAuditEventRequest {
                kind: session_pb::AuditKind::Refused as i32,
                ..Default::default()
            },
        ))
        .await
        .expect_err("outside callers cannot write the trail");
    assert_eq!(forged.code(), tonic::Code::PermissionDenied);
    stack.shutdown().await;
}

#[tokio::test]
async fn a_flood_of_refused_credentials_is_a_few_rows_that_count_it() {
    const REQUESTS: usize = 2000;
    let mut stack = TestStack::builder().start().await;
    // Half without a credential (never limited), half with a wrong one (429 past the limit).
    let wrong = "a-token-this-gateway-never-issued-0123456789";
    let statuses: Vec<u16> = futures::stream::iter(0..REQUESTS)
        .map(|index| {
            let token = (index % 2 == 1).then_some(wrong);
            let stack = &stack;
            async move {
                rest_as(stack, token, Method::GET, "/api/v1/instances", None)
                    .await
                    .status
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(
        statuses
            .iter()
            .all(|status| *status == 401 || *status == 429),
        "every one refused"
    );
    assert!(
        statuses.contains(&429),
        "past the limit on refused credentials, 429: counted all the same"
    );

    // A stopping gateway reports what its windows counted so far, instead of at the end of
    // their minute: then the trail holds every refusal of the flood.
    stack.stop_gateway().await;
    let events = stack
        .session_api
        .clone()
        .list_audit_events(session_pb::ListAuditEventsRequest {
            page_size: 1000,
            ..Default::default()
        })
        .await
        .expect("the trail, from session-api")
        .into_inner()
        .events;
    let refusals: Vec<_> = events
        .iter()
        .filter(|event| event.kind == session_pb::AuditKind::Refused as i32)
        .collect();
    // One row at once, one for the rest of its minute (and one more a minute, would the flood
    // outlast one).
    assert!(
        (1..=4).contains(&refusals.len()),
        "a handful of rows, not one a request: {}",
        refusals.len()
    );
    let counted: usize = refusals
        .iter()
        .map(|event| {
            assert_eq!(event.principal, "", "a refused credential names nobody");
            assert_eq!(
                event.client_address, "127.0.0.1",
                "the address, over any connection"
            );
            assert_eq!(event.detail["reason"], "unauthenticated");
            assert_eq!(event.detail["action"], "GET /api/v1/instances");
            event.detail["count"].parse::<usize>().expect("a count")
        })
        .sum();
    assert_eq!(counted, REQUESTS, "the counts add up to the flood");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_scoped_principal_lists_only_its_instances() {
    let stack = TestStack::builder().start().await;
    let mine = stack.register_instance("mine", 5, &[]).await;
    let theirs = stack.register_instance("theirs", 5, &[]).await;
    for instance in [&mine, &theirs] {
        rest(
            &stack,
            Method::POST,
            &sessions_path(instance),
            Some(json!({})),
        )
        .await
        .expect(201, "a session");
    }
    let dave = stack.jwt("dave", &["mine"], false);
    let events = audit(&stack, &dave, "").await;
    assert!(!events.is_empty());
    assert!(
        events
            .iter()
            .all(|event| event["instance_id"] == mine.as_str()),
        "{events:#?}"
    );
    rest_as(
        &stack,
        Some(&dave),
        Method::GET,
        &format!("/api/v1/audit?instance={theirs}"),
        None,
    )
    .await
    .expect_error(403, "another instance's trail");
    let own = audit(&stack, &dave, "instance=mine").await;
    assert_eq!(own.len(), events.len());
    stack.shutdown().await;
}

#[tokio::test]
async fn bad_audit_filters_are_422() {
    let stack = TestStack::builder().start().await;
    for query in [
        "since=yesterday",
        "until=2026-02-30T00:00:00Z",
        "since=2026-12-02T00:00:00Z&until=2026-12-01T00:00:00Z",
        "limit=0",
        "limit=1001",
        "limit=ten",
        "session=not-a-uuid",
        "cursor=page-two",
    ] {
        rest(&stack, Method::GET, &format!("/api/v1/audit?{query}"), None)
            .await
            .expect_error(422, query);
    }
    rest(
        &stack,
        Method::GET,
        "/api/v1/audit?instance=no-such-instance",
        None,
    )
    .await
    .expect_error(404, "an unknown instance");
    let mut grpc = gateway_grpc(&stack).await;
    let refused = grpc
        .list_audit_events(as_admin(
            &stack,
            session_pb::ListAuditEventsRequest {
                page_size: 5000,
                ..Default::default()
            },
        ))
        .await
        .expect_err("a page over the limit");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    stack.shutdown().await;
}
