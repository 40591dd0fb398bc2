//! The client of a call socket: a `tower::Service` a tonic client is built on, one connection
//! per call, with no task of its own.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderMap, StatusCode};
use http_body::Body as _;
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tonic::Status;
use tonic::body::Body;

use super::frame::{self, Frame, FrameError, FrameReader, FrameWriter, Kind};

/// Calls a service served on a call socket (see the module's documentation). Each call
/// connects anew; its request body is sent by whichever task polls its response body.
#[derive(Debug, Clone)]
pub struct CallSocketClient {
    path: Arc<Path>,
}

impl CallSocketClient {
    /// A client of the call socket at `path`; nothing is connected until a call.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: Arc::from(path.into()),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A connection for one call. Its error is the socket's, so that a caller can tell a
    /// socket nobody serves (`NotFound`, `ConnectionRefused`) from other failures.
    pub async fn connect(&self) -> io::Result<CallConnection> {
        Ok(CallConnection {
            stream: UnixStream::connect(&self.path).await?,
        })
    }
}

impl tonic::codegen::Service<http::Request<Body>> for CallSocketClient {
    type Response = http::Response<Body>;
    type Error = tonic::codegen::StdError;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let client = self.clone();
        Box::pin(async move {
            let connection = client.connect().await.map_err(|error| {
                Status::unavailable(format!(
                    "cannot connect to the call socket {}: {error}",
                    client.path.display()
                ))
            })?;
            Ok(connection.call(request).await?)
        })
    }
}

/// A connection to a call socket, for one call.
#[derive(Debug)]
pub struct CallConnection {
    stream: UnixStream,
}

impl CallConnection {
    /// Sends the call and waits for the response's head; the response body reads the rest
    /// (and sends the rest of the request) as it is polled.
    pub async fn call(self, request: http::Request<Body>) -> Result<http::Response<Body>, Status> {
        let (parts, body) = request.into_parts();
        let head = frame::encode_request_head(parts.uri.path(), &parts.headers)
            .map_err(|error| Status::internal(format!("the call cannot be sent: {error}")))?;
        let (read, write) = self.stream.into_split();
        let mut call = ClientCall {
            reader: FrameReader::new(read),
            writer: FrameWriter::new(write),
            request: Some(body),
            write_failed: false,
        };
        call.writer.queue(Kind::Head, head);
        let (status, headers) = std::future::poll_fn(|cx| call.poll_head(cx)).await?;
        let mut response = http::Response::new(Body::new(ResponseBody { call, ended: false }));
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        Ok(response)
    }
}

/// Both directions of a call in progress.
struct ClientCall {
    reader: FrameReader<OwnedReadHalf>,
    writer: FrameWriter<OwnedWriteHalf>,
    /// The rest of the request body; `None` once it ended (and `end` was queued) or failed.
    request: Option<Body>,
    /// The server stopped reading: nothing more is sent, and its answer says why.
    write_failed: bool,
}

impl ClientCall {
    /// Writes what is queued and moves the request body into the queue, as far as each goes
    /// without waiting; the task is woken when either can go on. An error is the request
    /// body's own.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Result<(), Status> {
        loop {
            if self.write_failed {
                return Ok(());
            }
            match self.writer.poll_write_queued(cx) {
                Poll::Pending => return Ok(()),
                Poll::Ready(Err(_)) => {
                    self.write_failed = true;
                    self.request = None;
                    return Ok(());
                }
                Poll::Ready(Ok(())) => {}
            }
            let Some(body) = self.request.as_mut() else {
                return Ok(());
            };
            match Pin::new(body).poll_frame(cx) {
                Poll::Pending => return Ok(()),
                Poll::Ready(None) => {
                    self.request = None;
                    self.writer.queue(Kind::End, Bytes::new());
                }
                Poll::Ready(Some(Ok(frame))) => {
                    // A gRPC request has no trailers; data is all there is to send.
                    if let Ok(data) = frame.into_data()
                        && !data.is_empty()
                    {
                        self.writer.queue(Kind::Data, data);
                    }
                }
                Poll::Ready(Some(Err(status))) => {
                    self.request = None;
                    return Err(status);
                }
            }
        }
    }

    fn poll_head(&mut self, cx: &mut Context<'_>) -> Poll<Result<(StatusCode, HeaderMap), Status>> {
        self.poll_send(cx)?;
        Poll::Ready(match ready!(self.reader.poll_frame(cx)) {
            Ok(Some(Frame::Head(head))) => frame::decode_response_head(head).map_err(malformed),
            Ok(Some(other)) => Err(unexpected(&other, "before the response's head")),
            Ok(None) => Err(Status::unavailable(
                "the call socket closed before the call was answered",
            )),
            Err(error) => Err(read_error(error)),
        })
    }
}

/// The response body: the data frames, then the trailers.
struct ResponseBody {
    call: ClientCall,
    ended: bool,
}

impl http_body::Body for ResponseBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        if let Err(status) = this.call.poll_send(cx) {
            this.ended = true;
            return Poll::Ready(Some(Err(status)));
        }
        let frame = match ready!(this.call.reader.poll_frame(cx)) {
            Ok(Some(Frame::Data(data))) => {
                return Poll::Ready(Some(Ok(http_body::Frame::data(data))));
            }
            Ok(Some(Frame::Trailers(trailers))) => frame::decode_trailers(trailers)
                .map(http_body::Frame::trailers)
                .map_err(malformed),
            Ok(Some(other)) => Err(unexpected(&other, "in the response's body")),
            Ok(None) => Err(Status::unavailable(
                "the call socket closed before the call's end",
            )),
            Err(error) => Err(read_error(error)),
        };
        this.ended = true;
        Poll::Ready(Some(frame))
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

fn malformed(error: FrameError) -> Status {
    Status::internal(format!("a malformed answer on the call socket: {error}"))
}

fn unexpected(frame: &Frame, place: &str) -> Status {
    Status::internal(format!(
        "a malformed answer on the call socket: a {} frame {place}",
        frame.name()
    ))
}

fn read_error(error: FrameError) -> Status {
    match error {
        FrameError::Io(error) => Status::unavailable(format!("the call socket failed: {error}")),
        other => malformed(other),
    }
}
