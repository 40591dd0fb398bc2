//! Starting an exec with its TTY stream hijacked over a raw connection, so that output arrives
//! byte for byte.
//!
//! bollard's `start_exec` decodes the stream as if it might be multiplexed: a chunk that starts
//! with byte 0, 1 or 2 is taken for an 8-byte frame header, which corrupts raw TTY output and can
//! stall the stream waiting for a made-up frame length. It also cannot send the `ConsoleSize` that
//! engines from API 1.42 on apply before the process starts. So this module speaks the one HTTP
//! exchange itself: `POST /exec/{id}/start` with `Upgrade: tcp`, then the connection is the TTY.
//!
//! Because the connection is the broker's own socket, it is also a descriptor that can go to the
//! next broker process in a hand-off (`handoff/`), with whatever output came with the engine's
//! answer and was not read yet ([`Unread`]).

use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Buf as _, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};

use super::DockerError;
use super::endpoint::{Connection, Endpoint};
use super::engine::ApiVersion;
use crate::domain::TerminalSize;

/// The most response head the engine may send before the raw stream starts.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;
/// The most of an error body kept for the message.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// The two directions of a started exec's TTY.
pub(crate) struct AttachedExec {
    pub output: Unread<Box<dyn AsyncRead + Send + Unpin>>,
    pub input: Box<dyn AsyncWrite + Send + Unpin>,
    /// The connection's descriptor, open as long as `output` or `input` is.
    pub fd: RawFd,
}

/// A stream read after the bytes that arrived before it (behind the engine's answer), which
/// stay visible to a hand-off until they are read.
pub(crate) struct Unread<R> {
    pub unread: Arc<Mutex<Bytes>>,
    pub inner: R,
}

impl<R> Unread<R> {
    pub fn new(unread: Bytes, inner: R) -> Self {
        Self {
            unread: Arc::new(Mutex::new(unread)),
            inner,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Unread<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        {
            let mut unread = self
                .unread
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if !unread.is_empty() {
                let length = unread.len().min(buf.remaining());
                buf.put_slice(&unread[..length]);
                unread.advance(length);
                return Poll::Ready(Ok(()));
            }
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

/// Starts exec `exec_id` attached, with a TTY of `size` on engines that take a console size.
pub(crate) async fn start_exec_attached(
    endpoint: &Endpoint,
    api: ApiVersion,
    exec_id: &str,
    size: TerminalSize,
) -> Result<AttachedExec, DockerError> {
    let mut connection =
        endpoint
            .connect()
            .await
            .map_err(|source| DockerError::EngineUnreachable {
                endpoint: endpoint.to_string(),
                source,
            })?;
    let body = format!(
        r#"{{"Detach":false,"Tty":true,"ConsoleSize":[{},{}]}}"#,
        size.rows(),
        size.cols()
    );
    let request = format!(
        "POST /v{api}/exec/{exec_id}/start HTTP/1.1\r\n\
         Host: docker\r\n\
         User-Agent: ptyhub-pty-broker\r\n\
         Content-Type: application/json\r\n\
         Connection: Upgrade\r\n\
         Upgrade: tcp\r\n\
         Content-Length: {}\r\n\
         \r\n\
         {body}",
        body.len()
    );
    let io_error = |source| DockerError::Stream {
        context: "start exec",
        source,
    };
    connection
        .write_all(request.as_bytes())
        .await
        .map_err(io_error)?;
    connection.flush().await.map_err(io_error)?;

    let (head, rest) = read_response_head(&mut connection).await?;
    match head.status {
        // 101 is what engines answer to an upgrade request; very old ones answer 200 and then
        // stream the same raw bytes.
        101 | 200 => {
            let fd = connection.as_raw_fd();
            let (read_half, write_half) = tokio::io::split(connection);
            Ok(AttachedExec {
                output: Unread::new(Bytes::from(rest), Box::new(read_half)),
                input: Box::new(write_half),
                fd,
            })
        }
        status => {
            let body = read_error_body(&mut connection, &head, rest).await;
            Err(DockerError::Engine {
                status,
                message: engine_message(&body),
            })
        }
    }
}

/// The parts of an HTTP response head this module needs.
#[derive(Debug, PartialEq, Eq)]
struct ResponseHead {
    status: u16,
    content_length: Option<usize>,
    chunked: bool,
}

/// Headers an engine's answer to exec start may carry; more is refused as a protocol error.
const MAX_RESPONSE_HEADERS: usize = 64;

/// Reads up to the blank line that ends the head; returns the head and the bytes after it.
async fn read_response_head(
    connection: &mut Box<dyn Connection>,
) -> Result<(ResponseHead, Vec<u8>), DockerError> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some((head, length)) = parse_response_head(&buffer)? {
            return Ok((head, buffer[length..].to_vec()));
        }
        if buffer.len() > MAX_RESPONSE_HEAD {
            return Err(DockerError::Protocol(
                "the engine's response head is too long".to_owned(),
            ));
        }
        let read = connection
            .read(&mut chunk)
            .await
            .map_err(|source| DockerError::Stream {
                context: "read exec start response",
                source,
            })?;
        if read == 0 {
            return Err(DockerError::Protocol(
                "the engine closed the connection before answering exec start".to_owned(),
            ));
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

/// The response head at the start of `buffer` and its length in bytes, or `None` while the head
/// is incomplete.
fn parse_response_head(buffer: &[u8]) -> Result<Option<(ResponseHead, usize)>, DockerError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let length = match response.parse(buffer) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(error) => {
            let start = &buffer[..buffer.len().min(80)];
            return Err(DockerError::Protocol(format!(
                "unexpected response from the engine ({error}): {}",
                String::from_utf8_lossy(start)
            )));
        }
    };
    let mut head = ResponseHead {
        // A complete parse always has a status code.
        status: response.code.unwrap_or_default(),
        content_length: None,
        chunked: false,
    };
    for header in response.headers.iter() {
        let value = String::from_utf8_lossy(header.value);
        if header.name.eq_ignore_ascii_case("content-length") {
            head.content_length = value.trim().parse().ok();
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            head.chunked = value.to_ascii_lowercase().contains("chunked");
        }
    }
    Ok(Some((head, length)))
}

/// Reads an error response's body as far as it can; a short or broken body still gives a
/// message with the status.
async fn read_error_body(
    connection: &mut Box<dyn Connection>,
    head: &ResponseHead,
    mut body: Vec<u8>,
) -> Vec<u8> {
    let mut chunk = [0u8; 4096];
    loop {
        let complete = match head.content_length {
            Some(length) => body.len() >= length,
            None if head.chunked => find(&body, b"0\r\n\r\n").is_some(),
            None => false,
        };
        if complete || body.len() > MAX_ERROR_BODY {
            break;
        }
        match connection.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(read) => body.extend_from_slice(&chunk[..read]),
        }
    }
    if head.chunked {
        body = dechunk(&body);
    }
    if let Some(length) = head.content_length {
        body.truncate(length);
    }
    body
}

/// Decodes a chunked body, stopping at the last chunk or at the first malformed size line.
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut decoded = Vec::new();
    while let Ok(httparse::Status::Complete((data_start, size))) = httparse::parse_chunk_size(body)
    {
        // A size line may say up to 16 hex digits: more than any body has, never an overflow.
        let Some(data_end) = usize::try_from(size)
            .ok()
            .and_then(|size| data_start.checked_add(size))
        else {
            break;
        };
        if size == 0 || body.len() < data_end {
            break;
        }
        decoded.extend_from_slice(&body[data_start..data_end]);
        body = body.get(data_end + 2..).unwrap_or_default();
    }
    decoded
}

/// The engine's `{"message": "..."}`, or the body as text.
fn engine_message(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct EngineError {
        message: String,
    }
    match serde_json::from_slice::<EngineError>(body) {
        Ok(error) => error.message,
        Err(_) => String::from_utf8_lossy(body).trim().to_owned(),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use ptyhub_test_support::fuzz;

    use super::*;

    #[tokio::test]
    async fn unread_bytes_come_first_and_stay_visible_until_read() {
        let (mut writer, reader) = tokio::io::duplex(64);
        let mut stream = Unread::new(Bytes::from_static(b"head"), reader);
        let unread = Arc::clone(&stream.unread);
        writer.write_all(b"-tail").await.unwrap();
        drop(writer);
        let mut first = [0u8; 2];
        stream.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"he");
        assert_eq!(
            &unread.lock().unwrap()[..],
            b"ad",
            "what a hand-off would carry"
        );
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"ad-tail");
        assert!(unread.lock().unwrap().is_empty());
    }

    #[test]
    fn parses_status_and_body_framing() {
        let text = b"HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nContent-Length: 42\r\n\r\n{";
        let (head, length) = parse_response_head(text).unwrap().expect("a complete head");
        assert_eq!(
            head,
            ResponseHead {
                status: 409,
                content_length: Some(42),
                chunked: false
            }
        );
        assert_eq!(&text[length..], b"{");
        let (head, _) = parse_response_head(
            b"HTTP/1.1 404 Not Found\r\ntransfer-encoding: Chunked\r\nX: y\r\n\r\n",
        )
        .unwrap()
        .expect("a complete head");
        assert!(head.chunked);
        assert_eq!(
            parse_response_head(b"HTTP/1.1 101 UPGRADED\r\nConnection: Upgr").unwrap(),
            None,
            "a head without its blank line is incomplete"
        );
        assert!(parse_response_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
    }

    #[test]
    fn decodes_chunked_error_bodies_and_engine_messages() {
        let body = dechunk(b"a\r\n{\"message\"\r\n6\r\n:\"no\"}\r\n0\r\n\r\n");
        assert_eq!(body, br#"{"message":"no"}"#);
        assert_eq!(engine_message(&body), "no");
        assert_eq!(engine_message(b"plain text\n"), "plain text");
    }

    /// An engine's connection that hands out `chunks` one read at a time (split further when a
    /// read's buffer is smaller), then ends: any framing of the same stream.
    struct ScriptedConnection {
        chunks: std::collections::VecDeque<Vec<u8>>,
    }

    impl AsyncRead for ScriptedConnection {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            while let Some(chunk) = self.chunks.front_mut() {
                if chunk.is_empty() {
                    self.chunks.pop_front();
                    continue;
                }
                let length = chunk.len().min(buf.remaining());
                buf.put_slice(&chunk[..length]);
                chunk.drain(..length);
                break;
            }
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for ScriptedConnection {
        fn poll_write(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            Poll::Ready(Ok(data.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    impl std::os::fd::AsRawFd for ScriptedConnection {
        fn as_raw_fd(&self) -> RawFd {
            -1
        }
    }

    /// `stream` cut at `cuts` (positions, in any order, out of range ones ignored).
    fn framed(stream: &[u8], cuts: &[usize]) -> Box<dyn Connection> {
        let mut cuts: Vec<usize> = cuts.iter().map(|cut| cut % (stream.len() + 1)).collect();
        cuts.extend([0, stream.len()]);
        cuts.sort_unstable();
        cuts.dedup();
        let chunks = cuts
            .windows(2)
            .map(|pair| stream[pair[0]..pair[1]].to_vec())
            .collect();
        Box::new(ScriptedConnection { chunks })
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    /// An engine's answer to exec start: what the head says, its other headers, and the bytes
    /// that follow it.
    #[derive(Debug, Clone)]
    struct Answer {
        status: u16,
        reason: String,
        content_length: Option<u32>,
        chunked: bool,
        other_headers: Vec<(String, String)>,
        line_end: &'static str,
        rest: Vec<u8>,
    }

    impl Answer {
        fn head(&self) -> Vec<u8> {
            let end = self.line_end;
            let mut head = format!("HTTP/1.1 {} {}{end}", self.status, self.reason);
            for (name, value) in &self.other_headers {
                head.push_str(&format!("{name}: {value}{end}"));
            }
            if let Some(length) = self.content_length {
                head.push_str(&format!("Content-Length: {length}{end}"));
            }
            if self.chunked {
                head.push_str(&format!("Transfer-Encoding: chunked{end}"));
            }
            head.push_str(end);
            head.into_bytes()
        }

        fn stream(&self) -> Vec<u8> {
            [self.head(), self.rest.clone()].concat()
        }
    }

    fn answer() -> impl Strategy<Value = Answer> {
        let header_name = prop_oneof![
            Just("Api-Version".to_owned()),
            Just("Docker-Experimental".to_owned()),
            Just("Server".to_owned()),
            Just("Connection".to_owned()),
            Just("Upgrade".to_owned()),
            "X-[A-Za-z0-9-]{1,12}",
        ];
        (
            100..=599u16,
            "[A-Za-z ]{0,20}",
            proptest::option::of(any::<u32>()),
            any::<bool>(),
            prop::collection::vec((header_name, "[ -~]{0,40}"), 0..8),
            prop_oneof![Just("\r\n"), Just("\n")],
            prop::collection::vec(any::<u8>(), 0..300),
        )
            .prop_map(
                |(status, reason, content_length, chunked, other_headers, line_end, rest)| {
                    Answer {
                        status,
                        reason,
                        content_length,
                        chunked,
                        // A value's own spaces at its ends are not part of it.
                        other_headers: other_headers
                            .into_iter()
                            .map(|(name, value)| (name, value.trim().to_owned()))
                            .collect(),
                        line_end,
                        rest,
                    }
                },
            )
    }

    /// However the engine's answer arrives in reads, the head says what was sent and every
    /// byte after it (the TTY's first output) comes out exactly once, in order: first the bytes
    /// that came with the head, then the connection.
    #[test]
    fn fuzz_the_answer_to_exec_start_is_read_whole_however_it_is_framed() {
        let runtime = runtime();
        let cuts = prop::collection::vec(any::<usize>(), 0..12);
        fuzz::check(256, (answer(), cuts), |(answer, cuts)| {
            runtime.block_on(async {
                let stream = answer.stream();
                let mut connection = framed(&stream, &cuts);
                let (head, rest) = read_response_head(&mut connection)
                    .await
                    .map_err(|error| TestCaseError::fail(error.to_string()))?;
                prop_assert_eq!(
                    head,
                    ResponseHead {
                        status: answer.status,
                        content_length: answer.content_length.map(|length| length as usize),
                        chunked: answer.chunked,
                    }
                );
                let mut output = Unread::new(Bytes::from(rest), connection);
                let mut after_head = Vec::new();
                output.read_to_end(&mut after_head).await.unwrap();
                prop_assert_eq!(after_head, answer.rest);
                Ok(())
            })
        });
    }

    /// `bytes` with a random edit: a byte changed, inserted or dropped, or cut short.
    fn mutated(bytes: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
        let length = bytes.len().max(1);
        (0..length, any::<u8>(), 0..4u8).prop_map(move |(at, byte, edit)| {
            let mut bytes = bytes.clone();
            let at = at.min(bytes.len().saturating_sub(1));
            match edit {
                0 if !bytes.is_empty() => bytes[at] ^= byte.max(1),
                1 => bytes.truncate(at),
                2 => bytes.insert(at, byte),
                _ if !bytes.is_empty() => {
                    bytes.remove(at);
                }
                _ => bytes.push(byte),
            }
            bytes
        })
    }

    /// Whatever the engine sends, the head is parsed or refused, never a panic; a head that
    /// parses is within the bytes, and reading the same bytes in any framing gives the same
    /// verdict as parsing them whole.
    #[test]
    fn fuzz_any_answer_to_exec_start_is_parsed_or_refused_the_same_in_any_framing() {
        let runtime = runtime();
        let bytes = prop_oneof![
            prop::collection::vec(any::<u8>(), 0..200),
            answer().prop_flat_map(|answer| mutated(answer.stream())),
        ];
        let cuts = prop::collection::vec(any::<usize>(), 0..12);
        fuzz::check(512, (bytes, cuts), |(bytes, cuts)| {
            let whole = parse_response_head(&bytes);
            if let Ok(Some((_, length))) = &whole {
                prop_assert!(*length <= bytes.len());
            }
            let read = runtime.block_on(read_response_head(&mut framed(&bytes, &cuts)));
            match (&whole, read) {
                (Ok(Some((head, length))), Ok((read_head, rest))) => {
                    prop_assert_eq!(head, &read_head);
                    // What came with the head is a start of what followed it.
                    prop_assert!(bytes[*length..].starts_with(&rest));
                }
                // Incomplete as a whole: the connection ended before the head did.
                (Ok(None), Err(_)) => {}
                (Err(_), Err(_)) => {}
                (whole, read) => {
                    return Err(TestCaseError::fail(format!(
                        "whole: {whole:?}, read in pieces: {:?}",
                        read.map(|(head, _)| head)
                    )));
                }
            }
            Ok(())
        });
    }

    /// `parts` as a chunked body, sizes in hex of either case, some with an extension.
    fn chunked(parts: &[(Vec<u8>, bool, bool)]) -> Vec<u8> {
        let mut body = Vec::new();
        for (part, upper, extension) in parts {
            let size = if *upper {
                format!("{:X}", part.len())
            } else {
                format!("{:x}", part.len())
            };
            body.extend_from_slice(size.as_bytes());
            if *extension {
                body.extend_from_slice(b";name=value");
            }
            body.extend_from_slice(b"\r\n");
            body.extend_from_slice(part);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(b"0\r\n\r\n");
        body
    }

    /// A chunked error body decodes to its parts joined; any other body decodes to at most
    /// as many bytes as it has, never a panic.
    #[test]
    fn fuzz_chunked_error_bodies_decode_to_what_was_sent() {
        let parts = prop::collection::vec(
            (
                prop::collection::vec(any::<u8>(), 1..100),
                any::<bool>(),
                any::<bool>(),
            ),
            0..6,
        );
        fuzz::check(256, parts, |parts| {
            let body = chunked(&parts);
            let joined: Vec<u8> = parts.iter().flat_map(|(part, ..)| part.clone()).collect();
            prop_assert_eq!(dechunk(&body), joined);
            Ok(())
        });
        let size_line = prop_oneof![
            "[0-9a-fA-F]{1,16}",
            any::<u64>().prop_map(|size| format!("{size:x}")),
            Just("ffffffffffffffff".to_owned()),
        ];
        let bodies = prop_oneof![
            prop::collection::vec(any::<u8>(), 0..200),
            (size_line, prop::collection::vec(any::<u8>(), 0..100))
                .prop_map(|(size, data)| { [size.into_bytes(), b"\r\n".to_vec(), data].concat() }),
            Just(chunked(&[(b"engine says no".to_vec(), false, false)])).prop_flat_map(mutated),
        ];
        fuzz::check(512, bodies, |body| {
            prop_assert!(dechunk(&body).len() <= body.len());
            Ok(())
        });
    }
}
