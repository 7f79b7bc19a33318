//! Looking for processes in `/proc` (Linux): the descendants of a process, and processes whose
//! environment holds a marker. The harness uses them to prove that no sandbox process outlives
//! its emulator.

use std::collections::HashMap;
use std::fmt;
use std::fs;

/// A process, identified by its pid and its start time (so a reused pid is not mistaken for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    /// Process id (in the caller's pid namespace).
    pub pid: u32,
    /// Start time in clock ticks after boot (`/proc/PID/stat` field 22).
    pub start_time: u64,
    /// Its command line, for messages.
    pub command: String,
}

/// `(parent pid, state, start time)` of a process, from `/proc/PID/stat`.
fn stat(pid: u32) -> Option<(u32, char, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain anything; the fields follow the last ')'.
    let fields: Vec<&str> = text.rsplit_once(')')?.1.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let parent = fields.get(1)?.parse().ok()?;
    let start_time = fields.get(19)?.parse().ok()?;
    Some((parent, state, start_time))
}

fn command_line(pid: u32) -> String {
    fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " ").trim().to_owned())
        .unwrap_or_default()
}

fn pids() -> Vec<u32> {
    fs::read_dir("/proc")
        .map(|entries| entries.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default()
}

impl Process {
    fn of(pid: u32) -> Option<Process> {
        let (_, _, start_time) = stat(pid)?;
        Some(Process { pid, start_time, command: command_line(pid) })
    }

    /// Whether it still runs: same pid and start time, and not a zombie (a zombie is dead; it only
    /// waits for its parent to reap it).
    pub fn is_alive(&self) -> bool {
        matches!(stat(self.pid), Some((_, state, start_time)) if start_time == self.start_time && state != 'Z')
    }
}

impl fmt::Display for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {} {}", self.pid, self.command)
    }
}

/// Every living descendant of `root` (children, their children, …), not `root` itself.
pub fn descendants(root: u32) -> Vec<Process> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for pid in pids() {
        if let Some((parent, state, _)) = stat(pid)
            && state != 'Z'
        {
            children.entry(parent).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
            if let Some(process) = Process::of(child) {
                found.push(process);
            }
            queue.push(child);
        }
    }
    found
}

/// Every living process whose environment has `name=value`.
pub fn with_env(name: &str, value: &str) -> Vec<Process> {
    let wanted = format!("{name}={value}").into_bytes();
    pids()
        .into_iter()
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|environ| environ.split(|byte| *byte == 0).any(|entry| entry == wanted.as_slice()))
        })
        .filter_map(Process::of)
        .filter(Process::is_alive)
        .collect()
}

/// The living processes whose environment has `name=value`, once there is one or `limit` has
/// passed: a process in the middle of `execve` shows an empty environment for a moment (the new
/// image's is not set up yet), so one look can miss a process that runs.
pub fn wait_until_found(name: &str, value: &str, limit: std::time::Duration) -> Vec<Process> {
    poll_with_env(name, value, limit, |found| !found.is_empty())
}

/// The living processes whose environment has `name=value`, once none is left or `limit` has
/// passed: what ends them (a watchdog noticing its emulator died) takes a moment.
pub fn wait_until_gone(name: &str, value: &str, limit: std::time::Duration) -> Vec<Process> {
    poll_with_env(name, value, limit, <[Process]>::is_empty)
}

/// Looks at the processes with `name=value` every 20 ms until `done` holds of them or `limit`
/// has passed, and answers the last look.
fn poll_with_env(name: &str, value: &str, limit: std::time::Duration, done: fn(&[Process]) -> bool) -> Vec<Process> {
    let started = std::time::Instant::now();
    loop {
        let found = with_env(name, value);
        if done(&found) || started.elapsed() >= limit {
            return found;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_descendants_and_environment_markers() {
        let marker = format!("marker-{}", std::process::id());
        let mut child = std::process::Command::new("sleep").arg("60").env("TESTKIT_MARKER", &marker).spawn().unwrap();
        let found = descendants(std::process::id());
        assert!(found.iter().any(|process| process.pid == child.id()), "{found:?}");
        let marked = with_env("TESTKIT_MARKER", &marker);
        assert_eq!(marked.iter().map(|process| process.pid).collect::<Vec<_>>(), [child.id()]);
        let process = marked[0].clone();
        assert!(process.is_alive());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!process.is_alive());
        assert!(with_env("TESTKIT_MARKER", &marker).is_empty());
    }
}
