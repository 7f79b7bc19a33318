//! Conversions for the emulator's own API (`coreweave.sandbox.emulator.v1`): the simulation's
//! Kubernetes objects, Slurm jobs, nodes and partitions, values and clock as messages, and the
//! requests' filters as simulation queries. Shapes follow Kubernetes (`core/v1`) and Slurm's own
//! field names, so the CLI's views and a Kubernetes facade render from fields, never from text.

use std::collections::HashMap;

use cwsandbox_api::emulator_v1 as pb;
use cwsandbox_sim::Reason;
use cwsandbox_sim::config::{SlurmUser, Values};
use cwsandbox_sim::k8s::{ConfigMap, ContainerState, Event, Namespace, Node, Pod, PodOwner, PodPhase, ResourceTotals};
use cwsandbox_sim::quantity::{Quantity, format_bytes};
use cwsandbox_sim::query::{JobQuery, JobRow, JobSource, PlaceholderPod, Scope, SlurmController};
use cwsandbox_sim::resolved::ResourceAmounts;
use cwsandbox_sim::slurm::{JobBaseState, JobId, JobKind, NodeState, Partition, PreemptMode, Sharing, SlurmNode};
use cwsandbox_sim::steps::{JobStep, controller_exit_code, job_steps};
use cwsandbox_sim::time::SimTime;

use super::timestamp;
use crate::errors::ApiError;
use cwsandbox_host::clock::EmulatorClock;

// ------------------------------------------------------------------------------------------------
// Values
// ------------------------------------------------------------------------------------------------

/// The values as YAML text and as a Struct.
pub fn values(values: &Values) -> Result<(String, pbjson_types::Struct), ApiError> {
    let internal = |what: &str, error: String| {
        ApiError::new(tonic::Code::Internal, Reason::InvalidRequest, format!("{what}: {error}"))
    };
    let yaml = serde_saphyr::to_string(values).map_err(|error| internal("values as YAML", error.to_string()))?;
    let tree = serde_json::to_value(values).map_err(|error| internal("values as JSON", error.to_string()))?;
    Ok((yaml, struct_of(tree).map_err(|error| internal("values as a Struct", error.to_string()))?))
}

/// Why a JSON tree is not a Struct (it is not an object, or holds a number JSON cannot carry).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct StructError(#[from] serde_json::Error);

/// A JSON object as a Struct.
pub fn struct_of(tree: serde_json::Value) -> Result<pbjson_types::Struct, StructError> {
    Ok(serde_json::from_value(tree)?)
}

/// A Struct as a JSON tree. Struct numbers are doubles; whole ones become integers again, so
/// `KillWait: 60` reads as the integer the values expect.
pub fn tree_of(values: &pbjson_types::Struct) -> serde_json::Value {
    serde_json::Value::Object(values.fields.iter().map(|(key, value)| (key.clone(), value_of(value))).collect())
}

fn value_of(value: &pbjson_types::Value) -> serde_json::Value {
    use pbjson_types::value::Kind;
    match &value.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::BoolValue(flag)) => serde_json::Value::Bool(*flag),
        Some(Kind::StringValue(text)) => serde_json::Value::String(text.clone()),
        Some(Kind::NumberValue(number)) => {
            const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53: every whole double below is exact
            if number.fract() == 0.0 && number.abs() < EXACT {
                serde_json::Value::from(*number as i64)
            } else {
                serde_json::Number::from_f64(*number).map_or(serde_json::Value::Null, serde_json::Value::Number)
            }
        }
        Some(Kind::StructValue(inner)) => tree_of(inner),
        Some(Kind::ListValue(list)) => serde_json::Value::Array(list.values.iter().map(value_of).collect()),
    }
}

// ------------------------------------------------------------------------------------------------
// Kubernetes objects
// ------------------------------------------------------------------------------------------------

pub(crate) fn meta(name: &str, namespace: &str, created: SimTime) -> pb::ObjectMeta {
    pb::ObjectMeta {
        name: name.to_owned(),
        namespace: namespace.to_owned(),
        creation_timestamp: Some(timestamp(created)),
        ..Default::default()
    }
}

fn cpu(millis: i64) -> String {
    Quantity::from_millis(millis).to_string()
}

/// Node-level totals as a Kubernetes resource list.
fn resource_list(totals: ResourceTotals) -> HashMap<String, String> {
    let mut list = HashMap::from([
        ("cpu".to_owned(), cpu(totals.cpu_millis)),
        ("memory".to_owned(), format_bytes(totals.memory_bytes)),
    ]);
    if totals.gpus > 0 {
        list.insert("nvidia.com/gpu".to_owned(), totals.gpus.to_string());
    }
    list
}

/// A container's requests or limits as a Kubernetes resource list (only what is stated).
fn amounts(amounts: &ResourceAmounts) -> HashMap<String, String> {
    let mut list = HashMap::new();
    if let Some(quantity) = amounts.cpu {
        list.insert("cpu".to_owned(), quantity.to_string());
    }
    if let Some(quantity) = amounts.memory {
        list.insert("memory".to_owned(), format_bytes(quantity.units_ceil()));
    }
    if let Some(gpus) = amounts.gpu.filter(|gpus| *gpus > 0) {
        list.insert("nvidia.com/gpu".to_owned(), gpus.to_string());
    }
    list
}

fn condition(kind: &str, status: bool, reason: &str, message: &str) -> pb::Condition {
    pb::Condition {
        r#type: kind.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
    }
}

fn labels<'a>(map: impl IntoIterator<Item = (&'a String, &'a String)>) -> HashMap<String, String> {
    map.into_iter().map(|(key, value)| (key.clone(), value.clone())).collect()
}

/// A Pod, with the placeholder job the SUNK scheduler submitted for it (if any).
pub fn pod(pod: &Pod, placeholder: Option<JobId>) -> pb::Pod {
    let mut metadata = meta(&pod.name, &pod.namespace, pod.created);
    metadata.uid = pod.uid.to_string();
    metadata.resource_version = pod.resource_version.to_string();
    metadata.labels = labels(&pod.labels);
    metadata.annotations = labels(&pod.annotations);
    metadata.deletion_timestamp = pod.deletion_timestamp.map(timestamp);
    metadata.deletion_grace_period_seconds = pod.deletion_grace_period_seconds;

    let containers = pod
        .containers
        .iter()
        .map(|container| pb::Container {
            name: container.name.clone(),
            image: container.image.clone(),
            command: container.command.clone(),
            args: container.args.clone(),
            env: container
                .env
                .iter()
                .map(|(name, value)| pb::EnvVar { name: name.clone(), value: value.clone() })
                .collect(),
            working_dir: container.working_dir.clone().unwrap_or_default(),
            requests: amounts(&container.requests),
            limits: amounts(&container.limits),
        })
        .collect();
    let extra = (!pod.extra_spec.is_empty())
        .then(|| struct_of(serde_json::Value::Object(pod.extra_spec.clone().into_iter().collect())).ok())
        .flatten();
    let spec = pb::PodSpec {
        scheduler_name: pod.scheduler_name.clone(),
        node_name: pod.node_name.as_deref().unwrap_or_default().to_owned(),
        termination_grace_period_seconds: pod.termination_grace_period_seconds,
        containers,
        tolerations: pod
            .tolerations
            .iter()
            .map(|toleration| pb::Toleration {
                key: toleration.key.clone(),
                operator: toleration.operator.clone(),
                value: toleration.value.clone(),
                effect: toleration.effect.clone(),
            })
            .collect(),
        node_selector: labels(&pod.node_selector),
        required_node_affinity: pod
            .required_node_affinity
            .iter()
            .map(|term| pb::NodeSelectorTerm {
                match_expressions: term
                    .iter()
                    .map(|(key, values)| pb::NodeSelectorRequirement {
                        key: key.clone(),
                        operator: "In".to_owned(),
                        values: values.clone(),
                    })
                    .collect(),
            })
            .collect(),
        priority_class_name: pod.priority_class_name.clone().unwrap_or_default(),
        extra,
    };

    // Conditions in the order Kubernetes lists them; the kubelet's only once it admitted the Pod.
    let mut conditions = Vec::new();
    if pod.start_time.is_some() {
        let ready = pod.shown_phase() == PodPhase::Running
            && pod.containers.iter().all(|container| matches!(container.state, ContainerState::Running(_)));
        let not_ready_reason = if pod.phase.is_terminal() { "PodCompleted" } else { "ContainersNotReady" };
        let reason = if ready { "" } else { not_ready_reason };
        conditions.push(condition("Initialized", true, "", ""));
        conditions.push(condition("Ready", ready, reason, ""));
        conditions.push(condition("ContainersReady", ready, reason, ""));
    }
    if let Some((scheduled, reason, message)) = &pod.scheduled_condition {
        conditions.push(condition("PodScheduled", *scheduled, reason, message));
    }
    let container_statuses = if pod.start_time.is_some() {
        pod.containers
            .iter()
            .map(|container| {
                let (state, ready, started) = match &container.state {
                    ContainerState::Waiting(reason) => (
                        pb::container_state::State::Waiting(pb::ContainerStateWaiting { reason: reason.clone() }),
                        false,
                        false,
                    ),
                    ContainerState::Running(since) => (
                        pb::container_state::State::Running(pb::ContainerStateRunning {
                            started_at: Some(timestamp(*since)),
                        }),
                        true,
                        true,
                    ),
                    ContainerState::Terminated { exit_code, reason, finished } => (
                        pb::container_state::State::Terminated(pb::ContainerStateTerminated {
                            exit_code: *exit_code,
                            reason: reason.clone(),
                            finished_at: Some(timestamp(*finished)),
                        }),
                        false,
                        true,
                    ),
                };
                pb::ContainerStatus {
                    name: container.name.clone(),
                    image: container.image.clone(),
                    ready,
                    started,
                    restart_count: 0,
                    state: Some(pb::ContainerState { state: Some(state) }),
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    let status = pb::PodStatus {
        phase: pod.shown_phase().as_str().to_owned(),
        reason: pod.reason.clone().unwrap_or_default(),
        message: pod.message.clone().unwrap_or_default(),
        conditions,
        container_statuses,
        start_time: pod.start_time.map(timestamp),
        pod_ip: pod.pod_ip.map(|address| address.to_string()).unwrap_or_default(),
    };
    let (kind, sandbox_id, slurm_node) = match &pod.owner {
        PodOwner::Sandbox(id) => (pb::PodOriginKind::Sandbox, id.to_string(), String::new()),
        PodOwner::Slurmd { slurm_node } => (pb::PodOriginKind::Slurmd, String::new(), slurm_node.clone()),
        PodOwner::Scheduler => (pb::PodOriginKind::Scheduler, String::new(), String::new()),
        PodOwner::Other => (pb::PodOriginKind::Other, String::new(), String::new()),
    };
    pb::Pod {
        metadata: Some(metadata),
        spec: Some(spec),
        status: Some(status),
        origin: Some(pb::PodOrigin { kind: kind as i32, sandbox_id, slurm_node, placeholder_job_id: placeholder }),
    }
}

/// A Node, with the Slurm node whose slurmd Pod runs there (if any).
/// What PruneImages removed, or an empty answer for a runtime that pulls no images.
pub fn prune_images(
    pruned: Option<(std::path::PathBuf, cwsandbox_host::runtime::PruneReport)>,
) -> pb::PruneImagesResponse {
    let Some((cache, report)) = pruned else { return pb::PruneImagesResponse::default() };
    let signed = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    pb::PruneImagesResponse {
        image_cache: cache.display().to_string(),
        images: report
            .removed
            .into_iter()
            .map(|image| pb::PrunedImage {
                digest: image.digest,
                references: image.references,
                bytes: signed(image.bytes),
            })
            .collect(),
        blobs_removed: signed(report.blobs_removed),
        bytes_freed: signed(report.bytes_freed),
        in_use_digests: report.in_use,
        bytes_after: signed(report.bytes_after),
    }
}

pub fn node(node: &Node, slurm_node: Option<&str>) -> pb::Node {
    let mut metadata = meta(&node.name, "", node.created);
    metadata.uid = node.uid.clone();
    metadata.labels = labels(&node.labels);
    pb::Node {
        metadata: Some(metadata),
        taints: node
            .taints
            .iter()
            .map(|taint| pb::Taint { key: taint.key.clone(), value: taint.value.clone(), effect: taint.effect.clone() })
            .collect(),
        capacity: resource_list(node.allocatable),
        allocatable: resource_list(node.allocatable),
        requested: resource_list(node.requested),
        conditions: vec![if node.ready {
            condition("Ready", true, "KubeletReady", "kubelet is posting ready status")
        } else {
            condition("Ready", false, "NodeStatusUnknown", "Kubelet stopped posting node status.")
        }],
        slurm_node: slurm_node.unwrap_or_default().to_owned(),
    }
}

/// An Event.
pub fn event(event: &Event) -> pb::Event {
    let mut metadata = meta(&event.name(), event.namespace(), event.time);
    metadata.resource_version = event.sequence.to_string();
    pb::Event {
        metadata: Some(metadata),
        involved_object: Some(pb::ObjectReference {
            kind: event.involved.kind.to_owned(),
            namespace: event.involved.namespace.to_string(),
            name: event.involved.name.to_string(),
            uid: event.involved.uid.to_string(),
            api_version: "v1".to_owned(),
        }),
        reason: event.reason.to_string(),
        message: event.message.to_string(),
        r#type: event.event_type.as_str().to_owned(),
        source: Some(pb::EventSource { component: event.source.to_owned() }),
        first_timestamp: Some(timestamp(event.time)),
        last_timestamp: Some(timestamp(event.time)),
        count: 1,
        reporting_component: event.source.to_owned(),
        sequence: event.sequence,
    }
}

/// A ConfigMap.
pub fn config_map(map: &ConfigMap) -> pb::ConfigMap {
    let mut metadata = meta(&map.name, &map.namespace, map.created);
    metadata.labels = labels(&map.labels);
    pb::ConfigMap { metadata: Some(metadata), data: labels(&map.data) }
}

/// A Namespace.
pub fn namespace(namespace: &Namespace) -> pb::Namespace {
    let mut metadata = meta(&namespace.name, "", namespace.created);
    metadata.labels = labels(&namespace.labels);
    pb::Namespace { metadata: Some(metadata), phase: "Active".to_owned() }
}

// ------------------------------------------------------------------------------------------------
// Slurm
// ------------------------------------------------------------------------------------------------

/// A base state as the API names it.
pub fn job_state(state: JobBaseState) -> pb::JobState {
    match state {
        JobBaseState::Pending => pb::JobState::Pending,
        JobBaseState::Running => pb::JobState::Running,
        JobBaseState::Completed => pb::JobState::Completed,
        JobBaseState::Cancelled => pb::JobState::Cancelled,
        JobBaseState::Failed => pb::JobState::Failed,
        JobBaseState::Timeout => pb::JobState::Timeout,
        JobBaseState::Preempted => pb::JobState::Preempted,
        JobBaseState::Requeued => pb::JobState::Requeued,
        JobBaseState::NodeFail => pb::JobState::NodeFail,
    }
}

/// A job state of the API as the simulation's; INVALID_ARGUMENT naming `field` for an unknown or
/// unspecified one.
pub fn base_state(value: i32, field: &str) -> Result<JobBaseState, ApiError> {
    Ok(match pb::JobState::try_from(value) {
        Ok(pb::JobState::Pending) => JobBaseState::Pending,
        Ok(pb::JobState::Running) => JobBaseState::Running,
        Ok(pb::JobState::Completed) => JobBaseState::Completed,
        Ok(pb::JobState::Cancelled) => JobBaseState::Cancelled,
        Ok(pb::JobState::Failed) => JobBaseState::Failed,
        Ok(pb::JobState::Timeout) => JobBaseState::Timeout,
        Ok(pb::JobState::Preempted) => JobBaseState::Preempted,
        Ok(pb::JobState::Requeued) => JobBaseState::Requeued,
        Ok(pb::JobState::NodeFail) => JobBaseState::NodeFail,
        Ok(pb::JobState::Unspecified) | Err(_) => {
            return Err(ApiError::invalid_field(field, format!("{value} is not a job state")));
        }
    })
}

/// Node sharing as `scontrol show job` prints `OverSubscribe=` (Slurm's `job_share_string`).
pub fn over_subscribe(sharing: Sharing) -> pb::OverSubscribe {
    match sharing {
        Sharing::Default => pb::OverSubscribe::Ok,
        Sharing::Exclusive => pb::OverSubscribe::No,
        Sharing::Ok => pb::OverSubscribe::Yes,
        Sharing::User => pb::OverSubscribe::User,
    }
}

fn job_pod(pod: &PlaceholderPod<'_>) -> pb::JobPod {
    pb::JobPod {
        uid: pod.uid.to_owned(),
        namespace: pod.namespace.unwrap_or_default().to_owned(),
        name: pod.name.unwrap_or_default().to_owned(),
        sandbox_id: pod.sandbox_id.unwrap_or_default().to_owned(),
        exists: pod.exists,
    }
}

/// A job's step.
fn job_step(step: &JobStep, now: SimTime) -> pb::JobStep {
    pb::JobStep {
        name: step.kind.as_str().to_owned(),
        state: job_state(step.state) as i32,
        start_time: Some(timestamp(step.start)),
        end_time: step.end.map(timestamp),
        elapsed_seconds: step.elapsed_seconds(now),
        node_list: step.node.clone(),
        alloc_cpus: step.alloc_cpus,
        exit_code: step.exit_code.0,
        exit_signal: step.exit_code.1,
    }
}

/// What the controller adds to a job row: the host it was submitted from and, for a pending
/// queue row, the scheduler's expected start.
pub struct ControllerView {
    /// `AllocNode`.
    pub alloc_node: String,
    /// The backfill estimate.
    pub estimated_start: Option<SimTime>,
}

/// One job row; `now` gives the elapsed time of running jobs, `contain` (slurm.conf
/// `PrologFlags` holds `Contain`) whether it has an `extern` step.
pub fn job(row: &JobRow<'_>, now: SimTime, contain: bool, controller: ControllerView) -> pb::Job {
    let job = row.job;
    let (kind, run_seconds, command) = match &job.kind {
        JobKind::Placeholder { .. } => (pb::JobKind::Placeholder, None, String::new()),
        JobKind::Batch { run_seconds, command, .. } => {
            (pb::JobKind::Batch, *run_seconds, command.clone().unwrap_or_default())
        }
    };
    // A queue row is the controller's record, an accounting row the database's: they differ in
    // an ended job's reason and, for one whose script was signalled, its exit code.
    let (reason, exit_code) = match row.source {
        JobSource::Queue => (job.controller_reason().to_owned(), controller_exit_code(job)),
        JobSource::Accounting => (job.reason.clone(), job.exit_code),
    };
    pb::Job {
        source: match row.source {
            JobSource::Queue => pb::JobSource::Queue,
            JobSource::Accounting => pb::JobSource::Accounting,
        } as i32,
        job_id: job.id,
        name: job.name.clone(),
        user: job.user.to_string(),
        uid: job.uid,
        group: job.group.to_string(),
        gid: job.gid,
        account: job.account.to_string(),
        partition: job.partition.to_string(),
        qos: job.qos.to_string(),
        comment: job.comment.clone(),
        reservation: job.reservation.clone(),
        state: job_state(job.state) as i32,
        completing: row.completing(),
        reason,
        submit_time: Some(timestamp(job.submit)),
        eligible_time: Some(timestamp(job.submit)),
        start_time: job.start.map(timestamp),
        end_time: job.end.map(timestamp),
        elapsed_seconds: job.elapsed_seconds(now),
        node_list: job.node.clone().unwrap_or_default(),
        alloc_nodes: u32::from(job.node.is_some()),
        alloc_cpus: job.alloc_cpus,
        req_cpus: job.req_cpus,
        req_mem_mb: job.req_mem_mb,
        req_gpus: job.req_gpus,
        gres_type: job.gres_type.clone().unwrap_or_default(),
        gpu_indices: job.gpu_indices.clone(),
        exit_code: exit_code.0,
        exit_signal: exit_code.1,
        cancelled_by_uid: job.cancelled_by,
        extra: job.extra.clone(),
        over_subscribe: over_subscribe(job.sharing) as i32,
        time_limit_seconds: job.time_limit_seconds,
        priority: job.priority,
        kind: kind as i32,
        pod: row.pod.as_ref().map(job_pod),
        run_seconds,
        steps: job_steps(job, contain).iter().map(|step| job_step(step, now)).collect(),
        alloc_node: controller.alloc_node,
        estimated_start_time: controller.estimated_start.map(timestamp),
        command,
    }
}

/// The simulation query of a ListJobs request in `scope`.
pub fn job_query(scope: Scope, request: &pb::ListJobsRequest) -> Result<JobQuery, ApiError> {
    let (queue, accounting) = match pb::JobSource::try_from(request.source) {
        Ok(pb::JobSource::Unspecified) => (true, true),
        Ok(pb::JobSource::Queue) => (true, false),
        Ok(pb::JobSource::Accounting) => (false, true),
        Err(_) => return Err(ApiError::invalid_field("source", format!("{} is not a job source", request.source))),
    };
    let states = request
        .states
        .iter()
        .enumerate()
        .map(|(index, state)| base_state(*state, &format!("states[{index}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let window_start = request.window_start.as_ref().map(super::sim_time);
    let window_end = request.window_end.as_ref().map(super::sim_time);
    if let (Some(start), Some(end)) = (window_start, window_end)
        && start > end
    {
        return Err(ApiError::invalid_field("window_start", "Start time requested is after end time."));
    }
    Ok(JobQuery {
        scope,
        queue,
        accounting,
        job_ids: request.job_ids.clone(),
        users: request.users.clone(),
        states,
        partitions: request.partitions.clone(),
        accounts: request.accounts.clone(),
        names: request.names.clone(),
        window_start,
        window_end,
    })
}

fn node_state(state: NodeState) -> pb::SlurmNodeState {
    match state {
        NodeState::Idle => pb::SlurmNodeState::Idle,
        NodeState::Mixed => pb::SlurmNodeState::Mixed,
        NodeState::Allocated => pb::SlurmNodeState::Allocated,
        NodeState::Drained => pb::SlurmNodeState::Drained,
        NodeState::Draining => pb::SlurmNodeState::Draining,
    }
}

/// A Slurm node; `users` names the uid of a drain as Slurm's `uid_to_string` does (the uid
/// itself when no user has it).
pub fn slurm_node(node: &SlurmNode, users: &[SlurmUser]) -> pb::SlurmNode {
    let drain_user = node.drain.as_ref().map(|drain| {
        users.iter().find(|user| user.uid == drain.uid).map_or_else(|| drain.uid.to_string(), |user| user.name.clone())
    });
    pb::SlurmNode {
        name: node.name.clone(),
        kubernetes_node: node.k8s_node.clone(),
        cpus: node.cpus,
        alloc_cpus: node.alloc_cpus,
        real_memory_mb: node.real_memory_mb,
        alloc_memory_mb: node.alloc_mem_mb,
        gpus: node.gpus,
        alloc_gpus: node.gpus_in_use.count_ones().min(node.gpus),
        gres_type: node.gres_type.clone().unwrap_or_default(),
        state: node_state(node.state()) as i32,
        drain_reason: node.drain.as_ref().map(|drain| drain.reason.clone()).unwrap_or_default(),
        partitions: node.partitions.clone(),
        job_ids: node.jobs.clone(),
        drain_user: drain_user.unwrap_or_default(),
        drain_uid: node.drain.as_ref().map(|drain| drain.uid),
        os: host_os().to_owned(),
        drain_time: node.drain.as_ref().map(|drain| timestamp(drain.at)),
        boot_time: Some(timestamp(node.boot_time)),
        last_busy_time: Some(timestamp(node.last_busy)),
    }
}

/// slurmd's `OS=`, `"<sysname> <release> <version>"` of uname, read once from the host the
/// emulator runs on (empty where /proc does not have it).
fn host_os() -> &'static str {
    static OS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    OS.get_or_init(|| {
        let read =
            |name: &str| std::fs::read_to_string(format!("/proc/sys/kernel/{name}")).map(|text| text.trim().to_owned());
        match (read("ostype"), read("osrelease"), read("version")) {
            (Ok(sysname), Ok(release), Ok(version)) => format!("{sysname} {release} {version}"),
            _ => String::new(),
        }
    })
}

/// slurm.conf as `scontrol show config` reads it: the values' `slurmConfig` and what the
/// controller derives.
pub fn slurm_config(values: &Values, controller: &SlurmController, node_count: usize) -> pb::SlurmConfig {
    pb::SlurmConfig {
        cluster_name: controller.cluster_name.clone(),
        slurmctld_host: controller.host.clone(),
        kill_wait_seconds: values.slurm_config.kill_wait,
        min_job_age_seconds: values.slurm_config.min_job_age,
        prolog_flags: values.slurm_config.prolog_flags.clone(),
        private_data: values.slurm_config.private_data.clone(),
        first_job_id: values.slurm.first_job_id,
        next_job_id: controller.next_job_id,
        boot_time: Some(timestamp(controller.boot_time)),
        preempt_type: if controller.preempt_mode == PreemptMode::Off { "" } else { "preempt/partition_prio" }
            .to_owned(),
        preempt_mode: preempt_mode_name(controller.preempt_mode).to_owned(),
        node_count: u32::try_from(node_count).unwrap_or(u32::MAX),
    }
}

fn preempt_mode_name(mode: PreemptMode) -> &'static str {
    match mode {
        PreemptMode::Off => "OFF",
        PreemptMode::Cancel => "CANCEL",
        PreemptMode::Requeue => "REQUEUE",
    }
}

/// A partition; `total_cpus` sums its nodes.
pub fn partition(partition: &Partition, total_cpus: u32) -> pb::Partition {
    pb::Partition {
        name: partition.name.to_string(),
        default: partition.default,
        nodes: partition.nodes.clone(),
        over_subscribe: partition.over_subscribe.clone(),
        priority_tier: partition.priority_tier,
        preempt_mode: match partition.preempt_mode {
            PreemptMode::Off => pb::PreemptMode::Off,
            PreemptMode::Cancel => pb::PreemptMode::Cancel,
            PreemptMode::Requeue => pb::PreemptMode::Requeue,
        } as i32,
        state: pb::PartitionState::Up as i32,
        max_time_seconds: None,
        total_cpus,
    }
}

// ------------------------------------------------------------------------------------------------
// Clock
// ------------------------------------------------------------------------------------------------

/// The clock as the API shows it.
pub fn clock(clock: &EmulatorClock) -> pb::Clock {
    use cwsandbox_sim::time::Clock as _;
    pb::Clock { now: Some(timestamp(clock.now())), frozen: clock.is_frozen() }
}

/// A positive duration of AdvanceClock.
pub fn advance_by(duration: Option<&pbjson_types::Duration>) -> Result<std::time::Duration, ApiError> {
    let duration = duration.ok_or_else(|| ApiError::missing_field("duration"))?;
    if duration.seconds < 0 || duration.nanos < 0 || (duration.seconds == 0 && duration.nanos == 0) {
        return Err(ApiError::invalid_field("duration", "must be positive"));
    }
    Ok(std::time::Duration::new(duration.seconds as u64, duration.nanos as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sharing_round_trips_and_prints_like_scontrol() {
        for value in [Sharing::Default, Sharing::Exclusive, Sharing::Ok, Sharing::User] {
            assert_eq!(cwsandbox_sim::world::requested_sharing(over_subscribe(value) as i32).unwrap(), value);
        }
        assert_eq!(over_subscribe(Sharing::Ok).as_str_name(), "OVER_SUBSCRIBE_YES");
        assert_eq!(over_subscribe(Sharing::Default).as_str_name(), "OVER_SUBSCRIBE_OK");
    }

    #[test]
    fn advance_needs_a_positive_duration() {
        assert!(advance_by(None).is_err());
        assert!(advance_by(Some(&pbjson_types::Duration { seconds: 0, nanos: 0 })).is_err());
        assert!(advance_by(Some(&pbjson_types::Duration { seconds: -1, nanos: 0 })).is_err());
        assert_eq!(
            advance_by(Some(&pbjson_types::Duration { seconds: 2, nanos: 500_000_000 })).unwrap(),
            std::time::Duration::from_millis(2500)
        );
    }

    #[test]
    fn values_come_as_yaml_and_struct() {
        let scenario = Values::scenario(cwsandbox_sim::config::Scenario::Ready);
        let (yaml, tree) = values(&scenario).unwrap();
        assert!(yaml.contains("KillWait: 60"), "{yaml}");
        let back = Values::from_tree(tree_of(&tree)).unwrap();
        assert_eq!(back, scenario);
    }
}
