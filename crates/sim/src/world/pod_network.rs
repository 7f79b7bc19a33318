//! Sandbox networks as the world decides them: which sandboxes get a network of their own (an
//! address of the pod range and their effective rules, enforced by the host), which keep the
//! host's, and which are refused because nothing here can enforce what they ask.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use super::World;
use crate::error::{FieldViolation, Reason, SimError, SimResult};
use crate::ids::SharedStr;
use crate::k8s::Labels;
use crate::resolved::ResolvedSpec;
use cwsandbox_api::sandbox_v1::{
    DnsEgressMode, EgressRule, IngressRule, NetworkOptions, SandboxSpec, TenantScope, egress_rule, ingress_rule,
};

/// What the host offers for sandbox networks (said once at start).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodNetworkOffer {
    /// None: why (not root, no nftables, plain processes). A sandbox whose spec asks for
    /// network rules is refused as when no runner can host it.
    Unavailable(String),
    /// Networks of their own, with addresses from `range`.
    Available {
        /// The pod range: the gateway is its first host address; Pods get the following ones.
        range: Ipv4Range,
        /// Every sandbox gets one (not only those whose spec asks for network rules).
        every_sandbox: bool,
    },
}

/// An IPv4 range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Range {
    /// Its first address.
    pub network: Ipv4Addr,
    /// Its prefix length (8 to 30).
    pub length: u8,
}

/// The network a Pod's processes get.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum PodNetwork {
    /// The host's.
    #[default]
    Host,
    /// One of their own with only loopback (`deny_egress` and nothing else asked).
    LoopbackOnly,
    /// One of their own on the host's bridge, its rules enforced.
    Own(Box<OwnNetwork>),
}

/// A sandbox's own network: its address and the effective rules the host enforces.
#[derive(Clone, Debug, PartialEq)]
pub struct OwnNetwork {
    /// The Pod's address (`status.podIP`).
    pub address: Ipv4Addr,
    /// The sandbox's organization.
    pub organization: String,
    /// The user that created it.
    pub user: String,
    /// The Pod's namespace.
    pub namespace: SharedStr,
    /// The Pod's labels, which other sandboxes' selectors match.
    pub pod_labels: Labels,
    /// Effective egress rules to addresses and sandboxes.
    pub egress: Vec<NetworkRule>,
    /// Effective HTTPS name grants (TCP 443 through the host's SNI proxy).
    pub https_grants: Vec<HttpsGrant>,
    /// Only what `egress` allows leaves (it has rules, or `deny_egress`); otherwise anything.
    pub egress_isolated: bool,
    /// Effective ingress rules.
    pub ingress: Vec<NetworkRule>,
    /// Only what `ingress` allows arrives (it has rules, or `deny_ingress`); otherwise anything.
    pub ingress_isolated: bool,
    /// Its resolver answers any name (`DNS_EGRESS_MODE_ALLOW`, the default), or only the names
    /// of its HTTPS grants (`DENY`).
    pub dns_allow_all: bool,
}

/// One allow rule of a sandbox network, compiled from the API's `EgressRule`/`IngressRule`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkRule {
    /// Who.
    pub peer: NetworkPeer,
    /// Which ports; empty: all.
    pub ports: Vec<NetworkPorts>,
}

/// Who a rule names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetworkPeer {
    /// Every address.
    Any,
    /// A block (`a.b.c.d/n`, canonical) minus blocks inside it.
    Cidr {
        /// The block.
        cidr: String,
        /// Blocks carved out of it.
        except: Vec<String>,
    },
    /// The sandbox's organization's sandboxes.
    SameOrganization,
    /// The sandboxes its user created.
    SameUser,
    /// The organization's sandboxes whose Pod labels include `pod_labels`, in the sandbox's
    /// namespace (`namespace_labels` `None`) or in namespaces with those labels.
    Selector {
        /// Labels the Pod must have.
        pod_labels: std::collections::BTreeMap<String, String>,
        /// Labels its namespace must have; `None`: the sandbox's own namespace.
        namespace_labels: Option<std::collections::BTreeMap<String, String>>,
    },
}

/// Ports `first..=last` of one protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetworkPorts {
    /// The protocol.
    pub protocol: TransportProtocol,
    /// The first port.
    pub first: u16,
    /// The last port.
    pub last: u16,
}

/// A rule's transport protocol (TCP unless named).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportProtocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

/// An HTTPS name a sandbox may reach: exact, or one leftmost `*.`, minus `except`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpsGrant {
    /// The name or wildcard, lowercase, without a trailing dot.
    pub pattern: String,
    /// Names or wildcards carved out of it.
    pub except: Vec<String>,
}

/// The API's egress rules as the network takes them: address and sandbox rules, and HTTPS
/// grants. A rule that names nothing enforceable (validation refused those already) is left
/// out: an allow-list only narrows for it.
fn compile_egress(rules: &[EgressRule]) -> (Vec<NetworkRule>, Vec<HttpsGrant>) {
    let (mut compiled, mut grants) = (Vec::new(), Vec::new());
    for rule in rules {
        let peer = match &rule.destination {
            Some(egress_rule::Destination::HttpsHostname(name)) => {
                grants.push(HttpsGrant {
                    pattern: name.trim_end_matches('.').to_ascii_lowercase(),
                    except: rule.https_hostname_except.iter().map(|name| name.to_ascii_lowercase()).collect(),
                });
                continue;
            }
            Some(egress_rule::Destination::Cidr(block)) => {
                Some(NetworkPeer::Cidr { cidr: block.cidr.clone(), except: block.except.clone() })
            }
            Some(egress_rule::Destination::Tenant(scope)) => tenant_peer(*scope),
            Some(egress_rule::Destination::Any(true)) => Some(NetworkPeer::Any),
            Some(egress_rule::Destination::Selector(selector)) => Some(NetworkPeer::Selector {
                pod_labels: selector.pod_labels.iter().map(|(key, value)| (key.clone(), value.clone())).collect(),
                // Omitted (empty, in proto3): the sandbox's own namespace.
                namespace_labels: (!selector.namespace_labels.is_empty()).then(|| {
                    selector.namespace_labels.iter().map(|(key, value)| (key.clone(), value.clone())).collect()
                }),
            }),
            Some(egress_rule::Destination::Any(false)) | None => None,
        };
        if let (Some(peer), Some(ports)) = (peer, compile_ports(&rule.ports)) {
            compiled.push(NetworkRule { peer, ports });
        }
    }
    (compiled, grants)
}

fn compile_ingress(rules: &[IngressRule]) -> Vec<NetworkRule> {
    rules
        .iter()
        .filter_map(|rule| {
            let peer = match &rule.source {
                Some(ingress_rule::Source::Cidr(block)) => {
                    Some(NetworkPeer::Cidr { cidr: block.cidr.clone(), except: block.except.clone() })
                }
                Some(ingress_rule::Source::Tenant(scope)) => tenant_peer(*scope),
                Some(ingress_rule::Source::Any(true)) => Some(NetworkPeer::Any),
                Some(ingress_rule::Source::Any(false)) | None => None,
            }?;
            Some(NetworkRule { peer, ports: compile_ports(&rule.ports)? })
        })
        .collect()
}

fn tenant_peer(scope: i32) -> Option<NetworkPeer> {
    match TenantScope::try_from(scope) {
        Ok(TenantScope::SameOrg) => Some(NetworkPeer::SameOrganization),
        Ok(TenantScope::SameUser) => Some(NetworkPeer::SameUser),
        // Sandbox networks by id are refused at create; unspecified by validation.
        _ => None,
    }
}

fn compile_ports(ranges: &[cwsandbox_api::sandbox_v1::PortRange]) -> Option<Vec<NetworkPorts>> {
    ranges
        .iter()
        .map(|range| {
            let protocol = match range.protocol.to_ascii_uppercase().as_str() {
                "" | "TCP" => TransportProtocol::Tcp,
                "UDP" => TransportProtocol::Udp,
                "SCTP" => TransportProtocol::Sctp,
                _ => return None,
            };
            let first = u16::try_from(range.port).ok()?;
            let last = if range.end_port == 0 { first } else { u16::try_from(range.end_port).ok()? };
            Some(NetworkPorts { protocol, first, last })
        })
        .collect()
}

/// The pod range's addresses, handed out in turn so that a freed address is not reused before
/// every other one was (the host removes a Pod's network as the world forgets it).
#[derive(Debug, Default)]
pub(crate) struct PodAddresses {
    next: u32,
    in_use: BTreeSet<Ipv4Addr>,
}

impl PodAddresses {
    fn allocate(&mut self, range: Ipv4Range) -> Option<Ipv4Addr> {
        let base = u32::from(range.network);
        let count = (1u32 << (32 - u32::from(range.length))).saturating_sub(3);
        for step in 0..count {
            let offset = (self.next + step) % count;
            let address = Ipv4Addr::from(base + 2 + offset);
            if self.in_use.insert(address) {
                self.next = (offset + 1) % count;
                return Some(address);
            }
        }
        None
    }

    pub(crate) fn release(&mut self, address: Ipv4Addr) {
        self.in_use.remove(&address);
    }
}

/// Whether the spec asks for network rules (beyond `deny_egress`, which a loopback-only
/// namespace enforces anywhere).
fn asks_for_rules(network: &NetworkOptions) -> bool {
    !network.egress.is_empty()
        || !network.ingress.is_empty()
        || network.deny_ingress == Some(true)
        || network.dns_egress != DnsEgressMode::Unspecified as i32
}

impl World {
    /// What the host offers for sandbox networks.
    pub fn set_pod_network(&mut self, offer: PodNetworkOffer) {
        self.pod_network = offer;
    }

    /// Refuses, before anything is made, a sandbox whose network rules nothing here can
    /// enforce: no sandbox networks on this host (as when no runner can host it), HTTPS host
    /// networks by id and gVisor (runsc does not run in such a network here) by name.
    pub(super) fn check_network_runs_here(
        &self,
        org: &str,
        spec: &SandboxSpec,
        resolved: &ResolvedSpec,
    ) -> SimResult<()> {
        if let Some(network) = &spec.network
            && network.deny_egress == Some(true)
            && !network.egress.is_empty()
        {
            // As the published client refuses it before sending.
            return Err(SimError::invalid_field(
                "sandbox.spec.network.denyEgress",
                "deny_egress cannot be combined with egress rules: deny all egress, or grant what is allowed",
            ));
        }
        let Some(network) = spec.network.as_ref().filter(|network| asks_for_rules(network)) else { return Ok(()) };
        let sandbox_network = TenantScope::SandboxNetwork as i32;
        let egress_tenants = network
            .egress
            .iter()
            .enumerate()
            .filter(|(_, rule)| {
                matches!(rule.destination, Some(egress_rule::Destination::Tenant(scope)) if scope == sandbox_network)
            })
            .map(|(index, _)| format!("sandbox.spec.network.egress[{index}].tenant"));
        let ingress_tenants = network
            .ingress
            .iter()
            .enumerate()
            .filter(|(_, rule)| matches!(rule.source, Some(ingress_rule::Source::Tenant(scope)) if scope == sandbox_network))
            .map(|(index, _)| format!("sandbox.spec.network.ingress[{index}].tenant"));
        let tenants = egress_tenants.chain(ingress_tenants).map(|field| {
            FieldViolation::new(
                field,
                "TENANT_SCOPE_SANDBOX_NETWORK is not emulated: there are no sandbox networks (network_ids) on this emulator",
            )
        });
        let refused: Vec<FieldViolation> = tenants.collect();
        if !refused.is_empty() {
            return Err(SimError::not_emulated(refused));
        }
        if let PodNetworkOffer::Unavailable(why) = &self.pod_network {
            return Err(SimError::FailedPrecondition {
                reason: Reason::NoSuitableRunner,
                message: format!(
                    "sandbox.spec.network: no runner of organization {org:?} can enforce network rules on this emulator: {why}"
                ),
            });
        }
        if let Some(class) = resolved.runtime_class.as_deref()
            && self.one_container_runtime_classes.iter().any(|known| known == class)
        {
            return Err(SimError::not_emulated(vec![FieldViolation::new(
                "sandbox.spec.network",
                format!(
                    "RuntimeClass {class:?} cannot have network rules on this emulator (gVisor's runsc does not run in a network made for the sandbox here): run it without the class, or without network rules"
                ),
            )]));
        }
        Ok(())
    }

    /// Whether a sandbox gets a network of its own (its spec asks for rules, or every sandbox
    /// does), decided at create.
    pub(super) fn wants_own_network(&self, spec: &SandboxSpec, resolved: &ResolvedSpec) -> bool {
        match &self.pod_network {
            PodNetworkOffer::Unavailable(_) => false,
            PodNetworkOffer::Available { every_sandbox, .. } => {
                let gvisor = resolved
                    .runtime_class
                    .as_deref()
                    .is_some_and(|class| self.one_container_runtime_classes.iter().any(|known| known == class));
                let asked = spec.network.as_ref().is_some_and(asks_for_rules);
                asked || (*every_sandbox && !gvisor)
            }
        }
    }

    /// The network a starting sandbox Pod gets: its own with a fresh address, loopback only,
    /// or the host's. `None` address left: the Pod starts on the host's network and says why.
    pub(super) fn pod_network_of(&mut self, sandbox_id: &str, pod_uid: &str) -> PodNetwork {
        let Some(sandbox) = self.sandboxes.get(sandbox_id) else { return PodNetwork::Host };
        let info = sandbox.info.clone();
        if !info.own_network {
            return if info.deny_egress { PodNetwork::LoopbackOnly } else { PodNetwork::Host };
        }
        let PodNetworkOffer::Available { range, .. } = self.pod_network else { return PodNetwork::LoopbackOnly };
        let Some(address) = self.pod_addresses.allocate(range) else { return PodNetwork::LoopbackOnly };
        let Some(pod) = self.cluster.pod_mut(pod_uid) else {
            self.pod_addresses.release(address);
            return PodNetwork::LoopbackOnly;
        };
        pod.pod_ip = Some(address);
        // A direction with effective rules allows only them; `deny_*` left none and allows
        // nothing; a direction with neither is open, as a Kubernetes NetworkPolicy leaves a
        // direction no policy names.
        let (egress, https_grants) = compile_egress(&info.resolved.egress);
        let ingress = compile_ingress(&info.resolved.ingress);
        // Isolation follows what was asked, not what compiled: a rule left out narrows.
        let (egress_asked, ingress_asked) = (!info.resolved.egress.is_empty(), !info.resolved.ingress.is_empty());
        PodNetwork::Own(Box::new(OwnNetwork {
            address,
            organization: info.owner.org.clone(),
            user: info.owner.user.clone(),
            namespace: info.namespace.clone(),
            pod_labels: pod.labels.clone(),
            egress_isolated: info.deny_egress || egress_asked,
            egress,
            https_grants,
            ingress_isolated: info.deny_ingress || ingress_asked,
            ingress,
            dns_allow_all: info.resolved.dns_egress != DnsEgressMode::Deny,
        }))
    }
}
