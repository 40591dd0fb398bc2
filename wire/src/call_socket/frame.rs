//! The frames of a call socket (see the module's documentation): reading them from a socket,
//! queueing and writing them, and the encoding of heads and trailers.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf as _, BufMut as _, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use tokio::io::{AsyncRead, AsyncWrite};

/// The version a head carries; a peer that reads another refuses the call.
const VERSION: u8 = 1;
/// Kind byte and length.
const PREFIX_BYTES: usize = 5;
/// The most a head or trailers frame may hold.
pub(super) const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The most a data frame may hold; longer body chunks are sent as several frames.
pub(super) const MAX_DATA_BYTES: usize = 1024 * 1024;
/// What a read asks the socket for, at least.
const READ_CHUNK: usize = 4 * 1024;
/// Payloads up to this size are copied next to their prefix, so that a keystroke or a line of
/// output goes out in one slice; longer ones are written from where they are.
const COPY_BELOW: usize = 4 * 1024;
/// Slices per vectored write.
const MAX_SLICES: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Kind {
    Head = 1,
    Data = 2,
    End = 3,
    Trailers = 4,
}

impl Kind {
    fn from_byte(byte: u8) -> Option<Self> {
        Some(match byte {
            1 => Kind::Head,
            2 => Kind::Data,
            3 => Kind::End,
            4 => Kind::Trailers,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Head => "head",
            Kind::Data => "data",
            Kind::End => "end",
            Kind::Trailers => "trailers",
        }
    }

    /// The most a frame of this kind may hold.
    fn limit(self) -> usize {
        match self {
            Kind::Head | Kind::Trailers => MAX_HEAD_BYTES,
            Kind::Data => MAX_DATA_BYTES,
            Kind::End => 0,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Frame {
    Head(Bytes),
    Data(Bytes),
    End,
    Trailers(Bytes),
}

impl Frame {
    pub fn name(&self) -> &'static str {
        match self {
            Frame::Head(_) => Kind::Head,
            Frame::Data(_) => Kind::Data,
            Frame::End => Kind::End,
            Frame::Trailers(_) => Kind::Trailers,
        }
        .name()
    }
}

/// Why the frames of a connection cannot be read.
#[derive(Debug, thiserror::Error)]
pub(super) enum FrameError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("the connection ended inside a frame")]
    Truncated,
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("a {kind} frame of {len} bytes, above the limit of {limit}")]
    TooLong {
        kind: &'static str,
        len: usize,
        limit: usize,
    },
    #[error("{0}")]
    Malformed(String),
}

fn malformed(what: impl Into<String>) -> FrameError {
    FrameError::Malformed(what.into())
}

/// Reads frames from one side of a connection.
#[derive(Debug)]
pub(super) struct FrameReader<R> {
    io: R,
    buffer: BytesMut,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(io: R) -> Self {
        Self {
            io,
            buffer: BytesMut::new(),
        }
    }

    /// The next frame; `None` when the connection ended between frames.
    pub fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Frame>, FrameError>> {
        loop {
            if let Some(frame) = self.parse()? {
                return Poll::Ready(Ok(Some(frame)));
            }
            if self.buffer.capacity() - self.buffer.len() < READ_CHUNK {
                self.buffer.reserve(READ_CHUNK);
            }
            let read = ready!(tokio_util::io::poll_read_buf(
                Pin::new(&mut self.io),
                cx,
                &mut self.buffer
            ))?;
            if read == 0 {
                return Poll::Ready(if self.buffer.is_empty() {
                    Ok(None)
                } else {
                    Err(FrameError::Truncated)
                });
            }
        }
    }

    /// The next frame if the buffer holds all of it.
    fn parse(&mut self) -> Result<Option<Frame>, FrameError> {
        if self.buffer.len() < PREFIX_BYTES {
            return Ok(None);
        }
        let byte = self.buffer[0];
        let kind = Kind::from_byte(byte).ok_or(FrameError::UnknownKind(byte))?;
        let len = u32::from_be_bytes([
            self.buffer[1],
            self.buffer[2],
            self.buffer[3],
            self.buffer[4],
        ]) as usize;
        if len > kind.limit() {
            return Err(FrameError::TooLong {
                kind: kind.name(),
                len,
                limit: kind.limit(),
            });
        }
        if self.buffer.len() < PREFIX_BYTES + len {
            self.buffer.reserve(PREFIX_BYTES + len - self.buffer.len());
            return Ok(None);
        }
        self.buffer.advance(PREFIX_BYTES);
        let payload = self.buffer.split_to(len).freeze();
        Ok(Some(match kind {
            Kind::Head => Frame::Head(payload),
            Kind::Data => Frame::Data(payload),
            Kind::End => Frame::End,
            Kind::Trailers => Frame::Trailers(payload),
        }))
    }
}

/// Queues frames and writes them to one side of a connection.
#[derive(Debug)]
pub(super) struct FrameWriter<W> {
    io: W,
    /// Written in order; `staging` is the last part, still growing.
    queue: VecDeque<Bytes>,
    staging: BytesMut,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    pub fn new(io: W) -> Self {
        Self {
            io,
            queue: VecDeque::new(),
            staging: BytesMut::new(),
        }
    }

    /// Queues a frame; a data payload longer than a frame may hold becomes several frames.
    pub fn queue(&mut self, kind: Kind, mut payload: Bytes) {
        if kind == Kind::Data {
            while payload.len() > MAX_DATA_BYTES {
                let first = payload.split_to(MAX_DATA_BYTES);
                self.queue_one(kind, first);
            }
        }
        self.queue_one(kind, payload);
    }

    fn queue_one(&mut self, kind: Kind, payload: Bytes) {
        debug_assert!(payload.len() <= MAX_DATA_BYTES.max(MAX_HEAD_BYTES));
        self.staging.reserve(PREFIX_BYTES);
        self.staging.put_u8(kind as u8);
        self.staging.put_u32(payload.len() as u32);
        if payload.len() < COPY_BELOW {
            self.staging.extend_from_slice(&payload);
        } else {
            self.queue.push_back(self.staging.split().freeze());
            self.queue.push_back(payload);
        }
    }

    /// Bytes waiting to be written.
    pub fn queued(&self) -> usize {
        self.queue.iter().map(Bytes::len).sum::<usize>() + self.staging.len()
    }

    /// Writes what is queued; ready once all of it is written.
    pub fn poll_write_queued(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.staging.is_empty() {
            self.queue.push_back(self.staging.split().freeze());
        }
        while !self.queue.is_empty() {
            let mut slices = [IoSlice::new(&[]); MAX_SLICES];
            let mut count = 0;
            for (slice, bytes) in slices.iter_mut().zip(&self.queue) {
                *slice = IoSlice::new(bytes);
                count += 1;
            }
            let written = ready!(Pin::new(&mut self.io).poll_write_vectored(cx, &slices[..count]))?;
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.consume(written);
        }
        Poll::Ready(Ok(()))
    }

    fn consume(&mut self, mut written: usize) {
        while written > 0 {
            let front = self.queue.front_mut().expect("written bytes were queued");
            if front.len() <= written {
                written -= front.len();
                self.queue.pop_front();
            } else {
                front.advance(written);
                written = 0;
            }
        }
    }

    /// Shuts the writing side down (after the last frame).
    pub fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

pub(super) fn encode_request_head(path: &str, headers: &HeaderMap) -> Result<Bytes, FrameError> {
    let mut head = BytesMut::new();
    head.put_u8(VERSION);
    put_short(&mut head, path.as_bytes(), "the path")?;
    put_headers(&mut head, headers)?;
    Ok(head.freeze())
}

/// The request's path (as a URI: what an `http::Request` holds) and headers.
pub(super) fn decode_request_head(mut head: Bytes) -> Result<(Uri, HeaderMap), FrameError> {
    check_version(&mut head)?;
    let path = take_short(&mut head, "the path")?;
    let path = Uri::from_maybe_shared(path)
        .ok()
        .filter(|uri| {
            uri.scheme().is_none() && uri.authority().is_none() && uri.path().starts_with('/')
        })
        .ok_or_else(|| malformed("the path is not a URI path"))?;
    let headers = take_headers(&mut head)?;
    Ok((path, headers))
}

pub(super) fn encode_response_head(
    status: StatusCode,
    headers: &HeaderMap,
) -> Result<Bytes, FrameError> {
    let mut head = BytesMut::new();
    head.put_u8(VERSION);
    head.put_u16(status.as_u16());
    put_headers(&mut head, headers)?;
    Ok(head.freeze())
}

pub(super) fn decode_response_head(mut head: Bytes) -> Result<(StatusCode, HeaderMap), FrameError> {
    check_version(&mut head)?;
    if head.remaining() < 2 {
        return Err(malformed("the head ends before its status"));
    }
    let status = StatusCode::from_u16(head.get_u16())
        .map_err(|_| malformed("the head's status is not an HTTP status"))?;
    let headers = take_headers(&mut head)?;
    Ok((status, headers))
}

pub(super) fn encode_trailers(trailers: &HeaderMap) -> Result<Bytes, FrameError> {
    let mut encoded = BytesMut::new();
    put_headers(&mut encoded, trailers)?;
    Ok(encoded.freeze())
}

pub(super) fn decode_trailers(mut trailers: Bytes) -> Result<HeaderMap, FrameError> {
    take_headers(&mut trailers)
}

fn check_version(head: &mut Bytes) -> Result<(), FrameError> {
    match head.first() {
        Some(&VERSION) => {
            head.advance(1);
            Ok(())
        }
        Some(other) => Err(malformed(format!(
            "call socket version {other}; this side speaks {VERSION}"
        ))),
        None => Err(malformed("an empty head")),
    }
}

fn put_short(out: &mut BytesMut, bytes: &[u8], what: &str) -> Result<(), FrameError> {
    let len = u16::try_from(bytes.len()).map_err(|_| malformed(format!("{what} is too long")))?;
    out.put_u16(len);
    out.extend_from_slice(bytes);
    if out.len() > MAX_HEAD_BYTES {
        return Err(malformed(format!(
            "the headers are above the limit of {MAX_HEAD_BYTES} bytes"
        )));
    }
    Ok(())
}

fn take_short(bytes: &mut Bytes, what: &str) -> Result<Bytes, FrameError> {
    if bytes.remaining() < 2 {
        return Err(malformed(format!("the frame ends before {what}")));
    }
    let len = bytes.get_u16() as usize;
    if bytes.remaining() < len {
        return Err(malformed(format!("the frame ends inside {what}")));
    }
    Ok(bytes.split_to(len))
}

fn put_headers(out: &mut BytesMut, headers: &HeaderMap) -> Result<(), FrameError> {
    let count = u16::try_from(headers.len()).map_err(|_| malformed("too many headers"))?;
    out.put_u16(count);
    for (name, value) in headers {
        put_short(out, name.as_str().as_bytes(), "a header's name")?;
        put_short(out, value.as_bytes(), "a header's value")?;
    }
    Ok(())
}

fn take_headers(bytes: &mut Bytes) -> Result<HeaderMap, FrameError> {
    if bytes.remaining() < 2 {
        return Err(malformed("the frame ends before its headers"));
    }
    let count = bytes.get_u16() as usize;
    let mut headers = HeaderMap::with_capacity(count.min(64));
    for _ in 0..count {
        let name = take_short(bytes, "a header's name")?;
        let value = take_short(bytes, "a header's value")?;
        let name = HeaderName::from_bytes(&name)
            .map_err(|_| malformed("a header's name is not a valid HTTP header name"))?;
        let value = HeaderValue::from_maybe_shared(value)
            .map_err(|_| malformed(format!("the value of {name} is not a valid header value")))?;
        headers.append(name, value);
    }
    if bytes.has_remaining() {
        return Err(malformed("bytes after the headers"));
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/grpc"));
        headers.append("x-many", HeaderValue::from_static("one"));
        headers.append("x-many", HeaderValue::from_static("two"));
        headers.insert("x-data-bin", HeaderValue::from_static("AAEC"));
        headers
    }

    #[test]
    fn heads_and_trailers_survive_their_encoding() {
        let head = encode_request_head("/a.B/C", &headers()).unwrap();
        assert_eq!(
            decode_request_head(head).unwrap(),
            (Uri::from_static("/a.B/C"), headers())
        );
        let head = encode_response_head(StatusCode::OK, &headers()).unwrap();
        assert_eq!(
            decode_response_head(head).unwrap(),
            (StatusCode::OK, headers())
        );
        let trailers = encode_trailers(&headers()).unwrap();
        assert_eq!(decode_trailers(trailers).unwrap(), headers());
        assert_eq!(
            decode_trailers(encode_trailers(&HeaderMap::new()).unwrap()).unwrap(),
            HeaderMap::new()
        );
    }

    #[test]
    fn a_bad_head_is_an_error_that_says_what() {
        let good = encode_request_head("/a.B/C", &headers()).unwrap();
        let mut other_version = good.to_vec();
        other_version[0] = 9;
        let cut = good.slice(..good.len() - 1);
        let mut trailing = good.to_vec();
        trailing.push(0);
        let relative = encode_request_head("a.B/C", &HeaderMap::new()).unwrap();
        let mut bad_name = BytesMut::new();
        bad_name.put_u8(VERSION);
        put_short(&mut bad_name, b"/p", "the path").unwrap();
        bad_name.put_u16(1);
        put_short(&mut bad_name, b"Bad Name", "a name").unwrap();
        put_short(&mut bad_name, b"v", "a value").unwrap();
        for (bad, says) in [
            (Bytes::new(), "empty"),
            (Bytes::from(other_version), "version 9"),
            (cut, "ends inside"),
            (Bytes::from(trailing), "after the headers"),
            (relative, "not a URI path"),
            (bad_name.freeze(), "not a valid HTTP header name"),
        ] {
            let error = decode_request_head(bad).unwrap_err().to_string();
            assert!(error.contains(says), "{error:?} does not say {says:?}");
        }
    }

    async fn read_all(bytes: Vec<u8>) -> Result<Vec<Frame>, FrameError> {
        let mut reader = FrameReader::new(&bytes[..]);
        let mut frames = Vec::new();
        while let Some(frame) = std::future::poll_fn(|cx| reader.poll_frame(cx)).await? {
            frames.push(frame);
        }
        Ok(frames)
    }

    #[tokio::test]
    async fn frames_written_are_the_frames_read_and_long_data_is_split() {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let long = Bytes::from(vec![7u8; MAX_DATA_BYTES + 10]);
        let writing = tokio::spawn(async move {
            let mut writer = FrameWriter::new(client);
            writer.queue(Kind::Head, Bytes::from_static(b"head"));
            writer.queue(Kind::Data, Bytes::from_static(b"x"));
            writer.queue(Kind::Data, long);
            writer.queue(Kind::End, Bytes::new());
            writer.queue(Kind::Trailers, Bytes::from_static(b"t"));
            assert!(writer.queued() > MAX_DATA_BYTES);
            std::future::poll_fn(|cx| writer.poll_write_queued(cx))
                .await
                .unwrap();
            assert_eq!(writer.queued(), 0);
        });
        let mut reader = FrameReader::new(server);
        let mut frames = Vec::new();
        while let Some(frame) = std::future::poll_fn(|cx| reader.poll_frame(cx))
            .await
            .unwrap()
        {
            frames.push(frame);
        }
        writing.await.unwrap();
        assert_eq!(frames.len(), 6);
        assert_eq!(frames[0], Frame::Head(Bytes::from_static(b"head")));
        assert_eq!(frames[1], Frame::Data(Bytes::from_static(b"x")));
        assert_eq!(
            frames[2],
            Frame::Data(Bytes::from(vec![7u8; MAX_DATA_BYTES]))
        );
        assert_eq!(frames[3], Frame::Data(Bytes::from(vec![7u8; 10])));
        assert_eq!(frames[4], Frame::End);
        assert_eq!(frames[5], Frame::Trailers(Bytes::from_static(b"t")));
    }

    #[tokio::test]
    async fn unreadable_frames_are_errors() {
        let unknown = read_all(vec![9, 0, 0, 0, 0]).await.unwrap_err();
        assert!(matches!(unknown, FrameError::UnknownKind(9)), "{unknown:?}");
        let long = read_all(vec![1, 0, 1, 0, 1]).await.unwrap_err();
        assert!(matches!(long, FrameError::TooLong { .. }), "{long:?}");
        let end_with_payload = read_all(vec![3, 0, 0, 0, 1, 0]).await.unwrap_err();
        assert!(
            matches!(end_with_payload, FrameError::TooLong { .. }),
            "{end_with_payload:?}"
        );
        let truncated = read_all(vec![2, 0, 0, 0, 4, 1, 2]).await.unwrap_err();
        assert!(matches!(truncated, FrameError::Truncated), "{truncated:?}");
        assert_eq!(read_all(Vec::new()).await.unwrap(), Vec::new());
    }
}
