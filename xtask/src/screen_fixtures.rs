//! `cargo xtask screen-fixtures`: records the output of real programs into
//! `tests/fixtures/screens/`, for the test that holds the broker's screen to xterm's
//! (`services/pty-broker/tests/broker/screen_oracle.rs`).
//!
//! Each program runs in a fresh pseudo-terminal that util-linux's `script` makes, at the size the
//! fixture names, with `TERM=xterm-256color` as the broker gives its sessions. The keys a person
//! would type are sent one step at a time: each step waits for the text that says the program is
//! ready and then for the output to go quiet, and the offset reached there is kept as a
//! checkpoint, a moment when a person looks at a finished screen. The tests compare the screens
//! at every checkpoint and at the end.
//!
//! Per fixture `NAME`: `NAME.bytes` (everything the program wrote, raw) and `NAME.json`
//! (`{"cols": .., "rows": .., "checkpoints": [..]}`). The programs (vim, less, top, tmux, bash)
//! are installed from Debian's packages when missing; the tests use the committed files and need
//! none of them. Captures are not reproducible byte for byte (top shows the time): regenerating
//! replaces a fixture, and the tests then hold the new bytes to xterm again.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::run;

/// Where the fixtures live, relative to the workspace root.
pub const FIXTURES_DIR: &str = "tests/fixtures/screens";

/// How long the output must stay silent before a screen counts as finished.
const QUIET: Duration = Duration::from_millis(400);
/// How long a step waits for its text before the capture fails.
const PATIENCE: Duration = Duration::from_secs(20);

/// The Debian packages the programs come from (`script` is util-linux's, always there).
const PACKAGES: &[&str] = &["vim", "less", "procps", "tmux", "bash", "coreutils"];

/// Records every fixture, or only those named in `only`.
pub fn capture(only: &[String]) -> Result<()> {
    install_missing_programs()?;
    let fixtures = run::workspace_root().join(FIXTURES_DIR);
    let work = tempdir()?;
    let captured = write_sample_files(&work).and_then(|()| capture_in(&fixtures, &work, only));
    std::fs::remove_dir_all(&work).ok();
    let captured = captured?;
    if captured == 0 {
        bail!("no fixture is named {}", only.join(", "));
    }
    eprintln!("captured {captured} fixtures into {}", fixtures.display());
    Ok(())
}

/// Records the fixtures named in `only` (all when empty) with `work` as their directory;
/// returns how many.
fn capture_in(fixtures: &Path, work: &Path, only: &[String]) -> Result<usize> {
    let mut captured = 0;
    for fixture in fixtures_in(fixtures, work) {
        if !only.is_empty() && !only.iter().any(|name| name == fixture.name) {
            continue;
        }
        eprintln!(
            "capturing {} at {}x{}",
            fixture.name, fixture.cols, fixture.rows
        );
        let recording =
            record(&fixture, work).with_context(|| format!("cannot capture {}", fixture.name))?;
        recording.write(fixtures, &fixture)?;
        captured += 1;
    }
    Ok(captured)
}

/// One program run and the keys typed into it.
struct Fixture {
    name: &'static str,
    cols: u16,
    rows: u16,
    /// A shell command line, run by `script` after the terminal's size is set.
    command: String,
    steps: Vec<Step>,
}

/// What the capture does next.
enum Step {
    /// Waits for this text in the output since the previous step, then for quiet, and keeps the
    /// offset reached as a checkpoint.
    Await(&'static str),
    /// Types these bytes.
    Type(&'static [u8]),
}

use Step::{Await, Type};

/// The fixtures: each program doing what a person does with it.
fn fixtures_in(fixtures: &Path, work: &Path) -> Vec<Fixture> {
    let sample = work.join("sample.txt");
    let sample = sample.display();
    // A non-interactive shell drops PS1 from its environment: the prompt is handed over under
    // another name and set for the interactive shell alone.
    let shell = "PS1=\"$FIXTURE_PROMPT\" exec bash --norc --noprofile -i";
    vec![
        Fixture {
            name: "vim",
            cols: 80,
            rows: 24,
            // Vim's own defaults (syntax, mouse, the ruler), none of the machine's vimrc.
            command: format!("exec vim -u DEFAULTS -i NONE -N {sample}"),
            steps: vec![
                Await("sample.txt"),
                Type(b"12jw"),
                Await(""),
                Type("ihello 世界 \x1b".as_bytes()),
                Await(""),
                Type(b"Go\x1b[31mnot red, typed\x1b"),
                Await(""),
                Type(b":q\r"),
                Await("E37"),
                Type(b":q!\r"),
            ],
        },
        Fixture {
            name: "less",
            cols: 80,
            rows: 24,
            command: format!("exec less -R {sample}"),
            steps: vec![
                Await("sample.txt"),
                Type(b" "),
                Await(""),
                Type(b"/wide\r"),
                Await(""),
                Type(b"b"),
                Await(""),
                Type(b"q"),
            ],
        },
        Fixture {
            name: "top",
            cols: 100,
            rows: 30,
            // A delay longer than the capture's quiet, so a checkpoint falls between frames; top
            // shows itself alone (`$$` is its pid after `exec`), not the machine's processes.
            command: "exec top -d 3 -p $$".to_owned(),
            steps: vec![
                Await("load average"),
                Type(b"M"),
                Await("MEM"),
                Type(b"c"),
                Await(""),
                Type(b"q"),
            ],
        },
        Fixture {
            name: "shell",
            cols: 80,
            rows: 24,
            command: format!("cd {} && {shell}", work.join("files").display()),
            steps: vec![
                Await("$ "),
                Type(b"ls --color=always\r"),
                Await("$ "),
                Type(b"printf '%s\\n' '\xe6\xbc\xa2\xe5\xad\x97\xe3\x81\x8b\xe3\x81\xaa \xf0\x9f\x98\x80 e\xcc\x81 \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd done'\r"),
                Await("$ "),
                Type(b"printf '\\e[31mred \\e[1;4;38;5;208morange\\e[0;48;2;10;20;30m truecolour \\e[7minverse\\e[m\\n'\r"),
                Await("$ "),
                // A line of wide characters that meets the right edge on an odd column.
                Type(b"printf 'x'; for i in $(seq 60); do printf '\xe3\x81\x82'; done; echo\r"),
                Await("$ "),
                Type(b"seq 30\r"),
                Await("$ "),
                // A line edited before it is entered: the cursor moves back, text goes in.
                Type(b"echo end\x1b[D\x1b[D\x1b[Dthe \r"),
                Await("$ "),
                Type(b"exit\r"),
            ],
        },
        Fixture {
            name: "tmux",
            cols: 80,
            rows: 24,
            // A server of its own (a fresh one: a capture cut short leaves its server behind)
            // and a configuration that sets only the panes' shell, so the machine's tmux is not
            // touched.
            command: format!(
                "tmux -L ptyhub-fixture kill-server 2>/dev/null; \
                 exec tmux -L ptyhub-fixture -f {} new-session",
                work.join("tmux.conf").display()
            ),
            steps: vec![
                Await("$ "),
                Type(b"ls --color=always\r"),
                Await("$ "),
                Type(b"\x02%"),
                Await("$ "),
                Type(b"seq 40\r"),
                Await("$ "),
                Type(b"\x02\""),
                Await("$ "),
                Type(b"printf '\\e[1;35mmagenta \xe6\xbc\xa2\xe5\xad\x97\\e[m\\n'\r"),
                Await("$ "),
                Type(b"exit\r"),
                Await(""),
                Type(b"exit\r"),
                Await(""),
                Type(b"exit\r"),
            ],
        },
        Fixture {
            name: "agent-ui",
            cols: 100,
            rows: 30,
            command: format!("exec bash {}", fixtures.join("agent-ui.sh").display()),
            steps: vec![
                Await("Thinking"),
                Type(b"n"),
                Await(""),
                Type(b"n"),
                Await(""),
                Type(b"n"),
                Await(""),
                Type(b"n"),
                Await(""),
                Type(b"n"),
                Await(""),
                Type(b"n"),
            ],
        },
        Fixture {
            name: "alternate-screens",
            cols: 40,
            rows: 12,
            command: format!("exec bash {}", fixtures.join("alternate-screens.sh").display()),
            steps: vec![
                Await("normal"),
                Type(b"n"),
                Await(""),
                Type(b"n"),
                Await(""),
                Type(b"n"),
                Await(""),
                Type(b"n"),
                Await(""),
                Type(b"n"),
                Await(""),
                Type(b"n"),
                Await(""),
                Type(b"n"),
            ],
        },
        Fixture {
            name: "erase-attributes",
            cols: 40,
            rows: 12,
            command: format!("exec bash {}", fixtures.join("erase-attributes.sh").display()),
            steps: vec![
                Await("erase attributes"),
                Type(b"n"),
                Await(""),
                Type(b"n"),
                Await(""),
                Type(b"n"),
                Await(""),
                Type(b"n"),
                Await(""),
                Type(b"n"),
                Await(""),
                Type(b"n"),
                Await(""),
                Type(b"n"),
                Await(""),
                Type(b"n"),
            ],
        },
    ]
}

/// A program's output and the checkpoints in it.
struct Recording {
    output: Vec<u8>,
    checkpoints: Vec<usize>,
}

impl Recording {
    fn write(&self, fixtures: &Path, fixture: &Fixture) -> Result<()> {
        std::fs::create_dir_all(fixtures)
            .with_context(|| format!("cannot create {}", fixtures.display()))?;
        let bytes = fixtures.join(format!("{}.bytes", fixture.name));
        std::fs::write(&bytes, &self.output)
            .with_context(|| format!("cannot write {}", bytes.display()))?;
        let checkpoints: Vec<String> = self.checkpoints.iter().map(usize::to_string).collect();
        let meta = format!(
            "{{\"cols\": {}, \"rows\": {}, \"checkpoints\": [{}]}}\n",
            fixture.cols,
            fixture.rows,
            checkpoints.join(", ")
        );
        let meta_path = fixtures.join(format!("{}.json", fixture.name));
        std::fs::write(&meta_path, meta)
            .with_context(|| format!("cannot write {}", meta_path.display()))
    }
}

/// The output read so far, shared with the thread that reads it.
struct Output {
    state: Mutex<OutputState>,
    grew: Condvar,
}

struct OutputState {
    bytes: Vec<u8>,
    last_grew: Instant,
    /// The program closed its output: it ended.
    ended: bool,
}

/// Runs `fixture` to its end and returns what it wrote.
fn record(fixture: &Fixture, work: &Path) -> Result<Recording> {
    let command_line = format!(
        "stty rows {} cols {}; {}",
        fixture.rows, fixture.cols, fixture.command
    );
    let mut child = Command::new("script")
        // Quiet, no log file (the output is read from stdout), the pty echoing what is typed as
        // a terminal does, and the program's exit status as script's.
        .args([
            "--quiet",
            "--echo",
            "always",
            "--log-out",
            "/dev/null",
            "--return",
        ])
        .arg("--command")
        .arg(&command_line)
        .current_dir(work)
        .env("TERM", "xterm-256color")
        // `script` runs the command with $SHELL -c: the same shell whoever captures.
        .env("SHELL", "/bin/sh")
        .env("LANG", "C.UTF-8")
        .env("HOME", work)
        .env(
            "FIXTURE_PROMPT",
            "\\[\\e[1;32m\\]fixture\\[\\e[m\\]:\\[\\e[1;34m\\]\\W\\[\\e[m\\]$ ",
        )
        .env_remove("TMUX")
        .env_remove("LESS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot run util-linux's script")?;
    let output = Arc::new(Output {
        state: Mutex::new(OutputState {
            bytes: Vec::new(),
            last_grew: Instant::now(),
            ended: false,
        }),
        grew: Condvar::new(),
    });
    let reader = read_output(&mut child, Arc::clone(&output))?;
    let mut stdin = child.stdin.take().context("script has no stdin")?;
    let result = drive(fixture, &output, &mut stdin);
    drop(stdin);
    let ended = wait_for_exit(&mut child);
    reader.join().ok();
    let checkpoints = result?;
    ended?;
    let bytes = std::mem::take(&mut output.state.lock().expect("output lock").bytes);
    Ok(Recording {
        output: bytes,
        checkpoints,
    })
}

/// Reads the program's output on a thread of its own, noting when it last grew.
fn read_output(child: &mut Child, output: Arc<Output>) -> Result<std::thread::JoinHandle<()>> {
    let mut stdout = child.stdout.take().context("script has no stdout")?;
    Ok(std::thread::spawn(move || {
        let mut buffer = [0u8; 8192];
        loop {
            let read = stdout.read(&mut buffer).unwrap_or(0);
            let mut state = output.state.lock().expect("output lock");
            if read == 0 {
                state.ended = true;
                output.grew.notify_all();
                return;
            }
            state.bytes.extend_from_slice(&buffer[..read]);
            state.last_grew = Instant::now();
            output.grew.notify_all();
        }
    }))
}

/// Types the fixture's keys, each after its screen is ready; returns the checkpoints.
fn drive(fixture: &Fixture, output: &Output, stdin: &mut ChildStdin) -> Result<Vec<usize>> {
    let mut checkpoints = Vec::new();
    let mut since = 0;
    for step in &fixture.steps {
        match step {
            Await(text) => {
                let at = await_quiet_text(output, since, text)?;
                checkpoints.push(at);
                since = at;
            }
            Type(keys) => {
                stdin
                    .write_all(keys)
                    .context("cannot type into the program")?;
                stdin.flush().context("cannot type into the program")?;
            }
        }
    }
    Ok(checkpoints)
}

/// Waits until the output after `since` holds `text` and has then been quiet for [`QUIET`];
/// returns its length then.
fn await_quiet_text(output: &Output, since: usize, text: &str) -> Result<usize> {
    let deadline = Instant::now() + PATIENCE;
    let mut state = output.state.lock().expect("output lock");
    loop {
        let bytes = &state.bytes;
        let seen = contains(&bytes[since.min(bytes.len())..], text.as_bytes());
        let quiet_for = state.last_grew.elapsed();
        if seen && quiet_for >= QUIET && bytes.len() > since {
            return Ok(bytes.len());
        }
        if state.ended {
            bail!("the program ended before it showed {text:?}");
        }
        let now = Instant::now();
        if now >= deadline {
            let tail = &bytes[bytes.len().saturating_sub(300)..];
            bail!(
                "no {text:?} in the output within {PATIENCE:?}; it ends with {:?}",
                String::from_utf8_lossy(tail)
            );
        }
        let wait = if seen {
            QUIET - quiet_for.min(QUIET)
        } else {
            deadline - now
        };
        state = output
            .grew
            .wait_timeout(state, wait.max(Duration::from_millis(10)))
            .expect("output lock")
            .0;
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty()
        || haystack
            .windows(needle.len())
            .any(|window| window == needle)
}

/// Waits for `script` (and the program in it) to end after the last key.
fn wait_for_exit(child: &mut Child) -> Result<()> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = child.try_wait().context("cannot wait for script")? {
            if !status.success() {
                bail!("the program ended with {status}");
            }
            return Ok(());
        }
        if Instant::now() >= deadline {
            child.kill().ok();
            child.wait().ok();
            bail!("the program did not end within {PATIENCE:?} after its last key");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The files the programs show: a text with long lines, colours and wide characters for vim and
/// less, and a directory of every kind of entry `ls --color` paints for the shells.
fn write_sample_files(work: &Path) -> Result<()> {
    let mut text = String::new();
    for line in 1..=120 {
        match line % 10 {
            0 => text.push_str(&format!(
                "{line:>3} \x1b[1;32mgreen\x1b[m and \x1b[44mblue background\x1b[m\n"
            )),
            3 => text.push_str(&format!(
                "{line:>3} wide 漢字とかな and an emoji 😀 between words\n"
            )),
            7 => text.push_str(&format!(
                "{line:>3} a long line that goes on past the edge of an eighty column terminal so that it wraps once\n"
            )),
            _ => text.push_str(&format!("{line:>3} fn line_{line}() -> usize {{ {line} }}\n")),
        }
    }
    let tmux_conf = work.join("tmux.conf");
    let pane_shell = format!(
        "set -g default-command 'cd {} && PS1=\"$FIXTURE_PROMPT\" exec bash --norc --noprofile -i'\n",
        work.join("files").display()
    );
    std::fs::write(&tmux_conf, pane_shell)
        .with_context(|| format!("cannot write {}", tmux_conf.display()))?;
    let sample = work.join("sample.txt");
    std::fs::write(&sample, text).with_context(|| format!("cannot write {}", sample.display()))?;
    let files = work.join("files");
    std::fs::create_dir_all(files.join("directory"))?;
    std::fs::write(files.join("notes.txt"), "notes\n")?;
    std::fs::write(files.join("archive.tar.gz"), "")?;
    std::fs::write(files.join("run.sh"), "#!/bin/sh\n")?;
    run::status(Command::new("chmod").arg("+x").arg(files.join("run.sh")))?;
    std::os::unix::fs::symlink("notes.txt", files.join("link-to-notes"))?;
    std::os::unix::fs::symlink("nowhere", files.join("broken-link"))?;
    Ok(())
}

fn tempdir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("ptyhub-screen-fixtures-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

/// Installs the programs the fixtures run, from Debian, when one is missing.
fn install_missing_programs() -> Result<()> {
    let programs = ["vim", "less", "top", "tmux", "bash", "script"];
    let missing = programs.iter().any(|program| {
        !run::succeeds(Command::new("sh").args(["-c", &format!("command -v {program}")]))
    });
    if missing {
        run::install_debian_packages(PACKAGES)?;
    }
    Ok(())
}
