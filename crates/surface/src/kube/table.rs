//! Server-side printing (`meta.k8s.io/v1` Table), which kubectl asks for by default: the columns
//! and cells the API server's printers make for pods, nodes, namespaces, events and configmaps
//! (kubernetes `pkg/printers/internalversion/printers.go`). kubectl only lays the cells out; every
//! word of `STATUS` and `AGE` comes from here, computed at the emulator's clock.

use std::time::Duration;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde_json::{Value, json};

/// One column of a Table.
pub struct Column {
    name: &'static str,
    kind: &'static str,
    format: &'static str,
    priority: i32,
    description: &'static str,
}

const fn column(name: &'static str, description: &'static str) -> Column {
    Column { name, kind: "string", format: "", priority: 0, description }
}

const fn wide(name: &'static str, description: &'static str) -> Column {
    Column { name, kind: "string", format: "", priority: 1, description }
}

const NAME: Column = Column {
    name: "Name",
    kind: "string",
    format: "name",
    priority: 0,
    description: "Name must be unique within a namespace.",
};
const AGE: Column =
    column("Age", "CreationTimestamp is a timestamp representing the server time when this object was created.");

/// The columns the API server prints for Pods.
pub const POD_COLUMNS: &[Column] = &[
    NAME,
    column("Ready", "The aggregate readiness state of this pod for accepting traffic."),
    column("Status", "The aggregate status of the containers in this pod."),
    column(
        "Restarts",
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
    ),
    AGE,
    wide("IP", "podIP address allocated to the pod. Routable at least within the cluster."),
    wide("Node", "NodeName indicates in which node this pod is scheduled."),
    wide("Nominated Node", "nominatedNodeName is set only when this pod preempts other pods on the node."),
    wide("Readiness Gates", "If specified, all readiness gates will be evaluated for pod readiness."),
];

/// The columns the API server prints for Nodes.
pub const NODE_COLUMNS: &[Column] = &[
    NAME,
    column("Status", "The status of the node"),
    column("Roles", "The roles of the node"),
    AGE,
    column("Version", "Kubelet Version reported by the node."),
    wide("Internal-IP", "List of addresses reachable to the node. Queried from cloud provider, if available."),
    wide("External-IP", "List of addresses reachable to the node. Queried from cloud provider, if available."),
    wide("OS-Image", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
    wide("Kernel-Version", "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
    wide(
        "Container-Runtime",
        "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
    ),
];

/// The columns the API server prints for Namespaces.
pub const NAMESPACE_COLUMNS: &[Column] = &[NAME, column("Status", "The status of the namespace"), AGE];

/// The columns the API server prints for RuntimeClasses.
pub const RUNTIME_CLASS_COLUMNS: &[Column] = &[
    NAME,
    Column {
        name: "Handler",
        kind: "string",
        format: "",
        priority: 0,
        description: "handler specifies the underlying runtime and configuration that the CRI implementation will use to handle pods of this class.",
    },
    AGE,
];

/// A RuntimeClass's row.
pub fn runtime_class_row(class: &k8s_openapi::api::node::v1::RuntimeClass, now_seconds: i64) -> Vec<Value> {
    vec![
        json!(class.metadata.name.clone().unwrap_or_default()),
        json!(class.handler),
        json!(age(class.metadata.creation_timestamp.as_ref(), now_seconds)),
    ]
}

/// The columns the API server prints for ConfigMaps.
pub const CONFIG_MAP_COLUMNS: &[Column] = &[
    NAME,
    Column {
        name: "Data",
        kind: "integer",
        format: "",
        priority: 0,
        description: "Data contains the configuration data.",
    },
    AGE,
];

/// The columns the API server prints for Events.
pub const EVENT_COLUMNS: &[Column] = &[
    column("Last Seen", "The time at which the most recent occurrence of this event was recorded."),
    column("Type", "Type of this event (Normal, Warning), new types could be added in the future."),
    column(
        "Reason",
        "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
    ),
    column("Object", "The object that this event is about."),
    wide("Subobject", "The specific part of the object that this event is about."),
    wide("Source", "The component reporting this event. Should be a short machine understandable string."),
    column("Message", "A human-readable description of the status of this operation."),
    wide("First Seen", "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)"),
    Column {
        name: "Count",
        kind: "integer",
        format: "",
        priority: 1,
        description: "The number of times this event has occurred.",
    },
    wide("Name", "Name must be unique within a namespace."),
];

/// A column's definition as the Table carries it.
fn definition(column: &Column) -> Value {
    json!({
        "name": column.name,
        "type": column.kind,
        "format": column.format,
        "description": column.description,
        "priority": column.priority,
    })
}

/// What a row carries as its object (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// Nothing.
    None,
    /// `PartialObjectMetadata` (the default).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Parses the query parameter; `None` for an unknown value.
    pub fn parse(value: &str) -> Option<IncludeObject> {
        match value {
            "" | "Metadata" => Some(IncludeObject::Metadata),
            "None" => Some(IncludeObject::None),
            "Object" => Some(IncludeObject::Object),
            _ => None,
        }
    }
}

/// One printed row: its cells, row conditions, and the object behind it.
pub struct Row {
    /// Cells, one per column.
    pub cells: Vec<Value>,
    /// Row conditions (`Completed` for finished Pods).
    pub conditions: Option<Value>,
    /// The object as JSON.
    pub object: Value,
    /// Its metadata.
    pub metadata: ObjectMeta,
}

/// A Table of `rows` with `columns`.
pub fn table(columns: &[Column], rows: Vec<Row>, include: IncludeObject, resource_version: &str) -> Value {
    let rows: Vec<Value> = rows
        .into_iter()
        .map(|row| {
            let mut printed = json!({ "cells": row.cells });
            if let Some(conditions) = row.conditions {
                printed["conditions"] = conditions;
            }
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => {
                    printed["object"] = json!({
                        "kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": row.metadata,
                    });
                }
                IncludeObject::Object => printed["object"] = row.object,
            }
            printed
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": { "resourceVersion": resource_version },
        "columnDefinitions": columns.iter().map(definition).collect::<Vec<_>>(),
        "rows": rows,
    })
}

/// `translateTimestampSince`: how long ago, as `HumanDuration` prints it.
pub fn age(time: Option<&Time>, now_seconds: i64) -> String {
    match time {
        None => "<unknown>".to_owned(),
        Some(time) => human_duration(now_seconds - time.0.as_second()),
    }
}

/// apimachinery's `HumanDuration` for a signed number of seconds.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let rest = seconds % 60;
        return if rest == 0 { format!("{minutes}m") } else { format!("{minutes}m{rest}s") };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let rest = minutes % 60;
        return if rest == 0 { format!("{hours}h") } else { format!("{hours}h{rest}m") };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let rest = hours % 24;
        return if rest == 0 { format!("{}d", hours / 24) } else { format!("{}d{rest}h", hours / 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let years = hours / 24 / 365;
        let days = (hours / 24) % 365;
        return if days == 0 { format!("{years}y") } else { format!("{years}y{days}d") };
    }
    format!("{}y", hours / 24 / 365)
}

/// The kubelet's one-word summary of a Pod, as `printPod` computes it.
pub fn pod_status(pod: &core::Pod) -> (String, usize, usize) {
    let status = pod.status.clone().unwrap_or_default();
    let phase = status.phase.clone().unwrap_or_default();
    let mut reason = status.reason.clone().filter(|reason| !reason.is_empty()).unwrap_or_else(|| phase.clone());
    let conditions = status.conditions.clone().unwrap_or_default();
    if conditions
        .iter()
        .any(|condition| condition.type_ == "PodScheduled" && condition.reason.as_deref() == Some("SchedulingGated"))
    {
        reason = "SchedulingGated".to_owned();
    }
    let total = pod.spec.as_ref().map_or(0, |spec| spec.containers.len());
    let mut ready = 0;
    let mut has_running = false;
    for container in status.container_statuses.iter().flatten().rev() {
        let state = container.state.clone().unwrap_or_default();
        if let Some(waiting) =
            state.waiting.as_ref().and_then(|waiting| waiting.reason.clone()).filter(|reason| !reason.is_empty())
        {
            reason = waiting;
        } else if let Some(terminated) = &state.terminated {
            reason = match terminated.reason.clone().filter(|reason| !reason.is_empty()) {
                Some(terminated_reason) => terminated_reason,
                None if terminated.signal.is_some_and(|signal| signal != 0) => {
                    format!("Signal:{}", terminated.signal.unwrap_or_default())
                }
                None => format!("ExitCode:{}", terminated.exit_code),
            };
        } else if container.ready && state.running.is_some() {
            has_running = true;
            ready += 1;
        }
    }
    if reason == "Completed" && has_running {
        let pod_ready = conditions.iter().any(|condition| condition.type_ == "Ready" && condition.status == "True");
        reason = if pod_ready { "Running" } else { "NotReady" }.to_owned();
    }
    let terminal = phase == "Succeeded" || phase == "Failed";
    if pod.metadata.deletion_timestamp.is_some() && status.reason.as_deref() == Some("NodeLost") {
        reason = "Unknown".to_owned();
    } else if pod.metadata.deletion_timestamp.is_some() && !terminal {
        reason = "Terminating".to_owned();
    }
    (reason, ready, total)
}

fn or_none(value: Option<&str>) -> String {
    value.filter(|value| !value.is_empty()).unwrap_or("<none>").to_owned()
}

/// A Pod's row.
pub fn pod_row(pod: &core::Pod, now_seconds: i64) -> Vec<Value> {
    let (status, ready, total) = pod_status(pod);
    let restarts: i32 = pod
        .status
        .iter()
        .flat_map(|status| status.container_statuses.iter().flatten())
        .map(|container| container.restart_count)
        .sum();
    let ip = pod.status.as_ref().and_then(|status| status.pod_ip.as_deref());
    let node = pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref());
    let nominated = pod.status.as_ref().and_then(|status| status.nominated_node_name.as_deref());
    vec![
        json!(pod.metadata.name.clone().unwrap_or_default()),
        json!(format!("{ready}/{total}")),
        json!(status),
        json!(restarts.to_string()),
        json!(age(pod.metadata.creation_timestamp.as_ref(), now_seconds)),
        json!(or_none(ip)),
        json!(or_none(node)),
        json!(or_none(nominated)),
        json!("<none>"),
    ]
}

/// The row conditions the API server attaches to finished Pods.
pub fn pod_row_conditions(pod: &core::Pod) -> Option<Value> {
    match pod.status.as_ref().and_then(|status| status.phase.as_deref()) {
        Some("Succeeded") => Some(json!([{
            "type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."
        }])),
        Some("Failed") => Some(json!([{
            "type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."
        }])),
        _ => None,
    }
}

/// A Node's row.
pub fn node_row(node: &core::Node, now_seconds: i64) -> Vec<Value> {
    let status = node.status.clone().unwrap_or_default();
    let ready = status.conditions.iter().flatten().find(|condition| condition.type_ == "Ready");
    let mut words = vec![
        match ready.map(|condition| condition.status.as_str()) {
            Some("True") => "Ready",
            _ => "NotReady",
        }
        .to_owned(),
    ];
    if node.spec.as_ref().and_then(|spec| spec.unschedulable) == Some(true) {
        words.push("SchedulingDisabled".to_owned());
    }
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let mut roles: Vec<String> = labels
        .iter()
        .filter_map(|(key, value)| {
            key.strip_prefix("node-role.kubernetes.io/")
                .map(str::to_owned)
                .or_else(|| (key == "kubernetes.io/role").then(|| value.clone()))
        })
        .filter(|role| !role.is_empty())
        .collect();
    roles.sort();
    let info = status.node_info.clone().unwrap_or_default();
    let address = |kind: &str| {
        status.addresses.iter().flatten().find(|address| address.type_ == kind).map(|address| address.address.clone())
    };
    vec![
        json!(node.metadata.name.clone().unwrap_or_default()),
        json!(words.join(",")),
        json!(if roles.is_empty() { "<none>".to_owned() } else { roles.join(",") }),
        json!(age(node.metadata.creation_timestamp.as_ref(), now_seconds)),
        json!(info.kubelet_version),
        json!(or_none(address("InternalIP").as_deref())),
        json!(or_none(address("ExternalIP").as_deref())),
        json!(info.os_image),
        json!(info.kernel_version),
        json!(info.container_runtime_version),
    ]
}

/// A Namespace's row.
pub fn namespace_row(namespace: &core::Namespace, now_seconds: i64) -> Vec<Value> {
    vec![
        json!(namespace.metadata.name.clone().unwrap_or_default()),
        json!(namespace.status.as_ref().and_then(|status| status.phase.clone()).unwrap_or_default()),
        json!(age(namespace.metadata.creation_timestamp.as_ref(), now_seconds)),
    ]
}

/// A ConfigMap's row.
pub fn config_map_row(map: &core::ConfigMap, now_seconds: i64) -> Vec<Value> {
    let entries =
        map.data.as_ref().map_or(0, |data| data.len()) + map.binary_data.as_ref().map_or(0, |data| data.len());
    vec![
        json!(map.metadata.name.clone().unwrap_or_default()),
        json!(entries),
        json!(age(map.metadata.creation_timestamp.as_ref(), now_seconds)),
    ]
}

/// An Event's row.
pub fn event_row(event: &core::Event, now_seconds: i64) -> Vec<Value> {
    let involved = &event.involved_object;
    let object = format!(
        "{}/{}",
        involved.kind.clone().unwrap_or_default().to_lowercase(),
        involved.name.clone().unwrap_or_default()
    );
    let source = event.source.as_ref().map_or_else(String::new, |source| {
        let component = source.component.clone().unwrap_or_default();
        match source.host.as_deref().filter(|host| !host.is_empty()) {
            Some(host) => format!("{component}, {host}"),
            None => component,
        }
    });
    let last = event.last_timestamp.as_ref().or(event.first_timestamp.as_ref());
    let first = event.first_timestamp.as_ref().or(event.last_timestamp.as_ref());
    vec![
        json!(age(last, now_seconds)),
        json!(event.type_.clone().unwrap_or_default()),
        json!(event.reason.clone().unwrap_or_default()),
        json!(object),
        json!(involved.field_path.clone().unwrap_or_default()),
        json!(source),
        json!(event.message.clone().unwrap_or_default().trim().to_owned()),
        json!(age(first, now_seconds)),
        json!(event.count.unwrap_or(1)),
        json!(event.metadata.name.clone().unwrap_or_default()),
    ]
}

/// How long a Duration is in whole seconds, for ages.
pub fn whole_seconds(duration: Duration) -> i64 {
    i64::try_from(duration.as_secs()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(
        phase: &str,
        reason: Option<&str>,
        state: Option<core::ContainerState>,
        ready: bool,
        deleting: bool,
    ) -> core::Pod {
        let mut pod = core::Pod {
            spec: Some(core::PodSpec { containers: vec![core::Container::default()], ..Default::default() }),
            status: Some(core::PodStatus {
                phase: Some(phase.to_owned()),
                reason: reason.map(str::to_owned),
                container_statuses: state
                    .map(|state| vec![core::ContainerStatus { ready, state: Some(state), ..Default::default() }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        if deleting {
            pod.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        }
        pod
    }

    fn waiting(reason: &str) -> core::ContainerState {
        core::ContainerState {
            waiting: Some(core::ContainerStateWaiting { reason: Some(reason.to_owned()), message: None }),
            ..Default::default()
        }
    }

    fn terminated(reason: Option<&str>, exit_code: i32) -> core::ContainerState {
        core::ContainerState {
            terminated: Some(core::ContainerStateTerminated {
                reason: reason.map(str::to_owned),
                exit_code,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn running() -> core::ContainerState {
        core::ContainerState { running: Some(core::ContainerStateRunning { started_at: None }), ..Default::default() }
    }

    #[test]
    fn pod_status_words_follow_print_pod() {
        let status = |pod: core::Pod| pod_status(&pod);
        assert_eq!(status(pod("Pending", None, None, false, false)), ("Pending".to_owned(), 0, 1));
        assert_eq!(status(pod("Failed", Some("OutOfcpu"), None, false, false)), ("OutOfcpu".to_owned(), 0, 1));
        assert_eq!(
            status(pod("Pending", None, Some(waiting("ContainerCreating")), false, false)).0,
            "ContainerCreating"
        );
        assert_eq!(status(pod("Running", None, Some(running()), true, false)), ("Running".to_owned(), 1, 1));
        assert_eq!(status(pod("Running", None, Some(running()), true, true)), ("Terminating".to_owned(), 1, 1));
        assert_eq!(status(pod("Succeeded", None, Some(terminated(Some("Completed"), 0)), false, false)).0, "Completed");
        assert_eq!(status(pod("Failed", None, Some(terminated(Some("Error"), 1)), false, false)).0, "Error");
        assert_eq!(status(pod("Failed", None, Some(terminated(None, 3)), false, false)).0, "ExitCode:3");
        // A finished Pod being deleted keeps its final word.
        assert_eq!(status(pod("Succeeded", None, Some(terminated(Some("Completed"), 0)), false, true)).0, "Completed");
    }

    #[test]
    fn human_duration_follows_apimachinery() {
        let cases = [
            (-2, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (12, "12s"),
            (119, "119s"),
            (120, "2m"),
            (185, "3m5s"),
            (599, "9m59s"),
            (600, "10m"),
            (179 * 60 + 59, "179m"),
            (3 * 3600, "3h"),
            (5 * 3600, "5h"),
            (5 * 3600 + 7 * 60, "5h7m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (48 * 3600, "2d"),
            (50 * 3600, "2d2h"),
            (8 * 86400, "8d"),
            (400 * 86400, "400d"),
            (730 * 86400, "2y"),
            (735 * 86400, "2y5d"),
            (8 * 365 * 86400, "8y"),
        ];
        for (seconds, expected) in cases {
            assert_eq!(human_duration(seconds), expected, "{seconds} s");
        }
    }
}
