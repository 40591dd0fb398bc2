//! Reading `/proc` of the broker's own PID namespace: finding and signalling a session's
//! processes by identity (pid and start time), for local sessions and for Docker sessions whose
//! processes the broker sees directly (the host path).

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// A session leader's identity in one PID namespace: a pid alone could have been reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Leader {
    pub pid: u32,
    pub start_time: u64,
}

impl Leader {
    /// The identity of the running process `pid`.
    pub fn of(pid: u32) -> Option<Self> {
        ProcStat::read(pid).map(|stat| Self {
            pid,
            start_time: stat.start_time,
        })
    }
}

/// The fields of `/proc/<pid>/stat` the runtimes need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    pub state: char,
    pub parent: u32,
    pub process_group: u32,
    pub session: u32,
    /// The foreground process group of the process's controlling terminal; -1 without one.
    pub terminal_foreground_group: i64,
    /// Clock ticks after boot at which the process started: with the pid, its identity.
    pub start_time: u64,
}

impl ProcStat {
    /// Parses `pid (comm) state ppid pgrp session ... starttime ...`; `comm` may hold spaces and
    /// parentheses, so fields are counted from the last `)`.
    pub fn parse(stat: &str) -> Option<Self> {
        let after_comm = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = after_comm.split_ascii_whitespace().collect();
        Some(Self {
            state: fields.first()?.chars().next()?,
            parent: fields.get(1)?.parse().ok()?,
            process_group: fields.get(2)?.parse().ok()?,
            session: fields.get(3)?.parse().ok()?,
            terminal_foreground_group: fields.get(5)?.parse().ok()?,
            // Field 22 of the whole line; the 20th after `comm`.
            start_time: fields.get(19)?.parse().ok()?,
        })
    }

    /// Whether the process is in the foreground job of its terminal: the one a terminal's own
    /// Ctrl-C signals.
    pub fn in_terminal_foreground(&self) -> bool {
        self.terminal_foreground_group == i64::from(self.process_group)
    }

    pub fn read(pid: u32) -> Option<Self> {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .as_deref()
            .and_then(Self::parse)
    }
}

/// The PID namespace `pid` lives in (`pid:[4026531836]`), if the broker may look.
pub(crate) fn pid_namespace(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid"))
        .ok()
        .map(|link| link.to_string_lossy().into_owned())
}

/// Whether `pid`'s environment holds the exact entry `marker` (`NAME=value`).
pub(crate) fn environment_has(pid: u32, marker: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
        environ
            .split(|byte| *byte == 0)
            .any(|entry| entry == marker.as_bytes())
    })
}

/// Whether `pid`'s environment sets `name` (to anything).
pub(crate) fn environment_sets(pid: u32, name: &str) -> bool {
    let prefix = format!("{name}=");
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
        environ
            .split(|byte| *byte == 0)
            .any(|entry| entry.starts_with(prefix.as_bytes()))
    })
}

/// A process of a session: its pid and start time, to check again before signalling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Member {
    pub pid: u32,
    pub start_time: u64,
}

/// The live (not zombie) processes that belong to a session: those in the Unix session `leader`
/// leads, and those whose environment carries `marker`; only those in `namespace` when given.
///
/// A leader pid cannot be reused while any process still has it as its session id, so session
/// members are found safely even after the leader exited; when a process with the leader's pid
/// exists but started at another time, the pid was reused, which means none of the session's
/// members are left, and only the marker is followed.
pub(crate) fn session_members(
    namespace: Option<&str>,
    marker: Option<&str>,
    leader: Option<Leader>,
) -> io::Result<Vec<Member>> {
    let follow_session = leader.filter(|leader| {
        ProcStat::read(leader.pid).is_none_or(|stat| stat.start_time == leader.start_time)
    });
    let mut members = Vec::new();
    each_process(|pid, stat| {
        if stat.state == 'Z'
            || namespace.is_some_and(|namespace| pid_namespace(pid).as_deref() != Some(namespace))
        {
            return;
        }
        let in_session = follow_session.is_some_and(|leader| stat.session == leader.pid);
        if in_session || marker.is_some_and(|marker| environment_has(pid, marker)) {
            members.push(Member {
                pid,
                start_time: stat.start_time,
            });
        }
    })?;
    Ok(members)
}

/// Calls `visit` with every process `/proc` lists and its `stat`, zombies included; a process
/// that exits while we look (its files vanish) is left out.
fn each_process(mut visit: impl FnMut(u32, ProcStat)) -> io::Result<()> {
    for entry in std::fs::read_dir(Path::new("/proc"))? {
        let entry = entry?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(stat) = ProcStat::read(pid) {
            visit(pid, stat);
        }
    }
    Ok(())
}

/// The live processes of the Unix session `leader` leads, as [`session_members`] finds them with
/// no namespace and no marker, from a walk of `/proc` that started after this call. Walks are
/// shared: a caller that asks while one is under way waits for it to end, and every caller that
/// asked meanwhile is answered by the next one. Sessions that end together (a broker's
/// shutdown, many deletions at once) poll for their processes every few milliseconds, and a
/// walk reads every process's `stat`: one walk per caller would cost the number of ending
/// sessions times the number of processes. The walk runs on a blocking thread, so the runtime
/// goes on running the other sessions' tasks, which ask in the meantime.
pub(crate) async fn members_of_session(leader: Leader) -> io::Result<Vec<Member>> {
    SESSION_WALKS.members_of(leader, Instant::now()).await
}

/// The broker's shared walks of `/proc`.
static SESSION_WALKS: SharedWalks = SharedWalks::new();

/// The last walk of `/proc` by Unix session, and whether the next is under way.
struct SharedWalks {
    state: Mutex<WalkState>,
    /// Told when a walk ends.
    walked: Notify,
    /// Walks taken so far.
    taken: AtomicU64,
}

struct WalkState {
    last: Option<Arc<SessionWalk>>,
    under_way: bool,
}

impl SharedWalks {
    const fn new() -> Self {
        Self {
            state: Mutex::new(WalkState {
                last: None,
                under_way: false,
            }),
            walked: Notify::const_new(),
            taken: AtomicU64::new(0),
        }
    }

    /// `leader`'s session members from a walk that started at or after `asked`.
    async fn members_of(&self, leader: Leader, asked: Instant) -> io::Result<Vec<Member>> {
        loop {
            let walked = self.walked.notified();
            tokio::pin!(walked);
            let walk_now = {
                let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(walk) = state.last.as_ref().filter(|walk| walk.started >= asked) {
                    return Ok(walk.members_of(leader));
                }
                if state.under_way {
                    // Registered before the lock is let go: the end of that walk is not missed.
                    walked.as_mut().enable();
                    false
                } else {
                    state.under_way = true;
                    true
                }
            };
            if walk_now {
                return self.walk().await.map(|walk| walk.members_of(leader));
            }
            walked.await;
        }
    }

    /// Takes a walk on a blocking thread, keeps it as the last, and wakes those waiting.
    async fn walk(&self) -> io::Result<Arc<SessionWalk>> {
        // Whatever becomes of this caller (its task dropped during the walk included), the walk
        // ends for those waiting on it.
        let _under_way = UnderWay(self);
        let taken = tokio::task::spawn_blocking(SessionWalk::take)
            .await
            .unwrap_or_else(|join_error| Err(io::Error::other(join_error)))
            .map(Arc::new);
        self.taken.fetch_add(1, Ordering::Relaxed);
        if let Ok(walk) = &taken {
            self.state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .last = Some(Arc::clone(walk));
        }
        taken
    }
}

/// A walk under way; when it ends, those waiting are woken (after a failed walk too: the first
/// to look again takes the next).
struct UnderWay<'a>(&'a SharedWalks);

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        self.0
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .under_way = false;
        self.0.walked.notify_waiters();
    }
}

/// One walk of `/proc`: the live processes by Unix session, and every process's start time.
struct SessionWalk {
    started: Instant,
    by_session: HashMap<u32, Vec<Member>>,
    /// Zombies included: a pid still taken is a pid not yet reused.
    start_times: HashMap<u32, u64>,
}

impl SessionWalk {
    fn take() -> io::Result<Self> {
        let started = Instant::now();
        let mut by_session: HashMap<u32, Vec<Member>> = HashMap::new();
        let mut start_times = HashMap::new();
        each_process(|pid, stat| {
            start_times.insert(pid, stat.start_time);
            if stat.state != 'Z' {
                by_session.entry(stat.session).or_default().push(Member {
                    pid,
                    start_time: stat.start_time,
                });
            }
        })?;
        Ok(Self {
            started,
            by_session,
            start_times,
        })
    }

    /// As [`session_members`]: nothing when the leader's pid names another process now.
    fn members_of(&self, leader: Leader) -> Vec<Member> {
        let reused = self
            .start_times
            .get(&leader.pid)
            .is_some_and(|start_time| *start_time != leader.start_time);
        if reused {
            return Vec::new();
        }
        self.by_session
            .get(&leader.pid)
            .cloned()
            .unwrap_or_default()
    }
}

/// Sends `signal` to each member that is still the process it was when found.
pub(crate) fn signal_members(members: &[Member], signal: Signal) -> io::Result<()> {
    for member in members {
        if ProcStat::read(member.pid).is_none_or(|stat| stat.start_time != member.start_time) {
            continue;
        }
        match kill(Pid::from_raw(member.pid as i32), signal) {
            // Gone between the check and the signal: that is what we wanted.
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
    Ok(())
}

/// The members that are (still the processes found and) in their terminal's foreground job:
/// those a Ctrl-C the terminal took would have interrupted. Background jobs and processes
/// without a terminal are left out.
pub(crate) fn foreground_members(members: Vec<Member>) -> Vec<Member> {
    members
        .into_iter()
        .filter(|member| {
            ProcStat::read(member.pid).is_some_and(|stat| {
                stat.start_time == member.start_time && stat.in_terminal_foreground()
            })
        })
        .collect()
}

/// This boot's id, so that state written before a reboot is never taken for live processes.
pub(crate) fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|id| id.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ptyhub_test_support::poll_until_blocking;

    use super::*;

    /// A generous bound for waiting on a child process; only a hang reaches it.
    const PATIENCE: Duration = Duration::from_secs(30);
    const POLL_INTERVAL: Duration = Duration::from_millis(10);

    #[test]
    fn stat_parses_comm_with_spaces_and_parentheses() {
        let stat = "14 (my (odd) name) S 0 14 14 34816 14 4194560 1007 0 0 0 2 0 0 0 20 0 1 0 \
                    113547 2387968 348 18446744073709551615";
        assert_eq!(
            ProcStat::parse(stat),
            Some(ProcStat {
                state: 'S',
                parent: 0,
                process_group: 14,
                session: 14,
                terminal_foreground_group: 14,
                start_time: 113547,
            })
        );
        let background = "15 (sleep) S 14 15 14 34816 14 4194560 1007 0 0 0 2 0 0 0 20 0 1 0 \
                          113600 2387968 348 18446744073709551615";
        let background = ProcStat::parse(background).unwrap();
        assert_eq!(background.process_group, 15);
        assert!(!background.in_terminal_foreground());
        let no_terminal = "16 (daemon) S 1 16 16 0 -1 4194560 1007 0 0 0 2 0 0 0 20 0 1 0 \
                           113700 2387968 348 18446744073709551615";
        let no_terminal = ProcStat::parse(no_terminal).unwrap();
        assert_eq!(no_terminal.terminal_foreground_group, -1);
        assert!(!no_terminal.in_terminal_foreground());
        assert_eq!(ProcStat::parse("14 (short) S 0 14"), None);
        assert_eq!(ProcStat::parse("garbage"), None);
    }

    #[test]
    fn finds_and_ends_a_process_by_its_environment_marker() {
        let marker = format!("PTYHUB_SESSION_ID={}", uuid::Uuid::new_v4());
        let (name, value) = marker.split_once('=').unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .env(name, value)
            .spawn()
            .expect("spawn sleep");
        let namespace = pid_namespace(std::process::id()).expect("own pid namespace");
        // The child has the marker only once it has exec'd `sleep`.
        let members = poll_until_blocking(PATIENCE, POLL_INTERVAL, || {
            let members = session_members(Some(&namespace), Some(&marker), None).unwrap();
            (!members.is_empty()).then_some(members)
        })
        .unwrap_or_default();
        assert_eq!(
            members.iter().map(|member| member.pid).collect::<Vec<_>>(),
            vec![child.id()]
        );
        signal_members(&members, Signal::SIGKILL).unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success());
        assert!(
            session_members(Some(&namespace), Some(&marker), None)
                .unwrap()
                .is_empty()
        );
    }

    /// A process in a Unix session of its own (`setsid sleep 60`), once it leads it.
    fn session_leader() -> (std::process::Child, Leader) {
        let child = std::process::Command::new("setsid")
            .args(["sleep", "60"])
            .spawn()
            .expect("spawn setsid sleep");
        let pid = child.id();
        let stat = poll_until_blocking(PATIENCE, POLL_INTERVAL, || {
            ProcStat::read(pid).filter(|stat| stat.session == pid)
        })
        .expect("setsid made the child a session leader");
        let leader = Leader {
            pid,
            start_time: stat.start_time,
        };
        (child, leader)
    }

    #[tokio::test]
    async fn a_shared_walk_finds_what_a_walk_of_ones_own_finds() {
        let (mut child, leader) = session_leader();
        let own = session_members(None, None, Some(leader)).unwrap();
        assert_eq!(
            own.iter().map(|member| member.pid).collect::<Vec<_>>(),
            vec![leader.pid]
        );
        assert_eq!(members_of_session(leader).await.unwrap(), own);
        let reused = Leader {
            start_time: leader.start_time + 1,
            ..leader
        };
        assert!(members_of_session(reused).await.unwrap().is_empty());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            members_of_session(leader).await.unwrap().is_empty(),
            "a walk after the call sees the process gone"
        );
    }

    #[tokio::test]
    async fn a_caller_is_answered_by_a_walk_that_started_after_it_asked_and_by_no_older_one() {
        let (mut child, leader) = session_leader();
        let walks = SharedWalks::new();
        let asked = Instant::now();
        assert_eq!(walks.members_of(leader, asked).await.unwrap().len(), 1);
        assert_eq!(walks.taken.load(Ordering::Relaxed), 1);
        // Asked before that walk started: answered by it.
        assert_eq!(walks.members_of(leader, asked).await.unwrap().len(), 1);
        assert_eq!(walks.taken.load(Ordering::Relaxed), 1);
        child.kill().unwrap();
        child.wait().unwrap();
        // Asked after it started: a walk of its own, which sees the process gone.
        assert!(
            walks
                .members_of(leader, Instant::now())
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(walks.taken.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn callers_that_ask_while_a_walk_is_under_way_share_the_next_one() {
        let (mut child, leader) = session_leader();
        let walks: &'static SharedWalks = Box::leak(Box::new(SharedWalks::new()));
        // A walk under way, started before the callers ask.
        let before = Arc::new(SessionWalk::take().unwrap());
        walks.state.lock().unwrap().under_way = true;
        let callers: Vec<_> = (0..4)
            .map(|_| {
                let asked = Instant::now();
                tokio::spawn(async move { walks.members_of(leader, asked).await.unwrap() })
            })
            .collect();
        // The test's runtime has one thread: each caller runs until it waits for the walk.
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            walks.taken.load(Ordering::Relaxed),
            0,
            "no walk while the one under way lasts"
        );
        {
            let mut state = walks.state.lock().unwrap();
            state.under_way = false;
            state.last = Some(before);
        }
        walks.walked.notify_waiters();
        for caller in callers {
            assert_eq!(caller.await.unwrap().len(), 1);
        }
        assert_eq!(
            walks.taken.load(Ordering::Relaxed),
            1,
            "the walk under way started before they asked; one more served all four"
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn follows_a_session_only_while_its_leader_pid_names_the_recorded_process() {
        let (mut child, recorded) = session_leader();
        let pid = recorded.pid;
        let namespace = pid_namespace(pid).expect("child pid namespace");
        let unrelated_marker = "PTYHUB_SESSION_ID=unrelated";
        let found =
            session_members(Some(&namespace), Some(unrelated_marker), Some(recorded)).unwrap();
        assert_eq!(
            found.iter().map(|member| member.pid).collect::<Vec<_>>(),
            vec![pid]
        );

        // The same pid with another start time is a reused pid: never followed, never signalled.
        let reused = Leader {
            pid,
            start_time: recorded.start_time + 1,
        };
        assert!(
            session_members(Some(&namespace), Some(unrelated_marker), Some(reused))
                .unwrap()
                .is_empty()
        );
        signal_members(
            &[Member {
                pid,
                start_time: recorded.start_time + 1,
            }],
            Signal::SIGKILL,
        )
        .unwrap();
        assert!(ProcStat::read(pid).is_some_and(|stat| stat.state != 'Z'));

        signal_members(&found, Signal::SIGKILL).unwrap();
        assert!(!child.wait().unwrap().success());
    }
}
