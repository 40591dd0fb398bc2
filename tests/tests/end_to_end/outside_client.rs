//! Clients outside the cluster, with the gateway's address alone: the services run in a network
//! namespace of their own ([`tests::isolated`]), so the broker is not reachable from the client
//! at any address, and only the gateway's port is, through an ingress. `ptyhub attach`,
//! `ptyhub exec`, the Rust client library and the Python example each stream a command's output
//! while the gateway is killed and restarted mid-stream, and each gets every byte once; Python's
//! `grpcio-reflection` lists the services on the gateway's port and calls `ListInstances` with
//! no .proto file.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ptyhub_client::{AttachOptions, Client, Event, NewSession};
use ptyhub_test_support::Requirement;
use tests::binaries::binary;
use tests::isolated::IsolatedStack;

/// Generous: a liveness bound, never a performance assertion.
const PATIENCE: Duration = Duration::from_secs(90);
/// Lines every client must have shown before the gateway is killed.
const LINES_BEFORE_KILL: usize = 100;

/// A shell loop printing `line 1`, `line 2`, ... with a pause every 50 lines until `stop` exists,
/// then `exit 3`: the test creates `stop` once the gateway has restarted, so the restart falls
/// inside every stream however slow the machine. (It also stops after a million lines, half an
/// hour, so that a failed test leaves no endless process.)
fn numbered_lines(stop: &Path) -> String {
    format!(
        "i=1; while [ ! -e '{}' ] && [ $i -le 1000000 ]; do echo \"line $i\"; [ $((i % 50)) -eq 0 ] && sleep 0.1; i=$((i+1)); done; exit 3",
        stop.display()
    )
}

/// `line 1` .. `line {lines}`, each ending in `\n`.
fn expected_lines(lines: usize) -> String {
    (1..=lines).map(|line| format!("line {line}\n")).collect()
}

/// The numbered lines `output` starts with, as the command printed them if nothing was lost,
/// repeated or reordered: `line 1` up to as many lines as `output` starts with.
fn expected_prefix(output: &str) -> String {
    expected_lines(
        output
            .lines()
            .take_while(|line| line.starts_with("line "))
            .count(),
    )
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
        .to_owned()
}

/// A client process with its output in files.
struct ClientProcess {
    name: &'static str,
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl ClientProcess {
    fn start(name: &'static str, command: &mut Command, dir: &Path) -> Self {
        let stdout = dir.join(format!("{name}.out"));
        let stderr = dir.join(format!("{name}.err"));
        for (variable, _) in std::env::vars_os() {
            if variable.to_string_lossy().starts_with("PTYHUB_") {
                command.env_remove(variable);
            }
        }
        let child = command
            .stdout(std::fs::File::create(&stdout).expect("an output file"))
            .stderr(std::fs::File::create(&stderr).expect("an error file"))
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {name}: {error}"));
        Self {
            name,
            child,
            stdout,
            stderr,
        }
    }

    fn output(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.stdout).unwrap_or_default()).into_owned()
    }

    fn errors(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn lines_shown(&self) -> usize {
        self.output().matches('\n').count()
    }

    /// Waits for the process to exit and returns its exit code.
    async fn exit_code(&mut self) -> i32 {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().expect("the client's status") {
                return status.code().unwrap_or(-1);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} did not finish within {PATIENCE:?}: {}",
                self.name,
                self.errors()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for ClientProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Generates the Python stubs from `proto/` with grpcio-tools into `dir`.
fn generate_python_stubs(python: &str, dir: &Path) {
    let root = workspace_root();
    let status = Command::new(python)
        .args(["-m", "grpc_tools.protoc", "-I"])
        .arg(root.join("proto"))
        .arg(format!("--python_out={}", dir.display()))
        .arg(format!("--grpc_python_out={}", dir.display()))
        .arg(root.join("proto/ptyhub/broker/v1/broker.proto"))
        .arg(root.join("proto/ptyhub/session/v1/session.proto"))
        .status()
        .expect("grpc_tools.protoc runs");
    assert!(status.success(), "the stubs were not generated: {status}");
}

#[tokio::test]
async fn outside_clients_stream_through_the_gateway_alone_across_a_gateway_restart() {
    if !ptyhub_test_support::require(Requirement::NetworkNamespaces)
        || !ptyhub_test_support::require(Requirement::Python)
    {
        return;
    }
    let python = ptyhub_test_support::environment::python_path();
    let mut stack = IsolatedStack::start()
        .await
        .expect("the isolated stack starts");
    let url = stack.gateway_url();
    let token = stack.token();
    let work = tempfile::tempdir().expect("a work directory");

    // The only instance, registered through the gateway like everything else.
    let http = ptyhub_test_support::http::client()
        .build()
        .expect("an HTTP client");
    let registered = http
        .post(format!("{url}/api/v1/instances"))
        .bearer_auth(token)
        .json(&serde_json::json!({
            "name": "local",
            "target": {"local": {}},
            "command": ["/bin/sh"],
            "max_sessions": 10,
        }))
        .send()
        .await
        .expect("register the instance");
    assert_eq!(registered.status(), 201, "{:?}", registered.text().await);

    // The broker is not reachable from here, even at the address it registered.
    let health = http
        .get(format!("{url}/healthz"))
        .bearer_auth(token)
        .send()
        .await
        .expect("healthz")
        .json::<serde_json::Value>()
        .await
        .expect("healthz JSON");
    let broker_endpoint = health["brokers"][0]["endpoint"]
        .as_str()
        .expect("the broker's registered endpoint")
        .to_owned();
    let reached = tokio::time::timeout(
        Duration::from_secs(10),
        tonic::transport::Endpoint::from_shared(broker_endpoint.clone())
            .expect("a URL")
            .connect(),
    )
    .await;
    if let Ok(Ok(channel)) = reached {
        // Something of this namespace may listen on the same port; it is not the broker.
        let answer = tonic_health::pb::health_client::HealthClient::new(channel)
            .check(tonic_health::pb::HealthCheckRequest {
                service: "ptyhub.broker.v1.PtyBroker".into(),
            })
            .await;
        assert!(
            answer.is_err(),
            "the broker answered at {broker_endpoint} from outside"
        );
    }

    // Python's reflection client: the services on the gateway's port, and ListInstances, with
    // no .proto file.
    let reflected = Command::new(&python)
        .arg(workspace_root().join("interop/grpc_reflection_client.py"))
        .arg(stack.gateway_address())
        .arg(token)
        .output()
        .expect("the reflection client runs");
    let listed = String::from_utf8_lossy(&reflected.stdout).into_owned();
    assert!(
        reflected.status.success(),
        "{listed}{}",
        String::from_utf8_lossy(&reflected.stderr)
    );
    assert!(listed.contains("ptyhub.session.v1.SessionApi"), "{listed}");
    assert!(listed.contains("ptyhub.broker.v1.PtyBroker"), "{listed}");
    assert!(listed.contains("ListInstances: ['local']"), "{listed}");

    // The four clients, each streaming its own command.
    let cli = binary("ptyhub").expect("the ptyhub binary (cargo build -p cli)");
    let stop = work.path().join("stop");
    let quiet = format!("stty -onlcr 2>/dev/null; {}", numbered_lines(&stop));
    let mut attach = ClientProcess::start(
        "ptyhub-attach",
        Command::new(&cli)
            .args(["--server", &url, "--token", token])
            .args(["attach", "local", "--alias", "attached", "--since", "0"])
            .stdin(Stdio::piped()),
        work.path(),
    );
    // attach resolves the alias and creates the session with the instance's shell: type the
    // loop into it (echo off, so only its output shows).
    // Held open to the end, as a person's terminal would be.
    let mut attach_stdin = attach.child.stdin.take().expect("attach's stdin");
    {
        use std::io::Write as _;
        writeln!(attach_stdin, "stty -echo; {quiet}").expect("type into attach");
    }
    let mut exec = ClientProcess::start(
        "ptyhub-exec",
        Command::new(&cli)
            .args(["--server", &url, "--token", token])
            .args(["exec", "local", "--", "sh", "-c", &numbered_lines(&stop)])
            .stdin(Stdio::null()),
        work.path(),
    );
    let stubs = work.path().join("stubs");
    std::fs::create_dir_all(&stubs).unwrap();
    generate_python_stubs(&python, &stubs);
    let mut python_example = ClientProcess::start(
        "python-example",
        Command::new(&python)
            .arg(workspace_root().join("examples/python/ptyhub_exec.py"))
            .arg(stack.gateway_address())
            .arg(token)
            .args(["local", "sh", "-c", &numbered_lines(&stop)])
            .env("PYTHONPATH", &stubs)
            .stdin(Stdio::null()),
        work.path(),
    );
    let library_output = Arc::new(Mutex::new(Vec::<u8>::new()));
    let library = {
        let output = library_output.clone();
        let url = url.clone();
        let command = quiet.clone();
        tokio::spawn(async move {
            let client = Client::connect(&url, token).await.expect("connect");
            let session = client
                .create_session(
                    "local",
                    NewSession {
                        command: vec!["sh".into(), "-c".into(), command],
                        ..NewSession::default()
                    },
                )
                .await
                .expect("create a session");
            let mut attachment = client
                .attach(
                    "local",
                    &session.id,
                    AttachOptions {
                        since: Some(0),
                        ..AttachOptions::default()
                    },
                )
                .await
                .expect("attach");
            let mut reconnected = false;
            loop {
                match attachment.next().await.expect("the stream resumes") {
                    Some(Event::Output { data, .. }) => {
                        output.lock().unwrap().extend_from_slice(&data);
                    }
                    Some(Event::Connected { resumed: true, .. }) => reconnected = true,
                    Some(Event::Exited(status)) => return (status.code, reconnected),
                    Some(Event::Gap { lost, .. }) => panic!("{lost} bytes lost"),
                    Some(_) => {}
                    None => panic!("the stream ended without the exit"),
                }
            }
        })
    };

    // Mid-stream for every client: kill the gateway and start another.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let library_lines = library_output
            .lock()
            .unwrap()
            .iter()
            .filter(|&&byte| byte == b'\n')
            .count();
        let shown = [
            attach.lines_shown(),
            exec.lines_shown(),
            python_example.lines_shown(),
            library_lines,
        ];
        if shown.iter().all(|&lines| lines >= LINES_BEFORE_KILL) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the clients did not all stream ({shown:?}):\nattach: {}\nexec: {}\npython: {}\n{}",
            attach.errors(),
            exec.errors(),
            python_example.errors(),
            stack.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stack
        .kill_and_restart_gateway()
        .await
        .expect("a new gateway");
    std::fs::write(&stop, b"").expect("the stop file");

    assert_eq!(exec.exit_code().await, 3, "exec: {}", exec.errors());
    let output = exec.output();
    assert_eq!(output, expected_prefix(&output), "exec's output");

    assert_eq!(
        python_example.exit_code().await,
        3,
        "python: {}",
        python_example.errors()
    );
    let output = python_example.output();
    assert_eq!(
        output,
        expected_prefix(&output),
        "the Python example's output"
    );
    let python_errors = python_example.errors();
    assert!(
        python_errors.contains("reconnecting from offset"),
        "{python_errors}"
    );
    assert!(
        python_errors.contains(&format!("attach at {url}")),
        "the attach target names the gateway: {python_errors}"
    );

    let (code, reconnected) = tokio::time::timeout(PATIENCE, library)
        .await
        .expect("the library's stream ends in time")
        .expect("the library's task");
    assert_eq!(code, 3);
    assert!(reconnected, "the library resumed after the restart");
    let output = String::from_utf8_lossy(&library_output.lock().unwrap()).into_owned();
    assert_eq!(output, expected_prefix(&output), "the library's output");

    assert_eq!(attach.exit_code().await, 3, "attach: {}", attach.errors());
    let attach_output = attach.output();
    let from_first_line = attach_output
        .find("line 1\n")
        .map(|at| &attach_output[at..])
        .unwrap_or_default();
    // After the output come only the display modes attach puts back on its way out.
    let expected = expected_prefix(from_first_line);
    assert!(
        from_first_line.starts_with(&expected),
        "attach's output after the typed command: {from_first_line:?}"
    );
    assert!(!from_first_line[expected.len()..].contains("line "));
    drop(attach_stdin);
    assert!(
        attach.errors().contains("reconnected"),
        "attach: {}",
        attach.errors()
    );
}
