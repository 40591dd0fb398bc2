//! (13) Key press to glyph in Chromium, through ptyhub and on the page's own floor.

use std::fmt::Write as _;

use anyhow::Result;

use crate::args::Sizes;
use crate::glyph::{self, Glyphs, KeySample};
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
    writeln!(
        out,
        "| path | p50 | p99 | round trip p50 / p99 | page's receive p50 / p99 | frames a key: sent, binary, text | target |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---:|---:|---|")?;
    if let Some(reason) = browser.missing() {
        if stack::in_ci() {
            failures.push(format!("key to glyph: required under CI=true: {reason}"));
        } else {
            stack::report_skip(&format!("SKIP: bench key-to-glyph scenario: {reason}"));
        }
        writeln!(out, "| not measured: {reason} | | | | | | |")?;
        return Ok(());
    }
    match glyph::key_to_glyph(stack, browser, sizes.glyph_keys).await {
        Ok(glyphs) => write_rows(out, &glyphs)?,
        Err(error) => {
            failures.push(format!("key to glyph: {error:#}"));
            writeln!(out, "| failed | | | | | | ≤ {TARGET_RATIO}x the floor |")?;
        }
    }
    Ok(())
}

fn write_rows(out: &mut String, glyphs: &Glyphs) -> std::fmt::Result {
    let floor = Summary::of(&glyphs.floor);
    let rows = [
        (
            "the same small page on a plain WebSocket echo server (the floor)",
            floor,
        ),
        (
            "the small page on ptyhub's gateway WebSocket, broker in process (`ptyhub up`), local",
            Summary::of(&glyphs.ptyhub),
        ),
        (
            "ptyhub's own web page, the same stack",
            Summary::of(&glyphs.web_page),
        ),
    ];
    for (index, (path, summary)) in rows.iter().enumerate() {
        let target = if index == 0 {
            String::new()
        } else {
            format!(
                "≤ {TARGET_RATIO}x the floor: p50 {}; p99 {}",
                verdict(summary.glyph.0, floor.glyph.0),
                verdict(summary.glyph.1, floor.glyph.1)
            )
        };
        writeln!(
            out,
            "| {path} | {:.1} | {:.1} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2}, {:.2}, {:.2} | {target} |",
            summary.glyph.0,
            summary.glyph.1,
            summary.round_trip.0,
            summary.round_trip.1,
            summary.page.0,
            summary.page.1,
            summary.frames_sent,
            summary.frames_binary,
            summary.frames_text,
        )?;
    }
    Ok(())
}

/// `ours` against `floor`: the ratio and whether it meets the target.
fn verdict(ours: f64, floor: f64) -> String {
    let ratio = ours / floor;
    let met = if ratio <= TARGET_RATIO {
        "met"
    } else {
        "missed"
    };
    format!("{ratio:.2}x, {met}")
}

/// One target's figures: p50 and p99 of the glyph and of two of its phases, and the frames a key
/// put on the wire on average.
#[derive(Debug, Clone, Copy)]
struct Summary {
    glyph: (f64, f64),
    round_trip: (f64, f64),
    page: (f64, f64),
    frames_sent: f64,
    frames_binary: f64,
    frames_text: f64,
}

impl Summary {
    fn of(samples: &[KeySample]) -> Self {
        let mean = |count: fn(&KeySample) -> u32| {
            let total: f64 = samples.iter().map(|sample| f64::from(count(sample))).sum();
            total / samples.len() as f64
        };
        Self {
            glyph: p50_p99(samples, |sample| sample.glyph),
            round_trip: p50_p99(samples, |sample| sample.round_trip),
            page: p50_p99(samples, |sample| sample.page),
            frames_sent: mean(|sample| sample.sent),
            frames_binary: mean(|sample| sample.binary),
            frames_text: mean(|sample| sample.text),
        }
    }
}

/// The p50 and p99 of one phase of the samples in ms, NaN (printed as such) when there are none.
fn p50_p99(samples: &[KeySample], phase: fn(&KeySample) -> f64) -> (f64, f64) {
    let mut sorted: Vec<f64> = samples.iter().map(phase).collect();
    sorted.sort_by(f64::total_cmp);
    let rank = |quantile| stats::nearest_rank(&sorted, quantile).unwrap_or(f64::NAN);
    (rank(0.50), rank(0.99))
}
