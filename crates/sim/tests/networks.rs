//! Sandbox networks as the world decides them: who gets a network of its own, with which
//! address and effective rules; what is refused, and why, before anything is made.

mod common;

use std::net::Ipv4Addr;

use common::*;
use cwsandbox_api::sandbox_v1::{
    CidrBlock, EgressRule, IngressRule, NetworkOptions, SandboxMode, SandboxSpec, TenantScope, egress_rule,
    ingress_rule,
};
use cwsandbox_sim::config::{Scenario, Values};
use cwsandbox_sim::error::{Reason, SimError};
use cwsandbox_sim::sandbox::Owner;
use cwsandbox_sim::world::{
    Effect, HttpsGrant, Ipv4Range, NetworkPeer, NetworkRule, PodLaunch, PodNetwork, PodNetworkOffer,
};

fn alice() -> Owner {
    Owner { org: "default-org".to_owned(), user: "alice".to_owned() }
}

fn spec(network: Option<NetworkOptions>) -> SandboxSpec {
    SandboxSpec {
        containers: vec![client_container()],
        runner_ids: vec!["cks-runner".to_owned()],
        mode: SandboxMode::Cks as i32,
        network,
        ..SandboxSpec::default()
    }
}

fn ingress_from_the_organization() -> NetworkOptions {
    NetworkOptions {
        ingress: vec![IngressRule {
            source: Some(ingress_rule::Source::Tenant(TenantScope::SameOrg as i32)),
            ports: Vec::new(),
        }],
        ..NetworkOptions::default()
    }
}

fn egress_to(cidr: &str) -> EgressRule {
    EgressRule {
        destination: Some(egress_rule::Destination::Cidr(CidrBlock { cidr: cidr.to_owned(), except: Vec::new() })),
        ..EgressRule::default()
    }
}

const RANGE: Ipv4Range = Ipv4Range { network: Ipv4Addr::new(10, 244, 0, 0), length: 29 };

fn with_networks(every_sandbox: bool) -> Harness {
    let mut h = harness_with(Values::scenario(Scenario::Ready));
    h.world.set_pod_network(PodNetworkOffer::Available { range: RANGE, every_sandbox });
    h
}

/// The networks of the sandboxes that started since the last call, by sandbox id.
fn started_networks(h: &mut Harness) -> Vec<(String, PodNetwork)> {
    h.advance(1);
    h.world
        .take_effects()
        .into_iter()
        .filter_map(|effect| match effect {
            Effect::StartPod(PodLaunch { sandbox_id: Some(id), network, .. }) => Some((id.to_string(), network)),
            _ => None,
        })
        .collect()
}

/// Where the host offers no sandbox networks, a sandbox asking for rules is refused as when no
/// runner can host it, and nothing is made; `deny_egress` alone (a loopback of its own) and a
/// sandbox asking nothing still run.
#[test]
fn rules_are_refused_where_the_host_cannot_enforce_them() {
    let mut h = harness_with(Values::scenario(Scenario::Ready));
    h.world.set_pod_network(PodNetworkOffer::Unavailable("the emulator is not root".to_owned()));
    for network in [
        ingress_from_the_organization(),
        NetworkOptions { egress: vec![egress_to("198.51.100.0/24")], ..NetworkOptions::default() },
        NetworkOptions { deny_ingress: Some(true), ..NetworkOptions::default() },
    ] {
        let error = h.world.create_sandbox(&alice(), spec(Some(network)), "", "").unwrap_err();
        assert_eq!(error.reason(), Some(Reason::NoSuitableRunner), "{error:?}");
        assert!(error.to_string().contains("the emulator is not root"), "{error}");
        assert!(error.to_string().starts_with("sandbox.spec.network"), "{error}");
    }
    assert_eq!(h.world.every_sandbox().count(), 0, "nothing was made");
    let alone = NetworkOptions { deny_egress: Some(true), ..NetworkOptions::default() };
    let loopback = h.world.create_sandbox(&alice(), spec(Some(alone)), "", "").unwrap();
    let shared = h.world.create_sandbox(&alice(), spec(None), "", "").unwrap();
    let networks = started_networks(&mut h);
    let of = |id: &str| networks.iter().find(|(started, _)| started == id).map(|(_, network)| network.clone());
    assert_eq!(of(&loopback.id), Some(PodNetwork::LoopbackOnly));
    assert_eq!(of(&shared.id), Some(PodNetwork::Host));
}

/// What no network here can enforce is refused by name, whatever the host offers: sandbox
/// networks by id, gVisor's; `deny_egress` with egress rules is refused as the published client
/// refuses it. HTTPS host names are granted (the host's SNI proxy).
#[test]
fn what_cannot_be_enforced_is_refused_by_name() {
    let mut h = with_networks(false);
    let hostname = EgressRule {
        destination: Some(egress_rule::Destination::HttpsHostname("pypi.org".to_owned())),
        ..EgressRule::default()
    };
    let network_tenant = EgressRule {
        destination: Some(egress_rule::Destination::Tenant(TenantScope::SandboxNetwork as i32)),
        ..EgressRule::default()
    };
    let options = NetworkOptions {
        egress: vec![egress_to("198.51.100.0/24"), hostname, network_tenant],
        ..NetworkOptions::default()
    };
    let error = h.world.create_sandbox(&alice(), spec(Some(options)), "", "").unwrap_err();
    assert_eq!(error.reason(), Some(Reason::NotImplemented), "{error:?}");
    let fields: Vec<&str> = error.violations().iter().map(|violation| violation.field.as_str()).collect();
    assert_eq!(fields, ["sandbox.spec.network.egress[2].tenant"]);
    let hostname_only = NetworkOptions {
        egress: vec![EgressRule {
            destination: Some(egress_rule::Destination::HttpsHostname("pypi.org".to_owned())),
            ..EgressRule::default()
        }],
        ..NetworkOptions::default()
    };
    let granted = h.world.create_sandbox(&alice(), spec(Some(hostname_only)), "", "").unwrap();
    match started_networks(&mut h).as_slice() {
        [(id, PodNetwork::Own(own))] if *id == *granted.id => {
            assert_eq!(own.https_grants, [HttpsGrant { pattern: "pypi.org".to_owned(), except: Vec::new() }]);
            assert!(own.egress.is_empty() && own.egress_isolated, "only the grant leaves");
        }
        other => panic!("{other:?}"),
    }

    let both = NetworkOptions {
        deny_egress: Some(true),
        egress: vec![egress_to("198.51.100.0/24")],
        ..NetworkOptions::default()
    };
    let error = h.world.create_sandbox(&alice(), spec(Some(both)), "", "").unwrap_err();
    assert!(matches!(error, SimError::InvalidArgument { .. }), "{error:?}");
    assert_eq!(error.violations()[0].field, "sandbox.spec.network.denyEgress");

    let mut gvisor = ready_with_runtime_classes(serde_json::json!({"allowedRuntimeClasses": ["gvisor"]}), &["gvisor"]);
    gvisor.world.set_one_container_runtime_classes(vec!["gvisor".to_owned()]);
    gvisor.world.set_pod_network(PodNetworkOffer::Available { range: RANGE, every_sandbox: true });
    let asking = SandboxSpec { runtime_class: "gvisor".to_owned(), ..spec(Some(ingress_from_the_organization())) };
    let error = gvisor.world.create_sandbox(&alice(), asking, "", "").unwrap_err();
    assert_eq!(error.violations()[0].field, "sandbox.spec.network", "{error:?}");
    assert_eq!(gvisor.world.every_sandbox().count(), 0, "nothing was made");
    // A gVisor sandbox asking nothing keeps the host's network even where every sandbox gets one.
    let plain = gvisor
        .world
        .create_sandbox(&alice(), SandboxSpec { runtime_class: "gvisor".to_owned(), ..spec(None) }, "", "")
        .unwrap();
    let networks = started_networks(&mut gvisor);
    assert_eq!(networks, [(plain.id.to_string(), PodNetwork::Host)]);
}

/// A sandbox asking for rules gets a network of its own: an address of the range (the Pod's
/// `status.podIP`), its effective rules (the runner policy's default egress where it declares
/// none), each direction with rules allowing only them; `deny_egress` leaves no egress at all,
/// and a direction without rules is open. Addresses are handed out in turn, so a freed one is
/// not reused at once.
#[test]
fn a_sandbox_asking_for_rules_gets_an_address_and_its_effective_rules() {
    // A policy whose default egress is public addresses, as the default policy's.
    let mut values = Values::scenario(Scenario::Ready);
    let policy = values.runners[0].policy.get_or_insert_with(|| serde_json::json!({}));
    policy["constraints"]["network"] =
        serde_json::json!({"defaultEgress": [{"cidr": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}]});
    let mut h = harness_with(values);
    h.world.set_pod_network(PodNetworkOffer::Available { range: RANGE, every_sandbox: false });
    let server = h.world.create_sandbox(&alice(), spec(Some(ingress_from_the_organization())), "", "").unwrap();
    let denied = NetworkOptions { deny_egress: Some(true), ..ingress_from_the_organization() };
    let silent = h.world.create_sandbox(&alice(), spec(Some(denied)), "", "").unwrap();
    let shared = h.world.create_sandbox(&alice(), spec(None), "", "").unwrap();
    let networks = started_networks(&mut h);
    let own = |id: &str| match networks.iter().find(|(started, _)| started == id) {
        Some((_, PodNetwork::Own(own))) => own.clone(),
        other => panic!("{id}: {other:?}"),
    };
    let server_network = own(&server.id);
    assert_eq!(server_network.address, Ipv4Addr::new(10, 244, 0, 2));
    assert_eq!((server_network.organization.as_str(), server_network.user.as_str()), ("default-org", "alice"));
    assert!(server_network.egress_isolated && server_network.ingress_isolated);
    assert_eq!(server_network.ingress, [NetworkRule { peer: NetworkPeer::SameOrganization, ports: Vec::new() }]);
    // The policy's default egress: public addresses, not the cluster's.
    let public = NetworkPeer::Cidr { cidr: "0.0.0.0/0".to_owned(), except: vec!["10.0.0.0/8".to_owned()] };
    assert_eq!(server_network.egress, [NetworkRule { peer: public, ports: Vec::new() }]);
    assert!(server_network.https_grants.is_empty());
    assert_eq!(
        server_network.pod_labels.get("sandbox.coreweave.com/sandbox-id").map(String::as_str),
        Some(&*server.id)
    );
    let silent_network = own(&silent.id);
    assert_eq!(silent_network.address, Ipv4Addr::new(10, 244, 0, 3));
    assert!(silent_network.egress.is_empty() && silent_network.egress_isolated, "deny_egress: nothing leaves");
    assert!(networks.iter().any(|(id, network)| *id == *shared.id && *network == PodNetwork::Host));
    assert_eq!(h.world.cluster.pod(&server.pod_uid).unwrap().pod_ip, Some(Ipv4Addr::new(10, 244, 0, 2)));
    assert_eq!(h.world.cluster.pod(&shared.pod_uid).unwrap().pod_ip, None);

    // The range has .2 to .6: after .2 and .3, the next ones even when .2 is free again.
    h.world.delete_sandbox("default-org", &server.id, 0).unwrap();
    h.advance(60);
    let _ = h.world.take_effects();
    let mut next = Vec::new();
    for _ in 0..4 {
        let created = h.world.create_sandbox(&alice(), spec(Some(ingress_from_the_organization())), "", "").unwrap();
        for (id, network) in started_networks(&mut h) {
            if let (true, PodNetwork::Own(own)) = (*id == *created.id, network) {
                next.push(own.address.octets()[3]);
            }
        }
    }
    assert_eq!(next, [4, 5, 6, 2], "in turn, the freed .2 last");
}

/// With `everySandbox`, a sandbox asking nothing gets a network of its own too, the runner
/// policy's default egress enforced.
#[test]
fn every_sandbox_gets_a_network_where_the_values_say_so() {
    let mut h = with_networks(true);
    let created = h.world.create_sandbox(&alice(), spec(None), "", "").unwrap();
    let networks = started_networks(&mut h);
    match networks.as_slice() {
        [(id, PodNetwork::Own(own))] if *id == *created.id => {
            assert_eq!(own.egress.len(), created.resolved.egress.len());
            assert!(own.ingress.is_empty() && !own.ingress_isolated && !own.egress_isolated);
        }
        other => panic!("{other:?}"),
    }
}
