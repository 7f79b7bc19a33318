//! Where the world's sandbox networks meet this machine: the effective rules of a sandbox (as
//! the world compiled them from the API's) handed to `cwsandbox-network`'s peers and ports,
//! the bridge claimed at the first sandbox that needs it, and the executor's hook that makes
//! the network where the runtime says (`Network::Attached`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use cwsandbox_network::{
    Attachment, Cidr, Direction, HostnameGrant, Ipv4Cidr, NetworkConfig, Peer, PeerIdentity, PortRange, Protocol, Rule,
    SandboxNetworks,
};
use cwsandbox_sim::world::{Ipv4Range, NetworkPeer, NetworkRule, OwnNetwork, PodNetworkOffer, TransportProtocol};
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
    let rules = |rules: &[NetworkRule], way: &str| {
        rules
            .iter()
            .enumerate()
            .map(|(index, rule)| compile(rule).map_err(|why| format!("{way}[{index}]: {why}")))
            .collect::<Result<Vec<_>, _>>()
    };
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
        egress: Direction { isolated: network.egress_isolated, rules: rules(&network.egress, "egress")? },
        ingress: Direction { isolated: network.ingress_isolated, rules: rules(&network.ingress, "ingress")? },
        https_grants: network
            .https_grants
            .iter()
            .map(|grant| HostnameGrant { pattern: grant.pattern.clone(), except: grant.except.clone() })
            .collect(),
        dns_allow_all: network.dns_allow_all,
    })
}

fn compile(rule: &NetworkRule) -> Result<Rule, String> {
    let peer = match &rule.peer {
        NetworkPeer::Any => Peer::Any,
        NetworkPeer::Cidr { cidr, except } => Peer::Cidr {
            cidr: cidr.parse()?,
            except: except.iter().map(|block| block.parse::<Cidr>()).collect::<Result<Vec<_>, _>>()?,
        },
        NetworkPeer::SameOrganization => Peer::SameOrganization,
        NetworkPeer::SameUser => Peer::SameUser,
        NetworkPeer::Selector { pod_labels, namespace_labels } => {
            Peer::Selector { pod_labels: pod_labels.clone(), namespace_labels: namespace_labels.clone() }
        }
    };
    let ports = rule
        .ports
        .iter()
        .map(|ports| PortRange {
            protocol: match ports.protocol {
                TransportProtocol::Tcp => Protocol::Tcp,
                TransportProtocol::Udp => Protocol::Udp,
                TransportProtocol::Sctp => Protocol::Sctp,
            },
            first: ports.first,
            last: ports.last,
        })
        .collect();
    Ok(Rule { peer, ports })
}
