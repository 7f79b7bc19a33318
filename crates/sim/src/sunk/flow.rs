//! The SUNK scheduler's side of a placeholder job once Slurm has it: the node lock, the prolog,
//! the drain before KillWait, and the two-way sync that cancels a job when its Pod goes.

use std::time::Duration;

use crate::config::FinalJobState;
use crate::ids::SharedStr;
use crate::k8s::{EventType, LOCK_KEY, PodOwner, PodPhase, Taint};
use crate::slurm::{JobBaseState, JobId, JobKind, JobPhase, SLURM_USER_UID};

use crate::machine::legal;
use crate::world::{SandboxOutcome, Timer, Transition, World};

impl World {
    /// The slurmd Pod of a Slurm node. Remembered per node (the lock annotation changes several
    /// times per job, and the name lookup walks thousands of slurmd Pods), and checked on use:
    /// an upgrade replaces slurmd Pods.
    pub(crate) fn slurmd_pod_uid(&mut self, slurm_node: &str) -> Option<SharedStr> {
        let namespace = &self.values.sunk.namespace;
        if let Some(uid) = self.slurmd_pods.get(slurm_node)
            && self.cluster.pod(uid).is_some_and(|pod| pod.name == *slurm_node && pod.namespace == *namespace)
        {
            return Some(uid.clone());
        }
        let uid = self.cluster.pod_by_name(namespace, slurm_node).map(|pod| pod.uid.clone())?;
        self.slurmd_pods.insert(slurm_node.to_owned(), uid.clone());
        Some(uid)
    }

    pub(crate) fn set_lock_annotation(&mut self, slurm_node: &str, value: &str) {
        if let Some(uid) = self.slurmd_pod_uid(slurm_node)
            && let Some(pod) = self.cluster.pod_mut(&uid)
        {
            // Rewritten in place: the lock state changes twice per job.
            match pod.annotations.get_mut(LOCK_KEY) {
                Some(current) => {
                    current.clear();
                    current.push_str(value);
                }
                None => {
                    pod.annotations.insert(LOCK_KEY.to_owned(), value.to_owned());
                }
            }
        }
    }

    /// Drains a Slurm node as `uid`, with a Warning Event on its Kubernetes Node.
    pub(crate) fn drain_node(&mut self, slurm_node: &str, reason: &str, uid: u32) {
        self.slurm.drain(slurm_node, reason, uid, self.now);
        let k8s_node = self.slurm.node(slurm_node).map(|node| node.k8s_node.clone()).unwrap_or_default();
        self.node_event(
            &k8s_node,
            EventType::Warning,
            "SlurmNodeDrained",
            format!("Slurm node {slurm_node} drained: {reason}"),
        );
        self.count(Transition::NodeDrained);
    }

    /// Slurm allocated a node: the prolog locks it, then the script starts.
    pub(crate) fn on_allocated(&mut self, job: JobId) {
        let Some(allocated) = self.slurm.job(job) else { return };
        let (kind, time_limit) = (allocated.kind.clone(), allocated.time_limit_seconds);
        let Some(slurm_node) = allocated.node.clone() else { return };
        let k8s_node = self.slurm.node(&slurm_node).map(|node| node.k8s_node.clone()).unwrap_or_default();
        self.lock_node(&slurm_node, &k8s_node);
        match &kind {
            JobKind::Placeholder { .. } => {
                let prolog = Duration::from_secs(u64::from(self.values.scheduler.prolog_seconds));
                self.timers.schedule(self.now + prolog, Timer::PrologDone(job));
            }
            JobKind::Batch { run_seconds, .. } => {
                if !self.job_fits_beside_pinned_cpus(job, &slurm_node) {
                    return;
                }
                if self.slurm.job(job).is_some_and(|job| job.phase() == JobPhase::Prolog) {
                    legal(self.slurm.start_script(job));
                }
                self.set_lock_annotation(&slurm_node, "locked");
                if let Some(seconds) = run_seconds {
                    self.timers.schedule(self.now + Duration::from_secs(u64::from(*seconds)), Timer::BatchJobEnds(job));
                }
            }
        }
        if let Some(limit) = time_limit {
            self.timers.schedule(self.now + Duration::from_secs(u64::from(limit)), Timer::TimeLimit(job));
        }
    }

    pub(crate) fn lock_node(&mut self, slurm_node: &str, k8s_node: &str) {
        let Some(node) = self.cluster.nodes.get_mut(k8s_node) else { return };
        if node.taints.iter().any(|taint| taint.key == LOCK_KEY) {
            return;
        }
        node.taints.push(Taint { key: LOCK_KEY.to_owned(), value: "true".to_owned(), effect: "NoExecute".to_owned() });
        self.set_lock_annotation(slurm_node, "pending");
        self.count(Transition::NodeLocked);
        // NoExecute: Pods that neither tolerate the lock nor belong to SUNK leave the Node.
        let sunk_name = self.values.scheduler.name.clone();
        let lock = Taint { key: LOCK_KEY.to_owned(), value: "true".to_owned(), effect: "NoExecute".to_owned() };
        let evicted: Vec<SharedStr> = self
            .cluster
            .pods_on(k8s_node)
            .filter(|pod| pod.deletion_timestamp.is_none())
            .filter(|pod| pod.scheduler_name != sunk_name && !pod.tolerates(&lock))
            .map(|pod| pod.uid.clone())
            .collect();
        for uid in evicted {
            self.event(
                &uid,
                EventType::Normal,
                "TaintManagerEviction",
                format!("Marking for deletion Pod (taint {LOCK_KEY})"),
                "taint-eviction-controller",
            );
            self.count(Transition::PodEvicted);
            self.begin_pod_deletion(&uid, None);
        }
    }

    pub(crate) fn unlock_node_if_idle(&mut self, slurm_node: &str) {
        let Some(node) = self.slurm.node(slurm_node) else { return };
        if !node.jobs.is_empty() {
            return;
        }
        let k8s_node = node.k8s_node.clone();
        if let Some(node) = self.cluster.nodes.get_mut(&k8s_node) {
            let before = node.taints.len();
            node.taints.retain(|taint| taint.key != LOCK_KEY);
            if node.taints.len() != before {
                self.set_lock_annotation(slurm_node, "false");
                self.count(Transition::NodeUnlocked);
                self.pods.note_room_freed();
            }
        }
    }

    pub(crate) fn on_prolog_done(&mut self, job: JobId) {
        let Some(running) = self.slurm.job(job) else { return };
        if running.state != JobBaseState::Running || running.completing {
            return;
        }
        let Some(slurm_node) = running.node.clone() else { return };
        if !self.job_fits_beside_pinned_cpus(job, &slurm_node) {
            return;
        }
        // A requeued job whose script had started runs again without a prolog.
        if self.slurm.job(job).is_some_and(|job| job.phase() == JobPhase::Prolog) {
            legal(self.slurm.start_script(job));
        }
        self.set_lock_annotation(&slurm_node, "locked_strict");
        let Some(pod_uid) = self.pod_of_placeholder.get(&job).cloned() else { return };
        let k8s_node = self.slurm.node(&slurm_node).map(|node| node.k8s_node.clone()).unwrap_or_default();
        let pod_pending = self
            .cluster
            .pod(&pod_uid)
            .is_some_and(|pod| pod.deletion_timestamp.is_none() && pod.phase == PodPhase::Pending);
        if pod_pending {
            self.bind_and_admit(&pod_uid, &k8s_node);
        }
    }

    pub(crate) fn schedule_epilog(&mut self, job: JobId) {
        let epilog = Duration::from_secs(u64::from(self.values.scheduler.epilog_seconds));
        self.timers.schedule(self.now + epilog, Timer::EpilogDone(job));
    }

    /// A job ended on the Slurm side (cancel, preemption, time limit, batch end): a placeholder's
    /// script asks for its Pod to be deleted and waits; KillWait bounds that wait.
    pub(crate) fn on_job_ended(&mut self, job: JobId) {
        let Some(ended) = self.slurm.job(job) else { return };
        match ended.kind.clone() {
            JobKind::Batch { .. } => self.schedule_epilog(job),
            JobKind::Placeholder { pod_uid } => {
                let pod_alive = self.cluster.pod(&pod_uid).is_some();
                if !pod_alive {
                    self.schedule_epilog(job);
                    return;
                }
                self.arm_kill_wait(job);
                self.begin_pod_deletion(&pod_uid, None);
            }
        }
    }

    /// The Pod got a deletion timestamp: SUNK cancels its placeholder (two-way sync).
    pub(crate) fn on_pod_deleting(&mut self, uid: &str) {
        let Some(&job) = self.placeholder_of_pod.get(uid) else { return };
        let Some(queued) = self.slurm.job(job) else { return };
        if queued.completing {
            return;
        }
        let final_state = self.values.scheduler.deleted_pod_job_state;
        match queued.state {
            JobBaseState::Pending => {
                legal(self.slurm.cancel(job, 0, self.now));
                self.pod_of_placeholder.remove(&job);
                self.placeholder_of_pod.remove(uid);
            }
            JobBaseState::Running => {
                if final_state == FinalJobState::Completed {
                    legal(self.slurm.finish(job, JobBaseState::Completed, (0, 0), self.now));
                } else {
                    legal(self.slurm.cancel(job, 0, self.now));
                }
                self.arm_kill_wait(job);
            }
            _ => {}
        }
        self.slurm_dirty = true;
    }

    /// The job's script was asked to end while its Pod lives on: Slurm waits KillWait before
    /// SIGKILL, and SUNK drains the node a margin before that if the Pod still has not gone.
    pub(crate) fn arm_kill_wait(&mut self, job: JobId) {
        let kill_wait = u64::from(self.values.slurm_config.kill_wait);
        let margin = u64::from(self.values.scheduler.drain_margin_seconds).min(kill_wait);
        self.timers.schedule(self.now + Duration::from_secs(kill_wait - margin), Timer::DrainBeforeKillWait(job));
        self.timers.schedule(self.now + Duration::from_secs(kill_wait), Timer::KillWait(job));
    }

    /// The epilog finished: the job leaves the queue, and its node unlocks if nothing else runs there.
    pub(crate) fn on_epilog_done(&mut self, job: JobId) {
        // A job's epilog can be scheduled twice (KillWait, then its Pod's removal): the first
        // releases it.
        let Some(node) =
            self.slurm.job(job).filter(|job| job.phase() == JobPhase::Completing).map(|job| job.node.clone())
        else {
            return;
        };
        legal(self.slurm.release(job, self.now));
        if let Some(pod_uid) = self.pod_of_placeholder.remove(&job) {
            self.placeholder_of_pod.remove(&pod_uid);
        }
        if let Some(node) = node {
            self.unlock_node_if_idle(&node);
        }
        self.slurm_dirty = true;
    }

    /// KillWait is about to run out and the Pod is still there: SUNK drains the node.
    pub(crate) fn on_drain_before_kill_wait(&mut self, job: JobId) {
        let pod_alive = self.pod_of_placeholder.get(&job).is_some_and(|uid| self.cluster.pod(uid).is_some());
        if pod_alive
            && let Some(node) = self.slurm.job(job).filter(|job| job.completing).and_then(|job| job.node.clone())
        {
            let reason = self.values.scheduler.drain_reason.clone();
            // The script runs in the job's epilog, as root.
            self.drain_node(&node, &reason, SLURM_USER_UID);
        }
    }

    /// KillWait ran out with the Pod still there: SIGKILL, the script is gone and the job
    /// completes though the Pod lingers.
    pub(crate) fn on_kill_wait(&mut self, job: JobId) {
        let pod_alive = self.pod_of_placeholder.get(&job).is_some_and(|uid| self.cluster.pod(uid).is_some());
        if pod_alive && self.slurm.job(job).is_some_and(|job| job.completing) {
            self.count(Transition::JobKilled);
            self.schedule_epilog(job);
        }
    }

    /// A Pod with SUNK's scheduler name: unless SUNK ignores it, it is validated and becomes a
    /// placeholder job, or is refused for good with a Warning Event.
    pub(crate) fn submit_placeholder(&mut self, uid: &SharedStr) {
        let Some(pod) = self.cluster.pod(uid) else { return };
        if self.placeholder_of_pod.contains_key(uid) || self.sunk_rejected.contains(uid) {
            return;
        }
        if super::handles(&self.values, pod).is_err() {
            // Nobody places this Pod: it stays Pending without a word, as in Kubernetes.
            self.count(Transition::PodIgnored);
            return;
        }
        let wants_gpus = pod.containers.iter().any(|container| container.requests.gpu.unwrap_or(0) > 0);
        let gpu_type = wants_gpus.then(|| self.slurm.nodes.iter().find_map(|node| node.gres_type.as_deref())).flatten();
        let sandbox = match &pod.owner {
            PodOwner::Sandbox(id) => Some(id.clone()),
            _ => None,
        };
        let request = match super::validate(&self.values, pod, gpu_type) {
            Ok(request) => request,
            Err(rejection) => {
                let message = rejection.to_string();
                let reason = self.values.scheduler.validation_event_reason.clone();
                self.sunk_rejected.insert(uid.clone());
                self.set_unschedulable(uid, &reason, &message);
                self.event(uid, EventType::Warning, reason, message, "sunk-scheduler");
                self.count(Transition::PodRejectedBySunk);
                return;
            }
        };
        match self.slurm.submit(request, self.now) {
            Ok(job) => {
                self.placeholder_of_pod.insert(uid.clone(), job);
                self.pod_of_placeholder.insert(job, uid.clone());
                if let Some(id) = &sandbox {
                    self.sandbox_outcomes.push_back(SandboxOutcome::JobSubmitted(id.clone(), job));
                }
                self.slurm_dirty = true;
                self.event(
                    uid,
                    EventType::Normal,
                    "Submitted",
                    format!("Submitted placeholder Slurm job {job}"),
                    "sunk-scheduler",
                );
                self.count(Transition::PlaceholderSubmitted);
            }
            Err(error) => {
                let reason = self.values.scheduler.validation_event_reason.clone();
                self.sunk_rejected.insert(uid.clone());
                let message = format!("Slurm rejected the placeholder job: {error}");
                self.set_unschedulable(uid, &reason, &message);
                self.event(uid, EventType::Warning, reason, message, "sunk-scheduler");
                self.count(Transition::PlaceholderRefused);
            }
        }
    }
}
