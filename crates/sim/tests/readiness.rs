//! The SUNK readiness checklist (`cwsandbox_sim::readiness`): red on the guide's known items in
//! the `fresh` scenario, green in `ready`, and each item turns with the one setting it names.

mod common;

use common::*;
use cwsandbox_sim::config::{Scenario, ScopeType, Values};
use cwsandbox_sim::query::Scope;
use cwsandbox_sim::readiness::{CheckKind, sunk_readiness};

fn verdicts(values: Values) -> Vec<(CheckKind, bool)> {
    let h = harness_with(values);
    sunk_readiness(&h.world, &Scope::Cluster).into_iter().map(|check| (check.kind, check.ok)).collect()
}

#[test]
fn fresh_is_red_on_the_guides_items_and_ready_is_green() {
    let fresh = verdicts(Values::scenario(Scenario::Fresh));
    assert_eq!(
        fresh,
        vec![
            (CheckKind::SchedulerRunning, true),
            (CheckKind::PolicyRoutesToScheduler, false),
            (CheckKind::GraceBelowKillWait, false),
            (CheckKind::ScopeCoversSandboxes, false),
            (CheckKind::RoomBesideSlurmd, false),
        ]
    );
    let ready = verdicts(Values::scenario(Scenario::Ready));
    assert!(ready.iter().all(|(_, ok)| *ok), "{ready:?}");
}

#[test]
fn each_item_turns_with_its_own_setting() {
    let mut values = Values::scenario(Scenario::Fresh);
    values.slurm_config.kill_wait = 36;
    let h = harness_with(values.clone());
    let checks = sunk_readiness(&h.world, &Scope::Cluster);
    let grace = checks.iter().find(|check| check.kind == CheckKind::GraceBelowKillWait).expect("grace item");
    assert!(grace.ok, "30 s < 36 s − 5 s: {grace:?}");

    values.slurm_config.kill_wait = 35;
    let h = harness_with(values.clone());
    let checks = sunk_readiness(&h.world, &Scope::Cluster);
    let grace = checks.iter().find(|check| check.kind == CheckKind::GraceBelowKillWait).expect("grace item");
    assert!(!grace.ok, "30 s is not below 35 s − 5 s");
    assert!(grace.fix.contains("KillWait above 35 s"), "{}", grace.fix);

    values.scheduler.scope.scope_type = ScopeType::Cluster;
    values.node_sets[0].slurmd.requests.cpu = "1".to_owned();
    values.node_sets[0].slurmd.requests.memory = "4Gi".to_owned();
    let h = harness_with(values);
    let checks = sunk_readiness(&h.world, &Scope::Cluster);
    for kind in [CheckKind::ScopeCoversSandboxes, CheckKind::RoomBesideSlurmd] {
        assert!(checks.iter().any(|check| check.kind == kind && check.ok), "{kind:?}: {checks:?}");
    }
    let room = checks.iter().find(|check| check.kind == CheckKind::RoomBesideSlurmd).expect("room item");
    assert!(room.detail.contains("15000m CPU"), "{}", room.detail);
}

#[test]
fn an_organization_sees_only_its_runners() {
    let h = harness_with(Values::scenario(Scenario::Ready));
    let mine = sunk_readiness(&h.world, &Scope::Organization("default-org".to_owned()));
    assert!(mine.iter().any(|check| check.kind == CheckKind::PolicyRoutesToScheduler && check.ok));
    let other = sunk_readiness(&h.world, &Scope::Organization("someone-else".to_owned()));
    let policy: Vec<_> = other.iter().filter(|check| check.kind == CheckKind::PolicyRoutesToScheduler).collect();
    assert_eq!(policy.len(), 1);
    assert!(!policy[0].ok && policy[0].detail.contains("no runner"), "{:?}", policy[0]);
}
