//! Shell integration and what a terminal is doing, against real shells: bash, busybox ash, dash,
//! zsh and fish on local PTYs, busybox sh in a container. Each runs the same command lines typed
//! as a person would; their commands come back with exit codes, command lines, working
//! directories and output, and the terminal's state follows prompts, commands, a program's
//! notification and its quiet.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use ptyhub_proto::broker::v1 as pb;

use crate::support::{Backend, PATIENCE, POLL_INTERVAL, TestBroker, authorized};

/// A shell started with its integration, and what the test types into it.
struct ShellRun<'a> {
    argv: Vec<String>,
    /// A command that exits with 7 in this shell's syntax.
    exit_seven: &'a str,
}

/// The shell at `path`, or `None` (a skip with a reason, a failure under `CI=true`) when this
/// machine has none.
fn shell_at(path: &str) -> Option<String> {
    if Path::new(path).exists() {
        return Some(path.to_owned());
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{path} is required under CI=true (cargo xtask deps installs it)");
    }
    eprintln!("skipped: {path} is not installed (cargo xtask deps installs it)");
    None
}

async fn spawn_shell(broker: &TestBroker, argv: &[String]) -> anyhow::Result<String> {
    let mut request = broker.spawn_request(&[], "");
    request.command = argv.to_vec();
    request.shell_integration = true;
    let session = broker.spawn_as(request).await?;
    Ok(session.session_id)
}

async fn list_commands(
    broker: &TestBroker,
    session_id: &str,
    after: u64,
) -> Result<pb::ListCommandsResponse, tonic::Status> {
    let request = pb::ListCommandsRequest {
        session_id: session_id.to_owned(),
        after,
        limit: 0,
    };
    Ok(broker
        .client
        .clone()
        .list_commands(authorized(request))
        .await?
        .into_inner())
}

fn state_of(terminal: Option<&pb::TerminalActivity>) -> pb::TerminalState {
    terminal
        .and_then(|terminal| pb::TerminalState::try_from(terminal.state).ok())
        .unwrap_or(pb::TerminalState::Unspecified)
}

/// Waits until the session's terminal is in `state` (read from `Get`, as session-api reads it).
async fn wait_for_state(
    broker: &TestBroker,
    session_id: &str,
    state: pb::TerminalState,
) -> anyhow::Result<pb::TerminalActivity> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let info = broker.get(session_id).await?;
        if state_of(info.terminal.as_ref()) == state {
            return Ok(info.terminal.unwrap_or_default());
        }
        if Instant::now() > deadline {
            bail!("the terminal is {:?}, not {state:?}", info.terminal);
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Types `line` and Enter, then waits for the shell's next prompt after the command ended.
async fn run_line(broker: &TestBroker, session_id: &str, line: &str) -> anyhow::Result<()> {
    let before = list_commands(broker, session_id, 0).await?;
    let finished_before = before
        .commands
        .iter()
        .filter(|command| command.ended_at.is_some())
        .count();
    broker
        .send_keys(
            session_id,
            vec![pb::input_item::Item::Text(format!("{line}\r"))],
            false,
        )
        .await?;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let page = list_commands(broker, session_id, 0).await?;
        let finished = page
            .commands
            .iter()
            .filter(|command| command.ended_at.is_some())
            .count();
        if finished > finished_before
            && state_of(page.terminal.as_ref()) == pb::TerminalState::AtPrompt
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{line:?} did not finish: {page:?}");
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// The scenario every shell goes through: `true`, `false`, exit 7, `cd /tmp`, `pwd`.
async fn commands_of(backend: Backend, shell: ShellRun<'_>) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let session_id = spawn_shell(&broker, &shell.argv).await?;
    let terminal = wait_for_state(&broker, &session_id, pb::TerminalState::AtPrompt).await?;
    assert!(terminal.shell_integration, "{terminal:?}");
    let home_cwd = terminal.cwd.clone();
    assert!(
        home_cwd.starts_with('/'),
        "the first prompt reports a cwd: {terminal:?}"
    );

    for line in ["true", "false", shell.exit_seven, "cd /tmp", "pwd"] {
        run_line(&broker, &session_id, line).await?;
    }
    let page = list_commands(&broker, &session_id, 0).await?;
    let commands: Vec<(&str, Option<i32>, &str)> = page
        .commands
        .iter()
        .map(|command| {
            (
                command.command.as_str(),
                command.exit_code,
                command.cwd.as_str(),
            )
        })
        .collect();
    assert_eq!(
        commands,
        vec![
            ("true", Some(0), home_cwd.as_str()),
            ("false", Some(1), home_cwd.as_str()),
            (shell.exit_seven, Some(7), home_cwd.as_str()),
            ("cd /tmp", Some(0), home_cwd.as_str()),
            ("pwd", Some(0), "/tmp"),
        ],
        "{:?}",
        page.commands
    );
    let ids: Vec<u64> = page.commands.iter().map(|command| command.id).collect();
    assert_eq!(ids, vec![1, 2, 3, 4, 5]);
    assert_eq!(page.first_kept_id, 1);
    assert_eq!(page.last_id, 5);
    for command in &page.commands {
        let end = command.output_end.context("ended")?;
        assert!(command.output_start <= end, "{command:?}");
        let seconds =
            |at: &Option<prost_types::Timestamp>| at.as_ref().map(|at| (at.seconds, at.nanos));
        assert!(
            seconds(&command.started_at) <= seconds(&command.ended_at),
            "{command:?}"
        );
    }

    // The output of `pwd`, from the ring: what it printed, with no prompt before it. (zsh
    // draws its partial-line marker, PROMPT_SP, before any hook runs, so it ends the range.)
    let output = broker
        .client
        .clone()
        .get_command_output(authorized(pb::GetCommandOutputRequest {
            session_id: session_id.clone(),
            command_id: 5,
            format: pb::ScreenFormat::Text as i32,
        }))
        .await?
        .into_inner();
    let text = String::from_utf8_lossy(&output.data);
    assert!(text.starts_with("/tmp\n"), "{:?}", output.data);
    if !shell.argv[0].ends_with("zsh") {
        assert_eq!(text, "/tmp\n", "{:?}", output.data);
    }
    let raw = broker
        .client
        .clone()
        .get_command_output(authorized(pb::GetCommandOutputRequest {
            session_id: session_id.clone(),
            command_id: 5,
            format: pb::ScreenFormat::Ansi as i32,
        }))
        .await?
        .into_inner();
    assert!(
        raw.data.windows(6).any(|window| window == b"/tmp\r\n"),
        "{:?}",
        raw.data
    );

    // Paging, and the errors of a bad request.
    let after = list_commands(&broker, &session_id, 3).await?;
    assert_eq!(
        after.commands.iter().map(|c| c.id).collect::<Vec<_>>(),
        vec![4, 5]
    );
    let unknown = broker
        .client
        .clone()
        .get_command_output(authorized(pb::GetCommandOutputRequest {
            session_id: session_id.clone(),
            command_id: 99,
            format: 0,
        }))
        .await
        .expect_err("no command 99");
    assert_eq!(unknown.code(), tonic::Code::NotFound, "{unknown:?}");
    let too_many = broker
        .client
        .clone()
        .list_commands(authorized(pb::ListCommandsRequest {
            session_id: session_id.clone(),
            after: 0,
            limit: 5000,
        }))
        .await
        .expect_err("over the maximum");
    assert_eq!(
        too_many.code(),
        tonic::Code::InvalidArgument,
        "{too_many:?}"
    );

    // The shell's exit ends the terminal.
    broker
        .send_keys(
            &session_id,
            vec![pb::input_item::Item::Text("exit\r".to_owned())],
            false,
        )
        .await?;
    wait_for_state(&broker, &session_id, pb::TerminalState::Exited).await?;
    broker.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_reports_commands_exit_codes_and_cwd() -> anyhow::Result<()> {
    crate::support::init_logging();
    let Some(bash) = shell_at("/bin/bash") else {
        return Ok(());
    };
    let shell = ShellRun {
        argv: vec![bash],
        exit_seven: "(exit 7)",
    };
    commands_of(Backend::Local, shell).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busybox_ash_reports_commands_exit_codes_and_cwd() -> anyhow::Result<()> {
    crate::support::init_logging();
    let Some(busybox) = shell_at("/bin/busybox") else {
        return Ok(());
    };
    // busybox runs the applet its name says.
    let directory = tempfile::tempdir()?;
    let ash = directory.path().join("ash");
    std::os::unix::fs::symlink(busybox, &ash)?;
    let shell = ShellRun {
        argv: vec![ash.display().to_string()],
        exit_seven: "(exit 7)",
    };
    commands_of(Backend::Local, shell).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dash_reports_commands_exit_codes_and_cwd() -> anyhow::Result<()> {
    crate::support::init_logging();
    let Some(dash) = shell_at("/bin/dash") else {
        return Ok(());
    };
    let shell = ShellRun {
        argv: vec![dash],
        exit_seven: "(exit 7)",
    };
    commands_of(Backend::Local, shell).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zsh_reports_commands_exit_codes_and_cwd() -> anyhow::Result<()> {
    crate::support::init_logging();
    let Some(zsh) = shell_at("/usr/bin/zsh") else {
        return Ok(());
    };
    let shell = ShellRun {
        argv: vec![zsh],
        exit_seven: "(exit 7)",
    };
    commands_of(Backend::Local, shell).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fish_reports_commands_exit_codes_and_cwd() -> anyhow::Result<()> {
    crate::support::init_logging();
    let Some(fish) = shell_at("/usr/bin/fish") else {
        return Ok(());
    };
    let shell = ShellRun {
        argv: vec![fish],
        exit_seven: "sh -c 'exit 7'",
    };
    commands_of(Backend::Local, shell).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_containers_sh_reports_commands_exit_codes_and_cwd() -> anyhow::Result<()> {
    crate::support::init_logging();
    if !ptyhub_test_support::require(ptyhub_test_support::Requirement::Docker) {
        return Ok(());
    }
    let shell = ShellRun {
        argv: vec!["/bin/sh".to_owned()],
        exit_seven: "(exit 7)",
    };
    commands_of(Backend::Docker, shell).await
}

/// A program that behaves like a coding agent: it draws on the alternate screen, repaints, asks
/// for permission with a notification and waits for a key, then works on.
const AGENT: &str = r#"printf '\033[?1049h'
for n in 1 2 3; do printf '\033[H\033[2Jworking %s' "$n"; sleep 0.1; done
printf '\033[H\033[2JAllow? [y/n]\033]9;needs your permission\007'
read answer
printf '\033[H\033[2Jgot %s, working' "$answer"
sleep 60
"#;

/// The quiet after which a full-screen program is idle, for [`agent_asks_then_works_on`]: longer
/// than the agent's pauses while it repaints.
const AGENT_IDLE_AFTER: Duration = Duration::from_millis(700);

async fn agent_asks_then_works_on(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start_with(
        backend,
        Box::new(|config| config.idle_after = AGENT_IDLE_AFTER),
    )
    .await?;
    let session = broker.spawn_sh(AGENT).await?;
    let session_id = session.session_id;
    wait_for_state(&broker, &session_id, pb::TerminalState::WaitingForInput).await?;
    let info = broker.get(&session_id).await?;
    let terminal = info.terminal.context("a terminal")?;
    let notification = terminal.notification.context("the question")?;
    assert_eq!(notification.text, "needs your permission");
    assert!(!terminal.shell_integration, "sh -c is no interactive shell");
    // Until it is answered, it waits, however long: longer than the quiet that makes a
    // full-screen program idle, as a witness started from here and quiet shows once it is idle.
    let witness = broker
        .spawn_sh("printf '\\033[?1049hdrawn once'; sleep 60")
        .await?;
    wait_for_state(&broker, &witness.session_id, pb::TerminalState::Idle).await?;
    let still = broker.get(&session_id).await?;
    assert_eq!(
        state_of(still.terminal.as_ref()),
        pb::TerminalState::WaitingForInput
    );
    // Answered, it runs: read from the broker's events, as the agent's next quiet makes it idle
    // soon after.
    let mut events = broker
        .client
        .clone()
        .watch_events(authorized(pb::WatchEventsRequest {}))
        .await?
        .into_inner();
    broker
        .send_keys(
            &session_id,
            vec![pb::input_item::Item::Text("y\r".to_owned())],
            false,
        )
        .await?;
    loop {
        let event = tokio::time::timeout(PATIENCE, events.message())
            .await
            .context("the agent never ran again")??
            .context("the event stream ended")?;
        if let Some(pb::broker_event::Event::Terminal(changed)) = event.event
            && changed.session_id == session_id
            && state_of(changed.terminal.as_ref()) == pb::TerminalState::Running
        {
            break;
        }
    }
    broker.kill(&session_id).await?;
    broker.stop().await
}

async fn a_quiet_full_screen_program_is_idle(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start_with(
        backend,
        Box::new(|config| config.idle_after = Duration::from_millis(500)),
    )
    .await?;
    let session = broker
        .spawn_sh(
            "printf '\\033[?1049hdrawing'; for n in 1 2 3 4 5; do sleep 0.2; printf .; done; sleep 60",
        )
        .await?;
    let session_id = session.session_id;
    wait_for_state(&broker, &session_id, pb::TerminalState::Running).await?;
    // Dots every 200 ms keep it from idle: the quiet must last the whole idle time.
    let started = Instant::now();
    let idle = wait_for_state(&broker, &session_id, pb::TerminalState::Idle).await?;
    assert_eq!(state_of(Some(&idle)), pb::TerminalState::Idle);
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "idle before the program stopped drawing"
    );
    broker.kill(&session_id).await?;
    broker.stop().await
}

/// A wait for `state` (and nothing else) on the session.
fn state_wait(session_id: &str, state: pb::TerminalState) -> pb::WaitForScreenRequest {
    pb::WaitForScreenRequest {
        session_id: session_id.to_owned(),
        timeout_ms: 20_000,
        wait_for: state.into(),
        ..Default::default()
    }
}

fn outcome_of(answer: &pb::WaitForScreenResponse) -> pb::wait_for_screen_response::Outcome {
    pb::wait_for_screen_response::Outcome::try_from(answer.outcome)
        .unwrap_or(pb::wait_for_screen_response::Outcome::Unspecified)
}

/// A wait for input, made while the agent still repaints, answers at its question with the
/// question on the screen, not at a repaint; after the answer, the old question answers no wait
/// that asks for one from the answer's offset on. Waits with two targets or an unknown one are
/// refused.
async fn a_wait_for_input_answers_at_the_agents_question(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start_with(
        backend,
        Box::new(|config| config.idle_after = Duration::from_secs(600)),
    )
    .await?;
    let session = broker.spawn_sh(AGENT).await?;
    let session_id = session.session_id;
    let asked = broker
        .wait_for_screen(state_wait(&session_id, pb::TerminalState::WaitingForInput))
        .await?;
    assert_eq!(
        outcome_of(&asked),
        pb::wait_for_screen_response::Outcome::State,
        "{asked:?}"
    );
    assert_eq!(asked.state, pb::TerminalState::WaitingForInput as i32);
    let screen = asked.screen.as_ref().context("the screen")?;
    assert_eq!(screen.lines[0], "Allow? [y/n]", "{screen:?}");
    let terminal = asked.terminal.as_ref().context("the terminal")?;
    assert_eq!(
        terminal
            .notification
            .as_ref()
            .map(|asked| asked.text.as_str()),
        Some("needs your permission")
    );

    let sent = broker
        .send_keys(
            &session_id,
            vec![pb::input_item::Item::Text("y\r".to_owned())],
            false,
        )
        .await?;
    let mut after_answer = state_wait(&session_id, pb::TerminalState::WaitingForInput);
    after_answer.after_offset = Some(sent.output_offset);
    after_answer.timeout_ms = 500;
    let refused = broker
        .wait_for_screen(after_answer)
        .await
        .expect_err("no question after the answer");
    assert_eq!(refused.code(), tonic::Code::DeadlineExceeded, "{refused:?}");

    let mut both = state_wait(&session_id, pb::TerminalState::AtPrompt);
    both.pattern = "working".to_owned();
    let mut with_quiet = state_wait(&session_id, pb::TerminalState::Idle);
    with_quiet.quiet_ms = 100;
    for refused in [
        both,
        with_quiet,
        state_wait(&session_id, pb::TerminalState::Running),
        state_wait(&session_id, pb::TerminalState::Starting),
        pb::WaitForScreenRequest {
            wait_for: 99,
            ..state_wait(&session_id, pb::TerminalState::Idle)
        },
    ] {
        let status = broker
            .wait_for_screen(refused.clone())
            .await
            .expect_err("refused");
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{refused:?}: {status:?}"
        );
    }
    broker.kill(&session_id).await?;
    broker.stop().await
}

/// A wait for idle made as a full-screen program starts answers only once its output has been
/// quiet for the whole idle time: the pause between its two bursts, shorter than that, does not
/// answer it.
async fn a_wait_for_idle_outlasts_a_pause_between_bursts(backend: Backend) -> anyhow::Result<()> {
    let broker = TestBroker::start_with(
        backend,
        Box::new(|config| config.idle_after = Duration::from_millis(1500)),
    )
    .await?;
    let session = broker
        .spawn_sh("printf '\\033[?1049hfirst burst'; sleep 0.2; printf ', second burst'; sleep 60")
        .await?;
    let session_id = session.session_id;
    let idle = broker
        .wait_for_screen(state_wait(&session_id, pb::TerminalState::Idle))
        .await?;
    assert_eq!(
        outcome_of(&idle),
        pb::wait_for_screen_response::Outcome::State,
        "{idle:?}"
    );
    let screen = idle.screen.as_ref().context("the screen")?;
    assert_eq!(screen.lines[0], "first burst, second burst", "{screen:?}");
    broker.kill(&session_id).await?;
    broker.stop().await
}

backend_scenarios!(
    agent_asks_then_works_on,
    a_quiet_full_screen_program_is_idle,
    a_wait_for_input_answers_at_the_agents_question,
    a_wait_for_idle_outlasts_a_pause_between_bursts,
);

/// Watches the session's commands from `after_id`.
async fn watch_commands(
    broker: &TestBroker,
    session_id: &str,
    after_id: u64,
) -> Result<tonic::Streaming<pb::Command>, tonic::Status> {
    Ok(broker
        .client
        .clone()
        .watch_commands(authorized(pb::WatchCommandsRequest {
            session_id: session_id.to_owned(),
            after_id,
        }))
        .await?
        .into_inner())
}

/// The next record of a command watch, within [`PATIENCE`].
async fn next_command(
    commands: &mut tonic::Streaming<pb::Command>,
) -> anyhow::Result<Option<pb::Command>> {
    Ok(tokio::time::timeout(PATIENCE, commands.message())
        .await
        .context("a command record within the patience")??)
}

/// `WatchCommands` on bash: each command once started and once ended with its exit code, in
/// order, then the end of the stream when the shell exits; a watch from an id gets the kept
/// commands after it first, as they are; an unknown session is NOT_FOUND.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_commands_sends_each_command_started_then_ended() -> anyhow::Result<()> {
    crate::support::init_logging();
    let Some(bash) = shell_at("/bin/bash") else {
        return Ok(());
    };
    let broker = TestBroker::start(Backend::Local).await?;
    let session_id = spawn_shell(&broker, &[bash]).await?;
    wait_for_state(&broker, &session_id, pb::TerminalState::AtPrompt).await?;
    let mut commands = watch_commands(&broker, &session_id, 0).await?;
    run_line(&broker, &session_id, "true").await?;
    run_line(&broker, &session_id, "sleep 0.3; (exit 3)").await?;
    let mut seen = Vec::new();
    for _ in 0..4 {
        let command = next_command(&mut commands).await?.context("a record")?;
        seen.push((command.id, command.command.clone(), command.exit_code));
        assert_eq!(
            command.ended_at.is_none(),
            seen.len() % 2 == 1,
            "started, then ended: {command:?}"
        );
    }
    assert_eq!(
        seen,
        vec![
            (1, "true".to_owned(), None),
            (1, "true".to_owned(), Some(0)),
            (2, "sleep 0.3; (exit 3)".to_owned(), None),
            (2, "sleep 0.3; (exit 3)".to_owned(), Some(3)),
        ]
    );

    let mut later = watch_commands(&broker, &session_id, 1).await?;
    let kept = next_command(&mut later)
        .await?
        .context("the kept command")?;
    assert_eq!((kept.id, kept.exit_code), (2, Some(3)), "as it is, once");

    broker
        .send_keys(
            &session_id,
            vec![pb::input_item::Item::Text("exit\r".to_owned())],
            false,
        )
        .await?;
    let started = next_command(&mut commands).await?.context("exit starts")?;
    let ended = next_command(&mut commands).await?.context("exit ends")?;
    assert_eq!((started.id, started.command.as_str()), (3, "exit"));
    assert!(started.ended_at.is_none() && ended.ended_at.is_some());
    assert_eq!(
        next_command(&mut commands).await?,
        None,
        "the stream ends with the process"
    );

    let unknown = watch_commands(&broker, &uuid::Uuid::new_v4().to_string(), 0)
        .await
        .expect_err("an unknown session");
    assert_eq!(unknown.code(), tonic::Code::NotFound, "{unknown:?}");
    broker.stop().await
}

async fn run(
    broker: &TestBroker,
    session_id: &str,
    command: &str,
    timeout_ms: u32,
) -> Result<pb::RunResponse, tonic::Status> {
    Ok(broker
        .client
        .clone()
        .run(authorized(pb::RunRequest {
            session_id: session_id.to_owned(),
            command: command.to_owned(),
            timeout_ms,
            force: false,
            format: 0,
        }))
        .await?
        .into_inner())
}

/// `run` on the shell people watch: a command with quotes across lines gives its exact output
/// and exit code, typed where everyone sees it; every refusal types nothing.
async fn run_types_at_the_prompt_and_answers_the_commands_end(
    backend: Backend,
    shell: &str,
) -> anyhow::Result<()> {
    let broker = TestBroker::start(backend).await?;
    let session_id = spawn_shell(&broker, &[shell.to_owned()]).await?;
    wait_for_state(&broker, &session_id, pb::TerminalState::AtPrompt).await?;

    let answer = run(&broker, &session_id, "echo \"it's\"\necho 'two\nlines'", 0).await?;
    assert_eq!(
        String::from_utf8_lossy(&answer.output),
        "it's\ntwo\nlines\n",
        "{answer:?}"
    );
    let command = answer.command.context("the command")?;
    assert_eq!(command.exit_code, Some(0));
    assert!(!answer.truncated);
    let failed = run(&broker, &session_id, "(exit 4)", 0).await?;
    assert_eq!(
        failed.command.as_ref().context("the command")?.exit_code,
        Some(4)
    );
    assert!(failed.output.is_empty(), "{failed:?}");
    // The screen shows what was typed, as a person would have typed it.
    let screen = broker
        .screen(&session_id, pb::ScreenFormat::Text, 0)
        .await?;
    let text = screen.lines.join("\n");
    assert!(text.contains("echo \"it's\""), "{text}");

    // Refusals: nothing is typed.
    let before = list_commands(&broker, &session_id, 0).await?.commands.len();
    for (command, timeout_ms, code) in [
        ("", 0, tonic::Code::InvalidArgument),
        ("  \n", 0, tonic::Code::InvalidArgument),
        ("echo a\0b", 0, tonic::Code::InvalidArgument),
        ("true", 300_001, tonic::Code::InvalidArgument),
    ] {
        let refused = run(&broker, &session_id, command, timeout_ms)
            .await
            .expect_err("refused");
        assert_eq!(refused.code(), code, "{command:?}: {refused:?}");
    }
    // Too slow: the command goes on, the caller hears so.
    let slow = run(&broker, &session_id, "sleep 1", 200)
        .await
        .expect_err("over its timeout");
    assert_eq!(slow.code(), tonic::Code::DeadlineExceeded, "{slow:?}");
    // While it runs, the shell is not at its prompt.
    let busy = run(&broker, &session_id, "true", 0)
        .await
        .expect_err("a program runs");
    assert_eq!(busy.code(), tonic::Code::FailedPrecondition, "{busy:?}");
    assert!(busy.message().contains("running"), "{busy:?}");
    wait_for_state(&broker, &session_id, pb::TerminalState::AtPrompt).await?;
    // A client holding control keeps run from typing, unless forced.
    let _controller = broker
        .attach(&session_id, pb::Role::Controller, None)
        .await?;
    let held = run(&broker, &session_id, "true", 0)
        .await
        .expect_err("control is held");
    assert_eq!(held.code(), tonic::Code::FailedPrecondition, "{held:?}");
    let after = list_commands(&broker, &session_id, 0).await?.commands.len();
    assert_eq!(after, before + 1, "only `sleep 1` ran among the refusals");

    // A program that marks no prompts cannot be run in.
    let plain = broker.spawn_sh("sleep 60").await?;
    let refused = run(&broker, &plain.session_id, "true", 0)
        .await
        .expect_err("no integration");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    broker.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_in_bash() -> anyhow::Result<()> {
    crate::support::init_logging();
    let Some(bash) = shell_at("/bin/bash") else {
        return Ok(());
    };
    run_types_at_the_prompt_and_answers_the_commands_end(Backend::Local, &bash).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_in_a_containers_sh() -> anyhow::Result<()> {
    crate::support::init_logging();
    if !ptyhub_test_support::require(ptyhub_test_support::Requirement::Docker) {
        return Ok(());
    }
    run_types_at_the_prompt_and_answers_the_commands_end(Backend::Docker, "/bin/sh").await
}

/// A command that never ends (`yes`) has an output as long as the session's: asking for it is
/// refused with its size once that passes what one answer carries, before anything is read or
/// allocated for it, not answered with whatever the ring still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_longer_than_one_answer_is_refused_with_its_size() -> anyhow::Result<()> {
    crate::support::init_logging();
    let Some(bash) = shell_at("/bin/bash") else {
        return Ok(());
    };
    let broker = TestBroker::start(Backend::Local).await?;
    let session_id = spawn_shell(&broker, &[bash]).await?;
    wait_for_state(&broker, &session_id, pb::TerminalState::AtPrompt).await?;
    broker
        .send_keys(
            &session_id,
            vec![pb::input_item::Item::Text("yes\r".to_owned())],
            false,
        )
        .await?;

    let deadline = Instant::now() + PATIENCE;
    let refusal = loop {
        let answer = broker
            .client
            .clone()
            .get_command_output(authorized(pb::GetCommandOutputRequest {
                session_id: session_id.clone(),
                command_id: 1,
                format: pb::ScreenFormat::Ansi as i32,
            }))
            .await;
        match answer {
            Err(status) if status.message().contains("one answer carries") => break status,
            // Not started yet, or still shorter than an answer (the ring, 1 MiB here, has
            // let go of its start, so that is a 410 that says so).
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::NotFound | tonic::Code::OutOfRange
                ) => {}
            Ok(_) => {}
            Err(status) => bail!("unexpected refusal: {status:?}"),
        }
        if Instant::now() > deadline {
            bail!("`yes` never passed one answer's size");
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    };
    assert_eq!(refusal.code(), tonic::Code::OutOfRange, "{refusal:?}");
    assert!(
        refusal.message().starts_with("command 1's output is "),
        "{refusal:?}"
    );

    broker
        .send_keys(
            &session_id,
            vec![pb::input_item::Item::Text("\u{3}".to_owned())],
            false,
        )
        .await?;
    broker.stop().await
}
