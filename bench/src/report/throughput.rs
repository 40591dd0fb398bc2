//! (1) Throughput on every path, each of ptyhub's paths beside the same with screens off.

use std::fmt::Write as _;

use anyhow::Result;

use crate::args::Sizes;
use crate::scenarios;
use crate::stack::{self, Backend, Screens, Stack};
use crate::stats::Spread;
use crate::term::Path;

/// (1) Throughput, the paths interleaved in each round so that they share the noise; each of
/// ptyhub's paths beside the same with screens off.
pub async fn throughput_section(
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
