//! The local runtime's children start from a clean slate, whatever the broker inherited; its
//! PTY masters wake the broker for output, and for room to write only while a write waits; a
//! small read that empties the terminal is not followed by one that fails.

use std::collections::HashSet;
use std::time::Duration;

use pty_broker::domain::TerminalSize;
use pty_broker::runtime::local::LocalRuntime;
use pty_broker::runtime::{PtyRuntime, SpawnSpec, SpawnedPty, Target};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use uuid::Uuid;

/// The `SigIgn` mask of `/proc/<pid>/status` as a shell in a new session reports it.
async fn ignored_signals_of_a_session() -> u64 {
    let spec = SpawnSpec {
        session_id: Uuid::new_v4(),
        target: Target::Local,
        command: vec![
            "sh".into(),
            "-c".into(),
            "grep SigIgn: /proc/self/status".into(),
        ],
        env: Vec::new(),
        cwd: None,
        user: None,
        size: TerminalSize::DEFAULT,
        shell_integration: false,
    };
    let mut pty = LocalRuntime::new().spawn(&spec).await.expect("spawn");
    let mut output = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), pty.output.read_to_end(&mut output))
        .await
        .expect("output ends")
        .expect("read output");
    let text = String::from_utf8_lossy(&output);
    let mask = text
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("no SigIgn line in {text:?}"));
    u64::from_str_radix(mask, 16).unwrap_or_else(|_| panic!("bad mask in {text:?}"))
}

#[tokio::test]
async fn sessions_do_not_inherit_signals_the_broker_ignores() {
    // As under `nohup`: the broker itself ignores SIGHUP and SIGINT.
    for signal in [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT] {
        // SAFETY: SIG_IGN installs no handler; nothing else in this test process (each test runs
        // in its own) relies on these signals.
        #[allow(unsafe_code)]
        unsafe {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
    let mask = ignored_signals_of_a_session().await;
    for signal in [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT] {
        assert_eq!(
            mask & (1 << (signal - 1)),
            0,
            "signal {signal} is still ignored in the session (SigIgn {mask:x})"
        );
    }
}

/// A local session running `sh -c command` with `env`.
async fn spawn_shell(command: &str, env: Vec<(String, String)>) -> SpawnedPty {
    let spec = SpawnSpec {
        session_id: Uuid::new_v4(),
        target: Target::Local,
        command: vec!["sh".into(), "-c".into(), command.into()],
        env,
        cwd: None,
        user: None,
        size: TerminalSize::DEFAULT,
        shell_integration: false,
    };
    LocalRuntime::new().spawn(&spec).await.expect("spawn")
}

/// Everything a local session prints, until it ends.
async fn output_of(command: &str, env: Vec<(String, String)>) -> String {
    let mut pty = spawn_shell(command, env).await;
    let mut output = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), pty.output.read_to_end(&mut output))
        .await
        .expect("output ends")
        .expect("read output");
    String::from_utf8_lossy(&output).replace("\r\n", "\n")
}

#[tokio::test]
async fn sessions_see_a_clean_environment_without_the_brokers_secrets() {
    // As a standalone broker configured from its environment holds them.
    // SAFETY: nextest runs each test in a process of its own, and no other thread of this test
    // reads the environment while it is written.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var(
            "PTYHUB_BROKER_SERVICE_TOKEN",
            "secret-service-token-0123456789",
        );
        std::env::set_var(
            "PTYHUB_BROKER_SESSION_API_TOKEN",
            "secret-session-api-token-0123456789",
        );
        std::env::set_var("UNRELATED_BROKER_VARIABLE", "broker-only");
    }
    let output = output_of(
        "env",
        vec![(
            "INSTANCE_SETTING".to_owned(),
            "from-the-instance".to_owned(),
        )],
    )
    .await;
    let names: Vec<&str> = output
        .lines()
        .filter_map(|line| line.split_once('=').map(|(name, _)| name))
        .collect();
    assert!(!output.contains("secret-"), "a secret leaked: {output}");
    assert!(!names.contains(&"UNRELATED_BROKER_VARIABLE"), "{output}");
    for expected in ["TERM", "LANG", "PATH", "SHELL", "INSTANCE_SETTING"] {
        assert!(names.contains(&expected), "{expected} missing: {output}");
    }
    assert!(output.contains("TERM=xterm-256color"), "{output}");
    assert!(
        output.contains("INSTANCE_SETTING=from-the-instance"),
        "{output}"
    );
}

#[tokio::test]
async fn the_instance_environment_overrides_the_defaults() {
    let output = output_of(
        "echo \"term=$TERM lang=$LANG\"",
        vec![
            ("TERM".to_owned(), "vt100".to_owned()),
            ("LANG".to_owned(), "de_DE.UTF-8".to_owned()),
        ],
    )
    .await;
    assert!(output.contains("term=vt100 lang=de_DE.UTF-8"), "{output}");
}

/// `EPOLLOUT` in an epoll registration's event mask.
const EPOLLOUT: u32 = 0x4;

/// How many registrations of this process's epoll instance watch for room to write, read from
/// the `/proc/self/fdinfo` entries of its epoll descriptors (`tfd: … events: <hex mask> …`;
/// mio holds two descriptors of one instance, which list the same registrations).
fn registrations_watching_for_room() -> usize {
    let mut watching = HashSet::new();
    for entry in std::fs::read_dir("/proc/self/fd").expect("list this process's fds") {
        let entry = entry.expect("an fd entry");
        let is_epoll = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.as_os_str() == "anon_inode:[eventpoll]");
        if !is_epoll {
            continue;
        }
        let info_path = std::path::Path::new("/proc/self/fdinfo").join(entry.file_name());
        let Ok(info) = std::fs::read_to_string(info_path) else {
            continue;
        };
        for line in info.lines().filter(|line| line.starts_with("tfd:")) {
            let mut fields = line.split_whitespace();
            let mask = fields
                .find(|field| *field == "events:")
                .and_then(|_| fields.next())
                .unwrap_or_else(|| panic!("no event mask in {line:?}"));
            let mask = u32::from_str_radix(mask, 16)
                .unwrap_or_else(|_| panic!("bad event mask in {line:?}"));
            if mask & EPOLLOUT != 0 {
                watching.insert(line.to_owned());
            }
        }
    }
    watching.len()
}

/// Reads `output` until what it printed contains `wanted`; what it printed.
async fn read_until(output: &mut (impl AsyncRead + Unpin), wanted: &str) -> String {
    let mut printed = Vec::new();
    let mut chunk = [0u8; 4096];
    tokio::time::timeout(Duration::from_secs(30), async {
        while !String::from_utf8_lossy(&printed).contains(wanted) {
            let read = output.read(&mut chunk).await.expect("read output");
            assert_ne!(read, 0, "output ended before {wanted:?}: {printed:?}");
            printed.extend_from_slice(&chunk[..read]);
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {wanted:?} within 30 s: {printed:?}"));
    String::from_utf8_lossy(&printed).into_owned()
}

/// Polls `condition` every 10 ms for up to 30 s.
async fn eventually(what: &str, condition: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !condition() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The kernel wakes a PTY master's writers each time the program reads its input: a master
/// watched for room all along would wake the broker once a keystroke for nothing. It is watched
/// only while a write waits for room, and every byte of that write still arrives.
#[tokio::test]
async fn the_master_is_watched_for_room_only_while_a_write_waits_for_it() {
    const INPUT_BYTES: usize = 1 << 20;
    let gate = tempfile::tempdir().expect("temporary directory");
    let gate = gate.path().join("go");
    let before = registrations_watching_for_room();
    // Raw, so that every byte reaches the program as written; it reads nothing until the gate.
    let command = format!(
        "stty raw -echo; printf R; while [ ! -e '{}' ]; do sleep 0.01; done; \
         head -c {INPUT_BYTES} | wc -c",
        gate.display()
    );
    let pty = spawn_shell(&command, Vec::new()).await;
    let (mut output, mut input) = (pty.output, pty.input);
    read_until(&mut output, "R").await;
    assert_eq!(
        registrations_watching_for_room(),
        before,
        "a master no write waits on is watched for room"
    );

    // More than the terminal holds for a program that does not read.
    let write = tokio::spawn(async move {
        input.write_all(&vec![b'x'; INPUT_BYTES]).await?;
        Ok::<_, std::io::Error>(input)
    });
    eventually("the refused write watches the master for room", || {
        registrations_watching_for_room() == before + 1
    })
    .await;
    assert!(!write.is_finished(), "the whole input went in unread");

    std::fs::write(&gate, b"").expect("open the gate");
    let input = tokio::time::timeout(Duration::from_secs(30), write)
        .await
        .expect("the input is taken once the program reads")
        .expect("the writing task")
        .expect("write the input");
    let counted = read_until(&mut output, &INPUT_BYTES.to_string()).await;
    assert!(counted.contains(&INPUT_BYTES.to_string()), "{counted:?}");
    assert_eq!(
        registrations_watching_for_room(),
        before,
        "the master is still watched for room after the write went in"
    );
    drop(input);
}

/// Read system calls made by this thread so far (`syscr` of `/proc/thread-self/io`). Reading
/// the file makes some itself: a caller measures how many and takes them off.
fn reads_of_this_thread() -> u64 {
    let io = std::fs::read_to_string("/proc/thread-self/io").expect("read /proc/thread-self/io");
    io.lines()
        .find_map(|line| line.strip_prefix("syscr: "))
        .and_then(|count| count.trim().parse().ok())
        .expect("syscr in /proc/thread-self/io")
}

/// A small read that empties the terminal (an echo, a prompt) lets its readiness go: the next
/// read waits for the runtime to hear of output instead of failing with `EAGAIN` first. Output
/// that comes after it is still read, and so is the end.
#[tokio::test]
async fn a_small_read_that_empties_the_terminal_spares_the_read_that_would_fail() {
    let gate = tempfile::tempdir().expect("temporary directory");
    let gate = gate.path().join("go");
    let command = format!(
        "printf first; while [ ! -e '{}' ]; do sleep 0.01; done; printf second",
        gate.display()
    );
    let mut pty = spawn_shell(&command, Vec::new()).await;
    read_until(&mut pty.output, "first").await;

    // The runtime is this thread's alone (`current_thread`): every read of the master is made
    // here, between the two looks at the counter.
    let reading_the_counter = {
        let before = reads_of_this_thread();
        reads_of_this_thread() - before
    };
    let before = reads_of_this_thread();
    let mut chunk = [0u8; 64];
    let early = futures::FutureExt::now_or_never(pty.output.read(&mut chunk));
    let made = reads_of_this_thread() - before - reading_the_counter;
    assert!(early.is_none(), "read {early:?} before the gate opened");
    assert_eq!(made, 0, "read system calls made to learn that nothing came");

    std::fs::write(&gate, b"").expect("open the gate");
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), pty.output.read_to_end(&mut rest))
        .await
        .expect("the output ends once the program exits")
        .expect("read the rest");
    assert_eq!(String::from_utf8_lossy(&rest), "second");
}
