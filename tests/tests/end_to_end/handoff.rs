//! A broker upgraded by hand-offs (`--take-over`) under a whole cluster: the WebSocket client
//! through the gateway resumes by offset on each next process, the shell keeps its pid, and
//! session-api never marks the session lost.

use ptyhub_proto::session::v1 as session_pb;
use tests::terminal::{Event, Terminal};

use crate::{session_record, start};
use tests::cluster::Cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_handed_over_three_times_keeps_its_session_and_every_byte() {
    let Some(mut cluster) = start(Cluster::builder().session_apis(1).brokers(1).gateways(1)).await
    else {
        return;
    };
    let instance: session_pb::Instance = cluster
        .register_instance("upgraded", 0, &["sh"], 5)
        .await
        .unwrap();
    let (status, body) = cluster.create_session(0, &instance.id).await.unwrap();
    assert_eq!(status, 201, "{body}");
    let session_id = body["id"].as_str().expect("a session id").to_owned();
    let port = cluster.gateways[0].port();

    let (mut terminal, mut offset) = Terminal::attach(port, &instance.id, &session_id, None)
        .await
        .unwrap();
    terminal.input(b"echo \"pid=$$.\"\n").await.unwrap();
    let seen = terminal.read_until("pid=").await.unwrap();
    let seen = if seen.matches("pid=").count() < 2 {
        // The echo of the command line, then the shell's answer.
        format!("{seen}{}", terminal.read_until(".\r\n").await.unwrap())
    } else {
        seen
    };
    offset += seen.len() as u64;
    let pid: String = seen
        .rsplit("pid=")
        .next()
        .and_then(|rest| rest.split('.').next())
        .expect("the shell printed its pid")
        .to_owned();
    assert!(pid.parse::<u32>().is_ok(), "{seen:?}");

    for round in 1..=3 {
        cluster.hand_off_broker(0).await.unwrap();
        // The stream to the old process ended with a hand-off: the gateway says reconnect now.
        let code = loop {
            match terminal.next().await {
                Ok(Event::Closed(code)) => break code,
                Ok(Event::Output(bytes)) => offset += bytes.len() as u64,
                Ok(Event::Json(_)) => {}
                Err(error) => panic!("round {round}: the WebSocket broke: {error}"),
            }
        };
        assert_eq!(
            code,
            Some(1012),
            "round {round}: the close says reconnect now"
        );

        let (resumed, connected_at) =
            Terminal::attach(port, &instance.id, &session_id, Some(offset))
                .await
                .unwrap();
        assert_eq!(
            connected_at, offset,
            "round {round}: resumed exactly where it left"
        );
        terminal = resumed;
        let marker = format!("round-{round} pid={pid}.");
        terminal
            .input(format!("echo \"round-$((0+{round})) pid=$$.\"\n").as_bytes())
            .await
            .unwrap();
        let seen = terminal.read_until(&marker).await.unwrap();
        offset += seen.len() as u64;
        assert!(
            seen.matches(&marker).count() == 1,
            "round {round}: the same process answered once: {seen:?}"
        );

        let record = session_record(&cluster, &instance.id, &session_id).await;
        assert_eq!(
            record["status"], "active",
            "round {round}: session-api kept the session: {record}"
        );
    }
}
