//! A sandbox spec after policy resolution: the runtime defaults, the policy's `base` and the
//! sandbox's own spec merged, and the constraints checked. This is what the Pod is built from.

use std::collections::BTreeMap;

use cwsandbox_api::sandbox_v1::{DnsEgressMode, EgressRule, IngressRule, SecurityContext};

use crate::quantity::Quantity;

/// CPU, memory and GPU amounts of one side (requests or limits) of one container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResourceAmounts {
    /// CPU, if stated.
    pub cpu: Option<Quantity>,
    /// Memory, if stated.
    pub memory: Option<Quantity>,
    /// Whole GPUs, if stated.
    pub gpu: Option<i64>,
}

/// A GPU model a container asks for: the Node label value it must run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuTypeRequest {
    /// The model, as the runners list it in `supported_gpu_types` (a `gpu.nvidia.com/class` value).
    pub name: String,
    /// The field that states it (`sandbox.spec.containers[0].resourceRequirements.requests.gpu.type`).
    pub field: String,
}

/// A Kubernetes toleration, as the policy's `base.spec.tolerations` states it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Toleration {
    /// Taint key; empty with operator `Exists` tolerates everything.
    pub key: String,
    /// `Equal` (default) or `Exists`.
    pub operator: String,
    /// Taint value for `Equal`.
    pub value: String,
    /// Taint effect; empty matches every effect.
    pub effect: String,
}

/// One container of the resolved sandbox.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResolvedContainer {
    /// Container name.
    pub name: String,
    /// Image reference.
    pub image: String,
    /// Entrypoint override (the API carries one string).
    pub command: Option<String>,
    /// Arguments.
    pub args: Vec<String>,
    /// Environment: `base` container env first, the sandbox's own values win.
    pub env: BTreeMap<String, String>,
    /// Working directory.
    pub working_dir: Option<String>,
    /// Requests after defaults.
    pub requests: ResourceAmounts,
    /// Limits after defaults.
    pub limits: ResourceAmounts,
    /// The GPU model asked for (`gpu.type`), with the field that states it.
    pub gpu_type: Option<GpuTypeRequest>,
    /// Security settings as asked; boxed because few sandboxes set them and inline they would
    /// double the size of every container.
    pub security_context: Option<Box<SecurityContext>>,
    /// Whether this is the primary container.
    pub primary: bool,
}

/// The fully resolved sandbox.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResolvedSpec {
    /// Pod labels from `base.metadata.labels` (sandboxes cannot set labels).
    pub labels: BTreeMap<String, String>,
    /// Pod annotations: the sandbox's, then `base.metadata.annotations`, which win on a duplicate key.
    pub annotations: BTreeMap<String, String>,
    /// `base.spec.schedulerName`, if the policy routes Pods to a scheduler.
    pub scheduler_name: Option<String>,
    /// `base.spec.nodeSelector`.
    pub node_selector: BTreeMap<String, String>,
    /// `base.spec.tolerations`.
    pub tolerations: Vec<Toleration>,
    /// `base.spec.priorityClassName`.
    pub priority_class_name: Option<String>,
    /// Required node-affinity terms of `base.spec.affinity`, each a map of label → allowed values
    /// (a term matches when every key has one of its values; the Pod needs one matching term).
    pub required_node_affinity: Vec<BTreeMap<String, Vec<String>>>,
    /// Every other allowed `base.spec` key, kept verbatim (JSON) for the Pod object.
    pub extra_pod_spec: BTreeMap<String, serde_json::Value>,
    /// The containers, in spec order.
    pub containers: Vec<ResolvedContainer>,
    /// Lifetime: the sandbox's own, else the policy default, else 600 s; at most 30 days.
    pub max_lifetime_seconds: i32,
    /// Kubernetes RuntimeClass chosen, if any.
    pub runtime_class: Option<String>,
    /// Effective egress rules.
    pub egress: Vec<EgressRule>,
    /// Effective ingress rules.
    pub ingress: Vec<IngressRule>,
    /// Effective DNS egress mode.
    pub dns_egress: DnsEgressMode,
    /// Requested instance type, if any.
    pub instance_type: Option<String>,
}

impl ResolvedSpec {
    /// Sum of CPU requests over all containers.
    pub fn total_cpu_request(&self) -> Quantity {
        self.containers
            .iter()
            .filter_map(|container| container.requests.cpu)
            .fold(Quantity::ZERO, Quantity::saturating_add)
    }

    /// Sum of memory requests over all containers.
    pub fn total_memory_request(&self) -> Quantity {
        self.containers
            .iter()
            .filter_map(|container| container.requests.memory)
            .fold(Quantity::ZERO, Quantity::saturating_add)
    }

    /// The GPU model the Pod must run on, with the field that asks for it: containers of one Pod
    /// share a Node, so resolution refuses containers that ask for different models.
    pub fn gpu_type(&self) -> Option<&GpuTypeRequest> {
        self.containers.iter().find_map(|container| container.gpu_type.as_ref())
    }

    /// Sum of GPU requests over all containers.
    pub fn total_gpu_request(&self) -> i64 {
        self.containers.iter().filter_map(|container| container.requests.gpu).sum()
    }
}
