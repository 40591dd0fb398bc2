//! The commands a session ran, the last thousand or so, kept compact: a record is 40 bytes beside
//! its command line, the lines sit back to back in one buffer, and a working directory is kept
//! once for the run of records that share it.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ptyhub_model::Command;

/// How many commands a session keeps unless its broker is told otherwise.
pub const DEFAULT_COMMANDS_KEPT: usize = 1000;

/// The commands of one session, oldest first, at most `capacity` of them.
#[derive(Debug, Clone)]
pub struct CommandLog {
    capacity: usize,
    /// The id of `entries[0]`; ids count up from 1.
    first_id: u64,
    entries: VecDeque<Entry>,
    /// The command lines of `entries`, back to back from `text_start`.
    text: String,
    text_start: usize,
    /// Working directories, each once for the run of commands that share it: `cwds[i]` has the
    /// number `first_cwd + i`.
    cwds: VecDeque<Box<str>>,
    first_cwd: u32,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    started_ms: u64,
    output_start: u64,
    /// `RUNNING` while it runs.
    output_end: u64,
    /// Milliseconds from its start to its end; `RUNNING_MS` while it runs.
    duration_ms: u32,
    /// `UNKNOWN_EXIT` where the shell gave none.
    exit_code: i32,
    text_len: u32,
    /// The number of its working directory; `NO_CWD` for none.
    cwd: u32,
}

const RUNNING: u64 = u64::MAX;
const RUNNING_MS: u32 = u32::MAX;
const UNKNOWN_EXIT: i32 = i32::MIN;
const NO_CWD: u32 = u32::MAX;
/// How many bytes of dropped command lines may sit before the kept ones until they are moved.
const COMPACT_TEXT_AT: usize = 4096;

impl CommandLog {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            first_id: 1,
            entries: VecDeque::new(),
            text: String::new(),
            text_start: 0,
            cwds: VecDeque::new(),
            first_cwd: 0,
        }
    }

    /// A log of `capacity` that goes on from `commands` (oldest first, with consecutive ids),
    /// as a previous broker process kept them. The next command's id follows theirs.
    pub fn resume(capacity: usize, next_id: u64, commands: &[Command]) -> Self {
        let mut log = Self::new(capacity);
        let kept = &commands[commands.len().saturating_sub(log.capacity)..];
        log.first_id = kept.first().map_or(next_id.max(1), |first| first.id.max(1));
        for command in kept {
            log.start(
                &command.command,
                command.cwd.as_deref(),
                command.started_at,
                command.output_start,
            );
            if let (Some(ended_at), Some(output_end)) = (command.ended_at, command.output_end) {
                log.finish(command.exit_code, ended_at, output_end);
            }
        }
        log
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The id the next command will have.
    pub fn next_id(&self) -> u64 {
        self.first_id + self.entries.len() as u64
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Starts a command; the oldest one goes when the log is full. Returns its id.
    pub fn start(
        &mut self,
        command: &str,
        cwd: Option<&str>,
        started_at: SystemTime,
        output_start: u64,
    ) -> u64 {
        if self.entries.len() == self.capacity {
            self.drop_oldest();
        }
        let cwd = cwd.map_or(NO_CWD, |cwd| self.intern_cwd(cwd));
        self.grow_for(command.len());
        self.text.push_str(command);
        self.entries.push_back(Entry {
            started_ms: millis(started_at),
            output_start,
            output_end: RUNNING,
            duration_ms: RUNNING_MS,
            exit_code: UNKNOWN_EXIT,
            text_len: command.len() as u32,
            cwd,
        });
        self.next_id() - 1
    }

    /// The command that runs, if the last one does.
    pub fn running(&self) -> Option<Command> {
        let entry = self.entries.back()?;
        (entry.output_end == RUNNING).then(|| self.command_at(self.entries.len() - 1))
    }

    /// Ends the running command, if one runs. Returns it.
    pub fn finish(
        &mut self,
        exit_code: Option<i32>,
        ended_at: SystemTime,
        output_end: u64,
    ) -> Option<Command> {
        let index = self.entries.len().checked_sub(1)?;
        let entry = &mut self.entries[index];
        if entry.output_end != RUNNING {
            return None;
        }
        entry.output_end = output_end.max(entry.output_start);
        entry.duration_ms = millis(ended_at)
            .saturating_sub(entry.started_ms)
            .min(u64::from(RUNNING_MS - 1)) as u32;
        entry.exit_code = exit_code
            .filter(|code| *code != UNKNOWN_EXIT)
            .unwrap_or(UNKNOWN_EXIT);
        Some(self.command_at(index))
    }

    /// Moves the running command's start to where its shell says its output starts, with the
    /// command line the shell gave (for a start first read from the screen).
    pub fn restart_running(&mut self, command: Option<&str>, output_start: u64) {
        let Some(entry) = self.entries.back_mut() else {
            return;
        };
        if entry.output_end != RUNNING {
            return;
        }
        entry.output_start = output_start;
        if let Some(command) = command {
            let old = entry.text_len as usize;
            entry.text_len = command.len() as u32;
            self.text.truncate(self.text.len() - old);
            self.text.push_str(command);
        }
    }

    /// The commands after `after` (an id; 0 for all kept), oldest first, at most `limit`.
    pub fn after(&self, after: u64, limit: usize) -> Vec<Command> {
        let skip = after.saturating_sub(self.first_id - 1) as usize;
        let mut start = self.text_offset(skip.min(self.entries.len()));
        (skip..self.entries.len())
            .take(limit)
            .map(|index| {
                let command = self.command_from(index, start);
                start += self.entries[index].text_len as usize;
                command
            })
            .collect()
    }

    /// One command by id, while it is kept.
    pub fn get(&self, id: u64) -> Option<Command> {
        let index = id.checked_sub(self.first_id)? as usize;
        (index < self.entries.len()).then(|| self.command_at(index))
    }

    /// The id of the oldest command kept (the next id when none is).
    pub fn first_id(&self) -> u64 {
        self.first_id
    }

    /// Roughly the heap this log holds, for the memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry>()
            + self.text.capacity()
            + self.cwds.iter().map(|cwd| cwd.len() + 16).sum::<usize>()
    }

    /// Makes room for one more record and `text_len` bytes of its line, growing by a quarter
    /// rather than doubling, and the records never past the log's capacity: a full log keeps
    /// little slack, which is most of what a thousand records would otherwise cost.
    fn grow_for(&mut self, text_len: usize) {
        let records = self.entries.len();
        if records == self.entries.capacity() {
            let more = (records / 4).max(16).min(self.capacity - records).max(1);
            self.entries.reserve_exact(more);
        }
        let text = self.text.len();
        if text + text_len > self.text.capacity() {
            self.text.reserve_exact(text_len.max(text / 4));
        }
    }

    /// Where the command line of `entries[index]` starts in `text`.
    fn text_offset(&self, index: usize) -> usize {
        self.text_start
            + self
                .entries
                .iter()
                .take(index)
                .map(|entry| entry.text_len as usize)
                .sum::<usize>()
    }

    fn command_at(&self, index: usize) -> Command {
        self.command_from(index, self.text_offset(index))
    }

    fn command_from(&self, index: usize, start: usize) -> Command {
        let entry = self.entries[index];
        let running = entry.output_end == RUNNING;
        let started_at = UNIX_EPOCH + Duration::from_millis(entry.started_ms);
        Command {
            id: self.first_id + index as u64,
            command: self.text[start..start + entry.text_len as usize].to_owned(),
            cwd: (entry.cwd != NO_CWD)
                .then(|| self.cwds[(entry.cwd - self.first_cwd) as usize].to_string()),
            started_at,
            ended_at: (!running)
                .then(|| started_at + Duration::from_millis(u64::from(entry.duration_ms))),
            exit_code: (!running && entry.exit_code != UNKNOWN_EXIT).then_some(entry.exit_code),
            output_start: entry.output_start,
            output_end: (!running).then_some(entry.output_end),
        }
    }

    fn intern_cwd(&mut self, cwd: &str) -> u32 {
        if self.cwds.back().is_some_and(|last| **last == *cwd) {
            return self.first_cwd + self.cwds.len() as u32 - 1;
        }
        self.cwds.push_back(cwd.into());
        self.first_cwd + self.cwds.len() as u32 - 1
    }

    fn drop_oldest(&mut self) {
        let Some(entry) = self.entries.pop_front() else {
            return;
        };
        self.first_id += 1;
        self.text_start += entry.text_len as usize;
        if self.text_start >= COMPACT_TEXT_AT || self.text_start > self.text.len() / 2 {
            self.text.drain(..self.text_start);
            self.text_start = 0;
        }
        // Directories no kept command names any more go too.
        let oldest_named = self
            .entries
            .iter()
            .map(|entry| entry.cwd)
            .find(|cwd| *cwd != NO_CWD);
        let keep_from = oldest_named.unwrap_or(self.first_cwd + self.cwds.len() as u32);
        while self.first_cwd < keep_from && self.cwds.len() > 1 {
            self.cwds.pop_front();
            self.first_cwd += 1;
        }
    }
}

fn millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|since| since.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    #[test]
    fn a_command_runs_then_ends_with_its_code_and_range() {
        let mut log = CommandLog::new(10);
        let id = log.start("make test", Some("/src"), at(1_000), 100);
        assert_eq!(id, 1);
        let running = log.running().expect("it runs");
        assert!(running.is_running());
        assert_eq!(running.output_end, None);
        let done = log.finish(Some(2), at(1_250), 180).expect("it ended");
        assert_eq!(done.command, "make test");
        assert_eq!(done.cwd.as_deref(), Some("/src"));
        assert_eq!(done.exit_code, Some(2));
        assert_eq!(done.ended_at, Some(at(1_250)));
        assert_eq!((done.output_start, done.output_end), (100, Some(180)));
        assert!(log.running().is_none());
        assert!(
            log.finish(Some(0), at(2_000), 200).is_none(),
            "nothing runs"
        );
    }

    #[test]
    fn the_oldest_go_when_full_and_ids_never_repeat() {
        let mut log = CommandLog::new(3);
        for n in 0..5u64 {
            let cwd = if n < 3 { "/a" } else { "/b" };
            log.start(&format!("cmd {n}"), Some(cwd), at(n), n * 10);
            log.finish(Some(n as i32), at(n + 1), n * 10 + 5);
        }
        let kept = log.after(0, 100);
        assert_eq!(kept.iter().map(|c| c.id).collect::<Vec<_>>(), vec![3, 4, 5]);
        assert_eq!(kept[0].command, "cmd 2");
        assert_eq!(kept[0].cwd.as_deref(), Some("/a"));
        assert_eq!(kept[2].cwd.as_deref(), Some("/b"));
        assert_eq!(
            log.after(3, 1).iter().map(|c| c.id).collect::<Vec<_>>(),
            vec![4]
        );
        assert_eq!(log.after(99, 10), vec![]);
        assert_eq!(log.get(2), None);
        assert_eq!(log.get(5).map(|c| c.command), Some("cmd 4".to_owned()));
        assert_eq!(log.next_id(), 6);
    }

    #[test]
    fn a_start_read_from_the_screen_is_corrected_by_the_shell() {
        let mut log = CommandLog::new(3);
        log.start("ech", None, at(0), 10);
        log.restart_running(Some("echo hi"), 14);
        let done = log.finish(None, at(5), 20).expect("ended");
        assert_eq!(done.command, "echo hi");
        assert_eq!(done.output_start, 14);
        assert_eq!(done.exit_code, None);
        assert_eq!(done.cwd, None);
    }

    /// The lines a project's terminal runs (17 bytes on average), twice around the log.
    #[test]
    fn a_thousand_typical_commands_cost_under_64_kib() {
        let lines = [
            "cargo test -p pty-broker --lib",
            "git status",
            "make test",
            "ls -la",
            "npm run build -- --watch=false",
        ];
        let mut log = CommandLog::new(DEFAULT_COMMANDS_KEPT);
        for n in 0..2 * DEFAULT_COMMANDS_KEPT as u64 {
            let line = lines[n as usize % lines.len()];
            log.start(line, Some("/home/developer/src/ptyhub"), at(n), n * 1000);
            log.finish(Some(0), at(n + 1), n * 1000 + 900);
        }
        assert_eq!(log.len(), DEFAULT_COMMANDS_KEPT);
        assert!(
            log.heap_bytes() < 64 * 1024,
            "{} bytes for {} commands",
            log.heap_bytes(),
            log.len()
        );
    }

    #[test]
    fn a_thousand_short_commands_cost_under_64_kib() {
        let mut log = CommandLog::new(DEFAULT_COMMANDS_KEPT);
        for n in 0..3 * DEFAULT_COMMANDS_KEPT as u64 {
            log.start("make test", Some("/home/user/project"), at(n), n * 100);
            log.finish(Some(0), at(n + 1), n * 100 + 50);
        }
        assert_eq!(log.len(), DEFAULT_COMMANDS_KEPT);
        assert!(
            log.heap_bytes() < 64 * 1024,
            "{} bytes for {} commands",
            log.heap_bytes(),
            log.len()
        );
    }
}
