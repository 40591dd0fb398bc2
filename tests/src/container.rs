//! A throwaway container of the test image (`cargo xtask deps` builds it), driven with the
//! `docker` command and removed (forcibly) when dropped, even when the test fails.

/// The image the tests' containers run: static busybox, users `root` and `tester`.
pub const TEST_IMAGE: &str = "ptyhub-test-busybox:latest";

/// How long a test container runs at most: its command is `sleep` for this long, so one whose
/// test was killed before its drop (a timeout) stops by itself, and `cargo xtask test` removes
/// it at its next start.
const LIFETIME_SECONDS: &str = "3600";

/// A running container of [`TEST_IMAGE`] with no network, whose command is `sleep`.
#[derive(Debug)]
pub struct Container {
    pub name: String,
}

impl Container {
    /// A container with Docker's init as its first process, which reaps orphans.
    pub async fn start() -> Self {
        Self::run(true).await
    }

    /// A container whose first process is `sleep` itself, with no init to reap or end
    /// anything, as in many images.
    pub async fn start_without_init() -> Self {
        let container = Self::run(false).await;
        let first = container
            .exec(&["cat", "/proc/1/cmdline"])
            .await
            .unwrap_or_default()
            .replace('\0', " ");
        assert_eq!(
            first.trim(),
            format!("sleep {LIFETIME_SECONDS}"),
            "no init in the container"
        );
        container
    }

    async fn run(init: bool) -> Self {
        let name = format!("ptyhub-e2e-{}", uuid::Uuid::new_v4().simple());
        let output = tokio::process::Command::new("docker")
            .args([
                "run",
                "--detach",
                &format!("--init={init}"),
                "--network=none",
            ])
            .args(["--label=ptyhub.test=1", "--name", &name])
            .args([TEST_IMAGE, "sleep", LIFETIME_SECONDS])
            .output()
            .await
            .expect("docker runs");
        assert!(
            output.status.success(),
            "docker run (is the test image built? cargo xtask deps builds it): {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Self { name }
    }

    /// The output of `command` run in the container, when it succeeds.
    pub async fn exec(&self, command: &[&str]) -> Option<String> {
        let output = tokio::process::Command::new("docker")
            .args(["exec", &self.name])
            .args(command)
            .output()
            .await
            .ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// The live processes (`pid stat args`) other than the container's first process (and its
    /// child, with an init) and the listing itself. Zombies are dead and counted as gone:
    /// without an init nothing reaps the orphans among them.
    pub async fn live_processes(&self) -> Vec<String> {
        let listing = self
            .exec(&["ps", "-o", "pid,stat,args"])
            .await
            .expect("ps runs in the container");
        listing
            .lines()
            .skip(1)
            .filter(|line| {
                let mut fields = line.split_whitespace();
                let pid = fields.next().unwrap_or_default();
                let state = fields.next().unwrap_or_default();
                let command = fields.collect::<Vec<_>>().join(" ");
                pid != "1"
                    && !state.starts_with('Z')
                    && command != "ps -o pid,stat,args"
                    && command != format!("sleep {LIFETIME_SECONDS}")
            })
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let removed = std::process::Command::new("docker")
            .args(["rm", "--force", "--volumes", &self.name])
            .output();
        if !removed.is_ok_and(|output| output.status.success()) {
            eprintln!("cannot remove test container {}", self.name);
        }
    }
}
