//! (11) Echo timed by an outside client on a bare PTY, ttyd and ptyhub, side by side, with
//! ptyhub's targets against ttyd measured in the same run.

use std::fmt::Write as _;

use anyhow::Result;

use crate::args::Sizes;
use crate::peers::{PeerPath, Ttyd, peer_echo_once, ttyd_binary};
use crate::scenarios::python_client;
use crate::stack::{self, Stack};
use crate::stats::{Latency, Spread, micros};

use super::spread_micros;

/// ptyhub's targets against ttyd's figure of the same percentile: at most these multiples.
const TARGETS: [(&str, f64); 3] = [("p50", 1.0), ("p99", 1.2), ("p99.9", 2.0)];

/// (11) The three paths in rounds of alternating order, each round one run of every path.
pub async fn peers_section(
    stack: &Stack,
    sizes: Sizes,
    out: &mut String,
    failures: &mut Vec<String>,
) -> Result<()> {
    eprintln!("(11) echo with an outside client: bare PTY, ttyd, ptyhub");
    let binary = match python_client().and(ttyd_binary()) {
        Ok(binary) => binary,
        Err(reason) if stack::in_ci() => {
            failures.push(format!("echo beside ttyd: {reason}"));
            return Ok(());
        }
        Err(reason) => {
            stack::report_skip(&format!("SKIP: bench echo beside ttyd: {reason}"));
            return Ok(());
        }
    };
    let ttyd = match Ttyd::start(&binary).await {
        Ok(ttyd) => ttyd,
        Err(error) => {
            failures.push(format!("echo beside ttyd: {error:#}"));
            return Ok(());
        }
    };
    let rounds = sizes.repeats.min(5);
    let mut runs: Vec<Vec<Latency>> = vec![Vec::new(); PeerPath::ALL.len()];
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..PeerPath::ALL.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for index in order {
            let path = PeerPath::ALL[index];
            match peer_echo_once(stack, &ttyd, path, sizes.echo_keys).await {
                Ok(samples) => runs[index].extend(Latency::of(&samples)),
                Err(error) => {
                    failures.push(format!("echo beside ttyd, {}: {error:#}", path.label()))
                }
            }
        }
    }
    ttyd.stop().await;
    writeln!(
        out,
        "\n### (11) Echo timed by an outside client (Python `websockets`, a process of its own): {} keystrokes per run, µs, median of {rounds} runs (min-max)\n",
        sizes.echo_keys
    )?;
    writeln!(
        out,
        "| path | p50 | p99 | p99.9 | target, against ttyd in this run |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---|")?;
    let ttyd_index = PeerPath::ALL
        .iter()
        .position(|path| *path == PeerPath::Ttyd);
    for (index, path) in PeerPath::ALL.iter().enumerate() {
        let series = &runs[index];
        if series.is_empty() {
            writeln!(out, "| {} | failed | | | |", path.label())?;
            continue;
        }
        let target = match (path, ttyd_index) {
            (PeerPath::Ptyhub, Some(ttyd_index)) => targets_against(series, &runs[ttyd_index]),
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
    Ok(())
}

/// `p50 ≤ 1x: 0.93x, met; ...`: each percentile's median over the runs, as a multiple of
/// ttyd's.
fn targets_against(ours: &[Latency], ttyd: &[Latency]) -> String {
    let median = |series: &[Latency], percentile: &str| {
        let values: Vec<f64> = series
            .iter()
            .map(|latency| match percentile {
                "p50" => micros(latency.p50),
                "p99" => micros(latency.p99),
                _ => micros(latency.p999),
            })
            .collect();
        Spread::of(&values).map(|spread| spread.median)
    };
    TARGETS
        .iter()
        .map(
            |(percentile, at_most)| match (median(ours, percentile), median(ttyd, percentile)) {
                (Some(ours), Some(theirs)) if theirs > 0.0 => {
                    let ratio = ours / theirs;
                    let verdict = if ratio <= *at_most { "met" } else { "missed" };
                    format!("{percentile} ≤ {at_most}x: {ratio:.2}x, {verdict}")
                }
                _ => format!("{percentile} ≤ {at_most}x: no ttyd figure"),
            },
        )
        .collect::<Vec<_>>()
        .join("; ")
}
