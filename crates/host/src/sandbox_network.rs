//! Where the world's sandbox networks meet this machine: the effective rules of a sandbox
//! (the API's `EgressRule`/`IngressRule`) compiled to `cwsandbox-network`'s peers and ports,
//! the bridge claimed at the first sandbox that needs it, and the executor's hook that makes
//! the network where the runtime says (`Network::Attached`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use cwsandbox_api::sandbox_v1::{
    CidrBlock, EgressRule, IngressRule, PortRange as ApiPortRange, SelectorBlock, TenantScope, egress_rule,
    ingress_rule,
};
use cwsandbox_network::{
    Attachment, Cidr, Direction, HostnameGrant, Ipv4Cidr, NetworkConfig, Peer, PeerIdentity, PortRange, Protocol, Rule,
    SandboxNetworks,
};
use cwsandbox_sim::world::{Ipv4Range, OwnNetwork, PodNetworkOffer};
use cwsandbox_sync::MutexUnpoisoned;

use crate::runtime_config::SandboxNetworkConfig;

/// The emulator's sandbox networks: what it offers the world, and the bridge once claimed.
#[derive(Debug)]
pub struct HostNetworks {
    offer: PodNetworkOffer,
    config: Option<NetworkConfig>,
    /// Claimed at the first sandbox that needs it; an attempt that failed (another emulator's
    /// bridge) is tried again at the next.
    networks: Mutex<Option<Arc<SandboxNetworks>>>,
}

impl HostNetworks {
    /// What this machine offers, checked now (root, the namespaces isolation, `ip`, `nft`); the
    /// bridge itself is made at the first sandbox that needs it.
    pub fn new(config: &SandboxNetworkConfig, namespaces: bool) -> HostNetworks {
        let unavailable = |why: String| HostNetworks {
            offer: PodNetworkOffer::Unavailable(why),
            config: None,
            networks: Mutex::new(None),
        };
        if config.bridge.is_empty() {
            return unavailable("sandbox networks are off (containerRuntime.network.bridge is \"\")".to_owned());
        }
        if !namespaces {
            return unavailable("plain processes share the host's network (no namespaces isolation)".to_owned());
        }
        let pod_cidr: Ipv4Cidr = match config.pod_cidr.parse() {
            Ok(cidr) => cidr,
            Err(why) => return unavailable(format!("containerRuntime.network.podCidr: {why}")),
        };
        let mut network_config = NetworkConfig::new(&config.bridge, pod_cidr);
        network_config.static_hosts = config
            .static_hosts
            .iter()
            .map(|(name, address)| (name.trim_end_matches('.').to_ascii_lowercase(), *address))
            .collect();
        if let Err(error) = SandboxNetworks::check(&network_config) {
            return unavailable(error.to_string());
        }
        if SandboxNetworks::remove_leftovers(&network_config) {
            tracing::info!(
                bridge = %config.bridge,
                "removed the sandbox networks an emulator left when it was stopped without cleaning up"
            );
        }
        HostNetworks {
            offer: PodNetworkOffer::Available {
                range: Ipv4Range { network: pod_cidr.network, length: pod_cidr.length },
                every_sandbox: config.every_sandbox,
            },
            config: Some(network_config),
            networks: Mutex::new(None),
        }
    }

    /// The sandboxes' nameserver (the gateway), where sandbox networks are offered.
    pub fn nameserver(&self) -> Option<std::net::Ipv4Addr> {
        self.config.as_ref().map(|config| config.pod_cidr.gateway())
    }

    /// What the world is told.
    pub fn offer(&self) -> PodNetworkOffer {
        self.offer.clone()
    }

    fn networks(&self) -> Result<Arc<SandboxNetworks>, String> {
        let mut networks = self.networks.lock_unpoisoned();
        if let Some(networks) = networks.as_ref() {
            return Ok(networks.clone());
        }
        let config = self.config.clone().ok_or_else(|| "sandbox networks are unavailable here".to_owned())?;
        let opened = Arc::new(SandboxNetworks::open(config).map_err(|error| error.to_string())?);
        *networks = Some(opened.clone());
        Ok(opened)
    }

    /// Puts the Pod's rules in force (blocking: `nft`); the returned hook makes its link and
    /// address where the executor asks.
    pub fn attach(&self, pod_uid: &str, network: &OwnNetwork) -> Result<Arc<PodNetworkHook>, String> {
        let networks = self.networks()?;
        let attachment = attachment(pod_uid, network)?;
        networks.attach(attachment).map_err(|error| error.to_string())?;
        Ok(Arc::new(PodNetworkHook { networks, id: pod_uid.to_owned() }))
    }

    /// Removes the Pod's network (blocking); nothing to remove is not an error.
    pub fn detach(&self, pod_uid: &str) {
        if let Some(networks) = self.networks.lock_unpoisoned().clone() {
            networks.detach(pod_uid);
        }
    }

    /// Removes the bridge and every network on it (at shutdown).
    pub fn close(&self) {
        if let Some(networks) = self.networks.lock_unpoisoned().take() {
            networks.close();
        }
    }
}

/// The executor's side of one Pod's network.
#[derive(Debug)]
pub struct PodNetworkHook {
    networks: Arc<SandboxNetworks>,
    id: String,
}

impl cwsandbox_executor::AttachNetwork for PodNetworkHook {
    fn make_namespace(&self) -> Result<std::path::PathBuf, String> {
        self.networks.make_namespace(&self.id).map_err(|error| error.to_string())
    }

    fn plumb_into(&self, pid: u32) -> Result<(), String> {
        self.networks.plumb_process(&self.id, pid).map_err(|error| error.to_string())
    }
}

/// The world's description of a Pod's network as the network crate takes it.
fn attachment(pod_uid: &str, network: &OwnNetwork) -> Result<Attachment, String> {
    let (hostnames, addresses): (Vec<&EgressRule>, Vec<&EgressRule>) = network
        .egress
        .iter()
        .partition(|rule| matches!(rule.destination, Some(egress_rule::Destination::HttpsHostname(_))));
    let https_grants = hostnames
        .into_iter()
        .filter_map(|rule| match &rule.destination {
            Some(egress_rule::Destination::HttpsHostname(name)) => Some(HostnameGrant {
                pattern: name.trim_end_matches('.').to_ascii_lowercase(),
                except: rule.https_hostname_except.iter().map(|name| name.to_ascii_lowercase()).collect(),
            }),
            _ => None,
        })
        .collect();
    let egress = addresses
        .into_iter()
        .enumerate()
        .map(|(index, rule)| egress_rule(rule).map_err(|why| format!("egress[{index}]: {why}")))
        .collect::<Result<Vec<_>, _>>()?;
    let ingress = network
        .ingress
        .iter()
        .enumerate()
        .map(|(index, rule)| ingress_rule(rule).map_err(|why| format!("ingress[{index}]: {why}")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Attachment {
        id: pod_uid.to_owned(),
        address: network.address,
        identity: PeerIdentity {
            organization: network.organization.clone(),
            user: network.user.clone(),
            namespace: network.namespace.to_string(),
            pod_labels: network.pod_labels.iter().map(|(key, value)| (key.clone(), value.clone())).collect(),
            // The world's namespaces carry no labels of their own.
            namespace_labels: BTreeMap::new(),
        },
        egress: Direction { isolated: network.egress_isolated, rules: egress },
        ingress: Direction { isolated: network.ingress_isolated, rules: ingress },
        https_grants,
        dns_allow_all: network.dns_allow_all,
    })
}

fn egress_rule(rule: &EgressRule) -> Result<Rule, String> {
    let peer = match &rule.destination {
        Some(egress_rule::Destination::Cidr(block)) => cidr_peer(block)?,
        Some(egress_rule::Destination::Tenant(scope)) => tenant_peer(*scope)?,
        Some(egress_rule::Destination::Any(true)) => Peer::Any,
        Some(egress_rule::Destination::Selector(selector)) => selector_peer(selector),
        Some(egress_rule::Destination::HttpsHostname(name)) => {
            return Err(format!("HTTPS host name {name:?} is a grant of the SNI proxy, not an address rule"));
        }
        Some(egress_rule::Destination::Any(false)) | None => return Err("no destination".to_owned()),
    };
    Ok(Rule { peer, ports: ports(&rule.ports)? })
}

fn ingress_rule(rule: &IngressRule) -> Result<Rule, String> {
    let peer = match &rule.source {
        Some(ingress_rule::Source::Cidr(block)) => cidr_peer(block)?,
        Some(ingress_rule::Source::Tenant(scope)) => tenant_peer(*scope)?,
        Some(ingress_rule::Source::Any(true)) => Peer::Any,
        Some(ingress_rule::Source::Any(false)) | None => return Err("no source".to_owned()),
    };
    Ok(Rule { peer, ports: ports(&rule.ports)? })
}

fn cidr_peer(block: &CidrBlock) -> Result<Peer, String> {
    let cidr: Cidr = block.cidr.parse()?;
    let except = block.except.iter().map(|text| text.parse::<Cidr>()).collect::<Result<Vec<_>, _>>()?;
    Ok(Peer::Cidr { cidr, except })
}

fn tenant_peer(scope: i32) -> Result<Peer, String> {
    match TenantScope::try_from(scope) {
        Ok(TenantScope::SameOrg) => Ok(Peer::SameOrganization),
        Ok(TenantScope::SameUser) => Ok(Peer::SameUser),
        Ok(other) => Err(format!("tenant scope {} is not enforced here", other.as_str_name())),
        Err(_) => Err(format!("unknown tenant scope {scope}")),
    }
}

fn selector_peer(selector: &SelectorBlock) -> Peer {
    let labels = |map: &std::collections::HashMap<String, String>| -> BTreeMap<String, String> {
        map.iter().map(|(key, value)| (key.clone(), value.clone())).collect()
    };
    Peer::Selector {
        pod_labels: labels(&selector.pod_labels),
        // Omitted (empty, in proto3): the sandbox's own namespace.
        namespace_labels: (!selector.namespace_labels.is_empty()).then(|| labels(&selector.namespace_labels)),
    }
}

/// A rule's ports (none: every port); protocol TCP unless named.
fn ports(ranges: &[ApiPortRange]) -> Result<Vec<PortRange>, String> {
    ranges
        .iter()
        .map(|range| {
            let protocol = match range.protocol.to_ascii_uppercase().as_str() {
                "" | "TCP" => Protocol::Tcp,
                "UDP" => Protocol::Udp,
                "SCTP" => Protocol::Sctp,
                other => return Err(format!("protocol {other:?}")),
            };
            let first = u16::try_from(range.port).map_err(|_| format!("port {}", range.port))?;
            let last = if range.end_port == 0 {
                first
            } else {
                u16::try_from(range.end_port).map_err(|_| format!("end port {}", range.end_port))?
            };
            Ok(PortRange { protocol, first, last })
        })
        .collect()
}
