//! The terminal side of `ptyhub attach` and `ptyhub exec`: the user's keystrokes (or piped
//! input) to the session and its output to stdout, on `ptyhub-client`'s attachment, which goes
//! through the gateway and resumes by offset by itself after a dropped connection. The detach
//! keys work whether or not a connection is up.
//!
//! `attach` opens with a snapshot of the screen (the user's terminal is not a fresh one: the
//! snapshot starts with `ESC c`, which resets it, as tmux does on attach) and resumes with raw
//! output after a drop; `exec` takes the command's raw bytes from `ptyhub_client::Exec`.
//!
//! An attach takes part in the session's control (docs/CONTRACT.md, "Control requests"): it
//! says when someone asks it for control, when control is granted to it or taken from it, and
//! when its own request (`--request-control`) is declined, and its input follows its role.

use anyhow::{Result, anyhow};
use bytes::Bytes;
use ptyhub_client::{Attachment, Attendee, BrokerCloseReason, Event, Exec, Role, TerminalSize};
use tokio::io::AsyncWriteExt as _;
use tokio::sync::mpsc;

use crate::{manage, terminal};

/// How long a detach waits for the input typed before it to be written.
const INPUT_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

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

/// Which session an attach is on, for the notices that tell the user what to type next.
#[derive(Debug, Clone)]
pub struct SessionPlace {
    pub instance: String,
    pub session_id: String,
    /// Ask for control on the stream once the screen is drawn.
    pub ask_for_control: bool,
}

/// Streams the session until it ends one of the ways in [`AttachOutcome`]. While the
/// attachment reconnects, the detach keys still work, and what the user types meanwhile waits
/// in the attachment's queue for the next stream.
///
/// The stream's role may change while it runs (a grant to it, control given away, a change of
/// the session's control mode): each change is said in a notice, and input and resizes follow
/// the role it has now. A request for control to this stream, as the controller, is said with
/// the command that answers it.
pub async fn run_attach(
    attachment: &mut Attachment,
    place: &SessionPlace,
    mut role: Role,
    input: &mut mpsc::Receiver<InputEvent>,
    resizes: &mut mpsc::Receiver<(u16, u16)>,
) -> Result<AttachOutcome> {
    let mut stdout = tokio::io::stdout();
    let mut input_open = true;
    let mut told_read_only = false;
    let mut asked = !place.ask_for_control;
    let mut reconnecting = false;
    // Bytes lost before the frame that comes next: said unless a snapshot redraws the screen.
    let mut pending_gap: Option<u64> = None;
    loop {
        tokio::select! {
            event = attachment.next() => {
                let Some(event) = event? else {
                    return Err(anyhow!("the stream ended without an exit status"));
                };
                if let Some(lost) = pending_gap.take()
                    && !matches!(event, Event::Snapshot { .. })
                {
                    eprint!("\r\n[ptyhub: {lost} bytes of output were lost]\r\n");
                }
                match event {
                    Event::Output { data, .. } | Event::Snapshot { data, .. } => {
                        stdout.write_all(&data).await?;
                        stdout.flush().await?;
                        // Asked once the screen is drawn (a snapshot starts by resetting it),
                        // so that the notice, and a refusal, stay in sight.
                        if !std::mem::replace(&mut asked, true) {
                            attachment.request_control().await?;
                            eprint!("\r\n[ptyhub: asked the controller for control: you watch until it is granted]\r\n");
                        }
                    }
                    Event::Connected { resumed, role: connected_role, .. } => {
                        role = connected_role;
                        if resumed && std::mem::take(&mut reconnecting) {
                            eprint!("\r\n[ptyhub: reconnected]\r\n");
                        }
                    }
                    Event::ControlRequested { request_id, requester } => {
                        eprint!("\r\n[ptyhub: {} asks for control (request {request_id}): `ptyhub control {} {} grant {request_id}` gives it, `decline {request_id}` refuses]\r\n",
                            describe_requester(requester.as_ref()), place.instance, place.session_id);
                    }
                    Event::ControlDeclined { request_id } => {
                        eprint!("\r\n[ptyhub: your request for control (request {request_id}) was declined; you still watch]\r\n");
                    }
                    Event::RoleChanged(changed) => {
                        role = changed;
                        told_read_only = false;
                        match changed {
                            Role::Controller => eprint!("\r\n[ptyhub: control was granted to you: your typing is sent]\r\n"),
                            Role::Viewer => eprint!("\r\n[ptyhub: control was taken from you: you watch now, and typing is not sent]\r\n"),
                        }
                    }
                    Event::Reconnecting { reason } => {
                        reconnecting = true;
                        eprint!("\r\n[ptyhub: connection lost ({reason}); reconnecting (the detach keys still work)]\r\n");
                    }
                    Event::Gap { lost, .. } => pending_gap = Some(lost),
                    Event::Resetting => {
                        // The broker's screen is cleared for the new process; so is the user's.
                        stdout.write_all(terminal::RESET_TERMINAL).await?;
                        stdout.flush().await?;
                    }
                    Event::Refused { message, .. } => eprint!("\r\n[ptyhub: {message}]\r\n"),
                    Event::Exited(status) => {
                        return Ok(AttachOutcome::Exited { code: status.code, signal: status.signal });
                    }
                    Event::TakenOver => return Ok(AttachOutcome::TakenOver),
                    Event::Closed(reason) => return Ok(AttachOutcome::Closed {
                        reason: reason.map_or("no reason given", BrokerCloseReason::describe),
                    }),
                    Event::Resize(_) => {}
                }
            }
            event = input.recv(), if input_open => match event {
                Some(InputEvent::Bytes(data)) => {
                    // A viewer's input would be refused keystroke by keystroke: say it once.
                    if role == Role::Viewer {
                        if !told_read_only {
                            told_read_only = true;
                            eprint!("\r\n[ptyhub: read-only viewer: typing is not sent; the detach keys still work]\r\n");
                        }
                        continue;
                    }
                    // Refused only once the stream has ended: its last event says how.
                    if attachment.send_input(data).await.is_err() {
                        input_open = false;
                    }
                }
                Some(InputEvent::Detach) => {
                    // What was typed before the detach keys is written before the stream goes.
                    if role == Role::Controller {
                        let _ = tokio::time::timeout(INPUT_FLUSH, attachment.flush_input()).await;
                    }
                    return Ok(AttachOutcome::Detached);
                }
                // Input ended: keep streaming output until the process ends.
                None => input_open = false,
            },
            Some((cols, rows)) = resizes.recv() => {
                // A viewer watches at the controller's size.
                if role == Role::Viewer {
                    continue;
                }
                if let Ok(size) = TerminalSize::new(cols.into(), rows.into()) {
                    let _ = attachment.resize(size).await;
                }
            }
        }
    }
}

/// Who asks for control, as a notice names them: the principal and what it came through.
fn describe_requester(requester: Option<&Attendee>) -> String {
    match requester {
        Some(requester) if !requester.surface.is_empty() => format!(
            "{} ({})",
            manage::or_someone(&requester.principal),
            manage::shown(&requester.surface)
        ),
        Some(requester) => manage::or_someone(&requester.principal),
        None => "someone".to_owned(),
    }
}

/// Streams a command's output to stdout and the piped input to it, until it exits.
pub async fn run_exec(exec: &mut Exec, input: &mut mpsc::Receiver<InputEvent>) -> Result<i32> {
    let mut stdout = tokio::io::stdout();
    let mut input_open = true;
    loop {
        tokio::select! {
            output = exec.next_output() => match output? {
                Some(data) => {
                    stdout.write_all(&data).await?;
                    stdout.flush().await?;
                }
                None => break,
            },
            event = input.recv(), if input_open => match event {
                Some(InputEvent::Bytes(data)) => exec.write_input(&data).await?,
                Some(InputEvent::Detach) => {}
                None => {
                    input_open = false;
                    exec.close_input().await?;
                }
            },
        }
    }
    Ok(0)
}

/// How stdin reaches the session's terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputMode {
    /// Keystrokes from a person's terminal in raw mode, forwarded unchanged; the detach keys
    /// detach.
    Keystrokes,
    /// A script's piped input (`exec`), as it is; its end closes the command's input.
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
        loop {
            let read = match stdin.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => read,
            };
            let chunk = &buffer[..read];
            let event = match mode {
                InputMode::Piped => InputEvent::Bytes(Bytes::copy_from_slice(chunk)),
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
    });
    receiver
}

/// Sends the local terminal size on every SIGWINCH.
pub fn spawn_resize_watcher() -> Result<mpsc::Receiver<(u16, u16)>> {
    use anyhow::Context as _;
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
