//! How Pods end: deletion with a grace period, exit of their containers, removal of the object.

use std::time::Duration;

use crate::config::FinalJobState;
use crate::k8s::{ContainerState, EventType, PodOwner, PodPhase};
use crate::slurm::JobBaseState;

use crate::machine::legal;
use crate::pods::PodTransition;
use crate::world::{Effect, MainExit, SandboxOutcome, Timer, World};

impl World {
    /// Starts deleting a Pod: Terminating with its grace period, then removal. An unbound or
    /// finished Pod goes at once.
    pub fn begin_pod_deletion(&mut self, uid: &str, grace_seconds: Option<u64>) {
        let Some(pod) = self.cluster.pod(uid) else { return };
        let (already_deleting, own_grace, running) =
            (pod.deletion_timestamp.is_some(), pod.termination_grace_period_seconds, pod.phase == PodPhase::Running);
        let shared_uid = pod.uid.clone();
        if already_deleting {
            // A shorter grace on a second delete shortens the wait, as in Kubernetes, and the
            // Pod's deletion timestamp and grace say so.
            if let Some(grace) = grace_seconds {
                let deadline = self.now + Duration::from_secs(grace);
                if let Some(pod) = self.cluster.pod(uid)
                    && pod.deletion_timestamp.is_some_and(|current| deadline < current)
                    && let Some(pod) = self.cluster.pod_mut(uid)
                {
                    pod.deletion_timestamp = Some(deadline);
                    pod.deletion_grace_period_seconds = Some(i64::try_from(grace).unwrap_or(i64::MAX));
                }
                self.timers.schedule(deadline, Timer::PodGraceOver(shared_uid));
            }
            return;
        }
        // A Pod's own grace is never negative: `create_pod` refuses that.
        let grace = grace_seconds.unwrap_or_else(|| u64::try_from(own_grace).unwrap_or(0));
        legal(self.pod_step(uid, PodTransition::BeginDeletion));
        if !running || grace == 0 {
            if let Some(pod) = self.cluster.pod_mut(uid) {
                pod.deletion_timestamp = Some(self.now);
                pod.deletion_grace_period_seconds = Some(0);
            }
            self.remove_pod(uid);
            return;
        }
        let now = self.now;
        if let Some(pod) = self.cluster.pod_mut(uid) {
            pod.deletion_timestamp = Some(now + Duration::from_secs(grace));
            pod.deletion_grace_period_seconds = Some(i64::try_from(grace).unwrap_or(i64::MAX));
        }
        self.event(uid, EventType::Normal, "Killing", "Stopping container main", "kubelet");
        self.effects.push(Effect::StopPod { pod_uid: shared_uid.clone(), grace: Duration::from_secs(grace) });
        self.timers.schedule(now + Duration::from_secs(grace), Timer::PodGraceOver(shared_uid));
        self.on_pod_deleting(uid);
    }

    /// The Pod object disappears; a placeholder waiting for it finishes.
    pub(crate) fn remove_pod(&mut self, uid: &str) {
        if self.cluster.pod(uid).is_none() {
            return;
        }
        legal(self.pod_step(uid, PodTransition::Remove));
        let Some(pod) = self.cluster.remove_pod(uid) else { return };
        if let Some(address) = pod.pod_ip {
            self.pod_addresses.release(address);
        }
        // Its pinned CPUs go back to their Node before its records go.
        self.unpin_cpus(uid);
        self.effects.push(Effect::KillPod { pod_uid: pod.uid.clone() });
        self.pods.forget(uid);
        self.sunk_rejected.remove(uid);
        if let Some(job) = self.placeholder_of_pod.get(uid).copied() {
            match self.slurm.job(job).map(|job| (job.state, job.completing)) {
                Some((JobBaseState::Pending, _)) => {
                    legal(self.slurm.cancel(job, 0, self.now));
                    self.placeholder_of_pod.remove(uid);
                    self.pod_of_placeholder.remove(&job);
                }
                Some((_, true)) => self.schedule_epilog(job),
                Some((JobBaseState::Running, false)) => {
                    // Removed without passing through Terminating (grace 0): cancel, then release.
                    legal(self.slurm.cancel(job, 0, self.now));
                    self.schedule_epilog(job);
                }
                _ => {
                    self.placeholder_of_pod.remove(uid);
                    self.pod_of_placeholder.remove(&job);
                }
            }
        }
        if pod.node_name.is_some() {
            self.pods.note_room_freed();
            self.slurm_dirty = true;
        }
        if let PodOwner::Sandbox(id) = &pod.owner {
            let id = id.clone();
            let exit_code = pod.containers.first().and_then(|container| match container.state {
                ContainerState::Terminated { exit_code, .. } => Some(exit_code),
                // Removed while it ran: the kill ends it.
                ContainerState::Running(_) => Some(128 + 9),
                ContainerState::Waiting(_) => None,
            });
            // A Pod whose containers the host never started has nothing left to kill.
            if self.host_confirms_starts && pod.host_started {
                self.pods.await_kill(pod.uid.clone(), id, exit_code);
            } else {
                self.sandbox_outcomes.push_back(SandboxOutcome::PodGone(id, exit_code));
            }
        }
    }

    /// The host reports that it killed whatever was left of a removed Pod's processes
    /// (`Effect::KillPod` applied): its sandbox ends now.
    pub fn pod_host_killed(&mut self, uid: &str) {
        self.settle();
        if let Some((id, exit_code)) = self.pods.killed(uid) {
            self.sandbox_outcomes.push_back(SandboxOutcome::PodGone(id, exit_code));
        }
        self.settle();
    }

    /// The host could not start a Pod's main container (`StartError`, as a kubelet reports a
    /// container runtime's refusal): the Pod fails with the host's message, and its sandbox
    /// with it.
    pub fn pod_start_failed(&mut self, uid: &str, message: &str) {
        self.settle();
        if self.cluster.pod(uid).is_some_and(|pod| pod.phase == PodPhase::Running) {
            self.event(uid, EventType::Warning, "Failed", format!("Error: {message}"), "kubelet");
            // What containerd reports for a container that could not start.
            let status = Some(("StartError".to_owned(), message.to_owned()));
            self.finish_running_pod(uid, 128, "StartError", PodPhase::Failed, status);
        }
        self.settle();
    }

    /// The host reports that a command of a Pod ended by itself: the main one's end (or its OOM
    /// kill) ends the Pod, another container's end only that container.
    pub fn host_reported_exit(&mut self, exit: &MainExit) {
        match exit {
            MainExit { pod_uid, container: None, oom_killed: true, .. } => self.pod_oom_killed(pod_uid),
            MainExit { pod_uid, container: None, exit_code, .. } => self.pod_exited(pod_uid, *exit_code),
            MainExit { pod_uid, container: Some(container), exit_code, .. } => {
                self.container_exited(pod_uid, container, *exit_code)
            }
        }
    }

    /// A Pod's containers exited by themselves (the host reports it).
    pub fn pod_exited(&mut self, uid: &str, exit_code: i32) {
        self.settle();
        self.on_pod_exited(uid, exit_code);
        self.settle();
    }

    /// The host reports that a running Pod's container other than the main one ended: it shows
    /// Terminated (`Completed` or `Error`) while the Pod runs on, as a kubelet reports a
    /// container of a `restartPolicy: Never` Pod.
    pub fn container_exited(&mut self, uid: &str, container: &str, exit_code: i32) {
        self.settle();
        // A container that ended had started: the host's report of the start travels another
        // way and may come after this one (a side container that exits at once), so the end
        // stands for it rather than being lost.
        if self.cluster.pod(uid).is_some_and(|pod| pod.phase == PodPhase::Running && !pod.host_started) {
            self.pod_host_started(uid);
        }
        let now = self.now;
        // The main container's end is the Pod's (`pod_exited`), not one of its containers'.
        let main = match self.cluster.pod(uid).map(|pod| &pod.owner) {
            Some(PodOwner::Sandbox(id)) => self.sandboxes.primary_container(id).unwrap_or(0),
            _ => 0,
        };
        let Some(pod) = self.cluster.pod_mut(uid) else { return };
        if pod.phase != PodPhase::Running || pod.containers.get(main).is_some_and(|each| each.name == container) {
            return;
        }
        let Some(state) = pod.containers.iter_mut().find(|each| each.name == container).map(|each| &mut each.state)
        else {
            return;
        };
        if !matches!(state, ContainerState::Running(_)) {
            return;
        }
        let reason = if exit_code == 0 { "Completed" } else { "Error" };
        *state = ContainerState::Terminated { exit_code, reason: reason.to_owned(), finished: now };
        if let PodOwner::Sandbox(id) = &pod.owner {
            let id = id.clone();
            self.sandbox_container_ended(&id, container, exit_code);
        }
        self.settle();
    }

    pub(super) fn on_pod_exited(&mut self, uid: &str, exit_code: i32) {
        let Some(pod) = self.cluster.pod(uid) else { return };
        if pod.phase != PodPhase::Running {
            return;
        }
        let phase = if exit_code == 0 { PodPhase::Succeeded } else { PodPhase::Failed };
        let reason = if exit_code == 0 { "Completed" } else { "Error" };
        self.finish_running_pod(uid, exit_code, reason, phase, None);
    }

    /// A running Pod's containers ended with `exit_code` (`container_reason`): the Pod ends in
    /// `phase`, with `status` (its reason and message) where given, and a Pod being deleted goes
    /// now (its processes honoured SIGTERM, or never started).
    fn finish_running_pod(
        &mut self,
        uid: &str,
        exit_code: i32,
        container_reason: &str,
        phase: PodPhase,
        status: Option<(String, String)>,
    ) {
        let deleting = self.cluster.pod(uid).is_some_and(|pod| pod.deletion_timestamp.is_some());
        legal(self.pod_step(uid, PodTransition::Finish));
        self.terminate_containers(uid, exit_code, container_reason);
        let (reason, message) = status.unzip();
        self.cluster.finish_pod(uid, phase, reason, message);
        if deleting { self.remove_pod(uid) } else { self.on_pod_terminal(uid) }
    }

    /// Every container of the Pod ended now with `exit_code` and `reason` (`Completed`, `Error`,
    /// `OOMKilled`).
    pub(super) fn terminate_containers(&mut self, uid: &str, exit_code: i32, reason: &str) {
        let now = self.now;
        if let Some(pod) = self.cluster.pod_mut(uid) {
            // A container that ended before the Pod keeps its own end.
            for container in &mut pod.containers {
                if !matches!(container.state, ContainerState::Terminated { .. }) {
                    container.state =
                        ContainerState::Terminated { exit_code, reason: reason.to_owned(), finished: now };
                }
            }
        }
    }

    /// A Pod ended (rejected or finished): its placeholder is released; the sandbox mirrors it.
    pub(super) fn on_pod_terminal(&mut self, uid: &str) {
        self.unpin_cpus(uid);
        self.pods.release_gpus(uid);
        if let Some(&job) = self.placeholder_of_pod.get(uid)
            && self.slurm.job(job).is_some_and(|job| job.state == JobBaseState::Running && !job.completing)
        {
            match self.values.scheduler.finished_pod_job_state {
                FinalJobState::Completed => {
                    legal(self.slurm.finish(job, JobBaseState::Completed, (0, 0), self.now));
                }
                FinalJobState::Cancelled => {
                    legal(self.slurm.cancel(job, 0, self.now));
                }
            }
            self.schedule_epilog(job);
        }
        self.pods.note_room_freed();
        self.slurm_dirty = true;
        if let Some(PodOwner::Sandbox(id)) = self.cluster.pod(uid).map(|pod| pod.owner.clone()) {
            self.sandbox_outcomes.push_back(SandboxOutcome::PodTerminal(id));
        }
    }
}
