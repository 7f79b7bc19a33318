//! Faults of the simulated cluster, injected into one sandbox at its creation (EmulatorService
//! AddFault with a `domain` fault; the emulator decides which CreateSandbox calls they hit). Each
//! shows where a user would look: the sandbox's `state_reason`, the Pod's status and Events
//! (`kubectl`), Slurm accounting (`sacct`).

use std::time::Duration;

use crate::ids::SharedStr;
use crate::k8s::{ContainerState, EventType, PodOwner, PodPhase, Taint};
use crate::machine::legal;
use crate::pods::{InjectedFault, InjectedKind, PodTransition};
use crate::world::{Effect, Timer, World};

/// The exit code of a process the kernel's OOM killer ended (128 + SIGKILL).
pub const OOM_EXIT_CODE: i32 = 137;

/// Whether `text` matches a glob of `*` (any run) and `?` (one character).
fn glob(pattern: &str, text: &str) -> bool {
    wildmatch::WildMatch::new(pattern).matches(text)
}

impl World {
    /// Arms a new sandbox Pod's faults: called once its Pod exists, before anything schedules it.
    pub(crate) fn arm_faults(&mut self, pod_uid: &SharedStr, faults: Vec<InjectedFault>) {
        if faults.is_empty() {
            return;
        }
        for fault in &faults {
            if let InjectedKind::PendingFor(hold) = fault.kind {
                let message = format!(
                    "0/{} nodes are available: the Pod is held unscheduled for {}s (injected by {})",
                    self.cluster.pod(pod_uid).map_or(0, |pod| self.nodes_seen_by(pod).count()),
                    hold.as_secs(),
                    fault.id
                );
                self.pods.hold(pod_uid.clone());
                self.set_unschedulable(pod_uid, "Unschedulable", &message);
                self.event(pod_uid, EventType::Warning, "FailedScheduling", message, "default-scheduler");
                self.timers.schedule(self.now + hold, Timer::HoldOver(pod_uid.clone()));
            }
        }
        self.pods.inject_faults(pod_uid.clone(), faults);
    }

    /// A held Pod may be scheduled now.
    pub(super) fn on_hold_over(&mut self, uid: &SharedStr) {
        if self.pods.release(uid) && self.cluster.pod(uid).is_some() {
            if let Some(pod) = self.cluster.pod_mut(uid) {
                pod.scheduled_condition = None;
            }
            self.pods.queue_for_scheduling(uid.clone());
        }
    }

    /// The image of a Pod's container that an injected fault keeps from being pulled, if any.
    pub(crate) fn unpullable_image(&self, uid: &str) -> Option<(String, String)> {
        let faults = self.pods.faults_of(uid);
        let pod = self.cluster.pod(uid)?;
        faults.iter().find_map(|fault| match &fault.kind {
            InjectedKind::ImagePull { images } => pod
                .containers
                .iter()
                .find(|container| images.is_empty() || glob(images, &container.image))
                .map(|container| (container.image.clone(), fault.id.clone())),
            _ => None,
        })
    }

    /// The kubelet cannot pull the image: the Pod stays Pending on its Node, its container
    /// waiting `ErrImagePull`, then `ImagePullBackOff`.
    pub(super) fn fail_image_pull(&mut self, uid: &str, image: &str, fault: &str) {
        let now = self.now;
        if let Some(pod) = self.cluster.pod_mut(uid) {
            // The kubelet accepted the Pod: it has a start time and container statuses.
            pod.start_time = Some(now);
            for container in &mut pod.containers {
                container.state = ContainerState::Waiting("ErrImagePull".to_owned());
            }
        }
        self.event(uid, EventType::Normal, "Pulling", format!("Pulling image \"{image}\""), "kubelet");
        let why = format!("Failed to pull image \"{image}\": rpc error: code = NotFound desc = injected by {fault}");
        self.event(uid, EventType::Warning, "Failed", why, "kubelet");
        self.event(uid, EventType::Warning, "Failed", "Error: ErrImagePull", "kubelet");
        if let Some(pod) = self.cluster.pod(uid) {
            let uid = pod.uid.clone();
            let back_off = Duration::from_secs(u64::from(self.values.kubelet.image_pull_back_off_seconds));
            self.timers.schedule(self.now + back_off, Timer::ImagePullBackOff(uid));
        }
    }

    /// The kubelet backs off pulling; the runner gives up: the Pod fails (`ImagePullBackOff`,
    /// its container still waiting) and the sandbox with it.
    pub(super) fn on_image_pull_back_off(&mut self, uid: &SharedStr) {
        let Some((image, cause)) = self.failed_pull(uid) else { return };
        let Some(pod) = self.cluster.pod_mut(uid) else { return };
        if pod.phase != PodPhase::Pending || pod.deletion_timestamp.is_some() {
            return;
        }
        for container in &mut pod.containers {
            container.state = ContainerState::Waiting("ImagePullBackOff".to_owned());
        }
        // Kubernetes (1.30 and later) carries the pull's error in the back-off message.
        let message = match cause {
            Some(cause) => format!("Back-off pulling image \"{image}\": {cause}"),
            None => format!("Back-off pulling image \"{image}\""),
        };
        self.event(uid, EventType::Normal, "BackOff", message.clone(), "kubelet");
        self.event(uid, EventType::Warning, "Failed", "Error: ImagePullBackOff", "kubelet");
        legal(self.pod_step(uid, PodTransition::RejectByKubelet));
        self.cluster.finish_pod(uid, PodPhase::Failed, Some("ImagePullBackOff".to_owned()), Some(message));
        self.on_pod_terminal(uid);
    }

    /// Timers a started Pod's faults need.
    pub(super) fn arm_started_faults(&mut self, uid: &SharedStr) {
        let faults = self.pods.faults_of(uid);
        let mut timers = Vec::new();
        for fault in faults {
            match fault.kind {
                InjectedKind::OomKillAfter(after) => timers.push((after, Timer::OomKill(uid.clone()))),
                InjectedKind::NodeNotReadyAfter(after) => timers.push((after, Timer::NodeNotReady(uid.clone()))),
                _ => {}
            }
        }
        for (after, timer) in timers {
            self.timers.schedule(self.now + after, timer);
        }
    }

    fn fault_id(&self, uid: &str, wanted: fn(&InjectedKind) -> bool) -> String {
        self.pods
            .faults_of(uid)
            .iter()
            .find(|fault| wanted(&fault.kind))
            .map(|fault| fault.id.clone())
            .unwrap_or_default()
    }

    /// The kernel's OOM killer ends the Pod's main process: exit 137, reason `OOMKilled`.
    pub(super) fn on_oom_kill(&mut self, uid: &SharedStr) {
        let Some(pod) = self.cluster.pod(uid) else { return };
        if pod.phase != PodPhase::Running || pod.deletion_timestamp.is_some() {
            return;
        }
        let id = self.fault_id(uid, |kind| matches!(kind, InjectedKind::OomKillAfter(_)));
        let node = pod.node_name.clone().unwrap_or_default();
        let message =
            format!("Memory cgroup out of memory: Killed process (main) of Pod {} (injected by {id})", pod.name);
        self.node_event(&node, EventType::Warning, "OOMKilling", message);
        self.effects.push(Effect::KillPod { pod_uid: uid.clone() });
        self.finish_pod_with(uid, OOM_EXIT_CODE, "OOMKilled");
    }

    /// The Pod's Node stops reporting: it turns NotReady, its sandbox Pods fail (`NodeLost`) and
    /// their processes end, and its Slurm node is drained.
    pub(super) fn on_node_not_ready(&mut self, uid: &SharedStr) {
        let Some(node) = self.cluster.pod(uid).and_then(|pod| pod.node_name.clone()) else { return };
        if self.cluster.nodes.get(&*node).is_some_and(|node| !node.ready) {
            return;
        }
        let id = self.fault_id(uid, |kind| matches!(kind, InjectedKind::NodeNotReadyAfter(_)));
        if let Some(node) = self.cluster.nodes.get_mut(&*node) {
            node.ready = false;
        }
        self.node_event(
            &node,
            EventType::Normal,
            "NodeNotReady",
            format!("Node {node} status is now: NodeNotReady (injected by {id})"),
        );
        let victims: Vec<SharedStr> = self
            .cluster
            .pods_iter()
            .filter(|pod| pod.node_name.as_deref() == Some(&*node))
            .filter(|pod| matches!(pod.owner, PodOwner::Sandbox(_)))
            .filter(|pod| matches!(pod.phase, PodPhase::Running | PodPhase::Pending))
            .map(|pod| pod.uid.clone())
            .collect();
        for victim in victims {
            let message = format!("Node {node} which was running pod {victim} is unresponsive");
            self.effects.push(Effect::KillPod { pod_uid: victim.clone() });
            if let Some(pod) = self.cluster.pod_mut(&victim) {
                pod.reason = Some("NodeLost".to_owned());
                pod.message = Some(message.clone());
            }
            self.event(&victim, EventType::Warning, "NodeLost", message, "node-controller");
            self.finish_pod_with(&victim, 255, "Error");
        }
        if let Some(node) = self.cluster.nodes.get_mut(&*node) {
            for effect in ["NoSchedule", "NoExecute"] {
                node.taints.push(Taint {
                    key: "node.kubernetes.io/unreachable".to_owned(),
                    value: String::new(),
                    effect: effect.to_owned(),
                });
            }
        }
        let slurm_node = self.slurm.nodes.iter().find(|slurm| slurm.k8s_node == *node).map(|slurm| slurm.name.clone());
        if let Some(slurm_node) = slurm_node {
            self.drain_node(
                &slurm_node,
                &format!("Kubernetes node NotReady (injected by {id})"),
                crate::slurm::SLURM_USER_UID,
            );
        }
    }

    /// The Pod's containers ended with `exit_code` and `reason`; the Pod is Failed (or Succeeded
    /// for 0) and the sandbox mirrors it.
    pub(super) fn finish_pod_with(&mut self, uid: &str, exit_code: i32, reason: &str) {
        let Some(pod) = self.cluster.pod(uid) else { return };
        let was_running = pod.phase == PodPhase::Running;
        let phase = if exit_code == 0 { PodPhase::Succeeded } else { PodPhase::Failed };
        if was_running {
            legal(self.pod_step(uid, PodTransition::Finish));
        } else {
            legal(self.pod_step(uid, PodTransition::RejectByKubelet));
        }
        self.terminate_containers(uid, exit_code, reason);
        let (pod_reason, message) =
            self.cluster.pod(uid).map(|pod| (pod.reason.clone(), pod.message.clone())).unwrap_or_default();
        self.cluster.finish_pod(uid, phase, pod_reason, message);
        self.on_pod_terminal(uid);
    }
}
