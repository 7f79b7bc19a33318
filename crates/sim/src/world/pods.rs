//! The Pod lifecycle as a machine: Pending → (bound) → Running → Succeeded/Failed, Terminating
//! once deleted, then removed. The kubelet, the schedulers and teardown change Pods; each change
//! is one of these transitions, checked against the Pod's phase first.

use crate::k8s::{Pod, PodPhase};
use crate::machine::{IllegalTransition, Phase, phases, transitions};
use crate::world::World;

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

impl World {
    /// Checks that `transition` may run on Pod `uid` now and counts it; the caller applies it.
    pub(crate) fn pod_step(
        &mut self,
        uid: &str,
        transition: PodTransition,
    ) -> Result<(), IllegalTransition<PodTransition>> {
        let Some(pod) = self.cluster.pod(uid) else {
            return Err(IllegalTransition { transition, state: "gone" });
        };
        let phase = PodLifecycle::of(pod);
        // A Pod finishing while Terminating is one that ran: Finish needs running containers.
        let finished_while_deleting =
            transition == PodTransition::Finish && phase == PodLifecycle::Terminating && pod.phase != PodPhase::Running;
        // Binding is once: a bound Pod stays Pending until the kubelet decides.
        let bound_again = transition == PodTransition::Bind && pod.node_name.is_some();
        transition.check_from(phase)?;
        if finished_while_deleting || bound_again {
            return Err(IllegalTransition { transition, state: phase.name() });
        }
        self.pod_transitions.add(transition);
        self.touch_sandbox_of_pod(uid);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Scenario, Values};
    use crate::ids::SeededIds;
    use crate::k8s::PodOwner;
    use crate::time::{ManualClock, SimTime};
    use crate::world::PodRequest;

    #[test]
    fn pod_transitions_refuse_phases_that_do_not_allow_them() {
        let clock = ManualClock::new(SimTime::from_secs(1_764_480_000));
        let mut world =
            World::new(Values::scenario(Scenario::Ready), Box::new(clock), Box::new(SeededIds::new(7))).unwrap();
        let request = PodRequest {
            namespace: "default".to_owned(),
            name: "plain".to_owned(),
            containers: vec![("main".to_owned(), "busybox".to_owned(), Default::default(), Default::default())],
            ..Default::default()
        };
        let uid = world.create_pod(request, PodOwner::Other).unwrap();
        assert_eq!(PodLifecycle::of(world.cluster.pod(&uid).unwrap()), PodLifecycle::Running);
        let refused = |transition, state| Err(IllegalTransition { transition, state });
        assert_eq!(world.pod_step(&uid, PodTransition::Start), refused(PodTransition::Start, "Running"));
        assert_eq!(world.pod_step(&uid, PodTransition::Bind), refused(PodTransition::Bind, "Running"));
        world.begin_pod_deletion(&uid, Some(30));
        assert_eq!(PodLifecycle::of(world.cluster.pod(&uid).unwrap()), PodLifecycle::Terminating);
        assert_eq!(
            world.pod_step(&uid, PodTransition::BeginDeletion),
            refused(PodTransition::BeginDeletion, "Terminating"),
            "deleting again shortens the grace, it is no new transition"
        );
        world.pod_exited(&uid, 0);
        assert!(world.cluster.pod(&uid).is_none(), "it honoured SIGTERM: removed");
        assert_eq!(world.pod_step(&uid, PodTransition::Remove), refused(PodTransition::Remove, "gone"));
    }
}
