//! The local runtime's children start from a clean slate, whatever the broker inherited.

use std::time::Duration;

use pty_broker::domain::TerminalSize;
use pty_broker::runtime::local::LocalRuntime;
use pty_broker::runtime::{PtyRuntime, SpawnSpec, Target};
use tokio::io::AsyncReadExt as _;
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

/// Everything a local session prints, until it ends.
async fn output_of(command: &str, env: Vec<(String, String)>) -> String {
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
    let mut pty = LocalRuntime::new().spawn(&spec).await.expect("spawn");
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
