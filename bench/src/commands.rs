//! (10) Commands: `run` of `true` end to end through session-api (a local bash, a container's
//! sh), and through the gateway over REST and over MCP (`run_command` at `/mcp`) side by side,
//! and what shell integration costs: a keystroke's echo at a bash prompt and a flood's
//! throughput, with integration on and off (two instances that differ in that setting only),
//! side by side in one run; and what a session's 1,000 kept command records cost.

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use crate::stack::{ADMIN_TOKEN, BROKER_ID, Stack};
use crate::stats::Latency;
use crate::term::{Term, close_session, connect_gateway, create_session_on};

/// How long a shell may take to show its first prompt.
const PROMPT_PATIENCE: Duration = Duration::from_secs(30);

/// What one run measured.
#[derive(Debug)]
pub struct Measured {
    pub run_local: Option<Latency>,
    pub run_docker: Option<Latency>,
    /// The same local run through the gateway: `POST .../run`, and MCP's `run_command`.
    pub run_rest: Option<Latency>,
    pub run_mcp: Option<Latency>,
    pub echo_on: Latency,
    pub echo_off: Latency,
    /// MiB/s of `yes` output read at a bash prompt's child, on and off.
    pub flood_on: f64,
    pub flood_off: f64,
    /// Echo p50 with integration over without, round by round.
    pub echo_ratio: Ratios,
    /// Flood throughput with integration over without, round by round.
    pub flood_ratio: Ratios,
    /// The heap a session's log of its last 1,000 commands holds.
    pub command_records_bytes: usize,
}

/// The heap of a broker's command log (`CommandLog`, what a session keeps of its commands) once
/// 1,000 commands went through it, each a typical line run in a project's directory: the
/// records as the broker keeps them, with no session around them to blur the count.
pub fn command_records_bytes() -> usize {
    use pty_broker::activity::{CommandLog, DEFAULT_COMMANDS_KEPT};
    let lines = [
        "cargo test -p pty-broker --lib",
        "git status",
        "make test",
        "ls -la",
        "npm run build -- --watch=false",
    ];
    let started = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let mut log = CommandLog::new(DEFAULT_COMMANDS_KEPT);
    // Twice around, so that the records kept are the last ones of a longer history.
    for n in 0..2 * DEFAULT_COMMANDS_KEPT as u64 {
        let at = started + Duration::from_secs(n);
        log.start(
            lines[n as usize % lines.len()],
            Some("/home/developer/src/ptyhub"),
            at,
            n * 1000,
        );
        log.finish(Some(0), at + Duration::from_millis(300), n * 1000 + 900);
    }
    log.heap_bytes()
}

/// Registers the instances this section needs: a local bash with integration on and off, and
/// a container's sh when Docker answers.
async fn register(
    stack: &Stack,
    name: &str,
    target: broker_pb::Target,
    command: &str,
    integration: bool,
) -> Result<String> {
    let env: HashMap<String, String> = [("PS1", "$ "), ("TERM", "xterm-256color")]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect();
    let request = session_pb::RegisterInstanceRequest {
        name: name.to_owned(),
        target: Some(target),
        command: vec![command.to_owned()],
        env,
        max_sessions: 5,
        broker_id: BROKER_ID.to_owned(),
        shell_integration: Some(integration),
        ..Default::default()
    };
    let instance = stack
        .session_api
        .clone()
        .register_instance(request)
        .await
        .with_context(|| format!("register instance {name}"))?;
    Ok(instance.into_inner().id)
}

fn local() -> broker_pb::Target {
    broker_pb::Target {
        kind: Some(broker_pb::target::Kind::Local(broker_pb::LocalTarget {})),
    }
}

/// Waits until the session's shell shows its prompt (its terminal state says so).
async fn at_prompt(stack: &Stack, instance: &str, session_id: &str) -> Result<()> {
    let deadline = Instant::now() + PROMPT_PATIENCE;
    loop {
        let session = stack
            .session_api
            .clone()
            .get_session(session_pb::GetSessionRequest {
                instance: instance.to_owned(),
                session_id: session_id.to_owned(),
            })
            .await?
            .into_inner();
        let state = session.terminal.map(|terminal| terminal.state);
        if state == Some(broker_pb::TerminalState::AtPrompt as i32) {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "no prompt: {state:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `runs` runs of `true` in a fresh session of `instance` at its prompt (after a few to warm
/// up), each timed from the call to its answer; `run_once` makes one call in the session it is
/// given and checks the exit code.
async fn time_runs<F, Fut>(
    stack: &Stack,
    instance: &str,
    runs: usize,
    mut run_once: F,
) -> Result<Vec<Duration>>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    const WARM_UP: usize = 5;
    let attach = create_session_on(stack, instance, Vec::new()).await?;
    let session_id = attach.session_id;
    let result = async {
        at_prompt(stack, instance, &session_id).await?;
        let mut samples = Vec::with_capacity(runs);
        for index in 0..runs + WARM_UP {
            let started = Instant::now();
            run_once(session_id.clone()).await?;
            if index >= WARM_UP {
                samples.push(started.elapsed());
            }
        }
        Ok(samples)
    }
    .await;
    close_session(stack, instance, &session_id).await;
    result
}

/// `run` of `true` through session-api.
async fn run_true(stack: &Stack, instance: &str, runs: usize) -> Result<Vec<Duration>> {
    time_runs(stack, instance, runs, |session_id| async move {
        let answer = stack
            .session_api
            .clone()
            .run(session_pb::RunRequest {
                instance: instance.to_owned(),
                session_id,
                command: "true".to_owned(),
                timeout_ms: 10_000,
                force: false,
                format: 0,
            })
            .await?
            .into_inner();
        let code = answer.command.and_then(|command| command.exit_code);
        ensure!(code == Some(0), "`true` exited with {code:?}");
        Ok(())
    })
    .await
}

/// `run` of `true` through the gateway's REST route.
async fn run_true_over_rest(stack: &Stack, instance: &str, runs: usize) -> Result<Vec<Duration>> {
    time_runs(stack, instance, runs, |session_id| async move {
        let url = format!(
            "{}/api/v1/instances/{instance}/terminal/sessions/{session_id}/run",
            stack.gateway_url
        );
        let answer: Value = stack
            .http
            .post(url)
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({"command": "true", "timeout_ms": 10_000}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        ensure!(answer["exit_code"] == 0, "`true` answered {answer}");
        Ok(())
    })
    .await
}

/// `run_command` of `true` through the gateway's MCP endpoint, in one MCP session.
async fn run_true_over_mcp(stack: &Stack, instance: &str, runs: usize) -> Result<Vec<Duration>> {
    let transport = StreamableHttpClientTransport::with_client(
        stack.http.clone(),
        StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", stack.gateway_url))
            .auth_header(ADMIN_TOKEN),
    );
    let client = ().serve(transport).await.context("an MCP session")?;
    let peer = client.peer().clone();
    let samples = time_runs(stack, instance, runs, |session_id| {
        let peer = peer.clone();
        async move {
            let arguments = json!({"instance": instance, "session": session_id, "command": "true"});
            let Value::Object(arguments) = arguments else {
                bail!("arguments are an object");
            };
            let answer = peer
                .call_tool(CallToolRequestParams::new("run_command").with_arguments(arguments))
                .await?;
            let code = answer
                .structured_content
                .as_ref()
                .map(|answer| answer["exit_code"].clone());
            ensure!(code == Some(json!(0)), "`true` answered {answer:?}");
            Ok(())
        }
    })
    .await;
    let _ = client.cancel().await;
    samples
}

/// A terminal on a fresh session of `instance` through the gateway, at its prompt (whatever
/// the user's startup files made of it), with the prompt read.
async fn prompt_terminal(stack: &Stack, instance: &str) -> Result<(Term, String)> {
    let attach = create_session_on(stack, instance, Vec::new()).await?;
    let mut term = connect_gateway(stack, instance, &attach.session_id, "").await?;
    let deadline = Instant::now() + PROMPT_PATIENCE;
    loop {
        // A bash whose integration is off tells no state: its first prompt is its first output.
        let shown = tokio::time::timeout(Duration::from_millis(200), term.recv()).await;
        if let Ok(chunk) = shown {
            chunk?.context("the terminal ended")?;
            wait_quiet(&mut term).await?;
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "no prompt within {PROMPT_PATIENCE:?}"
        );
    }
    Ok((term, attach.session_id))
}

/// `keys` keystrokes typed at the prompt, each timed until its echo arrives.
async fn echo_at_prompt(stack: &Stack, instance: &str, keys: usize) -> Result<Vec<Duration>> {
    const WARM_UP: usize = 20;
    let (mut term, session_id) = prompt_terminal(stack, instance).await?;
    let result = async {
        let mut samples = Vec::with_capacity(keys);
        for index in 0..keys + WARM_UP {
            // A line of at most 60 characters, then erased: the line editor never wraps.
            if index % 60 == 59 {
                term.send(b"\x15").await?;
                wait_quiet(&mut term).await?;
                continue;
            }
            let key = b'a' + (index % 26) as u8;
            let sent = Instant::now();
            term.send(&[key]).await?;
            loop {
                let chunk = term.recv().await?.context("the terminal ended")?;
                if chunk.contains(&key) {
                    break;
                }
            }
            if index >= WARM_UP {
                samples.push(sent.elapsed());
            }
        }
        Ok(samples)
    }
    .await;
    term.close(stack).await;
    close_session(stack, instance, &session_id).await;
    result
}

/// Reads until nothing came for 50 ms.
async fn wait_quiet(term: &mut Term) -> Result<()> {
    while let Ok(chunk) = tokio::time::timeout(Duration::from_millis(50), term.recv()).await {
        chunk?.context("the terminal ended")?;
    }
    Ok(())
}

/// `head -c <bytes> /dev/zero | tr` at the prompt: the bytes of its output read per second.
async fn flood_at_prompt(stack: &Stack, instance: &str, bytes: u64) -> Result<f64> {
    let (mut term, session_id) = prompt_terminal(stack, instance).await?;
    let result = async {
        let command = format!("head -c {bytes} /dev/zero | tr '\\0' x; echo; echo FL''OOD-END\r");
        let started = Instant::now();
        term.send(command.as_bytes()).await?;
        let mut read = 0u64;
        let mut tail: Vec<u8> = Vec::new();
        loop {
            let chunk = term.recv().await?.context("the terminal ended")?;
            read += chunk.len() as u64;
            tail.extend_from_slice(&chunk);
            if tail.windows(9).any(|window| window == b"FLOOD-END") {
                break;
            }
            let keep = tail.len().saturating_sub(16);
            tail.drain(..keep);
        }
        if read < bytes {
            bail!("read {read} bytes of a {bytes}-byte flood");
        }
        Ok(bytes as f64 / (1 << 20) as f64 / started.elapsed().as_secs_f64())
    }
    .await;
    term.close(stack).await;
    close_session(stack, instance, &session_id).await;
    result
}

/// Measures the section: `runs` runs of `true` per backend, `keys` keystrokes and a flood of
/// `flood_bytes` per setting.
pub async fn measure(
    stack: &Stack,
    runs: usize,
    keys: usize,
    flood_bytes: u64,
    rounds: usize,
) -> Result<Measured> {
    if which("bash").is_none() {
        bail!("bash is not installed on this machine");
    }
    let on = register(stack, "bench-commands-on", local(), "bash", true).await?;
    let off = register(stack, "bench-commands-off", local(), "bash", false).await?;
    let docker = match &stack.docker {
        Some(target) => Some(
            register(
                stack,
                "bench-commands-docker",
                broker_pb::Target {
                    kind: Some(broker_pb::target::Kind::Docker(broker_pb::DockerTarget {
                        container: target.container_id.clone(),
                    })),
                },
                "/bin/sh",
                true,
            )
            .await?,
        ),
        None => None,
    };
    let run_local = Latency::of(&run_true(stack, &on, runs).await?);
    let run_rest = Latency::of(&run_true_over_rest(stack, &on, runs).await?);
    let run_mcp = Latency::of(&run_true_over_mcp(stack, &on, runs).await?);
    let run_docker = match &docker {
        Some(instance) => Latency::of(&run_true(stack, instance, runs).await?),
        None => None,
    };
    // Alternated (on-off, off-on, ...), so that neither setting always runs on a warmer
    // machine; each round gives its own on/off ratio, and the ratios' median is the answer:
    // the machine's drift between rounds is larger than the difference being measured.
    let mut echo_on = Vec::new();
    let mut echo_off = Vec::new();
    let mut flood_on = Vec::new();
    let mut flood_off = Vec::new();
    let mut echo_ratios = Vec::new();
    let mut flood_ratios = Vec::new();
    for round in 0..rounds.max(2) {
        let order: [(&str, bool); 2] = if round % 2 == 0 {
            [(&on, true), (&off, false)]
        } else {
            [(&off, false), (&on, true)]
        };
        let mut echo_p50 = [0.0; 2];
        let mut flood = [0.0; 2];
        for (instance, integrated) in order {
            let echoes = echo_at_prompt(stack, instance, keys).await?;
            let throughput = flood_at_prompt(stack, instance, flood_bytes).await?;
            let side = usize::from(!integrated);
            echo_p50[side] = Latency::of(&echoes)
                .context("no echo in a round")?
                .p50
                .as_secs_f64();
            flood[side] = throughput;
            if integrated {
                echo_on.extend(echoes);
                flood_on.push(throughput);
            } else {
                echo_off.extend(echoes);
                flood_off.push(throughput);
            }
        }
        echo_ratios.push(echo_p50[0] / echo_p50[1]);
        flood_ratios.push(flood[0] / flood[1]);
    }
    Ok(Measured {
        run_local,
        run_docker,
        run_rest,
        run_mcp,
        echo_on: Latency::of(&echo_on).context("no echo with integration")?,
        echo_off: Latency::of(&echo_off).context("no echo without integration")?,
        flood_on: median(flood_on),
        flood_off: median(flood_off),
        echo_ratio: Ratios::of(echo_ratios),
        flood_ratio: Ratios::of(flood_ratios),
        command_records_bytes: command_records_bytes(),
    })
}

/// The middle value of `values` (the upper one of two middles).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// On/off ratios, one per round: their median and their range.
#[derive(Debug, Clone)]
pub struct Ratios {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub rounds: usize,
}

impl Ratios {
    fn of(values: Vec<f64>) -> Self {
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let rounds = values.len();
        Self {
            median: median(values),
            min,
            max,
            rounds,
        }
    }
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|directory| directory.join(program))
            .find(|path| path.is_file())
    })
}
