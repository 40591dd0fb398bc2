//! `Attach` streams to brokers: opening one with its hello, and its two halves as the
//! WebSocket bridge and the relay use them.

use futures::{FutureExt, StreamExt};
use ptyhub_model::proto::ProtoEnum as _;
use ptyhub_model::{Role, TerminalSize};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::domain::{AttachTarget, TerminalCommand, TerminalEvent};
use crate::error::ApiError;

use super::convert::{attach_target_from_proto, event_from_proto};
use super::{Upstreams, broker_error, session_api_error};

impl Upstreams {
    /// Opens an `Attach` stream and sends its `Hello`. The first event is read by the caller.
    /// With `snapshot`, the stream starts with a snapshot of the screen instead of a replay.
    pub async fn attach(
        &self,
        target: &AttachTarget,
        size: Option<TerminalSize>,
        since: Option<u64>,
        snapshot: bool,
    ) -> Result<(AttachEvents, AttachCommands), ApiError> {
        let broker = self.brokers.transport(&target.broker_endpoint)?;
        // The queue holds commands, not client frames: a bounded channel allocates its first
        // block of slots up front, and a frame (the hello's variant) is twice a command's size.
        let (commands, command_receiver) = mpsc::channel(ATTACH_COMMAND_QUEUE);
        let hello = broker_pb::ClientFrame {
            frame: Some(broker_pb::client_frame::Frame::Hello(broker_pb::Hello {
                ticket: target.ticket.clone(),
                session_id: target.session_id.clone(),
                role: target.role.to_proto(),
                size: size.map(Into::into),
                since,
                snapshot,
                present_only: target.present_only,
            })),
        };
        let frames = futures::stream::once(std::future::ready(hello))
            .chain(ReceiverStream::new(command_receiver).map(command_frame));
        let events = broker_pb::pty_broker_client::PtyBrokerClient::new(broker)
            .attach(frames)
            .await
            .map_err(broker_error)?
            .into_inner();
        Ok((AttachEvents { events }, AttachCommands { commands }))
    }
}

impl Upstreams {
    /// A fresh ticket for a session the caller was checked for, with the broker it lives on.
    pub async fn issue_attach_ticket(
        &self,
        instance_id: &str,
        session_id: &(impl std::fmt::Display + ?Sized),
        role: Role,
    ) -> Result<AttachTarget, ApiError> {
        let target = self
            .session_api
            .clone()
            .issue_attach_ticket(session_pb::IssueAttachTicketRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_string(),
                role: role.to_proto(),
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(attach_target_from_proto(target))
    }

    /// Opens a broker `Attach` whose client frames are `frames` (the first one the hello) and
    /// returns its server frames unchanged: the public relay passes them through as they are.
    pub async fn attach_frames(
        &self,
        broker_endpoint: &str,
        frames: mpsc::Receiver<broker_pb::ClientFrame>,
    ) -> Result<tonic::Streaming<broker_pb::ServerFrame>, ApiError> {
        let broker = self.brokers.transport(broker_endpoint)?;
        broker_pb::pty_broker_client::PtyBrokerClient::new(broker)
            .attach(ReceiverStream::new(frames))
            .await
            .map(tonic::Response::into_inner)
            .map_err(broker_error)
    }
}

/// How many client frames may wait for the broker before the WebSocket stops reading the client.
const ATTACH_COMMAND_QUEUE: usize = 64;

/// The server half of an `Attach` stream.
#[derive(Debug)]
pub struct AttachEvents {
    events: tonic::Streaming<broker_pb::ServerFrame>,
}

impl AttachEvents {
    /// The next event; `None` when the broker ended the stream.
    pub async fn next(&mut self) -> Result<Option<TerminalEvent>, ApiError> {
        loop {
            let message = match self.events.message().await {
                Err(status) if ptyhub_wire::is_handing_over(&status) => {
                    return Ok(Some(TerminalEvent::HandingOver));
                }
                message => message.map_err(broker_error)?,
            };
            match message {
                None => return Ok(None),
                Some(frame) => {
                    if let Some(event) = event_from_proto(frame) {
                        return Ok(Some(event));
                    }
                }
            }
        }
    }

    /// The next event if one is already here, without waiting.
    pub fn next_ready(&mut self) -> Option<Result<Option<TerminalEvent>, ApiError>> {
        self.next().now_or_never()
    }
}

/// The client half of an `Attach` stream.
#[derive(Debug, Clone)]
pub struct AttachCommands {
    commands: mpsc::Sender<TerminalCommand>,
}

impl AttachCommands {
    /// A queue of `capacity` commands and the receiving end a stream would read.
    #[cfg(test)]
    pub(crate) fn channel(capacity: usize) -> (Self, mpsc::Receiver<TerminalCommand>) {
        let (commands, receiver) = mpsc::channel(capacity);
        (Self { commands }, receiver)
    }

    /// Queues a command if there is room, without waiting: `Ok(Some(command))` hands it back
    /// when the queue is full, an error means the stream has ended.
    pub fn try_send(&self, command: TerminalCommand) -> Result<Option<TerminalCommand>, ApiError> {
        match self.commands.try_send(command) {
            Ok(()) => Ok(None),
            Err(mpsc::error::TrySendError::Full(command)) => Ok(Some(command)),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(attach_stream_ended()),
        }
    }

    /// Waits for room for one command; an error means the stream has ended.
    pub async fn reserve(&self) -> Result<mpsc::Permit<'_, TerminalCommand>, ApiError> {
        self.commands
            .reserve()
            .await
            .map_err(|_| attach_stream_ended())
    }
}

fn attach_stream_ended() -> ApiError {
    ApiError::unavailable("attach stream ended")
}

/// The client frame that carries `command`.
fn command_frame(command: TerminalCommand) -> broker_pb::ClientFrame {
    let frame = match command {
        TerminalCommand::Input { data, id } => {
            broker_pb::client_frame::Frame::Input(broker_pb::Input { data, input_id: id })
        }
        TerminalCommand::Resize(size) => broker_pb::client_frame::Frame::Resize(size.into()),
        TerminalCommand::Reset => {
            broker_pb::client_frame::Frame::Reset(broker_pb::ResetTerminal {})
        }
        TerminalCommand::RequestControl => {
            broker_pb::client_frame::Frame::RequestControl(broker_pb::RequestControl {})
        }
        TerminalCommand::AnswerControl { request_id, grant } => {
            broker_pb::client_frame::Frame::AnswerControl(broker_pb::AnswerControl {
                request_id,
                grant,
            })
        }
    };
    broker_pb::ClientFrame { frame: Some(frame) }
}
