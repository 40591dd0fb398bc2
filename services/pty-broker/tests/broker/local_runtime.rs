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
