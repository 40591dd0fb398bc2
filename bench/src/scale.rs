//! (4) Scale: many live sessions on one broker and the resident memory each costs (idle, and
//! after each printed output into its ring); many WebSockets on one gateway and the memory each
//! costs (many sessions typing at once are `typists.rs`). The broker and the gateway under
//! measurement run as separate processes (the real binaries), so that their `VmRSS` is theirs
//! alone. Every call and every wait is bounded; spawning and connecting go in bounded batches.

use std::collections::HashMap;
use std::io::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use futures::StreamExt as _;
use nix::sys::stat::Mode;
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_wire::limits::MAX_VIEWERS_PER_SESSION;
use tonic::transport::Channel;
use uuid::Uuid;

use crate::child::{Service, open_files_limit};
use crate::scenarios::{ECHO_SCRIPT, LINE};
use crate::stack::{
    ADMIN_TOKEN, BrokerClient, Stack, broker_secret_variables, service_auth, tier_credentials,
};
use crate::term::{Term, close_session, connect_gateway_at, create_session_on};

/// Bound of one call (spawn, create, connect).
const CALL_PATIENCE: Duration = Duration::from_secs(30);
/// Bound of a phase in which nothing progresses (sessions reaching an offset, a batch).
const PROGRESS_PATIENCE: Duration = Duration::from_secs(60);
/// How many spawns, creates or connects are in flight at once (the machine has two cores).
const BATCH: usize = 16;
/// Time for the allocator and the kernel to settle before `VmRSS` is read.
const SETTLE: Duration = Duration::from_millis(1000);
/// Beyond a screen's sleep interval, before it is taken as asleep.
const SLEEP_MARGIN: Duration = Duration::from_millis(500);
/// The per-instance session cap is 1..=50 (the contract).
pub(crate) const INSTANCE_CAP: usize = 50;

/// The screens of the sessions on the broker under measurement.
#[derive(Debug, Clone, Copy)]
pub struct ScreenSleep {
    /// The broker's `--screen-sleep`: a screen without output for this long sleeps.
    pub after: Duration,
    /// Release the sessions' output in waves, each after the previous wave's screens slept,
    /// so that the memory they gave back is there for the next (the allocator keeps freed
    /// memory resident: only reuse shows that it was freed).
    pub waves: bool,
}

/// Resident memory of a broker holding many live sessions.
#[derive(Debug, Clone, Copy)]
pub struct BrokerMemory {
    pub sessions: usize,
    pub output_bytes: u64,
    /// The broker's `VmRSS` with one session (the baseline), KiB.
    pub baseline_kib: u64,
    /// RSS per additional session, all idle (each printed one byte), KiB.
    pub idle_kib: f64,
    /// With screens: the same once every screen slept, before any further output, KiB.
    pub idle_asleep_kib: Option<f64>,
    /// RSS per additional session after each printed `output_bytes`, KiB.
    pub after_kib: f64,
    /// Ring bytes each session holds after its output (from the broker's offsets), KiB.
    pub ring_kib: f64,
    /// `after_kib` minus the ring bytes each additional session holds, KiB.
    pub beyond_ring_kib: f64,
    /// With screens: the RSS per additional session again once every screen had no output for
    /// the broker's `--screen-sleep` and slept (kept as its compressed snapshot), KiB; and that
    /// beyond the ring bytes.
    pub asleep: Option<(f64, f64)>,
    /// From SIGTERM until the broker exited, every session's processes ended; `None` when it
    /// had to be killed.
    pub stopped: Option<Duration>,
}

/// Spawns `sessions` local shells on a broker of its own (a separate process, ring of
/// `ring_bytes`, a terminal emulator per session when `screens` says how it sleeps), reads its
/// RSS with them idle (with screens, again once the idle screens slept), makes each print
/// `output_bytes` with no client attached, and reads it again; with screens, once more after the
/// screens slept.
///
/// The sessions wait on a FIFO rather than on their terminal, so that releasing them needs no
/// attach (which would add the attach's own buffers to the figure): each reads one line from it
/// and the bench writes the lines in batches.
pub async fn broker_memory(
    sessions: usize,
    output_bytes: u64,
    ring_bytes: u64,
    screens: Option<ScreenSleep>,
) -> Result<BrokerMemory> {
    ensure!(
        sessions >= 2,
        "the scale scenario needs at least two sessions"
    );
    let needed = sessions as u64 * 4 + 256;
    let limit = open_files_limit()?;
    ensure!(
        limit >= needed,
        "the open-files limit is {limit}, {sessions} sessions need about {needed} (raise `ulimit -n`)"
    );
    let dir = tempfile::tempdir().context("temporary directory")?;
    let fifo = dir.path().join("go");
    nix::unistd::mkfifo(&fifo, Mode::S_IRUSR | Mode::S_IWUSR).context("mkfifo")?;
    // Read and write: opening it never blocks, and the sessions' `< fifo` opens never block
    // either (a writer exists).
    let mut release = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .context("open the FIFO")?;
    let mut service = spawn_broker(ring_bytes, screens.map(|screens| screens.after), dir.path())?;
    let result = async {
        let client = connect_broker(&mut service).await?;
        // Raw mode: the output is the bytes written, so the final offset is known exactly.
        let script = format!(
            "stty raw -echo; printf R; read -r go < '{}'; yes {LINE} | head -c {output_bytes}; exec sleep 3600",
            fifo.display()
        );
        let ids: Vec<String> = (0..sessions).map(|_| Uuid::new_v4().to_string()).collect();

        // The first session is the baseline: the broker's runtime, its first PTY and its gRPC
        // connection are not a per-session cost.
        spawn_session(&client, &ids[0], &script).await?;
        wait_offsets(&client, &mut service, &ids[..1], 1).await?;
        tokio::time::sleep(SETTLE).await;
        let baseline = service.resident_kib()?;

        let spawned: Vec<Result<()>> = futures::stream::iter(&ids[1..])
            .map(|id| spawn_session(&client, id, &script))
            .buffer_unordered(BATCH)
            .collect()
            .await;
        let failed = spawned.iter().filter(|result| result.is_err()).count();
        if let Some(Err(error)) = spawned.into_iter().find(Result::is_err) {
            bail!("{failed} of {} spawns failed, first: {error:#}", sessions - 1);
        }
        wait_offsets(&client, &mut service, &ids, 1).await?;
        tokio::time::sleep(SETTLE).await;
        let idle = service.resident_kib()?;
        // With screens, once more when the idle sessions' screens slept (each printed `R` and
        // waits): what a session at a prompt costs once nobody has looked at it for a while.
        let idle_asleep = match screens {
            Some(screens) => {
                tokio::time::sleep(screens.after + SLEEP_MARGIN + SETTLE).await;
                service.check_running()?;
                Some(service.resident_kib()?)
            }
            None => None,
        };

        // Release the sessions a batch at a time: each batch's output arrives before the next.
        let releasing = Instant::now();
        let final_offset = 1 + output_bytes;
        let mut released = 0;
        while released < sessions {
            let batch = (sessions - released).min(BATCH * 2);
            release
                .write_all(&vec![b'\n'; batch])
                .context("write to the FIFO")?;
            released += batch;
            wait_count(&client, &mut service, &ids, final_offset, released).await?;
            if let Some(ScreenSleep { after, waves: true }) = screens
                && released < sessions
            {
                // The broker gives no sign of a screen asleep: the bench waits it out.
                tokio::time::sleep(after + SLEEP_MARGIN).await;
            }
        }
        wait_offsets(&client, &mut service, &ids, final_offset).await?;
        eprintln!(
            "    {sessions} sessions printed their output in {:.1} s",
            releasing.elapsed().as_secs_f64()
        );
        tokio::time::sleep(SETTLE).await;
        let after = service.resident_kib()?;
        // A screen sleeps after that long without output: the broker gives no sign of it, so
        // the bench waits it out (plus the settling time) before reading again.
        let asleep = match screens {
            Some(screens) => {
                tokio::time::sleep(screens.after + SETTLE).await;
                service.check_running()?;
                Some(service.resident_kib()?)
            }
            None => None,
        };
        let offsets = list_offsets(&client).await?;
        let ring_total: u64 = ids
            .iter()
            .map(|id| offsets.get(id).copied().unwrap_or(0).min(ring_bytes))
            .sum();
        let others = (sessions - 1) as f64;
        // The baseline session held 1 byte of ring then; what every ring gained since.
        let ring_growth = ring_total.saturating_sub(1) as f64;
        let after_bytes = after.saturating_sub(baseline) as f64 * 1024.0;
        let asleep = asleep.map(|asleep| {
            let bytes = asleep.saturating_sub(baseline) as f64 * 1024.0;
            (bytes / 1024.0 / others, (bytes - ring_growth) / 1024.0 / others)
        });
        Ok(BrokerMemory {
            sessions,
            output_bytes,
            baseline_kib: baseline,
            idle_kib: idle.saturating_sub(baseline) as f64 / others,
            idle_asleep_kib: idle_asleep
                .map(|asleep| asleep.saturating_sub(baseline) as f64 / others),
            after_kib: after_bytes / 1024.0 / others,
            ring_kib: ring_total as f64 / sessions as f64 / 1024.0,
            beyond_ring_kib: (after_bytes - ring_growth) / 1024.0 / others,
            asleep,
            stopped: None,
        })
    }
    .await;
    // Ending the broker ends every session's process group (SIGHUP first: the shells and
    // `sleep`s go at once); anything still waiting on the FIFO goes with it.
    let stopped = service.stop(Duration::from_secs(40)).await;
    drop(release);
    result.map(|memory| BrokerMemory { stopped, ..memory })
}

/// Starts a pty-broker process of its own (local backend, ring of `ring_bytes`, screens with
/// the default scrollback and this sleep interval, or none), known to no session-api (which would
/// end sessions it did not create); logs go to `log_dir`.
pub fn spawn_broker(
    ring_bytes: u64,
    screens: Option<Duration>,
    log_dir: &std::path::Path,
) -> Result<Service> {
    let mut args = vec![
        "--broker-id=bench-alone".to_owned(),
        "--backends=local".to_owned(),
        format!("--ring-bytes={ring_bytes}"),
        format!("--screens={}", screens.is_some()),
        "--kill-grace=500ms".to_owned(),
        "--shutdown-grace=30s".to_owned(),
    ];
    if let Some(sleep) = screens {
        args.push(format!("--screen-sleep={}ms", sleep.as_millis()));
    }
    Service::spawn("pty-broker", &args, &broker_secret_variables()?, log_dir)
}

/// A client of the broker at `service`, once it answers `List` (bounded).
pub async fn connect_broker(service: &mut Service) -> Result<BrokerClient> {
    let deadline = tokio::time::Instant::now() + CALL_PATIENCE;
    loop {
        service.check_running()?;
        let attempt = async {
            let channel = Channel::from_shared(service.endpoint()?)?.connect().await?;
            let mut client = broker_pb::pty_broker_client::PtyBrokerClient::with_interceptor(
                channel,
                service_auth(),
            )
            .max_decoding_message_size(64 << 20);
            client.list(broker_pb::ListRequest {}).await?;
            anyhow::Ok(client)
        };
        match tokio::time::timeout(Duration::from_secs(5), attempt).await {
            Ok(Ok(client)) => return Ok(client),
            Ok(Err(error)) if tokio::time::Instant::now() >= deadline => {
                bail!(
                    "the broker never answered: {error:#}\n{}",
                    service.log_tail()
                )
            }
            Err(_) if tokio::time::Instant::now() >= deadline => {
                bail!("the broker never answered:\n{}", service.log_tail())
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

pub(crate) async fn spawn_session(client: &BrokerClient, id: &str, script: &str) -> Result<()> {
    let request = broker_pb::SpawnRequest {
        session_id: id.to_owned(),
        target: Some(broker_pb::Target {
            kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
        }),
        command: vec!["/bin/sh".to_owned(), "-c".to_owned(), script.to_owned()],
        env: HashMap::new(),
        cwd: String::new(),
        user: String::new(),
        size: Some(broker_pb::TerminalSize { cols: 80, rows: 24 }),
        ..Default::default()
    };
    tokio::time::timeout(CALL_PATIENCE, client.clone().spawn(request))
        .await
        .map_err(|_| anyhow!("spawn took over {CALL_PATIENCE:?}"))?
        .context("spawn")?;
    Ok(())
}

/// Every session's output offset, by session id.
async fn list_offsets(client: &BrokerClient) -> Result<HashMap<String, u64>> {
    let listed = tokio::time::timeout(
        CALL_PATIENCE,
        client.clone().list(broker_pb::ListRequest {}),
    )
    .await
    .map_err(|_| anyhow!("list took over {CALL_PATIENCE:?}"))?
    .context("list")?
    .into_inner();
    Ok(listed
        .sessions
        .into_iter()
        .map(|session| (session.session_id, session.output_offset))
        .collect())
}

/// Waits until every session of `ids` has produced at least `offset` bytes.
pub(crate) async fn wait_offsets(
    client: &BrokerClient,
    service: &mut Service,
    ids: &[String],
    offset: u64,
) -> Result<()> {
    wait_count(client, service, ids, offset, ids.len()).await
}

/// Waits until at least `count` sessions of `ids` have produced `offset` bytes; fails when the
/// count has not grown for [`PROGRESS_PATIENCE`].
async fn wait_count(
    client: &BrokerClient,
    service: &mut Service,
    ids: &[String],
    offset: u64,
    count: usize,
) -> Result<()> {
    let mut best = 0;
    let mut progressed = tokio::time::Instant::now();
    loop {
        service.check_running()?;
        let offsets = list_offsets(client).await?;
        let reached = ids
            .iter()
            .filter(|id| offsets.get(*id).is_some_and(|at| *at >= offset))
            .count();
        if reached >= count {
            return Ok(());
        }
        if reached > best {
            best = reached;
            progressed = tokio::time::Instant::now();
        } else if progressed.elapsed() > PROGRESS_PATIENCE {
            bail!(
                "{reached} of {count} sessions reached offset {offset}, no progress for {PROGRESS_PATIENCE:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Resident memory of a gateway holding many attached WebSockets.
#[derive(Debug, Clone, Copy)]
pub struct GatewayMemory {
    pub sockets: usize,
    pub sessions: usize,
    pub baseline_kib: u64,
    /// RSS per additional socket, KiB.
    pub per_socket_kib: f64,
}

/// Opens `sockets` WebSockets on a gateway of its own (a separate process, in front of the
/// stack's session-api and broker), spread over as few echo sessions as the broker's viewer cap
/// allows (one controller and up to [`MAX_VIEWERS_PER_SESSION`] viewers each), on as many
/// instances of [`INSTANCE_CAP`] sessions as that takes. Reads the gateway's RSS before and after, then checks that
/// every socket is live (each controller types a byte; every socket of its session must get its
/// echo).
pub async fn gateway_memory(stack: &Stack, sockets: usize) -> Result<GatewayMemory> {
    ensure!(
        sockets >= 2,
        "the socket scenario needs at least two sockets"
    );
    let sessions = sockets.div_ceil(MAX_VIEWERS_PER_SESSION + 1);
    let instance_count = sessions.div_ceil(INSTANCE_CAP);
    // This process holds the client end of every socket and its sessions' PTYs (the stack's
    // broker is in it); the gateway's ends are in the gateway's process, which has its own
    // limit, and its streams to the broker share one connection.
    let needed = sockets as u64 + sessions as u64 * 4 + 256;
    let limit = open_files_limit()?;
    ensure!(
        limit >= needed,
        "the open-files limit is {limit}, {sockets} sockets need about {needed} (raise `ulimit -n`)"
    );
    let dir = tempfile::tempdir().context("temporary directory")?;
    let mut service = Service::spawn(
        "gateway",
        &[
            format!("--session-api={}", stack.session_api_endpoint),
            // Sockets that are not read for a while must not be dropped as silent.
            "--heartbeat-interval=300s".to_owned(),
            "--shutdown-grace=5s".to_owned(),
            // Every socket is the bench's one principal.
            format!("--max-streams-per-principal={}", sockets + 1),
        ],
        // Its secrets: the gateway tier's credential, and the admin token the bench uses.
        &[
            (
                "PTYHUB_GATEWAY_SERVICE_TOKEN".to_owned(),
                tier_credentials()?.gateway.expose().to_owned(),
            ),
            (
                "PTYHUB_GATEWAY_API_TOKENS".to_owned(),
                ADMIN_TOKEN.to_owned(),
            ),
        ],
        dir.path(),
    )?;
    let mut instances: Vec<String> = Vec::new();
    // (instance, session id), in the order sockets are spread over them.
    let mut placed: Vec<(String, String)> = Vec::new();
    let mut terms: Vec<Term> = Vec::new();
    let result = async {
        for index in 0..instance_count {
            let local = broker_pb::Target {
                kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
            };
            let name = format!("bench-sockets-{index}");
            instances.push(stack.register(&name, local, INSTANCE_CAP as u32).await?);
        }
        wait_healthy(stack, &mut service).await?;
        let ws_base = service.endpoint()?.replacen("http://", "ws://", 1);
        for index in 0..sessions {
            let instance = &instances[index / INSTANCE_CAP];
            let command = vec![
                "/bin/sh".to_owned(),
                "-c".to_owned(),
                ECHO_SCRIPT.to_owned(),
            ];
            let attach =
                tokio::time::timeout(CALL_PATIENCE, create_session_on(stack, instance, command))
                    .await
                    .map_err(|_| anyhow!("create session took over {CALL_PATIENCE:?}"))??;
            placed.push((instance.clone(), attach.session_id));
        }
        // The first controller is the baseline (the gateway's channels to session-api and the
        // broker open with it).
        let (instance, session) = &placed[0];
        let mut first = connect_gateway_at(&ws_base, instance, session, "").await?;
        first.read_until(b"R", 4096).await?;
        terms.push(first);
        tokio::time::sleep(SETTLE).await;
        let baseline = service.resident_kib()?;

        let opened: Vec<Result<Term>> = futures::stream::iter(1..sockets)
            .map(|index| {
                let (instance, session) = &placed[index % sessions];
                let query = if index < sessions { "" } else { "&mode=view" };
                connect_gateway_at(&ws_base, instance, session, query)
            })
            .buffer_unordered(BATCH * 2)
            .collect()
            .await;
        match all_opened(opened) {
            Ok(opened) => terms.extend(opened),
            Err((failed, error)) => bail!(
                "{failed} of {} sockets did not connect, first: {error:#}",
                sockets - 1
            ),
        }
        service.check_running()?;
        tokio::time::sleep(SETTLE).await;
        let after = service.resident_kib()?;

        // Every socket is attached at the broker and live end to end.
        let listed = tokio::time::timeout(
            CALL_PATIENCE,
            stack.broker.clone().list(broker_pb::ListRequest {}),
        )
        .await
        .map_err(|_| anyhow!("list took over {CALL_PATIENCE:?}"))??
        .into_inner();
        let attached: u32 = listed
            .sessions
            .iter()
            .filter(|session| placed.iter().any(|(_, id)| *id == session.session_id))
            .map(|session| session.controllers + session.viewers)
            .sum();
        ensure!(
            attached as usize == sockets,
            "the broker counts {attached} clients on the sessions, {sockets} sockets are open"
        );
        // Controllers are the first `sessions` terms (the first, then indexes 1..sessions in
        // whatever order they connected): find them by role instead.
        let mut typed = 0;
        for term in terms.iter_mut() {
            if term.is_controller() {
                term.send(b"x").await?;
                typed += 1;
            }
        }
        ensure!(
            typed == sessions,
            "{typed} controllers among the sockets, {sessions} sessions"
        );
        let echoed: Vec<Result<Vec<u8>>> = futures::stream::iter(terms.iter_mut())
            .map(|term| term.read_until(b"x", 64 * 1024))
            .buffer_unordered(64)
            .collect()
            .await;
        let silent = echoed.iter().filter(|result| result.is_err()).count();
        if let Some(Err(error)) = echoed.into_iter().find(Result::is_err) {
            bail!("{silent} of {sockets} sockets did not get the echo, first: {error:#}");
        }
        Ok(GatewayMemory {
            sockets,
            sessions,
            baseline_kib: baseline,
            per_socket_kib: after.saturating_sub(baseline) as f64 / (sockets - 1) as f64,
        })
    }
    .await;
    drop(terms);
    service.stop(Duration::from_secs(15)).await;
    remove_all(stack, &placed, instances).await;
    result
}

/// Waits until the gateway at `service` answers `/healthz` with 200 (bounded).
async fn wait_healthy(stack: &Stack, service: &mut Service) -> Result<()> {
    let deadline = tokio::time::Instant::now() + CALL_PATIENCE;
    loop {
        service.check_running()?;
        // The port is known once the process listens.
        let answer = match service.endpoint() {
            Ok(endpoint) => Some(
                tokio::time::timeout(
                    Duration::from_secs(5),
                    stack.http.get(format!("{endpoint}/healthz")).send(),
                )
                .await,
            ),
            Err(_) => None,
        };
        if let Some(Ok(Ok(response))) = answer
            && response.status().is_success()
        {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("the gateway never became healthy:\n{}", service.log_tail());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Closes `sessions` (instance, session id), then deletes `instances`, each call bounded.
pub(crate) async fn remove_all(
    stack: &Stack,
    sessions: &[(String, String)],
    instances: Vec<String>,
) {
    close_all(stack, sessions).await;
    for instance in instances {
        let _ = tokio::time::timeout(
            CALL_PATIENCE,
            stack
                .session_api
                .clone()
                .delete_instance(ptyhub_proto::session::v1::DeleteInstanceRequest { instance }),
        )
        .await;
    }
}

/// Closes sessions through session-api, a batch at a time, each bounded.
async fn close_all(stack: &Stack, sessions: &[(String, String)]) {
    futures::stream::iter(sessions)
        .for_each_concurrent(BATCH, |(instance, id)| async move {
            if tokio::time::timeout(CALL_PATIENCE, close_session(stack, instance, id))
                .await
                .is_err()
            {
                eprintln!("close session {id}: no answer within {CALL_PATIENCE:?}");
            }
        })
        .await;
}

/// The terminals if every one opened; otherwise how many failed and the first error.
pub(crate) fn all_opened(opened: Vec<Result<Term>>) -> Result<Vec<Term>, (usize, anyhow::Error)> {
    let failed = opened.iter().filter(|result| result.is_err()).count();
    let mut terms = Vec::with_capacity(opened.len() - failed);
    let mut first_error = None;
    for result in opened {
        match result {
            Ok(term) => terms.push(term),
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    match first_error {
        Some(error) => Err((failed, error)),
        None => Ok(terms),
    }
}
