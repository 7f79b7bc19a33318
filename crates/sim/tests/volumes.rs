//! Registered volumes in the world: a claim of the values checked after the create (VALIDATING,
//! then READY or ERROR), sandboxes that mount a volume pinned to its runner and counted as
//! attached, deletes refused while they run, organizations kept apart.

mod common;

use common::*;
use cwsandbox_api::sandbox_v1::{Container, SandboxMode, SandboxSpec, SandboxVolume, VolumeMount, sandbox_volume};
use cwsandbox_sim::config::{ClaimValues, RunnerValues, Scenario, Values};
use cwsandbox_sim::error::{Reason, SimError};
use cwsandbox_sim::sandbox::{Owner, SandboxFilter};
use cwsandbox_sim::volumes::{ClaimSource, VolumeState, VolumeTransition, VolumeUpdate};
use cwsandbox_sim::world::{Effect, PodLaunch};

fn alice() -> Owner {
    Owner { org: "default-org".to_owned(), user: "alice".to_owned() }
}

fn claim(namespace: &str, name: &str) -> ClaimValues {
    ClaimValues {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        capacity: "50Gi".to_owned(),
        access_modes: vec!["ReadWriteMany".to_owned()],
        cluster_id: None,
        org: None,
    }
}

fn source(runner: &str, namespace: &str, name: &str) -> ClaimSource {
    ClaimSource {
        runner_id: runner.to_owned(),
        namespace: namespace.to_owned(),
        claim_name: name.to_owned(),
        sub_path: String::new(),
    }
}

/// The `ready` scenario with a claim `datasets/imagenet` and a second runner.
fn world() -> Harness {
    let mut values = Values::scenario(Scenario::Ready);
    values.persistent_volume_claims = vec![claim("datasets", "imagenet")];
    let mut second: RunnerValues = values.runners[0].clone();
    second.runner_id = "second-runner".to_owned();
    values.runners.push(second);
    harness_with(values)
}

/// A CKS sandbox mounting registered volume `id` at `/data`.
fn mounting(id: &str, runner_ids: &[&str]) -> SandboxSpec {
    SandboxSpec {
        containers: vec![Container {
            volume_mounts: vec![VolumeMount {
                volume: "data".to_owned(),
                mount_path: "/data".to_owned(),
                ..VolumeMount::default()
            }],
            ..client_container()
        }],
        volumes: vec![SandboxVolume {
            name: "data".to_owned(),
            source: Some(sandbox_volume::Source::VolumeId(id.to_owned())),
        }],
        runner_ids: runner_ids.iter().map(|runner| (*runner).to_owned()).collect(),
        mode: SandboxMode::Cks as i32,
        ..SandboxSpec::default()
    }
}

fn fields(error: &SimError) -> Vec<String> {
    error.violations().iter().map(|violation| violation.field.clone()).collect()
}

#[test]
fn a_volume_is_validated_after_its_create_and_reports_its_claim() {
    let mut h = world();
    let created = h
        .world
        .create_volume("default-org", "imagenet", source("cks-runner", "datasets", "imagenet"), false, "train", "r-1")
        .unwrap();
    assert_eq!((created.state, created.capacity.as_str()), (VolumeState::Validating, ""));
    let ready = h.world.get_volume("default-org", "imagenet").unwrap();
    assert_eq!(ready.state, VolumeState::Ready, "{}", ready.state_reason);
    assert_eq!((ready.capacity.as_str(), ready.access_modes.as_slice()), ("50Gi", &["ReadWriteMany".to_owned()][..]));
    assert!(ready.last_validated.is_some());
    // The same request again answers the volume; another request for the id is a conflict.
    let replay = h
        .world
        .create_volume("default-org", "imagenet", source("cks-runner", "datasets", "imagenet"), false, "train", "r-1")
        .unwrap();
    assert_eq!(replay.state, VolumeState::Ready);
    let again = h.world.create_volume(
        "default-org",
        "imagenet",
        source("cks-runner", "datasets", "imagenet"),
        false,
        "",
        "r-2",
    );
    assert_eq!(again.unwrap_err().reason(), Some(Reason::AlreadyExists));

    // A claim the cluster lacks, or a runner the organization lacks: ERROR, saying which.
    h.world.create_volume("default-org", "missing", source("cks-runner", "datasets", "coco"), false, "", "").unwrap();
    h.world.create_volume("default-org", "far", source("no-runner", "datasets", "imagenet"), false, "", "").unwrap();
    let missing = h.world.get_volume("default-org", "missing").unwrap();
    assert_eq!(missing.state, VolumeState::Error);
    assert!(missing.state_reason.contains("\"coco\" not found in namespace \"datasets\""), "{}", missing.state_reason);
    let far = h.world.get_volume("default-org", "far").unwrap();
    assert!(far.state_reason.contains("runner \"no-runner\" not found"), "{}", far.state_reason);

    // Bad names are refused by field; another organization sees nothing.
    let bad = h.world.create_volume("default-org", "Bad_Id", source("", "Data", "x"), false, "", "").unwrap_err();
    assert_eq!(fields(&bad), ["volume.volume_id", "volume.spec.pvc.namespace", "volume.spec.pvc.runner_id"]);
    assert_eq!(h.world.get_volume("other-org", "imagenet").unwrap_err().reason(), Some(Reason::VolumeNotFound));
    let (listed, _) = h.world.list_volumes("default-org", &[VolumeState::Ready], &[], 0, "").unwrap();
    assert_eq!(listed.iter().map(|volume| volume.id.as_str()).collect::<Vec<_>>(), ["imagenet"]);
    let (errored, _) = h.world.list_volumes("default-org", &[VolumeState::Error], &[], 0, "").unwrap();
    assert_eq!(errored.iter().map(|volume| volume.id.as_str()).collect::<Vec<_>>(), ["far", "missing"]);

    // Fixed in the values, a recheck finds the claim.
    let mut values = Values::scenario(Scenario::Ready);
    values.persistent_volume_claims = vec![claim("datasets", "imagenet"), claim("datasets", "coco")];
    values.runners = h.world.values().runners.clone();
    h.world.apply_values(values).unwrap();
    let rechecked = h.world.revalidate_volume("default-org", "missing").unwrap();
    assert_eq!(rechecked.state, VolumeState::Validating);
    assert_eq!(h.world.get_volume("default-org", "missing").unwrap().state, VolumeState::Ready);

    let updated = h
        .world
        .update_volume(
            "default-org",
            "imagenet",
            VolumeUpdate { description: Some("v2".to_owned()), read_only: Some(true), source: None },
        )
        .unwrap();
    assert_eq!((updated.description.as_str(), updated.read_only), ("v2", true));
    let moved = VolumeUpdate { source: Some(source("cks-runner", "datasets", "coco")), ..VolumeUpdate::default() };
    let error = h.world.update_volume("default-org", "imagenet", moved).unwrap_err();
    assert_eq!(fields(&error), ["volume.spec.pvc"]);
    for transition in [
        VolumeTransition::Create,
        VolumeTransition::Replay,
        VolumeTransition::Validate,
        VolumeTransition::Fail,
        VolumeTransition::Recheck,
    ] {
        assert!(h.world.volume_transitions.get(transition) > 0, "{transition:?}");
    }
}

#[test]
fn a_sandbox_mounting_a_volume_runs_on_its_runner_and_holds_it_until_it_ends() {
    let mut h = world();
    h.world
        .create_volume("default-org", "imagenet", source("cks-runner", "datasets", "imagenet"), true, "", "")
        .unwrap();
    h.world
        .create_volume("default-org", "elsewhere", source("second-runner", "datasets", "imagenet"), false, "", "")
        .unwrap();

    // No runner named: the volume's runner is taken.
    let sandbox = h.world.create_sandbox(&alice(), mounting("imagenet", &[]), "", "").unwrap();
    assert_eq!(sandbox.runner_id, "cks-runner");
    assert_eq!(sandbox.attached_volume_ids, ["imagenet"]);
    h.advance(1);
    let effects = h.world.take_effects();
    let mount = effects
        .iter()
        .find_map(|effect| match effect {
            Effect::StartPod(PodLaunch { sandbox_id: Some(id), containers, .. }) if *id == sandbox.id => {
                Some(containers[0].volume_mounts[0].clone())
            }
            _ => None,
        })
        .expect("the sandbox starts");
    let claim = mount.claim.expect("the claim is mounted");
    assert_eq!((claim.namespace.as_str(), claim.name.as_str()), ("datasets", "imagenet"));
    assert!(mount.read_only, "a read-only volume makes every mount read-only");
    let pinned = h.world.create_sandbox(&alice(), mounting("elsewhere", &[]), "", "").unwrap();
    assert_eq!(pinned.runner_id, "second-runner");

    // Attached: counted, listed, and not deleted without force.
    assert_eq!(h.world.get_volume("default-org", "imagenet").unwrap().attached_sandbox_count, 1);
    let filter = SandboxFilter { volume_ids: vec!["imagenet".to_owned()], ..SandboxFilter::default() };
    let (listed, _) = h.world.list_sandboxes("default-org", &filter, 0, "").unwrap();
    assert_eq!(listed.iter().map(|view| view.id.as_str()).collect::<Vec<_>>(), [sandbox.id.as_str()]);
    let in_use = h.world.delete_volume("default-org", "imagenet", false).unwrap_err();
    assert_eq!(in_use.reason(), Some(Reason::VolumeInUse));
    h.world.delete_sandbox("default-org", &sandbox.id, 0).unwrap();
    h.advance(60);
    assert_eq!(h.world.get_volume("default-org", "imagenet").unwrap().attached_sandbox_count, 0);
    let deleted = h.world.delete_volume("default-org", "imagenet", false).unwrap();
    assert_eq!(deleted.state, VolumeState::Deleting);
    let gone = h.world.create_sandbox(&alice(), mounting("imagenet", &[]), "", "").unwrap_err();
    assert_eq!(gone.reason(), Some(Reason::VolumeNotFound));
    assert!(gone.to_string().contains("sandbox.spec.volumes[0].volumeId"), "{gone}");
    h.world.delete_volume("default-org", "elsewhere", true).expect("force deletes an attached volume");
    assert!(h.world.volume_transitions.get(VolumeTransition::Delete) >= 2);
}

#[test]
fn what_a_volume_cannot_be_mounted_with_is_refused_by_name() {
    let mut h = world();
    h.world
        .create_volume("default-org", "imagenet", source("cks-runner", "datasets", "imagenet"), false, "", "")
        .unwrap();
    h.world
        .create_volume("default-org", "elsewhere", source("second-runner", "datasets", "imagenet"), false, "", "")
        .unwrap();
    h.world.create_volume("default-org", "broken", source("cks-runner", "datasets", "none"), false, "", "").unwrap();

    let conflict = h.world.create_sandbox(&alice(), mounting("imagenet", &["second-runner"]), "", "").unwrap_err();
    assert_eq!(conflict.reason(), Some(Reason::VolumePlacementConflict));
    let mut two = mounting("imagenet", &[]);
    two.volumes.push(SandboxVolume {
        name: "more".to_owned(),
        source: Some(sandbox_volume::Source::VolumeId("elsewhere".to_owned())),
    });
    let split = h.world.create_sandbox(&alice(), two, "", "").unwrap_err();
    assert_eq!(
        (split.reason(), fields(&split)),
        (Some(Reason::VolumePlacementConflict), vec!["sandbox.spec.volumes[1].volumeId".to_owned()])
    );
    let broken = h.world.create_sandbox(&alice(), mounting("broken", &[]), "", "").unwrap_err();
    assert_eq!(broken.reason(), Some(Reason::VolumeNotReady));
    assert!(broken.to_string().contains("not found"), "the claim's problem is said: {broken}");
    let mut serverless = mounting("imagenet", &[]);
    serverless.mode = SandboxMode::Serverless as i32;
    let ineligible = h.world.create_sandbox(&alice(), serverless, "", "").unwrap_err();
    assert_eq!(ineligible.reason(), Some(Reason::VolumeRunnerIneligible));
    let mut sub_path = mounting("imagenet", &[]);
    sub_path.containers[0].volume_mounts[0].sub_path = "train".to_owned();
    let refused = h.world.create_sandbox(&alice(), sub_path, "", "").unwrap_err();
    assert_eq!(
        (refused.reason(), fields(&refused)),
        (Some(Reason::NotImplemented), vec!["sandbox.spec.containers[0].volumeMounts[0].subPath".to_owned()])
    );

    let mut values = Values::scenario(Scenario::Ready);
    values.persistent_volume_claims = vec![claim("datasets", "x"), claim("datasets", "x"), claim("Bad", "y")];
    let error = h.world.apply_values(values).unwrap_err();
    assert_eq!(fields(&error), ["persistentVolumeClaims[1].name", "persistentVolumeClaims[2].namespace"]);
}

/// A claim is one organization's, in one cluster: the volume records its runner's cluster, and
/// sandboxes' mounts name the organization and cluster with the claim, so two organizations (or
/// two clusters) with a claim of one namespace and name never name the same data. A claim the
/// values give to one cluster or one organization is not found anywhere else.
#[test]
fn a_claim_is_one_organizations_in_one_cluster() {
    let mut values = Values::scenario(Scenario::Ready);
    let runner = |org: &str, id: &str, cluster: &str| RunnerValues {
        org: org.to_owned(),
        runner_id: id.to_owned(),
        cluster_id: cluster.to_owned(),
        ..values.runners[0].clone()
    };
    let runners = vec![
        runner("org-a", "runner-a", "cluster-1"),
        runner("org-a", "runner-a2", "cluster-2"),
        runner("org-b", "runner-b", "cluster-2"),
        runner("org-b", "runner-b1", "cluster-1"),
    ];
    values.runners.extend(runners);
    let owned = ClaimValues {
        cluster_id: Some("cluster-1".to_owned()),
        org: Some("org-a".to_owned()),
        ..claim("datasets", "owned")
    };
    let placed = ClaimValues { cluster_id: Some("cluster-2".to_owned()), ..claim("datasets", "placed") };
    values.persistent_volume_claims = vec![claim("datasets", "p6claim"), owned, placed];
    let mut h = harness_with(values);
    let mut check = |org: &str, id: &str, runner: &str, name: &str| {
        h.world.create_volume(org, id, source(runner, "datasets", name), false, "", "").unwrap();
        h.world.get_volume(org, id).unwrap()
    };
    // Everyone's claim: each organization's own, in each cluster.
    let a = check("org-a", "v", "runner-a", "p6claim");
    let b_far = check("org-b", "far", "runner-b", "p6claim");
    let b_near = check("org-b", "near", "runner-b1", "p6claim");
    for (volume, cluster) in [(&a, "cluster-1"), (&b_far, "cluster-2"), (&b_near, "cluster-1")] {
        assert_eq!(
            (volume.state, volume.cluster_id.as_str()),
            (VolumeState::Ready, cluster),
            "{}",
            volume.state_reason
        );
    }
    // Org A's claim in cluster 1: not org B's, even there, nor org A's in another cluster.
    assert_eq!(check("org-a", "owned", "runner-a", "owned").state, VolumeState::Ready);
    for (org, id, runner) in [("org-b", "taken", "runner-b1"), ("org-a", "elsewhere", "runner-a2")] {
        let refused = check(org, id, runner, "owned");
        assert_eq!((refused.state, refused.cluster_id.as_str()), (VolumeState::Error, ""));
        assert!(
            refused.state_reason.contains("\"owned\" not found in namespace \"datasets\""),
            "{}",
            refused.state_reason
        );
        assert!(refused.state_reason.contains(&format!("runner {runner:?}'s cluster")), "{}", refused.state_reason);
    }
    // A claim of cluster 2 only: every organization's there, nobody's in cluster 1.
    assert_eq!(check("org-b", "placed", "runner-b", "placed").state, VolumeState::Ready);
    assert_eq!(check("org-a", "placed", "runner-a", "placed").state, VolumeState::Error);
    assert_eq!(check("org-a", "placed2", "runner-a2", "placed").state, VolumeState::Ready);

    // The mount names the organization and the cluster with the claim.
    let owner = Owner { org: "org-a".to_owned(), user: "alice".to_owned() };
    let sandbox = h.world.create_sandbox(&owner, mounting("v", &[]), "", "").unwrap();
    h.advance(1);
    let claim = h
        .world
        .take_effects()
        .iter()
        .find_map(|effect| match effect {
            Effect::StartPod(PodLaunch { sandbox_id: Some(id), containers, .. }) if *id == sandbox.id => {
                containers[0].volume_mounts[0].claim.clone()
            }
            _ => None,
        })
        .expect("the sandbox starts with its claim");
    assert_eq!(
        [claim.org.as_str(), claim.cluster_id.as_str(), claim.namespace.as_str(), claim.name.as_str()],
        ["org-a", "cluster-1", "datasets", "p6claim"]
    );
}

#[test]
fn claims_of_the_values_are_one_per_namespace_and_name_where_their_scopes_meet() {
    let mut h = world();
    let scoped = |name: &str, cluster: Option<&str>, org: Option<&str>| ClaimValues {
        cluster_id: cluster.map(str::to_owned),
        org: org.map(str::to_owned),
        ..claim("datasets", name)
    };
    let mut values = Values::scenario(Scenario::Ready);
    values.persistent_volume_claims = vec![
        scoped("x", Some("c1"), None),
        scoped("x", Some("c2"), None),
        scoped("x", Some("c1"), Some("o")),
        scoped("y", None, Some("o")),
        scoped("y", None, Some("p")),
        scoped("y", Some("c1"), None),
        scoped("z", Some(""), Some("")),
    ];
    let error = h.world.apply_values(values).unwrap_err();
    assert_eq!(
        fields(&error),
        [
            "persistentVolumeClaims[2].name",
            "persistentVolumeClaims[5].name",
            "persistentVolumeClaims[6].clusterId",
            "persistentVolumeClaims[6].org"
        ]
    );
}

/// A mounted file under a registered volume's mount path is refused by name (other sandboxes
/// write to the claim); under a scratch volume's it is accepted (placed on the volume); at a
/// volume's mount path itself it is refused.
#[test]
fn a_mounted_file_under_a_registered_volumes_mount_path_is_refused_by_name() {
    use cwsandbox_api::sandbox_v1::{FileMount, ScratchVolume};
    let mut h = world();
    h.world
        .create_volume("default-org", "imagenet", source("cks-runner", "datasets", "imagenet"), false, "", "")
        .unwrap();
    let file = |path: &str| FileMount { path: path.to_owned(), content: b"x".to_vec() };
    let mut spec = mounting("imagenet", &[]);
    spec.containers[0].files = vec![file("/etc/app.conf"), file("/data/conf/app.yaml")];
    let refused = h.world.create_sandbox(&alice(), spec.clone(), "", "").unwrap_err();
    assert_eq!(
        (refused.reason(), fields(&refused)),
        (Some(Reason::InvalidRequest), vec!["sandbox.spec.containers[0].files[1].path".to_owned()])
    );
    assert!(refused.to_string().contains("registered volume"), "{refused}");
    // A path that only starts with the mount path's text is not under it.
    spec.containers[0].files = vec![file("/database/app.yaml")];
    h.world.create_sandbox(&alice(), spec, "", "").expect("not under /data");

    let mut scratch = mounting("imagenet", &[]);
    scratch.volumes[0].source = Some(sandbox_volume::Source::Scratch(ScratchVolume::default()));
    scratch.containers[0].files = vec![file("/data/conf/app.yaml")];
    h.world.create_sandbox(&alice(), scratch.clone(), "", "").expect("placed on a scratch volume");
    scratch.containers[0].files = vec![file("/data")];
    let at_mount = h.world.create_sandbox(&alice(), scratch, "", "").unwrap_err();
    assert_eq!(fields(&at_mount), ["sandbox.spec.containers[0].files[0].path"]);
    assert!(at_mount.to_string().contains("mounts volume \"data\" at this path"), "{at_mount}");
}
