//! The crate's vocabulary: configuration, addresses, rules and what a sandbox's network is
//! asked to be. Every other module builds on it; it builds on nothing of the crate's.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::str::FromStr;

/// Why a sandbox network could not be made or removed.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    /// The machine lacks what sandbox networks need (root, `ip`, `nft`, a bridge).
    #[error("sandbox networks are unavailable: {0}")]
    Unavailable(String),
    /// The configuration is unusable (a bridge name, a range).
    #[error("invalid network configuration: {0}")]
    InvalidConfig(String),
    /// Another running emulator owns the bridge.
    #[error("bridge {bridge} belongs to another emulator (pid {pid}): give this one another `network.bridge`")]
    InUse {
        /// The bridge's name.
        bridge: String,
        /// The emulator that owns it.
        pid: u32,
    },
    /// Every address of the range is taken.
    #[error("no free address is left in the pod range {0}")]
    RangeExhausted(Ipv4Cidr),
    /// The sandbox has a network already.
    #[error("sandbox {0} has a network already")]
    AlreadyAttached(String),
    /// The sandbox has no rules in force to make a network for.
    #[error("sandbox {0} has no network attached")]
    NotAttached(String),
    /// `ip` or `nft` refused a step.
    #[error("{command} failed: {message}")]
    Command {
        /// What ran.
        command: String,
        /// What it said.
        message: String,
    },
}

/// An IPv4 range: the pod range sandboxes get their addresses from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Cidr {
    /// The first address (the host bits zero).
    pub network: Ipv4Addr,
    /// The prefix length, 8 to 30.
    pub length: u8,
}

impl Ipv4Cidr {
    /// The gateway: the range's first host address, held by the bridge.
    pub fn gateway(self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network) + 1)
    }

    /// Whether `address` is in the range.
    pub fn contains(self, address: Ipv4Addr) -> bool {
        let mask = u32::MAX << (32 - u32::from(self.length));
        u32::from(address) & mask == u32::from(self.network)
    }

    /// The addresses sandboxes may get: every host address after the gateway, before broadcast.
    pub fn pod_addresses(self) -> impl Iterator<Item = Ipv4Addr> {
        let first = u32::from(self.network) + 2;
        let last = u32::from(self.network) + (1u32 << (32 - u32::from(self.length))) - 2;
        (first..=last).map(Ipv4Addr::from)
    }
}

impl std::fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.length)
    }
}

impl FromStr for Ipv4Cidr {
    type Err = String;

    fn from_str(text: &str) -> Result<Ipv4Cidr, String> {
        let cidr: Cidr = text.parse()?;
        let IpAddr::V4(network) = cidr.address else { return Err(format!("{text:?} is not an IPv4 range")) };
        if !(8..=30).contains(&cidr.length) {
            return Err(format!("{text:?}: a pod range needs a prefix length from 8 to 30"));
        }
        Ok(Ipv4Cidr { network, length: cidr.length })
    }
}

/// A CIDR block of a rule, IPv4 or IPv6, with its host bits zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    /// The network address.
    pub address: IpAddr,
    /// The prefix length.
    pub length: u8,
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(text: &str) -> Result<Cidr, String> {
        let (address, length) = text.split_once('/').ok_or_else(|| format!("{text:?} is not a CIDR block"))?;
        let address: IpAddr = address.parse().map_err(|_| format!("{text:?}: {address:?} is not an IP address"))?;
        let width = if address.is_ipv4() { 32 } else { 128 };
        let length: u8 = length
            .parse()
            .ok()
            .filter(|length| u32::from(*length) <= width)
            .ok_or_else(|| format!("{text:?}: {length:?} is not a prefix length up to {width}"))?;
        let masked = match address {
            IpAddr::V4(v4) => {
                let mask = if length == 0 { 0 } else { u32::MAX << (32 - u32::from(length)) };
                IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
            }
            IpAddr::V6(v6) => {
                let mask = if length == 0 { 0 } else { u128::MAX << (128 - u32::from(length)) };
                IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & mask))
            }
        };
        if masked != address {
            return Err(format!("{text:?} has host bits set (the block is {masked}/{length})"));
        }
        Ok(Cidr { address, length })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.address, self.length)
    }
}

/// A transport protocol of a port rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    pub(crate) fn nft_name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// Ports `first..=last` of one protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// The protocol.
    pub protocol: Protocol,
    /// The first port.
    pub first: u16,
    /// The last port (`first` for one port).
    pub last: u16,
}

/// Who a rule lets a sandbox reach (egress) or be reached by (ingress).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peer {
    /// Every address.
    Any,
    /// A block minus the blocks in `except`. IPv6 blocks allow nothing: sandboxes have no IPv6.
    Cidr {
        /// The block.
        cidr: Cidr,
        /// Blocks inside it that are not allowed.
        except: Vec<Cidr>,
    },
    /// Sandboxes of the same organization.
    SameOrganization,
    /// Sandboxes of the same organization created by the same user.
    SameUser,
    /// Sandboxes of the same organization whose Pod labels include `pod_labels`, in the
    /// sandbox's own namespace (`namespace_labels` `None`) or in namespaces whose labels include
    /// `namespace_labels`.
    Selector {
        /// Labels the peer's Pod must have.
        pod_labels: BTreeMap<String, String>,
        /// Labels the peer's namespace must have; `None`: the sandbox's own namespace.
        namespace_labels: Option<BTreeMap<String, String>>,
    },
}

/// One allow rule: a peer and the ports (none: every port).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Who.
    pub peer: Peer,
    /// Which ports; empty: all.
    pub ports: Vec<PortRange>,
}

/// The rules of one direction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Direction {
    /// Whether only what `rules` allows passes; otherwise everything does.
    pub isolated: bool,
    /// What is allowed.
    pub rules: Vec<Rule>,
}

/// A sandbox's network as asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attachment {
    /// The sandbox (or Pod) it is for: the key of [`SandboxNetworks::detach`].
    pub id: String,
    /// Its address, in the pod range.
    pub address: Ipv4Addr,
    /// What the group rules of other sandboxes match it by.
    pub identity: PeerIdentity,
    /// What it may reach.
    pub egress: Direction,
    /// What may reach it.
    pub ingress: Direction,
    /// HTTPS names it may reach (TCP 443, through the emulator's SNI proxy); where there are
    /// any, its port-443 traffic that no address rule allows goes through the proxy.
    pub https_grants: Vec<HostnameGrant>,
    /// Whether its resolver answers any name (`DNS_EGRESS_MODE_ALLOW`), or only its grants'.
    pub dns_allow_all: bool,
}

/// Where sandbox networks live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkConfig {
    /// The bridge's name: a lowercase letter, then up to 7 lowercase letters or digits (its
    /// sandboxes' links are `<bridge>-<n>`, within Linux's 15 characters).
    pub bridge: String,
    /// The pod range; the bridge holds its first host address.
    pub pod_cidr: Ipv4Cidr,
    /// iproute2's `ip`.
    pub ip: PathBuf,
    /// nftables' `nft`.
    pub nft: PathBuf,
    /// Names the sandboxes' resolver and the SNI proxy resolve to these addresses before asking
    /// this machine's resolver (tests give their test hosts names this way).
    pub static_hosts: BTreeMap<String, Ipv4Addr>,
}

impl NetworkConfig {
    /// The defaults on a bridge of the given name.
    pub fn new(bridge: &str, pod_cidr: Ipv4Cidr) -> NetworkConfig {
        NetworkConfig {
            bridge: bridge.to_owned(),
            pod_cidr,
            ip: PathBuf::from("ip"),
            nft: PathBuf::from("nft"),
            static_hosts: BTreeMap::new(),
        }
    }

    pub(crate) fn check(&self) -> Result<(), NetworkError> {
        let name = self.bridge.as_bytes();
        let shaped = !name.is_empty()
            && name.len() <= 8
            && name[0].is_ascii_lowercase()
            && name.iter().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit());
        if !shaped {
            return Err(NetworkError::InvalidConfig(format!(
                "bridge {:?}: a lowercase letter, then up to 7 lowercase letters or digits",
                self.bridge
            )));
        }
        Ok(())
    }

    /// The nftables table (both families) of this bridge.
    pub(crate) fn table(&self) -> String {
        format!("cwsandbox_{}", self.bridge)
    }
}

/// One attached sandbox.
#[derive(Debug)]
pub(crate) struct Attached {
    pub(crate) index: u64,
    pub(crate) attachment: Attachment,
    /// Its link and address are made (once only).
    pub(crate) plumbed: bool,
}

/// What group rules match a sandbox by.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerIdentity {
    /// Its organization: group rules never reach past it.
    pub organization: String,
    /// The user that created it.
    pub user: String,
    /// Its Pod's namespace.
    pub namespace: String,
    /// Its Pod's labels.
    pub pod_labels: BTreeMap<String, String>,
    /// Its namespace's labels.
    pub namespace_labels: BTreeMap<String, String>,
}

/// A granted name: exact (`pypi.org`) or one leftmost wildcard (`*.pypi.org`, any name ending
/// in `.pypi.org`), minus the names of `except` (in the same form).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostnameGrant {
    /// The name or wildcard, lowercase.
    pub pattern: String,
    /// Names or wildcards carved out of it.
    pub except: Vec<String>,
}

fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => {
            name.len() > suffix.len() + 1
                && name.ends_with(suffix)
                && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
        }
        None => pattern == "*" || pattern == name,
    }
}

impl HostnameGrant {
    /// Whether `name` (lowercase, no trailing dot) is granted.
    pub fn grants(&self, name: &str) -> bool {
        matches(&self.pattern, name) && !self.except.iter().any(|except| matches(except, name))
    }
}
