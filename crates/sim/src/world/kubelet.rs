//! The kubelet: binding and admission (`OutOfcpu`, `NodeAffinity`), and the static CPU Manager's
//! pinned CPUs that Slurm does not know about.

use std::borrow::Cow;

use super::scheduling::node_matches;
use crate::config::CpuManagerPolicy;
use crate::k8s::{ContainerState, EventType, Pod, PodOwner, PodPhase};
use crate::slurm::{JobBaseState, JobId};

use crate::machine::legal;
use crate::pods::PodTransition;
use crate::world::{ContainerStart, Effect, PodLaunch, PodNetwork, Transition, World};

/// The variable through which a container learns which GPUs it has.
pub const NVIDIA_VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";

impl World {
    /// Binds a Pod and runs kubelet admission: it either starts or is rejected for good.
    pub(crate) fn bind_and_admit(&mut self, uid: &str, node_name: &str) {
        let (Some(pod), Some(node)) = (self.cluster.pod(uid), self.cluster.nodes.get(node_name)) else { return };
        let need = pod.requested();
        let checks = [
            ("cpu", need.cpu_millis, node.requested.cpu_millis, node.allocatable.cpu_millis),
            ("memory", need.memory_bytes, node.requested.memory_bytes, node.allocatable.memory_bytes),
            ("nvidia.com/gpu", need.gpus, node.requested.gpus, node.allocatable.gpus),
        ];
        let affinity_ok = node_matches(pod, node);
        let source = if pod.scheduler_name == "default-scheduler" { "default-scheduler" } else { "sunk-scheduler" };
        let assigned =
            crate::ids::joined(&["Successfully assigned ", &pod.namespace, "/", &pod.name, " to ", node_name]);
        if let Some(pod) = self.cluster.pod_mut(uid) {
            pod.scheduled_condition = Some((true, String::new(), String::new()));
        }
        self.event(uid, EventType::Normal, "Scheduled", assigned, source);
        legal(self.pod_step(uid, PodTransition::Bind));
        let rejection = if !affinity_ok {
            Some(("NodeAffinity".to_owned(), "Pod was rejected: Predicate NodeAffinity failed".to_owned()))
        } else {
            checks.iter().find(|(_, requested, used, capacity)| *requested > 0 && used + requested > *capacity).map(
                |(resource, requested, used, capacity)| {
                    (
                        format!("OutOf{resource}"),
                        format!(
                            "Pod was rejected: Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, capacity: {capacity}"
                        ),
                    )
                },
            )
        };
        let unpullable = if rejection.is_none() { self.unpullable_image(uid) } else { None };
        if let Some((image, fault)) = unpullable {
            // Admitted, but its image never arrives: Pending on its Node (it holds its requests).
            self.cluster.bind(uid, node_name);
            self.fail_image_pull(uid, &image, &fault);
            return;
        }
        match rejection {
            Some((reason, message)) => {
                // A rejected Pod still shows its node, but never counted against it.
                legal(self.pod_step(uid, PodTransition::RejectByKubelet));
                if let Some(pod) = self.cluster.pod_mut(uid) {
                    pod.phase = PodPhase::Failed;
                    pod.reason = Some(reason.clone());
                    pod.message = Some(message.clone());
                }
                self.cluster.bind(uid, node_name);
                self.event(uid, EventType::Warning, reason, message, "kubelet");
                self.on_pod_terminal(uid);
            }
            None => {
                self.cluster.bind(uid, node_name);
                if !self.begin_image_pull(uid) {
                    self.start_admitted_pod(uid, node_name);
                }
            }
        }
    }

    /// An admitted Pod whose images are on its Node starts: Running as the world accounts it,
    /// and the host asked to run its containers. Where the host confirms starts, the Pod shows
    /// `ContainerCreating` until it does ([`World::pod_host_started`]); otherwise it shows
    /// Running at once.
    pub(super) fn start_admitted_pod(&mut self, uid: &str, node_name: &str) {
        let Some(pod) = self.cluster.pod(uid) else { return };
        let sandbox_id = match &pod.owner {
            PodOwner::Sandbox(id) => Some(id.clone()),
            _ => None,
        };
        let (pod_uid, namespace, pod_name) = (pod.uid.clone(), pod.namespace.clone(), pod.name.clone());
        legal(self.pod_step(uid, PodTransition::Start));
        let now = self.now;
        if let Some(pod) = self.cluster.pod_mut(uid) {
            pod.phase = PodPhase::Running;
            pod.start_time = Some(now);
        }
        self.pin_cpus(uid, node_name);
        self.assign_gpus(uid, node_name);
        let containers = self.containers_to_start(uid, sandbox_id.as_deref());
        let network = match sandbox_id.as_deref() {
            Some(id) => self.pod_network_of(id, uid),
            None => PodNetwork::Host,
        };
        let host_aliases = sandbox_id
            .as_deref()
            .and_then(|id| self.sandboxes.start_plan(id))
            .map(|plan| plan.host_aliases.clone())
            .unwrap_or_default();
        let memory_volumes = self.memory_volumes_of(uid, sandbox_id.as_deref(), node_name);
        let runtime_class = sandbox_id.as_deref().and_then(|id| self.sandboxes.runtime_class(id)).map(str::to_owned);
        if !self.host_confirms_starts {
            self.containers_started(uid);
        }
        self.effects.push(Effect::StartPod(PodLaunch {
            pod_uid,
            sandbox_id,
            namespace,
            pod_name,
            containers,
            network,
            host_aliases,
            memory_volumes,
            runtime_class,
        }));
    }

    /// A sandbox Pod's memory-backed scratch volumes with their tmpfs sizes: the Node's
    /// allocatable memory, lowered to the Pod's memory limit where every container has one, and
    /// to the volume's `sizeLimit` where it is lower still (`calculateEmptyDirMemorySize`).
    fn memory_volumes_of(&self, uid: &str, sandbox_id: Option<&str>, node_name: &str) -> Vec<crate::k8s::MemoryVolume> {
        let Some(id) = sandbox_id else { return Vec::new() };
        let asked = self.sandboxes.memory_volumes(id);
        if asked.is_empty() {
            return Vec::new();
        }
        let allocatable = self
            .cluster
            .nodes
            .get(node_name)
            .and_then(|node| u64::try_from(node.allocatable.memory_bytes).ok())
            .filter(|bytes| *bytes > 0)
            .unwrap_or(u64::MAX);
        // A Pod has a memory limit only where each of its containers has one: their sum.
        let pod_limit = self.cluster.pod(uid).and_then(|pod| {
            pod.containers.iter().try_fold(0u64, |sum, container| {
                let bytes = u64::try_from(container.limits.memory?.millis() / 1000).ok().filter(|bytes| *bytes > 0)?;
                Some(sum.saturating_add(bytes))
            })
        });
        let pod_size = pod_limit.map_or(allocatable, |limit| limit.min(allocatable));
        asked
            .iter()
            .map(|(volume, size_limit)| crate::k8s::MemoryVolume {
                volume: volume.clone(),
                size_bytes: size_limit.map_or(pod_size, |limit| limit.min(pod_size)),
            })
            .collect()
    }

    /// The host reports that it started a Pod's containers: they run, with the kubelet's
    /// `Started` Events, and the Pod (and its sandbox) shows Running. Nothing for a Pod that is
    /// gone or already ended.
    pub fn pod_host_started(&mut self, uid: &str) {
        self.settle();
        if self
            .cluster
            .pod(uid)
            .is_some_and(|pod| pod.phase == PodPhase::Running && !pod.host_started && pod.deletion_timestamp.is_none())
        {
            self.containers_started(uid);
        }
        self.settle();
    }

    /// A Running Pod's containers run from now: their states, the `Started` Events, the limits'
    /// Warning where they hold nothing, and the faults that act on a started Pod.
    fn containers_started(&mut self, uid: &str) {
        let now = self.now;
        let mut started = Vec::new();
        let Some(pod) = self.cluster.pod_mut(uid) else { return };
        pod.host_started = true;
        for container in &mut pod.containers {
            container.state = ContainerState::Running(now);
            // One Event per container, as a kubelet writes them; the usual lone `main` costs no
            // allocation.
            started.push(match container.name.as_str() {
                "main" => Cow::Borrowed("Started container main"),
                name => Cow::Owned(format!("Started container {name}")),
            });
        }
        let pod_uid = pod.uid.clone();
        self.touch_sandbox_of_pod(uid);
        for message in started {
            self.event(uid, EventType::Normal, "Started", message, "kubelet");
        }
        self.warn_unenforced_limits(uid);
        self.arm_started_faults(&pod_uid);
        self.arm_volume_check(&pod_uid);
    }

    /// A Pod's containers as its host starts them: spec order, except that a sandbox's primary
    /// container comes first.
    fn containers_to_start(&self, uid: &str, sandbox_id: Option<&str>) -> Vec<ContainerStart> {
        let Some(pod) = self.cluster.pod(uid) else { return Vec::new() };
        // What the NVIDIA device plugin tells a container that asked for GPUs: the indices of
        // the GPUs it got, here those its placeholder job holds on the node, or for a Pod the
        // default scheduler placed those `assign_gpus` gave it.
        let job_indices = self
            .placeholder_of_pod
            .get(uid)
            .and_then(|job| self.slurm.job(*job))
            .filter(|job| !job.gpu_indices.is_empty())
            .map(|job| job.gpu_indices.clone());
        let gpu_indices = job_indices
            .or_else(|| self.pods.gpus_of(uid).map(<[u32]>::to_vec))
            .map(|indices| indices.iter().map(u32::to_string).collect::<Vec<_>>().join(","));
        let start_plan = sandbox_id.and_then(|id| self.sandboxes.start_plan(id));
        let mut containers: Vec<ContainerStart> = pod
            .containers
            .iter()
            .map(|container| {
                let mut env = container.env.clone();
                if let Some(inputs) = &container.inputs {
                    env.extend(inputs.secret_env.iter().map(|(key, value)| (key.clone(), value.clone())));
                }
                if let Some(indices) = &gpu_indices
                    && container.requests.gpu.is_some_and(|gpus| gpus > 0)
                {
                    env.insert(NVIDIA_VISIBLE_DEVICES.to_owned(), indices.clone());
                }
                ContainerStart {
                    name: container.name.clone(),
                    image: container.image.clone(),
                    command: container.command.clone(),
                    args: container.args.clone(),
                    env,
                    working_dir: container.working_dir.clone(),
                    files: container.inputs.as_ref().map(|inputs| inputs.files.clone()).unwrap_or_default(),
                    run_as: container.inputs.as_ref().map_or((None, None), |inputs| inputs.run_as),
                    volume_mounts: container
                        .inputs
                        .as_ref()
                        .map(|inputs| inputs.volume_mounts.clone())
                        .unwrap_or_default(),
                    // A quantity's thousandths: bytes × 1000 for memory, millicores for CPU.
                    memory_limit_bytes: container
                        .limits
                        .memory
                        .and_then(|memory| u64::try_from(memory.millis() / 1000).ok())
                        .filter(|bytes| *bytes > 0),
                    cpu_limit_millis: container
                        .limits
                        .cpu
                        .and_then(|cpu| u64::try_from(cpu.millis()).ok())
                        .filter(|millis| *millis > 0),
                    startup_probe: container.inputs.as_ref().and_then(|inputs| inputs.startup_probe.clone()),
                    start_after: start_plan
                        .and_then(|plan| plan.after.get(&container.name))
                        .cloned()
                        .unwrap_or_default(),
                }
            })
            .collect();
        if let Some(index) = sandbox_id.and_then(|id| self.sandboxes.primary_container(id))
            && index < containers.len()
        {
            let main = containers.remove(index);
            containers.insert(0, main);
        }
        containers
    }

    /// The static CPU Manager: a Guaranteed-QoS Pod's integer CPUs become its alone. Only Pods
    /// placed by the default scheduler count: a SUNK Pod's CPUs are its placeholder job's, which
    /// Slurm already holds for it.
    pub(super) fn pin_cpus(&mut self, uid: &str, node_name: &str) {
        if self.values.kubelet.cpu_manager_policy != CpuManagerPolicy::Static {
            return;
        }
        let Some(pod) = self.cluster.pod(uid) else { return };
        if pod.scheduler_name != "default-scheduler" {
            return;
        }
        let cpus = exclusive_cpus(pod);
        if cpus == 0 {
            return;
        }
        let pod_uid = pod.uid.clone();
        let Some(node) = self.cluster.nodes.get_mut(node_name) else { return };
        node.pinned_cpus += cpus;
        let node_name = node.name.clone();
        self.pods.pin_cpus(pod_uid, node_name, cpus);
        self.count(Transition::CpusPinned);
    }

    /// The device plugin's part for a Pod the default scheduler placed: the lowest-numbered GPUs
    /// of its Node that neither Slurm jobs (on the Node's slurmd) nor other such Pods hold, as
    /// many as its containers ask for. A SUNK Pod's GPUs are its placeholder job's.
    fn assign_gpus(&mut self, uid: &str, node_name: &str) {
        let Some(pod) = self.cluster.pod(uid) else { return };
        if pod.scheduler_name != "default-scheduler" {
            return;
        }
        let wanted: i64 = pod.containers.iter().filter_map(|container| container.requests.gpu).sum();
        let Some(node) = self.cluster.nodes.get(node_name) else { return };
        if wanted <= 0 || node.allocatable.gpus <= 0 {
            return;
        }
        let mut held = std::collections::BTreeSet::new();
        for slurm_node in self.slurm.nodes.iter().filter(|slurm_node| slurm_node.k8s_node == node_name) {
            held.extend((0..slurm_node.gpus).filter(|gpu| slurm_node.gpus_in_use & (1 << gpu) != 0));
        }
        held.extend(self.pods.gpus_held_on(node_name));
        let total = u32::try_from(node.allocatable.gpus).unwrap_or(0);
        let indices: Vec<u32> =
            (0..total).filter(|gpu| !held.contains(gpu)).take(usize::try_from(wanted).unwrap_or(0)).collect();
        let node_name = node.name.clone();
        if !indices.is_empty() {
            self.pods.assign_gpus(pod.uid.clone(), node_name, indices);
        }
    }

    /// Gives a Pod's pinned CPUs back (it finished or left).
    pub(super) fn unpin_cpus(&mut self, uid: &str) {
        if let Some((node_name, cpus)) = self.pods.unpin_cpus(uid)
            && let Some(node) = self.cluster.nodes.get_mut(node_name.as_str())
        {
            node.pinned_cpus -= cpus;
        }
    }

    /// A job's processes start on `slurm_node`. Slurm hands out CPUs from the lowest index and the
    /// kubelet pins from the highest, so the job runs on pinned CPUs exactly when its node's
    /// allocation (this job included) and the pinned CPUs add up to more than the node has. The
    /// job's processes then cannot run there: it fails, and Slurm drains the node with the
    /// misleading reason the support notes quote. Returns whether the job may run.
    pub(crate) fn job_fits_beside_pinned_cpus(&mut self, job: JobId, slurm_node: &str) -> bool {
        if !self.pods.any_cpus_pinned() {
            return true;
        }
        let Some(node) = self.slurm.node(slurm_node) else { return true };
        let pinned = self.cluster.nodes.get(node.k8s_node.as_str()).map_or(0, |k8s| k8s.pinned_cpus);
        if pinned == 0 || i64::from(node.alloc_cpus) + pinned <= i64::from(node.cpus) {
            return true;
        }
        legal(self.slurm.finish(job, JobBaseState::Failed, (1, 0), self.now));
        // slurmctld drains it, as SlurmUser.
        self.drain_node(slurm_node, "batch job complete failure", crate::slurm::SLURM_USER_UID);
        self.count(Transition::JobFailedOnPinnedCpus);
        self.on_job_ended(job);
        false
    }
}

/// The CPUs the static CPU Manager gives a Pod: with Guaranteed QoS (every container's CPU and
/// memory limits set, requests equal to them), each container asking for whole CPUs gets them.
pub(super) fn exclusive_cpus(pod: &Pod) -> i64 {
    let guaranteed = !pod.containers.is_empty()
        && pod.containers.iter().all(|container| {
            let (requests, limits) = (&container.requests, &container.limits);
            limits.cpu.is_some()
                && limits.memory.is_some()
                && requests.cpu.is_none_or(|cpu| Some(cpu) == limits.cpu)
                && requests.memory.is_none_or(|memory| Some(memory) == limits.memory)
        });
    if !guaranteed {
        return 0;
    }
    pod.containers
        .iter()
        .filter_map(|container| container.limits.cpu.map(|cpu| cpu.millis()))
        .filter(|millis| millis % 1000 == 0)
        .map(|millis| millis / 1000)
        .sum()
}
