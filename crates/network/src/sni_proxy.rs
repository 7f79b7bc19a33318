//! The HTTPS host-name gate: port 443 of a sandbox with host-name grants is redirected here
//! (nftables `redirect`); the proxy reads the TLS ClientHello's server name (rustls' `Acceptor`,
//! which parses it without answering), and for a granted name connects to that name's address
//! itself and relays the connection, the ClientHello first: TLS is never terminated, the
//! sandbox's client verifies the real server. A name not granted, no name, or no ClientHello
//! closes the connection: the client sees a failed handshake, as behind the cloud's proxy.
//!
//! The name is resolved here, not taken from the connection's destination, so a sandbox cannot
//! send a granted name to an address of its choosing; addresses of this machine (loopback,
//! link-local) and of the pod range are never dialled.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use cwsandbox_sync::RwLockUnpoisoned;

use crate::types::{HostnameGrant, Ipv4Cidr};

/// The most connections relayed at once; more are closed at once.
const MAX_CONNECTIONS: usize = 512;
/// How long a ClientHello, a name's resolution and the upstream connection may each take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Each direction's relay buffer.
const RELAY_BUFFER: usize = 256 * 1024;
/// The most ClientHello bytes read before giving up (a ClientHello is a few hundred bytes;
/// with post-quantum key shares a couple of KiB).
const MAX_HELLO_BYTES: usize = 16 * 1024;

/// Who may reach which names, by sandbox address.
pub(crate) type Grants = Arc<RwLock<HashMap<Ipv4Addr, Vec<HostnameGrant>>>>;

/// The running proxy: its address, and the grants it reads.
#[derive(Debug)]
pub(crate) struct SniProxy {
    pub(crate) address: SocketAddr,
    pub(crate) grants: Grants,
    listener: Option<TcpListener>,
    stopped: Arc<AtomicBool>,
}

/// Where names resolve: the values' static records first (tests), then this machine's resolver.
#[derive(Clone, Debug, Default)]
pub(crate) struct Resolver {
    pub(crate) static_hosts: BTreeMap<String, Ipv4Addr>,
}

impl Resolver {
    pub(crate) fn resolve(&self, name: &str) -> Option<Ipv4Addr> {
        if let Some(address) = self.static_hosts.get(name) {
            return Some(*address);
        }
        (name, 443).to_socket_addrs().ok()?.find_map(|address| match address.ip() {
            IpAddr::V4(v4) => Some(v4),
            IpAddr::V6(_) => None,
        })
    }
}

impl SniProxy {
    /// Listens on `gateway` (a free port) and serves on a thread of its own until the listener
    /// is closed ([`SniProxy::stop`]).
    pub(crate) fn start(gateway: Ipv4Addr, pod_cidr: Ipv4Cidr, resolver: Resolver) -> std::io::Result<SniProxy> {
        let listener = TcpListener::bind((gateway, 0))?;
        let address = listener.local_addr()?;
        let grants: Grants = Arc::default();
        let serving = listener.try_clone()?;
        let shared = grants.clone();
        let stopped = Arc::new(AtomicBool::new(false));
        let stopping = stopped.clone();
        std::thread::Builder::new().name("cwsandbox-sni-proxy".into()).spawn(move || {
            let open = Arc::new(AtomicUsize::new(0));
            for stream in serving.incoming() {
                if stopping.load(Ordering::Acquire) {
                    break;
                }
                // A transient accept error (a connection reset before it was accepted).
                let Ok(stream) = stream else { continue };
                if open.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
                    open.fetch_sub(1, Ordering::AcqRel);
                    continue;
                }
                let (grants, resolver, open) = (shared.clone(), resolver.clone(), open.clone());
                let spawned = std::thread::Builder::new().name("cwsandbox-sni-relay".into()).spawn(move || {
                    relay(stream, &grants, &resolver, pod_cidr);
                    open.fetch_sub(1, Ordering::AcqRel);
                });
                if spawned.is_err() {
                    tracing::debug!("cannot start a relay thread; the connection is closed");
                }
            }
        })?;
        Ok(SniProxy { address, grants, listener: Some(listener), stopped })
    }

    /// Stops accepting (connections being relayed end with their peers).
    pub(crate) fn stop(&mut self) {
        if let Some(listener) = self.listener.take() {
            self.stopped.store(true, Ordering::Release);
            // SAFETY: shutdown on the listening socket we own wakes the accept loop.
            unsafe { libc::shutdown(std::os::fd::AsRawFd::as_raw_fd(&listener), libc::SHUT_RDWR) };
        }
    }
}

impl Drop for SniProxy {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Reads the ClientHello (keeping its bytes) and returns them with its server name.
fn read_client_hello(stream: &mut TcpStream) -> Option<(Vec<u8>, String)> {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let read = stream.read(&mut buffer).ok().filter(|read| *read > 0)?;
        seen.extend_from_slice(&buffer[..read]);
        if seen.len() > MAX_HELLO_BYTES {
            return None;
        }
        acceptor.read_tls(&mut &buffer[..read]).ok()?;
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let name = accepted.client_hello().server_name()?.trim_end_matches('.').to_ascii_lowercase();
                return Some((seen, name));
            }
            Ok(None) => continue,
            Err(_) => return None,
        }
    }
}

/// An address the proxy never dials: this machine's own, link-local, or the sandboxes'.
fn forbidden(address: Ipv4Addr, pod_cidr: Ipv4Cidr) -> bool {
    address.is_loopback()
        || address.is_link_local()
        || address.is_unspecified()
        || address.is_broadcast()
        || address.is_multicast()
        || pod_cidr.contains(address)
}

fn relay(mut client: TcpStream, grants: &Grants, resolver: &Resolver, pod_cidr: Ipv4Cidr) {
    let Ok(SocketAddr::V4(peer)) = client.peer_addr() else { return };
    let _ = client.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
    let Some((hello, name)) = read_client_hello(&mut client) else { return };
    let granted =
        grants.read_unpoisoned().get(peer.ip()).is_some_and(|grants| grants.iter().any(|grant| grant.grants(&name)));
    if !granted {
        tracing::debug!(sandbox = %peer.ip(), %name, "HTTPS name not granted: connection closed");
        return;
    }
    let Some(address) = resolver.resolve(&name).filter(|address| !forbidden(*address, pod_cidr)) else {
        tracing::debug!(%name, "the name does not resolve to an address the proxy may dial");
        return;
    };
    let Ok(mut upstream) = TcpStream::connect_timeout(&SocketAddr::from((address, 443)), HANDSHAKE_TIMEOUT) else {
        return;
    };
    let _ = client.set_read_timeout(None);
    // Each side's writes go out as the other side made them (a relay must not add Nagle's wait).
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    if upstream.write_all(&hello).is_err() {
        return;
    }
    let (Ok(mut client_reader), Ok(mut upstream_writer)) = (client.try_clone(), upstream.try_clone()) else { return };
    let upward = std::thread::Builder::new().name("cwsandbox-sni-up".into()).spawn(move || {
        pump(&mut client_reader, &mut upstream_writer);
        let _ = upstream_writer.shutdown(Shutdown::Write);
    });
    pump(&mut upstream, &mut client);
    let _ = client.shutdown(Shutdown::Write);
    if let Ok(upward) = upward {
        let _ = upward.join();
    }
}

/// Copies until the end of `from` or an error, in large pieces (`std::io::copy` moves 8 KiB at a
/// time between sockets: a third of the throughput, measured in BENCHMARKS.md).
fn pump(from: &mut TcpStream, to: &mut TcpStream) {
    let mut buffer = vec![0u8; RELAY_BUFFER];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => return,
            Ok(read) => {
                if to.write_all(&buffer[..read]).is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_names_and_one_leftmost_wildcard_minus_exceptions() {
        let exact = HostnameGrant { pattern: "pypi.org".into(), except: Vec::new() };
        assert!(exact.grants("pypi.org"));
        assert!(!exact.grants("files.pypi.org") && !exact.grants("notpypi.org"));
        let wildcard = HostnameGrant { pattern: "*.pypi.org".into(), except: vec!["evil.pypi.org".into()] };
        assert!(wildcard.grants("files.pypi.org") && wildcard.grants("a.b.pypi.org"));
        assert!(!wildcard.grants("pypi.org") && !wildcard.grants("xpypi.org") && !wildcard.grants("evil.pypi.org"));
        let everything = HostnameGrant { pattern: "*".into(), except: vec!["*.internal".into()] };
        assert!(everything.grants("example.com") && !everything.grants("db.internal"));
    }

    #[test]
    fn the_proxy_never_dials_this_machine_or_the_sandboxes() {
        let pods: Ipv4Cidr = "10.244.0.0/16".parse().unwrap();
        for address in ["127.0.0.1", "169.254.169.254", "0.0.0.0", "10.244.3.4", "224.0.0.1"] {
            assert!(forbidden(address.parse().unwrap(), pods), "{address}");
        }
        assert!(!forbidden("203.0.113.10".parse().unwrap(), pods));
    }
}
