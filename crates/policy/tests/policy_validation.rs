//! `validate_policy`: every rule with a passing and a failing case, exact paths and descriptions.
//! The rules are docs/facts/policy.md#constraints and docs/facts/policy.md#rule-constraints; what
//! `base` may hold is the emulator's choice (docs/facts/runner-api.md#gap-7).

use cwsandbox_api::sandbox_v1::Policy;
use cwsandbox_policy::FieldViolation;
use cwsandbox_policy::{BASE_SCHEMA, MANAGED_BY_PLATFORM, NOT_ALLOWED_IN_BASE, validate_policy};
use serde_json::{Value, json};

fn policy(document: Value) -> Policy {
    serde_json::from_value(document).expect("test policy is valid proto3 JSON")
}

fn problems(document: Value) -> Vec<(String, String)> {
    validate_policy(&policy(document))
        .into_iter()
        .map(|FieldViolation { field, description }| (field, description))
        .collect()
}

#[track_caller]
fn assert_valid(document: Value) {
    assert_eq!(problems(document), Vec::<(String, String)>::new());
}

#[track_caller]
fn assert_single(document: Value, field: &str, description: &str) {
    assert_eq!(problems(document), vec![(field.to_owned(), description.to_owned())]);
}

/// Only the field paths, for rules whose wording is tested elsewhere.
fn fields(document: Value) -> Vec<String> {
    problems(document).into_iter().map(|(field, _)| field).collect()
}

/// The Terraform provider's acceptance-test policy (testdata/managed_runner.tf), translated to
/// proto3 JSON with the current field names (`httpsHostname` for the legacy `dns_name`).
fn terraform_policy() -> Value {
    json!({
        "displayName": "Development policy",
        "base": {"metadata": {"labels": {"team": "platform"}}},
        "constraints": {
            "resources": {
                "maxCpu": "8", "maxMemory": "32Gi", "minCpu": "100m", "minMemory": "128Mi",
                "defaultCpu": "1", "defaultMemory": "1Gi", "maxGpuCount": "0",
                "cpuCeiling": "16", "memoryCeiling": "64Gi", "requireLimits": true
            },
            "image": {"allowedRegistries": ["example.com/"], "allowedImages": ["example.com/workload:stable"]},
            "network": {
                "allowedEgress": [
                    {"any": true, "ports": [{"protocol": "TCP", "port": 443, "endPort": 443}]},
                    {"cidr": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}},
                    {"httpsHostname": "*", "httpsHostnameExcept": ["blocked.example.com"]},
                    {"tenant": "TENANT_SCOPE_SAME_ORG"},
                    {"selector": {"podLabels": {"app": "database"}, "namespaceLabels": {"team": "platform"}}}
                ],
                "defaultEgress": [{"any": true, "ports": [{"protocol": "TCP", "port": 443}]}],
                "denyHttpsHostnameRules": false,
                "allowedIngress": [{"any": true}, {"cidr": {"cidr": "10.0.0.0/8"}}],
                "defaultIngress": [{"tenant": "TENANT_SCOPE_SAME_USER"}]
            },
            "security": {
                "allowPrivileged": true,
                "allowedCapabilities": ["NET_ADMIN"],
                "allowedSeccompProfiles": ["RuntimeDefault"],
                "allowedRuntimeClasses": ["kata", "kata-nvidia"],
                "defaultCpuRuntimeClass": "kata",
                "defaultGpuRuntimeClass": "kata-nvidia"
            },
            "instance": {"allowedInstanceTypes": ["cd-gp-i64-erapids"]},
            "lifecycle": {"defaultLifetimeSeconds": 3600},
            "metadata": {"deniedAnnotationPrefixes": ["internal.example.com/"], "maxAnnotationCount": 20},
            "volumes": {"allowedMedia": ["STORAGE_MEDIUM_DISK"], "maxSize": "100Gi"}
        },
        "controlPlaneAccess": {"sourceIpAllowlist": {"cidrs": ["2001:db8::/32", "203.0.113.0/24"]}}
    })
}

// ----- public documents: docs/facts/policy.md#examples, docs/facts/sunk-guide.md#step-2 -----

#[test]
fn empty_policy_is_valid() {
    assert_valid(json!({}));
    assert!(validate_policy(&Policy::default()).is_empty());
}

#[test]
fn seed_scheduler_policy_is_valid() {
    assert_valid(json!({"base": {"spec": {"schedulerName": "slurm-scheduler"}}}));
}

#[test]
fn seed_pinned_partition_policy_is_valid() {
    assert_valid(json!({"base": {
        "metadata": {"annotations": {"sunk.coreweave.com/partition": "sandboxes"}},
        "spec": {"schedulerName": "slurm-scheduler"}
    }}));
}

#[test]
fn terraform_acceptance_policy_is_valid() {
    assert_valid(terraform_policy());
}

#[test]
fn recipe_and_default_runner_egress_are_valid() {
    let recipe =
        json!([{"cidr": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}}, {"tenant": "TENANT_SCOPE_SAME_ORG"}]);
    assert_valid(json!({"constraints": {"network": {"allowedEgress": recipe, "defaultEgress": recipe}}}));
    assert_valid(json!({"constraints": {"network": {"defaultEgress": [
        {"cidr": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "169.254.0.0/16"]}}
    ]}}}));
}

// ----- base: the allow/deny table -----

#[test]
fn termination_grace_period_in_base_is_managed_by_the_platform() {
    assert_single(
        json!({"base": {"spec": {"schedulerName": "slurm-scheduler", "terminationGracePeriodSeconds": 30}}}),
        "policy.base.spec.terminationGracePeriodSeconds",
        "field is managed by the platform",
    );
}

#[test]
fn every_platform_managed_spec_key_is_refused_as_managed() {
    assert_eq!(
        BASE_SCHEMA.spec.managed_by_platform,
        [
            "terminationGracePeriodSeconds",
            "activeDeadlineSeconds",
            "hostNetwork",
            "hostPID",
            "hostIPC",
            "runtimeClassName",
            "securityContext",
            "restartPolicy",
            "nodeName"
        ]
    );
    for key in BASE_SCHEMA.spec.managed_by_platform {
        assert_single(json!({"base": {"spec": {*key: true}}}), &format!("policy.base.spec.{key}"), MANAGED_BY_PLATFORM);
    }
}

#[test]
fn unknown_keys_are_not_allowed_at_every_level() {
    assert_single(
        json!({"base": {"spec": {"initContainers": []}}}),
        "policy.base.spec.initContainers",
        NOT_ALLOWED_IN_BASE,
    );
    assert_single(json!({"base": {"status": {}}}), "policy.base.status", NOT_ALLOWED_IN_BASE);
    assert_single(json!({"base": {"metadata": {"name": "x"}}}), "policy.base.metadata.name", NOT_ALLOWED_IN_BASE);
    assert_single(
        json!({"base": {"spec": {"containers": [{"name": "main", "image": "x"}]}}}),
        "policy.base.spec.containers[0].image",
        NOT_ALLOWED_IN_BASE,
    );
    assert_single(
        json!({"base": {"spec": {"containers": [{"securityContext": {"privileged": true}}]}}}),
        "policy.base.spec.containers[0].securityContext",
        MANAGED_BY_PLATFORM,
    );
    assert_single(
        json!({"base": {"spec": {"tolerations": [{"key": "a", "operator": "Exists", "weight": 1}]}}}),
        "policy.base.spec.tolerations[0].weight",
        NOT_ALLOWED_IN_BASE,
    );
    assert_single(
        json!({"base": {"spec": {"containers": [{"env": [{"name": "A", "valueFrom": {}}]}]}}}),
        "policy.base.spec.containers[0].env[0].valueFrom",
        NOT_ALLOWED_IN_BASE,
    );
}

#[test]
fn one_violation_per_offending_key() {
    assert_eq!(
        fields(json!({"base": {"spec": {"hostNetwork": true, "nodeName": "n1", "priority": 5, "schedulerName": "s"}}})),
        ["policy.base.spec.hostNetwork", "policy.base.spec.nodeName", "policy.base.spec.priority"]
    );
}

#[test]
fn every_allowed_spec_key_passes_when_well_typed() {
    assert_valid(json!({"base": {
        "metadata": {"labels": {"team": "platform"}, "annotations": {"example.com/owner": "any value at all"}},
        "spec": {
            "schedulerName": "slurm-scheduler",
            "nodeSelector": {"node.coreweave.cloud/instance-type": "cd-gp-i64-erapids"},
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "sandbox", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"operator": "Exists"}
            ],
            "priorityClassName": "sandbox-low",
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-04a"]}]}
            ]}}},
            "serviceAccountName": "sandbox",
            "imagePullSecrets": [{"name": "registry"}],
            "volumes": [{"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets"}}],
            "dnsPolicy": "None",
            "dnsConfig": {"nameservers": ["10.0.0.10"]},
            "enableServiceLinks": false,
            "containers": [
                {"env": [{"name": "HTTP_PROXY", "value": "http://proxy:3128"}]},
                {"name": "main", "volumeMounts": [{"name": "datasets", "mountPath": "/data"}]}
            ]
        }
    }}));
}

#[test]
fn base_sections_must_be_objects() {
    assert_single(json!({"base": {"spec": "slurm"}}), "policy.base.spec", "must be an object, not a string");
    assert_single(json!({"base": {"metadata": []}}), "policy.base.metadata", "must be an object, not a list");
}

#[test]
fn metadata_maps_hold_strings_under_valid_keys() {
    assert_single(
        json!({"base": {"metadata": {"labels": {"team": 7}}}}),
        "policy.base.metadata.labels[\"team\"]",
        "must be a string, not a number",
    );
    assert_eq!(
        fields(json!({"base": {"metadata": {"annotations": {"bad key": "v"}}}})),
        ["policy.base.metadata.annotations[\"bad key\"]"]
    );
    assert_eq!(
        fields(json!({"base": {"metadata": {"labels": {"team": "not a label value"}}}})),
        ["policy.base.metadata.labels[\"team\"]"]
    );
}

#[test]
fn scalar_spec_keys_are_type_checked() {
    assert_single(
        json!({"base": {"spec": {"schedulerName": 1}}}),
        "policy.base.spec.schedulerName",
        "must be a string, not a number",
    );
    assert_single(
        json!({"base": {"spec": {"nodeSelector": {"zone": true}}}}),
        "policy.base.spec.nodeSelector[\"zone\"]",
        "must be a string, not a boolean",
    );
    assert_single(
        json!({"base": {"spec": {"enableServiceLinks": "no"}}}),
        "policy.base.spec.enableServiceLinks",
        "must be a boolean, not a string",
    );
    assert_single(
        json!({"base": {"spec": {"dnsPolicy": "Sometimes"}}}),
        "policy.base.spec.dnsPolicy",
        "\"Sometimes\" must be one of \"ClusterFirst\", \"ClusterFirstWithHostNet\", \"Default\", \"None\"",
    );
    assert_single(
        json!({"base": {"spec": {"imagePullSecrets": [{}]}}}),
        "policy.base.spec.imagePullSecrets[0].name",
        "name is required",
    );
    assert_single(
        json!({"base": {"spec": {"volumes": {}}}}),
        "policy.base.spec.volumes",
        "must be a list, not an object",
    );
}

#[test]
fn tolerations_follow_kubernetes_rules() {
    let toleration = |value: Value| json!({"base": {"spec": {"tolerations": [value]}}});
    assert_single(
        toleration(json!({"key": "a", "operator": "Maybe"})),
        "policy.base.spec.tolerations[0].operator",
        "\"Maybe\" must be one of \"Equal\", \"Exists\"",
    );
    assert_single(
        toleration(json!({"key": "a", "effect": "NoRun"})),
        "policy.base.spec.tolerations[0].effect",
        "\"NoRun\" must be one of \"\", \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
    );
    assert_single(
        toleration(json!({"key": "a", "operator": "Exists", "value": "b"})),
        "policy.base.spec.tolerations[0].value",
        "value must be empty when operator is Exists",
    );
    assert_single(
        toleration(json!({"value": "b"})),
        "policy.base.spec.tolerations[0].operator",
        "an empty key needs operator Exists",
    );
    assert_single(
        toleration(json!({"key": "a", "effect": "NoSchedule", "tolerationSeconds": 60})),
        "policy.base.spec.tolerations[0].tolerationSeconds",
        "tolerationSeconds needs effect NoExecute",
    );
    assert_single(
        toleration(json!({"key": "a", "effect": "NoExecute", "tolerationSeconds": 1.5})),
        "policy.base.spec.tolerations[0].tolerationSeconds",
        "must be an integer, not a number",
    );
    assert_single(
        json!({"base": {"spec": {"tolerations": ["dedicated"]}}}),
        "policy.base.spec.tolerations[0]",
        "must be an object, not a string",
    );
    assert_valid(toleration(json!({"key": "a", "effect": ""})));
}

#[test]
fn base_containers_carry_named_env_and_mounts() {
    assert_single(
        json!({"base": {"spec": {"containers": [{"env": [{"value": "x"}]}]}}}),
        "policy.base.spec.containers[0].env[0].name",
        "name is required",
    );
    assert_single(
        json!({"base": {"spec": {"containers": [{"name": "main"}, {"name": "main"}]}}}),
        "policy.base.spec.containers[1].name",
        "duplicate container name \"main\"",
    );
    assert_single(
        json!({"base": {"spec": {"containers": [{"volumeMounts": [{"name": "data"}]}]}}}),
        "policy.base.spec.containers[0].volumeMounts[0].mountPath",
        "mountPath is required",
    );
}

#[test]
fn required_node_affinity_supports_in_only() {
    let term = |expression: Value| {
        json!({"base": {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [expression]}]
        }}}}}})
    };
    let path =
        "policy.base.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]";
    assert_valid(term(json!({"key": "zone", "operator": "In", "values": ["a", "b"]})));
    assert_single(
        term(json!({"key": "zone", "operator": "NotIn", "values": ["a"]})),
        &format!("{path}.matchExpressions[0].operator"),
        "operator \"NotIn\" is not emulated; required node affinity supports only In",
    );
    assert_single(
        term(json!({"key": "zone", "operator": "In", "values": []})),
        &format!("{path}.matchExpressions[0].values"),
        "operator In needs at least one value",
    );
    assert_single(
        json!({"base": {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{}]
        }}}}}}),
        path,
        "a node selector term needs at least one matchExpression",
    );
}

// ----- constraints.resources -----

#[test]
fn every_resource_quantity_must_parse() {
    for field in
        ["maxCpu", "maxMemory", "minCpu", "minMemory", "defaultCpu", "defaultMemory", "cpuCeiling", "memoryCeiling"]
    {
        assert_single(
            json!({"constraints": {"resources": {field: "lots"}}}),
            &format!("policy.constraints.resources.{field}"),
            "invalid quantity \"lots\": no number",
        );
    }
}

#[test]
fn minimum_must_not_exceed_maximum() {
    assert_single(
        json!({"constraints": {"resources": {"minCpu": "4", "maxCpu": "2"}}}),
        "policy.constraints.resources.minCpu",
        "minCpu 4 exceeds maxCpu 2",
    );
    assert_single(
        json!({"constraints": {"resources": {"minMemory": "2Gi", "maxMemory": "1Gi"}}}),
        "policy.constraints.resources.minMemory",
        "minMemory 2Gi exceeds maxMemory 1Gi",
    );
    assert_valid(json!({"constraints": {"resources": {"minCpu": "2", "maxCpu": "2000m"}}}));
}

#[test]
fn defaults_must_lie_within_bounds() {
    assert_single(
        json!({"constraints": {"resources": {"defaultCpu": "4", "maxCpu": "2"}}}),
        "policy.constraints.resources.defaultCpu",
        "defaultCpu 4 exceeds maxCpu 2",
    );
    assert_single(
        json!({"constraints": {"resources": {"defaultMemory": "64Mi", "minMemory": "128Mi"}}}),
        "policy.constraints.resources.defaultMemory",
        "defaultMemory 64Mi is below minMemory 128Mi",
    );
    assert_valid(
        json!({"constraints": {"resources": {"defaultMemory": "128Mi", "minMemory": "128Mi", "maxMemory": "1Gi"}}}),
    );
}

#[test]
fn gpu_cap_must_not_be_negative() {
    assert_single(
        json!({"constraints": {"resources": {"maxGpuCount": "-1"}}}),
        "policy.constraints.resources.maxGpuCount",
        "maxGpuCount -1 must not be negative",
    );
    assert_valid(json!({"constraints": {"resources": {"maxGpuCount": 0}}}));
}

// ----- constraints.lifecycle / metadata / volumes -----

#[test]
fn default_lifetime_is_between_zero_and_thirty_days() {
    assert_valid(json!({"constraints": {"lifecycle": {"defaultLifetimeSeconds": 2592000}}}));
    assert_valid(json!({"constraints": {"lifecycle": {"defaultLifetimeSeconds": 0}}}));
    assert_single(
        json!({"constraints": {"lifecycle": {"defaultLifetimeSeconds": 2592001}}}),
        "policy.constraints.lifecycle.defaultLifetimeSeconds",
        "defaultLifetimeSeconds 2592001 must be between 0 and 2592000",
    );
    assert_single(
        json!({"constraints": {"lifecycle": {"defaultLifetimeSeconds": -1}}}),
        "policy.constraints.lifecycle.defaultLifetimeSeconds",
        "defaultLifetimeSeconds -1 must be between 0 and 2592000",
    );
}

#[test]
fn annotation_count_limit_is_not_negative() {
    assert_single(
        json!({"constraints": {"metadata": {"maxAnnotationCount": -3}}}),
        "policy.constraints.metadata.maxAnnotationCount",
        "maxAnnotationCount -3 must not be negative",
    );
    assert_single(
        json!({"constraints": {"metadata": {"deniedAnnotationPrefixes": ["ok.example.com/", ""]}}}),
        "policy.constraints.metadata.deniedAnnotationPrefixes[1]",
        "an empty prefix would deny every annotation",
    );
}

#[test]
fn volume_max_size_must_parse() {
    assert_single(
        json!({"constraints": {"volumes": {"maxSize": "100 GB"}}}),
        "policy.constraints.volumes.maxSize",
        "invalid quantity \"100 GB\": unknown suffix",
    );
    assert_valid(json!({"constraints": {"volumes": {"maxSize": "100Gi", "allowedMedia": ["STORAGE_MEDIUM_MEMORY"]}}}));
}

// ----- constraints.network -----

fn egress(rule: Value) -> Value {
    json!({"constraints": {"network": {"allowedEgress": [rule]}}})
}

#[test]
fn port_rules() {
    let path = "policy.constraints.network.allowedEgress[0].ports[0]";
    assert_valid(egress(json!({"any": true, "ports": [{"port": 8000, "endPort": 8100, "protocol": "UDP"}]})));
    assert_single(
        egress(json!({"any": true, "ports": [{"port": 0}]})),
        &format!("{path}.port"),
        "port 0 is outside 1-65535",
    );
    assert_single(
        egress(json!({"any": true, "ports": [{"port": 65536}]})),
        &format!("{path}.port"),
        "port 65536 is outside 1-65535",
    );
    assert_single(
        egress(json!({"any": true, "ports": [{"port": 443, "endPort": 80}]})),
        &format!("{path}.endPort"),
        "endPort 80 must be 0 or between port 443 and 65535",
    );
    assert_single(
        egress(json!({"any": true, "ports": [{"port": 443, "endPort": 70000}]})),
        &format!("{path}.endPort"),
        "endPort 70000 must be 0 or between port 443 and 65535",
    );
    assert_single(
        egress(json!({"any": true, "ports": [{"port": 443, "protocol": "tcp"}]})),
        &format!("{path}.protocol"),
        "protocol \"tcp\" must be TCP, UDP or SCTP",
    );
}

#[test]
fn port_path_indexes_the_rule_and_the_port() {
    assert_eq!(
        fields(json!({"constraints": {"network": {"allowedEgress": [
            {"any": true}, {"tenant": "TENANT_SCOPE_SAME_ORG"},
            {"any": true, "ports": [{"port": 1}, {"port": 10, "endPort": 5}]}
        ]}}})),
        ["policy.constraints.network.allowedEgress[2].ports[1].endPort"]
    );
}

#[test]
fn every_rule_selects_exactly_one_peer() {
    assert_single(
        egress(json!({"ports": [{"port": 443}]})),
        "policy.constraints.network.allowedEgress[0]",
        "exactly one destination is required: cidr, httpsHostname, tenant, any or selector",
    );
    assert_single(
        json!({"constraints": {"network": {"defaultIngress": [{}]}}}),
        "policy.constraints.network.defaultIngress[0]",
        "exactly one source is required: cidr, tenant or any",
    );
    assert_single(
        egress(json!({"any": false})),
        "policy.constraints.network.allowedEgress[0].any",
        "any must be true when set",
    );
    assert_single(
        egress(json!({"tenant": "TENANT_SCOPE_UNSPECIFIED"})),
        "policy.constraints.network.allowedEgress[0].tenant",
        "tenant must be TENANT_SCOPE_SAME_USER, TENANT_SCOPE_SAME_ORG or TENANT_SCOPE_SANDBOX_NETWORK",
    );
    assert!(
        serde_json::from_value::<Policy>(egress(json!({"any": true, "tenant": "TENANT_SCOPE_SAME_ORG"}))).is_err(),
        "two destinations in one rule never reach validation: proto3 JSON refuses a doubly-set oneof"
    );
}

#[test]
fn cidrs_are_canonical_and_not_ipv4_mapped() {
    let path = "policy.constraints.network.allowedEgress[0].cidr";
    assert_valid(egress(json!({"cidr": {"cidr": "2001:db8::/32", "except": ["2001:db8:1::/48"]}})));
    assert_single(
        egress(json!({"cidr": {"cidr": "10.1.2.3/8"}})),
        &format!("{path}.cidr"),
        "\"10.1.2.3/8\" is not canonical; use \"10.0.0.0/8\"",
    );
    assert_single(
        egress(json!({"cidr": {"cidr": "::ffff:10.0.0.0/104"}})),
        &format!("{path}.cidr"),
        "\"::ffff:10.0.0.0/104\" is an IPv4-mapped IPv6 prefix; use the plain IPv4 prefix",
    );
    assert_single(
        egress(json!({"cidr": {"cidr": "10.0.0.0"}})),
        &format!("{path}.cidr"),
        "\"10.0.0.0\" is not an IPv4 or IPv6 CIDR prefix (address/length)",
    );
    assert_single(
        egress(json!({"cidr": {"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}})),
        &format!("{path}.except[0]"),
        "192.168.0.0/16 is not a sub-range of 10.0.0.0/8",
    );
    assert_single(
        json!({"constraints": {"network": {"allowedIngress": [{"cidr": {"cidr": "10.0.0.0/8", "except": ["10.0.0.1/8"]}}]}}}),
        "policy.constraints.network.allowedIngress[0].cidr.except[0]",
        "\"10.0.0.1/8\" is not canonical; use \"10.0.0.0/8\"",
    );
}

#[test]
fn hostnames_belong_in_allowed_egress_only() {
    assert_valid(egress(json!({"httpsHostname": "*"})));
    assert_valid(egress(json!({"httpsHostname": "*.example.com", "httpsHostnameExcept": ["admin.example.com"]})));
    assert_single(
        json!({"constraints": {"network": {"defaultEgress": [{"httpsHostname": "api.example.com"}]}}}),
        "policy.constraints.network.defaultEgress[0].httpsHostname",
        "hostname destinations are not allowed in defaultEgress",
    );
    assert_single(
        json!({"constraints": {"network": {"defaultEgress": [{"httpsHostname": "*"}]}}}),
        "policy.constraints.network.defaultEgress[0].httpsHostname",
        "hostname destinations are not allowed in defaultEgress",
    );
    assert_single(
        egress(json!({"httpsHostname": "api.*.example.com"})),
        "policy.constraints.network.allowedEgress[0].httpsHostname",
        "\"api.*.example.com\" is not a hostname, a hostname with a single leftmost \"*.\" wildcard label, or \"*\"",
    );
    assert_single(
        egress(json!({"httpsHostname": "api.example.com", "httpsHostnameExcept": ["x.example.com"]})),
        "policy.constraints.network.allowedEgress[0].httpsHostnameExcept",
        "httpsHostnameExcept needs a wildcard httpsHostname destination",
    );
}

#[test]
fn deny_https_hostname_rules_forbids_hostname_grants() {
    assert_single(
        json!({"constraints": {"network": {"denyHttpsHostnameRules": true, "allowedEgress": [
            {"any": true}, {"httpsHostname": "*.example.com"}
        ]}}}),
        "policy.constraints.network.allowedEgress[1].httpsHostname",
        "hostname rules are forbidden by denyHttpsHostnameRules",
    );
    assert_valid(
        json!({"constraints": {"network": {"denyHttpsHostnameRules": true, "allowedEgress": [{"any": true}]}}}),
    );
}

#[test]
fn selectors_need_a_pod_label() {
    assert_single(
        egress(json!({"selector": {"namespaceLabels": {"team": "platform"}}})),
        "policy.constraints.network.allowedEgress[0].selector.podLabels",
        "at least one pod label is required",
    );
    assert_valid(egress(json!({"selector": {"podLabels": {"app": "db"}}})));
}

// ----- constraints.security -----

fn security(value: Value) -> Value {
    json!({"constraints": {"security": value}})
}

#[test]
fn runtime_class_mappings() {
    let path = "policy.constraints.security.runtimeClassMappings";
    assert_valid(security(json!({"runtimeClassMappings": [
        {"runtimeClass": "RUNTIME_CLASS_CPU_NESTED_VIRT", "kubernetesRuntimeClassName": "kata"},
        {"runtimeClass": "RUNTIME_CLASS_CPU_DEFAULT", "nodeDefault": true}
    ]})));
    assert_single(
        security(json!({"allowedRuntimeClasses": ["kata"], "runtimeClassMappings": [
            {"runtimeClass": "RUNTIME_CLASS_CPU_NESTED_VIRT", "kubernetesRuntimeClassName": "kata"}
        ]})),
        path,
        "runtimeClassMappings cannot be combined with allowedRuntimeClasses",
    );
    assert_single(
        security(json!({"runtimeClassMappings": [
            {"runtimeClass": "RUNTIME_CLASS_GPU_DEFAULT", "kubernetesRuntimeClassName": "nvidia"},
            {"runtimeClass": "RUNTIME_CLASS_GPU_DEFAULT", "nodeDefault": true}
        ]})),
        &format!("{path}[1].runtimeClass"),
        "RUNTIME_CLASS_GPU_DEFAULT is mapped more than once",
    );
    assert_single(
        security(json!({"runtimeClassMappings": [{"runtimeClass": "RUNTIME_CLASS_CPU_DEFAULT"}]})),
        &format!("{path}[0]"),
        "exactly one target is required: kubernetesRuntimeClassName, or nodeDefault set to true",
    );
    assert_single(
        security(
            json!({"runtimeClassMappings": [{"runtimeClass": "RUNTIME_CLASS_CPU_DEFAULT", "nodeDefault": false}]}),
        ),
        &format!("{path}[0]"),
        "exactly one target is required: kubernetesRuntimeClassName, or nodeDefault set to true",
    );
    assert_single(
        security(json!({"runtimeClassMappings": [{"runtimeClass": "RUNTIME_CLASS_UNSPECIFIED", "nodeDefault": true}]})),
        &format!("{path}[0].runtimeClass"),
        "runtimeClass must not be RUNTIME_CLASS_UNSPECIFIED",
    );
    assert_eq!(
        fields(security(json!({"runtimeClassMappings": [
            {"runtimeClass": "RUNTIME_CLASS_CPU_DEFAULT", "kubernetesRuntimeClassName": "Kata_Containers"}
        ]}))),
        [format!("{path}[0].kubernetesRuntimeClassName")]
    );
}

#[test]
fn default_runtime_classes_need_a_listing_allowlist() {
    assert_valid(security(json!({"allowedRuntimeClasses": ["kata"], "defaultCpuRuntimeClass": "kata"})));
    assert_single(
        security(json!({"defaultCpuRuntimeClass": "kata"})),
        "policy.constraints.security.defaultCpuRuntimeClass",
        "defaultCpuRuntimeClass kata needs a non-empty allowedRuntimeClasses that lists it",
    );
    assert_single(
        security(json!({"allowedRuntimeClasses": ["kata"], "defaultGpuRuntimeClass": "kata-nvidia"})),
        "policy.constraints.security.defaultGpuRuntimeClass",
        "defaultGpuRuntimeClass kata-nvidia is not in allowedRuntimeClasses",
    );
    assert_eq!(
        fields(security(json!({"allowedRuntimeClasses": ["kata", "Not A Name"]}))),
        ["policy.constraints.security.allowedRuntimeClasses[1]"]
    );
}

// ----- controlPlaneAccess -----

fn source_cidrs(cidrs: Value) -> Value {
    json!({"controlPlaneAccess": {"sourceIpAllowlist": {"cidrs": cidrs}}})
}

#[test]
fn control_plane_prefixes_are_canonical_and_not_redundant() {
    let path = "policy.controlPlaneAccess.sourceIpAllowlist.cidrs";
    assert_valid(source_cidrs(json!([])));
    assert_valid(source_cidrs(json!(["198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32"])));
    assert_single(
        source_cidrs(json!(["203.0.113.7/24"])),
        &format!("{path}[0]"),
        "\"203.0.113.7/24\" is not canonical; use \"203.0.113.0/24\"",
    );
    assert_single(
        source_cidrs(json!(["::ffff:203.0.113.0/120"])),
        &format!("{path}[0]"),
        "\"::ffff:203.0.113.0/120\" is an IPv4-mapped IPv6 prefix; use the plain IPv4 prefix",
    );
    assert_single(
        source_cidrs(json!(["203.0.113.128/25", "203.0.113.0/24"])),
        &format!("{path}[0]"),
        "203.0.113.128/25 is already covered by cidrs[1] 203.0.113.0/24; remove the redundant prefix",
    );
    assert_single(
        source_cidrs(json!(["203.0.113.0/24", "203.0.113.0/24"])),
        &format!("{path}[1]"),
        "203.0.113.0/24 is already covered by cidrs[0] 203.0.113.0/24; remove the redundant prefix",
    );
}

#[test]
fn control_plane_allowlist_holds_at_most_256_prefixes() {
    let prefixes = |count: usize| -> Vec<String> {
        (0..count).map(|index| format!("10.{}.{}.0/24", index / 256, index % 256)).collect()
    };
    assert_valid(source_cidrs(json!(prefixes(256))));
    assert_single(
        source_cidrs(json!(prefixes(257))),
        "policy.controlPlaneAccess.sourceIpAllowlist.cidrs",
        "257 prefixes exceed the limit of 256",
    );
}

#[test]
fn problems_from_every_group_are_reported_together() {
    assert_eq!(
        fields(json!({
            "base": {"spec": {"restartPolicy": "Never"}},
            "constraints": {
                "resources": {"maxCpu": "x"},
                "lifecycle": {"defaultLifetimeSeconds": -5},
                "network": {"defaultEgress": [{}]}
            },
            "controlPlaneAccess": {"sourceIpAllowlist": {"cidrs": ["nope"]}}
        })),
        [
            "policy.base.spec.restartPolicy",
            "policy.constraints.resources.maxCpu",
            "policy.constraints.network.defaultEgress[0]",
            "policy.constraints.lifecycle.defaultLifetimeSeconds",
            "policy.controlPlaneAccess.sourceIpAllowlist.cidrs[0]"
        ]
    );
}
