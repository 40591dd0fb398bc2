//! One terminal stream through the gateway that outlives its connections: a task owns the
//! current `Attach` stream, and when the connection drops (the gateway restarts, the network
//! blips) it opens a new one with `since` set to the offset after the last byte it delivered,
//! so every byte arrives once, in order, across any number of reconnections.
//!
//! The caller reads [`Event`]s and sends input, resizes and resets; it never sees a connection.
//! A refusal that reconnecting would not cure (the session is gone, the credential no longer
//! covers it) ends the stream with that error.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use ptyhub_model::proto::ProtoEnum as _;
use ptyhub_model::{Attendee, BrokerCloseReason, ExitStatus, Role, TerminalSize};
use ptyhub_proto::broker::v1 as pb;
use ptyhub_proto::broker::v1::client_frame::Frame as ClientFrameKind;
use ptyhub_proto::broker::v1::server_frame::Frame as ServerFrameKind;
use ptyhub_wire::ErrorCode;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use crate::{Client, Error, size_to_proto};

const BACKOFF_START: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Events read ahead of the caller; beyond it the stream waits (and so does the PTY, for a
/// controller), which is the contract's flow control.
const EVENT_QUEUE: usize = 64;
/// Commands queued towards the gateway.
const COMMAND_QUEUE: usize = 64;

/// How to attach.
#[derive(Debug, Clone)]
pub struct AttachOptions {
    /// A controller may type, resize and reset, and takes control from the previous one; a
    /// viewer only watches.
    pub role: Role,
    /// Applied on attach by a controller.
    pub size: Option<TerminalSize>,
    /// The first stream replays from this offset; `None` from the oldest byte kept (or a
    /// snapshot, with `snapshot`).
    pub since: Option<u64>,
    /// Start with a [`Event::Snapshot`] of the screen instead of a replay of raw bytes.
    pub snapshot: bool,
    /// How long a lost connection is retried before [`Error::ConnectionLost`].
    pub reconnect_window: Duration,
}

impl Default for AttachOptions {
    fn default() -> Self {
        Self {
            role: Role::Controller,
            size: None,
            since: None,
            snapshot: false,
            reconnect_window: Duration::from_secs(60),
        }
    }
}

/// What happens on an attached terminal, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A stream started (first, and again after every reconnection and every reset): output
    /// continues at `offset`.
    Connected {
        offset: u64,
        size: Option<TerminalSize>,
        role: Role,
        /// This stream replaced one that dropped.
        resumed: bool,
    },
    /// Output bytes; `offset` is the position of `data[0]`.
    Output { offset: u64, data: Bytes },
    /// Bytes that redraw the screen as of `offset` on a terminal reset with `ESC c` (which
    /// they start with); output goes on from `offset`.
    Snapshot {
        offset: u64,
        size: Option<TerminalSize>,
        data: Bytes,
    },
    /// `lost` bytes were no longer kept; the stream goes on at `offset`.
    Gap { lost: u64, offset: u64 },
    /// The terminal's size changed.
    Resize(TerminalSize),
    /// The session is being reset; a new `Connected` follows. Clear the terminal.
    Resetting,
    /// A command was refused (a viewer's input, a bad size, a request for control the broker
    /// would not take); the stream goes on.
    Refused { code: ErrorCode, message: String },
    /// Someone asks this stream, the controller, for control: answer with
    /// [`Attachment::answer_control`] (or by id without a stream); `requester` as presence
    /// lists it (`None` when the broker sent none this client can read).
    ControlRequested {
        request_id: u64,
        requester: Option<Attendee>,
    },
    /// The controller declined this stream's request for control; nothing else changed.
    ControlDeclined { request_id: u64 },
    /// This stream's role changed on the same stream: control was granted to it, or it gave
    /// control away (or the session's control mode changed). A reconnection attaches with it.
    RoleChanged(Role),
    /// The connection dropped; the stream is being resumed from the last offset.
    Reconnecting { reason: String },
    /// The process ended. The last event.
    Exited(ExitStatus),
    /// Another controller took over; do not reconnect automatically. The last event.
    TakenOver,
    /// The session was closed, for the reason its broker gave (`None`: one this client does not
    /// know). The last event.
    Closed(Option<BrokerCloseReason>),
}

impl Event {
    fn is_last(&self) -> bool {
        matches!(self, Event::Exited(_) | Event::TakenOver | Event::Closed(_))
    }
}

/// The receipt of one input: it was written to the terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputReceipt {
    /// The session's output offset just before the input's first byte was written: whatever
    /// the program printed in answer comes at this offset or after it.
    pub offset: u64,
    /// How many bytes were written (all of the input's).
    pub bytes: u64,
}

/// An attached terminal. Dropping it detaches (the session goes on); input queued and not yet
/// sent is dropped with it, so wait for [`Attachment::flush_input`] first when it matters.
#[derive(Debug)]
pub struct Attachment {
    session_id: String,
    events: mpsc::Receiver<Result<Event, Error>>,
    commands: mpsc::Sender<Command>,
    _task: AbortOnDropHandle<()>,
}

#[derive(Debug)]
enum Command {
    Frame(ClientFrameKind),
    /// Input whose receipt the caller waits for.
    Input {
        data: Bytes,
        receipt: oneshot::Sender<Result<InputReceipt, Error>>,
    },
}

impl Attachment {
    /// Opens the first stream, so that a refusal (an unknown session, a credential without
    /// the instance) is this call's error, then hands the stream to its task.
    pub(crate) async fn open(
        client: Client,
        instance: &str,
        session_id: &str,
        options: AttachOptions,
    ) -> Result<Self, Error> {
        let resume = Resume {
            client,
            instance: instance.to_owned(),
            session_id: session_id.to_owned(),
            role: options.role,
            size: options.size,
            next_offset: options.since,
            drawn: !options.snapshot,
            resumed: false,
            reconnect_window: options.reconnect_window,
            next_input_id: 0,
        };
        let first = resume.open_stream().await?;
        let (event_sender, events) = mpsc::channel(EVENT_QUEUE);
        let (commands, command_receiver) = mpsc::channel(COMMAND_QUEUE);
        let task = tokio::spawn(resume.run(first, command_receiver, event_sender));
        Ok(Self {
            session_id: session_id.to_owned(),
            events,
            commands,
            _task: AbortOnDropHandle::new(task),
        })
    }

    /// The session's id.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The next event; `Ok(None)` after the last one ([`Event::Exited`], [`Event::TakenOver`],
    /// [`Event::Closed`]); an error when the stream cannot go on.
    pub async fn next(&mut self) -> Result<Option<Event>, Error> {
        self.events.recv().await.transpose()
    }

    /// Writes bytes to the terminal (a controller's call; a viewer's input is refused with an
    /// [`Event::Refused`]). At most 1 MiB at a time.
    pub async fn send_input(&self, data: impl Into<Bytes>) -> Result<(), Error> {
        self.send(ClientFrameKind::Input(pb::Input {
            data: data.into(),
            input_id: None,
        }))
        .await
    }

    /// Writes bytes to the terminal and waits until they were written, for their receipt. A
    /// refusal (a viewer's input, a process that ended) is the error [`Error::Rpc`] with its
    /// code; a connection that dropped before the receipt came is
    /// [`Error::InputUnconfirmed`] (the input may or may not have been written; it is not sent
    /// again). Input to a shell that has not shown its first prompt yet is written after it.
    /// Events keep coming meanwhile: once 64 wait unread, the stream waits for the caller (flow
    /// control), and so does the receipt.
    pub async fn send_input_with_receipt(
        &self,
        data: impl Into<Bytes>,
    ) -> Result<InputReceipt, Error> {
        let (receipt, answer) = oneshot::channel();
        self.commands
            .send(Command::Input {
                data: data.into(),
                receipt,
            })
            .await
            .map_err(|_| Error::Ended)?;
        answer.await.map_err(|_| Error::Ended)?
    }

    /// Waits until every input sent before was written: an input without bytes, whose receipt
    /// comes once those before it were written.
    pub async fn flush_input(&self) -> Result<InputReceipt, Error> {
        self.send_input_with_receipt(Bytes::new()).await
    }

    /// Resizes the terminal (a controller's call).
    pub async fn resize(&self, size: TerminalSize) -> Result<(), Error> {
        self.send(ClientFrameKind::Resize(size_to_proto(size)))
            .await
    }

    /// Restarts the session's command in place (a controller's call).
    pub async fn reset(&self) -> Result<(), Error> {
        self.send(ClientFrameKind::Reset(pb::ResetTerminal {}))
            .await
    }

    /// Asks the controller for control on this stream (a viewer's call whose credential may
    /// control). The answer comes as [`Event::RoleChanged`] (granted),
    /// [`Event::ControlDeclined`], or [`Event::Refused`] (a credential that may only view, a
    /// stream that controls already or asked already). A request ends with its stream: one
    /// still waiting when the connection drops is not made again on the next.
    pub async fn request_control(&self) -> Result<(), Error> {
        self.send(ClientFrameKind::RequestControl(pb::RequestControl {}))
            .await
    }

    /// Answers an [`Event::ControlRequested`] (the controller's call): `grant` moves control to
    /// the requester, and this stream reads on as a viewer ([`Event::RoleChanged`]).
    pub async fn answer_control(&self, request_id: u64, grant: bool) -> Result<(), Error> {
        self.send(ClientFrameKind::AnswerControl(pb::AnswerControl {
            request_id,
            grant,
        }))
        .await
    }

    async fn send(&self, frame: ClientFrameKind) -> Result<(), Error> {
        self.commands
            .send(Command::Frame(frame))
            .await
            .map_err(|_| Error::Ended)
    }
}

/// Where the next stream resumes, and what it asks for.
struct Resume {
    client: Client,
    instance: String,
    session_id: String,
    role: Role,
    /// The size of the hello: the one asked for, then the last resize sent.
    size: Option<TerminalSize>,
    /// The offset after the last byte delivered.
    next_offset: Option<u64>,
    /// Something was delivered that shows the screen (a snapshot or output): from here on a
    /// new stream resumes by offset; before it a new stream asks for the snapshot again.
    drawn: bool,
    resumed: bool,
    reconnect_window: Duration,
    /// The id the next input that asks for a receipt gets.
    next_input_id: u64,
}

/// Inputs sent on the current stream whose receipts have not come yet, oldest first.
type PendingReceipts = VecDeque<(String, oneshot::Sender<Result<InputReceipt, Error>>)>;

/// Why one stream ended.
enum StreamEnd {
    /// The last event was delivered, or the caller left.
    Done,
    /// The connection went away; resume.
    Dropped(String),
    /// Resuming would not help.
    Fatal(Error),
}

fn is_transient(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable
            | tonic::Code::Unknown
            | tonic::Code::Cancelled
            | tonic::Code::Internal
    )
}

impl Resume {
    async fn open_stream(
        &self,
    ) -> Result<
        (
            mpsc::Sender<pb::ClientFrame>,
            tonic::Streaming<pb::ServerFrame>,
        ),
        Error,
    > {
        let (frames, receiver) = mpsc::channel(COMMAND_QUEUE);
        let hello = pb::Hello {
            // The gateway authorises the stream by the credential and gets the ticket itself.
            ticket: String::new(),
            session_id: self.session_id.clone(),
            role: self.role.to_proto(),
            size: self
                .size
                .filter(|_| self.role == Role::Controller)
                .map(size_to_proto),
            since: self.next_offset.filter(|_| self.drawn),
            snapshot: !self.drawn,
            present_only: false,
        };
        // The queue is empty and its receiver alive: this cannot fail.
        let _ = frames
            .send(pb::ClientFrame {
                frame: Some(ClientFrameKind::Hello(hello)),
            })
            .await;
        let server = self.client.attach_stream(&self.instance, receiver).await?;
        Ok((frames, server))
    }

    async fn run(
        mut self,
        first: (
            mpsc::Sender<pb::ClientFrame>,
            tonic::Streaming<pb::ServerFrame>,
        ),
        mut commands: mpsc::Receiver<Command>,
        events: mpsc::Sender<Result<Event, Error>>,
    ) {
        let mut current = Some(first);
        let mut dropped_since: Option<Instant> = None;
        let mut backoff = BACKOFF_START;
        let mut told_reconnecting = false;
        loop {
            let stream = match current.take() {
                Some(stream) => Ok(stream),
                None => self.open_stream().await,
            };
            let (end, connected) = match stream {
                Ok((frames, server)) => self.pump(frames, server, &mut commands, &events).await,
                Err(Error::Rpc(status)) if is_transient(&status) => {
                    (StreamEnd::Dropped(status.message().to_owned()), false)
                }
                Err(Error::Unreachable { source, .. }) => {
                    (StreamEnd::Dropped(source.to_string()), false)
                }
                Err(error) => (StreamEnd::Fatal(error), false),
            };
            let reason = match end {
                StreamEnd::Done => return,
                StreamEnd::Fatal(error) => {
                    let _ = events.send(Err(error)).await;
                    return;
                }
                StreamEnd::Dropped(reason) => reason,
            };
            // The window starts again only once a stream really worked.
            if connected {
                dropped_since = None;
                backoff = BACKOFF_START;
                told_reconnecting = false;
            }
            let first_drop = *dropped_since.get_or_insert_with(Instant::now);
            if first_drop.elapsed() > self.reconnect_window {
                let lost = Error::ConnectionLost {
                    window: self.reconnect_window,
                    reason,
                };
                let _ = events.send(Err(lost)).await;
                return;
            }
            if !told_reconnecting {
                told_reconnecting = true;
                tracing::debug!(%reason, "attach stream dropped, resuming");
                if events
                    .send(Ok(Event::Reconnecting { reason }))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            self.resumed = true;
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = events.closed() => return,
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// Runs one stream until it ends; says whether it got its `Connected`.
    async fn pump(
        &mut self,
        frames: mpsc::Sender<pb::ClientFrame>,
        mut server: tonic::Streaming<pb::ServerFrame>,
        commands: &mut mpsc::Receiver<Command>,
        events: &mpsc::Sender<Result<Event, Error>>,
    ) -> (StreamEnd, bool) {
        let mut connected = false;
        let mut pending = PendingReceipts::new();
        let end = self
            .pump_frames(
                frames,
                &mut server,
                commands,
                events,
                &mut pending,
                &mut connected,
            )
            .await;
        // Whether these were written is unknown: the stream went before their receipts did.
        for (_, receipt) in pending {
            let _ = receipt.send(Err(Error::InputUnconfirmed));
        }
        (end, connected)
    }

    /// [`Resume::pump`]'s loop: `connected` says whether the stream got its `Connected`.
    async fn pump_frames(
        &mut self,
        frames: mpsc::Sender<pb::ClientFrame>,
        server: &mut tonic::Streaming<pb::ServerFrame>,
        commands: &mut mpsc::Receiver<Command>,
        events: &mpsc::Sender<Result<Event, Error>>,
        pending: &mut PendingReceipts,
        connected: &mut bool,
    ) -> StreamEnd {
        let mut commands_open = true;
        loop {
            tokio::select! {
                frame = server.message() => {
                    let frame = match frame {
                        Ok(Some(frame)) => frame,
                        Ok(None) => return StreamEnd::Dropped("the gateway ended the stream".into()),
                        Err(status) if is_transient(&status) => {
                            return StreamEnd::Dropped(status.message().to_owned());
                        }
                        Err(status) => return StreamEnd::Fatal(Error::Rpc(status)),
                    };
                    let Some(frame) = answer_receipt(frame, pending) else {
                        continue;
                    };
                    let Some(event) = self.event_of(frame) else {
                        continue;
                    };
                    if matches!(event, Event::Connected { .. }) {
                        *connected = true;
                    }
                    let last = event.is_last();
                    if events.send(Ok(event)).await.is_err() || last {
                        return StreamEnd::Done;
                    }
                }
                command = commands.recv(), if commands_open => {
                    let frame = match command {
                        Some(Command::Frame(frame)) => frame,
                        Some(Command::Input { data, receipt }) => {
                            let input_id = self.next_input_id.to_string();
                            self.next_input_id += 1;
                            pending.push_back((input_id.clone(), receipt));
                            ClientFrameKind::Input(pb::Input {
                                data,
                                input_id: Some(input_id),
                            })
                        }
                        None => {
                            commands_open = false;
                            continue;
                        }
                    };
                    if let ClientFrameKind::Resize(size) = &frame {
                        self.size = TerminalSize::new(size.cols, size.rows).ok().or(self.size);
                    }
                    if frames.send(pb::ClientFrame { frame: Some(frame) }).await.is_err() {
                        return StreamEnd::Dropped("the stream closed".into());
                    }
                }
            }
        }
    }

    /// The event of a server frame, noting where the stream is.
    fn event_of(&mut self, frame: pb::ServerFrame) -> Option<Event> {
        let event = match frame.frame? {
            ServerFrameKind::Connected(connected) => {
                self.next_offset = Some(connected.offset);
                Event::Connected {
                    offset: connected.offset,
                    size: size_from_proto(connected.size),
                    role: role_from_proto(connected.role),
                    resumed: self.resumed,
                }
            }
            ServerFrameKind::Output(output) => {
                self.next_offset = Some(output.offset + output.data.len() as u64);
                self.drawn = true;
                Event::Output {
                    offset: output.offset,
                    data: output.data,
                }
            }
            ServerFrameKind::Snapshot(snapshot) => {
                self.next_offset = Some(snapshot.offset);
                self.drawn = true;
                Event::Snapshot {
                    offset: snapshot.offset,
                    size: size_from_proto(snapshot.size),
                    data: snapshot.data,
                }
            }
            ServerFrameKind::Gap(gap) => {
                self.next_offset = Some(gap.offset);
                Event::Gap {
                    lost: gap.lost,
                    offset: gap.offset,
                }
            }
            ServerFrameKind::Resize(size) => Event::Resize(size_from_proto(Some(size))?),
            ServerFrameKind::Resetting(_) => Event::Resetting,
            ServerFrameKind::Detached(_) => Event::TakenOver,
            ServerFrameKind::Exit(exit) => Event::Exited(ExitStatus::from(exit)),
            // Answered by `answer_receipt` before it gets here.
            ServerFrameKind::InputAck(_) => return None,
            ServerFrameKind::ControlRequested(requested) => Event::ControlRequested {
                request_id: requested.request_id,
                requester: requested
                    .requester
                    .and_then(|requester| Attendee::try_from(requester).ok()),
            },
            ServerFrameKind::ControlDeclined(declined) => Event::ControlDeclined {
                request_id: declined.request_id,
            },
            ServerFrameKind::RoleChanged(changed) => {
                // The next stream after a dropped connection attaches with the role this one
                // has now: a viewer granted control resumes as the controller, and a controller
                // that gave control away resumes watching instead of taking control back.
                self.role = role_from_proto(changed.role);
                Event::RoleChanged(self.role)
            }
            ServerFrameKind::Error(error) => Event::Refused {
                code: ErrorCode::from_grpc(tonic::Code::from(error.code)),
                message: error.message,
            },
            ServerFrameKind::Closed(closed) => {
                Event::Closed(BrokerCloseReason::from_proto(closed.reason).ok())
            }
        };
        Some(event)
    }
}

/// Answers the caller waiting for the receipt `frame` is, or the refusal of its input; any other
/// frame is handed back.
fn answer_receipt(
    frame: pb::ServerFrame,
    pending: &mut PendingReceipts,
) -> Option<pb::ServerFrame> {
    let (input_id, answer) = match &frame.frame {
        Some(ServerFrameKind::InputAck(ack)) => (
            &ack.input_id,
            Ok(InputReceipt {
                offset: ack.offset,
                bytes: ack.bytes,
            }),
        ),
        Some(ServerFrameKind::Error(error)) => match &error.input_id {
            Some(input_id) => (
                input_id,
                Err(Error::Rpc(tonic::Status::new(
                    tonic::Code::from(error.code),
                    error.message.clone(),
                ))),
            ),
            None => return Some(frame),
        },
        _ => return Some(frame),
    };
    // Answers come in the order of the inputs; one this stream did not send is nobody's.
    if let Some(at) = pending.iter().position(|(id, _)| id == input_id) {
        let (_, receipt) = pending.remove(at).expect("a pending receipt");
        let _ = receipt.send(answer);
    }
    None
}

fn size_from_proto(size: Option<pb::TerminalSize>) -> Option<TerminalSize> {
    let size = size?;
    TerminalSize::new(size.cols, size.rows).ok()
}

/// The role a frame names; one this client does not know gives it no more than watching (as the
/// gateway takes it), so that an unknown role never lets it type.
fn role_from_proto(role: i32) -> Role {
    Role::from_proto(role).unwrap_or(Role::Viewer)
}
