//! (10) `run` (through session-api, REST and MCP), and what shell integration costs, on and off
//! side by side, each against its target with a verdict: `run` of `true` p50 under 10 ms
//! locally and 30 ms in a container, integration costing at most 5 % of echo p50 and of
//! throughput (the median of per-round on/off ratios), 1,000 command records under 64 KiB.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Result;

use crate::args::Sizes;
use crate::commands;
use crate::stack::Stack;
use crate::stats::{Latency, micros};

/// `run` of `true` on a local session, p50 at most.
const RUN_LOCAL_TARGET: Duration = Duration::from_millis(10);
/// `run` of `true` in a container, p50 at most.
const RUN_DOCKER_TARGET: Duration = Duration::from_millis(30);
/// MCP's `run_command` beside REST's `run`, p50 at most this much slower.
const MCP_OVER_REST_TARGET: Duration = Duration::from_millis(1);
/// Echo p50 with integration, at most this multiple of without.
const ECHO_RATIO_TARGET: f64 = 1.05;
/// Flood throughput with integration, at least this multiple of without.
const FLOOD_RATIO_TARGET: f64 = 0.95;
/// A session's 1,000 command records, at most.
const COMMAND_RECORDS_TARGET: usize = 64 * 1024;

fn met(met: bool) -> &'static str {
    if met { "met" } else { "missed" }
}

/// `target: met` or `target: missed` for a latency's p50 (`not measured` without one).
fn p50_verdict(
    latency: Option<Latency>,
    target: &str,
    within: impl Fn(Duration) -> bool,
) -> String {
    match latency {
        Some(latency) => format!("{target}: {}", met(within(latency.p50))),
        None => format!("{target}: not measured"),
    }
}

/// (10) `run`, and what shell integration costs, on and off side by side.
pub async fn commands_section(
    stack: &Stack,
    sizes: Sizes,
    out: &mut String,
    failures: &mut Vec<String>,
) -> Result<()> {
    let runs = sizes.echo_keys.min(200);
    eprintln!("(10) commands: {runs} runs of `true`; echo and a flood with integration on and off");
    writeln!(out, "\n### (10) Commands and shell integration\n")?;
    let flood_bytes = sizes.flood_bytes.min(64 << 20);
    // At least four rounds: two alternations of on and off.
    let rounds = sizes.repeats.max(4);
    match commands::measure(stack, runs, sizes.echo_keys, flood_bytes, rounds).await {
        Ok(measured) => {
            writeln!(out, "| measure | p50 | p99 | target |")?;
            writeln!(out, "|---|---:|---:|---|")?;
            let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
            let rest_p50 = measured.run_rest.map(|rest| rest.p50);
            for (label, latency, target) in [
                (
                    "`run` of `true`, local bash, through session-api",
                    measured.run_local,
                    p50_verdict(measured.run_local, "p50 < 10 ms", |p50| {
                        p50 < RUN_LOCAL_TARGET
                    }),
                ),
                (
                    "`run` of `true`, a container's sh, through session-api",
                    measured.run_docker,
                    p50_verdict(measured.run_docker, "p50 < 30 ms", |p50| {
                        p50 < RUN_DOCKER_TARGET
                    }),
                ),
                (
                    "`run` of `true`, local bash, through the gateway's REST",
                    measured.run_rest,
                    String::new(),
                ),
                (
                    "`run_command` of `true`, local bash, through the gateway's MCP",
                    measured.run_mcp,
                    p50_verdict(measured.run_mcp, "p50 within 1 ms of REST's", |p50| {
                        rest_p50.is_some_and(|rest| p50 <= rest + MCP_OVER_REST_TARGET)
                    }),
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
            let ratio = |ratios: &commands::Ratios| {
                format!(
                    "{:.2}x (median of {} rounds; {:.2}x-{:.2}x)",
                    ratios.median, ratios.rounds, ratios.min, ratios.max
                )
            };
            writeln!(
                out,
                "| echo at a bash prompt through the gateway, integration on | {:.0} µs | {:.0} µs | p50 at most 1.05x off: {}, {} |",
                micros(measured.echo_on.p50),
                micros(measured.echo_on.p99),
                ratio(&measured.echo_ratio),
                met(measured.echo_ratio.median <= ECHO_RATIO_TARGET)
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
                "| integration on | {:.0} | at least 0.95x off: {}, {} |",
                measured.flood_on,
                ratio(&measured.flood_ratio),
                met(measured.flood_ratio.median >= FLOOD_RATIO_TARGET)
            )?;
            writeln!(out, "| integration off | {:.0} | |", measured.flood_off)?;
            writeln!(
                out,
                "\n| a session's last 1,000 command records (the broker's command log) | bytes | target |"
            )?;
            writeln!(out, "|---|---:|---|")?;
            writeln!(
                out,
                "| heap held | {} ({:.1} KiB) | < 64 KiB: {} |",
                measured.command_records_bytes,
                measured.command_records_bytes as f64 / 1024.0,
                met(measured.command_records_bytes < COMMAND_RECORDS_TARGET)
            )?;
        }
        Err(error) => {
            writeln!(out, "failed: {error:#}")?;
            failures.push(format!("commands: {error:#}"));
        }
    }
    Ok(())
}
