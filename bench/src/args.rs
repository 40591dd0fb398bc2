//! The bench's flags, and the sizes of one run they choose: `--quick`'s, the full run's, or
//! either with some overridden.

use std::time::Duration;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "bench", about = "ptyhub benchmarks (see BENCHMARKS.md)")]
pub struct Args {
    /// Every scenario at a small size: checks that they complete and the bytes are right.
    #[arg(long)]
    pub quick: bool,
    /// Only these scenarios (comma separated): throughput, echo, ctrl-c, isolation, start, scale,
    /// snapshot, reload, handoff, commands, peers (echo beside ttyd), typing-flood, glyph.
    #[arg(long, value_delimiter = ',', value_parser = ["throughput", "echo", "ctrl-c", "isolation", "start", "scale", "snapshot", "reload", "handoff", "commands", "peers", "typing-flood", "glyph"])]
    pub only: Vec<String>,
    /// Only the paths of the throughput and latency scenarios whose label contains one of these
    /// (comma separated, any case: `docker`, `over tcp`); the floors (a), (a2) and (b) always run,
    /// so the ratios stay.
    #[arg(long, value_delimiter = ',')]
    pub paths: Vec<String>,
    /// Every session records output and input (asciicast, the server-wide default): run the
    /// same scenarios with and without it for the recording rows of BENCHMARKS.md.
    #[arg(long)]
    pub record: bool,
    /// Override the number of sessions the hand-off scenario hands to the next broker process.
    #[arg(long)]
    pub handoff_sessions: Option<usize>,
    /// Override the MiB written by each throughput run.
    #[arg(long)]
    pub flood_mib: Option<u64>,
    /// Override the number of runs of the repeated scenarios.
    #[arg(long)]
    pub repeats: Option<usize>,
    /// Override the number of sessions of the broker-memory scale scenario.
    #[arg(long)]
    pub scale_sessions: Option<usize>,
    /// Override the number of WebSockets of the gateway-memory scale scenario.
    #[arg(long)]
    pub sockets: Option<usize>,
    /// Override the number of typing sessions of the scale scenario.
    #[arg(long)]
    pub typists: Option<usize>,
    /// Override the MiB the full-screen program writes before the page loads of the reload
    /// scenario.
    #[arg(long)]
    pub reload_mib: Option<u64>,
    /// The built web page the gateway serves for the reload scenario (`npm run build` in web/).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../web/dist"))]
    pub web_dir: std::path::PathBuf,
    /// The Chromium the reload scenario drives. Default: `PTYHUB_TEST_CHROMIUM`, else
    /// `/usr/bin/chromium` (Debian's).
    #[arg(long)]
    pub chromium: Option<std::path::PathBuf>,
    /// Also write the table to this file.
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// Write every keystroke of the scale scenario's typists to this directory, a file a path
    /// (`typing-gateway.tsv`, ...): which typist, when it was sent, how long its echo took.
    #[arg(long)]
    pub typing_timeline: Option<std::path::PathBuf>,
    /// Run as the typists' client process of the scale scenario (the bench starts it itself).
    #[arg(long, hide = true)]
    pub typist_client: bool,
    /// How long the typists' client types, ms.
    #[arg(long, hide = true, default_value_t = 0)]
    pub typing_ms: u64,
}

/// A session's screen sleeps after this long without output (the broker's default).
pub const SCREEN_SLEEP: Duration = Duration::from_secs(30);

/// The screen sleep of the scale scenario's run in waves: short, so that the waves take little
/// time (how long a screen waits changes when it sleeps, not what sleeping frees).
pub const WAVE_SCREEN_SLEEP: Duration = Duration::from_secs(1);

/// Sizes of one run.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    pub repeats: usize,
    pub flood_bytes: u64,
    pub echo_keys: usize,
    /// What each flood of the typing-under-a-flood scenario writes.
    pub typing_flood_bytes: u64,
    pub ctrl_c_flood: usize,
    pub starts: usize,
    pub scale_sessions: usize,
    pub scale_output: u64,
    pub sockets: usize,
    pub typists: usize,
    pub typing: Duration,
    /// The sleep interval of the scale scenario's broker's screens.
    pub screen_sleep: Duration,
    pub snapshot_builds: usize,
    pub feed_bytes: u64,
    pub reload_bytes: u64,
    pub reloads: usize,
    /// Keys pressed in Chromium on each path of the key-to-glyph scenario.
    pub glyph_keys: usize,
    pub handoff_sessions: usize,
    pub handoff_tickers: usize,
}

impl Sizes {
    pub fn new(quick: bool) -> Self {
        if quick {
            Self {
                repeats: 2,
                flood_bytes: 4 << 20,
                echo_keys: 100,
                typing_flood_bytes: 4 << 20,
                ctrl_c_flood: 256 << 10,
                starts: 5,
                scale_sessions: 20,
                scale_output: 1 << 20,
                sockets: 40,
                typists: 10,
                typing: Duration::from_secs(3),
                screen_sleep: Duration::from_secs(2),
                snapshot_builds: 20,
                feed_bytes: 1 << 20,
                reload_bytes: 10 << 20,
                reloads: 2,
                glyph_keys: 30,
                handoff_sessions: 5,
                handoff_tickers: 2,
            }
        } else {
            Self {
                // Docker's throughput moves by ±30% from run to run on two shared cores;
                // fewer runs cannot tell a real difference from that.
                repeats: 7,
                flood_bytes: 256 << 20,
                echo_keys: 2000,
                typing_flood_bytes: 64 << 20,
                ctrl_c_flood: 4 << 20,
                starts: 100,
                scale_sessions: 1000,
                scale_output: 1 << 20,
                sockets: 10_000,
                typists: 1000,
                typing: Duration::from_secs(10),
                // The broker's default (`--screen-sleep`).
                screen_sleep: SCREEN_SLEEP,
                snapshot_builds: 1000,
                feed_bytes: 64 << 20,
                reload_bytes: 100 << 20,
                reloads: 5,
                glyph_keys: 1000,
                handoff_sessions: 1000,
                handoff_tickers: 8,
            }
        }
    }
}

impl Args {
    /// The sizes of this run: `--quick`'s or the full run's, with the overrides given.
    pub fn sizes(&self) -> Sizes {
        let mut sizes = Sizes::new(self.quick);
        sizes.flood_bytes = self.flood_mib.map_or(sizes.flood_bytes, |mib| mib << 20);
        sizes.repeats = self.repeats.unwrap_or(sizes.repeats).max(1);
        sizes.scale_sessions = self.scale_sessions.unwrap_or(sizes.scale_sessions);
        sizes.sockets = self.sockets.unwrap_or(sizes.sockets);
        sizes.typists = self.typists.unwrap_or(sizes.typists);
        sizes.reload_bytes = self.reload_mib.map_or(sizes.reload_bytes, |mib| mib << 20);
        sizes.handoff_sessions = self.handoff_sessions.unwrap_or(sizes.handoff_sessions);
        sizes
    }

    /// Whether the scenario `name` runs: every one, unless `--only` names some.
    pub fn selected(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|wanted| wanted == name)
    }
}
