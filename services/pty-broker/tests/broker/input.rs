//! Input's guarantees over real gRPC and real shells, on both runtimes: receipts (in order,
//! offsets that never decrease, the answer at or after its receipt's offset), bad ids refused
//! with nothing typed, a viewer's input refused by its id, and input sent before an integrated
//! shell's first prompt typed once, after it.

use anyhow::{Context as _, bail, ensure};
use pb::server_frame::Frame;
use ptyhub_proto::broker::v1 as pb;
use tonic::Code;
use uuid::Uuid;

use crate::support::{AttachedClient, Backend, TestBroker};

backend_scenarios! {
    receipts_come_in_order_and_the_answer_follows_their_offset,
    a_bad_input_id_is_refused_and_nothing_is_typed,
    a_viewers_input_is_refused_by_its_id,
    input_before_the_first_prompt_is_typed_once_after_it,
    a_ctrl_c_the_terminal_cannot_take_interrupts_the_foreground_job_and_no_background_one,
}

/// What a shell with the integration prints where its prompt starts.
const PROMPT_MARK: &[u8] = b"\x1b]133;A";

/// Sends `data` asking for a receipt with `input_id`.
async fn send_with_id(client: &AttachedClient, data: &str, input_id: &str) -> anyhow::Result<()> {
    client
        .send(pb::client_frame::Frame::Input(pb::Input {
            data: data.to_owned().into(),
            input_id: Some(input_id.to_owned()),
        }))
        .await
}

/// A session's output as one client read it, and the offset it starts at.
struct Transcript {
    start: u64,
    bytes: Vec<u8>,
}

impl Transcript {
    fn from(client: &AttachedClient) -> Self {
        Self {
            start: client.connected().offset,
            bytes: Vec::new(),
        }
    }

    /// Reads frames until `done` (given the output and the other frames so far) says so,
    /// keeping the output; returns the frames that were not output.
    async fn read_until(
        &mut self,
        client: &mut AttachedClient,
        mut done: impl FnMut(&Self, &[Frame]) -> bool,
    ) -> anyhow::Result<Vec<Frame>> {
        let mut others = Vec::new();
        while !done(self, &others) {
            match client.next_frame().await.with_context(|| {
                format!("output so far: {:?}", String::from_utf8_lossy(&self.bytes))
            })? {
                Frame::Output(output) => self.bytes.extend_from_slice(&output.data),
                other => others.push(other),
            }
        }
        Ok(others)
    }

    /// The session offset of the first `needle` at or after `from`.
    fn offset_of(&self, needle: &[u8], from: u64) -> Option<u64> {
        let skip = from.saturating_sub(self.start) as usize;
        self.bytes
            .get(skip..)?
            .windows(needle.len())
            .position(|window| window == needle)
            .map(|at| self.start + (skip + at) as u64)
    }

    fn count(&self, needle: &[u8]) -> usize {
        self.bytes
            .windows(needle.len())
            .filter(|window| *window == needle)
            .count()
    }

    fn contains(&self, needle: &str) -> bool {
        self.offset_of(needle.as_bytes(), 0).is_some()
    }
}

fn acks(frames: &[Frame]) -> Vec<&pb::InputAck> {
    frames
        .iter()
        .filter_map(|frame| match frame {
            Frame::InputAck(ack) => Some(ack),
            _ => None,
        })
        .collect()
}

/// Twenty commands, each with its receipt: the receipts come in order, for every byte, with
/// offsets that never decrease, and each command's answer (text the command line itself does not
/// hold) comes at or after its receipt's offset.
async fn receipts_come_in_order_and_the_answer_follows_their_offset(
    backend: Backend,
) -> anyhow::Result<()> {
    const COMMANDS: u64 = 20;
    let broker = TestBroker::start(backend).await?;
    let session = broker.spawn(&["sh"], 80, 24).await?;
    let mut client = broker
        .attach(&session.session_id, pb::Role::Controller, Some(0))
        .await?;
    let mut transcript = Transcript::from(&client);
    for number in 0..COMMANDS {
        let line = format!("echo answer-$((1000+{number}))\n");
        send_with_id(&client, &line, &format!("r{number}")).await?;
    }
    let last = format!("answer-{}", 1000 + COMMANDS - 1);
    let frames = transcript
        .read_until(&mut client, |transcript, frames| {
            acks(frames).len() == COMMANDS as usize && transcript.contains(&last)
        })
        .await?;
    let acks = acks(&frames);
    let mut previous = 0;
    for (number, ack) in acks.iter().enumerate() {
        let line = format!("echo answer-$((1000+{number}))\n");
        ensure!(
            ack.input_id == format!("r{number}"),
            "out of order: {acks:?}"
        );
        ensure!(ack.bytes == line.len() as u64, "{ack:?}");
        ensure!(ack.offset >= previous, "offsets went back: {acks:?}");
        previous = ack.offset;
        let answer = format!("answer-{}", 1000 + number);
        let answered_at = transcript
            .offset_of(answer.as_bytes(), 0)
            .with_context(|| format!("{answer} never came"))?;
        ensure!(
            answered_at >= ack.offset,
            "{answer} at {answered_at}, before its receipt's offset {}",
            ack.offset
        );
    }
    broker.kill(&session.session_id).await?;
    broker.stop().await
}

/// An id over 64 characters is refused with INVALID_ARGUMENT naming the problem, and nothing of
/// its input is typed; the stream goes on and a good id is answered.
async fn a_bad_input_id_is_refused_and_nothing_is_typed(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let session = broker.spawn(&["sh"], 80, 24).await?;
    let mut client = broker
        .attach(&session.session_id, pb::Role::Controller, Some(0))
        .await?;
    let mut transcript = Transcript::from(&client);
    send_with_id(&client, "echo refused-$((2+2))\n", &"x".repeat(65)).await?;
    let frames = transcript
        .read_until(&mut client, |_, frames| {
            frames.iter().any(|frame| matches!(frame, Frame::Error(_)))
        })
        .await?;
    let Some(Frame::Error(refusal)) = frames.iter().find(|frame| matches!(frame, Frame::Error(_)))
    else {
        unreachable!()
    };
    ensure!(refusal.code == Code::InvalidArgument as i32, "{refusal:?}");
    ensure!(
        refusal.message.contains("65 characters") && refusal.message.contains("64"),
        "{refusal:?}"
    );
    ensure!(refusal.input_id.is_none(), "a bad id is not echoed");

    // A 64-character id is good: its answer comes, the refused line's never does.
    let longest = "é".repeat(64);
    send_with_id(&client, "echo typed-$((3+3))\n", &longest).await?;
    let frames = transcript
        .read_until(&mut client, |transcript, frames| {
            !acks(frames).is_empty() && transcript.contains("typed-6")
        })
        .await?;
    ensure!(acks(&frames)[0].input_id == longest);
    ensure!(
        !transcript.contains("refused"),
        "the refused input was typed: {:?}",
        String::from_utf8_lossy(&transcript.bytes)
    );
    broker.kill(&session.session_id).await?;
    broker.stop().await
}

async fn a_viewers_input_is_refused_by_its_id(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let session = broker.spawn(&["sh"], 80, 24).await?;
    let mut viewer = broker
        .attach(&session.session_id, pb::Role::Viewer, Some(0))
        .await?;
    send_with_id(&viewer, "echo viewer\n", "v1").await?;
    let mut transcript = Transcript::from(&viewer);
    let frames = transcript
        .read_until(&mut viewer, |_, frames| {
            frames.iter().any(|frame| matches!(frame, Frame::Error(_)))
        })
        .await?;
    let Some(Frame::Error(refusal)) = frames.iter().find(|frame| matches!(frame, Frame::Error(_)))
    else {
        unreachable!()
    };
    ensure!(refusal.code == Code::PermissionDenied as i32, "{refusal:?}");
    ensure!(refusal.input_id.as_deref() == Some("v1"), "{refusal:?}");
    broker.kill(&session.session_id).await?;
    broker.stop().await
}

/// A shell whose startup file sleeps a second gets a command line at once after it was
/// created: the line is held until the shell's first prompt, then typed once, and its receipt
/// says so. Typed at once, the terminal would echo it during the sleep, before the prompt.
async fn input_before_the_first_prompt_is_typed_once_after_it(
    backend: Backend,
) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let startup_file = format!("/tmp/ptyhub-slow-rc-{}", Uuid::new_v4().simple());
    write_file(&broker, &startup_file, "sleep 1").await?;
    let mut request = broker.spawn_request(&["sh"], "");
    request.shell_integration = true;
    request.env.insert("ENV".to_owned(), startup_file.clone());
    let session = broker.spawn_as(request).await?;
    let mut client = broker
        .attach(&session.session_id, pb::Role::Controller, Some(0))
        .await?;
    send_with_id(&client, "echo held-$((6*7))\n", "held").await?;
    let mut transcript = Transcript::from(&client);
    let frames = transcript
        .read_until(&mut client, |transcript, frames| {
            !acks(frames).is_empty() && transcript.contains("held-42")
        })
        .await?;
    let receipt = acks(&frames)[0];
    let prompt_at = transcript
        .offset_of(PROMPT_MARK, 0)
        .context("the shell showed no prompt")?;
    ensure!(
        receipt.offset > prompt_at,
        "written at {} before the first prompt at {prompt_at}",
        receipt.offset
    );
    let typed_at = transcript
        .offset_of(b"echo held-", 0)
        .context("the command line was not echoed")?;
    ensure!(
        typed_at > prompt_at,
        "the line was echoed at {typed_at}, before the first prompt at {prompt_at}: {:?}",
        String::from_utf8_lossy(&transcript.bytes)
    );

    // Once: a later command's answer comes, and the held one ran a single time.
    send_with_id(&client, "echo after-$((1+1))\n", "after").await?;
    transcript
        .read_until(&mut client, |transcript, _| transcript.contains("after-2"))
        .await?;
    ensure!(
        transcript.count(b"held-42") == 1 && transcript.count(b"echo held-") == 1,
        "typed more than once: {:?}",
        String::from_utf8_lossy(&transcript.bytes)
    );
    broker.kill(&session.session_id).await?;
    remove_file(&broker, &startup_file).await?;
    broker.stop().await
}

/// Writes `text` to `path` on the broker's target, with a session of its own.
async fn write_file(broker: &TestBroker, path: &str, text: &str) -> anyhow::Result<()> {
    run_to_exit(broker, &format!("printf '%s\\n' '{text}' > {path}")).await
}

async fn remove_file(broker: &TestBroker, path: &str) -> anyhow::Result<()> {
    run_to_exit(broker, &format!("rm -f {path}")).await
}

async fn run_to_exit(broker: &TestBroker, script: &str) -> anyhow::Result<()> {
    let session = broker.spawn_sh(script).await?;
    let mut client = broker
        .attach(&session.session_id, pb::Role::Viewer, Some(0))
        .await?;
    let (output, exit) = client.read_to_exit().await?;
    if exit.code != 0 {
        bail!(
            "{script} exited with {}: {:?}",
            exit.code,
            String::from_utf8_lossy(&output)
        );
    }
    Ok(())
}

/// More lines than a terminal's input side holds (its line buffer and the queue before it,
/// about 68 KiB on Linux): written to a program that never reads, the write waits for good.
fn paste_the_program_never_reads() -> String {
    paste_of(256 * 1024)
}

/// About `bytes` of 80-byte lines.
fn paste_of(bytes: usize) -> String {
    let line = format!("{}\n", "p".repeat(79));
    line.repeat(bytes / line.len())
}

/// A paste that a program which never reads holds up on `backend`, whatever the timing: in
/// Docker the exec's stream (the broker's socket to the engine, the engine's copy, the pipe to
/// the terminal, the terminal) can take up to about 330 KiB before it refuses more, depending on
/// how fast the engine drains it, and a paste it took whole is not one the terminal refused
/// (docs/CONTRACT.md, "Ctrl-C always passes", on Docker).
fn paste_held_up_on(backend: Backend) -> String {
    match backend {
        Backend::Local => paste_the_program_never_reads(),
        Backend::Docker => paste_of(1024 * 1024),
    }
}

/// Reads until the process exits and checks that SIGINT ended it.
async fn interrupted(client: &mut AttachedClient) -> anyhow::Result<()> {
    let (_, exit) = client.read_to_exit().await?;
    ensure!(
        exit.signal == Some(2) || exit.code == 130,
        "ended otherwise than by an interrupt: {exit:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_from_another_controller_passes_a_paste_the_program_never_reads()
-> anyhow::Result<()> {
    crate::support::init_logging();
    let broker = TestBroker::start(Backend::Local).await?;
    let mut request = broker.spawn_request(&["sleep", "600"], "");
    request.control_mode = pb::ControlMode::Shared as i32;
    let session_id = broker.spawn_as(request).await?.session_id;
    let paster = broker
        .attach(&session_id, pb::Role::Controller, Some(0))
        .await?;
    let mut other = broker
        .attach(&session_id, pb::Role::Controller, Some(0))
        .await?;
    paster.send_input(paste_the_program_never_reads()).await?;
    // The paste's echo shows it reached the terminal; the rest of it waits there.
    other.read_until(b"pppp\r\n").await?;
    other.send_input(&b"\x03"[..]).await?;
    interrupted(&mut other).await?;
    broker.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_right_after_a_paste_on_the_same_stream_passes_it() -> anyhow::Result<()> {
    crate::support::init_logging();
    let broker = TestBroker::start(Backend::Local).await?;
    let session_id = broker.spawn(&["sleep", "600"], 80, 24).await?.session_id;
    let mut controller = broker
        .attach(&session_id, pb::Role::Controller, Some(0))
        .await?;
    controller
        .send_input(paste_the_program_never_reads())
        .await?;
    controller.read_until(b"pppp\r\n").await?;
    controller.send_input(&b"\x03"[..]).await?;
    interrupted(&mut controller).await?;
    broker.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_from_the_input_call_passes_a_paste_the_program_never_reads() -> anyhow::Result<()> {
    crate::support::init_logging();
    let broker = TestBroker::start(Backend::Local).await?;
    let session_id = broker.spawn(&["sleep", "600"], 80, 24).await?.session_id;
    let mut controller = broker
        .attach(&session_id, pb::Role::Controller, Some(0))
        .await?;
    controller
        .send_input(paste_the_program_never_reads())
        .await?;
    controller.read_until(b"pppp\r\n").await?;
    // A call beside the controller's stream: the Ctrl-C answers without waiting for the paste.
    let sent = broker
        .send_keys(
            &session_id,
            vec![pb::input_item::Item::Text("\u{3}".to_owned())],
            true,
        )
        .await?;
    ensure!(sent.bytes_written == 1, "{sent:?}");
    interrupted(&mut controller).await?;
    broker.stop().await
}

/// The number printed after `label=` in `output`.
fn printed_pid(output: &[u8], label: &str) -> anyhow::Result<u32> {
    let output = String::from_utf8_lossy(output);
    let needle = format!("{label}=");
    let start = output
        .find(&needle)
        .with_context(|| format!("no {needle} in {output:?}"))?
        + needle.len();
    let digits: String = output[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .with_context(|| format!("no pid after {needle} in {output:?}"))
}

/// A Ctrl-C the terminal cannot take (its input side full) is sent as a signal by the broker,
/// and like the terminal's own it reaches the foreground job alone: a background job of the
/// same shell goes on. The shell itself tells which of its jobs are alive, in the container's
/// pid namespace as well as on the host.
async fn a_ctrl_c_the_terminal_cannot_take_interrupts_the_foreground_job_and_no_background_one(
    backend: Backend,
) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let session_id = broker.spawn(&["sh", "-i"], 80, 24).await?.session_id;
    let mut controller = broker
        .attach(&session_id, pb::Role::Controller, Some(0))
        .await?;
    // The quotes keep the echo of each typed line from matching what the commands print.
    controller
        .send_input("sleep 600 & echo \"b\"\"g=$! b\"\"g-end\"\n")
        .await?;
    let background = printed_pid(&controller.read_until(b"bg-end").await?, "bg")?;
    controller
        .send_input("sh -c 'echo \"f\"\"g-ready\"; exec sleep 601'\n")
        .await?;
    controller.read_until(b"fg-ready").await?;
    controller.send_input(paste_held_up_on(backend)).await?;
    controller.read_until(b"pppp\r\n").await?;
    controller.send_input(&b"\x03"[..]).await?;

    // The shell reads this line only once its foreground job has ended (and after what the
    // terminal still held), by when every signal of the interrupt has long been delivered and
    // the shell has reaped a job that died of one. The newline ends the paste's last line, which
    // the interrupt may have cut.
    controller
        .send_input(format!(
            "\nkill -0 {background} && echo \"st\"\"ate=alive\" || echo \"st\"\"ate=gone\"; \
             echo \"do\"\"ne-42\"\n"
        ))
        .await?;
    let answer = String::from_utf8_lossy(&controller.read_until(b"done-42").await?).into_owned();
    ensure!(
        answer.contains("state=alive"),
        "the background job {background} was interrupted too: {answer:?}"
    );
    broker.stop().await
}
