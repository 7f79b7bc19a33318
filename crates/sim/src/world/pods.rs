//! The Pod machine's step on the world: a Pod transition checked against the Pod's phase in the
//! cluster, then counted (the machine itself, and the Pod's bookkeeping, are in `crate::pods`).

use crate::k8s::PodPhase;
use crate::machine::{IllegalTransition, Phase};
use crate::pods::{PodLifecycle, PodTransition};
use crate::world::World;

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
