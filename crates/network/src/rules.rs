//! The nftables side: a batch of `nft -j` commands for the base tables, a sandbox's attach and
//! its detach. A sandbox's rules live in chains of its own (`eg_<n>`, `in_<n>`, `port_<n>`),
//! entered through verdict maps keyed by its address or its link.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::{Value, json};

use crate::peers::{is_group, names};
use crate::plumbing::{link_name, run};
use crate::types::{Attached, Cidr, Direction, NetworkConfig, NetworkError, Peer, Protocol, Rule};

/// Sends a batch to `nft -j -f -`: all of it applies, or none.
pub(crate) fn apply(config: &NetworkConfig, commands: &[Value]) -> Result<(), NetworkError> {
    if commands.is_empty() {
        return Ok(());
    }
    let document = json!({ "nftables": commands }).to_string();
    run(&config.nft, &["-j", "-f", "-"], Some(&document)).map(|_| ())
}

/// Which way a chain filters: egress matches destinations, ingress sources.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    Egress,
    Ingress,
}

impl Way {
    fn chain(self, index: u64) -> String {
        match self {
            Way::Egress => format!("eg_{index}"),
            Way::Ingress => format!("in_{index}"),
        }
    }

    fn set(self, index: u64, rule: usize) -> String {
        match self {
            Way::Egress => format!("g_{index}_e{rule}"),
            Way::Ingress => format!("g_{index}_i{rule}"),
        }
    }

    fn peer_field(self) -> &'static str {
        match self {
            Way::Egress => "daddr",
            Way::Ingress => "saddr",
        }
    }
}

fn object(kind: &str, family: &str, table: &str, fields: Value) -> Value {
    let mut body = json!({ "family": family, "table": table });
    if let (Some(body), Value::Object(fields)) = (body.as_object_mut(), fields) {
        body.extend(fields);
    }
    json!({ kind: body })
}

fn add(kind: &str, family: &str, table: &str, fields: Value) -> Value {
    json!({ "add": object(kind, family, table, fields) })
}

fn command(verb: &str, kind: &str, family: &str, table: &str, fields: Value) -> Value {
    json!({ verb: object(kind, family, table, fields) })
}

fn rule(family: &str, table: &str, chain: &str, expr: Vec<Value>) -> Value {
    add("rule", family, table, json!({ "chain": chain, "expr": expr }))
}

fn matches(left: Value, op: &str, right: Value) -> Value {
    json!({ "match": { "op": op, "left": left, "right": right } })
}

fn payload(protocol: &str, field: &str) -> Value {
    json!({ "payload": { "protocol": protocol, "field": field } })
}

fn meta(key: &str) -> Value {
    json!({ "meta": { "key": key } })
}

fn verdict(name: &str) -> Value {
    json!({ name: null })
}

fn jump(chain: &str) -> Value {
    json!({ "jump": { "target": chain } })
}

fn established() -> Value {
    matches(json!({ "ct": { "key": "state" } }), "in", json!({ "set": ["established", "related"] }))
}

/// A refusal the client sees at once: a TCP reset, an ICMP "administratively prohibited".
fn rejections(family: &str, table: &str, chain: &str) -> [Value; 2] {
    [
        rule(
            family,
            table,
            chain,
            vec![matches(meta("l4proto"), "==", json!("tcp")), json!({ "reject": { "type": "tcp reset" } })],
        ),
        rule(family, table, chain, vec![json!({ "reject": { "type": "icmpx", "expr": "admin-prohibited" } })]),
    ]
}

/// An IPv4 block as nft reads it: an address, or a prefix.
fn block(cidr: &Cidr) -> Option<Value> {
    let IpAddr::V4(address) = cidr.address else { return None };
    Some(if cidr.length == 32 {
        json!(address.to_string())
    } else {
        json!({ "prefix": { "addr": address.to_string(), "len": cidr.length } })
    })
}

/// The base tables: the hooks that send a sandbox's packets to its chains, anti-spoofing at
/// the bridge, masquerade out of the range.
pub(crate) fn base(config: &NetworkConfig, proxy_port: u16) -> Vec<Value> {
    let table = config.table();
    let table = table.as_str();
    let bridge = json!(config.bridge);
    let range = json!({ "prefix": { "addr": config.pod_cidr.network.to_string(), "len": config.pod_cidr.length } });
    let from_bridge = || matches(meta("iifname"), "==", bridge.clone());
    let to_bridge = || matches(meta("oifname"), "==", bridge.clone());
    let chain = |name: &str, kind: &str, hook: &str, prio: i32| {
        add(
            "chain",
            "inet",
            table,
            json!({ "name": name, "type": kind, "hook": hook, "prio": prio, "policy": "accept" }),
        )
    };
    let by_address =
        |field: &str, map: &str| json!({ "vmap": { "key": payload("ip", field), "data": format!("@{map}") } });
    let unknown_sender = || matches(payload("ip", "saddr"), "!=", json!("@pods"));
    let ipv6 = || matches(meta("nfproto"), "==", json!("ipv6"));
    let gateway = json!(config.pod_cidr.gateway().to_string());
    // The sandboxes' own services on the gateway: the SNI proxy and the resolver, which decide
    // per sandbox themselves.
    let gateway_service = |protocol: &str, port: u16| {
        rule(
            "inet",
            table,
            "input",
            vec![
                from_bridge(),
                matches(payload("ip", "daddr"), "==", gateway.clone()),
                matches(meta("l4proto"), "==", json!(protocol)),
                matches(payload("th", "dport"), "==", json!(port)),
                verdict("accept"),
            ],
        )
    };
    vec![
        json!({ "add": { "table": { "family": "inet", "name": table } } }),
        add("set", "inet", table, json!({ "name": "pods", "type": "ipv4_addr" })),
        add("map", "inet", table, json!({ "name": "egress", "type": "ipv4_addr", "map": "verdict" })),
        add("map", "inet", table, json!({ "name": "ingress", "type": "ipv4_addr", "map": "verdict" })),
        add("map", "inet", table, json!({ "name": "redirects", "type": "ipv4_addr", "map": "verdict" })),
        chain("prerouting", "nat", "prerouting", -100),
        // Port 443 of sandboxes with HTTPS grants, to the SNI proxy (`nat_<n>`).
        rule("inet", table, "prerouting", vec![from_bridge(), by_address("saddr", "redirects")]),
        chain("forward", "filter", "forward", 0),
        chain("input", "filter", "input", 0),
        chain("output", "filter", "output", 0),
        chain("postrouting", "nat", "postrouting", 100),
        // Forwarded: the sender's egress, then the receiver's ingress; replies pass.
        rule("inet", table, "forward", vec![from_bridge(), unknown_sender(), verdict("drop")]),
        rule("inet", table, "forward", vec![established(), verdict("accept")]),
        rule("inet", table, "forward", vec![from_bridge(), ipv6(), verdict("drop")]),
        rule("inet", table, "forward", vec![from_bridge(), by_address("saddr", "egress")]),
        rule("inet", table, "forward", vec![to_bridge(), by_address("daddr", "ingress")]),
        // An address of the range no sandbox holds.
        rule(
            "inet",
            table,
            "forward",
            vec![
                to_bridge(),
                matches(payload("ip", "daddr"), "==", range.clone()),
                matches(payload("ip", "daddr"), "!=", json!("@pods")),
                verdict("drop"),
            ],
        ),
        // To the host itself: the sender's egress rules decide.
        rule("inet", table, "input", vec![from_bridge(), unknown_sender(), verdict("drop")]),
        rule("inet", table, "input", vec![from_bridge(), established(), verdict("accept")]),
        rule("inet", table, "input", vec![from_bridge(), ipv6(), verdict("drop")]),
        gateway_service("tcp", proxy_port),
        gateway_service("udp", 53),
        rule("inet", table, "input", vec![from_bridge(), by_address("saddr", "egress")]),
        // From the host itself: the receiver's ingress rules decide.
        rule("inet", table, "output", vec![to_bridge(), established(), verdict("accept")]),
        rule("inet", table, "output", vec![to_bridge(), by_address("daddr", "ingress")]),
        rule(
            "inet",
            table,
            "postrouting",
            vec![
                matches(payload("ip", "saddr"), "==", range.clone()),
                matches(payload("ip", "daddr"), "!=", range),
                json!({ "masquerade": null }),
            ],
        ),
        json!({ "add": { "table": { "family": "bridge", "name": table } } }),
        add("map", "bridge", table, json!({ "name": "ports", "type": "ifname", "map": "verdict" })),
        add(
            "chain",
            "bridge",
            table,
            json!({ "name": "prerouting", "type": "filter", "hook": "prerouting", "prio": -200, "policy": "accept" }),
        ),
        rule("bridge", table, "prerouting", vec![json!({ "vmap": { "key": meta("iifname"), "data": "@ports" } })]),
    ]
}

/// The expressions that pick a rule's peer (one alternative per line), `None` where the rule
/// can match nothing here (an IPv6 block).
fn peer_matches(way: Way, index: u64, position: usize, peer: &Peer) -> Option<Vec<Value>> {
    let field = way.peer_field();
    match peer {
        Peer::Any => Some(Vec::new()),
        Peer::Cidr { cidr, except } => {
            let mut expr = Vec::new();
            if cidr.length > 0 || cidr.address.is_ipv6() {
                expr.push(matches(payload("ip", field), "==", block(cidr)?));
            } else {
                expr.push(matches(meta("nfproto"), "==", json!("ipv4")));
            }
            let excepted: Vec<Value> = except.iter().filter_map(block).collect();
            if !excepted.is_empty() {
                expr.push(matches(payload("ip", field), "!=", json!({ "set": excepted })));
            }
            Some(expr)
        }
        Peer::SameOrganization | Peer::SameUser | Peer::Selector { .. } => {
            Some(vec![matches(payload("ip", field), "==", json!(format!("@{}", way.set(index, position))))])
        }
    }
}

/// One direction's chain: each rule returns (allowed), then the refusal where it is isolated.
fn direction_chain(table: &str, way: Way, index: u64, direction: &Direction) -> Vec<Value> {
    let chain = way.chain(index);
    let mut commands = vec![add("chain", "inet", table, json!({ "name": chain }))];
    for (position, Rule { peer, ports }) in direction.rules.iter().enumerate() {
        if is_group(peer) {
            commands.push(add("set", "inet", table, json!({ "name": way.set(index, position), "type": "ipv4_addr" })));
        }
        let Some(peer_expr) = peer_matches(way, index, position, peer) else { continue };
        if ports.is_empty() {
            let mut expr = peer_expr.clone();
            expr.push(verdict("return"));
            commands.push(rule("inet", table, &chain, expr));
        }
        for range in ports {
            let mut expr = peer_expr.clone();
            expr.push(matches(meta("l4proto"), "==", json!(range.protocol.nft_name())));
            let port = if range.first == range.last {
                json!(range.first)
            } else {
                json!({ "range": [range.first, range.last] })
            };
            expr.push(matches(payload("th", "dport"), "==", port));
            expr.push(verdict("return"));
            commands.push(rule("inet", table, &chain, expr));
        }
    }
    if direction.isolated {
        commands.extend(rejections("inet", table, &chain));
    }
    commands
}

/// The members of every group set, refreshed for all attached sandboxes.
fn refresh_groups(table: &str, attached: &BTreeMap<String, Attached>) -> Vec<Value> {
    let mut commands = Vec::new();
    for owner in attached.values() {
        let sandbox = &owner.attachment;
        for (way, direction) in [(Way::Egress, &sandbox.egress), (Way::Ingress, &sandbox.ingress)] {
            for (position, rule) in direction.rules.iter().enumerate() {
                if !is_group(&rule.peer) {
                    continue;
                }
                let set = way.set(owner.index, position);
                commands.push(command("flush", "set", "inet", table, json!({ "name": set })));
                let members: Vec<Value> = attached
                    .values()
                    .filter(|other| {
                        other.index != owner.index && names(&rule.peer, &sandbox.identity, &other.attachment.identity)
                    })
                    .map(|other| json!(other.attachment.address.to_string()))
                    .collect();
                if !members.is_empty() {
                    commands.push(add("element", "inet", table, json!({ "name": set, "elem": members })));
                }
            }
        }
    }
    commands
}

/// Whether a rule's ports take in TCP 443.
fn allows_https(rule: &Rule) -> bool {
    rule.ports.is_empty()
        || rule.ports.iter().any(|range| range.protocol == Protocol::Tcp && range.first <= 443 && 443 <= range.last)
}

/// A sandbox with HTTPS grants: its port-443 traffic that an address rule allows goes on as it
/// is; the rest goes to the SNI proxy.
fn redirect_chain(table: &str, index: u64, egress: &Direction, proxy_port: u16) -> Vec<Value> {
    let chain = format!("nat_{index}");
    let mut commands = vec![add("chain", "inet", table, json!({ "name": chain }))];
    for (position, allowed) in egress.rules.iter().enumerate().filter(|(_, rule)| allows_https(rule)) {
        let Some(mut expr) = peer_matches(Way::Egress, index, position, &allowed.peer) else { continue };
        expr.push(verdict("return"));
        commands.push(rule("inet", table, &chain, expr));
    }
    commands.push(rule(
        "inet",
        table,
        &chain,
        vec![
            matches(meta("l4proto"), "==", json!("tcp")),
            matches(payload("th", "dport"), "==", json!(443)),
            json!({ "redirect": { "port": proxy_port } }),
        ],
    ));
    commands
}

/// The batch that puts the sandbox `id` (already in `attached`) in force.
pub(crate) fn attach(
    config: &NetworkConfig,
    attached: &BTreeMap<String, Attached>,
    id: &str,
    proxy_port: u16,
) -> Vec<Value> {
    let table = config.table();
    let table = table.as_str();
    let Some(new) = attached.get(id) else { return Vec::new() };
    let (index, sandbox) = (new.index, &new.attachment);
    let address = sandbox.address.to_string();
    let port = format!("port_{index}");
    let mut commands = direction_chain(table, Way::Egress, index, &sandbox.egress);
    commands.extend(direction_chain(table, Way::Ingress, index, &sandbox.ingress));
    // At the bridge: only its own address, and nothing but IPv4 and ARP.
    commands.push(add("chain", "bridge", table, json!({ "name": port })));
    commands.push(rule(
        "bridge",
        table,
        &port,
        vec![matches(payload("ether", "type"), "!=", json!({ "set": ["ip", "arp"] })), verdict("drop")],
    ));
    commands.push(rule(
        "bridge",
        table,
        &port,
        vec![matches(payload("ip", "saddr"), "!=", json!(address)), verdict("drop")],
    ));
    commands.push(rule(
        "bridge",
        table,
        &port,
        vec![matches(payload("arp", "saddr ip"), "!=", json!(address)), verdict("drop")],
    ));
    if !sandbox.https_grants.is_empty() {
        commands.extend(redirect_chain(table, index, &sandbox.egress, proxy_port));
    }
    commands.extend(refresh_groups(table, attached));
    commands.push(add("element", "inet", table, json!({ "name": "pods", "elem": [address] })));
    if !sandbox.https_grants.is_empty() {
        let chain = format!("nat_{index}");
        commands.push(add("element", "inet", table, json!({ "name": "redirects", "elem": [[address, jump(&chain)]] })));
    }
    for (map, way) in [("egress", Way::Egress), ("ingress", Way::Ingress)] {
        commands.push(add(
            "element",
            "inet",
            table,
            json!({ "name": map, "elem": [[address, jump(&way.chain(index))]] }),
        ));
    }
    commands.push(add(
        "element",
        "bridge",
        table,
        json!({ "name": "ports", "elem": [[link_name(config, index), jump(&port)]] }),
    ));
    commands
}

/// The batch that removes `removed` (no longer in `remaining`) and refreshes the others' groups.
pub(crate) fn detach(config: &NetworkConfig, remaining: &BTreeMap<String, Attached>, removed: &Attached) -> Vec<Value> {
    let table = config.table();
    let table = table.as_str();
    let (index, sandbox) = (removed.index, &removed.attachment);
    let address = sandbox.address.to_string();
    let mut commands = vec![
        command("delete", "element", "inet", table, json!({ "name": "pods", "elem": [address] })),
        command("delete", "element", "inet", table, json!({ "name": "egress", "elem": [address] })),
        command("delete", "element", "inet", table, json!({ "name": "ingress", "elem": [address] })),
        command("delete", "element", "bridge", table, json!({ "name": "ports", "elem": [link_name(config, index)] })),
    ];
    let mut chains = vec![Way::Egress.chain(index), Way::Ingress.chain(index)];
    if !sandbox.https_grants.is_empty() {
        commands.push(command("delete", "element", "inet", table, json!({ "name": "redirects", "elem": [address] })));
        chains.push(format!("nat_{index}"));
    }
    // Emptied first: a chain's rules hold the sets it names.
    for chain in &chains {
        commands.push(command("flush", "chain", "inet", table, json!({ "name": chain })));
    }
    for chain in &chains {
        commands.push(command("delete", "chain", "inet", table, json!({ "name": chain })));
    }
    for (way, direction) in [(Way::Egress, &sandbox.egress), (Way::Ingress, &sandbox.ingress)] {
        for (position, rule) in direction.rules.iter().enumerate() {
            if is_group(&rule.peer) {
                commands.push(command("delete", "set", "inet", table, json!({ "name": way.set(index, position) })));
            }
        }
    }
    let port = format!("port_{index}");
    commands.push(command("flush", "chain", "bridge", table, json!({ "name": port })));
    commands.push(command("delete", "chain", "bridge", table, json!({ "name": port })));
    commands.extend(refresh_groups(table, remaining));
    commands
}
