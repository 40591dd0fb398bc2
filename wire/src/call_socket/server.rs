//! The server of a call socket: each connection's call goes to a tonic service (the one the
//! port serves), its request body read by whoever reads the request, its response written by
//! one task per connection.

use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::io;
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Version};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;
use tonic::Status;
use tonic::body::Body;
use tonic::codegen::Service;

use http_body::Body as _;

use super::frame::{self, Frame, FrameError, FrameReader, FrameWriter, Kind};

/// How long a connection may take to send its call's head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Response bytes queued before the response body waits for the socket.
const HIGH_WATER: usize = 256 * 1024;
/// A failed accept (out of descriptors, say) is retried after this.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Binds a call socket at `path`, readable and writable by its owner and group only. A socket
/// file already there (left by an earlier process, or by the broker process this one takes
/// over from) is replaced; any other file is an error.
pub fn bind_call_socket(path: &Path) -> io::Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
    Ok(listener)
}

/// The calls a stopped [`serve_calls`] had in progress, which go on to their end.
#[derive(Debug)]
pub struct CallsInProgress(TaskTracker);

impl CallsInProgress {
    /// Waits until each of them has ended: its response, trailers included, written.
    pub async fn ended(self) {
        self.0.close();
        self.0.wait().await;
    }
}

/// Serves calls to `service` on `listener` until `stop`, then returns the calls in progress,
/// which go on to their end.
pub async fn serve_calls<S>(
    listener: UnixListener,
    service: S,
    stop: impl Future<Output = ()>,
) -> CallsInProgress
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let mut stop = std::pin::pin!(stop);
    let calls = TaskTracker::new();
    loop {
        let stream = tokio::select! {
            () = &mut stop => return CallsInProgress(calls),
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "accepting on the call socket failed");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            },
        };
        calls.spawn(serve_call(stream, service.clone()));
    }
}

async fn serve_call<S>(stream: UnixStream, mut service: S)
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
{
    let (read, write) = stream.into_split();
    let mut reader = FrameReader::new(read);
    let mut writer = FrameWriter::new(write);
    let head = match tokio::time::timeout(HEAD_TIMEOUT, poll_fn(|cx| reader.poll_frame(cx))).await {
        Err(_) => Err(Status::invalid_argument(format!(
            "no call arrived within {HEAD_TIMEOUT:?}"
        ))),
        Ok(Ok(Some(Frame::Head(head)))) => frame::decode_request_head(head).map_err(unreadable),
        Ok(Ok(Some(other))) => Err(Status::invalid_argument(format!(
            "a malformed call: a {} frame before the call's head",
            other.name()
        ))),
        // Connected and left, or failed: nobody to answer.
        Ok(Ok(None) | Err(FrameError::Io(_))) => return,
        Ok(Err(error)) => Err(unreadable(error)),
    };
    let (uri, headers) = match head {
        Ok(head) => head,
        Err(status) => return answer_error(writer, status).await,
    };
    let (give_back, reader_back) = oneshot::channel();
    let mut request = http::Request::new(Body::new(RequestBody {
        reader: Some(reader),
        give_back: Some(give_back),
        ended: false,
    }));
    *request.method_mut() = Method::POST;
    *request.version_mut() = Version::HTTP_2;
    *request.headers_mut() = headers;
    *request.uri_mut() = uri;
    let response = match service.call(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let (parts, body) = response.into_parts();
    match frame::encode_response_head(parts.status, &parts.headers) {
        Ok(head) => writer.queue(Kind::Head, head),
        Err(error) => {
            let status = Status::internal(format!("the answer cannot be sent: {error}"));
            return answer_error(writer, status).await;
        }
    }
    let mut response = ResponseWriter {
        writer,
        body,
        reader_back: Some(reader_back),
        watched: None,
        finished: false,
    };
    poll_fn(|cx| response.poll(cx)).await;
}

/// A status as gRPC's trailers carry it.
fn status_trailers(status: &Status) -> HeaderMap {
    let mut trailers = HeaderMap::new();
    if status.add_header(&mut trailers).is_err() {
        // Only metadata that is not a header can fail; the code and message always go.
        trailers.clear();
        let _ = Status::new(status.code(), status.message()).add_header(&mut trailers);
    }
    trailers
}

fn unreadable(error: FrameError) -> Status {
    Status::invalid_argument(format!("a malformed call: {error}"))
}

/// Answers a call that cannot be made with only its status (gRPC's trailers-only answer).
async fn answer_error(mut writer: FrameWriter<OwnedWriteHalf>, status: Status) {
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    let trailers = status_trailers(&status);
    let (Ok(head), Ok(trailers)) = (
        frame::encode_response_head(http::StatusCode::OK, &headers),
        frame::encode_trailers(&trailers),
    ) else {
        return;
    };
    writer.queue(Kind::Head, head);
    writer.queue(Kind::Trailers, trailers);
    if poll_fn(|cx| writer.poll_write_queued(cx)).await.is_ok() {
        let _ = poll_fn(|cx| writer.poll_shutdown(cx)).await;
    }
}

/// Writes a call's response body, and ends it when the client leaves.
struct ResponseWriter {
    writer: FrameWriter<OwnedWriteHalf>,
    body: Body,
    /// The connection's reading side, once the request body is done with it.
    reader_back: Option<oneshot::Receiver<ReaderBack>>,
    /// Read only to see the client leave: after the request's end it sends nothing.
    watched: Option<ReaderBack>,
    /// The trailers are queued.
    finished: bool,
}

impl ResponseWriter {
    /// Ready when the response was written, or when the client left.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            match self.writer.poll_write_queued(cx) {
                // The client left; dropping the body ends the handler's stream.
                Poll::Ready(Err(_)) => return Poll::Ready(()),
                Poll::Ready(Ok(())) if self.finished => {
                    let _ = ready!(self.writer.poll_shutdown(cx));
                    return Poll::Ready(());
                }
                Poll::Ready(Ok(())) => {}
                Poll::Pending if self.finished || self.writer.queued() >= HIGH_WATER => {
                    return if self.client_left(cx) {
                        Poll::Ready(())
                    } else {
                        Poll::Pending
                    };
                }
                Poll::Pending => {}
            }
            if self.client_left(cx) {
                return Poll::Ready(());
            }
            match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        if !data.is_empty() {
                            self.writer.queue(Kind::Data, data);
                        }
                    }
                    Err(frame) => {
                        let trailers = frame.into_trailers().unwrap_or_default();
                        self.finish(&trailers);
                    }
                },
                Poll::Ready(None) => self.finish(&HeaderMap::new()),
                Poll::Ready(Some(Err(status))) => {
                    self.finish(&status_trailers(&status));
                }
            }
        }
    }

    fn finish(&mut self, trailers: &HeaderMap) {
        let trailers = frame::encode_trailers(trailers).unwrap_or_else(|error| {
            let status = Status::internal(format!("the call's trailers cannot be sent: {error}"));
            frame::encode_trailers(&status_trailers(&status))
                .unwrap_or_else(|_| Bytes::from_static(&[0, 0]))
        });
        self.writer.queue(Kind::Trailers, trailers);
        self.finished = true;
    }

    /// Whether the client closed the connection (or sent more after the request's end).
    fn client_left(&mut self, cx: &mut Context<'_>) -> bool {
        if let Some(back) = &mut self.reader_back {
            match Pin::new(back).poll(cx) {
                Poll::Pending => return false,
                Poll::Ready(reader) => {
                    self.reader_back = None;
                    self.watched = reader.ok();
                }
            }
        }
        let Some(back) = &mut self.watched else {
            return false;
        };
        loop {
            match back.reader.poll_frame(cx) {
                Poll::Pending => return false,
                // The rest of a request the handler did not read.
                Poll::Ready(Ok(Some(Frame::Data(_)))) if !back.request_ended => {}
                Poll::Ready(Ok(Some(Frame::End))) if !back.request_ended => {
                    back.request_ended = true;
                }
                Poll::Ready(_) => return true,
            }
        }
    }
}

/// The connection's reading side, handed back by the request body.
struct ReaderBack {
    reader: FrameReader<OwnedReadHalf>,
    /// Whether the request's `end` was read.
    request_ended: bool,
}

/// The request body: data frames until `end`, read from the socket by whoever polls it.
struct RequestBody {
    /// `None` once the body failed.
    reader: Option<FrameReader<OwnedReadHalf>>,
    /// Where the reader goes once the body is done with it (the response writer watches it).
    give_back: Option<oneshot::Sender<ReaderBack>>,
    ended: bool,
}

impl RequestBody {
    fn give_back(&mut self) {
        if let (Some(reader), Some(give_back)) = (self.reader.take(), self.give_back.take()) {
            let _ = give_back.send(ReaderBack {
                reader,
                request_ended: self.ended,
            });
        }
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        self.give_back();
    }
}

impl http_body::Body for RequestBody {
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
        let Some(reader) = this.reader.as_mut() else {
            return Poll::Ready(None);
        };
        let failed = match ready!(reader.poll_frame(cx)) {
            Ok(Some(Frame::Data(data))) => {
                return Poll::Ready(Some(Ok(http_body::Frame::data(data))));
            }
            Ok(Some(Frame::End)) => {
                this.ended = true;
                this.give_back();
                return Poll::Ready(None);
            }
            Ok(Some(other)) => Status::invalid_argument(format!(
                "a malformed call: a {} frame in the request's body",
                other.name()
            )),
            Ok(None) => {
                Status::cancelled("the client closed the call socket before the request's end")
            }
            Err(FrameError::Io(error)) => {
                Status::unavailable(format!("the call socket failed: {error}"))
            }
            Err(error) => unreadable(error),
        };
        this.ended = true;
        this.reader = None;
        Poll::Ready(Some(Err(failed)))
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}
