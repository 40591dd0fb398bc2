//! `bench`: measures ptyhub against the limits of this machine, side by side in one run, and
//! prints a Markdown table (`cargo xtask bench [--quick]` runs it; BENCHMARKS.md explains it).
//! `args` reads the flags, the scenario modules measure, `report` runs the chosen scenarios and
//! writes their tables.

mod args;
mod child;
mod commands;
mod glyph;
mod grpc_attach;
mod handoff;
mod peers;
mod reload;
mod report;
mod scale;
mod scenarios;
mod snapshot;
mod stack;
mod stats;
mod term;
mod typists;

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::Parser;
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::args::Args;
use crate::reload::BrowserSetup;
use crate::stack::{Stack, StackOptions};

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if args.typist_client {
        return typists::client(Duration::from_millis(args.typing_ms)).await;
    }
    let sizes = args.sizes();
    let selected = |name: &str| args.selected(name);
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
        // The page the browser scenarios load, as built now rather than as the gateway binary
        // embedded it when it was built.
        web_dir: ((selected("reload") || selected("glyph"))
            && browser.web_dir.join("index.html").is_file())
        .then(|| browser.web_dir.clone()),
        record: args.record,
    })
    .await?;
    let started = Instant::now();
    let result = tokio::select! {
        result = report::run(&stack, sizes, &args.only, &args.paths, &browser) => result,
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
