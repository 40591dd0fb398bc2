//! A webhook receiver for tests: an HTTP server on 127.0.0.1:0 that records every request it
//! gets (headers and the raw body, in arrival order) and answers each with the next of a
//! script of answers (a status, or none at all), then 200.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use tokio::sync::mpsc;

/// How one request is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// This status, at once.
    Status(u16),
    /// No answer ever: the request hangs until the client gives up.
    Never,
}

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct ReceivedRequest {
    /// Header names in lowercase; a header given twice keeps its last value.
    pub headers: HashMap<String, String>,
    /// The body exactly as it came.
    pub body: Bytes,
}

impl ReceivedRequest {
    /// A header's value; panics, naming it, when it is missing.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(&name.to_ascii_lowercase())
            .unwrap_or_else(|| panic!("no {name} header in {:?}", self.headers))
    }

    /// The body as JSON; panics when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// The running receiver; it stops when dropped.
#[derive(Debug)]
pub struct WebhookReceiver {
    /// Where to point a webhook: `http://127.0.0.1:<port>/hook`.
    pub url: String,
    received: mpsc::UnboundedReceiver<ReceivedRequest>,
    answers: Arc<Mutex<VecDeque<Answer>>>,
    server: tokio::task::JoinHandle<()>,
}

impl WebhookReceiver {
    /// A receiver that answers every request 200.
    pub async fn start() -> Self {
        Self::answering(Vec::new()).await
    }

    /// A receiver that answers its first requests with `script`, in order, and 200 after.
    pub async fn answering(script: Vec<Answer>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the receiver");
        let address = listener.local_addr().expect("the receiver's address");
        let (sender, received) = mpsc::unbounded_channel();
        let answers = Arc::new(Mutex::new(VecDeque::from(script)));
        let handler_answers = answers.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                let sender = sender.clone();
                let answers = handler_answers.clone();
                async move {
                    let headers = headers
                        .iter()
                        .map(|(name, value)| {
                            (
                                name.as_str().to_owned(),
                                String::from_utf8_lossy(value.as_bytes()).into_owned(),
                            )
                        })
                        .collect();
                    let _ = sender.send(ReceivedRequest { headers, body });
                    let answer = answers
                        .lock()
                        .expect("answers lock")
                        .pop_front()
                        .unwrap_or(Answer::Status(200));
                    match answer {
                        Answer::Status(status) => {
                            StatusCode::from_u16(status).expect("a valid status")
                        }
                        Answer::Never => std::future::pending().await,
                    }
                }
            }),
        );
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url: format!("http://{address}/hook"),
            received,
            answers,
            server,
        }
    }

    /// Answers the requests from now on with `script`, in order, and 200 after.
    pub fn answer_next(&self, script: Vec<Answer>) {
        *self.answers.lock().expect("answers lock") = VecDeque::from(script);
    }

    /// The next request, waiting up to `patience` for it; panics when none comes.
    pub async fn next_request(&mut self, patience: Duration) -> ReceivedRequest {
        tokio::time::timeout(patience, self.received.recv())
            .await
            .unwrap_or_else(|_| panic!("no webhook request within {patience:?}"))
            .expect("the receiver runs")
    }

    /// The next request whose `X-Ptyhub-Event` is `event`, skipping others.
    pub async fn next_event(&mut self, event: &str, patience: Duration) -> ReceivedRequest {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let request = self.next_request(left).await;
            if request.headers.get("x-ptyhub-event").map(String::as_str) == Some(event) {
                return request;
            }
        }
    }

    /// The requests that came and were not taken yet, without waiting.
    pub fn drain(&mut self) -> Vec<ReceivedRequest> {
        std::iter::from_fn(|| self.received.try_recv().ok()).collect()
    }
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}
