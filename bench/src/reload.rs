//! (8) Reload of a long-running full-screen session in Chromium: the stack's gateway serves the
//! built web page; an instance on the stack's broker (screens on) runs a full-screen program; the
//! browser part (`bench/browser/reload.mjs`, node with the page's playwright-core and Debian's
//! Chromium) opens the page, makes the program write, and times fresh page loads until xterm's
//! buffer shows the server's screen, with the bytes the socket carried until then.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use ptyhub_proto::broker::v1 as broker_pb;
use serde_json::Value;

use crate::stack::{ADMIN_TOKEN, Stack};

/// The browser script, next to this crate's sources.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/browser/reload.mjs");
/// The page's npm project, whose `node_modules` has playwright-core (`npm ci` there).
const WEB_PROJECT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../web");
/// Liveness bound of one page load or wait in the browser script, not a performance figure.
const PAGE_PATIENCE: Duration = Duration::from_secs(30);

/// One repaint of the counter: cursor to row 4, bold green, `counter ` and 12 digits, reset.
/// Always 37 bytes (`printf` below keeps the width fixed).
const REPAINT: &str = r"\033[4;1H\033[1;32mcounter %012d\033[0m";
const REPAINT_BYTES: u64 = 6 + 7 + 8 + 12 + 4;

/// What the browser measurement needs; `missing` says what of it is not here.
#[derive(Debug, Clone)]
pub struct BrowserSetup {
    pub chromium: PathBuf,
    pub web_dir: PathBuf,
}

impl BrowserSetup {
    /// Why the measurement cannot run here, if it cannot.
    pub fn missing(&self) -> Option<String> {
        let mut problems = Vec::new();
        if !self.chromium.is_file() {
            problems.push(format!(
                "no Chromium at {} (PTYHUB_TEST_CHROMIUM or Debian's chromium)",
                self.chromium.display()
            ));
        }
        if !self.web_dir.join("index.html").is_file() {
            problems.push(format!(
                "the page is not built in {} (cd web && npm ci && npm run build)",
                self.web_dir.display()
            ));
        }
        let playwright = Path::new(WEB_PROJECT).join("node_modules/playwright-core/package.json");
        if !playwright.is_file() {
            problems.push(format!(
                "no playwright-core in {} (npm ci there)",
                Path::new(WEB_PROJECT).join("node_modules").display()
            ));
        }
        let node = std::process::Command::new("node")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !node.is_ok_and(|status| status.success()) {
            problems.push("no node".to_owned());
        }
        (!problems.is_empty()).then(|| problems.join("; "))
    }
}

/// The page loads of one run.
#[derive(Debug, Clone)]
pub struct Reload {
    pub cols: u64,
    pub rows: u64,
    /// The session's output offset when the loads began (what the program wrote).
    pub offset: u64,
    pub loads: Vec<PageLoad>,
}

/// One page load that showed the screen.
#[derive(Debug, Clone, Copy)]
pub struct PageLoad {
    /// From the WebSocket's `open` event until xterm's rows were the screen's, ms.
    pub open_to_match_ms: f64,
    /// From the `open` event until the last frame that arrived before the match, ms: the
    /// server's part (the rest is the page's: parsing, writing to xterm).
    pub open_to_last_frame_ms: f64,
    /// From `new WebSocket` until its `open` (the upgrade, the gateway's attach), ms.
    pub created_to_open_ms: f64,
    /// From the start of the navigation until the match, ms.
    pub navigation_to_match_ms: f64,
    /// Payload bytes the server sent on the socket until the match (text and binary frames).
    pub bytes: u64,
    /// The snapshot's own bytes, when one came.
    pub snapshot_bytes: Option<u64>,
}

/// The full-screen program: waits for a line, switches to the alternate screen, draws a header
/// once and repaints a counter in place until it has written at least `bytes`, prints `done` on
/// a row of its own, and waits there.
fn program(bytes: u64) -> String {
    let repaints = bytes.div_ceil(REPAINT_BYTES);
    format!(
        "stty -echo; read -r go; \
         printf '\\033[?1049h\\033[H\\033[2J\\033[1;37;44m ptyhub bench: a full-screen program \\033[0m\\r\\n\\033[2ma header drawn once, then a counter repainted in place\\033[0m'; \
         awk -v n={repaints} 'BEGIN {{ for (i = 1; i <= n; i++) printf \"{REPAINT}\", i }}'; \
         printf '\\033[6;1Hdone'; exec sleep 86400"
    )
}

/// Registers the instance, runs the browser script for `loads` measured page loads after the
/// program wrote `bytes`, and removes the instance (and its session) again.
pub async fn reload(
    stack: &Stack,
    setup: &BrowserSetup,
    bytes: u64,
    loads: usize,
) -> Result<Reload> {
    ensure!(
        stack.web_dir.is_some(),
        "the stack's gateway serves no page"
    );
    let local = broker_pb::Target {
        kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
    };
    // The stack's instances are registered over gRPC with a command override per session; the
    // page creates its session from the instance's own command, so this instance carries it.
    let instance = register_program(stack, local, &program(bytes)).await?;
    let result = run_script(stack, setup, &instance, bytes, loads).await;
    let _ = tokio::time::timeout(
        PAGE_PATIENCE,
        stack.session_api.clone().delete_instance(
            ptyhub_proto::session::v1::DeleteInstanceRequest {
                instance: instance.clone(),
            },
        ),
    )
    .await;
    result
}

async fn register_program(
    stack: &Stack,
    target: broker_pb::Target,
    script: &str,
) -> Result<String> {
    let request = ptyhub_proto::session::v1::RegisterInstanceRequest {
        name: "bench-reload".to_owned(),
        target: Some(target),
        command: vec!["/bin/sh".to_owned(), "-c".to_owned(), script.to_owned()],
        env: [("TERM".to_owned(), "xterm-256color".to_owned())]
            .into_iter()
            .collect(),
        cwd: String::new(),
        user: String::new(),
        // One session: the page opens a tab for every live session of the instance.
        max_sessions: 1,
        labels: Default::default(),
        broker_id: crate::stack::BROKER_ID.to_owned(),
        ..Default::default()
    };
    Ok(stack
        .session_api
        .clone()
        .register_instance(request)
        .await
        .context("register the reload instance")?
        .into_inner()
        .id)
}

async fn run_script(
    stack: &Stack,
    setup: &BrowserSetup,
    instance: &str,
    bytes: u64,
    loads: usize,
) -> Result<Reload> {
    let options = serde_json::json!({
        "origin": stack.gateway_url,
        "token": ADMIN_TOKEN,
        "instance": instance,
        "chromium": setup.chromium,
        "writeBytes": bytes,
        "loads": loads,
        "patienceMs": PAGE_PATIENCE.as_millis() as u64,
    });
    let child = tokio::process::Command::new("node")
        .arg(SCRIPT)
        .arg(options.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("start node")?;
    // Writing runs at the emulator's speed (well above 1 MiB/s); every load is bounded too.
    let bound = PAGE_PATIENCE * (loads as u32 + 4) + Duration::from_secs(bytes >> 20);
    let output = tokio::time::timeout(bound, child.wait_with_output())
        .await
        .map_err(|_| anyhow!("the browser script did not finish within {bound:?}"))?
        .context("run the browser script")?;
    if !output.status.success() {
        bail!(
            "the browser script failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let report: Value = serde_json::from_slice(&output.stdout).with_context(|| {
        format!(
            "the browser script printed no JSON: {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })?;
    parse_report(&report)
}

/// The script's report, every load checked: it showed the screen, on the first socket, and the
/// session's screen did not change meanwhile.
fn parse_report(report: &Value) -> Result<Reload> {
    let number = |value: &Value, name: &str| {
        value[name]
            .as_f64()
            .with_context(|| format!("no {name} in {value}"))
    };
    let mut loads = Vec::new();
    let empty = Vec::new();
    for (index, load) in report["loads"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .enumerate()
    {
        if load["matched"] != Value::Bool(true) {
            bail!(
                "page load {} never showed the server's screen within {PAGE_PATIENCE:?} ({} bytes arrived; it showed {} from its {}, the server {}; page errors {})",
                index + 1,
                load["bytes"],
                load["seenRows"],
                load["from"],
                report["lines"],
                load["errors"]
            );
        }
        ensure!(
            load["screenUnchanged"] == Value::Bool(true),
            "the session's screen changed during page load {}",
            index + 1
        );
        ensure!(
            load["sockets"].as_u64() == Some(1),
            "page load {} opened {} sockets",
            index + 1,
            load["sockets"]
        );
        loads.push(PageLoad {
            open_to_match_ms: number(load, "openToMatchMs")?,
            open_to_last_frame_ms: number(load, "openToLastFrameMs")?,
            created_to_open_ms: number(load, "createdToOpenMs")?,
            navigation_to_match_ms: number(load, "navigationToMatchMs")?,
            bytes: number(load, "bytes")? as u64,
            snapshot_bytes: load["snapshotBytes"].as_u64(),
        });
    }
    ensure!(!loads.is_empty(), "the browser script measured no load");
    Ok(Reload {
        cols: report["size"]["cols"].as_u64().context("no size")?,
        rows: report["size"]["rows"].as_u64().context("no size")?,
        offset: report["offset"].as_u64().context("no offset")?,
        loads,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_repaint_is_as_long_as_counted() {
        let repaint = REPAINT
            .replace(r"\033", "\x1b")
            .replace("%012d", "000000000042");
        assert_eq!(repaint.len() as u64, REPAINT_BYTES);
    }

    #[test]
    fn the_program_repaints_enough_times_for_the_bytes() {
        let script = program(10 * REPAINT_BYTES + 1);
        assert!(script.contains("-v n=11 "), "{script}");
        assert!(script.contains("\\033[?1049h"), "{script}");
    }

    #[test]
    fn a_report_of_a_load_that_never_matched_fails() {
        let report = serde_json::json!({
            "size": {"cols": 150, "rows": 40}, "offset": 100,
            "loads": [{"matched": false, "bytes": 1048576, "seenRows": ["x"], "from": "buffer", "errors": []}],
        });
        let error = parse_report(&report).expect_err("an unmatched load");
        assert!(error.to_string().contains("never showed"), "{error}");
        let matched = serde_json::json!({
            "size": {"cols": 150, "rows": 40}, "offset": 100,
            "loads": [{"matched": true, "screenUnchanged": true, "sockets": 1, "openToMatchMs": 12.5,
                       "createdToOpenMs": 3.0, "openToLastFrameMs": 10.0, "navigationToMatchMs": 80.0, "bytes": 2048, "snapshotBytes": 1500}],
        });
        let reload = parse_report(&matched).expect("a matched load");
        assert_eq!(reload.loads[0].bytes, 2048);
        assert_eq!(reload.loads[0].snapshot_bytes, Some(1500));
    }
}
