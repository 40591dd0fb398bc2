//! (4) Scale, typing: many sessions typing at once through the stack's gateway, each keystroke
//! timed until its echo. The services stay in the bench's process (as under `ptyhub up`); the
//! typists run in a client process of their own (the bench binary again, `--typist-client`), so
//! that a thousand clients' WebSocket work and timers neither share the services' runtime nor
//! count in their latency as queueing behind the services' own tasks.
//!
//! Beside it, in the same run, the floors: the same client process typing on as many bare PTYs
//! of its own (each `cat` on a PTY the process holds), and on as many bare PTYs behind two
//! loopback TCP relays (tasks in the client's process), as the echo scenario's (a) and (a2); and
//! the peer: as many terminals of one ttyd (a one-hop web terminal in C, one process serving
//! every socket, a command per socket). For the gateway and ttyd the bench also reads the
//! server's CPU time (the bench's own process, which runs the services, or ttyd's) while the
//! typists type, so the two are compared by what a keystroke costs as well as by its echo.
//!
//! The bench tells its client process what to open on stdin: `gateway <ws base>` then one
//! `instance session` line per typist, or `pty <count>`, or `relayed <count>`, or
//! `ttyd <ws url> <count>`, then end of file.
//! The client answers on stdout with `ready` once every terminal is open, then `done <planned>`
//! and one line per timed keystroke: `<typist> <sent> <echo>`, the typist's index, when the key
//! was sent (from the moment the typists started) and how long its echo took, both in
//! nanoseconds. Anything else it prints is an error, and it exits non-zero.
//!
//! With `--typing-timeline <dir>` the bench writes every path's keystrokes to
//! `<dir>/typing-<path>.tsv`, for finding when the slow ones came (`typists::write_timeline`).

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use futures::StreamExt as _;
use ptyhub_proto::broker::v1 as broker_pb;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use crate::child::open_files_limit;
use crate::peers::{Ttyd, ttyd_binary};
use crate::scale::{INSTANCE_CAP, all_opened, remove_all};
use crate::scenarios::{ECHO_SCRIPT, cpu_seconds_of};
use crate::stack::Stack;
use crate::term::{
    Term, connect_gateway_configured, connect_ttyd, create_session_on, open_pty, open_relayed,
    typist_client,
};

/// Keystrokes per second of one typist.
const KEYS_PER_SECOND: u32 = 10;
/// Bound of one call (create, connect) and of one echo.
const CALL_PATIENCE: Duration = Duration::from_secs(30);
/// Bound of a phase in which nothing need progress but the client (opening every socket).
const PROGRESS_PATIENCE: Duration = Duration::from_secs(120);
/// How many creates or connects are in flight at once (the machine has two cores).
const BATCH: usize = 16;

/// What the typists type on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Typed {
    /// Sessions of the stack, through its gateway's WebSockets.
    Gateway,
    /// Bare PTYs the client process holds.
    BarePty,
    /// Bare PTYs behind two loopback TCP relays, in the client process.
    Relayed,
    /// Terminals of one ttyd process (the peer).
    Ttyd,
}

impl Typed {
    pub fn label(self) -> &'static str {
        match self {
            Self::Gateway => "through the gateway (local)",
            Self::BarePty => "on bare local PTYs (the floor)",
            Self::Relayed => "on bare PTYs behind two TCP relays",
            Self::Ttyd => "on ttyd (the peer)",
        }
    }

    /// The path's name in the file names of `--typing-timeline`.
    pub fn file_name(self) -> &'static str {
        match self {
            Self::Gateway => "gateway",
            Self::BarePty => "bare-pty",
            Self::Relayed => "relayed",
            Self::Ttyd => "ttyd",
        }
    }
}

/// One timed keystroke.
#[derive(Debug, Clone, Copy)]
pub struct Keystroke {
    /// Which typist sent it.
    pub typist: u32,
    /// When it was sent, from the moment the typists started.
    pub sent: Duration,
    /// How long its echo took.
    pub echo: Duration,
}

/// Echo of many sessions typing at once.
#[derive(Debug, Clone)]
pub struct Typing {
    pub typists: usize,
    pub duration: Duration,
    /// Every keystroke typed, in the order the client reported them.
    pub keystrokes: Vec<Keystroke>,
    /// Keystrokes the typists were to send at 10 a second.
    pub planned: usize,
    /// CPU time of the server's process (the services', or ttyd's) while the typists typed;
    /// `None` for the floors, whose only process is the client.
    pub server_cpu: Option<Duration>,
}

impl Typing {
    /// Every keystroke's round trip.
    pub fn echoes(&self) -> Vec<Duration> {
        self.keystrokes
            .iter()
            .map(|keystroke| keystroke.echo)
            .collect()
    }

    /// The server's CPU time per keystroke typed.
    pub fn server_cpu_per_keystroke(&self) -> Option<Duration> {
        let typed = u32::try_from(self.keystrokes.len())
            .ok()
            .filter(|typed| *typed > 0)?;
        Some(self.server_cpu? / typed)
    }
}

/// Whose CPU time is read while the typists type.
#[derive(Debug, Clone, Copy)]
enum Server {
    /// No server: the floors' terminals are the client's own.
    None,
    /// The bench's own process (the services run in it).
    Bench,
    /// Another process.
    Process(u32),
}

impl Server {
    fn cpu_seconds(self) -> Result<Option<f64>> {
        match self {
            Self::None => Ok(None),
            Self::Bench => cpu_seconds_of("self").map(Some),
            Self::Process(pid) => cpu_seconds_of(&pid.to_string()).map(Some),
        }
    }
}

/// `typists` echo terminals of `typed`: for the gateway, sessions of the stack (local backend,
/// spread over instances of at most 50 sessions); each typing 10 keystrokes a second for `duration` from the client
/// process, each keystroke timed until its echo. Each typist keeps to its own beat, a slot every
/// 100 ms from its phase, with at most one keystroke in flight (as a person waiting on a laggy
/// terminal): a key whose slot came while an echo was awaited goes when the echo comes, and
/// slots that passed meanwhile are skipped, so a slow echo shows as fewer keystrokes than
/// planned as well as in the percentiles.
pub async fn typing(
    stack: &Stack,
    typed: Typed,
    typists: usize,
    duration: Duration,
) -> Result<Typing> {
    ensure!(typists >= 1, "the typing scenario needs a typist");
    // The bench's process, or ttyd (its child, with its limits), holds a PTY and the server's
    // end of a socket for every typist; the client process (also a child) the other ends.
    let needed = typists as u64 * 4 + 256;
    let limit = open_files_limit()?;
    ensure!(
        limit >= needed,
        "the open-files limit is {limit}, {typists} typists need about {needed} (raise `ulimit -n`)"
    );
    match typed {
        Typed::BarePty => {
            return type_through(format!("pty {typists}\n"), typists, duration, Server::None).await;
        }
        Typed::Relayed => {
            let work = format!("relayed {typists}\n");
            return type_through(work, typists, duration, Server::None).await;
        }
        Typed::Ttyd => return type_on_ttyd(typists, duration).await,
        Typed::Gateway => {}
    }
    let mut instances = Vec::new();
    for index in 0..typists.div_ceil(INSTANCE_CAP) {
        let local = broker_pb::Target {
            kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
        };
        instances.push(
            stack
                .register(&format!("bench-typing-{index}"), local, INSTANCE_CAP as u32)
                .await?,
        );
    }
    // Which (instance, session) each typist has, for the cleanup whatever happens.
    let created = std::sync::Mutex::new(Vec::<(String, String)>::new());
    let result = async {
        let sessions: Vec<Result<(String, String)>> = futures::stream::iter(0..typists)
            .map(|index| {
                let instance = instances[index / INSTANCE_CAP].clone();
                let created = &created;
                async move {
                    let command = vec![
                        "/bin/sh".to_owned(),
                        "-c".to_owned(),
                        ECHO_SCRIPT.to_owned(),
                    ];
                    let attach = tokio::time::timeout(
                        CALL_PATIENCE,
                        create_session_on(stack, &instance, command),
                    )
                    .await
                    .map_err(|_| anyhow!("create session took over {CALL_PATIENCE:?}"))??;
                    let placed = (instance, attach.session_id);
                    if let Ok(mut created) = created.lock() {
                        created.push(placed.clone());
                    }
                    Ok(placed)
                }
            })
            .buffer_unordered(BATCH)
            .collect()
            .await;
        let sessions = sessions.into_iter().collect::<Result<Vec<_>>>()?;
        let mut work = format!("gateway {}\n", stack.websocket_url());
        for (instance, session) in &sessions {
            work.push_str(&format!("{instance} {session}\n"));
        }
        type_through(work, typists, duration, Server::Bench).await
    }
    .await;
    let created = created.into_inner().unwrap_or_default();
    remove_all(stack, &created, instances).await;
    result
}

/// `typists` terminals of one ttyd started for them, running the echo program.
async fn type_on_ttyd(typists: usize, duration: Duration) -> Result<Typing> {
    let binary = ttyd_binary().map_err(|reason| anyhow!(reason))?;
    let ttyd = Ttyd::start(&binary).await?;
    let result = match ttyd.pid() {
        Some(pid) => {
            let work = format!("ttyd {} {typists}\n", ttyd.url());
            type_through(work, typists, duration, Server::Process(pid)).await
        }
        None => Err(anyhow!("ttyd exited as it started")),
    };
    ttyd.stop().await;
    result
}

/// Starts the client process with `work`, waits until its terminals are open, and collects what
/// it timed, with the CPU time `server` spent from then until the client finished typing.
async fn type_through(
    work: String,
    typists: usize,
    duration: Duration,
    server: Server,
) -> Result<Typing> {
    let mut client = ClientProcess::start(&work, duration).await?;
    client.wait_ready().await?;
    let cpu_at_ready = server.cpu_seconds()?;
    let planned = client.done(duration).await?;
    let server_cpu = match (cpu_at_ready, server.cpu_seconds()?) {
        (Some(before), Some(after)) => Some(Duration::from_secs_f64((after - before).max(0.0))),
        _ => None,
    };
    let keystrokes = client.keystrokes().await?;
    Ok(Typing {
        typists,
        duration,
        planned,
        keystrokes,
        server_cpu,
    })
}

/// The typists' process, seen from the bench.
struct ClientProcess {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl ClientProcess {
    /// Starts the bench binary as the typists' client and hands it its `work`.
    async fn start(work: &str, duration: Duration) -> Result<Self> {
        let binary = std::env::current_exe().context("the bench's own binary")?;
        let mut child = Command::new(binary)
            .arg("--typist-client")
            .arg(format!("--typing-ms={}", duration.as_millis()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("start the typists' client process")?;
        let mut stdin = child.stdin.take().context("the client's stdin")?;
        stdin
            .write_all(work.as_bytes())
            .await
            .context("hand the typists' client its sessions")?;
        drop(stdin);
        let stdout = child.stdout.take().context("the client's stdout")?;
        Ok(Self {
            child,
            lines: BufReader::new(stdout).lines(),
        })
    }

    /// The next line the client prints, within `patience`.
    async fn line(&mut self, patience: Duration) -> Result<String> {
        match tokio::time::timeout(patience, self.lines.next_line()).await {
            Err(_) => bail!("the typists' client said nothing for {patience:?}"),
            Ok(Err(error)) => Err(error).context("read the typists' client"),
            Ok(Ok(Some(line))) => Ok(line),
            Ok(Ok(None)) => {
                let status = self.child.wait().await?;
                bail!("the typists' client ended ({status}) before its results")
            }
        }
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let line = self.line(PROGRESS_PATIENCE).await?;
        ensure!(
            line == "ready",
            "the typists' client answered {line:?} instead of ready"
        );
        Ok(())
    }

    /// Keystrokes planned, once the client typed for `duration`.
    async fn done(&mut self, duration: Duration) -> Result<usize> {
        let line = self.line(duration + CALL_PATIENCE * 2).await?;
        line.strip_prefix("done ")
            .and_then(|planned| planned.parse::<usize>().ok())
            .with_context(|| format!("the typists' client answered {line:?} instead of done"))
    }

    /// Every timed keystroke, after [`Self::done`], once the client exited.
    async fn keystrokes(&mut self) -> Result<Vec<Keystroke>> {
        let mut keystrokes = Vec::new();
        loop {
            match tokio::time::timeout(CALL_PATIENCE, self.lines.next_line()).await {
                Err(_) => bail!("the typists' client stopped in the middle of its results"),
                Ok(line) => match line.context("read the typists' client")? {
                    None => break,
                    Some(line) => keystrokes.push(
                        Keystroke::parse(&line)
                            .with_context(|| format!("not `<typist> <sent> <echo>`: {line:?}"))?,
                    ),
                },
            }
        }
        let status = self.child.wait().await?;
        ensure!(status.success(), "the typists' client exited with {status}");
        Ok(keystrokes)
    }
}

impl Keystroke {
    /// A line of the client's results.
    fn parse(line: &str) -> Option<Self> {
        let mut fields = line.split(' ');
        let mut next = || fields.next()?.parse::<u64>().ok();
        let keystroke = Self {
            typist: u32::try_from(next()?).ok()?,
            sent: Duration::from_nanos(next()?),
            echo: Duration::from_nanos(next()?),
        };
        fields.next().is_none().then_some(keystroke)
    }

    /// The line the client reports it by.
    fn line(&self) -> String {
        format!(
            "{} {} {}\n",
            self.typist,
            self.sent.as_nanos(),
            self.echo.as_nanos()
        )
    }
}

/// Writes `typing`'s keystrokes to `<directory>/typing-<name>.tsv`, sorted by when they were
/// sent: a header, then the typist, the send time (ms from the typists' start) and the echo
/// (µs) of each, to be counted by window of time.
pub fn write_timeline(directory: &std::path::Path, name: &str, typing: &Typing) -> Result<()> {
    let mut keystrokes = typing.keystrokes.clone();
    keystrokes.sort_by_key(|keystroke| keystroke.sent);
    let mut text = String::from("typist\tsent_ms\techo_us\n");
    for keystroke in keystrokes {
        text.push_str(&format!(
            "{}\t{:.3}\t{:.1}\n",
            keystroke.typist,
            keystroke.sent.as_secs_f64() * 1e3,
            keystroke.echo.as_secs_f64() * 1e6
        ));
    }
    std::fs::create_dir_all(directory)
        .with_context(|| format!("cannot create {}", directory.display()))?;
    let file = directory.join(format!("typing-{name}.tsv"));
    std::fs::write(&file, text).with_context(|| format!("cannot write {}", file.display()))
}

/// The typists' process (`bench --typist-client`): reads its work from stdin, opens every socket,
/// types for `duration` and prints its results (the module's docs give the exchange).
pub async fn client(duration: Duration) -> Result<()> {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let header = lines.next_line().await?.context("no work on stdin")?;
    let script = [
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        ECHO_SCRIPT.to_owned(),
    ];
    let opened: Vec<Result<Term>> = match header.split_once(' ') {
        Some(("gateway", ws_base)) => {
            let mut sessions = Vec::new();
            while let Some(line) = lines.next_line().await? {
                let (instance, session) = line
                    .split_once(' ')
                    .with_context(|| format!("not `instance session`: {line:?}"))?;
                sessions.push((instance.to_owned(), session.to_owned()));
            }
            futures::stream::iter(&sessions)
                .map(|(instance, session)| async move {
                    let term = connect_gateway_configured(
                        ws_base,
                        instance,
                        session,
                        "",
                        Some(typist_client()),
                    )
                    .await?;
                    echo_ready(term).await
                })
                .buffer_unordered(BATCH)
                .collect()
                .await
        }
        Some(("ttyd", work)) => {
            let (url, count) = work
                .split_once(' ')
                .with_context(|| format!("not `ttyd <url> <count>`: {work:?}"))?;
            let count: usize = count
                .parse()
                .with_context(|| format!("not a count: {count:?}"))?;
            futures::stream::iter(0..count)
                .map(|_| async move {
                    echo_ready(connect_ttyd(url, Some(typist_client())).await?).await
                })
                .buffer_unordered(BATCH)
                .collect()
                .await
        }
        Some((kind @ ("pty" | "relayed"), count)) => {
            let count: usize = count
                .parse()
                .with_context(|| format!("not a count: {count:?}"))?;
            let script = &script;
            futures::stream::iter(0..count)
                .map(|_| async move {
                    let term = if kind == "pty" {
                        open_pty(script)?
                    } else {
                        open_relayed(script).await?
                    };
                    echo_ready(term).await
                })
                .buffer_unordered(BATCH)
                .collect()
                .await
        }
        _ => bail!("unknown work {header:?}"),
    };
    let typists = opened.len();
    ensure!(typists > 0, "no terminals to type on");
    let terms = match all_opened(opened) {
        Ok(terms) => terms,
        Err((failed, error)) => {
            bail!("{failed} of {typists} typing terminals did not open, first: {error:#}")
        }
    };
    let mut stdout = tokio::io::stdout();
    stdout.write_all(b"ready\n").await?;
    stdout.flush().await?;

    let period = Duration::from_secs(1) / KEYS_PER_SECOND;
    let started = Instant::now();
    let tasks: Vec<_> = terms
        .into_iter()
        .enumerate()
        .map(|(index, mut term)| {
            // Spread the typists' phases over one period.
            let phase = period * index as u32 / typists as u32;
            let typist = Typist {
                index: u32::try_from(index).unwrap_or(u32::MAX),
                started,
            };
            tokio::spawn(async move {
                tokio::time::sleep(phase).await;
                type_for(&mut term, typist, period, duration).await
            })
        })
        .collect();
    let mut keystrokes = Vec::new();
    let mut first_error = None;
    let mut failed = 0;
    let bound = duration + CALL_PATIENCE;
    for task in tasks {
        let abort = task.abort_handle();
        match tokio::time::timeout(bound, task).await {
            Ok(Ok(Ok(typed))) => keystrokes.extend(typed),
            Ok(Ok(Err(error))) => {
                failed += 1;
                first_error.get_or_insert(error);
            }
            Ok(Err(join_error)) => {
                failed += 1;
                first_error.get_or_insert(anyhow!("typist task failed: {join_error}"));
            }
            Err(_) => {
                abort.abort();
                failed += 1;
                first_error.get_or_insert(anyhow!("a typist did not finish within {bound:?}"));
            }
        }
    }
    if let Some(error) = first_error {
        bail!("{failed} of {typists} typists failed, first: {error:#}");
    }
    let planned = typists * (duration.as_millis() / period.as_millis()) as usize;
    let mut report = format!("done {planned}\n");
    for keystroke in keystrokes {
        report.push_str(&keystroke.line());
    }
    stdout.write_all(report.as_bytes()).await?;
    stdout.flush().await?;
    Ok(())
}

/// `term` once its echo script printed `R` (echo off, `cat` running).
async fn echo_ready(mut term: Term) -> Result<Term> {
    let ready = term.read_until(b"R", 4096).await?;
    ensure!(ready == b"R", "unexpected output before echo: {ready:?}");
    Ok(term)
}

/// A typist's beat: a slot every `period` from now, the first at once. A slot served late (the
/// echo of the key before it still awaited) does not move the slots after it, and slots that
/// passed wholly are skipped. With tokio's `Delay`, a slot served more than 5 ms late (tokio's
/// slack) started the beat again from then, and every typist served late by the same stall
/// started again from the same moment: the phases, spread over the period at the start,
/// gathered into bursts that grew as a run went on.
fn beat(period: Duration) -> tokio::time::Interval {
    let mut beat = tokio::time::interval(period);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    beat
}

/// Who types, for the keystrokes' record.
#[derive(Debug, Clone, Copy)]
struct Typist {
    index: u32,
    /// When the typists started, which the keystrokes' send times count from.
    started: Instant,
}

/// One typist: a keystroke every `period` for `duration`, each timed until its echo.
async fn type_for(
    term: &mut Term,
    typist: Typist,
    period: Duration,
    duration: Duration,
) -> Result<Vec<Keystroke>> {
    let alphabet = b"abcdefghijklmnopqrstuvwxyz";
    let mut ticker = beat(period);
    let end = tokio::time::Instant::now() + duration;
    let mut typed = Vec::new();
    let mut index = 0;
    loop {
        ticker.tick().await;
        if tokio::time::Instant::now() >= end {
            return Ok(typed);
        }
        let key = alphabet[index % alphabet.len()];
        index += 1;
        let sent = Instant::now();
        term.send(&[key]).await?;
        let mut echoed = Vec::new();
        while echoed.is_empty() {
            let chunk = tokio::time::timeout(CALL_PATIENCE, term.recv())
                .await
                .map_err(|_| anyhow!("no echo within {CALL_PATIENCE:?}"))??
                .context("the terminal ended")?;
            echoed.extend_from_slice(&chunk);
        }
        typed.push(Keystroke {
            typist: typist.index,
            sent: sent.duration_since(typist.started),
            echo: sent.elapsed(),
        });
        ensure!(
            echoed == [key],
            "keystroke {:?} came back as {:?}",
            key as char,
            String::from_utf8_lossy(&echoed)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: Duration = Duration::from_millis(100);

    /// When the beat's next slot comes, from `start`.
    async fn next_slot(beat: &mut tokio::time::Interval, start: tokio::time::Instant) -> Duration {
        beat.tick().await;
        tokio::time::Instant::now() - start
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_sent_late_leaves_the_typists_beat_where_it_was() {
        let start = tokio::time::Instant::now();
        let mut beat = beat(PERIOD);
        assert_eq!(next_slot(&mut beat, start).await, Duration::ZERO);
        // The echo took 106 ms: the second slot is served 6 ms late, past tokio's 5 ms slack.
        tokio::time::advance(Duration::from_millis(106)).await;
        assert_eq!(
            next_slot(&mut beat, start).await,
            Duration::from_millis(106)
        );
        assert_eq!(
            next_slot(&mut beat, start).await,
            Duration::from_millis(200)
        );
        // An echo of 250 ms: the slot of 300 ms goes at once, at 450; the one of 400 ms passed
        // wholly and is skipped.
        tokio::time::advance(Duration::from_millis(250)).await;
        assert_eq!(
            next_slot(&mut beat, start).await,
            Duration::from_millis(450)
        );
        assert_eq!(
            next_slot(&mut beat, start).await,
            Duration::from_millis(500)
        );
    }

    #[test]
    fn a_keystroke_goes_through_the_clients_line_and_back() {
        let keystroke = Keystroke {
            typist: 7,
            sent: Duration::from_nanos(1_234_567_890),
            echo: Duration::from_nanos(987_654),
        };
        let line = keystroke.line();
        assert_eq!(line, "7 1234567890 987654\n");
        let parsed = Keystroke::parse(line.trim_end()).expect("its own line");
        assert_eq!(
            (parsed.typist, parsed.sent, parsed.echo),
            (keystroke.typist, keystroke.sent, keystroke.echo)
        );
    }

    #[test]
    fn a_line_that_is_not_three_numbers_is_refused() {
        for line in [
            "",
            "7",
            "7 1",
            "7 1 2 3",
            "7 x 2",
            "-1 1 2",
            "4294967296 1 2",
            "7  1 2",
        ] {
            assert!(Keystroke::parse(line).is_none(), "{line:?} was taken");
        }
    }

    #[test]
    fn the_timeline_lists_the_keystrokes_by_when_they_were_sent() {
        let keystroke = |typist, sent_ms, echo_us| Keystroke {
            typist,
            sent: Duration::from_millis(sent_ms),
            echo: Duration::from_micros(echo_us),
        };
        let keystrokes = vec![keystroke(1, 250, 900), keystroke(0, 100, 1_500)];
        let typing = Typing {
            typists: 2,
            duration: Duration::from_secs(1),
            keystrokes,
            planned: 20,
            server_cpu: None,
        };
        let directory = tempfile::tempdir().expect("a temporary directory");
        let nested = directory.path().join("timelines");
        write_timeline(&nested, "gateway", &typing).expect("the timeline is written");
        let written = std::fs::read_to_string(nested.join("typing-gateway.tsv")).expect("the file");
        assert_eq!(
            written,
            "typist\tsent_ms\techo_us\n0\t100.000\t1500.0\n1\t250.000\t900.0\n"
        );
    }
}
