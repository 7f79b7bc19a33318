//! Write-time validation of a policy document (docs/facts/policy.md#constraints,
//! docs/facts/runner-api.md#gap-7, docs/facts/runner-api.md#gap-9): every rule the public material
//! states, one violation per problem, each naming its JSON path.

use std::collections::HashSet;

use cwsandbox_api::sandbox_v1::{
    ControlPlaneAccess, DnsEgressMode, LifecycleConstraints, MetadataConstraints, NetworkConstraints, Policy,
    ResourceConstraints, RuntimeClass, SecurityConstraints, StorageMedium, VolumeConstraints,
    runtime_class_mapping::Target,
};

use crate::MAX_LIFETIME_SECONDS;
use crate::base::parse_base;
use crate::error::FieldViolation;
use crate::k8s_names::dns1123_subdomain_problem;
use crate::network::{EgressRuleSite, IpPrefix, check_egress_rule, check_ingress_rule, is_hostname_rule};
use crate::quantity::Quantity;

/// Most prefixes a control-plane source allowlist may hold.
const SOURCE_ALLOWLIST_MAX: usize = 256;

/// Checks a whole policy document and returns one violation per problem (empty when valid).
///
/// Paths are JSON lowerCamelCase from `policy.` (for example
/// `policy.constraints.network.allowedEgress[2].ports[0].endPort`), so a client can point at the
/// offending field of the document it sent. The empty policy is valid.
pub fn validate_policy(policy: &Policy) -> Vec<FieldViolation> {
    let (_, mut violations) = parse_base(policy.base.as_ref());
    if let Some(constraints) = &policy.constraints {
        let path = "policy.constraints";
        if let Some(resources) = &constraints.resources {
            check_resources(resources, &format!("{path}.resources"), &mut violations);
        }
        if let Some(network) = &constraints.network {
            check_network(network, &format!("{path}.network"), &mut violations);
        }
        if let Some(security) = &constraints.security {
            check_security(security, &format!("{path}.security"), &mut violations);
        }
        if let Some(lifecycle) = &constraints.lifecycle {
            check_lifecycle(lifecycle, &format!("{path}.lifecycle"), &mut violations);
        }
        if let Some(metadata) = &constraints.metadata {
            check_metadata(metadata, &format!("{path}.metadata"), &mut violations);
        }
        if let Some(volumes) = &constraints.volumes {
            check_volumes(volumes, &format!("{path}.volumes"), &mut violations);
        }
    }
    if let Some(access) = &policy.control_plane_access {
        check_control_plane_access(access, "policy.controlPlaneAccess", &mut violations);
    }
    violations
}

/// Parses an optional quantity field (empty = unset), reporting a parse failure at `path`.
fn optional_quantity(text: &str, path: &str, violations: &mut Vec<FieldViolation>) -> Option<Quantity> {
    if text.is_empty() {
        return None;
    }
    match Quantity::parse(text) {
        Ok(quantity) => Some(quantity),
        Err(error) => {
            violations.push(FieldViolation::new(path, error.to_string()));
            None
        }
    }
}

/// Quantities parse; for CPU and memory, min ≤ max and the default lies within [min, max].
fn check_resources(resources: &ResourceConstraints, path: &str, violations: &mut Vec<FieldViolation>) {
    for (kind, min, max, default) in [
        ("Cpu", &resources.min_cpu, &resources.max_cpu, &resources.default_cpu),
        ("Memory", &resources.min_memory, &resources.max_memory, &resources.default_memory),
    ] {
        let min_name = format!("min{kind}");
        let max_name = format!("max{kind}");
        let default_name = format!("default{kind}");
        let min_value = optional_quantity(min, &format!("{path}.{min_name}"), violations);
        let max_value = optional_quantity(max, &format!("{path}.{max_name}"), violations);
        let default_value = optional_quantity(default, &format!("{path}.{default_name}"), violations);
        if let (Some(min_value), Some(max_value)) = (min_value, max_value)
            && min_value > max_value
        {
            violations.push(FieldViolation::new(
                format!("{path}.{min_name}"),
                format!("{min_name} {min} exceeds {max_name} {max}"),
            ));
        }
        if let Some(default_value) = default_value {
            if let Some(max_value) = max_value
                && default_value > max_value
            {
                violations.push(FieldViolation::new(
                    format!("{path}.{default_name}"),
                    format!("{default_name} {default} exceeds {max_name} {max}"),
                ));
            }
            if let Some(min_value) = min_value
                && default_value < min_value
            {
                violations.push(FieldViolation::new(
                    format!("{path}.{default_name}"),
                    format!("{default_name} {default} is below {min_name} {min}"),
                ));
            }
        }
    }
    optional_quantity(&resources.cpu_ceiling, &format!("{path}.cpuCeiling"), violations);
    optional_quantity(&resources.memory_ceiling, &format!("{path}.memoryCeiling"), violations);
    if let Some(max_gpu_count) = resources.max_gpu_count
        && max_gpu_count < 0
    {
        violations.push(FieldViolation::new(
            format!("{path}.maxGpuCount"),
            format!("maxGpuCount {max_gpu_count} must not be negative"),
        ));
    }
}

/// Rule shapes, hostname placement, and `denyHttpsHostnameRules` against hostname grants.
fn check_network(network: &NetworkConstraints, path: &str, violations: &mut Vec<FieldViolation>) {
    for (list_name, rules, site) in [
        ("allowedEgress", &network.allowed_egress, EgressRuleSite::PolicyAllowed),
        ("defaultEgress", &network.default_egress, EgressRuleSite::PolicyDefault),
    ] {
        for (index, rule) in rules.iter().enumerate() {
            let rule_path = format!("{path}.{list_name}[{index}]");
            check_egress_rule(rule, &rule_path, site, violations);
            if network.deny_https_hostname_rules && site == EgressRuleSite::PolicyAllowed && is_hostname_rule(rule) {
                violations.push(FieldViolation::new(
                    format!("{rule_path}.httpsHostname"),
                    "hostname rules are forbidden by denyHttpsHostnameRules",
                ));
            }
        }
    }
    for (list_name, rules) in
        [("allowedIngress", &network.allowed_ingress), ("defaultIngress", &network.default_ingress)]
    {
        for (index, rule) in rules.iter().enumerate() {
            check_ingress_rule(rule, &format!("{path}.{list_name}[{index}]"), violations);
        }
    }
    if DnsEgressMode::try_from(network.dns_egress).is_err() {
        violations.push(FieldViolation::new(
            format!("{path}.dnsEgress"),
            format!("unknown DNS egress mode {}", network.dns_egress),
        ));
    }
}

/// Runtime-class rules: mappings exclude the name allowlist, each class mapped at most once to
/// exactly one target, names are valid RuntimeClass names, defaults fit a non-empty allowlist.
fn check_security(security: &SecurityConstraints, path: &str, violations: &mut Vec<FieldViolation>) {
    if !security.runtime_class_mappings.is_empty() && !security.allowed_runtime_classes.is_empty() {
        violations.push(FieldViolation::new(
            format!("{path}.runtimeClassMappings"),
            "runtimeClassMappings cannot be combined with allowedRuntimeClasses",
        ));
    }
    let mut mapped_classes = HashSet::new();
    for (index, mapping) in security.runtime_class_mappings.iter().enumerate() {
        let mapping_path = format!("{path}.runtimeClassMappings[{index}]");
        match RuntimeClass::try_from(mapping.runtime_class) {
            Ok(RuntimeClass::Unspecified) => violations.push(FieldViolation::new(
                format!("{mapping_path}.runtimeClass"),
                "runtimeClass must not be RUNTIME_CLASS_UNSPECIFIED",
            )),
            Ok(class) => {
                if !mapped_classes.insert(class) {
                    violations.push(FieldViolation::new(
                        format!("{mapping_path}.runtimeClass"),
                        format!("{} is mapped more than once", class.as_str_name()),
                    ));
                }
            }
            Err(_) => violations.push(FieldViolation::new(
                format!("{mapping_path}.runtimeClass"),
                format!("unknown runtime class {}", mapping.runtime_class),
            )),
        }
        match &mapping.target {
            None | Some(Target::NodeDefault(false)) => violations.push(FieldViolation::new(
                mapping_path,
                "exactly one target is required: kubernetesRuntimeClassName, or nodeDefault set to true",
            )),
            Some(Target::KubernetesRuntimeClassName(name)) => {
                if let Some(problem) = dns1123_subdomain_problem(name) {
                    violations.push(FieldViolation::new(format!("{mapping_path}.kubernetesRuntimeClassName"), problem));
                }
            }
            Some(Target::NodeDefault(true)) => {}
        }
    }
    for (index, name) in security.allowed_runtime_classes.iter().enumerate() {
        if let Some(problem) = dns1123_subdomain_problem(name) {
            violations.push(FieldViolation::new(format!("{path}.allowedRuntimeClasses[{index}]"), problem));
        }
    }
    for (field, class) in [
        ("defaultCpuRuntimeClass", &security.default_cpu_runtime_class),
        ("defaultGpuRuntimeClass", &security.default_gpu_runtime_class),
    ] {
        if class.is_empty() {
            continue;
        }
        let description = if security.allowed_runtime_classes.is_empty() {
            format!("{field} {class} needs a non-empty allowedRuntimeClasses that lists it")
        } else if !security.allowed_runtime_classes.contains(class) {
            format!("{field} {class} is not in allowedRuntimeClasses")
        } else {
            continue;
        };
        violations.push(FieldViolation::new(format!("{path}.{field}"), description));
    }
}

/// The policy may lower the default lifetime but never raise it past the platform's 30 days.
fn check_lifecycle(lifecycle: &LifecycleConstraints, path: &str, violations: &mut Vec<FieldViolation>) {
    let seconds = lifecycle.default_lifetime_seconds;
    if !(0..=MAX_LIFETIME_SECONDS).contains(&seconds) {
        violations.push(FieldViolation::new(
            format!("{path}.defaultLifetimeSeconds"),
            format!("defaultLifetimeSeconds {seconds} must be between 0 and {MAX_LIFETIME_SECONDS}"),
        ));
    }
}

/// The annotation count limit is a count; an empty denied prefix would deny every key.
fn check_metadata(metadata: &MetadataConstraints, path: &str, violations: &mut Vec<FieldViolation>) {
    if metadata.max_annotation_count < 0 {
        violations.push(FieldViolation::new(
            format!("{path}.maxAnnotationCount"),
            format!("maxAnnotationCount {} must not be negative", metadata.max_annotation_count),
        ));
    }
    for (index, prefix) in metadata.denied_annotation_prefixes.iter().enumerate() {
        if prefix.is_empty() {
            violations.push(FieldViolation::new(
                format!("{path}.deniedAnnotationPrefixes[{index}]"),
                "an empty prefix would deny every annotation",
            ));
        }
    }
}

/// `maxSize` is a quantity; media are known enum values.
fn check_volumes(volumes: &VolumeConstraints, path: &str, violations: &mut Vec<FieldViolation>) {
    optional_quantity(&volumes.max_size, &format!("{path}.maxSize"), violations);
    for (index, medium) in volumes.allowed_media.iter().enumerate() {
        if StorageMedium::try_from(*medium).is_err() {
            violations.push(FieldViolation::new(
                format!("{path}.allowedMedia[{index}]"),
                format!("unknown storage medium {medium}"),
            ));
        }
    }
}

/// At most 256 canonical prefixes, none covered by another (a covered prefix is redundant and
/// suggests the administrator meant something else).
fn check_control_plane_access(access: &ControlPlaneAccess, path: &str, violations: &mut Vec<FieldViolation>) {
    let Some(allowlist) = &access.source_ip_allowlist else { return };
    let cidrs_path = format!("{path}.sourceIpAllowlist.cidrs");
    if allowlist.cidrs.len() > SOURCE_ALLOWLIST_MAX {
        violations.push(FieldViolation::new(
            cidrs_path.clone(),
            format!("{} prefixes exceed the limit of {SOURCE_ALLOWLIST_MAX}", allowlist.cidrs.len()),
        ));
    }
    let mut parsed: Vec<(usize, IpPrefix)> = Vec::new();
    for (index, text) in allowlist.cidrs.iter().enumerate() {
        match IpPrefix::parse_canonical(text) {
            Ok(prefix) => parsed.push((index, prefix)),
            Err(problem) => violations.push(FieldViolation::new(format!("{cidrs_path}[{index}]"), problem)),
        }
    }
    for (index, prefix) in &parsed {
        // A duplicate is reported once, at its later position.
        let covering = parsed.iter().find(|(other_index, other)| {
            other_index != index && other.contains(prefix) && (other != prefix || other_index < index)
        });
        if let Some((other_index, other)) = covering {
            violations.push(FieldViolation::new(
                format!("{cidrs_path}[{index}]"),
                format!("{prefix} is already covered by cidrs[{other_index}] {other}; remove the redundant prefix"),
            ));
        }
    }
}
