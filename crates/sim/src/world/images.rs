//! The kubelet's image pulls, when the host really runs images (the emulator's OCI runtime):
//! an admitted Pod waits on its Node, containers `ContainerCreating`, while the host pulls; then
//! it starts, or its containers wait `ErrImagePull` and then `ImagePullBackOff` with the
//! registry's message. Without such a host (the process runtime) images are never pulled and
//! Pods start at admission, as before.

use std::fmt;
use std::time::Duration;

use cwsandbox_api::sandbox_v1::SandboxImagePullPolicy;

use crate::k8s::{ContainerState, EventType, PodOwner, PodPhase};
use crate::pods::ImagePullFailure;
use crate::world::{Effect, Timer, World};

/// Kubernetes' `imagePullPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImagePullPolicy {
    /// Pull at every start.
    Always,
    /// Pull when the node does not have the image.
    IfNotPresent,
    /// Never pull: the image must be on the node.
    Never,
}

impl fmt::Display for ImagePullPolicy {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            ImagePullPolicy::Always => "Always",
            ImagePullPolicy::IfNotPresent => "IfNotPresent",
            ImagePullPolicy::Never => "Never",
        })
    }
}

/// One container's image the host must have before the Pod starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageToPull {
    /// The container.
    pub container: String,
    /// The image reference as the spec gives it.
    pub image: String,
    /// When to pull it.
    pub policy: ImagePullPolicy,
    /// The container's own registry credentials (`image_pull_credentials`), if it has some.
    pub credentials: Option<crate::k8s::ImagePullSecret>,
    /// The Pod's RuntimeClass (`None`: the node's default): a runtime handler may keep images
    /// of its own (gVisor's are unpacked with their own ids).
    pub runtime_class: Option<String>,
}

/// What the host did for one container's image.
#[derive(Debug, Clone, PartialEq)]
pub enum ImagePulled {
    /// Downloaded now.
    Pulled {
        /// The image reference.
        image: String,
        /// How long the pull took.
        took: Duration,
        /// Its size in bytes.
        size_bytes: u64,
    },
    /// Already on the node (`IfNotPresent`, `Never`).
    Present {
        /// The image reference.
        image: String,
    },
    /// The host runs this container without its image (the `auto` runtime where the registry
    /// cannot be reached): the reason says so in a Warning Event.
    NotUsed {
        /// The image reference.
        image: String,
        /// Why, and what runs instead.
        reason: String,
    },
}

impl World {
    /// Whether admitted Pods wait for the host to pull their images ([`Effect::PullImages`]).
    pub fn set_pulls_images(&mut self, pulls: bool) {
        self.pulls_images = pulls;
    }

    /// Whether started Pods wait for the host to report their containers started before they
    /// show Running (and their sandboxes RUNNING): set when a runtime runs the Pods' commands.
    pub fn set_host_confirms_starts(&mut self, confirms: bool) {
        self.host_confirms_starts = confirms;
    }

    /// Whether the host enforces the CPU and memory limits of the containers it runs in their
    /// images; when it cannot (cgroups refused), each started Pod with limits gets a Warning
    /// Event saying so.
    pub fn set_limits_enforced(&mut self, enforced: bool) {
        self.limits_enforced = enforced;
    }

    /// Why the host cannot make a memory-backed scratch volume (a tmpfs of the volume's own),
    /// where it cannot (`None`: it can): such a volume is then refused by name at create.
    pub fn set_memory_volumes_refused(&mut self, why: Option<String>) {
        self.memory_volumes_refused = why;
    }

    /// The named RuntimeClasses the host's Nodes have (`None`: no host runs Pods, so any class
    /// is only recorded): a sandbox whose class is not among them is refused at create with the
    /// placement reason the fleet gives when no runner can host it.
    /// The cluster has a RuntimeClass object of each (`kubectl get runtimeclass`).
    pub fn set_runtime_classes(&mut self, classes: Option<Vec<String>>) {
        let created = self.now;
        self.cluster.runtime_classes = classes
            .iter()
            .flatten()
            .map(|name| {
                let handler = crate::k8s::runtime_class_handler(name).to_owned();
                (name.clone(), crate::k8s::RuntimeClass { name: name.clone(), handler, created })
            })
            .collect();
        self.cluster.resource_version += 1;
        self.runtime_classes = classes;
    }

    /// The RuntimeClasses whose Pods the host runs with one container only: a sandbox of several
    /// with one of them is refused by name at create (UNIMPLEMENTED, the containers named).
    pub fn set_one_container_runtime_classes(&mut self, classes: Vec<String>) {
        self.one_container_runtime_classes = classes;
    }

    /// The Warning a started Pod gets when its limits hold nothing on this host.
    pub(super) fn warn_unenforced_limits(&mut self, uid: &str) {
        if self.limits_enforced {
            return;
        }
        let limited = self.cluster.pod(uid).is_some_and(|pod| {
            pod.containers.iter().any(|container| container.limits.cpu.is_some() || container.limits.memory.is_some())
        });
        if limited {
            self.event(
                uid,
                EventType::Warning,
                "LimitsNotEnforced",
                "CPU and memory limits are not enforced: the OCI runtime cannot set cgroup limits on this host",
                "kubelet",
            );
        }
    }

    /// The images a Pod's containers need, with the policy of the sandbox's runner
    /// (`spec.image_pull.policy`; unspecified is the platform's `IfNotPresent`).
    fn images_to_pull(&self, uid: &str) -> Vec<ImageToPull> {
        let Some(pod) = self.cluster.pod(uid) else { return Vec::new() };
        let policy = match &pod.owner {
            PodOwner::Sandbox(id) => self.runner_image_pull_policy(id),
            _ => ImagePullPolicy::IfNotPresent,
        };
        let runtime_class = match &pod.owner {
            PodOwner::Sandbox(id) => self.sandboxes.runtime_class(id).map(str::to_owned),
            _ => None,
        };
        pod.containers
            .iter()
            .map(|container| ImageToPull {
                container: container.name.clone(),
                image: container.image.clone(),
                policy,
                credentials: container.inputs.as_ref().and_then(|inputs| inputs.pull_secret.clone()),
                runtime_class: runtime_class.clone(),
            })
            .collect()
    }

    fn runner_image_pull_policy(&self, sandbox_id: &str) -> ImagePullPolicy {
        let configured = self
            .sandboxes
            .placement(sandbox_id)
            .and_then(|(org, runner_id)| self.runners.get(org, runner_id).ok())
            .and_then(|runner| runner.spec.and_then(|spec| spec.image_pull))
            .map(|pull| pull.policy());
        match configured {
            Some(SandboxImagePullPolicy::Always) => ImagePullPolicy::Always,
            Some(SandboxImagePullPolicy::Never) => ImagePullPolicy::Never,
            _ => ImagePullPolicy::IfNotPresent,
        }
    }

    /// An admitted Pod waits for its images: `ContainerCreating`, one `Pulling` Event per
    /// image, and the host asked to pull. Says whether it waits (the host pulls images).
    pub(super) fn begin_image_pull(&mut self, uid: &str) -> bool {
        if !self.pulls_images {
            return false;
        }
        let images = self.images_to_pull(uid);
        if images.is_empty() {
            return false;
        }
        let now = self.now;
        let Some(pod) = self.cluster.pod_mut(uid) else { return false };
        pod.start_time = Some(now);
        for container in &mut pod.containers {
            container.state = ContainerState::Waiting("ContainerCreating".to_owned());
        }
        let pod_uid = pod.uid.clone();
        for image in &images {
            if image.policy != ImagePullPolicy::Never {
                self.event(uid, EventType::Normal, "Pulling", format!("Pulling image \"{}\"", image.image), "kubelet");
            }
        }
        self.pods.begin_pull(pod_uid.clone());
        self.effects.push(Effect::PullImages { pod_uid, images });
        true
    }

    /// The host has every image of a Pod it was pulling for: the Pod starts (unless it was
    /// deleted meanwhile).
    pub fn images_pulled(&mut self, uid: &str, pulled: &[ImagePulled]) {
        self.settle();
        if !self.pods.end_pull(uid) {
            return;
        }
        let Some(pod) = self.cluster.pod(uid) else { return };
        if pod.phase != PodPhase::Pending || pod.deletion_timestamp.is_some() {
            return;
        }
        let Some(node_name) = pod.node_name.clone() else { return };
        for image in pulled {
            match image {
                ImagePulled::Pulled { image, took, size_bytes } => {
                    let seconds = took.as_secs_f64();
                    let message = format!(
                        "Successfully pulled image \"{image}\" in {seconds:.3}s ({seconds:.3}s including waiting). Image size: {size_bytes} bytes."
                    );
                    self.event(uid, EventType::Normal, "Pulled", message, "kubelet");
                }
                ImagePulled::Present { image } => {
                    let message = format!("Container image \"{image}\" already present on machine");
                    self.event(uid, EventType::Normal, "Pulled", message, "kubelet");
                }
                ImagePulled::NotUsed { image, reason } => {
                    let message = format!("Image \"{image}\" not used: {reason}");
                    self.event(uid, EventType::Warning, "ImageNotUsed", message, "kubelet");
                }
            }
        }
        self.start_admitted_pod(uid, &node_name);
        self.settle();
    }

    /// The host could not pull one of a Pod's images: its containers wait `ErrImagePull` (or
    /// the failure's own reason) with the registry's message; after the kubelet's back-off they
    /// wait `ImagePullBackOff` and the runner gives the Pod up.
    pub fn image_pull_failed(&mut self, uid: &str, failure: ImagePullFailure) {
        self.settle();
        if !self.pods.end_pull(uid) {
            return;
        }
        let Some(pod) = self.cluster.pod_mut(uid) else { return };
        if pod.phase != PodPhase::Pending || pod.deletion_timestamp.is_some() {
            return;
        }
        for container in &mut pod.containers {
            container.state = ContainerState::Waiting(failure.reason.clone());
        }
        let pod_uid = pod.uid.clone();
        // `ErrImageNeverPull`'s message is the kubelet's whole Event ("Container image … is
        // not present with pull policy of Never"); a pull that failed says which image.
        let why = if failure.reason == "ErrImageNeverPull" {
            failure.message.clone()
        } else {
            format!("Failed to pull image \"{}\": {}", failure.image, failure.message)
        };
        let event_reason = if failure.reason == "ErrImageNeverPull" { "ErrImageNeverPull" } else { "Failed" };
        self.event(uid, EventType::Warning, event_reason, why, "kubelet");
        self.event(uid, EventType::Warning, "Failed", format!("Error: {}", failure.reason), "kubelet");
        let back_off = Duration::from_secs(u64::from(self.values.kubelet.image_pull_back_off_seconds));
        self.timers.schedule(self.now + back_off, Timer::ImagePullBackOff(pod_uid.clone()));
        self.pods.pull_failed(pod_uid, failure);
        self.settle();
    }

    /// The image and message of a Pod's failed pull, by a real host or an injected fault.
    pub(super) fn failed_pull(&self, uid: &str) -> Option<(String, Option<String>)> {
        if let Some(failure) = self.pods.failed_pull(uid) {
            return Some((failure.image.clone(), Some(format!("{}: {}", failure.reason, failure.message))));
        }
        self.unpullable_image(uid).map(|(image, _)| (image, None))
    }

    /// The host's kernel OOM-killed a running Pod's main process (its memory limit): exit 137,
    /// reason `OOMKilled`, and a Node Event as the kernel's log gives it.
    pub fn pod_oom_killed(&mut self, uid: &str) {
        self.settle();
        let Some(pod) = self.cluster.pod(uid) else { return };
        if pod.phase != PodPhase::Running || pod.deletion_timestamp.is_some() {
            // Killed while it was being stopped: the stop's end, as any exit then.
            self.on_pod_exited(uid, crate::world::faults::OOM_EXIT_CODE);
            self.settle();
            return;
        }
        let node = pod.node_name.clone().unwrap_or_default();
        let message = format!("Memory cgroup out of memory: Killed process (main) of Pod {}", pod.name);
        self.node_event(&node, EventType::Warning, "OOMKilling", message);
        self.finish_pod_with(uid, crate::world::faults::OOM_EXIT_CODE, "OOMKilled");
        self.settle();
    }
}
