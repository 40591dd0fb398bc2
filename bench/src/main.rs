//! `bench`: measures ptyhub against the limits of this machine, side by side in one run, and
//! prints a Markdown table (`cargo xtask bench [--quick]` runs it; BENCHMARKS.md explains it).

mod child;
mod commands;
mod grpc_attach;
mod handoff;
mod reload;
mod scale;
mod scenarios;
mod snapshot;
mod stack;
mod stats;
mod term;
mod typists;

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::Parser;
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::reload::BrowserSetup;
use crate::stack::{Backend, Screens, Stack, StackOptions};
use crate::stats::{Latency, Spread, micros};
use crate::term::Path;

#[derive(Debug, Parser)]
#[command(name = "bench", about = "ptyhub benchmarks (see BENCHMARKS.md)")]
struct Args {
    /// Every scenario at a small size: checks that they complete and the bytes are right.
    #[arg(long)]
    quick: bool,
    /// Only these scenarios (comma separated): throughput, echo, ctrl-c, isolation, start, scale,
    /// snapshot, reload, handoff, commands.
    #[arg(long, value_delimiter = ',', value_parser = ["throughput", "echo", "ctrl-c", "isolation", "start", "scale", "snapshot", "reload", "handoff", "commands"])]
    only: Vec<String>,
    /// Only the paths of the throughput and latency scenarios whose label contains one of these
    /// (comma separated, any case: `docker`, `over tcp`); the floors (a), (a2) and (b) always run,
    /// so the ratios stay.
    #[arg(long, value_delimiter = ',')]
    paths: Vec<String>,
    /// Every session records output and input (asciicast, the server-wide default): run the
    /// same scenarios with and without it for the recording rows of BENCHMARKS.md.
    #[arg(long)]
    record: bool,
    /// Override the number of sessions the hand-off scenario hands to the next broker process.
    #[arg(long)]
    handoff_sessions: Option<usize>,
    /// Override the MiB written by each throughput run.
    #[arg(long)]
    flood_mib: Option<u64>,
    /// Override the number of runs of the repeated scenarios.
    #[arg(long)]
    repeats: Option<usize>,
    /// Override the number of sessions of the broker-memory scale scenario.
    #[arg(long)]
    scale_sessions: Option<usize>,
    /// Override the number of WebSockets of the gateway-memory scale scenario.
    #[arg(long)]
    sockets: Option<usize>,
    /// Override the number of typing sessions of the scale scenario.
    #[arg(long)]
    typists: Option<usize>,
    /// Override the MiB the full-screen program writes before the page loads of the reload
    /// scenario.
    #[arg(long)]
    reload_mib: Option<u64>,
    /// The built web page the gateway serves for the reload scenario (`npm run build` in web/).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../web/dist"))]
    web_dir: std::path::PathBuf,
    /// The Chromium the reload scenario drives. Default: `PTYHUB_TEST_CHROMIUM`, else
    /// `/usr/bin/chromium` (Debian's).
    #[arg(long)]
    chromium: Option<std::path::PathBuf>,
    /// Also write the table to this file.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// Run as the typists' client process of the scale scenario (the bench starts it itself).
    #[arg(long, hide = true)]
    typist_client: bool,
    /// How long the typists' client types, ms.
    #[arg(long, hide = true, default_value_t = 0)]
    typing_ms: u64,
}

/// A session's screen sleeps after this long without output (the broker's default).
const SCREEN_SLEEP: Duration = Duration::from_secs(30);

/// The screen sleep of the scale scenario's run in waves: short, so that the waves take little
/// time (how long a screen waits changes when it sleeps, not what sleeping frees).
const WAVE_SCREEN_SLEEP: Duration = Duration::from_secs(1);

/// Sizes of one run.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    repeats: usize,
    flood_bytes: u64,
    echo_keys: usize,
    ctrl_c_flood: usize,
    starts: usize,
    scale_sessions: usize,
    scale_output: u64,
    sockets: usize,
    typists: usize,
    typing: Duration,
    /// The sleep interval of the scale scenario's broker's screens.
    screen_sleep: Duration,
    snapshot_builds: usize,
    feed_bytes: u64,
    reload_bytes: u64,
    reloads: usize,
    handoff_sessions: usize,
    handoff_tickers: usize,
}

impl Sizes {
    fn new(quick: bool) -> Self {
        if quick {
            Self {
                repeats: 2,
                flood_bytes: 4 << 20,
                echo_keys: 100,
                ctrl_c_flood: 256 << 10,
                starts: 5,
                scale_sessions: 20,
                scale_output: 1 << 20,
                sockets: 40,
                typists: 10,
                typing: Duration::from_secs(3),
                screen_sleep: Duration::from_secs(2),
                snapshot_builds: 20,
                feed_bytes: 1 << 20,
                reload_bytes: 10 << 20,
                reloads: 2,
                handoff_sessions: 5,
                handoff_tickers: 2,
            }
        } else {
            Self {
                // Docker's throughput moves by ±30% from run to run on two shared cores;
                // fewer runs cannot tell a real difference from that.
                repeats: 7,
                flood_bytes: 256 << 20,
                echo_keys: 2000,
                ctrl_c_flood: 4 << 20,
                starts: 100,
                scale_sessions: 1000,
                scale_output: 1 << 20,
                sockets: 10_000,
                typists: 1000,
                typing: Duration::from_secs(10),
                // The broker's default (`--screen-sleep`).
                screen_sleep: SCREEN_SLEEP,
                snapshot_builds: 1000,
                feed_bytes: 64 << 20,
                reload_bytes: 100 << 20,
                reloads: 5,
                handoff_sessions: 1000,
                handoff_tickers: 8,
            }
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if args.typist_client {
        return typists::client(Duration::from_millis(args.typing_ms)).await;
    }
    let mut sizes = Sizes::new(args.quick);
    sizes.flood_bytes = args.flood_mib.map_or(sizes.flood_bytes, |mib| mib << 20);
    sizes.repeats = args.repeats.unwrap_or(sizes.repeats).max(1);
    sizes.scale_sessions = args.scale_sessions.unwrap_or(sizes.scale_sessions);
    sizes.sockets = args.sockets.unwrap_or(sizes.sockets);
    sizes.typists = args.typists.unwrap_or(sizes.typists);
    sizes.reload_bytes = args.reload_mib.map_or(sizes.reload_bytes, |mib| mib << 20);
    sizes.handoff_sessions = args.handoff_sessions.unwrap_or(sizes.handoff_sessions);
    let selected =
        |name: &str| args.only.is_empty() || args.only.iter().any(|wanted| wanted == name);
    let browser = BrowserSetup {
        chromium: args.chromium.clone().unwrap_or_else(|| {
            std::env::var_os("PTYHUB_TEST_CHROMIUM")
                .map_or_else(|| "/usr/bin/chromium".into(), Into::into)
        }),
        web_dir: args.web_dir.clone(),
    };
    // Handling these signals (instead of inheriting them ignored, as a background job or
    // `nohup` leaves them) also gives every process the in-process broker spawns their default
    // action: a session's shell must see ^C as SIGINT whatever started the bench.
    let mut interrupted = Interrupts::new()?;
    let stack = Stack::start(StackOptions {
        ring_bytes: pty_broker::Config::DEFAULT_RING_BYTES,
        max_sessions: 50,
        unscreened: selected("throughput") || selected("echo"),
        web_dir: (selected("reload") && browser.web_dir.join("index.html").is_file())
            .then(|| browser.web_dir.clone()),
        record: args.record,
    })
    .await?;
    let started = Instant::now();
    let result = tokio::select! {
        result = run(&stack, sizes, &args.only, &args.paths, &browser) => result,
        signal = interrupted.recv() => Err(anyhow::anyhow!("interrupted by {signal}")),
    };
    stack.stop().await;
    let (table, failures) = result?;
    let table = if args.record {
        format!("Recording on (output+input) for every session.\n\n{table}")
    } else {
        table
    };
    println!("{table}");
    if let Some(out) = &args.out {
        std::fs::write(out, &table)?;
    }
    eprintln!("bench finished in {:.1} s", started.elapsed().as_secs_f64());
    if !failures.is_empty() {
        bail!(
            "{} measurement(s) failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
    Ok(())
}

/// SIGINT, SIGTERM, SIGHUP and SIGQUIT, handled so that the bench stops cleanly (its container
/// removed) and its children start with their default actions.
struct Interrupts {
    signals: Vec<(&'static str, Signal)>,
}

impl std::fmt::Debug for Interrupts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Interrupts")
    }
}

impl Interrupts {
    fn new() -> Result<Self> {
        let mut signals = Vec::new();
        for (name, kind) in [
            ("SIGINT", SignalKind::interrupt()),
            ("SIGTERM", SignalKind::terminate()),
            ("SIGHUP", SignalKind::hangup()),
            ("SIGQUIT", SignalKind::quit()),
        ] {
            signals.push((name, signal(kind)?));
        }
        Ok(Self { signals })
    }

    /// The name of the first signal that arrives.
    async fn recv(&mut self) -> &'static str {
        let waits = self.signals.iter_mut().map(|(name, signal)| {
            Box::pin(async move {
                signal.recv().await;
                *name
            })
        });
        futures::future::select_all(waits).await.0
    }
}

/// Runs every scenario; the table, and the failures (a failed path is reported, the rest go on).
async fn run(
    stack: &Stack,
    sizes: Sizes,
    only: &[String],
    path_filter: &[String],
    browser: &BrowserSetup,
) -> Result<(String, Vec<String>)> {
    let selected = |name: &str| only.is_empty() || only.iter().any(|wanted| wanted == name);
    let mut out = String::new();
    let mut failures = Vec::new();
    let paths: Vec<Path> = Path::ALL
        .into_iter()
        .filter(|path| !path.needs_docker() || stack.docker.is_some())
        .filter(|path| !path.needs_unscreened() || stack.unscreened.is_some())
        .filter(|path| path.is_wanted(path_filter))
        .collect();
    if stack.docker.is_none() {
        writeln!(
            out,
            "Docker is not available: its paths are not measured.\n"
        )?;
    }

    if selected("throughput") {
        throughput_section(stack, sizes, path_filter, &mut out, &mut failures).await?;
    }
    if selected("echo") {
        // (2) Echo.
        eprintln!("(2) echo");
        let rounds = sizes.repeats.min(5);
        let mut echoes: Vec<Vec<Latency>> = vec![Vec::new(); paths.len()];
        for round in 0..rounds {
            // Every other round in reverse, so that no path always runs right after the same
            // one: a Docker session's teardown overlaps the next run's first keystrokes, which
            // made whichever Docker path came second look 10-20 µs slower.
            let order: Vec<usize> = if round % 2 == 0 {
                (0..paths.len()).collect()
            } else {
                (0..paths.len()).rev().collect()
            };
            for index in order {
                let path = &paths[index];
                match scenarios::echo_once(stack, *path, sizes.echo_keys).await {
                    Ok(samples) => echoes[index].extend(Latency::of(&samples)),
                    Err(error) => failures.push(format!("echo {}: {error:#}", path.label())),
                }
            }
        }
        writeln!(
            out,
            "\n### (2) Keystroke echo round trip: {} keystrokes per run, µs, median of {rounds} runs (min-max)\n",
            sizes.echo_keys
        )?;
        writeln!(out, "| path | p50 | p99 | p99.9 | target |")?;
        writeln!(out, "|---|---:|---:|---:|---|")?;
        for (index, path) in paths.iter().enumerate() {
            let series = &echoes[index];
            if series.is_empty() {
                writeln!(out, "| {} | failed | | | |", path.label())?;
                continue;
            }
            let target = match path {
                Path::Gateway(Backend::Local, Screens::On)
                | Path::GatewayGrpc(Backend::Local, Screens::On) => {
                    "p50 < 150, p99 < 300".to_owned()
                }
                Path::GatewayOverTcp(Backend::Local) => "p50 ≤ 1.3x (a2)".to_owned(),
                // The recorded row against the same path unrecorded, run beside it.
                Path::GatewayRecorded(backend) => {
                    let median_p50 = |wanted: Path| {
                        let index = paths.iter().position(|path| *path == wanted)?;
                        let p50s: Vec<f64> = echoes[index]
                            .iter()
                            .map(|latency| micros(latency.p50))
                            .collect();
                        Spread::of(&p50s).map(|spread| spread.median)
                    };
                    match (
                        median_p50(*path),
                        median_p50(Path::Gateway(*backend, Screens::On)),
                    ) {
                        (Some(recorded), Some(unrecorded)) => {
                            format!("p50 ≤ unrecorded + 10: {:+.0} µs", recorded - unrecorded)
                        }
                        _ => "p50 ≤ unrecorded + 10".to_owned(),
                    }
                }
                _ => String::new(),
            };
            writeln!(
                out,
                "| {} | {} | {} | {} | {target} |",
                path.label(),
                spread_micros(series.iter().map(|latency| latency.p50)),
                spread_micros(series.iter().map(|latency| latency.p99)),
                spread_micros(series.iter().map(|latency| latency.p999)),
            )?;
        }
    }
    if selected("ctrl-c") {
        // (5) Ctrl-C.
        eprintln!("(5) ctrl-c");
        let ctrl_c_paths: Vec<Path> = paths
            .iter()
            .copied()
            .filter(|path| path.has_controlling_terminal())
            .collect();
        let mut ctrl_c: Vec<Vec<f64>> = vec![Vec::new(); ctrl_c_paths.len()];
        for _ in 0..sizes.repeats {
            for (index, path) in ctrl_c_paths.iter().enumerate() {
                match scenarios::ctrl_c_once(stack, *path, sizes.ctrl_c_flood).await {
                    Ok(elapsed) => ctrl_c[index].push(elapsed.as_secs_f64() * 1e3),
                    Err(error) => failures.push(format!("ctrl-c {}: {error:#}", path.label())),
                }
            }
        }
        writeln!(
            out,
            "\n### (5) Ctrl-C under a `yes` flood (controller reading, {} KiB in first): ms until the prompt, median of {} runs\n",
            sizes.ctrl_c_flood >> 10,
            sizes.repeats
        )?;
        writeln!(out, "| path | median | min | max | target |")?;
        writeln!(out, "|---|---:|---:|---:|---|")?;
        for (index, path) in ctrl_c_paths.iter().enumerate() {
            let target = if path.needs_docker() && *path == Path::DockerExec {
                ""
            } else {
                "< 50 ms"
            };
            match Spread::of(&ctrl_c[index]) {
                Some(spread) => writeln!(
                    out,
                    "| {} | {:.1} | {:.1} | {:.1} | {target} |",
                    path.label(),
                    spread.median,
                    spread.min,
                    spread.max
                )?,
                None => writeln!(out, "| {} | failed | | | {target} |", path.label())?,
            }
        }
    }
    if selected("isolation") {
        // (6) Isolation.
        eprintln!("(6) isolation");
        writeln!(
            out,
            "\n### (6) Isolation: echo of a quiet session (gateway) while another floods with a stalled controller, {} keystrokes, µs\n",
            sizes.echo_keys
        )?;
        writeln!(
            out,
            "| backend | unloaded p50 | unloaded p99 | loaded p50 | loaded p99 | loaded/unloaded p99 | target |"
        )?;
        writeln!(out, "|---|---:|---:|---:|---:|---:|---|")?;
        for backend in [Backend::Local, Backend::Docker] {
            if stack.instance(backend).is_none() {
                continue;
            }
            let name = backend_name(backend);
            match scenarios::isolation_once(stack, backend, sizes.echo_keys).await {
                Ok((unloaded, loaded)) => {
                    if let (Some(unloaded), Some(loaded)) =
                        (Latency::of(&unloaded), Latency::of(&loaded))
                    {
                        writeln!(
                            out,
                            "| {name} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2}x | ≤ 2x |",
                            micros(unloaded.p50),
                            micros(unloaded.p99),
                            micros(loaded.p50),
                            micros(loaded.p99),
                            loaded.p99.as_secs_f64() / unloaded.p99.as_secs_f64()
                        )?;
                    }
                }
                Err(error) => {
                    failures.push(format!("isolation {name}: {error:#}"));
                    writeln!(out, "| {name} | failed | | | | | ≤ 2x |")?;
                }
            }
        }
    }
    if selected("start") {
        // (3) Session start.
        eprintln!("(3) session start");
        writeln!(
            out,
            "\n### (3) Session start: {} sessions, ms from the REST create (p50 / p99)\n",
            sizes.starts
        )?;
        writeln!(
            out,
            "| path | created (REST 201) | WebSocket connected | first prompt byte | target |"
        )?;
        writeln!(out, "|---|---:|---:|---:|---|")?;
        let mut bare_starts = Vec::new();
        for _ in 0..sizes.starts {
            match scenarios::bare_pty_start_once(stack).await {
                Ok(elapsed) => bare_starts.push(elapsed),
                Err(error) => failures.push(format!("start bare PTY: {error:#}")),
            }
        }
        writeln!(
            out,
            "| bare local PTY, spawn `sh -i` | | | {} | |",
            p50_p99_ms(&bare_starts)
        )?;
        let mut exec_starts = Vec::new();
        if stack.docker.is_some() {
            for _ in 0..sizes.starts {
                match scenarios::docker_exec_start_once(stack).await {
                    Ok(elapsed) => exec_starts.push(elapsed),
                    Err(error) => failures.push(format!("start docker exec: {error:#}")),
                }
            }
            writeln!(
                out,
                "| bare `docker exec -it sh -i` (bollard) | | | {} | |",
                p50_p99_ms(&exec_starts)
            )?;
        }
        for backend in [Backend::Local, Backend::Docker] {
            if stack.instance(backend).is_none() {
                continue;
            }
            let mut times = Vec::new();
            for _ in 0..sizes.starts {
                match scenarios::session_start_once(stack, backend).await {
                    Ok(start) => times.push(start),
                    Err(error) => failures.push(format!(
                        "start gateway {}: {error:#}",
                        backend_name(backend)
                    )),
                }
            }
            let target = match backend {
                Backend::Local => "p50 < 20 ms".to_owned(),
                Backend::Docker => match Latency::of(&exec_starts) {
                    Some(exec) => format!(
                        "p50 ≤ 1.5x docker exec = {:.1} ms",
                        exec.p50.as_secs_f64() * 1.5e3
                    ),
                    None => "p50 ≤ 1.5x docker exec".to_owned(),
                },
            };
            let label = format!("gateway, {}", backend_name(backend));
            write_start_row(&mut out, &label, &times, &target)?;
        }
        // The broker alone, then session-api and the broker without the gateway: which hop the
        // time goes to.
        let mut times = Vec::new();
        let log_dir = tempfile::tempdir()?;
        match scale::spawn_broker(
            pty_broker::Config::DEFAULT_RING_BYTES,
            Some(SCREEN_SLEEP),
            log_dir.path(),
        ) {
            Ok(mut alone) => {
                match scale::connect_broker(&mut alone).await {
                    Ok(client) => {
                        for _ in 0..sizes.starts {
                            match scenarios::broker_start_once(&client, &alone.endpoint()?).await {
                                Ok(start) => times.push(start),
                                Err(error) => {
                                    failures.push(format!("start broker alone: {error:#}"))
                                }
                            }
                        }
                    }
                    Err(error) => failures.push(format!("start broker alone: {error:#}")),
                }
                alone.stop(Duration::from_secs(15)).await;
            }
            Err(error) => failures.push(format!("start broker alone: {error:#}")),
        }
        write_start_row(
            &mut out,
            "pty-broker process alone: `Spawn` + `Attach` (gRPC), local",
            &times,
            "",
        )?;
        for backend in [Backend::Local, Backend::Docker] {
            if stack.instance(backend).is_none() {
                continue;
            }
            let mut times = Vec::new();
            for _ in 0..sizes.starts {
                match scenarios::grpc_start_once(stack, backend).await {
                    Ok(start) => times.push(start),
                    Err(error) => {
                        failures.push(format!("start gRPC {}: {error:#}", backend_name(backend)))
                    }
                }
            }
            let label = format!(
                "no gateway: session-api `CreateSession` + broker `Attach` (gRPC), {}",
                backend_name(backend)
            );
            write_start_row(&mut out, &label, &times, "")?;
        }
    }
    if selected("scale") {
        scale_section(stack, sizes, &mut out, &mut failures).await?;
    }
    if selected("snapshot") {
        snapshot_section(sizes, &mut out, &mut failures)?;
    }
    if selected("reload") {
        reload_section(stack, sizes, browser, &mut out, &mut failures).await?;
    }
    if selected("handoff") {
        handoff_section(sizes, &mut out, &mut failures).await?;
    }
    if selected("commands") {
        commands_section(stack, sizes, &mut out, &mut failures).await?;
    }
    Ok((out, failures))
}

/// (10) `run`, and what shell integration costs, on and off side by side.
async fn commands_section(
    stack: &Stack,
    sizes: Sizes,
    out: &mut String,
    failures: &mut Vec<String>,
) -> Result<()> {
    let runs = sizes.echo_keys.min(200);
    eprintln!("(10) commands: {runs} runs of `true`; echo and a flood with integration on and off");
    writeln!(out, "\n### (10) Commands and shell integration\n")?;
    let flood_bytes = sizes.flood_bytes.min(64 << 20);
    match commands::measure(stack, runs, sizes.echo_keys, flood_bytes).await {
        Ok(measured) => {
            writeln!(out, "| measure | p50 | p99 | target |")?;
            writeln!(out, "|---|---:|---:|---|")?;
            let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
            for (label, latency, target) in [
                (
                    "`run` of `true`, local bash, through session-api",
                    measured.run_local,
                    "p50 < 10 ms",
                ),
                (
                    "`run` of `true`, a container's sh, through session-api",
                    measured.run_docker,
                    "p50 < 30 ms",
                ),
            ] {
                match latency {
                    Some(latency) => writeln!(
                        out,
                        "| {label} | {:.1} ms | {:.1} ms | {target} |",
                        ms(latency.p50),
                        ms(latency.p99)
                    )?,
                    None => writeln!(out, "| {label} | not measured | | {target} |")?,
                }
            }
            let echo_ratio = micros(measured.echo_on.p50) / micros(measured.echo_off.p50);
            writeln!(
                out,
                "| echo at a bash prompt through the gateway, integration on | {:.0} µs | {:.0} µs | p50 at most 1.05x off: {echo_ratio:.2}x |",
                micros(measured.echo_on.p50),
                micros(measured.echo_on.p99)
            )?;
            writeln!(
                out,
                "| echo at a bash prompt through the gateway, integration off | {:.0} µs | {:.0} µs | |",
                micros(measured.echo_off.p50),
                micros(measured.echo_off.p99)
            )?;
            writeln!(
                out,
                "\n| flood of {} MiB at a bash prompt, through the gateway | MiB/s | target |",
                flood_bytes >> 20
            )?;
            writeln!(out, "|---|---:|---|")?;
            writeln!(
                out,
                "| integration on | {:.0} | at least 0.95x off: {:.2}x |",
                measured.flood_on,
                measured.flood_on / measured.flood_off
            )?;
            writeln!(out, "| integration off | {:.0} | |", measured.flood_off)?;
        }
        Err(error) => {
            writeln!(out, "failed: {error:#}")?;
            failures.push(format!("commands: {error:#}"));
        }
    }
    Ok(())
}

/// (9) A broker process hands every session to the next one (`--take-over`).
async fn handoff_section(sizes: Sizes, out: &mut String, failures: &mut Vec<String>) -> Result<()> {
    let sessions = sizes.handoff_sessions;
    let tickers = sizes.handoff_tickers.min(sessions.saturating_sub(1)).max(1);
    eprintln!("(9) hand-off: {sessions} sessions to the next broker process");
    writeln!(out, "\n### (9) Hand-off to the next broker process\n")?;
    writeln!(out, "| measure | value | target |")?;
    writeln!(out, "|---|---:|---|")?;
    match handoff::hand_off(sessions, tickers).await {
        Ok(measured) => {
            writeln!(
                out,
                "| {} live local sessions handed to a new pty-broker process (`--take-over`): its start to the old one gone and every session served | {:.0} ms | < 1 s |",
                measured.sessions,
                measured.total.as_secs_f64() * 1000.0
            )?;
            writeln!(
                out,
                "| longest output stall a client saw across it ({} attached sessions printing a line every 20 ms; usual gap {:.0} ms) | {:.0} ms | |",
                measured.tickers,
                measured.usual_gap.as_secs_f64() * 1000.0,
                measured.longest_stall.as_secs_f64() * 1000.0
            )?;
            writeln!(
                out,
                "| bytes lost or repeated (of {} KiB read by those clients, each resuming with `since`); pids changed | 0; 0 | 0 |",
                measured.ticker_bytes >> 10
            )?;
        }
        Err(error) => {
            failures.push(format!("hand-off of {sessions} sessions: {error:#}"));
            writeln!(
                out,
                "| {sessions} live local sessions handed to a new pty-broker process | failed | < 1 s |"
            )?;
        }
    }
    Ok(())
}

/// (1) Throughput, the paths interleaved in each round so that they share the noise; each of
/// ptyhub's paths beside the same with screens off.
async fn throughput_section(
    stack: &Stack,
    sizes: Sizes,
    path_filter: &[String],
    out: &mut String,
    failures: &mut Vec<String>,
) -> Result<()> {
    eprintln!("(1) throughput");
    // The Python client is required under CI, as the browser is.
    let python = scenarios::python_client();
    if let Err(reason) = &python
        && !stack::in_ci()
    {
        stack::report_skip(&format!(
            "SKIP: bench throughput, Python client paths: {reason}"
        ));
    }
    let paths: Vec<Path> = Path::THROUGHPUT
        .into_iter()
        .filter(|path| !path.needs_docker() || stack.docker.is_some())
        .filter(|path| !path.needs_unscreened() || stack.unscreened.is_some())
        .filter(|path| !matches!(path, Path::GatewayPython(..)) || python.is_ok() || stack::in_ci())
        .filter(|path| path.is_wanted(path_filter))
        .collect();
    let mut runs: Vec<Vec<scenarios::Throughput>> = vec![Vec::new(); paths.len()];
    for _ in 0..sizes.repeats {
        for (index, path) in paths.iter().enumerate() {
            match scenarios::throughput_once(stack, *path, sizes.flood_bytes).await {
                Ok(run) => runs[index].push(run),
                Err(error) => failures.push(format!("throughput {}: {error:#}", path.label())),
            }
        }
    }
    let rates =
        |index: usize| -> Vec<f64> { runs[index].iter().map(|run| run.mib_per_second).collect() };
    let median_of = |wanted: Path| {
        paths
            .iter()
            .position(|path| *path == wanted)
            .and_then(|index| Spread::of(&rates(index)))
            .map(|spread| spread.median)
    };
    let bare = median_of(Path::BarePty);
    let exec = median_of(Path::DockerExec);
    writeln!(
        out,
        "### (1) Output throughput: {} MiB written, median of {} runs\n",
        sizes.flood_bytes >> 20,
        sizes.repeats
    )?;
    writeln!(
        out,
        "| path | MiB/s median | min | max | vs (a) | vs (b) | screens on/off | recording on/off | bench CPU ms/MiB | target |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")?;
    for (index, path) in paths.iter().enumerate() {
        let Some(spread) = Spread::of(&rates(index)) else {
            writeln!(out, "| {} | failed | | | | | | | | |", path.label())?;
            continue;
        };
        let ratio = |base: Option<f64>| {
            base.map_or(String::new(), |base| {
                format!("{:.2}x", spread.median / base)
            })
        };
        // On the screens-on row: its median over that of the same path with screens off.
        let unscreened = match path {
            Path::Broker(backend, Screens::On) => median_of(Path::Broker(*backend, Screens::Off)),
            Path::Gateway(backend, Screens::On) => median_of(Path::Gateway(*backend, Screens::Off)),
            Path::GatewayGrpc(backend, Screens::On) => {
                median_of(Path::GatewayGrpc(*backend, Screens::Off))
            }
            _ => None,
        };
        // On the recorded row: its median over that of the same path unrecorded.
        let unrecorded = match path {
            Path::GatewayRecorded(backend) => median_of(Path::Gateway(*backend, Screens::On)),
            _ => None,
        };
        let cpu: Vec<f64> = runs[index].iter().map(|run| run.cpu_ms_per_mib).collect();
        let cpu = Spread::of(&cpu).map_or(String::new(), |cpu| format!("{:.1}", cpu.median));
        let target = match path {
            Path::Gateway(Backend::Local, Screens::On)
            | Path::GatewayGrpc(Backend::Local, Screens::On) => "≥ 0.90x (a); on/off ≥ 0.90x",
            Path::Gateway(Backend::Docker, Screens::On)
            | Path::GatewayGrpc(Backend::Docker, Screens::On) => "≥ 0.90x (b); on/off ≥ 0.90x",
            Path::GatewayOverTcp(Backend::Local) | Path::GatewayPython(Backend::Local, _) => {
                "≥ 0.90x (a)"
            }
            Path::GatewayOverTcp(Backend::Docker) | Path::GatewayPython(Backend::Docker, _) => {
                "≥ 0.90x (b)"
            }
            Path::Broker(_, Screens::On) => "on/off ≥ 0.90x",
            Path::GatewayRecorded(_) => "recording on/off ≥ 0.90x",
            _ => "",
        };
        writeln!(
            out,
            "| {} | {:.0} | {:.0} | {:.0} | {} | {} | {} | {} | {cpu} | {target} |",
            path.label(),
            spread.median,
            spread.min,
            spread.max,
            ratio(bare),
            if path.needs_docker() {
                ratio(exec)
            } else {
                String::new()
            },
            ratio(unscreened),
            ratio(unrecorded),
        )?;
    }
    Ok(())
}

/// (7) Snapshot build time.
fn snapshot_section(sizes: Sizes, out: &mut String, failures: &mut Vec<String>) -> Result<()> {
    eprintln!("(7) snapshot builds");
    writeln!(
        out,
        "\n### (7) Snapshot build: `Screen::snapshot()` of a {}x{} screen with {} lines of coloured scrollback, {} builds, µs\n",
        snapshot::COLS,
        snapshot::ROWS,
        snapshot::SCROLLBACK_LINES,
        sizes.snapshot_builds
    )?;
    writeln!(
        out,
        "| measure | p50 | p99 | max | snapshot size | target |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---:|---|")?;
    match snapshot::snapshot_builds(sizes.snapshot_builds) {
        Ok(builds) => match Latency::of(&builds.samples) {
            Some(latency) => {
                let max = builds.samples.iter().max().copied().unwrap_or_default();
                writeln!(
                    out,
                    "| build time ({} KiB of output fed) | {:.0} | {:.0} | {:.0} | {:.1} KiB | p99 < 1000 µs |",
                    builds.fed_bytes >> 10,
                    micros(latency.p50),
                    micros(latency.p99),
                    micros(max),
                    builds.snapshot_bytes as f64 / 1024.0
                )?;
            }
            None => {
                failures.push("snapshot: no build was timed".to_owned());
                writeln!(out, "| build time | failed | | | | p99 < 1000 µs |")?;
            }
        },
        Err(error) => {
            failures.push(format!("snapshot: {error:#}"));
            writeln!(out, "| build time | failed | | | | p99 < 1000 µs |")?;
        }
    }
    // What a session's feeder can keep up with: the emulator alone on one thread, fed the
    // throughput scenario's flood as the broker reads it, every byte parsed and as the feeder
    // feeds it (fast-forwarding over what scrolls away).
    writeln!(
        out,
        "\n| the emulator alone, one thread: {} MiB of the throughput flood fed in 16 KiB pieces | MiB/s, every byte parsed | MiB/s, as the feeder feeds it |\n|---|---:|---:|",
        sizes.feed_bytes >> 20
    )?;
    for (cols, rows, scrollback) in [
        (
            80,
            24,
            pty_broker::Config::DEFAULT_SCROLLBACK_LINES as usize,
        ),
        (80, 24, 0),
    ] {
        let mut cells = Vec::new();
        for feeding in [snapshot::Feeding::Parse, snapshot::Feeding::FastForward] {
            match snapshot::feed_rate(sizes.feed_bytes, cols, rows, scrollback, feeding) {
                Ok(rate) => cells.push(format!("{:.1}", rate.mib_per_second)),
                Err(error) => {
                    failures.push(format!("snapshot feed ({feeding:?}): {error:#}"));
                    cells.push("failed".to_owned());
                }
            }
        }
        writeln!(
            out,
            "| {cols}x{rows} screen, {scrollback} lines of scrollback | {} |",
            cells.join(" | ")
        )?;
    }
    Ok(())
}

/// (8) Reload of a full-screen session in Chromium.
async fn reload_section(
    stack: &Stack,
    sizes: Sizes,
    browser: &BrowserSetup,
    out: &mut String,
    failures: &mut Vec<String>,
) -> Result<()> {
    eprintln!("(8) reload in Chromium");
    writeln!(
        out,
        "\n### (8) Page load of a full-screen session in Chromium after {} MiB of output, {} loads: from the WebSocket's open until xterm shows the server's screen\n",
        sizes.reload_bytes >> 20,
        sizes.reloads
    )?;
    writeln!(out, "| measure | median | min | max | target |")?;
    writeln!(out, "|---|---:|---:|---:|---|")?;
    if let Some(reason) = browser.missing() {
        if stack::in_ci() {
            failures.push(format!("reload: required under CI=true: {reason}"));
        } else {
            stack::report_skip(&format!("SKIP: bench reload scenario: {reason}"));
        }
        writeln!(out, "| not measured: {reason} | | | | |")?;
        return Ok(());
    }
    let measured = reload::reload(stack, browser, sizes.reload_bytes, sizes.reloads).await;
    let reload = match measured {
        Ok(reload) => reload,
        Err(error) => {
            failures.push(format!("reload: {error:#}"));
            writeln!(
                out,
                "| failed: see the errors below the table | | | | < 100 ms, < 64 KiB |"
            )?;
            return Ok(());
        }
    };
    let row = |out: &mut String,
               label: &str,
               values: Vec<f64>,
               format: &dyn Fn(f64) -> String,
               target: &str| {
        match Spread::of(&values) {
            Some(spread) => writeln!(
                out,
                "| {label} | {} | {} | {} | {target} |",
                format(spread.median),
                format(spread.min),
                format(spread.max)
            ),
            None => writeln!(out, "| {label} | failed | | | {target} |"),
        }
    };
    let ms = |value: f64| format!("{value:.1} ms");
    let kib = |value: f64| format!("{:.1} KiB", value / 1024.0);
    let loads = &reload.loads;
    row(
        out,
        &format!(
            "WebSocket open → xterm shows the screen ({}x{}, session at offset {})",
            reload.cols, reload.rows, reload.offset
        ),
        loads.iter().map(|load| load.open_to_match_ms).collect(),
        &ms,
        "< 100 ms",
    )?;
    row(
        out,
        "of which until the last frame before it arrived (the server's part)",
        loads
            .iter()
            .map(|load| load.open_to_last_frame_ms)
            .collect(),
        &ms,
        "",
    )?;
    row(
        out,
        "bytes the server sent on the socket until then",
        loads.iter().map(|load| load.bytes as f64).collect(),
        &kib,
        "< 64 KiB",
    )?;
    let snapshots: Vec<f64> = loads
        .iter()
        .filter_map(|load| load.snapshot_bytes.map(|bytes| bytes as f64))
        .collect();
    if snapshots.is_empty() {
        writeln!(out, "| of which a snapshot | none came | | | |")?;
    } else {
        row(out, "of which the snapshot", snapshots, &kib, "")?;
    }
    row(
        out,
        "`new WebSocket` → open (upgrade, the gateway's attach)",
        loads.iter().map(|load| load.created_to_open_ms).collect(),
        &ms,
        "",
    )?;
    row(
        out,
        "navigation start → xterm shows the screen",
        loads
            .iter()
            .map(|load| load.navigation_to_match_ms)
            .collect(),
        &ms,
        "",
    )?;
    Ok(())
}

/// (4) Scale: broker memory per session, gateway memory per socket, many typists' echo.
async fn scale_section(
    stack: &Stack,
    sizes: Sizes,
    out: &mut String,
    failures: &mut Vec<String>,
) -> Result<()> {
    eprintln!("(4) scale: {} sessions on one broker", sizes.scale_sessions);
    let ring_bytes = pty_broker::Config::DEFAULT_RING_BYTES;
    writeln!(out, "\n### (4) Scale\n")?;
    writeln!(out, "| measure | value | target |")?;
    writeln!(out, "|---|---:|---|")?;
    let sessions = sizes.scale_sessions;
    let scrollback = pty_broker::Config::DEFAULT_SCROLLBACK_LINES;
    let runs = [
        (
            Some(scale::ScreenSleep {
                after: sizes.screen_sleep,
                waves: false,
            }),
            format!("screens on, {scrollback} lines of scrollback"),
        ),
        (
            Some(scale::ScreenSleep {
                after: WAVE_SCREEN_SLEEP,
                waves: true,
            }),
            format!(
                "screens on, output in waves of 32 sessions, each wave's screens asleep ({} s) before the next",
                WAVE_SCREEN_SLEEP.as_secs()
            ),
        ),
        (None, "screens off".to_owned()),
    ];
    for (screens, what) in runs {
        eprintln!("(4) scale: {sessions} sessions on one broker, {what}");
        let target = if screens.is_some() { "< 64 KiB" } else { "" };
        match scale::broker_memory(sessions, sizes.scale_output, ring_bytes, screens).await {
            Ok(memory) => {
                writeln!(
                    out,
                    "| {} live sessions on one broker (local, {what}), broker RSS per session, idle | {:.1} KiB | |",
                    memory.sessions, memory.idle_kib
                )?;
                if let (Some(asleep), Some(screens)) = (memory.idle_asleep_kib, screens) {
                    writeln!(
                        out,
                        "| same, idle, once every screen slept ({} s without output) | {asleep:.1} KiB | {target} |",
                        screens.after.as_secs(),
                    )?;
                }
                writeln!(
                    out,
                    "| same, after each printed {} KiB with no client (ring {} KiB): RSS per session | {:.1} KiB (ring holds {:.1} KiB) | |",
                    memory.output_bytes >> 10,
                    ring_bytes >> 10,
                    memory.after_kib,
                    memory.ring_kib
                )?;
                writeln!(
                    out,
                    "| same, beyond the ring bytes used | {:.1} KiB | {target} |",
                    memory.beyond_ring_kib,
                )?;
                if let (Some((asleep, beyond)), Some(screens)) = (memory.asleep, screens) {
                    writeln!(
                        out,
                        "| same, once every screen slept ({} s without output): RSS per session; beyond the ring | {asleep:.1} KiB; {beyond:.1} KiB | {target} |",
                        screens.after.as_secs(),
                    )?;
                }
                writeln!(
                    out,
                    "| broker RSS with one session (baseline) | {:.1} MiB | |",
                    memory.baseline_kib as f64 / 1024.0
                )?;
            }
            Err(error) => {
                failures.push(format!("scale {sessions} sessions, {what}: {error:#}"));
                writeln!(
                    out,
                    "| {sessions} live sessions on one broker ({what}): RSS per session | failed | {target} |"
                )?;
            }
        }
    }

    eprintln!("(4) scale: {} WebSockets on one gateway", sizes.sockets);
    let sockets = sizes.sockets;
    match scale::gateway_memory(stack, sockets).await {
        Ok(memory) => {
            writeln!(
                out,
                "| {} attached WebSockets on one gateway ({} sessions, 1 controller + up to {} viewers each), gateway RSS per socket | {:.1} KiB | |",
                memory.sockets,
                memory.sessions,
                memory.sockets.div_ceil(memory.sessions) - 1,
                memory.per_socket_kib
            )?;
            writeln!(
                out,
                "| gateway RSS with one socket (baseline) | {:.1} MiB | |",
                memory.baseline_kib as f64 / 1024.0
            )?;
        }
        Err(error) => {
            failures.push(format!("scale {sockets} sockets: {error:#}"));
            writeln!(
                out,
                "| {sockets} attached WebSockets on one gateway: RSS per socket | failed | |"
            )?;
        }
    }

    let typists = sizes.typists;
    for typed in [
        typists::Typed::BarePty,
        typists::Typed::Relayed,
        typists::Typed::Gateway,
    ] {
        let what = typed.label();
        eprintln!("(4) scale: {typists} typists {what}");
        let target = if typed == typists::Typed::Gateway {
            "p99 < 1000 µs, every keystroke"
        } else {
            ""
        };
        match typists::typing(stack, typed, typists, sizes.typing).await {
            Ok(typing) => match Latency::of(&typing.samples) {
                Some(latency) => {
                    writeln!(
                        out,
                        "| {} terminals typing 10 keys/s {what} from a client process of their own, {} s: echo p50 / p99 / p99.9 | {:.0} / {:.0} / {:.0} µs ({} of {} keystrokes) | {target} |",
                        typing.typists,
                        typing.duration.as_secs(),
                        micros(latency.p50),
                        micros(latency.p99),
                        micros(latency.p999),
                        typing.samples.len(),
                        typing.planned
                    )?;
                }
                None => {
                    failures.push(format!(
                        "scale {typists} typists {what}: no keystroke was timed"
                    ));
                    writeln!(
                        out,
                        "| {typists} terminals typing {what}: echo | failed | |"
                    )?;
                }
            },
            Err(error) => {
                failures.push(format!("scale {typists} typists {what}: {error:#}"));
                writeln!(
                    out,
                    "| {typists} terminals typing {what}: echo | failed | |"
                )?;
            }
        }
    }
    Ok(())
}

fn backend_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Local => "local",
        Backend::Docker => "Docker",
    }
}

/// `median (min-max)` in µs of one percentile across runs.
fn spread_micros(values: impl Iterator<Item = Duration>) -> String {
    let values: Vec<f64> = values.map(micros).collect();
    match Spread::of(&values) {
        Some(spread) if values.len() > 1 => {
            format!("{:.0} ({:.0}-{:.0})", spread.median, spread.min, spread.max)
        }
        Some(spread) => format!("{:.0}", spread.median),
        None => "failed".to_owned(),
    }
}

/// `p50 / p99` in ms.
/// One row of the session-start table: p50 / p99 of each stage of `times`.
fn write_start_row(
    out: &mut String,
    label: &str,
    times: &[scenarios::StartTimes],
    target: &str,
) -> std::fmt::Result {
    let stage = |of: fn(&scenarios::StartTimes) -> Duration| {
        p50_p99_ms(&times.iter().map(of).collect::<Vec<_>>())
    };
    writeln!(
        out,
        "| {label} | {} | {} | {} | {target} |",
        stage(|time| time.created),
        stage(|time| time.connected),
        stage(|time| time.first_byte)
    )
}

fn p50_p99_ms(samples: &[Duration]) -> String {
    match Latency::of(samples) {
        Some(latency) => format!(
            "{:.1} / {:.1}",
            latency.p50.as_secs_f64() * 1e3,
            latency.p99.as_secs_f64() * 1e3
        ),
        None => "failed".to_owned(),
    }
}
