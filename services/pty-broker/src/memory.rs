//! Giving freed memory back to the system: after screens fall asleep or sessions close, the
//! allocator holds what they freed, and the broker's resident size would not show that an idle
//! session costs a few KiB.
//!
//! glibc's allocator keeps freed memory in its arenas for reuse and returns it only from the top
//! of the heap, so the grids of a thousand sleeping screens (60 KiB each for 80x24) stay resident
//! until new screens reuse them. `malloc_trim` gives back every whole free page in every arena.
//! It walks the heap holding each arena's lock, which takes time (measured in a release build: 28
//! ms after 1,000 screens with 1 MiB of output each fell asleep, 5 ms to walk the same 1.1 GB heap
//! with nothing to give back), so it runs only once [`TRIM_AT_LEAST`] was freed since the last
//! one, [`TRIM_DELAY`] after that, on a blocking thread: callers only say what they freed
//! ([`release_freed_soon`]). The heap is the process's, not a broker's: one trim serves every
//! broker (and, under `ptyhub up`, every service) in the process. On other C libraries this is a
//! no-op.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// How long a request waits before the trim, so that one walk of the heap serves every screen
/// that falls asleep in the same wave (sessions tend to go idle together).
pub const TRIM_DELAY: Duration = Duration::from_secs(1);

/// How much must have been freed since the last trim before the next: what about 30 sleeping
/// screens with full scrollbacks, or four sessions with full rings, free. Below it, what a walk
/// of the heap would give back is not worth holding its locks for.
pub const TRIM_AT_LEAST: usize = 4 << 20;

/// Set while a trim is due; cleared when it starts (or when its runtime shuts down first).
static TRIM_DUE: AtomicBool = AtomicBool::new(false);

/// What callers said they freed since the last trim started.
static FREED_SINCE_TRIM: AtomicUsize = AtomicUsize::new(0);

/// Notes that about `bytes` were freed, and asks for freed memory to be returned to the system
/// [`TRIM_DELAY`] after [`TRIM_AT_LEAST`] has been. Cheap: a request while a trim is due is
/// folded into it. Outside a tokio runtime it only counts.
pub fn release_freed_soon(bytes: usize) {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return;
    }
    let freed = FREED_SINCE_TRIM
        .fetch_add(bytes, Ordering::AcqRel)
        .saturating_add(bytes);
    if freed < TRIM_AT_LEAST {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if TRIM_DUE.swap(true, Ordering::AcqRel) {
        return;
    }
    runtime.spawn(async {
        // A runtime that shuts down before the delay drops this future: the guard clears the
        // flag so that the next request schedules a trim again.
        let due = DueGuard;
        tokio::time::sleep(TRIM_DELAY).await;
        // What is freed from here on counts toward the next trim.
        FREED_SINCE_TRIM.store(0, Ordering::Release);
        drop(due);
        let started = std::time::Instant::now();
        if let Ok(released) = tokio::task::spawn_blocking(trim).await {
            tracing::debug!(
                released,
                took_us = started.elapsed().as_micros() as u64,
                "freed memory returned to the system"
            );
        }
    });
}

/// Clears [`TRIM_DUE`] when dropped.
struct DueGuard;

impl Drop for DueGuard {
    fn drop(&mut self) {
        TRIM_DUE.store(false, Ordering::Release);
    }
}

/// Returns whole free pages of every arena to the system; true when any memory was released.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim() -> bool {
    // SAFETY: `malloc_trim` takes no pointers and only reorganises the allocator's own free
    // lists under its locks; it is safe to call from any thread at any time.
    unsafe { libc::malloc_trim(0) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trim_returns_a_freed_heap_to_the_system() {
        if !cfg!(all(target_os = "linux", target_env = "gnu")) {
            return;
        }
        // Many small blocks, as a screen's rows are, below the allocator's mmap threshold, so
        // they come from the heap; the last one stays, so the heap's top is not free and only a
        // trim (not free's own release of the top) can give the pages back.
        let blocks: Vec<Vec<u8>> = (0..20_000).map(|_| vec![1u8; 2_560]).collect();
        let keep = vec![2u8; 2_560];
        let before = resident_bytes();
        drop(blocks);
        let after_free = resident_bytes();
        assert!(trim(), "a freed heap of 50 MB has whole pages to give back");
        let after_trim = resident_bytes();
        assert_eq!(keep[0], 2);
        assert!(
            after_trim + 32 * 1024 * 1024 < before && after_trim < after_free,
            "resident {before} before the free, {after_free} after it, {after_trim} after the trim"
        );
    }

    fn resident_bytes() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        let kib: u64 = status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/self/status");
        kib * 1024
    }
}
