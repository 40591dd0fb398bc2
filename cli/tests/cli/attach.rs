//! `ptyhub attach` driven through a real pseudo-terminal, as a person at a terminal uses it:
//! keystrokes reach the shell, window size changes reach the PTY, Ctrl-P Ctrl-Q detaches and
//! leaves the session running, a new attach shows what was printed meanwhile, the terminal's
//! modes come back, the remote exit code is ours, a takeover is said, and a viewer cannot type.
//!
//! Markers are printed by shell arithmetic (`echo M$((6*7))` shows `M42`) so that the echo of
//! the typed command line never counts as its output.

use crate::support::pty::{Terminal, termios_summary};
use crate::support::{Up, eventually};
use nix::sys::signal::Signal;
use nix::sys::termios::LocalFlags;

const CTRL_P_CTRL_Q: &str = "\x10\x11";

/// The `status` of the live session with `alias`.
fn status_of(up: &Up, alias: &str) -> Option<String> {
    up.session_with_alias("local", alias)
        .and_then(|session| session["status"].as_str().map(str::to_owned))
}

#[test]
fn typing_reaches_the_shell_and_detach_restores_the_terminal() {
    let up = Up::start();
    let mut terminal = Terminal::spawn(&up, &["attach", "local", "--alias", "typing"], 24, 80);
    let before = terminal.initial_modes().clone();
    assert!(
        before
            .local_flags
            .contains(LocalFlags::ICANON | LocalFlags::ECHO),
        "a fresh PTY starts in cooked mode"
    );

    terminal.type_keys("echo typed-$((6*7))\r");
    terminal.expect("typed-42");
    // While attached, the local terminal is raw: the remote side does the echo and line editing.
    let during = terminal.modes();
    assert!(
        !during
            .local_flags
            .intersects(LocalFlags::ICANON | LocalFlags::ECHO),
        "raw mode while attached: {}",
        termios_summary(&during)
    );

    terminal.type_keys(CTRL_P_CTRL_Q);
    let status = terminal.wait();
    assert_eq!(status.code(), Some(0), "detaching is a success");
    terminal.expect("detached");
    assert_eq!(
        termios_summary(&terminal.modes()),
        termios_summary(&before),
        "the terminal modes are restored"
    );
    assert_eq!(status_of(&up, "typing").as_deref(), Some("active"));
}

#[test]
fn window_size_changes_reach_the_session() {
    let up = Up::start();
    let mut terminal = Terminal::spawn(&up, &["attach", "local", "--alias", "sizes"], 24, 80);
    // The size at attach is the local terminal's.
    terminal.type_keys("stty size; echo size-$((1+1))\r");
    terminal.expect("24 80");
    terminal.expect("size-2");

    terminal.resize(37, 101);
    // SIGWINCH and the next keystrokes race inside ptyhub; ask until the new size shows.
    let mut asked = 0;
    eventually("the new size reaches the PTY", || {
        asked += 1;
        terminal.type_keys(&format!("stty size; echo asked-$(({asked}*1000))\r"));
        terminal.expect(&format!("asked-{}", asked * 1000));
        terminal.shown().contains("37 101")
    });

    terminal.type_keys(CTRL_P_CTRL_Q);
    assert_eq!(terminal.wait().code(), Some(0));
}

#[test]
fn a_new_attach_shows_output_produced_while_detached() {
    let up = Up::start();
    let started = up.scratch.path().join("started");
    let printed = up.scratch.path().join("printed");
    let mut first = Terminal::spawn(&up, &["attach", "local", "--alias", "later"], 24, 80);
    // A background job that prints once the test says so (after the detach), then says it did.
    first.type_keys(&format!(
        "(while [ ! -e {started} ]; do sleep 0.05; done; echo while-away-$((6*7)); touch {printed}) &\r",
        started = started.display(),
        printed = printed.display()
    ));
    first.type_keys("echo job-$((2*2))\r");
    first.expect("job-4");
    first.type_keys(CTRL_P_CTRL_Q);
    assert_eq!(first.wait().code(), Some(0));
    assert!(!first.shown().contains("while-away-42"));

    std::fs::write(&started, "").expect("start the job");
    eventually("the job printed while nobody was attached", || {
        printed.exists()
    });
    assert_eq!(status_of(&up, "later").as_deref(), Some("active"));

    let mut second = Terminal::spawn(&up, &["attach", "local", "--alias", "later"], 24, 80);
    second.expect("while-away-42");
    // And it is the same shell, still taking input.
    second.type_keys("echo still-$((3*3))\r");
    second.expect("still-9");
    second.type_keys(CTRL_P_CTRL_Q);
    assert_eq!(second.wait().code(), Some(0));
}

#[test]
fn the_remote_exit_code_is_the_exit_code_and_the_terminal_is_restored() {
    let up = Up::start();
    let mut terminal = Terminal::spawn(&up, &["attach", "local", "--alias", "exiting"], 24, 80);
    let before = terminal.initial_modes().clone();
    terminal.type_keys("echo ready-$((5*5))\r");
    terminal.expect("ready-25");
    terminal.type_keys("exit 3\r");
    let status = terminal.wait();
    assert_eq!(status.code(), Some(3), "{:?}", terminal.shown());
    terminal.expect("exited with code 3");
    assert_eq!(
        termios_summary(&terminal.modes()),
        termios_summary(&before),
        "the terminal modes are restored"
    );
    eventually("the session is recorded as exited", || {
        up.sessions("local")
            .iter()
            .any(|session| session["exit_code"] == 3 && session["status"] != "active")
    });
}

#[test]
fn a_second_controller_takes_over_and_the_first_says_so() {
    let up = Up::start();
    let mut first = Terminal::spawn(&up, &["attach", "local", "--alias", "shared"], 24, 80);
    first.type_keys("echo first-$((1+1))\r");
    first.expect("first-2");

    let mut second = Terminal::spawn(&up, &["attach", "local", "--alias", "shared"], 24, 80);
    let status = first.wait();
    assert!(!status.success(), "taken over is not a success: {status}");
    first.expect("taken over");
    assert_eq!(
        termios_summary(&first.modes()),
        termios_summary(first.initial_modes()),
        "the first terminal's modes are restored"
    );

    // The second one controls the same shell.
    second.type_keys("echo second-$((2+2))\r");
    second.expect("second-4");
    second.type_keys(CTRL_P_CTRL_Q);
    assert_eq!(second.wait().code(), Some(0));
}

#[test]
fn a_viewer_sees_output_but_cannot_type() {
    let up = Up::start();
    let mut controller = Terminal::spawn(&up, &["attach", "local", "--alias", "watched"], 24, 80);
    controller.type_keys("echo begin-$((4+4))\r");
    controller.expect("begin-8");

    let mut viewer = Terminal::spawn(
        &up,
        &["attach", "local", "--alias", "watched", "--view"],
        24,
        80,
    );
    viewer.expect("begin-8");
    viewer.type_keys("echo viewer-$((7*7))\r");
    viewer.expect("read-only");

    controller.type_keys("echo controller-$((9*9))\r");
    controller.expect("controller-81");
    viewer.expect("controller-81");
    assert!(
        !controller.shown().contains("viewer-49"),
        "{}",
        controller.shown()
    );
    assert!(!viewer.shown().contains("viewer-49"), "{}", viewer.shown());

    // The viewer detaches the same way, and the controller goes on.
    viewer.type_keys(CTRL_P_CTRL_Q);
    assert_eq!(viewer.wait().code(), Some(0));
    controller.type_keys("echo after-$((10*10))\r");
    controller.expect("after-100");
    controller.type_keys(CTRL_P_CTRL_Q);
    assert_eq!(controller.wait().code(), Some(0));
}

#[test]
fn attach_without_a_selector_opens_the_default_session() {
    let up = Up::start();
    let mut terminal = Terminal::spawn(&up, &["attach", "local"], 24, 80);
    terminal.type_keys("echo default-$((8*8))\r");
    terminal.expect("default-64");
    terminal.type_keys(CTRL_P_CTRL_Q);
    assert_eq!(terminal.wait().code(), Some(0));
    assert_eq!(status_of(&up, "default").as_deref(), Some("active"));

    // `--default` and an attach by id reach the same shell.
    let id = up.session_with_alias("local", "default").expect("default")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let mut by_id = Terminal::spawn(&up, &["attach", "local", &id], 24, 80);
    by_id.type_keys("echo by-id-$((8*9))\r");
    by_id.expect("by-id-72");
    by_id.type_keys(CTRL_P_CTRL_Q);
    assert_eq!(by_id.wait().code(), Some(0));
    assert_eq!(up.sessions("local").len(), 1, "no second session was made");
}

#[test]
fn custom_detach_keys_detach_and_the_default_ones_are_typed() {
    let up = Up::start();
    let mut terminal = Terminal::spawn(
        &up,
        &[
            "attach",
            "local",
            "--alias",
            "keys",
            "--detach-keys",
            "ctrl-x,q",
        ],
        24,
        80,
    );
    terminal.type_keys("echo keys-$((3*4))\r");
    terminal.expect("keys-12");
    // Ctrl-P Ctrl-Q is now input for the shell, not a detach: the session's terminal echoes
    // the Ctrl-P; Ctrl-U then clears the line.
    terminal.type_keys(CTRL_P_CTRL_Q);
    terminal.expect("^P");
    terminal.type_keys("\x15echo still-attached-$((3*5))\r");
    terminal.expect("still-attached-15");
    terminal.type_keys("\x18q");
    assert_eq!(terminal.wait().code(), Some(0));
}

#[test]
fn a_signal_ends_the_attach_and_restores_the_terminal() {
    let up = Up::start();
    for (signal, code) in [(Signal::SIGTERM, 143), (Signal::SIGINT, 130)] {
        let mut terminal =
            Terminal::spawn(&up, &["attach", "local", "--alias", "signalled"], 24, 80);
        terminal.type_keys("echo attached-$((2*3))\r");
        terminal.expect("attached-6");
        terminal.signal(signal);
        let status = terminal.wait();
        assert_eq!(
            status.code(),
            Some(code),
            "{signal}: {:?}",
            terminal.shown()
        );
        terminal.expect("keeps running");
        assert_eq!(
            termios_summary(&terminal.modes()),
            termios_summary(terminal.initial_modes()),
            "the terminal modes are restored after {signal}"
        );
        assert_eq!(status_of(&up, "signalled").as_deref(), Some("active"));
    }
}

#[test]
fn the_server_stopping_ends_the_attach_with_a_clear_line() {
    let up = Up::start();
    let mut terminal = Terminal::spawn(&up, &["attach", "local", "--alias", "stopping"], 24, 80);
    terminal.type_keys("echo attached-$((3*7))\r");
    terminal.expect("attached-21");
    let _ = up.stop();
    let status = terminal.wait();
    assert!(!status.success(), "{status}: {:?}", terminal.shown());
    terminal.expect("ptyhub: the session was closed: the server is shutting down");
    assert_eq!(
        termios_summary(&terminal.modes()),
        termios_summary(terminal.initial_modes()),
        "the terminal modes are restored"
    );
}

#[test]
fn while_the_server_is_gone_the_detach_keys_still_work() {
    let up = Up::start();
    let mut terminal = Terminal::spawn(&up, &["attach", "local", "--alias", "vanishing"], 24, 80);
    terminal.type_keys("echo attached-$((4*7))\r");
    terminal.expect("attached-28");
    up.kill();
    terminal.expect("reconnecting");
    terminal.type_keys(CTRL_P_CTRL_Q);
    assert_eq!(terminal.wait().code(), Some(0), "{:?}", terminal.shown());
    assert_eq!(
        termios_summary(&terminal.modes()),
        termios_summary(terminal.initial_modes()),
        "the terminal modes are restored"
    );
}

#[test]
fn attach_shows_a_full_screen_program_and_detach_returns_to_the_normal_screen() {
    let up = Up::start();
    // A full-screen program's start: the alternate screen, application cursor keys, bracketed
    // paste, mouse reports, a hidden cursor, and a header drawn once.
    up.run_ok(&[
        "instance",
        "add",
        "fullscreen",
        "--local",
        "--",
        "sh",
        "-c",
        concat!(
            "printf 'on the normal screen\\n'; ",
            "printf '\\033[?1049h\\033[?1h\\033[?2004h\\033[?1000h\\033[?25l\\033[2J\\033[H'; ",
            "printf '\\033[7mfull-screen header\\033[0m\\033[5;3Hbody text'; exec sleep 600",
        ),
    ]);
    let created: serde_json::Value =
        serde_json::from_str(&up.run_ok(&["--json", "new", "fullscreen"])).expect("new --json");
    let session = created["id"].as_str().expect("an id").to_owned();
    eventually("the program drew its screen", || {
        let screen: serde_json::Value =
            serde_json::from_str(&up.run_ok(&["--json", "screen", "fullscreen", &session]))
                .expect("screen --json");
        screen["alternate_screen"] == true
            && screen["text"]
                .as_str()
                .is_some_and(|text| text.contains("body text"))
    });

    let mut terminal = Terminal::spawn(&up, &["attach", "fullscreen", &session], 24, 80);
    terminal.expect("body text");
    // What the user's terminal shows now, as a terminal emulator would draw the bytes.
    let mut user_terminal = vt100::Parser::default();
    user_terminal.process(terminal.shown().as_bytes());
    let attached = user_terminal.screen();
    assert!(
        attached.alternate_screen(),
        "the snapshot is on the alternate screen"
    );
    assert_eq!(
        attached.contents_between(0, 0, 0, 80).trim_end(),
        "full-screen header"
    );
    assert_eq!(
        attached.contents_between(4, 2, 4, 80).trim_end(),
        "body text"
    );
    assert!(
        attached.cell(0, 0).is_some_and(vt100::Cell::inverse),
        "with its attributes"
    );
    assert!(attached.application_cursor() && attached.bracketed_paste());

    terminal.type_keys(CTRL_P_CTRL_Q);
    assert_eq!(terminal.wait().code(), Some(0));
    terminal.expect("detached");
    let mut user_terminal = vt100::Parser::default();
    user_terminal.process(terminal.shown().as_bytes());
    let detached = user_terminal.screen();
    assert!(!detached.alternate_screen(), "back on the normal screen");
    assert!(!detached.application_cursor(), "normal cursor keys");
    assert!(!detached.bracketed_paste(), "no bracketed paste");
    assert_eq!(
        detached.mouse_protocol_mode(),
        vt100::MouseProtocolMode::None
    );
    assert!(!detached.hide_cursor(), "the cursor is shown");
    assert!(
        detached.contents().contains("detached"),
        "{}",
        detached.contents()
    );
    assert_eq!(
        termios_summary(&terminal.modes()),
        termios_summary(terminal.initial_modes()),
        "the terminal modes are restored"
    );
}
