//! A network of its own for each sandbox with a network policy: a namespace on a bridge the
//! emulator owns, its traffic filtered by nftables (see the README for the picture).
//!
//! [`SandboxNetworks::open`] takes the bridge (removing what a dead emulator left of it),
//! [`SandboxNetworks::attach`] makes a sandbox's namespace with its rules in force before any of
//! its processes run, [`SandboxNetworks::detach`] removes them, and dropping the value removes
//! the bridge and everything on it.

mod peers;
mod plumbing;
mod resolver;
mod rules;
mod sni_proxy;
mod types;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use std::sync::Mutex;

use cwsandbox_sync::{MutexUnpoisoned, RwLockUnpoisoned};

pub use resolver::DnsPolicy;
use types::Attached;
pub use types::{
    Attachment, Cidr, Direction, HostnameGrant, Ipv4Cidr, NetworkConfig, NetworkError, Peer, PeerIdentity, PortRange,
    Protocol, Rule,
};

#[derive(Debug, Default)]
struct State {
    next_index: u64,
    attached: BTreeMap<String, Attached>,
    closed: bool,
}

/// The emulator's bridge and the sandbox networks on it.
#[derive(Debug)]
pub struct SandboxNetworks {
    config: NetworkConfig,
    state: Mutex<State>,
    proxy: Mutex<sni_proxy::SniProxy>,
    resolver: Mutex<resolver::SandboxResolver>,
}

impl SandboxNetworks {
    /// Takes the bridge: refuses one a running emulator owns, removes what a dead one left
    /// (links, namespaces, tables), then makes the bridge and the base rules.
    pub fn open(config: NetworkConfig) -> Result<SandboxNetworks, NetworkError> {
        SandboxNetworks::check(&config)?;
        plumbing::claim_bridge(&config)?;
        let gateway = config.pod_cidr.gateway();
        let names = sni_proxy::Resolver { static_hosts: config.static_hosts.clone() };
        let services = sni_proxy::SniProxy::start(gateway, config.pod_cidr, names.clone())
            .and_then(|proxy| Ok((proxy, resolver::SandboxResolver::start(gateway, names)?)));
        let (proxy, resolver) = match services {
            Ok(services) => services,
            Err(error) => {
                plumbing::remove_everything(&config);
                return Err(NetworkError::Unavailable(format!(
                    "cannot serve the sandboxes' SNI proxy and resolver on {gateway}: {error}"
                )));
            }
        };
        let proxy_port = proxy.address.port();
        let networks = SandboxNetworks {
            config,
            state: Mutex::new(State::default()),
            proxy: Mutex::new(proxy),
            resolver: Mutex::new(resolver),
        };
        if let Err(error) = rules::apply(&networks.config, &rules::base(&networks.config, proxy_port)) {
            networks.close();
            return Err(error);
        }
        tracing::info!(bridge = %networks.config.bridge, range = %networks.config.pod_cidr, "sandbox networks ready");
        Ok(networks)
    }

    /// Whether this machine can give sandboxes networks with `config` (root, `ip`, `nft`, a
    /// usable name), without making anything.
    pub fn check(config: &NetworkConfig) -> Result<(), NetworkError> {
        config.check()?;
        plumbing::check_tools(config)
    }

    /// Removes what an emulator that is no longer running left on `config`'s bridge (after a
    /// SIGKILL its shutdown never ran): `true` if there was something. Another running
    /// emulator's bridge is left alone.
    pub fn remove_leftovers(config: &NetworkConfig) -> bool {
        plumbing::remove_leftovers(config)
    }

    /// The configuration in force.
    pub fn config(&self) -> &NetworkConfig {
        &self.config
    }

    /// Puts the sandbox's rules in force, before it has a namespace: [`Self::make_namespace`]
    /// or [`Self::plumb_process`] then gives it its link and address.
    pub fn attach(&self, attachment: Attachment) -> Result<(), NetworkError> {
        let mut state = self.state.lock_unpoisoned();
        if state.closed {
            return Err(NetworkError::Unavailable("the emulator's sandbox networks are closed".to_owned()));
        }
        if state.attached.contains_key(&attachment.id) {
            return Err(NetworkError::AlreadyAttached(attachment.id));
        }
        if !self.config.pod_cidr.contains(attachment.address) || attachment.address == self.config.pod_cidr.gateway() {
            return Err(NetworkError::InvalidConfig(format!(
                "address {} is not a pod address of {}",
                attachment.address, self.config.pod_cidr
            )));
        }
        let index = state.next_index;
        state.next_index += 1;
        let id = attachment.id.clone();
        let address = attachment.address;
        let dns = DnsPolicy { allow_all: attachment.dns_allow_all, grants: attachment.https_grants.clone() };
        if !attachment.https_grants.is_empty() {
            self.proxy.lock_unpoisoned().grants.write_unpoisoned().insert(address, attachment.https_grants.clone());
        }
        self.resolver.lock_unpoisoned().policies.write_unpoisoned().insert(address, dns);
        state.attached.insert(id.clone(), Attached { index, attachment, plumbed: false });
        let proxy_port = self.proxy.lock_unpoisoned().address.port();
        let batch = rules::attach(&self.config, &state.attached, &id, proxy_port);
        if let Err(error) = rules::apply(&self.config, &batch) {
            state.attached.remove(&id);
            self.forget_names(address);
            return Err(error);
        }
        Ok(())
    }

    /// The proxy's and the resolver's records of a sandbox's address go.
    fn forget_names(&self, address: Ipv4Addr) {
        self.proxy.lock_unpoisoned().grants.write_unpoisoned().remove(&address);
        self.resolver.lock_unpoisoned().policies.write_unpoisoned().remove(&address);
    }

    /// The sandboxes' nameserver: the gateway.
    pub fn nameserver(&self) -> Ipv4Addr {
        self.config.pod_cidr.gateway()
    }

    /// A new namespace for the attached sandbox `id`, with its link, address and routes;
    /// returns its path for the sandbox's processes to join.
    pub fn make_namespace(&self, id: &str) -> Result<PathBuf, NetworkError> {
        self.plumb(id, plumbing::Place::New)
    }

    /// The attached sandbox `id`'s link, address and routes put into the network namespace of
    /// the process `pid` (a container's init that a runtime made, before its command runs).
    pub fn plumb_process(&self, id: &str, pid: u32) -> Result<(), NetworkError> {
        self.plumb(id, plumbing::Place::OfProcess(pid)).map(|_| ())
    }

    fn plumb(&self, id: &str, place: plumbing::Place) -> Result<PathBuf, NetworkError> {
        let mut state = self.state.lock_unpoisoned();
        let attached = state.attached.get_mut(id).ok_or_else(|| NetworkError::NotAttached(id.to_owned()))?;
        if attached.plumbed {
            return Err(NetworkError::AlreadyAttached(id.to_owned()));
        }
        attached.plumbed = true;
        let (index, address) = (attached.index, attached.attachment.address);
        plumbing::make_namespace(&self.config, index, address, place).inspect_err(|_| {
            plumbing::remove_namespace(&self.config, index);
        })
    }

    /// Removes the sandbox's namespace, link and rules; the peer sets of the others follow.
    /// Nothing to remove is not an error.
    pub fn detach(&self, id: &str) {
        let mut state = self.state.lock_unpoisoned();
        let Some(attached) = state.attached.remove(id) else { return };
        self.forget_names(attached.attachment.address);
        let batch = rules::detach(&self.config, &state.attached, &attached);
        if let Err(error) = rules::apply(&self.config, &batch) {
            tracing::warn!(sandbox = %id, %error, "cannot remove a sandbox's network rules");
        }
        plumbing::remove_namespace(&self.config, attached.index);
    }

    /// The sandboxes attached now, by id.
    pub fn attached(&self) -> Vec<String> {
        self.state.lock_unpoisoned().attached.keys().cloned().collect()
    }

    /// Removes every sandbox network, the rules and the bridge. Later attaches are refused.
    pub fn close(&self) {
        let mut state = self.state.lock_unpoisoned();
        if state.closed {
            return;
        }
        state.closed = true;
        state.attached.clear();
        self.proxy.lock_unpoisoned().stop();
        self.resolver.lock_unpoisoned().stop();
        plumbing::remove_everything(&self.config);
    }
}

impl Drop for SandboxNetworks {
    fn drop(&mut self) {
        self.close();
    }
}
