//! `ptyhub up` as a user starts it: the gateway answers on the printed address, serves the page,
//! takes the printed token and no other, and a restart on the same data directory keeps the
//! token, the instances and the session history.

use crate::support::{PATIENCE, TEST_PAGE, Up, eventually};

#[test]
fn up_serves_health_page_and_api_to_the_printed_token_only() {
    let up = Up::start();

    let health = up.get("/healthz", None);
    assert_eq!(health.status, 200, "healthz: {}", health.body);
    assert!(health.body.contains("ok"), "healthz body: {}", health.body);

    let page = up.get("/", None);
    assert_eq!(page.status, 200, "the page: {}", page.body);
    assert_eq!(
        page.body, TEST_PAGE,
        "the page served is --web-dir's index.html, byte for byte"
    );

    let instances = up.get("/api/v1/instances", Some(&up.token));
    assert_eq!(
        instances.status, 200,
        "with the printed token: {}",
        instances.body
    );
    let instances: serde_json::Value =
        serde_json::from_str(&instances.body).expect("instances JSON");
    let names: Vec<&str> = instances["instances"]
        .as_array()
        .expect("an instances array")
        .iter()
        .filter_map(|instance| instance["name"].as_str())
        .collect();
    assert_eq!(names, ["local"], "the instance registered on first start");

    let wrong = format!("{}x", up.token);
    assert_eq!(up.get("/api/v1/instances", Some(&wrong)).status, 401);
    assert_eq!(up.get("/api/v1/instances", None).status, 401);

    // The printed URL is what the user clicks; the token file is what the client commands use.
    let stored = std::fs::read_to_string(up.data_dir().join("token")).expect("token file");
    assert_eq!(stored.trim(), up.token);
    assert!(
        up.stdout().contains("Ctrl-C"),
        "says how to stop: {}",
        up.stdout()
    );
}

#[test]
fn restart_keeps_token_instances_and_session_history() {
    let up = Up::start();
    let first_token = up.token.clone();
    up.run_ok(&["instance", "add", "second", "--local"]);
    up.run_ok(&["new", "local", "--name", "kept-live", "--alias", "kept"]);
    let exec = up.run(&["exec", "local", "--", "sh", "-c", "echo history"]);
    assert!(exec.status.success(), "exec: {exec:?}");
    let before = up.sessions("local");
    assert_eq!(
        before.len(),
        2,
        "one live and one closed session: {before:?}"
    );
    let (data_dir, web_dir) = up.stop();

    let up = Up::start_on(data_dir, web_dir);
    assert_eq!(up.token, first_token, "the token is generated once");
    let health = up.get("/healthz", None);
    assert_eq!(health.status, 200, "healthz after restart: {}", health.body);
    assert_eq!(
        up.get("/api/v1/instances", Some(&first_token)).status,
        200,
        "the old token still works"
    );

    let instances: serde_json::Value =
        serde_json::from_str(&up.run_ok(&["--json", "instance", "ls"])).expect("JSON");
    let mut names: Vec<&str> = instances["instances"]
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|instance| instance["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["local", "second"]);

    let after = up.sessions("local");
    let ids = |sessions: &[serde_json::Value]| {
        let mut ids: Vec<String> = sessions
            .iter()
            .map(|session| session["id"].as_str().expect("id").to_owned())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&after), ids(&before), "the session history survives");
    assert!(
        after.iter().any(|session| session["name"] == "kept-live"),
        "the named session is still listed: {after:?}"
    );
    // Its process did not survive the stop; its record says so (at once, or once session-api
    // has compared its records with the restarted broker).
    eventually("the stopped session is no longer live", || {
        up.sessions("local")
            .iter()
            .any(|session| session["name"] == "kept-live" && session["status"] == "closed")
    });

    // The restarted system is usable: a new session works on the old records.
    up.run_ok(&["new", "local", "--name", "after-restart"]);
    eventually("the new session is listed live", || {
        up.sessions("local")
            .iter()
            .any(|session| session["name"] == "after-restart" && session["status"] == "active")
    });
}

#[test]
fn upgrade_hands_live_sessions_to_the_new_process_and_ends_none() {
    let mut up = Up::start();
    let created: serde_json::Value =
        serde_json::from_str(&up.run_ok(&["--json", "new", "local", "--name", "kept"]))
            .expect("new --json");
    let session = created["id"].as_str().expect("an id").to_owned();
    let shell_pid = |up: &Up, name: &str| {
        let file = up.scratch.path().join(name);
        let command = format!("echo $$ > {}", file.display());
        up.run_ok(&[
            "send", "local", &session, "--text", &command, "--key", "Enter",
        ]);
        let mut pid = String::new();
        eventually(&format!("the shell wrote {name}"), || {
            pid = std::fs::read_to_string(&file).unwrap_or_default();
            pid.ends_with('\n')
        });
        pid.trim().to_owned()
    };
    let before = shell_pid(&up, "pid-before");
    let address = up.address;

    up.upgrade();
    assert_eq!(
        up.address, address,
        "the upgraded ptyhub serves the same address"
    );
    eventually("the session is still active after the upgrade", || {
        up.sessions("local")
            .iter()
            .any(|listed| listed["id"] == session.as_str() && listed["status"] == "active")
    });
    let after = shell_pid(&up, "pid-after");
    assert_eq!(after, before, "the same shell runs on after the upgrade");

    // Upgraded once more, the exit code still arrives.
    up.upgrade();
    up.run_ok(&[
        "send", "local", &session, "--text", "exit 7", "--key", "Enter",
    ]);
    let ended = up.run(&["wait", "local", &session, "never-shown"]);
    assert_eq!(ended.status.code(), Some(1), "{ended:?}");
    let stderr = String::from_utf8_lossy(&ended.stderr);
    assert!(stderr.contains("exited with code 7"), "{stderr}");
}

/// What a client connecting over and over saw of the gateway's address.
#[derive(Debug, Default)]
struct Probes {
    /// Connections refused: nothing listened on the address.
    refused: usize,
    /// Connections whose request was answered.
    answered: usize,
    /// Connections that closed or failed before an answer (a gateway stopping mid-request).
    unanswered: usize,
    /// Other failures to connect.
    failed: Vec<String>,
}

/// A thread that connects to an address over and over, asking `/livez` on each connection,
/// until it is stopped; what it saw so far can be read while it goes on.
struct Prober {
    probes: std::sync::Arc<std::sync::Mutex<Probes>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Prober {
    fn start(address: std::net::SocketAddr) -> Self {
        let probes = std::sync::Arc::default();
        let stop = std::sync::Arc::default();
        let thread = std::thread::spawn({
            let probes = std::sync::Arc::clone(&probes);
            let stop = std::sync::Arc::clone(&stop);
            move || probe_until(address, &probes, &stop)
        });
        Self {
            probes,
            stop,
            thread,
        }
    }

    /// How many of its requests were answered so far.
    fn answered(&self) -> usize {
        self.probes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .answered
    }

    /// Waits until `more` requests beyond those answered so far are answered: whoever
    /// listens on the address now has served some.
    fn wait_for_answers(&self, more: usize) {
        let target = self.answered() + more;
        eventually(&format!("{target} probes answered"), || {
            self.answered() >= target
        });
    }

    /// Stops probing, and says what it saw.
    fn stop(self) -> Probes {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().expect("the prober");
        std::sync::Arc::try_unwrap(self.probes)
            .expect("the prober's thread has ended")
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Connects to `address` over and over until `stop`, asking `/livez` on each connection and
/// counting in `probes` what became of it.
fn probe_until(
    address: std::net::SocketAddr,
    probes: &std::sync::Mutex<Probes>,
    stop: &std::sync::atomic::AtomicBool,
) {
    use std::io::{BufRead as _, Write as _};
    let count = |record: &dyn Fn(&mut Probes)| {
        record(
            &mut probes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
    };
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let stream = match std::net::TcpStream::connect_timeout(&address, PATIENCE) {
            Ok(stream) => stream,
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => {
                count(&|probes| probes.refused += 1);
                continue;
            }
            Err(error) => {
                count(&|probes| probes.failed.push(error.to_string()));
                continue;
            }
        };
        let _ = stream.set_read_timeout(Some(PATIENCE));
        let request =
            format!("GET /livez HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
        let mut status = String::new();
        let answered = (&stream).write_all(request.as_bytes()).is_ok()
            && std::io::BufReader::new(&stream)
                .read_line(&mut status)
                .is_ok_and(|read| read > 0)
            && status.starts_with("HTTP/1.1 200");
        if answered {
            count(&|probes| probes.answered += 1);
        } else {
            count(&|probes| probes.unanswered += 1);
        }
    }
}

/// `--upgrade` hands the listening socket itself to the new process, which serves it on: the
/// address is never free, so a client connecting throughout is never refused (a connection made
/// while neither gateway accepts waits in the socket's queue).
#[test]
fn upgrade_never_refuses_a_connection_to_the_address() {
    let mut up = Up::start();
    let address = up.address;
    // The prober is connecting before the upgrade starts, and the new process has answered it
    // before it stops: the old one has exited when `upgrade` returns, and of two answers
    // counted after that at most one (the request in flight) can be the old process's.
    let prober = Prober::start(address);
    prober.wait_for_answers(1);
    up.upgrade();
    assert_eq!(up.address, address);
    prober.wait_for_answers(2);
    let probes = prober.stop();
    assert_eq!(
        probes.refused, 0,
        "connections refused during the upgrade: {probes:?}"
    );
    assert!(probes.failed.is_empty(), "{probes:?}");
    // And once more: the new process offers the socket on in turn.
    let prober = Prober::start(address);
    prober.wait_for_answers(1);
    up.upgrade();
    prober.wait_for_answers(2);
    let probes = prober.stop();
    assert_eq!(
        probes.refused, 0,
        "connections refused during the second upgrade: {probes:?}"
    );
    assert!(probes.failed.is_empty(), "{probes:?}");
    assert_eq!(up.get("/healthz", None).status, 200);
}

#[test]
fn upgrade_without_a_running_ptyhub_is_refused_with_a_reason() {
    let data_dir = tempfile::tempdir().expect("data dir");
    let mut command = crate::support::ptyhub_command();
    command.arg("--data-dir").arg(data_dir.path()).args([
        "up",
        "--listen",
        "127.0.0.1:0",
        "--backend",
        "local",
        "--upgrade",
    ]);
    let output = crate::support::run_bounded(&mut command, None);
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--upgrade") && stderr.contains("no ptyhub up runs"),
        "{stderr}"
    );
}

/// What a viewer attached from offset 0 read until the session printed `marker`: the bytes, and
/// how many times its stream was resumed (with `since`) after a drop.
struct Watched {
    output: Vec<u8>,
    resumed: usize,
}

/// Watches `session` from its first byte on a thread of its own, as a client of the gateway at
/// `address` that reconnects by itself, until its output holds `marker`.
fn watch_until(
    address: std::net::SocketAddr,
    token: String,
    session: String,
    marker: &'static str,
) -> std::thread::JoinHandle<Result<Watched, String>> {
    use ptyhub_client::{AttachOptions, Client, Event, Role};
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let watching = async {
                let client = Client::connect(&format!("http://{address}"), &token)
                    .await
                    .map_err(|error| format!("connect: {error}"))?;
                let options = AttachOptions {
                    role: Role::Viewer,
                    since: Some(0),
                    ..AttachOptions::default()
                };
                let mut attachment = client
                    .attach("local", &session, options)
                    .await
                    .map_err(|error| format!("attach: {error}"))?;
                let mut watched = Watched {
                    output: Vec::new(),
                    resumed: 0,
                };
                loop {
                    match attachment.next().await {
                        Ok(Some(Event::Output { offset, data })) => {
                            if offset != watched.output.len() as u64 {
                                return Err(format!(
                                    "output at offset {offset} after {} bytes",
                                    watched.output.len()
                                ));
                            }
                            watched.output.extend_from_slice(&data);
                            if String::from_utf8_lossy(&watched.output).contains(marker) {
                                return Ok(watched);
                            }
                        }
                        Ok(Some(Event::Connected {
                            offset, resumed, ..
                        })) => {
                            if offset != watched.output.len() as u64 {
                                return Err(format!(
                                    "a stream resumed at {offset} after {} bytes",
                                    watched.output.len()
                                ));
                            }
                            watched.resumed += usize::from(resumed);
                        }
                        Ok(Some(Event::Gap { lost, .. })) => {
                            return Err(format!("{lost} bytes lost"));
                        }
                        Ok(Some(_)) => {}
                        Ok(None) => return Err("the attachment ended".to_owned()),
                        Err(error) => return Err(format!("the attachment failed: {error}")),
                    }
                }
            };
            tokio::time::timeout(PATIENCE, watching)
                .await
                .unwrap_or_else(|_| Err(format!("no {marker:?} within {PATIENCE:?}")))
        })
    })
}

#[test]
fn output_across_an_upgrade_reaches_a_reattaching_client_exactly_once() {
    let mut up = Up::start();
    let created: serde_json::Value =
        serde_json::from_str(&up.run_ok(&["--json", "new", "local", "--name", "ticking"]))
            .expect("new --json");
    let session = created["id"].as_str().expect("an id").to_owned();
    let watcher = watch_until(
        up.address,
        up.token.clone(),
        session.clone(),
        "ticks-42-done",
    );
    // Numbered lines until the test lets the loop end, after the upgrade. (Not in `up.scratch`:
    // the upgraded `Up` has a scratch directory of its own.)
    let scratch = tempfile::tempdir().expect("scratch");
    let stop = scratch.path().join("stop");
    let ticking = format!(
        "i=0; while [ ! -e {} ]; do echo tick-$i; i=$((i+1)); sleep 0.02; done; echo ticks-$((6*7))-done",
        stop.display()
    );
    up.run_ok(&[
        "send", "local", &session, "--text", &ticking, "--key", "Enter",
    ]);
    up.run_ok(&["wait", "local", &session, "tick-5\\b"]);

    up.upgrade();
    std::fs::write(&stop, b"").expect("the stop file");

    let watched = watcher
        .join()
        .expect("the watcher thread")
        .unwrap_or_else(|error| panic!("the watching client: {error}"));
    assert!(
        watched.resumed >= 1,
        "the client's stream never dropped: the upgrade did not happen under it"
    );
    let text = without_osc(&String::from_utf8_lossy(&watched.output));
    let ticks: Vec<u64> = text
        .split("\r\n")
        .filter_map(|line| line.strip_prefix("tick-")?.parse().ok())
        .collect();
    let expected: Vec<u64> = (0..ticks.len() as u64).collect();
    assert_eq!(
        ticks, expected,
        "every numbered line exactly once and in order"
    );
}

/// `text` without its OSC sequences (`ESC ]` to BEL or ST): what a terminal shows of a line. A
/// shell with integration marks a command's output start (OSC 133 C) on the line the output's
/// first line follows.
fn without_osc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("\x1b]") {
        out.push_str(&rest[..start]);
        let sequence = &rest[start..];
        let end = match (sequence.find('\x07'), sequence.find("\x1b\\")) {
            (Some(bell), Some(st)) if st < bell => st + 2,
            (Some(bell), _) => bell + 1,
            (None, Some(st)) => st + 2,
            (None, None) => sequence.len(),
        };
        rest = &sequence[end..];
    }
    out.push_str(rest);
    out
}
