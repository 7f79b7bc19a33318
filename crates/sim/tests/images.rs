//! Image pulls where the host really runs images: an admitted Pod waits on its Node
//! (`ContainerCreating`, a `Pulling` Event) until the host reports its images, then starts; a
//! failed pull shows `ErrImagePull` and then `ImagePullBackOff` with the registry's message, in
//! the Pod and in the sandbox's reason; a report for a Pod deleted meanwhile changes nothing.
//! Without such a host nothing waits (the other suites).

mod common;

use std::time::Duration;

use common::*;
use cwsandbox_api::sandbox_v1::{Container, SandboxMode, SandboxSpec};
use cwsandbox_sim::config::{Scenario, Values};
use cwsandbox_sim::k8s::{ContainerState, PodPhase};
use cwsandbox_sim::sandbox::{Owner, SandboxState};
use cwsandbox_sim::world::{Effect, ImagePullFailure, ImagePullPolicy, ImagePulled, ImageToPull};

fn owner() -> Owner {
    Owner { org: "org-a".to_owned(), user: "alice".to_owned() }
}

fn serverless(image: &str) -> SandboxSpec {
    SandboxSpec {
        containers: vec![Container { image: image.to_owned(), ..client_container() }],
        mode: SandboxMode::Serverless as i32,
        ..SandboxSpec::default()
    }
}

fn pulling_world() -> Harness {
    let mut h = harness_with(Values::scenario(Scenario::Ready));
    h.world.set_pulls_images(true);
    h
}

fn waiting_reasons(h: &Harness, uid: &str) -> Vec<String> {
    h.pod(uid)
        .containers
        .iter()
        .map(|container| match &container.state {
            ContainerState::Waiting(reason) => reason.clone(),
            other => format!("{other:?}"),
        })
        .collect()
}

fn pulls(effects: &[Effect]) -> Vec<(String, Vec<ImageToPull>)> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::PullImages { pod_uid, images } => Some((pod_uid.to_string(), images.clone())),
            _ => None,
        })
        .collect()
}

fn starts(effects: &[Effect]) -> usize {
    effects.iter().filter(|effect| matches!(effect, Effect::StartPod(_))).count()
}

#[test]
fn an_admitted_pod_waits_for_its_images_then_starts() {
    let mut h = pulling_world();
    let sandbox = h.world.create_sandbox(&owner(), serverless("127.0.0.1:5000/test/busybox:1"), "", "").unwrap();
    let effects = h.world.take_effects();
    let asked = pulls(&effects);
    assert_eq!(starts(&effects), 0, "nothing starts before its image is there: {effects:?}");
    let [(pod_uid, images)] = asked.as_slice() else { panic!("one pull: {effects:?}") };
    assert_eq!(pod_uid, &sandbox.pod_uid.to_string());
    assert_eq!(
        images,
        &[ImageToPull {
            container: "main".to_owned(),
            image: "127.0.0.1:5000/test/busybox:1".to_owned(),
            policy: ImagePullPolicy::IfNotPresent,
            credentials: None,
            runtime_class: None,
        }]
    );
    let pod = h.pod(pod_uid);
    assert_eq!(pod.phase, PodPhase::Pending);
    assert!(pod.node_name.is_some(), "bound to its Node while it pulls");
    assert_eq!(waiting_reasons(&h, pod_uid), ["ContainerCreating"]);
    let view = h.world.get_sandbox("org-a", &sandbox.id).unwrap();
    assert_ne!(view.state, SandboxState::Running);
    let events: Vec<String> = h.events_for(pod_uid).iter().map(|event| event.message.to_string()).collect();
    assert!(events.iter().any(|message| message == "Pulling image \"127.0.0.1:5000/test/busybox:1\""), "{events:?}");

    h.world.images_pulled(
        pod_uid,
        &[ImagePulled::Pulled {
            image: "127.0.0.1:5000/test/busybox:1".to_owned(),
            took: Duration::from_millis(1250),
            size_bytes: 1_048_576,
        }],
    );
    assert_eq!(starts(&h.world.take_effects()), 1);
    assert_eq!(h.pod(pod_uid).phase, PodPhase::Running);
    assert_eq!(h.world.get_sandbox("org-a", &sandbox.id).unwrap().state, SandboxState::Running);
    let pulled: Vec<String> = h
        .events_for(pod_uid)
        .iter()
        .filter(|event| event.reason == "Pulled")
        .map(|event| event.message.to_string())
        .collect();
    assert_eq!(
        pulled,
        [
            "Successfully pulled image \"127.0.0.1:5000/test/busybox:1\" in 1.250s (1.250s including waiting). Image size: 1048576 bytes."
        ]
    );

    // A second report (a duplicate) changes nothing.
    h.world.images_pulled(pod_uid, &[]);
    assert_eq!(starts(&h.world.take_effects()), 0);
}

#[test]
fn a_failed_pull_shows_err_image_pull_then_back_off_with_the_registrys_message() {
    let mut h = pulling_world();
    let sandbox = h.world.create_sandbox(&owner(), serverless("127.0.0.1:5000/test/busybox:nope"), "", "").unwrap();
    let effects = h.world.take_effects();
    let [(pod_uid, _)] = pulls(&effects).try_into().unwrap_or_else(|all| panic!("{all:?}"));
    let message = "manifest unknown: manifest unknown".to_owned();
    h.world.image_pull_failed(
        &pod_uid,
        ImagePullFailure {
            image: "127.0.0.1:5000/test/busybox:nope".to_owned(),
            reason: "ErrImagePull".to_owned(),
            message: message.clone(),
        },
    );
    assert_eq!(waiting_reasons(&h, &pod_uid), ["ErrImagePull"]);
    assert_eq!(h.pod(&pod_uid).phase, PodPhase::Pending);
    let view = h.world.get_sandbox("org-a", &sandbox.id).unwrap();
    assert!(view.state_reason.starts_with("ErrImagePull"), "{}", view.state_reason);
    let warnings: Vec<String> = h.warnings_for(&pod_uid).iter().map(|event| event.message.to_string()).collect();
    assert!(
        warnings.contains(&format!("Failed to pull image \"127.0.0.1:5000/test/busybox:nope\": {message}")),
        "{warnings:?}"
    );
    assert!(warnings.contains(&"Error: ErrImagePull".to_owned()), "{warnings:?}");

    h.advance(10);
    assert_eq!(waiting_reasons(&h, &pod_uid), ["ImagePullBackOff"]);
    let pod = h.pod(&pod_uid);
    assert_eq!(pod.phase, PodPhase::Failed);
    let expected = format!("Back-off pulling image \"127.0.0.1:5000/test/busybox:nope\": ErrImagePull: {message}");
    assert_eq!(pod.message.as_deref(), Some(expected.as_str()));
    let view = h.world.get_sandbox("org-a", &sandbox.id).unwrap();
    assert_eq!(view.state, SandboxState::Failed);
    assert!(view.state_reason.contains(&message), "{}", view.state_reason);
    assert_eq!(starts(&h.world.take_effects()), 0);
}

#[test]
fn a_report_for_a_pod_deleted_while_it_pulled_changes_nothing() {
    let mut h = pulling_world();
    let sandbox = h.world.create_sandbox(&owner(), serverless("127.0.0.1:5000/test/busybox:1"), "", "").unwrap();
    let effects = h.world.take_effects();
    let [(pod_uid, _)] = pulls(&effects).try_into().unwrap_or_else(|all| panic!("{all:?}"));
    h.world.delete_sandbox("org-a", &sandbox.id, 0).unwrap();
    h.advance(1);
    h.world.take_effects();
    h.world.images_pulled(&pod_uid, &[ImagePulled::Present { image: "127.0.0.1:5000/test/busybox:1".to_owned() }]);
    assert_eq!(starts(&h.world.take_effects()), 0);
    assert!(!h.pod_exists(&pod_uid) || h.pod(&pod_uid).phase != PodPhase::Running);
}

#[test]
fn a_host_that_does_not_pull_starts_pods_at_admission() {
    let mut h = harness_with(Values::scenario(Scenario::Ready));
    h.world.create_sandbox(&owner(), serverless("python:3.11"), "", "").unwrap();
    let effects = h.world.take_effects();
    assert!(pulls(&effects).is_empty(), "{effects:?}");
    assert_eq!(starts(&effects), 1);
}

#[test]
fn a_host_that_cannot_enforce_limits_says_so_on_each_pod_with_limits() {
    let mut h = pulling_world();
    h.world.set_limits_enforced(false);
    let sandbox = h.world.create_sandbox(&owner(), serverless("127.0.0.1:5000/test/busybox:1"), "", "").unwrap();
    let effects = h.world.take_effects();
    let [(pod_uid, _)] = pulls(&effects).try_into().unwrap_or_else(|all| panic!("{all:?}"));
    h.world.images_pulled(&pod_uid, &[ImagePulled::Present { image: "127.0.0.1:5000/test/busybox:1".to_owned() }]);
    assert_eq!(h.world.get_sandbox("org-a", &sandbox.id).unwrap().state, SandboxState::Running);
    let warnings: Vec<String> = h.warnings_for(&pod_uid).iter().map(|event| event.reason.to_string()).collect();
    assert_eq!(warnings, ["LimitsNotEnforced"], "the sandbox's effective limits hold nothing here");

    // Where they hold, no such Event.
    let mut enforced = pulling_world();
    enforced.world.create_sandbox(&owner(), serverless("127.0.0.1:5000/test/busybox:1"), "", "").unwrap();
    let effects = enforced.world.take_effects();
    let [(pod_uid, _)] = pulls(&effects).try_into().unwrap_or_else(|all| panic!("{all:?}"));
    enforced.world.images_pulled(&pod_uid, &[]);
    assert!(enforced.warnings_for(&pod_uid).is_empty());
}

/// A Pod of a RuntimeClass asks for its images for that class (gVisor keeps trees of its own).
#[test]
fn a_pull_names_the_pods_runtime_class() {
    let mut h = ready_with_runtime_classes(serde_json::json!({"allowedRuntimeClasses": ["gvisor"]}), &["gvisor"]);
    h.world.set_pulls_images(true);
    let spec = SandboxSpec {
        containers: vec![Container { image: "127.0.0.1:5000/test/busybox:1".to_owned(), ..client_container() }],
        runner_ids: vec!["cks-runner".to_owned()],
        mode: SandboxMode::Cks as i32,
        runtime_class: "gvisor".to_owned(),
        ..SandboxSpec::default()
    };
    let owner = Owner { org: "default-org".to_owned(), user: "alice".to_owned() };
    let sandbox = h.world.create_sandbox(&owner, spec, "", "").unwrap();
    let mut asked = pulls(&h.world.take_effects());
    for _ in 0..5 {
        if !asked.is_empty() {
            break;
        }
        h.advance(1);
        asked = pulls(&h.world.take_effects());
    }
    let [(pod_uid, images)] = asked.as_slice() else { panic!("one pull: {asked:?}") };
    assert_eq!(pod_uid, &sandbox.pod_uid.to_string());
    assert_eq!(images[0].runtime_class.as_deref(), Some("gvisor"));
}
