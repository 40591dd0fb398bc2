//! (7) Snapshot build time: `Screen::snapshot()` of pty-broker's terminal emulator on a large
//! screen whose scrollback is full of coloured text, timed build by build in this process (the
//! broker builds one per attach that asks for it, on the attach's own task). Beside it, how fast
//! the emulator takes the throughput scenario's flood on one thread: what a session's feeder can
//! keep up with.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use bytes::Bytes;
use pty_broker::domain::TerminalSize;
use pty_broker::screen::{Screen, ScreenFormat};

/// The screen of the measurement: 200 columns, 50 rows.
pub const COLS: u16 = 200;
pub const ROWS: u16 = 50;
/// Rows of scrollback the screen keeps, all of them filled.
pub const SCROLLBACK_LINES: usize = 1000;

/// Snapshot builds of one screen.
#[derive(Debug, Clone)]
pub struct SnapshotBuilds {
    /// Each build's time, in order.
    pub samples: Vec<Duration>,
    /// The size of one snapshot, bytes.
    pub snapshot_bytes: usize,
    /// Output bytes fed to the screen before the builds.
    pub fed_bytes: u64,
}

/// One row of coloured text, `cols` characters wide: runs of 20 characters, each in another
/// palette, 256-colour or true colour foreground on another background, some bold, italic or
/// underlined, so that nearly every run changes the attributes the snapshot has to write.
fn coloured_line(index: usize, cols: u16) -> String {
    const WORDS: &[&str] = &[
        "ptyhub ", "screen ", "output ", "colour ", "scroll ", "broker ",
    ];
    let mut line = String::new();
    let mut written = 0usize;
    let mut run = 0usize;
    while written < usize::from(cols) {
        let seed = index * 31 + run * 7;
        let style = match seed % 4 {
            0 => format!("\x1b[3{}m", seed % 8),
            1 => format!("\x1b[1;38;5;{};48;5;{}m", seed % 256, (seed / 3) % 256),
            2 => format!(
                "\x1b[3;38;2;{};{};{}m",
                seed % 256,
                (seed * 5) % 256,
                (seed * 11) % 256
            ),
            _ => format!("\x1b[4;9{};4{}m", seed % 8, (seed / 2) % 8),
        };
        line.push_str(&style);
        let word = WORDS[seed % WORDS.len()];
        let text: String = word.chars().cycle().take(20).collect();
        let take = (usize::from(cols) - written).min(20);
        line.push_str(&text[..take]);
        line.push_str("\x1b[0m");
        written += take;
        run += 1;
    }
    line
}

/// The output that fills a `COLS`x`ROWS` screen and its whole scrollback with coloured lines.
/// Each line is exactly as wide as the screen and ends with CR LF; the margin's pending wrap
/// makes the LF move down one row only.
fn coloured_output() -> Vec<u8> {
    let lines = SCROLLBACK_LINES + usize::from(ROWS) + 10;
    let mut out = Vec::new();
    for index in 0..lines {
        out.extend_from_slice(coloured_line(index, COLS).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Fills the screen and times `builds` snapshots of it (after a few unrecorded ones). Checks
/// first that a snapshot redraws the same screen, scrollback and colours included, in a fresh
/// emulator: a fast build of the wrong bytes would mean nothing.
pub fn snapshot_builds(builds: usize) -> Result<SnapshotBuilds> {
    const WARM_UP: usize = 10;
    ensure!(builds >= 1, "the snapshot scenario needs a build");
    let size = TerminalSize::new(u32::from(COLS), u32::from(ROWS))?;
    let mut screen = Screen::new(size, SCROLLBACK_LINES, 0);
    let output = coloured_output();
    screen.feed_at(0, &output);
    ensure!(
        screen.offset() == output.len() as u64,
        "the screen took {} of {} bytes",
        screen.offset(),
        output.len()
    );
    let original = screen.view(ScreenFormat::Cells, SCROLLBACK_LINES);
    ensure!(
        original.scrollback_rows == SCROLLBACK_LINES,
        "the scrollback holds {} rows, not {SCROLLBACK_LINES}",
        original.scrollback_rows
    );
    let snapshot = screen.snapshot();
    let redrawn = Screen::from_snapshot(&snapshot, SCROLLBACK_LINES)
        .view(ScreenFormat::Cells, SCROLLBACK_LINES);
    if let Some(row) =
        (0..original.rows.len()).find(|&row| original.rows.get(row) != redrawn.rows.get(row))
    {
        anyhow::bail!(
            "the snapshot redraws row {row} of {} differently (scrollback {} vs {} rows)",
            original.rows.len(),
            original.scrollback_rows,
            redrawn.scrollback_rows
        );
    }
    ensure!(
        original == redrawn,
        "the snapshot redraws the screen differently (cursor {:?} vs {:?})",
        original.cursor,
        redrawn.cursor
    );

    let mut samples = Vec::with_capacity(builds);
    for index in 0..builds + WARM_UP {
        let started = Instant::now();
        let built = std::hint::black_box(screen.snapshot());
        let elapsed = started.elapsed();
        ensure!(
            built.data.len() == snapshot.data.len(),
            "snapshot {index} has {} bytes, the first {}",
            built.data.len(),
            snapshot.data.len()
        );
        if index >= WARM_UP {
            samples.push(elapsed);
        }
    }
    Ok(SnapshotBuilds {
        samples,
        snapshot_bytes: snapshot.data.len(),
        fed_bytes: output.len() as u64,
    })
}

/// How fast one screen takes output on this thread.
#[derive(Debug, Clone, Copy)]
pub struct FeedRate {
    pub mib_per_second: f64,
}

/// How [`feed_rate`] feeds the screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feeding {
    /// Every byte through the emulator.
    Parse,
    /// As a session's feeder does with the default ring: the output gathers until it is a
    /// [`pty_broker::session::FAST_FORWARD_RING_PART`] of the ring ahead, then the screen
    /// fast-forwards over what it can and parses the rest at the end.
    FastForward,
}

/// Feeds `bytes` of the throughput scenario's flood (lines of 63 characters, LF only: raw mode)
/// to a fresh `cols`x`rows` screen keeping `scrollback_lines`, in pieces of 16 KiB (the broker's
/// read size), and times it. Checks that the screen shows the flood's lines.
pub fn feed_rate(
    bytes: u64,
    cols: u16,
    rows: u16,
    scrollback_lines: usize,
    feeding: Feeding,
) -> Result<FeedRate> {
    const PIECE: usize = 16 * 1024;
    let size = TerminalSize::new(u32::from(cols), u32::from(rows))?;
    let mut screen = Screen::new(size, scrollback_lines, 0);
    let line = crate::scenarios::LINE.as_bytes();
    let mut pattern = Vec::with_capacity(PIECE + line.len() + 1);
    while pattern.len() < PIECE {
        pattern.extend_from_slice(line);
        pattern.push(b'\n');
    }
    // A piece of whole lines, so that each piece continues the pattern where the last ended.
    pattern.truncate(PIECE - PIECE % (line.len() + 1));
    let pattern = Bytes::from(pattern);
    let window = (pty_broker::Config::DEFAULT_RING_BYTES as usize)
        / pty_broker::session::FAST_FORWARD_RING_PART;
    let started = Instant::now();
    let mut fed = 0u64;
    // The output after the screen's offset, in the pieces it came in.
    let mut ahead: VecDeque<Bytes> = VecDeque::new();
    while fed < bytes {
        match feeding {
            Feeding::Parse => screen.feed_at(fed, &pattern),
            Feeding::FastForward => {
                ahead.push_back(pattern.clone());
                let pending: usize = ahead.iter().map(Bytes::len).sum();
                if pending >= window {
                    let before = screen.offset();
                    let pieces: Vec<Bytes> = ahead.iter().cloned().collect();
                    screen.look_ahead(&pieces, true);
                    drop_before(&mut ahead, (screen.offset() - before) as usize);
                }
            }
        }
        fed += pattern.len() as u64;
    }
    for piece in ahead {
        let at = screen.offset();
        screen.feed_at(at, &piece);
    }
    let elapsed = started.elapsed();
    ensure!(
        screen.offset() == fed,
        "the screen took {} of {fed} bytes",
        screen.offset()
    );
    // Raw mode: LF without CR, so the lines step across the screen and wrap at its margin;
    // without the blanks and row ends a whole line of the pattern shows.
    let text = screen.text(0);
    let joined: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    ensure!(
        joined.contains(crate::scenarios::LINE),
        "the screen does not show the flood's lines: {text:?}"
    );
    Ok(FeedRate {
        mib_per_second: fed as f64 / (1024.0 * 1024.0) / elapsed.as_secs_f64(),
    })
}

/// Drops the first `skipped` bytes of `pieces`.
fn drop_before(pieces: &mut VecDeque<Bytes>, mut skipped: usize) {
    while let Some(first) = pieces.front_mut() {
        if first.len() > skipped {
            *first = first.slice(skipped..);
            return;
        }
        skipped -= first.len();
        pieces.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coloured_line_is_as_wide_as_the_screen_and_changes_colour_often() {
        let line = coloured_line(3, COLS);
        let plain: String = {
            let mut plain = String::new();
            let mut rest = line.as_str();
            while let Some(start) = rest.find('\x1b') {
                plain.push_str(&rest[..start]);
                let end = rest[start..].find('m').expect("an SGR ends with m");
                rest = &rest[start + end + 1..];
            }
            plain.push_str(rest);
            plain
        };
        assert_eq!(plain.chars().count(), usize::from(COLS));
        assert!(line.matches("\x1b[0m").count() >= usize::from(COLS) / 20);
    }

    #[test]
    fn the_flood_is_fed_whole_and_shows_on_the_screen() {
        for feeding in [Feeding::Parse, Feeding::FastForward] {
            let rate = feed_rate(2 << 20, 80, 24, 100, feeding).expect("feed");
            assert!(rate.mib_per_second > 0.0);
        }
    }

    #[test]
    fn snapshots_of_a_full_scrollback_redraw_it_and_are_timed() {
        let builds = snapshot_builds(3).expect("snapshot builds");
        assert_eq!(builds.samples.len(), 3);
        assert!(builds.snapshot_bytes > usize::from(COLS) * SCROLLBACK_LINES);
    }
}
