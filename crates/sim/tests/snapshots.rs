//! File-system snapshots in the world: what may be captured (a running sandbox's scratch volume,
//! named or its only one), idempotency by request id, the per-organization limit, the records'
//! life (CREATING → READY or FAILED, then deleted), organizations kept apart, and restoring into
//! a new sandbox's volume.

mod common;

use common::*;
use cwsandbox_api::sandbox_v1::{
    Container, SandboxMode, SandboxSpec, SandboxVolume, ScratchVolume, VolumeMount, sandbox_volume,
};
use cwsandbox_sim::config::{Scenario, Values};
use cwsandbox_sim::error::{Reason, SimError};
use cwsandbox_sim::sandbox::Owner;
use cwsandbox_sim::snapshots::{SnapshotState, SnapshotTransition, SnapshotTrigger};
use cwsandbox_sim::world::{Effect, PodLaunch};

fn owner(org: &str) -> Owner {
    Owner { org: org.to_owned(), user: "alice".to_owned() }
}

fn scratch(name: &str, restore_from: &str) -> SandboxVolume {
    SandboxVolume {
        name: name.to_owned(),
        source: Some(sandbox_volume::Source::Scratch(ScratchVolume {
            restore_from_snapshot_id: restore_from.to_owned(),
            ..ScratchVolume::default()
        })),
    }
}

fn mount(volume: &str, path: &str) -> VolumeMount {
    VolumeMount { volume: volume.to_owned(), mount_path: path.to_owned(), ..VolumeMount::default() }
}

/// A serverless sandbox (it runs at once, with no runner) with these volumes, each mounted at
/// `/<name>`.
fn spec_with(volumes: Vec<SandboxVolume>) -> SandboxSpec {
    let mounts = volumes.iter().map(|volume| mount(&volume.name, &format!("/{}", volume.name))).collect();
    SandboxSpec {
        containers: vec![Container { volume_mounts: mounts, ..client_container() }],
        volumes,
        mode: SandboxMode::Serverless as i32,
        ..SandboxSpec::default()
    }
}

fn world(modify: impl FnOnce(&mut Values)) -> Harness {
    let mut values = Values::scenario(Scenario::Ready);
    modify(&mut values);
    harness_with(values)
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|name| (*name).to_owned()).collect()
}

fn field_of(error: &SimError) -> Vec<String> {
    error.violations().iter().map(|violation| violation.field.clone()).collect()
}

#[test]
fn a_running_sandboxs_only_volume_is_captured_and_restored_into_a_new_one() {
    let mut h = world(|_| {});
    let source = h.world.create_sandbox(&owner("org-a"), spec_with(vec![scratch("work", "")]), "", "").unwrap();
    let captures =
        h.world.begin_snapshots("org-a", &source.id, &[], "", SnapshotTrigger::Manual).expect("the only volume");
    let [capture] = captures.as_slice() else { panic!("{captures:?}") };
    assert!(capture.copy);
    assert_eq!(capture.pod_uid, source.pod_uid);
    let snapshot = &capture.snapshot;
    assert_eq!(
        (snapshot.state, snapshot.source_volume_name.as_str(), snapshot.source_sandbox_id.as_str()),
        (SnapshotState::Creating, "work", source.id.as_str())
    );
    assert_eq!(snapshot.trigger, SnapshotTrigger::Manual);

    // Not READY yet: nothing can start from it, and it cannot be deleted.
    let early = h.world.create_sandbox(&owner("org-a"), spec_with(vec![scratch("work", &snapshot.id)]), "", "");
    let early = early.unwrap_err();
    assert_eq!(early.reason(), Some(Reason::FssNotReady));
    assert!(early.to_string().contains("sandbox.spec.volumes[0].scratch.restoreFromSnapshotId"), "{early}");
    assert_eq!(h.world.delete_snapshot("org-a", &snapshot.id).unwrap_err().reason(), Some(Reason::FssNotReady));

    let ready = h.world.finish_snapshot(&snapshot.id, Ok(4096)).unwrap();
    assert_eq!((ready.state, ready.size_bytes), (SnapshotState::Ready, 4096));
    assert!(ready.completed.is_some());
    assert_eq!(h.world.get_snapshot("org-a", &snapshot.id).unwrap(), ready);

    // A new sandbox's volume starts from it: every mount of the volume says so.
    h.world.take_effects();
    let restored =
        h.world.create_sandbox(&owner("org-a"), spec_with(vec![scratch("work", &snapshot.id)]), "", "").unwrap();
    let effects = h.world.take_effects();
    let started = effects.iter().find_map(|effect| match effect {
        Effect::StartPod(PodLaunch { sandbox_id: Some(id), containers, .. }) if *id == restored.id => {
            Some(containers.clone())
        }
        _ => None,
    });
    let containers = started.expect("the restored sandbox starts");
    assert_eq!(containers[0].volume_mounts[0].restore_from_snapshot.as_deref(), Some(snapshot.id.as_str()));

    // Another organization sees none of it.
    assert_eq!(h.world.get_snapshot("org-b", &snapshot.id).unwrap_err().reason(), Some(Reason::FssNotFound));
    let foreign = h.world.create_sandbox(&owner("org-b"), spec_with(vec![scratch("work", &snapshot.id)]), "", "");
    assert_eq!(foreign.unwrap_err().reason(), Some(Reason::FssNotFound));
    assert!(h.world.list_snapshots("org-b", "", 0, "").unwrap().0.is_empty());

    let deleted = h.world.delete_snapshot("org-a", &snapshot.id).unwrap();
    assert_eq!(deleted.state, SnapshotState::Deleting);
    assert_eq!(h.world.get_snapshot("org-a", &snapshot.id).unwrap_err().reason(), Some(Reason::FssNotFound));
    let gone = h.world.create_sandbox(&owner("org-a"), spec_with(vec![scratch("work", &snapshot.id)]), "", "");
    assert_eq!(gone.unwrap_err().reason(), Some(Reason::FssNotFound));
}

#[test]
fn the_volume_to_capture_must_be_a_scratch_volume_of_a_running_sandbox() {
    let mut h = world(|_| {});
    let two = spec_with(vec![scratch("alpha", ""), scratch("beta", "")]);
    let sandbox = h.world.create_sandbox(&owner("org-a"), two, "", "").unwrap();
    let error = h.world.begin_snapshots("org-a", &sandbox.id, &[], "", SnapshotTrigger::Manual).unwrap_err();
    assert_eq!(field_of(&error), ["scratch_volume_name"]);
    assert!(error.to_string().contains("alpha, beta"), "{error}");
    let error =
        h.world.begin_snapshots("org-a", &sandbox.id, &names(&["gamma"]), "", SnapshotTrigger::Manual).unwrap_err();
    assert_eq!(field_of(&error), ["scratch_volume_name"]);
    // On delete, every name is checked before anything is captured: all or none.
    let error = h
        .world
        .begin_snapshots("org-a", &sandbox.id, &names(&["alpha", "gamma", "alpha"]), "", SnapshotTrigger::OnDelete)
        .unwrap_err();
    assert_eq!(field_of(&error), ["snapshot_volumes[1]", "snapshot_volumes[2]"]);
    assert!(h.world.list_snapshots("org-a", "", 0, "").unwrap().0.is_empty(), "nothing began");

    let none = h.world.create_sandbox(&owner("org-a"), spec_with(Vec::new()), "", "").unwrap();
    let error = h.world.begin_snapshots("org-a", &none.id, &[], "", SnapshotTrigger::Manual).unwrap_err();
    assert!(error.to_string().contains("none"), "{error}");
    let missing = h.world.begin_snapshots("org-a", "0000000000000000", &[], "", SnapshotTrigger::Manual);
    assert_eq!(missing.unwrap_err().reason(), Some(Reason::SandboxNotFound));
    let foreign = h.world.begin_snapshots("org-b", &sandbox.id, &names(&["alpha"]), "", SnapshotTrigger::Manual);
    assert_eq!(foreign.unwrap_err().reason(), Some(Reason::SandboxNotFound));

    h.world.sandbox_exited(&sandbox.id, 0);
    let ended = h.world.begin_snapshots("org-a", &sandbox.id, &names(&["alpha"]), "", SnapshotTrigger::Manual);
    assert_eq!(ended.unwrap_err().reason(), Some(Reason::SandboxNotRunning));

    // A volume no container mounts would restore into nothing anyone sees.
    let mut unmounted = spec_with(vec![scratch("alpha", "00000000-0000-0000-0000-000000000000")]);
    unmounted.containers[0].volume_mounts.clear();
    let error = h.world.create_sandbox(&owner("org-a"), unmounted, "", "").unwrap_err();
    assert_eq!(field_of(&error), ["sandbox.spec.volumes[0].scratch.restoreFromSnapshotId"]);
}

#[test]
fn a_request_id_replays_its_snapshots_and_a_failed_copy_says_why() {
    let mut h = world(|_| {});
    let sandbox = h.world.create_sandbox(&owner("org-a"), spec_with(vec![scratch("work", "")]), "", "").unwrap();
    let first = h.world.begin_snapshots("org-a", &sandbox.id, &[], "req-1", SnapshotTrigger::OnDelete).unwrap();
    let id = first[0].snapshot.id.clone();
    let failed = h.world.finish_snapshot(&id, Err("cp -a failed: no space left on device".to_owned())).unwrap();
    assert_eq!(
        (failed.state, failed.state_reason.as_str()),
        (SnapshotState::Failed, "cp -a failed: no space left on device")
    );
    assert_eq!(failed.request_id, "req-1");

    // The retry of the same request copies nothing again, even once the sandbox has ended.
    h.world.delete_sandbox("org-a", &sandbox.id, 0).unwrap();
    let again = h.world.begin_snapshots("org-a", &sandbox.id, &[], "req-1", SnapshotTrigger::OnDelete).unwrap();
    assert_eq!((again[0].snapshot.id.clone(), again[0].copy), (id.clone(), false));
    assert_eq!(again[0].snapshot.state, SnapshotState::Failed);
    // The same key for another sandbox is a conflict.
    let other = h.world.create_sandbox(&owner("org-a"), spec_with(vec![scratch("work", "")]), "", "").unwrap();
    let conflict = h.world.begin_snapshots("org-a", &other.id, &[], "req-1", SnapshotTrigger::OnDelete);
    assert_eq!(conflict.unwrap_err().reason(), Some(Reason::RequestIdConflict));
    // A FAILED snapshot cannot be restored from.
    let error = h.world.create_sandbox(&owner("org-a"), spec_with(vec![scratch("work", &id)]), "", "").unwrap_err();
    assert_eq!(error.reason(), Some(Reason::FssNotReady));

    for transition in [SnapshotTransition::Begin, SnapshotTransition::Replay, SnapshotTransition::Fail] {
        assert!(h.world.snapshot_transitions.get(transition) > 0, "{transition:?}");
    }
}

#[test]
fn listing_pages_filters_by_sandbox_and_the_values_set_the_limits() {
    let mut h = world(|values| values.file_system_snapshots.max_per_organization = 3);
    let a = h.world.create_sandbox(&owner("org-a"), spec_with(vec![scratch("work", "")]), "", "").unwrap();
    let b = h.world.create_sandbox(&owner("org-a"), spec_with(vec![scratch("work", "")]), "", "").unwrap();
    let mut taken = Vec::new();
    for (sandbox, step) in [(&a, 0), (&b, 1), (&a, 2)] {
        h.advance(1);
        let capture = h.world.begin_snapshots("org-a", &sandbox.id, &[], "", SnapshotTrigger::Manual).unwrap();
        h.world.finish_snapshot(&capture[0].snapshot.id, Ok(step)).unwrap();
        taken.push(capture[0].snapshot.id.clone());
    }
    let quota = h.world.begin_snapshots("org-a", &a.id, &[], "", SnapshotTrigger::Manual).unwrap_err();
    assert_eq!(quota.reason(), Some(Reason::FssQuotaExceeded));

    let (page, token) = h.world.list_snapshots("org-a", "", 2, "").unwrap();
    assert_eq!(page.iter().map(|snapshot| snapshot.id.clone()).collect::<Vec<_>>(), taken[..2]);
    let (rest, last) = h.world.list_snapshots("org-a", "", 2, &token).unwrap();
    assert_eq!((rest.len(), rest[0].id.clone(), last.as_str()), (1, taken[2].clone(), ""));
    let (of_a, _) = h.world.list_snapshots("org-a", &a.id, 0, "").unwrap();
    assert_eq!(
        of_a.iter().map(|snapshot| snapshot.id.clone()).collect::<Vec<_>>(),
        [taken[0].clone(), taken[2].clone()]
    );
    let mismatched = h.world.list_snapshots("org-a", &a.id, 2, &token).unwrap_err();
    assert_eq!(field_of(&mismatched), ["page_token"]);

    h.world.delete_snapshot("org-a", &taken[0]).unwrap();
    h.world.begin_snapshots("org-a", &a.id, &[], "", SnapshotTrigger::Manual).expect("room again after a delete");
    assert!(h.world.snapshot_transitions.get(SnapshotTransition::Complete) >= 3);
    assert!(h.world.snapshot_transitions.get(SnapshotTransition::Delete) >= 1);

    let mut off = world(|values| values.file_system_snapshots.enabled = false);
    let sandbox = off.world.create_sandbox(&owner("org-a"), spec_with(vec![scratch("work", "")]), "", "").unwrap();
    let refused = off.world.begin_snapshots("org-a", &sandbox.id, &[], "", SnapshotTrigger::Manual).unwrap_err();
    assert_eq!(refused.reason(), Some(Reason::FssNotSupported));
}
