//! A non-blocking `SOCK_SEQPACKET` socket driven by tokio: whole messages with descriptors
//! attached, for the emulator's ends of the init channels and of the zygote's socket.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use tokio::io::unix::AsyncFd;

use crate::sys;

#[derive(Debug)]
pub(crate) struct MessageSocket {
    socket: AsyncFd<OwnedFd>,
}

impl MessageSocket {
    /// Makes `socket` non-blocking and registers it. Must run on a runtime with I/O enabled.
    pub(crate) fn new(socket: OwnedFd) -> io::Result<MessageSocket> {
        sys::set_nonblocking(socket.as_raw_fd())?;
        // SAFETY: an OwnedFd keeps its descriptor open and unchanged until it is dropped,
        // which is when the AsyncFd is.
        let socket = unsafe { AsyncFd::register(socket) }.map_err(|error| error.into_parts().1)?;
        Ok(MessageSocket { socket })
    }

    /// Sends `bytes` as one message with `fds` attached (see [`sys::send_message`]).
    pub(crate) async fn send(&self, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
        loop {
            let mut ready = self.socket.writable().await?;
            match ready.try_io(|socket| {
                sys::send_message(socket.as_raw_fd(), bytes, fds, libc::MSG_DONTWAIT)
                    .map_err(io::Error::from_raw_os_error)
            }) {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    /// Receives one message into `buffer` (see [`sys::receive_message`]): `(0, [])` once the
    /// peer closed; a message too large for `buffer` is an `EMSGSIZE` error, and the next one
    /// can still be read.
    pub(crate) async fn receive(&self, buffer: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
        loop {
            let mut ready = self.socket.readable().await?;
            match ready.try_io(|socket| {
                sys::receive_message(socket.as_raw_fd(), buffer, libc::MSG_DONTWAIT)
                    .map_err(io::Error::from_raw_os_error)
            }) {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }
}
