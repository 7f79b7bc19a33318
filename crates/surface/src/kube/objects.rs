//! The emulator API's Kubernetes messages (`coreweave.sandbox.emulator.v1`) as `core/v1` objects of
//! `k8s-openapi`: what kubectl decodes. The simulation's objects reach this module already
//! converted by `convert::emulator`, so the two views of one Pod can never disagree.

use std::collections::BTreeMap;

use cwsandbox_api::emulator_v1 as pb;
use cwsandbox_api::wkt::Timestamp;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// The kubelet version the emulated Nodes report.
pub const KUBELET_VERSION: &str = "v1.33.0";

/// A protobuf Timestamp as a Kubernetes time (whole seconds, as the API server keeps them).
pub fn time(timestamp: &Timestamp) -> Time {
    Time(
        k8s_openapi::jiff::Timestamp::from_second(timestamp.seconds)
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

fn map(source: &std::collections::HashMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!source.is_empty()).then(|| source.iter().map(|(key, value)| (key.clone(), value.clone())).collect())
}

fn quantities(source: &std::collections::HashMap<String, String>) -> Option<BTreeMap<String, Quantity>> {
    (!source.is_empty()).then(|| source.iter().map(|(key, value)| (key.clone(), Quantity(value.clone()))).collect())
}

fn text(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_owned())
}

fn metadata(meta: Option<&pb::ObjectMeta>) -> ObjectMeta {
    let Some(meta) = meta else { return ObjectMeta::default() };
    ObjectMeta {
        name: text(&meta.name),
        namespace: text(&meta.namespace),
        uid: text(&meta.uid),
        resource_version: text(&meta.resource_version),
        labels: map(&meta.labels),
        annotations: map(&meta.annotations),
        creation_timestamp: meta.creation_timestamp.as_ref().map(time),
        deletion_timestamp: meta.deletion_timestamp.as_ref().map(time),
        deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
        ..ObjectMeta::default()
    }
}

/// A RuntimeClass (`node.k8s.io/v1`).
pub fn runtime_class(class: &cwsandbox_sim::k8s::RuntimeClass) -> k8s_openapi::api::node::v1::RuntimeClass {
    let meta = crate::convert::emulator::meta(&class.name, "", class.created);
    k8s_openapi::api::node::v1::RuntimeClass {
        metadata: metadata(Some(&meta)),
        handler: class.handler.clone(),
        overhead: None,
        scheduling: None,
    }
}

fn container(source: &pb::Container) -> core::Container {
    let resources = (!source.requests.is_empty() || !source.limits.is_empty()).then(|| core::ResourceRequirements {
        requests: quantities(&source.requests),
        limits: quantities(&source.limits),
        ..core::ResourceRequirements::default()
    });
    core::Container {
        name: source.name.clone(),
        image: text(&source.image),
        command: (!source.command.is_empty()).then(|| source.command.clone()),
        args: (!source.args.is_empty()).then(|| source.args.clone()),
        env: (!source.env.is_empty()).then(|| {
            source
                .env
                .iter()
                .map(|var| core::EnvVar { name: var.name.clone(), value: Some(var.value.clone()), value_from: None })
                .collect()
        }),
        working_dir: text(&source.working_dir),
        resources,
        termination_message_path: Some("/dev/termination-log".to_owned()),
        termination_message_policy: Some("File".to_owned()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        ..core::Container::default()
    }
}

fn pod_spec(source: &pb::PodSpec) -> core::PodSpec {
    let required_affinity = (!source.required_node_affinity.is_empty()).then(|| core::Affinity {
        node_affinity: Some(core::NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(core::NodeSelector {
                node_selector_terms: source
                    .required_node_affinity
                    .iter()
                    .map(|term| core::NodeSelectorTerm {
                        match_expressions: Some(
                            term.match_expressions
                                .iter()
                                .map(|requirement| core::NodeSelectorRequirement {
                                    key: requirement.key.clone(),
                                    operator: requirement.operator.clone(),
                                    values: Some(requirement.values.clone()),
                                })
                                .collect(),
                        ),
                        match_fields: None,
                    })
                    .collect(),
            }),
            ..core::NodeAffinity::default()
        }),
        ..core::Affinity::default()
    });
    let typed = core::PodSpec {
        containers: source.containers.iter().map(container).collect(),
        scheduler_name: text(&source.scheduler_name),
        node_name: text(&source.node_name),
        termination_grace_period_seconds: Some(source.termination_grace_period_seconds),
        tolerations: (!source.tolerations.is_empty()).then(|| {
            source
                .tolerations
                .iter()
                .map(|toleration| core::Toleration {
                    key: text(&toleration.key),
                    operator: text(&toleration.operator),
                    value: text(&toleration.value),
                    effect: text(&toleration.effect),
                    toleration_seconds: None,
                })
                .collect()
        }),
        node_selector: map(&source.node_selector),
        affinity: required_affinity,
        priority_class_name: text(&source.priority_class_name),
        restart_policy: Some("Never".to_owned()),
        priority: Some(0),
        service_account_name: Some("default".to_owned()),
        dns_policy: Some("ClusterFirst".to_owned()),
        ..core::PodSpec::default()
    };
    // The rest of the spec (what a policy's `base` or the sandbox set beyond the modelled keys)
    // keeps its Kubernetes shape; keys the model already carries win.
    let Some(extra) = source.extra.as_ref().filter(|extra| !extra.fields.is_empty()) else { return typed };
    let Ok(serde_json::Value::Object(mut tree)) = serde_json::to_value(&typed) else { return typed };
    if let serde_json::Value::Object(extra) = crate::convert::emulator::tree_of(extra) {
        for (key, value) in extra {
            tree.entry(key).or_insert(value);
        }
    }
    serde_json::from_value(serde_json::Value::Object(tree)).unwrap_or(typed)
}

fn container_status(source: &pb::ContainerStatus) -> core::ContainerStatus {
    use pb::container_state::State;
    let state = source.state.as_ref().and_then(|state| state.state.as_ref()).map(|state| match state {
        State::Waiting(waiting) => core::ContainerState {
            waiting: Some(core::ContainerStateWaiting { reason: text(&waiting.reason), message: None }),
            ..core::ContainerState::default()
        },
        State::Running(running) => core::ContainerState {
            running: Some(core::ContainerStateRunning { started_at: running.started_at.as_ref().map(time) }),
            ..core::ContainerState::default()
        },
        State::Terminated(terminated) => core::ContainerState {
            terminated: Some(core::ContainerStateTerminated {
                exit_code: terminated.exit_code,
                reason: text(&terminated.reason),
                finished_at: terminated.finished_at.as_ref().map(time),
                ..core::ContainerStateTerminated::default()
            }),
            ..core::ContainerState::default()
        },
    });
    core::ContainerStatus {
        name: source.name.clone(),
        image: source.image.clone(),
        image_id: String::new(),
        ready: source.ready,
        started: Some(source.started),
        restart_count: source.restart_count,
        state,
        ..core::ContainerStatus::default()
    }
}

/// The QoS class the kubelet would give these containers.
fn qos_class(containers: &[pb::Container]) -> &'static str {
    let requests_or_limits =
        containers.iter().any(|container| !container.requests.is_empty() || !container.limits.is_empty());
    if !requests_or_limits {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|container| {
        ["cpu", "memory"].iter().all(|resource| {
            let limit = container.limits.get(*resource);
            limit.is_some() && container.requests.get(*resource).is_none_or(|request| Some(request) == limit)
        })
    });
    if guaranteed { "Guaranteed" } else { "Burstable" }
}

/// A Pod.
pub fn pod(source: &pb::Pod) -> core::Pod {
    let spec = source.spec.as_ref().map(pod_spec);
    let status = source.status.as_ref().map(|status| core::PodStatus {
        phase: text(&status.phase),
        reason: text(&status.reason),
        message: text(&status.message),
        conditions: (!status.conditions.is_empty()).then(|| {
            status
                .conditions
                .iter()
                .map(|condition| core::PodCondition {
                    type_: condition.r#type.clone(),
                    status: condition.status.clone(),
                    reason: text(&condition.reason),
                    message: text(&condition.message),
                    ..core::PodCondition::default()
                })
                .collect()
        }),
        container_statuses: (!status.container_statuses.is_empty())
            .then(|| status.container_statuses.iter().map(container_status).collect()),
        start_time: status.start_time.as_ref().map(time),
        qos_class: source.spec.as_ref().map(|spec| qos_class(&spec.containers).to_owned()),
        pod_ip: text(&status.pod_ip),
        pod_ips: (!status.pod_ip.is_empty()).then(|| vec![core::PodIP { ip: status.pod_ip.clone() }]),
        ..core::PodStatus::default()
    });
    core::Pod { metadata: metadata(source.metadata.as_ref()), spec, status }
}

/// A Node.
pub fn node(source: &pb::Node) -> core::Node {
    let taints = (!source.taints.is_empty()).then(|| {
        source
            .taints
            .iter()
            .map(|taint| core::Taint {
                key: taint.key.clone(),
                value: text(&taint.value),
                effect: taint.effect.clone(),
                time_added: None,
            })
            .collect()
    });
    let conditions = source
        .conditions
        .iter()
        .map(|condition| core::NodeCondition {
            type_: condition.r#type.clone(),
            status: condition.status.clone(),
            reason: text(&condition.reason),
            message: text(&condition.message),
            ..core::NodeCondition::default()
        })
        .collect();
    core::Node {
        metadata: metadata(source.metadata.as_ref()),
        spec: Some(core::NodeSpec { taints, ..core::NodeSpec::default() }),
        status: Some(core::NodeStatus {
            capacity: quantities(&source.capacity),
            allocatable: quantities(&source.allocatable),
            conditions: Some(conditions),
            node_info: Some(core::NodeSystemInfo {
                architecture: "amd64".to_owned(),
                operating_system: "linux".to_owned(),
                kubelet_version: KUBELET_VERSION.to_owned(),
                kube_proxy_version: String::new(),
                os_image: "cwsandbox-emulator".to_owned(),
                kernel_version: "emulated".to_owned(),
                container_runtime_version: "cwsandbox-emulator://0.1.0".to_owned(),
                ..core::NodeSystemInfo::default()
            }),
            ..core::NodeStatus::default()
        }),
    }
}

/// An Event.
pub fn event(source: &pb::Event) -> core::Event {
    let involved = source.involved_object.clone().unwrap_or_default();
    core::Event {
        metadata: metadata(source.metadata.as_ref()),
        involved_object: core::ObjectReference {
            kind: text(&involved.kind),
            namespace: text(&involved.namespace),
            name: text(&involved.name),
            uid: text(&involved.uid),
            api_version: text(&involved.api_version),
            ..core::ObjectReference::default()
        },
        reason: text(&source.reason),
        message: text(&source.message),
        type_: text(&source.r#type),
        source: source
            .source
            .as_ref()
            .map(|origin| core::EventSource { component: text(&origin.component), host: None }),
        first_timestamp: source.first_timestamp.as_ref().map(time),
        last_timestamp: source.last_timestamp.as_ref().map(time),
        count: Some(source.count),
        reporting_component: text(&source.reporting_component),
        reporting_instance: Some(String::new()),
        ..core::Event::default()
    }
}

/// A ConfigMap.
pub fn config_map(source: &pb::ConfigMap) -> core::ConfigMap {
    core::ConfigMap {
        metadata: metadata(source.metadata.as_ref()),
        data: Some(source.data.iter().map(|(key, value)| (key.clone(), value.clone())).collect()),
        ..core::ConfigMap::default()
    }
}

/// A Namespace; the API server labels every Namespace with its own name.
pub fn namespace(source: &pb::Namespace) -> core::Namespace {
    let mut metadata = metadata(source.metadata.as_ref());
    if let Some(name) = metadata.name.clone() {
        metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .entry("kubernetes.io/metadata.name".to_owned())
            .or_insert(name);
    }
    core::Namespace {
        metadata,
        spec: Some(core::NamespaceSpec { finalizers: Some(vec!["kubernetes".to_owned()]) }),
        status: Some(core::NamespaceStatus { phase: text(&source.phase), conditions: None }),
    }
}
