//! Runs the scenarios `--only` chose, in order, each writing its Markdown table (one module per
//! table or group of tables); a failed path is reported and the rest go on. The formatting every
//! table shares is here.

mod commands;
mod glyph;
mod handoff;
mod latency;
mod peers;
mod reload;
mod scale;
mod snapshot;
mod start;
mod throughput;

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Result;

use crate::args::Sizes;
use crate::reload::BrowserSetup;
use crate::scenarios;
use crate::stack::{Backend, Stack};
use crate::stats::{Latency, Spread, micros};
use crate::term::Path;

use self::commands::commands_section;
use self::glyph::glyph_section;
use self::handoff::handoff_section;
use self::latency::{ctrl_c_section, echo_section, isolation_section, typing_under_flood_section};
use self::peers::peers_section;
use self::reload::reload_section;
use self::scale::scale_section;
use self::snapshot::snapshot_section;
use self::start::start_section;
use self::throughput::throughput_section;

/// Runs every scenario; the table, and the failures (a failed path is reported, the rest go on).
pub async fn run(
    stack: &Stack,
    sizes: Sizes,
    only: &[String],
    path_filter: &[String],
    browser: &BrowserSetup,
    typing_timeline: Option<&std::path::Path>,
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
        echo_section(stack, &paths, sizes, &mut out, &mut failures).await?;
    }
    if selected("ctrl-c") {
        ctrl_c_section(stack, &paths, sizes, &mut out, &mut failures).await?;
    }
    if selected("isolation") {
        isolation_section(stack, sizes, &mut out, &mut failures).await?;
    }
    if selected("start") {
        start_section(stack, sizes, &mut out, &mut failures).await?;
    }
    if selected("scale") {
        scale_section(stack, sizes, typing_timeline, &mut out, &mut failures).await?;
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
    if selected("peers") {
        peers_section(stack, sizes, &mut out, &mut failures).await?;
    }
    if selected("typing-flood") {
        typing_under_flood_section(stack, sizes, &mut out, &mut failures).await?;
    }
    if selected("glyph") {
        glyph_section(stack, sizes, browser, &mut out, &mut failures).await?;
    }
    Ok((out, failures))
}

pub fn backend_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Local => "local",
        Backend::Docker => "Docker",
    }
}

/// `median (min-max)` in µs of one percentile across runs.
pub fn spread_micros(values: impl Iterator<Item = Duration>) -> String {
    let values: Vec<f64> = values.map(micros).collect();
    match Spread::of(&values) {
        Some(spread) if values.len() > 1 => {
            format!("{:.0} ({:.0}-{:.0})", spread.median, spread.min, spread.max)
        }
        Some(spread) => format!("{:.0}", spread.median),
        None => "failed".to_owned(),
    }
}

/// One row of the session-start table: p50 / p99 of each stage of `times`.
pub fn write_start_row(
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

/// `p50 / p99` in ms.
pub fn p50_p99_ms(samples: &[Duration]) -> String {
    match Latency::of(samples) {
        Some(latency) => format!(
            "{:.1} / {:.1}",
            latency.p50.as_secs_f64() * 1e3,
            latency.p99.as_secs_f64() * 1e3
        ),
        None => "failed".to_owned(),
    }
}
