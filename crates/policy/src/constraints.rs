//! The constraint stage (docs/facts/policy.md#resolution; the comparisons are the emulator's
//! choice, docs/facts/runner-api.md#gap-10): the policy's typed constraints checked against the
//! fully resolved sandbox, so values `base` or a default supplied are checked too. A violation
//! rejects the sandbox; nothing is clamped or rewritten. Every violation is collected so the user
//! sees the whole list at once. Fields name the sandbox field to change; descriptions name the
//! policy constraint that refused it.

use cwsandbox_api::sandbox_v1::{
    ImageConstraints, InstanceConstraints, MetadataConstraints, NetworkConstraints, Policy, ResourceConstraints,
    RuntimeClass, SandboxSpec, SecurityConstraints, StorageMedium, VolumeConstraints, sandbox_volume,
};

use crate::error::{FieldViolation, PolicyError, RejectionKind};
use crate::network::{egress_rule_within, ingress_rule_within, is_hostname_rule};
use crate::quantity::Quantity;
use crate::resolve::{AmountSource, Provenance, RuntimeClassRequest};
use crate::resolved::{ResolvedSpec, ResourceAmounts};
use crate::{format_cpu, format_memory, quoted};

/// One refusal, and whether it is a whole-sandbox ceiling (which gets its own reason code).
struct Refusal {
    violation: FieldViolation,
    is_ceiling: bool,
}

#[derive(Default)]
struct Refusals(Vec<Refusal>);

impl Refusals {
    fn placement(&mut self, field: impl Into<String>, description: impl Into<String>) {
        self.push(FieldViolation::new(field, description), false);
    }

    fn ceiling(&mut self, field: impl Into<String>, description: impl Into<String>) {
        self.push(FieldViolation::new(field, description), true);
    }

    /// Drops exact repeats: a limit copied from a request fails the same way at the same field.
    fn push(&mut self, violation: FieldViolation, is_ceiling: bool) {
        if !self.0.iter().any(|refusal| refusal.violation == violation) {
            self.0.push(Refusal { violation, is_ceiling });
        }
    }
}

/// Checks every constraint group the policy has; an absent group constrains nothing.
pub(crate) fn check_constraints(
    policy: &Policy,
    spec: &SandboxSpec,
    resolved: &ResolvedSpec,
    provenance: &Provenance,
) -> Result<(), PolicyError> {
    let mut refusals = Refusals::default();
    let constraints = policy.constraints.clone().unwrap_or_default();
    if let Some(resources) = &constraints.resources {
        check_resources(resources, resolved, provenance, &mut refusals);
    }
    if let Some(image) = &constraints.image {
        check_images(image, resolved, &mut refusals);
    }
    if let Some(instance) = &constraints.instance {
        check_instance_type(instance, resolved, &mut refusals);
    }
    if let Some(metadata) = &constraints.metadata {
        check_annotations(metadata, spec, &mut refusals);
    }
    if let Some(security) = &constraints.security {
        check_container_security(security, resolved, &mut refusals);
    }
    check_runtime_class(constraints.security.as_ref(), provenance, &mut refusals);
    if let Some(network) = &constraints.network {
        check_network(network, spec, &mut refusals);
    }
    if let Some(volumes) = &constraints.volumes {
        check_volumes(volumes, spec, &mut refusals);
    }
    if refusals.0.is_empty() {
        return Ok(());
    }
    let kind = if refusals.0.iter().all(|refusal| refusal.is_ceiling) {
        RejectionKind::CeilingExceeded
    } else {
        RejectionKind::Placement
    };
    Err(PolicyError::Rejected { kind, violations: refusals.0.into_iter().map(|refusal| refusal.violation).collect() })
}

/// A policy quantity that validation already accepted; empty or (impossibly) unparsable is unset.
fn policy_quantity(text: &str) -> Option<Quantity> {
    if text.is_empty() { None } else { Quantity::parse(text).ok() }
}

/// A policy quantity with its original text, which descriptions quote as the administrator wrote it.
fn with_policy_text(text: &str) -> Option<(Quantity, &str)> {
    policy_quantity(text).map(|value| (value, text))
}

/// Bounds of one kind (CPU or memory) of one policy.
struct Bounds<'p> {
    name: &'static str,
    min: Option<(Quantity, &'p str)>,
    max: Option<(Quantity, &'p str)>,
    format: fn(Quantity) -> String,
}

impl Bounds<'_> {
    fn check(&self, value: Option<Quantity>, source: Option<&AmountSource>, refusals: &mut Refusals) {
        let (Some(value), Some(source)) = (value, source) else { return };
        let shown = format!("{}{}", (self.format)(value), source.note);
        if let Some((max, max_text)) = self.max
            && value > max
        {
            refusals.placement(
                source.field.to_string(),
                format!("{shown} exceeds policy constraints.resources.max{} {max_text}", self.name),
            );
        }
        if let Some((min, min_text)) = self.min
            && value < min
        {
            refusals.placement(
                source.field.to_string(),
                format!("{shown} is below policy constraints.resources.min{} {min_text}", self.name),
            );
        }
    }
}

/// Per-container bounds on both sides, declared limits, GPU cap, and whole-sandbox ceilings.
fn check_resources(
    resources: &ResourceConstraints,
    resolved: &ResolvedSpec,
    provenance: &Provenance,
    refusals: &mut Refusals,
) {
    let cpu = Bounds {
        name: "Cpu",
        min: with_policy_text(&resources.min_cpu),
        max: with_policy_text(&resources.max_cpu),
        format: format_cpu,
    };
    let memory = Bounds {
        name: "Memory",
        min: with_policy_text(&resources.min_memory),
        max: with_policy_text(&resources.max_memory),
        format: format_memory,
    };
    for (index, (container, sources)) in resolved.containers.iter().zip(&provenance.containers).enumerate() {
        let sides: [(&ResourceAmounts, &crate::resolve::AmountSources); 2] =
            [(&container.requests, &sources.requests), (&container.limits, &sources.limits)];
        for (amounts, amount_sources) in sides {
            cpu.check(amounts.cpu, amount_sources.cpu.as_ref(), refusals);
            memory.check(amounts.memory, amount_sources.memory.as_ref(), refusals);
            if let (Some(max_gpus), Some(gpus), Some(source)) =
                (resources.max_gpu_count, amounts.gpu, &amount_sources.gpu)
                && gpus > max_gpus
            {
                refusals.placement(
                    source.field.to_string(),
                    format!("{gpus}{} exceeds policy constraints.resources.maxGpuCount {max_gpus}", source.note),
                );
            }
        }
        if resources.require_limits {
            for (declared, kind) in [(sources.cpu_limit_declared, "cpu"), (sources.memory_limit_declared, "memory")] {
                if !declared {
                    refusals.placement(
                        format!("sandbox.spec.containers[{index}].resourceRequirements.limits.{kind}"),
                        format!("a {kind} limit is required by policy constraints.resources.requireLimits"),
                    );
                }
            }
        }
    }
    if let Some(ceiling) = policy_quantity(&resources.cpu_ceiling) {
        let total = resolved.total_cpu_request();
        if total > ceiling {
            refusals.ceiling(
                "sandbox.spec.containers",
                format!(
                    "total cpu requests {} exceed policy constraints.resources.cpuCeiling {}",
                    format_cpu(total),
                    resources.cpu_ceiling
                ),
            );
        }
    }
    if let Some(ceiling) = policy_quantity(&resources.memory_ceiling) {
        let total = resolved.total_memory_request();
        if total > ceiling {
            refusals.ceiling(
                "sandbox.spec.containers",
                format!(
                    "total memory requests {} exceed policy constraints.resources.memoryCeiling {}",
                    format_memory(total),
                    resources.memory_ceiling
                ),
            );
        }
    }
}

/// Registries are plain string prefixes (as documented: include the trailing `/` to stop
/// `example.com` from matching `example.com.evil.io`); images are exact references. With both
/// lists set, an image must satisfy both.
fn check_images(image: &ImageConstraints, resolved: &ResolvedSpec, refusals: &mut Refusals) {
    for (index, container) in resolved.containers.iter().enumerate() {
        let field = format!("sandbox.spec.containers[{index}].image");
        let reference = &container.image;
        if !image.allowed_registries.is_empty()
            && !image.allowed_registries.iter().any(|registry| reference.starts_with(registry.as_str()))
        {
            refusals.placement(
                field.clone(),
                format!("image {reference:?} is not from a registry in policy constraints.image.allowedRegistries"),
            );
        }
        if !image.allowed_images.is_empty() && !image.allowed_images.contains(reference) {
            refusals.placement(field, format!("image {reference:?} is not in policy constraints.image.allowedImages"));
        }
    }
}

fn check_instance_type(instance: &InstanceConstraints, resolved: &ResolvedSpec, refusals: &mut Refusals) {
    if let Some(instance_type) = &resolved.instance_type
        && !instance.allowed_instance_types.is_empty()
        && !instance.allowed_instance_types.contains(instance_type)
    {
        refusals.placement(
            "sandbox.spec.instanceType",
            format!("instance type {instance_type:?} is not in policy constraints.instance.allowedInstanceTypes"),
        );
    }
}

/// Only the sandbox's own annotations are limited: those `base` pins are the administrator's.
fn check_annotations(metadata: &MetadataConstraints, spec: &SandboxSpec, refusals: &mut Refusals) {
    let mut keys: Vec<&String> = spec.annotations.keys().collect();
    keys.sort();
    for key in keys {
        if let Some(prefix) = metadata.denied_annotation_prefixes.iter().find(|prefix| key.starts_with(prefix.as_str()))
        {
            refusals.placement(
                format!("sandbox.spec.annotations[{}]", quoted(key)),
                format!("prefix {prefix:?} is denied by policy constraints.metadata.deniedAnnotationPrefixes"),
            );
        }
    }
    let limit = metadata.max_annotation_count;
    let count = spec.annotations.len();
    if limit > 0 && count > limit as usize {
        refusals.placement(
            "sandbox.spec.annotations",
            format!("{count} annotations exceed policy constraints.metadata.maxAnnotationCount {limit}"),
        );
    }
}

/// Capability names compare without case and without the `CAP_` prefix (`net_admin` = `CAP_NET_ADMIN`).
fn capability_key(name: &str) -> String {
    let upper = name.to_ascii_uppercase();
    upper.strip_prefix("CAP_").map(str::to_owned).unwrap_or(upper)
}

/// Privileged mode, added capabilities and seccomp profiles; the allowlists fail closed.
fn check_container_security(security: &SecurityConstraints, resolved: &ResolvedSpec, refusals: &mut Refusals) {
    let allowed_capabilities: Vec<String> =
        security.allowed_capabilities.iter().map(|name| capability_key(name)).collect();
    for (index, container) in resolved.containers.iter().enumerate() {
        let Some(context) = &container.security_context else { continue };
        let path = format!("sandbox.spec.containers[{index}].securityContext");
        if context.privileged == Some(true) && !security.allow_privileged {
            refusals.placement(
                format!("{path}.privileged"),
                "privileged containers are not allowed by policy constraints.security.allowPrivileged",
            );
        }
        for (capability_index, capability) in context.capabilities_add.iter().enumerate() {
            if !allowed_capabilities.contains(&capability_key(capability)) {
                refusals.placement(
                    format!("{path}.capabilitiesAdd[{capability_index}]"),
                    format!("capability {capability} is not in policy constraints.security.allowedCapabilities"),
                );
            }
        }
        if !context.seccomp_profile.is_empty() && !security.allowed_seccomp_profiles.contains(&context.seccomp_profile)
        {
            refusals.placement(
                format!("{path}.seccompProfile"),
                format!(
                    "seccomp profile {} is not in policy constraints.security.allowedSeccompProfiles",
                    context.seccomp_profile
                ),
            );
        }
    }
}

/// A RuntimeClass named by the caller must be in the allowlist; without one, callers may not pin
/// a concrete class (even with no security group at all, as the documentation states). An
/// abstract class other than the two defaults needs a mapping.
fn check_runtime_class(security: Option<&SecurityConstraints>, provenance: &Provenance, refusals: &mut Refusals) {
    match &provenance.runtime_class_request {
        RuntimeClassRequest::Unstated => {}
        RuntimeClassRequest::ByName(name) => {
            let allowlist = security.map_or(&[][..], |security| &security.allowed_runtime_classes[..]);
            if allowlist.is_empty() {
                refusals.placement(
                    "sandbox.spec.runtimeClass",
                    format!(
                        "runtime class {name} cannot be chosen: policy constraints.security.allowedRuntimeClasses is empty"
                    ),
                );
            } else if !allowlist.contains(name) {
                refusals.placement(
                    "sandbox.spec.runtimeClass",
                    format!("runtime class {name} is not in policy constraints.security.allowedRuntimeClasses"),
                );
            }
        }
        RuntimeClassRequest::BySelection(class) => {
            let is_default_class = matches!(class, RuntimeClass::CpuDefault | RuntimeClass::GpuDefault);
            let is_mapped = security.is_some_and(|security| {
                security.runtime_class_mappings.iter().any(|mapping| mapping.runtime_class == *class as i32)
            });
            if !is_default_class && !is_mapped {
                refusals.placement(
                    "sandbox.spec.runtimeClassSelection",
                    format!(
                        "{} has no mapping in policy constraints.security.runtimeClassMappings",
                        class.as_str_name()
                    ),
                );
            }
        }
    }
}

/// Declared rules must fit the envelope (an empty envelope allows anything); hostname grants are
/// refused outright under `denyHttpsHostnameRules`. Policy defaults are not re-checked: they are
/// the administrator's own choice.
fn check_network(network: &NetworkConstraints, spec: &SandboxSpec, refusals: &mut Refusals) {
    let Some(declared) = &spec.network else { return };
    for (index, rule) in declared.egress.iter().enumerate() {
        let path = format!("sandbox.spec.network.egress[{index}]");
        if network.deny_https_hostname_rules && is_hostname_rule(rule) {
            refusals.placement(
                format!("{path}.httpsHostname"),
                "hostname rules are forbidden by policy constraints.network.denyHttpsHostnameRules",
            );
        } else if !network.allowed_egress.is_empty()
            && !network.allowed_egress.iter().any(|allowed| egress_rule_within(rule, allowed))
        {
            refusals.placement(path, "rule is not within any rule of policy constraints.network.allowedEgress");
        }
    }
    for (index, rule) in declared.ingress.iter().enumerate() {
        if !network.allowed_ingress.is_empty()
            && !network.allowed_ingress.iter().any(|allowed| ingress_rule_within(rule, allowed))
        {
            refusals.placement(
                format!("sandbox.spec.network.ingress[{index}]"),
                "rule is not within any rule of policy constraints.network.allowedIngress",
            );
        }
    }
}

/// Scratch volume size and medium. An unstated medium takes the platform default and is not
/// judged against the list.
fn check_volumes(volumes: &VolumeConstraints, spec: &SandboxSpec, refusals: &mut Refusals) {
    let max_size = policy_quantity(&volumes.max_size);
    for (index, volume) in spec.volumes.iter().enumerate() {
        let Some(sandbox_volume::Source::Scratch(scratch)) = &volume.source else { continue };
        let path = format!("sandbox.spec.volumes[{index}].scratch");
        if let (Some(max_size), Ok(size)) = (max_size, Quantity::parse(&scratch.size))
            && size > max_size
        {
            refusals.placement(
                format!("{path}.size"),
                format!("{} exceeds policy constraints.volumes.maxSize {}", scratch.size, volumes.max_size),
            );
        }
        let medium = StorageMedium::try_from(scratch.medium).unwrap_or_default();
        if medium != StorageMedium::Unspecified
            && !volumes.allowed_media.is_empty()
            && !volumes.allowed_media.contains(&scratch.medium)
        {
            refusals.placement(
                format!("{path}.medium"),
                format!("{} is not in policy constraints.volumes.allowedMedia", medium.as_str_name()),
            );
        }
    }
}
