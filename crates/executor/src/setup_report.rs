//! What a sandbox's processes tell the emulator on the report pipe while they set the sandbox
//! up: ready, or the step that failed with its errno. The writers are forked processes, so a
//! record is written without allocating; the emulator decodes what it read.

use std::os::fd::RawFd;

use libc::{c_int, pid_t};

use crate::sys::write_all;

/// One step of sandbox setup, reported back to the emulator when it fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Stage {
    Unshare = 1,
    SetGroups,
    GidMap,
    UidMap,
    Hostname,
    MountPrivate,
    MountRoot,
    MountHost,
    MountDevpts,
    Pipe,
    Fork,
    MountProc,
    PivotRoot,
    Credentials,
    ExecInit,
    Signalfd,
    Loopback,
    JoinPod,
    MountHostLayer,
    JoinNetwork,
}

impl Stage {
    const ALL: [Stage; 20] = [
        Stage::Unshare,
        Stage::SetGroups,
        Stage::GidMap,
        Stage::UidMap,
        Stage::Hostname,
        Stage::MountPrivate,
        Stage::MountRoot,
        Stage::MountHost,
        Stage::MountDevpts,
        Stage::Pipe,
        Stage::Fork,
        Stage::MountProc,
        Stage::PivotRoot,
        Stage::Credentials,
        Stage::ExecInit,
        Stage::Signalfd,
        Stage::Loopback,
        Stage::JoinPod,
        Stage::MountHostLayer,
        Stage::JoinNetwork,
    ];

    fn from_u8(value: u8) -> Option<Stage> {
        Stage::ALL.into_iter().find(|stage| *stage as u8 == value)
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Stage::Unshare => "unshare(user/uts/ipc/mount/pid namespaces)",
            Stage::SetGroups => "write /proc/self/setgroups",
            Stage::GidMap => "write the gid map",
            Stage::UidMap => "write the uid map",
            Stage::Hostname => "sethostname",
            Stage::MountPrivate => "make mounts private",
            Stage::MountRoot => "bind the sandbox's root directory",
            Stage::MountHost => "bind a host directory or device read-only",
            Stage::MountDevpts => "mount the sandbox's devpts",
            Stage::Pipe => "pipe",
            Stage::Fork => "fork",
            Stage::MountProc => "mount /proc for the pid namespace",
            Stage::PivotRoot => "pivot_root into the sandbox's root",
            Stage::Credentials => "drop capabilities and switch to the sandbox's root user",
            Stage::ExecInit => "execute the sandbox's init",
            Stage::Signalfd => "signalfd",
            Stage::Loopback => "bring up the loopback interface of the sandbox's network namespace",
            Stage::JoinNetwork => "join the network namespace made for the sandbox (setns)",
            Stage::JoinPod => "join the Pod's user, network, IPC and UTS namespaces (setns)",
            Stage::MountHostLayer => "lay the sandbox's mounted files over a host directory (a read-only overlay)",
        }
    }
}

/// What a child tells the emulator on the report pipe: fixed 6-byte records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReportMessage {
    /// Setup is complete; the value is the main process's pid in plain mode.
    Ready(pid_t),
    Failed(Stage, c_int),
}

const REPORT_LEN: usize = 6;

pub(crate) fn report(fd: RawFd, message: ReportMessage) {
    let (tag, stage, value) = match message {
        ReportMessage::Ready(pid) => (b'R', 0, pid),
        ReportMessage::Failed(stage, errno) => (b'E', stage as u8, errno),
    };
    let value = value.to_le_bytes();
    // Records are shorter than PIPE_BUF, so each write is atomic even when two
    // processes of the same sandbox report on the pipe.
    write_all(fd, &[tag, stage, value[0], value[1], value[2], value[3]]);
}

/// Decodes the records read from a report pipe, first message first.
pub(crate) fn parse_report(bytes: &[u8]) -> Vec<ReportMessage> {
    bytes
        .chunks_exact(REPORT_LEN)
        .filter_map(|record| {
            let value = i32::from_le_bytes([record[2], record[3], record[4], record[5]]);
            match record[0] {
                b'R' => Some(ReportMessage::Ready(value)),
                b'E' => Some(ReportMessage::Failed(Stage::from_u8(record[1])?, value)),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_records_round_trip() {
        let mut bytes = Vec::new();
        for message in [ReportMessage::Ready(42), ReportMessage::Failed(Stage::MountProc, libc::EPERM)] {
            let (tag, stage, value) = match message {
                ReportMessage::Ready(pid) => (b'R', 0, pid),
                ReportMessage::Failed(stage, errno) => (b'E', stage as u8, errno),
            };
            bytes.push(tag);
            bytes.push(stage);
            bytes.extend_from_slice(&value.to_le_bytes());
        }
        assert_eq!(
            parse_report(&bytes),
            vec![ReportMessage::Ready(42), ReportMessage::Failed(Stage::MountProc, libc::EPERM)]
        );
    }
}
