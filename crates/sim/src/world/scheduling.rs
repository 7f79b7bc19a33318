//! Pods entering the cluster and the choice of who places them: SUNK for its scheduler name,
//! the default scheduler's essentials for the rest (the serverless pool's Pods on its own Nodes).

use std::collections::BTreeMap;

use crate::config::{SERVERLESS_POOL, SERVERLESS_POOL_LABEL};
use crate::error::{Reason, SimError, SimResult};
use crate::ids::SharedStr;
use crate::k8s::{ContainerState, EventType, Node, Pod, PodContainer, PodOwner, PodPhase, ResourceTotals};

use crate::pods::PodTransition;
use crate::world::{PodRequest, Transition, World};

impl World {
    /// Creates a Pod (the emulator API's raw Pods, and sandbox Pods).
    pub fn create_pod(&mut self, request: PodRequest, owner: PodOwner) -> SimResult<String> {
        if request.name.is_empty() {
            return Err(SimError::invalid_field("pod.metadata.name", "required"));
        }
        if request.termination_grace_period_seconds.is_some_and(|grace| grace < 0) {
            return Err(SimError::invalid_field("pod.spec.terminationGracePeriodSeconds", "must not be negative"));
        }
        if request.containers.is_empty() {
            return Err(SimError::invalid_field("pod.spec.containers", "at least one container is required"));
        }
        if self.cluster.pod_by_name(&request.namespace, &request.name).is_some() {
            return Err(SimError::AlreadyExists {
                reason: Reason::AlreadyExists,
                message: format!("pods \"{}\" already exists", request.name),
            });
        }
        self.ensure_namespace(&request.namespace);
        let uid = self.ids.uid();
        let scheduler_name =
            if request.scheduler_name.is_empty() { "default-scheduler".to_owned() } else { request.scheduler_name };
        let containers = request
            .containers
            .into_iter()
            .map(|(name, image, requests, limits)| PodContainer {
                name,
                image,
                command: Vec::new(),
                args: Vec::new(),
                env: BTreeMap::new(),
                inputs: None,
                working_dir: None,
                requests,
                limits,
                state: ContainerState::Waiting("ContainerCreating".to_owned()),
            })
            .collect();
        let pod = Pod {
            uid: uid.clone(),
            namespace: request.namespace.into(),
            name: request.name.into(),
            labels: request.labels.into(),
            annotations: request.annotations.into(),
            scheduler_name,
            node_name: None,
            termination_grace_period_seconds: request.termination_grace_period_seconds.unwrap_or(30),
            node_selector: request.node_selector,
            tolerations: request.tolerations,
            required_node_affinity: request.required_node_affinity,
            priority_class_name: None,
            extra_spec: BTreeMap::new(),
            containers,
            phase: PodPhase::Pending,
            reason: None,
            message: None,
            scheduled_condition: None,
            start_time: None,
            created: self.now,
            deletion_timestamp: None,
            deletion_grace_period_seconds: None,
            owner,
            resource_version: 0,
            object_ref: Default::default(),
            host_started: false,
            pod_ip: None,
        };
        self.insert_new_pod(pod);
        self.settle();
        Ok(uid.into())
    }

    pub(crate) fn insert_new_pod(&mut self, pod: Pod) {
        self.pods.queue_for_scheduling(pod.uid.clone());
        self.cluster.insert_pod(pod);
        self.pod_transitions.add(PodTransition::Create);
    }

    /// Routes an unscheduled Pod to the scheduler its `schedulerName` names.
    pub(super) fn schedule_pod(&mut self, uid: &SharedStr) {
        let Some(pod) = self.cluster.pod(uid) else { return };
        if pod.node_name.is_some() || pod.deletion_timestamp.is_some() || pod.phase != PodPhase::Pending {
            return;
        }
        if self.pods.is_held(uid) {
            return;
        }
        if pod.scheduler_name == "default-scheduler" {
            self.try_default_schedule(uid, true);
            return;
        }
        self.submit_placeholder(uid);
    }

    pub(crate) fn set_unschedulable(&mut self, uid: &str, reason: &str, message: &str) {
        if let Some(pod) = self.cluster.pod_mut(uid) {
            pod.scheduled_condition = Some((false, reason.to_owned(), message.to_owned()));
        }
    }

    /// kube-scheduler's essentials for Pods that are not SUNK's: fit by allocatable minus
    /// requests, node selector, required affinity and taints; least-allocated node first.
    pub(super) fn try_default_schedule(&mut self, uid: &SharedStr, report: bool) -> bool {
        let Some(pod) = self.cluster.pod(uid).cloned() else { return false };
        if pod.node_name.is_some() || pod.deletion_timestamp.is_some() || pod.phase != PodPhase::Pending {
            return false;
        }
        let need = pod.requested();
        let mut insufficient_cpu = 0;
        let mut insufficient_memory = 0;
        let mut insufficient_gpus = 0;
        // Nodes turned away by a taint, by the first taint that did it, as kube-scheduler reports.
        let mut tainted: BTreeMap<String, usize> = BTreeMap::new();
        let mut mismatched = 0;
        let mut best: Option<(i64, SharedStr)> = None;
        // The serverless pool is capacity apart from the cluster's own: its Pods see only its
        // Nodes, and other Pods never see them (their messages count the cluster's Nodes alone).
        let mut total = 0;
        for node in self.nodes_seen_by(&pod) {
            total += 1;
            if let Some(taint) =
                node.taints.iter().find(|taint| taint.effect != "PreferNoSchedule" && !pod.tolerates(taint))
            {
                *tainted.entry(format!("{{{}: {}}}", taint.key, taint.value)).or_default() += 1;
                continue;
            }
            if !node_matches(&pod, node) {
                mismatched += 1;
                continue;
            }
            let ResourceTotals { cpu_millis: free_cpu, memory_bytes: free_memory, gpus: free_gpus } = node.free();
            let mut fits = true;
            if need.gpus > 0 && free_gpus < need.gpus {
                insufficient_gpus += 1;
                fits = false;
            }
            if free_cpu < need.cpu_millis {
                insufficient_cpu += 1;
                fits = false;
            }
            if free_memory < need.memory_bytes {
                insufficient_memory += 1;
                fits = false;
            }
            if fits && best.as_ref().is_none_or(|(score, _)| free_cpu > *score) {
                best = Some((free_cpu, node.name.clone()));
            }
        }
        if let Some((_, node_name)) = best {
            self.bind_and_admit(uid, &node_name);
            return true;
        }
        let mut parts = Vec::new();
        if insufficient_cpu > 0 {
            parts.push(format!("{insufficient_cpu} Insufficient cpu"));
        }
        if insufficient_memory > 0 {
            parts.push(format!("{insufficient_memory} Insufficient memory"));
        }
        if insufficient_gpus > 0 {
            parts.push(format!("{insufficient_gpus} Insufficient nvidia.com/gpu"));
        }
        if mismatched > 0 {
            parts.push(format!("{mismatched} node(s) didn't match Pod's node affinity/selector"));
        }
        for (taint, count) in &tainted {
            parts.push(format!("{count} node(s) had untolerated taint {taint}"));
        }
        let message = format!("0/{total} nodes are available: {}.", parts.join(", "));
        self.pods.wait_for_room(uid.clone());
        if report {
            self.set_unschedulable(uid, "Unschedulable", &message);
            self.event(uid, EventType::Warning, "FailedScheduling", message, "default-scheduler");
            self.count(Transition::DefaultSchedulingFailed);
        }
        false
    }
}

/// Whether a Node satisfies a Pod's node selector and required affinity.
pub(super) fn node_matches(pod: &Pod, node: &Node) -> bool {
    let selector_ok = pod.node_selector.iter().all(|(key, value)| node.labels.get(key) == Some(value));
    let affinity_ok = pod.required_node_affinity.is_empty()
        || pod.required_node_affinity.iter().any(|term| {
            term.iter().all(|(key, allowed)| node.labels.get(key).is_some_and(|value| allowed.contains(value)))
        });
    selector_ok && affinity_ok
}

impl World {
    /// The Nodes the default scheduler weighs for `pod`: the serverless pool's for its Pods, the
    /// cluster's own for the rest.
    pub(super) fn nodes_seen_by<'w>(&'w self, pod: &Pod) -> impl Iterator<Item = &'w Node> + use<'w> {
        let serverless = is_serverless_pod(pod);
        self.cluster.nodes.values().filter(move |node| is_serverless_node(node) == serverless)
    }
}

/// Whether a Node belongs to the serverless pool.
pub(crate) fn is_serverless_node(node: &Node) -> bool {
    node.labels.get(SERVERLESS_POOL_LABEL).is_some_and(|pool| pool == SERVERLESS_POOL)
}

/// Whether a Pod asks for the serverless pool (by its node selector).
fn is_serverless_pod(pod: &Pod) -> bool {
    pod.node_selector.get(SERVERLESS_POOL_LABEL).is_some_and(|pool| pool == SERVERLESS_POOL)
}
