//! (3) Session start, hop by hop.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Result;

use crate::args::{SCREEN_SLEEP, Sizes};
use crate::stack::{Backend, Stack};
use crate::stats::Latency;
use crate::{scale, scenarios};

use super::{backend_name, p50_p99_ms, write_start_row};

/// (3) Session start: bare PTYs and `docker exec`, the gateway, the broker alone, and session-api with the broker.
pub async fn start_section(
    stack: &Stack,
    sizes: Sizes,
    out: &mut String,
    failures: &mut Vec<String>,
) -> Result<()> {
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
        write_start_row(out, &label, &times, &target)?;
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
                            Err(error) => failures.push(format!("start broker alone: {error:#}")),
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
        out,
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
        write_start_row(out, &label, &times, "")?;
    }
    Ok(())
}
