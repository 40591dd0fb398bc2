//! The web page: building it from `web/` with npm and esbuild into `web/dist/` (which
//! `services/gateway/build.rs` puts into the binaries), checking its JavaScript (tsc on the JSDoc types,
//! eslint), and running its browser tests (node's test runner driving Debian's Chromium through
//! playwright-core) against a `ptyhub up` that the tests start themselves.
//!
//! What the tests expect: `node` and `npm` (Debian's `nodejs` and `npm` are installed when
//! missing), Chromium at `PTYHUB_TEST_CHROMIUM` or `/usr/bin/chromium` (Debian's `chromium` is
//! installed when missing; nothing is downloaded by Playwright), the `ptyhub` binary in
//! `PTYHUB_BINARY` and the built page in `PTYHUB_WEB_DIR`. Under `CI=true` a missing piece fails
//! the run instead of skipping the tests.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{deps, run};

/// Where the page's npm project lives, relative to the workspace root.
const WEB_DIR: &str = "web";
/// Chromium as Debian installs it; `PTYHUB_TEST_CHROMIUM` overrides.
const DEFAULT_CHROMIUM: &str = "/usr/bin/chromium";

/// Installs the page's npm dependencies (`npm ci` from the lockfile, `npm install` without one)
/// and bundles the page. Returns the directory the gateway serves (`--web-dir`): it holds
/// `index.html` and `assets/app.js`, `assets/app.css` (with their source maps).
pub fn build_page(root: &Path) -> Result<PathBuf> {
    let web = root.join(WEB_DIR);
    install_packages(root)?;
    run::status(Command::new("npm").args(["run", "build"]).current_dir(&web))?;
    let dist = web.join("dist");
    if !dist.join("index.html").is_file() || !dist.join("assets").join("app.js").is_file() {
        bail!(
            "the page build finished but {} lacks index.html or assets/app.js",
            dist.display()
        );
    }
    Ok(dist)
}

/// Node, npm and the page's npm packages (`npm ci` from the lockfile, `npm install` without
/// one): the page's build and the screen oracle (`web/test/screen-oracle.mjs`, which the
/// broker's tests run on `@xterm/headless`) need them.
pub fn install_packages(root: &Path) -> Result<()> {
    let web = root.join(WEB_DIR);
    ensure_node()?;
    let install = if web.join("package-lock.json").is_file() {
        "ci"
    } else {
        "install"
    };
    run::status(
        Command::new("npm")
            .args([install, "--no-audit", "--no-fund"])
            .current_dir(&web),
    )
}

/// The page's type check (`tsc --noEmit` over `web/jsconfig.json`: `checkJs` on the JSDoc
/// types) and linter (`eslint`), both installed by `npm ci` from the page's lockfile.
pub fn check_page(root: &Path) -> Result<()> {
    let web = root.join(WEB_DIR);
    ensure_node()?;
    if !web.join("node_modules").is_dir() {
        run::status(
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(&web),
        )?;
    }
    run::status(Command::new("npm").args(["run", "check"]).current_dir(&web))
}

/// Runs the browser tests against `ptyhub_binary` (its `up` command) with the page built in
/// `dist`, which the binary must have been built after (the binary test loads the page built in),
/// and `variables` in their environment (among them the run's skip list, which a test file that
/// cannot run outside CI appends its `SKIP:` line to).
pub fn run_browser_tests(
    root: &Path,
    dist: &Path,
    ptyhub_binary: &Path,
    variables: &[(String, String)],
) -> Result<()> {
    if !ptyhub_binary.is_file() {
        bail!(
            "no ptyhub binary at {} (build it with `cargo build -p cli` first)",
            ptyhub_binary.display()
        );
    }
    let chromium = ensure_chromium()?;
    let binary = ptyhub_binary
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", ptyhub_binary.display()))?;
    let mut command = Command::new("npm");
    command
        .args(["test"])
        .current_dir(root.join(WEB_DIR))
        .envs(variables.iter().map(|(name, value)| (name, value)))
        .env("PTYHUB_BINARY", &binary)
        .env("PTYHUB_WEB_DIR", dist);
    if let Some(chromium) = chromium {
        command.env("PTYHUB_TEST_CHROMIUM", chromium);
    }
    run::status(&mut command)
}

/// Node and npm, from Debian's packages when they are missing.
fn ensure_node() -> Result<()> {
    if tool_runs("node") && tool_runs("npm") {
        return Ok(());
    }
    run::install_debian_packages(&["nodejs", "npm"])?;
    if !(tool_runs("node") && tool_runs("npm")) {
        bail!("node and npm are still missing after installing Debian's nodejs and npm");
    }
    Ok(())
}

/// The Chromium the tests drive. Installs Debian's package when the default path is missing;
/// outside CI a failure leaves the tests to skip with their own reason.
fn ensure_chromium() -> Result<Option<PathBuf>> {
    if let Some(configured) = std::env::var_os("PTYHUB_TEST_CHROMIUM") {
        return Ok(Some(PathBuf::from(configured)));
    }
    let default = PathBuf::from(DEFAULT_CHROMIUM);
    if default.is_file() {
        return Ok(Some(default));
    }
    match run::install_debian_packages(&["chromium"]) {
        Ok(()) if default.is_file() => Ok(Some(default)),
        Ok(()) => bail!("Debian's chromium package installed no {DEFAULT_CHROMIUM}"),
        Err(error) if deps::in_ci() => Err(error.context("Chromium is required under CI=true")),
        Err(error) => {
            eprintln!("warning: Chromium unavailable, the browser tests will skip: {error:#}");
            Ok(None)
        }
    }
}

fn tool_runs(program: &str) -> bool {
    run::succeeds(Command::new(program).arg("--version"))
}
