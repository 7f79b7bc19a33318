//! `resolve`: the base stage (defaults, then `base`, then the sandbox) and the constraint stage
//! (docs/facts/policy.md#resolution). The `seed_…` and pinned-partition tests use the guide's
//! policies (docs/facts/sunk-guide.md#step-2, docs/facts/sunk-guide.md#pinned-annotations).

use std::collections::BTreeMap;

use cwsandbox_api::sandbox_v1::{DnsEgressMode, EgressRule, IngressRule, Policy, SandboxSpec};
use cwsandbox_sim::policy::{RuntimeDefaults, resolve};
use cwsandbox_sim::quantity::Quantity;
use cwsandbox_sim::resolved::{ResolvedSpec, Toleration};
use cwsandbox_sim::{Reason, SimError};
use serde_json::{Value, json};

fn policy(document: Value) -> Policy {
    serde_json::from_value(document).expect("test policy is valid proto3 JSON")
}

fn spec(document: Value) -> SandboxSpec {
    serde_json::from_value(document).expect("test spec is valid proto3 JSON")
}

fn quantity(text: &str) -> Quantity {
    Quantity::parse(text).expect("test quantity parses")
}

/// A one-container sandbox running `image` with the given extra spec fields.
fn sandbox(extra: Value) -> SandboxSpec {
    let mut document = json!({"containers": [{"image": "example.com/workload:stable"}]});
    if let (Some(target), Value::Object(fields)) = (document.as_object_mut(), extra) {
        target.extend(fields);
    }
    spec(document)
}

fn resolve_ok(policy_document: Option<Value>, spec: &SandboxSpec) -> ResolvedSpec {
    let policy = policy_document.map(policy);
    match resolve(&RuntimeDefaults::default(), policy.as_ref(), spec) {
        Ok(resolved) => resolved,
        Err(error) => panic!("expected the sandbox to resolve, got {error:?}"),
    }
}

/// The reason and (field, description) pairs of an INVALID_ARGUMENT rejection.
fn rejection(policy_document: Option<Value>, spec: &SandboxSpec) -> (Reason, Vec<(String, String)>) {
    let policy = policy_document.map(policy);
    match resolve(&RuntimeDefaults::default(), policy.as_ref(), spec).map_err(SimError::from) {
        Err(SimError::InvalidArgument { reason, violations, .. }) => {
            (reason, violations.into_iter().map(|violation| (violation.field, violation.description)).collect())
        }
        other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
    }
}

#[track_caller]
fn assert_rejected(policy_document: Value, spec: &SandboxSpec, reason: Reason, field: &str, description: &str) {
    assert_eq!(rejection(Some(policy_document), spec), (reason, vec![(field.to_owned(), description.to_owned())]));
}

fn constraints(value: Value) -> Value {
    json!({"constraints": value})
}

// ===== base stage =====

#[test]
fn runtime_defaults_apply_without_a_policy() {
    let resolved = resolve_ok(None, &sandbox(json!({})));
    let container = &resolved.containers[0];
    assert_eq!(container.name, "main");
    assert!(container.primary);
    assert_eq!(container.requests.cpu, Some(quantity("1")));
    assert_eq!(container.limits.cpu, Some(quantity("1")));
    assert_eq!(container.requests.memory, Some(quantity("1Gi")));
    assert_eq!(container.limits.memory, Some(quantity("1Gi")));
    assert_eq!(container.requests.gpu, None);
    assert_eq!(resolved.max_lifetime_seconds, 600);
    assert_eq!(resolved.scheduler_name, None);
    assert_eq!(resolved, resolve_ok(Some(json!({})), &sandbox(json!({}))), "no policy and the empty policy agree");
}

#[test]
fn runtime_defaults_are_one_cpu_one_gibibyte_and_ten_minutes() {
    let defaults = RuntimeDefaults::default();
    assert_eq!(
        (defaults.cpu_request, defaults.memory_request, defaults.lifetime_seconds),
        (quantity("1"), quantity("1Gi"), 600)
    );
}

#[test]
fn policy_defaults_beat_runtime_defaults() {
    let resolved = resolve_ok(
        Some(constraints(json!({"resources": {"defaultCpu": "250m", "defaultMemory": "512Mi"}}))),
        &sandbox(json!({})),
    );
    let container = &resolved.containers[0];
    assert_eq!((container.requests.cpu, container.limits.cpu), (Some(quantity("250m")), Some(quantity("250m"))));
    assert_eq!(
        (container.requests.memory, container.limits.memory),
        (Some(quantity("512Mi")), Some(quantity("512Mi")))
    );
}

#[test]
fn a_missing_side_copies_the_other() {
    let resolved = resolve_ok(
        None,
        &spec(json!({"containers": [{"image": "i", "resourceRequirements": {
            "requests": {"cpu": "500m"},
            "limits": {"memory": "2Gi"}
        }}]})),
    );
    let container = &resolved.containers[0];
    assert_eq!((container.requests.cpu, container.limits.cpu), (Some(quantity("500m")), Some(quantity("500m"))));
    assert_eq!((container.requests.memory, container.limits.memory), (Some(quantity("2Gi")), Some(quantity("2Gi"))));
}

#[test]
fn legacy_resources_serve_both_sides_and_yield_to_requirements() {
    let resolved = resolve_ok(
        None,
        &spec(
            json!({"containers": [{"image": "i", "resources": {"cpu": "2", "memory": "4Gi", "gpu": {"count": "1"}}}]}),
        ),
    );
    let container = &resolved.containers[0];
    assert_eq!((container.requests.cpu, container.limits.cpu), (Some(quantity("2")), Some(quantity("2"))));
    assert_eq!((container.requests.memory, container.limits.memory), (Some(quantity("4Gi")), Some(quantity("4Gi"))));
    assert_eq!((container.requests.gpu, container.limits.gpu), (Some(1), Some(1)));

    let resolved = resolve_ok(
        None,
        &spec(json!({"containers": [{"image": "i",
            "resources": {"cpu": "2"},
            "resourceRequirements": {"requests": {"cpu": "1"}, "limits": {"cpu": "3"}}
        }]})),
    );
    assert_eq!(
        (resolved.containers[0].requests.cpu, resolved.containers[0].limits.cpu),
        (Some(quantity("1")), Some(quantity("3")))
    );
}

#[test]
fn gpus_come_from_the_gpu_count() {
    let resolved = resolve_ok(
        None,
        &spec(
            json!({"containers": [{"image": "i", "resourceRequirements": {"limits": {"gpu": {"count": "2", "type": "H100"}}}}]}),
        ),
    );
    assert_eq!((resolved.containers[0].requests.gpu, resolved.containers[0].limits.gpu), (Some(2), Some(2)));
    assert_eq!(resolved.total_gpu_request(), 2);
}

#[test]
fn lifetime_explicit_then_policy_default_then_runtime_default() {
    let with_default = Some(constraints(json!({"lifecycle": {"defaultLifetimeSeconds": 86400}})));
    assert_eq!(
        resolve_ok(with_default.clone(), &sandbox(json!({"maxLifetimeSeconds": 120}))).max_lifetime_seconds,
        120
    );
    assert_eq!(resolve_ok(with_default, &sandbox(json!({}))).max_lifetime_seconds, 86400);
    assert_eq!(
        resolve_ok(Some(constraints(json!({"lifecycle": {"defaultLifetimeSeconds": 0}}))), &sandbox(json!({})))
            .max_lifetime_seconds,
        600
    );
    assert_eq!(resolve_ok(None, &sandbox(json!({"maxLifetimeSeconds": 2592000}))).max_lifetime_seconds, 2592000);
}

#[test]
fn lifetime_over_thirty_days_or_negative_is_refused() {
    for seconds in [2592001, -1] {
        assert_eq!(
            rejection(None, &sandbox(json!({"maxLifetimeSeconds": seconds}))),
            (
                Reason::InvalidRequest,
                vec![(
                    "sandbox.spec.maxLifetimeSeconds".to_owned(),
                    format!("maxLifetimeSeconds {seconds} must be between 0 and 2592000 (30 days)")
                )]
            )
        );
    }
}

#[test]
fn seed_scheduler_policy_routes_pods_to_slurm() {
    let resolved =
        resolve_ok(Some(json!({"base": {"spec": {"schedulerName": "slurm-scheduler"}}})), &sandbox(json!({})));
    assert_eq!(resolved.scheduler_name.as_deref(), Some("slurm-scheduler"));
    assert!(resolved.extra_pod_spec.is_empty(), "schedulerName is typed, not carried verbatim");
}

#[test]
fn pinned_partition_annotation_wins_over_the_sandbox() {
    let seed = json!({"base": {
        "metadata": {"annotations": {"sunk.coreweave.com/partition": "sandboxes"}},
        "spec": {"schedulerName": "slurm-scheduler"}
    }});
    let resolved = resolve_ok(
        Some(seed),
        &sandbox(json!({"annotations": {"sunk.coreweave.com/partition": "gpu-hogs", "example.com/owner": "alice"}})),
    );
    assert_eq!(
        resolved.annotations,
        BTreeMap::from([
            ("example.com/owner".to_owned(), "alice".to_owned()),
            ("sunk.coreweave.com/partition".to_owned(), "sandboxes".to_owned()),
        ])
    );
    assert_eq!(resolved.scheduler_name.as_deref(), Some("slurm-scheduler"));
}

#[test]
fn base_attachments_always_apply() {
    let resolved = resolve_ok(
        Some(json!({"base": {
            "metadata": {"labels": {"team": "platform"}},
            "spec": {
                "nodeSelector": {"node.coreweave.cloud/class": "cpu"},
                "tolerations": [{"key": "dedicated", "value": "sandbox", "effect": "NoSchedule"}, {"operator": "Exists"}],
                "priorityClassName": "sandbox-low",
                "serviceAccountName": "sandbox",
                "dnsPolicy": "ClusterFirst",
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [
                        {"key": "zone", "operator": "In", "values": ["a", "b"]},
                        {"key": "zone", "operator": "In", "values": ["b", "c"]},
                        {"key": "pool", "operator": "In", "values": ["cpu"]}
                    ]},
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["spare"]}]}
                ]}}}
            }
        }})),
        &sandbox(json!({})),
    );
    assert_eq!(resolved.labels, BTreeMap::from([("team".to_owned(), "platform".to_owned())]));
    assert_eq!(resolved.node_selector, BTreeMap::from([("node.coreweave.cloud/class".to_owned(), "cpu".to_owned())]));
    assert_eq!(
        resolved.tolerations,
        vec![
            Toleration {
                key: "dedicated".into(),
                operator: "Equal".into(),
                value: "sandbox".into(),
                effect: "NoSchedule".into()
            },
            Toleration { key: String::new(), operator: "Exists".into(), value: String::new(), effect: String::new() },
        ]
    );
    assert_eq!(resolved.priority_class_name.as_deref(), Some("sandbox-low"));
    assert_eq!(
        resolved.required_node_affinity,
        vec![
            BTreeMap::from([("pool".to_owned(), vec!["cpu".to_owned()]), ("zone".to_owned(), vec!["b".to_owned()])]),
            BTreeMap::from([("pool".to_owned(), vec!["spare".to_owned()])]),
        ],
        "expressions of one term are ANDed, terms are ORed"
    );
    assert_eq!(
        resolved.extra_pod_spec.keys().collect::<Vec<_>>(),
        ["affinity", "dnsPolicy", "serviceAccountName"],
        "untyped keys (and the whole affinity) are carried verbatim"
    );
    assert_eq!(resolved.extra_pod_spec["serviceAccountName"], json!("sandbox"));
}

#[test]
fn base_container_env_merges_by_name_and_the_sandbox_wins() {
    let resolved = resolve_ok(
        Some(json!({"base": {"spec": {"containers": [
            {"env": [{"name": "HTTP_PROXY", "value": "http://proxy:3128"}, {"name": "MODE", "value": "base"}]},
            {"name": "sidecar", "env": [{"name": "ROLE", "value": "sidecar"}, {"name": "MODE", "value": "sidecar-base"}]}
        ]}}})),
        &spec(json!({"containers": [
            {"name": "app", "image": "i", "environmentVariables": {"MODE": "mine"}},
            {"name": "sidecar", "image": "i"}
        ]})),
    );
    let env = |index: usize| resolved.containers[index].env.clone();
    let expect = |pairs: &[(&str, &str)]| {
        pairs.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect::<BTreeMap<_, _>>()
    };
    assert_eq!(env(0), expect(&[("HTTP_PROXY", "http://proxy:3128"), ("MODE", "mine")]));
    assert_eq!(env(1), expect(&[("HTTP_PROXY", "http://proxy:3128"), ("MODE", "sidecar-base"), ("ROLE", "sidecar")]));
    assert!(resolved.containers[0].primary && !resolved.containers[1].primary);
}

#[test]
fn explicit_primary_container_is_kept() {
    let resolved = resolve_ok(
        None,
        &spec(json!({"containers": [{"name": "a", "image": "i"}, {"name": "b", "image": "i", "primary": true}]})),
    );
    assert_eq!(resolved.containers.iter().map(|container| container.primary).collect::<Vec<_>>(), [false, true]);
}

#[test]
fn network_falls_back_to_policy_defaults() {
    let document = constraints(json!({"network": {
        "defaultEgress": [{"cidr": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}],
        "defaultIngress": [{"tenant": "TENANT_SCOPE_SAME_USER"}],
        "dnsEgress": "DNS_EGRESS_MODE_DENY"
    }}));
    let resolved = resolve_ok(Some(document.clone()), &sandbox(json!({})));
    let expected_egress: Vec<EgressRule> =
        serde_json::from_value(json!([{"cidr": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}])).expect("rules");
    let expected_ingress: Vec<IngressRule> =
        serde_json::from_value(json!([{"tenant": "TENANT_SCOPE_SAME_USER"}])).expect("rules");
    assert_eq!(resolved.egress, expected_egress);
    assert_eq!(resolved.ingress, expected_ingress);
    assert_eq!(resolved.dns_egress, DnsEgressMode::Deny);

    let own =
        sandbox(json!({"network": {"egress": [{"httpsHostname": "pypi.org"}], "dnsEgress": "DNS_EGRESS_MODE_ALLOW"}}));
    let resolved = resolve_ok(Some(document), &own);
    let expected_egress: Vec<EgressRule> =
        serde_json::from_value(json!([{"httpsHostname": "pypi.org"}])).expect("rules");
    assert_eq!(resolved.egress, expected_egress);
    assert_eq!(resolved.ingress, expected_ingress, "ingress still defaults: the sandbox declared none");
    assert_eq!(resolved.dns_egress, DnsEgressMode::Allow);
}

#[test]
fn invalid_sandbox_annotation_keys_are_refused() {
    assert_eq!(
        rejection(None, &sandbox(json!({"annotations": {"bad key": "v", "ok.example.com/fine": "v"}}))),
        (
            Reason::InvalidRequest,
            vec![(
                "sandbox.spec.annotations[\"bad key\"]".to_owned(),
                "\"bad key\" is not a valid qualified name (an optional DNS subdomain prefix and '/', then at most 63 \
                 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
                    .to_owned()
            )]
        )
    );
}

#[test]
fn malformed_sandbox_input_is_an_invalid_request() {
    let (reason, violations) = rejection(
        None,
        &spec(json!({
            "containers": [
                {"image": "i", "resourceRequirements": {"requests": {"cpu": "4"}, "limits": {"cpu": "2", "memory": "lots"}}},
                {"image": "i"}
            ],
            "network": {"egress": [{"httpsHostname": "*"}]},
            "runtimeClass": "kata",
            "runtimeClassSelection": "RUNTIME_CLASS_CPU_DEFAULT"
        })),
    );
    assert_eq!(reason, Reason::InvalidRequest);
    assert_eq!(
        violations,
        [
            ("sandbox.spec.containers[0].name", "a name is required when the sandbox has more than one container"),
            ("sandbox.spec.containers[0].resourceRequirements.requests.cpu", "request 4 exceeds limit 2"),
            ("sandbox.spec.containers[0].resourceRequirements.limits.memory", "invalid quantity \"lots\": no number"),
            ("sandbox.spec.containers[1].name", "a name is required when the sandbox has more than one container"),
            ("sandbox.spec.network.egress[0].httpsHostname", "\"*\" is allowed only in a policy's allowedEgress"),
            (
                "sandbox.spec.runtimeClassSelection",
                "runtimeClassSelection cannot be combined with runtimeClass; choose one"
            ),
        ]
        .map(|(field, description)| (field.to_owned(), description.to_owned()))
    );
}

#[test]
fn a_sandbox_needs_a_container() {
    assert_eq!(
        rejection(None, &spec(json!({}))),
        (
            Reason::InvalidRequest,
            vec![("sandbox.spec.containers".to_owned(), "at least one container is required".to_owned())]
        )
    );
}

#[test]
fn an_invalid_stored_policy_is_a_failed_precondition() {
    let stored = policy(json!({"base": {"spec": {"hostPID": true}}}));
    match resolve(&RuntimeDefaults::default(), Some(&stored), &sandbox(json!({}))).map_err(SimError::from) {
        Err(SimError::FailedPrecondition { reason, message }) => {
            assert_eq!(reason, Reason::PreconditionFailed);
            assert!(message.ends_with("policy.base.spec.hostPID: field is managed by the platform"), "{message}");
        }
        other => panic!("expected FAILED_PRECONDITION, got {other:?}"),
    }
}

// ===== constraint stage =====

#[test]
fn cpu_over_the_maximum_is_rejected_naming_field_and_constraint() {
    assert_rejected(
        constraints(json!({"resources": {"maxCpu": "2"}})),
        &spec(json!({"containers": [{"image": "i", "resourceRequirements": {"requests": {"cpu": "4"}}}]})),
        Reason::PlacementRejected,
        "sandbox.spec.containers[0].resourceRequirements.requests.cpu",
        "4 exceeds policy constraints.resources.maxCpu 2",
    );
}

#[test]
fn each_stated_side_over_the_maximum_is_its_own_violation() {
    let (_, violations) = rejection(
        Some(constraints(json!({"resources": {"maxCpu": "2"}}))),
        &spec(
            json!({"containers": [{"image": "i", "resourceRequirements": {"requests": {"cpu": "4"}, "limits": {"cpu": "4"}}}]}),
        ),
    );
    assert_eq!(
        violations.into_iter().map(|(field, _)| field).collect::<Vec<_>>(),
        [
            "sandbox.spec.containers[0].resourceRequirements.requests.cpu",
            "sandbox.spec.containers[0].resourceRequirements.limits.cpu"
        ]
    );
}

#[test]
fn limits_are_bounded_too() {
    assert_rejected(
        constraints(json!({"resources": {"maxCpu": "2"}})),
        &spec(
            json!({"containers": [{"image": "i", "resourceRequirements": {"requests": {"cpu": "1"}, "limits": {"cpu": "3"}}}]}),
        ),
        Reason::PlacementRejected,
        "sandbox.spec.containers[0].resourceRequirements.limits.cpu",
        "3 exceeds policy constraints.resources.maxCpu 2",
    );
}

#[test]
fn a_value_copied_to_both_sides_is_reported_once_at_its_source() {
    assert_rejected(
        constraints(json!({"resources": {"minMemory": "1Gi"}})),
        &spec(json!({"containers": [{"image": "i", "resources": {"memory": "512Mi"}}]})),
        Reason::PlacementRejected,
        "sandbox.spec.containers[0].resources.memory",
        "512Mi is below policy constraints.resources.minMemory 1Gi",
    );
}

#[test]
fn a_runtime_default_outside_the_policy_bounds_is_explained() {
    assert_rejected(
        constraints(json!({"resources": {"maxCpu": "500m"}})),
        &sandbox(json!({})),
        Reason::PlacementRejected,
        "sandbox.spec.containers[0].resourceRequirements.requests.cpu",
        "1 (runtime default; the container states no cpu) exceeds policy constraints.resources.maxCpu 500m",
    );
    resolve_ok(Some(constraints(json!({"resources": {"maxCpu": "500m", "defaultCpu": "500m"}}))), &sandbox(json!({})));
}

#[test]
fn require_limits_asks_for_declared_limits() {
    let (reason, violations) = rejection(
        Some(constraints(json!({"resources": {"requireLimits": true}}))),
        &spec(
            json!({"containers": [{"image": "i", "resourceRequirements": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1"}}}]}),
        ),
    );
    assert_eq!(reason, Reason::PlacementRejected);
    assert_eq!(
        violations,
        [(
            "sandbox.spec.containers[0].resourceRequirements.limits.memory".to_owned(),
            "a memory limit is required by policy constraints.resources.requireLimits".to_owned()
        )]
    );
    resolve_ok(
        Some(constraints(json!({"resources": {"requireLimits": true}}))),
        &spec(
            json!({"containers": [{"image": "i", "resourceRequirements": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}),
        ),
    );
}

#[test]
fn gpu_cap_zero_forbids_gpus() {
    let gpu_sandbox = spec(json!({"containers": [{"image": "i", "resources": {"gpu": {"count": "1"}}}]}));
    assert_rejected(
        constraints(json!({"resources": {"maxGpuCount": 0}})),
        &gpu_sandbox,
        Reason::PlacementRejected,
        "sandbox.spec.containers[0].resources.gpu.count",
        "1 exceeds policy constraints.resources.maxGpuCount 0",
    );
    resolve_ok(Some(constraints(json!({"resources": {"maxGpuCount": 1}}))), &gpu_sandbox);
    resolve_ok(Some(constraints(json!({"resources": {"maxGpuCount": 0}}))), &sandbox(json!({})));
}

#[test]
fn ceilings_alone_get_their_own_reason() {
    let two_containers = spec(json!({"containers": [
        {"name": "a", "image": "i", "resources": {"cpu": "2", "memory": "3Gi"}},
        {"name": "b", "image": "i", "resources": {"cpu": "3", "memory": "3Gi"}}
    ]}));
    assert_eq!(
        rejection(
            Some(constraints(json!({"resources": {"cpuCeiling": "4", "memoryCeiling": "8Gi"}}))),
            &two_containers
        ),
        (
            Reason::ResourceCeilingExceeded,
            vec![(
                "sandbox.spec.containers".to_owned(),
                "total cpu requests 5 exceed policy constraints.resources.cpuCeiling 4".to_owned()
            )]
        )
    );
    let (reason, violations) = rejection(
        Some(constraints(json!({"resources": {"cpuCeiling": "4", "memoryCeiling": "4Gi", "maxCpu": "2"}}))),
        &two_containers,
    );
    assert_eq!(
        reason,
        Reason::PlacementRejected,
        "a ceiling mixed with other violations is a plain placement rejection"
    );
    assert_eq!(
        violations.into_iter().map(|(_, description)| description).collect::<Vec<_>>(),
        [
            "3 exceeds policy constraints.resources.maxCpu 2",
            "total cpu requests 5 exceed policy constraints.resources.cpuCeiling 4",
            "total memory requests 6Gi exceed policy constraints.resources.memoryCeiling 4Gi",
        ]
    );
    resolve_ok(Some(constraints(json!({"resources": {"cpuCeiling": "5", "memoryCeiling": "6Gi"}}))), &two_containers);
}

#[test]
fn images_must_come_from_allowed_registries_and_list() {
    let registries = constraints(json!({"image": {"allowedRegistries": ["registry.example.com/"]}}));
    resolve_ok(Some(registries.clone()), &spec(json!({"containers": [{"image": "registry.example.com/team/app:1"}]})));
    assert_rejected(
        registries,
        &spec(json!({"containers": [{"image": "docker.io/library/python:3.12"}]})),
        Reason::PlacementRejected,
        "sandbox.spec.containers[0].image",
        "image \"docker.io/library/python:3.12\" is not from a registry in policy constraints.image.allowedRegistries",
    );
    let images = constraints(json!({"image": {"allowedImages": ["python:3.12"]}}));
    resolve_ok(Some(images.clone()), &spec(json!({"containers": [{"image": "python:3.12"}]})));
    assert_rejected(
        images,
        &spec(json!({"containers": [{"image": "python:3.13"}]})),
        Reason::PlacementRejected,
        "sandbox.spec.containers[0].image",
        "image \"python:3.13\" is not in policy constraints.image.allowedImages",
    );
}

#[test]
fn instance_types_must_be_allowed() {
    let document = constraints(json!({"instance": {"allowedInstanceTypes": ["cd-gp-i64-erapids"]}}));
    resolve_ok(Some(document.clone()), &sandbox(json!({"instanceType": "cd-gp-i64-erapids"})));
    resolve_ok(Some(document.clone()), &sandbox(json!({})));
    assert_rejected(
        document,
        &sandbox(json!({"instanceType": "gd-8xh100ib-i128"})),
        Reason::PlacementRejected,
        "sandbox.spec.instanceType",
        "instance type \"gd-8xh100ib-i128\" is not in policy constraints.instance.allowedInstanceTypes",
    );
}

#[test]
fn annotation_prefixes_and_count_are_limited() {
    let document = constraints(
        json!({"metadata": {"deniedAnnotationPrefixes": ["internal.example.com/"], "maxAnnotationCount": 2}}),
    );
    resolve_ok(Some(document.clone()), &sandbox(json!({"annotations": {"a": "1", "b": "2"}})));
    assert_rejected(
        document.clone(),
        &sandbox(json!({"annotations": {"internal.example.com/cost-center": "x"}})),
        Reason::PlacementRejected,
        "sandbox.spec.annotations[\"internal.example.com/cost-center\"]",
        "prefix \"internal.example.com/\" is denied by policy constraints.metadata.deniedAnnotationPrefixes",
    );
    assert_rejected(
        document,
        &sandbox(json!({"annotations": {"a": "1", "b": "2", "c": "3"}})),
        Reason::PlacementRejected,
        "sandbox.spec.annotations",
        "3 annotations exceed policy constraints.metadata.maxAnnotationCount 2",
    );
}

#[test]
fn pinned_annotations_do_not_count_against_the_sandbox() {
    resolve_ok(
        Some(json!({
            "base": {"metadata": {"annotations": {"internal.example.com/pinned": "1", "x": "2", "y": "3"}}},
            "constraints": {"metadata": {"deniedAnnotationPrefixes": ["internal.example.com/"], "maxAnnotationCount": 1}}
        })),
        &sandbox(json!({"annotations": {"mine": "1"}})),
    );
}

#[test]
fn privileged_capabilities_and_seccomp_fail_closed() {
    let document = constraints(
        json!({"security": {"allowedCapabilities": ["NET_ADMIN"], "allowedSeccompProfiles": ["RuntimeDefault"]}}),
    );
    resolve_ok(
        Some(document.clone()),
        &spec(
            json!({"containers": [{"image": "i", "securityContext": {"capabilitiesAdd": ["CAP_NET_ADMIN"], "seccompProfile": "RuntimeDefault"}}]}),
        ),
    );
    let (reason, violations) = rejection(
        Some(document),
        &spec(json!({"containers": [{"image": "i", "securityContext": {
            "privileged": true, "capabilitiesAdd": ["NET_ADMIN", "SYS_ADMIN"], "seccompProfile": "Unconfined"
        }}]})),
    );
    assert_eq!(reason, Reason::PlacementRejected);
    assert_eq!(
        violations,
        [
            (
                "sandbox.spec.containers[0].securityContext.privileged",
                "privileged containers are not allowed by policy constraints.security.allowPrivileged"
            ),
            (
                "sandbox.spec.containers[0].securityContext.capabilitiesAdd[1]",
                "capability SYS_ADMIN is not in policy constraints.security.allowedCapabilities"
            ),
            (
                "sandbox.spec.containers[0].securityContext.seccompProfile",
                "seccomp profile Unconfined is not in policy constraints.security.allowedSeccompProfiles"
            ),
        ]
        .map(|(field, description)| (field.to_owned(), description.to_owned()))
    );
    resolve_ok(
        Some(constraints(json!({"security": {"allowPrivileged": true}}))),
        &spec(json!({"containers": [{"image": "i", "securityContext": {"privileged": true}}]})),
    );
}

#[test]
fn runtime_class_by_name_needs_the_allowlist() {
    let document = constraints(
        json!({"security": {"allowedRuntimeClasses": ["kata", "kata-nvidia"], "defaultCpuRuntimeClass": "kata", "defaultGpuRuntimeClass": "kata-nvidia"}}),
    );
    assert_eq!(
        resolve_ok(Some(document.clone()), &sandbox(json!({"runtimeClass": "kata-nvidia"}))).runtime_class.as_deref(),
        Some("kata-nvidia")
    );
    assert_eq!(
        resolve_ok(Some(document.clone()), &sandbox(json!({}))).runtime_class.as_deref(),
        Some("kata"),
        "CPU default"
    );
    assert_eq!(
        resolve_ok(
            Some(document.clone()),
            &spec(json!({"containers": [{"image": "i", "resources": {"gpu": {"count": "1"}}}]}))
        )
        .runtime_class
        .as_deref(),
        Some("kata-nvidia"),
        "GPU default"
    );
    assert_rejected(
        document,
        &sandbox(json!({"runtimeClass": "gvisor"})),
        Reason::PlacementRejected,
        "sandbox.spec.runtimeClass",
        "runtime class gvisor is not in policy constraints.security.allowedRuntimeClasses",
    );
    assert_rejected(
        json!({}),
        &sandbox(json!({"runtimeClass": "kata"})),
        Reason::PlacementRejected,
        "sandbox.spec.runtimeClass",
        "runtime class kata cannot be chosen: policy constraints.security.allowedRuntimeClasses is empty",
    );
}

#[test]
fn runtime_class_selection_uses_mappings() {
    let document = constraints(json!({"security": {"runtimeClassMappings": [
        {"runtimeClass": "RUNTIME_CLASS_CPU_NESTED_VIRT", "kubernetesRuntimeClassName": "kata"},
        {"runtimeClass": "RUNTIME_CLASS_CPU_DEFAULT", "nodeDefault": true}
    ]}}));
    let chosen = |selection: &str| {
        resolve_ok(Some(document.clone()), &sandbox(json!({"runtimeClassSelection": selection}))).runtime_class
    };
    assert_eq!(chosen("RUNTIME_CLASS_CPU_NESTED_VIRT").as_deref(), Some("kata"));
    assert_eq!(chosen("RUNTIME_CLASS_CPU_DEFAULT"), None, "nodeDefault: no RuntimeClass on the Pod");
    assert_rejected(
        document,
        &sandbox(json!({"runtimeClassSelection": "RUNTIME_CLASS_CPU_SNAPSHOT_RESTORE"})),
        Reason::PlacementRejected,
        "sandbox.spec.runtimeClassSelection",
        "RUNTIME_CLASS_CPU_SNAPSHOT_RESTORE has no mapping in policy constraints.security.runtimeClassMappings",
    );
}

// ----- network envelope -----

fn egress_envelope(allowed: Value) -> Value {
    constraints(json!({"network": {"allowedEgress": allowed}}))
}

fn declaring_egress(rule: Value) -> SandboxSpec {
    sandbox(json!({"network": {"egress": [rule]}}))
}

#[track_caller]
fn assert_egress_fits(allowed: Value, rule: Value) {
    resolve_ok(Some(egress_envelope(allowed)), &declaring_egress(rule));
}

#[track_caller]
fn assert_egress_outside(allowed: Value, rule: Value) {
    assert_rejected(
        egress_envelope(allowed),
        &declaring_egress(rule),
        Reason::PlacementRejected,
        "sandbox.spec.network.egress[0]",
        "rule is not within any rule of policy constraints.network.allowedEgress",
    );
}

#[test]
fn an_empty_envelope_restricts_nothing() {
    resolve_ok(
        Some(constraints(json!({"network": {"defaultEgress": [{"any": true}]}}))),
        &declaring_egress(json!({"any": true})),
    );
}

#[test]
fn cidr_rules_fit_inside_cidr_minus_holes() {
    let allowed = json!([{"cidr": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32", "10.0.0.0/8"]}}]);
    assert_egress_fits(allowed.clone(), json!({"cidr": {"cidr": "203.0.113.0/24"}}));
    assert_egress_outside(allowed.clone(), json!({"cidr": {"cidr": "10.1.0.0/16"}}));
    assert_egress_outside(allowed.clone(), json!({"cidr": {"cidr": "169.254.0.0/16"}}));
    assert_egress_fits(allowed.clone(), json!({"cidr": {"cidr": "169.254.0.0/16", "except": ["169.254.169.0/24"]}}));
    assert_egress_fits(
        allowed.clone(),
        json!({"cidr": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/9", "10.128.0.0/9", "169.254.169.254/32"]}}),
    );
    assert_egress_outside(allowed, json!({"cidr": {"cidr": "2001:db8::/32"}}));
}

#[test]
fn ports_must_fit() {
    let allowed = json!([{"any": true, "ports": [{"port": 443}, {"port": 8000, "endPort": 8080}]}]);
    assert_egress_fits(
        allowed.clone(),
        json!({"cidr": {"cidr": "198.51.100.0/24"}, "ports": [{"port": 8000, "endPort": 8010}]}),
    );
    assert_egress_fits(allowed.clone(), json!({"httpsHostname": "pypi.org"}));
    assert_egress_outside(allowed.clone(), json!({"cidr": {"cidr": "198.51.100.0/24"}}));
    assert_egress_outside(allowed.clone(), json!({"any": true, "ports": [{"port": 443, "protocol": "UDP"}]}));
    assert_egress_outside(allowed, json!({"any": true, "ports": [{"port": 8000, "endPort": 8081}]}));
}

#[test]
fn peer_kinds() {
    assert_egress_fits(json!([{"any": true}]), json!({"any": true}));
    assert_egress_outside(json!([{"cidr": {"cidr": "0.0.0.0/0"}}]), json!({"any": true}));
    assert_egress_fits(json!([{"tenant": "TENANT_SCOPE_SAME_ORG"}]), json!({"tenant": "TENANT_SCOPE_SAME_ORG"}));
    assert_egress_outside(json!([{"tenant": "TENANT_SCOPE_SAME_ORG"}]), json!({"tenant": "TENANT_SCOPE_SAME_USER"}));
    assert_egress_outside(json!([{"any": true}]), json!({"tenant": "TENANT_SCOPE_SAME_ORG"}));
    let selector = json!([{"selector": {"podLabels": {"app": "database"}, "namespaceLabels": {"team": "platform"}}}]);
    assert_egress_fits(
        selector.clone(),
        json!({"selector": {"podLabels": {"app": "database", "tier": "primary"}, "namespaceLabels": {"team": "platform"}}}),
    );
    assert_egress_outside(
        selector.clone(),
        json!({"selector": {"podLabels": {"app": "cache"}, "namespaceLabels": {"team": "platform"}}}),
    );
    assert_egress_outside(selector, json!({"selector": {"podLabels": {"app": "database"}}}));
}

#[test]
fn hostname_rules_fit_by_pattern() {
    assert_egress_fits(json!([{"httpsHostname": "*"}]), json!({"httpsHostname": "*.example.com"}));
    assert_egress_fits(json!([{"httpsHostname": "*.example.com"}]), json!({"httpsHostname": "api.example.com"}));
    assert_egress_fits(json!([{"httpsHostname": "pypi.org"}]), json!({"httpsHostname": "PyPI.org"}));
    assert_egress_outside(json!([{"httpsHostname": "*.example.com"}]), json!({"httpsHostname": "a.b.example.com"}));
    assert_egress_outside(json!([{"httpsHostname": "*.example.com"}]), json!({"httpsHostname": "example.com"}));
    let carved = json!([{"httpsHostname": "*", "httpsHostnameExcept": ["blocked.example.com"]}]);
    assert_egress_outside(carved.clone(), json!({"httpsHostname": "blocked.example.com"}));
    assert_egress_outside(carved.clone(), json!({"httpsHostname": "*.example.com"}));
    assert_egress_fits(
        carved.clone(),
        json!({"httpsHostname": "*.example.com", "httpsHostnameExcept": ["blocked.example.com"]}),
    );
    assert_egress_fits(carved, json!({"httpsHostname": "ok.example.com"}));
    assert_egress_outside(json!([{"cidr": {"cidr": "0.0.0.0/0"}}]), json!({"httpsHostname": "pypi.org"}));
}

#[test]
fn deny_https_hostname_rules_refuses_declared_hostname_grants() {
    assert_rejected(
        constraints(json!({"network": {"denyHttpsHostnameRules": true}})),
        &declaring_egress(json!({"httpsHostname": "pypi.org"})),
        Reason::PlacementRejected,
        "sandbox.spec.network.egress[0].httpsHostname",
        "hostname rules are forbidden by policy constraints.network.denyHttpsHostnameRules",
    );
}

#[test]
fn ingress_rules_fit_the_ingress_envelope() {
    let document = constraints(
        json!({"network": {"allowedIngress": [{"cidr": {"cidr": "10.0.0.0/8"}, "ports": [{"port": 8080}]}]}}),
    );
    resolve_ok(
        Some(document.clone()),
        &sandbox(json!({"network": {"ingress": [{"cidr": {"cidr": "10.2.0.0/16"}, "ports": [{"port": 8080}]}]}})),
    );
    assert_rejected(
        document,
        &sandbox(json!({"network": {"ingress": [{"any": true, "ports": [{"port": 8080}]}]}})),
        Reason::PlacementRejected,
        "sandbox.spec.network.ingress[0]",
        "rule is not within any rule of policy constraints.network.allowedIngress",
    );
}

#[test]
fn scratch_volumes_respect_size_and_media() {
    let document = constraints(json!({"volumes": {"maxSize": "100Gi", "allowedMedia": ["STORAGE_MEDIUM_DISK"]}}));
    resolve_ok(
        Some(document.clone()),
        &sandbox(
            json!({"volumes": [{"name": "scratch", "scratch": {"size": "100Gi", "medium": "STORAGE_MEDIUM_DISK"}}]}),
        ),
    );
    let (reason, violations) = rejection(
        Some(document),
        &sandbox(
            json!({"volumes": [{"name": "scratch", "scratch": {"size": "200Gi", "medium": "STORAGE_MEDIUM_MEMORY"}}]}),
        ),
    );
    assert_eq!(reason, Reason::PlacementRejected);
    assert_eq!(
        violations,
        [
            ("sandbox.spec.volumes[0].scratch.size", "200Gi exceeds policy constraints.volumes.maxSize 100Gi"),
            (
                "sandbox.spec.volumes[0].scratch.medium",
                "STORAGE_MEDIUM_MEMORY is not in policy constraints.volumes.allowedMedia"
            ),
        ]
        .map(|(field, description)| (field.to_owned(), description.to_owned()))
    );
}

// ----- the Terraform policy end to end -----

#[test]
fn terraform_policy_admits_a_conforming_sandbox_and_lists_every_violation_of_another() {
    let terraform = json!({
        "base": {"metadata": {"labels": {"team": "platform"}}},
        "constraints": {
            "resources": {"maxCpu": "8", "maxMemory": "32Gi", "minCpu": "100m", "minMemory": "128Mi", "defaultCpu": "1",
                          "defaultMemory": "1Gi", "maxGpuCount": "0", "cpuCeiling": "16", "memoryCeiling": "64Gi", "requireLimits": true},
            "image": {"allowedRegistries": ["example.com/"], "allowedImages": ["example.com/workload:stable"]},
            "instance": {"allowedInstanceTypes": ["cd-gp-i64-erapids"]},
            "lifecycle": {"defaultLifetimeSeconds": 3600},
            "security": {"allowPrivileged": true, "allowedRuntimeClasses": ["kata", "kata-nvidia"],
                         "defaultCpuRuntimeClass": "kata", "defaultGpuRuntimeClass": "kata-nvidia"}
        }
    });
    let conforming = spec(json!({"containers": [{"image": "example.com/workload:stable",
        "resourceRequirements": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}}}]}));
    let resolved = resolve_ok(Some(terraform.clone()), &conforming);
    assert_eq!(resolved.max_lifetime_seconds, 3600);
    assert_eq!(resolved.runtime_class.as_deref(), Some("kata"));
    assert_eq!(resolved.labels, BTreeMap::from([("team".to_owned(), "platform".to_owned())]));

    let (reason, violations) = rejection(
        Some(terraform),
        &spec(json!({"instanceType": "gd-8xh100ib-i128", "containers": [{"image": "docker.io/python:3.12",
            "resourceRequirements": {"requests": {"cpu": "12"}, "limits": {"gpu": {"count": "1"}}}}]})),
    );
    assert_eq!(reason, Reason::PlacementRejected);
    assert_eq!(
        violations.into_iter().map(|(field, _)| field).collect::<Vec<_>>(),
        [
            "sandbox.spec.containers[0].resourceRequirements.requests.cpu",
            "sandbox.spec.containers[0].resourceRequirements.limits.gpu.count",
            "sandbox.spec.containers[0].resourceRequirements.limits.cpu",
            "sandbox.spec.containers[0].resourceRequirements.limits.memory",
            "sandbox.spec.containers[0].image",
            "sandbox.spec.containers[0].image",
            "sandbox.spec.instanceType",
        ]
    );
}
