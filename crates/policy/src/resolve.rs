//! The base stage of resolution (docs/facts/policy.md#resolution): runtime defaults, then the
//! policy's `base`, then the sandbox's own spec. The sandbox wins on scalar values; `base`
//! attachments (tolerations, container environment, pinned labels) always apply; on a duplicate
//! annotation key the policy's `base.metadata.annotations` win. The constraint stage
//! ([`crate::constraints`]) then checks the result without rewriting it.

use std::collections::BTreeMap;

use cwsandbox_api::sandbox_v1::{
    Container, DnsEgressMode, Policy, ResourceConstraints, Resources, RuntimeClass, SandboxSpec, SecurityConstraints,
    gpu, runtime_class_mapping::Target, sandbox_volume,
};

use crate::MAX_LIFETIME_SECONDS;
use crate::base::{BaseTemplate, parse_base};
use crate::constraints::check_constraints;
use crate::error::{FieldViolation, PolicyError};
use crate::k8s_names::{TOTAL_ANNOTATION_SIZE_MAX, annotation_size, dns1123_subdomain_problem, qualified_name_problem};
use crate::network::{EgressRuleSite, check_egress_rule, check_ingress_rule};
use crate::quantity::Quantity;
use crate::resolved::{GpuTypeRequest, ResolvedContainer, ResolvedSpec, ResourceAmounts};
use crate::validate::validate_policy;
use crate::{format_cpu, format_memory, quoted};

/// What a sandbox gets when neither it nor its runner's policy says otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeDefaults {
    /// CPU request (and limit) of a container that states no CPU.
    pub cpu_request: Quantity,
    /// Memory request (and limit) of a container that states no memory.
    pub memory_request: Quantity,
    /// Lifetime of a sandbox that states none, when the policy has no positive default.
    pub lifetime_seconds: i32,
}

impl Default for RuntimeDefaults {
    /// One CPU, 1 GiB and 600 s: the platform defaults the public documentation states.
    fn default() -> Self {
        RuntimeDefaults {
            cpu_request: Quantity::from_units(1),
            memory_request: Quantity::from_units(1 << 30),
            lifetime_seconds: 600,
        }
    }
}

/// The name a lone unnamed container gets.
const DEFAULT_CONTAINER_NAME: &str = "main";

/// Where one resolved amount came from, so a constraint violation can name the field the user
/// should change and say when the value was a default rather than their own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AmountSource {
    /// The sandbox field to name (`sandbox.spec.containers[0].resourceRequirements.requests.cpu`).
    pub field: AmountField,
    /// Appended to the value in descriptions when the sandbox did not state it (" (runtime default)").
    pub note: &'static str,
}

/// A sandbox field that states an amount, spelled out only when a violation names it: every
/// sandbox records where its amounts came from, few are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AmountField {
    /// Index of the container.
    container: usize,
    /// `resourceRequirements.<side>`, or the legacy `resources` (`None`).
    side: Option<Side>,
    /// `cpu`, `memory` or `gpu.count`.
    leaf: &'static str,
}

impl std::fmt::Display for AmountField {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.side {
            Some(side) => write!(
                formatter,
                "sandbox.spec.containers[{}].resourceRequirements.{}.{}",
                self.container,
                side.name(),
                self.leaf
            ),
            None => write!(formatter, "sandbox.spec.containers[{}].resources.{}", self.container, self.leaf),
        }
    }
}

/// Sources of the three amounts of one side of one container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AmountSources {
    pub cpu: Option<AmountSource>,
    pub memory: Option<AmountSource>,
    pub gpu: Option<AmountSource>,
}

/// What the constraint stage needs to know about one container beyond its resolved values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ContainerSources {
    pub requests: AmountSources,
    pub limits: AmountSources,
    /// Whether the sandbox itself stated a CPU limit (`requireLimits` asks for declared limits,
    /// which resolution would otherwise hide by copying requests).
    pub cpu_limit_declared: bool,
    /// Whether the sandbox itself stated a memory limit.
    pub memory_limit_declared: bool,
}

/// How the sandbox asked for a runtime class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RuntimeClassRequest {
    /// It did not ask; the policy's default for CPU or GPU sandboxes applies.
    Unstated,
    /// A Kubernetes RuntimeClass name (`runtimeClass`): needs the policy's allowlist.
    ByName(String),
    /// An abstract class (`runtimeClassSelection`): needs a policy mapping unless it is a default class.
    BySelection(RuntimeClass),
}

/// Everything the constraint stage needs besides the resolved spec.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Provenance {
    pub containers: Vec<ContainerSources>,
    pub runtime_class_request: RuntimeClassRequest,
}

/// Resolves a sandbox spec against its runner's policy: merges runtime defaults, `base` and the
/// spec, then checks the policy's constraints against the merged result.
///
/// Errors (the sim's codes and reasons in brackets):
/// - [`PolicyError::InvalidSpec`] when the spec itself is malformed (bad quantities, lifetime
///   outside 0..=2592000, invalid annotation keys, malformed network rules…)
///   [`INVALID_ARGUMENT` / `CWSANDBOX_INVALID_REQUEST`].
/// - [`PolicyError::Rejected`] when the policy's constraints reject it
///   [`INVALID_ARGUMENT` / `CWSANDBOX_PLACEMENT_REJECTED`], or with
///   [`RejectionKind::CeilingExceeded`](crate::RejectionKind::CeilingExceeded) when every
///   violation is a `cpuCeiling` / `memoryCeiling` one [`CWSANDBOX_RESOURCE_CEILING_EXCEEDED`].
/// - [`PolicyError::InvalidPolicy`] when the stored policy is itself invalid, which validation at
///   write time should have prevented [`FAILED_PRECONDITION` / `CWSANDBOX_PRECONDITION_FAILED`].
pub fn resolve(
    defaults: &RuntimeDefaults,
    policy: Option<&Policy>,
    spec: &SandboxSpec,
) -> Result<ResolvedSpec, PolicyError> {
    resolve_prepared(defaults, &PreparedPolicy::new(policy), spec)
}

/// A policy validated and with its `base` parsed once, for resolving many sandboxes against the
/// same policy revision without redoing that work each time.
#[derive(Debug, Clone)]
pub struct PreparedPolicy {
    policy: Policy,
    base: BaseTemplate,
    problems: Vec<FieldViolation>,
}

impl PreparedPolicy {
    /// Validates and parses a policy (`None` is the empty, permissive policy).
    pub fn new(policy: Option<&Policy>) -> PreparedPolicy {
        let policy = policy.cloned().unwrap_or_default();
        let problems = validate_policy(&policy);
        let (base, _) = parse_base(policy.base.as_ref());
        PreparedPolicy { policy, base, problems }
    }
}

/// [`resolve`] against a policy prepared beforehand.
pub fn resolve_prepared(
    defaults: &RuntimeDefaults,
    prepared: &PreparedPolicy,
    spec: &SandboxSpec,
) -> Result<ResolvedSpec, PolicyError> {
    if !prepared.problems.is_empty() {
        return Err(PolicyError::InvalidPolicy { problems: prepared.problems.clone() });
    }
    let (resolved, provenance) = merge(defaults, &prepared.policy, &prepared.base, spec)?;
    check_constraints(&prepared.policy, spec, &resolved, &provenance)?;
    Ok(resolved)
}

/// The base stage. Returns the merged spec and the provenance the constraint stage needs, or the
/// sandbox's own input errors.
fn merge(
    defaults: &RuntimeDefaults,
    policy: &Policy,
    base: &BaseTemplate,
    spec: &SandboxSpec,
) -> Result<(ResolvedSpec, Provenance), PolicyError> {
    let mut violations = Vec::new();
    let constraints = policy.constraints.clone().unwrap_or_default();
    let resources = constraints.resources.unwrap_or_default();
    let network = constraints.network.unwrap_or_default();

    let max_lifetime_seconds = resolve_lifetime(
        defaults,
        constraints.lifecycle.map_or(0, |lifecycle| lifecycle.default_lifetime_seconds),
        spec.max_lifetime_seconds,
        &mut violations,
    );
    let annotations = merge_annotations(base, spec, &mut violations);
    let (containers, container_sources) = resolve_containers(defaults, &resources, base, spec, &mut violations);

    let sandbox_network = spec.network.clone().unwrap_or_default();
    for (index, rule) in sandbox_network.egress.iter().enumerate() {
        check_egress_rule(
            rule,
            &format!("sandbox.spec.network.egress[{index}]"),
            EgressRuleSite::Sandbox,
            &mut violations,
        );
    }
    for (index, rule) in sandbox_network.ingress.iter().enumerate() {
        check_ingress_rule(rule, &format!("sandbox.spec.network.ingress[{index}]"), &mut violations);
    }
    // Allow-lists over default deny; `deny_*` denies all, the policy's defaults unused (as the
    // published client documents NetworkOptions).
    let egress = match (sandbox_network.deny_egress, sandbox_network.egress.is_empty()) {
        (Some(true), _) => Vec::new(),
        (_, true) => network.default_egress,
        (_, false) => sandbox_network.egress,
    };
    let ingress = match (sandbox_network.deny_ingress, sandbox_network.ingress.is_empty()) {
        (Some(true), _) => Vec::new(),
        (_, true) => network.default_ingress,
        (_, false) => sandbox_network.ingress,
    };
    let dns_egress = match DnsEgressMode::try_from(sandbox_network.dns_egress) {
        Ok(DnsEgressMode::Unspecified) => DnsEgressMode::try_from(network.dns_egress).unwrap_or_default(),
        Ok(mode) => mode,
        Err(_) => {
            violations.push(FieldViolation::new(
                "sandbox.spec.network.dnsEgress",
                format!("unknown DNS egress mode {}", sandbox_network.dns_egress),
            ));
            DnsEgressMode::Unspecified
        }
    };

    for (index, volume) in spec.volumes.iter().enumerate() {
        if let Some(sandbox_volume::Source::Scratch(scratch)) = &volume.source
            && !scratch.size.is_empty()
            && let Err(error) = Quantity::parse(&scratch.size)
        {
            violations
                .push(FieldViolation::new(format!("sandbox.spec.volumes[{index}].scratch.size"), error.to_string()));
        }
    }

    let runtime_class_request = runtime_class_request(spec, &mut violations);
    if !violations.is_empty() {
        return Err(PolicyError::InvalidSpec { violations });
    }

    let mut resolved = ResolvedSpec {
        labels: base.labels.clone(),
        annotations,
        scheduler_name: base.scheduler_name.clone(),
        node_selector: base.node_selector.clone(),
        tolerations: base.tolerations.clone(),
        priority_class_name: base.priority_class_name.clone(),
        required_node_affinity: base.required_node_affinity.clone(),
        extra_pod_spec: base.extra_pod_spec.clone(),
        containers,
        max_lifetime_seconds,
        runtime_class: None,
        egress,
        ingress,
        dns_egress,
        instance_type: Some(spec.instance_type.clone()).filter(|instance_type| !instance_type.is_empty()),
    };
    resolved.runtime_class = choose_runtime_class(&runtime_class_request, constraints.security.as_ref(), &resolved);
    Ok((resolved, Provenance { containers: container_sources, runtime_class_request }))
}

/// Explicit lifetime > 0 wins, then the policy default > 0, then the runtime default. Negative or
/// over-30-day values are refused rather than clamped: the user asked for something impossible.
fn resolve_lifetime(
    defaults: &RuntimeDefaults,
    policy_default: i32,
    requested: i32,
    violations: &mut Vec<FieldViolation>,
) -> i32 {
    if !(0..=MAX_LIFETIME_SECONDS).contains(&requested) {
        violations.push(FieldViolation::new(
            "sandbox.spec.maxLifetimeSeconds",
            format!("maxLifetimeSeconds {requested} must be between 0 and {MAX_LIFETIME_SECONDS} (30 days)"),
        ));
        return 0;
    }
    if requested > 0 {
        requested
    } else if policy_default > 0 {
        policy_default
    } else {
        defaults.lifetime_seconds
    }
}

/// The sandbox's annotations (keys validated), then `base.metadata.annotations`, which win.
fn merge_annotations(
    base: &BaseTemplate,
    spec: &SandboxSpec,
    violations: &mut Vec<FieldViolation>,
) -> BTreeMap<String, String> {
    let mut annotations = BTreeMap::new();
    let mut sandbox_entries: Vec<_> = spec.annotations.iter().collect();
    sandbox_entries.sort();
    for (key, value) in sandbox_entries {
        match qualified_name_problem(key) {
            Some(problem) => {
                violations.push(FieldViolation::new(format!("sandbox.spec.annotations[{}]", quoted(key)), problem))
            }
            None => {
                annotations.insert(key.clone(), value.clone());
            }
        }
    }
    annotations.extend(base.annotations.iter().map(|(key, value)| (key.clone(), value.clone())));
    let total_size = annotation_size(&annotations);
    if total_size > TOTAL_ANNOTATION_SIZE_MAX {
        violations.push(FieldViolation::new(
            "sandbox.spec.annotations",
            format!("annotations take {total_size} bytes, over Kubernetes' limit of {TOTAL_ANNOTATION_SIZE_MAX}"),
        ));
    }
    annotations
}

/// Names, primary flag, environment and resources of every container.
fn resolve_containers(
    defaults: &RuntimeDefaults,
    resources: &ResourceConstraints,
    base: &BaseTemplate,
    spec: &SandboxSpec,
    violations: &mut Vec<FieldViolation>,
) -> (Vec<ResolvedContainer>, Vec<ContainerSources>) {
    if spec.containers.is_empty() {
        violations.push(FieldViolation::new("sandbox.spec.containers", "at least one container is required"));
    }
    let explicit_primary = spec.containers.iter().position(|container| container.primary == Some(true));
    let mut containers = Vec::with_capacity(spec.containers.len());
    let mut sources = Vec::with_capacity(spec.containers.len());
    for (index, container) in spec.containers.iter().enumerate() {
        let path = || format!("sandbox.spec.containers[{index}]");
        let name = if !container.name.is_empty() {
            container.name.clone()
        } else if spec.containers.len() == 1 {
            DEFAULT_CONTAINER_NAME.to_owned()
        } else {
            violations.push(FieldViolation::new(
                format!("{}.name", path()),
                "a name is required when the sandbox has more than one container",
            ));
            String::new()
        };
        // A linear check: sandboxes have a container or two, and a set would cost allocations.
        if !name.is_empty() && containers.iter().any(|earlier: &ResolvedContainer| earlier.name == name) {
            violations
                .push(FieldViolation::new(format!("{}.name", path()), format!("duplicate container name {name:?}")));
        }
        if container.primary == Some(true) && explicit_primary != Some(index) {
            violations.push(FieldViolation::new(format!("{}.primary", path()), "only one container may be primary"));
        }
        let (requests, limits, container_sources) = resolve_amounts(defaults, resources, container, index, violations);
        let gpu_type = stated_gpu_type(container, index, violations);
        if let (Some(asked), Some(earlier)) =
            (&gpu_type, containers.iter().find_map(|earlier: &ResolvedContainer| earlier.gpu_type.as_ref()))
            && asked.name != earlier.name
        {
            violations.push(FieldViolation::new(
                asked.field.clone(),
                format!(
                    "GPU type {:?} differs from {:?} asked by {}: the containers of a sandbox share one Node",
                    asked.name, earlier.name, earlier.field
                ),
            ));
        }
        containers.push(ResolvedContainer {
            env: merge_env(base, &name, container),
            name,
            image: container.image.clone(),
            command: Some(container.command.clone()).filter(|command| !command.is_empty()),
            args: container.args.clone(),
            working_dir: Some(container.working_dir.clone()).filter(|dir| !dir.is_empty()),
            requests,
            limits,
            gpu_type,
            security_context: container.security_context.clone().map(Box::new),
            primary: explicit_primary.map_or(index == 0, |primary| primary == index),
        });
        sources.push(container_sources);
    }
    (containers, sources)
}

/// `base` environment for every container, then `base` environment for this container by name,
/// then the sandbox's own variables, which win.
fn merge_env(base: &BaseTemplate, name: &str, container: &Container) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let unnamed = base.containers.iter().filter(|attachment| attachment.name.is_none());
    let named = base.containers.iter().filter(|attachment| attachment.name.as_deref() == Some(name));
    for attachment in unnamed.chain(named) {
        env.extend(attachment.env.iter().cloned());
    }
    env.extend(container.environment_variables.iter().map(|(key, value)| (key.clone(), value.clone())));
    env
}

/// One stated quantity: its parsed value and the field it came from.
struct Stated {
    value: Quantity,
    field: AmountField,
}

/// The CPU or memory text stated for one side: `resourceRequirements.<side>` first, then the
/// legacy `resources` (which stands for both sides).
fn stated_quantity(
    container: &Container,
    side: Side,
    kind: QuantityKind,
    index: usize,
    violations: &mut Vec<FieldViolation>,
) -> Option<Stated> {
    let from_requirements =
        container.resource_requirements.as_ref().and_then(|requirements| side.of(requirements)).map(|resources| {
            (kind.text(resources), AmountField { container: index, side: Some(side), leaf: kind.name() })
        });
    let from_legacy = container
        .resources
        .as_ref()
        .map(|resources| (kind.text(resources), AmountField { container: index, side: None, leaf: kind.name() }));
    let (text, field) = [from_requirements, from_legacy].into_iter().flatten().find(|(text, _)| !text.is_empty())?;
    match Quantity::parse(text) {
        Ok(value) => Some(Stated { value, field }),
        Err(error) => {
            violations.push(FieldViolation::new(field.to_string(), error.to_string()));
            None
        }
    }
}

/// The GPU count stated for one side, same precedence as [`stated_quantity`]; 0 means unstated.
fn stated_gpus(
    container: &Container,
    side: Side,
    index: usize,
    violations: &mut Vec<FieldViolation>,
) -> Option<(i64, AmountField)> {
    let from_requirements = container
        .resource_requirements
        .as_ref()
        .and_then(|requirements| side.of(requirements))
        .and_then(|resources| resources.gpu.as_ref())
        .map(|gpu| (gpu.count, AmountField { container: index, side: Some(side), leaf: "gpu.count" }));
    let from_legacy = container
        .resources
        .as_ref()
        .and_then(|resources| resources.gpu.as_ref())
        .map(|gpu| (gpu.count, AmountField { container: index, side: None, leaf: "gpu.count" }));
    let (count, field) = [from_requirements, from_legacy].into_iter().flatten().find(|(count, _)| *count != 0)?;
    if count < 0 {
        violations.push(FieldViolation::new(field.to_string(), format!("GPU count {count} must not be negative")));
        return None;
    }
    Some((count, field))
}

/// The GPU model one container asks for: `gpu.type` of its requests, limits or legacy
/// resources. Every side that names one must name the same, and a model needs a count.
fn stated_gpu_type(
    container: &Container,
    index: usize,
    violations: &mut Vec<FieldViolation>,
) -> Option<GpuTypeRequest> {
    let requirements = container.resource_requirements.as_ref();
    let sides = [
        (requirements.and_then(|requirements| requirements.requests.as_ref()), Some(Side::Requests)),
        (requirements.and_then(|requirements| requirements.limits.as_ref()), Some(Side::Limits)),
        (container.resources.as_ref(), None),
    ];
    let mut chosen: Option<GpuTypeRequest> = None;
    for (resources, side) in sides {
        let Some(gpu) = resources.and_then(|resources| resources.gpu.as_ref()) else { continue };
        let Some(gpu::Selector::Type(name)) = &gpu.selector else { continue };
        let field = AmountField { container: index, side, leaf: "gpu.type" }.to_string();
        if name.trim().is_empty() {
            violations.push(FieldViolation::new(field, "a GPU type must not be empty"));
            continue;
        }
        if gpu.count <= 0 {
            violations.push(FieldViolation::new(
                field,
                format!("GPU type {name:?} needs a GPU count of at least 1 (gpu.count is {})", gpu.count),
            ));
            continue;
        }
        match &chosen {
            Some(earlier) if earlier.name != *name => violations.push(FieldViolation::new(
                field,
                format!("GPU type {name:?} differs from {:?} in {}", earlier.name, earlier.field),
            )),
            Some(_) => {}
            None => chosen = Some(GpuTypeRequest { name: name.clone(), field }),
        }
    }
    chosen
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Requests,
    Limits,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Requests => "requests",
            Side::Limits => "limits",
        }
    }

    fn of(self, requirements: &cwsandbox_api::sandbox_v1::ResourceRequirements) -> Option<&Resources> {
        match self {
            Side::Requests => requirements.requests.as_ref(),
            Side::Limits => requirements.limits.as_ref(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QuantityKind {
    Cpu,
    Memory,
}

impl QuantityKind {
    fn name(self) -> &'static str {
        match self {
            QuantityKind::Cpu => "cpu",
            QuantityKind::Memory => "memory",
        }
    }

    fn text(self, resources: &Resources) -> &str {
        match self {
            QuantityKind::Cpu => &resources.cpu,
            QuantityKind::Memory => &resources.memory,
        }
    }
}

/// Requests and limits of one container: a missing side copies the other; with neither, the
/// policy's `defaultCpu`/`defaultMemory`, else the runtime default, serves both.
fn resolve_amounts(
    defaults: &RuntimeDefaults,
    resources: &ResourceConstraints,
    container: &Container,
    index: usize,
    violations: &mut Vec<FieldViolation>,
) -> (ResourceAmounts, ResourceAmounts, ContainerSources) {
    let mut requests = ResourceAmounts::default();
    let mut limits = ResourceAmounts::default();
    let mut sources = ContainerSources::default();
    for kind in [QuantityKind::Cpu, QuantityKind::Memory] {
        let stated_request = stated_quantity(container, Side::Requests, kind, index, violations);
        let stated_limit = stated_quantity(container, Side::Limits, kind, index, violations);
        if let (Some(request), Some(limit)) = (&stated_request, &stated_limit)
            && request.value > limit.value
        {
            violations.push(FieldViolation::new(
                request.field.to_string(),
                format!("request {} exceeds limit {}", kind.format(request.value), kind.format(limit.value)),
            ));
        }
        let limit_declared = stated_limit.is_some();
        let (request_value, request_source, limit_value, limit_source) = match (stated_request, stated_limit) {
            (Some(request), Some(limit)) => (request.value, source(request.field), limit.value, source(limit.field)),
            (Some(only), None) | (None, Some(only)) => (only.value, source(only.field), only.value, source(only.field)),
            (None, None) => {
                let (value, note) = default_amount(defaults, resources, kind);
                let field = AmountField { container: index, side: Some(Side::Requests), leaf: kind.name() };
                let default_source = AmountSource { field, note };
                (value, default_source.clone(), value, default_source)
            }
        };
        match kind {
            QuantityKind::Cpu => {
                requests.cpu = Some(request_value);
                limits.cpu = Some(limit_value);
                sources.requests.cpu = Some(request_source);
                sources.limits.cpu = Some(limit_source);
                sources.cpu_limit_declared = limit_declared;
            }
            QuantityKind::Memory => {
                requests.memory = Some(request_value);
                limits.memory = Some(limit_value);
                sources.requests.memory = Some(request_source);
                sources.limits.memory = Some(limit_source);
                sources.memory_limit_declared = limit_declared;
            }
        }
    }
    let gpu_request = stated_gpus(container, Side::Requests, index, violations);
    let gpu_limit = stated_gpus(container, Side::Limits, index, violations);
    let gpu_request = gpu_request.or(gpu_limit);
    let gpu_limit = gpu_limit.or(gpu_request);
    requests.gpu = gpu_request.as_ref().map(|(count, _)| *count);
    limits.gpu = gpu_limit.as_ref().map(|(count, _)| *count);
    sources.requests.gpu = gpu_request.map(|(_, field)| source(field));
    sources.limits.gpu = gpu_limit.map(|(_, field)| source(field));
    (requests, limits, sources)
}

/// A stated amount's source: the field itself, no note.
fn source(field: AmountField) -> AmountSource {
    AmountSource { field, note: "" }
}

/// The default for a container that states nothing of `kind`, with the note that explains it.
fn default_amount(
    defaults: &RuntimeDefaults,
    resources: &ResourceConstraints,
    kind: QuantityKind,
) -> (Quantity, &'static str) {
    let (policy_text, policy_note, runtime_value, runtime_note) = match kind {
        QuantityKind::Cpu => (
            &resources.default_cpu,
            " (policy default constraints.resources.defaultCpu)",
            defaults.cpu_request,
            " (runtime default; the container states no cpu)",
        ),
        QuantityKind::Memory => (
            &resources.default_memory,
            " (policy default constraints.resources.defaultMemory)",
            defaults.memory_request,
            " (runtime default; the container states no memory)",
        ),
    };
    // The policy was validated, so a non-empty default parses; fall back to the runtime default
    // all the same rather than trusting that.
    match Quantity::parse(policy_text) {
        Ok(value) if !policy_text.is_empty() => (value, policy_note),
        _ => (runtime_value, runtime_note),
    }
}

impl QuantityKind {
    /// How amounts of this kind are shown to users.
    fn format(self, value: Quantity) -> String {
        match self {
            QuantityKind::Cpu => format_cpu(value),
            QuantityKind::Memory => format_memory(value),
        }
    }
}

/// Reads `runtimeClass` / `runtimeClassSelection`, refusing malformed or conflicting requests.
fn runtime_class_request(spec: &SandboxSpec, violations: &mut Vec<FieldViolation>) -> RuntimeClassRequest {
    let selection = match RuntimeClass::try_from(spec.runtime_class_selection) {
        Ok(selection) => selection,
        Err(_) => {
            violations.push(FieldViolation::new(
                "sandbox.spec.runtimeClassSelection",
                format!("unknown runtime class {}", spec.runtime_class_selection),
            ));
            RuntimeClass::Unspecified
        }
    };
    match (spec.runtime_class.is_empty(), selection) {
        (true, RuntimeClass::Unspecified) => RuntimeClassRequest::Unstated,
        (true, selection) => RuntimeClassRequest::BySelection(selection),
        (false, RuntimeClass::Unspecified) => {
            if let Some(problem) = dns1123_subdomain_problem(&spec.runtime_class) {
                violations.push(FieldViolation::new("sandbox.spec.runtimeClass", problem));
            }
            RuntimeClassRequest::ByName(spec.runtime_class.clone())
        }
        (false, _) => {
            violations.push(FieldViolation::new(
                "sandbox.spec.runtimeClassSelection",
                "runtimeClassSelection cannot be combined with runtimeClass; choose one",
            ));
            RuntimeClassRequest::ByName(spec.runtime_class.clone())
        }
    }
}

/// The Kubernetes RuntimeClass the Pod gets (`None`: the node's default runtime). Whether the
/// choice is allowed is the constraint stage's question; this only answers what it would be.
fn choose_runtime_class(
    request: &RuntimeClassRequest,
    security: Option<&SecurityConstraints>,
    resolved: &ResolvedSpec,
) -> Option<String> {
    let mapped = |class: RuntimeClass| -> Option<Option<String>> {
        let mapping = security?.runtime_class_mappings.iter().find(|mapping| mapping.runtime_class == class as i32)?;
        match &mapping.target {
            Some(Target::KubernetesRuntimeClassName(name)) => Some(Some(name.clone())),
            Some(Target::NodeDefault(_)) | None => Some(None),
        }
    };
    let uses_gpus = resolved
        .containers
        .iter()
        .any(|container| container.requests.gpu.unwrap_or(0) > 0 || container.limits.gpu.unwrap_or(0) > 0);
    // The policy's named default for a default class, else that class's mapping.
    let default_for = |class: RuntimeClass| {
        let configured = security.map(|security| match class {
            RuntimeClass::GpuDefault => &security.default_gpu_runtime_class,
            _ => &security.default_cpu_runtime_class,
        });
        match configured.filter(|name| !name.is_empty()) {
            Some(name) => Some(name.clone()),
            None => mapped(class).flatten(),
        }
    };
    match request {
        RuntimeClassRequest::ByName(name) => Some(name.clone()),
        RuntimeClassRequest::BySelection(class) => match (mapped(*class), class) {
            (Some(target), _) => target,
            (None, RuntimeClass::CpuDefault | RuntimeClass::GpuDefault) => default_for(*class),
            // Unmapped special classes are rejected by the constraint stage.
            (None, _) => None,
        },
        RuntimeClassRequest::Unstated => {
            default_for(if uses_gpus { RuntimeClass::GpuDefault } else { RuntimeClass::CpuDefault })
        }
    }
}
