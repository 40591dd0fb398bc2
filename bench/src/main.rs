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

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    let panics = PanicCount::install();
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
        result = report::run(&stack, sizes, &args.only, &args.paths, &browser, args.typing_timeline.as_deref()) => result,
        signal = interrupted.recv() => Err(anyhow::anyhow!("interrupted by {signal}")),
    };
    stack.stop().await;
    let (table, mut failures) = result?;
    if let Some(failure) = panics.failure() {
        failures.push(failure);
    }
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

/// How many panics the bench's process has had. The stack runs in this process, and a panic in
/// one of its spawned tasks only ends that task: the task's log says so, and the scenario may
/// still finish with figures. Every panic is therefore a failure of the run.
#[derive(Debug, Clone)]
struct PanicCount(Arc<AtomicUsize>);

impl PanicCount {
    /// Counts every panic from now on, and still prints each as before.
    fn install() -> Self {
        let count = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&count);
        let print = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            counted.fetch_add(1, Ordering::SeqCst);
            print(info);
        }));
        Self(count)
    }

    /// The run's failure, if anything panicked.
    fn failure(&self) -> Option<String> {
        match self.0.load(Ordering::SeqCst) {
            0 => None,
            panics => Some(format!(
                "{panics} panic(s) in the bench's process (the stack's tasks or the bench's own): \
                 each is printed above with its place"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_in_a_spawned_task_fails_the_run() {
        let panics = PanicCount::install();
        assert_eq!(panics.failure(), None);
        let ended = tokio::spawn(async { panic!("a task of the stack panics") }).await;
        assert!(ended.is_err_and(|error| error.is_panic()));
        let failure = panics.failure().expect("the panic is counted");
        assert!(failure.starts_with("1 panic(s)"), "{failure}");
    }
}
