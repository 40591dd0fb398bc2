//! The terminal stream of `ptyhub attach` and `ptyhub exec`: one broker `Attach` stream at a time,
//! resumed from the last offset after a dropped connection, until the process exits, the user
//! detaches, or another controller takes over.
//!
//! `attach` opens with a snapshot of the screen (the user's terminal is not a fresh one: the
//! snapshot starts with `ESC c`, which resets it, as tmux does on attach) and resumes with raw
//! output after a drop; `exec` always asks for raw output, since its output is the command's.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::broker::v1::{client_frame, server_frame};
use ptyhub_proto::session::v1 as session_pb;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::connection::{SessionClient, broker_client};
use crate::terminal;

/// How long a dropped stream is retried before giving up.
const RECONNECT_WINDOW: Duration = Duration::from_secs(60);
const BACKOFF_START: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// What the user typed (or piped in), as the stream should forward it.
#[derive(Debug)]
pub enum InputEvent {
    Bytes(Bytes),
    /// The user typed the detach sequence.
    Detach,
}

/// How an attach ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachOutcome {
    /// The process exited with this code (128 + signal when a signal ended it).
    Exited { code: i32, signal: Option<i32> },
    /// The user detached; the session goes on.
    Detached,
    /// Another controller took the session over.
    TakenOver,
    /// The session was closed (by a user, the reaper or a broker shutdown), for this reason.
    Closed { reason: &'static str },
    /// ptyhub itself got a signal that ends it (SIGHUP, SIGINT, SIGQUIT, SIGTERM).
    Interrupted { signal: i32 },
}

/// Everything one attach needs.
#[derive(Debug)]
pub struct AttachRequest {
    pub instance: String,
    /// The user's token: the stream goes through the gateway, which checks it.
    pub token: String,
    pub target: session_pb::AttachTarget,
    pub role: broker_pb::Role,
    pub since: Option<u64>,
    /// Open with a snapshot of the screen instead of a replay of raw bytes (only the first stream;
    /// a resumed one goes on from the last offset it wrote).
    pub snapshot: bool,
    /// A person is watching (`attach`): lost bytes and reconnections are said on stderr. `exec`
    /// fails on lost bytes instead.
    pub interactive: bool,
    /// Hold input back, and drop output, until the process prints this marker (`exec` uses it to
    /// know the terminal's echo is off before piped input is written).
    pub ready_marker: Option<&'static [u8]>,
}

/// Streams the session until it ends one of the ways in [`AttachOutcome`], reconnecting with the
/// last seen offset when the connection drops. While it is away the detach keys still work, and
/// what the user types meanwhile is sent once the stream is back.
pub async fn run_attach(
    session_client: &mut SessionClient,
    request: AttachRequest,
    input: &mut mpsc::Receiver<InputEvent>,
    resizes: &mut mpsc::Receiver<(u16, u16)>,
) -> Result<AttachOutcome> {
    let mut target = request.target.clone();
    let mut progress = Progress {
        next_offset: request.since,
        before_ready: request.ready_marker.map(|_| Vec::new()),
        told_read_only: false,
        input_open: true,
        held_input: Vec::new(),
        connected: false,
        reconnecting: false,
        pending_gap: None,
        // Without a snapshot to wait for, the stream starts where the terminal is.
        screen_drawn: !request.snapshot,
    };
    let mut dropped_since: Option<Instant> = None;
    let mut backoff = BACKOFF_START;
    loop {
        let reason = match stream_once(&target, &request, &mut progress, input, resizes).await {
            Ok(outcome) => return Ok(outcome),
            Err(StreamEnd::Fatal(error)) => return Err(error),
            Err(StreamEnd::Dropped(reason)) => reason,
        };
        // The window starts again only once a stream really worked: a ticket alone proves
        // nothing about the broker.
        if progress.connected {
            dropped_since = None;
            backoff = BACKOFF_START;
        }
        let first_drop = *dropped_since.get_or_insert_with(Instant::now);
        if first_drop.elapsed() > RECONNECT_WINDOW {
            bail!("connection lost and not restored within {RECONNECT_WINDOW:?}: {reason}");
        }
        if request.interactive && !progress.reconnecting {
            eprint!(
                "\r\n[ptyhub: connection lost ({reason}); reconnecting (the detach keys still work)]\r\n"
            );
        }
        progress.reconnecting = true;
        tracing::debug!(%reason, "attach stream dropped, resuming");
        if watching_input(tokio::time::sleep(backoff), &request, &mut progress, input)
            .await
            .is_none()
        {
            return Ok(AttachOutcome::Detached);
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
        // A fresh ticket each time: the old one may have expired while we were away.
        let ticket = session_client.issue_attach_ticket(session_pb::IssueAttachTicketRequest {
            instance: request.instance.clone(),
            session_id: target.session_id.clone(),
            role: request.role.into(),
        });
        match watching_input(ticket, &request, &mut progress, input).await {
            None => return Ok(AttachOutcome::Detached),
            Some(Ok(fresh)) => target = fresh.into_inner(),
            Some(Err(status)) if is_transient(&status) => {}
            Some(Err(status)) => return Err(anyhow!(status.message().to_owned())),
        }
    }
}

/// Why the broker closed a session, as the user should read it.
fn close_reason(reason: i32) -> &'static str {
    match broker_pb::CloseReason::try_from(reason) {
        Ok(broker_pb::CloseReason::Killed) => "someone closed it",
        Ok(broker_pb::CloseReason::Exited) => "its process had exited",
        Ok(broker_pb::CloseReason::IdleReaped) => "nobody was attached for too long",
        Ok(broker_pb::CloseReason::Shutdown) => "the server is shutting down",
        Ok(broker_pb::CloseReason::SpawnFailed) => "its command could not be started again",
        Ok(broker_pb::CloseReason::Unspecified) | Err(_) => "no reason given",
    }
}

/// Input kept while the stream is away, at most this much; beyond it keystrokes are dropped
/// (and the user told) rather than piling up.
const HELD_INPUT_LIMIT: usize = 64 * 1024;

/// Runs `work` while no stream is open, still reading the input: the detach keys end the wait
/// (`None`), and other input is held for the next stream.
async fn watching_input<T>(
    work: impl std::future::Future<Output = T>,
    request: &AttachRequest,
    progress: &mut Progress,
    input: &mut mpsc::Receiver<InputEvent>,
) -> Option<T> {
    tokio::pin!(work);
    loop {
        // Before `exec`'s marker, input must wait in the channel: the terminal still echoes.
        let ready = progress.before_ready.is_none();
        tokio::select! {
            done = &mut work => return Some(done),
            event = input.recv(), if progress.input_open && ready => match event {
                Some(InputEvent::Detach) => return None,
                Some(InputEvent::Bytes(data)) => {
                    if request.role == broker_pb::Role::Viewer {
                        continue;
                    }
                    if progress.held_input.len() + data.len() > HELD_INPUT_LIMIT {
                        if request.interactive {
                            eprint!("\r\n[ptyhub: not connected: input dropped]\r\n");
                        }
                        continue;
                    }
                    progress.held_input.extend_from_slice(&data);
                }
                None => progress.input_open = false,
            },
        }
    }
}

/// What one attach has got so far, carried across reconnections.
#[derive(Debug)]
struct Progress {
    /// The offset to resume from: the byte after the last one written to stdout.
    next_offset: Option<u64>,
    /// Output seen while waiting for the ready marker (a marker may be split across chunks);
    /// `None` once it was seen, or when there is no marker.
    before_ready: Option<Vec<u8>>,
    /// A viewer has been told once that its typing goes nowhere.
    told_read_only: bool,
    /// The input has not ended.
    input_open: bool,
    /// Input typed while no stream was open, sent first on the next one.
    held_input: Vec<u8>,
    /// The current stream got its `connected` frame.
    connected: bool,
    /// A stream dropped and no new one is connected yet.
    reconnecting: bool,
    /// Bytes lost before the frame that comes next: said unless a snapshot redraws the screen.
    pending_gap: Option<u64>,
    /// The terminal shows the session (a snapshot or output was written): from here on a new
    /// stream resumes from `next_offset`, before it a new stream asks for the snapshot again.
    screen_drawn: bool,
}

enum StreamEnd {
    /// The connection went away; resume from the last offset.
    Dropped(String),
    /// The server refused: resuming would not help.
    Fatal(anyhow::Error),
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

async fn stream_once(
    target: &session_pb::AttachTarget,
    request: &AttachRequest,
    progress: &mut Progress,
    input: &mut mpsc::Receiver<InputEvent>,
    resizes: &mut mpsc::Receiver<(u16, u16)>,
) -> Result<AttachOutcome, StreamEnd> {
    progress.connected = false;
    let mut broker = broker_client(&target.broker_endpoint)
        .await
        .map_err(|error| StreamEnd::Dropped(format!("{error:#}")))?;
    let (frames, frame_receiver) = mpsc::channel::<broker_pb::ClientFrame>(32);
    let size = terminal::local_size().map(|(cols, rows)| broker_pb::TerminalSize {
        cols: cols.into(),
        rows: rows.into(),
    });
    let hello = broker_pb::ClientFrame {
        frame: Some(client_frame::Frame::Hello(broker_pb::Hello {
            ticket: target.ticket.clone(),
            session_id: target.session_id.clone(),
            role: request.role.into(),
            size: if request.role == broker_pb::Role::Controller {
                size
            } else {
                None
            },
            since: progress.next_offset.filter(|_| progress.screen_drawn),
            snapshot: !progress.screen_drawn,
        })),
    };
    // The channel is empty and open: these cannot fail.
    let _ = frames.send(hello).await;
    if !progress.held_input.is_empty() {
        let data = Bytes::from(std::mem::take(&mut progress.held_input));
        let _ = frames
            .send(broker_pb::ClientFrame {
                frame: Some(client_frame::Frame::Input(broker_pb::Input { data })),
            })
            .await;
    }
    let mut attach = tonic::Request::new(ReceiverStream::new(frame_receiver));
    let metadata = attach.metadata_mut();
    let (Ok(authorization), Ok(instance)) = (
        format!("Bearer {}", request.token).parse(),
        request.instance.parse(),
    ) else {
        return Err(StreamEnd::Fatal(anyhow!(
            "the token or the instance name cannot be sent as gRPC metadata"
        )));
    };
    metadata.insert("authorization", authorization);
    metadata.insert("ptyhub-instance", instance);
    let mut server = match broker.attach(attach).await {
        Ok(response) => response.into_inner(),
        Err(status) if is_transient(&status) => {
            return Err(StreamEnd::Dropped(status.message().to_owned()));
        }
        Err(status) => return Err(StreamEnd::Fatal(anyhow!(status.message().to_owned()))),
    };
    let mut stdout = tokio::io::stdout();
    loop {
        let ready = progress.before_ready.is_none();
        tokio::select! {
            frame = server.message() => {
                let frame = match frame {
                    Ok(Some(frame)) => frame,
                    Ok(None) => return Err(StreamEnd::Dropped("the broker ended the stream".into())),
                    Err(status) if is_transient(&status) => {
                        return Err(StreamEnd::Dropped(status.message().to_owned()));
                    }
                    Err(status) => return Err(StreamEnd::Fatal(anyhow!(status.message().to_owned()))),
                };
                // A gap that a snapshot follows needs no notice: the screen is whole again.
                if let Some(lost) = progress.pending_gap.take()
                    && !matches!(frame.frame, Some(server_frame::Frame::Snapshot(_)))
                {
                    eprint!("\r\n[ptyhub: {lost} bytes of output were lost]\r\n");
                }
                match frame.frame {
                    Some(server_frame::Frame::Snapshot(snapshot)) => {
                        // The snapshot stands in for raw bytes: fine for a person's terminal, a
                        // loss for `exec`, whose output is the command's.
                        if !request.interactive {
                            return Err(StreamEnd::Fatal(anyhow!("output was lost: the server sent a screen snapshot instead of the raw bytes")));
                        }
                        stdout.write_all(&snapshot.data).await.map_err(|error| StreamEnd::Fatal(error.into()))?;
                        stdout.flush().await.map_err(|error| StreamEnd::Fatal(error.into()))?;
                        progress.next_offset = Some(snapshot.offset);
                        progress.screen_drawn = true;
                    }
                    Some(server_frame::Frame::Output(output)) => {
                        progress.next_offset = Some(output.offset + output.data.len() as u64);
                        progress.screen_drawn = true;
                        let data: &[u8] = match (progress.before_ready.as_mut(), request.ready_marker) {
                            (Some(pending), Some(marker)) => {
                                pending.extend_from_slice(&output.data);
                                let Some(at) = pending.windows(marker.len()).position(|window| window == marker) else {
                                    continue;
                                };
                                let rest = pending.split_off(at + marker.len());
                                progress.before_ready = None;
                                stdout.write_all(&rest).await.map_err(|error| StreamEnd::Fatal(error.into()))?;
                                stdout.flush().await.map_err(|error| StreamEnd::Fatal(error.into()))?;
                                continue;
                            }
                            _ => &output.data,
                        };
                        stdout.write_all(data).await.map_err(|error| StreamEnd::Fatal(error.into()))?;
                        stdout.flush().await.map_err(|error| StreamEnd::Fatal(error.into()))?;
                    }
                    Some(server_frame::Frame::Connected(connected)) => {
                        progress.next_offset = Some(connected.offset);
                        progress.connected = true;
                        if std::mem::take(&mut progress.reconnecting) && request.interactive {
                            eprint!("\r\n[ptyhub: reconnected]\r\n");
                        }
                    }
                    Some(server_frame::Frame::Gap(gap)) => {
                        if !request.interactive {
                            return Err(StreamEnd::Fatal(anyhow!("{} bytes of output were lost", gap.lost)));
                        }
                        progress.pending_gap = Some(gap.lost);
                        progress.next_offset = Some(gap.offset);
                    }
                    Some(server_frame::Frame::Exit(exit)) => {
                        return Ok(AttachOutcome::Exited { code: exit.code, signal: exit.signal });
                    }
                    Some(server_frame::Frame::Detached(_)) => return Ok(AttachOutcome::TakenOver),
                    Some(server_frame::Frame::Closed(closed)) => {
                        return Ok(AttachOutcome::Closed { reason: close_reason(closed.reason) });
                    }
                    Some(server_frame::Frame::Error(error)) => {
                        eprint!("\r\n[ptyhub: {}]\r\n", error.message);
                    }
                    Some(server_frame::Frame::Resetting(_)) => {
                        // The broker's screen is cleared for the new process; so is the user's.
                        if request.interactive {
                            stdout.write_all(terminal::RESET_TERMINAL).await.map_err(|error| StreamEnd::Fatal(error.into()))?;
                            stdout.flush().await.map_err(|error| StreamEnd::Fatal(error.into()))?;
                        }
                    }
                    Some(server_frame::Frame::Resize(_)) | None => {}
                }
            }
            event = input.recv(), if progress.input_open && ready => {
                let data = match event {
                    Some(InputEvent::Bytes(data)) => data,
                    Some(InputEvent::Detach) => return Ok(AttachOutcome::Detached),
                    // Input ended: keep streaming output until the process ends.
                    None => {
                        progress.input_open = false;
                        continue;
                    }
                };
                // A viewer's input would be refused by the broker, keystroke by keystroke: say
                // it once here instead.
                if request.role == broker_pb::Role::Viewer {
                    if !progress.told_read_only {
                        progress.told_read_only = true;
                        eprint!("\r\n[ptyhub: read-only viewer: typing is not sent; the detach keys still work]\r\n");
                    }
                    continue;
                }
                let frame = broker_pb::ClientFrame { frame: Some(client_frame::Frame::Input(broker_pb::Input { data })) };
                if frames.send(frame).await.is_err() {
                    return Err(StreamEnd::Dropped("the stream closed".into()));
                }
            }
            Some((cols, rows)) = resizes.recv() => {
                // A viewer watches at the controller's size.
                if request.role == broker_pb::Role::Viewer {
                    continue;
                }
                let frame = broker_pb::ClientFrame {
                    frame: Some(client_frame::Frame::Resize(broker_pb::TerminalSize { cols: cols.into(), rows: rows.into() })),
                };
                if frames.send(frame).await.is_err() {
                    return Err(StreamEnd::Dropped("the stream closed".into()));
                }
            }
        }
    }
}

/// How stdin reaches the session's terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputMode {
    /// Keystrokes from a person's terminal in raw mode, forwarded unchanged.
    Keystrokes,
    /// A script's piped input for a terminal in canonical mode (`exec`): encoded so that it
    /// arrives byte for byte ([`CanonicalInput`]) and its end is an end of file.
    Piped,
}

/// Forwards stdin to `events` in chunks, turning the detach sequence into [`InputEvent::Detach`].
pub fn spawn_stdin_reader(
    mut detach_keys: terminal::DetachKeys,
    mode: InputMode,
) -> mpsc::Receiver<InputEvent> {
    let (events, receiver) = mpsc::channel(16);
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt as _;
        let mut stdin = tokio::io::stdin();
        let mut buffer = vec![0u8; 16 * 1024];
        let mut canonical = CanonicalInput::default();
        loop {
            let read = match stdin.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => read,
            };
            let chunk = &buffer[..read];
            let event = match mode {
                InputMode::Piped => InputEvent::Bytes(canonical.encode(chunk).into()),
                InputMode::Keystrokes => match detach_keys.scan(chunk) {
                    terminal::InputScan::Forward(bytes) if bytes.is_empty() => continue,
                    terminal::InputScan::Forward(bytes) => InputEvent::Bytes(bytes.into()),
                    terminal::InputScan::Detach(before) => {
                        if !before.is_empty() {
                            let _ = events.send(InputEvent::Bytes(before.into())).await;
                        }
                        let _ = events.send(InputEvent::Detach).await;
                        return;
                    }
                },
            };
            if events.send(event).await.is_err() {
                return;
            }
        }
        if mode == InputMode::Piped {
            let _ = events
                .send(InputEvent::Bytes(canonical.finish().into()))
                .await;
        }
    });
    receiver
}

/// Encodes piped input for a terminal in canonical mode with echo off, so that the command
/// reading it gets exactly the bytes that were piped in, then end of file:
///
/// - every control character the line discipline would act on (Ctrl-C, Ctrl-D, Ctrl-U,
///   carriage return, DEL...) is quoted with the literal-next character (Ctrl-V);
/// - a line is handed over with Ctrl-D (which passes a non-empty partial line to the reader
///   without adding anything) before it reaches the terminal's 4 KiB line limit, beyond which
///   the kernel would drop bytes;
/// - the end of input is Ctrl-D on an empty line (twice when the last line was not ended).
#[derive(Debug, Default)]
pub struct CanonicalInput {
    /// Bytes of the current line not yet handed over.
    pending_line: usize,
}

/// Under the kernel's canonical line buffer (4096 bytes including the line's end).
const CANONICAL_LINE_LIMIT: usize = 4000;
const LITERAL_NEXT: u8 = 0x16;
const END_OF_FILE: u8 = 0x04;

impl CanonicalInput {
    pub fn encode(&mut self, input: &[u8]) -> Vec<u8> {
        let mut encoded = Vec::with_capacity(input.len() + input.len() / 64 + 2);
        for &byte in input {
            if byte == b'\n' {
                encoded.push(byte);
                self.pending_line = 0;
                continue;
            }
            if byte < 0x20 || byte == 0x7f {
                encoded.push(LITERAL_NEXT);
            }
            encoded.push(byte);
            self.pending_line += 1;
            if self.pending_line == CANONICAL_LINE_LIMIT {
                encoded.push(END_OF_FILE);
                self.pending_line = 0;
            }
        }
        encoded
    }

    /// The end of input: hands over an unfinished line, then an empty read (end of file).
    pub fn finish(&mut self) -> Vec<u8> {
        let encoded = if self.pending_line > 0 {
            vec![END_OF_FILE, END_OF_FILE]
        } else {
            vec![END_OF_FILE]
        };
        self.pending_line = 0;
        encoded
    }
}

/// Sends the local terminal size on every SIGWINCH.
pub fn spawn_resize_watcher() -> Result<mpsc::Receiver<(u16, u16)>> {
    let (sizes, receiver) = mpsc::channel(4);
    let mut window_changes =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
            .context("cannot watch for window size changes")?;
    tokio::spawn(async move {
        while window_changes.recv().await.is_some() {
            if let Some(size) = terminal::local_size()
                && sizes.send(size).await.is_err()
            {
                return;
            }
        }
    });
    Ok(receiver)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_quoted_and_newlines_are_not() {
        let mut canonical = CanonicalInput::default();
        assert_eq!(
            canonical.encode(b"a\x03b\rc\x7f\n"),
            b"a\x16\x03b\x16\rc\x16\x7f\n".to_vec()
        );
        assert_eq!(canonical.finish(), vec![END_OF_FILE]);
    }

    #[test]
    fn long_lines_are_handed_over_before_the_kernel_limit() {
        let mut canonical = CanonicalInput::default();
        let encoded = canonical.encode(&[b'x'; CANONICAL_LINE_LIMIT + 10]);
        assert_eq!(encoded.len(), CANONICAL_LINE_LIMIT + 10 + 1);
        assert_eq!(encoded[CANONICAL_LINE_LIMIT], END_OF_FILE);
        // Ten bytes are pending: the end hands them over, then ends the input.
        assert_eq!(canonical.finish(), vec![END_OF_FILE, END_OF_FILE]);
    }

    #[test]
    fn a_line_handed_over_exactly_at_the_end_needs_one_end_of_file() {
        let mut canonical = CanonicalInput::default();
        canonical.encode(&[b'x'; CANONICAL_LINE_LIMIT]);
        assert_eq!(canonical.finish(), vec![END_OF_FILE]);
    }
}
