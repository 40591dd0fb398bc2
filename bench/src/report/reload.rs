//! (8) Reload of a full-screen session in Chromium.

use std::fmt::Write as _;

use anyhow::Result;

use crate::args::Sizes;
use crate::reload;
use crate::reload::BrowserSetup;
use crate::stack::{self, Stack};
use crate::stats::Spread;

/// (8) Reload of a full-screen session in Chromium.
pub async fn reload_section(
    stack: &Stack,
    sizes: Sizes,
    browser: &BrowserSetup,
    out: &mut String,
    failures: &mut Vec<String>,
) -> Result<()> {
    eprintln!("(8) reload in Chromium");
    writeln!(
        out,
        "\n### (8) Page load of a full-screen session in Chromium after {} MiB of output, {} loads: from the WebSocket's open until xterm shows the server's screen\n",
        sizes.reload_bytes >> 20,
        sizes.reloads
    )?;
    writeln!(out, "| measure | median | min | max | target |")?;
    writeln!(out, "|---|---:|---:|---:|---|")?;
    if let Some(reason) = browser.missing() {
        if stack::in_ci() {
            failures.push(format!("reload: required under CI=true: {reason}"));
        } else {
            stack::report_skip(&format!("SKIP: bench reload scenario: {reason}"));
        }
        writeln!(out, "| not measured: {reason} | | | | |")?;
        return Ok(());
    }
    let measured = reload::reload(stack, browser, sizes.reload_bytes, sizes.reloads).await;
    let reload = match measured {
        Ok(reload) => reload,
        Err(error) => {
            failures.push(format!("reload: {error:#}"));
            writeln!(
                out,
                "| failed: see the errors below the table | | | | < 100 ms, < 64 KiB |"
            )?;
            return Ok(());
        }
    };
    let row = |out: &mut String,
               label: &str,
               values: Vec<f64>,
               format: &dyn Fn(f64) -> String,
               target: &str| {
        match Spread::of(&values) {
            Some(spread) => writeln!(
                out,
                "| {label} | {} | {} | {} | {target} |",
                format(spread.median),
                format(spread.min),
                format(spread.max)
            ),
            None => writeln!(out, "| {label} | failed | | | {target} |"),
        }
    };
    let ms = |value: f64| format!("{value:.1} ms");
    let kib = |value: f64| format!("{:.1} KiB", value / 1024.0);
    let loads = &reload.loads;
    row(
        out,
        &format!(
            "WebSocket open → xterm shows the screen ({}x{}, session at offset {})",
            reload.cols, reload.rows, reload.offset
        ),
        loads.iter().map(|load| load.open_to_match_ms).collect(),
        &ms,
        "< 100 ms",
    )?;
    row(
        out,
        "of which until the last frame before it arrived (the server's part)",
        loads
            .iter()
            .map(|load| load.open_to_last_frame_ms)
            .collect(),
        &ms,
        "",
    )?;
    row(
        out,
        "bytes the server sent on the socket until then",
        loads.iter().map(|load| load.bytes as f64).collect(),
        &kib,
        "< 64 KiB",
    )?;
    let snapshots: Vec<f64> = loads
        .iter()
        .filter_map(|load| load.snapshot_bytes.map(|bytes| bytes as f64))
        .collect();
    if snapshots.is_empty() {
        writeln!(out, "| of which a snapshot | none came | | | |")?;
    } else {
        row(out, "of which the snapshot", snapshots, &kib, "")?;
    }
    row(
        out,
        "`new WebSocket` → open (upgrade, the gateway's attach)",
        loads.iter().map(|load| load.created_to_open_ms).collect(),
        &ms,
        "",
    )?;
    row(
        out,
        "navigation start → xterm shows the screen",
        loads
            .iter()
            .map(|load| load.navigation_to_match_ms)
            .collect(),
        &ms,
        "",
    )?;
    Ok(())
}
