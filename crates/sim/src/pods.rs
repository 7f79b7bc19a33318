//! The Pod lifecycle as a machine: Pending → (bound) → Running → Succeeded/Failed, Terminating
//! once deleted, then removed. The kubelet, the schedulers and teardown change Pods (in `world/`);
//! each change is one of these transitions, checked against the Pod's phase first
//! (`World::pod_step`, which needs the cluster and so lives in `world/pods.rs`).

use std::time::Duration;

use crate::k8s::{Pod, PodPhase};
use crate::machine::{phases, transitions};

phases! {
    /// Where a Pod stands: its phase, and whether it is being deleted.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum PodLifecycle {
        /// Not started; unbound, or bound while its placeholder's prolog runs.
        Pending,
        /// Started.
        Running,
        /// Every container exited 0.
        Succeeded,
        /// A container failed, or the kubelet rejected the Pod.
        Failed,
        /// Deleted and waiting for its grace period or its processes.
        Terminating,
    }
}

impl PodLifecycle {
    /// Where `pod` stands.
    pub fn of(pod: &Pod) -> PodLifecycle {
        if pod.deletion_timestamp.is_some() {
            return PodLifecycle::Terminating;
        }
        match pod.phase {
            PodPhase::Pending => PodLifecycle::Pending,
            PodPhase::Running => PodLifecycle::Running,
            PodPhase::Succeeded => PodLifecycle::Succeeded,
            PodPhase::Failed => PodLifecycle::Failed,
        }
    }
}

transitions! {
    machine "pod";
    /// One named step of a Pod's life.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum PodTransition {
        /// The Pod object was created.
        Create => "pod_created" from [],
        /// A scheduler bound it to a Node.
        Bind => "pod_bound" from [Pending],
        /// The kubelet admitted it: its containers run.
        Start => "pod_started" from [Pending],
        /// The kubelet refused it (`OutOfcpu`, `NodeAffinity`…).
        RejectByKubelet => "pod_rejected_by_kubelet" from [Pending],
        /// Its containers exited by themselves (or honoured SIGTERM while Terminating).
        Finish => "pod_finished" from [Running, Terminating],
        /// It got a deletion timestamp.
        BeginDeletion => "pod_terminating" from [Pending, Running, Succeeded, Failed],
        /// The object was removed.
        Remove => "pod_removed" from [Pending, Running, Succeeded, Failed, Terminating],
    }
    /// The phases this transition may start from (`Create` starts from no Pod).
    pub fn allowed_from(self) -> &'static [PodLifecycle];
}

/// What goes wrong with one sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InjectedKind {
    /// Images matching the glob cannot be pulled (every image when empty).
    ImagePull {
        /// A glob over the image reference.
        images: String,
    },
    /// The main process is OOM-killed once it has run this long.
    OomKillAfter(Duration),
    /// The sandbox's Node turns NotReady this long after the sandbox started.
    NodeNotReadyAfter(Duration),
    /// The Pod stays unscheduled this long.
    PendingFor(Duration),
}

/// A fault injected into one sandbox, with the id of the rule that injected it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectedFault {
    /// The rule's id (`fault-3`), named in messages.
    pub id: String,
    /// What goes wrong.
    pub kind: InjectedKind,
}

/// A Pod's pull that failed: the image and the registry's (or the policy's) message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePullFailure {
    /// The image reference.
    pub image: String,
    /// The kubelet's waiting reason: `ErrImagePull`, `ErrImageNeverPull` or `InvalidImageName`.
    pub reason: String,
    /// What the registry or the policy said.
    pub message: String,
}
