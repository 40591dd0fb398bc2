//! (10) `run` (through session-api, REST and MCP), and what shell integration costs, on and off
//! side by side.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Result;

use crate::args::Sizes;
use crate::commands;
use crate::stack::Stack;
use crate::stats::micros;

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
                (
                    "`run` of `true`, local bash, through the gateway's REST",
                    measured.run_rest,
                    "",
                ),
                (
                    "`run_command` of `true`, local bash, through the gateway's MCP",
                    measured.run_mcp,
                    "p50 within 1 ms of REST's",
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
                "| echo at a bash prompt through the gateway, integration on | {:.0} µs | {:.0} µs | p50 at most 1.05x off: {} |",
                micros(measured.echo_on.p50),
                micros(measured.echo_on.p99),
                ratio(&measured.echo_ratio)
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
                "| integration on | {:.0} | at least 0.95x off: {} |",
                measured.flood_on,
                ratio(&measured.flood_ratio)
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
