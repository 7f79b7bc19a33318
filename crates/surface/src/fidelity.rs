//! Which request fields the emulator honours, and the one check that refuses the others.
//!
//! Every field of every request message of the public services is on [`FIELDS`], one table that
//! says how the emulator treats it, with a note saying why:
//! - [`Handling::Emulated`]: the emulator does what the field asks (a message field's own fields
//!   are then on the table too);
//! - [`Handling::EmulatedWhole`]: a message honoured as a whole by code of its own (a runner's
//!   policy, which `cwsandbox-policy` validates and applies field by field);
//! - [`Handling::OutputOnly`]: a field of a resource the server fills in (`sandbox.status`);
//!   ignored in input, as AIP-203 has servers do;
//! - [`Handling::Stored`]: a configuration resource's settings, validated, stored and returned,
//!   with no further effect because what they configure is not simulated (a runner's own
//!   deployment); the README lists them too;
//! - [`Handling::SameAs`]: a message with the fields of another row's message, treated as that
//!   row's fields are (a template's partial spec follows CreateSandbox's spec rows);
//! - [`Handling::Refused`]: the emulator would accept the field and do nothing with it, so a
//!   request that sets it is refused with UNIMPLEMENTED, reason `CWSANDBOX_NOT_IMPLEMENTED` and a
//!   BadRequest violation naming it ([`check`]); under `strictness: loose` it is accepted and the
//!   emulator logs a warning naming it.
//!
//! RPCs that are not emulated at all are on [`REFUSED_METHODS`]: every call answers UNIMPLEMENTED,
//! whatever its fields. The tests walk the embedded descriptor set and fail on any field or RPC
//! that is on neither list, so a new proto field cannot slip through unhandled, and they check
//! that the README's fidelity table is the one [`fidelity_table`] renders.
//!
//! "Set" is judged on the wire: a repeated or map field with an element, a message field that is
//! present and not empty, a scalar whose value is not its default. A field at its default asks for
//! what the emulator does anyway (`deny_egress: false`), so the published client's own defaults
//! pass. The check re-encodes the request and walks only into the fields that lead to a refused
//! one, so a request type with nothing refused costs nothing.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use cwsandbox_api::sandbox_v1 as pb;
use prost::Message;
use prost::encoding::{WireType, decode_key, decode_varint};
use serde::{Deserialize, Serialize};

use crate::catalogue::Catalogue;
use crate::errors::ApiError;

/// What the emulator does with a request that sets a refused field (`strictness:` in the values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Strictness {
    /// Refuse it: UNIMPLEMENTED, reason `CWSANDBOX_NOT_IMPLEMENTED`, the fields named.
    #[default]
    Strict,
    /// Accept it, log a warning naming the fields, and go on without them.
    Loose,
}

/// How the emulator treats one request field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handling {
    /// Honoured.
    Emulated,
    /// Filled in by the server; ignored in input (AIP-203).
    OutputOnly,
    /// A message honoured as a whole by code of its own, not walked here (a runner's policy).
    EmulatedWhole,
    /// A configuration resource's settings that are validated, stored and returned as given, with
    /// no further effect because what they configure is not simulated.
    Stored,
    /// Not honoured: a request that sets it is refused (or, loose, logged).
    Refused,
    /// A message whose fields follow the rows under the path given (the same field names, the
    /// same treatment), so one decision covers every request that carries such a message.
    SameAs(&'static str),
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct FieldRule {
    /// The request message's name, then the field path without indexes
    /// (`CreateSandboxRequest.sandbox.spec.secrets`).
    pub path: &'static str,
    /// How it is treated.
    pub handling: Handling,
    /// Why, in a few words (the README's fidelity table shows the refused ones' notes).
    pub note: &'static str,
}

const fn emulated(path: &'static str, note: &'static str) -> FieldRule {
    FieldRule { path, handling: Handling::Emulated, note }
}

const fn output_only(path: &'static str) -> FieldRule {
    FieldRule { path, handling: Handling::OutputOnly, note: "output only: ignored in input (AIP-203)" }
}

const fn emulated_whole(path: &'static str, note: &'static str) -> FieldRule {
    FieldRule { path, handling: Handling::EmulatedWhole, note }
}

const fn stored(path: &'static str, note: &'static str) -> FieldRule {
    FieldRule { path, handling: Handling::Stored, note }
}

const fn same_as(path: &'static str, target: &'static str, note: &'static str) -> FieldRule {
    FieldRule { path, handling: Handling::SameAs(target), note }
}

const fn refused(path: &'static str, note: &'static str) -> FieldRule {
    FieldRule { path, handling: Handling::Refused, note }
}

/// The RPCs of the public services that answer UNIMPLEMENTED whatever the request holds, with why.
pub const REFUSED_METHODS: &[(&str, &str)] = &[
    ("SandboxService.GetSandboxBuildLogs", "no image is built"),
    ("SandboxService.PurgeSandboxes", "not emulated"),
    ("SettingsService.GetBuildStorageConfig", "no image is built"),
    ("SettingsService.UpdateBuildStorageConfig", "no image is built"),
    ("SettingsService.GetObjectStorageWifConfig", "no object storage is reachable"),
    ("SettingsService.UpdateObjectStorageWifConfig", "no object storage is reachable"),
    ("SettingsService.DeleteObjectStorageWifConfig", "no object storage is reachable"),
];

/// Every field of every request message of the served RPCs, by request, in field order.
pub const FIELDS: &[FieldRule] = &[
    // CreateSandbox
    emulated("CreateSandboxRequest.request_id", "idempotency: a replay with the same body answers the first sandbox"),
    emulated("CreateSandboxRequest.sandbox", "the sandbox to create"),
    output_only("CreateSandboxRequest.sandbox.sandbox_id"),
    output_only("CreateSandboxRequest.sandbox.status"),
    output_only("CreateSandboxRequest.sandbox.source_template_id"),
    output_only("CreateSandboxRequest.sandbox.source_template_revision"),
    output_only("CreateSandboxRequest.sandbox.endpoint_share_token"),
    output_only("CreateSandboxRequest.sandbox.control"),
    emulated("CreateSandboxRequest.sandbox.display_name", "stored and returned"),
    emulated("CreateSandboxRequest.sandbox.spec", "the sandbox's spec"),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers",
        "each runs its command in the sandbox's namespaces (the primary one decides the sandbox's life); exec and logs name them",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.name",
        "the container's name (exec, logs and files name it)",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.image",
        "pulled from its registry and run through runc (the OCI runtime: `serve --runtime oci`, or `auto` where runc \
         works and the registry answers); with the process runtime recorded only, commands being the host's",
    ),
    emulated("CreateSandboxRequest.sandbox.spec.containers.command", "the container's process"),
    emulated("CreateSandboxRequest.sandbox.spec.containers.args", "the container's process's arguments"),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.environment_variables",
        "the container's environment, its execs' too (the main container's merged with the policy's)",
    ),
    emulated("CreateSandboxRequest.sandbox.spec.containers.resources", "legacy resources: both sides"),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.resources.cpu",
        "in the Pod: scheduling, policy ceilings, Slurm job size; not enforced on the processes",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.resources.memory",
        "in the Pod: scheduling, policy ceilings, Slurm job size; not enforced on the processes",
    ),
    emulated("CreateSandboxRequest.sandbox.spec.containers.resources.gpu", "GPUs"),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.resources.gpu.count",
        "scheduled on GPU nodes; NVIDIA_VISIBLE_DEVICES holds the allocated indices",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.resources.gpu.type",
        "placed only on Nodes labelled gpu.nvidia.com/class=<type> (a node selector; through SUNK a GRES of config.scheduler.gpuTypes' type); a type no Node has is FAILED_PRECONDITION CWSANDBOX_NO_SUITABLE_RUNNER",
    ),
    refused(
        "CreateSandboxRequest.sandbox.spec.containers.resources.gpu.memory_gb",
        "no GPU memory size is matched: any GPU node serves",
    ),
    emulated("CreateSandboxRequest.sandbox.spec.containers.resource_requirements", "requests and limits"),
    emulated("CreateSandboxRequest.sandbox.spec.containers.resource_requirements.requests", "requests"),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.resource_requirements.requests.cpu",
        "in the Pod: scheduling, policy ceilings, Slurm job size; not enforced on the processes",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.resource_requirements.requests.memory",
        "in the Pod: scheduling, policy ceilings, Slurm job size; not enforced on the processes",
    ),
    emulated("CreateSandboxRequest.sandbox.spec.containers.resource_requirements.requests.gpu", "GPUs"),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.resource_requirements.requests.gpu.count",
        "scheduled on GPU nodes; NVIDIA_VISIBLE_DEVICES holds the allocated indices",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.resource_requirements.requests.gpu.type",
        "placed only on Nodes labelled gpu.nvidia.com/class=<type> (a node selector; through SUNK a GRES of config.scheduler.gpuTypes' type); a type no Node has is FAILED_PRECONDITION CWSANDBOX_NO_SUITABLE_RUNNER",
    ),
    refused(
        "CreateSandboxRequest.sandbox.spec.containers.resource_requirements.requests.gpu.memory_gb",
        "no GPU memory size is matched: any GPU node serves",
    ),
    emulated("CreateSandboxRequest.sandbox.spec.containers.resource_requirements.limits", "limits"),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.resource_requirements.limits.cpu",
        "in the Pod: scheduling, policy ceilings, Slurm job size; not enforced on the processes",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.resource_requirements.limits.memory",
        "in the Pod: scheduling, policy ceilings, Slurm job size; not enforced on the processes",
    ),
    emulated("CreateSandboxRequest.sandbox.spec.containers.resource_requirements.limits.gpu", "GPUs"),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.resource_requirements.limits.gpu.count",
        "scheduled on GPU nodes; NVIDIA_VISIBLE_DEVICES holds the allocated indices",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.resource_requirements.limits.gpu.type",
        "placed only on Nodes labelled gpu.nvidia.com/class=<type> (a node selector; through SUNK a GRES of config.scheduler.gpuTypes' type); a type no Node has is FAILED_PRECONDITION CWSANDBOX_NO_SUITABLE_RUNNER",
    ),
    refused(
        "CreateSandboxRequest.sandbox.spec.containers.resource_requirements.limits.gpu.memory_gb",
        "no GPU memory size is matched: any GPU node serves",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.files",
        "written into the sandbox's root before it starts (namespaces isolation only; plain processes fail the start); one under a scratch volume's mount path is placed on the volume, as a subPath file over an emptyDir; one under the host's read-only directories (/etc, /usr, …) is laid over them, a read-only overlay of the sandbox's own layer",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.files.path",
        "absolute, outside /proc and /dev, not where the host has a directory (nor a file or link on the way); not under a registered volume's mount path (other sandboxes write to the claim) nor at a volume's mount path (INVALID_ARGUMENT naming it)",
    ),
    emulated("CreateSandboxRequest.sandbox.spec.containers.files.content", "the file's bytes, mode 0644"),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.volume_mounts",
        "the sandbox's scratch volumes bound at their paths (one root: every container sees every mount)",
    ),
    emulated("CreateSandboxRequest.sandbox.spec.containers.volume_mounts.volume", "a volume of sandbox.spec.volumes"),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.volume_mounts.mount_path",
        "where the volume appears (made if missing)",
    ),
    emulated("CreateSandboxRequest.sandbox.spec.containers.volume_mounts.read_only", "a read-only bind"),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.volume_mounts.sub_path",
        "a directory of the volume (made if missing) instead of its root",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.secret_stores",
        "read from the values' secretStores into the container's environment (and every exec's in it)",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.secret_stores.store_name",
        "a store of the values' secretStores",
    ),
    emulated("CreateSandboxRequest.sandbox.spec.containers.secret_stores.secrets", "the secrets to copy"),
    emulated("CreateSandboxRequest.sandbox.spec.containers.secret_stores.secrets.path", "a secret of the store"),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.secret_stores.secrets.field",
        "a field of a secret that has fields",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.secret_stores.secrets.env_var",
        "the variable that receives the value",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.working_dir",
        "the container's working directory (made in the sandbox's root if missing)",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.security_context",
        "run_as_user and run_as_group are emulated, its other fields refused",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.security_context.run_as_user",
        "the main command and execs run as that uid of the sandbox's user namespace (needs one)",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.security_context.run_as_group",
        "the main command and execs run as that gid of the sandbox's user namespace (needs one)",
    ),
    refused(
        "CreateSandboxRequest.sandbox.spec.containers.security_context.privileged",
        "processes are never privileged",
    ),
    refused(
        "CreateSandboxRequest.sandbox.spec.containers.security_context.allow_privilege_escalation",
        "not applied to the processes (no no_new_privs)",
    ),
    refused(
        "CreateSandboxRequest.sandbox.spec.containers.security_context.read_only_root_filesystem",
        "the root file system is not made read-only",
    ),
    refused(
        "CreateSandboxRequest.sandbox.spec.containers.security_context.capabilities_add",
        "capabilities are not changed",
    ),
    refused(
        "CreateSandboxRequest.sandbox.spec.containers.security_context.capabilities_drop",
        "capabilities are not changed",
    ),
    refused(
        "CreateSandboxRequest.sandbox.spec.containers.security_context.seccomp_profile",
        "no seccomp profile is applied",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.image_pull_credentials",
        "the image is pulled with them (OCI runtime; the process runtime pulls nothing), instead of the emulator's docker config; an image they pulled is theirs in the cache",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.image_pull_credentials.registry",
        "required: the image's registry (Docker Hub's names are one)",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.image_pull_credentials.credentials",
        "a secret of the organization's store: fields username and password, or a docker config.json",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.image_pull_credentials.credentials.store_name",
        "a store of the caller's organization",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.image_pull_credentials.credentials.path",
        "a secret of the store",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.containers.image_pull_credentials.credentials.field",
        "the field holding a docker config.json; empty: the whole secret (a config.json, or fields username and password)",
    ),
    emulated("CreateSandboxRequest.sandbox.spec.containers.primary", "which container is the main one"),
    refused("CreateSandboxRequest.sandbox.spec.containers.startup_probe", "probes are not run"),
    emulated(
        "CreateSandboxRequest.sandbox.spec.volumes",
        "scratch volumes: a directory of the sandbox's, made empty with it, removed with it",
    ),
    emulated("CreateSandboxRequest.sandbox.spec.volumes.name", "what volume mounts name"),
    emulated("CreateSandboxRequest.sandbox.spec.volumes.scratch", "an emptyDir"),
    emulated(
        "CreateSandboxRequest.sandbox.spec.volumes.scratch.size",
        "the emptyDir's sizeLimit: on disk the kubelet measures the volume every kubelet.evictionMonitoringPeriodSeconds (10) and evicts the Pod (Evicted, the sandbox FAILED) once it holds more; in memory the tmpfs's size (writes past it fail with ENOSPC)",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.volumes.scratch.medium",
        "DISK or unset: a directory on the host's disk; MEMORY: a tmpfs sized as the kubelet sizes it (the smallest of the size, the Pod's memory limit and the Node's allocatable memory), its pages counted against the writer's memory; refused by name where the emulator cannot mount one (not root: the ready file's unavailable)",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.volumes.scratch.restore_from_snapshot_id",
        "the volume starts as a copy of that READY snapshot of the organization (a volume no container mounts is refused)",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.volumes.volume_id",
        "a READY registered volume of the organization: its claim's directory, the sandbox pinned to its runner",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.services",
        "each TCP port is served on a free port of the host's loopback from creation, relayed into the sandbox's own network (status.services: an http:// URL, an HTTPS endpoint's https:// URL, or a TLS_PASSTHROUGH endpoint's address)",
    ),
    emulated("CreateSandboxRequest.sandbox.spec.services.port", "the port inside the sandbox; 1-65535, each once"),
    emulated("CreateSandboxRequest.sandbox.spec.services.name", "echoed in status.services"),
    emulated(
        "CreateSandboxRequest.sandbox.spec.services.protocol",
        "TCP (the default); UDP and SCTP are refused by name",
    ),
    stored(
        "CreateSandboxRequest.sandbox.spec.services.visibility",
        "echoed (unset reads PRIVATE); PUBLIC and PRIVATE on one sandbox are refused as the v1 service refuses them (not implemented); every port is served on the host's loopback only",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.services.endpoint",
        "a PUBLIC service's: HTTPS has TLS terminated by the emulator (a certificate of the CA it makes at start, in the ready file) and each request proxied into the sandbox; TLS_PASSTHROUGH forwards the port as it is, its host:port in the endpoint's address",
    ),
    emulated("CreateSandboxRequest.sandbox.spec.services.endpoint.kind", "HTTPS or TLS_PASSTHROUGH"),
    emulated(
        "CreateSandboxRequest.sandbox.spec.services.endpoint.auth",
        "HTTPS only, required: OPEN, or SHARE_TOKEN (a token made at create, answered by the create alone; a request without it in X-Sandbox-Share-Token or ?share_token= gets 401, and the workload never sees it)",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.services.endpoint.request_timeout_seconds",
        "HTTPS only: 0 (15) or 15-900 seconds for the sandbox to answer a request's headers, else 504",
    ),
    emulated("CreateSandboxRequest.sandbox.spec.max_lifetime_seconds", "the sandbox ends when its lifetime is over"),
    refused("CreateSandboxRequest.sandbox.spec.network_ids", "there are no sandbox networks"),
    refused("CreateSandboxRequest.sandbox.spec.object_storage_access", "no object storage is reachable"),
    emulated("CreateSandboxRequest.sandbox.spec.tags", "stored, returned, filtered on"),
    emulated("CreateSandboxRequest.sandbox.spec.runner_ids", "placement on the first ready runner named"),
    emulated("CreateSandboxRequest.sandbox.spec.network", "network options; each below"),
    emulated_whole(
        "CreateSandboxRequest.sandbox.spec.network.ingress",
        "checked against the runner policy, then enforced with nftables on a network of the sandbox's own (README, Sandbox networks): cidr with except, any, tenant SAME_ORG and SAME_USER, ports; TENANT_SCOPE_SANDBOX_NETWORK refused by name (no sandbox networks by id); needs a root emulator with the namespaces isolation and nftables, elsewhere refused as when no runner can host it (FAILED_PRECONDITION, CWSANDBOX_NO_SUITABLE_RUNNER); a gVisor sandbox's rules refused by name",
    ),
    emulated_whole(
        "CreateSandboxRequest.sandbox.spec.network.egress",
        "as ingress, and selector (Pods of the sandbox's organization); https_hostname (exact or *., minus https_hostname_except): TCP 443 through the emulator's SNI proxy, which reads the ClientHello's server name without terminating TLS, closes a name not granted, and dials the name's own address",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.network.deny_egress",
        "true: only what egress rules allow leaves; asked alone, a network namespace of the sandbox's own with only loopback (any root or namespaced emulator)",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.network.deny_ingress",
        "true: only what ingress rules allow arrives, on a network of the sandbox's own (as ingress)",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.network.dns_egress",
        "the sandbox's nameserver is the emulator's resolver on its gateway: ALLOW (the default) answers any name, DENY only the names of its HTTPS grants, others REFUSED (a network of its own, as ingress)",
    ),
    emulated("CreateSandboxRequest.sandbox.spec.annotations", "on the Pod; the SUNK annotations steer placement"),
    refused("CreateSandboxRequest.sandbox.spec.instance_type", "checked against the policy, not used for placement"),
    emulated(
        "CreateSandboxRequest.sandbox.spec.mode",
        "CKS places on a runner; SERVERLESS on the values' serverless pool (no runner, no SUNK)",
    ),
    emulated(
        "CreateSandboxRequest.sandbox.spec.runtime_class",
        "checked against the policy; `gvisor` runs the sandbox under gVisor's runsc (its own kernel; one container per sandbox) where runsc works here (a root emulator: the ready file's runtime_classes); any other class, or gvisor where it cannot run, is refused as when no runner can host it (FAILED_PRECONDITION, CWSANDBOX_NO_SUITABLE_RUNNER)",
    ),
    refused("CreateSandboxRequest.sandbox.spec.network_config_id", "there are no network configurations"),
    emulated(
        "CreateSandboxRequest.sandbox.spec.runtime_class_selection",
        "checked against the policy; a class that resolves to the node's default runs (effective_runtime_class <node-default>), one the policy maps to a named RuntimeClass runs or is refused as runtime_class is",
    ),
    // GetSandbox, ListSandboxes, DeleteSandbox
    emulated("GetSandboxRequest.sandbox_id", "the sandbox"),
    emulated("ListSandboxesRequest.page_size", "server-capped page size"),
    emulated("ListSandboxesRequest.page_token", "opaque page token"),
    emulated("ListSandboxesRequest.tags", "filter"),
    emulated("ListSandboxesRequest.state", "filter (PAUSED and PREPARING match nothing)"),
    emulated("ListSandboxesRequest.show_terminated", "filter"),
    emulated("ListSandboxesRequest.runner_ids", "filter"),
    emulated("ListSandboxesRequest.volume_ids", "filter: sandboxes mounting any of these registered volumes"),
    emulated("ListSandboxesRequest.sort_direction", "order"),
    emulated("DeleteSandboxRequest.sandbox_id", "the sandbox"),
    emulated("DeleteSandboxRequest.grace_period_seconds", "SIGTERM, then SIGKILL after the grace period"),
    emulated(
        "DeleteSandboxRequest.snapshot_volumes",
        "each named scratch volume is copied into a snapshot before the stop (file_system_snapshot_ids)",
    ),
    emulated(
        "DeleteSandboxRequest.request_id",
        "with snapshot_volumes, a retry answers the first request's snapshots without copying again (a stop is idempotent anyway)",
    ),
    emulated(
        "DeleteSandboxRequest.allow_missing",
        "NOT_FOUND becomes an empty answer; with snapshot_volumes, a missing sandbox is INVALID_ARGUMENT",
    ),
    // File-system snapshots
    emulated("CreateFileSystemSnapshotRequest.sandbox_id", "a running sandbox of the caller's organization"),
    emulated("CreateFileSystemSnapshotRequest.request_id", "idempotency: a retry answers the first snapshot"),
    emulated(
        "CreateFileSystemSnapshotRequest.scratch_volume_name",
        "the scratch volume to copy; empty: the sandbox's only one",
    ),
    emulated("GetFileSystemSnapshotRequest.file_system_snapshot_id", "a snapshot of the caller's organization"),
    emulated("ListFileSystemSnapshotsRequest.page_size", "server-capped page size"),
    emulated("ListFileSystemSnapshotsRequest.page_token", "opaque page token"),
    emulated("ListFileSystemSnapshotsRequest.source_sandbox_id", "filter"),
    emulated("DeleteFileSystemSnapshotRequest.file_system_snapshot_id", "the snapshot; its files are removed"),
    emulated("DeleteFileSystemSnapshotRequest.allow_missing", "NOT_FOUND becomes an empty answer"),
    // SettingsService: where the organization's snapshots would be stored.
    emulated(
        "UpdateFileSystemSnapshotBucketConfigRequest.file_system_snapshot_bucket_config",
        "the organization's settings",
    ),
    stored(
        "UpdateFileSystemSnapshotBucketConfigRequest.file_system_snapshot_bucket_config.bucket_name",
        "validated (S3 bucket name rules), stored and returned (empty: the managed bucket); snapshots stay on the emulator's disk",
    ),
    stored(
        "UpdateFileSystemSnapshotBucketConfigRequest.file_system_snapshot_bucket_config.region",
        "stored and returned with a bucket of the organization's own",
    ),
    output_only("UpdateFileSystemSnapshotBucketConfigRequest.file_system_snapshot_bucket_config.mode"),
    output_only("UpdateFileSystemSnapshotBucketConfigRequest.file_system_snapshot_bucket_config.effective_bucket_name"),
    emulated(
        "UpdateFileSystemSnapshotBucketConfigRequest.update_mask",
        "bucket_name, region (AIP-134; none: the fields the request sets)",
    ),
    // SettingsService: the organization's secret stores (seeded from the values' secretStores).
    emulated("CreateSecretStoreRequest.secret_store", "the store to add to the caller's organization"),
    emulated(
        "CreateSecretStoreRequest.secret_store.name",
        "required: 1-63 lowercase letters, digits and '-'; unique in the organization (ALREADY_EXISTS)",
    ),
    emulated(
        "CreateSecretStoreRequest.secret_store.provider_type",
        "required: SECRET_STORE_PROVIDER_TYPE_WANDB, the only provider",
    ),
    stored("CreateSecretStoreRequest.secret_store.wandb", "the W&B settings, returned; W&B is never reached"),
    stored(
        "CreateSecretStoreRequest.secret_store.wandb.api_url",
        "empty or an absolute http(s) URL; stored and returned, never reached (the store's secrets are the values' secretStores.<name>.secrets)",
    ),
    stored("CreateSecretStoreRequest.secret_store.wandb.team", "stored and returned"),
    output_only("CreateSecretStoreRequest.secret_store.create_time"),
    output_only("CreateSecretStoreRequest.secret_store.update_time"),
    emulated("CreateSecretStoreRequest.request_id", "idempotency: a replay answers the first store"),
    emulated("GetSecretStoreRequest.name", "a store of the caller's organization"),
    emulated("ListSecretStoresRequest.page_size", "server-capped page size (default 50, at most 1000)"),
    emulated("ListSecretStoresRequest.page_token", "opaque page token"),
    emulated("UpdateSecretStoreRequest.secret_store", "the new settings"),
    emulated("UpdateSecretStoreRequest.secret_store.name", "selects the store; not changed"),
    emulated(
        "UpdateSecretStoreRequest.secret_store.provider_type",
        "SECRET_STORE_PROVIDER_TYPE_WANDB or unset: the provider cannot change",
    ),
    same_as(
        "UpdateSecretStoreRequest.secret_store.wandb",
        "CreateSecretStoreRequest.secret_store.wandb",
        "as CreateSecretStore",
    ),
    output_only("UpdateSecretStoreRequest.secret_store.create_time"),
    output_only("UpdateSecretStoreRequest.secret_store.update_time"),
    emulated(
        "UpdateSecretStoreRequest.update_mask",
        "wandb, wandb.api_url, wandb.team, provider_type (AIP-134; none: the fields the request sets)",
    ),
    emulated("DeleteSecretStoreRequest.name", "the store; sandboxes already made keep their secrets"),
    emulated("DeleteSecretStoreRequest.allow_missing", "NOT_FOUND becomes an empty answer"),
    // CreateSandboxFromTemplate, CreateSandboxFromFile
    emulated("CreateSandboxFromTemplateRequest.template_id", "a live template of the caller's organization"),
    same_as(
        "CreateSandboxFromTemplateRequest.overrides",
        "CreateSandboxRequest.sandbox.spec",
        "layered on the template's spec, each field replacing the template's when set",
    ),
    emulated(
        "CreateSandboxFromTemplateRequest.request_id",
        "idempotency: a replay with the same body answers the first sandbox",
    ),
    emulated("CreateSandboxFromTemplateRequest.display_name", "stored and returned"),
    emulated("CreateSandboxFromFileRequest.type", "SANDBOX_FILE_TYPE_COMPOSE"),
    emulated(
        "CreateSandboxFromFileRequest.contents",
        "a Compose file of at most 256 KiB: its services become the sandbox's containers, its keys mapped or refused by name",
    ),
    emulated("CreateSandboxFromFileRequest.primary_service", "the primary container; the other services are sidecars"),
    emulated("CreateSandboxFromFileRequest.image_overrides", "a service's image (and no build)"),
    refused("CreateSandboxFromFileRequest.build_contexts", "no image is built"),
    same_as(
        "CreateSandboxFromFileRequest.default_resources",
        "CreateSandboxRequest.sandbox.spec.containers.resource_requirements",
        "the requests and limits of the services without deploy.resources",
    ),
    emulated(
        "CreateSandboxFromFileRequest.mode",
        "CKS places on a runner; SERVERLESS on the values' serverless pool (no runner, no SUNK)",
    ),
    emulated("CreateSandboxFromFileRequest.max_lifetime_seconds", "the sandbox ends when its lifetime is over"),
    emulated("CreateSandboxFromFileRequest.tags", "stored, returned, filtered on"),
    same_as(
        "CreateSandboxFromFileRequest.network",
        "CreateSandboxRequest.sandbox.spec.network",
        "the sandbox's network options",
    ),
    refused("CreateSandboxFromFileRequest.network_ids", "there are no sandbox networks"),
    refused("CreateSandboxFromFileRequest.object_storage_access", "no object storage is reachable"),
    emulated("CreateSandboxFromFileRequest.annotations", "on the Pod; the SUNK annotations steer placement"),
    emulated("CreateSandboxFromFileRequest.runner_ids", "placement on the first ready runner named"),
    emulated(
        "CreateSandboxFromFileRequest.request_id",
        "idempotency: a replay with the same body (the file's bytes included) answers the first sandbox",
    ),
    emulated("CreateSandboxFromFileRequest.display_name", "stored and returned"),
    refused("CreateSandboxFromFileRequest.build_context_objects", "no image is built"),
    refused("CreateSandboxFromFileRequest.builder_sizes", "no image is built"),
    emulated(
        "CreateSandboxFromFileRequest.control",
        "PLATFORM (the default) runs the services as the sandbox's containers; CONTAINER_ENGINE is refused as when no runner can host it (FAILED_PRECONDITION, CWSANDBOX_NO_SUITABLE_RUNNER: a Docker engine cannot run inside a sandbox here)",
    ),
    same_as(
        "CreateSandboxFromFileRequest.image_pull_credentials",
        "CreateSandboxRequest.sandbox.spec.containers.image_pull_credentials",
        "each service's image from a listed registry is pulled with its credentials (as a Pod's image pull secrets); a registry no service uses is INVALID_ARGUMENT",
    ),
    // ConnectSandbox: the direct data plane (crate::direct)
    emulated(
        "ConnectSandboxRequest.sandbox_id",
        "a RUNNING sandbox of the caller's organization: the certificate acts on it alone",
    ),
    emulated(
        "ConnectSandboxRequest.csr_der",
        "its key is certified (the signature checked); the subject, names, usages and validity are the CA's",
    ),
    emulated(
        "ConnectSandboxRequest.requested_permissions",
        "each granted, and the only operations the certificate may perform on the direct endpoint",
    ),
    // Data operations (SandboxService and SandboxDataPlaneService)
    emulated("ExecRequest.sandbox_id", "the sandbox"),
    emulated("ExecRequest.command", "the command"),
    emulated("ExecRequest.env", "added to the command's environment"),
    emulated("ExecRequest.max_output_bytes", "output cap, with the truncation flags"),
    emulated(
        "ExecRequest.container",
        "must name a container of the sandbox: the command starts with that container's environment, working directory and user",
    ),
    emulated("ExecStreamRequest.init", "the command"),
    emulated("ExecStreamRequest.init.sandbox_id", "the sandbox"),
    emulated("ExecStreamRequest.init.command", "the command"),
    emulated("ExecStreamRequest.init.tty", "a pseudo-terminal"),
    emulated("ExecStreamRequest.init.tty_width", "the terminal's size"),
    emulated("ExecStreamRequest.init.tty_height", "the terminal's size"),
    emulated("ExecStreamRequest.init.env", "added to the command's environment"),
    emulated(
        "ExecStreamRequest.init.container",
        "must name a container of the sandbox: the command starts with that container's environment, working directory and user",
    ),
    emulated("ExecStreamRequest.stdin", "the command's stdin"),
    emulated("ExecStreamRequest.resize", "the terminal's new size"),
    emulated("ExecStreamRequest.resize.width", "the terminal's new size"),
    emulated("ExecStreamRequest.resize.height", "the terminal's new size"),
    emulated("ExecStreamRequest.close", "stdin EOF"),
    emulated("StreamLogsRequest.sandbox_id", "the sandbox"),
    emulated("StreamLogsRequest.follow", "follow until the sandbox ends"),
    emulated("StreamLogsRequest.tail_lines", "the last lines only"),
    emulated("StreamLogsRequest.since_time", "lines after a time"),
    emulated(
        "StreamLogsRequest.container",
        "must name a container of the sandbox: that container's output (empty: the primary's)",
    ),
    emulated("StreamLogsRequest.timestamps", "RFC 3339 prefixes"),
    emulated("StreamLogsRequest.resume_log_session_id", "resume a session"),
    emulated("StreamLogsRequest.resume_log_offset", "resume at an offset"),
    emulated("WriteFileRequest.sandbox_id", "the sandbox"),
    emulated("WriteFileRequest.path", "the file"),
    emulated("WriteFileRequest.content", "the bytes"),
    emulated(
        "WriteFileRequest.container",
        "must name a container of the sandbox; files are the sandbox's one file system",
    ),
    emulated("ReadFileRequest.sandbox_id", "the sandbox"),
    emulated("ReadFileRequest.path", "the file"),
    emulated(
        "ReadFileRequest.container",
        "must name a container of the sandbox; files are the sandbox's one file system",
    ),
    // DiscoveryService
    emulated("ListAvailableRunnersRequest.runner_group_id", "filter"),
    emulated("ListAvailableRunnersRequest.gpu_type", "filter (the nodes' gpu.nvidia.com/class)"),
    emulated("ListAvailableRunnersRequest.architecture", "filter (the host's architecture)"),
    emulated("ListAvailableRunnersRequest.healthy_only", "filter"),
    emulated("ListAvailableRunnersRequest.page_size", "page size"),
    emulated("ListAvailableRunnersRequest.page_token", "page token"),
    emulated(
        "ListAvailableRunnersRequest.view",
        "BASIC (the default here) leaves out resources, FULL answers them, as the published client expects",
    ),
    emulated("ListAvailableRunnersRequest.service_visibility", "filter"),
    emulated("GetAvailableRunnerRequest.runner_id", "the runner"),
    emulated(
        "GetAvailableRunnerRequest.view",
        "FULL (the default here) answers resources, BASIC leaves them out, as the published client expects",
    ),
    emulated("GetAvailableRunnerRequest.organization_id", "the organization (the caller's when empty)"),
    // RunnerManagementService
    emulated("CreateManagedRunnerRequest.request_id", "idempotency"),
    emulated("CreateManagedRunnerRequest.managed_runner", "the runner"),
    emulated("CreateManagedRunnerRequest.managed_runner.identity", "the runner's keys"),
    emulated("CreateManagedRunnerRequest.managed_runner.identity.runner_id", "the runner's id"),
    emulated("CreateManagedRunnerRequest.managed_runner.identity.runner_group_id", "its group"),
    emulated("CreateManagedRunnerRequest.managed_runner.identity.zone", "stored, filtered on"),
    emulated("CreateManagedRunnerRequest.managed_runner.identity.cluster_id", "stored, filtered on"),
    output_only("CreateManagedRunnerRequest.managed_runner.identity.cluster_name"),
    emulated("CreateManagedRunnerRequest.managed_runner.display_name", "stored and returned"),
    stored(
        "CreateManagedRunnerRequest.managed_runner.spec",
        "the runner's own deployment: validated, stored and returned; no runner Deployment is simulated",
    ),
    emulated_whole(
        "CreateManagedRunnerRequest.managed_runner.policy",
        "every field validated and applied to the runner's sandboxes by cwsandbox-policy",
    ),
    emulated("CreateManagedRunnerRequest.managed_runner.etag", "optimistic concurrency of policy changes"),
    output_only("CreateManagedRunnerRequest.managed_runner.install_status"),
    output_only("CreateManagedRunnerRequest.managed_runner.connection_status"),
    output_only("CreateManagedRunnerRequest.managed_runner.active_config_version"),
    output_only("CreateManagedRunnerRequest.managed_runner.active_revision"),
    output_only("CreateManagedRunnerRequest.managed_runner.target_revision"),
    output_only("CreateManagedRunnerRequest.managed_runner.update_available"),
    output_only("CreateManagedRunnerRequest.managed_runner.rollout_in_progress"),
    output_only("CreateManagedRunnerRequest.managed_runner.deployment_spec"),
    output_only("CreateManagedRunnerRequest.managed_runner.install_error"),
    output_only("CreateManagedRunnerRequest.managed_runner.data_plane_status"),
    output_only("CreateManagedRunnerRequest.managed_runner.create_time"),
    output_only("CreateManagedRunnerRequest.managed_runner.update_time"),
    output_only("CreateManagedRunnerRequest.managed_runner.last_heartbeat_time"),
    emulated("UpdateManagedRunnerRequest.runner_id", "the runner"),
    emulated("UpdateManagedRunnerRequest.update_mask", "the fields to change (AIP-134)"),
    emulated("UpdateManagedRunnerRequest.managed_runner", "the runner"),
    emulated("UpdateManagedRunnerRequest.managed_runner.identity", "the runner's keys"),
    emulated("UpdateManagedRunnerRequest.managed_runner.identity.runner_id", "the runner's id"),
    emulated("UpdateManagedRunnerRequest.managed_runner.identity.runner_group_id", "its group"),
    emulated("UpdateManagedRunnerRequest.managed_runner.identity.zone", "stored, filtered on"),
    emulated("UpdateManagedRunnerRequest.managed_runner.identity.cluster_id", "stored, filtered on"),
    output_only("UpdateManagedRunnerRequest.managed_runner.identity.cluster_name"),
    emulated("UpdateManagedRunnerRequest.managed_runner.display_name", "stored and returned"),
    stored(
        "UpdateManagedRunnerRequest.managed_runner.spec",
        "the runner's own deployment: validated, stored and returned; no runner Deployment is simulated",
    ),
    emulated_whole(
        "UpdateManagedRunnerRequest.managed_runner.policy",
        "every field validated and applied to the runner's sandboxes by cwsandbox-policy",
    ),
    emulated("UpdateManagedRunnerRequest.managed_runner.etag", "optimistic concurrency of policy changes"),
    output_only("UpdateManagedRunnerRequest.managed_runner.install_status"),
    output_only("UpdateManagedRunnerRequest.managed_runner.connection_status"),
    output_only("UpdateManagedRunnerRequest.managed_runner.active_config_version"),
    output_only("UpdateManagedRunnerRequest.managed_runner.active_revision"),
    output_only("UpdateManagedRunnerRequest.managed_runner.target_revision"),
    output_only("UpdateManagedRunnerRequest.managed_runner.update_available"),
    output_only("UpdateManagedRunnerRequest.managed_runner.rollout_in_progress"),
    output_only("UpdateManagedRunnerRequest.managed_runner.deployment_spec"),
    output_only("UpdateManagedRunnerRequest.managed_runner.install_error"),
    output_only("UpdateManagedRunnerRequest.managed_runner.data_plane_status"),
    output_only("UpdateManagedRunnerRequest.managed_runner.create_time"),
    output_only("UpdateManagedRunnerRequest.managed_runner.update_time"),
    output_only("UpdateManagedRunnerRequest.managed_runner.last_heartbeat_time"),
    emulated("GetManagedRunnerRequest.runner_id", "the runner"),
    emulated("ListManagedRunnersRequest.page_size", "page size"),
    emulated("ListManagedRunnersRequest.page_token", "page token"),
    emulated("ListManagedRunnersRequest.cluster_id", "filter"),
    emulated("ListManagedRunnersRequest.zone", "filter"),
    emulated("DeleteManagedRunnerRequest.runner_id", "the runner"),
    emulated("DeleteManagedRunnerRequest.allow_missing", "NOT_FOUND becomes an empty answer"),
    emulated("ApplyAvailableUpdateRequest.runner_id", "the runner"), // SandboxTemplateService
    emulated(
        "CreateSandboxTemplateRequest.request_id",
        "idempotency: a replay with the same template answers the first one",
    ),
    emulated("CreateSandboxTemplateRequest.sandbox_template", "the template"),
    output_only("CreateSandboxTemplateRequest.sandbox_template.sandbox_template_id"),
    emulated("CreateSandboxTemplateRequest.sandbox_template.display_name", "required; stored and returned"),
    same_as(
        "CreateSandboxTemplateRequest.sandbox_template.spec",
        "CreateSandboxRequest.sandbox.spec",
        "checked as CreateSandbox's spec is, except that the containers may be left to the overrides",
    ),
    output_only("CreateSandboxTemplateRequest.sandbox_template.revision"),
    output_only("CreateSandboxTemplateRequest.sandbox_template.create_time"),
    output_only("CreateSandboxTemplateRequest.sandbox_template.update_time"),
    output_only("CreateSandboxTemplateRequest.sandbox_template.delete_time"),
    output_only("CreateSandboxTemplateRequest.sandbox_template.create_user_id"),
    output_only("CreateSandboxTemplateRequest.sandbox_template.deleted"),
    refused(
        "CreateSandboxTemplateRequest.sandbox_template.attachments",
        "no pod-template fragment is applied to the sandboxes made from a template",
    ),
    output_only("CreateSandboxTemplateRequest.sandbox_template.requires_cks"),
    emulated("UpdateSandboxTemplateRequest.sandbox_template_id", "the template"),
    emulated("UpdateSandboxTemplateRequest.sandbox_template", "the template"),
    output_only("UpdateSandboxTemplateRequest.sandbox_template.sandbox_template_id"),
    emulated("UpdateSandboxTemplateRequest.sandbox_template.display_name", "required; stored and returned"),
    same_as(
        "UpdateSandboxTemplateRequest.sandbox_template.spec",
        "CreateSandboxRequest.sandbox.spec",
        "checked as CreateSandbox's spec is, except that the containers may be left to the overrides",
    ),
    output_only("UpdateSandboxTemplateRequest.sandbox_template.revision"),
    output_only("UpdateSandboxTemplateRequest.sandbox_template.create_time"),
    output_only("UpdateSandboxTemplateRequest.sandbox_template.update_time"),
    output_only("UpdateSandboxTemplateRequest.sandbox_template.delete_time"),
    output_only("UpdateSandboxTemplateRequest.sandbox_template.create_user_id"),
    output_only("UpdateSandboxTemplateRequest.sandbox_template.deleted"),
    refused(
        "UpdateSandboxTemplateRequest.sandbox_template.attachments",
        "no pod-template fragment is applied to the sandboxes made from a template",
    ),
    output_only("UpdateSandboxTemplateRequest.sandbox_template.requires_cks"),
    emulated(
        "UpdateSandboxTemplateRequest.update_mask",
        "display_name, spec or spec.<field>; empty: the fields the patch sets (AIP-134)",
    ),
    emulated("GetSandboxTemplateRequest.sandbox_template_id", "the template"),
    emulated("GetSandboxTemplateRequest.show_deleted", "a deleted template too (admins only)"),
    emulated("ListSandboxTemplatesRequest.page_size", "server-capped page size"),
    emulated("ListSandboxTemplatesRequest.page_token", "opaque page token"),
    emulated("ListSandboxTemplatesRequest.show_deleted", "deleted templates too (admins only)"),
    emulated("DeleteSandboxTemplateRequest.sandbox_template_id", "the template"),
    // VolumeService
    emulated("CreateVolumeRequest.volume", "the volume to register"),
    emulated("CreateVolumeRequest.volume.volume_id", "chosen by the caller: a DNS label, unique in the organization"),
    emulated("CreateVolumeRequest.volume.spec", "what the volume is"),
    emulated(
        "CreateVolumeRequest.volume.spec.pvc",
        "a claim of the values' persistentVolumeClaims in the runner's cluster, the organization's own (its data is never another organization's or cluster's), checked after the create (VALIDATING, then READY or ERROR)",
    ),
    emulated(
        "CreateVolumeRequest.volume.spec.pvc.runner_id",
        "a runner of the organization: its cluster has the claim, its sandboxes run there",
    ),
    emulated("CreateVolumeRequest.volume.spec.pvc.namespace", "the claim's namespace"),
    emulated("CreateVolumeRequest.volume.spec.pvc.claim_name", "the claim's name"),
    refused(
        "CreateVolumeRequest.volume.spec.pvc.sub_path",
        "a volume is its claim's root: other sandboxes write to the claim, so a sub-path could be swapped for a link while it is mounted",
    ),
    emulated("CreateVolumeRequest.volume.spec.read_only", "every mount of the volume is read-only"),
    emulated("CreateVolumeRequest.volume.spec.description", "stored and returned"),
    output_only("CreateVolumeRequest.volume.status"),
    emulated("CreateVolumeRequest.request_id", "idempotency: a retry answers the first volume"),
    emulated("GetVolumeRequest.volume_id", "a volume of the caller's organization"),
    emulated("ListVolumesRequest.page_size", "server-capped page size"),
    emulated("ListVolumesRequest.page_token", "opaque page token"),
    emulated("ListVolumesRequest.states", "filter"),
    emulated("ListVolumesRequest.runner_ids", "filter"),
    emulated("UpdateVolumeRequest.volume_id", "the volume"),
    emulated("UpdateVolumeRequest.volume", "the new values of the masked fields"),
    output_only("UpdateVolumeRequest.volume.volume_id"),
    emulated("UpdateVolumeRequest.volume.spec", "read_only and description change"),
    emulated(
        "UpdateVolumeRequest.volume.spec.pvc",
        "the claim cannot change: one other than the volume's is INVALID_ARGUMENT",
    ),
    emulated("UpdateVolumeRequest.volume.spec.pvc.runner_id", "must be the volume's"),
    emulated("UpdateVolumeRequest.volume.spec.pvc.namespace", "must be the volume's"),
    emulated("UpdateVolumeRequest.volume.spec.pvc.claim_name", "must be the volume's"),
    emulated("UpdateVolumeRequest.volume.spec.pvc.sub_path", "must be the volume's"),
    emulated("UpdateVolumeRequest.volume.spec.read_only", "every mount from now on is read-only"),
    emulated("UpdateVolumeRequest.volume.spec.description", "stored and returned"),
    output_only("UpdateVolumeRequest.volume.status"),
    emulated("UpdateVolumeRequest.update_mask", "spec.read_only, spec.description; empty: both"),
    emulated("DeleteVolumeRequest.volume_id", "the volume (its claim's data stays)"),
    emulated("DeleteVolumeRequest.allow_missing", "NOT_FOUND becomes an empty answer"),
    emulated("DeleteVolumeRequest.force", "delete even while sandboxes that have not ended mount it"),
    emulated("ValidateVolumeRequest.volume_id", "the claim is checked again"),
];

/// Whether the table covers the requests of `service`: every public service the server answers
/// for (the emulator's own `EmulatorService` is emulated by definition and not covered).
pub fn covers(service: &str) -> bool {
    crate::catalogue::SERVED_SERVICES.contains(&service) && !service.starts_with("coreweave.sandbox.emulator.")
}

/// A request message the check can look into: its name is the first part of its rows' paths.
pub trait Request: Message {
    /// The message's name (`CreateSandboxRequest`).
    const NAME: &'static str;
}

macro_rules! requests {
    ($($message:ident),* $(,)?) => {
        $(impl Request for pb::$message {
            const NAME: &'static str = stringify!($message);
        })*
    };
}

requests!(
    CreateSandboxRequest,
    DeleteSandboxRequest,
    CreateSandboxFromTemplateRequest,
    CreateSandboxFromFileRequest,
    CreateSandboxTemplateRequest,
    UpdateSandboxTemplateRequest,
    CreateVolumeRequest,
);

/// The package of the well-known types (Timestamp, FieldMask): values, not walked into.
const WELL_KNOWN: &str = ".google.protobuf.";

/// The table by path, with the paths that lead to a refused field (so the check walks only
/// those).
struct Table {
    rules: HashMap<&'static str, &'static FieldRule>,
    leads_to_refused: HashSet<String>,
}

impl Table {
    fn get() -> &'static Table {
        static TABLE: OnceLock<Table> = OnceLock::new();
        TABLE.get_or_init(|| {
            let rules = FIELDS.iter().map(|rule| (rule.path, rule)).collect();
            let mut leads_to_refused = HashSet::new();
            for rule in FIELDS.iter().filter(|rule| rule.handling == Handling::Refused) {
                let mut prefix = rule.path;
                while let Some((parent, _)) = prefix.rsplit_once('.') {
                    leads_to_refused.insert(parent.to_owned());
                    prefix = parent;
                }
            }
            // A row that follows another leads where that one does.
            for rule in FIELDS {
                if let Handling::SameAs(target) = rule.handling
                    && leads_to_refused.contains(target)
                {
                    let mut prefix = rule.path;
                    leads_to_refused.insert(prefix.to_owned());
                    while let Some((parent, _)) = prefix.rsplit_once('.') {
                        leads_to_refused.insert(parent.to_owned());
                        prefix = parent;
                    }
                }
            }
            Table { rules, leads_to_refused }
        })
    }
}

/// A refused field a request sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unemulated {
    /// Its path in the request, with indexes (`sandbox.spec.containers[0].secret_stores`).
    pub field: String,
    /// Why it is refused.
    pub note: &'static str,
}

/// The refused fields `request` sets, in the order they appear.
pub fn unemulated<R: Request>(request: &R) -> Vec<Unemulated> {
    let table = Table::get();
    if !table.leads_to_refused.contains(R::NAME) {
        return Vec::new();
    }
    let descriptors = Catalogue::get();
    let message = format!(".coreweave.sandbox.v1.{}", R::NAME);
    let bytes = request.encode_to_vec();
    let mut found = Vec::new();
    walk(descriptors, table, &message, R::NAME, "", &bytes, &mut found);
    found
}

/// Walks one encoded message (`bytes`, of type `message`, at `pattern` in the table and `shown`
/// in the request), adding the refused fields it sets to `found`. Malformed bytes end the walk:
/// they came from prost's own encoder.
fn walk(
    descriptors: &Catalogue,
    table: &Table,
    message: &str,
    pattern: &str,
    shown: &str,
    mut bytes: &[u8],
    found: &mut Vec<Unemulated>,
) {
    let Some(fields) = descriptors.message(message).map(|message| &message.fields) else { return };
    let mut occurrences: HashMap<u32, usize> = HashMap::new();
    while !bytes.is_empty() {
        let Ok((number, wire_type)) = decode_key(&mut bytes) else { return };
        let (value, nonzero): (&[u8], bool) = match wire_type {
            WireType::Varint => {
                let Ok(varint) = decode_varint(&mut bytes) else { return };
                (&[], varint != 0)
            }
            WireType::SixtyFourBit | WireType::ThirtyTwoBit => {
                let width = if wire_type == WireType::SixtyFourBit { 8 } else { 4 };
                if bytes.len() < width {
                    return;
                }
                let (fixed, rest) = bytes.split_at(width);
                bytes = rest;
                (&[], fixed.iter().any(|byte| *byte != 0))
            }
            WireType::LengthDelimited => {
                let Ok(length) = decode_varint(&mut bytes) else { return };
                let Ok(length) = usize::try_from(length) else { return };
                if bytes.len() < length {
                    return;
                }
                let (value, rest) = bytes.split_at(length);
                bytes = rest;
                (value, length > 0)
            }
            WireType::StartGroup | WireType::EndGroup => return,
        };
        let Some(field) = fields.get(&number) else { continue };
        let index = occurrences.entry(number).or_default();
        let position = *index;
        *index += 1;
        let path = format!("{pattern}.{}", field.name);
        let Some(rule) = table.rules.get(path.as_str()) else { continue };
        let shown_field = if shown.is_empty() { field.name.clone() } else { format!("{shown}.{}", field.name) };
        match rule.handling {
            Handling::Refused => {
                if (field.repeated || nonzero) && !found.iter().any(|seen| seen.field == shown_field) {
                    found.push(Unemulated { field: shown_field, note: rule.note });
                }
            }
            Handling::Emulated => {
                if let Some(child) = field.message_type()
                    && !child.starts_with(WELL_KNOWN)
                    && table.leads_to_refused.contains(&path)
                {
                    let shown_child = if field.repeated { format!("{shown_field}[{position}]") } else { shown_field };
                    walk(descriptors, table, child, &path, &shown_child, value, found);
                }
            }
            Handling::SameAs(target) => {
                if let Some(child) = field.message_type()
                    && table.leads_to_refused.contains(target)
                {
                    let shown_child = if field.repeated { format!("{shown_field}[{position}]") } else { shown_field };
                    walk(descriptors, table, child, target, &shown_child, value, found);
                }
            }
            Handling::EmulatedWhole | Handling::Stored | Handling::OutputOnly => {}
        }
    }
}

/// Refuses `request` if it sets a refused field (strict), or logs the fields and accepts it
/// (loose). `method` names the RPC in the log and the error's metadata.
pub fn check<R: Request>(strictness: Strictness, method: &str, request: &R) -> Result<(), ApiError> {
    let found = unemulated(request);
    if found.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = found.iter().map(|field| field.field.as_str()).collect();
    match strictness {
        Strictness::Loose => {
            tracing::warn!(method, fields = ?names, "accepted request fields the emulator does not emulate (strictness: loose)");
            Ok(())
        }
        Strictness::Strict => Err(ApiError::fields_not_implemented(
            method,
            found.iter().map(|field| (field.field.clone(), field.note.to_owned())).collect(),
        )),
    }
}

/// The README's tables of refused fields and RPCs and of stored-only settings, in markdown,
/// between the markers the README test looks for.
pub fn fidelity_table() -> String {
    let mut table = String::from(
        "<!-- Generated from FIELDS and REFUSED_METHODS in crates/surface/src/fidelity.rs; regenerate with \
         `CWSANDBOX_REGENERATE_DOCS=1 cargo test -p cwsandbox-surface --lib fidelity`. -->\n\n\
         Refused with UNIMPLEMENTED, reason `CWSANDBOX_NOT_IMPLEMENTED`, one BadRequest violation per field \
         (its path in the request, `sandbox.spec.containers[0].security_context.read_only_root_filesystem`), when set to \
         other than its default; `strictness: loose` accepts them and logs a warning instead:\n\n\
         | request field or RPC | why |\n|---|---|\n",
    );
    for rule in FIELDS.iter().filter(|rule| rule.handling == Handling::Refused) {
        table.push_str(&format!("| `{}` | {} |\n", rule.path, rule.note));
    }
    for (method, note) in REFUSED_METHODS {
        table.push_str(&format!("| `{method}` (every request) | {note} |\n"));
    }
    table.push_str(
        "\nThese messages carry another's fields, each refused (or not) as that one's are and named by its own \
         path:\n\n| request field | follows | how |\n|---|---|---|\n",
    );
    for rule in FIELDS {
        if let Handling::SameAs(target) = rule.handling {
            table.push_str(&format!("| `{}` | `{target}` | {} |\n", rule.path, rule.note));
        }
    }
    table.push_str(
        "\nAccepted, validated, stored and returned, with no further effect:\n\n| request field | why |\n|---|---|\n",
    );
    for rule in FIELDS.iter().filter(|rule| rule.handling == Handling::Stored) {
        table.push_str(&format!("| `{}` | {} |\n", rule.path, rule.note));
    }
    table
}

/// The markers around the generated part of the README's fidelity section.
pub const README_MARKERS: (&str, &str) = ("<!-- fidelity-table:start -->\n", "<!-- fidelity-table:end -->");

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field path of the requests of the served RPCs, as the table spells them, walking into
    /// the message fields the table says are emulated; the paths with no row come back too.
    fn walk_requests() -> (Vec<String>, Vec<String>) {
        let descriptors = Catalogue::get();
        let table = Table::get();
        let mut seen = Vec::new();
        let mut missing = Vec::new();
        fn visit(
            descriptors: &Catalogue,
            table: &Table,
            message: &str,
            pattern: &str,
            depth: usize,
            seen: &mut Vec<String>,
            missing: &mut Vec<String>,
        ) {
            assert!(depth < 32, "{pattern}: the request types nest too deep (a recursive type?)");
            let mut fields: Vec<_> =
                descriptors.message(message).expect("a message type of the API").fields.iter().collect();
            fields.sort_by_key(|(number, _)| **number);
            for (_, field) in fields {
                let path = format!("{pattern}.{}", field.name);
                seen.push(path.clone());
                match table.rules.get(path.as_str()) {
                    None => missing.push(path),
                    Some(rule) => match (rule.handling, field.message_type()) {
                        (Handling::Emulated, Some(child)) if !child.starts_with(WELL_KNOWN) => {
                            visit(descriptors, table, child, &path, depth + 1, seen, missing);
                        }
                        // The message's fields must each have a row under the path it follows.
                        (Handling::SameAs(target), Some(child)) => {
                            visit(descriptors, table, child, target, depth + 1, seen, missing);
                        }
                        (Handling::SameAs(target), None) => {
                            panic!("{path} follows {target}, but is not a message field")
                        }
                        _ => {}
                    },
                }
            }
        }
        let refused_methods: HashSet<&str> = REFUSED_METHODS.iter().map(|(method, _)| *method).collect();
        let mut inputs = HashSet::new();
        for method in descriptors.methods() {
            if !covers(&format!("{}.{}", method.package, method.service))
                || refused_methods.contains(format!("{}.{}", method.service, method.name).as_str())
            {
                continue;
            }
            if inputs.insert(method.input.clone()) {
                let name = method.input.rsplit('.').next().unwrap_or_default();
                visit(descriptors, table, &method.input, name, 0, &mut seen, &mut missing);
            }
        }
        (seen, missing)
    }

    #[test]
    fn every_row_names_a_field_of_a_served_request() {
        let (seen, _) = walk_requests();
        let seen: HashSet<&str> = seen.iter().map(String::as_str).collect();
        let stale: Vec<&str> = FIELDS.iter().map(|rule| rule.path).filter(|path| !seen.contains(path)).collect();
        assert!(stale.is_empty(), "rows of FIELDS that name no field of a served request:\n{}", stale.join("\n"));
        let mut paths = HashSet::new();
        let twice: Vec<&str> = FIELDS.iter().map(|rule| rule.path).filter(|path| !paths.insert(*path)).collect();
        assert!(twice.is_empty(), "rows listed twice: {twice:?}");
        let methods: HashSet<String> = Catalogue::get()
            .methods()
            .filter(|method| covers(&format!("{}.{}", method.package, method.service)))
            .map(|method| format!("{}.{}", method.service, method.name))
            .collect();
        for (method, _) in REFUSED_METHODS {
            assert!(methods.contains(*method), "REFUSED_METHODS names {method}, which no served service has");
        }
    }

    fn create(spec: pb::SandboxSpec) -> pb::CreateSandboxRequest {
        pb::CreateSandboxRequest {
            sandbox: Some(pb::Sandbox { spec: Some(spec), ..Default::default() }),
            request_id: "r".to_owned(),
        }
    }

    fn main_container() -> pb::Container {
        pb::Container { name: "main".to_owned(), image: "python:3.11".to_owned(), ..Default::default() }
    }

    fn fields(found: Vec<Unemulated>) -> Vec<String> {
        found.into_iter().map(|found| found.field).collect()
    }

    #[test]
    fn the_check_names_each_refused_field_a_request_sets_by_its_path() {
        let plain = create(pb::SandboxSpec { containers: vec![main_container()], ..Default::default() });
        assert_eq!(fields(unemulated(&plain)), Vec::<String>::new());

        let mut container = main_container();
        container.security_context =
            Some(pb::SecurityContext { read_only_root_filesystem: Some(true), ..Default::default() });
        let sized = pb::ScratchVolume { size: "1Gi".to_owned(), ..Default::default() };
        let side = pb::Container {
            name: "side".to_owned(),
            startup_probe: Some(pb::Probe { period_seconds: 5, ..Default::default() }),
            ..main_container()
        };
        let spec = pb::SandboxSpec {
            containers: vec![container, side],
            volumes: vec![
                pb::SandboxVolume {
                    name: "plain".to_owned(),
                    source: Some(pb::sandbox_volume::Source::Scratch(Default::default())),
                },
                pb::SandboxVolume {
                    name: "sized".to_owned(),
                    source: Some(pb::sandbox_volume::Source::Scratch(sized)),
                },
            ],
            network_config_id: "net".to_owned(),
            ..Default::default()
        };
        assert_eq!(
            fields(unemulated(&create(spec))),
            [
                "sandbox.spec.containers[0].security_context.read_only_root_filesystem",
                "sandbox.spec.containers[1].startup_probe",
                "sandbox.spec.network_config_id",
            ]
        );
    }

    #[test]
    fn fields_at_their_default_pass_as_the_published_client_sends_them() {
        let mut container = main_container();
        container.security_context = Some(pb::SecurityContext {
            privileged: Some(false),
            read_only_root_filesystem: Some(false),
            ..Default::default()
        });
        let spec = pb::SandboxSpec {
            containers: vec![container],
            network: Some(pb::NetworkOptions {
                deny_egress: Some(false),
                deny_ingress: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(fields(unemulated(&create(spec))), Vec::<String>::new());
    }

    #[test]
    fn every_container_is_checked_and_a_sidecars_refused_field_is_named_by_its_index() {
        let plain_sidecar = pb::Container { name: "side".to_owned(), ..main_container() };
        let two =
            create(pb::SandboxSpec { containers: vec![main_container(), plain_sidecar.clone()], ..Default::default() });
        assert!(unemulated(&two).is_empty(), "a second container is emulated");
        let read_only = pb::SecurityContext { read_only_root_filesystem: Some(true), ..Default::default() };
        let refused_sidecar = pb::Container { security_context: Some(read_only), ..plain_sidecar };
        let with_refused =
            create(pb::SandboxSpec { containers: vec![main_container(), refused_sidecar], ..Default::default() });
        assert_eq!(
            fields(unemulated(&with_refused)),
            ["sandbox.spec.containers[1].security_context.read_only_root_filesystem"]
        );
    }

    #[test]
    fn a_message_that_follows_the_spec_rows_is_refused_by_its_own_paths() {
        let privileged = pb::SecurityContext { privileged: Some(true), ..Default::default() };
        let partial = pb::PartialSandboxSpec {
            containers: vec![pb::PartialContainer {
                name: "main".to_owned(),
                security_context: Some(privileged),
                ..Default::default()
            }],
            network_ids: vec!["net".to_owned()],
            tags: vec!["emulated".to_owned()],
            ..Default::default()
        };
        let from_template = pb::CreateSandboxFromTemplateRequest {
            template_id: "t".to_owned(),
            overrides: Some(partial.clone()),
            ..Default::default()
        };
        assert_eq!(
            fields(unemulated(&from_template)),
            ["overrides.containers[0].security_context.privileged", "overrides.network_ids"]
        );
        let template = pb::CreateSandboxTemplateRequest {
            sandbox_template: Some(pb::SandboxTemplate {
                display_name: "t".to_owned(),
                spec: Some(pb::PartialSandboxSpec { network_ids: Vec::new(), ..partial }),
                attachments: Some(Default::default()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            fields(unemulated(&template)),
            ["sandbox_template.spec.containers[0].security_context.privileged"],
            "an empty attachments message asks for nothing"
        );
        let from_file = pb::CreateSandboxFromFileRequest {
            network_ids: vec!["net".to_owned()],
            builder_sizes: [("web".to_owned(), "large".to_owned())].into(),
            ..Default::default()
        };
        assert_eq!(fields(unemulated(&from_file)), ["network_ids", "builder_sizes"]);
    }

    #[test]
    fn strict_refuses_with_the_fields_named_and_loose_lets_the_request_through() {
        let request = create(pb::SandboxSpec {
            containers: vec![main_container()],
            network_ids: vec!["net".to_owned()],
            ..Default::default()
        });
        let error = check(Strictness::Strict, "CreateSandbox", &request).unwrap_err();
        assert_eq!((error.code, error.reason), (tonic::Code::Unimplemented, cwsandbox_sim::Reason::NotImplemented));
        assert_eq!(
            error.violations.iter().map(|(field, _)| field.as_str()).collect::<Vec<_>>(),
            ["sandbox.spec.network_ids"]
        );
        assert!(error.message.contains("sandbox.spec.network_ids"), "{}", error.message);
        assert!(check(Strictness::Loose, "CreateSandbox", &request).is_ok());
        assert!(check(Strictness::Strict, "DeleteSandbox", &pb::DeleteSandboxRequest::default()).is_ok());
    }

    /// Keeps the README's fidelity section what the table generates.
    #[test]
    fn readme_lists_every_refused_field() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
        let readme = std::fs::read_to_string(&path).unwrap();
        let (start, end) = README_MARKERS;
        let (Some(from), Some(to)) = (readme.find(start), readme.find(end)) else {
            panic!("README.md lacks the markers {start:?} … {end:?} around the fidelity table");
        };
        let current = &readme[from + start.len()..to];
        let generated = fidelity_table();
        if std::env::var_os("CWSANDBOX_REGENERATE_DOCS").is_some() {
            let updated = format!("{}{generated}{}", &readme[..from + start.len()], &readme[to..]);
            std::fs::write(&path, updated).unwrap();
            return;
        }
        assert!(
            current == generated,
            "README.md's fidelity table is not what crates/surface/src/fidelity.rs generates; regenerate it with \
             `CWSANDBOX_REGENERATE_DOCS=1 cargo test -p cwsandbox-surface --lib fidelity`"
        );
    }

    #[test]
    fn every_request_field_is_emulated_or_refused() {
        let (_, missing) = walk_requests();
        assert!(
            missing.is_empty(),
            "request fields on neither the emulated nor the refused list of crates/surface/src/fidelity.rs: \
             decide for each, and add a row to FIELDS:\n{}",
            missing.join("\n")
        );
    }
}
