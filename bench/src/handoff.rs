//! (9) Hand-off: a pty-broker process hands every live session to the next one
//! (`--take-over`). Measures how long that takes for many sessions, from the start of
//! the new process until the old one is gone and the new one serves every session, and the
//! longest output stall that attached clients see across it; checks that no byte is lost or
//! repeated and that every session keeps its process.
//!
//! Most sessions printed a little and sit idle (their rings, screens and descriptors are what
//! moves); a few "tickers" print a numbered line every [`TICK`], each read by a gRPC controller
//! that reattaches with `since` when its stream ends, as every client does across a hand-off.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, Result, bail, ensure};
use futures::StreamExt as _;
use ptyhub_attach_ticket::{TicketRole, TicketSigningKey};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::broker::v1::pty_broker_client::PtyBrokerClient;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use uuid::Uuid;

use crate::child::{Service, open_files_limit};
use crate::scale::{connect_broker, spawn_session, wait_offsets};
use crate::scenarios::LINE;
use crate::stack::{BrokerClient, broker_secret_variables, ticket_signing_key};

/// What each idle session prints before it sits idle.
const IDLE_OUTPUT: u64 = 16 << 10;
/// How often a ticker prints a line.
const TICK: Duration = Duration::from_millis(20);
/// How long the tickers run before and after the hand-off.
const AROUND: Duration = Duration::from_secs(1);
/// How long one call or one step may take before the scenario fails.
const PATIENCE: Duration = Duration::from_secs(60);
/// Spawns in flight at once.
const BATCH: usize = 16;

/// What one hand-off measured.
#[derive(Debug)]
pub struct HandOff {
    pub sessions: usize,
    pub tickers: usize,
    /// From the start of the new process until the old one has exited and the new one has
    /// answered `List` with every session.
    pub total: Duration,
    /// The longest time between two output frames any ticker's client saw, the hand-off
    /// included (its stream's end and its reattach).
    pub longest_stall: Duration,
    /// The median time between two output frames, away from the hand-off.
    pub usual_gap: Duration,
    /// Bytes the tickers' clients read, each checked to come once and in order.
    pub ticker_bytes: u64,
}

/// Runs `sessions` sessions (of which `tickers` print steadily, each with a client) on a broker
/// process of its own, and hands them to a second process.
pub async fn hand_off(sessions: usize, tickers: usize) -> Result<HandOff> {
    ensure!(
        tickers >= 1 && sessions > tickers,
        "the hand-off scenario needs a ticker and an idle session"
    );
    // Both processes hold every session's descriptors for a moment, and each has a keeper.
    let needed = sessions as u64 * 8 + 512;
    let limit = open_files_limit()?;
    ensure!(
        limit >= needed,
        "the open-files limit is {limit}, a hand-off of {sessions} sessions needs about {needed} (raise `ulimit -n`)"
    );
    let dir = tempfile::tempdir().context("temporary directory")?;
    let data_dir = dir.path().join("data");
    let (old_logs, new_logs) = (dir.path().join("old"), dir.path().join("new"));
    std::fs::create_dir_all(&old_logs)?;
    std::fs::create_dir_all(&new_logs)?;
    let secrets = broker_secret_variables()?;
    let args = vec![
        "--broker-id=bench-handoff".to_owned(),
        "--backends=local".to_owned(),
        format!("--data-dir={}", data_dir.display()),
        "--kill-grace=500ms".to_owned(),
        "--shutdown-grace=30s".to_owned(),
    ];
    let mut old = Service::spawn("pty-broker", &args, &secrets, &old_logs)?;
    let client = connect_broker(&mut old).await?;
    let endpoint = old.endpoint()?;

    let idle_script =
        format!("stty raw -echo; yes {LINE} | head -c {IDLE_OUTPUT}; exec sleep 3600");
    let ticker_script = format!(
        "stty raw -echo; i=0; while :; do printf '%07d\\n' $i; i=$((i+1)); sleep {}; done",
        TICK.as_secs_f64()
    );
    let ids: Vec<String> = (0..sessions).map(|_| Uuid::new_v4().to_string()).collect();
    let (ticker_ids, idle_ids) = ids.split_at(tickers);
    let spawned: Vec<Result<()>> = futures::stream::iter(ids.iter().enumerate())
        .map(|(index, id)| {
            let script = if index < tickers {
                &ticker_script
            } else {
                &idle_script
            };
            spawn_session(&client, id, script)
        })
        .buffer_unordered(BATCH)
        .collect()
        .await;
    if let Some(Err(error)) = spawned.into_iter().find(Result::is_err) {
        bail!("a spawn failed: {error:#}");
    }
    wait_offsets(&client, &mut old, idle_ids, IDLE_OUTPUT).await?;
    let before = pids(&client).await?;
    ensure!(before.len() == sessions, "{} sessions listed", before.len());

    let (stop, stopped) = watch::channel(false);
    let readers: Vec<_> = ticker_ids
        .iter()
        .map(|id| tokio::spawn(read_ticker(endpoint.clone(), id.clone(), stopped.clone())))
        .collect();
    tokio::time::sleep(AROUND).await;

    let start = Instant::now();
    let mut args = args;
    args.push(format!(
        "--take-over={}",
        data_dir.join(pty_broker::handoff::HANDOFF_SOCKET).display()
    ));
    let mut new = Service::spawn("pty-broker", &args, &secrets, &new_logs)?;
    let status = old.exited(PATIENCE).await?;
    ensure!(
        status.success(),
        "the old broker exited with {status}:\n{}",
        old.log_tail()
    );
    let after = loop {
        new.check_running()?;
        if let Ok(client) = connect(&endpoint).await
            && let Ok(after) = pids(&client).await
            && after.len() == sessions
        {
            break after;
        }
        ensure!(
            start.elapsed() < PATIENCE,
            "the new broker does not serve every session:\n{}",
            new.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let total = start.elapsed();
    tokio::time::sleep(AROUND).await;
    stop.send_replace(true);

    let mut gaps = Vec::new();
    let mut longest_stall = Duration::ZERO;
    let mut ticker_bytes = 0;
    for reader in readers {
        let read = reader.await.context("a ticker's reader panicked")??;
        ensure!(
            read.reattaches >= 1,
            "a ticker's stream never ended across the hand-off"
        );
        ticker_bytes += read.bytes;
        longest_stall = longest_stall.max(read.gaps.iter().copied().max().unwrap_or_default());
        gaps.extend(read.gaps);
    }
    ensure!(
        after == before,
        "sessions or their pids changed across the hand-off"
    );
    gaps.sort_unstable();
    let usual_gap = gaps.get(gaps.len() / 2).copied().unwrap_or_default();
    new.stop(Duration::from_secs(40)).await;
    Ok(HandOff {
        sessions,
        tickers,
        total,
        longest_stall,
        usual_gap,
        ticker_bytes,
    })
}

async fn connect(endpoint: &str) -> Result<BrokerClient> {
    let channel = tonic::transport::Endpoint::from_shared(endpoint.to_owned())?
        .connect()
        .await?;
    Ok(
        PtyBrokerClient::with_interceptor(channel, crate::stack::service_auth())
            .max_decoding_message_size(64 << 20),
    )
}

/// Every session's pid, by session id.
async fn pids(client: &BrokerClient) -> Result<HashMap<String, u32>> {
    let listed = tokio::time::timeout(PATIENCE, client.clone().list(broker_pb::ListRequest {}))
        .await
        .context("list took too long")??
        .into_inner();
    Ok(listed
        .sessions
        .into_iter()
        .map(|session| (session.session_id, session.pid))
        .collect())
}

/// What a ticker's client saw.
struct TickerRead {
    bytes: u64,
    gaps: Vec<Duration>,
    reattaches: usize,
}

/// Reads a ticker session from offset 0 until `stop`, reattaching with `since` whenever its
/// stream ends; checks that its lines are 0, 1, 2, ... each once.
async fn read_ticker(
    endpoint: String,
    session_id: String,
    mut stop: watch::Receiver<bool>,
) -> Result<TickerRead> {
    let key = ticket_signing_key()?;
    let mut next_offset = 0u64;
    let mut text = Vec::new();
    let mut gaps = Vec::new();
    let mut last_frame: Option<Instant> = None;
    let mut reattaches = 0;
    'attach: loop {
        let deadline = Instant::now() + PATIENCE;
        let (_input, mut output) = loop {
            match attach(&endpoint, &key, &session_id, next_offset).await {
                Ok(attached) => break attached,
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err(error) => return Err(error.context("could not reattach in time")),
            }
        };
        loop {
            let message = tokio::select! {
                message = tokio::time::timeout(PATIENCE, output.message()) => Some(message),
                _ = stop.wait_for(|stop| *stop) => None,
            };
            let Some(message) = message else {
                break 'attach;
            };
            let frame = match message.context("no frame in time")? {
                Ok(Some(frame)) => frame.frame,
                Ok(None) => bail!("the stream ended without a status"),
                Err(status) if status.code() == tonic::Code::Unavailable => {
                    reattaches += 1;
                    continue 'attach;
                }
                Err(status) => bail!("the stream failed: {status}"),
            };
            match frame {
                Some(broker_pb::server_frame::Frame::Output(output)) => {
                    ensure!(
                        output.offset == next_offset,
                        "output at {} where {next_offset} was next: a byte lost or repeated",
                        output.offset
                    );
                    let now = Instant::now();
                    if let Some(last) = last_frame {
                        gaps.push(now - last);
                    }
                    last_frame = Some(now);
                    next_offset += output.data.len() as u64;
                    text.extend_from_slice(&output.data);
                }
                Some(broker_pb::server_frame::Frame::Gap(gap)) => {
                    bail!("a gap of {} bytes", gap.lost)
                }
                Some(broker_pb::server_frame::Frame::Exit(exit)) => {
                    bail!("the ticker exited: {exit:?}")
                }
                _ => {}
            }
        }
    }
    let text = String::from_utf8(text).context("the ticker's output is not text")?;
    for (index, line) in text.split_terminator('\n').enumerate() {
        // The last line may still be on its way.
        if line.len() == 7 {
            ensure!(
                line.parse::<usize>().ok() == Some(index),
                "line {index} is {line:?}"
            );
        }
    }
    Ok(TickerRead {
        bytes: next_offset,
        gaps,
        reattaches,
    })
}

type Attached = (
    mpsc::Sender<broker_pb::ClientFrame>,
    tonic::Streaming<broker_pb::ServerFrame>,
);

async fn attach(
    endpoint: &str,
    key: &TicketSigningKey,
    session_id: &str,
    since: u64,
) -> Result<Attached> {
    let channel = tonic::transport::Endpoint::from_shared(endpoint.to_owned())?
        .tcp_nodelay(true)
        .connect()
        .await?;
    let (sender, receiver) = mpsc::channel(16);
    sender
        .send(broker_pb::ClientFrame {
            frame: Some(broker_pb::client_frame::Frame::Hello(broker_pb::Hello {
                ticket: key.sign(
                    Uuid::parse_str(session_id)?,
                    TicketRole::Viewer,
                    SystemTime::now() + Duration::from_secs(600),
                ),
                session_id: session_id.to_owned(),
                role: broker_pb::Role::Viewer as i32,
                size: None,
                since: Some(since),
                snapshot: false,
                present_only: false,
            })),
        })
        .await?;
    let mut output = PtyBrokerClient::new(channel)
        .attach(ReceiverStream::new(receiver))
        .await?
        .into_inner();
    match output.message().await? {
        Some(broker_pb::ServerFrame {
            frame: Some(broker_pb::server_frame::Frame::Connected(connected)),
        }) => {
            ensure!(
                connected.offset == since,
                "resumed at {} instead of {since}",
                connected.offset
            );
            Ok((sender, output))
        }
        other => bail!("expected connected, got {other:?}"),
    }
}
