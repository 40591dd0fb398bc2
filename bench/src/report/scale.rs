//! (4) Scale: broker memory per session, gateway memory per socket, many typists' echo.

use std::fmt::Write as _;

use anyhow::Result;

use crate::args::{Sizes, WAVE_SCREEN_SLEEP};
use crate::peers::ttyd_binary;
use crate::stack::{self, Stack};
use crate::stats::{Latency, micros};
use crate::{scale, typists};

/// An idle attached WebSocket's cost on the gateway, at most.
const SOCKET_TARGET_KIB: f64 = 8.0;

/// The many typists' p99 through the gateway, at most this multiple of the bare PTYs'.
const TYPING_TARGET_RATIO: f64 = 1.5;

fn met(met: bool) -> &'static str {
    if met { "met" } else { "missed" }
}

/// (4) Scale: broker memory per session, gateway memory per socket, many typists' echo.
pub async fn scale_section(
    stack: &Stack,
    sizes: Sizes,
    typing_timeline: Option<&std::path::Path>,
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
                let stopped = match memory.stopped {
                    Some(stopped) => format!("{} ms", stopped.as_millis()),
                    None => "killed after 40 s".to_owned(),
                };
                writeln!(
                    out,
                    "| same broker's stop: SIGTERM to exit, every session's processes ended | {stopped} | |",
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
                "| {} attached WebSockets on one gateway ({} sessions, 1 controller + up to {} viewers each), gateway RSS per socket | {:.1} KiB | ≤ {SOCKET_TARGET_KIB:.0} KiB: {} |",
                memory.sockets,
                memory.sessions,
                memory.sockets.div_ceil(memory.sessions) - 1,
                memory.per_socket_kib,
                met(memory.per_socket_kib <= SOCKET_TARGET_KIB),
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
                "| {sockets} attached WebSockets on one gateway: RSS per socket | failed | ≤ {SOCKET_TARGET_KIB:.0} KiB |"
            )?;
        }
    }

    let typists = sizes.typists;
    let mut paths = vec![typists::Typed::BarePty, typists::Typed::Relayed];
    match ttyd_binary() {
        Ok(_) => paths.push(typists::Typed::Ttyd),
        Err(reason) if stack::in_ci() => failures.push(format!("typing on ttyd: {reason}")),
        Err(reason) => stack::report_skip(&format!("SKIP: bench typing on ttyd: {reason}")),
    }
    paths.push(typists::Typed::Gateway);
    // The bare PTYs' p99 and keystrokes typed in this run, which the others are held to.
    let mut floor = None;
    // ttyd's p99 against the bare PTYs', and its CPU per keystroke, in this run.
    let mut peer = None;
    for typed in paths {
        let what = typed.label();
        eprintln!("(4) scale: {typists} typists {what}");
        let mut target = match typed {
            typists::Typed::Gateway => format!("p99 ≤ {TYPING_TARGET_RATIO}x the bare PTYs'"),
            _ => String::new(),
        };
        let typing = typists::typing(stack, typed, typists, sizes.typing).await;
        if let (Ok(typing), Some(directory)) = (&typing, typing_timeline)
            && let Err(error) = typists::write_timeline(directory, typed.file_name(), typing)
        {
            failures.push(format!("the typing timeline {what}: {error:#}"));
        }
        match typing {
            Ok(typing) => match Latency::of(&typing.echoes()) {
                Some(latency) => {
                    // Every keystroke typed is echoed and checked, or the run fails; a late
                    // echo delays the typist's next key, so fewer are typed than planned.
                    let ratio = floor.map(|(floor_p99, _): (std::time::Duration, usize)| {
                        latency.p99.as_secs_f64() / floor_p99.as_secs_f64()
                    });
                    match (typed, floor, ratio) {
                        (typists::Typed::BarePty, _, _) => {
                            floor = Some((latency.p99, typing.keystrokes.len()));
                        }
                        (typists::Typed::Ttyd, Some((_, floor_typed)), Some(ratio)) => {
                            peer = Some((ratio, typing.server_cpu_per_keystroke()));
                            target = format!(
                                "the peer: p99 {ratio:.2}x the bare PTYs' ({} typed, the bare PTYs {floor_typed})",
                                typing.keystrokes.len(),
                            );
                        }
                        (typists::Typed::Gateway, Some((_, floor_typed)), Some(ratio)) => {
                            let beside_peer = match peer {
                                Some((peer_ratio, _)) => format!("; ttyd's {peer_ratio:.2}x"),
                                None => String::new(),
                            };
                            target = format!(
                                "{target}: {ratio:.2}x, {}{beside_peer}; every keystroke typed was echoed ({} typed, the bare PTYs {floor_typed})",
                                met(ratio <= TYPING_TARGET_RATIO),
                                typing.keystrokes.len(),
                            );
                        }
                        _ => {}
                    }
                    writeln!(
                        out,
                        "| {} terminals typing 10 keys/s {what} from a client process of their own, {} s: echo p50 / p99 / p99.9 | {:.0} / {:.0} / {:.0} µs ({} of {} keystrokes) | {target} |",
                        typing.typists,
                        typing.duration.as_secs(),
                        micros(latency.p50),
                        micros(latency.p99),
                        micros(latency.p999),
                        typing.keystrokes.len(),
                        typing.planned
                    )?;
                    if let Some(cpu) = typing.server_cpu_per_keystroke() {
                        let whose = match typed {
                            typists::Typed::Ttyd => "ttyd's process",
                            _ => "the services' (the bench's process)",
                        };
                        let beside_peer = match (typed, peer) {
                            (typists::Typed::Gateway, Some((_, Some(peer_cpu)))) => {
                                format!("{:.2}x ttyd's", cpu.as_secs_f64() / peer_cpu.as_secs_f64())
                            }
                            _ => String::new(),
                        };
                        writeln!(
                            out,
                            "| same, server CPU per keystroke typed: {whose} user + system time from the first key to the last | {:.0} µs | {beside_peer} |",
                            micros(cpu),
                        )?;
                    }
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
