//! The latency tables: (2) keystroke echo, (5) Ctrl-C under a flood, (6) isolation from a
//! stalled flood.

use std::fmt::Write as _;

use anyhow::Result;

use crate::args::Sizes;
use crate::scenarios;
use crate::stack::{Backend, Screens, Stack};
use crate::stats::{Latency, Spread, micros};
use crate::term::Path;

use super::{backend_name, spread_micros};

/// (2) Keystroke echo round trips on every path, rounds in alternating order.
pub async fn echo_section(
    stack: &Stack,
    paths: &[Path],
    sizes: Sizes,
    out: &mut String,
    failures: &mut Vec<String>,
) -> Result<()> {
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
            | Path::GatewayGrpc(Backend::Local, Screens::On) => "p50 < 150, p99 < 300".to_owned(),
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
    Ok(())
}

/// (5) Ctrl-C under a `yes` flood, on the paths with a controlling terminal.
pub async fn ctrl_c_section(
    stack: &Stack,
    paths: &[Path],
    sizes: Sizes,
    out: &mut String,
    failures: &mut Vec<String>,
) -> Result<()> {
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
    Ok(())
}

/// (6) The echo of a quiet session while another floods with a stalled controller.
pub async fn isolation_section(
    stack: &Stack,
    sizes: Sizes,
    out: &mut String,
    failures: &mut Vec<String>,
) -> Result<()> {
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
    Ok(())
}

/// (12) The echo of a quiet session, idle and while another session of the same broker floods
/// to a controller that reads everything; the target is the idle p99 of the same run. Each path
/// runs `repeats` times (at most 5), the paths in turn in each round; a row gives the median of
/// the runs with their min-max, and its ratio is the median of the runs' own ratios.
pub async fn typing_under_flood_section(
    stack: &Stack,
    sizes: Sizes,
    out: &mut String,
    failures: &mut Vec<String>,
) -> Result<()> {
    eprintln!("(12) typing under a flood");
    // The floor first: the same two terminals as bare PTYs of this process, which shows what
    // the machine itself does to a keystroke while a flood takes its cores.
    let paths: Vec<Path> = [
        Path::BarePty,
        Path::Gateway(Backend::Local, Screens::On),
        Path::Gateway(Backend::Docker, Screens::On),
    ]
    .into_iter()
    .filter(|path| !path.needs_docker() || stack.docker.is_some())
    .collect();
    let rounds = sizes.repeats.min(5);
    let mut runs: Vec<Vec<FloodRun>> = vec![Vec::new(); paths.len()];
    for _ in 0..rounds {
        for (index, path) in paths.iter().enumerate() {
            let measured = scenarios::typing_under_flood_once(
                stack,
                *path,
                sizes.echo_keys,
                sizes.typing_flood_bytes,
            )
            .await;
            match measured {
                Ok(typing) => {
                    if let (Some(idle), Some(flooded)) =
                        (Latency::of(&typing.idle), Latency::of(&typing.flooded))
                    {
                        runs[index].push(FloodRun {
                            idle,
                            flooded,
                            flood_rate: typing.flood_rate,
                        });
                    }
                }
                Err(error) => {
                    failures.push(format!("typing under a flood, {}: {error:#}", path.label()));
                }
            }
        }
    }
    writeln!(
        out,
        "\n### (12) Typing under a flood: echo of a quiet session (gateway WebSocket, broker in process) while another session of the same broker writes {} MiB floods back to back to a controller that reads them (held by the broker to {} KiB/s while the other is typed in: typing first), {} keystrokes, µs, median of {rounds} runs (min-max)\n",
        sizes.typing_flood_bytes >> 20,
        pty_broker::Config::DEFAULT_FLOOD_RATE_WHILE_TYPING >> 10,
        sizes.echo_keys
    )?;
    writeln!(
        out,
        "| path | idle p50 / p99 | flooded p50 / p99 / p99.9 | flood read meanwhile, MiB/s | flooded/idle p99 | target |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---:|---|")?;
    for (path, runs) in paths.iter().zip(&runs) {
        let name = path.label();
        let target = if *path == Path::BarePty { "" } else { "≤ 2x" };
        let ratios: Vec<f64> = runs
            .iter()
            .map(|run| run.flooded.p99.as_secs_f64() / run.idle.p99.as_secs_f64())
            .collect();
        let Some(ratio) = Spread::of(&ratios) else {
            writeln!(out, "| {name} | failed | | | | {target} |")?;
            continue;
        };
        let verdict = match (target, ratio.median <= 2.0) {
            ("", _) => "",
            (_, true) => ": met",
            (_, false) => ": missed",
        };
        let rates: Vec<f64> = runs.iter().map(|run| run.flood_rate).collect();
        let flood_rate = Spread::of(&rates).map_or(0.0, |spread| spread.median);
        let ratio_text = if runs.len() > 1 {
            format!("{:.2}x ({:.2}-{:.2})", ratio.median, ratio.min, ratio.max)
        } else {
            format!("{:.2}x", ratio.median)
        };
        writeln!(
            out,
            "| {name} | {} / {} | {} / {} / {} | {flood_rate:.1} | {ratio_text} | {target}{verdict} |",
            spread_micros(runs.iter().map(|run| run.idle.p50)),
            spread_micros(runs.iter().map(|run| run.idle.p99)),
            spread_micros(runs.iter().map(|run| run.flooded.p50)),
            spread_micros(runs.iter().map(|run| run.flooded.p99)),
            spread_micros(runs.iter().map(|run| run.flooded.p999)),
        )?;
    }
    Ok(())
}

/// One run of the typing-under-a-flood scenario on one path.
#[derive(Debug, Clone, Copy)]
struct FloodRun {
    idle: Latency,
    flooded: Latency,
    /// MiB/s of the flood read while the keys were typed.
    flood_rate: f64,
}
