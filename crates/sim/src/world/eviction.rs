//! The kubelet's eviction of a Pod whose sized scratch volume holds more than its size. An
//! `emptyDir` on a node's disk is a directory, not a file system of its size: writes beyond the
//! size succeed, and the kubelet's eviction manager, looking every monitoring period, evicts the
//! Pod once the volume holds more than its `sizeLimit` (`emptyDirLimitEviction` in the kubelet).
//! The world keeps the clock of those looks; the host measures (effect
//! [`Effect::MeasureVolumes`]) and answers with [`World::volumes_measured`].

use std::time::Duration;

use crate::ids::SharedStr;
use crate::k8s::{EventType, PodOwner, PodPhase};
use crate::sandbox::ScratchLimit;
use crate::world::timers::Timer;
use crate::world::{Effect, World};

/// The exit code of a container the eviction killed (SIGKILL).
const EVICTED_EXIT_CODE: i32 = 137;

impl World {
    /// Arms the next look at a running Pod's sized scratch volumes, if it has any (the first when
    /// its containers start, then after each look).
    pub(super) fn arm_volume_check(&mut self, uid: &SharedStr) {
        if self.scratch_limits_of(uid).is_some_and(|limits| !limits.is_empty()) {
            let at = self.now + self.eviction_monitoring_period();
            self.timers.schedule(at, Timer::VolumeCheck(uid.clone()));
        }
    }

    /// A look is due: the host measures the volumes of a Pod still running, and the next look is
    /// armed.
    pub(super) fn on_volume_check(&mut self, uid: &SharedStr) {
        if !self.runs_on_its_host(uid) {
            return;
        }
        let volumes: Vec<String> =
            self.scratch_limits_of(uid).unwrap_or_default().iter().map(|limit| limit.volume.clone()).collect();
        if volumes.is_empty() {
            return;
        }
        self.effects.push(Effect::MeasureVolumes { pod_uid: uid.clone(), volumes });
        self.arm_volume_check(uid);
    }

    /// What a Pod's scratch volumes hold, in bytes by volume name, as the host measured it
    /// (after [`Effect::MeasureVolumes`]): a volume holding more than its size gets the Pod
    /// evicted, as the kubelet evicts it. A Pod that ended meanwhile is left as it is.
    pub fn volumes_measured(&mut self, uid: &str, usage: &[(String, u64)]) {
        self.settle();
        if self.runs_on_its_host(uid) {
            let over = self.scratch_limits_of(uid).unwrap_or_default().iter().find_map(|limit| {
                usage.iter().any(|(volume, used)| *volume == limit.volume && *used > limit.bytes).then(|| limit.clone())
            });
            if let Some(limit) = over {
                self.evict_for_scratch_volume(uid, &limit);
            }
        }
        self.settle();
    }

    /// Evicts a Pod as the kubelet does when an `emptyDir` passes its `sizeLimit`: a Warning
    /// `Evicted` Event, the Pod Failed with reason `Evicted` and the kubelet's message, its
    /// containers killed (the kubelet gives them a one-second grace; here they are killed at
    /// once).
    fn evict_for_scratch_volume(&mut self, uid: &str, limit: &ScratchLimit) {
        // The kubelet's `emptyDirMessageFmt`, trailing space and all.
        let message = format!("Usage of EmptyDir volume {:?} exceeds the limit {:?}. ", limit.volume, limit.shown);
        self.event(uid, EventType::Warning, "Evicted", message.clone(), "kubelet");
        if let Some(pod) = self.cluster.pod_mut(uid) {
            pod.reason = Some("Evicted".to_owned());
            pod.message = Some(message);
        }
        self.effects.push(Effect::KillPod { pod_uid: SharedStr::from(uid) });
        self.finish_pod_with(uid, EVICTED_EXIT_CODE, "Error");
    }

    /// Whether a Pod runs, its containers started by its host, and is not being deleted.
    fn runs_on_its_host(&self, uid: &str) -> bool {
        self.cluster
            .pod(uid)
            .is_some_and(|pod| pod.phase == PodPhase::Running && pod.host_started && pod.deletion_timestamp.is_none())
    }

    /// The sized scratch volumes of a sandbox's Pod.
    fn scratch_limits_of(&self, uid: &str) -> Option<&[ScratchLimit]> {
        let PodOwner::Sandbox(id) = &self.cluster.pod(uid)?.owner else { return None };
        Some(&self.sandboxes.get(id)?.scratch_limits)
    }

    fn eviction_monitoring_period(&self) -> Duration {
        Duration::from_secs(u64::from(self.values.kubelet.eviction_monitoring_period_seconds.get()))
    }
}
