//! Teardown order through the real broker binary: closing a session (REST DELETE) sends its
//! processes SIGHUP, then SIGTERM, then SIGKILL after the grace period, and leaves none of them
//! running; on this host, and in a container started without an init process (where nothing
//! but the broker can end them, Docker having no exec-kill call).
//!
//! The session's command records every HUP and TERM it receives and otherwise ignores them, so
//! only SIGKILL can end it: the record shows the order, its end shows the SIGKILL.

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_test_support::Requirement;
use serde_json::json;
use tests::cluster::Cluster;
use tests::container::Container;

use crate::{created_session, start};

/// Long enough that the shell, woken by a signal, has recorded it before the next one comes
/// even on a loaded machine (the broker waits half of it after SIGHUP and half after SIGTERM).
const KILL_GRACE: &str = "4s";

/// A shell that appends `HUP` or `TERM` to `<dir>/signals` for each of those it receives,
/// writes its pid to `<dir>/pid` once its traps are set, and waits on a child forever. `wait`
/// returns when a trapped signal arrives, so each one is recorded at once; the child is in
/// the same process group, so the signals end it and the loop starts another.
fn signal_recorder(dir: &str) -> String {
    format!(
        "trap 'echo HUP >> {dir}/signals' HUP; \
         trap 'echo TERM >> {dir}/signals' TERM; \
         echo $$ > {dir}/pid.part && mv {dir}/pid.part {dir}/pid; \
         while :; do sleep 1000 & wait $!; done"
    )
}

/// Checks that the recorder got SIGHUP first, then SIGTERM, and nothing else.
fn assert_hangup_then_terminate(record: &str) {
    let signals: Vec<&str> = record.lines().collect();
    let first_terminate = signals.iter().position(|signal| *signal == "TERM");
    let in_order = signals.first() == Some(&"HUP")
        && first_terminate.is_some_and(|first| signals[first..].iter().all(|s| *s == "TERM"))
        && signals
            .iter()
            .all(|signal| matches!(*signal, "HUP" | "TERM"));
    assert!(in_order, "signals received, in order: {signals:?}");
}

async fn start_cluster(backends: &str) -> Option<Cluster> {
    start(
        Cluster::builder()
            .session_apis(1)
            .brokers(1)
            .gateways(1)
            .broker_flag("backends", backends)
            .broker_flag("kill-grace", KILL_GRACE),
    )
    .await
}

/// `DELETE` of the session through gateway 0; checks the answer.
async fn close_session(cluster: &Cluster, instance_id: &str, session_id: &str) {
    let (status, body) = cluster
        .rest(
            0,
            reqwest::Method::DELETE,
            &format!("/api/v1/instances/{instance_id}/terminal/sessions/{session_id}"),
            None,
        )
        .await
        .expect("an answer to the close");
    assert_eq!(
        (status, &body["status"], &body["session_id"]),
        (200, &json!("closed"), &json!(session_id)),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_session_hangs_up_then_terminates_then_kills_its_processes() {
    let Some(cluster) = start_cluster("local").await else {
        return;
    };
    let dir = tempfile::tempdir().expect("a directory for the record");
    let dir_path = dir.path().to_str().expect("a UTF-8 path").to_owned();
    let script = signal_recorder(&dir_path);
    let instance = cluster
        .register_instance("stubborn", 0, &["sh", "-c", &script], 5)
        .await
        .expect("register an instance");
    let session = created_session(&cluster, &instance.id, json!({})).await;
    let pid_file = dir.path().join("pid");
    let shell: u32 = cluster
        .eventually("the shell has set its traps", || {
            let pid = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|text| text.trim().parse().ok());
            async move { pid }
        })
        .await;
    let unix_session = unix_session_of(shell).expect("the shell runs");
    assert_ne!(
        Some(unix_session),
        unix_session_of(std::process::id()),
        "the session's processes lead a Unix session of their own"
    );
    assert!(unix_session_members(unix_session).contains(&shell));

    close_session(&cluster, &instance.id, &session).await;
    let left = cluster
        .eventually("no process of the session is left", || {
            let members = unix_session_members(unix_session);
            async move { members.is_empty().then_some(members) }
        })
        .await;
    assert!(left.is_empty());
    let record = std::fs::read_to_string(dir.path().join("signals")).unwrap_or_default();
    assert_hangup_then_terminate(&record);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_session_in_a_container_without_init_leaves_no_process() {
    if !ptyhub_test_support::require(Requirement::Docker) {
        return;
    }
    let container = Container::start_without_init().await;
    let Some(cluster) = start_cluster("local,docker").await else {
        return;
    };
    let script = signal_recorder("/tmp");
    let instance = cluster
        .register_instance_with(
            0,
            session_pb::RegisterInstanceRequest {
                name: "stubborn-in-docker".to_owned(),
                target: Some(broker_pb::Target {
                    kind: Some(broker_pb::target::Kind::Docker(broker_pb::DockerTarget {
                        container: container.name.clone(),
                    })),
                }),
                command: vec!["sh".to_owned(), "-c".to_owned(), script],
                // Not root: the broker refuses root in containers by default.
                user: "tester".to_owned(),
                max_sessions: 5,
                ..Default::default()
            },
        )
        .await
        .expect("register a Docker instance");
    let session = created_session(&cluster, &instance.id, json!({})).await;
    cluster
        .eventually("the shell has set its traps", || async {
            container
                .exec(&["cat", "/tmp/pid"])
                .await
                .filter(|pid| pid.trim().parse::<u32>().is_ok())
        })
        .await;
    let running = container.live_processes().await;
    assert!(
        running.iter().any(|process| process.contains("sleep 1000")),
        "the session runs in the container: {running:?}"
    );

    close_session(&cluster, &instance.id, &session).await;
    cluster
        .eventually(
            "no process of the session is left in the container",
            || async { container.live_processes().await.is_empty().then_some(()) },
        )
        .await;
    let record = container
        .exec(&["cat", "/tmp/signals"])
        .await
        .unwrap_or_default();
    assert_hangup_then_terminate(&record);
}

/// The Unix session `pid` belongs to (field 6 of `/proc/<pid>/stat`), while it lives.
fn unix_session_of(pid: u32) -> Option<u32> {
    stat_fields(pid).and_then(|fields| fields.get(3)?.parse().ok())
}

/// The live (not zombie) processes of Unix session `session`.
fn unix_session_members(session: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // A process may end between the listing and the read: then it is not a member.
            stat_fields(*pid).is_some_and(|fields| {
                fields.first() != Some(&"Z".to_owned())
                    && fields.get(3) == Some(&session.to_string())
            })
        })
        .collect()
}

/// The fields of `/proc/<pid>/stat` after the command name (state, ppid, pgrp, session, ...);
/// the name may hold spaces and parentheses, so the fields start after the last `)`.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, fields) = stat.rsplit_once(')')?;
    Some(fields.split_whitespace().map(str::to_owned).collect())
}

#[test]
fn the_order_check_accepts_only_hangups_then_terminations() {
    assert_hangup_then_terminate("HUP\nTERM\n");
    assert_hangup_then_terminate("HUP\nHUP\nTERM\n");
    for bad in [
        "",
        "HUP\n",
        "TERM\n",
        "TERM\nHUP\n",
        "HUP\nTERM\nHUP\n",
        "HUP\nINT\nTERM\n",
    ] {
        assert!(
            std::panic::catch_unwind(|| assert_hangup_then_terminate(bad)).is_err(),
            "{bad:?} passed"
        );
    }
}
