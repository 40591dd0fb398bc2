//! (7) Snapshot build time, and the screen fed output.

use std::fmt::Write as _;

use anyhow::Result;

use crate::args::Sizes;
use crate::snapshot;
use crate::stats::{Latency, micros};

/// (7) Snapshot build time.
pub fn snapshot_section(sizes: Sizes, out: &mut String, failures: &mut Vec<String>) -> Result<()> {
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
