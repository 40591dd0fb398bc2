//! Calls through a real Unix socket: tonic clients on [`CallSocketClient`], tonic services
//! behind [`serve_calls`], and a raw socket for what a tonic client never sends.

use std::convert::Infallible;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::BodyExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::UnixStream;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic::body::Body;
use tonic_health::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, health_check_response};
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

use super::frame::{self, Kind};
use super::*;
use crate::{HealthHandle, Introspection};

const BROKER: &str = "ptyhub.broker.v1.PtyBroker";
const PATIENCE: Duration = Duration::from_secs(10);

/// A directory for the socket, the server on it, and what stops it.
struct Served {
    _dir: tempfile::TempDir,
    path: PathBuf,
    health: HealthHandle,
    stop: CancellationToken,
    server: tokio::task::JoinHandle<CallsInProgress>,
}

async fn serve_introspection() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("calls.sock");
    let introspection = Introspection::new(&[BROKER]).await.unwrap();
    let health = introspection.health_handle();
    let routes = introspection.into_routes().prepare();
    let listener = bind_call_socket(&path).unwrap();
    let stop = CancellationToken::new();
    let server = tokio::spawn(serve_calls(
        listener,
        routes,
        stop.clone().cancelled_owned(),
    ));
    Served {
        _dir: dir,
        path,
        health,
        stop,
        server,
    }
}

fn check(service: &str) -> HealthCheckRequest {
    HealthCheckRequest {
        service: service.to_owned(),
    }
}

#[tokio::test]
async fn a_unary_call_and_its_error_cross_the_socket() {
    let served = serve_introspection().await;
    let mut client = HealthClient::new(CallSocketClient::new(&served.path));
    let answer = client.check(check(BROKER)).await.unwrap().into_inner();
    assert_eq!(
        answer.status,
        health_check_response::ServingStatus::Serving as i32
    );
    // The service's own error, with its code and message, as over HTTP/2.
    let status = client.check(check("no.Such")).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    // A method nobody serves: the router's answer, trailers only.
    let mut broker = ptyhub_proto::broker::v1::pty_broker_client::PtyBrokerClient::new(
        CallSocketClient::new(&served.path),
    );
    let status = broker
        .list(ptyhub_proto::broker::v1::ListRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
}

#[tokio::test]
async fn a_server_stream_delivers_each_message_as_it_comes() {
    let served = serve_introspection().await;
    let mut client = HealthClient::new(CallSocketClient::new(&served.path));
    let mut watch = client.watch(check(BROKER)).await.unwrap().into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(
        first.status,
        health_check_response::ServingStatus::Serving as i32
    );
    served.health.set_status(ServingStatus::NotServing).await;
    let second = tokio::time::timeout(PATIENCE, watch.message())
        .await
        .expect("the change arrives")
        .unwrap()
        .unwrap();
    assert_eq!(
        second.status,
        health_check_response::ServingStatus::NotServing as i32
    );
}

#[tokio::test]
async fn a_bidirectional_stream_answers_each_request_while_the_request_goes_on() {
    let served = serve_introspection().await;
    let mut client = ServerReflectionClient::new(CallSocketClient::new(&served.path));
    let (requests, receiver) = tokio::sync::mpsc::channel(4);
    let mut answers = client
        .server_reflection_info(tokio_stream::wrappers::ReceiverStream::new(receiver))
        .await
        .unwrap()
        .into_inner();
    for _ in 0..3 {
        requests
            .send(ServerReflectionRequest {
                host: String::new(),
                message_request: Some(MessageRequest::ListServices(String::new())),
            })
            .await
            .unwrap();
        let answer = tokio::time::timeout(PATIENCE, answers.message())
            .await
            .expect("each request is answered before the next is sent")
            .unwrap()
            .unwrap();
        let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
            panic!("not a list of services: {answer:?}");
        };
        assert!(list.service.iter().any(|service| service.name == BROKER));
    }
    drop(requests);
    assert!(
        answers.message().await.unwrap().is_none(),
        "the stream ends with the requests"
    );
}

#[tokio::test]
async fn a_socket_nobody_serves_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let mut client = HealthClient::new(CallSocketClient::new(dir.path().join("none.sock")));
    let status = client.check(check("")).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("none.sock"), "{status:?}");
}

#[tokio::test]
async fn a_server_stopping_ends_accepting_and_hands_back_the_calls_in_progress_to_wait_for() {
    let served = serve_introspection().await;
    let mut client = HealthClient::new(CallSocketClient::new(&served.path));
    let mut watch = client.watch(check(BROKER)).await.unwrap().into_inner();
    watch.message().await.unwrap().unwrap();
    served.stop.cancel();
    let calls = served.server.await.unwrap();
    let ended = tokio::spawn(calls.ended());
    served.health.set_status(ServingStatus::NotServing).await;
    let change = tokio::time::timeout(PATIENCE, watch.message())
        .await
        .expect("the call goes on")
        .unwrap()
        .unwrap();
    assert_eq!(
        change.status,
        health_check_response::ServingStatus::NotServing as i32
    );
    let status = client.check(check("")).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(!ended.is_finished(), "the watch is still in progress");

    // The client goes; the server's next write finds it gone and the call ends.
    drop(watch);
    served.health.set_status(ServingStatus::Serving).await;
    tokio::time::timeout(PATIENCE, ended)
        .await
        .expect("the calls in progress end once their clients are gone")
        .unwrap();
}

#[test]
fn binding_replaces_a_stale_socket_but_no_other_file() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = runtime.enter();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("calls.sock");
    drop(bind_call_socket(&path).unwrap());
    // The file stays when its listener is gone; the next process binds over it.
    assert!(path.exists());
    bind_call_socket(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o660
    );
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"keep me").unwrap();
    let error = bind_call_socket(&file).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::AlreadyExists, "{error}");
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
}

/// Reads a whole answer from a raw socket: the frames until the server closes.
async fn raw_answer(mut socket: UnixStream) -> Vec<(u8, Bytes)> {
    let mut bytes = Vec::new();
    tokio::time::timeout(PATIENCE, socket.read_to_end(&mut bytes))
        .await
        .expect("the server answers and closes")
        .unwrap();
    let mut frames = Vec::new();
    let mut rest = &bytes[..];
    while rest.len() >= 5 {
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        frames.push((rest[0], Bytes::copy_from_slice(&rest[5..5 + len])));
        rest = &rest[5 + len..];
    }
    assert!(rest.is_empty(), "a torn frame at the end: {rest:?}");
    frames
}

/// The status of an answer without messages: in the trailers, or in the head (gRPC's
/// trailers-only answer, which tonic gives when a request cannot be decoded).
fn answered_status(frames: &[(u8, Bytes)]) -> tonic::Status {
    assert_eq!(frames.len(), 2, "{frames:?}");
    assert_eq!(frames[0].0, Kind::Head as u8);
    assert_eq!(frames[1].0, Kind::Trailers as u8);
    let (_, headers) = frame::decode_response_head(frames[0].1.clone()).unwrap();
    let trailers = frame::decode_trailers(frames[1].1.clone()).unwrap();
    tonic::Status::from_header_map(&trailers)
        .or_else(|| tonic::Status::from_header_map(&headers))
        .expect("the answer holds a status")
}

#[tokio::test]
async fn what_a_client_never_sends_is_answered_invalid_argument() {
    let served = serve_introspection().await;
    let head = frame::encode_request_head("/grpc.health.v1.Health/Check", &http::HeaderMap::new())
        .unwrap();
    let with_prefix = |kind: u8, payload: &[u8]| {
        let mut frame = vec![kind];
        frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        frame.extend_from_slice(payload);
        frame
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (with_prefix(7, b""), "unknown frame kind 7"),
        (
            with_prefix(2, b"data"),
            "a data frame before the call's head",
        ),
        (with_prefix(1, b"\x09"), "version 9"),
        (vec![1, 0xff, 0xff, 0xff, 0xff], "above the limit"),
        (
            [with_prefix(1, &head), with_prefix(4, b"")].concat(),
            "a trailers frame in the request's body",
        ),
    ];
    for (sent, says) in cases {
        let mut socket = UnixStream::connect(&served.path).await.unwrap();
        socket.write_all(&sent).await.unwrap();
        let status = answered_status(&raw_answer(socket).await);
        assert!(
            matches!(status.code(), Code::InvalidArgument | Code::Internal),
            "{says}: {status:?}"
        );
        assert!(
            status.message().contains(says),
            "{status:?} does not say {says:?}"
        );
    }
}

#[tokio::test]
async fn a_client_that_leaves_ends_its_call_on_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("calls.sock");
    let (dropped, body_dropped) = oneshot::channel();
    let service = OneStream {
        dropped: std::sync::Arc::new(std::sync::Mutex::new(Some(dropped))),
    };
    let listener = bind_call_socket(&path).unwrap();
    tokio::spawn(serve_calls(listener, service, std::future::pending()));
    let request = http::Request::builder()
        .uri("/test.Stream/Open")
        .body(Body::new(http_body_util::Full::new(Bytes::from_static(
            b"hi",
        ))))
        .unwrap();
    let connection = CallSocketClient::new(&path).connect().await.unwrap();
    let response = connection.call(request).await.unwrap();
    let mut body = response.into_body().into_data_stream();
    assert_eq!(
        body.next().await.unwrap().unwrap(),
        Bytes::from_static(b"hello")
    );
    // The stream sends nothing more; the client leaving is all that can end it.
    drop(body);
    tokio::time::timeout(PATIENCE, body_dropped)
        .await
        .expect("the server drops the response body of a client that left")
        .unwrap();
}

/// A service that answers every call with one data frame, then a body that never ends and
/// says when it is dropped.
#[derive(Clone)]
struct OneStream {
    dropped: std::sync::Arc<std::sync::Mutex<Option<oneshot::Sender<()>>>>,
}

impl tonic::codegen::Service<http::Request<Body>> for OneStream {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: http::Request<Body>) -> Self::Future {
        let dropped = self.dropped.lock().unwrap().take();
        std::future::ready(Ok(http::Response::new(Body::new(Endless {
            sent: false,
            dropped,
        }))))
    }
}

struct Endless {
    sent: bool,
    dropped: Option<oneshot::Sender<()>>,
}

impl Drop for Endless {
    fn drop(&mut self) {
        if let Some(dropped) = self.dropped.take() {
            let _ = dropped.send(());
        }
    }
}

impl http_body::Body for Endless {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        if self.sent {
            Poll::Pending
        } else {
            self.sent = true;
            Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from_static(
                b"hello",
            )))))
        }
    }
}
