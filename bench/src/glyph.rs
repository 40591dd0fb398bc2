//! (13) Key press to glyph in Chromium: the same small xterm.js page (`bench/browser/keys.mjs`)
//! typing on a session through the gateway (broker in process, as `ptyhub up` runs it) and on a
//! plain WebSocket echo server in this process, the page's own floor; and ptyhub's own web page
//! typing on a session of its own, what a person feels. The pages are typed on in turn, in
//! rounds, so that the machine's load falls on every target alike.

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
use crate::term::{close_session, create_session, create_session_on};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/browser/keys.mjs");

/// Liveness bound of one wait in the browser script, not a performance figure.
const PAGE_PATIENCE: Duration = Duration::from_secs(30);

/// The rounds the keys are shared out in, each round typing on every target in turn: enough
/// that a burst of load from elsewhere on the machine lands on every target, few enough that a
/// round is long against the switch between pages.
const ROUNDS: usize = 10;

/// The script's names of the targets.
pub const FLOOR: &str = "echo server";
pub const PTYHUB: &str = "ptyhub";
pub const WEB_PAGE: &str = "ptyhub web page";

/// One key's time from its `keydown` to the frame that draws its echo, and its phases, in ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeySample {
    /// `keydown` to the animation frame after xterm parsed the echo: the figure.
    pub glyph: f64,
    /// `keydown` to the socket's `send`: the page and xterm's keyboard handling.
    pub send: f64,
    /// `send` to the echo's first binary frame: the network and the server.
    pub round_trip: f64,
    /// That frame to xterm having parsed it: the page's receive path and xterm's parser.
    pub page: f64,
    /// Parsed to the next animation frame: the wait for the frame that draws the glyph.
    pub frame: f64,
    /// Frames the page sent for the key.
    pub sent: u32,
    /// Binary and text frames that came until the echo was parsed.
    pub binary: u32,
    pub text: u32,
}

impl KeySample {
    /// A sample as the script prints it: `{glyph, send, roundTrip, page, frame, sent, binary,
    /// text}`, times in ms, counts of frames.
    fn from_json(sample: &Value) -> Result<Self> {
        let ms = |field: &str| {
            sample[field]
                .as_f64()
                .filter(|ms| ms.is_finite() && *ms >= 0.0)
                .with_context(|| format!("{field} is not a duration in ms: {sample}"))
        };
        let count = |field: &str| {
            sample[field]
                .as_u64()
                .and_then(|count| u32::try_from(count).ok())
                .with_context(|| format!("{field} is not a count of frames: {sample}"))
        };
        Ok(Self {
            glyph: ms("glyph")?,
            send: ms("send")?,
            round_trip: ms("roundTrip")?,
            page: ms("page")?,
            frame: ms("frame")?,
            sent: count("sent")?,
            binary: count("binary")?,
            text: count("text")?,
        })
    }
}

/// Key press to glyph on each target, one sample per key.
#[derive(Debug)]
pub struct Glyphs {
    pub floor: Vec<KeySample>,
    pub ptyhub: Vec<KeySample>,
    pub web_page: Vec<KeySample>,
}

pub async fn key_to_glyph(stack: &Stack, setup: &BrowserSetup, keys: usize) -> Result<Glyphs> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let echo_address = listener.local_addr()?;
    let echo_server = tokio::spawn(serve_echo(listener));
    let command = || {
        vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            ECHO_SCRIPT.to_owned(),
        ]
    };
    let created = create_session(stack, Backend::Local, Screens::On, command()).await;
    let result = match &created {
        Ok((instance, attach)) => {
            // The web page's own session: on the bench page's, its attach would take control.
            match create_session_on(stack, instance, command()).await {
                Ok(page_session) => {
                    let targets = Targets {
                        echo_address,
                        instance,
                        ptyhub_session: &attach.session_id,
                        page_session: &page_session.session_id,
                    };
                    let measured = run_script(stack, setup, &targets, keys).await;
                    close_session(stack, instance, &page_session.session_id).await;
                    measured
                }
                Err(error) => Err(anyhow!("create the web page's session: {error:#}")),
            }
        }
        Err(error) => Err(anyhow!("create the session: {error:#}")),
    };
    echo_server.abort();
    if let Ok((instance, attach)) = &created {
        close_session(stack, instance, &attach.session_id).await;
    }
    result
}

/// Where the script finds each target.
struct Targets<'a> {
    echo_address: SocketAddr,
    instance: &'a str,
    ptyhub_session: &'a str,
    page_session: &'a str,
}

impl Targets<'_> {
    fn to_json(&self, stack: &Stack) -> Value {
        let echo = self.echo_address;
        let socket = format!(
            "{}/ws/tool-instances/{}/terminal/{}?token={ADMIN_TOKEN}",
            stack.websocket_url(),
            self.instance,
            self.ptyhub_session
        );
        let page = format!("/instances/{}?token={ADMIN_TOKEN}", self.instance);
        serde_json::json!([
            {"name": FLOOR, "origin": format!("http://{echo}"), "socket": format!("ws://{echo}/")},
            {"name": PTYHUB, "origin": stack.gateway_url, "socket": socket},
            {"name": WEB_PAGE, "origin": stack.gateway_url, "page": page, "instance": self.instance, "session": self.page_session},
        ])
    }
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
    targets: &Targets<'_>,
    keys: usize,
) -> Result<Glyphs> {
    let options = serde_json::json!({
        "chromium": setup.chromium,
        "keys": keys,
        "rounds": ROUNDS,
        "patienceMs": PAGE_PATIENCE.as_millis() as u64,
        "targets": targets.to_json(stack),
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
    // Each key's wait is bounded by the page's patience; this bounds the whole script: three
    // pages opened, 100 ms a key on each.
    let bound = PAGE_PATIENCE * 6 + Duration::from_millis(keys as u64 * 3 * 100);
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
        web_page: samples(&report, WEB_PAGE, keys)?,
    })
}

/// One target's samples, one per key.
fn samples(report: &Value, name: &str, keys: usize) -> Result<Vec<KeySample>> {
    let samples = report[name]
        .as_array()
        .with_context(|| format!("no samples for {name}"))?
        .iter()
        .map(|sample| KeySample::from_json(sample).with_context(|| format!("a sample of {name}")))
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

    fn sample(glyph: f64) -> Value {
        serde_json::json!({
            "glyph": glyph, "send": 0.4, "roundTrip": 0.6, "page": 1.0, "frame": glyph - 2.0,
            "sent": 1, "binary": 1, "text": 0,
        })
    }

    #[test]
    fn a_report_needs_one_sample_per_key_on_each_target() {
        let report = serde_json::json!({FLOOR: [sample(16.5), sample(17.0)], PTYHUB: [sample(17.1), sample(33.0)]});
        let ptyhub = samples(&report, PTYHUB, 2).expect("two");
        assert_eq!(
            ptyhub.iter().map(|key| key.glyph).collect::<Vec<_>>(),
            [17.1, 33.0]
        );
        assert_eq!(ptyhub[1].round_trip, 0.6);
        assert!(samples(&report, PTYHUB, 3).is_err());
        assert!(samples(&serde_json::json!({PTYHUB: [sample(-1.0)]}), PTYHUB, 1).is_err());
        assert!(samples(&serde_json::json!({PTYHUB: [16.5]}), PTYHUB, 1).is_err());
        assert!(samples(&serde_json::json!({}), FLOOR, 1).is_err());
    }
}
