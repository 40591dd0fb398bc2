//! (9) A broker process hands every session to the next one (`--take-over`).

use std::fmt::Write as _;

use anyhow::Result;

use crate::args::Sizes;
use crate::handoff;

/// (9) A broker process hands every session to the next one (`--take-over`).
pub async fn handoff_section(
    sizes: Sizes,
    out: &mut String,
    failures: &mut Vec<String>,
) -> Result<()> {
    let sessions = sizes.handoff_sessions;
    let tickers = sizes.handoff_tickers.min(sessions.saturating_sub(1)).max(1);
    eprintln!("(9) hand-off: {sessions} sessions to the next broker process");
    writeln!(out, "\n### (9) Hand-off to the next broker process\n")?;
    writeln!(out, "| measure | value | target |")?;
    writeln!(out, "|---|---:|---|")?;
    match handoff::hand_off(sessions, tickers).await {
        Ok(measured) => {
            writeln!(
                out,
                "| {} live local sessions handed to a new pty-broker process (`--take-over`): its start to the old one gone and every session served | {:.0} ms | < 1 s |",
                measured.sessions,
                measured.total.as_secs_f64() * 1000.0
            )?;
            writeln!(
                out,
                "| longest output stall a client saw across it ({} attached sessions printing a line every 20 ms; usual gap {:.0} ms) | {:.0} ms | |",
                measured.tickers,
                measured.usual_gap.as_secs_f64() * 1000.0,
                measured.longest_stall.as_secs_f64() * 1000.0
            )?;
            writeln!(
                out,
                "| bytes lost or repeated (of {} KiB read by those clients, each resuming with `since`); pids changed | 0; 0 | 0 |",
                measured.ticker_bytes >> 10
            )?;
        }
        Err(error) => {
            failures.push(format!("hand-off of {sessions} sessions: {error:#}"));
            writeln!(
                out,
                "| {sessions} live local sessions handed to a new pty-broker process | failed | < 1 s |"
            )?;
        }
    }
    Ok(())
}
