//! The zygote's own process (`crate::zygote` says why there is one): its loop, which forks a
//! keeper (`crate::child`) or a file helper (`crate::file_helper`) on each of the emulator's
//! requests. It reaches down into both, so it is its own module above them.

use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd};

use libc::{c_int, pid_t};

use crate::child;
use crate::sys::{self, block_all_signals, control_signalfd, errno, exit, next_signal, set_name};
use crate::zygote::{
    EXITED_TAG, FORK_FAILED_TAG, FORK_FILE_HELPER_TAG, FORK_TAG, FORKED_TAG, MAX_PLAN_BYTES, PLAN_FDS, decode_plan,
};

/// The zygote's loop, once exec'd with its socket at `socket`. Never returns.
pub(crate) fn run(socket: c_int) -> ! {
    set_name(c"cwsandbox-zygote");
    // SAFETY: fcntl on the descriptor handed to us.
    unsafe { libc::fcntl(socket, libc::F_SETFD, libc::FD_CLOEXEC) };
    block_all_signals();
    let Ok(signals) = control_signalfd() else { exit(1) };
    let zygote = std::process::id() as pid_t;
    let mut buffer = [0u8; 64];
    loop {
        let mut polls = [
            libc::pollfd { fd: signals, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: socket, events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: two valid pollfds.
        if unsafe { libc::poll(polls.as_mut_ptr(), 2, -1) } < 0 && errno() != libc::EINTR {
            exit(1);
        }
        if polls[0].revents != 0 && next_signal(signals) == Some(libc::SIGCHLD) {
            loop {
                let mut status = 0;
                // SAFETY: waitpid with a valid status pointer.
                let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
                if pid <= 0 {
                    break;
                }
                let mut message = vec![EXITED_TAG];
                message.extend_from_slice(&pid.to_le_bytes());
                message.extend_from_slice(&status.to_le_bytes());
                let _ = sys::send_message(socket, &message, &[], 0);
            }
        }
        if polls[1].revents != 0 {
            match sys::receive_message(socket, &mut buffer, 0) {
                // The emulator is gone: so are we (the keepers' death signals follow).
                Ok((0, _)) => exit(0),
                Ok((9, mut fds)) if matches!(buffer[0], FORK_TAG | FORK_FILE_HELPER_TAG) && fds.len() == 1 => {
                    let mut id = [0u8; 8];
                    id.copy_from_slice(&buffer[1..9]);
                    let role = if buffer[0] == FORK_TAG { Role::Keeper } else { Role::FileHelper };
                    if let Some(plan_socket) = fds.pop() {
                        fork_child(socket, zygote, u64::from_le_bytes(id), plan_socket, role);
                    }
                }
                Ok(_) | Err(libc::EMSGSIZE) => {}
                Err(_) => exit(1),
            }
        }
    }
}

/// What a forked child becomes; it reads its plan or order itself.
#[derive(Clone, Copy)]
enum Role {
    Keeper,
    FileHelper,
}

fn fork_child(socket: c_int, zygote: pid_t, id: u64, plan_socket: OwnedFd, role: Role) {
    let mut pidfd: c_int = -1;
    // SAFETY: clone with CLONE_PIDFD writes the pidfd through the third argument (the parent
    // tid pointer on x86_64 and aarch64 alike); this process has one thread, so the child may
    // run any code.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_PIDFD | libc::SIGCHLD) as libc::c_ulong,
            0 as libc::c_ulong,
            &mut pidfd as *mut c_int,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    } as pid_t;
    if pid == 0 {
        match role {
            Role::Keeper => become_keeper(zygote, plan_socket),
            Role::FileHelper => {
                // A helper outliving the zygote would finish its one order and exit anyway.
                sys::set_parent_death_signal(libc::SIGKILL, zygote);
                crate::file_helper::run(plan_socket)
            }
        }
    }
    drop(plan_socket);
    let mut message = vec![if pid < 0 { FORK_FAILED_TAG } else { FORKED_TAG }];
    message.extend_from_slice(&id.to_le_bytes());
    if pid < 0 {
        message.extend_from_slice(&errno().to_le_bytes());
        let _ = sys::send_message(socket, &message, &[], 0);
        return;
    }
    message.extend_from_slice(&pid.to_le_bytes());
    let _ = sys::send_message(socket, &message, &[pidfd], 0);
    // SAFETY: closing our copy of the pidfd; the emulator has its own.
    unsafe { libc::close(pidfd) };
}

/// The forked child: reads its plan and runs the keeper. Never returns.
fn become_keeper(zygote: pid_t, plan_socket: OwnedFd) -> ! {
    let mut buffer = vec![0u8; sys::ENVELOPE_BUFFER_BYTES];
    let Ok((length, mut fds)) = sys::receive_message(plan_socket.as_raw_fd(), &mut buffer, 0) else { exit(1) };
    let Some(payload) = sys::open_envelope(&buffer[..length], &mut fds, MAX_PLAN_BYTES) else { exit(1) };
    let Ok(fds) = <[OwnedFd; PLAN_FDS]>::try_from(fds) else { exit(1) };
    let [report, go, started, control, log] = fds.map(IntoRawFd::into_raw_fd);
    let Some(plan) = decode_plan(&payload, zygote, [report, go, started, control]) else { exit(1) };
    drop((buffer, payload));
    // The standard descriptors of a keeper: stdin is the zygote's (/dev/null), stdout the
    // sandbox's log pipe.
    // SAFETY: dup2 of a descriptor we hold; the received descriptors are above 2.
    unsafe { libc::dup2(log, 1) };
    // The keeper closes every descriptor its plan does not name.
    child::run_ns_keeper(&plan)
}
