//! The sandboxes' resolver: UDP port 53 of the gateway, the `nameserver` of each sandbox with a
//! network of its own. It answers by the asking sandbox's DNS egress mode: `ALLOW` resolves any
//! name, `DENY` only the names its HTTPS grants name (so a grant still works), every other
//! name REFUSED. Names resolve through the values' static records first (tests), then this
//! machine's resolver; A records only (sandboxes have no IPv6: AAAA answers are empty).

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use cwsandbox_sync::RwLockUnpoisoned;
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};

use crate::sni_proxy::Resolver;
use crate::types::HostnameGrant;

/// How long an answer may be cached by the sandbox.
const TTL_SECONDS: u32 = 30;
/// The most queries resolved at once (each on a thread: this machine's resolver blocks).
const MAX_IN_FLIGHT: usize = 64;

/// What a sandbox's queries may resolve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsPolicy {
    /// Any name (`DNS_EGRESS_MODE_ALLOW`, the default); otherwise only `grants`' names.
    pub allow_all: bool,
    /// Names the sandbox's HTTPS grants name: resolvable whatever the mode.
    pub grants: Vec<HostnameGrant>,
}

pub(crate) type Policies = Arc<RwLock<HashMap<Ipv4Addr, DnsPolicy>>>;

/// The running resolver.
#[derive(Debug)]
pub(crate) struct SandboxResolver {
    pub(crate) policies: Policies,
    socket: Option<UdpSocket>,
    stopped: Arc<AtomicBool>,
}

impl SandboxResolver {
    /// Answers on `gateway`:53 on a thread of its own until stopped.
    pub(crate) fn start(gateway: Ipv4Addr, resolver: Resolver) -> std::io::Result<SandboxResolver> {
        let socket = UdpSocket::bind((gateway, 53))?;
        let serving = socket.try_clone()?;
        let policies: Policies = Arc::default();
        let shared = policies.clone();
        let stopped = Arc::new(AtomicBool::new(false));
        let stopping = stopped.clone();
        std::thread::Builder::new().name("cwsandbox-resolver".into()).spawn(move || {
            let in_flight = Arc::new(AtomicUsize::new(0));
            let mut buffer = [0u8; 1500];
            loop {
                let received = serving.recv_from(&mut buffer);
                if stopping.load(Ordering::Acquire) {
                    break;
                }
                let Ok((length, SocketAddr::V4(from))) = received else { continue };
                let policy = shared.read_unpoisoned().get(from.ip()).cloned();
                // Only sandboxes ask here; anything else is not answered.
                let Some(policy) = policy else { continue };
                let Ok(query) = Message::from_vec(&buffer[..length]) else { continue };
                if in_flight.fetch_add(1, Ordering::AcqRel) >= MAX_IN_FLIGHT {
                    in_flight.fetch_sub(1, Ordering::AcqRel);
                    continue;
                }
                let (socket, resolver, in_flight) = (serving.try_clone(), resolver.clone(), in_flight.clone());
                let spawned = std::thread::Builder::new().name("cwsandbox-resolve".into()).spawn(move || {
                    if let (Ok(socket), Some(reply)) = (socket, answer(&query, &policy, &resolver)) {
                        let _ = socket.send_to(&reply, from);
                    }
                    in_flight.fetch_sub(1, Ordering::AcqRel);
                });
                if spawned.is_err() {
                    tracing::debug!("cannot start a resolver thread; the query is dropped");
                }
            }
        })?;
        Ok(SandboxResolver { policies, socket: Some(socket), stopped })
    }

    /// Stops answering.
    pub(crate) fn stop(&mut self) {
        if let Some(socket) = self.socket.take() {
            self.stopped.store(true, Ordering::Release);
            // SAFETY: shutdown on the socket we own wakes the receive loop.
            unsafe { libc::shutdown(std::os::fd::AsRawFd::as_raw_fd(&socket), libc::SHUT_RDWR) };
        }
    }
}

impl Drop for SandboxResolver {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The reply to `query` under `policy`, or `None` for what deserves none (not a query).
fn answer(query: &Message, policy: &DnsPolicy, resolver: &Resolver) -> Option<Vec<u8>> {
    if query.message_type() != MessageType::Query {
        return None;
    }
    let mut reply = Message::new();
    reply
        .set_id(query.id())
        .set_message_type(MessageType::Response)
        .set_op_code(query.op_code())
        .set_recursion_desired(query.recursion_desired())
        .set_recursion_available(true);
    for question in query.queries() {
        reply.add_query(question.clone());
    }
    let code = match (query.op_code(), query.queries()) {
        (OpCode::Query, [question]) => {
            let name = question.name().to_ascii().trim_end_matches('.').to_ascii_lowercase();
            let allowed = policy.allow_all || policy.grants.iter().any(|grant| grant.grants(&name));
            match question.query_type() {
                _ if !allowed => ResponseCode::Refused,
                RecordType::A => match resolver.resolve(&name) {
                    Some(address) => {
                        reply.add_answer(Record::from_rdata(
                            question.name().clone(),
                            TTL_SECONDS,
                            RData::A(A(address)),
                        ));
                        ResponseCode::NoError
                    }
                    None => ResponseCode::NXDomain,
                },
                // No IPv6 here: the name exists, with no address of that kind.
                RecordType::AAAA => ResponseCode::NoError,
                _ => ResponseCode::NotImp,
            }
        }
        _ => ResponseCode::NotImp,
    };
    reply.set_response_code(code);
    reply.to_vec().ok()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use hickory_proto::op::Query;
    use hickory_proto::rr::Name;

    use super::*;

    fn ask(name: &str, kind: RecordType, policy: &DnsPolicy) -> Message {
        let resolver = Resolver {
            static_hosts: BTreeMap::from([
                ("pypi.org".to_owned(), Ipv4Addr::new(203, 0, 113, 10)),
                ("example.com".to_owned(), Ipv4Addr::new(203, 0, 113, 11)),
            ]),
        };
        let mut query = Message::new();
        query.set_id(7).set_recursion_desired(true).add_query(Query::query(Name::from_ascii(name).unwrap(), kind));
        Message::from_vec(&answer(&query, policy, &resolver).unwrap()).unwrap()
    }

    #[test]
    fn the_mode_decides_which_names_resolve_and_grants_always_do() {
        let grants = vec![HostnameGrant { pattern: "pypi.org".into(), except: Vec::new() }];
        let deny = DnsPolicy { allow_all: false, grants: grants.clone() };
        let allow = DnsPolicy { allow_all: true, grants };
        let granted = ask("PyPI.org.", RecordType::A, &deny);
        assert_eq!((granted.id(), granted.response_code()), (7, ResponseCode::NoError));
        assert_eq!(granted.answers()[0].data(), &RData::A(A(Ipv4Addr::new(203, 0, 113, 10))));
        assert_eq!(ask("example.com.", RecordType::A, &deny).response_code(), ResponseCode::Refused);
        let allowed = ask("example.com.", RecordType::A, &allow);
        assert_eq!(allowed.answers()[0].data(), &RData::A(A(Ipv4Addr::new(203, 0, 113, 11))));
        let aaaa = ask("example.com.", RecordType::AAAA, &allow);
        assert_eq!((aaaa.response_code(), aaaa.answers().len()), (ResponseCode::NoError, 0));
        assert_eq!(ask("example.com.", RecordType::MX, &allow).response_code(), ResponseCode::NotImp);
    }
}
