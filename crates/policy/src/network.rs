//! Network rules: their shape (checked when a policy is written and when a sandbox declares rules)
//! and envelope containment (whether a sandbox's rule fits inside one of the policy's allowed
//! rules).
//!
//! Semantics chosen where the public material is silent (docs/facts/runner-api.md#gap-10):
//! - A rule with no ports means every port of every protocol, except a hostname rule, which means
//!   TCP 443 (HTTPS).
//! - A wildcard hostname `*.example.com` matches exactly one extra label (`api.example.com`, not
//!   `a.b.example.com`), as an HTTPS certificate wildcard does; `*` matches every host.
//! - `any` in an allowed rule covers address-shaped destinations (`any`, CIDRs and hostnames);
//!   tenant scopes and selectors are relational and fit only under an equal tenant scope or a
//!   selector that asks for no more labels.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cwsandbox_api::sandbox_v1::{
    CidrBlock, EgressRule, IngressRule, PortRange, SelectorBlock, TenantScope, egress_rule::Destination,
    ingress_rule::Source,
};

use crate::error::FieldViolation;
use crate::k8s_names::{label_value_problem, qualified_name_problem};
use crate::quoted;

// ---------------------------------------------------------------------------------------------
// IP prefixes
// ---------------------------------------------------------------------------------------------

/// An IPv4 or IPv6 network prefix with its host bits cleared. IPv4 addresses live in the low 32
/// bits so both families share one integer type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IpPrefix {
    network: u128,
    length: u32,
    width: u32,
}

/// The netmask of a `length`-bit prefix in a `width`-bit address family.
fn netmask(width: u32, length: u32) -> u128 {
    if length == 0 { 0 } else { (u128::MAX << (128 - length)) >> (128 - width) }
}

impl IpPrefix {
    /// Parses `address/length` and insists on the canonical spelling (host bits zero, the
    /// address written as the standard library prints it), so what is stored is what is shown.
    /// IPv4-mapped IPv6 prefixes are refused: they would let one range hide behind two spellings.
    pub(crate) fn parse_canonical(text: &str) -> Result<IpPrefix, String> {
        let not_a_prefix = || format!("{text:?} is not an IPv4 or IPv6 CIDR prefix (address/length)");
        let (address_text, length_text) = text.split_once('/').ok_or_else(not_a_prefix)?;
        let address: IpAddr = address_text.parse().map_err(|_| not_a_prefix())?;
        if let IpAddr::V6(v6) = address
            && v6.to_ipv4_mapped().is_some()
        {
            return Err(format!("{text:?} is an IPv4-mapped IPv6 prefix; use the plain IPv4 prefix"));
        }
        let (bits, width) = match address {
            IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
            IpAddr::V6(v6) => (u128::from(v6), 128),
        };
        let length: u32 = length_text.parse().ok().filter(|length| *length <= width).ok_or_else(not_a_prefix)?;
        let prefix = IpPrefix { network: bits & netmask(width, length), length, width };
        let canonical = prefix.to_string();
        if canonical != text {
            return Err(format!("{text:?} is not canonical; use {canonical:?}"));
        }
        Ok(prefix)
    }

    /// Whether every address of `other` is in `self`.
    pub(crate) fn contains(&self, other: &IpPrefix) -> bool {
        self.width == other.width
            && other.length >= self.length
            && other.network & netmask(self.width, self.length) == self.network
    }

    /// Whether the two share an address (prefixes either nest or are disjoint).
    fn overlaps(&self, other: &IpPrefix) -> bool {
        self.contains(other) || other.contains(self)
    }

    /// The two prefixes one bit longer that make up this one, unless it is a single address.
    fn halves(&self) -> Option<(IpPrefix, IpPrefix)> {
        if self.length >= self.width {
            return None;
        }
        let length = self.length + 1;
        let high_bit = 1u128 << (self.width - length);
        Some((
            IpPrefix { network: self.network, length, width: self.width },
            IpPrefix { network: self.network | high_bit, length, width: self.width },
        ))
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.width == 32 {
            // Host bits beyond 32 are never set for IPv4, so the truncation is exact.
            write!(f, "{}/{}", Ipv4Addr::from(self.network as u32), self.length)
        } else {
            write!(f, "{}/{}", Ipv6Addr::from(self.network), self.length)
        }
    }
}

/// Whether every address of `target` lies in at least one of `pieces`. Prefixes nest or are
/// disjoint, so splitting `target` in halves until each half is inside one piece or outside all
/// of them decides it exactly.
fn covered_by_union(target: &IpPrefix, pieces: &[IpPrefix]) -> bool {
    if pieces.iter().any(|piece| piece.contains(target)) {
        return true;
    }
    if !pieces.iter().any(|piece| piece.overlaps(target)) {
        return false;
    }
    match target.halves() {
        Some((low, high)) => covered_by_union(&low, pieces) && covered_by_union(&high, pieces),
        None => false,
    }
}

/// A CIDR block's range and holes, parsed. Unparsable parts make it `None`: such a block is
/// reported by shape validation and contains nothing.
fn parse_cidr_block(block: &CidrBlock) -> Option<(IpPrefix, Vec<IpPrefix>)> {
    let range = IpPrefix::parse_canonical(&block.cidr).ok()?;
    let holes = block.except.iter().map(|hole| IpPrefix::parse_canonical(hole).ok()).collect::<Option<Vec<_>>>()?;
    Some((range, holes))
}

/// Whether `inner` minus its holes lies inside `outer` minus its holes.
fn cidr_block_within(inner: &CidrBlock, outer: &CidrBlock) -> bool {
    let (Some((inner_range, inner_holes)), Some((outer_range, outer_holes))) =
        (parse_cidr_block(inner), parse_cidr_block(outer))
    else {
        return false;
    };
    outer_range.contains(&inner_range)
        && outer_holes.iter().all(|outer_hole| {
            if outer_hole.contains(&inner_range) {
                // The whole inner range is carved out of the envelope.
                false
            } else if inner_range.contains(outer_hole) {
                // The envelope's hole is inside the inner range: the inner rule must leave it out too.
                covered_by_union(outer_hole, &inner_holes)
            } else {
                true
            }
        })
}

// ---------------------------------------------------------------------------------------------
// Hostnames
// ---------------------------------------------------------------------------------------------

/// An `https_hostname` value, lowercased.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HostPattern {
    /// `*`: every host.
    Everything,
    /// `*.suffix`: every host one label below `suffix`.
    OneLabelBelow(String),
    /// One host.
    Exact(String),
}

/// Whether `name` is a DNS hostname: dot-separated labels of 1–63 letters, digits and `-`, not
/// starting or ending with `-`, at most 253 characters.
fn is_hostname(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

impl HostPattern {
    /// Parses an exact hostname, a single leftmost `*.` wildcard label, or `*`.
    pub(crate) fn parse(text: &str) -> Result<HostPattern, String> {
        let lowered = text.to_ascii_lowercase();
        if lowered == "*" {
            return Ok(HostPattern::Everything);
        }
        if let Some(suffix) = lowered.strip_prefix("*.")
            && is_hostname(suffix)
        {
            return Ok(HostPattern::OneLabelBelow(suffix.to_owned()));
        }
        if is_hostname(&lowered) {
            return Ok(HostPattern::Exact(lowered));
        }
        Err(format!("{text:?} is not a hostname, a hostname with a single leftmost \"*.\" wildcard label, or \"*\""))
    }

    /// Whether every host `other` matches, `self` matches too.
    pub(crate) fn covers(&self, other: &HostPattern) -> bool {
        match (self, other) {
            (HostPattern::Everything, _) => true,
            (_, HostPattern::Everything) => false,
            (HostPattern::OneLabelBelow(suffix), HostPattern::OneLabelBelow(other_suffix)) => suffix == other_suffix,
            (HostPattern::OneLabelBelow(suffix), HostPattern::Exact(host)) => {
                host.split_once('.').is_some_and(|(_, host_suffix)| host_suffix == suffix)
            }
            (HostPattern::Exact(_), HostPattern::OneLabelBelow(_)) => false,
            (HostPattern::Exact(host), HostPattern::Exact(other_host)) => host == other_host,
        }
    }

    /// Whether it is a wildcard (`*` or `*.suffix`).
    fn is_wildcard(&self) -> bool {
        !matches!(self, HostPattern::Exact(_))
    }
}

/// Whether the hosts of `inner` (minus its exceptions) all lie in `outer` (minus its exceptions).
/// Patterns nest or are disjoint, so one covering exception is enough to leave a hole out.
fn hostname_within(inner: &str, inner_except: &[String], outer: &str, outer_except: &[String]) -> bool {
    let parse_all = |patterns: &[String]| {
        patterns.iter().map(|pattern| HostPattern::parse(pattern).ok()).collect::<Option<Vec<_>>>()
    };
    let (Ok(inner), Ok(outer), Some(inner_except), Some(outer_except)) =
        (HostPattern::parse(inner), HostPattern::parse(outer), parse_all(inner_except), parse_all(outer_except))
    else {
        return false;
    };
    outer.covers(&inner)
        && outer_except.iter().all(|outer_hole| {
            if outer_hole.covers(&inner) {
                false
            } else if inner.covers(outer_hole) {
                inner_except.iter().any(|inner_hole| inner_hole.covers(outer_hole))
            } else {
                true
            }
        })
}

// ---------------------------------------------------------------------------------------------
// Ports
// ---------------------------------------------------------------------------------------------

/// Transport protocols a port rule can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// `""` means TCP, as in Kubernetes NetworkPolicy.
    fn parse(text: &str) -> Option<Protocol> {
        match text {
            "" | "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }
}

/// An inclusive range of ports of one protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PortSpan {
    protocol: Protocol,
    first: i32,
    last: i32,
}

const HTTPS_PORT: i32 = 443;
const PORT_MAX: i32 = 65535;

/// The ports a rule opens: its own list, or every port (TCP 443 for hostname rules) when empty.
fn port_spans(ports: &[PortRange], hostname_destination: bool) -> Vec<PortSpan> {
    if ports.is_empty() {
        return if hostname_destination {
            vec![PortSpan { protocol: Protocol::Tcp, first: HTTPS_PORT, last: HTTPS_PORT }]
        } else {
            [Protocol::Tcp, Protocol::Udp, Protocol::Sctp]
                .into_iter()
                .map(|protocol| PortSpan { protocol, first: 1, last: PORT_MAX })
                .collect()
        };
    }
    ports
        .iter()
        .filter_map(|range| {
            let protocol = Protocol::parse(&range.protocol)?;
            let last = if range.end_port == 0 { range.port } else { range.end_port };
            Some(PortSpan { protocol, first: range.port, last })
        })
        .collect()
}

/// Whether every port of `inner` is opened by some span of `outer` (spans may be adjacent).
fn spans_within(inner: &[PortSpan], outer: &[PortSpan]) -> bool {
    inner.iter().all(|wanted| {
        let mut candidates: Vec<&PortSpan> = outer.iter().filter(|span| span.protocol == wanted.protocol).collect();
        candidates.sort_by_key(|span| span.first);
        let mut next_uncovered = wanted.first;
        for span in candidates {
            if span.first > next_uncovered {
                break;
            }
            next_uncovered = next_uncovered.max(span.last.saturating_add(1));
            if next_uncovered > wanted.last {
                return true;
            }
        }
        false
    })
}

// ---------------------------------------------------------------------------------------------
// Rule shape
// ---------------------------------------------------------------------------------------------

/// Where an egress rule appears; hostname rules are legal in some places only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EgressRuleSite {
    /// `policy.constraints.network.allowedEgress`: the envelope; `*` is allowed here only.
    PolicyAllowed,
    /// `policy.constraints.network.defaultEgress`: no hostname destinations at all.
    PolicyDefault,
    /// A sandbox's own `network.egress`.
    Sandbox,
}

/// Port rules: ports 1–65535, `endPort` 0 or between `port` and 65535, protocol TCP/UDP/SCTP.
fn check_ports(ports: &[PortRange], path: &str, violations: &mut Vec<FieldViolation>) {
    for (index, range) in ports.iter().enumerate() {
        let range_path = format!("{path}.ports[{index}]");
        if !(1..=PORT_MAX).contains(&range.port) {
            violations.push(FieldViolation::new(
                format!("{range_path}.port"),
                format!("port {} is outside 1-65535", range.port),
            ));
        }
        if range.end_port != 0 && !(range.port..=PORT_MAX).contains(&range.end_port) {
            violations.push(FieldViolation::new(
                format!("{range_path}.endPort"),
                format!("endPort {} must be 0 or between port {} and 65535", range.end_port, range.port),
            ));
        }
        if Protocol::parse(&range.protocol).is_none() {
            violations.push(FieldViolation::new(
                format!("{range_path}.protocol"),
                format!("protocol {:?} must be TCP, UDP or SCTP", range.protocol),
            ));
        }
    }
}

/// A CIDR block: canonical range, canonical holes, each hole inside the range.
fn check_cidr_block(block: &CidrBlock, path: &str, violations: &mut Vec<FieldViolation>) {
    let range = match IpPrefix::parse_canonical(&block.cidr) {
        Ok(range) => Some(range),
        Err(problem) => {
            violations.push(FieldViolation::new(format!("{path}.cidr.cidr"), problem));
            None
        }
    };
    for (index, hole_text) in block.except.iter().enumerate() {
        let hole_path = format!("{path}.cidr.except[{index}]");
        match IpPrefix::parse_canonical(hole_text) {
            Err(problem) => violations.push(FieldViolation::new(hole_path, problem)),
            Ok(hole) => {
                if let Some(range) = range
                    && !(range.contains(&hole) && hole != range)
                {
                    violations.push(FieldViolation::new(
                        hole_path,
                        format!("{hole_text} is not a sub-range of {}", block.cidr),
                    ));
                }
            }
        }
    }
}

/// A tenant scope must be a known, chosen value.
fn check_tenant(tenant: i32, path: &str, violations: &mut Vec<FieldViolation>) {
    match TenantScope::try_from(tenant) {
        Ok(TenantScope::Unspecified) => violations.push(FieldViolation::new(
            format!("{path}.tenant"),
            "tenant must be TENANT_SCOPE_SAME_USER, TENANT_SCOPE_SAME_ORG or TENANT_SCOPE_SANDBOX_NETWORK",
        )),
        Ok(_) => {}
        Err(_) => {
            violations.push(FieldViolation::new(format!("{path}.tenant"), format!("unknown tenant scope {tenant}")))
        }
    }
}

/// `any` selects by being true; `any: false` selects nothing and is almost certainly a mistake.
fn check_any(any: bool, path: &str, violations: &mut Vec<FieldViolation>) {
    if !any {
        violations.push(FieldViolation::new(format!("{path}.any"), "any must be true when set"));
    }
}

/// A selector needs at least one pod label; every key and value must be valid label syntax.
fn check_selector(selector: &SelectorBlock, path: &str, violations: &mut Vec<FieldViolation>) {
    if selector.pod_labels.is_empty() {
        violations
            .push(FieldViolation::new(format!("{path}.selector.podLabels"), "at least one pod label is required"));
    }
    for (map_name, labels) in [("podLabels", &selector.pod_labels), ("namespaceLabels", &selector.namespace_labels)] {
        let mut entries: Vec<_> = labels.iter().collect();
        entries.sort();
        for (key, value) in entries {
            let entry_path = format!("{path}.selector.{map_name}[{}]", quoted(key));
            if let Some(problem) = qualified_name_problem(key).or_else(|| label_value_problem(value)) {
                violations.push(FieldViolation::new(entry_path, problem));
            }
        }
    }
}

/// Shape of one egress rule at `path` (e.g. `policy.constraints.network.allowedEgress[2]`).
pub(crate) fn check_egress_rule(
    rule: &EgressRule,
    path: &str,
    site: EgressRuleSite,
    violations: &mut Vec<FieldViolation>,
) {
    let mut destination_is_wildcard_hostname = false;
    match &rule.destination {
        None => violations.push(FieldViolation::new(
            path,
            "exactly one destination is required: cidr, httpsHostname, tenant, any or selector",
        )),
        Some(Destination::Cidr(block)) => check_cidr_block(block, path, violations),
        Some(Destination::HttpsHostname(hostname)) => {
            let hostname_path = format!("{path}.httpsHostname");
            match (site, HostPattern::parse(hostname)) {
                (EgressRuleSite::PolicyDefault, _) => violations
                    .push(FieldViolation::new(hostname_path, "hostname destinations are not allowed in defaultEgress")),
                (_, Err(problem)) => violations.push(FieldViolation::new(hostname_path, problem)),
                (EgressRuleSite::Sandbox, Ok(HostPattern::Everything)) => violations
                    .push(FieldViolation::new(hostname_path, "\"*\" is allowed only in a policy's allowedEgress")),
                (_, Ok(pattern)) => destination_is_wildcard_hostname = pattern.is_wildcard(),
            }
        }
        Some(Destination::Tenant(tenant)) => check_tenant(*tenant, path, violations),
        Some(Destination::Any(any)) => check_any(*any, path, violations),
        Some(Destination::Selector(selector)) => check_selector(selector, path, violations),
    }
    if !rule.https_hostname_except.is_empty() && !destination_is_wildcard_hostname {
        violations.push(FieldViolation::new(
            format!("{path}.httpsHostnameExcept"),
            "httpsHostnameExcept needs a wildcard httpsHostname destination",
        ));
    }
    for (index, excepted) in rule.https_hostname_except.iter().enumerate() {
        let except_path = format!("{path}.httpsHostnameExcept[{index}]");
        match HostPattern::parse(excepted) {
            Err(problem) => violations.push(FieldViolation::new(except_path, problem)),
            Ok(HostPattern::Everything) => {
                violations.push(FieldViolation::new(except_path, "\"*\" cannot be an exception"))
            }
            Ok(_) => {}
        }
    }
    check_ports(&rule.ports, path, violations);
}

/// Shape of one ingress rule at `path`.
pub(crate) fn check_ingress_rule(rule: &IngressRule, path: &str, violations: &mut Vec<FieldViolation>) {
    match &rule.source {
        None => violations.push(FieldViolation::new(path, "exactly one source is required: cidr, tenant or any")),
        Some(Source::Cidr(block)) => check_cidr_block(block, path, violations),
        Some(Source::Tenant(tenant)) => check_tenant(*tenant, path, violations),
        Some(Source::Any(any)) => check_any(*any, path, violations),
    }
    check_ports(&rule.ports, path, violations);
}

/// Whether the egress rule is a hostname grant.
pub(crate) fn is_hostname_rule(rule: &EgressRule) -> bool {
    matches!(rule.destination, Some(Destination::HttpsHostname(_)))
}

// ---------------------------------------------------------------------------------------------
// Containment
// ---------------------------------------------------------------------------------------------

/// Whether `inner` asks for no more pods than `outer`: every label `outer` requires is required by
/// `inner` too, and the namespace choice is at least as narrow (no namespace labels means the
/// sandbox's own namespace, which only another own-namespace selector fits under).
fn selector_within(inner: &SelectorBlock, outer: &SelectorBlock) -> bool {
    let requires_all = |narrow: &std::collections::HashMap<String, String>,
                        wide: &std::collections::HashMap<String, String>| {
        wide.iter().all(|(key, value)| narrow.get(key) == Some(value))
    };
    let namespaces_fit = if outer.namespace_labels.is_empty() {
        inner.namespace_labels.is_empty()
    } else {
        !inner.namespace_labels.is_empty() && requires_all(&inner.namespace_labels, &outer.namespace_labels)
    };
    namespaces_fit && requires_all(&inner.pod_labels, &outer.pod_labels)
}

/// Whether every destination and port `inner` opens is opened by `outer`.
pub(crate) fn egress_rule_within(inner: &EgressRule, outer: &EgressRule) -> bool {
    let (Some(inner_destination), Some(outer_destination)) = (&inner.destination, &outer.destination) else {
        return false;
    };
    let destination_fits = match (inner_destination, outer_destination) {
        (_, Destination::Any(false)) | (Destination::Any(false), _) => false,
        (Destination::Any(true) | Destination::Cidr(_) | Destination::HttpsHostname(_), Destination::Any(true)) => true,
        (Destination::Cidr(inner_block), Destination::Cidr(outer_block)) => cidr_block_within(inner_block, outer_block),
        (Destination::HttpsHostname(inner_host), Destination::HttpsHostname(outer_host)) => {
            hostname_within(inner_host, &inner.https_hostname_except, outer_host, &outer.https_hostname_except)
        }
        (Destination::Tenant(inner_tenant), Destination::Tenant(outer_tenant)) => inner_tenant == outer_tenant,
        (Destination::Selector(inner_selector), Destination::Selector(outer_selector)) => {
            selector_within(inner_selector, outer_selector)
        }
        _ => false,
    };
    destination_fits
        && spans_within(
            &port_spans(&inner.ports, is_hostname_rule(inner)),
            &port_spans(&outer.ports, is_hostname_rule(outer)),
        )
}

/// Whether every source and port `inner` admits is admitted by `outer`.
pub(crate) fn ingress_rule_within(inner: &IngressRule, outer: &IngressRule) -> bool {
    let (Some(inner_source), Some(outer_source)) = (&inner.source, &outer.source) else {
        return false;
    };
    let source_fits = match (inner_source, outer_source) {
        (_, Source::Any(false)) | (Source::Any(false), _) => false,
        (Source::Any(true) | Source::Cidr(_), Source::Any(true)) => true,
        (Source::Cidr(inner_block), Source::Cidr(outer_block)) => cidr_block_within(inner_block, outer_block),
        (Source::Tenant(inner_tenant), Source::Tenant(outer_tenant)) => inner_tenant == outer_tenant,
        _ => false,
    };
    source_fits && spans_within(&port_spans(&inner.ports, false), &port_spans(&outer.ports, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(text: &str) -> IpPrefix {
        IpPrefix::parse_canonical(text).expect("test prefix is canonical")
    }

    #[test]
    fn prefixes_must_be_canonical() {
        for good in ["10.0.0.0/8", "0.0.0.0/0", "169.254.169.254/32", "2001:db8::/32", "::/0"] {
            assert_eq!(prefix(good).to_string(), good);
        }
        let problem = |text| IpPrefix::parse_canonical(text).expect_err(text);
        assert_eq!(problem("10.1.0.0/8"), "\"10.1.0.0/8\" is not canonical; use \"10.0.0.0/8\"");
        assert_eq!(problem("2001:DB8::/32"), "\"2001:DB8::/32\" is not canonical; use \"2001:db8::/32\"");
        assert!(problem("::ffff:10.0.0.0/104").contains("IPv4-mapped"));
        for bad in ["10.0.0.0", "10.0.0.0/33", "banana/8", "10.0.0.0/08", "::/129", ""] {
            assert!(IpPrefix::parse_canonical(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn prefix_containment() {
        assert!(prefix("10.0.0.0/8").contains(&prefix("10.1.0.0/16")));
        assert!(!prefix("10.1.0.0/16").contains(&prefix("10.0.0.0/8")));
        assert!(prefix("0.0.0.0/0").contains(&prefix("192.168.1.1/32")));
        assert!(!prefix("0.0.0.0/0").contains(&prefix("2001:db8::/32")), "families never mix");
        assert!(prefix("::/0").contains(&prefix("2001:db8::/32")));
    }

    #[test]
    fn union_coverage_splits_exactly() {
        let halves = [prefix("10.0.0.0/17"), prefix("10.0.128.0/17")];
        assert!(covered_by_union(&prefix("10.0.0.0/16"), &halves));
        assert!(!covered_by_union(&prefix("10.0.0.0/16"), &halves[..1]));
        assert!(covered_by_union(&prefix("10.0.0.0/24"), &[prefix("10.0.0.0/8")]));
    }

    #[test]
    fn host_patterns() {
        let pattern = |text| HostPattern::parse(text).expect(text);
        assert!(pattern("*").covers(&pattern("*.example.com")));
        assert!(pattern("*.example.com").covers(&pattern("api.example.com")));
        assert!(pattern("*.example.com").covers(&pattern("API.Example.com")), "case-insensitive");
        assert!(!pattern("*.example.com").covers(&pattern("a.b.example.com")), "one label only");
        assert!(!pattern("*.example.com").covers(&pattern("example.com")));
        assert!(!pattern("api.example.com").covers(&pattern("*.example.com")));
        for bad in ["", "a.*.com", "**.com", "-a.com", "a..com", "exa mple.com", "*."] {
            assert!(HostPattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn port_coverage() {
        let span = |first, last| PortSpan { protocol: Protocol::Tcp, first, last };
        assert!(spans_within(&[span(80, 90)], &[span(80, 85), span(86, 100)]), "adjacent spans join");
        assert!(!spans_within(&[span(80, 90)], &[span(80, 85), span(87, 100)]), "a gap at 86");
        let udp = PortSpan { protocol: Protocol::Udp, first: 53, last: 53 };
        assert!(!spans_within(&[udp], &[span(1, PORT_MAX)]), "protocols differ");
        assert_eq!(port_spans(&[], true), vec![span(HTTPS_PORT, HTTPS_PORT)]);
    }
}
