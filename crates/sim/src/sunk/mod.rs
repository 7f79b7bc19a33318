//! The SUNK Pod Scheduler: which Pods it handles, how it validates them, and how a Pod becomes a
//! placeholder Slurm job (here); what it does once Slurm has the job — lock, prolog, drain, the
//! two-way sync with the Pod — is in `flow`.

mod flow;

use crate::config::{ScopeType, Values};
use crate::k8s::{GPU_CLASS_LABEL, Pod};
use crate::slurm::{JobKind, JobRequest, Sharing};

/// Annotation prefix of every SUNK setting on a Pod.
pub const ANNOTATION_PREFIX: &str = "sunk.coreweave.com/";

/// Why the SUNK scheduler does not handle a Pod (it is silent about it: no Event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotHandled {
    /// The scheduler is not enabled.
    Disabled,
    /// `spec.schedulerName` names another scheduler.
    OtherScheduler,
    /// The Pod's namespace is outside the scheduler's scope.
    OutOfScope,
}

/// Whether the SUNK scheduler watches this Pod.
pub fn handles(values: &Values, pod: &Pod) -> Result<(), NotHandled> {
    let scheduler = &values.scheduler;
    if !scheduler.enabled {
        return Err(NotHandled::Disabled);
    }
    if pod.scheduler_name != scheduler.name {
        return Err(NotHandled::OtherScheduler);
    }
    if watches_namespace(values, &pod.namespace) { Ok(()) } else { Err(NotHandled::OutOfScope) }
}

/// Whether the scheduler's scope covers `namespace`: every one for `cluster`, else the listed
/// ones (none listed: the release's own namespace).
pub fn watches_namespace(values: &Values, namespace: &str) -> bool {
    let scope = &values.scheduler.scope;
    match scope.scope_type {
        ScopeType::Cluster => true,
        ScopeType::Namespace if scope.namespaces.is_empty() => namespace == values.sunk.namespace,
        ScopeType::Namespace => scope.namespaces.iter().any(|watched| watched == namespace),
    }
}

/// Why the SUNK scheduler refuses a Pod it handles. The message (Display) goes into the Pod's
/// Warning Event word for word; the Pod is never retried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SunkRejection {
    /// `terminationGracePeriodSeconds` is not below KillWait minus the termination offset.
    #[error(
        "termination grace period must be less than Slurm KillWait - {offset}s (terminationGracePeriodSeconds {grace}, KillWait {kill_wait}s)"
    )]
    GraceNotBelowKillWait {
        /// The Pod's grace period, seconds.
        grace: i64,
        /// Slurm's KillWait, seconds.
        kill_wait: i64,
        /// The scheduler's termination offset, seconds.
        offset: i64,
    },
    /// A container requests no CPU, or zero.
    #[error("container {container:?} must request a non-zero cpu")]
    NoCpuRequest {
        /// The container's name.
        container: String,
    },
    /// A container requests no memory, or zero.
    #[error("container {container:?} must request a non-zero memory")]
    NoMemoryRequest {
        /// The container's name.
        container: String,
    },
    /// A numeric annotation (`user-id`, `group-id`, `timeout`) is not a non-negative integer.
    #[error("annotation {ANNOTATION_PREFIX}{key}: {value:?} is not a non-negative integer")]
    NotANumber {
        /// The annotation's short key.
        key: String,
        /// Its value.
        value: String,
    },
    /// The `exclusive` annotation holds a value the scheduler does not allow.
    #[error("annotation {ANNOTATION_PREFIX}exclusive: invalid value {value:?} (allowed: {})", allowed.join(", "))]
    InvalidExclusive {
        /// The value given.
        value: String,
        /// The values allowed.
        allowed: Vec<String>,
    },
    /// `exclusive: ok` on a Pod that requests GPUs.
    #[error("annotation {ANNOTATION_PREFIX}exclusive: \"ok\" is not allowed for GPU Pods")]
    SharedGpuPod,
    /// A GPU Pod asks for a GPU class the scheduler's `gpuTypes` does not map to a GRES type.
    #[error(
        "GPU class {class:?} ({GPU_CLASS_LABEL} in the Pod's nodeSelector) has no GRES type in the scheduler's config.scheduler.gpuTypes"
    )]
    UnmappedGpuClass {
        /// The class asked for.
        class: String,
    },
}

/// The validation rules of the scheduler (docs/facts/sunk.md#pod-requirements,
/// docs/facts/sunk.md#annotations). On failure the message is put in a Warning Event and the Pod
/// is never retried (docs/facts/sunk.md#validation-failure).
pub fn validate(values: &Values, pod: &Pod, gpu_type_of_any_node: Option<&str>) -> Result<JobRequest, SunkRejection> {
    let kill_wait = i64::from(values.slurm_config.kill_wait);
    let offset = i64::from(values.scheduler.termination_offset_seconds);
    if pod.termination_grace_period_seconds >= kill_wait - offset {
        return Err(SunkRejection::GraceNotBelowKillWait {
            grace: pod.termination_grace_period_seconds,
            kill_wait,
            offset,
        });
    }
    let mut cpu_millis = 0i64;
    let mut memory_bytes = 0i64;
    let mut gpus = 0i64;
    for container in &pod.containers {
        match container.requests.cpu {
            Some(cpu) if !cpu.is_zero() => cpu_millis += cpu.millis(),
            _ => return Err(SunkRejection::NoCpuRequest { container: container.name.clone() }),
        }
        match container.requests.memory {
            Some(memory) if !memory.is_zero() => memory_bytes += memory.units_ceil(),
            _ => return Err(SunkRejection::NoMemoryRequest { container: container.name.clone() }),
        }
        gpus += container.requests.gpu.unwrap_or(0);
    }
    // Lookups by short key need no formatted keys: the SUNK annotations sit together in the
    // sorted map, from the prefix on.
    let annotation = |key: &str| {
        pod.annotations
            .iter_from(ANNOTATION_PREFIX)
            .map_while(|(full, value)| full.strip_prefix(ANNOTATION_PREFIX).map(|short| (short, value)))
            .find(|(short, _)| *short == key)
            .map(|(_, value)| value.as_str())
    };
    let number = |key: &str| -> Result<Option<u32>, SunkRejection> {
        annotation(key)
            .map(|text| {
                text.trim()
                    .parse::<u32>()
                    .map_err(|_| SunkRejection::NotANumber { key: key.to_owned(), value: text.to_owned() })
            })
            .transpose()
    };
    let sharing = match annotation("exclusive") {
        None => Sharing::Default,
        Some(value) if values.scheduler.exclusive_values.iter().any(|allowed| allowed == value) => match value {
            "none" => Sharing::Exclusive,
            "user" => Sharing::User,
            _ => Sharing::Ok,
        },
        Some(value) => {
            return Err(SunkRejection::InvalidExclusive {
                value: value.to_owned(),
                allowed: values.scheduler.exclusive_values.clone(),
            });
        }
    };
    if sharing == Sharing::Ok && gpus > 0 {
        return Err(SunkRejection::SharedGpuPod);
    }
    // A Pod that asks for a GPU model gets exactly that GRES type; one that does not gets any GPU,
    // shown with a type the cluster has.
    let (gres_type, gres_type_required) = match pod.node_selector.get(GPU_CLASS_LABEL) {
        _ if gpus <= 0 => (None, false),
        Some(class) => match values.scheduler.gpu_types.get(class) {
            Some(gres) => (Some(gres.clone()), true),
            None => return Err(SunkRejection::UnmappedGpuClass { class: class.clone() }),
        },
        None => (Some(gpu_type_of_any_node.unwrap_or("gpu").to_owned()), false),
    };
    let uid = number("user-id")?.unwrap_or(0);
    let gid = number("group-id")?;
    let time_limit_seconds = number("timeout")?;
    let text = |key: &str| annotation(key).map(str::to_owned);
    Ok(JobRequest {
        name: crate::ids::joined(&[&pod.namespace, "/", &pod.name]),
        uid,
        gid,
        account: text("account"),
        partition: text("partition"),
        qos: text("qos"),
        comment: text("comment"),
        reservation: text("reservation"),
        cpus: u32::try_from((cpu_millis + 999) / 1000).unwrap_or(u32::MAX),
        // Slurm's MB are MiB; round up so a request never shrinks.
        mem_mb: u64::try_from((memory_bytes + (1 << 20) - 1) >> 20).unwrap_or(u64::MAX),
        gpus: u32::try_from(gpus).unwrap_or(u32::MAX),
        gres_type,
        gres_type_required,
        sharing,
        time_limit_seconds,
        priority: 100,
        kind: JobKind::Placeholder { pod_uid: pod.uid.clone() },
        prolog: true,
    })
}
