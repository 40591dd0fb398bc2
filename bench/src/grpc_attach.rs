//! The gateway's gRPC `Attach` relay as an outside client uses it: `PtyBroker/Attach` on the
//! gateway's port with the user's token and the `ptyhub-instance` metadata, a hello without a
//! ticket, frames relayed to the broker and back. Measured beside the WebSocket path (BENCHMARKS.md).

use anyhow::{Context, Result, anyhow, bail};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::broker::v1::pty_broker_client::PtyBrokerClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::stack::{ADMIN_TOKEN, Stack};
use crate::term::{READ_PATIENCE, Term};

/// Attaches to `session_id` of `instance` through the gateway's gRPC port, as controller, and
/// waits for its `connected`.
pub async fn attach_through_gateway(
    stack: &Stack,
    instance: String,
    session_id: String,
) -> Result<Term> {
    let channel = tonic::transport::Endpoint::from_shared(stack.gateway_url.clone())?
        .tcp_nodelay(true)
        .connect()
        .await
        .context("connect to the gateway's gRPC port")?;
    let (input, receiver) = mpsc::channel(256);
    input
        .send(broker_pb::ClientFrame {
            frame: Some(broker_pb::client_frame::Frame::Hello(broker_pb::Hello {
                ticket: String::new(),
                session_id: session_id.clone(),
                role: broker_pb::Role::Controller as i32,
                size: None,
                since: None,
                snapshot: false,
                present_only: false,
            })),
        })
        .await
        .map_err(|_| anyhow!("attach channel closed"))?;
    let mut request = tonic::Request::new(ReceiverStream::new(receiver));
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {ADMIN_TOKEN}").parse()?);
    request
        .metadata_mut()
        .insert("ptyhub-instance", instance.parse()?);
    let mut output =
        tokio::time::timeout(READ_PATIENCE, PtyBrokerClient::new(channel).attach(request))
            .await
            .map_err(|_| anyhow!("attach took over {READ_PATIENCE:?}"))?
            .context("attach through the gateway")?
            .into_inner();
    let first = tokio::time::timeout(READ_PATIENCE, output.message())
        .await
        .map_err(|_| anyhow!("no connected frame within {READ_PATIENCE:?}"))??;
    match first.and_then(|frame| frame.frame) {
        Some(broker_pb::server_frame::Frame::Connected(_)) => {}
        other => bail!("the first attach frame was not connected: {other:?}"),
    }
    Ok(Term::Broker {
        input,
        output,
        instance,
        session_id,
    })
}
