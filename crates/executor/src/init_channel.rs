//! The channel between the emulator and a namespaced sandbox's init, over which commands are
//! exec'd: a `SOCK_SEQPACKET` socket pair made with the sandbox's keeper. The emulator sends an
//! [`ExecOrder`] with the command's three standard descriptors attached (`SCM_RIGHTS`); init
//! forks the command, says when it has exec'd (or failed to: [`Report::Started`]), and when it
//! reaps it sends its wait status back ([`Report::Exited`]).
//!
//! Why init forks: it is small, single-threaded and already in every namespace of the sandbox,
//! so its fork is cheap and the command needs nothing more. Forking from the emulator instead
//! copies its page tables, makes its threads fault on every page they write next, and needs a
//! shim that joins five namespaces and forks again to enter the pid namespace: most of an
//! exec's cost, growing with the emulator's memory.
//!
//! Init is a process of the sandbox, so what it sends is not trusted: a report for an id the
//! emulator is not waiting for is ignored, and a malformed one is dropped.

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cwsandbox_sync::MutexUnpoisoned;
use libc::c_int;
use tokio::sync::oneshot;

use crate::activation::{MainCommand, Reader, put_bytes, put_ids};
use crate::message_socket::MessageSocket;
use crate::sys;

/// The largest order: `execve` itself refuses more than about 2 MiB of arguments and
/// environment with the default stack limit. Orders over `sys::INLINE_PAYLOAD_BYTES` travel in a
/// sealed memfd.
pub(crate) const MAX_ORDER_BYTES: usize = 4 << 20;

const EXEC_TAG: u8 = b'X';
const END_TAG: u8 = b'T';
const EXITED_TAG: u8 = b'Q';
const STARTED_TAG: u8 = b'S';
const CONNECT_TAG: u8 = b'C';

/// How long init's connection to a sandbox's port may take (a loopback connect answers at once
/// unless the listener's backlog is full).
pub(crate) const CONNECT_TIMEOUT_MS: i64 = 2_000;

/// A command for init to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExecOrder {
    pub(crate) id: u64,
    /// The descriptors are a terminal's slave: it becomes the controlling terminal.
    pub(crate) tty: bool,
    /// The (uid, gid) of the user namespace the command switches to, where it switches.
    pub(crate) ids: Option<(u32, u32)>,
    pub(crate) cwd: CString,
    pub(crate) command: MainCommand,
}

/// What the emulator tells init.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    /// Start a command; its stdin, stdout and stderr come attached.
    Exec(ExecOrder),
    /// End a command's process group: SIGTERM, SIGKILL after a grace period.
    End { id: u64 },
    /// Connect to the sandbox's own loopback at `port` and send the connected socket back over
    /// the socket that comes attached (one status byte: 0 with the socket, else an errno).
    Connect { port: u16 },
}

impl Order {
    pub(crate) fn encode(&self) -> Vec<u8> {
        match self {
            Order::Exec(order) => {
                let mut out = vec![EXEC_TAG];
                out.extend_from_slice(&order.id.to_le_bytes());
                out.push(u8::from(order.tty));
                put_ids(&mut out, order.ids);
                put_bytes(&mut out, order.cwd.as_bytes());
                order.command.encode(&mut out);
                out
            }
            Order::End { id } => {
                let mut out = vec![END_TAG];
                out.extend_from_slice(&id.to_le_bytes());
                out
            }
            Order::Connect { port } => {
                let mut out = vec![CONNECT_TAG];
                out.extend_from_slice(&port.to_le_bytes());
                out
            }
        }
    }

    /// `None` for anything but a whole, well-formed order.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Order> {
        let mut reader = Reader(bytes);
        let order = match reader.byte()? {
            EXEC_TAG => {
                let id = reader.u64()?;
                let tty = match reader.byte()? {
                    0 => false,
                    1 => true,
                    _ => return None,
                };
                let ids = reader.ids()?;
                let cwd = reader.c_string()?;
                let command = reader.command()?;
                Order::Exec(ExecOrder { id, tty, ids, cwd, command })
            }
            END_TAG => Order::End { id: reader.u64()? },
            CONNECT_TAG => {
                let low = reader.byte()?;
                let high = reader.byte()?;
                Order::Connect { port: u16::from_le_bytes([low, high]) }
            }
            _ => return None,
        };
        reader.0.is_empty().then_some(order)
    }
}

/// What init tells the emulator about a command it was ordered to start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Report {
    /// The command has exec'd, or could not (then its stderr says why and it exits with 127).
    Started { id: u64 },
    /// The command has been reaped; `status` as `waitpid` gave it.
    Exited { id: u64, status: c_int },
}

impl Report {
    pub(crate) fn encode(&self) -> Vec<u8> {
        match *self {
            Report::Started { id } => {
                let mut out = vec![STARTED_TAG];
                out.extend_from_slice(&id.to_le_bytes());
                out
            }
            Report::Exited { id, status } => {
                let mut out = vec![EXITED_TAG];
                out.extend_from_slice(&id.to_le_bytes());
                out.extend_from_slice(&status.to_le_bytes());
                out
            }
        }
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<Report> {
        let mut reader = Reader(bytes);
        let report = match reader.byte()? {
            STARTED_TAG => Report::Started { id: reader.u64()? },
            EXITED_TAG => Report::Exited { id: reader.u64()?, status: reader.u32()? as c_int },
            _ => return None,
        };
        reader.0.is_empty().then_some(report)
    }
}

/// Why an order could not be sent.
#[derive(Debug)]
pub(crate) enum SendError {
    /// Init is gone: the sandbox has ended.
    Closed,
    /// The order is larger than the channel carries.
    TooLarge(usize),
    Io(io::Error),
}

/// The emulator's end of a sandbox's init channel.
#[derive(Debug)]
pub(crate) struct InitChannel {
    socket: MessageSocket,
    /// Each update is a single insert or remove, consistent across a panic elsewhere.
    waiting: Mutex<Waiting>,
    next_id: AtomicU64,
}

/// Who waits for which report.
#[derive(Debug, Default)]
struct Waiting {
    starts: HashMap<u64, oneshot::Sender<()>>,
    exits: HashMap<u64, oneshot::Sender<c_int>>,
}

impl InitChannel {
    /// Takes the emulator's end and starts reading init's reports. Must run on a runtime with
    /// I/O enabled.
    pub(crate) fn open(socket: OwnedFd) -> io::Result<Arc<InitChannel>> {
        let socket = MessageSocket::new(socket)?;
        let channel =
            Arc::new(InitChannel { socket, waiting: Mutex::new(Waiting::default()), next_id: AtomicU64::new(1) });
        tokio::spawn(read_reports(channel.clone()));
        Ok(channel)
    }

    /// Orders a command with `stdio` as its stdin, stdout and stderr, and waits until it has
    /// exec'd (or failed to). The receiver gives its wait status, or an error if init ended
    /// first (the command is gone with the sandbox).
    pub(crate) async fn exec(
        &self,
        tty: bool,
        ids: Option<(u32, u32)>,
        cwd: CString,
        command: MainCommand,
        stdio: [RawFd; 3],
    ) -> Result<(u64, oneshot::Receiver<c_int>), SendError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let bytes = Order::Exec(ExecOrder { id, tty, ids, cwd, command }).encode();
        if bytes.len() > MAX_ORDER_BYTES {
            return Err(SendError::TooLarge(bytes.len()));
        }
        let (started_sender, started) = oneshot::channel();
        let (exit_sender, exit) = oneshot::channel();
        {
            let mut waiting = self.waiting.lock_unpoisoned();
            waiting.starts.insert(id, started_sender);
            waiting.exits.insert(id, exit_sender);
        }
        if let Err(error) = self.send(&bytes, &stdio).await {
            let mut waiting = self.waiting.lock_unpoisoned();
            waiting.starts.remove(&id);
            waiting.exits.remove(&id);
            return Err(error);
        }
        // No report: init ended before the command started.
        started.await.map_err(|_| SendError::Closed)?;
        Ok((id, exit))
    }

    /// Has init connect to `port` on the sandbox's own loopback, in the sandbox's network, and
    /// returns the connected socket. What comes back is checked to be a TCP socket: init is a
    /// process of the sandbox, so it is not trusted to hand over anything else.
    pub(crate) async fn connect(&self, port: u16) -> io::Result<OwnedFd> {
        let (ours, theirs) = sys::seqpacket_pair()?;
        match self.send(&Order::Connect { port }.encode(), &[theirs.as_raw_fd()]).await {
            Ok(()) => {}
            Err(SendError::Io(error)) => return Err(error),
            Err(_) => return Err(io::Error::new(io::ErrorKind::NotConnected, "the sandbox has ended")),
        }
        drop(theirs);
        let reply = MessageSocket::new(ours)?;
        let mut status = [0u8; 8];
        let wait = std::time::Duration::from_millis(CONNECT_TIMEOUT_MS as u64 + 1_000);
        let (length, mut fds) = tokio::time::timeout(wait, reply.receive(&mut status))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the sandbox's init did not answer"))??;
        match (length, status[0], fds.len()) {
            (0, _, _) => Err(io::Error::new(io::ErrorKind::NotConnected, "the sandbox has ended")),
            (1, 0, 1) => {
                let socket = fds.remove(0);
                sys::check_tcp_socket(socket.as_raw_fd())?;
                Ok(socket)
            }
            (5, 1, 0) => {
                let errno = i32::from_le_bytes([status[1], status[2], status[3], status[4]]);
                Err(io::Error::from_raw_os_error(errno))
            }
            _ => Err(io::Error::new(io::ErrorKind::InvalidData, "init answered a connection with something else")),
        }
    }

    /// Asks init to end command `id`'s process group. Best effort: a gone init has ended it.
    pub(crate) async fn end(&self, id: u64) {
        let _ = self.send(&Order::End { id }.encode(), &[]).await;
    }

    /// Sends `payload` in an envelope (`sys::envelope`: a large one in a sealed memfd).
    async fn send(&self, payload: &[u8], fds: &[RawFd]) -> Result<(), SendError> {
        let (message, memfd) = sys::envelope(payload).map_err(SendError::Io)?;
        let mut attached = fds.to_vec();
        attached.extend(memfd.as_ref().map(AsRawFd::as_raw_fd));
        self.socket.send(&message, &attached).await.map_err(|error| match error.raw_os_error() {
            Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN) => SendError::Closed,
            Some(libc::EMSGSIZE | libc::ENOBUFS) => SendError::TooLarge(payload.len()),
            _ => SendError::Io(error),
        })
    }
}

/// Hands each reported status to its waiter until init closes its end (it ended), then drops
/// the waiters left, whose commands ended with it.
async fn read_reports(channel: Arc<InitChannel>) {
    let mut buffer = [0u8; 64];
    loop {
        match channel.socket.receive(&mut buffer).await {
            Ok((0, _)) => break,
            // Descriptors from init are never wanted; they close here.
            Ok((length, _fds)) => match Report::decode(&buffer[..length]) {
                Some(Report::Started { id }) => {
                    if let Some(waiter) = channel.waiting.lock_unpoisoned().starts.remove(&id) {
                        let _ = waiter.send(());
                    }
                }
                Some(Report::Exited { id, status }) => {
                    if let Some(waiter) = channel.waiting.lock_unpoisoned().exits.remove(&id) {
                        let _ = waiter.send(status);
                    }
                }
                None => {}
            },
            // A report too large for any real one: skipped.
            Err(error) if error.raw_os_error() == Some(libc::EMSGSIZE) => {}
            Err(_) => break,
        }
    }
    *channel.waiting.lock_unpoisoned() = Waiting::default();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Order {
        Order::Exec(ExecOrder {
            id: 7,
            tty: true,
            ids: Some((1000, 100)),
            cwd: c"/work dir".to_owned(),
            command: MainCommand {
                candidates: vec![c"/usr/bin/sh".to_owned()],
                argv: vec![c"sh".to_owned(), c"-c".to_owned(), c"echo é".to_owned()],
                envp: vec![c"PATH=/usr/bin".to_owned()],
                display: "sh".into(),
            },
        })
    }

    #[test]
    fn orders_and_reports_round_trip() {
        for order in [sample(), Order::End { id: u64::MAX }] {
            assert_eq!(Order::decode(&order.encode()), Some(order));
        }
        for report in [Report::Started { id: 9 }, Report::Exited { id: 3, status: -1 }] {
            assert_eq!(Report::decode(&report.encode()), Some(report));
        }
    }

    #[test]
    fn truncated_extended_or_corrupt_messages_are_refused() {
        let bytes = sample().encode();
        for length in 0..bytes.len() {
            assert_eq!(Order::decode(&bytes[..length]), None, "truncated to {length}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(Order::decode(&longer), None);
        let mut bad_tty = bytes.clone();
        bad_tty[9] = 2;
        assert_eq!(Order::decode(&bad_tty), None);
        let report = Report::Exited { id: 1, status: 0 }.encode();
        assert_eq!(Report::decode(&report[..12]), None);
        assert_eq!(Report::decode(&[b'X'; 13]), None);
        let mut longer = Report::Started { id: 1 }.encode();
        longer.push(0);
        assert_eq!(Report::decode(&longer), None);
    }

    #[test]
    fn large_payloads_travel_in_a_sealed_memfd_and_bad_envelopes_are_refused() {
        let small = vec![7u8; 100];
        let (message, memfd) = sys::envelope(&small).unwrap();
        assert!(memfd.is_none(), "a small payload travels in the message");
        assert_eq!(sys::open_envelope(&message, &mut Vec::new(), 1000).as_deref(), Some(&small[..]));
        assert_eq!(sys::open_envelope(&message, &mut Vec::new(), 99), None, "over the limit");
        let large: Vec<u8> = (0..200_000u32).map(|index| index as u8).collect();
        let (message, memfd) = sys::envelope(&large).unwrap();
        assert!(message.len() < 16);
        // Through a socket pair, as it travels.
        let (left, right) = sys::seqpacket_pair().unwrap();
        sys::send_message(left.as_raw_fd(), &message, &[memfd.unwrap().as_raw_fd()], 0).unwrap();
        let mut buffer = [0u8; sys::ENVELOPE_BUFFER_BYTES];
        let (length, mut fds) = sys::receive_message(right.as_raw_fd(), &mut buffer, 0).unwrap();
        assert_eq!(sys::open_envelope(&buffer[..length], &mut fds, 1 << 20).as_deref(), Some(&large[..]));
        assert!(fds.is_empty(), "the memfd was taken off the end");
        assert_eq!(sys::open_envelope(&message, &mut Vec::new(), 1 << 20), None, "no memfd came with it");
        let (message, memfd) = sys::envelope(&large).unwrap();
        assert_eq!(sys::open_envelope(&message, &mut vec![memfd.unwrap()], 1000), None, "over the limit");
        // An unsealed memfd could change under the reader: refused.
        // SAFETY: a valid C string; the result is checked.
        let fd = unsafe { libc::memfd_create(c"unsealed".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: a new descriptor we own.
        let unsealed = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        std::fs::File::from(unsealed.try_clone().unwrap()).set_len(large.len() as u64).unwrap();
        assert_eq!(sys::open_envelope(&message, &mut vec![unsealed], 1 << 20), None);
        for malformed in [&[][..], &[2u8, 0][..], &[1u8, 0, 0][..]] {
            assert_eq!(sys::open_envelope(malformed, &mut Vec::new(), 1 << 20), None, "{malformed:?}");
        }
    }

    #[test]
    fn descriptors_travel_with_their_message_and_oversized_messages_are_refused() {
        let (left, right) = sys::seqpacket_pair().unwrap();
        let (read, mut write) = std::io::pipe().unwrap();
        sys::send_message(left.as_raw_fd(), b"hello", &[read.as_raw_fd()], 0).unwrap();
        drop(read);
        let mut buffer = [0u8; 16];
        let (length, fds) = sys::receive_message(right.as_raw_fd(), &mut buffer, 0).unwrap();
        assert_eq!(&buffer[..length], b"hello");
        assert_eq!(fds.len(), 1);
        use std::io::{Read, Write};
        write.write_all(b"through").unwrap();
        drop(write);
        let mut text = String::new();
        std::fs::File::from(fds.into_iter().next().unwrap()).read_to_string(&mut text).unwrap();
        assert_eq!(text, "through");
        sys::send_message(left.as_raw_fd(), &[1u8; 32], &[], 0).unwrap();
        assert_eq!(sys::receive_message(right.as_raw_fd(), &mut buffer, 0).unwrap_err(), libc::EMSGSIZE);
        drop(left);
        assert_eq!(sys::receive_message(right.as_raw_fd(), &mut buffer, 0).unwrap().0, 0);
    }
}
