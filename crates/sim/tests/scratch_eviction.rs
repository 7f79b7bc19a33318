//! Sized scratch volumes on disk, as a kubelet treats an `emptyDir` with a `sizeLimit`: every
//! monitoring period the host measures what a running Pod's sized volumes hold; a volume holding
//! more than its size gets the Pod evicted (Warning `Evicted` Event, the Pod Failed with the
//! kubelet's message, its processes killed, the sandbox FAILED); a memory-backed volume is a tmpfs
//! sized as the kubelet sizes it, refused by name where the host cannot mount one.

mod common;

use common::*;
use cwsandbox_api::sandbox_v1::{
    SandboxMode, SandboxSpec, SandboxVolume, ScratchVolume, StorageMedium, VolumeMount, sandbox_volume,
};
use cwsandbox_sim::config::{Scenario, Values};
use cwsandbox_sim::error::{Reason, SimError};
use cwsandbox_sim::k8s::{EventType, PodPhase};
use cwsandbox_sim::sandbox::{Owner, SandboxState};
use cwsandbox_sim::world::Effect;

fn alice() -> Owner {
    Owner { org: "default-org".to_owned(), user: "alice".to_owned() }
}

/// What `Sandbox.run(volumes=[ScratchVolumeOptions(name="scratch", mount_path="/data",
/// size=…)])` sends, plus an unsized volume beside it.
fn spec_with_scratch(size: &str, medium: StorageMedium) -> SandboxSpec {
    let mut container = client_container();
    container.volume_mounts = vec![
        VolumeMount { volume: "scratch".to_owned(), mount_path: "/data".to_owned(), ..Default::default() },
        VolumeMount { volume: "plain".to_owned(), mount_path: "/plain".to_owned(), ..Default::default() },
    ];
    let scratch = |size: &str, medium: StorageMedium| {
        Some(sandbox_volume::Source::Scratch(ScratchVolume {
            size: size.to_owned(),
            medium: medium as i32,
            ..Default::default()
        }))
    };
    SandboxSpec {
        containers: vec![container],
        runner_ids: vec!["cks-runner".to_owned()],
        mode: SandboxMode::Cks as i32,
        volumes: vec![
            SandboxVolume { name: "scratch".to_owned(), source: scratch(size, medium) },
            SandboxVolume { name: "plain".to_owned(), source: scratch("", StorageMedium::Unspecified) },
        ],
        ..SandboxSpec::default()
    }
}

fn measures(effects: &[Effect]) -> Vec<(String, Vec<String>)> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::MeasureVolumes { pod_uid, volumes } => Some((pod_uid.to_string(), volumes.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_volume_over_its_size_gets_the_pod_evicted_at_the_next_look() {
    let mut h = harness_with(Values::scenario(Scenario::Ready));
    h.world.set_host_confirms_starts(true);
    let created = h.world.create_sandbox(&alice(), spec_with_scratch("1Gi", StorageMedium::Disk), "", "").unwrap();
    h.advance(1);
    h.world.pod_host_started(&created.pod_uid);
    assert_eq!(h.world.get_sandbox("default-org", &created.id).unwrap().state, SandboxState::Running);
    h.world.take_effects();

    // The kubelet looks every monitoring period (10 s), at the sized volume only.
    h.advance(9);
    assert_eq!(measures(&h.world.take_effects()), [], "no look before the period is over");
    h.advance(1);
    let uid = created.pod_uid.to_string();
    assert_eq!(measures(&h.world.take_effects()), [(uid.clone(), vec!["scratch".to_owned()])]);

    // Up to its size (1Gi exactly) the volume is within its limit; the other volume has none.
    h.world.volumes_measured(&uid, &[("scratch".to_owned(), 1 << 30), ("plain".to_owned(), 5 << 30)]);
    assert_eq!(h.pod(&uid).phase, PodPhase::Running);
    assert!(h.world.take_effects().iter().all(|effect| !matches!(effect, Effect::KillPod { .. })));

    // The next look finds one byte more: evicted, as the kubelet evicts it.
    h.advance(10);
    assert_eq!(measures(&h.world.take_effects()).len(), 1, "the looks go on while the Pod runs");
    h.world.volumes_measured(&uid, &[("scratch".to_owned(), (1 << 30) + 1)]);
    let message = "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Gi\". ";
    let pod = h.pod(&uid);
    assert_eq!(pod.phase, PodPhase::Failed);
    assert_eq!((pod.reason.as_deref(), pod.message.as_deref()), (Some("Evicted"), Some(message)));
    let evicted: Vec<_> = h.events_for(&uid).into_iter().filter(|event| event.reason == "Evicted").collect();
    assert_eq!(evicted.len(), 1, "one Evicted Event");
    assert_eq!(
        (evicted[0].event_type, evicted[0].message.as_ref(), evicted[0].source),
        (EventType::Warning, message, "kubelet")
    );
    let effects = h.world.take_effects();
    assert!(
        effects.iter().any(|effect| matches!(effect, Effect::KillPod { pod_uid } if **pod_uid == *uid)),
        "{effects:?}"
    );
    h.world.pod_host_killed(&uid);
    let sandbox = h.world.get_sandbox("default-org", &created.id).unwrap();
    assert_eq!(sandbox.state, SandboxState::Failed);
    assert_eq!(sandbox.state_reason, "Evicted: Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Gi\".");

    // An ended Pod is looked at no more, and a late report changes nothing.
    h.advance(30);
    assert_eq!(measures(&h.world.take_effects()), []);
    h.world.volumes_measured(&uid, &[("scratch".to_owned(), 5 << 30)]);
    assert_eq!(h.events_for(&uid).iter().filter(|event| event.reason == "Evicted").count(), 1);
}

#[test]
fn the_monitoring_period_is_a_setting_and_unsized_volumes_are_never_measured() {
    let mut values = Values::scenario(Scenario::Ready);
    values.kubelet.eviction_monitoring_period_seconds = std::num::NonZeroU32::new(3).unwrap();
    let mut h = harness_with(values);
    let sized =
        h.world.create_sandbox(&alice(), spec_with_scratch("64Mi", StorageMedium::Unspecified), "", "").unwrap();
    let without_size =
        h.world.create_sandbox(&alice(), spec_with_scratch("", StorageMedium::Unspecified), "", "").unwrap();
    h.advance(1);
    h.world.take_effects();
    h.advance(3);
    assert_eq!(measures(&h.world.take_effects()), [(sized.pod_uid.to_string(), vec!["scratch".to_owned()])]);
    h.advance(60);
    let looked: Vec<String> = measures(&h.world.take_effects()).into_iter().map(|(uid, _)| uid).collect();
    assert_eq!(looked.len(), 20, "every 3 s: {looked:?}");
    assert!(!looked.contains(&without_size.pod_uid.to_string()));
}

/// The memory-backed volumes of sandbox `id`'s Pod as the host is asked to make them.
fn launched_memory_volumes(effects: &[Effect], id: &str) -> Vec<(String, u64)> {
    effects
        .iter()
        .find_map(|effect| match effect {
            Effect::StartPod(launch) if launch.sandbox_id.as_deref() == Some(id) => {
                Some(launch.memory_volumes.iter().map(|volume| (volume.volume.clone(), volume.size_bytes)).collect())
            }
            _ => None,
        })
        .expect("the Pod started")
}

#[test]
fn a_memory_backed_volume_is_a_tmpfs_sized_as_the_kubelet_sizes_it_and_never_measured() {
    use cwsandbox_api::sandbox_v1::{ResourceRequirements, Resources};
    let mut h = harness_with(Values::scenario(Scenario::Ready));
    let allocatable = |h: &Harness, uid: &str| {
        let node = h.pod(uid).node_name.clone().expect("bound");
        u64::try_from(h.world.cluster.nodes[node.as_ref()].allocatable.memory_bytes).unwrap()
    };

    // Its own size where the Pod has no memory limit below it.
    let sized = h.world.create_sandbox(&alice(), spec_with_scratch("1Gi", StorageMedium::Memory), "", "").unwrap();
    h.advance(10);
    assert_eq!(launched_memory_volumes(&h.world.take_effects(), &sized.id), [("scratch".to_owned(), 1 << 30)]);

    // Without a size: the Pod's memory limit (the runner's default, 1Gi, where none is asked).
    let without_size = h.world.create_sandbox(&alice(), spec_with_scratch("", StorageMedium::Memory), "", "").unwrap();
    h.advance(10);
    assert_eq!(launched_memory_volumes(&h.world.take_effects(), &without_size.id), [("scratch".to_owned(), 1 << 30)]);

    // Without a size, and a memory limit above what the Node has: the Node's allocatable memory.
    let mut spec = spec_with_scratch("", StorageMedium::Memory);
    spec.containers[0].resource_requirements = Some(ResourceRequirements {
        requests: Some(Resources { cpu: "100m".to_owned(), memory: "128Mi".to_owned(), gpu: None }),
        limits: Some(Resources { cpu: "1".to_owned(), memory: "64Ti".to_owned(), gpu: None }),
    });
    let unlimited = h.world.create_sandbox(&alice(), spec, "", "").unwrap();
    h.advance(10);
    let node_memory = allocatable(&h, &unlimited.pod_uid);
    assert_eq!(launched_memory_volumes(&h.world.take_effects(), &unlimited.id), [("scratch".to_owned(), node_memory)]);

    // The Pod's memory limit where it is lower than the volume's size.
    let mut spec = spec_with_scratch("1Gi", StorageMedium::Memory);
    spec.containers[0].resource_requirements = Some(ResourceRequirements {
        requests: Some(Resources { cpu: "100m".to_owned(), memory: "128Mi".to_owned(), gpu: None }),
        limits: Some(Resources { cpu: "1".to_owned(), memory: "256Mi".to_owned(), gpu: None }),
    });
    let limited = h.world.create_sandbox(&alice(), spec, "", "").unwrap();
    h.advance(10);
    assert_eq!(launched_memory_volumes(&h.world.take_effects(), &limited.id), [("scratch".to_owned(), 256 << 20)]);

    // A tmpfs holds no more than its size: the kubelet has nothing to measure.
    h.advance(60);
    let looked: Vec<String> = measures(&h.world.take_effects()).into_iter().map(|(uid, _)| uid).collect();
    assert!(!looked.contains(&sized.pod_uid.to_string()), "{looked:?}");
}

#[test]
fn a_memory_backed_volume_is_refused_by_name_where_the_host_cannot_mount_one_and_an_unknown_medium_is_invalid() {
    let mut h = harness_with(Values::scenario(Scenario::Ready));
    h.world.set_memory_volumes_refused(Some("not root".to_owned()));
    let error = h.world.create_sandbox(&alice(), spec_with_scratch("1Gi", StorageMedium::Memory), "", "").unwrap_err();
    assert_eq!(error.reason(), Some(Reason::NotImplemented));
    let fields: Vec<&str> = error.violations().iter().map(|violation| violation.field.as_str()).collect();
    assert_eq!(fields, ["sandbox.spec.volumes[0].scratch.medium"]);
    assert!(error.violations()[0].description.contains("not root"), "{error:?}");
    // On disk it is still made.
    h.world.create_sandbox(&alice(), spec_with_scratch("1Gi", StorageMedium::Disk), "", "").unwrap();

    let mut spec = spec_with_scratch("1Gi", StorageMedium::Disk);
    if let Some(sandbox_volume::Source::Scratch(scratch)) = &mut spec.volumes[0].source {
        scratch.medium = 9;
    }
    let error = h.world.create_sandbox(&alice(), spec, "", "").unwrap_err();
    assert!(matches!(error, SimError::InvalidArgument { .. }), "{error:?}");
    assert_eq!(error.violations()[0].field, "sandbox.spec.volumes[0].scratch.medium");
    assert_eq!(h.world.every_sandbox().count(), 1, "only the sandbox on disk was made");
}
