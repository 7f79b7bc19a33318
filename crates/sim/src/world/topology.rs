//! The cluster a values document describes: Nodes, slurmd Pods, the scheduler's objects and the
//! configured runners, built at start and rebuilt by `apply_values` (helm upgrade).

use std::collections::BTreeMap;

use crate::config::{SERVERLESS_POOL, SERVERLESS_POOL_LABEL, SERVERLESS_TAINT_KEY, Values};
use crate::error::{Reason, SimError, SimResult};
use crate::ids::{SeededIds, SharedStr};
use crate::k8s::{
    Cluster, ConfigMap, ContainerState, LOCK_KEY, Node, Pod, PodContainer, PodOwner, PodPhase, ResourceTotals, Taint,
};
use crate::quantity::Quantity;
use crate::resolved::{ResourceAmounts, Toleration};
use crate::slurm::{Partition, PreemptMode, Slurm, SlurmNode, User};
use crate::time::ManualClock;
use crate::world::{MAX_JOB_ID, MAX_NODES, World};

impl World {
    pub(super) fn quantity(text: &str, what: &str) -> SimResult<Quantity> {
        Quantity::parse(text).map_err(|error| SimError::invalid_field(what, error.to_string()))
    }

    pub(super) fn build_topology(&mut self) -> SimResult<()> {
        let values = self.values.clone();
        self.ensure_namespace(&values.sunk.namespace);
        self.ensure_namespace("default");
        for user in &values.slurm.users {
            self.slurm.add_user(User {
                name: user.name.as_str().into(),
                uid: user.uid,
                group: user.group.as_str().into(),
                gid: user.gid,
                default_account: user.default_account.as_str().into(),
            });
        }
        if values.slurm.first_job_id > MAX_JOB_ID {
            // Ids count up from here; 4294967295 would overflow at the first job.
            return Err(SimError::invalid_field(
                "slurm.firstJobId",
                format!("{} is above Slurm's MaxJobId {MAX_JOB_ID}", values.slurm.first_job_id),
            ));
        }
        let mut nodes_of_set: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut node_count: u64 = 0;
        for (set_index, set) in values.node_sets.iter().enumerate() {
            node_count += u64::from(set.replicas);
            if node_count > MAX_NODES {
                // Checked before anything is built: `replicas: 4000000000` would otherwise hold the
                // world for hours and exhaust memory.
                return Err(SimError::invalid_field(
                    format!("nodeSets[{set_index}].replicas"),
                    format!("the NodeSets hold more than {MAX_NODES} nodes in all"),
                ));
            }
        }
        for (set_index, set) in values.node_sets.iter().enumerate() {
            let cpu = Self::quantity(&set.cpu, &format!("nodeSets[{set_index}].cpu"))?;
            let memory = Self::quantity(&set.memory, &format!("nodeSets[{set_index}].memory"))?;
            for replica in 0..set.replicas {
                let node_name = format!("node-{}-{replica}", set.name);
                let slurm_name = format!("slurm-{}-{replica}", set.name);
                let mut labels = set.labels.clone();
                labels.insert("kubernetes.io/hostname".to_owned(), node_name.clone());
                labels.insert("sunk.coreweave.com/nodeset".to_owned(), set.name.clone());
                if !set.gpu_class.is_empty() {
                    labels.insert(crate::k8s::GPU_CLASS_LABEL.to_owned(), set.gpu_class.clone());
                }
                self.insert_node(&node_name, labels, Vec::new(), &cpu, &memory, i64::from(set.gpus));
                self.slurm.add_node(SlurmNode {
                    name: slurm_name.clone(),
                    k8s_node: node_name.clone(),
                    cpus: u32::try_from(cpu.units_ceil()).unwrap_or(u32::MAX),
                    real_memory_mb: u64::try_from(memory.units_ceil() >> 20).unwrap_or(0),
                    gpus: set.gpus,
                    gres_type: values.scheduler.gpu_types.get(&set.gpu_class).cloned(),
                    partitions: Vec::new(),
                    alloc_cpus: 0,
                    alloc_mem_mb: 0,
                    gpus_in_use: 0,
                    jobs: Vec::new(),
                    drain: None,
                    boot_time: self.now,
                    last_busy: self.now,
                });
                nodes_of_set.entry(set.name.clone()).or_default().push(slurm_name.clone());
                self.create_slurmd_pod(set_index, &slurm_name, &node_name)?;
            }
        }
        for (node_index, node) in values.extra_nodes.iter().enumerate() {
            let cpu = Self::quantity(&node.cpu, &format!("extraNodes[{node_index}].cpu"))?;
            let memory = Self::quantity(&node.memory, &format!("extraNodes[{node_index}].memory"))?;
            let mut labels = node.labels.clone();
            labels.insert("kubernetes.io/hostname".to_owned(), node.name.clone());
            self.insert_node(&node.name, labels, Vec::new(), &cpu, &memory, 0);
        }
        self.build_serverless_nodes(node_count)?;
        if !values.slurm.partitions.iter().any(|partition| partition.default) {
            return Err(SimError::invalid_field("slurm.partitions", "one partition must be the default"));
        }
        for (index, partition) in values.slurm.partitions.iter().enumerate() {
            let mut nodes = Vec::new();
            for set in &partition.node_sets {
                let members = nodes_of_set.get(set).ok_or_else(|| {
                    SimError::invalid_field(
                        format!("slurm.partitions[{index}].nodeSets"),
                        format!("no NodeSet named {set:?}"),
                    )
                })?;
                nodes.extend(members.iter().cloned());
            }
            let preempt_mode = match partition.preempt_mode.to_ascii_uppercase().as_str() {
                "OFF" => PreemptMode::Off,
                "CANCEL" => PreemptMode::Cancel,
                "REQUEUE" => PreemptMode::Requeue,
                other => {
                    return Err(SimError::invalid_field(
                        format!("slurm.partitions[{index}].preemptMode"),
                        format!("{other:?} is not OFF, CANCEL or REQUEUE"),
                    ));
                }
            };
            self.slurm.add_partition(Partition {
                name: partition.name.as_str().into(),
                default: partition.default,
                nodes,
                over_subscribe: partition.over_subscribe.to_ascii_uppercase(),
                priority_tier: partition.priority_tier,
                preempt_mode,
            });
        }
        self.create_scheduler_objects();
        Ok(())
    }

    /// The serverless pool's Nodes: labelled for it and tainted so that only serverless Pods
    /// land there. None when serverless placement is off.
    fn build_serverless_nodes(&mut self, nodes_so_far: u64) -> SimResult<()> {
        let pool = self.values.serverless.clone();
        if !pool.enabled {
            return Ok(());
        }
        if nodes_so_far + u64::from(pool.nodes) > MAX_NODES {
            return Err(SimError::invalid_field(
                "serverless.nodes",
                format!("the NodeSets and the serverless pool hold more than {MAX_NODES} nodes in all"),
            ));
        }
        let cpu = Self::quantity(&pool.cpu, "serverless.cpu")?;
        let memory = Self::quantity(&pool.memory, "serverless.memory")?;
        for index in 0..pool.nodes {
            let name = format!("node-serverless-{index}");
            let labels = BTreeMap::from([
                ("kubernetes.io/hostname".to_owned(), name.clone()),
                (SERVERLESS_POOL_LABEL.to_owned(), SERVERLESS_POOL.to_owned()),
            ]);
            let taint = Taint {
                key: SERVERLESS_TAINT_KEY.to_owned(),
                value: "true".to_owned(),
                effect: "NoSchedule".to_owned(),
            };
            self.insert_node(&name, labels, vec![taint], &cpu, &memory, 0);
        }
        Ok(())
    }

    /// A new, ready Node with nothing requested of it yet.
    fn insert_node(
        &mut self,
        name: &str,
        labels: BTreeMap<String, String>,
        taints: Vec<Taint>,
        cpu: &Quantity,
        memory: &Quantity,
        gpus: i64,
    ) {
        let uid = self.ids.uid();
        let node = Node {
            name: name.into(),
            uid: uid.into(),
            labels,
            taints,
            allocatable: ResourceTotals { cpu_millis: cpu.millis(), memory_bytes: memory.units_ceil(), gpus },
            requested: ResourceTotals::default(),
            pinned_cpus: 0,
            created: self.now,
            ready: true,
        };
        self.cluster.nodes.insert(name.to_owned(), node);
    }

    pub(super) fn create_slurmd_pod(&mut self, set_index: usize, slurm_name: &str, node_name: &str) -> SimResult<()> {
        let set = &self.values.node_sets[set_index];
        let requests = ResourceAmounts {
            cpu: Some(Self::quantity(&set.slurmd.requests.cpu, &format!("nodeSets[{set_index}].slurmd.requests.cpu"))?),
            memory: Some(Self::quantity(
                &set.slurmd.requests.memory,
                &format!("nodeSets[{set_index}].slurmd.requests.memory"),
            )?),
            gpu: None,
        };
        let namespace = self.values.sunk.namespace.clone();
        let mut labels = BTreeMap::new();
        labels.insert("app.kubernetes.io/name".to_owned(), "slurmd".to_owned());
        labels.insert("sunk.coreweave.com/nodeset".to_owned(), set.name.clone());
        let mut annotations = BTreeMap::new();
        annotations.insert(LOCK_KEY.to_owned(), "false".to_owned());
        let container = PodContainer {
            name: "slurmd".to_owned(),
            image: "registry.gitlab.com/coreweave/sunk/slurmd:emulated".to_owned(),
            command: Vec::new(),
            args: Vec::new(),
            env: BTreeMap::new(),
            inputs: None,
            working_dir: None,
            requests,
            limits: ResourceAmounts::default(),
            state: ContainerState::Running(self.now),
        };
        let owner = PodOwner::Slurmd { slurm_node: slurm_name.to_owned() };
        let pod = self.system_pod(
            namespace,
            slurm_name.to_owned(),
            labels,
            annotations,
            Some(node_name.to_owned()),
            container,
            owner,
        );
        self.cluster.insert_pod(pod);
        Ok(())
    }

    /// A Pod of the platform itself (slurmd, the scheduler): already bound and running, and
    /// tolerating the node lock.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn system_pod(
        &mut self,
        namespace: String,
        name: String,
        labels: BTreeMap<String, String>,
        annotations: BTreeMap<String, String>,
        node_name: Option<String>,
        container: PodContainer,
        owner: PodOwner,
    ) -> Pod {
        Pod {
            uid: self.ids.uid(),
            namespace: namespace.into(),
            name: name.into(),
            labels: labels.into(),
            annotations: annotations.into(),
            scheduler_name: "default-scheduler".to_owned(),
            node_name: node_name.map(SharedStr::from),
            termination_grace_period_seconds: 30,
            node_selector: BTreeMap::new(),
            tolerations: vec![lock_toleration()],
            required_node_affinity: Vec::new(),
            priority_class_name: None,
            extra_spec: BTreeMap::new(),
            containers: vec![container],
            phase: PodPhase::Running,
            reason: None,
            message: None,
            scheduled_condition: Some((true, String::new(), String::new())),
            start_time: Some(self.now),
            created: self.now,
            deletion_timestamp: None,
            deletion_grace_period_seconds: None,
            owner,
            resource_version: 0,
            object_ref: Default::default(),
            host_started: true,
            pod_ip: None,
        }
    }

    /// The scheduler Pod (7.x: name in args) and, for 8.x, its `scheduler.conf` ConfigMap.
    pub(super) fn create_scheduler_objects(&mut self) {
        let values = self.values.clone();
        let namespace = values.sunk.namespace.clone();
        let pod_name = format!("{}-scheduler-{}", values.sunk.release, self.ids.name_suffix());
        let existing: Vec<SharedStr> = self
            .cluster
            .pods_iter()
            .filter(|pod| pod.owner == PodOwner::Scheduler)
            .map(|pod| pod.uid.clone())
            .collect();
        for uid in existing {
            self.cluster.remove_pod(&uid);
        }
        self.cluster.config_maps.remove(&(namespace.clone(), format!("{}-scheduler-config", values.sunk.release)));
        if !values.scheduler.enabled {
            return;
        }
        let mut args = Vec::new();
        if values.sunk.version < 8 {
            args.push(format!("--scheduler-name={}", values.scheduler.name));
        } else {
            args.push("--config=/etc/sunk-scheduler/scheduler.conf".to_owned());
        }
        args.push(format!("--slurm-kill-wait={}s", values.slurm_config.kill_wait));
        let mut labels = BTreeMap::new();
        labels.insert("app.kubernetes.io/name".to_owned(), "sunk-scheduler".to_owned());
        labels.insert("app.kubernetes.io/component".to_owned(), "scheduler".to_owned());
        labels.insert("app.kubernetes.io/instance".to_owned(), values.sunk.release.clone());
        // The scheduler runs on a system Node when there is one, as in a real cluster.
        let node_name = values
            .extra_nodes
            .first()
            .map(|node| node.name.clone())
            .or_else(|| self.cluster.nodes.keys().next().cloned());
        let cpu = Quantity::parse("100m").ok();
        let memory = Quantity::parse("256Mi").ok();
        let container = PodContainer {
            name: "scheduler".to_owned(),
            image: "registry.gitlab.com/coreweave/sunk/sunk-scheduler:emulated".to_owned(),
            command: vec!["/usr/local/bin/sunk-scheduler".to_owned()],
            args,
            env: BTreeMap::new(),
            inputs: None,
            working_dir: None,
            requests: ResourceAmounts { cpu, memory, gpu: None },
            limits: ResourceAmounts::default(),
            state: ContainerState::Running(self.now),
        };
        let pod = self.system_pod(
            namespace.clone(),
            pod_name,
            labels.clone(),
            BTreeMap::new(),
            node_name,
            container,
            PodOwner::Scheduler,
        );
        self.cluster.insert_pod(pod);
        if values.sunk.version >= 8 {
            let config = format!(
                "scheduler:\n  name: {}\n  terminationOffset: {}s\nslurm:\n  killWait: {}s\n",
                values.scheduler.name, values.scheduler.termination_offset_seconds, values.slurm_config.kill_wait
            );
            let mut data = BTreeMap::new();
            data.insert("scheduler.conf".to_owned(), config);
            self.cluster.config_maps.insert(
                (namespace.clone(), format!("{}-scheduler-config", values.sunk.release)),
                ConfigMap {
                    namespace,
                    name: format!("{}-scheduler-config", values.sunk.release),
                    labels,
                    data,
                    created: self.now,
                },
            );
        }
    }

    pub(super) fn build_runners(&mut self) -> SimResult<()> {
        for (index, runner) in self.values.runners.clone().into_iter().enumerate() {
            self.create_configured_runner(&runner.org, index, &runner)?;
        }
        self.runners.advance(self.now);
        Ok(())
    }

    /// Creates `runners[index]` of the values in `org` (its own, or a tenant's).
    pub(super) fn create_configured_runner(
        &mut self,
        org: &str,
        index: usize,
        runner: &crate::config::RunnerValues,
    ) -> SimResult<()> {
        let policy = match (&runner.policy, runner.never_configured) {
            (Some(_), true) => {
                return Err(SimError::invalid_field(
                    format!("runners[{index}].neverConfigured"),
                    "a never-configured runner has no policy: drop `policy` or `neverConfigured`",
                ));
            }
            (None, true) => None,
            (None, false) => {
                return Err(SimError::invalid_field(
                    format!("runners[{index}].policy"),
                    "required (`{}` is the permissive policy; `neverConfigured: true` makes a runner without one)",
                ));
            }
            (Some(policy), false) => Some(
                serde_json::from_value::<cwsandbox_api::sandbox_v1::Policy>(policy.clone())
                    .map_err(|error| SimError::invalid_field(format!("runners[{index}].policy"), error.to_string()))?,
            ),
        };
        let managed = cwsandbox_api::sandbox_v1::ManagedRunner {
            identity: Some(cwsandbox_api::sandbox_v1::RunnerIdentity {
                runner_id: runner.runner_id.clone(),
                runner_group_id: runner.runner_group_id.clone(),
                zone: runner.zone.clone(),
                cluster_id: runner.cluster_id.clone(),
                cluster_name: String::new(),
            }),
            display_name: runner.display_name.clone(),
            policy,
            ..Default::default()
        };
        if runner.never_configured {
            self.runners.create_never_configured(org, managed, &format!("config-{index}"), self.now)?;
        } else {
            self.runners.create(org, managed, &format!("config-{index}"), self.now)?;
        }
        Ok(())
    }

    /// Whether `values` could be applied now, changing nothing: they must build a world of their
    /// own (so a failed upgrade leaves this one as it was), and the node and partition layout
    /// cannot change while Slurm jobs exist.
    pub fn check_values(&self, values: &Values) -> SimResult<()> {
        World::new(values.clone(), Box::new(ManualClock::new(self.now)), Box::new(SeededIds::new(0)))?;
        if self.layout_changes(values) && !self.slurm.queue.is_empty() {
            return Err(SimError::FailedPrecondition {
                reason: Reason::PreconditionFailed,
                message: "nodes or partitions cannot change while Slurm jobs exist".to_owned(),
            });
        }
        Ok(())
    }

    pub(super) fn layout_changes(&self, values: &Values) -> bool {
        let shape = |values: &Values| {
            values
                .node_sets
                .iter()
                .map(|set| (set.name.clone(), set.replicas, set.cpu.clone(), set.memory.clone(), set.gpus))
                .collect::<Vec<_>>()
        };
        let pool = |values: &Values| {
            let pool = &values.serverless;
            (pool.enabled, pool.nodes, pool.cpu.clone(), pool.memory.clone())
        };
        shape(values) != shape(&self.values)
            || values.slurm.partitions != self.values.slurm.partitions
            || values.extra_nodes != self.values.extra_nodes
            || pool(values) != pool(&self.values)
    }

    /// Applies new values like `helm upgrade`: the scheduler Pod's args and ConfigMap change,
    /// slurmd requests change, and Pods created from now on see the new rules. The node and
    /// partition layout cannot change while jobs exist.
    pub fn apply_values(&mut self, values: Values) -> SimResult<()> {
        // As `helm upgrade` with unchanged values: no rollout, no Pod restarts.
        if values == self.values {
            return Ok(());
        }
        self.check_values(&values)?;
        let layout_changed = self.layout_changes(&values);
        let old = std::mem::replace(&mut self.values, values.clone());
        // Scheduler scopes and the layout decide Pending sandboxes' reasons.
        self.touch_all_sandboxes();
        // The namespace prefix and the runtime defaults may have changed.
        self.sandboxes.forget_values();
        if layout_changed {
            let kept_pods: Vec<Pod> = self
                .cluster
                .pods_iter()
                .filter(|pod| !matches!(pod.owner, PodOwner::Slurmd { .. } | PodOwner::Scheduler))
                .cloned()
                .collect();
            let events = std::mem::take(&mut self.cluster.events);
            let namespaces = std::mem::take(&mut self.cluster.namespaces);
            let sequence = self.cluster.event_sequence;
            self.cluster = Cluster::new(values.sandboxes.event_capacity);
            self.cluster.events = events;
            self.cluster.namespaces = namespaces;
            self.cluster.event_sequence = sequence;
            self.slurm = Slurm::new(self.slurm.next_job_id.max(values.slurm.first_job_id));
            if let Err(error) = self.build_topology() {
                self.values = old;
                return Err(error);
            }
            for mut pod in kept_pods {
                if pod.node_name.as_ref().is_some_and(|node| !self.cluster.nodes.contains_key(node.as_str())) {
                    pod.node_name = None;
                }
                self.cluster.insert_pod(pod);
            }
        } else {
            for (set_index, set) in values.node_sets.iter().enumerate() {
                for replica in 0..set.replicas {
                    let slurm_name = format!("slurm-{}-{replica}", set.name);
                    let node_name = format!("node-{}-{replica}", set.name);
                    let old_uid =
                        self.cluster.pod_by_name(&values.sunk.namespace, &slurm_name).map(|pod| pod.uid.clone());
                    let old_annotations =
                        old_uid.as_ref().and_then(|uid| self.cluster.pod(uid)).map(|pod| pod.annotations.clone());
                    if let Some(uid) = old_uid {
                        self.cluster.remove_pod(&uid);
                    }
                    if let Err(error) = self.create_slurmd_pod(set_index, &slurm_name, &node_name) {
                        self.values = old;
                        return Err(error);
                    }
                    if let Some(annotations) = old_annotations
                        && let Some(uid) = self.slurmd_pod_uid(&slurm_name)
                        && let Some(pod) = self.cluster.pod_mut(&uid)
                    {
                        pod.annotations = annotations;
                    }
                }
            }
            self.create_scheduler_objects();
        }
        self.pods.note_room_freed();
        // The upgrade restarts the scheduler, which reconciles every Pending Pod again, those it
        // refused included: a refusal under the old values (a grace period too long for the old
        // KillWait) may not hold under the new ones. Their stale reason goes with the refusal.
        let refused: Vec<SharedStr> = self
            .sunk_rejected
            .iter()
            .filter(|uid| {
                self.cluster.pod(uid).is_some_and(|pod| {
                    pod.node_name.is_none() && pod.phase == PodPhase::Pending && pod.deletion_timestamp.is_none()
                })
            })
            .cloned()
            .collect();
        for uid in &refused {
            self.sunk_rejected.remove(uid);
            if let Some(pod) = self.cluster.pod_mut(uid) {
                pod.scheduled_condition = None;
            }
        }
        // A scheduler with a new name or scope picks up the Pending Pods it now watches.
        let newly_watched: Vec<SharedStr> = self
            .cluster
            .pods_iter()
            .filter(|pod| pod.node_name.is_none() && pod.phase == PodPhase::Pending && pod.deletion_timestamp.is_none())
            .filter(|pod| !self.sunk_rejected.contains(&pod.uid) && !self.placeholder_of_pod.contains_key(&pod.uid))
            .map(|pod| pod.uid.clone())
            .collect();
        for uid in newly_watched {
            self.pods.queue_for_scheduling(uid);
        }
        self.slurm_dirty = true;
        self.settle();
        Ok(())
    }
}

fn lock_toleration() -> Toleration {
    Toleration { key: LOCK_KEY.to_owned(), operator: "Exists".to_owned(), value: String::new(), effect: String::new() }
}
