//! The screen calls (`GetScreen`, `SendInput`, `WaitForScreen`) through session-api to a real
//! pty-broker (local backend), and the window title and bell on the session record and the
//! change stream. session-api refuses what it can tell is wrong without calling the broker, and
//! passes the broker's answers on as the broker gave them.

use std::time::Duration;

use futures::StreamExt;
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as pb;
use session_api::store::Store;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

use crate::store::{new_instance, new_session};
use crate::support::*;

/// Creates a session of `instance` running `script` under `sh -c`.
async fn session_running(
    client: &mut SessionClient,
    instance: &pb::Instance,
    script: &str,
) -> pb::Session {
    client
        .create_session(pb::CreateSessionRequest {
            instance: instance.id.clone(),
            command: vec!["sh".into(), "-c".into(), script.into()],
            ..Default::default()
        })
        .await
        .expect("create session")
        .into_inner()
        .session
        .expect("a session")
}

fn text(text: &str) -> broker_pb::InputItem {
    broker_pb::InputItem {
        item: Some(broker_pb::input_item::Item::Text(text.into())),
    }
}

fn key(name: &str) -> broker_pb::InputItem {
    broker_pb::InputItem {
        item: Some(broker_pb::input_item::Item::Key(name.into())),
    }
}

fn get_screen(instance: &str, session_id: &str) -> pb::GetScreenRequest {
    pb::GetScreenRequest {
        instance: instance.into(),
        session_id: session_id.into(),
        ..Default::default()
    }
}

fn send_input(
    instance: &str,
    session_id: &str,
    items: Vec<broker_pb::InputItem>,
) -> pb::SendInputRequest {
    pb::SendInputRequest {
        instance: instance.into(),
        session_id: session_id.into(),
        items,
        force: false,
    }
}

fn wait_for(instance: &str, session_id: &str, pattern: &str) -> pb::WaitForScreenRequest {
    pb::WaitForScreenRequest {
        instance: instance.into(),
        session_id: session_id.into(),
        pattern: pattern.into(),
        // The contract's default (30 s) would do; a patience of its own says what it is for.
        timeout_ms: u32::try_from(PATIENCE.as_millis()).expect("patience fits"),
        ..Default::default()
    }
}

/// Waits for `pattern` and checks that it matched.
async fn wait_until_shown(
    client: &mut SessionClient,
    request: pb::WaitForScreenRequest,
) -> broker_pb::WaitForScreenResponse {
    let pattern = request.pattern.clone();
    let outcome = client
        .wait_for_screen(request)
        .await
        .unwrap_or_else(|status| panic!("wait for {pattern:?}: {status:?}"))
        .into_inner();
    assert_eq!(
        outcome.outcome(),
        broker_pb::wait_for_screen_response::Outcome::Matched,
        "wait for {pattern:?}: {outcome:?}"
    );
    outcome
}

/// Each of the three screen calls for `session_id` of `instance`: its code and message.
async fn screen_call_refusals(
    client: &mut SessionClient,
    instance: &str,
    session_id: &str,
) -> Vec<(&'static str, Code, String)> {
    let refused = |call: &'static str, status: tonic::Status| {
        (call, status.code(), status.message().to_owned())
    };
    vec![
        refused(
            "GetScreen",
            client
                .get_screen(get_screen(instance, session_id))
                .await
                .expect_err("GetScreen is refused"),
        ),
        refused(
            "SendInput",
            client
                .send_input(send_input(instance, session_id, vec![text("x")]))
                .await
                .expect_err("SendInput is refused"),
        ),
        refused(
            "WaitForScreen",
            client
                .wait_for_screen(wait_for(instance, session_id, ""))
                .await
                .expect_err("WaitForScreen is refused"),
        ),
    ]
}

fn each_call(code: Code, message: &str) -> Vec<(&'static str, Code, String)> {
    ["GetScreen", "SendInput", "WaitForScreen"]
        .into_iter()
        .map(|call| (call, code, message.to_owned()))
        .collect()
}

both_databases!(
    screen_calls_for_an_unknown_another_instances_or_a_closed_session_are_not_found,
    |backend| async move {
        let Some(database) = FreshDatabase::create(backend).await else {
            return;
        };
        let broker = start_broker();
        let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
        let mut client = session_client(&api).await;
        let mine = register_instance(&mut client, "mine", "b1", 5).await;
        let other = register_instance(&mut client, "other", "b1", 5).await;
        let open = session_running(&mut client, &mine, "exec sleep 600").await;
        let closed = session_running(&mut client, &mine, "exec sleep 600").await;
        client
            .close_session(pb::CloseSessionRequest {
                instance: mine.id.clone(),
                session_id: closed.id.clone(),
            })
            .await
            .expect("close");
        let unknown = uuid::Uuid::new_v4().to_string();

        // The messages are session-api's: the broker was not asked.
        assert_eq!(
            screen_call_refusals(&mut client, &mine.id, &unknown).await,
            each_call(Code::NotFound, &format!("session {unknown} not found"))
        );
        assert_eq!(
            screen_call_refusals(&mut client, &other.id, &open.id).await,
            each_call(Code::NotFound, &format!("session {} not found", open.id)),
            "another instance's session is not found"
        );
        assert_eq!(
            screen_call_refusals(&mut client, "no-such-instance", &open.id).await,
            each_call(Code::NotFound, "instance no-such-instance not found")
        );
        assert_eq!(
            screen_call_refusals(&mut client, "mine", &closed.id).await,
            each_call(Code::NotFound, &format!("session {} is closed", closed.id)),
            "a closed session is not found, and the message says it is closed"
        );
        assert_eq!(
            screen_call_refusals(&mut client, "mine", "not-a-uuid").await,
            each_call(
                Code::InvalidArgument,
                "session_id \"not-a-uuid\" is not a uuid"
            )
        );
        assert_eq!(
            screen_call_refusals(&mut client, "", &open.id).await,
            each_call(Code::InvalidArgument, "instance is required")
        );
    }
);

both_databases!(
    screen_calls_for_a_session_whose_broker_is_down_are_unavailable_without_calling_it,
    |backend| async move {
        let Some(database) = FreshDatabase::create(backend).await else {
            return;
        };
        // A configured broker nothing answers for: session-api never reaches it, so it stays
        // down (and, never having had a heartbeat, is never taken for lost).
        let unreachable = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            format!("http://{}", listener.local_addr().expect("address"))
        };
        let (instance, session) = {
            let store = Store::connect(database.url()).await.expect("connect");
            store.migrate().await.expect("migrate");
            store
                .upsert_configured_broker("ghost", &unreachable)
                .await
                .expect("broker");
            let instance = store
                .insert_instance(&new_instance("haunted", 5), "ghost")
                .await
                .expect("instance");
            let session = new_session(&store, instance.id).await;
            store
                .mark_session_active(session.id)
                .await
                .expect("activate")
                .expect("was starting");
            store.close().await;
            (instance, session)
        };
        let api = start_session_api(database.url(), &[("ghost", unreachable)]);
        let mut client = session_client(&api).await;

        // A call that reached for the broker would fail as a transport error, in other words.
        assert_eq!(
            screen_call_refusals(
                &mut client,
                &instance.id.to_string(),
                &session.id.to_string()
            )
            .await,
            each_call(Code::Unavailable, "broker ghost is down")
        );
        let record = client
            .get_session(pb::GetSessionRequest {
                instance: instance.id.to_string(),
                session_id: session.id.to_string(),
            })
            .await
            .expect("the record is still there")
            .into_inner();
        assert_eq!(record.status(), pb::SessionStatus::Active);
    }
);

both_databases!(
    typing_an_answer_to_a_prompt_and_waiting_for_the_reply_matches,
    |backend| async move {
        let Some(database) = FreshDatabase::create(backend).await else {
            return;
        };
        let broker = start_broker();
        let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
        let mut client = session_client(&api).await;
        let instance = register_instance(&mut client, "prompts", "b1", 5).await;
        let session = session_running(
            &mut client,
            &instance,
            r#"read -p "name? " n; echo "hi $n"; sleep 5"#,
        )
        .await;

        // The screen text has trailing spaces trimmed, so the prompt's own space is not there
        // to match.
        let prompt =
            wait_until_shown(&mut client, wait_for("prompts", &session.id, r"name\?")).await;
        assert_eq!(prompt.matched, "name?");
        let written = client
            .send_input(send_input(
                "prompts",
                &session.id,
                vec![text("ptyhub"), key("Enter")],
            ))
            .await
            .expect("send input")
            .into_inner();
        assert_eq!(written.bytes_written, 7, "ptyhub and a carriage return");
        let reply = wait_until_shown(
            &mut client,
            pb::WaitForScreenRequest {
                after_offset: Some(written.output_offset),
                ..wait_for("prompts", &session.id, "hi ptyhub")
            },
        )
        .await;
        assert_eq!(reply.matched, "hi ptyhub");
        let screen = reply.screen.expect("the matching screen");
        assert_eq!(screen.session_id, session.id);
        assert!(screen.offset >= written.output_offset, "{screen:?}");
        assert_eq!(
            screen.lines[..2],
            ["name? ptyhub", "hi ptyhub"],
            "{screen:?}"
        );

        let read = client
            .get_screen(get_screen(&instance.id, &session.id))
            .await
            .expect("get screen")
            .into_inner();
        assert_eq!(read.session_id, session.id);
        assert_eq!(read.lines[..2], ["name? ptyhub", "hi ptyhub"], "{read:?}");
        assert_eq!(read.size.map(|size| (size.cols, size.rows)), Some((80, 24)));
    }
);

/// The code and message of a refused call.
fn refusal<T: std::fmt::Debug>(
    answer: Result<tonic::Response<T>, tonic::Status>,
) -> (Code, String) {
    let status = answer.expect_err("the call is refused");
    (status.code(), status.message().to_owned())
}

both_databases!(
    the_brokers_refusals_pass_through_with_its_code_and_message,
    |backend| async move {
        let Some(database) = FreshDatabase::create(backend).await else {
            return;
        };
        let broker = start_broker();
        let mut direct = broker_client(&broker).await;
        let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
        let mut client = session_client(&api).await;
        let instance = register_instance(&mut client, "refusals", "b1", 5).await;
        let session = session_running(&mut client, &instance, "exec cat").await;

        let unknown_key = vec![text("x"), key("NoSuchKey")];
        let refused = refusal(
            client
                .send_input(send_input("refusals", &session.id, unknown_key.clone()))
                .await,
        );
        assert_eq!(refused.0, Code::InvalidArgument, "{refused:?}");
        assert_eq!(
            refused,
            refusal(
                direct
                    .send_input(broker_pb::SendInputRequest {
                        session_id: session.id.clone(),
                        items: unknown_key,
                        force: false,
                    })
                    .await
            )
        );

        let bad_pattern = || wait_for("refusals", &session.id, "(unclosed");
        let refused = refusal(client.wait_for_screen(bad_pattern()).await);
        assert_eq!(refused.0, Code::InvalidArgument, "{refused:?}");
        assert_eq!(
            refused,
            refusal(
                direct
                    .wait_for_screen(broker_pb::WaitForScreenRequest {
                        session_id: session.id.clone(),
                        pattern: bad_pattern().pattern,
                        timeout_ms: bad_pattern().timeout_ms,
                        ..Default::default()
                    })
                    .await
            )
        );

        let too_long = pb::WaitForScreenRequest {
            timeout_ms: ptyhub_wire::limits::MAX_WAIT_MS + 1,
            ..wait_for("refusals", &session.id, "x")
        };
        let refused = refusal(client.wait_for_screen(too_long).await);
        assert_eq!(refused.0, Code::InvalidArgument, "{refused:?}");

        let timed_out = pb::WaitForScreenRequest {
            timeout_ms: 200,
            ..wait_for("refusals", &session.id, "text nobody types")
        };
        let refused = refusal(client.wait_for_screen(timed_out).await);
        assert_eq!(refused.0, Code::DeadlineExceeded, "{refused:?}");

        // Nothing of the refused input was written: the next input is the first the program
        // sees.
        client
            .send_input(send_input(
                "refusals",
                &session.id,
                vec![text("ok"), key("Enter")],
            ))
            .await
            .expect("send input");
        let shown = wait_until_shown(
            &mut client,
            wait_for("refusals", &session.id, r"(?m)^ok\nok$"),
        )
        .await;
        let screen = shown.screen.expect("the matching screen");
        assert_eq!(screen.lines[..2], ["ok", "ok"], "{screen:?}");
    }
);

both_databases!(
    input_while_a_client_holds_control_is_refused_unless_forced,
    |backend| async move {
        let Some(database) = FreshDatabase::create(backend).await else {
            return;
        };
        let broker = start_broker();
        let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
        let mut client = session_client(&api).await;
        let instance = register_instance(&mut client, "control", "b1", 5).await;
        let session = session_running(&mut client, &instance, "exec cat").await;

        let target = client
            .issue_attach_ticket(pb::IssueAttachTicketRequest {
                instance: instance.id.clone(),
                session_id: session.id.clone(),
                role: broker_pb::Role::Controller.into(),
            })
            .await
            .expect("ticket")
            .into_inner();
        let (frames, outgoing) = tokio::sync::mpsc::channel(4);
        frames
            .send(broker_pb::ClientFrame {
                frame: Some(broker_pb::client_frame::Frame::Hello(broker_pb::Hello {
                    ticket: target.ticket,
                    session_id: session.id.clone(),
                    role: broker_pb::Role::Controller.into(),
                    ..Default::default()
                })),
            })
            .await
            .expect("hello queued");
        let mut attached = broker_client(&broker)
            .await
            .attach(ReceiverStream::new(outgoing))
            .await
            .expect("attach")
            .into_inner();
        let first = tokio::time::timeout(PATIENCE, attached.next())
            .await
            .expect("a first frame within the patience")
            .expect("stream open")
            .expect("frame");
        assert!(
            matches!(
                first.frame,
                Some(broker_pb::server_frame::Frame::Connected(_))
            ),
            "{first:?}"
        );

        let refused = client
            .send_input(send_input("control", &session.id, vec![text("polite\r")]))
            .await
            .expect_err("a client holds control");
        assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
        assert!(!refused.message().is_empty());

        let forced = client
            .send_input(pb::SendInputRequest {
                force: true,
                ..send_input("control", &session.id, vec![text("forced"), key("Enter")])
            })
            .await
            .expect("a forced input is written")
            .into_inner();
        assert_eq!(forced.bytes_written, 7);
        let shown = wait_until_shown(
            &mut client,
            pb::WaitForScreenRequest {
                after_offset: Some(forced.output_offset),
                ..wait_for("control", &session.id, r"(?m)^forced\nforced$")
            },
        )
        .await;
        let screen = shown.screen.expect("the matching screen");
        assert_eq!(
            screen.lines[..2],
            ["forced", "forced"],
            "only the forced input reached the program: {screen:?}"
        );
        drop(frames);
    }
);

/// A wait that lasts longer than an ordinary broker call may is not cut short by that call's
/// deadline: it gets its own. The program answers only after the call timeout has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wait_outlasts_the_ordinary_broker_call_timeout() {
    let Some(database) = FreshDatabase::create(Backend::Sqlite).await else {
        return;
    };
    let call_timeout = Duration::from_secs(2);
    let broker = start_broker();
    let api = start_session_api_with(database.url(), &[("b1", broker.endpoint())], |config| {
        config.broker_call_timeout = call_timeout;
    });
    let mut client = session_client(&api).await;
    let instance = register_instance(&mut client, "patient", "b1", 5).await;
    let session = session_running(
        &mut client,
        &instance,
        &format!("sleep {}; echo late", call_timeout.as_secs() * 2),
    )
    .await;

    let shown = wait_until_shown(&mut client, wait_for("patient", &session.id, "late")).await;
    assert_eq!(shown.matched, "late");
}

both_databases!(
    a_title_and_a_bell_reach_the_record_and_the_change_stream,
    |backend| async move {
        let Some(database) = FreshDatabase::create(backend).await else {
            return;
        };
        let broker = start_broker();
        let api = start_session_api(database.url(), &[("b1", broker.endpoint())]);
        let mut client = session_client(&api).await;
        let instance = register_instance(&mut client, "titles", "b1", 5).await;
        let mut changes = client
            .watch_sessions(pb::WatchSessionsRequest {
                instance: instance.id.clone(),
            })
            .await
            .expect("watch")
            .into_inner();
        let session = session_running(
            &mut client,
            &instance,
            r"printf '\033]2;my title\007'; printf '\007'; exec sleep 600",
        )
        .await;
        assert_eq!((session.title.as_str(), session.last_bell_at), ("", None));

        let (mut titled, mut rang) = (false, false);
        while !(titled && rang) {
            let change = tokio::time::timeout(PATIENCE, changes.next())
                .await
                .expect("a change within the patience")
                .expect("stream open")
                .expect("change");
            let changed = change.session.clone().expect("a session");
            if change.kind() != pb::session_change::Kind::Screen || changed.id != session.id {
                continue;
            }
            titled |= changed.title == "my title";
            rang |= changed.last_bell_at.is_some();
        }

        let record = client
            .get_session(pb::GetSessionRequest {
                instance: instance.id.clone(),
                session_id: session.id.clone(),
            })
            .await
            .expect("get session")
            .into_inner();
        assert_eq!(record.title, "my title");
        let rang_at = record.last_bell_at.expect("the bell rang");
        let created_at = record.created_at.expect("created");
        assert!(
            rang_at.seconds >= created_at.seconds,
            "the bell rang after the session was created: {record:?}"
        );
        let listed = client
            .list_sessions(pb::ListSessionsRequest {
                instance: instance.id.clone(),
                include_closed: false,
            })
            .await
            .expect("list")
            .into_inner()
            .sessions;
        assert_eq!(listed.len(), 1);
        assert_eq!(
            (listed[0].title.as_str(), listed[0].last_bell_at),
            ("my title", Some(rang_at))
        );
    }
);
