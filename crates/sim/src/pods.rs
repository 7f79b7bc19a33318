//! The Pod lifecycle: the Pod machine (Pending → (bound) → Running → Succeeded/Failed,
//! Terminating once deleted, then removed) and [`Pods`], what the world keeps about each Pod
//! beside its object in the cluster. The kubelet, the schedulers and teardown change Pods (in
//! `world/`); each change is one of these transitions, checked against the Pod's phase first
//! (`World::pod_step`, which needs the cluster and so lives in `world/pods.rs`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use crate::ids::{IdHash, SharedStr};
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

/// What the world keeps about Pods beside their objects in the cluster, by Pod uid: the
/// scheduling queues, injected faults, the devices the kubelet gave them, their image pulls and,
/// once removed, the kill their host still owes. The fields are private so that each use is a
/// named step, and [`Pods::forget`] is the one place a removed Pod's records go.
#[derive(Debug, Default)]
pub(crate) struct Pods {
    /// Pods needing a scheduling decision; ordered, so that runs replay identically.
    unscheduled: BTreeSet<SharedStr>,
    /// Pods an injected fault holds unscheduled until its timer.
    held: BTreeSet<SharedStr>,
    /// Faults injected into sandbox Pods.
    faults: HashMap<SharedStr, Vec<InjectedFault>, IdHash>,
    /// Default-scheduler Pods waiting for room; ordered, so that retries replay identically.
    waiting_for_room: BTreeSet<SharedStr>,
    /// Something released Node resources since `waiting_for_room` was last retried.
    room_freed: bool,
    /// Pods holding CPUs pinned by the kubelet: uid → (Node, whole CPUs).
    pinned_cpus: HashMap<SharedStr, (SharedStr, i64), IdHash>,
    /// GPUs the device plugin gave Pods the default scheduler placed: uid → (Node, indices).
    gpu_devices: HashMap<SharedStr, (SharedStr, Vec<u32>), IdHash>,
    /// Pods whose images the host is pulling.
    pulling: HashSet<SharedStr, IdHash>,
    /// Pods whose pull the host reported failed, waiting for the kubelet's back-off.
    failed_pulls: HashMap<SharedStr, ImagePullFailure, IdHash>,
    /// Removed sandbox Pods whose started processes the host is killing (`Effect::KillPod`),
    /// with the sandbox and the exit code it ends with once the host reports them gone: where a
    /// host runs processes, nobody reads a sandbox ended while its processes still run.
    awaiting_kill: HashMap<SharedStr, (SharedStr, Option<i32>), IdHash>,
}

impl Pods {
    /// Queues a Pod for a scheduling decision (a new Pod, one whose hold ended, or one a
    /// scheduler now watches); the world's reconcile loop takes it.
    pub(crate) fn queue_for_scheduling(&mut self, uid: SharedStr) {
        self.unscheduled.insert(uid);
    }

    /// Takes the next Pod needing a scheduling decision, lowest uid first, so that runs replay.
    pub(crate) fn next_to_schedule(&mut self) -> Option<SharedStr> {
        self.unscheduled.pop_first()
    }

    /// Holds a Pod unscheduled (an injected `PendingFor` fault) until [`Pods::release`].
    pub(crate) fn hold(&mut self, uid: SharedStr) {
        self.held.insert(uid);
    }

    /// Whether an injected fault holds the Pod unscheduled: no scheduler may place it yet.
    pub(crate) fn is_held(&self, uid: &str) -> bool {
        self.held.contains(uid)
    }

    /// Ends a Pod's hold; false when it was not held (its timer outlived it).
    pub(crate) fn release(&mut self, uid: &str) -> bool {
        self.held.remove(uid)
    }

    /// Keeps the faults injected into a Pod, for the scheduler, the kubelet and its timers.
    pub(crate) fn inject_faults(&mut self, uid: SharedStr, faults: Vec<InjectedFault>) {
        self.faults.insert(uid, faults);
    }

    /// The faults injected into a Pod; none for most Pods.
    pub(crate) fn faults_of(&self, uid: &str) -> &[InjectedFault] {
        self.faults.get(uid).map_or(&[], Vec::as_slice)
    }

    /// Sets a default-scheduler Pod aside until some Node has room again.
    pub(crate) fn wait_for_room(&mut self, uid: SharedStr) {
        self.waiting_for_room.insert(uid);
    }

    /// Notes that Node resources were released (a Pod ended, a Node was unlocked or changed):
    /// the Pods waiting for room get another try.
    pub(crate) fn note_room_freed(&mut self) {
        self.room_freed = true;
    }

    /// The Pods waiting for room, taken to be tried again, once room was freed since the last
    /// take; `None` while nothing changed for them. A Pod that still finds no room waits again.
    pub(crate) fn take_waiting_if_room_freed(&mut self) -> Option<BTreeSet<SharedStr>> {
        if !std::mem::take(&mut self.room_freed) {
            return None;
        }
        Some(std::mem::take(&mut self.waiting_for_room))
    }

    /// Records the CPUs the static CPU Manager pinned for a Pod on a Node (the Node's own count
    /// is the caller's).
    pub(crate) fn pin_cpus(&mut self, uid: SharedStr, node: SharedStr, cpus: i64) {
        self.pinned_cpus.insert(uid, (node, cpus));
    }

    /// Drops a Pod's pinned CPUs, with the Node and count to give back to the Node.
    pub(crate) fn unpin_cpus(&mut self, uid: &str) -> Option<(SharedStr, i64)> {
        self.pinned_cpus.remove(uid)
    }

    /// Whether any Pod holds pinned CPUs: while none does, no Slurm job can start on them.
    pub(crate) fn any_cpus_pinned(&self) -> bool {
        !self.pinned_cpus.is_empty()
    }

    /// Records the GPUs the device plugin gave a Pod on a Node.
    pub(crate) fn assign_gpus(&mut self, uid: SharedStr, node: SharedStr, indices: Vec<u32>) {
        self.gpu_devices.insert(uid, (node, indices));
    }

    /// The indices of the GPUs the device plugin gave a Pod, if it gave it any.
    pub(crate) fn gpus_of(&self, uid: &str) -> Option<&[u32]> {
        self.gpu_devices.get(uid).map(|(_, indices)| indices.as_slice())
    }

    /// The GPUs Pods hold on a Node, in no particular order: a new Pod gets others.
    pub(crate) fn gpus_held_on<'a>(&'a self, node: &'a str) -> impl Iterator<Item = u32> + 'a {
        self.gpu_devices
            .values()
            .filter(move |(holder, _)| holder.as_str() == node)
            .flat_map(|(_, indices)| indices.iter().copied())
    }

    /// Gives a Pod's GPUs back (it finished or left).
    pub(crate) fn release_gpus(&mut self, uid: &str) {
        self.gpu_devices.remove(uid);
    }

    /// Notes that the host is pulling a Pod's images (`Effect::PullImages`).
    pub(crate) fn begin_pull(&mut self, uid: SharedStr) {
        self.pulling.insert(uid);
    }

    /// Ends a Pod's pull; false when none was under way (the Pod left meanwhile), so the host's
    /// report is stale.
    pub(crate) fn end_pull(&mut self, uid: &str) -> bool {
        self.pulling.remove(uid)
    }

    /// Whether the host is pulling the Pod's images: its sandbox is not running yet.
    pub(crate) fn is_pulling(&self, uid: &str) -> bool {
        self.pulling.contains(uid)
    }

    /// Keeps the host's failure of a Pod's pull, for the message of the kubelet's back-off.
    pub(crate) fn pull_failed(&mut self, uid: SharedStr, failure: ImagePullFailure) {
        self.failed_pulls.insert(uid, failure);
    }

    /// How the host's pull of a Pod's images failed, if it did.
    pub(crate) fn failed_pull(&self, uid: &str) -> Option<&ImagePullFailure> {
        self.failed_pulls.get(uid)
    }

    /// Records that the host is killing a removed sandbox Pod's processes: its sandbox ends,
    /// with `exit_code`, once the host reports them gone ([`Pods::killed`]).
    pub(crate) fn await_kill(&mut self, uid: SharedStr, sandbox_id: SharedStr, exit_code: Option<i32>) {
        self.awaiting_kill.insert(uid, (sandbox_id, exit_code));
    }

    /// Whether a removed Pod's processes are still being killed: its sandbox is not over yet.
    pub(crate) fn is_awaiting_kill(&self, uid: &str) -> bool {
        self.awaiting_kill.contains_key(uid)
    }

    /// The host killed a removed Pod's processes: the sandbox and exit code that waited for it,
    /// once (`None` for a Pod nothing waited on).
    pub(crate) fn killed(&mut self, uid: &str) -> Option<(SharedStr, Option<i32>)> {
        self.awaiting_kill.remove(uid)
    }

    /// Drops every record of a Pod whose object left the cluster, so that none outlives it. Its
    /// pinned CPUs go without being given back: the caller gives them back to their Node first
    /// ([`Pods::unpin_cpus`]). The kill its host may still owe is recorded after this, and ends
    /// with [`Pods::killed`].
    pub(crate) fn forget(&mut self, uid: &str) {
        self.unscheduled.remove(uid);
        self.held.remove(uid);
        self.faults.remove(uid);
        self.waiting_for_room.remove(uid);
        self.pinned_cpus.remove(uid);
        self.gpu_devices.remove(uid);
        self.pulling.remove(uid);
        self.failed_pulls.remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uid(text: &str) -> SharedStr {
        SharedStr::from(text)
    }

    #[test]
    fn forget_drops_every_record_of_the_pod_and_no_other() {
        let mut pods = Pods::default();
        for name in ["gone", "kept"] {
            pods.queue_for_scheduling(uid(name));
            pods.hold(uid(name));
            pods.inject_faults(
                uid(name),
                vec![InjectedFault {
                    id: "fault-1".to_owned(),
                    kind: InjectedKind::PendingFor(Duration::from_secs(5)),
                }],
            );
            pods.wait_for_room(uid(name));
            pods.pin_cpus(uid(name), uid("node-0"), 2);
            pods.assign_gpus(uid(name), uid("node-0"), vec![0]);
            pods.begin_pull(uid(name));
            let failure = ImagePullFailure {
                image: "busybox".to_owned(),
                reason: "ErrImagePull".to_owned(),
                message: String::new(),
            };
            pods.pull_failed(uid(name), failure);
        }
        pods.forget("gone");
        assert!(!pods.is_held("gone"));
        assert!(pods.faults_of("gone").is_empty());
        assert_eq!(pods.gpus_of("gone"), None);
        assert!(!pods.is_pulling("gone"));
        assert_eq!(pods.failed_pull("gone"), None);
        assert_eq!(pods.unpin_cpus("gone"), None);
        assert_eq!(pods.next_to_schedule(), Some(uid("kept")), "only the kept Pod is still queued");
        assert_eq!(pods.next_to_schedule(), None);
        pods.note_room_freed();
        assert_eq!(pods.take_waiting_if_room_freed(), Some(BTreeSet::from([uid("kept")])));
        assert!(pods.is_held("kept") && pods.is_pulling("kept") && pods.gpus_of("kept").is_some());
        assert_eq!(pods.unpin_cpus("kept"), Some((uid("node-0"), 2)));
    }

    #[test]
    fn waiting_pods_are_retried_only_once_room_was_freed() {
        let mut pods = Pods::default();
        pods.wait_for_room(uid("b"));
        pods.wait_for_room(uid("a"));
        assert_eq!(pods.take_waiting_if_room_freed(), None, "nothing was freed");
        pods.note_room_freed();
        let waiting: Vec<SharedStr> = pods.take_waiting_if_room_freed().into_iter().flatten().collect();
        assert_eq!(waiting, [uid("a"), uid("b")], "in uid order, whatever the order they came in");
        assert_eq!(pods.take_waiting_if_room_freed(), None, "one retry per freeing");
    }
}
