//! `cargo xtask dist`: the `ptyhub` binary as users get it. Builds the web page, then `ptyhub` in
//! release with the page inside (`services/gateway/build.rs` embeds `web/dist`), copies it to
//! `dist/ptyhub` under the target dir, strips it, checks that the copy starts on its own and
//! serves the page it carries, and prints its path and size.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::{run, web};

/// How long the copy may take to print its banner (a first start creates its database).
const START_PATIENCE: Duration = Duration::from_secs(60);

pub fn dist() -> Result<()> {
    let root = run::workspace_root();
    web::build_page(&root)?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut build = Command::new(cargo);
    build
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "cli",
            "--bin",
            "ptyhub",
        ])
        .current_dir(&root);
    without_xtask_package_variables(&mut build);
    run::status(&mut build)?;
    let target = run::target_dir();
    let built = target.join("release").join("ptyhub");
    let directory = target.join("dist");
    std::fs::create_dir_all(&directory)
        .with_context(|| format!("cannot create {}", directory.display()))?;
    let binary = directory.join("ptyhub");
    // A copy still running from a former `dist` would make the copy fail (text file busy).
    if let Err(error) = std::fs::remove_file(&binary)
        && error.kind() != std::io::ErrorKind::NotFound
    {
        return Err(error).with_context(|| format!("cannot replace {}", binary.display()));
    }
    std::fs::copy(&built, &binary)
        .with_context(|| format!("cannot copy {} to {}", built.display(), binary.display()))?;
    let built_size = size(&built)?;
    strip(&binary)?;
    check(&binary)?;
    let stripped_size = size(&binary)?;
    println!(
        "{}: {} ({} as built, before stripping)",
        binary.display(),
        mebibytes(stripped_size),
        mebibytes(built_size)
    );
    Ok(())
}

/// Takes away what `cargo run` told xtask about its own package (`CARGO_MANIFEST_DIR`,
/// `CARGO_PKG_NAME`, ...). ring's build script watches some of these variables, so with them
/// this build and a plain `cargo build --release` would each rebuild ring and everything above
/// it after the other.
fn without_xtask_package_variables(command: &mut Command) {
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || matches!(
                name,
                "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE"
            )
        {
            command.env_remove(name);
        }
    }
}

/// Strips symbols and the release profile's line tables (binutils' `strip`, installed from
/// Debian when missing): four fifths of the file, which nothing at run time reads (panics then
/// print no file and line). Stripping the copy keeps the release build's artifacts shared with a
/// plain `cargo build --release`; `CARGO_PROFILE_RELEASE_STRIP=symbols` would rebuild every crate
/// for the same size (within 0.1%).
fn strip(binary: &Path) -> Result<()> {
    if !run::succeeds(Command::new("strip").arg("--version")) {
        run::install_debian_packages(&["binutils"])?;
    }
    run::status(Command::new("strip").arg("--strip-all").arg(binary))
}

/// The binary answers `--version`, and `ptyhub up` from it, in an empty directory with no web
/// directory named anywhere, serves the page built into it.
fn check(binary: &Path) -> Result<()> {
    let version = Command::new(binary)
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {} --version", binary.display()))?;
    let printed = String::from_utf8_lossy(&version.stdout);
    if !version.status.success() || !printed.starts_with("ptyhub ") {
        bail!(
            "{} --version printed {printed:?} ({})",
            binary.display(),
            version.status
        );
    }
    eprintln!("{}", printed.trim());

    let home = std::env::temp_dir().join(format!("ptyhub-dist-check-{}", std::process::id()));
    let empty = home.join("empty");
    std::fs::create_dir_all(&empty)
        .with_context(|| format!("cannot create {}", empty.display()))?;
    let data_dir = home.join("data");
    let mut up = Command::new(binary);
    up.arg("--data-dir")
        .arg(&data_dir)
        .args(["up", "--listen", "127.0.0.1:0", "--backend", "local"])
        .current_dir(&empty)
        .env_remove("PTYHUB_WEB_DIR")
        .env_remove("PTYHUB_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    eprintln!(
        "$ {} --data-dir {} up ...",
        binary.display(),
        data_dir.display()
    );
    let mut child = up
        .spawn()
        .with_context(|| format!("cannot start {} up", binary.display()))?;
    let served = address(&mut child).and_then(|address| serves_page(&address));
    stop(&mut child);
    let _ = std::fs::remove_dir_all(&home);
    served
}

/// The `host:port` of the banner's `web page:` line, once `ptyhub up` has printed it.
fn address(child: &mut Child) -> Result<String> {
    let stdout = child.stdout.take().context("the child's stdout")?;
    let (lines, banner) = mpsc::channel();
    // The reader ends with the child's stdout; it only ever sends what it read.
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + START_PATIENCE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match banner.recv_timeout(left) {
            Ok(line) => {
                let url = line.trim().strip_prefix("web page:").map(str::trim);
                if let Some(address) = url
                    .and_then(|url| url.strip_prefix("http://"))
                    .and_then(|rest| rest.split('/').next())
                {
                    return Ok(address.to_owned());
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                bail!("ptyhub up printed no web page address within {START_PATIENCE:?}")
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait().context("waiting for ptyhub up")?;
                bail!("ptyhub up ended before it printed its address ({status})")
            }
        }
    }
}

/// `GET /` answers 200 with the HTML of the page (which loads `assets/app.js`).
fn serves_page(address: &str) -> Result<()> {
    let mut stream = TcpStream::connect(address)
        .with_context(|| format!("cannot connect to ptyhub up at {address}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET / HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .context("reading the answer to GET /")?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let head_lower = head.to_ascii_lowercase();
    let status_ok = head
        .lines()
        .next()
        .is_some_and(|line| line.contains(" 200 "));
    if !status_ok
        || !head_lower.contains("content-type: text/html")
        || !body.contains("assets/app.js")
    {
        bail!("GET / from the built binary did not answer with the page:\n{response}");
    }
    eprintln!(
        "GET http://{address}/: 200, the page ({} bytes)",
        body.len()
    );
    Ok(())
}

/// SIGTERM (what `ptyhub up` stops on, as on Ctrl-C), then SIGKILL if it has not ended in time.
fn stop(child: &mut Child) {
    let terminated = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .is_ok_and(|status| status.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    while terminated && Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn size(path: &Path) -> Result<u64> {
    Ok(std::fs::metadata(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .len())
}

fn mebibytes(bytes: u64) -> String {
    format!("{bytes} bytes, {:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}
