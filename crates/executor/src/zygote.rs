//! The zygote: a small process exec'd once from the emulator's binary, with an empty
//! environment, that forks the keeper of every namespaced sandbox.
//!
//! Why: a keeper forked from the emulator copies the page tables of a large multi-threaded
//! process, makes every page the emulator writes afterwards fault and be copied (the keeper
//! lives as long as its sandbox and keeps the old pages), and hands its init a copy of the
//! emulator's memory, so init had to execute the emulator's binary again (about a millisecond
//! of loading and relocation) before the sandbox's processes could see it. Forked from the
//! zygote, a keeper and its init hold nothing but the zygote's few pages and their own
//! sandbox's plan, and init runs in place.
//!
//! The zygote never sees a plan: it forks on request, and the child reads its plan (with its
//! pipes attached) from a socket pair of its own. The zygote reports the child's pid with a
//! pidfd (`CLONE_PIDFD`, so the emulator signals exactly that process) and, once it reaped it,
//! its wait status. It exits when the emulator closes its end; it dies with the emulator
//! (`PR_SET_PDEATHSIG`), and the keepers with it.
//!
//! This module is the emulator's end of the zygote and what both ends share: the messages and
//! the plan's encoding. The zygote's own loop (`crate::zygote_process`) forks keepers and file
//! helpers, and a file helper's caller holds this end, so the loop sits above both and this end
//! below.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cwsandbox_sync::MutexUnpoisoned;
use libc::{c_int, pid_t};
use tokio::sync::oneshot;

use crate::activation::{Reader, put_bytes, put_ids};
use crate::main_command::Program;
use crate::message_socket::MessageSocket;
use crate::sandbox_plan::{Bind, IdMap, InitPlan, NsPlan};
use crate::spawner::Spawner;
use crate::sys::{self, exit};

/// The argument that makes a program the zygote (followed by its socket's descriptor).
pub(crate) const ZYGOTE_MAGIC: &CStr = c"--cwsandbox-zygote-v1";

/// The largest plan: a main command's arguments and environment are most of it, and `execve`
/// refuses more than about 2 MiB of those. Plans over `sys::INLINE_PAYLOAD_BYTES` travel in a
/// sealed memfd.
pub(crate) const MAX_PLAN_BYTES: usize = 4 << 20;

pub(crate) const FORK_TAG: u8 = b'F';
/// Forks a file helper (`crate::file_helper`) instead of a keeper.
pub(crate) const FORK_FILE_HELPER_TAG: u8 = b'H';
pub(crate) const FORKED_TAG: u8 = b'P';
pub(crate) const FORK_FAILED_TAG: u8 = b'X';
pub(crate) const EXITED_TAG: u8 = b'E';

/// The descriptors a plan travels with, in this order.
pub(crate) const PLAN_FDS: usize = 5;

/// Encodes what a keeper forked by the zygote needs of `plan` (a namespaced one); the
/// descriptors go alongside.
pub(crate) fn encode_plan(plan: &InitPlan) -> Option<Vec<u8>> {
    let ns = plan.ns.as_ref()?;
    let mut out = Vec::new();
    out.extend_from_slice(&ns.flags.to_le_bytes());
    match &ns.id_map {
        None => out.push(0),
        Some(IdMap::Own { uid_map, gid_map }) => {
            out.push(1);
            put_bytes(&mut out, uid_map.as_bytes());
            put_bytes(&mut out, gid_map.as_bytes());
        }
        Some(IdMap::Range { uid_map, gid_map }) => {
            out.push(2);
            put_bytes(&mut out, uid_map.as_bytes());
            put_bytes(&mut out, gid_map.as_bytes());
        }
    }
    for text in [&ns.hostname, &ns.rootfs] {
        put_bytes(&mut out, text.as_bytes());
    }
    out.extend_from_slice(&(ns.binds.len() as u32).to_le_bytes());
    for bind in &ns.binds {
        put_bytes(&mut out, bind.source.as_bytes());
        put_bytes(&mut out, bind.target.as_bytes());
        out.push(u8::from(bind.read_only));
        match &bind.overlay {
            None => out.push(0),
            Some(options) => {
                out.push(1);
                put_bytes(&mut out, options.as_bytes());
            }
        }
    }
    for text in [&ns.devpts, &ns.proc_dir, &ns.proc_sys] {
        put_bytes(&mut out, text.as_bytes());
    }
    put_ids(&mut out, ns.main_ids);
    match ns.join {
        None => out.push(0),
        Some((pid, as_root)) => {
            out.push(if as_root { 2 } else { 1 });
            out.extend_from_slice(&(pid as u32).to_le_bytes());
        }
    }
    match &ns.network_namespace {
        None => out.push(0),
        Some(path) => {
            out.push(1);
            put_bytes(&mut out, path.as_bytes());
        }
    }
    out.push(u8::from(plan.warm));
    out.push(u8::from(plan.idle));
    put_bytes(&mut out, plan.cwd.as_bytes());
    put_bytes(&mut out, &plan.cwd_message);
    match &plan.program {
        Some(program) => {
            out.push(1);
            program.command().encode(&mut out);
        }
        None => out.push(0),
    }
    Some(out)
}

/// The plan [`encode_plan`] wrote, with its descriptors (report, go, started, control); it
/// runs in place (no re-execution: there is no emulator memory to shed).
pub(crate) fn decode_plan(bytes: &[u8], parent: pid_t, fds: [RawFd; 4]) -> Option<InitPlan> {
    let mut reader = Reader(bytes);
    let flags = reader.u32()? as c_int;
    let id_map = match reader.byte()? {
        0 => None,
        1 => Some(IdMap::Own { uid_map: reader.c_string()?, gid_map: reader.c_string()? }),
        2 => Some(IdMap::Range { uid_map: reader.c_string()?, gid_map: reader.c_string()? }),
        _ => return None,
    };
    let hostname = reader.c_string()?;
    let rootfs = reader.c_string()?;
    let count = reader.u32()? as usize;
    // Each bind takes two lengths, a flag and an overlay flag at least.
    if count > reader.0.len() / 10 {
        return None;
    }
    let mut binds = Vec::with_capacity(count);
    for _ in 0..count {
        let source = reader.c_string()?;
        let target = reader.c_string()?;
        let read_only = flag(reader.byte()?)?;
        let overlay = match reader.byte()? {
            0 => None,
            1 => Some(reader.c_string()?),
            _ => return None,
        };
        binds.push(Bind { source, target, read_only, overlay });
    }
    let devpts = reader.c_string()?;
    let proc_dir = reader.c_string()?;
    let proc_sys = reader.c_string()?;
    let main_ids = reader.ids()?;
    let join = match reader.byte()? {
        0 => None,
        kind @ (1 | 2) => Some((pid_t::try_from(reader.u32()?).ok()?, kind == 2)),
        _ => return None,
    };
    let network_namespace = match reader.byte()? {
        0 => None,
        1 => Some(reader.c_string()?),
        _ => return None,
    };
    let warm = flag(reader.byte()?)?;
    let idle = flag(reader.byte()?)?;
    let cwd = reader.c_string()?;
    let cwd_message = reader.bytes()?.to_vec();
    let program = match reader.byte()? {
        0 => None,
        1 => {
            let command = reader.command()?;
            Some(Program::new(command.candidates, command.argv, command.envp, &command.display))
        }
        _ => return None,
    };
    if !reader.0.is_empty() {
        return None;
    }
    let [report_fd, go_fd, started_fd, control_fd] = fds;
    Some(InitPlan {
        parent,
        report_fd,
        go_fd,
        started_fd,
        control_fd,
        ns: Some(NsPlan {
            flags,
            id_map,
            hostname,
            rootfs,
            binds,
            devpts,
            proc_dir,
            proc_sys,
            main_ids,
            join,
            network_namespace,
        }),
        self_exe: -1,
        probe: false,
        warm,
        idle,
        cwd,
        cwd_message,
        program,
    })
}

fn flag(byte: u8) -> Option<bool> {
    match byte {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

/// A keeper the zygote forked.
#[derive(Debug)]
pub(crate) struct Forked {
    pub(crate) pid: pid_t,
    pub(crate) pidfd: OwnedFd,
    /// Its wait status, or an error if the zygote ended first (the keeper died with it).
    pub(crate) exit: oneshot::Receiver<c_int>,
}

/// The emulator's end of the zygote.
#[derive(Debug)]
pub(crate) struct Zygote {
    socket: MessageSocket,
    /// Each update is a single insert or remove, consistent across a panic elsewhere.
    waiting: Mutex<Waiting>,
    next_id: AtomicU64,
    process: Mutex<Option<tokio::process::Child>>,
    /// Set once its socket closed: it is gone, and a new one is needed.
    gone: AtomicBool,
}

#[derive(Debug, Default)]
struct Waiting {
    forks: HashMap<u64, oneshot::Sender<Result<Forked, c_int>>>,
    exits: HashMap<pid_t, oneshot::Sender<c_int>>,
}

impl Zygote {
    /// Executes the binary open at `self_exe` as the zygote, from the spawner thread (its death
    /// signal is tied to that thread, which lives as long as the executor).
    pub(crate) async fn start(spawner: &Spawner, self_exe: RawFd, parent: pid_t) -> io::Result<Arc<Zygote>> {
        let (ours, theirs) = sys::seqpacket_pair()?;
        let socket = theirs.as_raw_fd();
        // Everything the child needs is made before the fork.
        let socket_argument = CString::new(socket.to_string()).map_err(io::Error::other)?;
        let arguments = [c"cwsandbox-zygote", ZYGOTE_MAGIC, socket_argument.as_c_str()];
        let argv: Vec<usize> = arguments.iter().map(|argument| argument.as_ptr() as usize).chain([0]).collect();
        // The program is never run: the child executes the emulator's binary itself.
        let mut command = tokio::process::Command::new("cwsandbox-zygote");
        command.env_clear().kill_on_drop(true);
        command.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
        command.stderr(std::process::Stdio::null());
        // SAFETY: the closure only makes async-signal-safe calls between fork and exec; `argv`
        // points into `socket_argument` and static strings, which outlive the spawn.
        unsafe {
            command.pre_exec(move || {
                if !sys::set_parent_death_signal(libc::SIGKILL, parent) {
                    exit(1);
                }
                // The socket stays open across exec, at the number its argument says.
                if libc::fcntl(socket, libc::F_SETFD, 0) < 0 {
                    return Err(io::Error::last_os_error());
                }
                sys::exec_self(self_exe, std::slice::from_raw_parts(argv.as_ptr().cast(), argv.len()));
                Err(io::Error::last_os_error())
            });
        }
        let process = spawner.spawn(command).await?;
        drop(theirs);
        let socket = MessageSocket::new(ours)?;
        let zygote = Arc::new(Zygote {
            socket,
            waiting: Mutex::new(Waiting::default()),
            next_id: AtomicU64::new(1),
            process: Mutex::new(Some(process)),
            gone: AtomicBool::new(false),
        });
        tokio::spawn(read_reports(zygote.clone()));
        Ok(zygote)
    }

    /// Has the zygote fork a keeper for `plan` ([`encode_plan`]) with its report, go, started
    /// and control descriptors and the write end of its log pipe.
    pub(crate) async fn fork_keeper(&self, plan: &[u8], fds: [RawFd; PLAN_FDS]) -> io::Result<Forked> {
        if plan.len() > MAX_PLAN_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the sandbox's plan takes {} bytes, more than {MAX_PLAN_BYTES}", plan.len()),
            ));
        }
        let (plan_ours, plan_theirs) = sys::seqpacket_pair()?;
        // A large plan travels in a sealed memfd, attached last.
        let (message, memfd) = sys::envelope(plan)?;
        let mut attached = fds.to_vec();
        attached.extend(memfd.as_ref().map(AsRawFd::as_raw_fd));
        // Queued until the child reads it; the socket keeps it after our end closes.
        sys::send_message(plan_ours.as_raw_fd(), &message, &attached, 0).map_err(|error| match error {
            libc::EMSGSIZE | libc::ENOBUFS => io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the sandbox's plan ({} bytes) is larger than this machine's socket buffers allow", plan.len()),
            ),
            error => io::Error::from_raw_os_error(error),
        })?;
        drop(plan_ours);
        self.fork(FORK_TAG, plan_theirs).await
    }

    /// Has the zygote fork a file helper (`crate::file_helper`) with `order` and its
    /// descriptors; returns the helper and the socket it answers on.
    pub(crate) async fn fork_file_helper(&self, order: &[u8], fds: &[RawFd]) -> io::Result<(Forked, OwnedFd)> {
        let (ours, theirs) = sys::seqpacket_pair()?;
        // Queued until the helper reads it.
        sys::send_message(ours.as_raw_fd(), order, fds, 0).map_err(io::Error::from_raw_os_error)?;
        let forked = self.fork(FORK_FILE_HELPER_TAG, theirs).await?;
        Ok((forked, ours))
    }

    /// Asks for a fork (`tag`) whose child reads its plan from `plan_socket`.
    async fn fork(&self, tag: u8, plan_socket: OwnedFd) -> io::Result<Forked> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        self.waiting.lock_unpoisoned().forks.insert(id, sender);
        let mut request = vec![tag];
        request.extend_from_slice(&id.to_le_bytes());
        if let Err(error) = self.socket.send(&request, &[plan_socket.as_raw_fd()]).await {
            self.waiting.lock_unpoisoned().forks.remove(&id);
            return Err(error);
        }
        drop(plan_socket);
        match receiver.await {
            Ok(Ok(forked)) => Ok(forked),
            Ok(Err(error)) => Err(io::Error::from_raw_os_error(error)),
            Err(_) => Err(io::Error::other("the zygote ended")),
        }
    }

    /// Whether it has ended (its keepers with it).
    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }

    /// Ends the zygote (a keeper it forked dies with it) and reaps it.
    pub(crate) async fn stop(&self) {
        let process = self.process.lock_unpoisoned().take();
        if let Some(mut process) = process {
            let _ = process.start_kill();
            let _ = process.wait().await;
        }
    }
}

async fn read_reports(zygote: Arc<Zygote>) {
    let mut buffer = [0u8; 64];
    loop {
        let (length, mut fds) = match zygote.socket.receive(&mut buffer).await {
            Ok((0, _)) => break,
            Ok(message) => message,
            Err(error) if error.raw_os_error() == Some(libc::EMSGSIZE) => continue,
            Err(_) => break,
        };
        let mut reader = Reader(&buffer[..length]);
        match reader.byte() {
            Some(FORKED_TAG) => {
                let (Some(id), Some(pid), Some(pidfd)) = (reader.u64(), reader.u32(), fds.pop()) else { continue };
                let pid = pid as pid_t;
                let (exit_sender, exit) = oneshot::channel();
                let mut waiting = zygote.waiting.lock_unpoisoned();
                waiting.exits.insert(pid, exit_sender);
                if let Some(waiter) = waiting.forks.remove(&id) {
                    let _ = waiter.send(Ok(Forked { pid, pidfd, exit }));
                }
            }
            Some(FORK_FAILED_TAG) => {
                let (Some(id), Some(error)) = (reader.u64(), reader.u32()) else { continue };
                if let Some(waiter) = zygote.waiting.lock_unpoisoned().forks.remove(&id) {
                    let _ = waiter.send(Err(error as c_int));
                }
            }
            Some(EXITED_TAG) => {
                let (Some(pid), Some(status)) = (reader.u32(), reader.u32()) else { continue };
                if let Some(waiter) = zygote.waiting.lock_unpoisoned().exits.remove(&(pid as pid_t)) {
                    let _ = waiter.send(status as c_int);
                }
            }
            _ => {}
        }
    }
    zygote.gone.store(true, Ordering::SeqCst);
    *zygote.waiting.lock_unpoisoned() = Waiting::default();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_plan(program: bool) -> InitPlan {
        InitPlan {
            parent: 1,
            report_fd: 10,
            go_fd: 11,
            started_fd: 12,
            control_fd: 13,
            ns: Some(NsPlan {
                flags: libc::CLONE_NEWNS | libc::CLONE_NEWUSER,
                id_map: Some(IdMap::Range { uid_map: c"0 100000 65536".to_owned(), gid_map: c"0 100000 1".to_owned() }),
                hostname: c"pod-1".to_owned(),
                rootfs: c"/dev/shm/x/rootfs".to_owned(),
                binds: vec![
                    Bind {
                        source: c"/usr".to_owned(),
                        target: c"/dev/shm/x/rootfs/usr".to_owned(),
                        read_only: true,
                        overlay: None,
                    },
                    Bind {
                        source: c"/etc".to_owned(),
                        target: c"/dev/shm/x/rootfs/etc".to_owned(),
                        read_only: true,
                        overlay: Some(c"lowerdir=/dev/shm/x/layers/0:/etc".to_owned()),
                    },
                ],
                devpts: c"/r/dev/pts".to_owned(),
                proc_dir: c"/r/proc".to_owned(),
                proc_sys: c"/r/proc/sys".to_owned(),
                main_ids: Some((0, 0)),
                join: None,
                network_namespace: Some(c"/run/netns/cwsbx0-3".to_owned()),
            }),
            self_exe: 5,
            probe: false,
            warm: true,
            idle: false,
            cwd: c"/work".to_owned(),
            cwd_message: b"cannot\n".to_vec(),
            program: program.then(|| {
                Program::new(vec![c"/bin/sh".to_owned()], vec![c"sh".to_owned()], vec![c"A=b".to_owned()], "sh")
            }),
        }
    }

    #[test]
    fn plans_round_trip_and_malformed_ones_are_refused() {
        for program in [false, true] {
            let bytes = encode_plan(&sample_plan(program)).unwrap();
            let decoded = decode_plan(&bytes, 77, [20, 21, 22, 23]).unwrap();
            assert_eq!(encode_plan(&decoded).unwrap(), bytes);
            assert_eq!((decoded.parent, decoded.report_fd, decoded.control_fd, decoded.self_exe), (77, 20, 23, -1));
            for length in 0..bytes.len() {
                assert!(decode_plan(&bytes[..length], 77, [20, 21, 22, 23]).is_none(), "truncated to {length}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(decode_plan(&longer, 77, [20, 21, 22, 23]).is_none());
        }
        let plain = InitPlan { ns: None, ..sample_plan(false) };
        assert!(encode_plan(&plain).is_none(), "plain-mode keepers are not the zygote's");
    }
}
