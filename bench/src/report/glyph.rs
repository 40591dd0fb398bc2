//! (13) Key press to glyph in Chromium, through ptyhub and on the page's own floor.

use std::fmt::Write as _;

use anyhow::Result;

use crate::args::Sizes;
use crate::glyph::{self, Glyphs};
use crate::reload::BrowserSetup;
use crate::stack::{self, Stack};
use crate::stats;

/// ptyhub's p50 and p99 against the floor's: at most this multiple.
const TARGET_RATIO: f64 = 1.2;

pub async fn glyph_section(
    stack: &Stack,
    sizes: Sizes,
    browser: &BrowserSetup,
    out: &mut String,
    failures: &mut Vec<String>,
) -> Result<()> {
    eprintln!("(13) key press to glyph in Chromium");
    writeln!(
        out,
        "\n### (13) Key press to glyph in Chromium's xterm.js, {} keys, ms\n",
        sizes.glyph_keys
    )?;
    writeln!(out, "| path | p50 | p99 | target |")?;
    writeln!(out, "|---|---:|---:|---|")?;
    if let Some(reason) = browser.missing() {
        if stack::in_ci() {
            failures.push(format!("key to glyph: required under CI=true: {reason}"));
        } else {
            stack::report_skip(&format!("SKIP: bench key-to-glyph scenario: {reason}"));
        }
        writeln!(out, "| not measured: {reason} | | | |")?;
        return Ok(());
    }
    match glyph::key_to_glyph(stack, browser, sizes.glyph_keys).await {
        Ok(glyphs) => write_rows(out, &glyphs)?,
        Err(error) => {
            failures.push(format!("key to glyph: {error:#}"));
            writeln!(out, "| failed | | | ≤ {TARGET_RATIO}x the floor |")?;
        }
    }
    Ok(())
}

fn write_rows(out: &mut String, glyphs: &Glyphs) -> std::fmt::Result {
    let (floor_p50, floor_p99) = p50_p99(&glyphs.floor);
    let (p50, p99) = p50_p99(&glyphs.ptyhub);
    writeln!(
        out,
        "| the same page on a plain WebSocket echo server (the floor) | {floor_p50:.1} | {floor_p99:.1} | |"
    )?;
    let verdict = |ours: f64, floor: f64| {
        let ratio = ours / floor;
        let met = if ratio <= TARGET_RATIO {
            "met"
        } else {
            "missed"
        };
        format!("{ratio:.2}x, {met}")
    };
    writeln!(
        out,
        "| ptyhub gateway WebSocket, broker in process (`ptyhub up`), local | {p50:.1} | {p99:.1} | ≤ {TARGET_RATIO}x the floor: p50 {}; p99 {} |",
        verdict(p50, floor_p50),
        verdict(p99, floor_p99),
    )
}

/// The p50 and p99 of samples in ms, NaN (printed as such) when there are none.
fn p50_p99(samples: &[f64]) -> (f64, f64) {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = |quantile| stats::nearest_rank(&sorted, quantile).unwrap_or(f64::NAN);
    (rank(0.50), rank(0.99))
}
