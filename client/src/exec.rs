//! A command run like `kubectl exec`: in a session of its own, its output byte for byte (raw
//! bytes from offset 0, resumed by offset after a dropped connection), its input piped in
//! exactly, and its exit code.
//!
//! The session always has a terminal, which would echo piped input and turn `\n` into `\r\n`.
//! So the command runs under `/bin/sh -c` that first turns echo and that translation off, then
//! prints a marker (an OSC sequence no terminal shows) and `exec`s the command: output before
//! the marker is dropped, and input waits for it. Input is then encoded for the terminal's
//! line discipline ([`CanonicalInput`]).

use bytes::Bytes;
use ptyhub_model::{BrokerCloseReason, ExitStatus};

use crate::attach::{AttachOptions, Attachment, Event};
use crate::{Client, Error, ErrorCode, NewSession, TerminalSize};

/// Printed by the wrapper once the terminal's echo is off.
const READY_MARKER: &[u8] = b"\x1b]ptyhub-exec-ready\x07";

/// The wrapper: echo and newline translation off, the marker, then the command (with a clear
/// message when it does not exist, whichever shell the instance has).
fn wrapped(command: Vec<String>) -> Vec<String> {
    let mut argv = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        concat!(
            "stty -echo -onlcr icanon iexten 2>/dev/null; printf '\\033]ptyhub-exec-ready\\007'; ",
            "command -v \"$1\" >/dev/null 2>&1 || ",
            "{ printf 'ptyhub: %s: command not found\\n' \"$1\" >&2; exit 127; }; ",
            "exec \"$@\"",
        )
        .to_owned(),
        "ptyhub-exec".to_owned(),
    ];
    argv.extend(command);
    argv
}

/// What [`Client::exec_output`] collected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    pub status: ExitStatus,
    /// Everything the command wrote to its terminal (stdout and stderr, in order).
    pub output: Vec<u8>,
}

/// A running command. Read its output with [`Exec::next_output`] until `None`, then
/// [`Exec::wait`] gives the exit status. Its session is closed when the command ends; call
/// [`Exec::close`] to end it early (dropping the handle leaves it running).
#[derive(Debug)]
pub struct Exec {
    client: Client,
    instance: String,
    attachment: Attachment,
    /// Output seen before the marker (it may be split across chunks); `None` once it was seen.
    before_ready: Option<Vec<u8>>,
    /// Input written before the marker, sent once it comes.
    held_input: Vec<u8>,
    /// The input was closed before the marker; the end of file is sent once it comes.
    held_end: bool,
    encoder: CanonicalInput,
    status: Option<ExitStatus>,
}

impl Exec {
    pub(crate) async fn start(
        client: Client,
        instance: &str,
        command: Vec<String>,
        size: Option<TerminalSize>,
    ) -> Result<Self, Error> {
        let session = client
            .create_session(
                instance,
                NewSession {
                    command: wrapped(command),
                    size,
                    ..NewSession::default()
                },
            )
            .await?;
        let options = AttachOptions {
            size,
            since: Some(0),
            ..AttachOptions::default()
        };
        let attachment = match client.attach(instance, &session.id, options).await {
            Ok(attachment) => attachment,
            Err(error) => {
                let _ = client.close_session(instance, &session.id).await;
                return Err(error);
            }
        };
        Ok(Self {
            client,
            instance: instance.to_owned(),
            attachment,
            before_ready: Some(Vec::new()),
            held_input: Vec::new(),
            held_end: false,
            encoder: CanonicalInput::default(),
            status: None,
        })
    }

    /// The id of the command's session.
    pub fn session_id(&self) -> &str {
        self.attachment.session_id()
    }

    /// The next chunk of output; `None` once the command has exited.
    pub async fn next_output(&mut self) -> Result<Option<Bytes>, Error> {
        if self.status.is_some() {
            return Ok(None);
        }
        loop {
            let Some(event) = self.attachment.next().await? else {
                return Err(Error::Protocol(
                    "the stream ended before the command did".into(),
                ));
            };
            match event {
                Event::Output { data, .. } => {
                    let Some(pending) = self.before_ready.as_mut() else {
                        return Ok(Some(data));
                    };
                    pending.extend_from_slice(&data);
                    let Some(at) = pending
                        .windows(READY_MARKER.len())
                        .position(|window| window == READY_MARKER)
                    else {
                        continue;
                    };
                    let rest = pending.split_off(at + READY_MARKER.len());
                    self.before_ready = None;
                    self.flush_held_input().await?;
                    if !rest.is_empty() {
                        return Ok(Some(rest.into()));
                    }
                }
                Event::Exited(status) => {
                    self.status = Some(status);
                    // The session was only for this command.
                    if let Err(error) = self.close().await {
                        tracing::debug!(%error, "closing the command's session failed");
                    }
                    return Ok(None);
                }
                Event::Gap { lost, .. } => {
                    return Err(Error::Protocol(format!("{lost} bytes of output were lost")));
                }
                Event::Snapshot { .. } => {
                    return Err(Error::Protocol(
                        "output was lost: the server sent a screen snapshot instead of the raw bytes"
                            .into(),
                    ));
                }
                Event::TakenOver => {
                    return Err(Error::Protocol(
                        "the session was taken over by another client".into(),
                    ));
                }
                Event::Closed(reason) => {
                    return Err(Error::Protocol(format!(
                        "the session was closed before the command finished: {}",
                        reason.map_or("no reason given", BrokerCloseReason::describe)
                    )));
                }
                // Input that reached the command after it exited (a fast `true` with its input
                // closed at once) is moot: the exit follows on the stream.
                Event::Refused {
                    code: ErrorCode::WrongState,
                    ..
                } => {}
                Event::Refused { message, .. } => {
                    return Err(Error::Protocol(format!("input refused: {message}")));
                }
                // The command's session is its own: a request for control to it goes
                // unanswered, and a role given away shows as refused input.
                Event::Connected { .. }
                | Event::Reconnecting { .. }
                | Event::Resize(_)
                | Event::Resetting
                | Event::ControlRequested { .. }
                | Event::ControlDeclined { .. }
                | Event::RoleChanged(_) => {}
            }
        }
    }

    /// Pipes `data` to the command's input, exactly as given.
    pub async fn write_input(&mut self, data: &[u8]) -> Result<(), Error> {
        if self.before_ready.is_some() {
            self.held_input.extend_from_slice(data);
            return Ok(());
        }
        let encoded = self.encoder.encode(data);
        input_sent(self.attachment.send_input(encoded).await)
    }

    /// Ends the command's input (it reads end of file).
    pub async fn close_input(&mut self) -> Result<(), Error> {
        if self.before_ready.is_some() {
            self.held_end = true;
            return Ok(());
        }
        let end = self.encoder.finish();
        input_sent(self.attachment.send_input(end).await)
    }

    async fn flush_held_input(&mut self) -> Result<(), Error> {
        if !self.held_input.is_empty() {
            let held = std::mem::take(&mut self.held_input);
            let encoded = self.encoder.encode(&held);
            input_sent(self.attachment.send_input(encoded).await)?;
        }
        if std::mem::take(&mut self.held_end) {
            let end = self.encoder.finish();
            input_sent(self.attachment.send_input(end).await)?;
        }
        Ok(())
    }

    /// Reads (and drops) the rest of the output and returns the exit status.
    pub async fn wait(mut self) -> Result<ExitStatus, Error> {
        while self.next_output().await?.is_some() {}
        self.status
            .ok_or_else(|| Error::Protocol("the command ended without an exit status".into()))
    }

    /// Closes the command's session, ending its processes.
    pub async fn close(&self) -> Result<(), Error> {
        self.client
            .close_session(&self.instance, self.session_id())
            .await
            .map(|_| ())
    }
}

/// Input for a command whose stream has ended goes nowhere, as it would into a closed pipe: the
/// command's exit status is what the caller reads next.
fn input_sent(sent: Result<(), Error>) -> Result<(), Error> {
    match sent {
        Err(Error::Ended) => Ok(()),
        other => other,
    }
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

    #[test]
    fn the_command_runs_after_the_wrapper_as_its_own_arguments() {
        let argv = wrapped(vec!["printf".into(), "%s\\n".into(), "a b".into()]);
        assert_eq!(argv[0], "/bin/sh");
        assert_eq!(argv[3], "ptyhub-exec");
        assert_eq!(argv[4..], ["printf", "%s\\n", "a b"]);
    }
}
