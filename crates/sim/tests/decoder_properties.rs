//! Bounded property tests of the simulation's decoders (hardening issue 11): Kubernetes
//! quantities, runner policy validation (the `base` pod-template fragment and the typed
//! constraints), label and field selectors, and the helm-style values overlay.
//!
//! Every property runs a fixed number of cases from a fixed seed, so a failure replays exactly
//! (`cargo test -p cwsandbox-sim --test decoder_properties`); no regression files are written.
//! Each bug these properties found has a plain test next to them with the minimal input.

use std::collections::BTreeMap;

use cwsandbox_api::sandbox_v1::{Container, Policy, ResourceRequirements, Resources, SandboxSpec};
use cwsandbox_sim::config::{Scenario, Values, merge_values};
use cwsandbox_sim::ids::SeededIds;
use cwsandbox_sim::k8s::PodOwner;
use cwsandbox_sim::policy::{BASE_SCHEMA, RuntimeDefaults, resolve, validate_policy};
use cwsandbox_sim::quantity::{Quantity, format_bytes};
use cwsandbox_sim::query::{FieldSelector, LabelSelector, ObjectQuery, POD_FIELDS, Scope};
use cwsandbox_sim::resolved::ResourceAmounts;
use cwsandbox_sim::time::{ManualClock, SimTime};
use cwsandbox_sim::world::{PodRequest, World};
use cwsandbox_sim::{Reason, SimError};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use serde_json::{Map, Value, json};

/// A fixed case count and seed: CI runs the same cases every time, whatever PROPTEST_* says.
fn config(cases: u32) -> Config {
    Config { cases, rng_seed: RngSeed::Fixed(0x11_5eed), failure_persistence: None, ..Config::default() }
}

const LIMIT_MILLI: u128 = 9_200_000_000_000_000_000;

// ------------------------------------------------------------------------------------------------
// Quantities
// ------------------------------------------------------------------------------------------------

/// Text that looks like a quantity often enough to reach every branch of the parser.
fn quantity_like() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ +-]?[0-9.]{0,40}(e[+-]?[0-9]{0,3}|E[+-]?[0-9]{0,3}|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[a-zA-Z]{0,2})[ ]?",
        "\\PC{0,12}",
        any::<String>(),
    ]
}

const BINARY: &[(&str, u32)] = &[("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40), ("Pi", 50), ("Ei", 60)];
const DECIMAL: &[(&str, i32)] =
    &[("n", -9), ("u", -6), ("m", -3), ("k", 3), ("M", 6), ("G", 9), ("T", 12), ("P", 15), ("E", 18)];

/// `digits` with a decimal point `fraction_digits` from the right ("12345", 2 → "123.45").
fn with_point(digits: u64, fraction_digits: usize) -> String {
    let text = format!("{digits:0width$}", width = fraction_digits + 1);
    if fraction_digits == 0 {
        text
    } else {
        let (whole, fraction) = text.split_at(text.len() - fraction_digits);
        format!("{whole}.{fraction}")
    }
}

/// The reference: `digits / 10^fraction × 2^shift × 10^exponent` in millis, rounded up, by the
/// most direct formula (the generated magnitudes keep it within a u128).
fn reference_millis(digits: u64, fraction_digits: usize, shift: u32, exponent: i32) -> u128 {
    let numerator = u128::from(digits) << shift;
    let power = 3 + exponent - fraction_digits as i32;
    if power >= 0 {
        numerator * 10u128.pow(power as u32)
    } else {
        let divisor = 10u128.pow(power.unsigned_abs());
        numerator.div_ceil(divisor)
    }
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn quantity_parsing_never_panics_and_errors_quote_the_input(text in quantity_like()) {
        if let Err(error) = Quantity::parse(&text) {
            prop_assert_eq!(&error.text, &text);
            let quoted = format!("{text:?}");
            prop_assert!(error.to_string().contains(&quoted), "{}", error);
        }
    }

    #[test]
    fn quantities_parse_to_what_the_reference_computes(
        digits in 0u64..10_000_000_000_000,
        fraction_digits in 0usize..8,
        suffix in 0usize..(1 + BINARY.len() + DECIMAL.len() + 1),
        exponent in -18i32..=18,
        upper_e in any::<bool>(),
    ) {
        let number = with_point(digits, fraction_digits);
        let (text, shift, decimal) = match suffix {
            0 => (number, 0, 0),
            index if index <= BINARY.len() => {
                let (name, shift) = BINARY[index - 1];
                (format!("{number}{name}"), shift, 0)
            }
            index if index <= BINARY.len() + DECIMAL.len() => {
                let (name, exponent) = DECIMAL[index - 1 - BINARY.len()];
                (format!("{number}{name}"), 0, exponent)
            }
            _ => (format!("{number}{}{exponent}", if upper_e { 'E' } else { 'e' }), 0, exponent),
        };
        let expected = reference_millis(digits, fraction_digits, shift, decimal);
        match Quantity::parse(&text) {
            Ok(quantity) => prop_assert_eq!(quantity.millis() as u128, expected, "{}", text),
            Err(error) => {
                prop_assert!(expected > LIMIT_MILLI, "{} refused: {}", text, error);
                prop_assert_eq!(error.why, "too large");
            }
        }
    }

    #[test]
    fn a_quantity_formatted_and_parsed_again_is_equal(millis in 0i64..=9_200_000_000_000_000_000) {
        let quantity = Quantity::from_millis(millis);
        prop_assert_eq!(Quantity::parse(&quantity.to_string()), Ok(quantity));
    }

    #[test]
    fn memory_formatted_and_parsed_again_is_equal(bytes in prop_oneof![
        0i64..=9_200_000_000_000_000,
        (0i64..=8_000_000, 0u32..=40).prop_map(|(units, shift)| units << shift),
    ].prop_filter("within the largest quantity", |bytes| *bytes <= 9_200_000_000_000_000)) {
        prop_assert_eq!(Quantity::parse(&format_bytes(bytes)).map(Quantity::units_ceil), Ok(bytes));
    }
}

// ------------------------------------------------------------------------------------------------
// Policy documents
// ------------------------------------------------------------------------------------------------

/// A JSON object holding each of `fields` with probability ½, plus now and then a key the schema
/// does not know (which the proto3 JSON decoder must refuse, not crash on).
fn object(fields: Vec<(&'static str, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
    let entries: Vec<BoxedStrategy<Option<(String, Value)>>> = fields
        .into_iter()
        .map(|(name, value)| proptest::option::of(value.prop_map(move |value| (name.to_owned(), value))).boxed())
        .collect();
    (entries, proptest::option::weighted(0.03, "[a-zA-Z_]{1,8}"))
        .prop_map(|(entries, unknown)| {
            let mut map: Map<String, Value> = entries.into_iter().flatten().collect();
            if let Some(key) = unknown {
                map.entry(key).or_insert(Value::Bool(true));
            }
            Value::Object(map)
        })
        .boxed()
}

fn list(item: BoxedStrategy<Value>, max: usize) -> BoxedStrategy<Value> {
    proptest::collection::vec(item, 0..=max).prop_map(Value::Array).boxed()
}

fn text(choices: &'static [&'static str]) -> BoxedStrategy<Value> {
    prop_oneof![4 => proptest::sample::select(choices).prop_map(|s| s.to_owned()), 1 => "\\PC{0,10}"]
        .prop_map(Value::String)
        .boxed()
}

fn quantity_value() -> BoxedStrategy<Value> {
    prop_oneof![
        3 => proptest::sample::select(&["", "500m", "1", "2", "8", "16", "256Mi", "1Gi", "32Gi", "1.5", "0"][..])
            .prop_map(|s| s.to_owned()),
        1 => quantity_like(),
    ]
    .prop_map(Value::String)
    .boxed()
}

fn int(range: std::ops::RangeInclusive<i64>) -> BoxedStrategy<Value> {
    prop_oneof![4 => range.prop_map(Value::from), 1 => any::<i32>().prop_map(Value::from)].boxed()
}

fn boolean() -> BoxedStrategy<Value> {
    any::<bool>().prop_map(Value::Bool).boxed()
}

fn enum_value(names: &'static [&'static str]) -> BoxedStrategy<Value> {
    prop_oneof![4 => proptest::sample::select(names).prop_map(|s| Value::String(s.to_owned())), 1 => (-2i64..8).prop_map(Value::from)]
        .boxed()
}

fn cidr() -> BoxedStrategy<Value> {
    prop_oneof![
        3 => (any::<u32>(), 0u32..=32).prop_map(|(address, length)| {
            let mask = if length == 0 { 0 } else { u32::MAX << (32 - length) };
            format!("{}/{length}", std::net::Ipv4Addr::from(address & mask))
        }),
        1 => (any::<u128>(), 0u32..=128).prop_map(|(address, length)| {
            let mask = if length == 0 { 0 } else { u128::MAX << (128 - length) };
            format!("{}/{length}", std::net::Ipv6Addr::from(address & mask))
        }),
        1 => proptest::sample::select(&["10.1.0.0/8", "10.0.0.0", "::ffff:10.0.0.0/104", "2001:DB8::/32", "x/8", ""][..])
            .prop_map(|s| s.to_owned()),
        1 => "[0-9./:a-f]{0,20}",
    ]
    .prop_map(Value::String)
    .boxed()
}

fn label_map() -> BoxedStrategy<Value> {
    proptest::collection::btree_map(
        prop_oneof![4 => label_key(), 1 => "\\PC{0,12}"],
        prop_oneof![4 => label_value(), 1 => "\\PC{0,12}"],
        0..3,
    )
    .prop_map(|map| Value::Object(map.into_iter().map(|(key, value)| (key, Value::String(value))).collect()))
    .boxed()
}

fn port_range() -> BoxedStrategy<Value> {
    object(vec![
        ("protocol", text(&["TCP", "UDP", "SCTP", "", "tcp", "ICMP"])),
        ("port", int(-1..=70_000)),
        ("endPort", int(-1..=70_000)),
    ])
}

fn cidr_block() -> BoxedStrategy<Value> {
    object(vec![("cidr", cidr()), ("except", list(cidr(), 2))])
}

fn egress_rule() -> BoxedStrategy<Value> {
    let hostname = text(&["*", "*.example.com", "api.example.com", "a.*.com", "-a.com", "*.", "API.Example.com"]);
    let destination = prop_oneof![
        cidr_block().prop_map(|block| ("cidr", block)),
        hostname.clone().prop_map(|host| ("httpsHostname", host)),
        enum_value(&[
            "TENANT_SCOPE_SAME_USER",
            "TENANT_SCOPE_SAME_ORG",
            "TENANT_SCOPE_SANDBOX_NETWORK",
            "TENANT_SCOPE_UNSPECIFIED"
        ])
        .prop_map(|tenant| ("tenant", tenant)),
        boolean().prop_map(|any| ("any", any)),
        object(vec![("podLabels", label_map()), ("namespaceLabels", label_map())])
            .prop_map(|selector| ("selector", selector)),
    ];
    (
        proptest::option::weighted(0.9, destination),
        object(vec![("ports", list(port_range(), 2)), ("httpsHostnameExcept", list(hostname, 2))]),
    )
        .prop_map(|(destination, mut rule)| {
            if let (Some((key, value)), Value::Object(map)) = (destination, &mut rule) {
                map.insert(key.to_owned(), value);
            }
            rule
        })
        .boxed()
}

fn ingress_rule() -> BoxedStrategy<Value> {
    let source = prop_oneof![
        cidr_block().prop_map(|block| ("cidr", block)),
        enum_value(&["TENANT_SCOPE_SAME_USER", "TENANT_SCOPE_SAME_ORG", "TENANT_SCOPE_UNSPECIFIED"])
            .prop_map(|tenant| ("tenant", tenant)),
        boolean().prop_map(|any| ("any", any)),
    ];
    (proptest::option::weighted(0.9, source), object(vec![("ports", list(port_range(), 2))]))
        .prop_map(|(source, mut rule)| {
            if let (Some((key, value)), Value::Object(map)) = (source, &mut rule) {
                map.insert(key.to_owned(), value);
            }
            rule
        })
        .boxed()
}

fn runtime_class_mapping() -> BoxedStrategy<Value> {
    let classes = &[
        "RUNTIME_CLASS_UNSPECIFIED",
        "RUNTIME_CLASS_CPU_DEFAULT",
        "RUNTIME_CLASS_GPU_DEFAULT",
        "RUNTIME_CLASS_GVISOR",
        "RUNTIME_CLASS_KATA",
    ];
    let target = prop_oneof![
        text(&["kata", "kata-nvidia", "Kata", "-x", "gvisor.example.com"])
            .prop_map(|name| Some(("kubernetesRuntimeClassName", name))),
        boolean().prop_map(|flag| Some(("nodeDefault", flag))),
        Just(None),
    ];
    (object(vec![("runtimeClass", enum_value(classes))]), target)
        .prop_map(|(mut mapping, target)| {
            if let (Some((key, value)), Value::Object(map)) = (target, &mut mapping) {
                map.insert(key.to_owned(), value);
            }
            mapping
        })
        .boxed()
}

fn constraints() -> BoxedStrategy<Value> {
    let runtime_names = &["kata", "gvisor", "runc", "Bad_Name", ""];
    object(vec![
        (
            "resources",
            object(vec![
                ("maxCpu", quantity_value()),
                ("maxMemory", quantity_value()),
                ("minCpu", quantity_value()),
                ("minMemory", quantity_value()),
                ("defaultCpu", quantity_value()),
                ("defaultMemory", quantity_value()),
                ("maxGpuCount", int(-2..=8)),
                ("cpuCeiling", quantity_value()),
                ("memoryCeiling", quantity_value()),
                ("requireLimits", boolean()),
            ]),
        ),
        (
            "image",
            object(vec![
                ("allowedRegistries", list(text(&["docker.io/", "ghcr.io/"]), 2)),
                ("allowedImages", list(text(&["python:3.11"]), 2)),
            ]),
        ),
        (
            "network",
            object(vec![
                ("allowedEgress", list(egress_rule(), 3)),
                ("defaultEgress", list(egress_rule(), 2)),
                ("denyHttpsHostnameRules", boolean()),
                (
                    "dnsEgress",
                    enum_value(&["DNS_EGRESS_MODE_UNSPECIFIED", "DNS_EGRESS_MODE_ALLOW", "DNS_EGRESS_MODE_DENY"]),
                ),
                ("allowedIngress", list(ingress_rule(), 2)),
                ("defaultIngress", list(ingress_rule(), 2)),
            ]),
        ),
        (
            "security",
            object(vec![
                ("allowPrivileged", boolean()),
                ("allowedCapabilities", list(text(&["NET_ADMIN", "cap_sys_ptrace"]), 2)),
                ("allowedSeccompProfiles", list(text(&["RuntimeDefault"]), 1)),
                ("allowedRuntimeClasses", list(text(runtime_names), 2)),
                ("defaultCpuRuntimeClass", text(runtime_names)),
                ("defaultGpuRuntimeClass", text(runtime_names)),
                ("runtimeClassMappings", list(runtime_class_mapping(), 3)),
            ]),
        ),
        ("instance", object(vec![("allowedInstanceTypes", list(text(&["cpu-small"]), 2))])),
        ("lifecycle", object(vec![("defaultLifetimeSeconds", int(-1..=2_600_000))])),
        (
            "metadata",
            object(vec![
                ("deniedAnnotationPrefixes", list(text(&["", "example.com/", "x"]), 2)),
                ("maxAnnotationCount", int(-2..=10)),
            ]),
        ),
        (
            "volumes",
            object(vec![
                (
                    "allowedMedia",
                    list(
                        enum_value(&["STORAGE_MEDIUM_UNSPECIFIED", "STORAGE_MEDIUM_MEMORY", "STORAGE_MEDIUM_DISK"]),
                        2,
                    ),
                ),
                ("maxSize", quantity_value()),
            ]),
        ),
    ])
}

/// Keys of `base` at every level: the schema's allowed and refused keys, the keys nested objects
/// carry, and random ones.
fn base_key() -> BoxedStrategy<String> {
    let mut known: Vec<&'static str> = Vec::new();
    for rules in [
        BASE_SCHEMA.top_level,
        BASE_SCHEMA.metadata,
        BASE_SCHEMA.spec,
        BASE_SCHEMA.container,
        BASE_SCHEMA.env_var,
        BASE_SCHEMA.toleration,
    ] {
        known.extend(rules.allowed);
        known.extend(rules.managed_by_platform);
    }
    known.extend([
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms",
        "matchExpressions",
        "matchFields",
        "values",
        "mountPath",
        "team",
        "sunk.coreweave.com/partition",
        "Bad Key",
    ]);
    prop_oneof![6 => proptest::sample::select(known).prop_map(str::to_owned), 1 => "\\PC{0,10}"].boxed()
}

fn json_scalar() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(Value::Null),
        boolean(),
        (-5i64..100_000).prop_map(Value::from),
        any::<f64>().prop_map(|number| serde_json::Number::from_f64(number).map_or(Value::Null, Value::Number)),
        text(&[
            "",
            "Equal",
            "Exists",
            "NoSchedule",
            "NoExecute",
            "In",
            "NotIn",
            "ClusterFirst",
            "platform",
            "main",
            "/mnt",
            "a=b"
        ]),
    ]
    .boxed()
}

/// Any JSON, keys drawn from the names `base` knows and random ones.
fn json_tree() -> BoxedStrategy<Value> {
    json_scalar()
        .prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec((base_key(), inner), 0..5)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
        .boxed()
}

/// Mostly the shape the schema expects, sometimes anything at all.
fn shaped(value: BoxedStrategy<Value>) -> BoxedStrategy<Value> {
    prop_oneof![4 => value, 1 => json_tree()].boxed()
}

/// An arbitrary `google.protobuf.Struct` for `base` (as JSON), built structurally: the shapes of
/// the pod-template fragment at every level, with wrong types, unknown keys and random trees mixed in.
fn base_document() -> BoxedStrategy<Value> {
    let name = || text(&["main", "sidecar", "", "a=b", "data"]);
    let toleration = object(vec![
        ("key", shaped(text(&["", "gpu", "node.kubernetes.io/unreachable"]))),
        ("operator", shaped(text(&["Equal", "Exists", "Gt"]))),
        ("value", shaped(text(&["", "true"]))),
        ("effect", shaped(text(&["", "NoSchedule", "PreferNoSchedule", "NoExecute", "Sometimes"]))),
        ("tolerationSeconds", shaped(int(-1..=600))),
    ]);
    let container = object(vec![
        ("name", shaped(name())),
        ("env", shaped(list(object(vec![("name", shaped(name())), ("value", shaped(text(&["1", ""])))]), 3))),
        (
            "volumeMounts",
            shaped(list(object(vec![("name", shaped(name())), ("mountPath", shaped(text(&["/data", ""])))]), 2)),
        ),
        ("securityContext", json_tree()),
    ]);
    let expression = object(vec![
        ("key", shaped(text(&["kubernetes.io/hostname", "", "zone"]))),
        ("operator", shaped(text(&["In", "NotIn", "Exists"]))),
        ("values", shaped(list(text(&["a", "b"]), 3))),
    ]);
    let term = object(vec![("matchExpressions", shaped(list(expression, 3))), ("matchFields", json_tree())]);
    let affinity = object(vec![(
        "nodeAffinity",
        shaped(object(vec![(
            "requiredDuringSchedulingIgnoredDuringExecution",
            shaped(object(vec![("nodeSelectorTerms", shaped(list(term, 2)))])),
        )])),
    )]);
    let named = || shaped(list(object(vec![("name", shaped(name()))]), 2));
    let mut spec_fields = vec![
        ("schedulerName", shaped(text(&["slurm-scheduler"]))),
        ("priorityClassName", shaped(text(&["high"]))),
        ("serviceAccountName", shaped(text(&["runner"]))),
        ("nodeSelector", shaped(label_map())),
        ("tolerations", shaped(list(toleration, 3))),
        ("containers", shaped(list(container, 3))),
        ("affinity", shaped(affinity)),
        ("imagePullSecrets", named()),
        ("volumes", named()),
        ("topologySpreadConstraints", shaped(list(json_tree(), 2))),
        ("dnsPolicy", shaped(text(&["ClusterFirst", "Default", "Sometimes"]))),
        ("dnsConfig", json_tree()),
        ("enableServiceLinks", shaped(boolean())),
    ];
    spec_fields.extend(BASE_SCHEMA.spec.managed_by_platform.iter().map(|key| (*key, json_tree())).take(3));
    let root = object(vec![
        ("metadata", shaped(object(vec![("labels", shaped(label_map())), ("annotations", shaped(label_map()))]))),
        ("spec", shaped(object(spec_fields))),
    ]);
    (root, proptest::collection::vec((base_key(), json_tree()), 0..2))
        .prop_map(|(mut root, extra)| {
            if let Value::Object(map) = &mut root {
                for (key, value) in extra {
                    map.entry(key).or_insert(value);
                }
            }
            root
        })
        .boxed()
}

fn policy_document() -> BoxedStrategy<Value> {
    object(vec![
        ("displayName", text(&["Route sandboxes through SUNK"])),
        ("base", base_document()),
        ("constraints", constraints()),
        ("controlPlaneAccess", object(vec![("sourceIpAllowlist", object(vec![("cidrs", list(cidr(), 4))]))])),
    ])
}

use cwsandbox_sim::config::KeyPathStep as Step;

/// The steps of a path as the simulation writes it.
fn path_steps(path: &str) -> Option<Vec<Step>> {
    cwsandbox_sim::config::key_path_steps(path)
}

fn step_into<'v>(value: &'v Value, step: &Step) -> Option<&'v Value> {
    match (value, step) {
        (Value::Object(map), Step::Field(name)) => map.get(name),
        (Value::Object(map), Step::Key(quoted)) => {
            map.iter().find(|(key, _)| format!("{key:?}") == *quoted).map(|(_, v)| v)
        }
        (Value::Array(items), Step::Index(index)) => items.get(*index),
        _ => None,
    }
}

/// Whether `path` (after `policy`) names a place in `document`: the place itself, or a missing
/// field of an object that is there (a required field, or a field left at its default).
fn names_a_place(document: &Value, path: &str) -> bool {
    let Some(steps) = path.strip_prefix("policy").and_then(path_steps) else { return false };
    let mut here = document;
    for (index, step) in steps.iter().enumerate() {
        match step_into(here, step) {
            Some(next) => here = next,
            None => return index + 1 == steps.len() && matches!(step, Step::Field(_)) && here.is_object(),
        }
    }
    true
}

fn spec_with(cpu: &str, memory: &str) -> SandboxSpec {
    SandboxSpec {
        containers: vec![Container {
            name: "main".to_owned(),
            image: "python:3.11".to_owned(),
            resource_requirements: Some(ResourceRequirements {
                requests: Some(Resources { cpu: cpu.to_owned(), memory: memory.to_owned(), gpu: None }),
                limits: None,
            }),
            ..Container::default()
        }],
        ..SandboxSpec::default()
    }
}

proptest! {
    #![proptest_config(config(768))]

    /// Arbitrary documents: decoding and validation never panic, every violation names a place in
    /// the document as written, and resolution refuses exactly the policies validation refuses.
    #[test]
    fn policy_violations_name_a_place_in_the_document(document in policy_document()) {
        let Ok(policy) = serde_json::from_value::<Policy>(document.clone()) else { return Ok(()) };
        let violations = validate_policy(&policy);
        for violation in &violations {
            prop_assert!(!violation.description.is_empty());
            prop_assert!(
                names_a_place(&document, &violation.field),
                "{} names no place in {}", violation.field, document
            );
        }
        prop_assert_eq!(&violations, &validate_policy(&policy), "validation is deterministic");
        let resolved =
            resolve(&RuntimeDefaults::default(), Some(&policy), &spec_with("500m", "256Mi")).map_err(SimError::from);
        let refused_as_invalid_policy =
            matches!(&resolved, Err(SimError::FailedPrecondition { reason: Reason::PreconditionFailed, .. }));
        prop_assert_eq!(refused_as_invalid_policy, !violations.is_empty(), "{:?}", resolved);
    }

    /// Resource bounds built valid (min ≤ default ≤ max) validate clean, and a request inside
    /// them resolves; one outside is refused at the request's field.
    #[test]
    fn valid_resource_bounds_validate_clean_and_bound_requests(
        mut cpu in proptest::collection::vec(1i64..64_000, 4),
        mut memory in proptest::collection::vec(1i64..(64 << 10), 4),
    ) {
        cpu.sort_unstable();
        memory.sort_unstable();
        let millis = |value: i64| Quantity::from_millis(value).to_string();
        let mebibytes = |value: i64| format_bytes(value << 20);
        let policy: Policy = serde_json::from_value(json!({"constraints": {"resources": {
            "minCpu": millis(cpu[0]), "defaultCpu": millis(cpu[1]), "maxCpu": millis(cpu[3]),
            "minMemory": mebibytes(memory[0]), "defaultMemory": mebibytes(memory[1]), "maxMemory": mebibytes(memory[3]),
        }}})).expect("a well-formed policy");
        prop_assert_eq!(validate_policy(&policy), vec![]);
        let inside = spec_with(&millis(cpu[2]), &mebibytes(memory[2]));
        prop_assert!(resolve(&RuntimeDefaults::default(), Some(&policy), &inside).is_ok());
        if cpu[3] < 64_000 {
            let outside = spec_with(&millis(cpu[3] + 1), &mebibytes(memory[2]));
            let error = SimError::from(
                resolve(&RuntimeDefaults::default(), Some(&policy), &outside).expect_err("above maxCpu"),
            );
            prop_assert_eq!(error.reason(), Some(Reason::PlacementRejected));
            prop_assert_eq!(
                error.violations().iter().map(|v| v.field.as_str()).collect::<Vec<_>>(),
                vec!["sandbox.spec.containers[0].resourceRequirements.requests.cpu"]
            );
        }
    }
}

/// Mostly quantities that parse, sometimes anything.
fn mostly_valid_quantity() -> BoxedStrategy<Value> {
    prop_oneof![
        12 => proptest::sample::select(&["", "100m", "500m", "1", "2", "8", "256Mi", "1Gi", "4Gi", "64Gi"][..])
            .prop_map(|text| Value::String(text.to_owned())),
        1 => quantity_value(),
    ]
    .boxed()
}

fn resources_value() -> BoxedStrategy<Value> {
    object(vec![
        ("cpu", mostly_valid_quantity()),
        ("memory", mostly_valid_quantity()),
        ("gpu", object(vec![("count", int(-1..=4)), ("type", text(&["a100", "h100"]))])),
    ])
}

fn sandbox_spec_document() -> BoxedStrategy<Value> {
    let container = object(vec![
        ("name", text(&["main", "sidecar", "", "Main"])),
        ("image", text(&["python:3.11", "docker.io/library/python:3.11", "ghcr.io/x/y:1"])),
        ("resources", resources_value()),
        ("resourceRequirements", object(vec![("requests", resources_value()), ("limits", resources_value())])),
        (
            "securityContext",
            object(vec![
                ("privileged", boolean()),
                ("capabilitiesAdd", list(text(&["NET_ADMIN", "cap_sys_ptrace", "SYS_ADMIN"]), 2)),
                ("seccompProfile", text(&["RuntimeDefault", "Unconfined", ""])),
            ]),
        ),
    ]);
    let annotations = proptest::collection::btree_map(
        prop_oneof![4 => label_key(), 1 => Just("sunk.coreweave.com/partition".to_owned()), 1 => "\\PC{0,10}"],
        prop_oneof![4 => label_value(), 1 => "\\PC{0,10}"],
        0..4,
    )
    .prop_map(|map| Value::Object(map.into_iter().map(|(key, value)| (key, Value::String(value))).collect()))
    .boxed();
    // One or two containers, usually named apart (specs without containers are refused early).
    let containers = (proptest::collection::vec(container, 1..=2), proptest::bool::weighted(0.8))
        .prop_map(|(mut containers, distinct)| {
            if distinct && containers.len() == 2 {
                for (container, name) in containers.iter_mut().zip(["main", "sidecar"]) {
                    container["name"] = Value::String(name.to_owned());
                }
            }
            Value::Array(containers)
        })
        .boxed();
    let sandbox_egress = prop_oneof![
        3 => proptest::sample::select(vec![
            json!({"any": true}),
            json!({"cidr": {"cidr": "10.1.0.0/16"}, "ports": [{"port": 443}]}),
            json!({"cidr": {"cidr": "192.168.0.0/16"}}),
            json!({"httpsHostname": "api.example.com"}),
            json!({"httpsHostname": "*.example.com"}),
            json!({"tenant": "TENANT_SCOPE_SAME_ORG"}),
        ]),
        1 => egress_rule(),
    ]
    .boxed();
    let sandbox_ingress = prop_oneof![
        3 => proptest::sample::select(vec![json!({"any": true}), json!({"cidr": {"cidr": "10.0.0.0/8"}, "ports": [{"port": 8080}]})]),
        1 => ingress_rule(),
    ]
    .boxed();
    let spec = object(vec![
        (
            "volumes",
            list(
                object(vec![
                    ("name", text(&["scratch"])),
                    (
                        "scratch",
                        object(vec![
                            ("size", mostly_valid_quantity()),
                            (
                                "medium",
                                enum_value(&[
                                    "STORAGE_MEDIUM_UNSPECIFIED",
                                    "STORAGE_MEDIUM_MEMORY",
                                    "STORAGE_MEDIUM_DISK",
                                ]),
                            ),
                        ]),
                    ),
                ]),
                2,
            ),
        ),
        ("maxLifetimeSeconds", int(-1..=3_000_000)),
        ("annotations", annotations),
        (
            "network",
            object(vec![
                ("egress", list(sandbox_egress, 2)),
                ("ingress", list(sandbox_ingress, 2)),
                ("dnsEgress", enum_value(&["DNS_EGRESS_MODE_ALLOW", "DNS_EGRESS_MODE_DENY"])),
            ]),
        ),
        ("instanceType", text(&["cpu-small", "gpu-large"])),
        ("runtimeClass", text(&["kata", "gvisor", "Bad_Name"])),
        (
            "runtimeClassSelection",
            enum_value(&["RUNTIME_CLASS_UNSPECIFIED", "RUNTIME_CLASS_CPU_DEFAULT", "RUNTIME_CLASS_GVISOR"]),
        ),
    ]);
    (spec, containers)
        .prop_map(|(mut spec, containers)| {
            spec["containers"] = containers;
            spec
        })
        .boxed()
}

/// Policies that validate, by construction, over every constraint group.
fn valid_policy() -> BoxedStrategy<Value> {
    let pick = |choices: &'static [&'static str]| {
        proptest::sample::select(choices).prop_map(|text| Value::String(text.to_owned())).boxed()
    };
    let resources = (proptest::collection::vec(1i64..16_000, 3), proptest::collection::vec(1i64..(32 << 10), 3), proptest::option::of(0i64..4))
        .prop_map(|(mut cpu, mut memory, gpus)| {
            cpu.sort_unstable();
            memory.sort_unstable();
            let mut resources = json!({
                "minCpu": Quantity::from_millis(cpu[0]).to_string(), "defaultCpu": Quantity::from_millis(cpu[1]).to_string(),
                "maxCpu": Quantity::from_millis(cpu[2]).to_string(), "minMemory": format_bytes(memory[0] << 20),
                "defaultMemory": format_bytes(memory[1] << 20), "maxMemory": format_bytes(memory[2] << 20),
                "cpuCeiling": Quantity::from_millis(cpu[2] * 2).to_string(),
            });
            if let Some(gpus) = gpus {
                resources["maxGpuCount"] = json!(gpus);
            }
            resources
        })
        .boxed();
    let allowed_rule = prop_oneof![
        Just(json!({"any": true})),
        Just(json!({"cidr": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}, "ports": [{"port": 443}]})),
        Just(json!({"cidr": {"cidr": "0.0.0.0/0"}})),
        Just(json!({"tenant": "TENANT_SCOPE_SAME_ORG"})),
        Just(json!({"httpsHostname": "*.example.com", "httpsHostnameExcept": ["evil.example.com"]})),
    ];
    object(vec![(
        "constraints",
        object(vec![
            ("resources", resources),
            (
                "image",
                object(vec![
                    ("allowedRegistries", list(pick(&["docker.io/", "ghcr.io/"]), 2)),
                    ("allowedImages", list(pick(&["python:3.11"]), 1)),
                ]),
            ),
            ("instance", object(vec![("allowedInstanceTypes", list(pick(&["cpu-small"]), 1))])),
            (
                "metadata",
                object(vec![
                    ("deniedAnnotationPrefixes", list(pick(&["example.com/", "x"]), 2)),
                    ("maxAnnotationCount", (0i64..5).prop_map(Value::from).boxed()),
                ]),
            ),
            (
                "security",
                object(vec![
                    ("allowPrivileged", boolean()),
                    ("allowedCapabilities", list(pick(&["NET_ADMIN", "cap_sys_ptrace"]), 2)),
                    ("allowedSeccompProfiles", list(pick(&["RuntimeDefault"]), 1)),
                    ("allowedRuntimeClasses", list(pick(&["kata", "gvisor"]), 2)),
                ]),
            ),
            ("lifecycle", object(vec![("defaultLifetimeSeconds", (0i64..=2_592_000).prop_map(Value::from).boxed())])),
            (
                "network",
                object(vec![
                    ("allowedEgress", list(allowed_rule.boxed(), 3)),
                    ("allowedIngress", list(Just(json!({"any": true})).boxed(), 1)),
                ]),
            ),
            (
                "volumes",
                object(vec![
                    ("maxSize", pick(&["1Gi", "10Gi"])),
                    ("allowedMedia", list(pick(&["STORAGE_MEDIUM_MEMORY", "STORAGE_MEDIUM_DISK"]), 2)),
                ]),
            ),
        ]),
    )])
}

/// Whether a `sandbox.spec…` path walks `spec` without inventing anything: every list index it
/// names exists, and it may stop naming fields where the spec has none (a value resolution filled
/// in, like a runtime default, is named at the field the user would set).
fn names_a_spec_field(spec: &Value, path: &str) -> bool {
    let Some(steps) = path.strip_prefix("sandbox.spec").and_then(path_steps) else { return false };
    let mut here = Some(spec);
    for step in &steps {
        match (here, step) {
            (Some(value), _) => here = step_into(value, step),
            (None, Step::Index(_)) => return false,
            (None, _) => {}
        }
        if here.is_none() && matches!(step, Step::Index(_)) {
            return false;
        }
    }
    true
}

proptest! {
    #![proptest_config(config(500))]

    /// Arbitrary sandbox specs against arbitrary valid policies: resolution never panics, and a
    /// refusal names sandbox fields the spec has (or would have), never the policy.
    #[test]
    fn resolution_refusals_name_sandbox_fields(
        policy in prop_oneof![3 => valid_policy(), 1 => policy_document()],
        spec in sandbox_spec_document(),
    ) {
        let Ok(policy) = serde_json::from_value::<Policy>(policy) else { return Ok(()) };
        if !validate_policy(&policy).is_empty() {
            return Ok(());
        }
        let Ok(decoded) = serde_json::from_value::<SandboxSpec>(spec.clone()) else { return Ok(()) };
        match resolve(&RuntimeDefaults::default(), Some(&policy), &decoded) {
            Ok(resolved) => prop_assert_eq!(resolved.containers.len(), decoded.containers.len().max(1)),
            Err(error) => {
                prop_assert!(!error.violations().is_empty(), "{}", error);
                for violation in error.violations() {
                    prop_assert!(names_a_spec_field(&spec, &violation.field), "{} in {}", violation.field, spec);
                }
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Label and field selectors
// ------------------------------------------------------------------------------------------------

fn label_key() -> BoxedStrategy<String> {
    prop_oneof![
        4 => proptest::sample::select(&["app", "tier", "team", "replicas", "example.com/role", "a_b.c-d", "x"][..]).prop_map(str::to_owned),
        1 => "([a-z0-9]{1,4}\\.)?[a-z]{1,3}/[a-zA-Z0-9]([-a-zA-Z0-9_.]{0,6}[a-zA-Z0-9])?",
        1 => "[a-zA-Z0-9]([-a-zA-Z0-9_.]{0,10}[a-zA-Z0-9])?",
        // Operators in the key position are keys, as in Kubernetes.
        1 => proptest::sample::select(&["in", "notin"][..]).prop_map(str::to_owned),
    ]
    .boxed()
}

/// A valid label value (Kubernetes syntax), non-empty.
fn label_value() -> BoxedStrategy<String> {
    prop_oneof![
        4 => proptest::sample::select(&["web", "db", "front", "1", "3", "10", "v1.2", "in"][..]).prop_map(str::to_owned),
        1 => "[a-zA-Z0-9]([-a-zA-Z0-9_.]{0,8}[a-zA-Z0-9])?",
    ]
    .boxed()
}

/// What label maps of objects hold: valid values, the empty value, and numbers of any sign.
fn stored_value() -> BoxedStrategy<String> {
    prop_oneof![4 => label_value(), 1 => Just(String::new()), 1 => (-30i64..30).prop_map(|n| n.to_string())].boxed()
}

/// A requirement of the reference model.
#[derive(Debug, Clone)]
enum Requirement {
    Equal { key: String, value: String, operator: &'static str },
    NotEqual { key: String, value: String },
    In { key: String, values: Vec<String> },
    NotIn { key: String, values: Vec<String> },
    Exists(String),
    DoesNotExist(String),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

impl Requirement {
    fn text(&self, space: &str) -> String {
        match self {
            Requirement::Equal { key, value, operator } => format!("{key}{space}{operator}{space}{value}"),
            Requirement::NotEqual { key, value } => format!("{key}{space}!={space}{value}"),
            Requirement::In { key, values } => format!("{key} in{space}({})", values.join(&format!(",{space}"))),
            Requirement::NotIn { key, values } => format!("{key} notin{space}({})", values.join(&format!("{space},"))),
            Requirement::Exists(key) => key.clone(),
            Requirement::DoesNotExist(key) => format!("!{space}{key}"),
            Requirement::GreaterThan(key, number) => format!("{key}{space}>{space}{number}"),
            Requirement::LessThan(key, number) => format!("{key}{space}<{space}{number}"),
        }
    }

    /// Kubernetes' semantics, written out from the documentation.
    fn holds(&self, labels: &BTreeMap<String, String>) -> bool {
        let number = |key: &String| labels.get(key).and_then(|value| value.parse::<i64>().ok());
        match self {
            Requirement::Equal { key, value, .. } => labels.get(key) == Some(value),
            Requirement::NotEqual { key, value } => labels.get(key) != Some(value),
            Requirement::In { key, values } => labels.get(key).is_some_and(|value| values.contains(value)),
            Requirement::NotIn { key, values } => labels.get(key).is_none_or(|value| !values.contains(value)),
            Requirement::Exists(key) => labels.contains_key(key),
            Requirement::DoesNotExist(key) => !labels.contains_key(key),
            Requirement::GreaterThan(key, bound) => number(key).is_some_and(|value| value > *bound),
            Requirement::LessThan(key, bound) => number(key).is_some_and(|value| value < *bound),
        }
    }
}

fn requirement() -> impl Strategy<Value = Requirement> {
    // An empty element of a set is the empty value, as Kubernetes parses `(a,)` and `()`.
    let values = proptest::collection::vec(prop_oneof![4 => label_value(), 1 => Just(String::new())], 1..4);
    prop_oneof![
        (label_key(), prop_oneof![label_value(), Just(String::new())], proptest::sample::select(&["=", "=="][..]))
            .prop_map(|(key, value, operator)| Requirement::Equal { key, value, operator }),
        (label_key(), prop_oneof![label_value(), Just(String::new())])
            .prop_map(|(key, value)| Requirement::NotEqual { key, value }),
        (label_key(), values.clone()).prop_map(|(key, values)| Requirement::In { key, values }),
        (label_key(), values).prop_map(|(key, values)| Requirement::NotIn { key, values }),
        label_key().prop_map(Requirement::Exists),
        label_key().prop_map(Requirement::DoesNotExist),
        // A bound is a label value too, so never negative.
        (label_key(), 0i64..20).prop_map(|(key, bound)| Requirement::GreaterThan(key, bound)),
        (label_key(), 0i64..20).prop_map(|(key, bound)| Requirement::LessThan(key, bound)),
    ]
}

fn labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map(label_key(), stored_value(), 0..6)
}

/// Selector-like text: the operators, the punctuation and words, in any order.
fn selector_like() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::collection::vec(
            prop_oneof![
                Just("in".to_owned()),
                Just("notin".to_owned()),
                Just("(".to_owned()),
                Just(")".to_owned()),
                Just(",".to_owned()),
                Just("=".to_owned()),
                Just("==".to_owned()),
                Just("!=".to_owned()),
                Just("!".to_owned()),
                Just(">".to_owned()),
                Just("<".to_owned()),
                Just(" ".to_owned()),
                label_key(),
                "-?[0-9]{1,20}",
            ],
            0..12,
        )
        .prop_map(|parts| parts.concat()),
        any::<String>(),
    ]
}

proptest! {
    #![proptest_config(config(800))]

    #[test]
    fn selector_parsing_never_panics_and_errors_name_the_selector(text in selector_like()) {
        let _ = LabelSelector::parse(&text);
        let _ = FieldSelector::parse(&text, POD_FIELDS);
        if let Err(error) = ObjectQuery::parse(Scope::Cluster, "", &text, "", POD_FIELDS) {
            prop_assert_eq!(error.violations()[0].field.as_str(), "label_selector");
        }
        if let Err(error) = ObjectQuery::parse(Scope::Cluster, "", "", &text, POD_FIELDS) {
            prop_assert_eq!(error.violations()[0].field.as_str(), "field_selector");
        }
    }

    #[test]
    fn generated_label_selectors_match_as_the_reference_says(
        requirements in proptest::collection::vec(requirement(), 0..5),
        spaced in any::<bool>(),
        samples in proptest::collection::vec(labels(), 1..6),
    ) {
        let space = if spaced { " " } else { "" };
        let text = requirements.iter().map(|requirement| requirement.text(space)).collect::<Vec<_>>().join(&format!(",{space}"));
        let selector = LabelSelector::parse(&text).map_err(|error| TestCaseError::fail(format!("{text:?}: {error}")))?;
        // Labels that satisfy each requirement in turn, so matches are not all misses.
        let mut samples = samples;
        for requirement in &requirements {
            let mut labels = samples[0].clone();
            match requirement {
                Requirement::Equal { key, value, .. } => { labels.insert(key.clone(), value.clone()); }
                Requirement::In { key, values } => { labels.insert(key.clone(), values[0].clone()); }
                Requirement::Exists(key) => { labels.insert(key.clone(), "web".to_owned()); }
                Requirement::GreaterThan(key, bound) => { labels.insert(key.clone(), (bound + 1).to_string()); }
                Requirement::LessThan(key, bound) => { labels.insert(key.clone(), (bound - 1).to_string()); }
                Requirement::NotEqual { key, .. } | Requirement::NotIn { key, .. } | Requirement::DoesNotExist(key) => { labels.remove(key); }
            }
            samples.push(labels);
        }
        for labels in &samples {
            let expected = requirements.iter().all(|requirement| requirement.holds(labels));
            prop_assert_eq!(selector.matches(labels), expected, "{:?} against {:?}", text, labels);
        }
    }

    /// The same selectors with one key or value the API server would refuse are refused.
    #[test]
    fn a_selector_with_an_invalid_key_or_value_is_refused(
        requirements in proptest::collection::vec(requirement(), 1..4),
        which in any::<proptest::sample::Index>(),
        bad_key in proptest::sample::select(&["a$b", "-app", "app-", "Example.com/x", "a/b/c", "x/", "k\u{e9}y"][..]),
        bad_value in proptest::sample::select(&["-v", "v_", "v.", "\u{e9}t\u{e9}", "a/b"][..]),
    ) {
        let mut requirements = requirements;
        let index = which.index(requirements.len());
        let corrupted = match requirements[index].clone() {
            Requirement::Equal { key, operator, .. } => Requirement::Equal { key, value: bad_value.to_owned(), operator },
            Requirement::NotEqual { key, .. } => Requirement::NotEqual { key, value: bad_value.to_owned() },
            Requirement::In { key, mut values } => { values.push(bad_value.to_owned()); Requirement::In { key, values } }
            Requirement::NotIn { mut values, .. } => { values.push("ok".to_owned()); Requirement::NotIn { key: bad_key.to_owned(), values } }
            Requirement::Exists(_) => Requirement::Exists(bad_key.to_owned()),
            Requirement::DoesNotExist(_) => Requirement::DoesNotExist(bad_key.to_owned()),
            Requirement::GreaterThan(key, bound) => Requirement::GreaterThan(key, -bound - 1),
            Requirement::LessThan(_, bound) => Requirement::LessThan(bad_key.to_owned(), bound),
        };
        requirements[index] = corrupted;
        let text = requirements.iter().map(|requirement| requirement.text("")).collect::<Vec<_>>().join(",");
        prop_assert!(LabelSelector::parse(&text).is_err(), "{:?} accepted", text);
    }

    #[test]
    fn generated_field_selectors_match_as_the_reference_says(
        requirements in proptest::collection::vec(
            (proptest::sample::select(POD_FIELDS), proptest::sample::select(&["=", "==", "!="][..]), "[a-zA-Z0-9._-]{0,8}"),
            0..4,
        ),
        object in proptest::collection::vec("[a-z0-9]{0,2}", POD_FIELDS.len()),
    ) {
        let text = requirements.iter().map(|(field, operator, value)| format!("{field}{operator}{value}")).collect::<Vec<_>>().join(",");
        let selector = FieldSelector::parse(&text, POD_FIELDS).map_err(|error| TestCaseError::fail(format!("{text:?}: {error}")))?;
        let value_of = |field: &str| object[POD_FIELDS.iter().position(|known| *known == field).unwrap_or(0)].as_str();
        let expected = requirements.iter().all(|(field, operator, value)| (value_of(field) == value) == (*operator != "!="));
        prop_assert_eq!(selector.matches(value_of), expected, "{:?} against {:?}", text, object);
    }
}

// ------------------------------------------------------------------------------------------------
// Values overlays
// ------------------------------------------------------------------------------------------------

/// Keys of the values document at every level, and random ones.
fn values_key() -> BoxedStrategy<String> {
    let known = &[
        "sunk",
        "scheduler",
        "slurmConfig",
        "slurm",
        "nodeSets",
        "extraNodes",
        "runners",
        "sandboxes",
        "kubelet",
        "name",
        "enabled",
        "scope",
        "type",
        "KillWait",
        "PrologFlags",
        "users",
        "partitions",
        "replicas",
        "cpu",
        "memory",
        "labels",
        "policy",
        "gpuTypes",
        "auth",
        "tokens",
    ];
    prop_oneof![4 => proptest::sample::select(&known[..]).prop_map(str::to_owned), 1 => "[a-zA-Z]{1,6}"].boxed()
}

fn values_tree() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        1 => Just(Value::Null),
        2 => boolean(),
        2 => (-3i64..100).prop_map(Value::from),
        2 => "[a-z0-9]{0,4}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 40, 4, |inner| {
        prop_oneof![
            1 => proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            3 => proptest::collection::vec((values_key(), inner), 0..4).prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
    .boxed()
}

fn values_map() -> BoxedStrategy<Value> {
    proptest::collection::vec((values_key(), values_tree()), 0..5)
        .prop_map(|entries| Value::Object(entries.into_iter().collect()))
        .boxed()
}

/// Whether a null sits anywhere a map can reach through maps.
fn has_null_in_maps(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.values().any(|entry| entry.is_null() || has_null_in_maps(entry)),
        _ => false,
    }
}

/// Every (path, value) the overlay sets: its non-null, non-map entries reached through maps.
fn overlay_leaves(value: &Value, path: &mut Vec<String>, leaves: &mut Vec<(Vec<String>, Value)>) {
    if let Value::Object(map) = value {
        for (key, entry) in map {
            path.push(key.clone());
            match entry {
                Value::Null => {}
                Value::Object(_) => overlay_leaves(entry, path, leaves),
                other => leaves.push((path.clone(), other.clone())),
            }
            path.pop();
        }
    }
}

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn overlays_merge_like_helm(base in values_map(), overlay in values_map()) {
        let mut empty_overlaid = base.clone();
        merge_values(&mut empty_overlaid, &json!({}));
        prop_assert_eq!(&empty_overlaid, &base, "overlaying {{}} is the identity");

        let mut once = base.clone();
        merge_values(&mut once, &overlay);
        let mut twice = once.clone();
        merge_values(&mut twice, &overlay);
        prop_assert_eq!(&twice, &once, "applying an overlay twice is applying it once");

        if !has_null_in_maps(&base) {
            prop_assert!(!has_null_in_maps(&once), "a null removes, it is never stored: {}", once);
        }
        let mut leaves = Vec::new();
        overlay_leaves(&overlay, &mut Vec::new(), &mut leaves);
        for (path, value) in leaves {
            let merged = path.iter().try_fold(&once, |here, key| here.get(key));
            prop_assert_eq!(merged, Some(&value), "the overlay's {:?} wins", path);
        }
        if let (Value::Object(base_map), Value::Object(overlay_map), Value::Object(merged_map)) = (&base, &overlay, &once) {
            for (key, value) in base_map {
                if !overlay_map.contains_key(key) {
                    prop_assert_eq!(merged_map.get(key), Some(value), "{} is kept", key);
                }
            }
        }
    }

    /// Values documents that decode build a world or are refused with a field; none panics.
    #[test]
    fn decoded_values_build_a_world_or_name_the_field(
        replicas in prop_oneof![4 => 0u32..4, 1 => Just(u32::MAX), 1 => Just(100_001)],
        extra_replicas in prop_oneof![4 => 0u32..3, 1 => Just(u32::MAX)],
        cpu in prop_oneof![3 => Just("16".to_owned()), 1 => quantity_like()],
        memory in prop_oneof![3 => Just("64Gi".to_owned()), 1 => quantity_like()],
        slurmd_cpu in prop_oneof![3 => Just("1".to_owned()), 1 => quantity_like()],
        first_job_id in prop_oneof![0u32..2000, Just(u32::MAX), any::<u32>()],
        event_capacity in prop_oneof![0usize..10, Just(usize::MAX)],
        kill_wait in any::<u32>(),
        partition_set in prop_oneof![4 => Just("cpu".to_owned()), 1 => "[a-z]{1,3}"],
        preempt_mode in prop_oneof![4 => Just("OFF".to_owned()), 1 => Just("requeue".to_owned()), 1 => "[A-Z]{0,4}"],
        default_partition in proptest::bool::weighted(0.8),
    ) {
        let mut values = Values::scenario(Scenario::Ready);
        values.node_sets[0].replicas = replicas;
        values.node_sets.push(cwsandbox_sim::config::NodeSetValues { name: "more".to_owned(), replicas: extra_replicas, ..values.node_sets[0].clone() });
        values.node_sets[0].cpu = cpu;
        values.node_sets[0].memory = memory;
        values.node_sets[0].slurmd.requests.cpu = slurmd_cpu;
        values.slurm.first_job_id = first_job_id;
        values.sandboxes.event_capacity = event_capacity;
        values.slurm_config.kill_wait = kill_wait;
        values.slurm.partitions[0].node_sets = vec![partition_set];
        values.slurm.partitions[0].preempt_mode = preempt_mode;
        values.slurm.partitions[0].default = default_partition;
        let scheduler = values.scheduler.name.clone();
        let clock = ManualClock::new(SimTime::from_secs(0));
        match World::new(values, Box::new(clock.clone()), Box::new(SeededIds::new(1))) {
            Ok(mut world) => {
                // The world runs: SUNK Pods become jobs, which take job ids.
                for index in 0..2 {
                    let pod = PodRequest {
                        namespace: "default".to_owned(),
                        name: format!("pod-{index}"),
                        scheduler_name: scheduler.clone(),
                        containers: vec![(
                            "main".to_owned(),
                            "python:3.11".to_owned(),
                            ResourceAmounts { cpu: Some(Quantity::from_millis(100)), memory: Some(Quantity::from_units(1 << 20)), gpu: None },
                            ResourceAmounts::default(),
                        )],
                        ..PodRequest::default()
                    };
                    let _ = world.create_pod(pod, PodOwner::Other);
                }
                clock.advance(std::time::Duration::from_secs(5));
                world.tick();
            }
            Err(error) => {
                let fields: Vec<&str> = error.violations().iter().map(|v| v.field.as_str()).collect();
                prop_assert!(!fields.is_empty() && fields.iter().all(|field| !field.is_empty()), "{}", error);
            }
        }
    }
}

/// Found by `policy_violations_name_a_place_in_the_document`: a refused key holding dots was
/// reported as `policy.base.sunk.coreweave.com/partition`, a path to a field that is not there.
#[test]
fn a_refused_key_that_is_not_a_name_is_quoted_in_the_path() {
    let policy: Policy =
        serde_json::from_value(json!({"base": {"sunk.coreweave.com/partition": "x", "": 1, "spec": {"a[0]": 1}}}))
            .unwrap();
    let fields: Vec<String> = validate_policy(&policy).into_iter().map(|violation| violation.field).collect();
    assert_eq!(
        fields,
        [r#"policy.base[""]"#, r#"policy.base["sunk.coreweave.com/partition"]"#, r#"policy.base.spec["a[0]"]"#]
    );
}

/// Found by `decoded_values_build_a_world_or_name_the_field`: `replicas: 4294967295` started
/// building four billion Nodes (hours, and all the memory) instead of being refused.
#[test]
fn a_values_document_with_billions_of_nodes_is_refused_at_the_replicas() {
    let mut values = Values::scenario(Scenario::Ready);
    values.node_sets[0].replicas = u32::MAX;
    let error = World::new(values, Box::new(ManualClock::new(SimTime::from_secs(0))), Box::new(SeededIds::new(1)))
        .err()
        .expect("refused");
    assert_eq!(error.violations()[0].field, "nodeSets[0].replicas", "{error}");
}

/// Found while reading `build_topology` for the property above: an extra Node's bad quantity
/// named `extraNodes.cpu`, not which Node.
#[test]
fn an_extra_node_quantity_error_names_the_node() {
    let mut values = Values::scenario(Scenario::Ready);
    values.extra_nodes[0].memory = "lots".to_owned();
    let error = World::new(values, Box::new(ManualClock::new(SimTime::from_secs(0))), Box::new(SeededIds::new(1)))
        .err()
        .expect("refused");
    assert_eq!(error.violations()[0].field, "extraNodes[0].memory", "{error}");
}

/// Found by `decoded_values_build_a_world_or_name_the_field`: `firstJobId: 4294967295` built a
/// world whose first SUNK Pod overflowed the next job id (a panic in debug builds, id 0 after
/// wrapping in release).
#[test]
fn a_first_job_id_past_max_job_id_is_refused() {
    let mut values = Values::scenario(Scenario::Ready);
    values.slurm.first_job_id = u32::MAX;
    let error = World::new(values, Box::new(ManualClock::new(SimTime::from_secs(0))), Box::new(SeededIds::new(1)))
        .err()
        .expect("refused");
    assert_eq!(error.violations()[0].field, "slurm.firstJobId", "{error}");
}
