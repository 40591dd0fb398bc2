//! (4) Scale: broker memory per session, gateway memory per socket, many typists' echo.

use std::fmt::Write as _;

use anyhow::Result;

use crate::args::{Sizes, WAVE_SCREEN_SLEEP};
use crate::stack::Stack;
use crate::stats::{Latency, micros};
use crate::{scale, typists};

/// (4) Scale: broker memory per session, gateway memory per socket, many typists' echo.
pub async fn scale_section(
    stack: &Stack,
    sizes: Sizes,
    out: &mut String,
    failures: &mut Vec<String>,
) -> Result<()> {
    eprintln!("(4) scale: {} sessions on one broker", sizes.scale_sessions);
    let ring_bytes = pty_broker::Config::DEFAULT_RING_BYTES;
    writeln!(out, "\n### (4) Scale\n")?;
    writeln!(out, "| measure | value | target |")?;
    writeln!(out, "|---|---:|---|")?;
    let sessions = sizes.scale_sessions;
    let scrollback = pty_broker::Config::DEFAULT_SCROLLBACK_LINES;
    let runs = [
        (
            Some(scale::ScreenSleep {
                after: sizes.screen_sleep,
                waves: false,
            }),
            format!("screens on, {scrollback} lines of scrollback"),
        ),
        (
            Some(scale::ScreenSleep {
                after: WAVE_SCREEN_SLEEP,
                waves: true,
            }),
            format!(
                "screens on, output in waves of 32 sessions, each wave's screens asleep ({} s) before the next",
                WAVE_SCREEN_SLEEP.as_secs()
            ),
        ),
        (None, "screens off".to_owned()),
    ];
    for (screens, what) in runs {
        eprintln!("(4) scale: {sessions} sessions on one broker, {what}");
        let target = if screens.is_some() { "< 64 KiB" } else { "" };
        match scale::broker_memory(sessions, sizes.scale_output, ring_bytes, screens).await {
            Ok(memory) => {
                writeln!(
                    out,
                    "| {} live sessions on one broker (local, {what}), broker RSS per session, idle | {:.1} KiB | |",
                    memory.sessions, memory.idle_kib
                )?;
                if let (Some(asleep), Some(screens)) = (memory.idle_asleep_kib, screens) {
                    writeln!(
                        out,
                        "| same, idle, once every screen slept ({} s without output) | {asleep:.1} KiB | {target} |",
                        screens.after.as_secs(),
                    )?;
                }
                writeln!(
                    out,
                    "| same, after each printed {} KiB with no client (ring {} KiB): RSS per session | {:.1} KiB (ring holds {:.1} KiB) | |",
                    memory.output_bytes >> 10,
                    ring_bytes >> 10,
                    memory.after_kib,
                    memory.ring_kib
                )?;
                writeln!(
                    out,
                    "| same, beyond the ring bytes used | {:.1} KiB | {target} |",
                    memory.beyond_ring_kib,
                )?;
                if let (Some((asleep, beyond)), Some(screens)) = (memory.asleep, screens) {
                    writeln!(
                        out,
                        "| same, once every screen slept ({} s without output): RSS per session; beyond the ring | {asleep:.1} KiB; {beyond:.1} KiB | {target} |",
                        screens.after.as_secs(),
                    )?;
                }
                writeln!(
                    out,
                    "| broker RSS with one session (baseline) | {:.1} MiB | |",
                    memory.baseline_kib as f64 / 1024.0
                )?;
            }
            Err(error) => {
                failures.push(format!("scale {sessions} sessions, {what}: {error:#}"));
                writeln!(
                    out,
                    "| {sessions} live sessions on one broker ({what}): RSS per session | failed | {target} |"
                )?;
            }
        }
    }

    eprintln!("(4) scale: {} WebSockets on one gateway", sizes.sockets);
    let sockets = sizes.sockets;
    match scale::gateway_memory(stack, sockets).await {
        Ok(memory) => {
            writeln!(
                out,
                "| {} attached WebSockets on one gateway ({} sessions, 1 controller + up to {} viewers each), gateway RSS per socket | {:.1} KiB | |",
                memory.sockets,
                memory.sessions,
                memory.sockets.div_ceil(memory.sessions) - 1,
                memory.per_socket_kib
            )?;
            writeln!(
                out,
                "| gateway RSS with one socket (baseline) | {:.1} MiB | |",
                memory.baseline_kib as f64 / 1024.0
            )?;
        }
        Err(error) => {
            failures.push(format!("scale {sockets} sockets: {error:#}"));
            writeln!(
                out,
                "| {sockets} attached WebSockets on one gateway: RSS per socket | failed | |"
            )?;
        }
    }

    let typists = sizes.typists;
    for typed in [
        typists::Typed::BarePty,
        typists::Typed::Relayed,
        typists::Typed::Gateway,
    ] {
        let what = typed.label();
        eprintln!("(4) scale: {typists} typists {what}");
        let target = if typed == typists::Typed::Gateway {
            "p99 < 1000 µs, every keystroke"
        } else {
            ""
        };
        match typists::typing(stack, typed, typists, sizes.typing).await {
            Ok(typing) => match Latency::of(&typing.samples) {
                Some(latency) => {
                    writeln!(
                        out,
                        "| {} terminals typing 10 keys/s {what} from a client process of their own, {} s: echo p50 / p99 / p99.9 | {:.0} / {:.0} / {:.0} µs ({} of {} keystrokes) | {target} |",
                        typing.typists,
                        typing.duration.as_secs(),
                        micros(latency.p50),
                        micros(latency.p99),
                        micros(latency.p999),
                        typing.samples.len(),
                        typing.planned
                    )?;
                }
                None => {
                    failures.push(format!(
                        "scale {typists} typists {what}: no keystroke was timed"
                    ));
                    writeln!(
                        out,
                        "| {typists} terminals typing {what}: echo | failed | |"
                    )?;
                }
            },
            Err(error) => {
                failures.push(format!("scale {typists} typists {what}: {error:#}"));
                writeln!(
                    out,
                    "| {typists} terminals typing {what}: echo | failed | |"
                )?;
            }
        }
    }
    Ok(())
}
