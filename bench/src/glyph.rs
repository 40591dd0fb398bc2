//! (13) Key press to glyph in Chromium: the same small xterm.js page (`bench/browser/keys.mjs`)
//! typing on a session through the gateway (broker in process, as `ptyhub up` runs it) and on a
//! plain WebSocket echo server in this process, the page's own floor.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use futures::{SinkExt as _, StreamExt as _};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

use crate::reload::BrowserSetup;
use crate::scenarios::ECHO_SCRIPT;
use crate::stack::{ADMIN_TOKEN, Backend, Screens, Stack};
use crate::term::{close_session, create_session};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/browser/keys.mjs");

/// Liveness bound of one wait in the browser script, not a performance figure.
const PAGE_PATIENCE: Duration = Duration::from_secs(30);

/// The page's names of the two targets.
pub const FLOOR: &str = "echo server";
pub const PTYHUB: &str = "ptyhub";

/// Key press to glyph on each target, ms, one sample per key.
#[derive(Debug)]
pub struct Glyphs {
    pub floor: Vec<f64>,
    pub ptyhub: Vec<f64>,
}

pub async fn key_to_glyph(stack: &Stack, setup: &BrowserSetup, keys: usize) -> Result<Glyphs> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let echo_address = listener.local_addr()?;
    let echo_server = tokio::spawn(serve_echo(listener));
    let command = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        ECHO_SCRIPT.to_owned(),
    ];
    let created = create_session(stack, Backend::Local, Screens::On, command).await;
    let result = match &created {
        Ok((instance, attach)) => {
            let socket = format!(
                "{}/ws/tool-instances/{instance}/terminal/{}?token={ADMIN_TOKEN}",
                stack.websocket_url(),
                attach.session_id
            );
            run_script(stack, setup, echo_address, &socket, keys).await
        }
        Err(error) => Err(anyhow!("create the session: {error:#}")),
    };
    echo_server.abort();
    if let Ok((instance, attach)) = &created {
        close_session(stack, instance, &attach.session_id).await;
    }
    result
}

/// A WebSocket echo server: on each connection, `R` (the echo program's ready mark), then every
/// binary frame back as it came.
async fn serve_echo(listener: TcpListener) {
    while let Ok((stream, _)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else {
                return;
            };
            if socket.send(Message::binary(&b"R"[..])).await.is_err() {
                return;
            }
            while let Some(Ok(message)) = socket.next().await {
                if message.is_binary() && socket.send(message).await.is_err() {
                    return;
                }
            }
        });
    }
}

async fn run_script(
    stack: &Stack,
    setup: &BrowserSetup,
    echo_address: SocketAddr,
    ptyhub_socket: &str,
    keys: usize,
) -> Result<Glyphs> {
    let options = serde_json::json!({
        "chromium": setup.chromium,
        "keys": keys,
        "patienceMs": PAGE_PATIENCE.as_millis() as u64,
        "targets": [
            {"name": FLOOR, "origin": format!("http://{echo_address}"), "socket": format!("ws://{echo_address}/")},
            {"name": PTYHUB, "origin": stack.gateway_url, "socket": ptyhub_socket},
        ],
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
    // Each key's wait is bounded by the page's patience; this bounds the whole script.
    let bound = PAGE_PATIENCE * 4 + Duration::from_millis(keys as u64 * 2 * 100);
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
    Ok(Glyphs {
        floor: samples(&report, FLOOR, keys)?,
        ptyhub: samples(&report, PTYHUB, keys)?,
    })
}

/// One target's samples in ms, one per key.
fn samples(report: &Value, name: &str, keys: usize) -> Result<Vec<f64>> {
    let samples = report[name]
        .as_array()
        .with_context(|| format!("no samples for {name}"))?
        .iter()
        .map(|sample| {
            sample
                .as_f64()
                .filter(|ms| ms.is_finite() && *ms >= 0.0)
                .with_context(|| format!("a sample of {name} is not a duration in ms"))
        })
        .collect::<Result<Vec<_>>>()?;
    ensure!(
        samples.len() == keys,
        "{name}: {} glyphs timed of {keys} keys",
        samples.len()
    );
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_echo_server_says_ready_then_echoes_binary_frames() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let server = tokio::spawn(serve_echo(listener));
        let (mut socket, _) = tokio_tungstenite::connect_async(format!("ws://{address}/"))
            .await
            .expect("connect");
        let ready = socket.next().await.expect("a frame").expect("no error");
        assert_eq!(ready.into_data().as_ref(), b"R");
        socket.send(Message::binary(&b"a"[..])).await.expect("send");
        let echoed = socket.next().await.expect("a frame").expect("no error");
        assert_eq!(echoed.into_data().as_ref(), b"a");
        server.abort();
    }

    #[test]
    fn a_report_needs_one_sample_per_key_on_each_target() {
        let report = serde_json::json!({FLOOR: [16.5, 17.0], PTYHUB: [17.1, 33.0]});
        assert_eq!(samples(&report, PTYHUB, 2).expect("two"), [17.1, 33.0]);
        assert!(samples(&report, PTYHUB, 3).is_err());
        assert!(samples(&serde_json::json!({PTYHUB: [-1.0]}), PTYHUB, 1).is_err());
        assert!(samples(&serde_json::json!({}), FLOOR, 1).is_err());
    }
}
