//! Attach scenarios over real gRPC and real PTYs, run against every backend.

#[macro_use]
mod support;

use ptyhub_proto::broker::v1 as pb;
use support::{Backend, TestBroker};

backend_scenarios! {
    echo_round_trip,
}

async fn echo_round_trip(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let session = broker.spawn_sh("stty -echo; cat").await?;
    let mut client = broker
        .attach(&session.session_id, pb::Role::Controller, None)
        .await?;
    assert_eq!(client.connected().role, pb::Role::Controller as i32);
    client.send_input(&b"hello broker\n"[..]).await?;
    client.read_until(b"hello broker").await?;
    broker.kill(&session.session_id).await?;
    broker.stop().await
}
