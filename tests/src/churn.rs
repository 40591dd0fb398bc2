//! Helpers of the churn run: a small seeded random generator, the check of a session's
//! transcript against the lines typed into it, and a search of `/proc` for processes whose
//! command line carries a marker.

use std::collections::HashMap;

/// xorshift64*: deterministic for a seed, good enough to pick gateways, steps and lengths.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`; seeds that differ in one bit give unrelated streams.
    pub fn new(seed: u64) -> Self {
        // One splitmix64 round spreads the seed; xorshift needs a nonzero state.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        Self(if z == 0 { 0x2545_f491_4f6c_dd1d } else { z })
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        assert!(n > 0, "below(0)");
        // The modulo bias is irrelevant for the small ranges used here.
        (self.next_u64() % n as u64) as usize
    }

    /// A number in `low..=high`.
    pub fn between(&mut self, low: usize, high: usize) -> usize {
        low + self.below(high - low + 1)
    }

    /// True with probability `numerator / denominator`.
    pub fn chance(&mut self, numerator: usize, denominator: usize) -> bool {
        self.below(denominator) < numerator
    }

    /// An index into `weights`, picked in proportion to them.
    pub fn weighted(&mut self, weights: &[usize]) -> usize {
        let mut pick = self.below(weights.iter().sum());
        for (index, weight) in weights.iter().enumerate() {
            if pick < *weight {
                return index;
            }
            pick -= weight;
        }
        unreachable!("pick is below the sum of the weights")
    }
}

/// The first line the churn command writes, once it has turned echo off.
pub const READY_LINE: &str = "ready";
/// What the churn command writes for each line it reads.
pub const ECHO_PREFIX: &str = "out:";

/// Checks the whole output of a churn session: complete `\r\n`-terminated lines, first
/// [`READY_LINE`], then `out:<token>` for tokens of `typed`, in the order they were typed, each
/// at most once (input sent just before a dropped connection may never reach the process).
/// Returns how many typed tokens were echoed.
pub fn check_transcript(output: &[u8], typed: &[String]) -> Result<usize, String> {
    let text = std::str::from_utf8(output).map_err(|error| format!("not UTF-8: {error}"))?;
    if !text.ends_with("\r\n") {
        return Err(format!("the output does not end with a line end: {text:?}"));
    }
    let mut lines = text.split_terminator("\r\n");
    match lines.next() {
        Some(READY_LINE) => {}
        other => return Err(format!("the first line is {other:?}, not {READY_LINE:?}")),
    }
    let positions: HashMap<&str, usize> = typed
        .iter()
        .enumerate()
        .map(|(index, token)| (token.as_str(), index))
        .collect();
    let mut next = 0;
    let mut echoed = 0;
    for (number, line) in lines.enumerate() {
        let token = line
            .strip_prefix(ECHO_PREFIX)
            .ok_or_else(|| format!("line {} is not an echo: {line:?}", number + 2))?;
        let position = *positions
            .get(token)
            .ok_or_else(|| format!("line {} echoes {token:?}, never typed", number + 2))?;
        if position < next {
            return Err(format!(
                "line {} echoes {token:?} again or out of order (typed #{position}, expected #{next} or later)",
                number + 2
            ));
        }
        next = position + 1;
        echoed += 1;
    }
    Ok(echoed)
}

/// Processes (pid and command line, NULs as spaces) whose command line contains `marker`,
/// except this one.
pub fn processes_with_marker(marker: &str) -> Vec<(u32, String)> {
    marked_processes(marker)
        .into_iter()
        .map(|process| (process.pid, process.cmdline))
        .collect()
}

/// Of [`processes_with_marker`], the pids whose parent does not carry the marker: one per
/// process tree, so a shell's child between `fork` and `exec` is not counted twice.
pub fn marked_tree_roots(marker: &str) -> Vec<u32> {
    let marked = marked_processes(marker);
    let pids: std::collections::HashSet<u32> = marked.iter().map(|process| process.pid).collect();
    marked
        .iter()
        .filter(|process| !pids.contains(&process.parent))
        .map(|process| process.pid)
        .collect()
}

/// A live process whose command line carries a marker, as `/proc` showed it.
struct MarkedProcess {
    pid: u32,
    parent: u32,
    cmdline: String,
}

/// Every live process (but this one) whose command line contains `marker`, with its parent
/// read right after its command line. A process that ends during the walk is left out: read
/// later, a child of a tree being torn down would look like a tree of its own (its parent pid
/// gone) while its parent still counts.
fn marked_processes(marker: &str) -> Vec<MarkedProcess> {
    let own = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == own {
            continue;
        }
        // A process may end between the listing and the reads: skip it. A zombie's command
        // line is empty, so it never matches.
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
        if !cmdline.contains(marker) {
            continue;
        }
        let Some(parent) = parent(pid) else {
            continue;
        };
        found.push(MarkedProcess {
            pid,
            parent,
            cmdline: cmdline.trim_end().to_owned(),
        });
    }
    found
}

/// The parent pid from `/proc/<pid>/stat` (`pid (comm) state ppid ...`; `comm` may hold
/// spaces and parentheses, so the fields are read after the last `)`); `None` once it is gone.
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, fields) = stat.rsplit_once(')')?;
    fields.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(tokens: &[&str]) -> Vec<String> {
        tokens.iter().map(|token| (*token).to_owned()).collect()
    }

    #[test]
    fn the_generator_is_deterministic_and_stays_in_range() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        let mut c = Rng::new(8);
        let from_a: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let from_b: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        let from_c: Vec<u64> = (0..8).map(|_| c.next_u64()).collect();
        assert_eq!(from_a, from_b);
        assert_ne!(from_a, from_c);
        let mut rng = Rng::new(0);
        let mut seen = [false; 4];
        for _ in 0..1000 {
            let value = rng.between(3, 6);
            assert!((3..=6).contains(&value));
            seen[value - 3] = true;
            assert!(rng.weighted(&[0, 2, 0, 1]) % 2 == 1);
        }
        assert_eq!(seen, [true; 4]);
    }

    #[test]
    fn a_transcript_of_typed_tokens_in_order_passes() {
        let output = b"ready\r\nout:a\r\nout:c\r\n";
        assert_eq!(check_transcript(output, &typed(&["a", "b", "c"])), Ok(2));
        assert_eq!(check_transcript(b"ready\r\n", &typed(&["a"])), Ok(0));
    }

    #[test]
    fn a_transcript_with_a_duplicate_a_stranger_or_a_torn_line_fails() {
        let tokens = typed(&["a", "b"]);
        for bad in [
            &b"ready\r\nout:a\r\nout:a\r\n"[..],
            b"ready\r\nout:b\r\nout:a\r\n",
            b"ready\r\nout:z\r\n",
            b"ready\r\nout:a\r\nout:",
            b"ready\r\na\r\n",
            b"out:a\r\n",
            b"ready\r\nout:\xff\r\n",
        ] {
            assert!(
                check_transcript(bad, &tokens).is_err(),
                "{:?} passed",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn processes_are_found_by_a_marker_in_their_command_line() {
        let marker = format!("churn-helper-test-{}", std::process::id());
        // `read` is a builtin: the shell's subshell (a fork with the same command line) waits
        // until the input closes, and the shell waits for it.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "(read -r line); :", &marker])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("sh starts");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let found = loop {
            let found = processes_with_marker(&marker);
            if found.len() >= 2 || std::time::Instant::now() >= deadline {
                break found;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let roots = marked_tree_roots(&marker);
        drop(child.stdin.take());
        child.wait().expect("sh ends when its input closes");
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found.iter().any(|(pid, _)| *pid == child.id()), "{found:?}");
        assert_eq!(roots, vec![child.id()]);
        assert!(processes_with_marker(&marker).is_empty());
    }
}
