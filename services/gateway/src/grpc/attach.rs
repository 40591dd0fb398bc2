//! `Attach` streams to brokers: opening one with its hello, and its two halves as the
//! WebSocket bridge and the relay use them.

use futures::channel::mpsc as queue;
use futures::{FutureExt, Stream, StreamExt, TryStreamExt as _};
use ptyhub_model::proto::ProtoEnum as _;
use ptyhub_model::{Role, TerminalSize};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_wire::ServerFrames;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::brokers::BrokerChannels;
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
        let (commands, command_receiver) = AttachCommands::channel(ATTACH_COMMAND_QUEUE);
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
        // The hello is boxed: the broker keeps this stream of frames (on either road), the
        // hello's room in it included, for as long as the call lives, and takes the hello once.
        let frames = futures::stream::once(std::future::ready(Box::new(hello)))
            .map(|hello| *hello)
            .chain(command_receiver.map(command_frame));
        let events = open_attach(&self.brokers, &target.broker_endpoint, frames).await?;
        Ok((AttachEvents { events }, commands))
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
    ) -> Result<ServerFrames, ApiError> {
        open_attach(&self.brokers, broker_endpoint, ReceiverStream::new(frames)).await
    }
}

/// Opens `Attach` on the broker at `endpoint` with `frames`, the hello first: a broker in this
/// process takes the frames as they are, one elsewhere over its channel.
async fn open_attach(
    brokers: &BrokerChannels,
    endpoint: &str,
    frames: impl Stream<Item = broker_pb::ClientFrame> + Send + 'static,
) -> Result<ServerFrames, ApiError> {
    if let Some(broker) = brokers.attach_in_process(endpoint) {
        return broker
            .attach(frames.map(Ok).boxed())
            .await
            .map_err(broker_error);
    }
    let events = broker_pb::pty_broker_client::PtyBrokerClient::new(brokers.transport(endpoint)?)
        .attach(frames)
        .await
        .map_err(broker_error)?
        .into_inner();
    Ok(events.boxed())
}

/// How many client frames may wait for the broker before the WebSocket stops reading the client.
const ATTACH_COMMAND_QUEUE: usize = 64;

/// The server half of an `Attach` stream.
pub struct AttachEvents {
    events: ServerFrames,
}

impl std::fmt::Debug for AttachEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttachEvents").finish_non_exhaustive()
    }
}

impl AttachEvents {
    /// The next event; `None` when the broker ended the stream.
    pub async fn next(&mut self) -> Result<Option<TerminalEvent>, ApiError> {
        loop {
            let message = match self.events.try_next().await {
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

/// The client half of an `Attach` stream: a bounded queue of commands, in order, that the
/// stream's request body takes one at a time.
///
/// The queue is `futures`' bounded channel rather than tokio's: it allocates a small node per
/// queued command and nothing per slot, so an idle socket's queue costs a few hundred bytes;
/// tokio's allocates its first block of 32 slots when it is made (1.8 KiB of `TerminalCommand`s,
/// a tenth of an idle WebSocket on the gateway). Both are bounded, keep order, and say when the
/// receiving stream is gone.
#[derive(Debug)]
pub struct AttachCommands {
    commands: queue::Sender<TerminalCommand>,
}

impl AttachCommands {
    /// A queue of `capacity` commands (at least one) and the receiving end a stream reads.
    /// `futures`' channel gives each sender one slot beyond its buffer, and this is its only
    /// sender.
    pub(crate) fn channel(capacity: usize) -> (Self, queue::Receiver<TerminalCommand>) {
        let (commands, receiver) = queue::channel(capacity.saturating_sub(1));
        (Self { commands }, receiver)
    }

    /// Queues a command if there is room, without waiting: `Ok(Some(command))` hands it back
    /// when the queue is full, an error means the stream has ended.
    pub fn try_send(
        &mut self,
        command: TerminalCommand,
    ) -> Result<Option<TerminalCommand>, ApiError> {
        match self.commands.try_send(command) {
            Ok(()) => Ok(None),
            Err(refused) if refused.is_full() => Ok(Some(refused.into_inner())),
            Err(_) => Err(attach_stream_ended()),
        }
    }

    /// Waits for room for one command, then takes `command` and queues it. An error means the
    /// stream has ended, and the command is dropped. Cancel-safe: the command stays where it is
    /// until there is room.
    pub async fn send_when_room(
        &mut self,
        command: &mut Option<TerminalCommand>,
    ) -> Result<(), ApiError> {
        let room = std::future::poll_fn(|context| self.commands.poll_ready(context)).await;
        match (room, command.take()) {
            (Ok(()), Some(command)) => self
                .commands
                .start_send(command)
                .map_err(|_| attach_stream_ended()),
            (Ok(()), None) => Ok(()),
            (Err(_), _) => Err(attach_stream_ended()),
        }
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

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn input(byte: u8) -> TerminalCommand {
        TerminalCommand::Input {
            data: Bytes::copy_from_slice(&[byte]),
            id: None,
        }
    }

    #[tokio::test]
    async fn commands_are_taken_in_order_and_a_full_queue_hands_the_next_back() {
        let (mut commands, mut receiver) = AttachCommands::channel(ATTACH_COMMAND_QUEUE);
        for byte in 0..ATTACH_COMMAND_QUEUE as u8 {
            assert!(commands.try_send(input(byte)).unwrap().is_none(), "{byte}");
        }
        let refused = commands.try_send(input(255)).unwrap();
        assert_eq!(
            refused,
            Some(input(255)),
            "past its capacity the queue refuses"
        );
        let mut waiting = refused;
        // Room comes back as the stream takes commands, oldest first.
        assert_eq!(receiver.next().await, Some(input(0)));
        commands.send_when_room(&mut waiting).await.unwrap();
        assert!(waiting.is_none());
        drop(commands);
        let rest: Vec<TerminalCommand> = receiver.collect().await;
        let expected: Vec<TerminalCommand> = (1..ATTACH_COMMAND_QUEUE as u8)
            .chain([255])
            .map(input)
            .collect();
        assert_eq!(rest, expected);
    }

    #[tokio::test]
    async fn a_queue_whose_stream_ended_refuses_and_drops_the_waiting_command() {
        let (mut commands, receiver) = AttachCommands::channel(1);
        drop(receiver);
        assert_eq!(
            commands.try_send(input(1)).unwrap_err().message,
            "attach stream ended"
        );
        let mut waiting = Some(input(2));
        assert!(commands.send_when_room(&mut waiting).await.is_err());
        assert!(waiting.is_none());
    }
}
