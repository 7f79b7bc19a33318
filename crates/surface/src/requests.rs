//! The last API calls, as the Firebase Emulator UI's request log shows them: what was called, by
//! whom, with what answer, how long it took, and which fault rules hit it.
//!
//! The request guard writes one [`CallRecord`] per RPC when its answer ends (a stream when its
//! last message is sent); the dashboard reads them. Only the newest [`RequestLog::CAPACITY`]
//! are kept, so the log costs a bounded amount of memory however long the emulator runs.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use cwsandbox_sync::MutexUnpoisoned;

/// One finished call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRecord {
    /// Increasing from 1 over the emulator's life.
    pub sequence: u64,
    /// When the call arrived (wall clock: a request log is read against the reader's watch,
    /// not the simulated clock, which tests may freeze).
    pub at: SystemTime,
    /// `Service/Method` as the catalogue names it, or the path of an unknown one.
    pub method: String,
    /// The caller's organization; empty when the call was not authenticated.
    pub org: String,
    /// The caller's user name; empty when the call was not authenticated.
    pub user: String,
    /// The gRPC code name of the answer (`OK`, `NOT_FOUND`, …).
    pub code: String,
    /// From arrival to the end of the answer.
    pub duration: Duration,
    /// The fault rules that hit the call (their ids), and `x-cwsandbox-fault` for the header's.
    pub faults: Vec<String>,
    /// Made by the dashboard's buttons (through the same handler), not over the wire.
    pub from_dashboard: bool,
}

/// How the log names the RPC at an HTTP path: `/coreweave.sandbox.v1.SandboxService/GetSandbox`
/// → `SandboxService/GetSandbox` (a path that names no RPC stays as it is, without its `/`).
pub fn method_name(path: &str) -> String {
    let path = path.trim_start_matches('/');
    match path.split_once('/') {
        Some((service, method)) => format!("{}/{method}", service.rsplit('.').next().unwrap_or(service)),
        None => path.to_owned(),
    }
}

/// The bounded log.
#[derive(Debug)]
pub struct RequestLog {
    records: Mutex<VecDeque<CallRecord>>,
    next: std::sync::atomic::AtomicU64,
    changes: tokio::sync::watch::Sender<u64>,
}

impl Default for RequestLog {
    fn default() -> Self {
        RequestLog {
            records: Mutex::new(VecDeque::with_capacity(Self::CAPACITY)),
            next: std::sync::atomic::AtomicU64::new(1),
            changes: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl RequestLog {
    /// How many calls are kept.
    pub const CAPACITY: usize = 500;

    /// Adds a finished call (its `sequence` is assigned here) and wakes the readers.
    pub fn record(&self, mut record: CallRecord) {
        let sequence = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        record.sequence = sequence;
        {
            let mut records = self.records.lock_unpoisoned();
            if records.len() == Self::CAPACITY {
                records.pop_front();
            }
            records.push_back(record);
        }
        self.changes.send_replace(sequence);
    }

    /// The newest `limit` calls that `visible` admits, newest first.
    pub fn newest(&self, limit: usize, visible: impl Fn(&CallRecord) -> bool) -> Vec<CallRecord> {
        let records = self.records.lock_unpoisoned();
        records.iter().rev().filter(|record| visible(record)).take(limit).cloned().collect()
    }

    /// Changes each time a call is recorded (the newest sequence number).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(org: &str) -> CallRecord {
        CallRecord {
            sequence: 0,
            at: SystemTime::UNIX_EPOCH,
            method: "SandboxService/GetSandbox".to_owned(),
            org: org.to_owned(),
            user: "alice".to_owned(),
            code: "OK".to_owned(),
            duration: Duration::from_millis(3),
            faults: Vec::new(),
            from_dashboard: false,
        }
    }

    #[test]
    fn methods_are_named_by_service_and_rpc() {
        assert_eq!(method_name("/coreweave.sandbox.v1.SandboxService/GetSandbox"), "SandboxService/GetSandbox");
        assert_eq!(method_name("/favicon.ico"), "favicon.ico");
    }

    #[test]
    fn keeps_the_newest_calls_and_numbers_them() {
        let log = RequestLog::default();
        let total = RequestLog::CAPACITY + 7;
        for index in 0..total {
            log.record(call(if index % 2 == 0 { "a" } else { "b" }));
        }
        let all = log.newest(usize::MAX, |_| true);
        assert_eq!(all.len(), RequestLog::CAPACITY);
        assert_eq!(all[0].sequence, total as u64);
        assert_eq!(all.last().map(|record| record.sequence), Some(8));
        let only_a = log.newest(3, |record| record.org == "a");
        assert_eq!(only_a.len(), 3);
        assert!(only_a.iter().all(|record| record.org == "a"));
        assert_eq!(*log.changes().borrow(), total as u64);
    }
}
